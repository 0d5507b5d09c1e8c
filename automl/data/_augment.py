"""Training-batch augmentation: images with kornia (differentiable, pure PyTorch;
torchvision's transforms v2 cannot be installed beside this torch build), 1D signals
with :class:`automl.data._signal_augment.SignalAugment` (plain torch; kornia has no 1D
transforms).

Applied by :func:`automl.train.train_epoch` to training batches only; evaluation,
validation folds and the test split always see the inputs as loaded.
"""

from __future__ import annotations

from collections.abc import Mapping

from automl.spec import AUGMENT_IDENTITY, IMAGE_AUGMENTS, SIGNAL_AUGMENTS


def make_augment(params: Mapping[str, float], input_shape: tuple[int, ...]):
    """A module mapping a training batch to an augmented batch of the same shape, or None
    when ``params`` change nothing.

    Args:
        params: for images ``(B, C, H, W)``: ``rotation`` (largest angle, degrees; each
            image turns by a uniform angle in ``[-rotation, rotation]``), ``hflip``
            (probability of a horizontal flip), ``crop_scale`` (smallest area fraction a
            random resized crop keeps, resized back to ``H x W``; 1.0 = none). For 1D
            signals ``(B, C, L)``: ``shift``, ``scale``, ``noise`` (see
            :class:`~automl.data._signal_augment.SignalAugment`). Missing keys change nothing.
        input_shape: one example's shape, ``(C, H, W)`` or ``(C, L)``.

    Raises:
        ValueError: an unknown key, image and signal keys mixed, or an ``input_shape``
            that does not fit the keys (images need ``(C, H, W)``, signals ``(C, L)``).
        ImportError: image augmentation without kornia (the message says how to install it).
    """
    unknown = sorted(set(params) - set(AUGMENT_IDENTITY))
    if unknown:
        raise ValueError(f"unknown augmentation(s) {unknown}; valid: {', '.join(AUGMENT_IDENTITY)}")
    active = {k: float(v) for k, v in params.items() if float(v) != AUGMENT_IDENTITY[k]}
    if not active:
        return None
    if set(active) & set(SIGNAL_AUGMENTS):
        if set(active) & set(IMAGE_AUGMENTS):
            raise ValueError(f"augmentation mixes image and signal keys: {sorted(active)}")
        if len(input_shape) != 2:
            raise ValueError(f"signal augmentation needs 1D signals (C, L); got input shape "
                             f"{input_shape}")
        from automl.data._signal_augment import SignalAugment

        return SignalAugment(**active)
    if len(input_shape) != 3:
        raise ValueError(f"augmentation needs images (C, H, W); got input shape {input_shape}")
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
        ops.append(K.RandomResizedCrop(size=tuple(input_shape[1:]),
                                       scale=(active["crop_scale"], 1.0), p=1.0))
    return nn.Sequential(*ops)
