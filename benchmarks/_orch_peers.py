"""The peers of ``benchmarks/_orch_tools.py``: Ray Tune written from its docs, plain
Optuna in one process, and Optuna with two worker processes on a shared storage. Each
returns :func:`benchmarks._orch_tools.summarize` figures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks._orch_tools import load_data, summarize


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

    # importing automl sets the project's Tune settings for this process (no auto logger
    # callbacks, rare experiment snapshots); a docs-style user has Tune's defaults
    for key in ("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "TUNE_GLOBAL_CHECKPOINT_S"):
        os.environ.pop(key, None)
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
            "state": "failed" if r.error else "completed" if last is not None and len(df)
            >= int(r.config["training.epochs"]) else "stopped_early", "params": r.config})
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
