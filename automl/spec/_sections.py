"""The spec's sections, one pydantic model each: data, model, training, search,
scheduler, selection, resources, output, tracking, registry."""


from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import (
    Field,
    field_validator,
    model_validator,
)

from automl.spec._domains import (
    AUGMENT_IDENTITY,
    BUNDLED_DATASETS,
    FAMILIES,
    FILE_SOURCES,
    IMAGE_DATASETS,
    INITS,
    OPTIMIZERS,
    REPORTED_METRICS,
    Domain,
    _check_allowed,
    _check_numeric,
    _Strict,
    lower_bound,
    upper_bound,
    values_of,
)


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
    """Optimisation hyperparameters of one trial; ``epochs`` is the fidelity ASHA cuts.

    ``checkpoint_every``: a trial saves its checkpoint where the scheduler can stop it,
    at its last epoch and, when > 0, every that many epochs (what a crashed trial or a
    killed sweep continues from; 0 keeps only the first two)."""

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
    checkpoint_every: int = Field(0, ge=0)

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
    """How configurations are proposed: an Optuna sampler asked by the project's own searcher
    (``automl.search.StudySearch``, plugged into Ray Tune as a ``Searcher``)."""

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
    Hyperparameter Tuning"), budget in epochs; ``brackets`` > 1 runs asynchronous
    Hyperband (Li et al. 2018): bracket ``k`` starts at ``grace_period *
    reduction_factor**k`` (``automl.search.RungPolicy``)."""

    type: Literal["asha", "none"] = "asha"
    grace_period: int = Field(1, ge=1)
    reduction_factor: float = Field(3.0, ge=2)
    max_epochs: int | None = Field(None, ge=1)
    brackets: int = Field(1, ge=1)


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


