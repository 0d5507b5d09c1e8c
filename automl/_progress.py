"""Progress of one stage of the job (Ray start, cross-validation, refit, compression,
report): done/total, elapsed and an ETA, on the console and to a metrics hook.

On a terminal it keeps one live line (rich); elsewhere (CI logs, pipes) it prints a line
per step, so a log shows the same figures. The ETA is ``elapsed / work done x work left``,
where work is counted in the caller's units (epochs, for trainings that run side by
side: their measured rate already holds the concurrency).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from rich.console import Console
from rich.live import Live
from rich.text import Text

#: ``(stage, done, total, eta_s)``: where the same figures go (Prometheus gauges)
Publish = Callable[[str, int, int, "float | None"], None]


def eta_text(eta_s: float | None) -> str:
    """``"85s"``, ``"4m05s"``, or ``"-"`` before it can be estimated."""
    if eta_s is None:
        return "-"
    s = int(round(eta_s))
    return f"{s}s" if s < 60 else f"{s // 60}m{s % 60:02d}s"


class StageProgress:
    """One stage's progress line (module doc).

    Args:
        console: where it prints.
        stage: its name as printed (``cv``, ``refit``, ``compress``...).
        total: steps in all (fold trainings, stages).
        work: units of work in all (epochs); None: one unit per step.
        eta_s: an estimate before the first step finishes (e.g. from the sweep's measured
            cost per epoch), or None.
        publish: the figures go there too, at each step.
        slots: steps that run at once: until that many have finished, the measured rate
            says little (the first ones carry the workers' start), so ``eta_s`` is used.
        clock: seconds, monotonic.
        live: False prints a line per step even on a terminal (a stage that runs beside
            another stage's live line: rich shows one live display at a time).
    """

    def __init__(self, console: Console, stage: str, total: int, work: float | None = None,
                 eta_s: float | None = None, publish: Publish | None = None,
                 slots: int = 1, clock: Callable[[], float] = time.monotonic,
                 live: bool = True):
        self.console, self.stage, self.total = console, stage, int(total)
        self.slots = max(1, int(slots))
        self.work = float(work) if work is not None else float(total)
        self.done, self.work_done = 0, 0.0
        self.first_eta, self.publish, self.clock = eta_s, publish, clock
        self.t0 = clock()
        self._live = (Live(Text(""), console=console, transient=True, refresh_per_second=4)
                      if console.is_terminal and live else None)
        if self._live is not None:
            self._live.start()
        self._show("")

    @property
    def elapsed_s(self) -> float:
        return self.clock() - self.t0

    @property
    def eta_s(self) -> float | None:
        """Seconds still to go: the measured rate once ``slots`` steps are done, else the
        first estimate less the time spent."""
        left = max(0.0, self.work - self.work_done)
        if self.first_eta is not None and self.done < self.slots:
            return max(0.0, self.first_eta - self.elapsed_s)
        if self.work_done > 0:
            return self.elapsed_s / self.work_done * left
        if self.first_eta is not None:
            return max(0.0, self.first_eta - self.elapsed_s)
        return None

    def _line(self, note: str) -> str:
        return (f"{self.stage:<6} {self.done}/{self.total}  elapsed {self.elapsed_s:.0f}s  "
                f"eta {eta_text(self.eta_s)}" + (f"  {note}" if note else ""))

    def _show(self, note: str) -> None:
        if self.publish is not None:
            try:
                self.publish(self.stage, self.done, self.total, self.eta_s)
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
                self.publish(self.stage, self.done, self.total, 0.0)
            except Exception:  # noqa: BLE001
                pass

    def __enter__(self) -> StageProgress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
