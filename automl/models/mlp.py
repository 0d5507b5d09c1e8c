"""Multi-layer perceptron: flatten -> ``depth`` x (Linear, ReLU, Dropout) -> Linear.

Works on tabular ``(B, F)`` input and on anything else, which it flattens
(e.g. ``(B, 1, 8, 8)`` digits become ``(B, 64)``).
"""

from __future__ import annotations

import math

from torch import Tensor, nn

from automl.models.init import check_float, check_int, check_shape


class MLP(nn.Module):
    """MLP: (B, *input_shape) float -> (B, num_classes) logits.

    Args:
        input_shape: any non-empty shape without the batch dimension, e.g. ``(30,)``.
        num_classes: number of output logits (>= 1).
        depth: hidden layers, 0..16 (default 2; 0 gives a linear model).
        width: units per hidden layer, >= 1 (default 128).
        dropout: dropout probability after each hidden layer, in [0, 1) (default 0.0).

    Raises:
        ValueError: empty ``input_shape`` or an out-of-range parameter.
    """

    def __init__(
        self,
        input_shape: tuple[int, ...],
        num_classes: int,
        depth: int = 2,
        width: int = 128,
        dropout: float = 0.0,
    ):
        super().__init__()
        shape = check_shape("mlp", input_shape, image=False)
        num_classes = check_int("num_classes", num_classes, 1)
        depth = check_int("depth", depth, 0, 16)
        width = check_int("width", width, 1)
        dropout = check_float("dropout", dropout, 0.0, 1.0, high_open=True)
        layers: list[nn.Module] = [nn.Flatten()]
        features = math.prod(shape)
        for _ in range(depth):
            layers += [nn.Linear(features, width), nn.ReLU(), nn.Dropout(dropout)]
            features = width
        layers.append(nn.Linear(features, num_classes))
        self.net = nn.Sequential(*layers)

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)
