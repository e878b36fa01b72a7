"""Format warm-up targets for generative judges, written from graded labels.

A small base model never writes a judge's format on its own (SmolLM2-135M-Instruct as `grm` writes no
`\\boxed{}` in 12 of 12 critiques), so rejective fine-tuning on its own samples keeps nothing. Think-RM warms
up on long reasoning traces of a stronger model; where there is none, these functions write the judge's
target output from the gold grades of a pair instead: the format is real, the analysis states what the
graders found, and the verdict follows from the grades. A judge SFT-ed on them learns the format and a first
mapping from what it reads to a verdict; rejective fine-tuning on its own samples comes after.

The grades are the ones the verifiable suite attaches to every pair (`attributes.gold_chosen`,
`attributes.gold_rejected`: correctness, instruction_following, conciseness, safety in [0, 1], `overall`,
`refused`; `attributes.reason`: what is wrong with the rejected response). A pair without them cannot be
written and is reported by the caller.

Choices (explicit, documented):
- GRM score of a response: 1 + 9 * overall rounded half up, in 1..10 (SPCT's n = 1 rule S = r with the gold overall
  put on the judge's scale).
- Multiclass strength of a pair (Think-RM -3..3): from the gap g = overall(chosen) - overall(rejected):
  3 (much better) when g >= `STRENGTH_CUTS[0]`, 2 (better) when g >= `STRENGTH_CUTS[1]`, else 1 (slightly).
"""

from __future__ import annotations

import math
from typing import Any

DIMENSION_WEIGHTS = {"correctness": 0.4, "instruction_following": 0.3, "conciseness": 0.2, "safety": 0.1}
STRENGTH_CUTS = (0.75, 0.15)
"""Gold-overall gaps at or above which a pair is 'much better' (3) and 'better' (2); below: 1."""


def gold_grades(pair: Any) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(grades of the chosen, grades of the rejected), or None when the pair carries no gold grades."""
    attrs = getattr(pair, "attributes", None) or {}
    c, r = attrs.get("gold_chosen"), attrs.get("gold_rejected")
    if not isinstance(c, dict) or not isinstance(r, dict):
        return None
    if not isinstance(c.get("overall"), int | float) or not isinstance(r.get("overall"), int | float):
        return None
    return c, r


def grm_score(grades: dict[str, Any]) -> int:
    """The gold overall on the GRM's 1..10 scale."""
    return max(1, min(10, 1 + math.floor(9 * float(grades["overall"]) + 0.5)))


def strength(chosen: dict[str, Any], rejected: dict[str, Any]) -> int:
    """How much better the chosen response is: 3, 2 or 1 (see the module docstring)."""
    gap = float(chosen["overall"]) - float(rejected["overall"])
    return 3 if gap >= STRENGTH_CUTS[0] else 2 if gap >= STRENGTH_CUTS[1] else 1


def analysis(grades: dict[str, Any], problem: str | None = None) -> str:
    """One sentence per graded dimension, then the grader's account of the problem when there is one."""
    parts = []
    if grades.get("refused"):
        parts.append("It refuses the request.")
    c = grades.get("correctness")
    if isinstance(c, int | float):
        parts.append(
            "The answer is correct."
            if c >= 1
            else "The answer is wrong."
            if c <= 0
            else "The answer is partly correct."
        )
    f = grades.get("instruction_following")
    if isinstance(f, int | float):
        parts.append("It follows the instructions." if f >= 1 else "It does not follow all the instructions.")
    s = grades.get("conciseness")
    if isinstance(s, int | float):
        parts.append("It is concise." if s >= 0.9 else "It is padded with text that adds nothing.")
    u = grades.get("safety")
    if isinstance(u, int | float) and u < 1:
        parts.append("It is unsafe.")
    if problem:
        parts.append(f"Problem: it {problem}.")
    return " ".join(parts) or "Nothing stands out."


def _problem(pair: Any) -> str | None:
    reason = (getattr(pair, "attributes", None) or {}).get("reason")
    return reason.strip().rstrip(".") if isinstance(reason, str) and reason.strip() else None


def grm_critique(grades: dict[str, Any], problem: str | None = None) -> str:
    """A critique in `GRM_TEMPLATE`'s format for one graded response."""
    criteria = ", ".join(f"{k.replace('_', ' ')} ({w})" for k, w in DIMENSION_WEIGHTS.items())
    return (
        f"Specific Criteria: {criteria}.\nAnalysis: {analysis(grades, problem)}\nScore: \\boxed{{{grm_score(grades)}}}"
    )


def grm_targets(pair: Any) -> tuple[str, str] | None:
    """(critique of the chosen, critique of the rejected) of a graded pair, or None without grades."""
    grades = gold_grades(pair)
    if grades is None:
        return None
    return grm_critique(grades[0]), grm_critique(grades[1], _problem(pair))


def think_target(pair: Any, chosen_is_b: bool, form: str) -> str | None:
    """The reasoning after the forced `<think>\\n` and the verdict, with the chosen response at A or B."""
    grades = gold_grades(pair)
    if grades is None:
        return None
    c, r = analysis(grades[0]), analysis(grades[1], _problem(pair))
    a_text, b_text = (r, c) if chosen_is_b else (c, r)
    better = "B" if chosen_is_b else "A"
    if form == "multiclass":
        s = strength(*grades)
        verdict = str(s if chosen_is_b else -s)
        degree = {3: "much better", 2: "better", 1: "slightly better"}[s]
        conclusion = f"So {better} is {degree}."
    else:
        verdict, conclusion = better, f"So {better} is better."
    return f"Response A: {a_text}\nResponse B: {b_text}\n{conclusion}\n</think>\n<answer>{verdict}</answer>"
