"""The verifiable preference suite: the toolkit's embedded default data.

Seeded generators of prompts whose answers are graded by code. Six task families
(`FAMILIES`: arithmetic, list_ops, formatting, extractive_qa, safety, short_answer), each graded
on the objectives that apply to it (`OBJECTIVES`: correctness, instruction_following,
conciseness, safety) and on `overall`, their weighted mean (`OVERALL_WEIGHTS`) gated by the task
objective (`TASK_OBJECTIVES`): a response that does not do the task earns nothing for its length
or safety.

Graders read the one answer a response commits to: hedged, denied or several answers are wrong,
and a refusal that complies anyway is compliance. Offline pairs put a good answer against a
controlled corruption of it (a realistic failure mode, recorded with its kind and reason: among
them hedged and negated answers, non-answers, form without content and refuse-then-comply);
online prompts (`PromptOnly`) carry their grader and params, so `grade_prompt_only(record, text)`
grades a policy's answer from the record alone.

Modules: `text` (reading answers), `scoring` (objectives and weights), `base` (the family
interface), one module per family, `families` (the table and `grade`), `build` (suite and files).
"""

from .build import (
    FILES,
    HARD_KINDS,
    REFUSAL_KINDS,
    SOURCE,
    Suite,
    Task,
    build_suite,
    generate_tasks,
    grade_prompt_only,
    hard_negatives,
    make_pair,
    prompt_only_from_dict,
    split_of,
    with_references,
    write_suite,
)
from .families import FAMILIES, grade
from .scoring import OBJECTIVES, OVERALL_WEIGHTS, TASK_OBJECTIVES, Grade, conciseness_score, overall_score, safety_score
from .text import REFUSAL_PATTERNS, is_refusal

__all__ = [
    "FAMILIES",
    "FILES",
    "HARD_KINDS",
    "REFUSAL_KINDS",
    "OBJECTIVES",
    "OVERALL_WEIGHTS",
    "REFUSAL_PATTERNS",
    "SOURCE",
    "TASK_OBJECTIVES",
    "Grade",
    "Suite",
    "Task",
    "build_suite",
    "conciseness_score",
    "generate_tasks",
    "grade",
    "grade_prompt_only",
    "hard_negatives",
    "is_refusal",
    "make_pair",
    "overall_score",
    "prompt_only_from_dict",
    "safety_score",
    "split_of",
    "with_references",
    "write_suite",
]
