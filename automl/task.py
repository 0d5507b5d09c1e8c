"""The learning task, in one place: classification or regression.

Everything that differs between the two lives here, and every stage asks the task
(:func:`task_of`) instead of branching on it:

================  ==================================  =====================================
                  classification                      regression
================  ==================================  =====================================
target            int64 class indices ``(N,)``        float32 values ``(N,)``
model outputs     ``(B, num_classes)`` logits         ``(B, 1)`` values in the target's units
model head        none                                :class:`automl.models.TargetScale`:
                                                      ``net(x) * std + mean`` (the training
                                                      rows' statistics, fitted in ``fit``)
training loss     cross-entropy (label smoothing)     MSE or Huber on standardised values
per-epoch metrics ``val_loss/accuracy/f1``            ``val_loss/rmse/mae/r2``
fold scores       accuracy, balanced accuracy, macro  r2, rmse, mae (scikit-learn)
                  precision/recall/F1 (+ ROC AUC and
                  PR AUC for two classes)
splits and folds  stratified on the class             stratified on quantile bins of the
                                                      target where every bin can be split
distillation      KL of softened logits (Hinton 2015) MSE to the teacher's standardised
                                                      outputs
================  ==================================  =====================================

The spec names tasks and their metrics without importing anything heavy
(:data:`automl.spec.TASKS`); torch and scikit-learn are imported where a task needs them.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

import numpy as np

from automl.spec import REGRESSION_LOSSES, TASK_CV_METRICS

#: quantile bins a regression target is stratified on (fewer when rows are few)
STRATA = 10


class Task(ABC):
    """What a learning task decides (module doc). Stateless; one instance per task."""

    name: str = ""
    #: fold scores (``selection.metric`` choices) and the direction that is better
    cv_metrics: dict[str, str] = {}
    #: the guard metric of compression (a drop in it is what ``max_drop`` bounds) and the
    #: test score a run names first
    guard_metric: str = ""
    #: test scores a run's last line shows, in order
    headline: tuple[str, ...] = ()

    # -- data -----------------------------------------------------------------------------
    @abstractmethod
    def output_size(self, num_classes: int) -> int:
        """The model's output width."""

    @abstractmethod
    def stratify(self, y: np.ndarray, n_splits: int = 2) -> np.ndarray | None:
        """The labels splits and folds are stratified on (None: plain shuffled splits)."""

    @abstractmethod
    def targets(self, y):
        """``y`` ``(N,)`` as the training loop's target tensor ``(N,)``: int64 class
        indices, or float32 values."""

    # -- model and training ---------------------------------------------------------------
    def build(self, arch, input_shape, output_size: int, init: str = "default"):
        """The model (:func:`automl.models.build_model`) with the task's head."""
        from automl.models import build_model

        return build_model(arch, tuple(input_shape), output_size, init=init)

    def fit_head(self, model, y) -> None:  # noqa: B027 - a no-op unless the task has a head
        """Fit the model's head to the training targets ``y`` before training (no-op)."""

    @abstractmethod
    def loss(self, name: str, label_smoothing: float = 0.0):
        """``(outputs, targets) -> scalar`` training loss (``name``: ``training.loss``)."""

    @abstractmethod
    def epoch_metrics(self, outputs, y) -> dict[str, float]:
        """Validation metrics of ``outputs`` against ``y`` (without the ``val_`` prefix)."""

    @abstractmethod
    def predictions(self, outputs) -> np.ndarray:
        """What a model predicts from its ``outputs`` ``(N, K)``: ``(N,)`` class indices
        (int64), or ``(N,)`` values (float64, the target's units) from ``(N, 1)``."""

    # -- selection ------------------------------------------------------------------------
    @abstractmethod
    def scores(self, y_true: np.ndarray, y_pred: np.ndarray, num_classes: int,
               proba: np.ndarray | None = None) -> dict[str, float]:
        """Fold scores (:attr:`cv_metrics`) of predictions ``y_pred`` ``(N,)``."""

    # -- compression ----------------------------------------------------------------------
    @abstractmethod
    def distill_loss(self, student_out, teacher_out, targets, temperature: float,
                     alpha: float, model=None):
        """The student's loss against the teacher's outputs and the true targets."""


class Classification(Task):
    name = "classification"
    cv_metrics = {m: "max" for m in TASK_CV_METRICS["classification"]}
    guard_metric = "accuracy"
    headline = ("accuracy",)

    def output_size(self, num_classes: int) -> int:
        return num_classes

    def stratify(self, y: np.ndarray, n_splits: int = 2) -> np.ndarray:
        return y

    def targets(self, y):
        import torch

        return torch.as_tensor(np.asarray(y), dtype=torch.long)

    def loss(self, name: str, label_smoothing: float = 0.0):
        from torch import nn

        return nn.CrossEntropyLoss(label_smoothing=label_smoothing)

    def epoch_metrics(self, outputs, y) -> dict[str, float]:
        from torch import nn

        pred = outputs.argmax(1)
        return {"loss": float(nn.functional.cross_entropy(outputs, y)),
                "accuracy": float((pred == y).float().mean()),
                "f1": macro_f1(y, pred)}

    def predictions(self, outputs) -> np.ndarray:
        return outputs.argmax(1).numpy()

    def scores(self, y_true, y_pred, num_classes, proba=None) -> dict[str, float]:
        """Accuracy, balanced accuracy and macro precision / recall / F1 (all in [0, 1];
        macro averages over all ``num_classes`` labels, ``zero_division=0``); with two
        classes and ``proba`` ``(N, 2)``, also ROC AUC and PR AUC (average precision)
        of the second class (scikit-learn)."""
        from sklearn import metrics as skm

        labels = list(range(num_classes))
        avg = {"labels": labels, "average": "macro", "zero_division": 0}
        out = {
            "accuracy": float(skm.accuracy_score(y_true, y_pred)),
            "balanced_accuracy": float(skm.balanced_accuracy_score(y_true, y_pred)),
            "precision_macro": float(skm.precision_score(y_true, y_pred, **avg)),
            "recall_macro": float(skm.recall_score(y_true, y_pred, **avg)),
            "f1_macro": float(skm.f1_score(y_true, y_pred, **avg)),
        }
        if num_classes == 2 and proba is not None and len(np.unique(y_true)) == 2:
            p1 = np.asarray(proba)[:, 1]
            out["roc_auc"] = float(skm.roc_auc_score(y_true, p1))
            out["pr_auc"] = float(skm.average_precision_score(y_true, p1))
        return out

    def distill_loss(self, student_out, teacher_out, targets, temperature, alpha, model=None):
        """Hinton, Vinyals & Dean 2015: ``alpha`` x T² x KL(softmax(teacher / T) ||
        softmax(student / T)) + (1 - alpha) x cross-entropy with the labels. Logits
        ``(B, K)``, targets int64 ``(B,)``; KL is the batch mean. A scalar tensor."""
        from torch.nn import functional as F

        t = temperature
        soft = F.kl_div(F.log_softmax(student_out / t, dim=1),
                        F.log_softmax(teacher_out / t, dim=1),
                        reduction="batchmean", log_target=True)
        return alpha * t * t * soft + (1 - alpha) * F.cross_entropy(student_out, targets)


class Regression(Task):
    name = "regression"
    cv_metrics = {"r2": "max", "rmse": "min", "mae": "min"}
    guard_metric = "r2"
    headline = ("r2", "rmse", "mae")

    def output_size(self, num_classes: int) -> int:
        return 1

    def stratify(self, y: np.ndarray, n_splits: int = 2) -> np.ndarray | None:
        """Quantile bins of ``y`` (at most :data:`STRATA`, fewer when some bin would hold
        fewer than ``n_splits`` rows); None when not even two bins can."""
        y = np.asarray(y, dtype=float)
        for bins in range(min(STRATA, len(y) // max(n_splits, 2)), 1, -1):
            edges = np.unique(np.quantile(y, np.linspace(0, 1, bins + 1)[1:-1]))
            labels = np.searchsorted(edges, y, side="right")
            if np.bincount(labels).min() >= n_splits:
                return labels
        return None

    def targets(self, y):
        import torch

        return torch.as_tensor(np.asarray(y), dtype=torch.float32)

    def build(self, arch, input_shape, output_size: int = 1, init: str = "default"):
        from automl.models import TargetScale, build_model

        return TargetScale(build_model(arch, tuple(input_shape), 1, init=init))

    def fit_head(self, model, y) -> None:
        """The head's mean and standard deviation from the training targets ``y``."""
        from automl.models import TargetScale, unwrap

        head = unwrap(model)  # inside a DDP wrapper
        if isinstance(head, TargetScale):
            head.fit(y)

    def loss(self, name: str, label_smoothing: float = 0.0):
        """MSE or Huber (delta 1) between outputs and targets, both standardised by the
        head's statistics (so the loss does not scale with the target's units)."""
        if name not in REGRESSION_LOSSES:
            raise ValueError(f"unknown regression loss {name!r}; use one of "
                             f"{', '.join(REGRESSION_LOSSES)}")
        return StandardisedLoss(name)

    def epoch_metrics(self, outputs, y) -> dict[str, float]:
        pred, y = outputs.reshape(-1).double(), y.reshape(-1).double()
        err = pred - y
        mse = float((err ** 2).mean())
        var = float(((y - y.mean()) ** 2).mean())
        return {"loss": mse, "rmse": math.sqrt(mse), "mae": float(err.abs().mean()),
                "r2": 1.0 - mse / var if var > 0 else 0.0}

    def predictions(self, outputs) -> np.ndarray:
        return outputs.reshape(-1).numpy().astype(np.float64)

    def scores(self, y_true, y_pred, num_classes=1, proba=None) -> dict[str, float]:
        """R² (coefficient of determination), RMSE and MAE in the target's units
        (scikit-learn's ``r2_score``, ``root_mean_squared_error``, ``mean_absolute_error``)."""
        from sklearn import metrics as skm

        return {"r2": float(skm.r2_score(y_true, y_pred)),
                "rmse": float(skm.root_mean_squared_error(y_true, y_pred)),
                "mae": float(skm.mean_absolute_error(y_true, y_pred))}

    def distill_loss(self, student_out, teacher_out, targets, temperature, alpha, model=None):
        """``alpha`` x MSE to the teacher's outputs + (1 - alpha) x MSE to the targets,
        both standardised by the student's head (the teacher's statistics)."""
        from torch.nn import functional as F

        scale = _scale_of(model)
        soft = F.mse_loss(student_out / scale, teacher_out / scale)
        hard = F.mse_loss(student_out.reshape(-1) / scale, targets.reshape(-1) / scale)
        return alpha * soft + (1 - alpha) * hard


class StandardisedLoss:
    """MSE or Huber of ``(outputs - mean) / std`` against ``(targets - mean) / std``, with
    the statistics of the model's :class:`~automl.models.TargetScale` head, read at each
    call (so a fine-tuned or restored head is used as it is). ``bind(model)`` first."""

    def __init__(self, name: str):
        self.name, self._model = name, None

    def bind(self, model) -> StandardisedLoss:
        self._model = model
        return self

    def __call__(self, outputs, targets):
        """A scalar tensor from ``outputs`` ``(B, 1)`` and ``targets`` ``(B,)`` (the
        target's units)."""
        from torch.nn import functional as F

        scale = _scale_of(self._model)
        a, b = outputs.reshape(-1) / scale, targets.reshape(-1).to(outputs.dtype) / scale
        return F.mse_loss(a, b) if self.name == "mse" else F.huber_loss(a, b, delta=1.0)


def _scale_of(model) -> Any:
    from automl.models import TargetScale, unwrap

    head = unwrap(model) if model is not None else None  # inside a DDP wrapper
    return head.y_std if isinstance(head, TargetScale) else 1.0


def macro_f1(y, pred) -> float:
    """Macro-averaged F1 of integer labels ``y`` and predictions ``pred`` (both ``(N,)``,
    values >= 0): the mean over the labels present in either of ``2 tp / (2 tp + fp +
    fn)``, as scikit-learn's ``f1_score(average="macro", zero_division=0)`` computes it
    (0.0 for ``N == 0``). Here rather than scikit-learn's because it runs in every trial
    worker: ``sklearn.metrics`` alone took 1.2 s of a trial worker's 3.9 s of imports
    (``python -X importtime``, 2-core CPU machine)."""
    import torch

    if y.numel() == 0:
        return 0.0
    y, pred = y.long().reshape(-1), pred.long().reshape(-1)
    n = max(int(y.max()), int(pred.max())) + 1
    tp = torch.bincount(y[pred == y], minlength=n).double()
    denom = torch.bincount(y, minlength=n).double() + torch.bincount(pred, minlength=n).double()
    present = denom > 0
    return float((2 * tp[present] / denom[present]).mean())


TASKS: dict[str, Task] = {"classification": Classification(), "regression": Regression()}


def training_loss(task: Task, name: str, label_smoothing: float = 0.0):
    """The training loss named ``name``: the task's own (:meth:`Task.loss`), or the user's,
    an import path ``package.module:loss`` called as ``loss(outputs, targets)`` -> a scalar
    tensor (outputs as the model gives them: logits ``(B, K)`` with int64 targets, or
    ``(B, 1)`` values in the target's units with float targets ``(B,)``).

    Raises:
        ValueError: an unknown loss name for the task.
        ImportError, AttributeError: the user's module or function is gone.
    """
    from automl.spec import is_import_path

    if is_import_path(name):
        from automl.models.user import load_factory

        return load_factory(name)
    return task.loss(name, label_smoothing)


def user_metric(name: str | None):
    """The user's own search metric, ``package.module:metric`` called as
    ``metric(y_true, y_pred)`` -> a float (numpy arrays: the validation targets and the
    task's predictions, classes or values), or None when ``name`` is not an import path."""
    from automl.spec import is_import_path

    if not is_import_path(name):
        return None
    from automl.models.user import load_factory

    return load_factory(name)


def task_of(name: str | None) -> Task:
    """The :class:`Task` named ``name`` (None: classification, what runs recorded before
    tasks existed were).

    Raises:
        ValueError: an unknown task name.
    """
    if name is None:
        return TASKS["classification"]
    try:
        return TASKS[name]
    except KeyError:
        raise ValueError(f"unknown task {name!r}; use one of {', '.join(TASKS)}") from None


def infer_task(values: Sequence | np.ndarray, max_classes: int | None = 20
               ) -> tuple[str, str]:
    """The task a table's target column asks for, and why, in a few words.

    Text, booleans and categories are classes; numbers with a fractional part are a
    regression target; whole numbers are classes when there are at most ``max_classes``
    distinct values, else a regression target (scikit-learn's ``type_of_target`` calls
    any whole numbers classes, which turned a 214-value count into 214 classes here).
    Missing values are ignored.
    """
    import pandas as pd

    s = pd.Series(values).dropna()
    distinct = int(s.nunique())
    if pd.api.types.is_bool_dtype(s) or not pd.api.types.is_numeric_dtype(s):
        return "classification", f"holds {distinct} distinct labels"
    x = s.to_numpy(dtype=float)
    if not np.all(np.isfinite(x)):
        return "regression", "is numeric"
    if np.any(x != np.round(x)):
        return "regression", "is numeric with fractional values"
    if max_classes is None:  # images and signals: whole numbers are class labels
        return "classification", f"holds {distinct} whole-number labels"
    if distinct <= max_classes:
        return "classification", f"holds {distinct} whole-number values (at most {max_classes})"
    return "regression", f"is numeric with {distinct} distinct values (more than {max_classes})"
