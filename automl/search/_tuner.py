"""Build and run the Ray Tune sweep for an :class:`~automl.spec.Experiment`."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import optuna
import ray
from ray import tune
from ray.tune.search.optuna import OptunaSearch
from rich.console import Console

from automl.errors import RunError
from automl.search._progress import SweepProgress
from automl.search._resources import Admission, admit_trials, trial_bundles
from automl.search._result import DIVERGED, FAILED, SearchResult, TrialRecord, end_state
from automl.search._sampler import make_sampler
from automl.search._scheduler import ResumableASHA, make_scheduler
from automl.search._snapshots import mend_snapshots
from automl.search._trainable import DataRef, TrialData, run_trial
from automl.space import TrialConfig, define_by_run
from automl.spec import Experiment

STUDY_DB = "study.db"


class _OptunaSearch(OptunaSearch):
    """Ray's OptunaSearch, told how each trial really ended.

    * A trial the scheduler stopped before its own ``training.epochs`` (ASHA) is told as
      PRUNED, its last report kept as an intermediate value: Ray would tell it COMPLETE
      with a low-fidelity value, which TPE then ranks against fully trained trials.
      Optuna's TPE ranks pruned trials after completed ones, by how far they got and
      then by value (``optuna.samplers.TPESampler``; Falkner et al. 2018 on mixing
      fidelities in the model). ``epochs_of(sampled params)`` gives a trial's target.
    * A trial that errored (or diverged) is told as FAIL even when it reported earlier
      epochs: Ray would tell its last value as COMPLETE, feeding a broken trial's number
      into TPE's model.
    """

    def __init__(self, *args, epochs_of=None, **kwargs):
        super().__init__(*args, **kwargs)
        self._epochs_of = epochs_of
        self._reported: dict[str, int] = {}  # trial id -> last step told to Optuna

    def on_trial_complete(self, trial_id: str, result=None, error: bool = False):
        if trial_id not in self._ot_trials:  # asked before an older state was restored
            return
        if error or not result or self._epochs_of is None or trial_id in self._completed_trials:
            super().on_trial_complete(trial_id, None if error else result, error)
            return
        trial = self._ot_trials[trial_id]
        target = self._epochs_of(trial.params)  # sampled epochs, else the spec's fixed value
        if int(result.get("epoch", target)) >= target or self.metric not in result:
            super().on_trial_complete(trial_id, result, error)
            return
        step = int(result.get("training_iteration", result["epoch"]))
        try:
            if self._reported.get(trial_id) != step:  # the stopping report reached Tune only
                trial.report(result[self.metric], step)
            self._ot_study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        except (optuna.exceptions.UpdateFinishedTrialError, ValueError):
            pass  # already finished in the study (a resumed sweep); keep its record
        self._completed_trials.add(trial_id)

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        if trial_id not in self._ot_trials:  # asked before an older state was restored
            return
        # After a crash, the study (SQLite, always current) may already hold the end of a
        # trial that Tune's last snapshot still saw running: keep the study's record.
        try:
            super().on_trial_result(trial_id, result)
            self._reported[trial_id] = int(result["training_iteration"])
        except optuna.exceptions.UpdateFinishedTrialError:
            pass


@dataclass(frozen=True)
class EpochsOf:
    """``flat config -> the trial's training.epochs`` (``default`` when not sampled);
    a plain object so the searcher it serves can be pickled into Tune's snapshots."""

    default: int

    def __call__(self, config: dict) -> int:
        return int(config.get("training.epochs", self.default))


def epochs_of(exp: Experiment) -> EpochsOf:
    """The :class:`EpochsOf` of ``exp`` (fixed epochs, else the largest a trial can run)."""
    return EpochsOf(exp.training.epochs if isinstance(exp.training.epochs, int) else exp.max_epochs)


def make_searcher(exp: Experiment, run_dir: Path) -> OptunaSearch:
    """Ray's ``OptunaSearch`` over the spec's define-by-run space; the study is stored in
    ``<run_dir>/study.db`` (SQLite), which ``optuna-dashboard`` and the ``optuna`` CLI open."""
    storage = optuna.storages.RDBStorage(f"sqlite:///{(run_dir / STUDY_DB).resolve()}")
    return _OptunaSearch(
        space=define_by_run(exp),
        metric=exp.search.metric,
        mode=exp.search.mode,
        sampler=make_sampler(exp.search),
        study_name=exp.name,
        storage=storage,
        epochs_of=epochs_of(exp),
    )


def _restore(experiment: str, trainable, progress: SweepProgress, callbacks: list,
             exp: Experiment, console: Console) -> tune.Tuner:
    """Restore a Tune experiment whose driver died: finished trials are kept, unfinished
    ones resume from their last checkpoint, the searcher (and its Optuna study) resumes
    from its saved state, ASHA's rungs are rebuilt from ``progress.history``
    (:meth:`ResumableASHA.seed_rungs`; Tune saves no scheduler state), and the number of
    trials stays the one requested. The only place that reaches into the restored
    ``Tuner``'s private attributes.

    Torn snapshot files (a driver killed while Tune copied them) are mended first
    (:func:`~automl.search._snapshots.mend_snapshots`).

    Raises:
        RunError: the saved state cannot be read (torn with no older session left, or
            from another version).
    """
    for line in mend_snapshots(experiment):
        console.print(f"  {line}", highlight=False)
    try:
        tuner = tune.Tuner.restore(experiment, trainable=trainable, resume_unfinished=True,
                                   resume_errored=False, restart_errored=False)
    except Exception as e:  # noqa: BLE001 - any unpickling/format error
        raise RunError(
            f"cannot restore the sweep state ({type(e).__name__}: {str(e)[:200]})",
            where=experiment, fix="start a new run (without --resume); finished trials are "
            "in trials.jsonl and study.db",
        ) from None
    # Tune restores the callbacks it pickled; use this process's (live console, files).
    tuner._local_tuner._run_config.callbacks = [progress, *callbacks]
    scheduler = tuner._local_tuner._tune_config.scheduler  # unpickled, rungs empty
    if isinstance(scheduler, ResumableASHA):
        n = scheduler.seed_rungs(progress.history, exp.search.metric, exp.search.mode)
        console.print(f"  ASHA rungs rebuilt from trials.jsonl: {n} rung results", highlight=False)
    return tuner


def storage_path(exp: Experiment, run_dir: Path) -> str:
    """Where Tune and Train keep trial state and checkpoints: ``output.storage_uri``
    (``s3://...``, ``gs://...``) plus the run's name, else the local run directory."""
    if exp.output.storage_uri:
        return f"{exp.output.storage_uri.rstrip('/')}/{run_dir.name}"
    return str(run_dir.resolve())


def run_search(
    exp: Experiment,
    data: TrialData,
    run_dir: Path,
    admission: Admission | None = None,
    console: Console | None = None,
    callbacks: list | None = None,
    resume: bool = False,
) -> SearchResult:
    """Run the sweep on the connected Ray cluster and collect its trials.

    Args:
        exp: the validated experiment.
        data: training and validation arrays (the test split is never passed).
        run_dir: the run directory; Tune writes under ``run_dir/tune``.
        admission: concurrency decided by :func:`admit`; computed here when None.
        callbacks: more Tune callbacks (tracking, metrics), called after the progress
            display's for each event.

    Raises:
        ResourceError: a trial can never be placed (before anything is queued).
    """
    console = console or Console()
    if admission is None:
        admission = admit_trials(exp.resources)
    progress = SweepProgress(run_dir, exp.search.metric, exp.search.mode,
                             exp.search.num_samples, console, resume=resume)
    storage = storage_path(exp, run_dir)
    first = trial_bundles(exp.resources)[0]  # the trial's own process
    trainable = tune.with_resources(
        tune.with_parameters(run_trial, data=DataRef(ray.put(data)), exp=exp, storage=storage),
        {k.lower(): v for k, v in first.items()},
    )
    tuner = tune.Tuner(
        trainable,
        tune_config=tune.TuneConfig(
            metric=exp.search.metric,
            mode=exp.search.mode,
            search_alg=make_searcher(exp, run_dir),
            scheduler=make_scheduler(exp),
            num_samples=exp.search.num_samples,
            max_concurrent_trials=admission.max_concurrent,
            time_budget_s=exp.search.time_budget_s,
            # a Train V2 controller cannot be reset in place: fresh actors for DDP trials
            reuse_actors=not exp.resources.distributed,
            trial_dirname_creator=lambda t: f"trial_{t.trial_id}",
        ),
        run_config=tune.RunConfig(
            name="tune",
            storage_path=storage,
            checkpoint_config=tune.CheckpointConfig(num_to_keep=None),
            # in-process trials: a killed trial process is retried from its last
            # checkpoint; data-parallel trials retry inside Ray Train instead
            failure_config=tune.FailureConfig(
                max_failures=0 if exp.resources.distributed else exp.resources.max_failures,
                fail_fast=exp.search.fail_fast,
            ),
            callbacks=[progress, *(callbacks or [])],
            verbose=0,
        ),
    )
    experiment = f"{storage}/tune"
    if resume and tune.Tuner.can_restore(experiment):
        tuner = _restore(experiment, trainable, progress, callbacks or [], exp, console)
    t0 = time.perf_counter()
    try:
        grid = tuner.fit()
    finally:
        progress.close()
    wall = time.perf_counter() - t0
    trials = [_record(r, exp, progress.history) for r in grid]
    sign = 1.0 if exp.search.mode == "max" else -1.0
    ranked = sorted(
        (t for t in trials if t.end_state not in (FAILED, DIVERGED)
         and exp.search.metric in t.metrics),
        key=lambda t: (-sign * t.metrics[exp.search.metric], -t.epochs_run, t.trial_id),
    )
    return SearchResult(exp.search.metric, exp.search.mode, trials, ranked, wall,
                        admission.max_concurrent, admission.trial_resources)


def _record(result, exp: Experiment, history: dict) -> TrialRecord:
    """One Tune ``Result`` as a :class:`TrialRecord`.

    Args:
        result: a ``ray.tune.Result`` of the finished grid (last metrics, config, error).
        history: ``trial_id -> per-epoch rows`` from the progress callback
            (``trials.jsonl``), the source of ``history``, ``train_time_s`` (seconds
            summed over epochs) and ``setup_s`` (seconds before the first epoch).

    The end state follows :func:`~automl.search._result.end_state`; ``checkpoint`` is the
    trial's last checkpoint directory (Tune's, or the Train path a DDP trial reported).
    """
    metrics = dict(result.metrics or {})
    trial_id = metrics.get("trial_id") or Path(result.path).name.removeprefix("trial_")
    params = {k: v for k, v in (result.config or {}).items()}
    rows = history.get(trial_id, [])
    try:
        cfg = TrialConfig.from_flat(params, exp, seed=exp.search.seed).to_dict()
    except KeyError:
        cfg = {}
    target = int(cfg.get("epochs", 0))
    epochs = int(metrics.get("epoch", 0))
    error = _error_text(result.error)
    state = end_state(epochs, target, error)
    keep = ("epoch", "train_loss", "val_loss", "val_accuracy", "val_f1")
    ckpt = result.checkpoint.path if result.checkpoint is not None else None
    if ckpt is None:  # a Ray Train trial: TuneReportCallback forwards the path as a metric
        ckpt = next((r["checkpoint_path"] for r in reversed(rows) if r.get("checkpoint_path")),
                    None)
    return TrialRecord(
        trial_id=trial_id,
        params=params,
        config=cfg,
        end_state=state,
        epochs_run=epochs,
        target_epochs=target,
        metrics={k: float(metrics[k]) for k in keep if k in metrics},
        history=rows,
        error=error,
        reason=_reason(error),
        checkpoint=ckpt,
        train_time_s=float(np.sum([r.get("train_time_s", 0.0) for r in rows])),
        setup_s=float(rows[0].get("setup_s", 0.0)) if rows else 0.0,
    )


def _reason(error: str | None) -> str | None:
    """One line (at most 300 characters) saying why a trial failed, from its error text:
    the guard's ``diverged at epoch N: ...``, an out-of-memory hint, else the last line."""
    if error is None:
        return None
    m = re.search(r"diverged at epoch \d+: [^\n]*", error)
    if m:
        return m.group(0)
    if "OutOfMemoryError" in error or "out of memory" in error.lower():
        return ("killed by the out-of-memory killer; lower resources.concurrent_trials "
                "(or give trials more memory)")
    lines = [ln.strip() for ln in error.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else "failed"


def _error_text(error) -> str | None:
    """A trial's error as text, its last 4,000 characters (the traceback's end)."""
    if error is None:
        return None
    text = str(error)
    return text[-4000:]
