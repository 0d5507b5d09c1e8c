"""The random-forest sampler and ``auto``, the default portfolio: encoding, whose turn a
trial is, that it models learning curves, parallel trials and conditional parameters, that
it replays exactly, and that it beats random search on a function with one optimum.
Pure Optuna and scikit-learn, no Ray."""

from __future__ import annotations

import json
import math
import statistics

import optuna
import pytest
from conftest import spy_sampler
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from automl.search._forest import ForestSampler, decode, encode
from automl.search._sampler import make_sampler
from automl.spec import Experiment

optuna.logging.set_verbosity(optuna.logging.WARNING)


@pytest.mark.parametrize("dist, value", [
    (FloatDistribution(1e-4, 1e-1, log=True), 1e-3),
    (FloatDistribution(0.0, 1.0, step=0.25), 0.75),
    (IntDistribution(6, 18, step=6), 12),
    (IntDistribution(1, 1024, log=True), 64),
    (CategoricalDistribution(["adam", "sgd", None]), None),
])
def test_decode_inverts_encode(dist, value):
    u = encode(dist, value)
    assert 0.0 <= u <= (len(dist.choices) - 1 if hasattr(dist, "choices") else 1.0)
    assert decode(dist, u) == pytest.approx(value) if value is not None else decode(dist, u) is None
    if not hasattr(dist, "choices"):
        assert dist.low <= decode(dist, 1.7) <= dist.high and decode(dist, -3.0) == pytest.approx(dist.low)


def _quadratic(trial):  # one optimum at (0.3, 0.7), maximised
    x, y = trial.suggest_float("x", 0.0, 1.0), trial.suggest_float("y", 0.0, 1.0)
    return -((x - 0.3) ** 2 + (y - 0.7) ** 2)


def test_every_k_trials_are_the_forests_and_the_fallback_is_told_of_all():
    spy = spy_sampler()
    sampler = ForestSampler(spy, seed=0, n_startup_trials=4, every=2)
    study = optuna.create_study(sampler=sampler, direction="maximize")
    study.optimize(_quadratic, n_trials=16)
    forest_turns = {n for n in range(4, 16) if n % 2 == 0}
    assert spy.asked == set(range(16)) - forest_turns  # start-up and odd trials
    assert spy.told == list(range(16))
    with pytest.raises(ValueError, match="every must be >= 1"):
        ForestSampler(spy, every=0)


def test_it_replays_exactly_and_its_trials_beat_random_ones_on_one_optimum():
    def run(sampler):
        study = optuna.create_study(sampler=sampler, direction="maximize")
        study.optimize(_quadratic, n_trials=30)
        return [t.value for t in study.trials], [t.params for t in study.trials]

    fallback = optuna.samplers.RandomSampler
    forest = [run(ForestSampler(fallback(seed=s), seed=s, n_startup_trials=8)) for s in range(3)]
    assert forest[0] == run(ForestSampler(fallback(seed=0), seed=0, n_startup_trials=8))
    for s, (values, _) in enumerate(forest):
        model, rand = values[8:], run(fallback(seed=s))[0][8:]
        # the model's 22 trials sit near the optimum (random ones: about -0.2 on median);
        # a sign error or an ignored model fails this
        assert statistics.median(model) > -0.06 > statistics.median(rand)


def test_the_model_reads_learning_curves_and_scores_at_the_last_epoch():
    """Stopped trials' curves are rows: a region whose curves were good at low epochs is
    proposed, though no trial there completed."""
    study = optuna.create_study(direction="maximize")
    x = FloatDistribution(0.0, 1.0)
    for i in range(12):
        xi = i / 11
        t = optuna.trial.create_trial(
            params={"x": xi}, distributions={"x": x},
            intermediate_values={1: 1 - abs(xi - 0.8), 3: 1.2 - abs(xi - 0.8)},
            state=optuna.trial.TrialState.PRUNED)
        study.add_trial(t)
    sampler = ForestSampler(optuna.samplers.RandomSampler(seed=0), seed=0, n_startup_trials=8)
    trial = study.ask()
    proposed = sampler.sample_relative(study, study.trials[-1],
                                       sampler.infer_relative_search_space(study, trial))
    assert abs(proposed["x"] - 0.8) < 0.15


def test_parallel_trials_get_distinct_proposals_and_conditional_parameters_go_to_the_fallback():
    def objective(trial):
        opt = trial.suggest_categorical("optimizer", ["adam", "sgd"])
        lr = trial.suggest_float("lr", 1e-4, 1e-1, log=True)
        if opt == "sgd":  # conditional: never in the intersection space
            trial.suggest_float("momentum", 0.8, 0.99)
        return -abs(math.log10(lr) + 2)

    spy = spy_sampler()
    sampler = ForestSampler(spy, seed=5, n_startup_trials=6)
    study = optuna.create_study(sampler=sampler, direction="maximize")
    study.optimize(objective, n_trials=14)
    space = sampler.infer_relative_search_space(study, study.trials[-1])
    assert set(space) == {"optimizer", "lr"}
    sgd_late = [t.number for t in study.trials[6:] if t.params["optimizer"] == "sgd"]
    assert set(sgd_late) <= spy.asked  # momentum came from the fallback
    pending = [study.ask() for _ in range(3)]  # three running trials, then a fourth
    for t in pending:
        objective(t)
    fourth = study.ask()
    objective(fourth)
    lrs = [t.params["lr"] for t in [*pending, fourth]]
    assert len(set(lrs)) == 4  # no two pending trials are proposed the same configuration


def _search(**over):
    return Experiment.model_validate({"name": "s", "search": over}).search


def test_auto_is_the_default_a_portfolio_and_tpe_with_constraints():
    auto = make_sampler(_search())
    assert _search().sampler == "auto"
    assert isinstance(auto, ForestSampler) and auto.every == 2
    assert isinstance(auto.fallback, optuna.samplers.TPESampler)
    two = make_sampler(_search(objectives=[{"metric": "val_accuracy"}, {"metric": "params"}]))
    assert isinstance(two, ForestSampler) and two.every == 1  # the forest after start-up
    assert isinstance(two.fallback, optuna.samplers.TPESampler)
    constrained = _search(constraints=[{"metric": "latency_ms", "max": 1.0}])
    assert type(make_sampler(constrained)) is optuna.samplers.TPESampler
    assert type(make_sampler(_search(sampler="tpe"))) is optuna.samplers.TPESampler


def _zdt1(trial):
    """ZDT1 (Zitzler, Deb & Thiele 2000) in two variables, the first objective negated and
    maximised: the Pareto set is y = 0 for every x."""
    x, y = trial.suggest_float("x", 0.0, 1.0), trial.suggest_float("y", 0.0, 1.0)
    g = 1.0 + 9.0 * y
    return -x, g * (1.0 - math.sqrt(x / g))


def test_several_objectives_are_modelled_by_parego_and_find_the_pareto_set():
    def run(sampler):
        study = optuna.create_study(sampler=sampler, directions=["maximize", "minimize"])
        study.optimize(_zdt1, n_trials=40)
        return [t.params for t in study.trials]

    fallback = optuna.samplers.RandomSampler
    runs = [run(ForestSampler(fallback(seed=s), seed=s, n_startup_trials=8)) for s in range(3)]
    assert runs[0] == run(ForestSampler(fallback(seed=0), seed=0, n_startup_trials=8))
    model = [p for params in runs for p in params[20:]]
    rand = [p for s in range(3) for p in run(fallback(seed=s))[20:]]
    # the model's last 20 trials of each run sit near the Pareto set (random ones: about
    # 0.4 on median); a wrong sign on the maximised objective sends them all to x = 1
    assert statistics.median(p["y"] for p in model) < 0.1 < 0.3 < statistics.median(p["y"] for p in rand)
    assert statistics.median(p["x"] for p in model) < 0.5


_REPLAY = """
import json, optuna
optuna.logging.set_verbosity(optuna.logging.WARNING)
from automl.search._forest import ForestSampler

def objective(trial):  # few distinct values: the forest's predictions tie often
    w = trial.suggest_categorical("width", [8, 16, 32, 64])
    d = trial.suggest_int("depth", 1, 3)
    lr = trial.suggest_float("lr", 1e-4, 1e-1, log=True)
    return round(1.0 - abs(lr - 0.01) * 5 - 0.1 / d, 2), float(w * d)

sampler = ForestSampler(optuna.samplers.RandomSampler(seed=0), seed=0, n_startup_trials=6)
study = optuna.create_study(sampler=sampler, directions=["maximize", "minimize"])
study.optimize(objective, n_trials=30)
print(json.dumps([t.params for t in study.trials]))
"""


def test_a_study_replays_the_same_whatever_simd_numpy_dispatches_to():
    # numpy sorts with the widest SIMD the CPU has (x86-simd-sort), and ties come out in
    # another order on another CPU: the forest's proposals must not depend on that order
    # (its argsorts are stable), or a record made on one machine does not replay on the next
    import os
    import subprocess
    import sys

    try:
        from numpy._core._multiarray_umath import __cpu_features__ as cpu
    except ImportError:
        pytest.skip("numpy does not expose its CPU features")
    if not cpu.get("AVX2"):
        pytest.skip("no AVX2 to switch off on this CPU")

    def run(**env):
        out = subprocess.run([sys.executable, "-c", _REPLAY], capture_output=True, text=True,
                             timeout=120, env={**os.environ, **env})
        assert out.returncode == 0, out.stderr[-2000:]
        return json.loads(out.stdout)

    assert run() == run(NPY_DISABLE_CPU_FEATURES="X86_V3")
