"""Pruning: structured channel pruning that really removes channels, and unstructured
global magnitude pruning.

- ``structured``: torch-pruning's ``MetaPruner`` with ``GroupMagnitudeImportance``
  (Fang et al. 2023, "DepGraph: Towards Any Structural Pruning", CVPR;
  arXiv:2301.12900). The dependency graph removes coupled channels together (conv, its
  BatchNorm, the next layer's inputs, residual additions), so the model gets physically
  smaller: fewer parameters and MACs. ``pruning_ratio`` is the share of channels removed
  per layer (MACs fall roughly with ``(1 - ratio)**2``); ``macs_target`` instead prunes in
  small steps until MACs <= ``macs_target`` x the original. The classifier head (the
  layer with ``num_classes`` outputs) is never pruned; attention keeps its head count
  (``num_heads`` is passed for every ``nn.MultiheadAttention``).
- ``unstructured``: ``torch.nn.utils.prune.global_unstructured`` with L1 (magnitude)
  over every Conv/Linear weight together (Han et al. 2015, "Learning both Weights and
  Connections for Efficient Neural Networks", NeurIPS; arXiv:1506.02626), then
  ``prune.remove`` so no ``*_orig``/``*_mask`` tensors or hooks remain. Tensors stay
  dense: the saved file does not shrink, ``nonzero_params`` does.

A model torch-pruning cannot trace (its dependency graph raises), or whose pruned version
no longer runs (a channel coupling the graph does not show, e.g. a reshape that folds
channels into another axis), is skipped with the reason on one line.

``iterative_steps`` > 1 prunes in that many equal steps, each followed by
``fine_tune_epochs`` of fine-tuning (``ctx.fine_tune``); fine-tuning of unstructured
pruning happens with the masks in place, so pruned weights stay zero. With
``distill_alpha`` > 0 the fine-tuning loss is Hinton et al.'s distillation loss
(``distill.distillation_loss``) against the logits of the model as it came into the
stage (computed once, before pruning), instead of plain cross-entropy.
"""

from __future__ import annotations

import copy

import torch
from torch import nn
from torch.nn.utils import prune as torch_prune

from automl.compress._base import (
    Context,
    StageOutput,
    check_number,
    count_macs_params,
    predict,
    quiet,
)
from automl.compress.distill import distillation_loss
from automl.compress.export import one_line, shapes_of

METHODS = ("structured", "unstructured")
_PRUNABLE = (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.Linear)


def _head_layers(model: nn.Module, num_classes: int) -> list[nn.Module]:
    """Layers producing the logits (out size == num_classes); never pruned structurally."""
    return [m for m in model.modules() if (isinstance(m, nn.Linear) and m.out_features
            == num_classes) or (isinstance(m, nn.modules.conv._ConvNd)
                                and m.out_channels == num_classes)]


def _masked_weights(model: nn.Module) -> list[tuple[nn.Module, str]]:
    """(module, "weight") of each Conv/Linear, except attention projections, whose weight
    ``nn.MultiheadAttention`` reads directly (a pruning hook would never run)."""
    skip = {id(m.out_proj) for m in model.modules() if isinstance(m, nn.MultiheadAttention)}
    return [(m, "weight") for m in model.modules() if isinstance(m, _PRUNABLE)
            and id(m) not in skip]


def sparsity(model: nn.Module) -> float:
    """Share of exactly-zero entries among the Conv/Linear weights ``_masked_weights``."""
    ws = [getattr(m, n) for m, n in _masked_weights(model)]
    total = sum(w.numel() for w in ws)
    return sum(int((w == 0).sum()) for w in ws) / total if total else 0.0


def n_hooks(model: nn.Module) -> int:
    """Number of forward and forward-pre hooks on ``model`` and its submodules."""
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def has_pruning_leftovers(model: nn.Module) -> bool:
    """True if a ``*_orig``/``*_mask`` tensor or a ``torch.nn.utils.prune`` hook is left."""
    keys = model.state_dict().keys()
    hooks = any(isinstance(h, torch_prune.BasePruningMethod)
                for m in model.modules() for h in m._forward_pre_hooks.values())
    return hooks or any(k.endswith(("_orig", "_mask")) for k in keys)


class _CannotPrune(Exception):
    """torch-pruning cannot trace the model, or its pruned model does not run: the stage
    is skipped with this one-line reason (a user's model may hide its channel couplings)."""


class PruneStage:
    """Prune stage (module docstring). Params: ``method`` in ``METHODS``; structured:
    ``pruning_ratio`` in (0, 1) or ``macs_target`` in (0, 1), ``importance`` "l1"/"l2",
    ``global_pruning``; unstructured: ``sparsity`` in (0, 1); both: ``fine_tune_epochs``
    >= 0 (per step), ``iterative_steps`` >= 1, ``lr`` (default ``ctx.lr``),
    ``distill_alpha`` in [0, 1] (0: cross-entropy fine-tuning) and ``distill_temperature``
    > 0. Raises ``ValueError`` naming a bad key."""

    name = "prune"

    def __init__(self, method: str = "structured", pruning_ratio: float | None = None,
                 sparsity: float | None = None, macs_target: float | None = None,
                 fine_tune_epochs: int = 0, iterative_steps: int = 1,
                 importance: str = "l2", global_pruning: bool = False,
                 lr: float | None = None, distill_alpha: float = 0.0,
                 distill_temperature: float = 4.0):
        if method not in METHODS:
            raise ValueError(f"method: expected one of {METHODS}; got {method!r}")
        if importance not in ("l1", "l2"):
            raise ValueError(f"importance: expected 'l1' or 'l2'; got {importance!r}")
        if not isinstance(global_pruning, bool):
            raise ValueError(f"global_pruning: expected a bool; got {global_pruning!r}")
        wrong = "sparsity" if method == "structured" else "pruning_ratio"
        if (sparsity if method == "structured" else pruning_ratio) is not None:
            raise ValueError(f"{wrong}: not a parameter of {method} pruning")
        if method == "unstructured":
            if macs_target is not None:
                raise ValueError("macs_target: only for structured pruning")
            sparsity = check_number("sparsity", 0.5 if sparsity is None else sparsity, 0, 1,
                                    lo_open=True, hi_open=True)
        elif macs_target is not None:
            if pruning_ratio is not None:
                raise ValueError("pruning_ratio: give either pruning_ratio or macs_target")
            check_number("macs_target", macs_target, 0, 1, lo_open=True, hi_open=True)
        else:
            pruning_ratio = check_number("pruning_ratio", 0.5 if pruning_ratio is None
                                         else pruning_ratio, 0, 1, lo_open=True, hi_open=True)
        self.method, self.importance, self.global_pruning = method, importance, global_pruning
        self.pruning_ratio, self.sparsity, self.macs_target = pruning_ratio, sparsity, macs_target
        self.fine_tune_epochs = check_number("fine_tune_epochs", fine_tune_epochs, 0, 10_000,
                                             integer=True)
        self.iterative_steps = check_number("iterative_steps", iterative_steps, 1, 1000,
                                            integer=True)
        self.lr = None if lr is None else check_number("lr", lr, 0, 1, lo_open=True)
        self.distill_alpha = check_number("distill_alpha", distill_alpha, 0, 1)
        self.distill_temperature = check_number("distill_temperature", distill_temperature, 0,
                                                1e3, lo_open=True)

    def run(self, model: nn.Module, ctx: Context) -> StageOutput:
        model = copy.deepcopy(model).eval()
        hooks0 = n_hooks(model)
        macs0, _ = count_macs_params(model, ctx.X_train)
        params0 = sum(p.numel() for p in model.parameters())
        distill = self.distill_alpha > 0 and self.fine_tune_epochs > 0
        soft = predict(model, ctx.X_train).detach() if distill else None  # (N, K) logits
        if self.method == "structured":
            try:
                info = self._structured(model, ctx, macs0, soft)
            except _CannotPrune as e:
                return StageOutput(skipped=str(e))
        else:
            info = self._unstructured(model, ctx, soft)
        if has_pruning_leftovers(model) or n_hooks(model) != hooks0:
            raise RuntimeError("pruning left hooks or _orig/_mask tensors on the model")
        macs1, _ = count_macs_params(model, ctx.X_train)
        params1 = sum(p.numel() for p in model.parameters())
        if self.method == "structured" and params1 == params0:
            return StageOutput(skipped="no channel was removed (torch-pruning leaves a group "
                                       "alone when the ratio would empty it; lower the ratio)")
        info.update(method=self.method, macs_before=macs0, macs_after=macs1,
                    macs_ratio=macs1 / macs0 if macs0 else 1.0, params_before=params0,
                    params_after=params1, weight_sparsity=sparsity(model))
        info["fine_tune_loss"] = (f"distillation (alpha {self.distill_alpha}, T "
                                  f"{self.distill_temperature})" if distill else
                                  "cross-entropy" if ctx.task == "classification" else
                                  "MSE on standardised values")
        recipe = {"shapes": shapes_of(model)}
        if self.method == "structured":
            recipe["pruned"] = "structured"
        return StageOutput(model=model, info=info, recipe=recipe)

    def _tune(self, model: nn.Module, ctx: Context, soft: torch.Tensor | None) -> None:
        if not self.fine_tune_epochs:
            return
        if soft is None:
            ctx.fine_tune(model, self.fine_tune_epochs, self.lr or ctx.lr)
            return
        t, a = self.distill_temperature, self.distill_alpha

        def loss_fn(logits: torch.Tensor, yb: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
            return distillation_loss(logits, soft[idx].to(logits.device), yb, t, a, ctx.task,
                                     model)

        ctx.fine_tune(model, self.fine_tune_epochs, self.lr or ctx.lr, loss_fn=loss_fn)

    def _structured(self, model: nn.Module, ctx: Context, macs0: int,
                    soft: torch.Tensor | None) -> dict:
        import torch_pruning as tp

        p = 1 if self.importance == "l1" else 2
        by_macs = self.macs_target is not None
        steps = max(self.iterative_steps, 40) if by_macs else self.iterative_steps
        example = ctx.X_train[:2]
        with quiet():
            try:  # torch-pruning follows the autograd graph of one forward pass
                pruner = tp.pruner.MetaPruner(
                    model, example, importance=tp.importance.GroupMagnitudeImportance(p=p),
                    pruning_ratio=0.95 if by_macs else self.pruning_ratio,
                    iterative_steps=steps, ignored_layers=_head_layers(model, ctx.num_classes),
                    global_pruning=self.global_pruning,
                    num_heads={m: m.num_heads for m in model.modules()
                               if isinstance(m, nn.MultiheadAttention)})
            except Exception as e:
                raise _CannotPrune(f"torch-pruning cannot trace this model: {one_line(e)}") \
                    from None
            done = 0
            for _ in range(steps):
                model.eval()
                try:  # a coupling the graph does not show (a reshape of channels into other
                    pruner.step()  # dims, a fixed-size tensor) breaks the pruned model
                    with torch.no_grad():
                        model(example)
                except Exception as e:
                    raise _CannotPrune("torch-pruning cannot prune this model structurally: "
                                       f"{one_line(e)}") from None
                done += 1
                if by_macs:
                    if count_macs_params(model, example)[0] <= self.macs_target * macs0:
                        break
                else:
                    self._tune(model, ctx, soft)
        del pruner  # holds the dependency graph; nothing of it stays on the model
        if by_macs:
            self._tune(model, ctx, soft)
        return {"steps": done, "importance": f"group-magnitude-l{p}"}

    def _unstructured(self, model: nn.Module, ctx: Context, soft: torch.Tensor | None) -> dict:
        targets = _masked_weights(model)
        total = sum(getattr(m, n).numel() for m, n in targets)
        pruned = 0
        for k in range(1, self.iterative_steps + 1):
            goal = round(self.sparsity * total * k / self.iterative_steps)
            torch_prune.global_unstructured(targets, pruning_method=torch_prune.L1Unstructured,
                                            amount=goal - pruned)
            pruned = goal
            self._tune(model, ctx, soft)
        for m, n in targets:
            torch_prune.remove(m, n)
        with torch.no_grad():
            zeros = sum(int((getattr(m, n) == 0).sum()) for m, n in targets)
        return {"steps": self.iterative_steps, "requested_sparsity": self.sparsity,
                "pruned_weights": zeros, "prunable_weights": total}
