"""The regression head: a model's output in the target's units.

A regression model trains on a standardised target (the loss does not scale with the
target's units, and the zoo's initialisations fit outputs of unit scale) but predicts
in the target's own units, also once exported (TorchScript, ONNX): :class:`TargetScale`
wraps the network with the training rows' mean and standard deviation as buffers, so
they travel in the ``state_dict`` and in every export.
"""

from __future__ import annotations

import torch
from torch import nn


def unwrap(model: nn.Module) -> nn.Module:
    """The module inside a ``DistributedDataParallel`` (or ``DataParallel``) wrapper; the
    model itself otherwise (also when FSDP2 sharded it in place). Not ``getattr(model,
    "module")``: a user's model may have a child of that name."""
    parallel = (nn.parallel.DistributedDataParallel, nn.DataParallel)
    return model.module if isinstance(model, parallel) else model


class TargetScale(nn.Module):
    """``net(x) * y_std + y_mean``: ``(B, 1)`` predictions in the target's units.

    Args:
        net: maps ``(B, ...)`` to ``(B, 1)`` standardised values.

    Buffers ``y_mean`` and ``y_std`` (shape ``(1,)``, float32) start at 0 and 1;
    :meth:`fit` sets them from the training targets before training.
    """

    def __init__(self, net: nn.Module):
        super().__init__()
        self.net = net
        self.register_buffer("y_mean", torch.zeros(1))
        self.register_buffer("y_std", torch.ones(1))

    @torch.no_grad()
    def fit(self, y: torch.Tensor) -> None:
        """Mean and standard deviation (population, floored at 1e-8) of targets ``y``
        ``(N,)``."""
        y = torch.as_tensor(y, dtype=torch.float64).reshape(-1)
        self.y_mean.copy_(y.mean().reshape(1).to(self.y_mean))
        self.y_std.copy_(y.std(unbiased=False).clamp_min(1e-8).reshape(1).to(self.y_std))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x) * self.y_std + self.y_mean
