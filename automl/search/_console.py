"""The sweep's console progress: a :class:`~automl.search._ledger.TrialSink` that prints
one line per ended trial and, on a terminal, keeps a live status line (rich)."""

from __future__ import annotations

from rich.console import Console
from rich.live import Live
from rich.text import Text

from automl._progress import eta_text
from automl.search._ledger import SweepView, TrialLog
from automl.search._result import COMPLETED, DIVERGED, STOPPED


class ConsoleProgress:
    """Status line ``trials done/total  running  completed  stopped  failed  best  elapsed
    eta`` (refreshed on every event, terminals only) and a line per ended trial, with the
    count done, the elapsed time and the ETA (so a log, not only a terminal, shows them).
    The ETA is the point and its 80% range: ``eta 40s (30-70s)``."""

    def __init__(self, console: Console):
        self.console = console
        self._live = Live(Text(""), console=console, transient=True,
                          refresh_per_second=4) if console.is_terminal else None
        if self._live:
            self._live.start()

    def _refresh(self, sweep: SweepView) -> None:
        if self._live is None:
            return
        best = "-" if sweep.best is None else f"{sweep.best:.4f}"
        e = sweep.ended
        self._live.update(Text(
            f"sweep  trials {sweep.done}/{sweep.total}  running {sweep.running}  "
            f"completed {e[COMPLETED]}  stopped {e[STOPPED]}  "
            f"failed {e['failed'] + e[DIVERGED]}  best {sweep.metric} {best}  "
            f"elapsed {sweep.elapsed_s:.0f}s  eta {eta_text(sweep.eta)}"))

    def start(self, trial: TrialLog, sweep: SweepView) -> None:
        self._refresh(sweep)

    def log(self, trial: TrialLog, row: dict, sweep: SweepView) -> None:
        self._refresh(sweep)

    def finish(self, trial: TrialLog, sweep: SweepView) -> None:
        end = trial.end or {}
        value = trial.rows[-1].get(sweep.metric) if trial.rows else None
        shown = f"{sweep.metric}={value:.4f}" if value is not None else "no result"
        epochs, state = end.get("epochs", 0), end.get("state")
        if state == COMPLETED:
            note = f"completed {epochs} epochs  {shown}"
        elif state == STOPPED:
            note = f"stopped early at epoch {epochs}/{trial.target}  {shown}"
        else:
            note = f"{state}: {end.get('reason') or 'see trials.json'}"
        self.console.print(f"  trial {trial.trial_id} {note}  [{sweep.done}/{sweep.total}, "
                           f"elapsed {sweep.elapsed_s:.0f}s, eta {eta_text(sweep.eta)}]",
                           highlight=False, markup=False)
        self._refresh(sweep)

    def close(self, sweep: SweepView) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
