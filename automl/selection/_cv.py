"""Cross-validated re-scoring of the search's top k on Ray, fold-level halving, the
winner, and the winner's refit on all training rows scored once on the test split."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from rich.console import Console

from automl._interrupt import check as check_interrupt
from automl._interrupt import interrupted
from automl._io import append_jsonl
from automl._progress import StageProgress
from automl.data import Dataset, Splits
from automl.errors import ResourceError, RunError
from automl.selection._folds import FoldPlan, make_folds
from automl.selection._front import choose_on_front
from automl.selection._schedule import AllOf, FoldSchedule
from automl.selection._scores import choose_winner, collapsed_folds, summarize_folds
from automl.selection._tasks import fit_predict, warm_up, with_scores
from automl.spec import CV_MIN_METRICS, Experiment

#: seconds one wait for fold trainings lasts at most before the interrupt flag is checked
WAIT_STEP_S = 1.0


@dataclass(frozen=True)
class CandidateCV:
    """One candidate's cross-validation: ``folds`` holds ``{fold, repeat, scores,
    train_time_s, epochs, rows, predicted_classes}`` per fold run (``rows``: its held-out
    rows; ``predicted_classes``: how many distinct classes it predicted there; both absent
    from results written before they were recorded); ``summary`` maps each metric to ``{mean, std,
    ci95, n, interval}`` (``automl.selection._scores.summarize``; ``interval`` absent:
    Student's t, from an older run); ``status`` is ``winner``, ``scored`` or ``dropped
    after fold 1``."""

    trial_id: str
    rank: int
    config: dict
    params: dict
    search_score: float | None
    n_params: int
    folds: list[dict]
    summary: dict
    status: str

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class CVResult:
    """The CV table, the winner and why, and what the cross-validation cost.

    ``compute`` counts fold trainings, their epochs and training seconds;
    ``halving`` (None unless ``selection.fold_halving``) says who was dropped after
    fold 1 and what that saved.
    """

    metric: str
    plan: dict
    candidates: list[CandidateCV]
    winner: str
    reason: str
    compute: dict
    halving: dict | None = None
    warnings: list[str] = field(default_factory=list)
    #: several objectives: the cross-validated front, one row per candidate
    #: (``automl.selection._front.choose_on_front``); None for one objective
    pareto: list[dict] | None = None

    @property
    def winner_candidate(self) -> CandidateCV:
        return next(c for c in self.candidates if c.trial_id == self.winner)

    def to_dict(self) -> dict:
        return {"metric": self.metric, "plan": self.plan, "winner": self.winner,
                "reason": self.reason, "compute": self.compute, "halving": self.halving,
                "warnings": self.warnings, "candidates": [c.to_dict() for c in self.candidates],
                "pareto": self.pareto}

    @classmethod
    def from_dict(cls, d: dict) -> CVResult:
        """The result :meth:`to_dict` wrote (``cv.json``)."""
        return cls(d["metric"], d["plan"], [CandidateCV(**c) for c in d["candidates"]],
                   d["winner"], d["reason"], d["compute"], d.get("halving"),
                   list(d.get("warnings", [])), d.get("pareto"))


def fold_demand(resources) -> dict[str, float]:
    """What one fold training holds: one worker's CPUs (and GPUs) from a ``ResourcesSpec``;
    folds train in one process, never as a data-parallel group."""
    demand = {"CPU": resources.cpus_per_worker}
    if resources.gpus_per_worker:
        demand["GPU"] = resources.gpus_per_worker
    return demand


class WarmFoldWorkers:
    """A sweep sink (``automl.search.TrialSink``) that readies the cross-validation's
    workers in the sweep's tail.

    Once every trial of the sweep has started, a slot a trial frees stays idle until the
    sweep ends. Into each such slot (at most ``slots``) it sends one Ray task of a fold
    training's shape (:func:`fold_demand`) that only imports torch and the training code
    (:func:`automl.selection._tasks.warm_up`). Ray keeps a finished task's worker for the
    next task, so the first fold trainings start in a worker that has already paid the
    imports (about 2 s a new worker on a 2-core machine, measured). It sends nothing while
    trials still wait for a slot, so no trial is held up; ``close`` drops the task
    handles. Sweeps of data-parallel trials are not readied (their workers are Ray
    Train's).

    Attributes:
        sent: how many warm-up tasks went out.
    """

    def __init__(self, resources, slots: int):
        self.demand = fold_demand(resources)
        self.slots = int(slots)
        self.sent = 0
        self._refs: list = []

    def start(self, trial, sweep) -> None:
        pass

    def log(self, trial, row, sweep) -> None:
        pass

    def finish(self, trial, sweep) -> None:
        if sweep.done + sweep.running < sweep.total:
            return  # trials still wait for this slot
        free = min(self.slots, self.slots - sweep.running) - self.sent
        if free <= 0:
            return
        import ray

        remote = ray.remote(warm_up).options(num_cpus=self.demand["CPU"],
                                             num_gpus=self.demand.get("GPU", 0.0),
                                             max_retries=0)
        self._refs += [remote.remote() for _ in range(free)]
        self.sent += free

    def close(self, sweep) -> None:
        self._refs.clear()


def _admit(exp: Experiment):
    """Fold concurrency from the search's admission control (fails fast when a fold can
    never be placed), capped by ``resources.concurrent_trials``."""
    from automl.cluster import admit

    return admit(fold_demand(exp.resources), exp.resources.concurrent_trials)


def _fits_on_a_node(cpus: float) -> bool:
    """Whether one task of ``cpus`` CPUs can be placed on some node of the cluster."""
    from automl.cluster import admit

    try:
        admit({"CPU": cpus}, 1)
    except ResourceError:
        return False
    return True


def _run_tasks(data_ref, schedule, job_of, *, labels: np.ndarray, num_classes: int,
               resources, limit: int, deadline: float, impute, keep_model: bool = False,
               on_done=None, cpus: float | None = None, task: str = "classification") -> dict:
    """Run ``fit_predict`` as Ray tasks, at most ``limit`` at once, in the order
    ``schedule`` (a :class:`~automl.selection._schedule.FoldSchedule` or ``AllOf``) gives,
    all finished by ``deadline`` (``time.monotonic``), and score each result here
    (``with_scores`` against ``labels[eval_idx]``, ``num_classes`` classes: what
    ``fit_and_score`` returns). ``job_of(key)`` is the job's ``(config, train_idx,
    eval_idx)``; ``on_done(key, result)`` is called for each result as it comes to count. A
    running job the schedule no longer wants (a speculative fold of a candidate fold
    halving dropped) is interrupted (``ray.cancel(force=False)``: the worker stays for the
    next task). ``cpus``: the CPUs (and torch threads) each job holds
    instead of one worker's. Returns ``schedule.results``."""
    import ray

    demand = fold_demand(resources)
    cpus, gpus = cpus or demand["CPU"], demand.get("GPU", 0.0)
    remote = ray.remote(fit_predict).options(num_cpus=cpus, num_gpus=gpus, max_retries=0)
    pending: dict = {}
    try:
        while True:
            while len(pending) < limit:
                key = schedule.next(set(pending.values()))
                if key is None:
                    break
                cfg, tr, ev = job_of(key)
                ref = remote.remote(data_ref, cfg, tr, ev, impute=impute, cpus=cpus, gpus=gpus,
                                    precision=resources.precision, keep_model=keep_model)
                pending[ref] = key
            if schedule.finished():
                break
            if not pending:  # a schedule that offers nothing yet is not finished: a bug
                raise RunError("cross-validation's schedule stalled with folds left to train",
                               where="selection")
            left = deadline - time.monotonic()
            # in steps of at most a second: on the refit's thread no Ctrl-C reaches ray.wait
            done, _ = ray.wait(list(pending), num_returns=1,
                               timeout=min(max(left, 0.0), WAIT_STEP_S))
            check_interrupt()
            if not done and time.monotonic() < deadline:
                continue
            if not done:
                raise RunError(f"cross-validation did not finish in time ({len(pending)} fold "
                               f"trainings running)", where="selection.timeout_s",
                               fix="raise selection.timeout_s or lower cv_folds / top_k")
            for ref in done:
                key = pending.pop(ref)
                try:
                    result = ray.get(ref, timeout=60)
                except ray.exceptions.RayError as e:
                    if not schedule.wanted(key):
                        continue
                    last = str(e).strip().splitlines()[-1] if str(e).strip() else repr(e)
                    raise RunError(f"training trial {key[0]} on fold {key[1]} failed: {last}",
                                   where="selection") from None
                result = with_scores(result, labels[job_of(key)[2]], num_classes,
                                     keep_pred=keep_model, task=task)
                for k, r in schedule.record(key, result):
                    if on_done is not None:
                        on_done(k, r)
            for ref in [r for r, k in pending.items() if not schedule.wanted(k)]:
                ray.cancel(ref, force=False)  # a dropped candidate's speculative fold: the
                schedule.cancel(pending.pop(ref))  # slot frees now, the worker stays
    finally:
        # after a Ctrl-C the job stops its Ray (or leaves the cluster), which ends these
        # tasks; cancelling them here raced their replies and Ray's core worker aborted
        # the driver ("Tried to complete task that was not pending": ray#54846, the race
        # ray#54798 fixed on the retry side), so the interrupted job exited 1, not 130
        if not interrupted():
            for ref in pending:
                ray.cancel(ref, force=True)
    return schedule.results


def cross_validate(
    exp: Experiment,
    data: Dataset,
    pool: np.ndarray,
    candidates: Sequence,
    *,
    admission=None,
    console=None,
    folds_log: Path | None = None,
    publish=None,
    eta_s: float | None = None,
) -> CVResult:
    """Re-score ``candidates`` (``TrialRecord``s, best first) by stratified k-fold CV.

    Each fold trains the candidate's config from scratch for its full ``epochs`` on
    the fold's training rows (preprocessing fitted there only) and scores the fold's
    validation rows. Folds run as Ray tasks (one worker's ``resources.cpus_per_worker``
    CPUs and ``gpus_per_worker`` GPUs each; at most as many at once as
    :func:`automl.search.admit` allows within ``resources.concurrent_trials``); the
    dataset is put in the object store once. With ``selection.fold_halving`` every
    candidate runs fold 1 and only those within ``selection.halving_margin`` of the
    fold-1 leader run the rest (one objective only: with several, a candidate behind on
    accuracy may be the front's cheapest, so every candidate runs every fold). Several
    objectives: the winner is chosen on the cross-validated front
    (:func:`automl.selection._front.choose_on_front`, ``selection.pick``).

    Args:
        pool: the rows to cross-validate on (train + validation; never the test split).
        folds_log: a JSON-lines file each finished fold training is appended to; the
            folds it already holds (same candidate config, fold plan and fold) are not
            trained again, so a run killed during cross-validation continues at the first
            unscored fold.
        publish: ``(stage, done, total, eta, elapsed_s)`` of the fold trainings goes there
            as each finishes (Prometheus gauges, the history of estimates:
            ``automl._progress.Publish``); the console shows the same
            (:class:`automl._progress.StageProgress`).
        eta_s: an estimate of the whole stage before a fold has finished, seconds (shown
            with ``automl._progress.PRIOR_RANGE`` around it).

    Raises:
        DataError: a class has fewer rows than folds (see :func:`make_folds`).
        ResourceError: a fold can never be placed on the cluster.
        RunError: a fold failed, or CV ran past ``selection.timeout_s``.
    """
    import ray

    sel = exp.selection
    plan = make_folds(data.y, pool, sel.cv_folds, sel.cv_repeats, exp.data.seed,
                      allow_fewer=sel.allow_fewer_folds, classes=data.classes,
                      task=data.task)
    for w in plan.warnings:
        if console is not None:
            console.print(f"warning: {w}", style="yellow")
    if admission is None:
        admission = _admit(exp)
    if not candidates:
        raise RunError("no candidate to cross-validate", where="selection.top_k")
    for c in candidates:
        if not c.config:
            raise RunError(f"trial {c.trial_id} has no config to retrain", where="selection")
    t0, deadline = time.perf_counter(), time.monotonic() + sel.timeout_s
    data_ref = ray.put(data)
    signature = plan_signature(plan)
    configs = {c.trial_id: c.config for c in candidates}
    results = _read_folds(folds_log, signature, configs)
    if results and console is not None:
        console.print(f"cv     {len(results)} fold trainings done before the resume, kept",
                      highlight=False)

    n = len(plan.folds)
    epochs = {c.trial_id: int(c.config.get("epochs", 1)) for c in candidates}
    todo = [(c.trial_id, i) for c in candidates for i in range(n) if (c.trial_id, i) not in results]
    bar = StageProgress(console or Console(quiet=True), "cv", len(todo),
                        work=sum(epochs[t] for t, _ in todo), eta_s=eta_s, publish=publish,
                        slots=admission.max_concurrent)

    def log_fold(key, result) -> None:
        if folds_log is not None:
            append_jsonl(folds_log, {"trial_id": key[0], "fold": key[1], "plan": signature,
                                     "config": configs[key[0]], "result": result})
        bar.step(f"trial {key[0]} fold {key[1] + 1}: {sel.metric} "
                 f"{result['scores'][sel.metric]:.4f}", work=epochs[key[0]])

    halve = sel.fold_halving and not exp.search.multi_objective
    sign = -1 if sel.metric in CV_MIN_METRICS else 1  # rmse, mae: smaller is better
    schedule = FoldSchedule(list(configs), n, halve=halve, margin=sel.halving_margin,
                            epochs=epochs, metric=sel.metric, done=results, sign=sign)
    decided, logged = [schedule.survivors is not None], set()

    def on_done(key, result) -> None:
        if not decided[0] and schedule.survivors is not None:  # fold 1 just decided
            decided[0] = True
            left = [(c, i) for c in schedule.survivors for i in range(n)
                    if (c, i) in todo and (c, i) not in logged]
            bar.resize(bar.done + len(left), bar.work_done + sum(epochs[c] for c, _ in left))
        logged.add(key)
        log_fold(key, result)

    try:
        results = _run_tasks(data_ref, schedule, lambda k: (configs[k[0]], *plan.folds[k[1]]),
                             labels=data.y, num_classes=data.num_classes,
                             resources=exp.resources, limit=admission.max_concurrent,
                             deadline=deadline, impute=exp.data.impute, on_done=on_done,
                             task=data.task)
    finally:
        bar.close()
    halving = None
    if halve:  # (with one candidate or one fold nothing is dropped)
        score1 = {c: schedule.score1(c) for c in configs}
        kept = set(schedule.survivors)
        halving = {"margin": sel.halving_margin,
                   "fold1_leader": schedule.leader or max(configs,
                                                          key=lambda c: sign * score1[c]),
                   "fold1_scores": score1,
                   "dropped": [c.trial_id for c in candidates if c.trial_id not in kept],
                   "speculative_discarded": schedule.wasted}
    wall = time.perf_counter() - t0

    rows = []
    for rank, c in enumerate(candidates, 1):
        folds = [{"fold": i % plan.n_folds + 1, "repeat": i // plan.n_folds + 1,
                  "scores": results[(c.trial_id, i)]["scores"],
                  "train_time_s": results[(c.trial_id, i)]["train_time_s"],
                  "epochs": results[(c.trial_id, i)]["epochs"],
                  "rows": results[(c.trial_id, i)].get("n_eval"),
                  "predicted_classes": results[(c.trial_id, i)].get("predicted_classes")}
                 for i in range(n) if (c.trial_id, i) in results]
        search_score = c.metrics.get(exp.search.metric)
        rows.append(dict(trial_id=c.trial_id, rank=rank, config=c.config, params=c.params,
                         search_score=search_score,
                         n_params=results[(c.trial_id, 0)]["n_params"], folds=folds,
                         summary=summarize_folds(folds, data.task)))
    eligible = [{"trial_id": r["trial_id"], "mean": r["summary"][sel.metric]["mean"],
                 "n_params": r["n_params"], "rank": r["rank"]}
                for r in rows if len(r["folds"]) == n]
    pareto = None
    if exp.search.multi_objective:
        winner, reason, pareto = choose_on_front(
            exp, rows, {c.trial_id: c.metrics for c in candidates},
            {e["trial_id"] for e in eligible})
    else:
        winner, reason = choose_winner(eligible, sel.tie_tolerance, sign=sign)
        reason = f"{sel.metric}: {reason}"
    done = {e["trial_id"] for e in eligible}
    table = [CandidateCV(**r, status="winner" if r["trial_id"] == winner
                         else "scored" if r["trial_id"] in done else "dropped after fold 1")
             for r in rows]
    compute = _compute(results, wall)
    if halving is not None:
        per_fold = {c.trial_id: results[(c.trial_id, 0)] for c in candidates}
        skipped = [(t, n - 1) for t in halving["dropped"]]
        halving.update({
            "fold_trainings_skipped": sum(k for _, k in skipped),
            "fold_epochs_skipped": sum(per_fold[t]["epochs"] * k for t, k in skipped),
            "train_time_s_saved_est": round(
                sum(per_fold[t]["train_time_s"] * k for t, k in skipped), 3),
            "winner_is_fold1_leader": winner == halving["fold1_leader"],
        })
        full = compute["fold_epochs"] + halving["fold_epochs_skipped"]
        halving["epochs_saved_fraction"] = round(halving["fold_epochs_skipped"] / full, 4)
    warnings = [*plan.warnings, *collapsed_folds(rows, data.num_classes)]
    return CVResult(sel.metric, plan.to_dict(), table, winner, reason, compute, halving,
                    warnings, pareto)


def plan_signature(plan: FoldPlan) -> str:
    """sha256 (16 hex digits) of a fold plan's validation rows, fold by fold."""
    h = hashlib.sha256()
    for _, val in plan.folds:
        h.update(np.asarray(val, dtype=np.int64).tobytes())
        h.update(b"|")
    return h.hexdigest()[:16]


def _read_folds(path: Path | None, signature: str, configs: dict) -> dict:
    """Fold results of an earlier attempt (``folds_log``) that still apply: same plan,
    same candidate config. A torn last line (a killed driver) is skipped."""
    out: dict = {}
    if path is None or not Path(path).is_file():
        return out
    for line in Path(path).read_text().splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        tid = rec.get("trial_id")
        if rec.get("plan") == signature and configs.get(tid) == rec.get("config"):
            out[(tid, int(rec["fold"]))] = rec["result"]
    return out


def _compute(results: dict, wall: float) -> dict:
    return {"fold_trainings": len(results),
            "fold_epochs": int(sum(r["epochs"] for r in results.values())),
            "train_time_s": round(sum(r["train_time_s"] for r in results.values()), 3),
            "wall_time_s": round(wall, 3)}


def refit_and_test(
    exp: Experiment, data: Dataset, splits: Splits, config: dict, *, admission=None,
    teacher: bool = False, alone: bool = True,
) -> dict:
    """Retrain ``config`` on every training row (``splits.pool``: train + validation,
    preprocessing fitted there) as one Ray task and score it once on ``splits.test``.

    With ``teacher``, a second task trains the same config on ``splits.train`` alone and
    scores ``splits.val`` at the same time (when admission allows two at once): the
    compression chain's teacher, which must not have seen the validation rows its
    accuracy-drop guard reads. Its ``fit_and_score(keep_model=True)`` result is
    ``["teacher"]``. Without ``teacher``, on the CPU, the lone refit holds two workers'
    CPUs (and torch threads) when admission runs two trials at once: a 170k-parameter
    ResNet's refit on digits took 8.1-8.9 s on 2 threads against 12.1-12.5 s on 1 (2-core
    machine, idle). ``alone=False``: it holds one worker's, as a fold does (the main job
    compresses in the driver beside it).

    Returns:
        ``{"checkpoint": dict (``TrainState.checkpoint`` format), "preprocessor": the
        ``ColumnTransformer`` fitted on ``splits.pool`` (None for image data),
        "environment": where the refit trained (``automl.determinism.environment``), "test":
        {scores..., "loss", "rows", "train_rows"}, "confusion_matrix": {"classes",
        "matrix"}}``;
        ``matrix[i][j]`` counts test rows of class ``i`` predicted as ``j``.

    Raises:
        RunError: the training failed or ran past ``selection.timeout_s``.
    """
    import ray
    from sklearn.metrics import confusion_matrix

    if admission is None:
        admission = _admit(exp)  # fails fast when the refit can never be placed
    rows = {("refit", "all"): (splits.pool, splits.test)}
    if teacher:
        rows[("teacher", "train")] = (splits.train, splits.val)
    wide = (alone and not teacher and admission.max_concurrent >= 2 and not exp.resources.gpus_per_worker
            and not exp.resources.distributed and _fits_on_a_node(2 * exp.resources.cpus_per_worker))
    done = _run_tasks(ray.put(data), AllOf(rows), lambda k: (config, *rows[k]),
                      labels=data.y, num_classes=data.num_classes, resources=exp.resources,
                      limit=min(len(rows), admission.max_concurrent),
                      deadline=time.monotonic() + exp.selection.timeout_s,
                      impute=exp.data.impute, keep_model=True,
                      cpus=2 * exp.resources.cpus_per_worker if wide else None, task=data.task)
    out = done[("refit", "all")]
    test = {**out["scores"], "loss": out["loss"], "rows": out["n_eval"],
            "train_rows": out["n_train"], "train_time_s": out["train_time_s"]}
    if data.task != "classification":  # no classes: the residuals' summary instead
        err = np.asarray(out["y_pred"], dtype=float) - data.y[splits.test].astype(float)
        return {"checkpoint": out["checkpoint"], "preprocessor": out["preprocessor"],
                "test": test, "environment": out["environment"],
                "teacher": done.get(("teacher", "train")), "confusion_matrix": None,
                "residuals": {"mean": float(err.mean()), "std": float(err.std()),
                              "abs_p90": float(np.quantile(np.abs(err), 0.9)),
                              "max_abs": float(np.abs(err).max())}}
    matrix = confusion_matrix(data.y[splits.test], out["y_pred"],
                              labels=list(range(data.num_classes)))
    test["f1"] = out["scores"]["f1_macro"]
    return {"checkpoint": out["checkpoint"], "preprocessor": out["preprocessor"], "test": test,
            "environment": out["environment"], "teacher": done.get(("teacher", "train")),
            "confusion_matrix": {"classes": list(data.classes), "rows": "true class",
                                 "columns": "predicted class", "matrix": matrix.tolist()}}


__all__ = ["CVResult", "CandidateCV", "FoldPlan", "cross_validate", "fold_demand",
           "refit_and_test"]
