"""Tune callbacks that track trials from the driver: W&B runs and TensorBoard files.

Why the driver and not Ray's ``WandbLoggerCallback``: that callback starts one Ray
actor plus one W&B process per trial; logging from the driver reuses one W&B service
for the whole sweep (``benchmarks/bench_wandb.py`` measures both).
"""

from __future__ import annotations

import logging
from typing import Any

from ray.tune import Callback
from ray.tune.logger import TBXLoggerCallback

from automl.space import TrialConfig
from automl.spec import Experiment
from automl.tracking._wandb import WandbTarget, start_run

#: per-epoch values logged to W&B (step = epoch)
LOGGED = ("epoch", "train_loss", "val_loss", "val_accuracy", "val_f1", "train_time_s")
log = logging.getLogger(__name__)


def end_state(trial, exp: Experiment) -> str:
    """``completed`` when the trial ran all its epochs, else ``stopped_early`` (by ASHA)."""
    epochs = int((trial.last_result or {}).get("epoch", 0))
    try:
        target = TrialConfig.from_flat(trial.config, exp, seed=exp.search.seed).epochs
    except (KeyError, ValueError):
        target = exp.max_epochs
    return "completed" if epochs >= target else "stopped_early"


class WandbTrials(Callback):
    """One W&B run per trial, opened at the trial's start and finished at its end.

    Run id: :func:`~automl.tracking.run_id` (sweep + trial id), group: the sweep,
    name: the trial id, config: the trial's full :class:`TrialConfig` plus the sampled
    parameters; each epoch's ``LOGGED`` values at ``step=epoch``; the summary gets
    ``end_state`` and ``epochs``. If W&B fails (e.g. the server is unreachable online),
    a warning is logged and the sweep goes on without W&B: ``error`` says why.
    """

    def __init__(self, target: WandbTarget, exp: Experiment):
        self.target, self.exp = target, exp
        self.runs: dict[str, Any] = {}
        self.error: str | None = None

    def on_trial_start(self, iteration, trials, trial, **info):
        if trial.trial_id in self.runs or self.error:
            return
        try:
            cfg = TrialConfig.from_flat(trial.config, self.exp, seed=self.exp.search.seed)
            config = {**cfg.to_dict(), "params": dict(trial.config)}
        except (KeyError, ValueError):
            config = {"params": dict(trial.config)}
        try:
            self.runs[trial.trial_id] = start_run(self.target, trial.trial_id, config)
        except Exception as e:  # tracking must not stop the sweep
            self.error = f"{type(e).__name__}: {e}"
            log.warning("W&B disabled for the rest of this sweep: %s", self.error)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        run = self.runs.get(trial.trial_id)
        if run is None:
            return
        row = {k: result[k] for k in LOGGED if k in result}
        run.log(row, step=int(result.get("epoch", result.get("training_iteration", 0))))

    def _finish(self, trial, state: str) -> None:
        run = self.runs.pop(trial.trial_id, None)
        if run is None:
            return
        epochs = int((trial.last_result or {}).get("epoch", 0))
        run.summary.update({"end_state": state, "epochs": epochs})
        run.finish(exit_code=1 if state == "failed" else 0)

    def on_trial_complete(self, iteration, trials, trial, **info):
        self._finish(trial, end_state(trial, self.exp))

    def on_trial_error(self, iteration, trials, trial, **info):
        self._finish(trial, "failed")

    def on_experiment_end(self, trials, **info):
        for trial in trials:
            if trial.trial_id in self.runs:
                self._finish(trial, "unfinished")

    def __getstate__(self) -> dict:
        # Tune pickles callbacks into its experiment state; open runs stay here.
        return {"target": self.target, "exp": self.exp, "runs": {}, "error": self.error}


class _NoTensorBoard(TBXLoggerCallback):
    """Stands in for Tune's TensorBoard logger when ``tracking.tensorboard`` is off (Tune
    adds its own unless one is present)."""

    def __init__(self):  # no tensorboardX writer at all
        self._trial_writer, self._trial_result = {}, {}

    def log_trial_start(self, trial):
        pass

    def log_trial_result(self, iteration, trial, result):
        pass

    def log_trial_end(self, trial, failed=False):
        pass


def trial_callbacks(exp: Experiment, target: WandbTarget | None) -> list[Callback]:
    """The tracking callbacks for a sweep: Tune's TensorBoard logger (``events.out.tfevents``
    in each trial folder, scalars under ``ray/tune/<metric>`` at step = epoch) or its
    stand-in, plus :class:`WandbTrials` when ``target`` is given."""
    callbacks: list[Callback] = [TBXLoggerCallback() if exp.tracking.tensorboard
                                 else _NoTensorBoard()]
    if target is not None:
        callbacks.append(WandbTrials(target, exp))
    return callbacks


def sweep_callbacks(exp: Experiment, run_dir) -> tuple[WandbTarget | None, list[Callback]]:
    """Everything a sweep reports to besides its progress display: TensorBoard, W&B
    (when tracking resolves to offline/online) and the Ray metrics of
    ``automl.monitoring``. Returns ``(W&B target or None, callbacks)``."""
    from pathlib import Path

    from automl.monitoring import SweepMetrics
    from automl.tracking._wandb import wandb_target

    target = wandb_target(exp, Path(run_dir))
    return target, [*trial_callbacks(exp, target), SweepMetrics(Path(run_dir).name, exp)]
