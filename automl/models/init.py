"""Weight-initialisation schemes, plus the argument checks shared by the model zoo.

Schemes (``INITS``), applied to a built model by :func:`init_weights`:

- ``kaiming``: He et al. 2015, "Delving Deep into Rectifiers" (arXiv:1502.01852).
  Conv1d/Conv2d: ``kaiming_normal_(mode="fan_out", nonlinearity="relu")`` as in
  torchvision's ResNet; Linear and attention projections: ``kaiming_uniform_(mode="fan_in",
  nonlinearity="relu")``.
- ``xavier``: Glorot & Bengio 2010, "Understanding the difficulty of training deep
  feedforward neural networks" (AISTATS). ``xavier_uniform_`` on every weight matrix.
- ``orthogonal``: Saxe et al. 2014, "Exact solutions to the nonlinear dynamics of
  learning in deep linear neural networks" (arXiv:1312.6120). ``orthogonal_``.
- ``default``: PyTorch's own initialisation, untouched.

For the three non-default schemes every bias is zeroed and every norm layer gets
weight 1 and bias 0. ViT class tokens and position embeddings are left as built.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any

from torch import Tensor, nn

INITS: tuple[str, ...] = ("kaiming", "xavier", "orthogonal", "default")

_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.LayerNorm, nn.GroupNorm)


def _linear_init(scheme: str) -> Callable[[Tensor], Any]:
    return {
        "kaiming": lambda w: nn.init.kaiming_uniform_(w, mode="fan_in", nonlinearity="relu"),
        "xavier": nn.init.xavier_uniform_,
        "orthogonal": nn.init.orthogonal_,
    }[scheme]


def _conv_init(scheme: str) -> Callable[[Tensor], Any]:
    if scheme == "kaiming":
        return lambda w: nn.init.kaiming_normal_(w, mode="fan_out", nonlinearity="relu")
    return _linear_init(scheme)


def init_weights(model: nn.Module, scheme: str) -> nn.Module:
    """Re-initialise ``model`` in place with ``scheme`` (one of ``INITS``) and return it.

    Uses the global torch RNG (seed it for reproducibility). Covers ``nn.Conv1d``,
    ``nn.Conv2d``, ``nn.Linear``, ``nn.MultiheadAttention`` in-projections and norm layers.
    Raises ValueError for an unknown scheme, listing the valid ones.
    """
    if scheme not in INITS:
        raise ValueError(f"unknown init scheme {scheme!r}; valid: {', '.join(INITS)}")
    if scheme == "default":
        return model
    conv_init, linear_init = _conv_init(scheme), _linear_init(scheme)
    for module in model.modules():
        if isinstance(module, (nn.Conv1d, nn.Conv2d, nn.Linear)):
            (linear_init if isinstance(module, nn.Linear) else conv_init)(module.weight)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.MultiheadAttention) and module.in_proj_weight is not None:
            linear_init(module.in_proj_weight)
            if module.in_proj_bias is not None:
                nn.init.zeros_(module.in_proj_bias)
        elif isinstance(module, _NORMS):
            if getattr(module, "weight", None) is not None:
                nn.init.ones_(module.weight)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)
    return model


# --- argument checks shared by the model families ----------------------------------


def check_int(name: str, value: Any, low: int, high: int | None = None) -> int:
    """Return ``value`` as an int in ``[low, high]``; ValueError naming ``name`` otherwise."""
    try:
        if isinstance(value, bool):
            raise TypeError
        result = operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be an integer; got {value!r}") from None
    if result < low or (high is not None and result > high):
        bound = f">= {low}" if high is None else f"in {low}..{high}"
        raise ValueError(f"{name} must be {bound}; got {result}")
    return result


def check_float(name: str, value: Any, low: float, high: float, high_open: bool = False) -> float:
    """Return ``value`` as a float in ``[low, high]`` (``[low, high)`` if ``high_open``)."""
    try:
        if isinstance(value, bool):
            raise TypeError
        result = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number; got {value!r}") from None
    if not math.isfinite(result) or result < low or result > high or (high_open and result == high):
        bracket = ")" if high_open else "]"
        raise ValueError(f"{name} must be in [{low}, {high}{bracket}; got {value!r}")
    return result


def check_shape(family: str, input_shape: Any, image: bool,
                signal: bool = False) -> tuple[int, ...]:
    """Validate ``input_shape`` (no batch dim); image families need ``(C, H, W)``, signal
    families ``(C, L)``."""
    try:
        shape = tuple(check_int("input_shape entry", d, 1) for d in input_shape)
    except TypeError:
        raise ValueError(f"input_shape must be a tuple of ints; got {input_shape!r}") from None
    if not shape or (image and len(shape) != 3) or (signal and len(shape) != 2):
        need = ("image input of shape (C, H, W)" if image else
                "1D signal input of shape (C, L)" if signal else "a non-empty input shape")
        raise ValueError(f"family {family!r} needs {need}; got {shape!r}")
    return shape
