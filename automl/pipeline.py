"""The main job, stage by stage: data -> search -> cross-validation -> refit on the
held-out test split -> compression -> registry and tracking.

Each stage returns a frozen result, saved in ``<run_dir>/stages/<name>.json`` (atomically);
the next stage, a resumed run, the report and the registry read those. ``summary.json``
is composed from them (:func:`compose_summary`), so a reader needs nothing else.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from automl._interrupt import check as check_interrupt
from automl._io import write_json, write_text
from automl._progress import ETA_FILE, EtaHistory, StageProgress, read_eta_history
from automl.budget import JobBudget, candidate_of
from automl.errors import DataError, ResourceError, RunError, SpecError
from automl.prepare import Prepared, prepare
from automl.search import Objectives, cv_candidates
from automl.search._result import SearchResult
from automl.selection._cv import CVResult
from automl.spec import Experiment
from automl.task import task_of

#: the folder of a run directory that holds each finished stage's result
STAGES = "stages"
#: seconds the compression waits at most for the import warm-up started before Ray
#: (automl.compress._warm; 1.4-1.5 s measured): it is correct without it, only slower
WARM_JOIN_S = 60.0


def choose_run_dir(exp: Experiment, output: str | None, name: str | None) -> Path:
    """``<output>/<name>``; without an explicit name, the spec's name with ``-2``, ``-3``...
    appended when taken. An explicit name that is taken is an error (nothing is overwritten).

    Raises:
        SpecError: ``name`` would escape the output folder, or is already used.
        ResourceError: the output folder cannot be created or written.
    """
    root = Path(output or exp.output.dir)
    if name is not None:
        if not name or "/" in name or "\\" in name or name.startswith(".") or name in ("..",):
            raise SpecError(f"run name {name!r} must be a plain folder name", where="--name")
        run_dir = root / name
        if run_dir.exists() and any(run_dir.iterdir()):
            raise SpecError(f"run directory {run_dir} already exists", where="--name",
                            fix="choose another --name or remove that directory")
    else:
        run_dir, n = root / exp.name, 1
        while run_dir.exists() and any(run_dir.iterdir()):
            n += 1
            run_dir = root / f"{exp.name}-{n}"
    # probe the nearest existing folder: nothing is created before the run really starts
    probe_dir = root
    while not probe_dir.exists() and probe_dir != probe_dir.parent:
        probe_dir = probe_dir.parent
    try:
        if not probe_dir.is_dir():
            raise NotADirectoryError(20, "not a directory")
        probe = probe_dir / f".automl-write-test-{os.getpid()}"
        probe.write_text("ok")
        probe.unlink()
    except OSError as e:
        raise ResourceError(f"cannot write to the output folder: {e.strerror}", where=str(root),
                            fix="pass --output to a writable folder") from None
    return run_dir


#: CPUs kept free of trials for Ray Data's tasks when the data stream
STREAM_CPUS = 1.0


def check_same_data(run_dir: Path, data_info: dict) -> None:
    """A resumed run must see the data it started with (same sha256).

    Raises:
        DataError: the data changed since the run started.
    """
    before = json.loads((run_dir / "data.json").read_text()) if (run_dir / "data.json").exists() else {}
    if before.get("sha256") and before["sha256"] != data_info.get("sha256"):
        raise DataError(
            f"data changed since this run started (sha256 {before['sha256'][:12]} -> "
            f"{data_info['sha256'][:12]})", where=str(run_dir / "data.json"),
            fix="start a new run instead of resuming",
        )


def find_unfinished(exp: Experiment, output: str | None, name: str | None) -> Path:
    """The run directory ``automl search SPEC --resume`` continues: ``<output>/<name>``, or
    the most recent run of the spec's name (``name``, ``name-2``, ...) without a summary
    (``summary.json``); when all have one, the most recent run, which says it finished.

    Raises:
        SpecError: no such run directory.
    """
    root = Path(output or exp.output.dir)
    if name is not None:
        cands = [root / name]
    else:
        cands = [p for p in root.glob(f"{exp.name}*")
                 if p.name == exp.name or p.name.removeprefix(exp.name + "-").isdigit()]
    cands = [p for p in cands if (p / "spec.yaml").exists()]
    if not cands:
        raise SpecError(f"no run of '{name or exp.name}' to resume in {root}", where="--resume",
                        fix="check --output/--name, or start a new run without --resume")
    # the newest unfinished run; when every run has finished, the newest (which says so)
    unfinished = [p for p in cands if not (p / "summary.json").exists()]
    return max(unfinished or cands, key=lambda p: p.stat().st_mtime)


def check_storage(exp: Experiment, nodes: int) -> None:
    """On a cluster of several nodes, trial checkpoints must go where every node can
    write and the driver can read: a storage URI or a declared shared filesystem.

    Raises:
        ResourceError: more than one node and a node-local output folder.
    """
    if nodes > 1 and not (exp.output.storage_uri or exp.output.shared):
        raise ResourceError(
            f"the cluster has {nodes} nodes but output.dir '{exp.output.dir}' is local to "
            "this node", where="output",
            fix="set output.storage_uri (s3://..., gs://...) or output.shared: true "
                "if that folder is a shared filesystem",
        )


def spec_hash(exp: Experiment) -> str:
    """sha256 of the resolved spec (canonical JSON), for lineage."""
    return hashlib.sha256(json.dumps(exp.to_dict(), sort_keys=True).encode()).hexdigest()


def start_run_dir(exp: Experiment, run_dir: Path, info: dict) -> None:
    """Create the run directory with its ``spec.yaml`` (the resolved spec), ``data.json``
    (what the data were: checksum, sizes, cleaning) and, when the spec names the user's
    own model, ``user_models.json`` (its import path, folder, version and source sha256)."""
    import yaml

    run_dir.mkdir(parents=True, exist_ok=True)
    write_text(run_dir / "spec.yaml", yaml.safe_dump(exp.to_dict(), sort_keys=False))
    write_json(run_dir / "data.json", info)
    if exp.user_code():  # where the user's model came from (automl.models.user)
        from automl.models.user import write_record

        write_record(run_dir, exp)


class Stages:
    """The main job's stages, each finished one saved as ``stages/<name>.json``
    (``{"stage", "wall_s", "finished_at", "result"}``, the stage's frozen result as JSON).
    On resume a stage whose file exists is not run again: its saved result is used."""

    def __init__(self, run_dir: Path, resume: bool, console: Console):
        self.dir, self.resume, self.console = Path(run_dir) / STAGES, resume, console

    def saved(self, name: str) -> dict | None:
        path = self.dir / f"{name}.json"
        if not path.is_file():
            return None
        try:
            return json.loads(path.read_text())
        except ValueError:  # written atomically, so only a hand-edit gets here
            return None

    def run(self, name: str, fn, load=None):
        """``fn()`` (returns an object with ``to_dict()``, or a dict), or, on resume, the
        result this stage saved before (``load(dict)`` rebuilds the object)."""
        rec = self.saved(name) if self.resume else None
        if rec is not None:
            self.console.print(f"resume stage {name} finished before ({rec['wall_s']:.0f} s); "
                               "kept", highlight=False)
            return load(rec["result"]) if load else rec["result"]
        t0 = time.perf_counter()
        result = fn()
        check_interrupt()  # a stage counts as finished only when it ended by itself
        data = result.to_dict() if hasattr(result, "to_dict") else result
        write_json(self.dir / f"{name}.json", {
            "stage": name, "wall_s": round(time.perf_counter() - t0, 3),
            "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "result": data})
        return result


def run_main_job(
    exp: Experiment,
    run_dir: Path,
    *,
    address: str | None = None,
    console: Console | None = None,
    dashboard_host: str = "127.0.0.1",
    dashboard_port: int = 8265,
    metrics_port: int | None = None,
    resume: bool = False,
    prepared: Prepared | None = None,
    init_weights: dict | None = None,
    transfer_sources: tuple = (),
) -> dict:
    """Load and clean data, run the search on Ray, cross-validate the top k, retrain the
    winner on all training rows (train + validation) and score it once on the test split,
    compress it, register and log it.

    Each stage hands the next a frozen result, saved in ``stages/`` (:class:`Stages`);
    ``summary.json`` is composed from them (:func:`compose_summary`). With ``resume``,
    ``run_dir`` is an unfinished run (its driver was killed): the Ray instance it left is
    stopped, finished stages are kept, the search continues from the run directory
    (:func:`automl.search.run_search`), cross-validation at its first unscored fold.

    Args:
        prepared: the data, when a caller (the nightly driver) loaded them already.
        init_weights: ``{"arch", "state_dict"}`` that trials of that architecture start
            from (transfer learning; ``automl.models.load_matching_weights``).
        transfer_sources: earlier studies the sampler transfers from
            (``automl.search._transfer.SourceStudy``; the nightly driver reads them).

    Returns:
        The summary dict also written to ``<run_dir>/summary.json``.

    Raises:
        DataError: the data cannot be loaded, or a class is too small for the split or
            the folds (before Ray starts), or the data changed since a resumed run started.
        ResourceError: trials cannot be placed.
        RunError: no trial finished, cross-validation failed or timed out, or the resumed
            run's driver is still alive.
    """
    from automl import _interrupt, cluster

    console = console or Console()
    t0 = time.perf_counter()
    if not _interrupt.interrupted():  # (the CLI's handler cleared it when the job began)
        _interrupt.clear()
    beside: _Beside | None = None  # the refit on a thread beside the compression
    lock = threading.Lock()  # Ray's stop against the stage metrics published meanwhile
    if resume:
        line = cluster.stop_leftover(run_dir)
        if line:
            console.print(line, highlight=False)
        _use_recorded_code(run_dir, console)
    prepared = prepared or prepare(exp, console)
    exp = prepared.exp or exp  # the task decided (a table's target decides an unset one)
    dataset, splits, data_info = prepared.dataset, prepared.splits, prepared.info
    if resume:
        check_same_data(run_dir, data_info)
    stages = Stages(run_dir, resume, console)
    console.print("ray    connecting to the cluster..." if address else
                  "ray    starting a local instance...", highlight=False)
    # the compression's first-call imports, while ray.init leaves the cores half idle
    from automl.compress._warm import modules_for, warm_up

    warmer = warm_up(modules_for(exp.compression))
    t_ray = time.perf_counter()
    handle = cluster.connect(address, exp.resources.num_cpus, exp.resources.object_store_mb,
                             dashboard_host=dashboard_host, dashboard_port=dashboard_port,
                             metrics_export_port=metrics_port, py_modules=_user_code(exp),
                             spill_dir=str(run_dir / "spill") if prepared.scan else None)
    try:
        console.print(f"ray    {'started locally' if handle.started else 'connected'} in "
                      f"{time.perf_counter() - t_ray:.1f}s"
                      + (f"; dashboard {handle.dashboard_url}" if handle.dashboard_url else "")
                      + (f"; metrics {handle.metrics_url}" if handle.metrics_url else ""))
        # admission before anything is written: an impossible request leaves no run dir
        cluster.admit_data_parallel(exp.resources, handle)
        # streaming: CPUs kept back for Ray Data's tasks, which run outside the trials'
        # and folds' own (tasks holding every CPU starve them: ray#29662, ray#24304)
        cluster.keep_cpus(STREAM_CPUS if prepared.scan is not None else 0.0)
        admission = cluster.admit_trials(exp.resources)
        check_storage(exp, admission.nodes)
        data_info = {**data_info, **prepared.ready(exp, console,
                                                     admission.max_concurrent)}  # a stream's cache
        if not (run_dir / "spec.yaml").exists():
            start_run_dir(exp, run_dir, data_info)
        cluster.record_instance(run_dir, handle)
        from automl.tracking import wandb_target
        from automl.tracking._sinks import WandbTrials, sweep_sinks

        def note(line: str) -> None:
            console.print(line, highlight=False, markup=False)

        target = wandb_target(exp, run_dir, note)
        history = EtaHistory(run_dir / ETA_FILE)  # the estimates, for summary.json
        sinks = [*sweep_sinks(exp, run_dir, target, note), history]
        budget = JobBudget(exp, len(splits.train), len(splits.pool), admission.max_concurrent,
                           t0, clock=time.perf_counter)
        gauges = _stage_publisher(sinks)
        publish = _both(history, gauges)
        # the sweep's tail readies the CV's workers (not with data-parallel trials)
        from automl.selection import WarmFoldWorkers

        warm = [] if exp.resources.distributed else [
            WarmFoldWorkers(exp.resources, admission.max_concurrent)]
        result = stages.run("search", lambda: _search(exp, prepared, run_dir, admission,
                                                      console, [*sinks, *warm], init_weights,
                                                      resume, budget, transfer_sources),
                            load=SearchResult.from_dict)
        # a W&B server lost mid-sweep moved its sink offline: the winner logs there too
        target = next((s.sink.target for s in sinks if isinstance(getattr(s, "sink", None),
                                                                   WandbTrials)), target)
        write_json(run_dir / "trials.json", [t.to_dict() for t in result.trials])
        top = cv_candidates(result.ranked, result.pareto, Objectives.of(exp.search),
                            exp.selection.top_k)
        leaderboard = [_row(t, result.metric, result.objectives) for t in top]
        write_json(run_dir / "leaderboard.json", leaderboard)
        if result.best is None:
            raise RunError(f"no trial finished ({result.counts()}); see {run_dir}/trials.json",
                           where=str(run_dir))
        print_leaderboard(console, leaderboard, result.metric)
        cands = [candidate_of(t.history, t.target_epochs, len(splits.train)) for t in top]
        cands = [c for c in cands if c is not None]
        top_k, folds = budget.fit_cv(cands)
        for line in budget.notes:
            console.print(line, highlight=False)
        cv_exp = exp.model_copy(update={"selection": exp.selection.model_copy(
            update={"top_k": top_k, "cv_folds": folds})})
        cv = stages.run("cv", lambda: _cross_validate(
            cv_exp, dataset, splits, top[:top_k], run_dir, console, publish,
            eta_s=budget.cv_s(cands, folds, top_k) if cands else None), load=CVResult.from_dict)
        if cv.pareto:
            print_front(console, cv.pareto)
        # The compression teacher: the winner's own sweep trial when it can be. Then the
        # refit (a Ray task) runs on a thread beside the compression (in this process, on
        # the other slot's core) and Ray stops after it; else the teacher trains beside
        # the refit and the compression follows.
        winner = cv.winner_candidate
        won = next((t for t in result.trials if t.trial_id == winner.trial_id), None)
        teach = (exp.compression.enabled and bool(exp.compression.stages)
                 and prepared.scan is None)
        # a data-parallel trial's checkpoint may hold FSDP shards: its teacher is retrained
        own = _trial_teacher(won, winner.config) if teach and not exp.resources.distributed \
            else None
        held: dict = {"teacher": own} if own else {}
        done_before = resume and any(stages.saved(n) for n in ("refit", "compression"))
        # one rule with the budget's estimate: compression on, two slots, not data-parallel
        if own and not done_before and budget.refit_beside_compression:
            beside = _Beside(
                lambda: stages.run("refit", lambda: _refit(
                    exp, dataset, splits, cv, result, run_dir, console, publish, budget,
                    held, alone=False, live=False)),
                then=lambda: _stop_ray(handle, run_dir, lock))
        else:
            refit = stages.run("refit", lambda: _refit(exp, dataset, splits, cv, result,
                                                       run_dir, console, publish, budget,
                                                       held, teacher=teach and not own))
    finally:
        if prepared.scan is not None and handle.started:  # what the local store spilled
            data_info = {**data_info, "spill_dir": str(run_dir / "spill"),
                         "spilled_bytes": cluster.spilled_bytes(handle.session_dir)}
        if beside is None:
            _stop_ray(handle, run_dir, lock)
        cluster.keep_cpus(0.0)
    from automl.compress.job import compress_step  # the spec's chain, on the winner

    wc = candidate_of(won.history, won.target_epochs, len(splits.train)) if won else None
    comp_exp = exp
    if prepared.scan is not None and exp.compression.enabled:  # Ray stopped: no stream
        console.print("compress skipped: the compression chain reads its rows in memory and "
                      "this run's data stream from a cache (data.streaming); the winner is "
                      "best/model.pt", highlight=False)
        comp_exp = exp.model_copy(update={"compression": exp.compression.model_copy(
            update={"enabled": False})})
    elif wc is not None:
        notes = len(budget.notes)
        comp_exp = exp.model_copy(update={"compression": budget.fit_compression(wc)})
        for line in budget.notes[notes:]:
            console.print(line, highlight=False)
    if warmer is not None:  # done long before, in a run of any length: bounded anyway
        warmer.join(timeout=WARM_JOIN_S)
    try:
        stages.run("compression", lambda: compress_step(
            comp_exp, dataset, splits, run_dir, console=console,
            publish=_both(history, _while_up(gauges, lock)),
            eta_s=budget.compression_s(wc, comp_exp.compression) if wc else None,
            teacher_fit=held.get("teacher"), winner_ready=beside and beside.wait,
            cv_accuracy=(winner.summary.get(task_of(exp.task).guard_metric) or {}).get(
                "mean")) or {})
    except KeyboardInterrupt:  # e.g. in a notebook, where no handler of ours saw it
        _interrupt.mark()  # the refit's thread stops at its next wait (within a second)
        raise
    finally:
        if beside is not None:  # the refit's result (or its error), Ray stopped after it
            refit = beside.result()
    from automl.publish import publish as publish_run

    summary = compose_summary(exp, run_dir, data_info)
    stages.run("publish", lambda: publish_run(exp, run_dir, summary, target, console))
    wall = time.perf_counter() - t0
    summary = compose_summary(exp, run_dir, data_info, wall_time_s=wall,
                              budget=budget.record(wall))
    s = winner.summary[cv.metric]
    test = refit["test"]
    console.print(
        f"winner trial {winner.trial_id} (search rank {winner.rank}): CV {cv.metric} "
        f"{s['mean']:.4f} ± {s['std']:.4f}; retrained on {test['train_rows']} rows, "
        f"test {_scores_text(test, exp.task)}"
        + (f", {cv.metric}={test[cv.metric]:.4f}"
           if cv.metric not in task_of(exp.task).headline else "")
        + "; trials " + ", ".join(f"{n} {state.replace('_', ' ')}" for state, n in
                                  summary["trials"].items() if state != "total")
        + f" of {summary['trials']['total']}; "
        f"wall {summary['wall_time_s']:.0f}s; summary {run_dir / 'summary.json'}", highlight=False
    )
    return summary


def _both(*hooks):
    """One :data:`automl._progress.Publish` hook calling each of ``hooks`` that is not
    None, in order (one that raises is dropped, the others go on)."""
    live = [h for h in hooks if h is not None]

    def publish(*args) -> None:
        for h in list(live):
            try:
                h(*args)
            except Exception:  # noqa: BLE001 - progress never stops the job
                live.remove(h)
    return publish


def _use_recorded_code(run_dir: Path, console: Console) -> None:
    """A run of the user's own model, resumed or re-read: its module imports from where
    the run imported it (``user_models.json``); a changed source is said in one line."""
    if not (Path(run_dir) / "user_models.json").is_file():
        return
    from automl.models.user import read_record, use_record

    for line in use_record(read_record(run_dir)):
        console.print(f"warning: {line}", style="yellow", highlight=False)


def _user_code(exp: Experiment) -> list[str] | None:
    """The user's model code Ray's workers need (``py_modules``), or None without it."""
    if not exp.user_code():
        return None
    from automl.models.user import ship

    return ship(exp) or None


def _stage_publisher(sinks):
    """``(stage, done, total, eta, elapsed_s)`` to the sweep's Prometheus gauges, when the
    sweep publishes them (a :class:`automl.monitoring.SweepMetrics` among ``sinks``)."""
    from automl.monitoring import SweepMetrics

    for s in sinks:
        m = getattr(s, "sink", s)
        if isinstance(m, SweepMetrics):
            return m.publish_stage
    return None


def _stop_ray(handle, run_dir: Path, lock: threading.Lock) -> None:
    """Stop the Ray instance this process started (and forget it in ``run_dir``)."""
    from automl import cluster

    with lock:
        cluster.shutdown(handle)
    if handle.started:
        cluster.forget_instance(run_dir)


def _while_up(publish, lock: threading.Lock):
    """``publish`` (stage metrics), called only while this process's Ray is up: the refit
    thread stops Ray under ``lock`` while the compression publishes."""
    if publish is None:
        return None

    def guarded(*args) -> None:
        import ray

        with lock:
            if ray.is_initialized():
                publish(*args)
    return guarded


class RefitFailed(BaseException):
    """Raised in the compression by :meth:`_Beside.wait` when the refit beside it failed:
    a ``BaseException`` so that the compression stage does not record it as its own
    failure (and is not saved); the refit's own error is raised after it."""


class _Beside:
    """``fn()`` on a thread, then ``then()`` whatever happened (the main job's refit, then
    Ray's stop). :meth:`wait` returns once ``fn`` ended; :meth:`result` once both did."""

    def __init__(self, fn, then):
        self._ended = threading.Event()
        self._out, self._err = None, None

        def run() -> None:
            try:
                self._out = fn()
            except BaseException as e:  # noqa: BLE001 - handed to result()
                self._err = e
            finally:
                self._ended.set()
                then()

        self._thread = threading.Thread(target=run, daemon=True, name="automl-refit")
        self._thread.start()

    def wait(self) -> None:
        """Until ``fn`` ended (bounded by the refit's own ``selection.timeout_s``).

        Raises:
            RefitFailed: ``fn`` raised (its error comes from :meth:`result`)."""
        self._ended.wait()
        if self._err is not None:
            raise RefitFailed("the refit failed") from self._err

    def result(self):
        """``fn``'s result once ``then`` has run too; raises what ``fn`` raised."""
        self._thread.join()
        if self._err is not None:
            raise self._err
        return self._out


def _search(exp, prepared: Prepared, run_dir: Path, admission, console, sinks,
            init_weights, resume: bool, budget: JobBudget | None = None,
            sources: tuple = ()) -> SearchResult:
    """The search stage (:func:`automl.search.run_search`), its events going to ``sinks``;
    with a job budget (``budget_s``) it ends when the later stages' estimate says so."""
    from automl.search import run_search
    from automl.search._trainable import TrialData

    X_tr, y_tr, X_val, y_val = prepared.search_data
    data = TrialData(X_tr, y_tr, X_val, y_val, tuple(X_tr.shape[1:]),
                     prepared.dataset.output_size, init=init_weights)
    console.print(f"search {exp.search.num_samples} trials, sampler {exp.search.sampler}, "
                  f"scheduler {exp.scheduler.type}, {admission.max_concurrent} at a time, "
                  f"run dir {run_dir}")
    stop_if = None
    if budget is not None and exp.budget_s is not None:
        rows, k, sign = len(prepared.splits.train), exp.selection.top_k, exp.search.mode

        def stop_if(ledger) -> bool:
            scored = [t for t in ledger.trials.values() if t.rows and exp.search.metric in
                      t.rows[-1]]
            scored.sort(key=lambda t: t.rows[-1][exp.search.metric], reverse=sign == "max")
            cands = [candidate_of(t.rows, t.target, rows) for t in scored[:k]]
            ended = sum(t.end is not None for t in ledger.trials.values())
            return budget.search_over([c for c in cands if c is not None],
                                      pace=(ended, ledger.total - ended,
                                            ledger.clock() - ledger.t0))
    result = run_search(exp, data, run_dir, admission, console, sinks=sinks, resume=resume,
                        stop_if=stop_if, sources=sources)
    if budget is not None and (line := budget.stop_line()):
        console.print(line, highlight=False)
    return result


def _cross_validate(exp: Experiment, dataset, splits, top, run_dir: Path, console,
                    publish=None, eta_s: float | None = None):
    """The CV stage: the top trials re-scored by k-fold CV (``cv.json``); each fold
    training is logged to ``cv_folds.jsonl`` as it finishes."""
    from automl.selection import cross_validate, print_cv_table

    sel = exp.selection
    console.print(f"cv     top {len(top)} trials, {sel.cv_folds} folds x {sel.cv_repeats} "
                  f"repeat(s) on {len(splits.pool)} training rows"
                  + (", fold halving" if sel.fold_halving else ""), highlight=False)
    cv = cross_validate(exp, dataset, splits.pool, top, console=console,
                        folds_log=run_dir / "cv_folds.jsonl", publish=publish, eta_s=eta_s)
    write_json(run_dir / "cv.json", cv.to_dict())
    print_cv_table(console, cv)
    return cv


def _trial_teacher(trial, config: dict) -> dict | None:
    """The compression teacher taken from the winner's own sweep trial, when that trial ran
    ``config`` to its last epoch and kept that epoch's checkpoint: it is a model of the
    winner's configuration trained on the search's train rows only, which is what the
    teacher must be, so it need not be trained again beside the refit (the refit then gets
    both slots' threads). ``{"checkpoint": TrainState.checkpoint dict, "source": str}``,
    or None (stopped early, no checkpoint, another config, an unreadable file)."""
    from automl.search._checkpoints import TrialCheckpoints

    if trial is None or trial.end_state != "completed":
        return None
    folder, tail = trial.checkpoint or "", f"/checkpoints/trial_{trial.trial_id}"
    if not folder.endswith(tail):
        return None
    try:
        ckpt = TrialCheckpoints(folder[: -len(tail)]).latest(trial.trial_id)
    except Exception:  # noqa: BLE001 - unreadable: the teacher is trained beside the refit
        return None
    if not ckpt or ckpt.get("config") != config or ckpt.get("epoch") != config.get("epochs"):
        return None
    return {"checkpoint": ckpt, "source": f"trial {trial.trial_id}'s epoch-{ckpt['epoch']} "
                                          "checkpoint"}


def _refit(exp: Experiment, dataset, splits, cv, result, run_dir: Path, console=None,
           publish=None, budget: JobBudget | None = None, held: dict | None = None, *,
           teacher: bool = False, alone: bool = True, live: bool = True) -> dict:
    """The refit stage: the CV winner retrained on train + validation rows and scored once
    on the test split (with ``teacher``, the compression chain's teacher trains beside it,
    into ``held["teacher"]``; ``alone=False``: it holds one slot, not both, since the
    compression runs beside it; ``live=False``: line-per-step progress). Writes
    ``best/model.pt`` (with tabular data also ``best/preprocessor.skops``),
    ``confusion_matrix.json`` and ``reproducibility.json``; returns the ``winner``,
    ``test`` and ``confusion_matrix`` sections of the summary."""
    import torch

    from automl.data import PREPROCESSOR_FILE, save_preprocessor
    from automl.selection import refit_and_test

    winner = cv.winner_candidate
    won = next((t for t in result.trials if t.trial_id == winner.trial_id), None)
    wc = candidate_of(won.history, won.target_epochs, len(splits.train)) if won else None
    with StageProgress(console or Console(quiet=True), "refit", 1,
                       eta_s=budget.refit_s(wc) if budget and wc else None,
                       publish=publish, live=live) as bar:
        final = refit_and_test(exp, dataset, splits, winner.config,
                               teacher=teacher and held is not None, alone=alone)
        if teacher and held is not None:
            held["teacher"] = final["teacher"]
        bar.step(f"trial {winner.trial_id} on {len(splits.pool)} rows, test "
                 f"{_scores_text(final['test'], exp.task)}")
    dst = run_dir / "best" / "model.pt"
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".model.pt.{os.getpid()}")
    torch.save(final["checkpoint"], tmp)
    os.replace(tmp, dst)
    if final["preprocessor"] is not None:  # tabular data: the preprocessing the refit used
        save_preprocessor(final["preprocessor"], dst.with_name(PREPROCESSOR_FILE))
    if final["confusion_matrix"] is not None:  # classification
        write_json(run_dir / "confusion_matrix.json", final["confusion_matrix"])
    from automl.reproduce import write_record  # what `automl reproduce` retrains from

    write_record(run_dir, exp, splits, final, spec_sha256=spec_hash(exp),
                 data_sha256=dataset.checksum)
    return {
        "winner": {
            "trial_id": winner.trial_id,
            "reason": cv.reason,
            "search_rank": winner.rank,
            "changed_vs_search_best": winner.trial_id != result.best.trial_id,
            "params": winner.params,
            "config": winner.config,
            "n_params": winner.n_params,
            "cv": winner.summary,
            "checkpoint": str(dst),
            "trained_on": "train + validation rows",
        },
        "test": {**final["test"], "model": "CV winner retrained on train + validation rows",
                 **({"residuals": final["residuals"]} if final.get("residuals") else {})},
        "confusion_matrix": (str(run_dir / "confusion_matrix.json")
                             if final["confusion_matrix"] is not None else None),
    }


def _scores_text(test: dict, task: str | None) -> str:
    """``accuracy=0.9861`` or ``r2=0.4512, rmse=53.21, mae=43.02``: the task's headline
    test scores (:attr:`automl.task.Task.headline`)."""
    from automl.task import task_of

    return ", ".join(f"{m}={test[m]:.4g}" if abs(test[m]) >= 10 else f"{m}={test[m]:.4f}"
                     for m in task_of(task).headline if test.get(m) is not None)


def search_sections(result: dict) -> dict:
    """The summary's sections from the search stage's result (``SearchResult.to_dict()``):
    ``metric``, ``mode``, ``best``, ``trials`` (counts), ``search``, ``leaderboard``."""
    r = SearchResult.from_dict(result)
    best = r.best
    return {
        "metric": r.metric, "mode": r.mode,
        "best": {"trial_id": best.trial_id, "params": best.params, "config": best.config,
                 "epochs": best.epochs_run, "val": best.metrics} if best else None,
        "trials": r.counts(),
        "search": {k: v for k, v in result.items() if k not in ("trials", "ranked")},
        "leaderboard": [_row(t, r.metric, r.objectives) for t in r.ranked],  # cut to top_k by the caller
    }


#: how each stage's saved result becomes sections of ``summary.json``
SECTIONS = {
    "search": search_sections,
    "cv": lambda r: {"cv": r, **({"pareto": r["pareto"]} if r.get("pareto") else {})},
    "refit": lambda r: dict(r),
    "compression": lambda r: {"compression": r or None},
    "publish": lambda r: dict(r),
    "nightly": lambda r: dict(r),
}


def compose_summary(exp: Experiment, run_dir: Path, data_info: dict,
                    wall_time_s: float | None = None, budget: dict | None = None) -> dict:
    """``summary.json`` from the stages' saved results (``stages/<name>.json``), in stage
    order, each through :data:`SECTIONS`, plus the run's identity, the stages' wall
    times and the history of estimates (``eta_history``: per stage, each ETA shown with
    its range, from ``eta.jsonl``: ``automl._progress.EtaHistory``); written atomically
    and returned."""
    stages = Stages(run_dir, True, Console(quiet=True))
    summary: dict[str, Any] = {"name": exp.name, "run_dir": str(run_dir),
                               "spec_sha256": spec_hash(exp), "data": data_info}
    walls = {}
    for name, sections in SECTIONS.items():
        rec = stages.saved(name)
        if rec is not None:
            summary.update(sections(rec["result"]))
            walls[name] = rec["wall_s"]
    if "leaderboard" in summary:
        summary["leaderboard"] = summary["leaderboard"][: exp.selection.top_k]
    summary["stages_wall_s"] = walls
    history = read_eta_history(run_dir / ETA_FILE)
    if history:
        summary["eta_history"] = history
    prior = (read_json(run_dir / "summary.json") or {}).get("wall_time_s")
    summary["wall_time_s"] = round(wall_time_s if wall_time_s is not None
                                   else prior or sum(walls.values()), 2)
    prior_budget = (read_json(run_dir / "summary.json") or {}).get("budget")
    if budget is not None or prior_budget:
        summary["budget"] = budget if budget is not None else prior_budget
    write_json(run_dir / "summary.json", summary)
    return summary


def read_json(path: Path) -> Any:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def _row(t, metric: str, objectives=()) -> dict:
    """A leaderboard row: the trial, its ``metric`` (and every other objective's value,
    several objectives), epochs, end and sampled params."""
    extra = {m: t.metrics.get(m) for m, _ in objectives if m != metric}
    return {"trial_id": t.trial_id, metric: t.metrics.get(metric), **extra,
            "epochs": t.epochs_run, "end_state": t.end_state, "params": t.params}


def print_leaderboard(console: Console, rows: list[dict], metric: str) -> None:
    """The top trials as a table: the sampled params that differ between rows, per row;
    those every row shares, once, in the caption (all are in ``leaderboard.json``)."""
    table = Table(title="leaderboard", show_lines=False)
    fixed = {"trial_id", metric, "epochs", "end_state", "params"}
    others = [k for k in (rows[0] if rows else {}) if k not in fixed]  # other objectives
    for col in ("rank", "trial", metric, *others, "epochs", "end", "config"):
        # piped output is 80 columns: values wrap onto more lines rather than being cut
        table.add_column(col, overflow="fold")
    keys = sorted({k for r in rows for k in r["params"]})
    varying = [k for k in keys if len({repr(r["params"].get(k)) for r in rows}) > 1] or keys
    shared = [k for k in keys if k not in varying and all(k in r["params"] for r in rows)]
    if shared:
        table.caption = "every row: " + _params_text(rows[0]["params"], shared)
    for i, r in enumerate(rows, 1):
        value = r.get(metric)
        cfg = _params_text(r["params"], varying)
        table.add_row(str(i), r["trial_id"], f"{value:.4f}" if value is not None else "-",
                      *(f"{r[k]:.4g}" if r.get(k) is not None else "-" for k in others),
                      str(r["epochs"]), r["end_state"], cfg)
    console.print(table)


def print_front(console: Console, rows: list[dict]) -> None:
    """The cross-validated Pareto front (``cv.json`` ``pareto``) as a table: every
    candidate's axes, whether it keeps the constraints, is on the front, or won.

    Args:
        rows: ``{"trial_id", "objectives": {metric: value}, "feasible", "on_front",
            "winner"}`` per candidate, as :class:`automl.selection.CVResult` ``pareto``
            holds them (front members first, then by the first objective, descending).
            Raises nothing; an empty list prints an empty table.
    """
    axes = list(rows[0]["objectives"]) if rows else []
    table = Table(title="pareto front (cross-validated)", show_lines=False)
    for col in ("trial", *axes, "feasible", "front"):
        table.add_column(col, overflow="fold")
    for r in sorted(rows, key=lambda r: (not r["on_front"], -list(r["objectives"].values())[0])):
        table.add_row(r["trial_id"], *(f"{r['objectives'][a]:.4g}" for a in axes),
                      "yes" if r["feasible"] else "no",
                      "winner" if r["winner"] else "yes" if r["on_front"] else "-")
    console.print(table)


def _params_text(params: dict, keys: list[str]) -> str:
    """``name=value`` of ``keys`` present in ``params``, by the last part of each key."""
    return " ".join(f"{k.split('.')[-1]}={_fmt(params[k])}" for k in keys if k in params)


def _fmt(v) -> str:
    return f"{v:.3g}" if isinstance(v, float) else str(v)
