"""A process's first fit: its time, and what importing PyTorch's compiler would add to it.

Run ``python -m benchmarks.first_fit [--sizes 300 2250 3000] [--repeats 5] [--inputs 40]
[--kinds regressor classifier] [--max-iter auto]``.

Each fit runs in a fresh Python process with one torch thread, the way a script or a
benchmark harness that starts a process per table meets it: the process imports svbnn,
makes the table (:func:`benchmarks.refit_band.table`: ``make_friedman1`` for the
regressor, binary ``make_classification`` with 10 noise columns for the classifier, the
inputs scaled), then times ``fit`` with the defaults (``random_state`` = the repeat), and
then a second fit of the same estimator in the same process. Two arms, alternating (A B A
B ...) so machine noise hits both alike:

* ``first fit``: nothing else; the fit itself must not import ``torch._dynamo``
  (``svbnn._adam.Adam``), and the process reports whether it was imported;
* ``+ compiler``: the process imports ``torch._dynamo`` just before the fit, inside the
  timed span: what any ``torch.optim`` optimiser's first call costs a process (the
  training loop's cost on its first fit before its Adam left ``torch.optim``).

Printed per size and estimator: each arm's median first-fit time, the median per-repeat
ratio (``first fit`` / ``+ compiler``), the median second-fit time (a process's later
fits) and whether any ``first fit`` process imported the compiler.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import textwrap

CHILD = textwrap.dedent(
    """
    import json, sys, time, warnings
    import torch
    torch.set_num_threads(1)
    from benchmarks.refit_band import table
    from svbnn import SVBNNClassifier, SVBNNRegressor
    kind, compiler = sys.argv[1], sys.argv[5] == "1"
    n, p, seed = (int(a) for a in sys.argv[2:5])
    max_iter = sys.argv[6] if sys.argv[6] == "auto" else int(sys.argv[6])
    X, y, _, _ = table(n, p, seed, classes=2 if kind == "classifier" else 0)
    cls = SVBNNClassifier if kind == "classifier" else SVBNNRegressor
    times = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(2):
            est = cls(random_state=seed, max_iter=max_iter)
            t = time.perf_counter()
            if compiler and i == 0:
                import torch._dynamo
            est.fit(X, y)
            times.append(time.perf_counter() - t)
            if i == 0:
                imported = "torch._dynamo" in sys.modules
    print(json.dumps({"first": times[0], "second": times[1], "compiler_imported": imported}))
    """
)

ARMS = {"first fit": False, "+ compiler": True}


def one(
    kind: str, n: int, p: int, seed: int, compiler: bool, max_iter: str = "auto"
) -> dict[str, float]:
    """One fresh process's first and second fit times (and whether the first fit
    imported the compiler)."""
    args = [kind, str(n), str(p), str(seed), "1" if compiler else "0", max_iter]
    out = subprocess.run(
        [sys.executable, "-c", CHILD, *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[300, 2250, 3000])
    ap.add_argument("--inputs", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--max-iter", default="auto", help="the estimators' max_iter (tests)")
    ap.add_argument(
        "--kinds",
        nargs="+",
        choices=["regressor", "classifier"],
        default=["regressor", "classifier"],
    )
    args = ap.parse_args(argv)
    if args.repeats < 1:
        ap.error("--repeats must be at least 1")
    if args.max_iter != "auto" and not (args.max_iter.isdigit() and int(args.max_iter) > 0):
        ap.error("--max-iter must be 'auto' or a positive integer")
    if args.inputs < 22:
        ap.error("--inputs must be at least 22 (the classifier's table has 22 fixed columns)")
    head = ["estimator", "rows", "first fit s", "+ compiler s", "ratio", "second fit s"]
    print("| " + " | ".join([*head, "compiler imported"]) + " |")
    print("|---|---|---|---|---|---|---|")
    for kind in args.kinds:
        for n in args.sizes:
            runs: dict[str, list[dict[str, float]]] = {arm: [] for arm in ARMS}
            for seed in range(args.repeats):
                for arm, compiler in ARMS.items():
                    runs[arm].append(one(kind, n, args.inputs, seed, compiler, args.max_iter))
            first = [r["first"] for r in runs["first fit"]]
            with_compiler = [r["first"] for r in runs["+ compiler"]]
            ratio = statistics.median(a / b for a, b in zip(first, with_compiler, strict=True))
            second = statistics.median(r["second"] for rs in runs.values() for r in rs)
            imported = any(r["compiler_imported"] for r in runs["first fit"])
            print(
                f"| {kind} | {n} | {statistics.median(first):.2f} | "
                f"{statistics.median(with_compiler):.2f} | {ratio:.2f} | {second:.2f} | "
                f"{'yes' if imported else 'no'} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
