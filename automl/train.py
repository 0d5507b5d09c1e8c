"""The training loop every trial, fold and fine-tuning step runs.

Straight-line PyTorch: shuffled minibatches from in-memory tensors, or streamed through
Ray Data from a Parquet cache (:func:`row_batches`, the one place that knows), one optimizer
step per batch, a per-step cosine learning-rate schedule, evaluation once per
epoch. Checkpoints are self-describing dicts (weights plus the config that built
the model) that load with ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from automl.parallel import broadcast_buffers, full_state, is_sharded, load_full_state
from automl.space import TrialConfig
from automl.task import macro_f1  # noqa: F401 - its home was here

CHECKPOINT_FORMAT = "automl.checkpoint/1"
#: the file a trial's checkpoint directory holds (Tune and Train checkpoints alike)
CHECKPOINT_FILE = "checkpoint.pt"


def set_threads(cpus: float) -> int:
    """Give torch as many intra-op threads as the trial has CPUs (at least 1)."""
    n = max(1, int(cpus))
    torch.set_num_threads(n)
    return n


def make_optimizer(model: nn.Module, cfg: TrialConfig) -> torch.optim.Optimizer:
    """Adam, AdamW (decoupled decay, Loshchilov & Hutter 2019) or SGD with momentum."""
    params = model.parameters()
    if cfg.optimizer == "adam":
        return torch.optim.Adam(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    if cfg.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(
            params, lr=cfg.lr, momentum=cfg.momentum, nesterov=cfg.nesterov and cfg.momentum > 0,
            weight_decay=cfg.weight_decay,
        )
    raise ValueError(f"unknown optimizer {cfg.optimizer!r}; use adam, adamw or sgd")


def make_lr_schedule(opt: torch.optim.Optimizer, cfg: TrialConfig, steps_per_epoch: int):
    """Per-step cosine decay to 0 over ``cfg.epochs`` (Loshchilov & Hutter 2017), or constant."""
    total = max(1, cfg.epochs * steps_per_epoch)
    if cfg.lr_schedule == "constant":
        return torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0)
    return torch.optim.lr_scheduler.LambdaLR(
        opt, lambda step: 0.5 * (1.0 + math.cos(math.pi * min(step, total) / total))
    )


@dataclass(frozen=True)
class Shard:
    """This process's place in a data-parallel group: rank 0 of 1 for an in-process trial.

    ``precision`` is ``fp32``, ``bf16`` or ``fp16`` (autocast; fp16 with a gradient
    scaler); ``device`` is where the model and batches live.
    """

    rank: int = 0
    world: int = 1
    device: str = "cpu"
    precision: str = "fp32"


def batches(n: int, batch_size: int, seed: int, shard: Shard = Shard()) -> Iterator[torch.Tensor]:
    """Shuffled index batches over ``range(n)``; the same seed gives the same order.

    With ``shard.world > 1`` each rank draws its own shard (``DistributedSampler``,
    padded so every rank gets the same number of batches and DDP's collectives stay
    in step) in batches of ``batch_size // world``: the global batch stays ``batch_size``.
    """
    if shard.world > 1:
        from torch.utils.data import DistributedSampler

        sampler = DistributedSampler(range(n), num_replicas=shard.world, rank=shard.rank,
                                     shuffle=True, seed=seed)
        perm = torch.tensor(list(sampler), dtype=torch.long)
        batch_size = max(1, batch_size // shard.world)
    else:
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    for start in range(0, len(perm), batch_size):
        yield perm[start : start + batch_size]


def row_batches(X, y: torch.Tensor, batch_size: int, seed: int | None,
                shard: Shard = Shard()) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Training batches ``(x (B, ...), y (B,))`` of rows ``X`` / ``y`` on ``shard.device``:
    in-memory tensors through :func:`batches` (``seed`` None: in order, unsharded), or rows
    that stream (:class:`automl.data.CachedImages`, whose own targets come with them)
    through Ray Data, sharded and shuffled the same way. The one place the training loop
    meets the data path."""
    from automl.data import is_stream

    if is_stream(X):
        for xb, yb in X.batches(batch_size, seed, shard.rank, shard.world):
            yield xb.to(shard.device), yb.to(shard.device)
        return
    if seed is None:
        for start in range(0, len(y), batch_size):
            yield X[start:start + batch_size], y[start:start + batch_size]
        return
    for idx in batches(len(y), batch_size, seed, shard):
        idx = idx.to(X.device)
        yield X[idx], y[idx]


def example_input(X, n: int = 1) -> torch.Tensor:
    """The first ``n`` rows of ``X`` as a tensor (a zero batch of that shape for rows that
    stream): what cost measurements run the model on."""
    from automl.data import is_stream

    return X.example(n) if is_stream(X) else X[:n]


class TrialDiverged(RuntimeError):
    """Training diverged: non-finite loss, loss above ``max_loss_ratio`` times its first
    epoch's, or a gradient norm above ``max_grad_norm``. The message reads
    ``diverged at epoch 3: loss=nan``."""

    def __init__(self, epoch: int, reason: str):
        self.epoch, self.reason = epoch, reason
        super().__init__(f"diverged at epoch {epoch}: {reason}")

    def __reduce__(self):  # pickled across processes (Ray) with both arguments
        return (type(self), (self.epoch, self.reason))


@dataclass(frozen=True)
class Guard:
    """Divergence guard thresholds (None switches a check off)."""

    max_loss_ratio: float | None = 10.0
    max_grad_norm: float | None = None


@dataclass
class EpochStats:
    """Sums over one epoch's batches on this rank (reduced across ranks by :func:`fit`)."""

    loss_sum: float = 0.0
    count: int = 0
    nonfinite: bool = False
    grad_norm: float = 0.0  # largest total gradient norm seen (L2 over all parameters)
    first_batch_loss: float = 0.0  # loss of the epoch's first batch, before its update
    first_batch_s: float = 0.0  # seconds until the epoch's first batch arrived
    data_wait_s: float = 0.0  # seconds the loop waited for batches (all of them)


def train_epoch(
    model: nn.Module, opt: torch.optim.Optimizer, sched, X: torch.Tensor, y: torch.Tensor,
    batch_size: int, seed: int, loss_fn: nn.Module, augment: nn.Module | None = None,
    shard: Shard = Shard(), scaler: torch.amp.GradScaler | None = None,
    guard: Guard = Guard(),
) -> EpochStats:
    """One pass over ``X`` ``(N, ...)`` / ``y`` ``(N,)``.

    ``augment`` (see :func:`automl.data.make_augment`) transforms each training batch
    ``(B, C, H, W)`` before the forward pass; evaluation never sees it. A non-finite
    loss ends the epoch at once in-process; in a data-parallel group every rank keeps
    stepping in lock-step (no collective is skipped, so none hangs) and :func:`fit`
    agrees on the outcome after the epoch.
    """
    model.train()
    stats = EpochStats()
    amp = _autocast(shard)
    stream = row_batches(X, y, batch_size, seed, shard)
    t_wait = time.perf_counter()
    for xb, yb in stream:  # (B, ...), (B,)
        waited = time.perf_counter() - t_wait
        if stats.count == 0:
            stats.first_batch_s = waited
        stats.data_wait_s += waited
        if augment is not None:
            with torch.no_grad():
                xb = augment(xb)  # (B, C, H, W), same shape
        with amp:
            loss = loss_fn(model(xb), yb)
        opt.zero_grad(set_to_none=True)
        if scaler is not None:  # fp16: scale the loss so small gradients survive
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
        else:
            loss.backward()
        if guard.max_grad_norm is not None:
            norm = nn.utils.clip_grad_norm_(model.parameters(), float("inf"))
            # sharded (FSDP) gradients give a DTensor norm, already reduced over the ranks
            norm = float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)
            stats.grad_norm = max(stats.grad_norm, norm)
        if scaler is not None:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        sched.step()
        value = float(loss.detach())
        if stats.count == 0:
            stats.first_batch_loss = value
        stats.loss_sum += value * len(yb)
        stats.count += len(yb)
        if not math.isfinite(value):
            stats.nonfinite = True
            if shard.world == 1:
                break
        t_wait = time.perf_counter()
    return stats


#: at most this many batches re-estimate BatchNorm's statistics (fvcore's PreciseBN default)
PRECISE_BN_BATCHES = 200


def recompute_batchnorm(model: nn.Module, X: torch.Tensor, batch_size: int, seed: int,
                        max_batches: int = PRECISE_BN_BATCHES) -> int:
    """Re-estimate every BatchNorm layer's running mean and variance with the model's final
    weights ("precise BN", Wu & Johnson 2021, arXiv:2105.07576, section 3): the training
    rows ``X`` ``(N, ...)`` go forward once more, without gradients, in shuffled batches of
    ``batch_size`` (at most ``max_batches``; the order seeded by ``seed``), with each
    BatchNorm layer averaging the batches' statistics equally (``momentum=None``) and every
    other layer in eval mode (no dropout), as evaluation will see them. Augmentation is not
    applied: evaluation inputs are not augmented.

    Why: BatchNorm's running statistics are an exponential average (momentum 0.1) over the
    training steps, so they lag behind weights that change fast. After a short training
    (measured: 4 epochs of 8 batches of 32 on 240 16x16 digit images, a 2-stage ResNet of
    width 16, Adam 4e-3, seeds 0-2) the eval-mode model predicted 2 or 3 classes for every
    row: validation accuracy 0.14, 0.15 and 0.28, against 0.79, 0.76 and 0.84 for the same
    weights with each batch's own statistics. With the statistics re-estimated: 0.76, 0.70
    and 0.84.

    The module (inside a DDP wrapper, :func:`unwrap`) is left in eval mode, its momentum
    restored. Returns the number of BatchNorm layers re-estimated (0: none, nothing done).
    """
    inner = unwrap(model)
    norms = [m for m in inner.modules()
             if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats]
    if not norms or len(X) < 2:
        return 0
    momenta = [m.momentum for m in norms]
    inner.eval()
    for m in norms:
        m.reset_running_stats()
        m.momentum = None  # a cumulative average over the batches below
        m.train()
    device = next(inner.parameters()).device
    targets = torch.zeros(len(X))  # unused: the batches' inputs only
    try:
        with torch.no_grad():
            for k, (xb, _) in enumerate(row_batches(X, targets, batch_size, seed,
                                                    Shard(device=str(device)))):
                if k == max_batches:
                    break
                if len(xb) > 1:  # a batch of one has no variance to estimate
                    inner(xb)
    finally:
        for m, momentum in zip(norms, momenta, strict=True):
            m.momentum = momentum
        inner.eval()
    return len(norms)


def _agree(stats: EpochStats, shard: Shard) -> EpochStats:
    """Sum the epoch's statistics over all ranks, so every rank sees the same loss and
    takes the same divergence decision (one small all-reduce per epoch)."""
    if shard.world == 1:
        return stats
    import torch.distributed as dist

    t = torch.tensor([stats.loss_sum, stats.count, float(stats.nonfinite),
                      stats.first_batch_loss], dtype=torch.float64, device=shard.device)
    dist.all_reduce(t)
    g = torch.tensor([stats.grad_norm], dtype=torch.float64, device=shard.device)
    dist.all_reduce(g, op=dist.ReduceOp.MAX)
    return EpochStats(float(t[0]), int(t[1]), bool(t[2] > 0), float(g[0]),
                      float(t[3]) / shard.world, stats.first_batch_s, stats.data_wait_s)


def check_divergence(epoch: int, loss: float, first: float | None, stats: EpochStats,
                     guard: Guard) -> None:
    """Raise :class:`TrialDiverged` when the epoch's agreed statistics break the guard."""
    if stats.nonfinite or not math.isfinite(loss):
        raise TrialDiverged(epoch, f"loss={'nan' if loss != loss else loss}")
    if guard.max_loss_ratio is not None and first and loss > guard.max_loss_ratio * first:
        raise TrialDiverged(epoch, f"loss={loss:.4g} is more than {guard.max_loss_ratio:g}x "
                                   f"its starting {first:.4g}")
    if guard.max_grad_norm is not None and stats.grad_norm > guard.max_grad_norm:
        raise TrialDiverged(epoch, f"gradient norm {stats.grad_norm:.4g} > {guard.max_grad_norm:g}")


def _autocast(shard: Shard):
    """Mixed-precision autocast context for ``shard.precision`` (a no-op for fp32)."""
    if shard.precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if shard.precision == "bf16" else torch.float16
    return torch.autocast(device_type=torch.device(shard.device).type, dtype=dtype)


@torch.inference_mode()
def predict(model: nn.Module, X: torch.Tensor, batch_size: int = 1024) -> torch.Tensor:
    """Outputs for ``X`` ``(N, ...)``, in eval mode: logits ``(N, num_classes)``, or
    ``(N, 1)`` values for regression."""
    model.eval()
    from automl.data import is_stream

    if is_stream(X):  # streamed through Ray Data, returned in X's row order
        device = next(model.parameters()).device
        return X.outputs(lambda xb: model(xb.to(device)), batch_size)
    return torch.cat([model(X[i : i + batch_size]) for i in range(0, len(X), batch_size)])


def evaluate(
    model: nn.Module, X: torch.Tensor, y: torch.Tensor, shard: Shard = Shard(),
    task: str = "classification",
) -> dict[str, float]:
    """The task's validation metrics of ``model`` on ``(X, y)``
    (:meth:`automl.task.Task.epoch_metrics`): cross-entropy loss, accuracy and macro F1
    (:func:`macro_f1`); for regression MSE loss, RMSE, MAE and R² in the target's units.

    With ``shard.world > 1`` each rank scores its own slice of the rows and the
    predictions are gathered (``torch.distributed.all_gather_object``), so every rank
    returns the metrics of the whole set, not of rank 0's slice. Every rank must call it.
    The slices are padded to one length (a sharded model's every forward pass is a
    collective, so every rank runs as many), the padding's outputs dropped.
    """
    from automl.data import is_stream

    if shard.world > 1:
        import torch.distributed as dist

        part = np.array_split(np.arange(len(y)), shard.world)[shard.rank]
        size = -(-len(y) // shard.world)  # the longest slice
        padded = np.concatenate([part, np.zeros(size - len(part), dtype=part.dtype)])
        rows = torch.from_numpy(padded)
        logits = predict(model, X[rows if is_stream(X) else rows.to(X.device)]).float().cpu()
        logits = logits[:len(part)]
        mine = (logits.numpy(), y[part].cpu().numpy())
        gathered: list = [None] * shard.world
        dist.all_gather_object(gathered, mine)
        logits = torch.from_numpy(np.concatenate([g[0] for g in gathered]))
        y = torch.from_numpy(np.concatenate([g[1] for g in gathered]))
    else:
        logits = predict(model, X).float().cpu()
        y = y.cpu()
    from automl.task import task_of

    return task_of(task).epoch_metrics(logits, y)


def to_tensors(X: np.ndarray, y: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """Copy numpy arrays (possibly read-only, from Ray's object store) into tensors: X
    float32; y int64 class indices, or float32 values (a regression target)."""
    from automl.data import is_stream

    y = np.asarray(y)
    dtype = torch.long if np.issubdtype(y.dtype, np.integer) else torch.float32
    if is_stream(X):  # rows that stream stay where they are (read batch by batch)
        return X, torch.tensor(y, dtype=dtype)
    return torch.tensor(np.asarray(X), dtype=torch.float32), torch.tensor(y, dtype=dtype)


def unwrap(model: nn.Module) -> nn.Module:
    """The module inside a DDP wrapper (the model itself when not wrapped, or sharded in
    place by FSDP2: :func:`automl.parallel.wrap`); :func:`automl.models.unwrap`."""
    from automl.models import unwrap as inner

    return inner(model)


@dataclass
class TrainState:
    """A model being trained, its optimizer and schedule, and epochs done so far."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    schedule: Any
    cfg: TrialConfig
    input_shape: tuple[int, ...]
    num_classes: int  # the model's output width: classes, or 1 for regression
    epoch: int = 0
    first_loss: float | None = None  # loss of the very first batch (divergence guard)

    @classmethod
    def create(
        cls, cfg: TrialConfig, input_shape, num_classes: int, n_train: int,
        wrap: Callable[[nn.Module], nn.Module] | None = None,
    ) -> TrainState:
        """Build the model with its task's head (seeded, so every rank starts from the
        same weights), let ``wrap`` place it (device, DDP/FSDP), then build optimizer and
        schedule on the wrapped parameters. ``n_train`` (rows) sets the schedule's steps
        per epoch; ``num_classes`` is the output width (1 for regression)."""
        from automl.task import task_of

        torch.manual_seed(cfg.seed)
        model = task_of(cfg.task).build(cfg.arch, tuple(input_shape), num_classes, init=cfg.init)
        if wrap is not None:
            model = wrap(model)
        opt = make_optimizer(model, cfg)
        sched = make_lr_schedule(opt, cfg, math.ceil(n_train / cfg.batch_size))
        return cls(model, opt, sched, cfg, tuple(input_shape), num_classes)

    def checkpoint(self, metrics: dict[str, float] | None = None) -> dict[str, Any]:
        """A self-describing dict: weights, optimizer and schedule state, the config.

        The weights are the plain model's ``state_dict()`` and the optimizer's state is
        keyed by parameter index, whatever the wrapper: an FSDP-sharded model's full state
        is gathered first (:func:`automl.parallel.full_state`, a collective: every rank
        calls this, and only rank 0's dict holds the weights)."""
        if is_sharded(self.model):
            weights, optim = full_state(self.model, self.optimizer)
        else:
            weights, optim = unwrap(self.model).state_dict(), self.optimizer.state_dict()
        return {
            "format": CHECKPOINT_FORMAT,
            "config": self.cfg.to_dict(),
            "input_shape": list(self.input_shape),
            "num_classes": self.num_classes,
            "epoch": self.epoch,
            "first_loss": self.first_loss,
            "metrics": dict(metrics or {}),
            "model": weights,
            "optimizer": optim,
            "schedule": self.schedule.state_dict(),
        }

    def restore(self, ckpt: dict[str, Any]) -> None:
        """Continue from a :meth:`checkpoint` dict (weights, optimizer, schedule, epoch);
        a sharded model takes its shards of the full state (every rank calls this)."""
        if is_sharded(self.model):
            load_full_state(self.model, self.optimizer, ckpt["model"], ckpt["optimizer"])
        else:
            unwrap(self.model).load_state_dict(ckpt["model"])
            self.optimizer.load_state_dict(ckpt["optimizer"])
        self.schedule.load_state_dict(ckpt["schedule"])
        self.epoch = int(ckpt["epoch"])
        self.first_loss = ckpt.get("first_loss")

    def save_dir(self, directory: str | Path, metrics: dict[str, float] | None = None) -> None:
        """Write :meth:`checkpoint` as ``<directory>/checkpoint.pt``."""
        torch.save(self.checkpoint(metrics), Path(directory) / CHECKPOINT_FILE)

    def restore_dir(self, directory: str | Path, device: str = "cpu") -> None:
        """Restore from ``<directory>/checkpoint.pt`` (written by :meth:`save_dir`).

        Raises:
            FileNotFoundError: the directory holds no checkpoint file.
            pickle.UnpicklingError: the file holds more than tensors and plain data
                (loaded with ``weights_only=True``).
        """
        self.restore(torch.load(Path(directory) / CHECKPOINT_FILE, map_location=device,
                                weights_only=True))


def fit(
    state: TrainState,
    train: tuple[torch.Tensor, torch.Tensor],
    val: tuple[torch.Tensor, torch.Tensor] | None,
    on_epoch: Callable[[TrainState, dict[str, float]], None] | None = None,
    epochs: int | None = None,
    shard: Shard = Shard(),
    guard: Guard = Guard(),
) -> dict[str, float]:
    """Train from ``state.epoch`` up to ``epochs`` (default ``state.cfg.epochs``).

    After the last epoch, BatchNorm's running statistics are re-estimated on the training
    rows with the final weights (:func:`recompute_batchnorm`), before that epoch's
    evaluation and checkpoint: a short training's lagging averages made the eval-mode
    model predict one class. Earlier epochs are evaluated with the running averages, as
    PyTorch keeps them (what a trial stopped at a rung reported).

    After each epoch, ``on_epoch(state, metrics)`` is called with ``epoch``,
    ``train_loss``, ``train_time_s`` (seconds in the training step), ``first_batch_s``
    (seconds until its first batch arrived) and ``data_wait_s`` (seconds waiting for
    batches in all) and, when
    ``val`` is given, ``val_loss``, ``val_accuracy``, ``val_f1`` and ``eval_time_s``
    (seconds scoring the validation split).
    ``state.cfg.augment`` augments training batches only. ``shard`` places this
    process in a data-parallel group (the model already wrapped in DDP): each rank
    trains on its shard and the validation metrics are reduced over all ranks.

    Returns:
        The metrics of the last epoch.

    Raises:
        ValueError: augmentation is asked for but ``train`` holds no images.
        TrialDiverged: the ``guard`` tripped (agreed across ranks, so all raise together).
    """
    from automl.data import make_augment
    from automl.task import task_of, training_loss, user_metric

    cfg = state.cfg
    task = task_of(cfg.task)
    loss_fn = training_loss(task, cfg.loss, cfg.label_smoothing)
    extra = user_metric(cfg.metric)  # the user's own search metric, on the validation rows
    if hasattr(loss_fn, "bind"):
        loss_fn = loss_fn.bind(state.model)
    if state.epoch == 0:  # a fresh model: its head fitted to the training targets
        task.fit_head(state.model, train[1])
    augment = make_augment(cfg.augment, tuple(train[0].shape[1:])) if cfg.augment else None
    # GradScaler takes a device *type* ("cuda"), not "cuda:0" as a DDP rank's device reads
    scaler = (torch.amp.GradScaler(torch.device(shard.device).type)
              if shard.precision == "fp16" else None)
    metrics: dict[str, float] = {}
    for epoch in range(state.epoch, epochs or cfg.epochs):
        t0 = time.perf_counter()
        stats = _agree(train_epoch(
            state.model, state.optimizer, state.schedule, *train, cfg.batch_size,
            cfg.seed * 100_003 + epoch, loss_fn, augment, shard, scaler, guard,
        ), shard)
        train_loss = stats.loss_sum / max(stats.count, 1)
        if state.first_loss is None:  # the untrained model's loss on its first batch
            state.first_loss = stats.first_batch_loss
        check_divergence(epoch + 1, train_loss, state.first_loss, stats, guard)
        if epoch + 1 == (epochs or cfg.epochs):  # the trained model: its own BN statistics
            recompute_batchnorm(state.model, train[0], cfg.batch_size,
                                cfg.seed * 100_003 + epoch + 1)
        metrics = {"epoch": epoch + 1, "train_loss": train_loss,
                   "train_time_s": time.perf_counter() - t0,
                   "first_batch_s": stats.first_batch_s, "data_wait_s": stats.data_wait_s}
        if val is not None:
            t1 = time.perf_counter()
            if is_sharded(state.model):  # every rank scores with rank 0's BN statistics
                broadcast_buffers(state.model)
            scores = evaluate(state.model, *val, shard=shard, task=cfg.task)
            metrics.update({f"val_{k}": v for k, v in scores.items()})
            if extra is not None:
                pred = task.predictions(predict(state.model, val[0]).float().cpu())
                metrics[cfg.metric] = float(extra(val[1].cpu().numpy(), pred))
            metrics["eval_time_s"] = time.perf_counter() - t1
        state.epoch = epoch + 1
        if on_epoch is not None:
            on_epoch(state, metrics)
    return metrics


def load_checkpoint(path: str | Path) -> tuple[nn.Module, dict[str, Any]]:
    """Rebuild a model from a checkpoint file written by :meth:`TrainState.checkpoint`.

    Loads with ``torch.load(weights_only=True)``: a file carrying pickled code is refused.

    Returns:
        ``(model in eval mode, checkpoint dict)``.

    Raises:
        ValueError: the file is not an automl checkpoint.
        pickle.UnpicklingError: the file holds more than tensors and plain data.
    """
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(ckpt, dict) or ckpt.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"{path}: not an automl checkpoint (format {CHECKPOINT_FORMAT})")
    from automl.task import task_of

    cfg = TrialConfig.from_dict(ckpt["config"])
    model = task_of(cfg.task).build(cfg.arch, tuple(ckpt["input_shape"]), ckpt["num_classes"])
    model.load_state_dict(ckpt["model"])
    model.eval()
    return model, ckpt
