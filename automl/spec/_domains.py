"""Constants of the spec and its search-space domains (Optuna ``suggest_*`` names)."""


from __future__ import annotations

import difflib
import math
from typing import Annotated, Any, Literal, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    Tag,
    field_validator,
    model_validator,
)

FAMILIES = ("resnet", "vgg", "mlp", "vit")
IMAGE_FAMILIES = ("resnet", "vgg", "vit")
INITS = ("kaiming", "xavier", "orthogonal", "default")
OPTIMIZERS = ("adam", "adamw", "sgd")
SAMPLERS = ("tpe", "multivariate_tpe", "random", "cmaes", "gp", "qmc")
BUNDLED_DATASETS = ("digits", "breast_cancer", "wine", "iris")
IMAGE_DATASETS = ("digits",)
#: Data sources read from a file or folder (``data.path``).
FILE_SOURCES = ("csv", "parquet", "npz", "image_folder")
#: Scores cross-validation reports per fold (scikit-learn metrics); ``selection.metric``
#: picks the one that decides.
CV_METRICS = ("accuracy", "balanced_accuracy", "precision_macro", "recall_macro", "f1_macro")
#: Augmentation parameter values that leave an image unchanged.
AUGMENT_IDENTITY = {"rotation": 0.0, "hflip": 0.0, "crop_scale": 1.0}
#: Metrics every trial reports after each epoch, and the direction that is better.
REPORTED_METRICS = {
    "val_accuracy": "max",
    "val_loss": "min",
    "val_f1": "max",
    "train_loss": "min",
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# --------------------------------------------------------------------------- domains
class FloatDomain(_Strict):
    """A float range, ``low <= x <= high`` (``optuna.Trial.suggest_float``)."""

    type: Literal["float"]
    low: float
    high: float
    log: bool = False
    step: float | None = None

    @model_validator(mode="after")
    def _check(self) -> FloatDomain:
        _check_range(self.low, self.high, self.log, self.step)
        return self

    def size(self) -> float:
        if self.step is None:
            return math.inf
        return math.floor((self.high - self.low) / self.step + 1e-9) + 1


class IntDomain(_Strict):
    """An integer range, ``low <= x <= high`` inclusive (``optuna.Trial.suggest_int``)."""

    type: Literal["int"]
    low: int
    high: int
    log: bool = False
    step: int | None = None

    @model_validator(mode="after")
    def _check(self) -> IntDomain:
        _check_range(self.low, self.high, self.log, self.step)
        return self

    def size(self) -> float:
        return (self.high - self.low) // (self.step or 1) + 1


Scalar = Union[StrictBool, StrictInt, StrictFloat, StrictStr]


class CategoricalDomain(_Strict):
    """A choice among scalars of one type (``optuna.Trial.suggest_categorical``)."""

    type: Literal["categorical"]
    choices: list[Scalar]

    @field_validator("choices")
    @classmethod
    def _check_choices(cls, choices: list) -> list:
        if not choices:
            raise ValueError("choices is empty; list at least one value")
        kinds = {_kind(c) for c in choices}
        if len(kinds) > 1:
            raise ValueError(
                f"choices mix types ({', '.join(sorted(kinds))}): {choices!r}; "
                "write every choice as the same type (quote strings such as 'yes')"
            )
        if len(set(choices)) != len(choices):
            raise ValueError(f"choices repeat a value: {choices!r}")
        return choices

    def size(self) -> float:
        return len(self.choices)


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    return "string"


def _check_range(low: float, high: float, log: bool, step: float | None) -> None:
    if not (math.isfinite(low) and math.isfinite(high)):
        raise ValueError(f"low and high must be finite numbers (got low={low}, high={high})")
    if not low < high:
        raise ValueError(
            f"low must be < high (got low={low}, high={high}); "
            "swap them, or write a plain value for a fixed parameter"
        )
    if log and low <= 0:
        raise ValueError(f"a log range needs 0 < low < high (got low={low})")
    if log and step is not None:
        raise ValueError("log and step cannot be combined; drop one of them")
    if step is not None and step <= 0:
        raise ValueError(f"step must be > 0 (got {step})")


def _domain_tag(value: Any) -> str:
    if isinstance(value, (FloatDomain, IntDomain, CategoricalDomain)):
        return value.type
    if isinstance(value, dict):
        return str(value.get("type", "missing type"))
    return "fixed"


Domain = Annotated[
    Union[
        Annotated[FloatDomain, Tag("float")],
        Annotated[IntDomain, Tag("int")],
        Annotated[CategoricalDomain, Tag("categorical")],
        Annotated[Scalar, Tag("fixed")],
    ],
    Discriminator(_domain_tag),
]
DOMAIN_TAGS = ("float", "int", "categorical", "fixed")


def values_of(param: Any) -> list | None:
    """The finite set of values a parameter can take, or None for a range."""
    if isinstance(param, CategoricalDomain):
        return list(param.choices)
    if isinstance(param, (FloatDomain, IntDomain)):
        return None
    return [param]


def upper_bound(param: Any) -> float:
    """The largest value a numeric parameter can take."""
    if isinstance(param, (FloatDomain, IntDomain)):
        return param.high
    vals = values_of(param)
    return max(vals)


def lower_bound(param: Any) -> float:
    """The smallest value a numeric parameter can take."""
    if isinstance(param, (FloatDomain, IntDomain)):
        return param.low
    return min(values_of(param))


def _check_allowed(param: Any, allowed: tuple[str, ...], what: str) -> Any:
    vals = values_of(param)
    if vals is None:
        raise ValueError(f"{what} must be a categorical or a fixed value, not a range")
    for v in vals:
        if v not in allowed:
            near = difflib.get_close_matches(str(v), allowed, n=1)
            hint = f"; did you mean '{near[0]}'?" if near else ""
            raise ValueError(f"unknown {what} {v!r}{hint} (valid: {', '.join(allowed)})")
    return param


def _check_numeric(param: Any, what: str, *, positive: bool = False, integer: bool = False) -> Any:
    vals = values_of(param)
    if vals is None:
        if integer and isinstance(param, FloatDomain):
            raise ValueError(f"{what} must be an integer; use type: int")
        vals = [param.low, param.high]
    for v in vals:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ValueError(f"{what} must be a number (got {v!r})")
        if not math.isfinite(v):
            raise ValueError(f"{what} must be a finite number (got {v!r})")
        if integer and not float(v).is_integer():
            raise ValueError(f"{what} must be an integer (got {v!r})")
        if positive and v <= 0:
            raise ValueError(f"{what} must be > 0 (got {v!r})")
        if not positive and v < 0:
            raise ValueError(f"{what} must be >= 0 (got {v!r})")
    return param


# --------------------------------------------------------------------------- sections
