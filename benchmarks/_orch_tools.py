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
import sys
import tempfile
import time
from pathlib import Path

from benchmarks._common import SPEC

TOOLS = ("automl", "ray_tune", "optuna", "optuna_2workers")


def make_experiment(trials: int, quick: bool, out_dir: str, concurrency: int | str = 2,
                    overrides: dict | None = None):
    """``search_spaces/resnet.yaml`` with ``trials`` samples, no time budget, tracking and
    registry off (the peers have neither), 2 CPUs, ``concurrency`` trials at once; quick
    mode shrinks models and epochs (2-4, ASHA rungs 1, 2, 4) and CV (top 1, 2 folds)."""
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
    o.update(overrides or {})
    return load_spec(SPEC, o)


def load_data(exp):
    """(train, val) tensors and (input_shape, num_classes) of the spec's split."""
    from automl.data import fit_transform, load_dataset, split_indices
    from automl.train import to_tensors

    ds = load_dataset(exp.data)
    s = split_indices(ds.y, exp.data.test_size, exp.data.val_size, exp.data.seed)
    (X_tr, y_tr), (X_val, y_val) = fit_transform(ds, s.train, s.val)
    return to_tensors(X_tr, y_tr), to_tensors(X_val, y_val), tuple(X_tr.shape[1:]), ds.num_classes


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

    from automl import runtime
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
    cv = summary.get("cv") or {}
    out["cv_wall_s"] = (cv.get("compute") or {}).get("wall_time_s")
    return out


# ------------------------------------------------------------------------- ray tune
def _docs_trainable(exp):
    """The function trainable a Ray Tune user writes from the docs (PyTorch tutorial)."""

    def train_digits(config):
        import torch
        from ray import tune

        from automl.space import TrialConfig
        from automl.train import TrainState, fit

        t0 = time.perf_counter()
        train, val, shape, classes = load_data(exp)  # data loaded inside the trainable
        cfg = TrialConfig.from_flat(config, exp, seed=exp.search.seed)
        state = TrainState.create(cfg, shape, classes, len(train[1]))
        setup_s = time.perf_counter() - t0

        def report(st, metrics):
            with tempfile.TemporaryDirectory() as d:
                torch.save({"epoch": st.epoch, "model": st.model.state_dict(),
                            "optimizer": st.optimizer.state_dict()}, Path(d) / "checkpoint.pt")
                tune.report({**metrics, "setup_s": setup_s},
                            checkpoint=tune.Checkpoint.from_directory(d))

        fit(state, train, val, on_epoch=report)

    return train_digits


def run_ray_tune(exp, tmp: Path) -> dict:
    import ray
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler
    from ray.tune.search.optuna import OptunaSearch

    from automl.search import make_sampler
    from automl.space import define_by_run

    ray.init(num_cpus=2, object_store_memory=200 * 2**20, dashboard_port=0)
    sch = exp.scheduler
    tuner = tune.Tuner(
        _docs_trainable(exp),
        tune_config=tune.TuneConfig(
            metric="val_accuracy", mode="max", num_samples=exp.search.num_samples,
            search_alg=OptunaSearch(define_by_run(exp), metric="val_accuracy", mode="max",
                                    sampler=make_sampler(exp.search)),
            scheduler=ASHAScheduler(max_t=exp.max_epochs, grace_period=sch.grace_period,
                                    reduction_factor=sch.reduction_factor)),
        run_config=tune.RunConfig(storage_path=str(tmp / "ray"), name="handwritten"),
    )
    t0 = time.perf_counter()
    grid = tuner.fit()
    wall = time.perf_counter() - t0
    records = []
    for r in grid:
        df = r.metrics_dataframe
        last = df.iloc[-1] if df is not None and len(df) else None
        records.append({
            "train_time_s": float(df["train_time_s"].sum()) if last is not None else 0.0,
            "setup_s": float(df["setup_s"].iloc[0]) if last is not None else 0.0,
            "epochs": len(df) if df is not None else 0,
            "val_accuracy": float(last["val_accuracy"]) if last is not None else None,
            "state": "failed" if r.error else "ended", "params": r.config})
    ray.shutdown()
    return summarize("ray_tune", records, wall, 2)


# ------------------------------------------------------------------------- optuna
def optuna_objective(exp, data, records: list[dict]):
    """Plain Optuna objective: sample, build, train, report each epoch, prune at rungs."""
    import optuna

    from automl.space import TrialConfig, define_by_run
    from automl.train import TrainState, fit

    train, val, shape, classes = data
    space = define_by_run(exp)

    def objective(trial):
        t0 = time.perf_counter()
        fixed = space(trial)
        cfg = TrialConfig.from_flat({**trial.params, **fixed}, exp, seed=exp.search.seed)
        state = TrainState.create(cfg, shape, classes, len(train[1]))
        rec = {"setup_s": time.perf_counter() - t0, "train_time_s": 0.0, "epochs": 0,
               "val_accuracy": None, "state": "completed", "params": dict(trial.params)}
        records.append(rec)

        def on_epoch(st, m):
            rec.update(train_time_s=rec["train_time_s"] + m["train_time_s"], epochs=st.epoch,
                       val_accuracy=m["val_accuracy"])
            trial.report(m["val_accuracy"], st.epoch)
            if trial.should_prune():
                rec["state"] = "pruned"
                raise optuna.TrialPruned()

        fit(state, train, val, on_epoch=on_epoch)
        return rec["val_accuracy"]

    return objective


def _study(exp, storage=None, seed_offset: int = 0, load: bool = False):
    import optuna

    from automl.search import make_sampler

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = make_sampler(exp.search.model_copy(update={"seed": exp.search.seed + seed_offset}))
    pruner = optuna.pruners.SuccessiveHalvingPruner(
        min_resource=exp.scheduler.grace_period,
        reduction_factor=int(exp.scheduler.reduction_factor))
    if load:
        return optuna.load_study(study_name="bench", storage=storage, sampler=sampler,
                                 pruner=pruner)
    return optuna.create_study(study_name="bench", storage=storage, direction="maximize",
                               sampler=sampler, pruner=pruner)


def run_optuna(exp, tmp: Path) -> dict:
    import torch

    data = load_data(exp)
    records: list[dict] = []
    study = _study(exp)
    t0 = time.perf_counter()
    study.optimize(optuna_objective(exp, data, records), n_trials=exp.search.num_samples)
    return summarize("optuna", records, time.perf_counter() - t0, 1,
                     torch_threads=torch.get_num_threads())


def _journal(path: Path):
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    return JournalStorage(JournalFileBackend(str(path)))


def run_optuna_worker(exp, tmp: Path, worker: int, n_trials: int) -> None:
    from automl.train import set_threads

    set_threads(1)
    data = load_data(exp)
    records: list[dict] = []
    study = _study(exp, _journal(tmp / "journal.log"), seed_offset=worker, load=True)
    study.optimize(optuna_objective(exp, data, records), n_trials=n_trials)
    (tmp / f"worker{worker}.json").write_text(json.dumps(records))


def run_optuna_2workers(exp, tmp: Path, args) -> dict:
    import subprocess

    _study(exp, _journal(tmp / "journal.log"))
    n = exp.search.num_samples
    t0 = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-m", "benchmarks._orch_tools", "optuna_worker",
                               "--trials", str(n), "--out", args.out, "--tmp", str(tmp),
                               "--worker", str(w), "--worker-trials", str(n // 2 + w * (n % 2))]
                              + (["--quick"] if args.quick else [])
                              + (["--overrides", args.overrides] if args.overrides else []))
             for w in (0, 1)]
    codes = [p.wait(timeout=3600) for p in procs]
    wall = time.perf_counter() - t0
    if any(codes):
        raise RuntimeError(f"optuna workers exited with {codes}")
    records = [r for w in (0, 1) for r in json.loads((tmp / f"worker{w}.json").read_text())]
    return summarize("optuna_2workers", records, wall, 2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tool", choices=(*TOOLS, "optuna_worker"))
    ap.add_argument("--trials", type=int, required=True)
    ap.add_argument("--out", required=True, help="JSON file for the figures")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--concurrency", default="2", help="automl only: trials at once")
    ap.add_argument("--tmp", help="optuna_worker only: the shared folder")
    ap.add_argument("--worker", type=int, default=0)
    ap.add_argument("--worker-trials", type=int, default=0)
    ap.add_argument("--overrides", default=None, help="JSON: more spec key paths -> values")
    args = ap.parse_args()
    t_process = time.perf_counter()
    tmp = Path(args.tmp or tempfile.mkdtemp(prefix=f"bench-{args.tool}-"))
    conc = int(args.concurrency) if args.concurrency.isdigit() else args.concurrency
    overrides = json.loads(args.overrides) if args.overrides else None
    exp = make_experiment(args.trials, args.quick, str(tmp / "runs"), conc, overrides)
    if args.tool == "optuna_worker":
        run_optuna_worker(exp, tmp, args.worker, args.worker_trials)
        return
    if args.tool == "automl":
        out = run_automl(exp, tmp)
    elif args.tool == "ray_tune":
        out = run_ray_tune(exp, tmp)
    elif args.tool == "optuna":
        out = run_optuna(exp, tmp)
    else:
        out = run_optuna_2workers(exp, tmp, args)
    out["in_process_wall_s"] = round(time.perf_counter() - t_process, 3)
    out["tmp"] = str(tmp)
    Path(args.out).write_text(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    main()
