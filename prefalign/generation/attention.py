"""Decode-step attention: one new token per row over its cached keys, as two batched matrix multiplies.

PyTorch's CPU flash-attention kernel is built for long queries; for the one-token queries of decoding it
ran 5-15 ms per layer call at 64 rows x 200 cached tokens on our 2-core CPU (bf16), 4-10x slower than
scores = q @ K^T, softmax, @ V with the query heads of each key/value head stacked as rows (grouped-query
attention without repeating K and V). Decoding switches the model's attention to this function for the
step and back afterwards; prefill keeps the model's own implementation.

Used only for model types whose attention is exactly softmax(q k^T * scaling + mask) v (`PLAIN_ATTENTION`,
no sliding window, soft-capping or attention sinks); others decode with their own implementation.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

NAME = "prefalign_decode"
# model types whose attention modules compute plain scaled-dot-product attention over the cache
PLAIN_ATTENTION = frozenset({"llama", "mistral", "qwen2", "qwen3", "olmo", "olmo2", "granite", "smollm3"})


def decode_attention(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     attention_mask: torch.Tensor | None, scaling: float | None = None, dropout: float = 0.0,
                     **kwargs: Any) -> tuple[torch.Tensor, None]:
    """query (B, Hq, 1, D), key / value (B, Hkv, L, D), attention_mask (B, 1, 1, L) bool (True = attend).
    Returns (B, 1, Hq, D), the layout transformers' attention functions return."""
    B, Hq, q, D = query.shape
    if q != 1 or (attention_mask is not None and attention_mask.dtype != torch.bool):
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout,
                                      **kwargs)
    Hkv = key.shape[1]
    scale = scaling if scaling is not None else D ** -0.5
    qg = query.reshape(B, Hkv, Hq // Hkv, D)  # the query heads sharing a key/value head, as rows
    scores = torch.matmul(qg, key.transpose(-1, -2))  # (B, Hkv, G, L)
    scores.mul_(scale)
    if attention_mask is not None:
        scores.masked_fill_(~attention_mask, float("-inf"))
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(value.dtype)
    out = torch.matmul(probs, value)  # (B, Hkv, G, D)
    return out.reshape(B, Hq, 1, D).transpose(1, 2), None


def supports_decode_attention(config: Any) -> bool:
    """Whether `decode_attention` computes exactly what the attention of a model with this (text) config does."""
    if getattr(config, "model_type", None) not in PLAIN_ATTENTION:
        return False
    if any(t != "full_attention" for t in (getattr(config, "layer_types", None) or [])):
        return False
    window = getattr(config, "sliding_window", None)
    return not (window and getattr(config, "use_sliding_window", True))


@contextlib.contextmanager
def using_decode_attention(config: Any) -> Iterator[None]:
    """Within the block, the model whose (text) config this is attends with `decode_attention`."""
    from transformers import AttentionInterface

    if NAME not in AttentionInterface._global_mapping:
        AttentionInterface.register(NAME, decode_attention)
    before = config._attn_implementation
    config._attn_implementation = NAME
    try:
        yield
    finally:
        config._attn_implementation = before
