"""The sweep's one event ledger: Tune's trial events become ours, once.

:class:`Ledger` is the only Tune callback of a sweep. It names each trial by the study's
trial number, applies the one end-state rule (:func:`~automl.search._result.end_state`),
appends every event to ``<run_dir>/trials.jsonl`` and hands it to the sinks: the console
progress, the Prometheus sweep metrics, W&B and TensorBoard. Sinks implement
:class:`TrialSink` (``start`` / ``log`` / ``finish`` / ``close``, in the spirit of
Accelerate's ``GeneralTracker``) and keep no counts of their own: every call gets the
ledger's :class:`SweepView`.

``trials.jsonl`` holds one JSON object a line, each with ``trial_id`` (the study's trial
number, as a string) and ``time`` (Unix seconds):

* ``{"event": "start", "params": {...}}`` when the trial starts (again, if resumed);
* an epoch report: ``epoch`` and the metrics (no ``event`` key);
* ``{"event": "end", "state": ..., "epochs": n, "reason": ..., "error": ...}``.

A resumed sweep reads it back (:func:`read_ledger`): per trial, its epochs 1..n once each
(:func:`add_report`: a re-reported epoch replaces the rows from that epoch on), how it
ended, and the reports in the order they happened, which rebuild the rung policy.
"""

from __future__ import annotations

import json
import logging
import math
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ray.tune import Callback

from automl._progress import Eta
from automl.search._adapters import TRIAL_KEY
from automl.search._result import COMPLETED, DIVERGED, FAILED, STOPPED, end_state
from automl.spec import COST_METRICS

log = logging.getLogger(__name__)

#: a data-parallel trial's start-up breakdown, on its first report
#: (:mod:`automl.search._distributed`)
START_KEYS = ("start_trial_s", "start_train_s", "start_worker_s", "setup_imports_s",
              "setup_data_s", "setup_model_s", "setup_resume_s", "setup_place_s",
              "setup_costs_s")
#: the per-epoch keys a report row keeps
ROW_KEYS = ("epoch", "train_loss", "val_loss", "val_accuracy", "val_f1", "val_rmse", "val_mae",
            "val_r2", "train_time_s", "first_batch_s", "data_wait_s",
            "eval_time_s", "setup_s", "restored_from_epoch", "world_size", "worker_nodes",
            *COST_METRICS, *START_KEYS)
STATES = (COMPLETED, STOPPED, FAILED, DIVERGED)


def add_report(rows: list[dict[str, Any]], row: dict[str, Any]) -> None:
    """Append one epoch report to a trial's ``rows``. A trial that resumed from a
    checkpoint re-reports epochs it had already run: a report for epoch ``e`` drops the
    rows of epochs ``>= e`` first, so the rows are always epochs ``1..e``, once each, as
    the trial last ran them."""
    while rows and rows[-1]["epoch"] >= row["epoch"]:
        rows.pop()
    rows.append(row)


@dataclass
class TrialLog:
    """What the ledger knows of one trial: ``params`` (sampled), ``config`` (flat, with
    fixed values), ``target`` (its own epochs), per-epoch ``rows`` and its ``end``
    (``{"state", "epochs", "reason", "error"}``, None while it runs)."""

    number: int
    params: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    target: int = 0
    rows: list[dict[str, Any]] = field(default_factory=list)
    end: dict[str, Any] | None = None
    started: bool = False

    @property
    def trial_id(self) -> str:
        return str(self.number)


@dataclass(frozen=True)
class SweepView:
    """The ledger's counts, as every sink sees them.

    Attributes:
        total: trials the sweep runs in all.
        running: trials started and not ended.
        ended: trials ended per state (``completed``, ``stopped_early``, ``failed``,
            ``diverged``).
        best: the best value of ``metric`` reported so far (None before any).
        best_trial: the trial that reported it.
        epochs: epoch reports received in this session.
        elapsed_s: seconds since the ledger started (this session).
        eta: seconds the sweep is expected to still take, with their 80% range
            (``automl.search._eta``), or None before it can be estimated.
    """

    metric: str
    mode: str
    total: int
    running: int
    ended: dict[str, int]
    best: float | None
    best_trial: str | None
    epochs: int
    elapsed_s: float
    eta: Eta | None = None

    @property
    def eta_s(self) -> float | None:
        """The point estimate of :attr:`eta`, seconds."""
        return None if self.eta is None else self.eta.s

    @property
    def done(self) -> int:
        return sum(self.ended.values())


class TrialSink(Protocol):
    """Where trial events go besides ``trials.jsonl``. A sink must not raise into the
    sweep: the ledger logs an exception, closes that sink and goes on without it."""

    def start(self, trial: TrialLog, sweep: SweepView) -> None:
        """``trial`` started (or resumed: ``trial.rows`` holds its earlier epochs)."""

    def log(self, trial: TrialLog, row: dict[str, Any], sweep: SweepView) -> None:
        """``trial`` reported one epoch (``row``: ``epoch`` and the metrics)."""

    def finish(self, trial: TrialLog, sweep: SweepView) -> None:
        """``trial`` ended; ``trial.end`` says how."""

    def close(self, sweep: SweepView) -> None:
        """The sweep ended (or the driver is leaving)."""


class InBackground:
    """A :class:`TrialSink` run on a thread of its own: each call is queued and the sink
    handles them in order, so a slow sink (W&B's run start: 0.2 s idle, 0.7 s on a loaded
    2-core machine, 5 s for the first) never holds up Tune's controller, and with it the
    next trial. ``close`` waits for the queue to drain, at most ``timeout_s`` seconds. A
    sink that raises is logged once and gets no further calls.

    Attributes:
        sink: the wrapped sink (read its state after :meth:`close`).
    """

    def __init__(self, sink: TrialSink, timeout_s: float = 120.0):
        import queue
        import threading

        self.sink, self.timeout_s = sink, timeout_s
        self._queue: queue.Queue = queue.Queue()
        self._failed = False
        self._thread = threading.Thread(target=self._work, daemon=True,
                                        name=f"automl-{type(sink).__name__}")
        self._thread.start()

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            method, args = item
            if self._failed:
                continue
            try:
                getattr(self.sink, method)(*args)
            except Exception as e:  # a sink never stops the sweep
                self._failed = True
                log.warning("%s failed (%s: %s); it is off for the rest of the sweep",
                            type(self.sink).__name__, type(e).__name__, e)

    def start(self, trial: TrialLog, sweep: SweepView) -> None:
        self._queue.put(("start", (trial, sweep)))

    def log(self, trial: TrialLog, row: dict[str, Any], sweep: SweepView) -> None:
        self._queue.put(("log", (trial, row, sweep)))

    def finish(self, trial: TrialLog, sweep: SweepView) -> None:
        self._queue.put(("finish", (trial, sweep)))

    def close(self, sweep: SweepView) -> None:
        self._queue.put(("close", (sweep,)))
        self._queue.put(None)
        self._thread.join(self.timeout_s)
        if self._thread.is_alive():
            log.warning("%s did not finish within %.0f s; its last calls may be lost",
                        type(self.sink).__name__, self.timeout_s)


def _end_line(path: Path) -> None:
    """Terminate a torn last line (driver killed mid-write) before appending."""
    if path.exists() and path.stat().st_size:
        with open(path, "rb+") as f:
            f.seek(-1, 2)
            if f.read(1) != b"\n":
                f.write(b"\n")


def read_ledger(path: Path) -> tuple[dict[int, TrialLog], list[tuple[int, int, Any]]]:
    """``(trials by number, reports in file order as (number, epoch, row))`` from a
    ``trials.jsonl``; a torn line (a killed driver) is skipped."""
    trials: dict[int, TrialLog] = {}
    reports: list[tuple[int, int, Any]] = []
    if not Path(path).exists():
        return trials, reports
    for line in Path(path).read_text().splitlines():
        try:
            rec = json.loads(line)
            number = int(rec.pop("trial_id"))
        except (ValueError, KeyError, TypeError):
            continue
        rec.pop("time", None)
        t = trials.setdefault(number, TrialLog(number))
        event = rec.pop("event", None)
        if event == "start":
            t.params, t.config = rec.get("params", {}), rec.get("config", {})
            t.target, t.started, t.end = int(rec.get("target", 0)), True, None
        elif event == "end":
            t.end = rec
        elif "epoch" in rec:
            add_report(t.rows, rec)
            reports.append((number, int(rec["epoch"]), rec))
    return trials, reports


def load_history(path: Path) -> dict[str, list[dict[str, Any]]]:
    """Per-trial epoch rows (``trial_id -> rows``) of a ``trials.jsonl``."""
    return {str(n): t.rows for n, t in read_ledger(path)[0].items()}


def reason_of(error: str | None) -> str | None:
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
    if not lines:
        return "failed"
    # our own errors are one line already (where: what (fix)): without their class path
    return re.sub(r"^automl\.errors\.\w+: ", "", lines[-1])[:300]


def error_text(trial) -> str:
    """The last error of a Tune ``Trial``: its error file (``Trial.error_file``, written
    locally by Tune before it calls ``on_trial_error``; each retry appends a ``Failure #``
    section), else ``Trial.get_error()`` (the synced copy), else ``"failed"``."""
    path = getattr(trial, "error_file", None)
    text = None
    if path:
        try:
            text = Path(path).read_text(errors="replace")
        except OSError:
            text = None
    if not text:
        text = trial.get_error()
    if not text:
        return "failed"
    parts = re.split(r"^Failure # \d+ \(occurred at [^)]*\)\n", str(text), flags=re.M)
    return parts[-1].strip() or str(text)


class Ledger(Callback):
    """The sweep's Tune callback (module doc): trial events -> ``trials.jsonl`` + sinks.

    Args:
        run_dir: the run directory (``trials.jsonl`` is appended to, kept across resumes).
        metric, mode: the sweep's objective.
        total: trials the sweep runs in all.
        target_of: ``flat config -> the trial's own training.epochs``.
        params_of: ``trial number -> its sampled params`` (the study's), or None to
            record the whole config.
        sinks: :class:`TrialSink` objects, called in order.
        clock: seconds, monotonic (tests and simulations pass their own).
        eta: ``ledger -> seconds still to go with their range`` (or None), for
            :attr:`SweepView.eta`; called once per event (every sink gets the same view).
    """

    def __init__(self, run_dir: Path, metric: str, mode: str, total: int,
                 target_of: Callable[[dict], int],
                 params_of: Callable[[int], dict] | None = None,
                 sinks: Iterable[TrialSink] = (), clock: Callable[[], float] = time.monotonic,
                 eta: Callable[[Ledger], Eta | None] | None = None):
        self.path = Path(run_dir) / "trials.jsonl"
        self.metric, self.mode, self.total = metric, mode, int(total)
        self.target_of, self.params_of = target_of, params_of
        self.sinks, self.clock, self.eta = list(sinks), clock, eta
        self.trials, self.reports = read_ledger(self.path)
        self.epochs, self.t0 = 0, clock()
        #: ``(elapsed seconds, epochs reported so far)`` at each trial start of this
        #: session, in order (the sweep's ETA measures per-trial overhead from these)
        self.starts: list[tuple[float, int]] = []
        self._best: tuple[float, str] | None = None
        self._eta_failed = False
        for t in self.trials.values():
            for row in t.rows:
                self._consider(t, row)
        _end_line(self.path)
        self._file = open(self.path, "a", buffering=1)  # noqa: SIM115 - closed in close()

    # -- the view ---------------------------------------------------------------------------
    def view(self) -> SweepView:
        ended = dict.fromkeys(STATES, 0)
        running = 0
        for t in self.trials.values():
            if t.end is not None:
                ended[t.end["state"]] = ended.get(t.end["state"], 0) + 1
            elif t.started:
                running += 1
        best = self._best
        return SweepView(self.metric, self.mode, self.total, running, ended,
                         best[0] if best else None, best[1] if best else None, self.epochs,
                         self.clock() - self.t0, self._estimate())

    def _estimate(self) -> Eta | None:
        """The ETA, or None: an estimate that cannot be made (odd figures) never stops the
        sweep; the first failure is logged."""
        if self.eta is None:
            return None
        try:
            return self.eta(self)
        except Exception as e:  # noqa: BLE001 - progress never stops the sweep
            if not self._eta_failed:
                log.warning("no ETA (%s: %s)", type(e).__name__, e)
                self._eta_failed = True
            return None

    def session_reports(self) -> list[dict[str, Any]]:
        """The epoch rows reported in this session (a resumed sweep's earlier ones are not
        in its clock)."""
        return [row for _, _, row in self.reports[len(self.reports) - self.epochs:]] \
            if self.epochs else []

    def _consider(self, t: TrialLog, row: dict) -> None:
        value = row.get(self.metric)
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return
        if self._best is None or (value > self._best[0] if self.mode == "max"
                                  else value < self._best[0]):
            self._best = (float(value), t.trial_id)

    # -- writing --------------------------------------------------------------------------
    def _write(self, number: int, **rec) -> None:
        self._file.write(json.dumps({"trial_id": str(number), "time": time.time(), **rec},
                                    default=str) + "\n")

    def _each(self, method: str, *args) -> None:
        view = self.view()  # one view (and one ETA) per event, whatever the sinks
        for sink in list(self.sinks):
            try:
                getattr(sink, method)(*args, view)
            except Exception as e:  # a sink never stops the sweep
                log.warning("%s failed (%s: %s); it is off for the rest of the sweep",
                            type(sink).__name__, type(e).__name__, e)
                self.sinks.remove(sink)
                try:
                    sink.close(view)
                except Exception:  # noqa: BLE001 - already reported
                    pass

    def start(self, number: int, config: dict[str, Any]) -> TrialLog:
        """A trial started (the first time, or resumed)."""
        t = self.trials.setdefault(number, TrialLog(number))
        config = {k: v for k, v in config.items() if k != TRIAL_KEY}
        t.config, t.target, t.started, t.end = config, int(self.target_of(config)), True, None
        t.params = self.params_of(number) if self.params_of else config
        self.starts.append((self.clock() - self.t0, self.epochs))
        self._write(number, event="start", params=t.params, config=config, target=t.target)
        self._each("start", t)
        return t

    def report(self, number: int, result: dict[str, Any]) -> None:
        """One epoch report of trial ``number``."""
        t = self.trials.setdefault(number, TrialLog(number))
        # the row keys, and the search metric when it is the user's own (an import path)
        row = {k: result[k] for k in (*ROW_KEYS, self.metric) if k in result}
        add_report(t.rows, row)
        self.reports.append((number, int(row["epoch"]), row))
        self.epochs += 1
        self._consider(t, row)
        self._write(number, **row)
        self._each("log", t, row)

    def end(self, number: int, error: str | None = None, state: str | None = None,
            reason: str | None = None) -> None:
        """Trial ``number`` ended: its state follows :func:`end_state` unless ``state``
        is given (e.g. from the study, when a killed driver had told it but not written
        it); ``reason`` says why, when no error does. A trial ends once."""
        t = self.trials.setdefault(number, TrialLog(number))
        if t.end is not None:
            return
        epochs = t.rows[-1]["epoch"] if t.rows else 0
        if state is None:
            state = end_state(epochs, t.target or epochs, error) if (epochs or error) \
                else FAILED
        t.end = {"state": state, "epochs": epochs, "reason": reason_of(error) or reason,
                 "error": error[-4000:] if error else None}
        self._write(number, event="end", **t.end)
        self._each("finish", t)

    def close(self) -> None:
        self._each("close")
        if not self._file.closed:
            self._file.close()

    # -- Tune's callback hooks ------------------------------------------------------------
    def on_trial_start(self, iteration, trials, trial, **info):
        self.start(int(trial.config[TRIAL_KEY]), dict(trial.config))

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if "epoch" in result:
            self.report(int(trial.config[TRIAL_KEY]), result)

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.end(int(trial.config[TRIAL_KEY]))

    def on_trial_error(self, iteration, trials, trial, **info):
        self.end(int(trial.config[TRIAL_KEY]), error=error_text(trial))

    def __getstate__(self) -> dict:
        # Tune pickles its callbacks into its experiment snapshot; this process keeps the
        # file and sinks (resume reads trials.jsonl and study.db, never that snapshot).
        return {"path": self.path}
