"""Variable-length attention over the "varlen" packing layout: one token stream per micro-batch, one kernel call
per layer.

A batch in that layout (`preference_data.packing`) is one row of prefix-shared segments, described as M attention
sequences by cumulative lengths `cu_seqlens` (2, M + 1): a segment's prompt + first response is one causal
sequence whose keys are its own tokens; each later response is a sequence whose queries are its own tokens and
whose keys are the prompt's tokens followed by its own, causal with the diagonal aligned at the bottom right (its
first token sees the whole prompt and itself). `kv_index` gathers that key stream from the row, so a prompt's keys
and values are repeated for its later responses (prompts are encoded once; only their keys are read twice).

On a GPU in half precision the call is flash attention's varlen kernel (`torch.nn.attention.varlen.varlen_attn`,
or the aten op beneath it on a torch that lacks the wrapper), grouped-query heads included; its gradient is the
kernel's. Elsewhere (a CPU, fp32) `reference_attention` computes the same thing sequence by sequence with SDPA and
an explicit mask: exact, slow, and what the kernel is checked against.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

CALLS = {"kernel": 0, "reference": 0}
"""Attention calls served by the flash kernel and by the reference in this process (a run on a GPU should show no
reference calls: they mean the inputs were not in half precision)."""


@dataclass
class VarlenPlan:
    """One forward's attention sequences, shared by every layer: `kv_index` (Tk,) long, `cu_q` / `cu_k` (M + 1,)
    int32, the longest query and key sequence, and the number of attention calls served (checked after the
    forward: a model that ignored the plan would attend the whole row causally)."""

    kv_index: torch.Tensor
    cu_q: torch.Tensor
    cu_k: torch.Tensor
    max_q: int
    max_k: int
    calls: int = 0


def make_plan(kv_index: torch.Tensor, cu_seqlens: torch.Tensor, max_seqlens: tuple[int, int] | list[int]) -> VarlenPlan:
    """The plan of a packed "varlen" batch (its `kv_index`, `cu_seqlens` and `max_seqlens`)."""
    max_q, max_k = (int(x) for x in max_seqlens)
    return VarlenPlan(kv_index, cu_seqlens[0].contiguous(), cu_seqlens[1].contiguous(), max_q, max_k)


def reference_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_q: list[int], cu_k: list[int], scale: float
) -> torch.Tensor:
    """q (Tq, H, d), k/v (Tk, Hkv, d) -> (Tq, H, d): each sequence on its own with SDPA, causal aligned at the bottom
    right (query j of n sees keys 0 .. j + (m - n) of m)."""
    H, Hkv = q.shape[1], k.shape[1]
    outs = []
    for qa, qb, ka, kb in zip(cu_q, cu_q[1:], cu_k, cu_k[1:], strict=False):
        n, m = qb - qa, kb - ka
        if n == 0:
            continue
        allowed = torch.ones(n, m, dtype=torch.bool, device=q.device).tril(m - n)
        qs = q[qa:qb].transpose(0, 1)[None]
        ks = k[ka:kb].transpose(0, 1).repeat_interleave(H // Hkv, 0)[None]
        vs = v[ka:kb].transpose(0, 1).repeat_interleave(H // Hkv, 0)[None]
        outs.append(F.scaled_dot_product_attention(qs, ks, vs, attn_mask=allowed, scale=scale)[0].transpose(0, 1))
    return torch.cat(outs) if outs else q.new_zeros(q.shape)


@functools.cache
def _flash() -> Callable[..., torch.Tensor] | None:
    """The varlen flash kernel as f(q, k, v, cu_q, cu_k, max_q, max_k, scale), causal, grouped-query heads allowed;
    None where this torch has neither `torch.nn.attention.varlen` nor the aten op (then the reference runs)."""
    try:
        from torch.nn.attention import varlen as module  # lazy: torch >= 2.10; older releases take the aten op
    except ImportError:
        module = None  # type: ignore[assignment]
    varlen_attn: Any = getattr(module, "varlen_attn", None)
    if varlen_attn is not None:
        params = inspect.signature(varlen_attn).parameters
        extra: dict[str, object] = {"is_causal": True} if "is_causal" in params else {"window_size": (-1, 0)}
        if "enable_gqa" in params:
            extra["enable_gqa"] = True

        def call(q, k, v, cu_q, cu_k, max_q, max_k, scale):
            return varlen_attn(q, k, v, cu_q, cu_k, max_q, max_k, scale=scale, **extra)

        return call
    op = getattr(torch.ops.aten, "_flash_attention_forward", None)
    if op is None:
        return None

    def aten_call(q, k, v, cu_q, cu_k, max_q, max_k, scale):
        return op(q, k, v, cu_q, cu_k, max_q, max_k, 0.0, True, False, scale=scale)[0]

    return aten_call


@functools.cache
def _native_gqa(device: str) -> bool:
    """Whether the kernel takes fewer key/value heads than query heads as they are (tried once on a tiny input);
    where it does not, `attend` repeats the key/value heads first."""
    kernel = _flash()
    assert kernel is not None
    q = torch.zeros(4, 4, 64, device=device, dtype=torch.bfloat16)
    kv = torch.zeros(4, 2, 64, device=device, dtype=torch.bfloat16)
    cu = torch.tensor([0, 4], device=device, dtype=torch.int32)
    try:
        kernel(q, kv, kv, cu, cu, 4, 4, 0.125)
    except (RuntimeError, ValueError):
        return False
    return True


def uses_kernel(q: torch.Tensor) -> bool:
    """Whether `attend` runs the flash kernel for queries like `q` (an Ampere or newer GPU, half precision, a kernel
    available); elsewhere the reference runs (exact, slow)."""
    return (
        q.is_cuda
        and q.dtype in (torch.bfloat16, torch.float16)
        and torch.cuda.get_device_capability(q.device)[0] >= 8  # flash attention 2: Ampere and newer
        and _flash() is not None
    )


def compute_dtype(t: torch.Tensor) -> torch.dtype:
    """The dtype attention and the log-prob head compute in: the autocast dtype where autocast is on (the rotary
    embedding leaves queries and keys in fp32 under it), else the tensor's own."""
    device = t.device.type
    return torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else t.dtype


def attend(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, plan: VarlenPlan, scale: float) -> torch.Tensor:
    """transformers' layout in and out: query (1, H, T, d), key/value (1, Hkv, T, d) -> (1, T, H, d)."""
    plan.calls += 1
    dtype = compute_dtype(query)  # as SDPA would
    q = query[0].transpose(0, 1).to(dtype).contiguous()  # (T, H, d)
    k = key[0].transpose(0, 1).index_select(0, plan.kv_index).to(dtype)  # (Tk, Hkv, d): the key stream
    v = value[0].transpose(0, 1).index_select(0, plan.kv_index).to(dtype)
    kernel_ok = uses_kernel(q)
    CALLS["kernel" if kernel_ok else "reference"] += 1
    if kernel_ok:
        kernel = _flash()
        assert kernel is not None
        rep = q.shape[1] // k.shape[1]
        if rep > 1 and not _native_gqa(str(q.device)):
            k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        out = kernel(q, k, v, plan.cu_q, plan.cu_k, plan.max_q, plan.max_k, scale)
    else:
        out = reference_attention(q, k, v, plan.cu_q.tolist(), plan.cu_k.tolist(), scale)
    return out[None]
