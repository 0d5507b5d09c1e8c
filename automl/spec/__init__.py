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

from pathlib import Path
from typing import Any, Literal

from pydantic import (
    Field,
    PrivateAttr,
    ValidationError,
    model_validator,
)

from automl._yaml import load_yaml
from automl.errors import SpecError
from automl.spec._compression import CompressionSpec
from automl.spec._domains import (
    AUGMENT_IDENTITY,
    BUNDLED_DATASETS,
    COST_METRICS,
    CV_METRICS,
    CV_MIN_METRICS,
    DATA_KINDS,
    DOMAIN_TAGS,
    FACTORY_ARGS,
    FAMILIES,
    FILE_SOURCES,
    IMAGE_AUGMENTS,
    IMAGE_DATASETS,
    IMAGE_FAMILIES,
    IMPORT_PATH,
    INITS,
    KIND_FAMILIES,
    MO_SAMPLERS,
    MODEL_SAMPLERS,
    OBJECTIVE_METRICS,
    OPTIMIZERS,
    REGRESSION_LOSSES,
    REPORTED_METRICS,
    SAMPLERS,
    SIGNAL_AUGMENTS,
    SIGNAL_DATASETS,
    SIGNAL_FAMILIES,
    SOURCE_TASKS,
    TASK_CV_METRICS,
    TASK_LOSSES,
    TASK_METRICS,
    TASKS,
    CategoricalDomain,
    Domain,
    FloatDomain,
    IntDomain,
    Scalar,
    _Strict,
    is_import_path,
    lower_bound,
    upper_bound,
    values_of,
)
from automl.spec._errors import first_error
from automl.spec._nightly import NightlySpec, TransferSource
from automl.spec._sections import (
    AugmentSpec,
    ConstraintSpec,
    DataSpec,
    GuardSpec,
    ImputeSpec,
    MLPSpace,
    ModelSpec,
    ObjectiveSpec,
    OutputSpec,
    RegistrySpec,
    ResNet1dSpace,
    ResNetSpace,
    ResourcesSpec,
    SchedulerSpec,
    SearchSpec,
    SelectionSpec,
    SGDSpace,
    TCNSpace,
    TrackingSpec,
    TrainingSpec,
    Transformer1dSpace,
    VGGSpace,
    ViTSpace,
)

__all__ = [
    "TransferSource",
    "FAMILIES",
    "FACTORY_ARGS",
    "IMPORT_PATH",
    "is_import_path",
    "IMAGE_FAMILIES",
    "SIGNAL_FAMILIES",
    "KIND_FAMILIES",
    "DATA_KINDS",
    "INITS",
    "OPTIMIZERS",
    "SAMPLERS",
    "BUNDLED_DATASETS",
    "IMAGE_DATASETS",
    "SIGNAL_DATASETS",
    "FILE_SOURCES",
    "CV_METRICS",
    "CV_MIN_METRICS",
    "TASKS",
    "SOURCE_TASKS",
    "TASK_METRICS",
    "TASK_CV_METRICS",
    "TASK_LOSSES",
    "REGRESSION_LOSSES",
    "AUGMENT_IDENTITY",
    "IMAGE_AUGMENTS",
    "SIGNAL_AUGMENTS",
    "REPORTED_METRICS",
    "COST_METRICS",
    "OBJECTIVE_METRICS",
    "MO_SAMPLERS",
    "MODEL_SAMPLERS",
    "ObjectiveSpec",
    "ConstraintSpec",
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
    "ResNet1dSpace",
    "TCNSpace",
    "Transformer1dSpace",
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
    "KIND_WORDS",
    "kind_mismatch",
    "load_spec",
    "load_run_spec",
]


class Experiment(_Strict):
    """A whole validated experiment. Build one with :func:`load_spec`."""

    #: the experiment's name: its run directory's (``<output.dir>/<name>``) unless
    #: ``--name`` says otherwise, and the default W&B project and registered model name
    name: str = Field("experiment", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    #: ``classification`` or ``regression`` (``automl.task``); None: the data source's
    #: task, or what a metric or loss of one task implies, or, for a table, its target
    #: column's type once it is read (:meth:`with_task`)
    task: Literal["classification", "regression"] | None = None
    #: seconds for the whole job (search, cross-validation, refit, compression,
    #: publishing); the search gets what an estimate of the rest leaves (automl.budget).
    #: None: no job budget (``search.time_budget_s`` bounds the sweep alone either way)
    budget_s: float | None = Field(None, gt=0)
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
    #: the folder of the spec file it was loaded from (:func:`load_spec`), where a user's
    #: model module is looked for first; not part of the spec
    _spec_dir: str | None = PrivateAttr(None)

    @property
    def spec_dir(self) -> str | None:
        """The folder of the spec file this experiment was loaded from, or None."""
        return self._spec_dir

    def __eq__(self, other: object) -> bool:  # where it was read from is not part of it
        if not isinstance(other, Experiment):
            return NotImplemented
        return type(self) is type(other) and self.__dict__ == other.__dict__

    @model_validator(mode="after")
    def _task(self) -> Experiment:
        """Decide the task where the spec tells it, check every task-bound choice against
        it, and fill in the task's defaults (search metric, selection metric, loss)."""
        source = SOURCE_TASKS.get(self.data.source)
        hints = self._task_hints()
        task = self.task
        if task is None:
            task = source or (hints[0][2] if hints else None)
        if task is None:
            return self  # a table: its target column decides (with_task)
        if source is not None and source != task:
            raise ValueError(f"task: data.source '{self.data.source}' is {source} data, not "
                             f"{task}; remove task or use a {task} data source")
        for key, value, their in hints:
            if their != task:
                fits = {"search.metric": TASK_METRICS, "selection.metric": TASK_CV_METRICS,
                        "training.loss": TASK_LOSSES}.get(key.split(".objectives")[0].split(
                            ".constraints")[0], TASK_METRICS)[task]
                raise ValueError(f"{key}: {value!r} is a {their} {key.split('.')[-1]}, but the "
                                 f"task is {task}; use one of {', '.join(fits)}")
        if task == "regression" and self.training.label_smoothing:
            raise ValueError("training.label_smoothing: smooths class labels; a regression "
                             "target has none, remove it")
        if self.task is None:
            object.__setattr__(self, "task", task)
        # copies, not the sections themselves: a default section is shared by every spec
        if self.search.metric is None and self.search.objectives is None:
            metric = TASK_METRICS[task][0]
            object.__setattr__(self, "search", self.search.model_copy(update={
                "metric": metric, "mode": self.search.mode or REPORTED_METRICS[metric]}))
        if self.selection.metric is None:
            object.__setattr__(self, "selection", self.selection.model_copy(
                update={"metric": TASK_CV_METRICS[task][0]}))
        if self.training.loss is None:
            object.__setattr__(self, "training", self.training.model_copy(
                update={"loss": TASK_LOSSES[task][0]}))
        return self

    def _task_hints(self) -> list[tuple[str, str, str]]:
        """``(key path, value, task)`` for every choice that belongs to one task only."""
        only = {t: set(ms) - {m for o, ms2 in TASK_METRICS.items() if o != t for m in ms2}
                for t, ms in TASK_METRICS.items()}
        hints = []

        def metric_hint(key: str, metric: str | None) -> None:
            for t, ms in only.items():
                if metric in ms:
                    hints.append((key, metric, t))
        metric_hint("search.metric", self.search.metric)
        for i, o in enumerate(self.search.objectives or []):
            metric_hint(f"search.objectives.{i}.metric", o.metric)
        for i, c in enumerate(self.search.constraints):
            metric_hint(f"search.constraints.{i}.metric", c.metric)
        for t, ms in TASK_CV_METRICS.items():
            if self.selection.metric in ms:
                hints.append(("selection.metric", self.selection.metric, t))
        for loss in values_of(self.training.loss) or []:
            for t, losses in TASK_LOSSES.items():
                if loss in losses:
                    hints.append(("training.loss", loss, t))
        return hints

    def with_task(self, task: str) -> Experiment:
        """This experiment with ``task`` decided (for a table, by its target column) and
        the task's defaults filled in, validated again.

        Raises:
            SpecError: a choice of the spec belongs to the other task.
        """
        if self.task == task:
            return self
        data = {**self.to_dict(), "task": task}
        try:
            decided = Experiment.model_validate(data)
            decided._spec_dir = self._spec_dir  # where a user's model module is looked for
            return decided
        except ValidationError as e:
            message, _ = first_error(e, data, Experiment)
            raise SpecError(f"{message}; the data's target makes this a {task} task",
                            fix=f"set task: {task} and choices that fit it, or set the "
                                "task the spec's choices are for") from None

    @model_validator(mode="after")
    def _cross(self) -> Experiment:
        if self.nightly.uses_champion and not self.registry.enabled:
            raise ValueError("nightly.promote: the champion lives in the model registry; "
                             "set registry.enabled: true or remove nightly.promote/transfer")
        if self.search.multi_objective and self.nightly.transfer_from:
            raise ValueError("nightly.transfer_from: transfer weighs sources by how they rank "
                             "one metric; remove it or search one metric (search.metric)")
        if self.search.multi_objective and self.nightly.warm_start:
            raise ValueError("nightly.warm_start: warm starts copy one-objective studies; "
                             "remove it or search one metric (search.metric)")
        if self.search.multi_objective and self.resources.strategy == "fsdp" and any(
                m in COST_METRICS for m, _ in self.search.objective_list()):
            raise ValueError("search.objectives: FSDP trials hold sharded models and measure "
                             "no costs; use resources.strategy: ddp or objectives without "
                             f"{', '.join(COST_METRICS)}")
        kind = self.data.data_kind
        if kind is not None:  # an npz without data.kind is checked once it is loaded
            problem = kind_mismatch(kind, self.model.families(), self.data.augment,
                                    [(i, s.family) for i, s in self.compression.students()])
            if problem:
                key, needs, fix = problem
                source = f"data.source '{self.data.source}'" + (
                    f" (data.kind: {self.data.kind})" if self.data.kind else "")
                raise ValueError(f"{key}: {needs} but {source} is {KIND_WORDS[kind]}; {fix}")
        max_epochs = self.max_epochs
        if self.scheduler.type == "asha" and self.scheduler.grace_period > max_epochs:
            raise ValueError(
                f"scheduler.grace_period: {self.scheduler.grace_period} is more than the "
                f"{max_epochs} epochs a trial can run; lower it"
            )
        rungs = self.rung_count()
        if (self.scheduler.type == "asha" and self.scheduler.brackets != "auto"
                and self.scheduler.brackets > rungs):
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

    def user_code(self) -> list[str]:
        """Every import path of the user's own code the run needs, once each: model
        families (:meth:`ModelSpec.user_families`), a training loss and a search metric."""
        paths = list(self.model.user_families())
        paths += [v for v in values_of(self.training.loss) or [] if is_import_path(v)]
        if is_import_path(self.search.metric):
            paths.append(self.search.metric)
        return list(dict.fromkeys(paths))

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

    def bracket_count(self) -> int:
        """Hyperband brackets the rung policy runs: ``scheduler.brackets``, or with
        ``auto`` 2 when :meth:`rung_count` allows, else 1 (:data:`AUTO_BRACKETS`); 1 with
        several objectives searched by the random forest (:attr:`SearchSpec.uses_forest`)."""
        if self.scheduler.brackets == "auto":
            if self.search.multi_objective and self.search.uses_forest:
                return 1
            return max(1, min(AUTO_BRACKETS, self.rung_count()))
        return int(self.scheduler.brackets)

    def adaptive_bracketing(self) -> bool:
        """Whether the brackets' start rung adapts to measured rung correlations: with
        ``brackets: auto``, one objective and at least 2 rungs."""
        return (self.scheduler.brackets == "auto" and not self.search.objectives
                and self.rung_count() >= 2)

    def to_dict(self) -> dict:
        return self.model_dump(mode="json")


#: brackets of ``scheduler.brackets: auto`` (chosen on the search-quality suite)
AUTO_BRACKETS = 2

#: how messages name each kind of data
KIND_WORDS = {"image": "image data", "tabular": "tabular data", "signal": "1D signal data"}


def _either(names) -> str:
    """``a, b or c``."""
    names = list(names)
    return ", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else names[0]


def _family_kind(family: str) -> str:
    return "image" if family in IMAGE_FAMILIES else "signal"


def kind_mismatch(kind: str, families: list, augment: AugmentSpec,
                  students: list[tuple[int, str]]) -> tuple[str, str, str] | None:
    """The first spec choice that cannot train on data of ``kind`` (``image``, ``tabular``
    or ``signal``), as ``(key path, what it needs, the fix)``; None when all fit.

    Checked by spec validation when the kind is known from ``data.source`` / ``data.kind``,
    and by the main job once an npz file has told it. A user's own family (an import path)
    fits every kind: what its model takes is the user's to say.
    """
    allowed = KIND_FAMILIES[kind]
    use = "use family: " + _either(allowed)
    for fam in families:
        if fam not in allowed and not is_import_path(fam):
            return "model.family", f"'{fam}' needs {KIND_WORDS[_family_kind(fam)]}", use
    if augment.kind is not None and augment.kind != kind:
        keys = augment.active(IMAGE_AUGMENTS if augment.kind == "image" else SIGNAL_AUGMENTS)
        fits = {"image": IMAGE_AUGMENTS, "signal": SIGNAL_AUGMENTS}.get(kind)
        fix = f"use {_either(fits)} instead" if fits else "remove data.augment"
        what = "image" if augment.kind == "image" else "1D signal"
        return (f"data.augment.{keys[0]}",
                f"{what} augmentation needs {KIND_WORDS[augment.kind]}", fix)
    for i, fam in students:
        if fam not in allowed:
            return (f"compression.stages.{i}.student.family",
                    f"'{fam}' needs {KIND_WORDS[_family_kind(fam)]}", use)
    return None


# --------------------------------------------------------------------------- loading
def load_spec(path: str | Path, overrides: dict[str, Any] | None = None) -> Experiment:
    """Read and validate a spec file.

    Args:
        path: YAML file.
        overrides: dotted key path -> value, applied before validation
            (``{"search.num_samples": 4}``), as the CLI's flags do.

    Raises:
        SpecError: the file is missing or unreadable, empty, is not YAML, or fails
            validation; the message names the file and the key path.
    """
    path = Path(path)
    data = load_yaml(path)
    if data is None or data == {}:  # an empty file would silently run a default experiment
        raise SpecError("the spec is empty", where=str(path),
                        fix="write at least name: and data: sections; "
                            "search_spaces/resnet.yaml is a full example")
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
        exp = Experiment.model_validate(data)
    except ValidationError as e:
        message, fix = first_error(e, data, Experiment)
        raise SpecError(message, where=str(path), fix=fix) from None
    exp._spec_dir = str(path.resolve().parent)
    return exp


def load_run_spec(run_dir: str | Path, overrides: dict[str, Any] | None = None) -> Experiment:
    """The resolved spec a run directory recorded (``RUN_DIR/spec.yaml``). A run recorded
    before the spec had ``task`` trained classifiers: it reads as ``task:
    classification`` (a table's target is not inferred again, which could now say
    regression).

    Raises:
        SpecError: the file is missing or invalid (as :func:`load_spec`).
    """
    path = Path(run_dir) / "spec.yaml"
    recorded = load_yaml(path) if path.is_file() else None
    if isinstance(recorded, dict) and "task" not in recorded:
        overrides = {"task": "classification", **(overrides or {})}
    return load_spec(path, overrides)
