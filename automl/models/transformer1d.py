"""Transformer encoder over a 1D sequence (Vaswani et al. 2017, "Attention Is All You
Need", NeurIPS; arXiv:1706.03762), tokenised in patches as ViT does for images
(Dosovitskiy et al. 2021, arXiv:2010.11929).

The signal ``(B, C, L)`` is cut into non-overlapping patches of ``patch_size`` time steps
(zero-padded on the right to a multiple of it), each embedded by a strided ``nn.Conv1d``
into a ``dim``-wide token; a learned class token and a learned positional embedding
(truncated normal, std 0.02) are added; a pre-norm ``nn.TransformerEncoder``
(batch_first, norm_first, GELU) follows, then LayerNorm and a linear head on the class
token. ``patch_size: 1`` makes every time step a token.

Like :class:`automl.models.vit.ViT`, forward disables PyTorch's fused attention fast path
while ``torch.jit.trace`` runs, so traced graphs hold only plain, portable ops.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from automl.models._encoder import encode, encoder_stack, feed_forward_width
from automl.models.init import check_float, check_int, check_shape


class Transformer1d(nn.Module):
    """Transformer encoder for 1D signals: (B, C, L) float -> (B, num_classes) logits.

    Args:
        input_shape: ``(C, L)`` (channels, length) without the batch dimension.
        num_classes: number of output logits (>= 1).
        patch_size: time steps per token, 1..L (default 4).
        dim: token embedding width, >= 1 (default 64).
        depth: encoder layers, 1..24 (default 2).
        heads: attention heads, >= 1 (default 4); must divide ``dim``.
        mlp_ratio: feed-forward width / dim, in (0, 64] (default 2.0).
        dropout: dropout inside the encoder and after the embedding, [0, 1) (default 0.0).

    Raises:
        ValueError: ``input_shape`` is not ``(C, L)``, ``patch_size`` longer than the
            signal, ``heads`` not dividing ``dim``, or an out-of-range parameter.
    """

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, patch_size: int = 4,
                 dim: int = 64, depth: int = 2, heads: int = 4, mlp_ratio: float = 2.0,
                 dropout: float = 0.0):
        super().__init__()
        c, length = check_shape("transformer1d", input_shape, image=False, signal=True)
        num_classes = check_int("num_classes", num_classes, 1)
        patch_size = check_int("patch_size", patch_size, 1)
        dim = check_int("dim", dim, 1)
        depth = check_int("depth", depth, 1, 24)
        heads = check_int("heads", heads, 1)
        mlp_ratio = check_float("mlp_ratio", mlp_ratio, 0.0, 64.0)
        dropout = check_float("dropout", dropout, 0.0, 1.0, high_open=True)
        if patch_size > length:
            raise ValueError(f"patch_size {patch_size} is longer than the signal (L={length})")
        hidden = feed_forward_width(dim, heads, mlp_ratio)
        num_patches = -(-length // patch_size)
        self.pad = nn.ConstantPad1d((0, num_patches * patch_size - length), 0.0)
        self.patch_embed = nn.Conv1d(c, dim, patch_size, stride=patch_size)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, num_patches + 1, dim))
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        self.dropout = nn.Dropout(dropout)
        self.encoder = encoder_stack(dim, heads, hidden, dropout, depth)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        tokens = self.patch_embed(self.pad(x)).transpose(1, 2)  # (B, N, dim)
        cls = self.cls_token.expand(tokens.shape[0], -1, -1)
        tokens = self.dropout(torch.cat([cls, tokens], dim=1) + self.pos_embed)
        tokens = encode(self.encoder, tokens)
        return self.head(self.norm(tokens[:, 0]))  # (B, K)
