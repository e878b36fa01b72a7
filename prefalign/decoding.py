"""How one answer per prompt is decoded: the settings every verb that generates a policy's answers shares.

Torch-free, so a verb's settings dataclass can extend `DecodingSettings` and build its flags (`prefalign.flags`)
without loading a model library; `prefalign.generation.policy` does the decoding.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from prefalign.config import option
from prefalign.models.precision import DTYPES


@dataclass
class DecodingSettings:
    """Greedy by default, so an evaluation repeats exactly."""

    max_new_tokens: int = option(96, "tokens per answer")
    batch_size: int = option(16, "prompts decoded together")
    temperature: float = option(0.0, "0 = greedy")
    dtype: str = option("auto", "auto: bfloat16 where the device runs it natively, else float32", choices=DTYPES)
    seed: int = option(0, "seed of the sampling (temperature > 0), of a prompt subset and of the bootstrap")

    def decoding(self) -> DecodingSettings:
        """These settings alone, from a verb's settings that extend them (what a record or cache key holds)."""
        return DecodingSettings(**{f.name: getattr(self, f.name) for f in fields(DecodingSettings)})


__all__ = ["DecodingSettings"]
