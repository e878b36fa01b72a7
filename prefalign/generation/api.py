"""The interface every backend speaks: sampling settings in, completions with token ids and log-probs out.

engine = make_engine(model, tokenizer)                       # backend "transformers" by default
result = engine.generate(conversations, SamplingParams(n=4, temperature=1.0, max_new_tokens=128, seed=0))
result.outputs[i].completions[j]                             # sample j of prompt i: text, token_ids,
                                                             # logprobs, finish_reason
engine.sync_weights(trainer_model)                           # after each optimizer step of an online loop
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from prefalign.errors import ConfigError

from .prompts import render_prompts

FinishReason = Literal["eos", "length", "stop"]
FINISH_REASONS: dict[str, str] = {
    "eos": "the model sampled an end-of-sequence token (kept as the last token id)",
    "length": "max_new_tokens (or the model's context length) was reached",
    "stop": "the text reached one of the stop strings (cut off right before it)",
}


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one request's completions. The processing order and the log-prob definition are in
    `prefalign.generation.sampling`."""

    n: int = 1
    """completions per prompt; the prompt is prefilled once for all of them"""
    temperature: float = 1.0
    """0 = greedy (every sample is the argmax continuation); otherwise logits are divided by it"""
    top_p: float = 1.0
    """keep the smallest most-probable set of tokens whose mass reaches top_p; 1 = off"""
    top_k: int = 0
    """keep the top_k most probable tokens (ties kept); 0 = off"""
    min_p: float = 0.0
    """keep tokens whose probability is >= min_p x the largest; 0 = off"""
    max_new_tokens: int = 128
    """at most this many tokens per completion (the EOS token included)"""
    stop: tuple[str, ...] = ()
    """stop strings: a completion ends when its text contains one; the text is cut right before it"""
    seed: int = 0
    """sample j draws from its own generator seeded from (seed, prompt ids, j), whatever else shares its batch"""

    def problems(self) -> list[str]:
        """Every invalid field, with the allowed range."""
        out = []

        def num(name: str, value: Any, integer: bool) -> bool:
            ok = isinstance(value, int) if integer else isinstance(value, int | float)
            if isinstance(value, bool) or not ok or (not integer and not math.isfinite(value)):
                out.append(f"{name}={value!r}: must be {'an integer' if integer else 'a finite number'}")
                return False
            return True

        if num("n", self.n, True) and self.n < 1:
            out.append(f"n={self.n}: must be >= 1 (completions per prompt)")
        if num("temperature", self.temperature, False) and self.temperature < 0:
            out.append(f"temperature={self.temperature}: must be >= 0 (0 = greedy)")
        if num("top_p", self.top_p, False) and not 0 < self.top_p <= 1:
            out.append(f"top_p={self.top_p}: must be in (0, 1] (1 = off)")
        if num("top_k", self.top_k, True) and self.top_k < 0:
            out.append(f"top_k={self.top_k}: must be >= 0 (0 = off)")
        if num("min_p", self.min_p, False) and not 0 <= self.min_p <= 1:
            out.append(f"min_p={self.min_p}: must be in [0, 1] (0 = off)")
        if num("max_new_tokens", self.max_new_tokens, True) and self.max_new_tokens < 1:
            out.append(f"max_new_tokens={self.max_new_tokens}: must be >= 1")
        if num("seed", self.seed, True) and self.seed < 0:
            out.append(f"seed={self.seed}: must be >= 0")
        if isinstance(self.stop, str):
            out.append(f"stop={self.stop!r}: must be a tuple of strings, e.g. stop=({self.stop!r},)")
        elif not isinstance(self.stop, tuple | list) or not all(isinstance(s, str) and s for s in self.stop):
            out.append(f"stop={self.stop!r}: must be a tuple of non-empty strings")
        return out

    def validate(self, where: str = "SamplingParams") -> None:
        """Raise `ConfigError` listing every invalid field."""
        problems = self.problems()
        if problems:
            raise ConfigError(problems, where)


@dataclass(frozen=True)
class Tool:
    """A tool a model calls while it writes (`tools.py`: the calculator, the loop that runs any tool)."""

    description: str
    stop: str
    """the text the model writes to call the tool (the engine stops right after it)"""
    call: Callable[[str], str | None]
    """the text written so far, ending right before `stop` -> what to write right after `stop` (None: nothing)"""


@dataclass
class Completion:
    """One sampled continuation. `token_ids` and `logprobs` have the same length T (the EOS token, when
    sampled, is the last id); `text` is their decoding without special tokens, cut right before the stop
    string when `finish_reason == "stop"` (the ids then include the tokens that spelled it)."""

    text: str
    token_ids: list[int]
    logprobs: list[float]
    """log-prob of each sampled token under the processed sampling distribution (0.0 when greedy, and for a tool's
    answer fed to it: `generate(tools=...)`)"""
    finish_reason: FinishReason
    stop: str | None = None
    """the stop string that ended it, when finish_reason is "stop\""""


@dataclass
class RequestOutput:
    """The n completions of one prompt, in sample order."""

    prompt_ids: list[int]
    completions: list[Completion]
    seconds: float = 0.0
    """from the start of `generate` until this request's last sample finished"""


@dataclass
class Timings:
    """Where the time of one `generate` call went. Tokens are counted per sample."""

    render_s: float = 0.0
    prefill_s: float = 0.0
    decode_s: float = 0.0
    total_s: float = 0.0
    prompt_tokens: int = 0
    """prompt tokens run through the model (each distinct prompt once)"""
    generated_tokens: int = 0
    batches: int = 0

    @property
    def tokens_per_s(self) -> float:
        """Generated tokens per second of the whole call."""
        return self.generated_tokens / self.total_s if self.total_s > 0 else 0.0

    def to_dict(self) -> dict[str, float | int]:
        return {
            "render_s": self.render_s,
            "prefill_s": self.prefill_s,
            "decode_s": self.decode_s,
            "total_s": self.total_s,
            "prompt_tokens": self.prompt_tokens,
            "generated_tokens": self.generated_tokens,
            "batches": self.batches,
            "tokens_per_s": self.tokens_per_s,
        }


@dataclass
class GenerationResult:
    outputs: list[RequestOutput]
    """one per prompt, in input order"""
    timings: Timings = field(default_factory=Timings)
    weight_version: int = 0
    """the engine's weight version the samples were drawn with (see `sync_weights`)"""


class GenerationEngine:
    """What every backend provides; a backend subclasses it and implements `_sample` and `sync_weights`.

    `generate` is the same for every backend: it checks the settings (`per_prompt_params`) and renders the
    prompts to token ids (`prompts.render_prompts`), then the backend samples the rendered prompts."""

    backend: str
    weight_version: int
    tokenizer: Any
    continues_tools: bool = False
    """whether `generate` takes `tools` (a tool's answer written into the completion as it samples)"""

    def generate(
        self,
        prompts: Sequence[Any],
        params: SamplingParams | Sequence[SamplingParams] = SamplingParams(),
        max_prompt_length: int | None = None,
        progress: bool = False,
        tools: Sequence[Tool] = (),
    ) -> GenerationResult:
        """Sample `params.n` completions for each prompt (a conversation or a list of token ids). `params` is
        one setting for every prompt or one per prompt. Returns one `RequestOutput` per prompt, in input order.

        `tools` (where `continues_tools`): where a completion writes a tool's stop string (listed in its
        `params.stop`), the tool's answer is written after it and the completion goes on (`tools.py`)."""
        t0 = time.perf_counter()
        plist = per_prompt_params(params, len(prompts))
        if tools and not self.continues_tools:
            raise ConfigError(
                [f"the {self.backend} backend does not continue tool calls: use tools.generate_with_tools"], "generate"
            )
        ids = render_prompts(self.tokenizer, prompts, max_prompt_length)
        return self._sample(ids, plist, Timings(render_s=time.perf_counter() - t0), t0, progress, tools)

    def _sample(
        self,
        ids: list[list[int]],
        plist: list[SamplingParams],
        timings: Timings,
        t0: float,
        progress: bool,
        tools: Sequence[Tool] = (),
    ) -> GenerationResult:
        """The backend's part of `generate`: `plist[i].n` completions of the rendered prompt `ids[i]`; `timings`
        holds the rendering time, `t0` is when `generate` began (finish times count from it)."""
        raise NotImplementedError

    def sync_weights(self, model: Any | None = None) -> int:
        """Make the sampler use `model`'s current weights (merged LoRA for a peft model); returns the new
        weight version."""
        raise NotImplementedError


def per_prompt_params(params: SamplingParams | Sequence[SamplingParams], n_prompts: int) -> list[SamplingParams]:
    """One validated `SamplingParams` per prompt."""
    if isinstance(params, SamplingParams):
        params.validate()
        return [params] * n_prompts
    if (
        isinstance(params, str)
        or not isinstance(params, Sequence)
        or not all(isinstance(p, SamplingParams) for p in params)
    ):
        raise ConfigError(
            [f"params must be a SamplingParams or a list of them, got {type(params).__name__}"], "generate"
        )
    if len(params) != n_prompts:
        raise ConfigError(
            [f"got {len(params)} SamplingParams for {n_prompts} prompts: pass one, or one per prompt"], "generate"
        )
    problems = [f"prompt {i}: {p}" for i, sp in enumerate(params) for p in sp.problems()]
    if problems:
        raise ConfigError(problems, "SamplingParams")
    return list(params)
