"""The decoding knobs of every verb and recipe that generates, written once, in two roles:

  DecodingSettings  one answer per prompt for an evaluation (greedy by default, so it repeats exactly);
                    `prefalign.generation.policy` does the decoding
  SamplingOptions   G sampled completions per prompt for training or a best-of-n pool: the online loop's
                    `rollout:`, the iterative loop's `rounds:` and the over-optimization harness extend it (the
                    YAML stays flat: `rollout.temperature`) and turn it into the engine's `SamplingParams`

Torch-free, so a verb's settings dataclass can extend these and build its flags (`prefalign.flags`), and a config
validate, without loading a model library.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

from prefalign.config import option
from prefalign.models.precision import DTYPES

if TYPE_CHECKING:
    from prefalign.generation.api import SamplingParams


GREEDY_SCHEDULES = ("exact", "fast")
"""How greedy answers are batched (`DecodingSettings.schedule`, `prefalign.generation.policy.generate`)."""


@dataclass
class DecodingSettings:
    """Greedy by default, so an evaluation repeats exactly."""

    max_new_tokens: int = option(96, "tokens per answer")
    batch_size: int = option(16, "prompts decoded together")
    temperature: float = option(0.0, "0 = greedy")
    dtype: str = option("auto", "auto: bfloat16 where the device runs it natively, else float32", choices=DTYPES)
    seed: int = option(0, "seed of the sampling (temperature > 0), of a prompt subset and of the bootstrap")
    schedule: str = option(
        "exact",
        "greedy batches: exact (the continuations transformers' generate gives on length-sorted batches, bit for "
        "bit) or fast (the engine's own schedule: 1.7x on a 2-core CPU; in bf16 a near-tie may continue "
        "differently, as any other batching would)",
        choices=GREEDY_SCHEDULES,
    )

    def decoding(self) -> DecodingSettings:
        """These settings alone, from a verb's settings that extend them (what a record or cache key holds)."""
        return DecodingSettings(**{f.name: getattr(self, f.name) for f in fields(DecodingSettings)})


@dataclass
class SamplingOptions:
    max_new_tokens: int = option(128, "tokens per completion at most")
    temperature: float = option(1.0, "sampling temperature (the policy's log-probs use the same)")
    top_p: float = option(1.0, "nucleus sampling (1 = off); with top_p < 1 prefer algorithm.old_logps: recompute")
    top_k: int = option(0, "top-k sampling (0 = off)")
    seed: int = option(0, "sampling seed: each step (or round) and sample draws from its own stream")

    def params(self, n: int, seed: int) -> SamplingParams:
        """The engine's settings for n samples per prompt, drawn from stream `seed` (`prefalign.stats.stream_seed`)."""
        from prefalign.generation.api import SamplingParams  # lazy: the generation package loads torch

        return SamplingParams(
            n=n,
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            max_new_tokens=self.max_new_tokens,
            seed=seed,
        )

    def sampling_problems(self) -> list[str]:
        """Problems of the sampling fields (the caller's `check` adds them)."""
        p = []
        if self.max_new_tokens < 1:
            p.append(f"max_new_tokens: must be >= 1, got {self.max_new_tokens}")
        if self.temperature <= 0:
            p.append(f"temperature: must be > 0 for sampled completions, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            p.append(f"top_p: must be in (0, 1] (1 = off), got {self.top_p}")
        if self.top_k < 0:
            p.append(f"top_k: must be >= 0 (0 = off), got {self.top_k}")
        return p


GREEDY_EVAL_TOKENS = 128
"""Tokens per greedy held-out answer, the default of every gold evaluation section."""


__all__ = ["GREEDY_EVAL_TOKENS", "GREEDY_SCHEDULES", "DecodingSettings", "SamplingOptions"]
