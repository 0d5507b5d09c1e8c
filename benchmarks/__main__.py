"""``python -m benchmarks [--quick] [--only NAME ...] [--out DIR]``: run the benchmarks in
order and write ``<out>/<name>.json`` and ``<out>/<name>.md`` for each.

``gpu`` (``benchmarks/gpu.py``) runs only when named (``--only gpu``): it needs a CUDA
device; without one it prints one line and exits 0.

Later benchmarks reuse what earlier ones produced in the same invocation (the project's
digits run of ``orchestration`` gives ``baselines`` its CV winner and ``compression`` its
model); run alone, each produces what it needs itself. A benchmark that raises is recorded
as ``failed`` with the error and the others still run; the exit code is 1 then.
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
         "multi_objective_digits")
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
    ap.add_argument("--seeds", type=int, default=None, help="search_quality: number of seeds")
    ap.add_argument("--trials", type=int, default=None,
                    help="orchestration, baselines, compression: trials of the digits search "
                         "(default: 40 as in search_spaces/resnet.yaml; quick: 3)")
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
    ctx: dict = {"seeds": args.seeds, "trials": args.trials}
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


if __name__ == "__main__":
    sys.exit(main())
