"""Data-parallel wrapping of a model, DDP or FSDP, and its full state in and out.

``strategy: ddp`` wraps the model in ``torch.nn.parallel.DistributedDataParallel``: every
rank holds the whole model, gradients are all-reduced. ``strategy: fsdp`` shards it with
PyTorch's FSDP2 (``torch.distributed.fsdp.fully_shard``): every rank holds ``1/world`` of
each parameter (a ``DTensor`` sharded on dim 0), parameters are all-gathered for the
forward and backward passes and gradients reduce-scattered. FSDP2 runs on CPUs with gloo
as on GPUs with NCCL; FSDP1 (``FullyShardedDataParallel``) and Ray's
``prepare_model(parallel_strategy="fsdp")`` refuse a machine without an accelerator
(measured with torch 2.13).

Checkpoints never hold shards: :func:`full_state` gathers the full model and optimizer
state (``torch.distributed.checkpoint.state_dict`` with ``full_state_dict=True``) in the
layout a plain model's ``state_dict()`` and a plain optimizer's ``state_dict()`` have, so
a checkpoint written by an FSDP trial is the same file a DDP or in-process trial writes,
and everything downstream (CV folds, refit, compression, ONNX export) builds a plain
model from it. Every rank must call :func:`full_state` and :func:`load_full_state` (they
are collectives).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

STRATEGIES = ("ddp", "fsdp")
#: a submodule holding at least this many parameters (not in a smaller unit already) is
#: an FSDP unit of its own, all-gathered on its own; the rest belong to the root's unit
#: (the size-based policy of FSDP1's ``size_based_auto_wrap_policy``, smaller default:
#: on CPUs every unit costs one all-gather per forward)
FSDP_UNIT_PARAMS = 1_000_000


def wrap(model: nn.Module, strategy: str, device: str | torch.device,
         unit_params: int = FSDP_UNIT_PARAMS) -> nn.Module:
    """Place ``model`` on ``device`` and wrap it for data-parallel training in the
    initialised default process group.

    Args:
        model: the plain model, with the weights every rank starts from (identical on all
            ranks: DDP broadcasts rank 0's, FSDP shards each rank's own copy).
            Sharded parameters are gathered for each forward pass and sharded again
            after it (``reshard_after_forward=True``, the root included): between
            passes every rank holds its shards only.
        strategy: ``ddp`` or ``fsdp``.
        device: this rank's device (``cpu`` or ``cuda:N``).
        unit_params: FSDP only: see :data:`FSDP_UNIT_PARAMS`.

    Returns:
        The DDP wrapper (``.module`` is ``model``), or ``model`` itself sharded in place.

    Raises:
        ValueError: an unknown strategy.
    """
    device = torch.device(device)
    model = model.to(device)
    if strategy == "ddp":
        ids = [device] if device.type == "cuda" else None
        return nn.parallel.DistributedDataParallel(model, device_ids=ids, output_device=device
                                                   if ids else None)
    if strategy != "fsdp":
        raise ValueError(f"unknown data-parallel strategy {strategy!r}; use ddp or fsdp")
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(device.type, (torch.distributed.get_world_size(),))
    pending: dict[nn.Module, int] = {}  # parameters not yet in a unit, per module
    for module in reversed(list(model.modules())):  # children before their parents
        own = sum(p.numel() for p in module.parameters(recurse=False))
        below = sum(pending.get(c, 0) for c in module.children())
        pending[module] = own + below
        if module is not model and pending[module] >= unit_params:
            fully_shard(module, mesh=mesh, reshard_after_forward=True)
            pending[module] = 0
    # the root too (FSDP2 keeps the root's parameters whole after a forward pass unless
    # told, so a model of one unit would be whole again after its first evaluation)
    fully_shard(model, mesh=mesh, reshard_after_forward=True)
    return model


def is_sharded(model: nn.Module) -> bool:
    """True for a model :func:`wrap` sharded with FSDP."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return False
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def broadcast_buffers(model: nn.Module) -> None:
    """Give every rank rank 0's buffers (BatchNorm's running statistics), as DDP does
    before each forward pass: FSDP shards parameters only, so each rank's running
    statistics follow its own batches, and an evaluation would score each rank's slice of
    the rows with different statistics. A collective."""
    for b in model.buffers():
        torch.distributed.broadcast(b.data, src=0)


def local_params(model: nn.Module) -> int:
    """Parameter elements this rank holds (its shards under FSDP, all of them else)."""
    return sum(p.to_local().numel() if hasattr(p, "to_local") else p.numel()
               for p in model.parameters())


def _options(**kw):
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=True, **kw)


def full_state(model: nn.Module, optimizer: torch.optim.Optimizer
               ) -> tuple[dict[str, Any], dict[str, Any]]:
    """The full (unsharded) model and optimizer state of a sharded ``model`` on CPU, on
    rank 0 (``({}, {})`` on the other ranks): the model's as ``model.state_dict()`` of the
    plain model, the optimizer's as ``optimizer.state_dict()`` of a plain optimizer built
    on the plain model's ``parameters()`` (state keyed by parameter index, not name).
    A collective: every rank calls it."""
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        get_optimizer_state_dict,
    )

    opts = _options(cpu_offload=True)
    weights = get_model_state_dict(model, options=opts)
    optim = get_optimizer_state_dict(model, optimizer, options=opts)
    if not weights:  # not rank 0
        return {}, {}
    index = {name: i for i, (name, _) in enumerate(model.named_parameters())}
    optim = {"state": {index[k]: v for k, v in optim["state"].items()},
             "param_groups": [{**g, "params": [index[k] for k in g["params"]]}
                              for g in optim["param_groups"]]}
    return weights, optim


def load_full_state(model: nn.Module, optimizer: torch.optim.Optimizer,
                    weights: dict[str, Any], optim: dict[str, Any]) -> None:
    """Load a full state (:func:`full_state`'s layout, e.g. a checkpoint's ``model`` and
    ``optimizer``) into a sharded ``model`` and its ``optimizer``; every rank passes the
    same full state and keeps its own shards of it. A collective."""
    from torch.distributed.checkpoint.state_dict import (
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    names = [name for name, _ in model.named_parameters()]
    by_name = {"state": {names[int(i)]: v for i, v in optim["state"].items()},
               "param_groups": [{**g, "params": [names[int(i)] for i in g["params"]]}
                                for g in optim["param_groups"]]}
    set_model_state_dict(model, weights, options=_options())
    set_optimizer_state_dict(model, optimizer, by_name, options=_options())
