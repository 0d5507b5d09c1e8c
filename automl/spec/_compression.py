"""The ``compression`` section of the spec: a chain of stages run on the winner.

One section of the spec package; ``automl.spec`` re-exports :class:`CompressionSpec`.
Like the rest of the spec it imports neither torch nor ray, so a bad stage fails at
``automl validate`` time, not after a sweep. Each stage's fields mirror the keyword
arguments of its ``automl.compress`` class (``DistillStage``, ``PruneStage``,
``QuantizeStage``), which check them again when the chain runs; ``StageSpec.to_stage``
gives the dict ``automl.compress.run_chain`` takes.

Example::

    compression:
      stages:
        - {stage: distill, student: {family: resnet, width: 8, stages: 2}, epochs: 30,
           max_accuracy_drop: 0.01}
        - {stage: prune, method: structured, pruning_ratio: 0.3, fine_tune_epochs: 10}
        - {stage: quantize, method: static, calibration_batches: 8}
"""

from __future__ import annotations

import difflib
from typing import Annotated, Any, Literal, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    field_validator,
    model_serializer,
    model_validator,
)

STAGE_NAMES = ("distill", "prune", "quantize")
STUDENT_FAMILIES = ("resnet", "vgg", "mlp", "vit", "resnet1d", "tcn", "transformer1d")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class StudentSpec(_Strict):
    """A fixed student architecture (``automl.models.build_model``'s ``arch``): a
    ``family`` and any of that family's parameters (the keys of ``model.<family>``);
    parameters left out take the model class's defaults."""

    #: the student's family; it must fit the data's kind
    family: Literal["resnet", "vgg", "mlp", "vit", "resnet1d", "tcn", "transformer1d"]
    #: as ``model.<family>.depth``; None: the model's default
    depth: int | None = Field(None, ge=1)
    #: as ``model.<family>.width``; None: the model's default
    width: int | None = Field(None, ge=1)
    #: as ``model.<family>.stages``; None: the model's default
    stages: int | None = Field(None, ge=1)
    #: as ``model.<family>.fc_width``; None: the model's default
    fc_width: int | None = Field(None, ge=1)
    #: as ``model.<family>.patch_size``; None: the model's default
    patch_size: int | None = Field(None, ge=1)
    #: as ``model.<family>.dim``; None: the model's default
    dim: int | None = Field(None, ge=1)
    #: as ``model.<family>.heads``; None: the model's default
    heads: int | None = Field(None, ge=1)
    #: as ``model.<family>.mlp_ratio``; None: the model's default
    mlp_ratio: float | None = Field(None, gt=0)
    #: as ``model.<family>.dropout``; None: the model's default
    dropout: float | None = Field(None, ge=0, lt=1)
    #: as ``model.<family>.kernel``; None: the model's default
    kernel: int | None = Field(None, ge=1)
    #: as ``model.<family>.dilation``; None: the model's default
    dilation: int | None = Field(None, ge=1)

    @model_validator(mode="after")
    def _family_keys(self) -> StudentSpec:
        from automl.spec._sections import ModelSpec  # the family sections name the valid keys

        valid = list(ModelSpec.model_fields[self.family].annotation.model_fields)
        for key in type(self).model_fields:
            if key != "family" and getattr(self, key) is not None and key not in valid:
                raise ValueError(f"'{key}' is not a {self.family} parameter "
                                 f"(valid: family, {', '.join(valid)})")
        return self

    @model_serializer(mode="wrap")
    def _compact(self, handler) -> dict[str, Any]:  # unset parameters are not written out
        return {k: v for k, v in handler(self).items() if v is not None}

    def arch(self) -> dict[str, Any]:
        """``{"family": ..., **set parameters}`` for ``automl.models.build_model``."""
        return self.model_dump(exclude_none=True)


class _Stage(_Strict):
    stage: str  # each subclass narrows it to its name (the union's discriminator)
    max_accuracy_drop: float = Field(0.01, ge=0, le=1, description=(
        "largest allowed fall in validation accuracy vs the teacher, as a fraction "
        "(0.01 = one point); a stage past it is rejected and the chain goes on from the "
        "last accepted model"))

    def to_stage(self) -> dict[str, Any]:
        """The stage dict ``automl.compress.run_chain`` takes (unset options left out)."""
        return self.model_dump(exclude_none=True)


class DistillSpec(_Stage):
    """Knowledge distillation (Hinton et al. 2015): the incoming model teaches a
    ``student`` trained from scratch for ``epochs`` with temperature ``temperature`` and
    soft-target weight ``alpha``; ``lr`` defaults to ``compression.lr``."""

    #: ``distill``: selects this stage
    stage: Literal["distill"]
    student: StudentSpec
    #: softmax temperature of the teacher's soft targets
    temperature: float = Field(4.0, gt=0, le=1000)
    #: weight of the soft-target loss; the labels' loss gets ``1 - alpha``
    alpha: float = Field(0.7, ge=0, le=1)
    #: epochs the student trains
    epochs: int = Field(30, ge=1, le=100_000)
    #: the student's learning rate; None: ``compression.lr``
    lr: float | None = Field(None, gt=0, le=1)


class PruneSpec(_Stage):
    """Pruning: ``structured`` channel pruning (torch-pruning; ``pruning_ratio`` of the
    channels per layer, or prune until MACs <= ``macs_target`` x the original) or
    ``unstructured`` global magnitude pruning to ``sparsity``, made permanent. Each of
    ``iterative_steps`` steps is followed by ``fine_tune_epochs`` epochs of fine-tuning,
    with the distillation loss against the unpruned model when ``distill_alpha`` > 0."""

    #: ``prune``: selects this stage
    stage: Literal["prune"]
    #: ``structured``: remove channels (torch-pruning); ``unstructured``: zero weights by
    #: global magnitude
    method: Literal["structured", "unstructured"] = "structured"
    #: structured: the fraction of channels removed per layer
    pruning_ratio: float | None = Field(None, gt=0, lt=1)
    #: structured: prune until MACs are at most this fraction of the original
    macs_target: float | None = Field(None, gt=0, lt=1)
    #: unstructured: the fraction of weights set to zero
    sparsity: float | None = Field(None, gt=0, lt=1)
    #: structured: a channel's importance, the L1 or L2 norm of its weights
    importance: Literal["l1", "l2"] = "l2"
    #: structured: rank channels across all layers instead of within each
    global_pruning: StrictBool = False
    #: epochs of fine-tuning after each pruning step
    fine_tune_epochs: int = Field(0, ge=0, le=10_000)
    #: pruning steps, each followed by fine-tuning
    iterative_steps: int = Field(1, ge=1, le=1000)
    #: the fine-tuning learning rate; None: ``compression.lr``
    lr: float | None = Field(None, gt=0, le=1)
    #: weight of the distillation loss against the unpruned model while fine-tuning (0: the
    #: labels' loss alone)
    distill_alpha: float = Field(0.0, ge=0, le=1)
    #: softmax temperature of that distillation loss
    distill_temperature: float = Field(4.0, gt=0, le=1000)

    @field_validator("pruning_ratio", "macs_target")
    @classmethod
    def _structured_only(cls, v: float | None, info) -> float | None:
        if v is not None and info.data.get("method") == "unstructured":
            raise ValueError("only for structured pruning; unstructured pruning takes sparsity")
        if v is not None and info.field_name == "macs_target" and info.data.get("pruning_ratio"):
            raise ValueError("give either pruning_ratio or macs_target, not both")
        return v

    @field_validator("sparsity")
    @classmethod
    def _unstructured_only(cls, v: float | None, info) -> float | None:
        if v is not None and info.data.get("method") == "structured":
            raise ValueError("only for unstructured pruning; structured pruning takes "
                             "pruning_ratio or macs_target")
        return v


class QuantizeSpec(_Stage):
    """Int8 quantization: ``dynamic`` (nn.Linear weights) or ``static`` post-training
    quantization calibrated on ``calibration_batches`` training batches (conv nets).
    Skipped, with the reason, when the model has nothing to quantize."""

    #: ``quantize``: selects this stage
    stage: Literal["quantize"]
    #: ``dynamic``: int8 weights of ``nn.Linear`` layers; ``static``: activation scales
    #: calibrated too, convolutions included
    method: Literal["dynamic", "static"] = "dynamic"
    #: training batches that calibrate static quantization
    calibration_batches: int = Field(8, ge=1, le=10_000)
    #: the quantized engine of the convolutions' FX fallback
    backend: Literal["x86", "fbgemm"] = "x86"


StageSpec = Annotated[Union[DistillSpec, PruneSpec, QuantizeSpec], Field(discriminator="stage")]
STAGE_SPECS: dict[str, type[_Stage]] = {"distill": DistillSpec, "prune": PruneSpec,
                                        "quantize": QuantizeSpec}


class CompressionSpec(_Strict):
    """The compression chain run on the winner after selection (``automl.compress``).

    ``stages`` run in order, each on the last accepted model. ``enabled`` defaults to
    true when stages are listed. The guard compares validation accuracy (held out from
    every training in the chain); test accuracy is only reported. ``lr`` and
    ``batch_size`` are the defaults of stages that train; ``seed`` seeds student
    initialisation and batch order; latency is the p50 of ``latency_repeats`` runs on
    ``latency_threads`` CPU threads. A stage whose model passes the accuracy guard but is
    larger (file bytes) than the model it came from, or slower at batch 1 by more than
    ``max_slowdown`` (confirmed by measuring both again), is rejected too; ONNX Runtime's
    int8 is compared with its source in ONNX Runtime. ``onnx``: export every kept model to ONNX, check it in
    ONNX Runtime (parity and latency) and add ONNX Runtime's static int8 at the first
    quantize stage. ``device``: where the chain trains (teacher retrain, distillation,
    fine-tuning); ``cuda`` needs a GPU. Quantization and latency stay on the CPU.
    """

    #: run the chain; None: true when stages are listed
    enabled: bool | None = None
    #: the stages, run in order, each on the last accepted model
    stages: list[StageSpec] = []
    #: the learning rate of stages that train, unless a stage sets its own
    lr: float = Field(1e-3, gt=0, le=1)
    #: the batch size of stages that train
    batch_size: int = Field(64, ge=2)
    #: seeds student initialisation and batch order
    seed: int = 0
    #: CPU threads of latency measurements
    latency_threads: int = Field(1, ge=1, le=256)
    #: timed runs per latency measurement (the median is kept)
    latency_repeats: int = Field(30, ge=3, le=100_000)
    max_slowdown: float | None = Field(0.10, ge=0, le=100, description=(
        "how much slower at batch 1 than the model it came from a stage's model may be, as "
        "a fraction (0.10: 10%, room for measurement noise) before it is rejected; null "
        "turns the latency check off. A model whose file is larger than its parent's is "
        "always rejected"))
    onnx: bool = True
    device: Literal["cpu", "cuda"] = "cpu"

    @model_validator(mode="before")
    @classmethod
    def _stage_names(cls, data: Any) -> Any:
        stages = data.get("stages") if isinstance(data, dict) else None
        for i, st in enumerate(stages if isinstance(stages, list) else []):
            where = f"compression.stages.{i}"
            if not isinstance(st, dict):
                raise ValueError(f"{where}: expected a mapping such as {{stage: prune, "
                                 f"pruning_ratio: 0.3}}; got {st!r}")
            name = st.get("stage")
            if name is None:
                raise ValueError(f"{where}.stage: required key is missing "
                                 f"(one of {', '.join(STAGE_NAMES)})")
            if name not in STAGE_NAMES:
                near = difflib.get_close_matches(str(name), STAGE_NAMES, n=1)
                hint = f"; did you mean '{near[0]}'?" if near else ""
                raise ValueError(f"{where}.stage: unknown stage {name!r}{hint} "
                                 f"(valid: {', '.join(STAGE_NAMES)})")
        return data

    @model_validator(mode="after")
    def _chain(self) -> CompressionSpec:
        if self.enabled is None:
            object.__setattr__(self, "enabled", bool(self.stages))
        if self.enabled and not self.stages:
            raise ValueError("compression.stages: compression is enabled but no stage is "
                             "listed; list stages or set enabled: false")
        seen_quantize = False
        for i, st in enumerate(self.stages):
            if seen_quantize and st.stage != "quantize":
                raise ValueError(f"compression.stages.{i}.stage: {st.stage} after quantize "
                                 "would get an int8 model; put quantize stages last")
            seen_quantize = seen_quantize or st.stage == "quantize"
        return self

    def chain(self) -> list[dict[str, Any]]:
        """The stage dicts for ``automl.compress.run_chain``, in order."""
        return [st.to_stage() for st in self.stages]

    def students(self) -> list[tuple[int, StudentSpec]]:
        """(stage index, student) of every distill stage."""
        return [(i, st.student) for i, st in enumerate(self.stages) if st.stage == "distill"]
