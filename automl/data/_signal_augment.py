"""Training-batch augmentation of 1D signals ``(B, C, L)`` (see :func:`automl.data.make_augment`)."""

from __future__ import annotations

import torch
from torch import Tensor, nn


class SignalAugment(nn.Module):
    """Random shift, amplitude scaling and Gaussian noise of a batch ``(B, C, L)``, drawn
    per example from the global torch RNG (the trial's seed fixes it).

    - ``shift``: largest shift in time steps; each signal is rolled circularly (all its
      channels together) by a uniform integer in ``[-shift, shift]``;
    - ``scale``: each signal is multiplied by a uniform factor in ``[1 - scale, 1 + scale]``;
    - ``noise``: standard deviation of i.i.d. Gaussian noise added to every value (in the
      units of the standardised input).

    These are the nuisances MNIST-1D itself is built from (Greydanus & Kobak 2020:
    translation, scaling, noise), applied again to training batches only.
    """

    def __init__(self, shift: float = 0.0, scale: float = 0.0, noise: float = 0.0):
        super().__init__()
        if shift < 0 or not 0 <= scale < 1 or noise < 0:
            raise ValueError(f"need shift >= 0, 0 <= scale < 1, noise >= 0; got shift={shift}, "
                             f"scale={scale}, noise={noise}")
        self.shift, self.scale, self.noise = int(round(shift)), float(scale), float(noise)

    def forward(self, x: Tensor) -> Tensor:  # (B, C, L) -> (B, C, L)
        b, _, length = x.shape
        if self.shift:
            k = torch.randint(-self.shift, self.shift + 1, (b, 1, 1), device=x.device)
            idx = (torch.arange(length, device=x.device).view(1, 1, length) - k) % length
            x = torch.gather(x, 2, idx.expand_as(x))  # out[t] = x[t - k]: a roll by k
        if self.scale:
            x = x * (1 + self.scale * (2 * torch.rand(b, 1, 1, device=x.device) - 1))
        if self.noise:
            x = x + self.noise * torch.randn_like(x)
        return x
