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
import math
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    Tag,
    ValidationError,
    field_validator,
    model_validator,
)

from automl._compression_spec import STAGE_NAMES, STAGE_SPECS, CompressionSpec
from automl._nightly_spec import NightlySpec
from automl._yaml import load_yaml
from automl.errors import SpecError

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
class ImputeSpec(_Strict):
    """How missing feature values are filled (scikit-learn ``SimpleImputer`` strategies),
    fitted on training rows only."""

    numeric: Literal["mean", "median", "most_frequent"] = "median"
    categorical: Literal["most_frequent", "constant"] = "most_frequent"


class AugmentSpec(_Strict):
    """Image augmentation of training batches only (kornia); each value is searchable.

    ``rotation``: largest angle in degrees (uniform in ``[-r, r]``); ``hflip``:
    probability of a horizontal flip; ``crop_scale``: smallest area fraction a random
    resized crop keeps (1.0 = no crop). The defaults change nothing.
    """

    rotation: Domain = 0.0
    hflip: Domain = 0.0
    crop_scale: Domain = 1.0

    @model_validator(mode="after")
    def _ranges(self) -> AugmentSpec:
        for key, hi, low_open in (("rotation", 180.0, False), ("hflip", 1.0, False),
                                  ("crop_scale", 1.0, True)):
            param = getattr(self, key)
            _check_numeric(param, key)
            lo, top = lower_bound(param), upper_bound(param)
            if top > hi or (low_open and lo <= 0):
                bounds = f"0 < {key} <= {hi:g}" if low_open else f"0 <= {key} <= {hi:g}"
                raise ValueError(f"data.augment.{key}: must satisfy {bounds} (got {lo}..{top})")
        return self

    def is_identity(self) -> bool:
        """True when every parameter is fixed at the value that changes nothing."""
        return all(getattr(self, k) == v for k, v in AUGMENT_IDENTITY.items())


class DataSpec(_Strict):
    """Where the examples come from, how they are cleaned and split (fractions of all rows).

    ``source`` is a bundled scikit-learn set (no ``path``) or a file kind read from
    ``path`` (relative paths resolve against the working directory): ``csv`` and
    ``parquet`` need ``target`` (the label column); ``npz`` holds arrays ``X`` and
    ``target`` (default ``y``); ``image_folder`` has one subfolder per class.
    """

    source: str = "digits"
    path: str | None = None
    target: str | None = None
    image_size: int | None = Field(None, ge=1)
    test_size: float = Field(0.2, gt=0, lt=1)
    val_size: float = Field(0.2, gt=0, lt=1)
    seed: int = 0
    dedupe: bool = True
    impute: ImputeSpec = ImputeSpec()
    augment: AugmentSpec = AugmentSpec()

    @field_validator("source")
    @classmethod
    def _source(cls, v: str) -> str:
        return _check_allowed(v, BUNDLED_DATASETS + FILE_SOURCES, "data source")

    @model_validator(mode="after")
    def _sizes(self) -> DataSpec:
        if self.test_size + self.val_size >= 0.9:
            raise ValueError(
                f"test_size + val_size must leave at least 10% for training "
                f"(got {self.test_size} + {self.val_size})"
            )
        if self.source in FILE_SOURCES and not self.path:
            raise ValueError(f"data.path: source '{self.source}' reads a file; set data.path")
        if self.source in BUNDLED_DATASETS and self.path:
            raise ValueError(f"data.path: source '{self.source}' is bundled with scikit-learn "
                             "and reads no file; remove data.path or set source: csv")
        if self.source in ("csv", "parquet") and not self.target:
            raise ValueError(f"data.target: a {self.source} file needs the name of its label "
                             "column; set data.target")
        if self.source not in ("csv", "parquet", "npz") and self.target:
            raise ValueError(f"data.target: source '{self.source}' has no target column; "
                             "remove data.target")
        if self.image_size is not None and self.source != "image_folder":
            raise ValueError("data.image_size: only an image_folder is resized; remove it")
        return self

    @property
    def is_image(self) -> bool | None:
        """True for image data, False for tabular, None when the file decides (npz)."""
        if self.source == "npz":
            return None
        return self.source in IMAGE_DATASETS or self.source == "image_folder"


class ResNetSpace(_Strict):
    """CIFAR-style ResNet (He et al. 2016): residual blocks per stage and base width."""

    depth: Domain = 1
    width: Domain = 16
    stages: Domain = 3


class VGGSpace(_Strict):
    """VGG-style net (Simonyan & Zisserman 2014): conv blocks and base width."""

    depth: Domain = 2
    width: Domain = 32
    fc_width: Domain = 128
    dropout: Domain = 0.0


class MLPSpace(_Strict):
    """Multi-layer perceptron: hidden layers, width, dropout."""

    depth: Domain = 2
    width: Domain = 128
    dropout: Domain = 0.0


class ViTSpace(_Strict):
    """Small vision transformer (Dosovitskiy et al. 2021)."""

    patch_size: Domain = 2
    dim: Domain = 64
    depth: Domain = 2
    heads: Domain = 4
    mlp_ratio: Domain = 2.0
    dropout: Domain = 0.0


_INT_ARCH_KEYS = {"depth", "width", "stages", "fc_width", "patch_size", "dim", "heads"}


class ModelSpec(_Strict):
    """The architecture search space: ``family`` selects which sub-section applies."""

    family: Domain = "resnet"
    resnet: ResNetSpace = ResNetSpace()
    vgg: VGGSpace = VGGSpace()
    mlp: MLPSpace = MLPSpace()
    vit: ViTSpace = ViTSpace()

    @field_validator("family")
    @classmethod
    def _family(cls, v: Any) -> Any:
        return _check_allowed(v, FAMILIES, "model family")

    @model_validator(mode="after")
    def _arch_values(self) -> ModelSpec:
        for fam in FAMILIES:
            for key, param in self.branch(fam).items():
                integer = key in _INT_ARCH_KEYS
                try:
                    _check_numeric(param, f"{fam}.{key}", positive=integer, integer=integer)
                except ValueError as e:
                    raise ValueError(f"model.{fam}.{key}: {e}") from None
        return self

    def families(self) -> list[str]:
        return values_of(self.family) or []

    def branch(self, family: str) -> dict[str, Any]:
        return dict(getattr(self, family))


class SGDSpace(_Strict):
    """SGD-only hyperparameters, sampled only when ``optimizer`` is ``sgd``."""

    momentum: Domain = 0.9
    nesterov: Domain = False


class GuardSpec(_Strict):
    """Divergence guard: a trial whose loss is not finite, whose epoch loss exceeds
    ``max_loss_ratio`` x its starting loss (first batch), or whose gradient norm exceeds
    ``max_grad_norm`` is stopped and reported to the searcher as failed."""

    max_loss_ratio: float | None = Field(10.0, gt=1)
    max_grad_norm: float | None = Field(None, gt=0)


class TrainingSpec(_Strict):
    """Optimisation hyperparameters of one trial; ``epochs`` is the fidelity ASHA cuts."""

    optimizer: Domain = "adam"
    lr: Domain = 1e-3
    batch_size: Domain = 64
    epochs: Domain = 10
    weight_decay: Domain = 0.0
    init: Domain = "default"
    lr_schedule: Literal["cosine", "constant"] = "cosine"
    label_smoothing: float = Field(0.0, ge=0, lt=1)
    sgd: SGDSpace = SGDSpace()
    guard: GuardSpec = GuardSpec()

    @field_validator("optimizer")
    @classmethod
    def _optimizer(cls, v: Any) -> Any:
        return _check_allowed(v, OPTIMIZERS, "optimizer")

    @field_validator("init")
    @classmethod
    def _init(cls, v: Any) -> Any:
        return _check_allowed(v, INITS, "weight initialisation")

    @field_validator("lr")
    @classmethod
    def _lr(cls, v: Any) -> Any:
        return _check_numeric(v, "lr", positive=True)

    @field_validator("batch_size", "epochs")
    @classmethod
    def _positive_int(cls, v: Any, info) -> Any:
        return _check_numeric(v, info.field_name, positive=True, integer=True)

    @field_validator("weight_decay")
    @classmethod
    def _wd(cls, v: Any) -> Any:
        return _check_numeric(v, "weight_decay")


class SearchSpec(_Strict):
    """How configurations are proposed (Optuna sampler via Ray Tune's OptunaSearch)."""

    sampler: Literal["tpe", "multivariate_tpe", "random", "cmaes", "gp", "qmc"] = "tpe"
    seed: int = 0
    num_samples: int = Field(32, ge=1, le=100_000)
    time_budget_s: float | None = Field(None, gt=0)
    metric: str = "val_accuracy"
    mode: Literal["max", "min"] | None = None
    n_startup_trials: int = Field(8, ge=0)
    fail_fast: bool = False  # stop the sweep at the first failed trial (still resumable)

    @field_validator("metric")
    @classmethod
    def _metric(cls, v: str) -> str:
        return _check_allowed(v, tuple(REPORTED_METRICS), "metric")

    @model_validator(mode="after")
    def _mode(self) -> SearchSpec:
        if self.mode is None:
            object.__setattr__(self, "mode", REPORTED_METRICS[self.metric])
        elif self.mode != REPORTED_METRICS[self.metric]:
            raise ValueError(
                f"mode {self.mode!r} optimises {self.metric} the wrong way; "
                f"use mode: {REPORTED_METRICS[self.metric]}"
            )
        return self


class SchedulerSpec(_Strict):
    """Early stopping: ASHA (Li et al. 2020, "A System for Massively Parallel
    Hyperparameter Tuning"), budget in epochs."""

    type: Literal["asha", "none"] = "asha"
    grace_period: int = Field(1, ge=1)
    reduction_factor: float = Field(3.0, ge=2)
    max_epochs: int | None = Field(None, ge=1)


class SelectionSpec(_Strict):
    """Naming a winner: the search's ``top_k`` trials are re-scored by stratified k-fold
    cross-validation on the training rows (train + validation; the test split stays
    held out), the best mean ``metric`` wins, and near-ties (within ``tie_tolerance``)
    go to the smaller model.

    ``fold_halving``: every candidate runs fold 1, only those within ``halving_margin``
    of the fold-1 leader run the rest. ``allow_fewer_folds``: a class with fewer
    training rows than ``cv_folds`` lowers the fold count (with a warning) instead of
    failing. ``timeout_s`` bounds the whole cross-validation (seconds).
    """

    top_k: int = Field(3, ge=1)
    cv_folds: int = Field(5, ge=2, le=50)
    cv_repeats: int = Field(1, ge=1, le=20)
    metric: Literal["accuracy", "balanced_accuracy", "precision_macro", "recall_macro",
                    "f1_macro"] = "accuracy"
    tie_tolerance: float = Field(0.002, ge=0, lt=1)
    fold_halving: bool = False
    halving_margin: float = Field(0.01, ge=0, lt=1)
    allow_fewer_folds: bool = False
    timeout_s: float = Field(1800.0, gt=0)


class ResourcesSpec(_Strict):
    """What one trial asks of the cluster, and how big the local Ray instance is.

    One worker: the trial trains in its own Tune process with ``cpus_per_worker``
    CPUs. Two or more: the trial runs a Ray Train ``TorchTrainer`` with that many
    data-parallel workers (DDP; FSDP for models that do not fit one device), each
    with ``cpus_per_worker`` CPUs and ``gpus_per_worker`` GPUs, plus a tiny driver.
    """

    workers_per_trial: int = Field(1, ge=1, le=1024)
    cpus_per_worker: float = Field(1.0, gt=0)
    gpus_per_worker: float = Field(0.0, ge=0)
    # what one worker process needs in RAM (torch + data + model: ~0.5 GB for digits);
    # admission bounds concurrency by memory as well as CPUs
    memory_per_worker_mb: int = Field(768, ge=64)
    strategy: Literal["ddp", "fsdp"] = "ddp"
    precision: Literal["fp32", "bf16", "fp16"] = "fp32"
    concurrent_trials: Union[Literal["auto"], Annotated[int, Field(ge=1)]] = "auto"
    max_failures: int = Field(1, ge=0)
    num_cpus: int | None = Field(None, ge=1)
    object_store_mb: int = Field(512, ge=80)

    @model_validator(mode="after")
    def _devices(self) -> ResourcesSpec:
        gpus = self.gpus_per_worker
        if self.workers_per_trial > 1 and gpus and not float(gpus).is_integer():
            raise ValueError(
                f"resources.gpus_per_worker: {gpus} is fractional; data-parallel workers "
                "each need whole GPUs (NCCL); use 1, or workers_per_trial: 1"
            )
        if self.precision != "fp32" and not gpus:
            raise ValueError(
                f"resources.precision: {self.precision} autocast needs GPUs; set "
                "gpus_per_worker: 1 or precision: fp32"
            )
        if self.strategy == "fsdp" and not gpus:
            raise ValueError("resources.strategy: fsdp needs GPUs; use ddp on CPUs")
        return self

    @property
    def distributed(self) -> bool:
        """True when trials run as Ray Train worker groups (two or more workers)."""
        return self.workers_per_trial > 1

    @property
    def cpus_per_trial(self) -> float:
        """CPUs one trial holds in all: its workers plus, when distributed, its driver."""
        return self.workers_per_trial * self.cpus_per_worker + (0.01 if self.distributed else 0)


class OutputSpec(_Strict):
    """Where run directories are written (``<dir>/<name>``).

    On a cluster of several nodes, trial checkpoints must land on storage every
    node reaches: a URI (``storage_uri: s3://bucket/automl``, ``gs://...``) or a
    ``dir`` on a shared filesystem declared with ``shared: true``.
    """

    dir: str = "runs"
    shared: bool = False
    storage_uri: str | None = Field(None, pattern=r"^[a-z][a-z0-9+.-]*://\S+$")


class TrackingSpec(_Strict):
    """Experiment tracking: one W&B run per trial, grouped by sweep, and TensorBoard event
    files per trial.

    ``mode: auto`` is ``online`` when a W&B API key is configured (``WANDB_API_KEY`` or a
    ``.netrc`` entry for the W&B host) and ``offline`` otherwise (``wandb sync`` uploads
    later). ``WANDB_MODE=offline`` or ``disabled`` in the environment always wins. The key
    itself never goes into the spec. ``project`` defaults to the experiment name.
    """

    backend: Literal["none", "wandb"] = "wandb"
    mode: Literal["offline", "online", "auto"] = "auto"
    project: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
    entity: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
    tensorboard: bool = True


class RegistrySpec(_Strict):
    """The local model registry the winner is registered in (``automl registry ...``).

    ``dir`` defaults to ``<output.dir>/registry``; ``name`` (the registered model's
    name) defaults to the experiment name.
    """

    enabled: bool = True
    dir: str | None = None
    name: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


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
