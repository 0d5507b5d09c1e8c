"""Small Vision Transformer (Dosovitskiy et al. 2021, "An Image is Worth 16x16 Words:
Transformers for Image Recognition at Scale", ICLR; arXiv:2010.11929).

Patch embedding by a strided ``nn.Conv2d``, a learned class token and learned position
embedding (truncated normal, std 0.02, as in the paper's code), a pre-norm
``nn.TransformerEncoder`` (batch_first, norm_first, GELU), then LayerNorm and a linear
head on the class token.

In eval mode without grad PyTorch runs the encoder on a fused "fast path" kernel, so a
plain ``torch.jit.trace(vit.eval(), x)`` would fail its sanity check (the checker reruns
under ``no_grad``; cf. pytorch/vision#7517). While ``torch.jit.trace`` runs, forward
therefore disables that fast path, so traced graphs hold only plain, portable ops.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from automl.models._encoder import encode, encoder_stack, feed_forward_width
from automl.models.init import check_float, check_int, check_shape


class ViT(nn.Module):
    """ViT for images: (B, C, H, W) float -> (B, num_classes) logits.

    Args:
        input_shape: ``(C, H, W)`` without the batch dimension.
        num_classes: number of output logits (>= 1).
        patch_size: side of the square patches, >= 1 (default 2); must divide H and W.
        dim: token embedding width, >= 1 (default 64).
        depth: encoder layers, 1..24 (default 2).
        heads: attention heads, >= 1 (default 4); must divide ``dim``.
        mlp_ratio: feed-forward width / dim, in (0, 64] (default 2.0).
        dropout: dropout inside the encoder and after the embedding, [0, 1) (default 0.0).

    Raises:
        ValueError: non-image input, ``patch_size`` not dividing H and W, ``heads`` not
            dividing ``dim``, or an out-of-range parameter.
    """

    def __init__(
        self,
        input_shape: tuple[int, ...],
        num_classes: int,
        patch_size: int = 2,
        dim: int = 64,
        depth: int = 2,
        heads: int = 4,
        mlp_ratio: float = 2.0,
        dropout: float = 0.0,
    ):
        super().__init__()
        c, h, w = check_shape("vit", input_shape, image=True)
        num_classes = check_int("num_classes", num_classes, 1)
        patch_size = check_int("patch_size", patch_size, 1)
        dim = check_int("dim", dim, 1)
        depth = check_int("depth", depth, 1, 24)
        heads = check_int("heads", heads, 1)
        mlp_ratio = check_float("mlp_ratio", mlp_ratio, 0.0, 64.0)
        dropout = check_float("dropout", dropout, 0.0, 1.0, high_open=True)
        if h % patch_size or w % patch_size:
            raise ValueError(f"patch_size {patch_size} must divide H={h} and W={w}")
        hidden = feed_forward_width(dim, heads, mlp_ratio)
        num_tokens = (h // patch_size) * (w // patch_size) + 1
        self.patch_embed = nn.Conv2d(c, dim, patch_size, stride=patch_size)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, num_tokens, dim))
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        self.dropout = nn.Dropout(dropout)
        self.encoder = encoder_stack(dim, heads, hidden, dropout, depth)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        tokens = self.patch_embed(x).flatten(2).transpose(1, 2)  # (B, N, dim)
        cls = self.cls_token.expand(tokens.shape[0], -1, -1)
        tokens = self.dropout(torch.cat([cls, tokens], dim=1) + self.pos_embed)
        tokens = encode(self.encoder, tokens)
        return self.head(self.norm(tokens[:, 0]))
