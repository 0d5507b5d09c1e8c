"""Cost metrics of one model, the objectives a multi-objective search can trade accuracy
against: parameter count, MACs, state_dict bytes and batch-1 latency.

``params`` and ``macs`` are exact counts; ``model_bytes`` is exact for the tensors as they
are (fp32 as trained); ``latency_ms`` is a measurement and moves with the machine's load
(``benchmarks/latency_stability.py`` reports how much on this one). The compression
stages measure their models with the same :func:`latency_ms` and
:func:`count_macs_params` (``automl/compress/_base.py`` imports them from here).
"""

from __future__ import annotations

import contextlib
import statistics
import time
import warnings
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor, nn

__all__ = ["count_macs_params", "latency_ms", "model_bytes", "model_costs", "quiet"]


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Silence the deprecation/tracer warnings torch.ao, torch.jit, torch-pruning's counter
    and torch emit (one filter set for the search's cost metrics and for compression)."""
    with warnings.catch_warnings():
        for cat in (DeprecationWarning, FutureWarning, UserWarning, torch.jit.TracerWarning):
            warnings.simplefilter("ignore", cat)
        yield


def _sync(x: Tensor) -> None:
    if x.device.type == "cuda":
        torch.cuda.synchronize(x.device)


def latency_ms(model: nn.Module, x: Tensor, repeats: int, warmup: int = 3) -> float:
    """Median wall time of ``model(x)`` in ms under ``torch.inference_mode``, after
    ``warmup`` untimed calls; ``x`` on the model's device (CUDA is synchronised around
    each timed call). The model's mode and the thread count are the caller's."""
    times = []
    with torch.inference_mode():
        for _ in range(warmup):
            model(x)
        _sync(x)
        for _ in range(repeats):
            t0 = time.perf_counter()
            model(x)
            _sync(x)
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def count_macs_params(model: nn.Module, example: Tensor) -> tuple[int, int]:
    """(MACs, params) at batch 1 via ``torch_pruning.utils.count_ops_and_params``;
    ``example`` is a batch ``(B, ...)`` of which the first row is used."""
    import torch_pruning as tp  # deferred: a heavy import the model zoo does not need

    with quiet():
        macs, params = tp.utils.count_ops_and_params(model, example[:1])
    return int(macs), int(params)


def model_bytes(model: nn.Module) -> int:
    """Bytes of the tensors in ``model.state_dict()`` (parameters and buffers, at their
    dtype: fp32 as trained), each storage counted once (tied weights are saved once)."""
    seen: set[tuple[int, int, int]] = set()
    total = 0
    for t in model.state_dict().values():
        if not isinstance(t, Tensor):
            continue
        key = (t.untyped_storage().data_ptr(), t.storage_offset(), t.numel())
        if key in seen and t.numel():
            continue
        seen.add(key)
        total += t.numel() * t.element_size()
    return int(total)


def _device(model: nn.Module) -> torch.device:
    for t in (*model.parameters(), *model.buffers()):
        return t.device
    return torch.device("cpu")


def model_costs(model: nn.Module, example: Tensor, threads: int | None = None,
                repeats: int = 20, warmup: int = 5) -> dict[str, Any]:
    """The cost metrics of ``model`` for one input row.

    Args:
        model: any module; it is put in eval mode for the measurement and its training
            mode is restored after. It stays on its device.
        example: a batch ``(B, ...)``, B >= 1, of which the first row is used (batch 1);
            it is moved to the model's device.
        threads: CPU threads for the latency measurement (``torch.set_num_threads``),
            restored after; None keeps the current setting (e.g. the trial's).
        repeats: timed forward passes (>= 1); the median is reported.
        warmup: untimed forward passes first (>= 0).

    Returns:
        ``{"params": int, "macs": int, "model_bytes": int, "latency_ms": float}``:
        ``params`` every parameter element (shared ones once); ``macs`` multiply-
        accumulates at batch 1 (torch-pruning's ``count_ops_and_params``, as compression
        counts them); ``model_bytes`` as :func:`model_bytes`; ``latency_ms`` the median
        batch-1 forward time in milliseconds under ``torch.inference_mode`` on the
        model's device.

    Raises:
        ValueError: ``example`` has no rows, ``threads`` < 1, ``repeats`` < 1 or
            ``warmup`` < 0.
    """
    if example.ndim < 1 or len(example) < 1:
        raise ValueError(f"example must be a batch (B, ...) with B >= 1; got shape "
                         f"{tuple(example.shape)}")
    if threads is not None and (isinstance(threads, bool) or int(threads) != threads or threads < 1):
        raise ValueError(f"threads must be an integer >= 1 or None; got {threads!r}")
    if int(repeats) != repeats or repeats < 1:
        raise ValueError(f"repeats must be an integer >= 1; got {repeats!r}")
    if int(warmup) != warmup or warmup < 0:
        raise ValueError(f"warmup must be an integer >= 0; got {warmup!r}")
    x = example[:1].to(_device(model))
    was_training = model.training
    before = torch.get_num_threads()
    model.eval()
    try:
        macs, _ = count_macs_params(model, x)
        if threads is not None:
            torch.set_num_threads(int(threads))
        ms = latency_ms(model, x, int(repeats), int(warmup))
    finally:
        torch.set_num_threads(before)
        model.train(was_training)
    return {"params": int(sum(p.numel() for p in model.parameters())), "macs": macs,
            "model_bytes": model_bytes(model), "latency_ms": float(ms)}
