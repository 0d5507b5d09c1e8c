"""One search space, three dialects: a ``ConfigSpace.ConfigurationSpace`` (what YAHPO Gym,
mf-prior-bench, SMAC3 and DEHB use natively) turned into an Optuna define-by-run function
and into a Syne Tune config space, with conditional parameters handled the same way
everywhere: a parameter is active when every condition on it holds for its parent's value
(``EqualsCondition``, ``InCondition``; the only kinds the benchmark spaces use).

Benchmarks only; no product code imports this module.
"""

from __future__ import annotations

from typing import Any


def _kind(hp) -> str:
    return type(hp).__name__


def ordered(cs) -> list:
    """``cs``'s hyperparameters, each after the parents its conditions name (unconditional
    ones first, in their order; then conditional ones whose parents are placed)."""
    placed, out = set(), []
    pending = list(cs.values())
    while pending:
        progressed = False
        for hp in list(pending):
            if all(p.name in placed for p in cs.parents_of[hp.name]):
                out.append(hp)
                placed.add(hp.name)
                pending.remove(hp)
                progressed = True
        if not progressed:
            raise ValueError(f"cyclic conditions among {[h.name for h in pending]}")
    return out


def is_active(cs, name: str, config: dict[str, Any]) -> bool:
    """Whether parameter ``name`` is active given the (partial) ``config`` of its parents.

    Raises:
        ValueError: a condition is neither ``EqualsCondition`` nor ``InCondition``.
    """
    for cond in cs.parent_conditions_of[name]:
        kind = _kind(cond)
        parent = cond.parent.name
        if parent not in config:
            return False
        if kind == "EqualsCondition":
            ok = config[parent] == cond.value
        elif kind == "InCondition":
            ok = config[parent] in cond.values
        else:
            raise ValueError(f"condition {cond} on {name!r}: only EqualsCondition and "
                             f"InCondition are supported, got {kind}")
        if not ok:
            return False
    return True


def active(cs, config: dict[str, Any]) -> dict[str, Any]:
    """``config`` without the parameters that are inactive under it (a Syne Tune config
    holds every parameter; a benchmark must only see the active ones)."""
    out: dict[str, Any] = {}
    for hp in ordered(cs):
        if hp.name in config and is_active(cs, hp.name, out):
            out[hp.name] = config[hp.name]
    return out


def suggest(cs, trial) -> dict[str, Any]:
    """Optuna define-by-run over ``cs``: suggests each active parameter on ``trial``
    (floats and integers with their log flag, categoricals and ordinals by their values)
    and returns the constants (``Constant`` parameters are fixed, not searched).

    Raises:
        ValueError: a parameter type this module does not map.
    """
    fixed: dict[str, Any] = {}
    values: dict[str, Any] = {}
    for hp in ordered(cs):
        if not is_active(cs, hp.name, values):
            continue
        kind = _kind(hp)
        if kind == "UniformFloatHyperparameter":
            v = trial.suggest_float(hp.name, float(hp.lower), float(hp.upper), log=hp.log)
        elif kind == "UniformIntegerHyperparameter":
            v = trial.suggest_int(hp.name, int(hp.lower), int(hp.upper), log=hp.log)
        elif kind == "CategoricalHyperparameter":
            v = trial.suggest_categorical(hp.name, list(hp.choices))
        elif kind == "OrdinalHyperparameter":
            v = trial.suggest_categorical(hp.name, list(hp.sequence))
        elif kind == "Constant":
            v = fixed[hp.name] = hp.value
        else:
            raise ValueError(f"parameter {hp.name!r}: type {kind} is not mapped to Optuna")
        values[hp.name] = v
    return fixed


def syne_tune_space(cs) -> dict[str, Any]:
    """``cs`` as a Syne Tune config space (``syne_tune.config_space`` domains). Syne Tune
    has no conditions: every parameter is sampled, and :func:`active` drops the inactive
    ones before the benchmark sees the config.

    Raises:
        ImportError: syne-tune is not installed.
        ValueError: a parameter type this module does not map.
    """
    from syne_tune import config_space as sp

    out: dict[str, Any] = {}
    for hp in ordered(cs):
        kind = _kind(hp)
        if kind == "UniformFloatHyperparameter":
            f = sp.loguniform if hp.log else sp.uniform
            out[hp.name] = f(float(hp.lower), float(hp.upper))
        elif kind == "UniformIntegerHyperparameter":
            f = sp.lograndint if hp.log else sp.randint
            out[hp.name] = f(int(hp.lower), int(hp.upper))
        elif kind == "CategoricalHyperparameter":
            out[hp.name] = sp.choice(list(hp.choices))
        elif kind == "OrdinalHyperparameter":
            out[hp.name] = sp.ordinal(list(hp.sequence))
        elif kind == "Constant":
            out[hp.name] = hp.value
        else:
            raise ValueError(f"parameter {hp.name!r}: type {kind} is not mapped to Syne Tune")
    return out
