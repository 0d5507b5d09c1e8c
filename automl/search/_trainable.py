"""The Tune function trial: train one configuration, report once per epoch.

Data are put in the object store once per sweep and read zero-copy on each node,
and the trial process is reused between trials (``reuse_actors``), so a trial's
start-up is building its model, not importing torch or loading data.
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass

import numpy as np
import ray
import torch
from ray import tune

from automl.search._scheduler import rung_epochs
from automl.space import TrialConfig
from automl.spec import Experiment
from automl.train import Guard, Shard, TrainState, TrialDiverged, fit, set_threads, to_tensors


@dataclass(frozen=True, eq=False)
class TrialData:
    """Training and validation arrays (never the test split) shipped to every trial."""

    X_train: np.ndarray  # (N_train, ...) float32
    y_train: np.ndarray  # (N_train,) int64
    X_val: np.ndarray
    y_val: np.ndarray
    input_shape: tuple[int, ...]
    num_classes: int
    #: champion weights trials of its architecture start from (``automl.nightly``), or None
    init: dict | None = None


def checkpoint_epochs(exp: Experiment, epochs: int) -> set[int]:
    """Epochs after which a trial saves a checkpoint: those where ASHA can stop it
    (:func:`~automl.search._scheduler.rung_epochs`, so its last checkpoint is its last
    epoch) and the trial's final epoch.

    Saving only there keeps Tune's experiment-state snapshots (forced per checkpoint) rare.
    """
    return {e for e in rung_epochs(exp) if e <= epochs} | {epochs}


@dataclass(frozen=True)
class DataRef:
    """An object-store reference to a :class:`TrialData`, put once per sweep; every
    trial and worker on a node reads the same copy (zero-copy numpy)."""

    ref: object


def run_trial(config: dict, *, data: DataRef, exp: Experiment, storage: str) -> None:
    """Ray Tune function trainable for one configuration.

    Reports ``epoch``, ``train_loss``, ``val_loss``, ``val_accuracy``, ``val_f1``,
    ``train_time_s`` and ``setup_s`` after every epoch. In-process (one worker): at
    the epochs of :func:`checkpoint_epochs` the report carries a checkpoint
    (``checkpoint.pt``, see :meth:`TrainState.checkpoint`), and the trial resumes
    from Tune's checkpoint when restored. Two or more workers: the trial runs a
    Ray Train worker group (:func:`run_distributed_trial`) with the same loop.
    """
    if exp.resources.distributed:
        from automl.search._distributed import run_distributed_trial

        run_distributed_trial(config, data, exp, storage)
        return
    # A diverged trial stays diverged: when Tune retries it (resources.max_failures, meant
    # for killed processes), fail again at once instead of re-training from a checkpoint.
    marker = os.path.join(tune.get_context().get_trial_dir(), "diverged.txt")
    if os.path.exists(marker):
        with open(marker) as f:
            raise TrialDiverged(*f.read().split("\t", 1))
    t_start = time.perf_counter()
    set_threads(exp.resources.cpus_per_worker)
    device = "cuda" if exp.resources.gpus_per_worker and torch.cuda.is_available() else "cpu"
    shard = Shard(device=device, precision=exp.resources.precision)
    arrays = ray.get(data.ref)
    train = tuple(t.to(device) for t in to_tensors(arrays.X_train, arrays.y_train))
    val = tuple(t.to(device) for t in to_tensors(arrays.X_val, arrays.y_val))
    cfg = TrialConfig.from_flat(config, exp, seed=exp.search.seed)
    state = TrainState.create(cfg, arrays.input_shape, arrays.num_classes, len(train[1]),
                              wrap=lambda m: m.to(device))
    if arrays.init is not None:  # nightly.transfer: fine-tune the champion's weights
        from automl.nightly import init_from_champion

        init_from_champion(state.model, cfg.arch, arrays.init)
    resume = tune.get_checkpoint()
    if resume is not None:
        with resume.as_directory() as d:
            state.restore_dir(d, device)
    setup_s = time.perf_counter() - t_start
    keep = checkpoint_epochs(exp, cfg.epochs)

    def report(st: TrainState, metrics: dict) -> None:
        metrics = {**metrics, "setup_s": setup_s if st.epoch == 1 else 0.0}
        if st.epoch not in keep:
            tune.report(metrics)
            return
        with tempfile.TemporaryDirectory() as d:
            st.save_dir(d, metrics)
            tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(d))

    try:
        fit(state, train, val, on_epoch=report, shard=shard, guard=guard_of(exp))
    except TrialDiverged as e:
        with open(marker, "w") as f:
            f.write(f"{e.epoch}\t{e.reason}")
        raise


def guard_of(exp: Experiment) -> Guard:
    """The training loop's divergence guard from ``training.guard``."""
    g = exp.training.guard
    return Guard(g.max_loss_ratio, g.max_grad_norm)
