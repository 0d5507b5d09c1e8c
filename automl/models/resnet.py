"""CIFAR-style residual network (He et al. 2016, "Deep Residual Learning for Image
Recognition", CVPR; arXiv:1512.03385, section 4.2).

A 3x3 conv stem without max-pool, ``stages`` stages of ``depth`` basic blocks with
``width * 2**i`` channels, global average pooling and a linear head. Stage 1 keeps the
resolution; later stages halve it with a stride-2 conv, except that a stage whose input
is already 1 pixel high or wide keeps stride 1 (so 8x8 digits work). Shortcuts that
change shape are 1x1 conv + BatchNorm ("option B").
"""

from __future__ import annotations

from torch import Tensor, nn

from automl.models.init import check_int, check_shape


class BasicBlock(nn.Module):
    """Two 3x3 conv-BN layers plus identity (or 1x1 projection) shortcut.

    Input (B, c_in, H, W) -> output (B, c_out, ceil(H / stride), ceil(W / stride)).
    """

    def __init__(self, c_in: int, c_out: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.relu1 = nn.ReLU()
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.relu2 = nn.ReLU()
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(
                nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False), nn.BatchNorm2d(c_out)
            )

    def forward(self, x: Tensor) -> Tensor:
        out = self.relu1(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu2(out + self.shortcut(x))


class ResNet(nn.Module):
    """ResNet for images: (B, C, H, W) float -> (B, num_classes) logits.

    Args:
        input_shape: ``(C, H, W)`` without the batch dimension.
        num_classes: number of output logits (>= 1).
        depth: basic blocks per stage, 1..4 (default 1).
        width: channels of the first stage, >= 1 (default 16).
        stages: number of stages, 1..5 (default 3); widths ``w, 2w, 4w, ...``.

    Raises:
        ValueError: non-image ``input_shape`` or an out-of-range parameter.
    """

    def __init__(
        self,
        input_shape: tuple[int, ...],
        num_classes: int,
        depth: int = 1,
        width: int = 16,
        stages: int = 3,
    ):
        super().__init__()
        c, h, w = check_shape("resnet", input_shape, image=True)
        num_classes = check_int("num_classes", num_classes, 1)
        depth = check_int("depth", depth, 1, 4)
        width = check_int("width", width, 1)
        stages = check_int("stages", stages, 1, 5)
        self.stem = nn.Sequential(
            nn.Conv2d(c, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU()
        )
        blocks: list[nn.Module] = []
        c_in = width
        for i in range(stages):
            c_out = width * 2**i
            stride = 2 if i > 0 and min(h, w) >= 2 else 1
            h, w = -(-h // stride), -(-w // stride)
            for j in range(depth):
                blocks.append(BasicBlock(c_in, c_out, stride if j == 0 else 1))
                c_in = c_out
        self.layers = nn.Sequential(*blocks)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(c_in, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc(self.flatten(self.pool(self.layers(self.stem(x)))))
