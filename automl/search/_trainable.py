"""The Tune function trial: train one configuration in-process, report once per epoch.

Data arrive through ``tune.with_parameters`` (put in the object store once, read
zero-copy on each node) and the process is reused between trials
(``reuse_actors``), so a trial's start-up is building its model, not importing
torch or loading data.
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass

import numpy as np
import torch
from ray import tune

from automl.space import TrialConfig
from automl.spec import Experiment
from automl.train import TrainState, fit, set_threads, to_tensors


@dataclass(frozen=True, eq=False)
class TrialData:
    """Training and validation arrays (never the test split) shipped to every trial."""

    X_train: np.ndarray  # (N_train, ...) float32
    y_train: np.ndarray  # (N_train,) int64
    X_val: np.ndarray
    y_val: np.ndarray
    input_shape: tuple[int, ...]
    num_classes: int


def checkpoint_epochs(exp: Experiment, epochs: int) -> set[int]:
    """Epochs after which a trial saves a checkpoint: ASHA's rungs (where a trial can be
    stopped, so its last checkpoint is its last epoch) and the trial's final epoch.

    Rungs are ``grace_period * reduction_factor**k`` epochs (Li et al. 2020). Saving
    only there keeps Tune's experiment-state snapshots (forced per checkpoint) rare.
    """
    keep = {epochs}
    sch = exp.scheduler
    if sch.type == "asha":
        rung = float(sch.grace_period)
        while rung < exp.max_epochs:
            keep.add(int(round(rung)))
            rung *= sch.reduction_factor
    return {e for e in keep if e <= epochs}


def run_trial(config: dict, *, data: TrialData, exp: Experiment) -> None:
    """Ray Tune function trainable.

    Reports ``epoch``, ``train_loss``, ``val_loss``, ``val_accuracy``, ``val_f1``,
    ``train_time_s`` and ``setup_s`` after every epoch; at the epochs of
    :func:`checkpoint_epochs` the report carries a checkpoint (``checkpoint.pt``, see
    :meth:`TrainState.checkpoint`). Resumes from Tune's checkpoint when restored.
    """
    t_start = time.perf_counter()
    set_threads(exp.resources.cpus_per_trial)
    cfg = TrialConfig.from_flat(config, exp, seed=exp.search.seed)
    train = to_tensors(data.X_train, data.y_train)
    val = to_tensors(data.X_val, data.y_val)
    state = TrainState.create(cfg, data.input_shape, data.num_classes, len(train[1]))
    resume = tune.get_checkpoint()
    if resume is not None:
        with resume.as_directory() as d:
            state.restore(torch.load(os.path.join(d, "checkpoint.pt"), weights_only=True))
    setup_s = time.perf_counter() - t_start

    keep = checkpoint_epochs(exp, cfg.epochs)

    def report(st: TrainState, metrics: dict) -> None:
        metrics = {**metrics, "setup_s": setup_s if st.epoch == 1 else 0.0}
        if st.epoch not in keep:
            tune.report(metrics)
            return
        with tempfile.TemporaryDirectory() as d:
            torch.save(st.checkpoint(metrics), os.path.join(d, "checkpoint.pt"))
            tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(d))

    fit(state, train, val, on_epoch=report)
