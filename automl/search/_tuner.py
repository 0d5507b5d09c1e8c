"""Build and run the Ray Tune sweep for an :class:`~automl.spec.Experiment`.

Tune runs the trials; which configuration comes next (:class:`StudySearch`, in
``study.db``), when a trial stops (:class:`RungPolicy`) and what was seen
(:class:`Ledger`, ``trials.jsonl``) are ours, plugged in through Tune's public
``Searcher``, ``TrialScheduler`` and ``Callback`` interfaces. A resumed sweep starts a
fresh ``Tuner`` from the run directory alone: the study says which trials finished and
which were running, ``trials.jsonl`` rebuilds the rungs, the trials' own checkpoints
(:class:`TrialCheckpoints`) let running ones continue. Tune's experiment snapshots are
never read.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import optuna
import ray
from ray import tune
from ray.tune.schedulers import FIFOScheduler
from rich.console import Console

from automl._interrupt import no_tune_handler
from automl.cluster import Admission, admit_trials, trial_bundles
from automl.search._adapters import (
    TRIAL_KEY,
    BudgetStopper,
    RungScheduler,
    StudySearcher,
)
from automl.search._asha import RungPolicy
from automl.search._checkpoints import TrialCheckpoints
from automl.search._console import ConsoleProgress
from automl.search._eta import TrialState, calibrate, epoch_seconds, sweep_quantiles
from automl.search._front import pareto_of, rank_trials
from automl.search._ledger import Ledger, TrialLog, TrialSink
from automl.search._objectives import Objectives
from automl.search._policy import make_policy
from automl.search._result import FAILED, SearchResult, TrialRecord, end_state
from automl.search._sampler import make_sampler
from automl.search._storage import SoleWriterStorage
from automl.search._study import StudySearch
from automl.search._trainable import DataRef, TrialData, run_trial
from automl.search._transfer import SourceStudy
from automl.space import TrialConfig, define_by_run, describe, enumerate_params
from automl.spec import COST_METRICS, Experiment

STUDY_DB = "study.db"
# The grid ``Tuner.fit`` returns reads Tune's per-trial result files, which the sweep does
# not write (its ledger records results): quiet the warning that they are missing.
logging.getLogger("ray.tune.analysis.experiment_analysis").setLevel(logging.ERROR)
#: the per-epoch metrics a trial record keeps as its last ``metrics``
KEPT = ("epoch", "train_loss", "val_loss", "val_accuracy", "val_f1", "val_rmse", "val_mae",
        "val_r2", *COST_METRICS)


@dataclass(frozen=True)
class EpochsOf:
    """``flat config -> the trial's training.epochs`` (``default`` when not sampled)."""

    default: int

    def __call__(self, config: dict) -> int:
        return int(config.get("training.epochs", self.default))


def epochs_of(exp: Experiment) -> EpochsOf:
    """The :class:`EpochsOf` of ``exp`` (fixed epochs, else the largest a trial can run)."""
    return EpochsOf(exp.training.epochs if isinstance(exp.training.epochs, int) else exp.max_epochs)


#: seconds a write to ``study.db`` waits for a reader's lock (``automl dashboard``, the
#: ``optuna`` CLI) before SQLite says "database is locked" (its default: 5; optuna#820)
STUDY_BUSY_TIMEOUT_S = 30.0


def study_storage(run_dir: Path) -> optuna.storages.RDBStorage:
    """The run's Optuna storage, ``<run_dir>/study.db`` (SQLite; ``automl dashboard``,
    ``optuna-dashboard`` and the ``optuna`` CLI open it while the sweep writes: a write
    waits up to :data:`STUDY_BUSY_TIMEOUT_S` for their read locks)."""
    return optuna.storages.RDBStorage(
        f"sqlite:///{(Path(run_dir) / STUDY_DB).resolve()}",
        engine_kwargs={"connect_args": {"timeout": STUDY_BUSY_TIMEOUT_S}})


def make_search(exp: Experiment, run_dir: Path, storage=None,
                sources: Sequence[SourceStudy] = ()) -> StudySearch:
    """The sweep's :class:`StudySearch`: the spec's sampler over its define-by-run space,
    study ``exp.name`` in ``<run_dir>/study.db``, ``search.num_samples`` trials. The sampler
    is seeded with ``search.seed`` plus the trials the study already holds (0 unless
    resumed or warm-started). The driver is the study's only writer during the sweep,
    so its reads are answered from memory (:class:`SoleWriterStorage`); ``storage``
    replaces that storage (``benchmarks/study_ask.py`` compares others). ``sources``:
    earlier studies to transfer from (:func:`make_sampler`; ``nightly.transfer_from``)."""
    if storage is None:
        storage = SoleWriterStorage(study_storage(run_dir))
    portfolio = exp.nightly.transfer_portfolio
    return StudySearch(
        define_by_run(exp), storage, exp.name,
        lambda held: make_sampler(exp.search, seed=exp.search.seed + held, sources=sources,
                                  max_epoch=exp.max_epochs, portfolio=portfolio),
        Objectives.of(exp.search).mode, exp.search.num_samples, size=describe(exp)["size"],
        enumerate_space=lambda: enumerate_params(exp), seed=exp.search.seed,
        metric_names=Objectives.of(exp.search).metrics)


def eta_of(policy: RungPolicy | None, slots: int, time_budget_s: float | None,
           raw: bool = False):
    """``ledger -> seconds still to go`` as an :class:`~automl._progress.Eta` (the point
    and its 80% range: :func:`automl.search._eta.sweep_quantiles`, then
    :func:`~automl.search._eta.calibrate`), or None before any epoch: epoch times measured
    in this session, each trial's own, the rungs and continue rates of ``policy``. With
    ``raw``, the Monte Carlo's ``(q_lo, q_mid, q_hi)`` uncalibrated (what the calibration
    is fitted on: ``benchmarks/eta.py``)."""
    rungs = policy.rung_epochs() if policy is not None else []
    rf = policy.reduction_factor if policy is not None else None

    def eta(ledger: Ledger):
        rows = ledger.session_reports()
        if not rows:
            return None
        trials = [TrialState(t.rows[-1]["epoch"] if t.rows else 0, t.target or 0,
                             t.end is not None,
                             policy.bracket_of(t.number) if policy is not None else 0,
                             epoch_seconds(t.rows) if t.rows else None)
                  for t in ledger.trials.values() if t.started or t.end is not None]
        elapsed = ledger.clock() - ledger.t0
        q = sweep_quantiles(trials, ledger.total, rungs=rungs,
                            passed=policy.pass_counts() if policy is not None else {},
                            reduction_factor=rf, epoch_s=epoch_seconds(rows),
                            elapsed_s=elapsed, slots=slots,
                            epochs_done=ledger.epochs, time_budget_s=time_budget_s,
                            warm=warm_point(ledger.starts, trials, slots),
                            # adaptive brackets move: the window new trials are drawn from
                            brackets=policy.bracket_weights() if policy is not None else None)
        if q is None or raw:
            return q
        return calibrate(q, cap_s=None if time_budget_s is None
                         else max(0.0, time_budget_s - elapsed))

    return eta


def warm_point(starts: list[tuple[float, int]], trials: list[TrialState],
               slots: int) -> tuple[float, int, int] | None:
    """The ``(elapsed seconds, epochs reported, trials started)`` at this session's
    ``slots``-th trial start (``starts``: :attr:`Ledger.starts`), the count including a
    resumed sweep's earlier trials, or None before every slot held a trial."""
    if len(starts) < slots:
        return None
    elapsed, epochs = starts[slots - 1]
    return elapsed, epochs, len(trials) - len(starts) + slots


def storage_path(exp: Experiment, run_dir: Path) -> str:
    """Where Tune, Train and the trials' checkpoints live: ``output.storage_uri``
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
    sinks: list[TrialSink] | None = None,
    resume: bool = False,
    stop_if: Callable[[Ledger], bool] | None = None,
    sources: Sequence[SourceStudy] = (),
) -> SearchResult:
    """Run the sweep on the connected Ray cluster and collect its trials.

    Args:
        exp: the validated experiment.
        data: training and validation arrays (the test split is never passed).
        run_dir: the run directory (``study.db``, ``trials.jsonl``; Tune writes under
            ``tune/``, trial checkpoints under ``checkpoints/``).
        admission: concurrency decided by :func:`admit`; computed here when None.
        sinks: where trial events go besides the console (tracking, metrics).
        resume: continue the sweep ``run_dir`` holds (its driver died): finished trials
            stay finished, running ones continue from their checkpoints with the same
            number and config, the rungs are rebuilt from ``trials.jsonl``, and only the
            missing trials are asked for.
        stop_if: ``ledger -> True`` ends the whole sweep now (none is asked for any more;
            running trials stop and end at their last report, told PRUNED:
            :func:`end_budget_stopped`): the job budget (``automl.budget``).
        sources: earlier studies the sampler transfers from (:func:`make_search`).

    Raises:
        ResourceError: a trial can never be placed (before anything is queued).
    """
    console = console or Console()
    if admission is None:
        admission = admit_trials(exp.resources)
    metric, mode = exp.search.metric, exp.search.mode
    objectives = Objectives.of(exp.search)
    search = make_search(exp, run_dir, sources=sources)
    policy = make_policy(exp)
    ledger = Ledger(run_dir, metric, mode, exp.search.num_samples, epochs_of(exp),
                    params_of=search.params_of, sinks=[ConsoleProgress(console), *(sinks or [])],
                    eta=eta_of(policy, admission.max_concurrent, exp.search.time_budget_s))
    if resume:
        _reconcile(search, ledger, policy, objectives, console)
    storage = storage_path(exp, run_dir)
    first = trial_bundles(exp.resources)[0]  # the trial's own process
    trainable = tune.with_resources(
        tune.with_parameters(run_trial, data=DataRef(ray.put(data)), exp=exp, storage=storage),
        {k.lower(): v for k, v in first.items()},
    )
    stopper = BudgetStopper(lambda: stop_if(ledger)) if stop_if else None
    t0 = time.perf_counter()
    try:
        if search.remaining:
            tuner = tune.Tuner(
                trainable,
                tune_config=tune.TuneConfig(
                    metric=metric, mode=mode,
                    search_alg=StudySearcher(search, metric, mode, epochs_of(exp),
                                             note=lambda s: console.print(s, highlight=False),
                                             objectives=objectives),
                    scheduler=RungScheduler(policy, objectives) if policy else FIFOScheduler(),
                    num_samples=search.remaining,
                    max_concurrent_trials=admission.max_concurrent,
                    time_budget_s=exp.search.time_budget_s,
                    # the trial process is reused, a data-parallel trial's too (its
                    # TorchTrainer, controller and workers are new each trial): a new
                    # Tune actor per data-parallel trial cost 4.1 s between trials here
                    reuse_actors=True,
                    trial_dirname_creator=lambda t: f"trial_{t.config.get(TRIAL_KEY)}",
                ),
                run_config=tune.RunConfig(
                    name="tune",
                    storage_path=storage,
                    # a trial whose process died (killed, or its node lost) is retried
                    # and continues from its checkpoint; a data-parallel trial's workers
                    # are also restarted inside Ray Train (its own FailureConfig), but its
                    # Tune process dies with its node like any other trial's; fail_fast
                    # stops at the first failure (Tune refuses it with retries)
                    failure_config=tune.FailureConfig(
                        max_failures=0 if exp.search.fail_fast
                        else exp.resources.max_failures,
                        fail_fast=exp.search.fail_fast,
                    ),
                    callbacks=[ledger],
                    stop=stopper,
                    verbose=0,
                ),
            )
            with no_tune_handler():  # Ctrl-C raises here, running trials stay RUNNING
                tuner.fit()
            if stopper is not None and stopper.stopped:
                end_budget_stopped(search, ledger, objectives)
    finally:
        ledger.close()
    wall = time.perf_counter() - t0
    store = TrialCheckpoints(storage)
    trials = [_record(t, exp, store) for n, t in sorted(ledger.trials.items())
              if t.end is not None or t.rows]
    ranked = rank_trials(trials, objectives)
    if policy is not None and (line := policy.note()):
        console.print(line, highlight=False)
    return SearchResult(metric, mode, trials, ranked, wall, admission.max_concurrent,
                        admission.trial_resources, duplicates=search.duplicates,
                        exhausted=search.exhausted, objectives=objectives.pairs(),
                        pareto=pareto_of(ranked, objectives),
                        rungs=policy.summary() if policy is not None else None)


def end_budget_stopped(search: StudySearch, ledger: Ledger, objectives: Objectives) -> None:
    """End the trials the job budget stopped while they ran (Tune stops them without a
    trial event): one that reported an epoch ends at its last report, ``stopped_early``
    (told PRUNED, as a rung's stop) or ``completed`` when it had run its epochs; one that
    reported nothing ``failed``. The reason says the budget ended them."""
    for number, t in sorted(ledger.trials.items()):
        if t.end is not None or not t.started:
            continue
        if not t.rows:
            search.end(number, FAILED)
            ledger.end(number, state=FAILED,
                       reason="the job budget ended the sweep before its first epoch")
            continue
        row = t.rows[-1]
        state = end_state(int(row["epoch"]), t.target or int(row["epoch"]))
        search.end(number, state, int(row["epoch"]), objectives.value(row),
                   objectives.constraint_map(row) or None)
        ledger.end(number, state=state, reason="the job budget ended the sweep")


def _reconcile(search: StudySearch, ledger: Ledger, policy, objectives: Objectives,
               console: Console) -> None:
    """Bring the study and the ledger of a killed sweep into one picture, and the rung
    policy to where it was.

    The study is told before the ledger writes (Tune calls the searcher first), so a kill
    between the two leaves ends the ledger lacks: they are written from the study. The
    policy replays every report the ledger holds, in order.
    """
    for number in search.finished:
        t = ledger.trials.get(number)
        if t is not None and t.end is None:
            ledger.end(number, state=search.state_of(number))
    replayed = 0
    if policy is not None:
        policy.replay((n, e, objectives.value(row), objectives.violation(row))
                      if objectives.constraints else (n, e, objectives.value(row))
                      for n, e, row in ledger.reports)
        replayed = len(ledger.reports)
    running = search.to_resume
    console.print(f"resume {len(search.finished)} trials finished, {len(running)} continue from "
                  f"their checkpoints ({', '.join(map(str, running)) or 'none'}), "
                  f"{max(0, search.remaining - len(running))} still to ask for; rungs rebuilt "
                  f"from {replayed} reports in trials.jsonl", highlight=False)


def _record(t: TrialLog, exp: Experiment, store: TrialCheckpoints) -> TrialRecord:
    """One ledger trial as a :class:`TrialRecord` (``history`` is its epochs 1..n;
    ``train_time_s`` sums them; ``setup_s`` is its first epoch's set-up)."""
    rows = t.rows
    try:
        cfg = TrialConfig.from_flat(t.config, exp, seed=exp.search.seed).to_dict()
    except (KeyError, ValueError):
        cfg = {}
    end = t.end or {"state": FAILED, "epochs": rows[-1]["epoch"] if rows else 0,
                    "reason": "the sweep ended while it ran", "error": None}
    last = rows[-1] if rows else {}
    return TrialRecord(
        trial_id=t.trial_id,
        params=dict(t.params),
        config=cfg,
        end_state=end["state"],
        epochs_run=int(last.get("epoch", 0)),
        target_epochs=int(t.target or cfg.get("epochs", 0)),
        metrics={k: float(last[k]) for k in (*KEPT, exp.search.metric) if k in last},
        history=rows,
        error=end.get("error"),
        reason=end.get("reason"),
        checkpoint=store.folder(t.number),
        train_time_s=float(np.sum([r.get("train_time_s", 0.0) for r in rows])),
        setup_s=float(rows[0].get("setup_s", 0.0)) if rows else 0.0,
    )
