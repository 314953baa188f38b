"""``python -m svbnn._engine.native``: build svbnn's native loops into the installed package.

Run at install (``make install``); prints the library's path, or why it was not built (the
library then compiles them per process, or uses torch's kernels without a compiler).
"""

from __future__ import annotations

import subprocess
import sys

from . import build_into_package


def main() -> int:
    try:
        path = build_into_package()
    except (OSError, subprocess.SubprocessError) as err:
        detail = (getattr(err, "stderr", "") or str(err)).strip().splitlines()[-1:]
        print(f"svbnn: native loops not built ({' '.join(detail) or err})", file=sys.stderr)
        return 1
    print(f"svbnn: native loops built into {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
