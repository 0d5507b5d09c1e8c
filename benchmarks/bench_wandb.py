"""What W&B tracking costs a sweep: driver-side runs (``automl.tracking``) against Ray's
``WandbLoggerCallback`` (one logging actor + one queue actor + one W&B process per trial)
and against no W&B at all. Not a test.

Each variant runs the same sweep (digits, fixed small ResNet, ``--epochs`` epochs,
``--trials`` trials, 2 at a time, FIFO, in-process trials), ``--repeats`` times in
rotation after one warm-up sweep; W&B is offline (nothing leaves the machine). Prints
the median wall time per variant, the extra seconds per trial against no W&B, and for
the driver-side variant the time spent inside ``wandb.init``/``finish`` per trial
(first run of the process separately: it starts W&B's service).

Usage: ``.venv/bin/python benchmarks/bench_wandb.py [--trials 8] [--repeats 2]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ["WANDB_MODE"] = "offline"
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

from automl.tracking._callbacks import WandbTrials  # noqa: E402
from rich.console import Console  # noqa: E402

from automl import cluster as runtime  # noqa: E402
from automl.data import fit_transform, load_dataset, split_indices  # noqa: E402
from automl.search import run_search  # noqa: E402
from automl.search._trainable import TrialData  # noqa: E402
from automl.spec import Experiment  # noqa: E402
from automl.tracking import _wandb  # noqa: E402


def experiment(trials: int, epochs: int) -> Experiment:
    return Experiment.model_validate({
        "name": "bench-wandb",
        "model": {"family": "resnet", "resnet": {"depth": 1, "width": 8, "stages": 2}},
        "training": {"lr": {"type": "float", "low": 1e-3, "high": 1e-2, "log": True},
                     "batch_size": 128, "epochs": epochs},
        "search": {"num_samples": trials, "sampler": "random"},
        "resources": {"concurrent_trials": 2},
        "scheduler": {"type": "none"},
        "tracking": {"backend": "wandb", "mode": "offline", "tensorboard": False},
    })


class TimedWandbTrials(WandbTrials):
    """WandbTrials that records seconds spent in W&B calls per trial."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.seconds: list[float] = []

    def on_trial_start(self, *a, **kw):
        t = time.perf_counter()
        super().on_trial_start(*a, **kw)
        self.seconds.append(time.perf_counter() - t)

    def _finish(self, *a, **kw):
        t = time.perf_counter()
        super()._finish(*a, **kw)
        self.seconds[-1] += time.perf_counter() - t


def callbacks_for(variant: str, exp: Experiment, run_dir: Path) -> list:
    if variant == "none":
        return []
    if variant == "driver":
        return [TimedWandbTrials(_wandb.wandb_target(exp, run_dir), exp)]
    from ray.air.integrations.wandb import WandbLoggerCallback

    return [WandbLoggerCallback(project=exp.name, group=run_dir.name, mode="offline")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=8)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    exp = experiment(args.trials, args.epochs)
    ds = load_dataset(exp.data)
    sp = split_indices(ds.y, exp.data.test_size, exp.data.val_size, exp.data.seed,
                       classes=ds.classes)
    (X_tr, y_tr), (X_val, y_val), _ = fit_transform(ds, sp.train, sp.val, sp.test)
    data = TrialData(X_tr, y_tr, X_val, y_val, tuple(X_tr.shape[1:]), ds.num_classes)
    handle = runtime.connect(num_cpus=2, object_store_mb=200, dashboard_port=0)
    walls: dict[str, list[float]] = {"none": [], "driver": [], "ray": []}
    inits: list[float] = []
    quiet = Console(quiet=True)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            order = ["none"] + [v for _ in range(args.repeats) for v in walls]
            for i, variant in enumerate(order):
                run_dir = Path(tmp) / f"{i:02d}-{variant}"
                run_dir.mkdir()
                cbs = callbacks_for(variant, exp, run_dir)
                t = time.perf_counter()
                run_search(exp, data, run_dir, console=quiet, callbacks=cbs)
                wall = time.perf_counter() - t
                if i:  # the first sweep only warms Ray's worker processes
                    walls[variant].append(wall)
                if variant == "driver":
                    inits.extend(cbs[0].seconds)
                print(f"{variant:>6}: {wall:6.1f} s")
    finally:
        runtime.shutdown(handle)
    base = statistics.median(walls["none"])
    print(f"\n{args.trials} trials x {args.epochs} epochs, 2 at a time, median of "
          f"{args.repeats}:")
    for v, w in walls.items():
        med = statistics.median(w)
        print(f"  {v:>6}: {med:6.1f} s wall, {(med - base) / args.trials:+.2f} s per trial "
              "vs no W&B")
    print(f"  driver-side W&B calls per trial: first {inits[0]:.2f} s (starts W&B's service), "
          f"then median {statistics.median(inits[1:]):.2f} s, max {max(inits[1:]):.2f} s")


if __name__ == "__main__":
    main()
