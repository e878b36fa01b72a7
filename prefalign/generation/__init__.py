"""The generation engine: conversations x n samples -> completions with token ids, log-probs, finish reasons.

One interface (`api.GenerationEngine`) for `align eval policy`, generative judges and online loops:

    from prefalign.generation import SamplingParams, make_engine

    engine = make_engine(model, tokenizer)                  # a loaded causal LM; backend "transformers"
    result = engine.generate(conversations, SamplingParams(n=4, temperature=1.0, top_p=0.95,
                                                           max_new_tokens=128, stop=("\\n\\n",), seed=7))
    c = result.outputs[0].completions[0]                    # c.text, c.token_ids, c.logprobs, c.finish_reason
    engine.sync_weights(trainer_model)                      # after each optimizer step (LoRA merged)

Files, in reading order:
  api.py                   SamplingParams, Completion / RequestOutput / GenerationResult, Timings, Tool, the engine
                           base
  prompts.py               conversation -> prompt token ids (the chat template, as `tokenize_prompts` does)
  sampling.py              temperature / top-k / top-p / min-p, the log-prob definition, seeded inverse-CDF draws
  cache.py                 the in-place KV slab cache
  schedule.py              which samples decode together: one unit per distinct prompt, token-budget batches
  transformers_backend.py  the default engine: prefill once per prompt (a batch's common head once), batches as
                           scheduled, row pruning, tool calls continued on the row
  vllm_backend.py          vLLM colocated (gpu extra), imported lazily
  weights.py               trainer -> sampler weight copy, LoRA merged without touching the trainer
  tools.py                 tools a model calls as it writes (the calculator): stop, answer, go on
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any

from prefalign.errors import UserError, did_you_mean

from .api import (
    FINISH_REASONS,
    Completion,
    FinishReason,
    GenerationEngine,
    GenerationResult,
    RequestOutput,
    SamplingParams,
    Timings,
)
from .prompts import render_prompts
from .sampling import processed_logprobs, sample_uniforms
from .schedule import BATCH_ORDERS
from .transformers_backend import TransformersEngine, exact_batched


@dataclass(frozen=True)
class Backend:
    description: str
    module: str  # where its engine class lives (imported on use)
    engine: str
    requires: str | None = None  # a package it needs that the base install lacks
    install: str | None = None


BACKENDS: dict[str, Backend] = {
    "transformers": Backend(
        "any transformers causal LM on its own device (default; CPU or GPU)",
        "prefalign.generation.transformers_backend",
        "TransformersEngine",
    ),
    "vllm": Backend(
        "vLLM colocated in this process, weights synced through its API (CUDA GPU)",
        "prefalign.generation.vllm_backend",
        "VLLMEngine",
        requires="vllm",
        install="pip install -e '.[gpu]'",
    ),
}


def make_engine(model: Any, tokenizer: Any, backend: str = "transformers", **options: Any) -> GenerationEngine:
    """A generation engine for a loaded causal LM and its tokenizer. `backend` is a key of `BACKENDS`;
    `options` go to its engine class (e.g. `token_budget`, `max_rows` for transformers)."""
    if backend not in BACKENDS:
        raise UserError(
            f"unknown generation backend '{backend}'{did_you_mean(backend, list(BACKENDS))}; choose one "
            "of: " + "; ".join(f"'{k}' ({b.description})" for k, b in BACKENDS.items())
        )
    spec = BACKENDS[backend]
    if spec.requires and importlib.util.find_spec(spec.requires) is None:
        raise UserError(
            f"generation backend '{backend}' needs the package '{spec.requires}': {spec.install} "
            "(the gpu extra, on a machine with a CUDA GPU); or use backend 'transformers'"
        )
    cls = getattr(importlib.import_module(spec.module), spec.engine)
    return cls(model, tokenizer, **options)


__all__ = [
    "BACKENDS",
    "BATCH_ORDERS",
    "FINISH_REASONS",
    "Backend",
    "Completion",
    "FinishReason",
    "GenerationEngine",
    "GenerationResult",
    "RequestOutput",
    "SamplingParams",
    "Timings",
    "TransformersEngine",
    "exact_batched",
    "make_engine",
    "processed_logprobs",
    "render_prompts",
    "sample_uniforms",
]
