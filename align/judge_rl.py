"""Judges trained by RL: judge prompts built from gold-labelled pairs, for the online engine's rule reward.

`prompts.judge: grm` makes one prompt per response of every graded pair (the GRM's pointwise critique message,
`GRMScorer.message`), labelled with the gold overall on the GRM's 1..10 scale (`warmup.grm_score`);
`prompts.judge: think` makes one prompt per pair (`ThinkJudgeScorer.message`, the chosen response at A or B by a
seeded coin), labelled with the better side and, for multiclass, the strength (`warmup.strength`; negative = A
better). The online loop samples verdicts and `align.rewards.judge_correctness` rewards them by the reference's
rule (DeepSeek-GRM / Think-RM rule-based RL). Pairs without gold grades are skipped and counted.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from prefalign.errors import UserError
from preference_data.records import Message, PromptOnly
from preference_data.sources import DataConfig, load_pairs
from reward_models.generative.scorers import GRMScorer, ThinkJudgeScorer
from reward_models.generative.warmup import gold_grades, grm_score, strength


def _grm_prompts(pair: Any, grades: Any, rng: random.Random, form: str, source: str) -> list[PromptOnly]:
    """GRM: one prompt per response, its gold score (1..10) the label."""
    out = []
    for response, g, side in ((pair.chosen, grades[0], "chosen"), (pair.rejected, grades[1], "rejected")):
        msg = GRMScorer.message(pair.prompt, response)
        meta = {"judge": {"kind": "grm", "score": grm_score(g)}, "pair_id": pair.id, "side": side}
        out.append(PromptOnly([Message("user", msg)], meta, None, f"judge:{source}"))
    return out


def _think_prompts(pair: Any, grades: Any, rng: random.Random, form: str, source: str) -> list[PromptOnly]:
    """Think-RM: one prompt per pair, the chosen response at A or B (seeded), the verdict and strength the label."""
    flip = rng.random() < 0.5  # the chosen response at B
    a, b = (pair.rejected, pair.chosen) if flip else (pair.chosen, pair.rejected)
    msg = ThinkJudgeScorer.message(pair.prompt, a, b, form)
    s = strength(*grades)
    label = "B" if flip else "A"
    meta = {
        "judge": {"kind": "think", "form": form, "label": label, "strength": s if flip else -s},
        "pair_id": pair.id,
    }
    return [PromptOnly([Message("user", msg)], meta, None, f"judge:{source}")]


# The judge prompts (and their gold labels) of a gold-graded pair, by judge kind.
JUDGE_PROMPTS: dict[str, Callable[[Any, Any, random.Random, str, str], list[PromptOnly]]] = {
    "grm": _grm_prompts,
    "think": _think_prompts,
}


def judge_prompts(source: str, kind: str, form: str, seed: int) -> list[PromptOnly]:
    pairs, _ = load_pairs(DataConfig(source=source, split="train"))
    build = JUDGE_PROMPTS[kind]
    rng = random.Random(seed)
    out: list[PromptOnly] = []
    skipped = 0
    for pair in pairs:
        grades = gold_grades(pair)
        if grades is None:
            skipped += 1
            continue
        out += build(pair, grades, rng, form, source)
    if skipped:
        print(f"judge prompts: {skipped} of {len(pairs)} pairs without gold grades skipped", flush=True)
    if not out:
        raise UserError(f"prompts.source {source}: no gold-graded pairs to build judge prompts from (use the suite)")
    return out
