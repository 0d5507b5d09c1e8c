"""Small VGG-style network (Simonyan & Zisserman 2014, "Very Deep Convolutional
Networks for Large-Scale Image Recognition", arXiv:1409.1556), with BatchNorm
(Ioffe & Szegedy 2015) after every conv as in torchvision's ``vgg*_bn``.

Block ``i`` is 2 x (conv3x3, BN, ReLU) with ``min(width * 2**i, 8 * width)`` channels,
followed by a 2x2 max-pool while both spatial sides are still >= 2. The classifier is
flatten -> Linear(fc_width) -> ReLU -> Dropout -> Linear(num_classes).
"""

from __future__ import annotations

from torch import Tensor, nn

from automl.models.init import check_float, check_int, check_shape


def _conv_bn_relu(c_in: int, c_out: int) -> list[nn.Module]:
    return [nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU()]


class VGG(nn.Module):
    """VGG for images: (B, C, H, W) float -> (B, num_classes) logits.

    Args:
        input_shape: ``(C, H, W)`` without the batch dimension.
        num_classes: number of output logits (>= 1).
        depth: conv blocks, 1..8 (default 2).
        width: channels of block 1, >= 1 (default 16); doubled per block, capped at 8x.
        fc_width: hidden width of the classifier, >= 1 (default 128).
        dropout: dropout probability before the output layer, in [0, 1) (default 0.0).

    Raises:
        ValueError: non-image ``input_shape`` or an out-of-range parameter.
    """

    def __init__(
        self,
        input_shape: tuple[int, ...],
        num_classes: int,
        depth: int = 2,
        width: int = 16,
        fc_width: int = 128,
        dropout: float = 0.0,
    ):
        super().__init__()
        c, h, w = check_shape("vgg", input_shape, image=True)
        num_classes = check_int("num_classes", num_classes, 1)
        depth = check_int("depth", depth, 1, 8)
        width = check_int("width", width, 1)
        fc_width = check_int("fc_width", fc_width, 1)
        dropout = check_float("dropout", dropout, 0.0, 1.0, high_open=True)
        layers: list[nn.Module] = []
        c_in = c
        for i in range(depth):
            c_out = min(width * 2**i, 8 * width)
            layers += _conv_bn_relu(c_in, c_out) + _conv_bn_relu(c_out, c_out)
            if min(h, w) >= 2:
                layers.append(nn.MaxPool2d(2))
                h, w = h // 2, w // 2
            c_in = c_out
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(c_in * h * w, fc_width),
            nn.ReLU(),
            nn.Dropout(dropout),
            nn.Linear(fc_width, num_classes),
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.classifier(self.features(x))
