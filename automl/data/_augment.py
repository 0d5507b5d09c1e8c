"""Training-batch image augmentation with kornia (differentiable, pure PyTorch;
torchvision's transforms v2 cannot be installed beside this torch build).

Applied by :func:`automl.train.train_epoch` to training batches only; evaluation,
validation folds and the test split always see the images as loaded.
"""

from __future__ import annotations

from collections.abc import Mapping

from automl.spec import AUGMENT_IDENTITY


def make_augment(params: Mapping[str, float], image_shape: tuple[int, ...]):
    """A module mapping a batch ``(B, C, H, W)`` to an augmented batch of the same shape,
    or None when ``params`` change nothing.

    Args:
        params: ``rotation`` (largest angle, degrees; each image turns by a uniform
            angle in ``[-rotation, rotation]``), ``hflip`` (probability of a horizontal
            flip), ``crop_scale`` (smallest area fraction a random resized crop keeps,
            resized back to ``H x W``; 1.0 = none). Missing keys change nothing.
        image_shape: ``(C, H, W)`` of one image.

    Raises:
        ValueError: an unknown key, or ``image_shape`` is not ``(C, H, W)``.
        ImportError: kornia is not installed (the message says how to install it).
    """
    unknown = sorted(set(params) - set(AUGMENT_IDENTITY))
    if unknown:
        raise ValueError(f"unknown augmentation(s) {unknown}; valid: {', '.join(AUGMENT_IDENTITY)}")
    active = {k: float(v) for k, v in params.items() if float(v) != AUGMENT_IDENTITY[k]}
    if not active:
        return None
    if len(image_shape) != 3:
        raise ValueError(f"augmentation needs images (C, H, W); got input shape {image_shape}")
    try:
        import kornia.augmentation as K
    except ImportError as e:
        raise ImportError("data.augment needs kornia: pip install 'kornia>=0.9,<0.10' "
                          "(with torch==2.13.0 in the same command)") from e
    from torch import nn

    ops: list[nn.Module] = []
    if "rotation" in active:
        ops.append(K.RandomRotation(degrees=active["rotation"], p=1.0))
    if "hflip" in active:
        ops.append(K.RandomHorizontalFlip(p=active["hflip"]))
    if "crop_scale" in active:
        ops.append(K.RandomResizedCrop(size=tuple(image_shape[1:]),
                                       scale=(active["crop_scale"], 1.0), p=1.0))
    return nn.Sequential(*ops)
