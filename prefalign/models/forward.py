"""Forward passes over packed batches (`preference_data.packing`): log-probs and last-token rewards.

Both run the transformer body once over the packed rows and apply the head only where it is needed:
the LM head on response-token positions (never on prompt or padding: with a 49k vocabulary that head
costs about a fifth of the model per token), the score head on the last token of each response.
"""

from __future__ import annotations

from typing import Any

import torch

from prefalign.errors import UserError
from prefalign.models.batch import PACKED_FIELDS, Layout, PackedBatch

from . import attention, heads, varlen

_USE_MASK = "set train.attention: mask (a dense block mask any attention kernel accepts)"


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The transformers model inside a peft wrapper (adapters stay active)."""
    inner = model
    if hasattr(inner, "get_base_model"):
        inner = inner.get_base_model()  # type: ignore[operator]
    return inner


def body(model: torch.nn.Module) -> torch.nn.Module:
    """The transformer body (`LlamaModel` etc.) of a *ForCausalLM / *ForSequenceClassification model."""
    inner = unwrap(model)
    prefix = getattr(inner, "base_model_prefix", "model")
    return getattr(inner, prefix)


def layout_for(*models: torch.nn.Module | None, device: torch.device | str | None = None) -> Layout:
    """The packing layout to run these models with: "segments" when all route attention through transformers'
    attention interface, else "mask". With `device` a GPU (anything but the CPU): "mask". The segment attention
    attends segment by segment, which does the least work on a CPU, but on a GPU each segment costs its own kernel
    launches in every layer, so a batch's time grows with its items (`align serve` on an H100: 31 items in 330 ms,
    one item in 46 ms); rows under one block mask cost the same launches for one item or many."""
    if device is not None and torch.device(device).type != "cpu":
        return "mask"
    return "segments" if all(m is None or attention.supported(unwrap(m)) for m in models) else "mask"


def hidden_states(model: torch.nn.Module, batch: PackedBatch) -> torch.Tensor:
    """Last hidden states (R, L, H) of the packed rows (any layout of `preference_data.packing`)."""
    net = body(model)
    if batch.cu_seqlens is not None:
        if batch.kv_index is None or batch.max_seqlens is None:
            raise ValueError("a varlen batch needs kv_index, cu_seqlens and max_seqlens (preference_data.packing)")
        plan: Any = varlen.make_plan(batch.kv_index, batch.cu_seqlens, batch.max_seqlens)
        return _planned(model, net, batch, "varlen", varlen_plan=plan)
    if batch.segments is not None:
        plan = attention.make_plan(batch.segments, batch.input_ids.device)
        return _planned(model, net, batch, "segments", segment_plan=plan)
    out = net(
        input_ids=batch.input_ids,
        position_ids=batch.position_ids,
        attention_mask=batch.attention_mask,
        use_cache=False,
    )
    return out.last_hidden_state


def _planned(
    model: torch.nn.Module, net: torch.nn.Module, batch: PackedBatch, layout: str, **plan: Any
) -> torch.Tensor:
    """The body run with the packed attention (`attention.segment_attention`) under its plan (`segment_plan` or
    `varlen_plan`, passed through transformers to every attention call), the plan's calls checked after."""
    inner = unwrap(model)
    if not attention.supported(inner):
        raise UserError(
            f"{type(inner).__name__} does not route its attention through transformers' attention "
            f"interface, so the '{layout}' packing layout cannot be used with it; {_USE_MASK}"
        )
    attention.enable(inner)
    out = net(
        input_ids=batch.input_ids,
        position_ids=batch.position_ids,
        attention_mask=attention.NO_MASK,
        use_cache=False,
        **plan,
    )
    if next(iter(plan.values())).calls == 0:
        raise UserError(f"{type(inner).__name__} ignored the {layout} attention; {_USE_MASK}")
    return out.last_hidden_state


def token_logps(
    model: torch.nn.Module, batch: PackedBatch, chunk: int | None = None, temperature: float = 1.0
) -> torch.Tensor:
    """log p(token) for every response token (N,), in fp32, through `heads.token_logps_from_hidden`: the LM head in
    chunks of tokens, never keeping the (N, V) logits for the backward (a head that is not a plain bias-free
    `nn.Linear`, e.g. one with adapters, runs chunk by chunk through its own module, which keeps them).

    `temperature` divides the logits first: the log-probs of the distribution a sampler at that temperature
    drew from (the online loop's policy ratio)."""
    h = hidden_states(model, batch)
    h = h[batch.target_row, batch.target_pos]  # (N, H)
    head = unwrap(model).get_output_embeddings()  # type: ignore[operator]
    if type(head) is torch.nn.Linear and head.bias is None:
        return heads.token_logps_from_hidden(h, head.weight, batch.target_ids, temperature, chunk)
    out = []
    step = chunk or 1024
    for s in range(0, h.shape[0], step):
        logits = head(h[s : s + step]).float()  # (n, V)
        if temperature != 1.0:
            logits = logits / temperature
        ids = batch.target_ids[s : s + step]
        out.append(heads.plain_token_logps(logits, ids))
    return torch.cat(out) if out else h.new_zeros(0, dtype=torch.float32)


def per_sequence_sum(values: torch.Tensor, batch: PackedBatch) -> torch.Tensor:
    """Per-response-token values (N,) (as `token_logps` returns them) summed per sequence (S,)."""
    return torch.zeros(batch.num_sequences, dtype=values.dtype, device=values.device).index_add(
        0, batch.target_seq, values
    )


def sequence_logps(model: torch.nn.Module, batch: PackedBatch) -> torch.Tensor:
    """Summed response log-probs per sequence (S,): chosen sequences first, then rejected."""
    return per_sequence_sum(token_logps(model, batch), batch)


def answer_logits_from_hidden(h: torch.Tensor, head: torch.nn.Module, ids: list[int]) -> torch.Tensor:
    """The LM head's logits of the tokens `ids` only (N, len(ids)), in fp32 whatever the autocast: a judge that
    answers with one of a few tokens compares their logits, whose differences a bf16 logit (about three significant
    digits, 0.125 apart at 20) would round away. A head that is not a plain `nn.Linear` runs whole."""
    if type(head) is not torch.nn.Linear:
        return head(h).float()[:, ids]
    with torch.autocast(device_type=h.device.type, enabled=False):
        out = h.float() @ head.weight[ids].float().T
        return out if head.bias is None else out + head.bias[ids].float()


def answer_logits(model: torch.nn.Module, batch: PackedBatch, ids: list[int]) -> torch.Tensor:
    """The logits (N, len(ids)) of the tokens `ids` at every response-token position (each position's prediction
    of that token), in fp32: for a judge whose response is its one answer token, N is the number of sequences."""
    h = hidden_states(model, batch)[batch.target_row, batch.target_pos]  # (N, H)
    return answer_logits_from_hidden(h, unwrap(model).get_output_embeddings(), ids)  # type: ignore[operator]


def last_token_rewards(model: torch.nn.Module, batch: PackedBatch) -> torch.Tensor:
    """Score-head outputs (S, K) read at the last real token of each response (by position, never by pad id)."""
    h = hidden_states(model, batch)
    h = h[batch.last_row, batch.last_pos]  # (S, H)
    inner = unwrap(model)
    head = getattr(inner, "score", None) or inner.classifier
    return head(h).float()  # type: ignore[operator]


class PackedForward(torch.nn.Module):
    """Wraps a model so that its `forward` takes a packed batch (as a dict) and returns what a trainer needs.

    Trainers hand this wrapper to `transformers.Trainer`, so accelerate's autocast, DDP gradient hooks and
    FSDP wrapping all see a normal `forward` call. `what` is "rewards" ((S, K) last-token head outputs),
    "logps" ((S,) summed response log-probs) or "token_logps" ((N,) log-probs of every response token at
    `temperature`, in the batch's target order; the online loop's update and its frozen log-probs) or
    "answer_logits" ((N, len(answers)) fp32 logits of the tokens `answers` at every response-token position; a
    pair-PM's A and B).
    """

    def __init__(
        self, model: torch.nn.Module, what: str, temperature: float = 1.0, answers: list[int] | None = None
    ) -> None:
        super().__init__()
        if what not in ("rewards", "logps", "token_logps", "answer_logits"):
            raise ValueError(f"what must be 'rewards', 'logps', 'token_logps' or 'answer_logits', got {what!r}")
        if (what == "answer_logits") != (answers is not None):
            raise ValueError("answers (token ids) go with what='answer_logits', and only with it")
        self.model = model
        self.what = what
        self.temperature = temperature  # token_logps: the sampler's temperature (the online loop's policy ratio)
        self.answers = answers
        self.config = getattr(unwrap(model), "config", None)

    def forward(self, **inputs: torch.Tensor) -> torch.Tensor:
        tensors: dict[str, Any] = {f: inputs.get(f) for f in PACKED_FIELDS}
        batch = PackedBatch(
            **tensors,
            num_sequences=int(inputs["num_sequences"]),
            pairs=bool(inputs.get("pairs", True)),
            real_tokens=int(inputs.get("real_tokens", 0)),
        )
        if self.what == "rewards":
            return last_token_rewards(self.model, batch)
        if self.what == "token_logps":
            return token_logps(self.model, batch, temperature=self.temperature)
        if self.answers is not None:
            return answer_logits(self.model, batch, self.answers)
        return sequence_logps(self.model, batch)

    def gradient_checkpointing_enable(self, gradient_checkpointing_kwargs: dict | None = None) -> None:
        inner = unwrap(self.model)
        inner.gradient_checkpointing_enable(gradient_checkpointing_kwargs=gradient_checkpointing_kwargs)  # type: ignore[operator]
        if hasattr(self.model, "enable_input_require_grads"):
            self.model.enable_input_require_grads()  # type: ignore[operator]
