"""Progress of one stage of the job (Ray start, cross-validation, refit, compression,
report): done/total, elapsed and an ETA with its range, on the console, to a metrics hook
and to the run's history of estimates.

On a terminal it keeps one live line (rich); elsewhere (CI logs, pipes) it prints a line
per step, so a log shows the same figures. An ETA is an :class:`Eta`: the point estimate
and an 80% range, printed ``eta 40s (30-70s)``.

A stage's point estimate is ``elapsed / work done x work left``, where work is counted in
the caller's units (epochs, for trainings that run side by side: their measured rate
already holds the concurrency). Its range:

* before ``slots`` steps have finished, around an a-priori estimate (the job budget's,
  from the sweep's measured cost per epoch): :data:`PRIOR_RANGE` times it, less the time
  spent;
* from then on, from the spread of the measured step times: ``point x exp(-/+ z s)`` with
  ``z`` the normal's 90% quantile, ``s = c sqrt(1/n + 1/m)``, ``c`` the coefficient of
  variation of the seconds per unit of work of the ``n`` steps measured after the first
  ``slots`` (from the gaps between step ends, times ``slots``), ``m`` the steps still to
  go: the uncertainty of the mean rate plus the noise of the steps to come (a log-normal
  approximation); fewer than 2 such steps: :data:`PRIOR_RANGE` around the point.

The sweep's ETA and its range come from :mod:`automl.search._eta`.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.live import Live
from rich.text import Text

from automl._io import append_jsonl

#: ``(low, high)``: the 80% range of an a-priori estimate of a stage (cross-validation,
#: refit, compression), as factors of the estimate; the job budget plans with ``high``.
#: On the job record (``benchmarks/results/job.md``, 3 runs, AMD EPYC idle, f8dbd02) the
#: real stage time over the budget's estimate was 0.73-0.85 (CV), 0.81-0.94 (refit) and
#: 0.43-0.51 (compression); ``high`` leaves a third more than the largest for a loaded
#: machine, ``low`` reaches below the smallest.
PRIOR_RANGE = (0.4, 1.3)
#: the standard normal's 90% quantile: an 80% two-sided range
Z80 = 1.2816


@dataclass(frozen=True)
class Eta:
    """Seconds still to go: the point estimate ``s`` and its 80% range ``low``..``high``
    (``low <= s <= high``, all >= 0).

    Raises:
        ValueError: the three are not ordered or one is negative or not finite.
    """

    s: float
    low: float
    high: float

    def __post_init__(self):
        if not all(math.isfinite(x) for x in (self.s, self.low, self.high)) \
                or not 0.0 <= self.low <= self.s <= self.high:
            raise ValueError(f"an ETA needs 0 <= low <= s <= high, finite; got low "
                             f"{self.low}, s {self.s}, high {self.high}")

    @classmethod
    def around(cls, s: float, low: float, high: float) -> Eta:
        """``s`` with the range ``low..high`` widened to hold it, each floored at 0."""
        s = max(0.0, s)
        return cls(s, min(max(0.0, low), s), max(high, s))

    @classmethod
    def of(cls, s: float, factors: tuple[float, float] = PRIOR_RANGE) -> Eta:
        """``s`` with the range ``(low x s, high x s)`` (``factors``)."""
        return cls.around(s, s * factors[0], s * factors[1])

    def less(self, spent_s: float) -> Eta:
        """The same estimate ``spent_s`` seconds later, nothing learnt meanwhile."""
        return Eta.around(self.s - spent_s, self.low - spent_s, self.high - spent_s)

    def capped(self, cap_s: float | None) -> Eta:
        """Each figure at most ``cap_s`` (None: no cap)."""
        if cap_s is None:
            return self
        cap_s = max(0.0, cap_s)
        return Eta(min(self.s, cap_s), min(self.low, cap_s), min(self.high, cap_s))

    def to_dict(self) -> dict[str, float]:
        return {"eta_s": round(self.s, 2), "low_s": round(self.low, 2),
                "high_s": round(self.high, 2)}


def _seconds(s: float) -> str:
    s = int(round(s))
    return f"{s}s" if s < 60 else f"{s // 60}m{s % 60:02d}s"


def eta_text(eta: Eta | float | None) -> str:
    """``"40s (30-70s)"`` (under a minute: the range in seconds too), ``"4m05s
    (3m10s-6m00s)"``; a bare number: ``"85s"``; ``"-"`` before it can be estimated."""
    if eta is None:
        return "-"
    if not isinstance(eta, Eta):
        return _seconds(eta)
    if round(eta.s) < 60:
        return f"{_seconds(eta.s)} ({round(eta.low)}-{round(eta.high)}s)"
    return f"{_seconds(eta.s)} ({_seconds(eta.low)}-{_seconds(eta.high)})"


#: ``(stage, done, total, eta, elapsed_s)``: where the same figures go (Prometheus gauges,
#: the run's history of estimates)
Publish = Callable[[str, int, int, "Eta | None", float], None]


def spread_range(point: float, rates: list[float], steps_left: int) -> Eta | None:
    """``point`` with the range from the spread of measured ``rates`` (seconds per unit of
    work, one per step) and ``steps_left`` steps to go (module doc), or None with fewer
    than 2 rates."""
    if len(rates) < 2:
        return None
    mean = sum(rates) / len(rates)
    if mean <= 0:
        return Eta(point, point, point)
    sd = math.sqrt(sum((r - mean) ** 2 for r in rates) / (len(rates) - 1))
    sigma = sd / mean * math.sqrt(1 / len(rates) + 1 / max(steps_left, 1))
    return Eta.around(point, point * math.exp(-Z80 * sigma), point * math.exp(Z80 * sigma))


class StageProgress:
    """One stage's progress line (module doc).

    Args:
        console: where it prints.
        stage: its name as printed (``cv``, ``refit``, ``compress``...).
        total: steps in all (fold trainings, stages).
        work: units of work in all (epochs); None: one unit per step.
        eta_s: an estimate (seconds) before the first step finishes (e.g. the job budget's,
            from the sweep's measured cost per epoch), with :data:`PRIOR_RANGE` around it,
            or an :class:`Eta` with its own range, or None.
        publish: the figures go there too, at each step.
        slots: steps that run at once: until that many have finished, the measured rate
            says little (the first ones carry the workers' start), so ``eta_s`` is used.
        clock: seconds, monotonic.
        live: False prints a line per step even on a terminal (a stage that runs beside
            another stage's live line: rich shows one live display at a time).
    """

    def __init__(self, console: Console, stage: str, total: int, work: float | None = None,
                 eta_s: float | Eta | None = None, publish: Publish | None = None,
                 slots: int = 1, clock: Callable[[], float] = time.monotonic,
                 live: bool = True):
        self.console, self.stage, self.total = console, stage, int(total)
        self.slots = max(1, int(slots))
        self.work = float(work) if work is not None else float(total)
        self.done, self.work_done = 0, 0.0
        self.first_eta = eta_s if eta_s is None or isinstance(eta_s, Eta) else Eta.of(eta_s)
        self.publish, self.clock = publish, clock
        self.t0 = clock()
        #: ``(seconds since the stage started, work)`` of each finished step
        self.steps: list[tuple[float, float]] = []
        self._live = (Live(Text(""), console=console, transient=True, refresh_per_second=4)
                      if console.is_terminal and live else None)
        if self._live is not None:
            self._live.start()
        self._show("")

    @property
    def elapsed_s(self) -> float:
        return self.clock() - self.t0

    @property
    def eta(self) -> Eta | None:
        """Seconds still to go with their range (module doc): from the measured rate once
        ``slots`` steps are done, else from the first estimate less the time spent."""
        elapsed = self.elapsed_s
        left = max(0.0, self.work - self.work_done)
        if self.first_eta is not None and self.done < self.slots:
            return self.first_eta.less(elapsed)
        if self.work_done > 0:
            point = elapsed / self.work_done * left
            rates, prev = [], None
            for i, (at, w) in enumerate(self.steps):
                if i >= self.slots and prev is not None and w > 0:
                    rates.append((at - prev) * self.slots / w)
                prev = at
            return (spread_range(point, rates, self.total - self.done)
                    or Eta.of(point))
        if self.first_eta is not None:
            return self.first_eta.less(elapsed)
        return None

    @property
    def eta_s(self) -> float | None:
        """The point estimate of :attr:`eta`, seconds."""
        eta = self.eta
        return None if eta is None else eta.s

    def _line(self, note: str) -> str:
        return (f"{self.stage:<6} {self.done}/{self.total}  elapsed {self.elapsed_s:.0f}s  "
                f"eta {eta_text(self.eta)}" + (f"  {note}" if note else ""))

    def _show(self, note: str) -> None:
        if self.publish is not None:
            try:
                self.publish(self.stage, self.done, self.total, self.eta, self.elapsed_s)
            except Exception:  # noqa: BLE001 - metrics never stop the job
                self.publish = None
        if self._live is not None:
            self._live.update(Text(self._line(note)))

    def resize(self, total: int, work: float | None = None) -> None:
        """Fewer (or more) steps than first thought (fold halving dropped candidates)."""
        self.total = int(total)
        self.work = float(work) if work is not None else float(total)
        self._show("")

    def step(self, note: str = "", work: float = 1.0) -> None:
        """One step finished (``work`` units of it); ``note`` says which."""
        self.done += 1
        self.work_done += work
        self.steps.append((self.elapsed_s, work))
        if self._live is None:
            self.console.print(self._line(note), highlight=False, markup=False)
        self._show(note)

    def close(self) -> None:
        """Stop the live line (the stage's own summary line follows)."""
        if self._live is not None:
            self._live.stop()
            self._live = None
        if self.publish is not None:
            try:
                self.publish(self.stage, self.done, self.total, Eta(0.0, 0.0, 0.0),
                             self.elapsed_s)
            except Exception:  # noqa: BLE001
                pass

    def __enter__(self) -> StageProgress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


ETA_FILE = "eta.jsonl"


class EtaHistory:
    """The run's history of estimates, ``<run_dir>/eta.jsonl``: one JSON object a line,
    ``{"stage", "time" (Unix s), "elapsed_s" (the stage's), "done", "total", "eta_s",
    "low_s", "high_s"}``, appended (kept across resumes). ``summary.json`` holds it
    (:func:`read_eta_history`) and ``automl dashboard`` shows its last line.

    Called as a :data:`Publish` hook by each stage's :class:`StageProgress`, and as a sweep
    sink (``start``/``log``/``finish``/``close`` of ``automl.search.TrialSink``): the
    sweep's estimate at each trial's end and at its close.
    """

    def __init__(self, path: str | Path, clock: Callable[[], float] = time.time):
        self.path, self.clock = Path(path), clock

    def __call__(self, stage: str, done: int, total: int, eta: Eta | None,
                 elapsed_s: float) -> None:
        if eta is None:
            return
        append_jsonl(self.path, {"stage": stage, "time": round(self.clock(), 2),
                                 "elapsed_s": round(elapsed_s, 2), "done": int(done),
                                 "total": int(total), **eta.to_dict()})

    def _sweep(self, sweep) -> None:
        self("sweep", sweep.done, sweep.total, sweep.eta, sweep.elapsed_s)

    def start(self, trial, sweep) -> None:
        pass

    def log(self, trial, row, sweep) -> None:
        pass

    def finish(self, trial, sweep) -> None:
        self._sweep(sweep)

    def close(self, sweep) -> None:
        self._sweep(sweep)


def read_eta_history(path: str | Path) -> dict[str, list[dict]]:
    """``{stage: [record, ...]}`` of an ``eta.jsonl`` (:class:`EtaHistory`), in the order
    written, each without its ``stage``; torn lines skipped; ``{}`` without the file."""
    out: dict[str, list[dict]] = {}
    try:
        text = Path(path).read_text()
    except OSError:
        return out
    for line in text.splitlines():
        try:
            rec = json.loads(line)
            stage = rec.pop("stage")
        except (ValueError, KeyError, TypeError, AttributeError):
            continue
        out.setdefault(stage, []).append(rec)
    return out


def latest_eta_line(path: str | Path, now: float | None = None) -> str | None:
    """The last estimate of an ``eta.jsonl`` as one line, e.g. ``sweep 12/40  eta 40s
    (30-70s), 3s ago``; None without one."""
    try:
        lines = Path(path).read_text().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            rec = json.loads(line)
            eta = Eta(rec["eta_s"], rec["low_s"], rec["high_s"])
        except (ValueError, KeyError, TypeError):
            continue
        ago = max(0.0, (time.time() if now is None else now) - rec.get("time", 0.0))
        return (f"{rec.get('stage', '?')} {rec.get('done', 0)}/{rec.get('total', 0)}  "
                f"eta {eta_text(eta)}, {_seconds(ago)} ago")
    return None
