"""Pair builders: rated responses (several responses per prompt, scored) -> preference pairs.

Every builder works on one score dimension (`objective`), never pairs two responses with equal scores
(ties carry no preference; they are counted), and records the score gap as the pair's attribute
`rating_gap`. The gap is not the pair's `margin`: a rating gap of 6 (UltraFeedback-style scales) used as a
BT margin would train on -log sigmoid(Δ - 6). Reward-model training uses it only when asked
(`loss.margin: rating_gap`, scaled by `loss.margin_scale`).

| builder          | chosen                    | rejected                                  |
|------------------|---------------------------|-------------------------------------------|
| max_min          | best                      | worst                                     |
| max_random       | best                      | a random strictly-worse response (seeded) |
| max_second       | best                      | the best strictly-worse response          |
| length_penalized | best of score - alpha * words/100 | worst of the same penalized score  |
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from prefalign.registry import Table

from .records import PreferencePair, RatedResponses, stable_id, text_of
from .report import DataReport


@dataclass(frozen=True)
class PairBuilder:
    pick: Callable[[list[float], random.Random], tuple[int, int] | None]
    summary: str


def _max_min(s: list[float], rng: random.Random) -> tuple[int, int] | None:
    hi, lo = max(range(len(s)), key=lambda i: s[i]), min(range(len(s)), key=lambda i: s[i])
    return (hi, lo) if s[hi] > s[lo] else None


def _max_random(s: list[float], rng: random.Random) -> tuple[int, int] | None:
    hi = max(range(len(s)), key=lambda i: s[i])
    worse = [i for i in range(len(s)) if s[i] < s[hi]]
    return (hi, rng.choice(worse)) if worse else None


def _max_second(s: list[float], rng: random.Random) -> tuple[int, int] | None:
    hi = max(range(len(s)), key=lambda i: s[i])
    worse = [i for i in range(len(s)) if s[i] < s[hi]]
    return (hi, max(worse, key=lambda i: s[i])) if worse else None


PAIRING: Table[PairBuilder] = Table(
    "pair builder",
    {
        "max_min": PairBuilder(_max_min, "best vs worst response"),
        "max_random": PairBuilder(_max_random, "best vs a random strictly-worse response (seeded)"),
        "max_second": PairBuilder(_max_second, "best vs the runner-up (the hardest pair)"),
        "length_penalized": PairBuilder(_max_min, "best vs worst after subtracting length_alpha per 100 words"),
    },
)


def build_pairs(
    rated: list[RatedResponses],
    builder: str = "max_min",
    objective: str = "overall_score",
    length_alpha: float = 0.0,
    seed: int = 0,
    report: DataReport | None = None,
) -> list[PreferencePair]:
    """Turn rated responses into pairs with `builder` on score dimension `objective`.

    Prompts with no strictly better response (all tied, or fewer than two scored) are counted in `report`
    under 'tie' or 'objective_missing'.
    """
    spec = PAIRING[builder]
    if builder != "length_penalized":
        length_alpha = 0.0
    rng = random.Random(seed)
    out = []
    for rr in rated:
        idx = [i for i, s in enumerate(rr.scores) if objective in s]
        if len(idx) < 2:
            if report is not None:
                report.drop(
                    "objective_missing",
                    rr.attributes.get("row", rr.id),
                    f"fewer than two responses scored on '{objective}' (have: "
                    f"{sorted({k for s in rr.scores for k in s})})",
                )
            continue
        scores = [rr.scores[i][objective] - length_alpha * len(text_of(rr.responses[i]).split()) / 100 for i in idx]
        picked = spec.pick(scores, rng)
        if picked is None:
            if report is not None:
                report.drop("tie", rr.attributes.get("row", rr.id), f"all responses tie on '{objective}'")
            continue
        a, b = idx[picked[0]], idx[picked[1]]
        gap = rr.scores[a][objective] - rr.scores[b][objective]
        out.append(
            PreferencePair(
                rr.prompt,
                rr.responses[a],
                rr.responses[b],
                attributes={**rr.attributes, "pairing": builder, "objective": objective, "rating_gap": gap},
                source=rr.source,
                id=stable_id(rr.id, a, b),
            )
        )
    return out
