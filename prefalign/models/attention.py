"""Segment attention: exact attention over packed prefix-shared segments, without a dense mask.

A packed batch in the "segments" layout (`preference_data.packing`) is one row of segments
`prompt + response_1 [+ response_2 ...]`. Each token must see its own segment's prompt and, for response
tokens, the earlier tokens of its own response only. A dense (L, L) mask over the row expresses that but
makes every attention kernel do (and differentiate) the full L x L work; here each segment is attended on
its own, as one square of its N = P + n_1 + ... + n_K tokens under its own mask (causal, and each response's
rows blind to the earlier responses' columns), so the work is the sum of the segments' squares.

Segments of at most `MATH_MAX_TOKENS` tokens go through `SquareAttention`, an autograd function that runs
each segment as three batched matmuls forward (scores with the mask added in the same call, softmax,
values) and five backward, from the probabilities it keeps: on a CPU the per-operator overhead of a
segment, not its arithmetic, dominates, and this does the fewest operators and no copies per segment.
Grouped-query heads are folded into the query rows (token-major, `rep` query heads per key/value head), so
a segment's queries, keys and values are plain slices of one layer-wide copy. Longer segments, and any
segment when attention dropout is on in training, use `scaled_dot_product_attention` with the segment's
mask (memory-light; dropout).

The function is registered in transformers' attention interface under `NAME`; a model switched to it
(`enable`) behaves exactly as with "sdpa" whenever no segment plan is passed (generation, plain calls). The same
function serves the GPU's "varlen" layout: given a `varlen_plan` it hands the whole row to one variable-length
attention call (`prefalign.models.varlen`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from . import varlen

NAME = "prefalign_segments"
MATH_MAX_TOKENS = 1024  # tokens per segment above which the memory-light SDPA kernel is used instead

# A 4D attention mask makes transformers skip building its own (L, L) mask; the segment attention ignores it.
NO_MASK = torch.ones(1, 1, 1, 1, dtype=torch.bool)


def segment_mask(P: int, *lengths: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """(N, N) bool, True where a query (row) may attend a key (column): causal over prompt + response_1 + ... +
    response_K (`lengths` n_1 .. n_K), each response's rows blind to every earlier response's columns."""
    n = P + sum(lengths)
    allowed = torch.ones(n, n, dtype=torch.bool, device=device).tril()
    start = P
    for k in lengths:
        allowed[start + k :, start : start + k] = False
        start += k
    return allowed


@dataclass
class SegmentPlan:
    """Per-forward description of the segments, shared by all layers.

    segments: (offset, P, n_1, ..., n_K) per segment in row order (n_k = 0 past a segment's responses, e.g. n_2
    for single sequences). masks: each segment's `segment_mask`. calls: attention calls served (checked after the
    forward). The additive biases of the matmul path (the mask's rows repeated per folded query head, in the compute
    dtype; only for the segments that path serves) are built on the first layer's call and reused by the others.
    """

    segments: list[tuple[int, ...]]
    masks: list[torch.Tensor]
    calls: int = field(default=0)
    _biases: dict = field(default_factory=dict, repr=False)

    def biases(self, rep: int, dtype: torch.dtype, square: list[bool]) -> list[torch.Tensor]:
        """Per segment where `square` is True: (1, N * rep, N) additive bias (0 / -inf) for token-major folded
        query rows."""
        key = (rep, dtype, tuple(square))
        if key not in self._biases:
            self._biases[key] = [
                torch.zeros(m.shape, dtype=dtype, device=m.device)
                .masked_fill_(~m, float("-inf"))
                .repeat_interleave(rep, 0)[None]
                for m, s in zip(self.masks, square, strict=True)
                if s
            ]
        return self._biases[key]


def make_plan(segments: torch.Tensor, device: torch.device | str = "cpu") -> SegmentPlan:
    """segments: (G, 2 + K) long tensor of (offset, P, n_1, ..., n_K) in row order, as built by the packer."""
    rows = [tuple(int(x) for x in row) for row in segments.tolist()]
    expect = 0
    for off, P, *lengths in rows:
        if off != expect:
            raise ValueError(f"segments must tile the row: segment at {off}, expected {expect}")
        expect = off + P + sum(lengths)
    return SegmentPlan(rows, [segment_mask(P, *lengths, device=device) for _, P, *lengths in rows])


class SquareAttention(torch.autograd.Function):
    """Attention of each segment over its own square, one tensor out per segment.

    q (Hkv, L * rep, d): queries, already scaled, token-major with the `rep` query heads of each key/value
    head adjacent; k, v (Hkv, L, d); spans [(offset, N)]; biases [(1, N * rep, N)]. Returns per span its
    output (Hkv, N * rep, d). All inputs in one dtype; the softmax accumulates in fp32 for bf16 inputs."""

    @staticmethod
    def forward(ctx, q, k, v, spans, biases):
        rep = q.shape[1] // k.shape[1]
        outs, probs = [], []
        for (off, n), bias in zip(spans, biases, strict=True):
            qs, ks, vs = q[:, off * rep : (off + n) * rep], k[:, off : off + n], v[:, off : off + n]
            p = torch.softmax(torch.baddbmm(bias, qs, ks.transpose(1, 2)), -1)  # (Hkv, n * rep, n)
            outs.append(torch.bmm(p, vs))
            probs.append(p)
        ctx.save_for_backward(q, k, v, *probs)
        ctx.spans = spans
        return tuple(outs)

    @staticmethod
    def backward(ctx, *douts):
        q, k, v, *probs = ctx.saved_tensors
        rep = q.shape[1] // k.shape[1]
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)  # rows of no span stay 0
        for (off, n), p, do in zip(ctx.spans, probs, douts, strict=True):
            rows, toks = slice(off * rep, (off + n) * rep), slice(off, off + n)
            qs, ks, vs = q[:, rows], k[:, toks], v[:, toks]
            ds = torch._softmax_backward_data(torch.bmm(do, vs.transpose(1, 2)), p, -1, p.dtype)
            dq[:, rows] = torch.bmm(ds, ks)
            dk[:, toks] = torch.bmm(ds.transpose(1, 2), qs)
            dv[:, toks] = torch.bmm(p.transpose(1, 2), do)
        return dq, dk, dv, None, None


def _sdpa(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, dropout: float, training: bool
) -> torch.Tensor:
    """One segment with SDPA's kernel: q (Hkv, n * rep, d) folded as `SquareAttention`'s, k/v (Hkv, n, d),
    mask (n, n) bool -> (Hkv, n * rep, d)."""
    Hkv, n, d = k.shape
    rep = q.shape[1] // n
    heads = q.view(Hkv, n, rep, d).transpose(1, 2).reshape(Hkv * rep, n, d)
    out = F.scaled_dot_product_attention(
        heads[None],
        k.repeat_interleave(rep, 0)[None],
        v.repeat_interleave(rep, 0)[None],
        attn_mask=mask,
        dropout_p=dropout if training else 0.0,
        scale=1.0,
    )[0]
    return out.view(Hkv, rep, n, d).transpose(1, 2).reshape(Hkv, n * rep, d)


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
    varlen_plan: varlen.VarlenPlan | None = None,
    **kwargs,
):
    """transformers attention-interface function. query (1, H, L, d), key/value (1, Hkv, L, d) -> (1, L, H, d)."""
    if (segment_plan is not None or varlen_plan is not None) and (
        kwargs.get("sliding_window") or kwargs.get("softcap")
    ):
        raise ValueError(
            f"{type(module).__name__} uses a sliding window or a logit soft-cap, which the packed segments and "
            "varlen layouts do not apply; set train.attention: mask"
        )
    if varlen_plan is not None:
        if dropout and module.training:
            raise ValueError(
                "attention dropout in training is not supported by the varlen layout; set train.disable_dropout: "
                "true (the default) or train.attention: mask"
            )
        d = query.shape[-1]
        return varlen.attend(query, key, value, varlen_plan, d**-0.5 if scaling is None else scaling), None
    if segment_plan is None:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs
        )
    if query.shape[0] != 1:
        raise ValueError("segment attention expects the one-row segments layout")
    plan = segment_plan
    plan.calls += 1
    _, H, L, d = query.shape
    Hkv = key.shape[1]
    rep = H // Hkv
    scaling = d**-0.5 if scaling is None else scaling
    device = query.device.type
    dtype = varlen.compute_dtype(query)
    dropping = bool(dropout) and module.training
    # one layer-wide copy each: the softmax scale folded into the queries, query heads folded token-major
    q = (query[0] * scaling).to(dtype).view(Hkv, rep, L, d).transpose(1, 2).reshape(Hkv, L * rep, d)
    k, v = key[0].to(dtype), value[0].to(dtype)
    spans = [(off, P + sum(lengths)) for off, P, *lengths in plan.segments]
    square = [not dropping and n <= MATH_MAX_TOKENS for _, n in spans]
    with torch.autocast(device, enabled=False):  # every operand is already in `dtype`
        served = [span for span, s in zip(spans, square, strict=True) if s]
        fast = iter(SquareAttention.apply(q, k, v, served, plan.biases(rep, dtype, square)) if served else ())
        outs = [
            next(fast)
            if s
            else _sdpa(q[:, o * rep : (o + n) * rep], k[:, o : o + n], v[:, o : o + n], m, dropout, module.training)
            for (o, n), m, s in zip(spans, plan.masks, square, strict=True)
        ]
        out = torch.cat(outs, 1)  # (Hkv, L * rep, d)
    return out.view(Hkv, L, rep, d).permute(1, 0, 2, 3).reshape(1, L, H, d), None


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
