"""Random interleaving (``search.random_fraction``): which trials are random, that the
model sampler is not asked for them but still sees them, and where the spec turns it on.
Pure Optuna, no Ray."""

from __future__ import annotations

import optuna
import pytest
from conftest import spy_sampler

from automl.search._sampler import RandomInterleave, make_sampler
from automl.spec import MODEL_SAMPLERS, Experiment


def test_the_random_trials_depend_on_seed_and_number_and_come_at_the_fraction():
    a, b = RandomInterleave(spy_sampler(0.5), 0.3, seed=7, after=5), RandomInterleave(spy_sampler(0.5), 0.3, seed=7)
    chosen = [n for n in range(2000) if a.is_random(n)]
    assert chosen == [n for n in range(2000) if a.is_random(n)]  # deterministic
    assert not any(a.is_random(n) for n in range(5))  # the start-up trials are the inner's
    assert 0.26 < len(chosen) / 1995 < 0.34
    assert [n for n in range(5, 2000) if b.is_random(n)] == chosen  # only (seed, n) count
    other = RandomInterleave(spy_sampler(0.5), 0.3, seed=8, after=5)
    assert [n for n in range(2000) if other.is_random(n)] != chosen
    assert not any(RandomInterleave(spy_sampler(0.5), 0.0, seed=7).is_random(n) for n in range(500))
    with pytest.raises(ValueError, match=r"random fraction 1.0: must be in \[0, 1\)"):
        RandomInterleave(spy_sampler(0.5), 1.0, seed=0)


def test_random_trials_skip_the_model_but_it_is_told_of_every_trial():
    spy = spy_sampler(0.5)
    sampler = RandomInterleave(spy, 0.5, seed=3)
    study = optuna.create_study(sampler=sampler, direction="maximize")
    study.optimize(lambda t: t.suggest_float("x", 0.0, 1.0), n_trials=40)
    random_ones = {n for n in range(40) if sampler.is_random(n)}
    assert 10 < len(random_ones) < 30
    assert spy.asked == set(range(40)) - random_ones
    assert spy.told == list(range(40))
    xs = {t.number: t.params["x"] for t in study.trials}
    assert all(xs[n] == 0.5 for n in spy.asked)  # the spy's answer
    assert all(xs[n] != 0.5 for n in random_ones)  # drawn by the random sampler


def _search(**over):
    return Experiment.model_validate({"name": "s", "search": over}).search


def test_make_sampler_wraps_model_samplers_only_when_asked():
    assert isinstance(make_sampler(_search(sampler="tpe")), optuna.samplers.TPESampler)
    wrapped = make_sampler(_search(sampler="tpe", random_fraction=0.25, n_startup_trials=6,
                                   seed=4))
    assert isinstance(wrapped, RandomInterleave) and isinstance(wrapped.inner,
                                                                optuna.samplers.TPESampler)
    assert (wrapped.fraction, wrapped.after) == (0.25, 6)
    assert set(MODEL_SAMPLERS) == {"auto", "tpe", "multivariate_tpe", "gp", "cmaes"}
    for name in MODEL_SAMPLERS:
        assert isinstance(make_sampler(_search(sampler=name, random_fraction=0.1)),
                          RandomInterleave)


def test_the_spec_bounds_the_fraction_and_refuses_it_without_a_model():
    for bad in (1.0, -0.1):
        with pytest.raises(ValueError, match="search.random_fraction"):
            _search(random_fraction=bad)
    for name in ("random", "qmc", "nsga2"):  # nothing to interleave with
        with pytest.raises(ValueError, match=f"search.random_fraction: sampler {name} fits "
                                             "no model .* use one of auto, tpe, multivariate_tpe"):
            _search(sampler=name, random_fraction=0.25)
        assert _search(sampler=name).random_fraction == 0.0
