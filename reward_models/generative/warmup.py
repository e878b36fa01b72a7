"""Warm-up targets for generative judges, written as the check a careful judge does.

A small base model never writes a judge's format on its own (SmolLM2-135M-Instruct as `grm` writes no
`\\boxed{}` in 12 of 12 critiques), so rejective fine-tuning on its own samples keeps nothing. Think-RM and
DeepSeek-GRM warm up on the reasoning of a stronger judge; for the verifiable suite these functions write that
reasoning from the task itself (`preference_data.suite.checks`): the check done from the prompt (the computation,
the passage's sentence, the list operation, the format's counts, the request's class), what each response gives
against it, then the verdict, which follows from the gold grades of the two responses. A judge SFT-ed on them
learns to do the check before it grades, not to assert a grade (an earlier form stated the graders' findings,
"The answer is wrong.", and taught exactly that). For pairs without a generator, a file of a stronger judge's
traces takes their place (`judge.traces`, `reward_models/judge_train.py`).

`gold_grades` reads the grades the suite attaches to every pair (`attributes.gold_chosen`,
`attributes.gold_rejected`), which the judges' RL stage (`align/judge_rl.py`) labels its prompts with.

Choices (explicit, documented):
- GRM score of a response: 1 + 9 * overall rounded half up, in 1..10 (SPCT's n = 1 rule S = r with the gold overall
  put on the judge's scale).
- Multiclass strength of a pair (Think-RM -3..3): from the gap g = overall(chosen) - overall(rejected):
  3 (much better) when g >= `STRENGTH_CUTS[0]`, 2 (better) when g >= `STRENGTH_CUTS[1]`, else 1 (slightly).
"""

from __future__ import annotations

import math
from typing import Any

from preference_data.suite.checks import TaskView, quote, read, work
from preference_data.suite.families import grade

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


def check_reasoning(task: TaskView, a: str, b: str) -> str:
    """The check of a pair written out: the work done from the prompt, then each response quoted and read against
    it, with its judgement (`preference_data.suite.checks`)."""
    lines = list(work(task))
    for name, text in (("A", a), ("B", b)):
        lines += [f'{name} says: "{quote(text)}"', f"{name}: {read(task, text)}"]
    return "\n".join(lines)


def _grades(task: TaskView, chosen: str, rejected: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The gold grades of the chosen and the rejected response; None where the rejected one is not worse (the
    verdict would not follow from the check)."""
    c = grade(task.family, task.params, chosen).to_dict()
    r = grade(task.family, task.params, rejected).to_dict()
    return (c, r) if c["overall"] > r["overall"] else None


CRITERIA = ", ".join(f"{k.replace('_', ' ')} ({w})" for k, w in DIMENSION_WEIGHTS.items())
"""The GRM's specific criteria, as its warm-up writes them."""
WORK_HEADER = f"Specific Criteria: {CRITERIA}.\nWork:"
"""What a `principles: from_prompt` GRM's warm-up writes before every work (a scorer's `work_prefix: template`)."""


def _reading(task: TaskView, response: str) -> str:
    """The response quoted and read against the work (`checks.read`)."""
    return f'The response says: "{quote(response)}" It {read(task, response)}'


def _score_line(task: TaskView, response: str) -> str:
    """The gold overall of `response` on the GRM's 1..10 scale, boxed."""
    return f"Score: \\boxed{{{grm_score(grade(task.family, task.params, response).to_dict())}}}"


def grm_critique(task: TaskView, response: str) -> str:
    """A critique in `GRM_TEMPLATE`'s format for one response: the criteria, the check and the reading of the
    response as the analysis, and the gold overall on the 1..10 scale as the score."""
    analysis = " ".join(work(task)) + " " + _reading(task, response)
    return f"Specific Criteria: {CRITERIA}.\nAnalysis: {analysis}\n{_score_line(task, response)}"


def grm_principles(task: TaskView) -> str:
    """The first turn of a `principles: from_prompt` GRM (`GRM_PRINCIPLES_TEMPLATE`'s format): the criteria and the
    check of the task, written from its prompt alone."""
    return f"{WORK_HEADER} " + " ".join(work(task))


def grm_reading(task: TaskView, response: str) -> str:
    """The second turn of a `principles: from_prompt` GRM (`GRM_READING_TEMPLATE`'s format): the response quoted
    and read against the work, and the gold overall on the 1..10 scale as the score."""
    return f"Analysis: {_reading(task, response)}\n{_score_line(task, response)}"


def grm_targets(task: TaskView, chosen: str, rejected: str) -> tuple[str, str] | None:
    """(critique of the chosen, critique of the rejected), or None where the rejected response is not worse."""
    if _grades(task, chosen, rejected) is None:
        return None
    return grm_critique(task, chosen), grm_critique(task, rejected)


def grm_two_turn_targets(task: TaskView, chosen: str, rejected: str) -> tuple[str, str, str] | None:
    """(the task's principles, the reading of the chosen, the reading of the rejected) of a `principles:
    from_prompt` GRM, or None where the rejected response is not worse."""
    if _grades(task, chosen, rejected) is None:
        return None
    return grm_principles(task), grm_reading(task, chosen), grm_reading(task, rejected)


def think_target(task: TaskView, chosen: str, rejected: str, chosen_is_b: bool, form: str) -> str | None:
    """The reasoning after the forced `<think>\\n` and the verdict, with the chosen response at A or B; None where
    the rejected response is not worse."""
    grades = _grades(task, chosen, rejected)
    if grades is None:
        return None
    a, b = (rejected, chosen) if chosen_is_b else (chosen, rejected)
    better = "B" if chosen_is_b else "A"
    if form == "multiclass":
        s = strength(*grades)
        verdict = str(s if chosen_is_b else -s)
        conclusion = f"So {better} is {({3: 'much better', 2: 'better', 1: 'slightly better'})[s]}."
    else:
        verdict, conclusion = better, f"So {better} is better."
    return f"{check_reasoning(task, a, b)}\n{conclusion}\n</think>\n<answer>{verdict}</answer>"
