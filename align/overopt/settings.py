"""The settings of `align eval overopt`; its flags are these fields (`prefalign.flags`). Torch-free, so building
the command line loads no model library."""

from __future__ import annotations

from dataclasses import dataclass

from prefalign.config import option
from prefalign.decoding import SamplingOptions
from prefalign.models.precision import DTYPES


@dataclass(kw_only=True)
class OveroptSettings(SamplingOptions):
    """`align eval overopt`: its flags are these fields (`prefalign.flags`)."""

    proxy: str | None = option(
        None,
        "the proxy, a pointwise scorer SPEC as everywhere (`align bench run --help`): a reward-model directory, "
        "KIND:MODEL or '{type: KIND, model: ..., ...}'; default with --run: the run's one non-gold reward component",
        metavar="SPEC",
    )
    run: str | None = option(
        None, "an online run directory (kind online, keep_checkpoints: 0): evaluate each saved checkpoint"
    )
    model: str | None = option(None, "initial policy without --run (default builtin:smollm2-135m-instruct)")
    prompts: str = option("suite", "'suite' (its test prompts) or a prompts JSONL with graders")
    limit: int = option(64, "number of prompts (family-balanced)")
    n: int = option(64, "pool size N per prompt; best-of-n for n = 1, 2, 4, ..., N")
    rl_samples: int = option(4, "samples per prompt at each checkpoint (with --run)")
    dtype: str = option(
        "auto",
        "the sampler's (auto: bfloat16 where native, else float32); KL log-probs run in float32",
        choices=DTYPES,
    )
    batch_size: int = option(16, "completions per log-prob forward (the KL)")
    token_budget: int = option(1 << 15, "KV-cache slots per generation batch")
    chunk_prompts: int = option(16, "prompts per generate call; samples are saved after each")
    out: str = option("runs/overopt", "directory for report.json, summary.txt, overopt.png, cache/")

    def check(self) -> list[str]:
        out = self.sampling_problems()
        for name in ("n", "rl_samples", "batch_size", "chunk_prompts", "limit"):
            if getattr(self, name) < 1:
                out.append(f"{name}: must be >= 1, got {getattr(self, name)}")
        if self.seed < 0:
            out.append(f"seed: must be >= 0, got {self.seed}")
        return out


__all__ = ["OveroptSettings"]
