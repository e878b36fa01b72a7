"""Decode-step attention: one new token per row, over its unit's shared prompt and its own new tokens.

PyTorch's CPU flash-attention kernel is built for long queries; for the one-token queries of decoding it
ran 5-15 ms per layer call at 64 rows x 200 cached tokens on our 2-core CPU (bf16), 4-10x slower than
scores = q @ K^T, softmax, @ V as batched matrix multiplies with the query heads of each key/value head
stacked as rows (grouped-query attention without repeating K and V). The prompt part is computed per unit
(distinct prompt) with the queries of all its samples stacked, so each prompt's keys and values are read
once per step, not once per sample (see `cache.SharedPrefixCache`); one softmax spans both parts. Decoding
switches the model's attention to this function and back afterwards; prefill keeps the model's own.

Used only for model types whose attention is exactly softmax(q k^T * scaling + mask) v (`PLAIN_ATTENTION`,
no sliding window, soft-capping or attention sinks); others decode with their own implementation.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward

NAME = "prefalign_decode"
# model types whose attention modules compute plain scaled-dot-product attention over the cache
# (and scale scores by head_dim^-1/2, which the cache folds into the stored keys)
PLAIN_ATTENTION = frozenset({"llama", "mistral", "qwen2", "qwen3", "olmo", "olmo2"})


def decode_attention(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    prefalign_cache: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """One query token per row over its unit's prompt (shared) and its own generated tokens.

    query (R, Hq, 1, D); key / value (R, Hkv, L, D): the row's generated keys/values (the layer's `update`
    return); the prompt part, (Hkv, U, P, D), comes from `prefalign_cache` (a `SharedPrefixCache`).
    Returns (R, 1, Hq, D), the layout transformers' attention functions return. Without a cache (e.g. a
    prefill) it falls back to PyTorch's scaled_dot_product_attention.
    """
    if prefalign_cache is None or query.shape[2] != 1:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs
        )
    cache = prefalign_cache
    layer = cache.layers[module.layer_idx]
    if scaling is not None and abs(scaling - cache.scale) > 1e-6 * cache.scale:
        raise RuntimeError(f"attention scale {scaling} differs from the cache's {cache.scale}")
    R, Hq, _, D = query.shape
    Hkv = key.shape[1]
    G = Hq // Hkv
    U, S, P = cache.units, cache.slots, cache.prompt_width
    q = query.reshape(R, Hkv, G, D)  # keys carry the scale
    # prompt part: the queries of a unit's rows stacked in its S slots, (Hkv, U, S * G, D) @ (Hkv, U, D, P)
    grouped = q.transpose(0, 1).index_select(1, cache.grid).view(Hkv, U, S * G, D)
    s_prompt = torch.matmul(grouped, layer.kp.transpose(-1, -2))  # (Hkv, U, S * G, P)
    s_prompt.masked_fill_(~cache.prompt_mask, float("-inf"))
    s_prompt = s_prompt.view(Hkv, U * S, G, P).index_select(1, cache.grid_pos).transpose(0, 1)  # (R, Hkv, G, P)
    s_new = torch.matmul(q, key.transpose(-1, -2))  # (R, Hkv, G, L)
    probs = torch.softmax(torch.cat([s_prompt, s_new], dim=-1), dim=-1, dtype=torch.float32).to(value.dtype)
    p_prompt = probs[..., :P].transpose(0, 1).index_select(1, cache.grid).view(Hkv, U, S * G, P)
    o_prompt = torch.matmul(p_prompt, layer.vp).view(Hkv, U * S, G, D).index_select(1, cache.grid_pos)
    out = torch.matmul(probs[..., P:], value).add_(o_prompt.transpose(0, 1))  # (R, Hkv, G, D)
    return out.reshape(R, Hq, 1, D).transpose(1, 2), None


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
    if NAME not in AttentionInterface._global_mapping:
        AttentionInterface.register(NAME, decode_attention)
    before = config._attn_implementation
    config._attn_implementation = NAME
    try:
        yield
    finally:
        config._attn_implementation = before
