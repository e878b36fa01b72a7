"""MT-Bench single-answer grading as FastChat's `llm_judge` runs it, with any chat model as the judge.

Reference: lm-sys/FastChat @ 0e6d3e4b, `fastchat/llm_judge/gen_judgment.py` (`make_judge_single`,
`make_match_single`) and `common.py` (`run_judge_single`, `play_a_match_single`, the rating patterns). The judge
prompts are the benchmark's own file (`data/judge_prompts.jsonl`, one JSON object a line: name, type, system_prompt,
prompt_template, output_format), given by the user as `--judge-prompts FILE`; nothing of it is built in.

- the matches: the first turns of the questions outside those categories, then of those in them, then the second
  turns in the same order (gen_judgment's `matches +=` order; the rows are written in it).
- which prompt: turn 1 `single-v1`, turn 2 `single-v1-multi-turn`; a question whose category needs a reference
  answer (math, reasoning, coding, arena-hard-200) `single-math-v1` / `single-math-v1-multi-turn`, with the
  reference answer's turns (`reference_answer/<judge>.jsonl`, FastChat's answer format, `--judge-reference FILE`).
  A two-turn match is made only for a question with two turns.
- the prompt: `prompt_template.format(...)` with question / answer (turn 1) or question_1, question_2, answer_1,
  answer_2 (turn 2), and ref_answer_1 (and ref_answer_2 at turn 2) where a reference is used; the system prompt as
  the conversation's system message, the user prompt as its one user message (the judge's chat template renders
  them).
- the judgment: greedy decoding (FastChat asks its API judges at temperature 0), at most `max_new_tokens` tokens
  (FastChat: 2048 for OpenAI's models).
- the rating: the first `[[x]]` (x digits, optionally a decimal part), else the first `[x]`, read as a Python
  literal (an int or a float); -1 when neither is there (FastChat's failed rating, which `show_result` drops).
- the rows written (`policy_bench.native_mtbench`): question_id, model, judge [judge, prompt name], user_prompt,
  judgment, score, turn, as `play_a_match_single` appends them to `model_judgment/<judge>_single.jsonl` (without
  its wall-clock tstamp, so that a rerun writes the same file).
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefalign.errors import UserError

from .policy_data import BenchItem

NEED_REF_CATS = ("math", "reasoning", "coding", "arena-hard-200")
"""FastChat's categories whose questions are graded against a reference answer."""

SINGLE_PROMPTS = {
    (False, 1): "single-v1",
    (True, 1): "single-math-v1",
    (False, 2): "single-v1-multi-turn",
    (True, 2): "single-math-v1-multi-turn",
}
"""(reference-based, turn) -> the judge prompt's name in judge_prompts.jsonl (`make_judge_single`)."""

ONE_SCORE = re.compile(r"\[\[(\d+\.?\d*)\]\]")
ONE_SCORE_BACKUP = re.compile(r"\[(\d+\.?\d*)\]")
PROMPT_FIELDS = ("name", "type", "system_prompt", "prompt_template", "output_format")
MAX_NEW_TOKENS = 2048
"""FastChat's max_tokens for an API judge's single-answer grading (OpenAI models)."""


@dataclass(frozen=True)
class JudgePrompt:
    """One line of judge_prompts.jsonl."""

    name: str
    type: str
    system_prompt: str
    prompt_template: str
    output_format: str


def read_judge_prompts(path: str | Path) -> dict[str, JudgePrompt]:
    """FastChat's judge_prompts.jsonl -> {name: prompt}; a line that cannot be read, or without the single-grading
    prompts MT-Bench needs, is an error naming the file, the line and the field."""
    p = Path(path)
    if not p.is_file():
        raise UserError(f"--judge-prompts {p}: no such file (FastChat's fastchat/llm_judge/data/judge_prompts.jsonl)")
    prompts: dict[str, JudgePrompt] = {}
    for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise UserError(f"{p} line {n}: not JSON ({e.msg}); each line is one judge prompt object") from None
        missing = [k for k in PROMPT_FIELDS if not isinstance(row.get(k), str)] if isinstance(row, dict) else ["all"]
        if missing:
            raise UserError(f"{p} line {n}: missing or non-text field(s) {', '.join(missing)}")
        prompts[row["name"]] = JudgePrompt(*(row[k] for k in PROMPT_FIELDS))
    absent = [name for name in SINGLE_PROMPTS.values() if name not in prompts]
    if absent:
        raise UserError(f"{p}: no judge prompt named {', '.join(absent)} (MT-Bench's single-answer grading uses them)")
    wrong = [
        f"{name} (type {prompts[name].type}, output_format {prompts[name].output_format})"
        for name in SINGLE_PROMPTS.values()
        if prompts[name].type != "single" or prompts[name].output_format != "[[rating]]"
    ]
    if wrong:
        raise UserError(f"{p}: single-answer prompts must be type single with output_format [[rating]]: {wrong}")
    return prompts


def read_reference_answers(path: str | Path) -> dict[str, list[str]]:
    """FastChat's reference_answer/<judge>.jsonl (its model-answer format: question_id, choices[0].turns) ->
    {question_id: turns}; a line that cannot be read is an error naming the file, the line and the field."""
    p = Path(path)
    if not p.is_file():
        raise UserError(f"--judge-reference {p}: no such file (FastChat's data/mt_bench/reference_answer/gpt-4.jsonl)")
    out: dict[str, list[str]] = {}
    for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            turns = row["choices"][0]["turns"]
            qid = row["question_id"]
        except (json.JSONDecodeError, KeyError, IndexError, TypeError):
            raise UserError(
                f"{p} line {n}: needs question_id and choices[0].turns (FastChat's answer format)"
            ) from None
        if not isinstance(turns, list) or not all(isinstance(t, str) for t in turns):
            raise UserError(f"{p} line {n}: choices[0].turns must be a list of texts")
        out[str(qid)] = turns
    return out


def parse_rating(judgment: str) -> int | float:
    """FastChat's rating of a single-answer judgment: [[x]], else [x], as a literal; -1 when there is none."""
    match = ONE_SCORE.search(judgment) or ONE_SCORE_BACKUP.search(judgment)
    if match is None:
        return -1
    value = ast.literal_eval(match.groups()[0])
    return value if isinstance(value, int | float) else -1


@dataclass(frozen=True)
class SingleMatch:
    """One answer's grading: the question, the turn (1 or 2), the prompt used and the rendered user prompt."""

    item: BenchItem
    turn: int
    prompt: JudgePrompt
    user_prompt: str


def single_matches(
    items: Sequence[BenchItem],
    answers: Sequence[Sequence[str]],
    prompts: dict[str, JudgePrompt],
    references: dict[str, list[str]] | None,
) -> list[SingleMatch]:
    """Every (question, turn) FastChat grades, in gen_judgment's order: the first turns of the questions without a
    reference, then of those with one, then the second turns in the same way; a reference-category question
    without a reference answer is an error naming it."""
    out = []
    for turn, ref_based in ((1, False), (1, True), (2, False), (2, True)):
        for item, ans in zip(items, answers, strict=True):
            if (item.category in NEED_REF_CATS) != ref_based or (turn == 2 and len(item.turns) != 2):
                continue
            prompt = prompts[SINGLE_PROMPTS[(ref_based, turn)]]
            kwargs: dict[str, str] = {}
            if ref_based:
                ref = (references or {}).get(item.id)
                if ref is None or len(ref) < turn:
                    raise UserError(
                        f"question {item.id} ({item.category}) is graded against a reference answer: give "
                        "--judge-reference FILE (FastChat's reference_answer/<judge>.jsonl) holding its "
                        f"{'two turns' if turn == 2 else 'first turn'}"
                    )
                kwargs["ref_answer_1"] = ref[0]
                if turn == 2:
                    kwargs["ref_answer_2"] = ref[1]
            if turn == 1:
                user = prompt.prompt_template.format(question=item.turns[0], answer=ans[0], **kwargs)
            else:
                user = prompt.prompt_template.format(
                    question_1=item.turns[0], question_2=item.turns[1], answer_1=ans[0], answer_2=ans[1], **kwargs
                )
            out.append(SingleMatch(item, turn, prompt, user))
    return out


Generate = Callable[[list[list[dict[str, str]]]], list[str]]
"""(conversations: [system, user] message lists) -> the judge's reply to each, greedy."""


def grade(matches: Sequence[SingleMatch], generate: Generate) -> list[tuple[int | float, str]]:
    """Each match's (rating, judgment): the judge asked with the prompt's system message and the user prompt."""
    convs = [
        [{"role": "system", "content": m.prompt.system_prompt}, {"role": "user", "content": m.user_prompt}]
        for m in matches
    ]
    judgments = generate(convs)
    return [(parse_rating(j), j) for j in judgments]


@dataclass
class FastChatJudge:
    """A chat model grading MT-Bench answers with FastChat's prompts (`--judge-prompts`): `model` names it in the
    judgment rows; `generate` decodes its replies greedily."""

    model: str
    prompts: dict[str, JudgePrompt]
    references: dict[str, list[str]] | None
    generate: Generate
    max_new_tokens: int = MAX_NEW_TOKENS
    kind: str = "fastchat"

    @property
    def name(self) -> str:
        return f"fastchat:{self.model}"

    def describe(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "prompts": sorted(set(SINGLE_PROMPTS.values())),
            "reference_answers": len(self.references or {}),
            "decoding": "greedy",
            "max_new_tokens": self.max_new_tokens,
            "reference_code": "lm-sys/FastChat@0e6d3e4b fastchat/llm_judge (run_judge_single)",
        }


__all__ = [
    "MAX_NEW_TOKENS",
    "NEED_REF_CATS",
    "SINGLE_PROMPTS",
    "FastChatJudge",
    "JudgePrompt",
    "SingleMatch",
    "grade",
    "parse_rating",
    "read_judge_prompts",
    "read_reference_answers",
    "single_matches",
]
