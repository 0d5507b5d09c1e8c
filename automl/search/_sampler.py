"""Optuna samplers by name, always constructed explicitly and seeded so results do not
depend on Optuna's version defaults (FIELD-NOTES: Optuna 5 changed TPE's)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution
from optuna.samplers import BaseSampler, RandomSampler
from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState

from automl.search._forest import ForestSampler
from automl.search._transfer import SourceStudy, TransferSampler
from automl.spec import SearchSpec


class RandomInterleave(BaseSampler):
    """``inner`` with a share ``fraction`` of trials drawn uniformly at random instead:
    random interleaving, as SMAC (Hutter et al. 2011, "Sequential Model-Based Optimization
    for General Algorithm Configuration") and BOHB (Falkner et al. 2018, its
    ``random_fraction`` of 1/3) keep a model-based search exploring.

    Whether trial ``n`` is random depends only on ``(seed, n)`` (a fresh
    ``numpy.random.default_rng([seed, n])`` draw below ``fraction``), so a resumed or
    replayed study makes the same choice. Trials numbered below ``after`` (the inner
    sampler's start-up trials, random anyway) are left to ``inner``. Every trial, random
    or not, is passed to ``inner``'s ``before_trial``/``after_trial`` hooks and is in the
    study ``inner`` models, so the model learns from the random ones too.

    Raises:
        ValueError: ``fraction`` outside [0, 1).
    """

    def __init__(self, inner: BaseSampler, fraction: float, seed: int | None, after: int = 0):
        if not 0.0 <= fraction < 1.0:
            raise ValueError(f"random fraction {fraction}: must be in [0, 1)")
        self.inner, self.fraction, self.after = inner, fraction, after
        self._seed = 0 if seed is None else int(seed)
        self._random = RandomSampler(seed=seed)

    def is_random(self, number: int) -> bool:
        """Whether trial ``number`` is drawn at random (deterministic in seed and number)."""
        if number < self.after or self.fraction <= 0.0:
            return False
        return bool(np.random.default_rng([self._seed, number]).random() < self.fraction)

    def reseed_rng(self) -> None:
        self.inner.reseed_rng()
        self._random.reseed_rng()

    def infer_relative_search_space(self, study: Study,
                                    trial: FrozenTrial) -> dict[str, BaseDistribution]:
        if self.is_random(trial.number):
            return {}
        return self.inner.infer_relative_search_space(study, trial)

    def sample_relative(self, study: Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        if self.is_random(trial.number):
            return {}
        return self.inner.sample_relative(study, trial, search_space)

    def sample_independent(self, study: Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        chosen = self._random if self.is_random(trial.number) else self.inner
        return chosen.sample_independent(study, trial, param_name, param_distribution)

    def before_trial(self, study: Study, trial: FrozenTrial) -> None:
        self.inner.before_trial(study, trial)

    def after_trial(self, study: Study, trial: FrozenTrial, state: TrialState,
                    values: list[float] | None) -> None:
        self.inner.after_trial(study, trial, state, values)


def make_sampler(search: SearchSpec, seed: int | None = None,
                 sources: Sequence[SourceStudy] = (), max_epoch: int = 1,
                 portfolio: int = 3) -> BaseSampler:
    """:func:`base_sampler`, wrapped in :class:`RandomInterleave` when
    ``search.random_fraction`` > 0 (the spec allows it with a model sampler only,
    :data:`automl.spec.MODEL_SAMPLERS`), seeded with ``seed`` (default ``search.seed``).

    With ``sources`` (earlier studies, :class:`automl.search._transfer.SourceStudy`), that
    sampler is the inner one of a :class:`automl.search._transfer.TransferSampler`
    (``max_epoch``: epochs of a full training; ``portfolio``: the sources' zero-shot trials
    at most before their weights are measured). Without them the result is the
    no-transfer sampler itself: the same seeds give the same trials.

    Raises:
        ValueError: an unknown sampler name; sources that share no parameter with the
            space, or with several objectives.
    """
    inner = base_sampler(search, seed)
    seed = search.seed if seed is None else seed
    if search.random_fraction > 0:
        inner = RandomInterleave(inner, search.random_fraction, seed,
                                 after=search.n_startup_trials)
    if not sources:
        return inner
    if search.multi_objective:
        raise ValueError("transfer from earlier studies needs one objective")
    return TransferSampler(inner, sources, max_epoch, mode=search.mode, seed=seed,
                           portfolio=portfolio)


def base_sampler(search: SearchSpec, seed: int | None = None) -> BaseSampler:
    """The sampler ``search.sampler`` names, seeded with ``seed`` (default ``search.seed``).

    Constraints reach the samplers that model them (TPE, NSGA-II, GP) through each
    trial's ``Trial.set_constraint`` values (:meth:`StudySearch.end`); with
    ``search.objectives`` TPE is Optuna's multi-objective TPE (Ozaki et al. 2020/2022),
    the same class.

    * ``auto`` (the default), without constraints (:attr:`SearchSpec.uses_forest`): a
      random-forest model (SMAC's) and ``tpe``, each told of every trial
      (:class:`automl.search._forest.ForestSampler`); with one objective asked in turn
      (``every=2``), with several the forest on every trial after the start-up ones, on
      ParEGO's scalarisation (``tpe`` samples the start-up trials and conditional
      parameters). With constraints, ``tpe``.
    * ``tpe``: independent TPE (Bergstra et al. 2011) with the constant liar for
      parallel trials; ``multivariate_tpe``: multivariate, grouped TPE
      (Falkner et al. 2018), which handles conditional spaces by grouping.
    * ``random``: uniform random search (Bergstra & Bengio 2012).
    * ``cmaes``: CMA-ES (Hansen 2016) on numeric parameters; categorical ones are
      sampled at random by Optuna, which `automl validate` warns about.
    * ``gp``: Gaussian-process Bayesian optimisation (Optuna's GPSampler).
    * ``qmc``: scrambled Sobol quasi-Monte Carlo.
    * ``nsga2``: NSGA-II (Deb et al. 2002), Optuna's ``NSGAIISampler`` (default population
      50), for one objective or several.
    """
    seed, startup = search.seed if seed is None else seed, search.n_startup_trials
    s = optuna.samplers
    if search.sampler in ("tpe", "auto"):
        tpe = s.TPESampler(seed=seed, n_startup_trials=startup, multivariate=False,
                           constant_liar=True)
        if not search.uses_forest:
            return tpe
        return ForestSampler(tpe, seed, startup, every=1 if search.multi_objective else 2)
    if search.sampler == "multivariate_tpe":
        return s.TPESampler(seed=seed, n_startup_trials=startup, multivariate=True, group=True,
                            constant_liar=True)
    if search.sampler == "nsga2":
        return s.NSGAIISampler(seed=seed)
    if search.sampler == "random":
        return s.RandomSampler(seed=seed)
    if search.sampler == "cmaes":
        return s.CmaEsSampler(seed=seed, n_startup_trials=startup,
                              warn_independent_sampling=False)
    if search.sampler == "gp":
        return s.GPSampler(seed=seed, n_startup_trials=startup)
    if search.sampler == "qmc":
        return s.QMCSampler(seed=seed, qmc_type="sobol", scramble=True,
                            warn_independent_sampling=False)
    raise ValueError(f"unknown sampler {search.sampler!r}")
