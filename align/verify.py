"""A judge that checks the reward's pairs (`rounds.verify` of iterative rounds): the reward proposes, the judge decides.

A round's reward (a Bradley-Terry RM) ranks each prompt's candidates and the pair rule makes its pair: the reward's
best against its worst. Where the reward cannot see what makes an answer right (a wrong value stated confidently
looks to it like a right one), the pair teaches the policy the surface. A pairwise judge that does the check before
its verdict (`judge.kind: think`, reward_models/judge_train.py) is asked about every selected pair, both orders in
one batched call (a judge that judges both orders itself is asked once):

- it agrees (P(chosen better) > 0.5): the pair is kept as the reward made it;
- it disagrees (P < 0.5): `flip` swaps the pair's sides (the judge's verdict wins; the pair's margin becomes the
  absolute reward margin, so `pair_weights: margin` still weighs it, and `keep_pairs` still ranks it), `drop` removes
  it;
- it has no verdict (P = 0.5: the two orders disagree, or every sample abstained): the pair is kept as the reward
  made it, counted.

The counts go into the round's summary (`verify_agree`, `verify_flipped` or `verify_dropped`, `verify_unsure`), and
each pair's attributes carry the judge's probability (`verify_p`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Literal

from preference_data.records import PreferencePair

VerifyRule = Literal["flip", "drop"]


def verify_probabilities(judge: Any, pairs: list[PreferencePair]) -> list[float]:
    """P(chosen better than rejected) per pair from a pairwise judge (both orders averaged unless it judges both
    itself); NaN where it gave none."""
    if not pairs:
        return []
    prompts = [p.prompt for p in pairs]
    chosen, rejected = [p.chosen for p in pairs], [p.rejected for p in pairs]
    p = [float(x) for x in judge.compare(prompts, chosen, rejected)]
    if not getattr(judge, "symmetric", False):
        q = [float(x) for x in judge.compare(prompts, rejected, chosen)]
        p = [0.5 * (x + 1.0 - y) for x, y in zip(p, q, strict=True)]
    return p


def apply_verdicts(
    pairs: list[PreferencePair], probs: list[float], rule: VerifyRule
) -> tuple[list[PreferencePair], dict[str, int]]:
    """The pairs after the judge's verdicts (see the module docstring) and the counts."""
    out: list[PreferencePair] = []
    counts = {"verify_agree": 0, "verify_unsure": 0, "verify_flipped": 0, "verify_dropped": 0}
    for pair, p in zip(pairs, probs, strict=True):
        attrs = {**pair.attributes, "verify_p": None if math.isnan(p) else p}
        if math.isnan(p) or p == 0.5:
            counts["verify_unsure"] += 1
            out.append(dataclasses.replace(pair, attributes=attrs))
        elif p > 0.5:
            counts["verify_agree"] += 1
            out.append(dataclasses.replace(pair, attributes=attrs))
        elif rule == "drop":
            counts["verify_dropped"] += 1
        else:
            counts["verify_flipped"] += 1
            origins = list(reversed(attrs.get("origins") or []))
            out.append(
                dataclasses.replace(
                    pair,
                    chosen=pair.rejected,
                    rejected=pair.chosen,
                    margin=abs(pair.margin or 0.0),
                    # a flipped pair's sides are against `rounds.order_by`'s order, if it separated them
                    attributes={**attrs, "origins": origins, "verified": "flipped"}
                    | ({"ordered": False} if "ordered" in attrs else {}),
                    id="",  # the flipped pair's own content id
                )
            )
    return out, counts


__all__ = ["VerifyRule", "apply_verdicts", "verify_probabilities"]
