"""The sampling knobs of a config section, written once: the online loop's `rollout:`, the iterative loop's
`rounds:` and the over-optimization harness inherit them (the YAML stays flat: `rollout.temperature`), and turn
them into the engine's `SamplingParams` with `params(n, seed)`.
"""

from __future__ import annotations

from dataclasses import dataclass

from prefalign.config import option

from .api import SamplingParams


@dataclass
class SamplingOptions:
    max_new_tokens: int = option(128, "tokens per completion at most")
    temperature: float = option(1.0, "sampling temperature (the policy's log-probs use the same)")
    top_p: float = option(1.0, "nucleus sampling (1 = off); with top_p < 1 prefer algorithm.old_logps: recompute")
    top_k: int = option(0, "top-k sampling (0 = off)")
    seed: int = option(0, "sampling seed: each step (or round) and sample draws from its own stream")

    def params(self, n: int, seed: int) -> SamplingParams:
        """The engine's settings for n samples per prompt, drawn from stream `seed` (`prefalign.stats.stream_seed`)."""
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


__all__ = ["GREEDY_EVAL_TOKENS", "SamplingOptions"]
