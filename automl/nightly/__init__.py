"""Nightly sweeps: warm start, transfer learning, data snapshots and champion / challenger
promotion (the ``nightly`` section of the spec, :class:`automl.spec.NightlySpec`).

An outer driver around the main job (:func:`run_job`, :mod:`._driver`): before it, seed
the run's Optuna study from the previous run (:mod:`._warm`) and load the champion's
weights for transfer (:mod:`._transfer`; trials load them with
``automl.models.load_matching_weights``); after it, compare the registered winner with the
champion on the same folds and move the alias when it wins (:mod:`._champion`). The main
job never imports this package.

Public API: :func:`run_job`, :func:`seed_study`, :func:`fit_space`, :func:`data_change`,
:func:`paired_comparison`, :func:`decide`, :func:`fold_signature`, :func:`champion_weights`.
"""

from __future__ import annotations

from automl.nightly._champion import (
    challenge,
    champion_version,
    decide,
    fold_signature,
    paired_comparison,
    settle,
)
from automl.nightly._driver import run_job
from automl.nightly._snapshot import data_change
from automl.nightly._transfer import champion_weights
from automl.nightly._warm import Misfit, check_source, fit_space, seed_study

__all__ = [
    "Misfit", "challenge", "check_source", "run_job", "settle",
    "champion_version", "champion_weights", "data_change", "decide", "fit_space",
    "fold_signature", "paired_comparison", "seed_study",
]
