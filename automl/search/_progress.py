"""A Tune callback that records every epoch report and shows progress with rich."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

from ray.tune import Callback
from rich.console import Console
from rich.live import Live
from rich.text import Text

from automl.search._result import COMPLETED, STOPPED, end_state


def _end_line(path: Path) -> None:
    """Terminate a torn last line (driver killed mid-write) before appending."""
    p = Path(path)
    if p.exists() and p.stat().st_size:
        with open(p, "rb+") as f:
            f.seek(-1, 2)
            if f.read(1) != b"\n":
                f.write(b"\n")


def add_report(rows: list[dict[str, Any]], row: dict[str, Any]) -> None:
    """Append one epoch report to a trial's ``rows``. A trial that resumed from a
    checkpoint re-reports epochs it had already run: a report for epoch ``e`` drops the
    rows of epochs ``>= e`` first, so the rows are always epochs ``1..e``, once each, as
    the trial last ran them (even when ASHA stopped the re-run earlier than the first)."""
    while rows and rows[-1]["epoch"] >= row["epoch"]:
        rows.pop()
    rows.append(row)


def load_history(path: Path) -> dict[str, list[dict[str, Any]]]:
    """Per-trial epoch rows from ``trials.jsonl``, in file order through
    :func:`add_report` (the rule the live callback follows). A torn last line (the
    driver killed mid-write) is skipped."""
    rows: dict[str, list[dict[str, Any]]] = {}
    if Path(path).exists():
        for line in Path(path).read_text().splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            trial = rec.pop("trial_id")
            rec.pop("time", None)
            add_report(rows.setdefault(trial, []), rec)
    return rows


class SweepProgress(Callback):
    """Appends each report to ``<run_dir>/trials.jsonl`` and shows a status line
    (trials running / done / stopped / failed, best so far, elapsed)."""

    def __init__(self, run_dir: Path, metric: str, mode: str, total: int, console: Console,
                 resume: bool = False):
        self.path = Path(run_dir) / "trials.jsonl"
        self.metric, self.mode, self.total = metric, mode, total
        self.console = console
        self.history: dict[str, list[dict[str, Any]]] = load_history(self.path) if resume else {}
        self.running: set[str] = set()
        self.ended = {"completed": 0, "stopped_early": 0, "failed": 0}
        self.best = -math.inf if mode == "max" else math.inf
        self.t0 = time.monotonic()
        _end_line(self.path)
        self._file = open(self.path, "a", buffering=1)  # noqa: SIM115 - closed in close()
        self._live = Live(self._status(), console=console, transient=True,
                          refresh_per_second=4) if console.is_terminal else None
        if self._live:
            self._live.start()

    def _status(self) -> Text:
        done = sum(self.ended.values())
        best = "-" if math.isinf(self.best) else f"{self.best:.4f}"
        return Text(
            f"trials {done}/{self.total}  running {len(self.running)}  "
            f"completed {self.ended['completed']}  stopped {self.ended['stopped_early']}  "
            f"failed {self.ended['failed']}  best {self.metric} {best}  "
            f"elapsed {time.monotonic() - self.t0:.0f}s"
        )

    def _refresh(self) -> None:
        if self._live:
            self._live.update(self._status())

    def on_trial_start(self, iteration, trials, trial, **info):
        self.running.add(trial.trial_id)
        self._refresh()

    def on_trial_result(self, iteration, trials, trial, result, **info):
        row = {k: result[k] for k in ("epoch", "train_loss", "val_loss", "val_accuracy", "val_f1",
                                      "train_time_s", "eval_time_s", "setup_s", "checkpoint_path",
                                      "restored_from_epoch", "world_size", "worker_nodes")
               if k in result}
        add_report(self.history.setdefault(trial.trial_id, []), row)
        self._file.write(json.dumps({"trial_id": trial.trial_id, "time": time.time(), **row}) + "\n")
        value = result.get(self.metric)
        if value is not None and (value > self.best if self.mode == "max" else value < self.best):
            self.best = value
        self._refresh()

    def _end(self, trial, state: str, note: str) -> None:
        self.running.discard(trial.trial_id)
        self.ended[state] += 1
        self.console.print(f"  trial {trial.trial_id} {note}", highlight=False)
        self._refresh()

    def on_trial_complete(self, iteration, trials, trial, **info):
        rows = self.history.get(trial.trial_id, [])
        epochs = rows[-1]["epoch"] if rows else 0
        target = int(trial.config.get("training.epochs", epochs))
        value = rows[-1].get(self.metric) if rows else None
        shown = f"{self.metric}={value:.4f}" if value is not None else "no result"
        if end_state(epochs, target) == COMPLETED:
            self._end(trial, COMPLETED, f"completed {epochs} epochs  {shown}")
        else:
            self._end(trial, STOPPED, f"stopped by ASHA at epoch {epochs}/{target}  {shown}")

    def on_trial_error(self, iteration, trials, trial, **info):
        self._end(trial, "failed", "failed (see trials.json for the error)")

    def __getstate__(self) -> dict:
        # Tune pickles its run config (callbacks included) into the experiment state;
        # the open file, console and live display stay with this process.
        return {k: v for k, v in self.__dict__.items() if k not in ("_file", "_live", "console")}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.console, self._live = Console(), None
        self._file = open(self.path, "a", buffering=1)  # noqa: SIM115

    def close(self) -> None:
        if self._live:
            self._live.stop()
        self._file.close()
