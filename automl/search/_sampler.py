"""Optuna samplers by name, always constructed explicitly and seeded so results do not
depend on Optuna's version defaults (FIELD-NOTES: Optuna 5 changed TPE's)."""

from __future__ import annotations

import optuna

from automl.spec import SearchSpec


def make_sampler(search: SearchSpec, seed: int | None = None) -> optuna.samplers.BaseSampler:
    """The sampler ``search.sampler`` names, seeded with ``seed`` (default ``search.seed``).

    Constraints reach the samplers that model them (TPE, NSGA-II, GP) through each
    trial's ``Trial.set_constraint`` values (:meth:`StudySearch.end`); with
    ``search.objectives`` TPE is Optuna's multi-objective TPE (Ozaki et al. 2020/2022),
    the same class.

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
    if search.sampler == "tpe":
        return s.TPESampler(seed=seed, n_startup_trials=startup, multivariate=False,
                            constant_liar=True)
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
