"""Residual network for time series (Wang, Yan & Oates 2017, "Time Series Classification
from Scratch with Deep Neural Networks: A Strong Baseline", IJCNN; arXiv:1611.06455).

The paper's ResNet: residual blocks of three convolutions with kernel sizes 8, 5 and 3
(stride 1, "same" padding), each followed by BatchNorm and ReLU (the third ReLU after the
addition), a shortcut that is the identity or, when the channel count changes, a 1x1
conv + BatchNorm; then global average pooling over time and a linear head. The paper uses
3 blocks of 64, 128 and 128 filters; here ``depth`` blocks, the first with ``width``
channels and the others with ``2 * width`` (``depth=3, width=64`` is the paper's net).
No pooling or striding: every block sees the whole sequence length.
"""

from __future__ import annotations

from torch import Tensor, nn

from automl.models.init import check_int, check_shape

#: kernel sizes of the three convolutions of a block (the paper's)
KERNELS = (8, 5, 3)


class ResBlock1d(nn.Module):
    """Three conv-BN layers (kernels 8, 5, 3) plus an identity or 1x1 projection shortcut.

    Input (B, c_in, L) -> output (B, c_out, L).
    """

    def __init__(self, c_in: int, c_out: int):
        super().__init__()
        layers: list[nn.Module] = []
        c = c_in
        for i, k in enumerate(KERNELS):
            # "same" padding, the extra step of an even kernel on the right (as Keras pads)
            layers += [nn.ConstantPad1d(((k - 1) // 2, k // 2), 0.0),
                       nn.Conv1d(c, c_out, k, bias=False), nn.BatchNorm1d(c_out)]
            if i < len(KERNELS) - 1:
                layers.append(nn.ReLU())
            c = c_out
        self.body = nn.Sequential(*layers)
        self.shortcut: nn.Module = nn.Identity()
        if c_in != c_out:
            self.shortcut = nn.Sequential(nn.Conv1d(c_in, c_out, 1, bias=False),
                                          nn.BatchNorm1d(c_out))
        self.relu = nn.ReLU()

    def forward(self, x: Tensor) -> Tensor:
        return self.relu(self.body(x) + self.shortcut(x))


class ResNet1d(nn.Module):
    """ResNet for 1D signals: (B, C, L) float -> (B, num_classes) logits.

    Args:
        input_shape: ``(C, L)`` (channels, length) without the batch dimension.
        num_classes: number of output logits (>= 1).
        depth: residual blocks, 1..6 (default 3, as in the paper).
        width: channels of block 1, >= 1 (default 64); later blocks have ``2 * width``.

    Raises:
        ValueError: ``input_shape`` is not ``(C, L)``, or an out-of-range parameter.
    """

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, depth: int = 3,
                 width: int = 64):
        super().__init__()
        c, _length = check_shape("resnet1d", input_shape, image=False, signal=True)
        num_classes = check_int("num_classes", num_classes, 1)
        depth = check_int("depth", depth, 1, 6)
        width = check_int("width", width, 1)
        blocks: list[nn.Module] = []
        c_in = c
        for i in range(depth):
            c_out = width if i == 0 else 2 * width
            blocks.append(ResBlock1d(c_in, c_out))
            c_in = c_out
        self.blocks = nn.Sequential(*blocks)
        self.pool = nn.AdaptiveAvgPool1d(1)
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(c_in, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc(self.flatten(self.pool(self.blocks(x))))  # (B, C, L) -> (B, K)
