"""Model zoo: ResNet, VGG, MLP and ViT for images (MLP also for tabular data), and
ResNet1d, TCN and Transformer1d for 1D signals, built from a flat ``arch`` dict; and the
user's own models, whose family is an import path ``package.module:factory``
(:mod:`automl.models.user`).

``arch`` looks like ``{"family": "resnet", "depth": 2, "width": 16}``; every key except
``family`` is optional and is passed to the family's class as a keyword argument, so a
checkpoint ``{"arch": ..., "input_shape": ..., "num_classes": ...}`` rebuilds the model
with :func:`build_model`. Images are ``(B, C, H, W)`` floats, 1D signals ``(B, C, L)``,
tabular data ``(B, F)``; every model returns ``(B, num_classes)`` logits.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from automl.models.head import TargetScale, unwrap
from automl.models.init import INITS, init_weights
from automl.models.mlp import MLP
from automl.models.resnet import ResNet
from automl.models.resnet1d import ResNet1d
from automl.models.tcn import TCN
from automl.models.transformer1d import Transformer1d
from automl.models.vgg import VGG
from automl.models.vit import ViT
from automl.spec import is_import_path

__all__ = [
    "FAMILIES",
    "INITS",
    "MLP",
    "MODEL_CLASSES",
    "SIGNAL_FAMILIES",
    "TCN",
    "TargetScale",
    "VGG",
    "ResNet",
    "ResNet1d",
    "Transformer1d",
    "ViT",
    "build_model",
    "count_parameters",
    "family_params",
    "init_weights",
    "load_matching_weights",
    "model_size_key",
    "unwrap",
]

FAMILIES: tuple[str, ...] = ("resnet", "vgg", "mlp", "vit", "resnet1d", "tcn", "transformer1d")
#: families that take 1D signals ``(C, L)`` only (``mlp`` takes every kind of input)
SIGNAL_FAMILIES: tuple[str, ...] = ("resnet1d", "tcn", "transformer1d")
MODEL_CLASSES: dict[str, type[nn.Module]] = {
    "resnet": ResNet, "vgg": VGG, "mlp": MLP, "vit": ViT,
    "resnet1d": ResNet1d, "tcn": TCN, "transformer1d": Transformer1d,
}


def family_params(family: str) -> dict[str, Any]:
    """The optional parameters of ``family`` and their defaults, e.g. ``{"depth": 1, ...}``
    (for a user's factory: the parameters after ``input_shape`` and ``output_size``)."""
    if is_import_path(family):
        from automl.models.user import factory_params

        return factory_params(family)
    if not isinstance(family, str) or family not in MODEL_CLASSES:
        raise ValueError(f"unknown model family {family!r}; valid: {', '.join(FAMILIES)}")
    params = list(inspect.signature(MODEL_CLASSES[family]).parameters.values())[2:]
    return {p.name: p.default for p in params}


def _split_arch(arch: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    if not isinstance(arch, Mapping):
        raise ValueError(f"arch must be a mapping with a 'family' key; got {arch!r}")
    params = dict(arch)
    family = params.pop("family", None)
    if family is None:
        raise ValueError(f"arch needs a 'family' key (one of {', '.join(FAMILIES)}); got {arch!r}")
    if is_import_path(family):  # the factory's own signature says (checked before the run)
        return family, params
    valid = family_params(family)
    unknown = sorted(str(k) for k in params if k not in valid)
    if unknown:
        raise ValueError(
            f"unknown parameter(s) {', '.join(map(repr, unknown))} for family {family!r}; "
            f"valid: family, {', '.join(valid)}"
        )
    return family, params


def build_model(
    arch: Mapping[str, Any],
    input_shape: tuple[int, ...],
    num_classes: int,
    init: str = "default",
) -> nn.Module:
    """Build the model described by ``arch`` and apply the ``init`` scheme.

    Args:
        arch: ``{"family": <one of FAMILIES>, **params}``; see each class for params. A
            family that is an import path ``package.module:factory`` is built as
            ``factory(input_shape, num_classes, **params)`` (:mod:`automl.models.user`);
            ``init`` applies to it too (``default`` keeps the factory's own).
        input_shape: one example's shape without batch dim: ``(C, H, W)``, ``(C, L)``
            or ``(F,)``.
        num_classes: number of output logits.
        init: one of ``INITS`` (see :mod:`automl.models.init`).

    Returns:
        An ``nn.Module`` mapping ``(B, *input_shape)`` to ``(B, num_classes)`` logits.

    Raises:
        ValueError: missing/unknown family, unknown or out-of-range parameter (the message
            names it and the valid ones), an input shape the family cannot take, or an
            unknown init scheme.
        ImportError, TypeError: a user family's module does not import, or its factory
            returns no ``nn.Module``; and whatever that factory raises.
    """
    if init not in INITS:
        raise ValueError(f"unknown init scheme {init!r}; valid: {', '.join(INITS)}")
    family, params = _split_arch(arch)
    return init_weights(_construct(family, params, input_shape, num_classes), init)


def _construct(family: str, params: dict[str, Any], input_shape: tuple[int, ...],
               num_classes: int) -> nn.Module:
    if is_import_path(family):
        from automl.models.user import build

        return build(family, tuple(input_shape), num_classes, params)
    return MODEL_CLASSES[family](input_shape, num_classes, **params)


def count_parameters(model: nn.Module) -> int:
    """Number of trainable (``requires_grad``) parameter elements of ``model``."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def model_size_key(arch: Mapping[str, Any], input_shape: tuple[int, ...], num_classes: int) -> int:
    """Trainable parameter count of ``build_model(arch, ...)``, built on the meta device
    (no memory, no RNG use; a user's factory that cannot build there is built on the CPU
    with the RNG state restored after). Raises what :func:`build_model` raises."""
    family, params = _split_arch(arch)
    try:
        with torch.device("meta"):
            model = _construct(family, params, input_shape, num_classes)
    except Exception:
        if not is_import_path(family):
            raise
        with torch.random.fork_rng(devices=[]):
            model = _construct(family, params, input_shape, num_classes)
    return count_parameters(model)


def load_matching_weights(model: nn.Module, arch: Mapping[str, Any],
                          weights: Mapping[str, Any] | None) -> bool:
    """Load ``weights`` (``{"arch": dict, "state_dict": {name: tensor}}``, e.g. a champion
    model's, for transfer learning) into ``model`` (unwrapped, before training) when it
    was built from the same ``arch`` and every tensor has the same name and shape (so the
    input shape and number of classes match too).

    Returns:
        True when the weights were loaded; False (``model`` untouched) otherwise.
    """
    if not weights or dict(arch) != dict(weights["arch"]):
        return False
    mine, theirs = model.state_dict(), weights["state_dict"]
    if set(mine) != set(theirs) or any(mine[k].shape != theirs[k].shape for k in mine):
        return False
    model.load_state_dict(theirs)
    return True
