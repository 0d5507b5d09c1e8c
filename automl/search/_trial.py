"""What a trial needs besides its config, shared by in-process and data-parallel trials:
its data, the epochs it checkpoints at, and its divergence guard."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from automl.search._policy import make_policy
from automl.spec import Experiment
from automl.train import Guard

#: config key carrying the study's trial number into the trial (the searcher sets it)
TRIAL_KEY = "automl.trial"


@dataclass(frozen=True, eq=False)
class TrialData:
    """Training and validation arrays (never the test split) shipped to every trial."""

    X_train: np.ndarray  # (N_train, ...) float32
    y_train: np.ndarray  # (N_train,) int64
    X_val: np.ndarray
    y_val: np.ndarray
    input_shape: tuple[int, ...]
    num_classes: int
    #: initial weights trials of their architecture start from (``{"arch", "state_dict"}``,
    #: e.g. a champion's for transfer learning: ``automl.models.load_matching_weights``)
    init: dict | None = None


def checkpoint_epochs(exp: Experiment, epochs: int) -> set[int]:
    """Epochs after which a trial of ``epochs`` epochs saves its checkpoint: those where the
    rung policy can stop it (:meth:`RungPolicy.rung_epochs`, so a stopped trial's last
    checkpoint is its last epoch), its final epoch, and every
    ``training.checkpoint_every`` epochs (when > 0)."""
    policy = make_policy(exp)
    rungs = policy.rung_epochs() if policy is not None else []
    every = exp.training.checkpoint_every
    periodic = set(range(every, epochs + 1, every)) if every else set()
    return {e for e in rungs if e <= epochs} | periodic | {epochs}


@dataclass(frozen=True)
class DataRef:
    """An object-store reference to a :class:`TrialData`, put once per sweep; every
    trial and worker on a node reads the same copy (zero-copy numpy)."""

    ref: object


def guard_of(exp: Experiment) -> Guard:
    """The training loop's divergence guard from ``training.guard``."""
    g = exp.training.guard
    return Guard(g.max_loss_ratio, g.max_grad_norm)
