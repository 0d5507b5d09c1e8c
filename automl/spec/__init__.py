"""The experiment spec: one YAML file -> a typed, validated :class:`Experiment`.

This module imports neither torch nor ray, so ``automl validate`` is fast and a
bad spec fails before any cluster starts.

Search-space domains (the names follow Optuna's ``suggest_*`` API):

* ``{type: float, low: 1e-4, high: 1e-1, log: true}`` (optional ``step``),
* ``{type: int, low: 1, high: 4}`` (optional ``log`` or ``step``),
* ``{type: categorical, choices: [adam, sgd]}``,
* any plain scalar: a fixed value.

Conditional parameters: a categorical selector (``model.family``,
``training.optimizer``) has one sub-section per choice (``model.resnet``,
``training.sgd``); a sub-section's parameters are sampled only in trials that
pick its choice, under distinct names (``model.resnet.depth``).
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    Field,
    ValidationError,
    model_validator,
)

from automl._yaml import load_yaml
from automl.errors import SpecError
from automl.spec._compression import STAGE_NAMES, STAGE_SPECS, CompressionSpec
from automl.spec._domains import (
    AUGMENT_IDENTITY,
    BUNDLED_DATASETS,
    CV_METRICS,
    DOMAIN_TAGS,
    FAMILIES,
    FILE_SOURCES,
    IMAGE_DATASETS,
    IMAGE_FAMILIES,
    INITS,
    OPTIMIZERS,
    REPORTED_METRICS,
    SAMPLERS,
    CategoricalDomain,
    Domain,
    FloatDomain,
    IntDomain,
    Scalar,
    _Strict,
    lower_bound,
    upper_bound,
    values_of,
)
from automl.spec._nightly import NightlySpec
from automl.spec._sections import (
    AugmentSpec,
    DataSpec,
    GuardSpec,
    ImputeSpec,
    MLPSpace,
    ModelSpec,
    OutputSpec,
    RegistrySpec,
    ResNetSpace,
    ResourcesSpec,
    SchedulerSpec,
    SearchSpec,
    SelectionSpec,
    SGDSpace,
    TrackingSpec,
    TrainingSpec,
    VGGSpace,
    ViTSpace,
)

__all__ = [
    "FAMILIES",
    "IMAGE_FAMILIES",
    "INITS",
    "OPTIMIZERS",
    "SAMPLERS",
    "BUNDLED_DATASETS",
    "IMAGE_DATASETS",
    "FILE_SOURCES",
    "CV_METRICS",
    "AUGMENT_IDENTITY",
    "REPORTED_METRICS",
    "FloatDomain",
    "IntDomain",
    "Scalar",
    "CategoricalDomain",
    "Domain",
    "DOMAIN_TAGS",
    "values_of",
    "upper_bound",
    "lower_bound",
    "ImputeSpec",
    "AugmentSpec",
    "DataSpec",
    "ResNetSpace",
    "VGGSpace",
    "MLPSpace",
    "ViTSpace",
    "ModelSpec",
    "SGDSpace",
    "GuardSpec",
    "TrainingSpec",
    "SearchSpec",
    "SchedulerSpec",
    "SelectionSpec",
    "ResourcesSpec",
    "OutputSpec",
    "TrackingSpec",
    "RegistrySpec",
    "Experiment",
    "load_spec",
]


class Experiment(_Strict):
    """A whole validated experiment. Build one with :func:`load_spec`."""

    name: str = Field("experiment", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    data: DataSpec = DataSpec()
    model: ModelSpec = ModelSpec()
    training: TrainingSpec = TrainingSpec()
    search: SearchSpec = SearchSpec()
    scheduler: SchedulerSpec = SchedulerSpec()
    selection: SelectionSpec = SelectionSpec()
    compression: CompressionSpec = CompressionSpec()
    resources: ResourcesSpec = ResourcesSpec()
    output: OutputSpec = OutputSpec()
    tracking: TrackingSpec = TrackingSpec()
    registry: RegistrySpec = RegistrySpec()
    nightly: NightlySpec = NightlySpec()

    @model_validator(mode="after")
    def _cross(self) -> Experiment:
        if self.nightly.uses_champion and not self.registry.enabled:
            raise ValueError("nightly.promote: the champion lives in the model registry; "
                             "set registry.enabled: true or remove nightly.promote/transfer")
        if self.data.is_image is False and not self.data.augment.is_identity():
            raise ValueError(
                f"data.augment: image augmentation needs image data but data.source "
                f"'{self.data.source}' is tabular; remove data.augment"
            )
        if self.data.is_image is False:
            for fam in self.model.families():
                if fam in IMAGE_FAMILIES:
                    raise ValueError(
                        f"model.family: '{fam}' needs image data but data.source "
                        f"'{self.data.source}' is tabular; use family: mlp"
                    )
        for i, student in self.compression.students():
            if self.data.is_image is False and student.family in IMAGE_FAMILIES:
                raise ValueError(
                    f"compression.stages.{i}.student.family: '{student.family}' needs image "
                    f"data but data.source '{self.data.source}' is tabular; use family: mlp"
                )
        max_epochs = self.max_epochs
        if self.scheduler.type == "asha" and self.scheduler.grace_period > max_epochs:
            raise ValueError(
                f"scheduler.grace_period: {self.scheduler.grace_period} is more than the "
                f"{max_epochs} epochs a trial can run; lower it"
            )
        rungs = self.rung_count()
        if self.scheduler.type == "asha" and self.scheduler.brackets > rungs:
            raise ValueError(
                f"scheduler.brackets: {self.scheduler.brackets} brackets need as many rungs, "
                f"but grace_period {self.scheduler.grace_period} x reduction_factor "
                f"{self.scheduler.reduction_factor:g}**k up to {max_epochs} epochs gives "
                f"{rungs}; lower brackets or raise max_epochs"
            )
        if self.scheduler.max_epochs is not None and upper_bound(self.training.epochs) > max_epochs:
            raise ValueError(
                f"training.epochs: can reach {upper_bound(self.training.epochs)} but "
                f"scheduler.max_epochs is {max_epochs}; raise max_epochs or lower epochs"
            )
        return self

    @property
    def max_epochs(self) -> int:
        """The largest number of epochs any trial runs (ASHA's ``max_t``)."""
        if self.scheduler.max_epochs is not None:
            return self.scheduler.max_epochs
        return int(upper_bound(self.training.epochs))

    def rung_count(self) -> int:
        """Rungs of the first ASHA bracket: ``grace_period * reduction_factor**i`` up to
        :attr:`max_epochs` (the count ``automl.search.RungPolicy`` builds)."""
        sch, n, level = self.scheduler, 0, float(self.scheduler.grace_period)
        while level <= self.max_epochs * (1 + 1e-9):
            n, level = n + 1, level * sch.reduction_factor
        return n

    def to_dict(self) -> dict:
        return self.model_dump(mode="json")


# --------------------------------------------------------------------------- loading
def load_spec(path: str | Path, overrides: dict[str, Any] | None = None) -> Experiment:
    """Read and validate a spec file.

    Args:
        path: YAML file.
        overrides: dotted key path -> value, applied before validation
            (``{"search.num_samples": 4}``), as the CLI's flags do.

    Raises:
        SpecError: the file is missing or unreadable, is not YAML, or fails
            validation; the message names the file and the key path.
    """
    path = Path(path)
    data = load_yaml(path)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise SpecError(
            f"the top level must be a mapping of sections, got {type(data).__name__}",
            where=str(path),
        )
    for dotted, value in (overrides or {}).items():
        node = data
        *parents, leaf = dotted.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    try:
        return Experiment.model_validate(data)
    except ValidationError as e:
        raise SpecError(_first_error(e, data), where=str(path)) from None


def _first_error(error: ValidationError, data: dict) -> str:
    errors = error.errors(include_url=False)
    # an unknown key explains the errors it causes (e.g. a missing "low"), so it goes first
    errors.sort(key=lambda e: e["type"] != "extra_forbidden")
    err = errors[0]
    loc = [str(p) for p in err["loc"] if not (isinstance(p, str) and p in DOMAIN_TAGS)]
    loc = [p for p in loc if not p.startswith(("function-after", "function-before"))]
    # a compression stage's tag (compression.stages.1.prune.ratio) is not a key the user wrote
    loc = [p for i, p in enumerate(loc) if not (p in STAGE_NAMES and i and loc[i - 1].isdigit())]
    key = ".".join(loc) or "(top level)"
    kind = err["type"]
    if kind == "extra_forbidden":
        msg = f"unknown key '{loc[-1]}'" + _suggest(loc, data)
    elif kind in ("union_tag_invalid", "union_tag_not_found"):
        msg = (
            f"unknown domain type {err.get('input', {}).get('type')!r}; "
            "use type: float, int or categorical, or write a plain value"
        )
    elif kind == "missing":
        msg = "required key is missing"
    else:
        msg = err["msg"].removeprefix("Value error, ")
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    head = msg.split(":", 1)[0]
    if "." in head and " " not in head and (not loc or head.startswith(loc[0])):
        return f"{msg}{more}"  # a cross-field check that names its own key path
    return f"{key}: {msg}{more}"


def _suggest(loc: list[str], data: dict) -> str:
    """Nearest valid key name for an unknown key at ``loc``."""
    model: Any = Experiment
    node: Any = data
    for part in loc[:-1]:
        if isinstance(node, list) and part.isdigit():  # compression.stages.<i>
            node = node[int(part)] if int(part) < len(node) else None
            model = STAGE_SPECS.get(node.get("stage")) if isinstance(node, dict) else None
            continue
        node = node.get(part) if isinstance(node, dict) else None
        field = model.model_fields.get(part) if model else None
        ann = field.annotation if field else None
        model = ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None
        if model is None and isinstance(node, dict):
            model = {"float": FloatDomain, "int": IntDomain, "categorical": CategoricalDomain}.get(
                node.get("type")
            )
    valid = list(model.model_fields) if model else []
    near = difflib.get_close_matches(loc[-1], valid, n=1, cutoff=0.5)
    if near:
        return f"; did you mean '{near[0]}'?"
    return f" (valid: {', '.join(valid)})" if valid else ""
