"""The sweep's tracking sinks (:class:`automl.search.TrialSink`): W&B runs and TensorBoard
event files, one per trial, fed by the sweep's ledger from the driver.

Why the driver and not Ray's ``WandbLoggerCallback``: that callback starts one Ray actor
plus one W&B process per trial; logging from the driver reuses one W&B service for the
whole sweep (``benchmarks/bench_wandb.py`` measures both).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from automl.search import SweepView, TrialLog, TrialSink
from automl.search._ledger import InBackground
from automl.spec import Experiment
from automl.tracking._wandb import WandbTarget, start_run

#: per-epoch values logged (step = epoch)
LOGGED = ("epoch", "train_loss", "val_loss", "val_accuracy", "val_f1", "val_rmse", "val_mae",
          "val_r2", "train_time_s")
log = logging.getLogger(__name__)


class WandbTrials:
    """One W&B run per trial, opened at the trial's start and finished at its end.

    Run id: :func:`~automl.tracking.run_id` (sweep + trial number, so a resumed trial
    continues its run instead of starting a second one), group: the sweep, name: the
    trial number, config: the trial's config plus its sampled ``params``; each epoch's
    ``LOGGED`` values at ``step=epoch``; the summary gets ``end_state`` and ``epochs``.
    Online runs that cannot start (the server unreachable, W&B's own ``init_timeout``)
    move the sweep to offline mode (``target.mode``), said once through ``note``.
    """

    def __init__(self, target: WandbTarget, note=print):
        self.target, self.note = target, note
        self.runs: dict[str, Any] = {}

    def start(self, trial: TrialLog, sweep: SweepView) -> None:
        if trial.trial_id in self.runs:
            return
        config = {**trial.config, "params": dict(trial.params)}
        try:
            run = start_run(self.target, trial.trial_id, config)
        except Exception as e:
            if self.target.mode != "online":
                raise
            from automl.tracking._wandb import go_offline

            self.target = go_offline(self.target, f"{type(e).__name__}: {e}", self.note)
            run = start_run(self.target, trial.trial_id, config)
        self.runs[trial.trial_id] = run

    def log(self, trial: TrialLog, row: dict, sweep: SweepView) -> None:
        run = self.runs.get(trial.trial_id)
        if run is not None:
            run.log({k: row[k] for k in (*LOGGED, sweep.metric) if k in row},
                    step=int(row["epoch"]))

    def finish(self, trial: TrialLog, sweep: SweepView) -> None:
        run = self.runs.pop(trial.trial_id, None)
        if run is None:
            return
        end = trial.end or {}
        run.summary.update({"end_state": end.get("state"), "epochs": end.get("epochs", 0)})
        run.finish(exit_code=0 if end.get("state") in ("completed", "stopped_early") else 1)

    def close(self, sweep: SweepView) -> None:
        for trial_id in list(self.runs):
            run = self.runs.pop(trial_id)
            run.summary.update({"end_state": "unfinished"})
            run.finish()


class TensorBoardTrials:
    """TensorBoard event files per trial (tensorboardX): ``<run_dir>/tensorboard/trial_<n>/``,
    each ``LOGGED`` value as a scalar at ``step = epoch``. A resumed trial appends a new
    event file to its folder."""

    def __init__(self, run_dir: Path):
        self.root = Path(run_dir) / "tensorboard"
        self.writers: dict[str, Any] = {}

    def start(self, trial: TrialLog, sweep: SweepView) -> None:
        from tensorboardX import SummaryWriter

        if trial.trial_id not in self.writers:
            self.writers[trial.trial_id] = SummaryWriter(str(self.root / f"trial_{trial.trial_id}"))

    def log(self, trial: TrialLog, row: dict, sweep: SweepView) -> None:
        w = self.writers.get(trial.trial_id)
        if w is None:
            return
        for k in dict.fromkeys((*LOGGED, sweep.metric)):  # the user's own metric too
            if k in row and k != "epoch":
                w.add_scalar(k, float(row[k]), global_step=int(row["epoch"]))

    def finish(self, trial: TrialLog, sweep: SweepView) -> None:
        w = self.writers.pop(trial.trial_id, None)
        if w is not None:
            w.close()

    def close(self, sweep: SweepView) -> None:
        for w in self.writers.values():
            w.close()
        self.writers.clear()


def sweep_sinks(exp: Experiment, run_dir: Path, target: WandbTarget | None,
                note=print) -> list[TrialSink]:
    """Everything a sweep reports to besides its console: TensorBoard (``tracking.
    tensorboard``), W&B (when ``target`` is given; on a thread of its own,
    :class:`~automl.search._ledger.InBackground`) and the Ray metrics of
    ``automl.monitoring``."""
    from automl.monitoring import SweepMetrics

    sinks: list[TrialSink] = []
    if exp.tracking.tensorboard:
        sinks.append(TensorBoardTrials(run_dir))
    if target is not None:
        sinks.append(InBackground(WandbTrials(target, note)))
    sinks.append(SweepMetrics(Path(run_dir).name))
    return sinks
