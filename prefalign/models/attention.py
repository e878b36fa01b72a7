"""Segment attention: exact attention over packed prefix-shared segments, without a dense mask.

A packed batch in the "segments" layout (`preference_data.packing`) is one row of segments
`prompt + response_1 [+ response_2]`. Each token must see its own segment's prompt and, for response
tokens, the earlier tokens of its own response only. A dense (L, L) mask expresses that but makes every
attention kernel do (and differentiate) the full L x L work; here each segment is attended on its own:

  prompt + response_1 : plain causal attention over P + n1 tokens
  response_2          : queries n2, keys/values = the prompt's and its own (lower-right causal)

so the work is the sum of the segments' squares. Short segments use batched matmuls with an additive
causal bias (fastest on CPU, forward and backward); segments longer than `MATH_MAX_TOKENS` use
`scaled_dot_product_attention` (memory-light). Grouped-query heads are folded into the query axis
instead of repeating keys and values.

The function is registered in transformers' attention interface under `NAME`; a model switched to it
(`enable`) behaves exactly as with "sdpa" whenever no segment plan is passed (generation, plain calls).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

NAME = "prefalign_segments"
MATH_MAX_TOKENS = 1024  # keys per segment above which the memory-light SDPA kernel is used instead

# A 4D attention mask makes transformers skip building its own (L, L) mask; the segment attention ignores it.
NO_MASK = torch.ones(1, 1, 1, 1, dtype=torch.bool)


@dataclass
class SegmentPlan:
    """Per-forward description of the segments, shared by all layers.

    sizes: split sizes along the token axis, [P, n1, n2] per segment (n2 = 0 for single sequences).
    segments: (P, n1, n2) per segment. bias_a: additive causal bias (0 / -inf) of prompt + response_1 for
    the matmul path, None where SDPA's own causal mode is used. bias_b: the lower-right causal bias of
    response_2 (None when there is none), used by either path. Biases are held in the attention's compute
    dtype (`cast`). calls: attention calls served (checked after the forward).
    """

    sizes: list[int]
    segments: list[tuple[int, int, int]]
    bias_a: list[torch.Tensor | None]
    bias_b: list[torch.Tensor | None]
    calls: int = field(default=0)
    dtype: torch.dtype = torch.float32

    def cast(self, dtype: torch.dtype) -> None:
        if dtype != self.dtype:
            self.bias_a = [None if b is None else b.to(dtype) for b in self.bias_a]
            self.bias_b = [None if b is None else b.to(dtype) for b in self.bias_b]
            self.dtype = dtype


def make_plan(segments: torch.Tensor, device: torch.device | str = "cpu") -> SegmentPlan:
    """segments: (G, 4) long tensor of (offset, P, n1, n2) in row order, as built by the packer."""
    rows = [tuple(int(x) for x in s) for s in segments.tolist()]
    sizes: list[int] = []
    segs, bias_a, bias_b = [], [], []
    expect = 0
    for off, P, n1, n2 in rows:
        if off != expect:
            raise ValueError(f"segments must tile the row: segment at {off}, expected {expect}")
        expect = off + P + n1 + n2
        sizes += [P, n1, n2]
        segs.append((P, n1, n2))
        n = P + n1
        bias_a.append(torch.full((n, n), float("-inf"), device=device).triu(1) if n <= MATH_MAX_TOKENS else None)
        bias_b.append(torch.full((n2, P + n2), float("-inf"), device=device).triu(P + 1) if n2 else None)
    return SegmentPlan(sizes, segs, bias_a, bias_b)


def _matmul_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor, dropout: float, training: bool
) -> torch.Tensor:
    """q (H, n, d) already scaled, k/v (Hkv, m, d), bias (n, m) -> (H, n, d), all in one dtype.

    The softmax kernel accumulates in fp32 for bf16 inputs, so no fp32 copy of the scores is made."""
    H, n, d = q.shape
    Hkv, m = k.shape[0], k.shape[1]
    rep = H // Hkv
    s = torch.matmul(q.reshape(Hkv, rep * n, d), k.transpose(1, 2))  # (Hkv, rep*n, m)
    p = torch.softmax(s.view(Hkv, rep, n, m) + bias, dim=-1)
    if dropout and training:
        p = F.dropout(p, p=dropout)
    return torch.matmul(p.view(Hkv, rep * n, m), v).view(H, n, d)


def _sdpa(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None, dropout: float, training: bool
) -> torch.Tensor:
    """As `_matmul_attention` with SDPA's kernel; bias None means plain causal."""
    rep = q.shape[0] // k.shape[0]
    if rep > 1:
        k, v = k.repeat_interleave(rep, 0), v.repeat_interleave(rep, 0)
    return F.scaled_dot_product_attention(
        q[None],
        k[None],
        v[None],
        attn_mask=bias,
        is_causal=bias is None,
        dropout_p=dropout if training else 0.0,
        scale=1.0,
    )[0]


@torch.compiler.disable  # compiled layers trace around it: the segment loop differs batch to batch
def segment_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    segment_plan: SegmentPlan | None = None,
    **kwargs,
):
    """transformers attention-interface function. query (1, H, L, d), key/value (1, Hkv, L, d) -> (1, L, H, d)."""
    if segment_plan is None:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs
        )
    if query.shape[0] != 1:
        raise ValueError("segment attention expects the one-row segments layout")
    plan = segment_plan
    plan.calls += 1
    scaling = query.shape[-1] ** -0.5 if scaling is None else scaling
    training = module.training
    # one cast per layer (not one per segment under autocast), with the softmax scale folded into the queries
    device = query.device.type
    dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else query.dtype
    query, key, value = (query * scaling).to(dtype), key.to(dtype), value.to(dtype)
    plan.cast(dtype)
    qs, ks, vs = query[0].split(plan.sizes, 1), key[0].split(plan.sizes, 1), value[0].split(plan.sizes, 1)
    outs = []
    for i, (P, _n1, n2) in enumerate(plan.segments):
        qp, q1, q2 = qs[3 * i : 3 * i + 3]
        kp, k1, k2 = ks[3 * i : 3 * i + 3]
        vp, v1, v2 = vs[3 * i : 3 * i + 3]
        q_a, k_a, v_a = torch.cat([qp, q1], 1), torch.cat([kp, k1], 1), torch.cat([vp, v1], 1)
        bias_a = plan.bias_a[i]
        if bias_a is not None:
            outs.append(_matmul_attention(q_a, k_a, v_a, bias_a, dropout, training))
        else:
            outs.append(_sdpa(q_a, k_a, v_a, None, dropout, training))
        if n2:
            k_b, v_b = torch.cat([kp, k2], 1), torch.cat([vp, v2], 1)
            bias_b = plan.bias_b[i]
            assert bias_b is not None  # built for every segment with n2 > 0
            attend = _matmul_attention if P + n2 <= MATH_MAX_TOKENS else _sdpa
            outs.append(attend(q2, k_b, v_b, bias_b, dropout, training))
    out = torch.cat(outs, 1)  # (H, L, d)
    return out.transpose(0, 1).unsqueeze(0).contiguous(), None


def _register() -> None:
    if NAME not in ALL_ATTENTION_FUNCTIONS:
        ALL_ATTENTION_FUNCTIONS.register(NAME, segment_attention)
        ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, sdpa_mask)


def supported(model: torch.nn.Module) -> bool:
    """Whether a (transformers) model routes its attention through the attention interface."""
    can = getattr(type(model), "_can_set_attn_implementation", None)
    return bool(can and can()) and hasattr(model, "config")


def enable(model: torch.nn.Module) -> None:
    """Switch a transformers model (not a peft wrapper) to segment attention; plain calls still run SDPA."""
    _register()
    if model.config._attn_implementation != NAME:  # type: ignore[union-attr]
        model.config._attn_implementation = NAME  # type: ignore[union-attr]
