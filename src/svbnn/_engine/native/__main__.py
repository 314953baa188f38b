"""``python -m svbnn._engine.native``: build svbnn's native loops into the installed package.

Run at install (``make install``) with the installed torch (``torch.utils.cpp_extension``,
ninja and ``$CXX``); prints the library's path, or why it was not built (the library then
builds them per process, or uses torch's kernels without a compiler or ninja).
"""

from __future__ import annotations

import subprocess
import sys

from . import build_into_package


def main() -> int:
    try:
        path = build_into_package()
    except (OSError, RuntimeError, ImportError, subprocess.SubprocessError) as err:
        # A failed build's message is the compiler's output: its end says why.
        detail = (getattr(err, "stderr", "") or str(err)).strip().splitlines()[-30:]
        print("svbnn: native loops not built:", *(detail or [repr(err)]), sep="\n", file=sys.stderr)
        return 1
    print(f"svbnn: native loops built into {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
