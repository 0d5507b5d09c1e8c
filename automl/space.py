"""Spec -> Optuna define-by-run search space, and a sampled flat config -> :class:`TrialConfig`.

Parameter names are the spec's key paths (``training.lr``, ``model.resnet.depth``),
so every branch of a conditional space has distinct names and Optuna's
distributions never clash. Imports optuna but neither torch nor ray.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from automl.spec import (
    AUGMENT_IDENTITY,
    TASK_LOSSES,
    CategoricalDomain,
    Experiment,
    FloatDomain,
    IntDomain,
    is_import_path,
    values_of,
)

_TRAINING_KEYS = ("optimizer", "lr", "batch_size", "epochs", "weight_decay", "init", "loss")


def _suggest(trial: Any, name: str, param: Any, constants: dict[str, Any]) -> Any:
    if isinstance(param, FloatDomain):
        return trial.suggest_float(name, param.low, param.high, log=param.log, step=param.step)
    if isinstance(param, IntDomain):
        return trial.suggest_int(name, param.low, param.high, log=param.log, step=param.step or 1)
    if isinstance(param, CategoricalDomain):
        return trial.suggest_categorical(name, param.choices)
    constants[name] = param
    return param


class DefineByRun:
    """The Optuna define-by-run function for an experiment's search space.

    Called with an ``optuna.Trial`` (or Ray's suggest captor), it calls
    ``suggest_*`` for every searched parameter that applies to this trial and
    returns the fixed values, so ``{**trial.params, **returned}`` is the whole
    flat config that :meth:`TrialConfig.from_flat` reads. A class rather than a
    closure so Ray can pickle the searcher's state.
    """

    def __init__(self, exp: Experiment):
        self.exp = exp

    def __call__(self, trial: Any) -> dict[str, Any]:
        exp = self.exp
        constants: dict[str, Any] = {}
        family = _suggest(trial, "model.family", exp.model.family, constants)
        for key, param in exp.model.branch(family).items():
            _suggest(trial, f"model.{family}.{key}", param, constants)
        for key in _TRAINING_KEYS:
            value = _suggest(trial, f"training.{key}", getattr(exp.training, key), constants)
            if key == "optimizer" and value == "sgd":
                for k, p in dict(exp.training.sgd).items():
                    _suggest(trial, f"training.sgd.{k}", p, constants)
        if not exp.data.augment.is_identity():
            for key in exp.data.augment.sampled_keys():  # the image or the signal parameters
                _suggest(trial, f"data.augment.{key}", getattr(exp.data.augment, key), constants)
        return constants


def define_by_run(exp: Experiment) -> Callable[[Any], dict[str, Any]]:
    """See :class:`DefineByRun`."""
    return DefineByRun(exp)


@dataclass(frozen=True)
class TrialConfig:
    """Everything one trial needs to build and train its model (JSON-serialisable).

    ``arch`` is ``{"family": ..., <family params>}`` as ``automl.models.build_model``
    takes it; ``lr`` is the peak learning rate; ``epochs`` the trial's budget;
    ``augment`` the training-batch augmentation (images: ``rotation`` degrees, ``hflip``
    probability, ``crop_scale`` smallest area fraction; 1D signals: ``shift`` time steps,
    ``scale`` amplitude fraction, ``noise`` standard deviation; empty = none).
    """

    arch: dict[str, Any]
    optimizer: str
    lr: float
    batch_size: int
    epochs: int
    weight_decay: float
    init: str
    momentum: float = 0.0
    nesterov: bool = False
    lr_schedule: str = "cosine"
    label_smoothing: float = 0.0
    seed: int = 0
    #: the learning task (``automl.task``) and its training loss (``training.loss``)
    task: str = "classification"
    loss: str = "cross_entropy"
    #: the user's own search metric (an import path) each epoch also reports, or None
    metric: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    augment: dict[str, float] = field(default_factory=dict)

    @classmethod
    def from_flat(cls, flat: dict[str, Any], exp: Experiment, seed: int = 0) -> TrialConfig:
        """Build from a flat ``{"training.lr": ..., "model.resnet.depth": ...}`` config.

        Raises:
            KeyError: a required parameter is absent from ``flat``.
        """
        family = flat["model.family"]
        prefix = f"model.{family}."
        arch = {"family": family}
        arch.update({k[len(prefix):]: v for k, v in flat.items() if k.startswith(prefix)})
        opt = flat["training.optimizer"]
        return cls(
            arch=arch,
            optimizer=opt,
            lr=float(flat["training.lr"]),
            batch_size=int(flat["training.batch_size"]),
            epochs=int(flat["training.epochs"]),
            weight_decay=float(flat["training.weight_decay"]),
            init=flat["training.init"],
            momentum=float(flat.get("training.sgd.momentum", 0.0)) if opt == "sgd" else 0.0,
            nesterov=bool(flat.get("training.sgd.nesterov", False)) if opt == "sgd" else False,
            lr_schedule=exp.training.lr_schedule,
            label_smoothing=exp.training.label_smoothing,
            seed=seed,
            task=exp.task or "classification",
            loss=flat.get("training.loss") or _default_loss(exp),
            metric=exp.search.metric if is_import_path(exp.search.metric) else None,
            augment={k: float(flat[f"data.augment.{k}"]) for k in AUGMENT_IDENTITY
                     if f"data.augment.{k}" in flat},
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrialConfig:
        return cls(**d)


def _default_loss(exp: Experiment) -> str:
    """The loss of a flat config that does not name one (a study from before losses were
    part of the space): the spec's fixed loss, else its task's default."""
    fixed = exp.training.loss if isinstance(exp.training.loss, str) else None
    return fixed or TASK_LOSSES[exp.task or "classification"][0]


def describe(exp: Experiment) -> dict[str, Any]:
    """Parameters of the search space and its size.

    Returns:
        ``{"parameters": [{"name", "domain", "when"}...], "size": int | inf,
        "searched": int}``; ``size`` counts distinct configurations across all
        conditional branches and is ``inf`` when any applicable range is continuous.
    """
    params: list[dict[str, Any]] = []

    def add(name: str, param: Any, when: str | None = None) -> float:
        searched = not isinstance(param, (str, int, float, bool))
        params.append(
            {
                "name": name,
                "domain": param.model_dump() if searched else {"fixed": param},
                "when": when,
            }
        )
        return param.size() if searched else 1

    size = 0.0
    fam_size = add("model.family", exp.model.family)
    del fam_size
    for fam in exp.model.families():
        branch = 1.0
        for key, p in exp.model.branch(fam).items():
            branch *= add(f"model.{fam}.{key}", p, when=f"model.family == {fam}")
        size += branch
    for key in _TRAINING_KEYS:
        param = getattr(exp.training, key)
        if key == "optimizer":
            opt_size = 0.0
            for opt in values_of(param) or []:
                branch = 1.0
                if opt == "sgd":
                    for k, p in dict(exp.training.sgd).items():
                        branch *= add(f"training.sgd.{k}", p, when="training.optimizer == sgd")
                opt_size += branch
            add("training.optimizer", param)
            size *= opt_size
        else:
            size *= add(f"training.{key}", param)
    if not exp.data.augment.is_identity():
        for key in exp.data.augment.sampled_keys():
            size *= add(f"data.augment.{key}", getattr(exp.data.augment, key))
    searched = sum(1 for p in params if "fixed" not in p["domain"])
    return {"parameters": params, "size": size if math.isfinite(size) else math.inf,
            "searched": searched}


class Misfit(Exception):
    """Parameters that do not fit a search space: ``param`` and ``kind`` (``not searched
    before``, ``outside its new domain``, ``fixed now``); the message gives the values."""

    def __init__(self, param: str, kind: str, message: str):
        super().__init__(message)
        self.param, self.kind = param, kind


class Replay:
    """Stands in for an ``optuna.Trial``: answers each ``suggest_*`` with a recorded
    value after checking it lies in the distribution asked for."""

    def __init__(self, params: dict[str, Any]):
        self.params = params
        self.distributions: dict[str, BaseDistribution] = {}

    def suggest_float(self, name, low, high, *, log=False, step=None):
        return self._take(name, FloatDistribution(low, high, log=log, step=step))

    def suggest_int(self, name, low, high, *, log=False, step=1):
        return self._take(name, IntDistribution(low, high, log=log, step=step))

    def suggest_categorical(self, name, choices):
        return self._take(name, CategoricalDistribution(choices))

    def _take(self, name: str, dist: BaseDistribution):
        if name not in self.params:
            raise Misfit(name, "not searched before", f"{name} is searched now but was not then")
        value = self.params[name]
        if not contains(dist, value):
            raise Misfit(name, "outside its new domain", f"{name}={value!r} is outside its new "
                         "domain")
        self.distributions[name] = dist
        return value


def contains(dist: BaseDistribution, v: Any) -> bool:
    """Whether value ``v`` lies in Optuna distribution ``dist`` (type, range and step)."""
    if isinstance(dist, CategoricalDistribution):
        return any(type(c) is type(v) and c == v for c in dist.choices)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    if isinstance(dist, IntDistribution) and not float(v).is_integer():
        return False
    tol = 1e-9 * max(1.0, abs(dist.high))
    if not dist.low - tol <= v <= dist.high + tol:
        return False
    if dist.step:
        k = (v - dist.low) / dist.step
        return math.isclose(k, round(k), abs_tol=1e-6)
    return True

def flat_config(exp: Experiment, params: dict[str, Any]) -> dict[str, Any]:
    """The whole flat config of sampled ``params`` (searched values only, as
    ``optuna.Trial.params`` holds them): ``params`` plus the fixed values the space
    returns for them (what :meth:`TrialConfig.from_flat` reads).

    Raises:
        Misfit: ``params`` do not fit ``exp``'s space.
    """
    replay = Replay(params)
    fixed = define_by_run(exp)(replay)
    return {**{k: params[k] for k in replay.distributions}, **fixed}


class _Walker:
    """Stands in for an ``optuna.Trial`` to enumerate a finite space: follows ``path``
    (the index of the value taken at each ``suggest_*`` call) and takes the first value
    past its end, recording how many values each call had."""

    def __init__(self, path: list[int]):
        self.path, self.sizes, self.params = path, [], {}

    def _take(self, name: str, values: list) -> Any:
        i = len(self.sizes)
        self.sizes.append(len(values))
        value = values[self.path[i] if i < len(self.path) else 0]
        self.params[name] = value
        return value

    def suggest_float(self, name, low, high, *, log=False, step=None):
        if step is None:
            raise ValueError(f"{name} is continuous: the space has no finite list of values")
        n = int(round((high - low) / step))
        return self._take(name, [float(low + i * step) for i in range(n + 1)])

    def suggest_int(self, name, low, high, *, log=False, step=1):
        return self._take(name, list(range(int(low), int(high) + 1, int(step or 1))))

    def suggest_categorical(self, name, choices):
        return self._take(name, list(choices))


def enumerate_params(exp: Experiment, limit: int = 100_000) -> list[dict[str, Any]]:
    """Every configuration (searched values only, ``optuna.Trial.params``-shaped) of a
    finite space, in depth-first order of its ``suggest_*`` calls, conditional branches
    included; at most ``limit`` of them.

    Raises:
        ValueError: the space has a continuous parameter.
    """
    space, out, path = define_by_run(exp), [], []
    while len(out) < limit:
        walker = _Walker(path)
        space(walker)
        out.append(walker.params)
        full = path + [0] * (len(walker.sizes) - len(path))
        i = len(full) - 1
        while i >= 0 and full[i] + 1 >= walker.sizes[i]:
            i -= 1
        if i < 0:
            break
        path = full[:i] + [full[i] + 1]
    return out
