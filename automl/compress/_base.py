"""Shared pieces of the compression stages: the ``Stage`` protocol, the context a stage
runs in, the plain training loop, result dataclasses and the per-model measurement.

Data convention: ``X`` float32 ``(N, C, H, W)`` or ``(N, F)``, ``y`` int64 ``(N,)`` class
indices, or float32 ``(N,)`` values for regression (``Context.task``). Accuracies and
drops are fractions (0.01 = one percentage point). For regression the chain's guard score
is R² instead of accuracy (:func:`score_of`), kept in the same fields (``accuracy``,
``val_accuracy``, ``max_accuracy_drop``), and ``chain.json`` names it (``metric``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

# shared with the search's cost metrics, and re-exported for the compression stages
from automl.models.cost import count_macs_params, latency_ms, quiet  # noqa: F401

LossFn = Callable[[Tensor, Tensor, Tensor], Tensor]  # (logits, y_batch, batch_index) -> loss


def to_dict(obj: Any) -> Any:
    """JSON-ready copy of a (nested) result dataclass; fields with metadata json=False
    (models) are left out, paths become strings, tuples become lists."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        fields = [f.name for f in dataclasses.fields(obj) if f.metadata.get("json", True)]
        return {name: to_dict(getattr(obj, name)) for name in fields}
    if isinstance(obj, dict):
        return {str(k): to_dict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return None if isinstance(obj, float) and not math.isfinite(obj) else obj
    return repr(obj)  # e.g. an nn.Module given as a student


def check_number(key: str, value: Any, lo: float, hi: float, *, integer: bool = False,
                 lo_open: bool = False, hi_open: bool = False) -> Any:
    """Return ``value`` if it is a number in the range, else ``ValueError`` naming ``key``."""
    kind = int if integer else (int, float)
    bad = isinstance(value, bool) or not isinstance(value, kind)
    if bad or (value <= lo if lo_open else value < lo) or (value >= hi if hi_open else value > hi):
        rng = f"{'(' if lo_open else '['}{lo}, {hi}{')' if hi_open else ']'}"
        raise ValueError(f"{key}: expected {'an integer' if integer else 'a number'} in {rng}; "
                         f"got {value!r}")
    return value


def train(model: nn.Module, X: Tensor, y: Tensor, *, epochs: int, lr: float = 1e-3,
          batch_size: int = 64, seed: int = 0, loss_fn: LossFn | None = None,
          device: str = "cpu", task: str = "classification") -> nn.Module:
    """Plain Adam training in place: shuffled minibatches (``torch.Generator(seed)``), the
    ``task``'s loss (cross-entropy; regression: MSE on targets standardised by the model's
    head) unless ``loss_fn(logits, y_batch, index_batch)`` is given (``index_batch`` stays
    on the CPU; logits are on ``device``). Returns ``model`` in eval mode, on the CPU,
    BatchNorm's statistics re-estimated on ``X`` with the final weights
    (:func:`automl.train.recompute_batchnorm`). Batches of one example are skipped
    (BatchNorm cannot train on them). On ``device`` ``cuda`` the model and data are moved
    there for the training only."""
    from automl.task import task_of
    from automl.train import recompute_batchnorm

    if loss_fn is None and task != "classification":
        own = task_of(task).loss("mse").bind(model)

        def loss_fn(logits: Tensor, yb: Tensor, idx: Tensor) -> Tensor:
            return own(logits, yb)
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    params = [p for p in model.parameters() if p.requires_grad]
    if epochs > 0 and params:
        model.to(device)
        X, y = X.to(device), y.to(device)
        opt = torch.optim.Adam(params, lr=lr)
        model.train()
        for _ in range(epochs):
            perm = torch.randperm(len(X), generator=gen)
            for start in range(0, len(X), batch_size):
                idx = perm[start:start + batch_size]
                if len(idx) < 2:
                    continue
                on = idx.to(device)
                logits = model(X[on])
                loss = loss_fn(logits, y[on], idx) if loss_fn else F.cross_entropy(logits, y[on])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
        # BatchNorm's running averages lag behind weights that changed fast: re-estimated
        # with the final weights, as every trial's last epoch is (automl.train)
        recompute_batchnorm(model, X, batch_size, seed)
        model.to("cpu")
    return model.eval()


def predict(model: nn.Module, X: Tensor, batch_size: int = 1024) -> Tensor:
    """Outputs of ``model`` under ``torch.no_grad``, in batches: logits ``(N,
    num_classes)``, or ``(N, 1)`` values for regression; the model is switched to (and
    left in) eval mode."""
    model.eval()
    with torch.no_grad():
        return torch.cat([model(X[i:i + batch_size]) for i in range(0, len(X), batch_size)])


@dataclasses.dataclass
class Context:
    """What a stage may use: the splits, ``out_dir`` for saved models, ``build(arch)`` for
    students/rebuilds (default ``automl.models.build_model(arch, input_shape, num_classes)``),
    ``fine_tune(model, epochs, lr, loss_fn=None)`` (default ``train`` on the train split,
    in place, on ``device``: ``cpu`` or ``cuda``), ``threads``/``latency_repeats`` for the
    latency measurement (always on the CPU), ``max_slowdown``: how much slower at batch 1
    than its parent a step's model may be (a fraction; None: no latency check; see
    :func:`growth_reason`), ``onnx``: export kept models to ONNX and check them in ONNX
    Runtime (``onnx_export``).

    Stages train on the train split only; the validation split decides the accuracy-drop
    guard and must be held out from the teacher's training too; the test split is only
    measured."""

    X_train: Tensor
    y_train: Tensor
    X_val: Tensor
    y_val: Tensor
    X_test: Tensor
    y_test: Tensor
    out_dir: Path
    seed: int = 0
    batch_size: int = 64
    lr: float = 1e-3
    threads: int = 1
    latency_repeats: int = 30
    max_slowdown: float | None = 0.10
    teacher_arch: dict | None = None
    onnx: bool = True
    device: str = "cpu"
    build: Callable[[dict], nn.Module] | None = None
    fine_tune: Callable[..., nn.Module] | None = None
    #: the learning task (``automl.task``): what the guard scores, a student's head, the
    #: default loss
    task: str = "classification"

    def __post_init__(self) -> None:
        self.out_dir = Path(self.out_dir)
        if self.build is None:
            self.build = self._build_from_zoo
        if self.fine_tune is None:
            self.fine_tune = self._fine_tune

    @property
    def input_shape(self) -> tuple[int, ...]:  # one example, no batch dim
        return tuple(self.X_train.shape[1:])

    @property
    def num_classes(self) -> int:
        """The models' output width: 1 + the largest label in any split; 1 for regression."""
        if self.task != "classification":
            return 1
        return int(max(self.y_train.max(), self.y_val.max(), self.y_test.max())) + 1

    def _build_from_zoo(self, arch: dict) -> nn.Module:
        """``arch`` with the task's head; a regression head fitted to the train rows (the
        teacher's statistics: it trained on the same rows)."""
        from automl.task import task_of

        task = task_of(self.task)
        model = task.build(arch, self.input_shape, self.num_classes)
        task.fit_head(model, self.y_train)
        return model

    def _fine_tune(self, model: nn.Module, epochs: int, lr: float | None = None,
                   loss_fn: LossFn | None = None) -> nn.Module:
        return train(model, self.X_train, self.y_train, epochs=epochs, lr=lr or self.lr,
                     batch_size=self.batch_size, seed=self.seed, loss_fn=loss_fn,
                     device=self.device, task=self.task)


def make_context(train_xy: tuple, val_xy: tuple, test_xy: tuple, out_dir: str | Path,
                 **kwargs: Any) -> Context:
    """``Context`` from ``(X, y)`` pairs of numpy arrays or tensors (X cast to float32; y to
    int64, or float32 with ``task="regression"`` in ``kwargs``)."""
    regression = kwargs.get("task", "classification") != "classification"

    def xy(pair: tuple) -> tuple[Tensor, Tensor]:
        X, y = (torch.as_tensor(np.asarray(v)) for v in pair)
        if len(X) != len(y):
            raise ValueError(f"X has {len(X)} rows but y has {len(y)}")
        return X.float().contiguous(), (y.float() if regression else y.long()).contiguous()

    (a, b), (c, d), (e, f) = xy(train_xy), xy(val_xy), xy(test_xy)
    return Context(a, b, c, d, e, f, Path(out_dir), **kwargs)


@dataclasses.dataclass(frozen=True)
class StageOutput:
    """What a stage returns: the new ``model``, or ``skipped`` with the reason.

    ``info``: stage facts for the report (JSON-able). ``recipe``: updates to the rebuild
    config (``arch``, ``shapes``, ``pruned``, ``quantized``). ``count_model``: a float
    twin used for parameter/MAC counts when ``model`` is quantized."""

    model: nn.Module | None = dataclasses.field(default=None, metadata={"json": False})
    skipped: str | None = None
    info: dict = dataclasses.field(default_factory=dict)
    recipe: dict = dataclasses.field(default_factory=dict)
    count_model: nn.Module | None = dataclasses.field(default=None, metadata={"json": False})

    def to_dict(self) -> dict:
        return to_dict(self)


class Stage(Protocol):
    """A compression stage: works on its own deep copy of ``model``, never mutates it."""

    name: str

    def run(self, model: nn.Module, ctx: Context) -> StageOutput: ...


@dataclasses.dataclass(frozen=True)
class Measurement:
    """One model's figures: ``params``, ``nonzero_params``, ``macs`` (one example, torch-
    pruning's counter); ``size_bytes``/``script_bytes``: the saved state_dict/TorchScript
    files; CPU p50 latency in ms at batch 1 and 64 (inference_mode, warm-up, ``ctx.threads``
    threads); test ``accuracy`` (regression: R², :func:`score_of`); ``agreement``: share of
    test argmax equal to the teacher's (regression: R² of its outputs against the
    teacher's); ``val_accuracy``: on the validation rows (what the guard compares)."""

    name: str
    params: int
    nonzero_params: int
    macs: int
    size_bytes: int | None
    script_bytes: int | None
    latency_ms_b1: float
    latency_ms_b64: float
    accuracy: float
    agreement: float
    val_accuracy: float | None = None

    def to_dict(self) -> dict:
        return to_dict(self)


def score_name(task: str = "classification") -> str:
    """What the guard's score is called: ``accuracy``, or ``R²`` for regression."""
    return "accuracy" if task == "classification" else "R²"


def score_of(outputs: Tensor, y: Tensor, task: str = "classification") -> float:
    """The guard's score of ``outputs`` against ``y``: accuracy (fraction) of the argmax,
    or for regression R² (1 - SSE / SST; 0 when ``y`` is constant) of the ``(N, 1)``
    values; NaN for no rows."""
    if len(y) == 0:
        return math.nan
    if task == "classification":
        return float((outputs.argmax(1) == y).float().mean())
    pred, y = outputs.reshape(-1).double(), y.reshape(-1).double()
    sst = float(((y - y.mean()) ** 2).sum())
    return 1.0 - float(((pred - y) ** 2).sum()) / sst if sst > 0 else 0.0


def agreement_of(outputs: Tensor, teacher_outputs: Tensor | None,
                 task: str = "classification") -> float:
    """How a model's outputs agree with the teacher's on the same rows: the share of equal
    argmax, or for regression R² of its values against the teacher's (1.0: identical);
    1.0 without a teacher."""
    if teacher_outputs is None:
        return 1.0
    if task == "classification" and teacher_outputs.dim() == 1:  # given as classes
        return float((outputs.argmax(1) == teacher_outputs).float().mean())
    if task == "classification":
        return float((outputs.argmax(1) == teacher_outputs.argmax(1)).float().mean())
    return score_of(outputs, teacher_outputs, task)


def val_accuracy(model: nn.Module, ctx: Context) -> float:
    """The guard's score (:func:`score_of`: accuracy, or R² for regression) of ``model`` on
    ``ctx``'s validation rows; NaN when there are none."""
    if len(ctx.y_val) == 0:
        return math.nan
    return score_of(predict(model, ctx.X_val), ctx.y_val, ctx.task)


def measure(model: nn.Module, ctx: Context, name: str, teacher_pred: Tensor | None, *,
            size_bytes: int | None = None, script_bytes: int | None = None,
            count_model: nn.Module | None = None) -> Measurement:
    """Measure ``model`` (see ``Measurement``) against the teacher's test outputs
    ``teacher_pred`` (:func:`agreement_of`); ``count_model`` replaces it for the
    parameter/MAC counts (quantized models pack their weights)."""
    counted = (count_model if count_model is not None else model).eval()
    macs, _ = count_macs_params(counted, ctx.X_test)
    params = sum(p.numel() for p in counted.parameters())
    nonzero = sum(int(torch.count_nonzero(p)) for p in counted.parameters())
    outputs = predict(model, ctx.X_test)
    agree = agreement_of(outputs, teacher_pred, ctx.task)
    threads, reps = torch.get_num_threads(), ctx.latency_repeats
    x64 = ctx.X_test[torch.arange(64) % len(ctx.X_test)]
    torch.set_num_threads(ctx.threads)
    try:
        b1 = latency_ms(model, ctx.X_test[:1], reps)
        b64 = latency_ms(model, x64, max(3, reps // 3))
    finally:
        torch.set_num_threads(threads)
    acc = score_of(outputs, ctx.y_test, ctx.task)
    return Measurement(name, params, nonzero, macs, size_bytes, script_bytes, b1, b64, acc, agree,
                       val_accuracy(model, ctx))


#: rounds of the confirming re-measurement of a step that measured slower than its parent
CONFIRM_ROUNDS = 3


def growth_reason(latency_ms: float | None, parent_latency_ms: float | None,
                  size_bytes: int | None, parent_size_bytes: int | None, *, parent: str,
                  engine: str, max_slowdown: float | None) -> str | None:
    """Why a compression step's model is rejected for being larger or slower than the model
    it came from (its parent), or None when it is neither.

    Larger: its saved file has more bytes than the parent's (file sizes do not vary from
    run to run, so there is no tolerance). Slower: its p50 latency at batch 1 is above the
    parent's by more than ``max_slowdown`` (a fraction: 0.10 allows 10% for measurement
    noise; None skips the check). Both figures must come from the same engine (``engine``,
    e.g. ``PyTorch``, ``ONNX Runtime``), as the reason says; a figure that is None is not
    compared.
    """
    if size_bytes is not None and parent_size_bytes and size_bytes > parent_size_bytes:
        return (f"its file is larger than its parent {parent}'s ({size_bytes:,} bytes against "
                f"{parent_size_bytes:,})")
    if max_slowdown is None or not latency_ms or not parent_latency_ms:
        return None
    if latency_ms > parent_latency_ms * (1.0 + max_slowdown):
        return (f"{latency_ms / parent_latency_ms:.2g}x slower than its parent {parent} at "
                f"batch 1 in {engine} ({latency_ms:.3f} ms against {parent_latency_ms:.3f} ms; "
                f"max slowdown {max_slowdown:.0%})")
    return None


def confirm_latency(run: Callable[[], float], parent_run: Callable[[], float],
                    rounds: int = CONFIRM_ROUNDS) -> tuple[float, float]:
    """``(ms, parent_ms)``: batch-1 latencies measured again, alternating between the model
    (``run()``, one p50 measurement) and its parent (``parent_run()``) for ``rounds``
    rounds, each the fastest of its rounds. Alternating puts both under the same load of a
    shared machine, and the fastest round is the one least disturbed, so a step is not
    rejected for a burst of someone else's work during its first measurement."""
    mine, theirs = [], []
    for _ in range(rounds):
        mine.append(run())
        theirs.append(parent_run())
    return min(mine), min(theirs)


def torch_latency_b1(model: nn.Module, ctx: Context) -> Callable[[], float]:
    """A ``confirm_latency`` measurement: ``model``'s p50 latency in ms at batch 1 on
    ``ctx.threads`` threads over ``ctx.latency_repeats`` runs, as ``measure`` takes it."""
    def run() -> float:
        threads = torch.get_num_threads()
        torch.set_num_threads(ctx.threads)
        try:
            return latency_ms(model.eval(), ctx.X_test[:1], ctx.latency_repeats)
        finally:
            torch.set_num_threads(threads)

    return run
