"""Options and helpers every model-running scorer shares (`reward_models.scorers`, `reward_models.generative`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

from prefalign.config import option
from prefalign.errors import UserError
from prefalign.models.precision import announce, decide_dtype
from preference_data.records import Conversation

BATCH_TOKENS = 8192  # default token budget of one scoring forward pass (`ModelOptions.batch_tokens`, the CLIs)


@dataclass
class ModelOptions:
    """Options shared by the scorers that run a model."""

    model: str = option(
        doc="model reference: a local directory written by save_pretrained (or a peft adapter "
        "directory), a builtin (builtin:smollm2-135m-instruct), or a hub id"
    )
    dtype: Literal["auto", "bfloat16", "float32"] = option(
        "auto",
        "weights and activations; auto: bfloat16 where the device runs it natively (CUDA with bf16, CPUs with "
        "AVX-512 BF16 or AMX: about 4x faster and half the memory), float32 otherwise. Records hold the "
        "resolved dtype",
    )
    batch_tokens: int = option(BATCH_TOKENS, "token budget of one forward pass (prompt + response tokens of its items)")
    max_length: int | None = option(
        None,
        "longest prompt + response in tokens (default: the model's "
        "max_position_embeddings); longer prompts are cut from the left",
    )
    device: str = option("auto", "torch device; 'auto' is the first CUDA GPU when one is visible, else the CPU")

    def check(self) -> list[str]:
        problems = []
        if self.batch_tokens < 1:
            problems.append(f"batch_tokens: must be at least 1, got {self.batch_tokens}")
        if self.max_length is not None and self.max_length < 2:
            problems.append(f"max_length: must be at least 2 tokens, got {self.max_length}")
        return problems


def _device(name: str) -> Any:
    import torch  # lazy: torch, not needed to list the scorers (align ls)

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        return torch.device(name)
    except RuntimeError as e:
        raise UserError(f"device '{name}' is not a torch device ({e}); use auto, cpu, cuda or cuda:N") from None


def _resolve_dtype(opts: Any, device: Any, scorer: str) -> Any:
    """`opts` with `dtype: auto` replaced by what `device` runs natively (printed), so records hold the real dtype."""
    decision = decide_dtype(opts.dtype, device, knob="the scorer's dtype (--dtype)")
    announce(f"scorer {scorer}", decision)
    return dataclasses.replace(opts, dtype=decision.value)


def _is_empty(conv: Conversation) -> bool:
    return not any(m.content.strip() for m in conv)


def _turns(conv: Conversation) -> str:
    return "\n\n".join(f"{m.role.capitalize()}: {m.content}" for m in conv)


def _response_text(conv: Conversation) -> str:
    return conv[0].content if len(conv) == 1 and conv[0].role == "assistant" else _turns(conv)


@dataclass
class RefusalRuleOptions:
    probe: str = option("", "a refusal probe's directory (`align rm refusal-probe`; probe.safetensors, probe.json)")
    threshold: float = option(0.5, "P(refuse | prompt) at or above which a request deserves a refusal")
    dtype: Literal["auto", "bfloat16", "float32"] = option(
        "float32", "the probe model's precision when reading prompts (float32: as it was fitted)"
    )
    device: str = option("auto", "torch device; 'auto' is the first CUDA GPU when one is visible, else the CPU")

    def check(self) -> list[str]:
        out = []
        if not self.probe:
            out.append("probe: required (a directory written by `align rm refusal-probe`)")
        if not 0.0 < self.threshold < 1.0:
            out.append(f"threshold: between 0 and 1, got {self.threshold}")
        return out
