"""The pre-norm Transformer encoder that :class:`automl.models.vit.ViT` (images) and
:class:`automl.models.transformer1d.Transformer1d` (1D signals) share: its width check,
its layers, and running it so ``torch.jit.trace`` records plain ops.

Source: Vaswani et al. 2017 (arXiv:1706.03762) in the pre-norm form of ViT (Dosovitskiy
et al. 2021, arXiv:2010.11929): ``nn.TransformerEncoder`` of ``nn.TransformerEncoderLayer``
(batch_first, norm_first, GELU).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


def feed_forward_width(dim: int, heads: int, mlp_ratio: float) -> int:
    """The feed-forward width ``round(dim * mlp_ratio)`` (at least 1).

    Raises:
        ValueError: ``mlp_ratio`` is not positive, or ``heads`` does not divide ``dim``.
    """
    if mlp_ratio <= 0:
        raise ValueError(f"mlp_ratio must be in (0, 64]; got {mlp_ratio}")
    if dim % heads:
        raise ValueError(f"heads {heads} must divide dim {dim}")
    return max(1, round(dim * mlp_ratio))


def encoder_stack(dim: int, heads: int, hidden: int, dropout: float,
                  depth: int) -> nn.TransformerEncoder:
    """``depth`` encoder layers over ``(B, N, dim)`` tokens. ``nn.TransformerEncoder``
    deep-copies one layer, so every layer would start identical; each is built on its
    own and gets its own PyTorch default init."""

    def layer() -> nn.TransformerEncoderLayer:
        return nn.TransformerEncoderLayer(
            dim, heads, hidden, dropout, activation="gelu", batch_first=True, norm_first=True
        )

    encoder = nn.TransformerEncoder(layer(), 1, enable_nested_tensor=False)
    encoder.layers = nn.ModuleList([layer() for _ in range(depth)])
    encoder.num_layers = depth
    return encoder


def encode(encoder: nn.TransformerEncoder, tokens: Tensor) -> Tensor:
    """``encoder(tokens)``, ``(B, N, dim) -> (B, N, dim)``. In eval mode without grad
    PyTorch runs a fused "fast path" kernel that ``torch.jit.trace``'s check rejects
    (cf. pytorch/vision#7517); while tracing, that path is off."""
    if torch.jit.is_tracing() and torch.backends.mha.get_fastpath_enabled():
        torch.backends.mha.set_fastpath_enabled(False)
        try:
            return encoder(tokens)
        finally:
            torch.backends.mha.set_fastpath_enabled(True)
    return encoder(tokens)
