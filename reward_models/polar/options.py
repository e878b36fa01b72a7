"""Options of the `polar` scorer (kept apart from the scorer so the scorer table imports no torch)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from prefalign.config import option

from ..options import ModelOptions


@dataclass
class PolarOptions(ModelOptions):
    normalize: bool = option(
        False, "report (r - mean) / std with the statistics saved beside the model instead of the raw head output"
    )
    references: Literal["given", "suite"] = option(
        "given",
        "where the reference answer comes from: given = the caller passes one per response "
        "(`score_with_reference`; benchmarks pass the data's reference column); suite = the suite task's "
        "reference answer, found by prompt (so `score(prompts, responses)` works on suite prompts, e.g. online "
        "training with the gold answer as reference)",
    )
    suite_seed: int = option(0, "references: suite: the suite seed the prompts came from")
    suite_per_family: int = option(200, "references: suite: tasks per family to regenerate")
