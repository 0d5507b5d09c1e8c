"""A small package of the user's own models for `automl`: each factory is called as
``factory(input_shape, output_size, **hyperparameters)`` and returns an ``nn.Module``
that maps a batch ``(B, *input_shape)`` to ``(B, output_size)`` logits."""

from __future__ import annotations

import math

from torch import nn

__version__ = "0.1.0"


def small_cnn(input_shape: tuple[int, ...], output_size: int, channels: int = 16,
              hidden: int = 64, dropout: float = 0.0) -> nn.Module:
    """Two 3x3 convolutions (``channels``, then twice as many) with 2x2 max pooling after
    the first, then a hidden layer of ``hidden`` units; images ``(C, H, W)``."""
    c, h, w = input_shape
    return nn.Sequential(
        nn.Conv2d(c, channels, 3, padding=1), nn.BatchNorm2d(channels), nn.ReLU(),
        nn.MaxPool2d(2),                                           # (B, channels, H/2, W/2)
        nn.Conv2d(channels, 2 * channels, 3, padding=1), nn.BatchNorm2d(2 * channels),
        nn.ReLU(), nn.Flatten(),                                   # (B, 2 * channels * H/2 * W/2)
        nn.Linear(2 * channels * (h // 2) * (w // 2), hidden), nn.ReLU(), nn.Dropout(dropout),
        nn.Linear(hidden, output_size),                            # (B, output_size)
    )


def wide_mlp(input_shape: tuple[int, ...], output_size: int, hidden: int = 128) -> nn.Module:
    """One hidden layer over the flattened input; any input shape."""
    return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), hidden), nn.ReLU(),
                         nn.Linear(hidden, output_size))
