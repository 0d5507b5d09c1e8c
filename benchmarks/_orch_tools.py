"""One sweep per process, by one of four tools, on the same digits search space, trial
count and seeds; the figures go to a JSON file. The orchestration and scaling
benchmarks start this module in a fresh process per tool:

    python -m benchmarks._orch_tools TOOL --trials N --out FILE [--quick] [--concurrency K]

Tools (every one trains with ``automl.train`` and the ``automl.models`` zoo, samples with
``automl.search.make_sampler`` over ``automl.space.define_by_run``, so only the
orchestration differs):

* ``automl``: this project, ``automl.pipeline.run_main_job`` (what ``automl search`` runs).
* ``ray_tune``: Ray Tune as its docs show it: a function trainable that loads the data
  itself, ``tune.report`` with a checkpoint each epoch, ``OptunaSearch`` over a
  define-by-run space, ``ASHAScheduler``, default ``Tuner`` settings (1 CPU per trial,
  no actor reuse).
* ``optuna``: plain Optuna in this process, ``SuccessiveHalvingPruner`` with ASHA's rungs;
  torch keeps its default thread count.
* ``optuna_2workers``: two worker processes (1 torch thread each) sharing a
  ``JournalStorage`` file; worker ``i`` samples with seed ``seed + i``.

Each tool records, per trial, the seconds inside training steps (``train_time_s`` of
every epoch, as ``automl.train.fit`` measures them) and the seconds from the trial
function's start to its first epoch (``setup_s``).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from benchmarks._common import SPEC

TOOLS = ("automl", "ray_tune", "optuna", "optuna_2workers")


def make_experiment(trials: int, quick: bool, out_dir: str, concurrency: int | str = 2,
                    overrides: dict | None = None):
    """``search_spaces/resnet.yaml`` with ``trials`` samples, no time budget, tracking and
    registry off (the peers have neither), 2 CPUs, ``concurrency`` trials at once; quick
    mode shrinks models and epochs (2-4, ASHA rungs 1, 2, 4), CV (top 1, 2 folds) and the
    compression chain (2 distillation epochs, 1 fine-tuning epoch, pruning guarded at a
    5-point drop)."""
    from automl.spec import Experiment, load_spec

    o: dict = {"search.num_samples": trials, "search.time_budget_s": None,
               "output.dir": out_dir, "resources.num_cpus": 2, "resources.object_store_mb": 200}
    res = Experiment.model_fields["resources"].annotation.model_fields
    o["resources.concurrent_trials" if "concurrent_trials" in res
      else "search.max_concurrent"] = concurrency
    if "tracking" in Experiment.model_fields:
        o["tracking.backend"] = "none"
        o["tracking.tensorboard"] = False
    if "registry" in Experiment.model_fields:
        o["registry.enabled"] = False
    if quick:
        o.update({"model.resnet.depth": 1, "model.resnet.stages": 2,
                  "model.resnet.width": {"type": "categorical", "choices": [8, 16]},
                  "training.batch_size": {"type": "categorical", "choices": [64, 128]},
                  "training.epochs": {"type": "int", "low": 2, "high": 4, "step": 2},
                  "scheduler.grace_period": 1, "scheduler.reduction_factor": 2,
                  "scheduler.max_epochs": 4, "selection.top_k": 1, "selection.cv_folds": 2})
        if "compression" in Experiment.model_fields:
            o["compression.latency_repeats"] = 5
            o["compression.stages"] = [
                {"stage": "distill", "student": {"family": "resnet", "width": 4, "stages": 2,
                                                 "depth": 1}, "epochs": 2},
                # a smoke test of the chain, not of its quality: one fine-tuning epoch of a
                # 4-epoch model can cost a point of validation accuracy on a loaded machine
                {"stage": "prune", "method": "structured", "pruning_ratio": 0.3,
                 "fine_tune_epochs": 1, "max_accuracy_drop": 0.05},
                {"stage": "quantize", "method": "static", "calibration_batches": 2}]
    o.update(overrides or {})
    return load_spec(SPEC, o)


def load_arrays(exp):
    """(X_train, y_train), (X_val, y_val) numpy arrays and (input_shape, num_classes) of
    the spec's split, preprocessed as the product's trials get them."""
    from automl.data import fit_transform, load_dataset, split_indices

    ds = load_dataset(exp.data)
    s = split_indices(ds.y, exp.data.test_size, exp.data.val_size, exp.data.seed)
    train, val = fit_transform(ds, s.train, s.val)
    return train, val, tuple(train[0].shape[1:]), ds.num_classes


def load_data(exp):
    """:func:`load_arrays` as torch tensors (``automl.train.to_tensors``)."""
    from automl.train import to_tensors

    train, val, shape, classes = load_arrays(exp)
    return to_tensors(*train), to_tensors(*val), shape, classes


def summarize(tool: str, records: list[dict], sweep_wall: float, slots: int, **extra) -> dict:
    """The figures of one sweep from per-trial records (``train_time_s``, ``setup_s``,
    ``epochs``, ``val_accuracy``, ``state``, ``params``)."""
    train = sum(r["train_time_s"] for r in records)
    n = max(len(records), 1)
    scored = [r for r in records if r.get("val_accuracy") is not None]
    best = max(scored, key=lambda r: r["val_accuracy"], default=None)
    return {
        "tool": tool, "n_trials": len(records), "slots": slots,
        "sweep_wall_s": round(sweep_wall, 3), "train_time_s": round(train, 3),
        "efficiency": round(train / (sweep_wall * slots), 4) if sweep_wall else None,
        "overhead_per_trial_s": round((sweep_wall * slots - train) / n, 3),
        "setup_per_trial_s": round(sum(r["setup_s"] for r in records) / n, 4),
        "epochs": int(sum(r["epochs"] for r in records)),
        "ends": {s: sum(1 for r in records if r["state"] == s)
                 for s in sorted({r["state"] for r in records})},
        "best_val_accuracy": best["val_accuracy"] if best else None,
        "best_params": best["params"] if best else None, **extra,
    }


# ------------------------------------------------------------------------- automl
def run_automl(exp, tmp: Path) -> dict:
    from rich.console import Console

    from automl import cluster as runtime
    from automl.pipeline import run_main_job

    runtime.connect(num_cpus=2, object_store_mb=200, dashboard_port=0)
    summary = run_main_job(exp, tmp / "automl-run", console=Console(quiet=True))
    trials = json.loads((tmp / "automl-run" / "trials.json").read_text())
    search = summary["search"]
    records = [{"train_time_s": t["train_time_s"], "setup_s": t["setup_s"],
                "epochs": t["epochs_run"], "val_accuracy": t["metrics"].get("val_accuracy"),
                "state": t["end_state"], "params": t["params"]} for t in trials]
    out = summarize("automl", records, search["wall_time_s"], search["max_concurrent"],
                    run_dir=str(tmp / "automl-run"), pipeline_wall_s=summary["wall_time_s"],
                    reported_efficiency=search["efficiency"])
    cv, comp = summary.get("cv") or {}, summary.get("compression") or {}
    out["cv_wall_s"] = (cv.get("compute") or {}).get("wall_time_s")
    out["compression_wall_s"] = comp.get("wall_time_s")
    return out


def run_automl_sweeps(sweeps: list[dict], quick: bool, tmp: Path) -> dict:
    """Several sweeps of the project's search stage (``automl.search.run_search``: no
    cross-validation, refit or compression) on one local Ray instance, one after another.

    Each of ``sweeps`` is ``{"label", "trials", "concurrency", "overrides"}``; the result
    maps each label to :func:`summarize`'s figures plus ``run_dir``. A sweep with a
    ``floor`` key (``empty`` or ``torch``) runs Ray Train's start-up floor instead
    (:func:`benchmarks._train_floor.run_floor`, its figures). One process and one
    Ray start serve them all, so only the sweeps themselves are compared.
    """
    from rich.console import Console

    from automl import cluster as runtime
    from automl.cluster import admit_trials
    from automl.search import run_search
    from automl.search._trainable import TrialData

    runtime.connect(num_cpus=2, object_store_mb=200, dashboard_port=0)
    out = {}
    for sw in sweeps:
        run_dir = tmp / sw["label"]
        run_dir.mkdir(parents=True)
        if sw.get("floor"):  # Ray Train's own floor: no project code in the loop
            from benchmarks._train_floor import run_floor

            out[sw["label"]] = run_floor(sw["floor"], sw["trials"], run_dir)
            continue
        exp = make_experiment(sw["trials"], quick, str(tmp / "runs"), sw["concurrency"],
                              sw.get("overrides"))
        (X_tr, y_tr), (X_val, y_val), shape, classes = load_arrays(exp)
        data = TrialData(X_tr, y_tr, X_val, y_val, shape, classes)
        result = run_search(exp, data, run_dir, admit_trials(exp.resources),
                            Console(quiet=True))
        records = [{"train_time_s": t.train_time_s, "setup_s": t.setup_s,
                    "epochs": t.epochs_run, "val_accuracy": t.metrics.get("val_accuracy"),
                    "state": t.end_state, "params": t.params} for t in result.trials]
        out[sw["label"]] = summarize("automl", records, result.wall_time_s,
                                     result.max_concurrent, run_dir=str(run_dir))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tool", choices=(*TOOLS, "optuna_worker", "automl_sweeps"))
    ap.add_argument("--trials", type=int, required=True)
    ap.add_argument("--out", required=True, help="JSON file for the figures")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--concurrency", default="2", help="automl only: trials at once")
    ap.add_argument("--tmp", help="optuna_worker only: the shared folder")
    ap.add_argument("--worker", type=int, default=0)
    ap.add_argument("--worker-trials", type=int, default=0)
    ap.add_argument("--overrides", default=None, help="JSON: more spec key paths -> values")
    ap.add_argument("--sweeps", default=None,
                    help="automl_sweeps only: JSON list of {label, trials, concurrency, overrides}")
    args = ap.parse_args()
    t_process = time.perf_counter()
    tmp = Path(args.tmp or tempfile.mkdtemp(prefix=f"bench-{args.tool}-"))
    conc = int(args.concurrency) if args.concurrency.isdigit() else args.concurrency
    overrides = json.loads(args.overrides) if args.overrides else None
    exp = make_experiment(args.trials, args.quick, str(tmp / "runs"), conc, overrides)
    from benchmarks import _orch_peers as peers

    if args.tool == "optuna_worker":
        peers.run_optuna_worker(exp, tmp, args.worker, args.worker_trials)
        return
    if args.tool == "automl_sweeps":
        out = {"sweeps": run_automl_sweeps(json.loads(args.sweeps), args.quick, tmp)}
    elif args.tool == "automl":
        out = run_automl(exp, tmp)
    elif args.tool == "ray_tune":
        out = peers.run_ray_tune(exp, tmp)
    elif args.tool == "optuna":
        out = peers.run_optuna(exp, tmp)
    else:
        out = peers.run_optuna_2workers(exp, tmp, args)
    out["in_process_wall_s"] = round(time.perf_counter() - t_process, 3)
    out["tmp"] = str(tmp)
    Path(args.out).write_text(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    main()
