"""``python -m benchmarks [--quick] [--only NAME ...] [--out DIR]``: run the benchmarks in
order and write ``<out>/<name>.json`` and ``<out>/<name>.md`` for each.

``gpu`` (``benchmarks/gpu.py``) runs only when named (``--only gpu``): it needs a CUDA
device; without one it prints one line and exits 0.

Later benchmarks reuse what earlier ones produced in the same invocation (the project's
digits run of ``orchestration`` gives ``baselines`` its CV winner and ``compression`` its
model); run alone, each produces what it needs itself. A benchmark that raises is recorded
as ``failed`` with the error and the others still run; the exit code is 1 then.

``search_quality`` takes ``--problems``, ``--workers``, ``--async-seeds``, ``--methods``
and ``--time-limit`` (a bad entry: one line naming the flag, exit code 2; ``transfer``
takes them too, with ``--seeds`` and ``--n-src``); a run that
includes it re-executes itself with ``PYTHONHASHSEED=0`` (SMAC3 repeats across processes
only then).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
import traceback
from pathlib import Path

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("WANDB_MODE", "offline")

from benchmarks._common import RESULTS, Result, machine, write  # noqa: E402

ORDER = ("orchestration", "search_quality", "baselines", "scaling", "compression", "chaos",
         "mnist1d", "eta", "job", "latency_stability", "multi_objective",
         "multi_objective_digits", "study_ask", "regression", "node_loss", "transfer",
         "streaming")
ON_REQUEST = ("gpu",)  # needs a GPU: run only when named with --only


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help="tiny trial counts and 2 seeds: each benchmark in under a minute")
    ap.add_argument("--only", nargs="+", choices=ORDER + ON_REQUEST, metavar="NAME",
                    help=f"run only these ({', '.join(ORDER + ON_REQUEST)}; gpu needs a GPU)")
    ap.add_argument("--out", type=Path, default=None,
                    help="results folder (default benchmarks/results, quick: "
                         "benchmarks/results/quick)")
    ap.add_argument("--seeds", type=int, default=None,
                    help="search_quality, multi_objective, multi_objective_digits: number "
                         "of seeds")
    ap.add_argument("--first-seed", type=int, default=0, metavar="S",
                    help="multi_objective, multi_objective_digits: run seeds S..S+N-1 "
                         "(fresh seeds; default 0)")
    ap.add_argument("--problems", default=None, metavar="P,...",
                    help="search_quality: mfh6, mfh6_good, mfh6_bad, mfh3, lcbench:<task id>, "
                         "rbv2_xgboost:<task id> (default: the suite; quick: mfh6,mfh3)")
    ap.add_argument("--workers", default=None, metavar="K,...",
                    help="search_quality: worker counts on the simulated clock (default 1,4; "
                         "quick: 1)")
    ap.add_argument("--async-seeds", type=int, default=None, metavar="N",
                    help="search_quality: run only the first N seeds with more than 1 worker "
                         "(default: all)")
    ap.add_argument("--methods", default=None, metavar="M,...",
                    help="search_quality: methods to run (automl always; e.g. "
                         "smac,dehb,automl[brackets=3])")
    ap.add_argument("--time-limit", type=float, default=None, metavar="S",
                    help="search_quality: start no new cell after S seconds (finished cells "
                         "are cached and the statistics use complete seeds)")
    ap.add_argument("--n-src", default=None, metavar="N,...",
                    help="transfer: source configurations per source task (default "
                         "16,64,256; quick: 16)")
    ap.add_argument("--ordered-steps", type=int, default=None, metavar="N",
                    help="transfer: nights of the ordered variant (default 20; quick: 3; "
                         "0 skips it)")
    ap.add_argument("--trials", type=int, default=None,
                    help="orchestration, baselines, compression: trials of the digits search "
                         "(default: 40 as in search_spaces/resnet.yaml; quick: 3)")
    ap.add_argument("--stream-rows", type=int, default=None, metavar="N",
                    help="streaming: images of the 1x set (default 50000; 4x is 4N)")
    ap.add_argument("--run-dir", type=Path, default=None,
                    help="baselines, compression: read this finished digits run directory "
                         "instead of starting one")
    args = ap.parse_args(argv)
    out = args.out or (RESULTS / "quick" if args.quick else RESULTS)
    names = [n for n in ORDER + ON_REQUEST
             if (n in args.only if args.only else n in ORDER)]
    if "gpu" in names:
        from benchmarks.gpu import gpu_count, no_gpu_line

        if gpu_count() == 0:
            print(no_gpu_line(), flush=True)
            names.remove("gpu")
            if not names:
                return 0
    ctx: dict = {"seeds": args.seeds, "trials": args.trials, "out": out,
                 "time_limit_s": args.time_limit, "async_seeds": args.async_seeds,
                 "first_seed": args.first_seed, "ordered_steps": args.ordered_steps,
                 "stream_rows": args.stream_rows}
    try:
        ctx.update(_search_quality_args(args))
    except ValueError as e:
        print(f"python -m benchmarks: error: {e}", file=sys.stderr)
        return 2
    if args.run_dir is not None:
        if not (args.run_dir / "summary.json").exists():
            ap.error(f"--run-dir {args.run_dir}: no summary.json there; pass a finished run")
        ctx["automl_run"] = {"run_dir": str(args.run_dir)}
    failed = 0
    for name in names:
        started, info = time.time(), machine()
        print(f"== {name} ({'quick' if args.quick else 'full'}) ...", flush=True)
        try:
            result = importlib.import_module(f"benchmarks.{name}").run(args.quick, ctx)
        except Exception as e:
            traceback.print_exc()
            result = Result(name, name, status="failed", reason=f"{type(e).__name__}: {e}")
        record = write(result, out, quick=args.quick, started=started, machine_info=info)
        failed += result.status == "failed"
        print(f"   {record['status']} in {record['duration_s']:.0f} s -> {out / name}.md",
              flush=True)
        for g in result.goals:
            print(f"   goal: {g.goal}: {g.measured} (met: {g.met})", flush=True)
    return 1 if failed else 0


def _search_quality_args(args) -> dict:
    """``--problems``, ``--workers``, ``--methods`` parsed and checked (a problem's task id
    against its surrogate when that package is installed).

    Raises:
        ValueError: a bad entry; the message names the flag, on one line.
    """
    out: dict = {}
    if args.problems is not None:
        from benchmarks._problems import load, parse_problems

        out["problems"] = parse_problems(args.problems)
        for name in out["problems"]:
            try:
                load(name)
            except ImportError:
                pass  # reported by the benchmark as a problem left out, with its reason
    if getattr(args, "n_src", None) is not None:
        try:
            out["n_src"] = [int(n) for n in args.n_src.split(",") if n.strip()]
        except ValueError:
            raise ValueError(f"--n-src: {args.n_src!r} is not a list of integers") from None
        if not out["n_src"] or min(out["n_src"]) < 2:
            raise ValueError(f"--n-src: need integers >= 2, got {args.n_src!r}")
    if args.workers is not None:
        try:
            out["workers"] = [int(w) for w in args.workers.split(",") if w.strip()]
        except ValueError:
            raise ValueError(f"--workers: {args.workers!r} is not a list of integers") from None
        if not out["workers"] or min(out["workers"]) < 1:
            raise ValueError(f"--workers: need integers >= 1, got {args.workers!r}")
    if args.methods is not None:
        from benchmarks._peers import METHODS, VARIANTS, variant_knobs
        from benchmarks.transfer import METHODS as TRANSFER_METHODS

        out["methods"] = [m.strip() for m in args.methods.split(",") if m.strip()]
        for m in out["methods"]:
            if (m not in METHODS + VARIANTS + TRANSFER_METHODS
                    and variant_knobs(m) is None):
                raise ValueError(f"--methods: unknown method {m!r}; one of "
                                 f"{', '.join(METHODS + VARIANTS + TRANSFER_METHODS)}")
    return out


def _with_hash_seed(argv: list[str]) -> None:
    """Re-execute with ``PYTHONHASHSEED=0`` when search_quality runs (SMAC3 repeats
    across processes only with a fixed hash seed); a no-op when it is set already."""
    runs_sq = "--only" not in argv or "search_quality" in argv
    if runs_sq and os.environ.get("PYTHONHASHSEED") != "0":
        os.environ["PYTHONHASHSEED"] = "0"
        os.execv(sys.executable, [sys.executable, "-m", "benchmarks", *argv])


if __name__ == "__main__":
    _with_hash_seed(sys.argv[1:])
    sys.exit(main())
