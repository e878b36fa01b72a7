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
- pairwise-baseline (`--judge-mode pairwise-baseline --judge-baseline model_answer/<baseline>.jsonl`): the same
  matches against the baseline's answers, with `pair-v2`, `pair-math-v1` and their multi-turn prompts; each match
  judged twice (`play_a_match_pair`: game 1 the model's answer as A, game 2 the baseline's), the template filled
  with question, answer_a, answer_b (turn 2: question_1, question_2, answer_a_1, answer_b_1, answer_a_2,
  answer_b_2); the verdict the first of `[[A]]`, `[[B]]`, `[[C]]` (a tie) in the judgment, else error (or, for an
  `[[rating_a,rating_b]]` prompt, the two ratings, a tie within 0.1); mapped to model_1 / model_2 per game; the
  rows scored by show_result's pairwise rules (`score_from.mtbench_pairwise`).
- the rows written (`policy_bench.native_mtbench`): question_id, model, judge [judge model, prompt name],
  user_prompt, judgment, score, turn, as `play_a_match_single` appends them to `model_judgment/<judge>_single.jsonl`
  (without its wall-clock tstamp, so that a rerun writes the same file; grouped by question, turn 1 then 2, where
  FastChat appends them in the order its threads finish); pairwise, model_judgment_pair.jsonl's rows:
  question_id, model_1, model_2, g1_winner, g2_winner, judge, g1_user_prompt, g1_judgment, g2_user_prompt,
  g2_judgment, turn.
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

PAIR_PROMPTS = {
    (False, 1): "pair-v2",
    (True, 1): "pair-math-v1",
    (False, 2): "pair-v2-multi-turn",
    (True, 2): "pair-math-v1-multi-turn",
}
"""(reference-based, turn) -> the pairwise judge prompt's name (`make_judge_pairwise`)."""
MODES = {
    "single": (SINGLE_PROMPTS, "single", ("[[rating]]",)),
    "pairwise-baseline": (PAIR_PROMPTS, "pairwise", ("[[A]]", "[[rating_a,rating_b]]")),
}
"""gen_judgment's --mode -> (its prompts, their type, the output formats run_judge_single / run_judge_pair read)."""
TIE_DELTA = 0.1
"""Two ratings this close are a tie (`[[rating_a,rating_b]]`)."""
TWO_SCORE = re.compile(r"\[\[(\d+\.?\d*),\s?(\d+\.?\d*)\]\]")
TWO_SCORE_BACKUP = re.compile(r"\[(\d+\.?\d*),\s?(\d+\.?\d*)\]")
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


def read_judge_prompts(path: str | Path, mode: str = "single") -> dict[str, JudgePrompt]:
    """FastChat's judge_prompts.jsonl -> {name: prompt}; a line that cannot be read, or a file without the prompts
    `mode` (single, pairwise-baseline) grades with, is an error naming the file, the line and the field."""
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
    names, kind, formats = MODES[mode]
    absent = [name for name in names.values() if name not in prompts]
    if absent:
        raise UserError(f"{p}: no judge prompt named {', '.join(absent)} (MT-Bench's {mode} grading uses them)")
    wrong = [
        f"{name} (type {prompts[name].type}, output_format {prompts[name].output_format})"
        for name in names.values()
        if prompts[name].type != kind or prompts[name].output_format not in formats
    ]
    if wrong:
        raise UserError(f"{p}: {mode} prompts must be type {kind} with output_format {' or '.join(formats)}: {wrong}")
    return prompts


def read_answers(path: str | Path, flag: str = "--judge-reference") -> dict[str, list[str]]:
    """A file in FastChat's model-answer format (question_id, choices[0].turns: `reference_answer/<judge>.jsonl`,
    `model_answer/<model>.jsonl`) -> {question_id: turns}; a line that cannot be read is an error naming the file,
    the line and the field."""
    p = Path(path)
    if not p.is_file():
        raise UserError(f"{flag} {p}: no such file (FastChat's answer format: question_id, choices[0].turns)")
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


def _literal(text: str) -> int | float | None:
    """A rating as `ast.literal_eval` reads it; None where it cannot (e.g. `05`: FastChat's thread raises there)."""
    try:
        value = ast.literal_eval(text.strip())
    except (ValueError, SyntaxError):
        return None
    return value if isinstance(value, int | float) else None


def parse_rating(judgment: str) -> int | float:
    """FastChat's rating of a single-answer judgment: [[x]], else [x], as a literal; -1 when there is none (or when
    the literal cannot be read, such as a leading zero, where FastChat's judging thread raises instead)."""
    match = ONE_SCORE.search(judgment) or ONE_SCORE_BACKUP.search(judgment)
    value = _literal(match.groups()[0]) if match is not None else None
    return -1 if value is None else value


def parse_pair(judgment: str, output_format: str) -> str:
    """FastChat's verdict of a pairwise judgment: `[[A]]`: A, B or tie ([[C]]) by the first of them found in that
    order, else error; `[[rating_a,rating_b]]`: the two ratings ([[a, b]], else [a, b]), a tie within TIE_DELTA."""
    if output_format == "[[A]]":
        for mark, verdict in (("[[A]]", "A"), ("[[B]]", "B"), ("[[C]]", "tie")):
            if mark in judgment:
                return verdict
        return "error"
    match = TWO_SCORE.search(judgment) or TWO_SCORE_BACKUP.search(judgment)
    a, b = (_literal(x) for x in match.groups()) if match is not None else (None, None)
    if a is None or b is None:
        return "error"
    return "tie" if abs(a - b) <= TIE_DELTA else "A" if a > b else "B"


def _order(items: Sequence[BenchItem]) -> list[tuple[int, int, bool]]:
    """gen_judgment's order of matches as (item index, turn, reference-based): the first turns of the questions
    outside NEED_REF_CATS, then of those in them, then the second turns in the same way (two-turn questions)."""
    return [
        (k, turn, ref_based)
        for turn, ref_based in ((1, False), (1, True), (2, False), (2, True))
        for k, item in enumerate(items)
        if (item.category in NEED_REF_CATS) == ref_based and (turn == 1 or len(item.turns) == 2)
    ]


def _reference(item: BenchItem, turn: int, references: dict[str, list[str]] | None) -> dict[str, str]:
    """ref_answer_1 (and ref_answer_2 at turn 2) of a reference-category question; an error naming it without."""
    ref = (references or {}).get(item.id)
    if ref is None or len(ref) < turn:
        raise UserError(
            f"question {item.id} ({item.category}) is graded against a reference answer: give --judge-reference "
            f"FILE (FastChat's reference_answer/<judge>.jsonl) holding its {'two turns' if turn == 2 else 'first turn'}"
        )
    return {"ref_answer_1": ref[0], **({"ref_answer_2": ref[1]} if turn == 2 else {})}


def _fill(prompt: JudgePrompt, **fields: str) -> str:
    """The prompt's template filled as FastChat fills it (`str.format`); a field the template names that this turn
    does not have is an error naming the prompt and the field."""
    try:
        return prompt.prompt_template.format(**fields)
    except KeyError as e:
        raise UserError(
            f"judge prompt {prompt.name}: its template names {{{e.args[0]}}}, which FastChat does not fill there"
        ) from None


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
    """Every (question, turn) FastChat grades, in gen_judgment's order (`_order`); a reference-category question
    without a reference answer is an error naming it."""
    out = []
    for k, turn, ref_based in _order(items):
        item, ans = items[k], answers[k]
        prompt = prompts[SINGLE_PROMPTS[(ref_based, turn)]]
        ref = _reference(item, turn, references) if ref_based else {}
        if turn == 1:
            user = _fill(prompt, question=item.turns[0], answer=ans[0], **ref)
        else:
            q1, q2 = item.turns
            user = _fill(prompt, question_1=q1, question_2=q2, answer_1=ans[0], answer_2=ans[1], **ref)
        out.append(SingleMatch(item, turn, prompt, user))
    return out


@dataclass(frozen=True)
class PairMatch:
    """One pairwise grading (gen_judgment's pairwise-baseline): game 1 with the model's answer as A, game 2 with the
    baseline's as A (`play_a_match_pair`), each game's rendered user prompt."""

    item: BenchItem
    turn: int
    prompt: JudgePrompt
    user_prompts: tuple[str, str]


def pair_matches(
    items: Sequence[BenchItem],
    answers: Sequence[Sequence[str]],
    baseline: dict[str, list[str]],
    prompts: dict[str, JudgePrompt],
    references: dict[str, list[str]] | None,
) -> list[PairMatch]:
    """Every (question, turn) against the baseline's answer, in gen_judgment's order (`_order`); a question the
    baseline's file does not answer is an error naming it."""
    out = []
    for k, turn, ref_based in _order(items):
        item, ans = items[k], answers[k]
        theirs = baseline.get(item.id)
        if theirs is None or len(theirs) < turn:
            raise UserError(f"question {item.id}: the baseline's answer file (--judge-baseline) has no turn {turn}")
        prompt = prompts[PAIR_PROMPTS[(ref_based, turn)]]
        ref = _reference(item, turn, references) if ref_based else {}
        games = []
        for a, b in ((ans, theirs), (theirs, ans)):
            if turn == 1:
                games.append(_fill(prompt, question=item.turns[0], answer_a=a[0], answer_b=b[0], **ref))
            else:
                q1, q2 = item.turns
                games.append(
                    _fill(
                        prompt,
                        question_1=q1,
                        question_2=q2,
                        answer_a_1=a[0],
                        answer_b_1=b[0],
                        answer_a_2=a[1],
                        answer_b_2=b[1],
                        **ref,
                    )
                )
        out.append(PairMatch(item, turn, prompt, (games[0], games[1])))
    return out


Generate = Callable[[list[list[dict[str, str]]]], list[str]]
"""(conversations: [system, user] message lists) -> the judge's reply to each, greedy."""


def ask(prompt: JudgePrompt, user: str) -> list[dict[str, str]]:
    """The conversation a judge is asked: the prompt's system message, then the user prompt."""
    return [{"role": "system", "content": prompt.system_prompt}, {"role": "user", "content": user}]


def grade(matches: Sequence[SingleMatch], generate: Generate) -> list[tuple[int | float, str]]:
    """Each match's (rating, judgment)."""
    judgments = generate([ask(m.prompt, m.user_prompt) for m in matches])
    return [(parse_rating(j), j) for j in judgments]


GAME_WINNERS = ({"A": "model_1", "B": "model_2"}, {"A": "model_2", "B": "model_1"})
"""`play_a_match_pair`: a game's A/B verdict -> the model it names (game 1 the model as A, game 2 the baseline)."""


def grade_pairs(matches: Sequence[PairMatch], generate: Generate) -> list[tuple[str, str, str, str]]:
    """Each match's (g1_winner, g2_winner, g1 judgment, g2 judgment): model_1, model_2, tie or error, both games of
    every match decoded in one batch."""
    judgments = generate([ask(m.prompt, u) for m in matches for u in m.user_prompts])
    out = []
    for k, m in enumerate(matches):
        j1, j2 = judgments[2 * k], judgments[2 * k + 1]
        v1, v2 = (parse_pair(j, m.prompt.output_format) for j in (j1, j2))
        out.append((GAME_WINNERS[0].get(v1, v1), GAME_WINNERS[1].get(v2, v2), j1, j2))
    return out


@dataclass
class FastChatJudge:
    """A chat model grading MT-Bench answers with FastChat's prompts (`--judge-prompts`): `model` names it in the
    judgment rows; `generate` decodes its replies greedily."""

    model: str
    prompts: dict[str, JudgePrompt]
    references: dict[str, list[str]] | None
    generate: Generate
    max_new_tokens: int = MAX_NEW_TOKENS
    mode: str = "single"
    baseline: str | None = None
    """pairwise-baseline: the baseline model's name (its answer file's stem, as FastChat names it)."""
    baseline_answers: dict[str, list[str]] | None = None
    files: dict[str, str] | None = None
    """The files it was given (prompts, reference and baseline answers) -> the first 16 hex digits of their SHA-256."""
    kind: str = "fastchat"

    @property
    def name(self) -> str:
        """The judge as FastChat's rows name it: the model."""
        return self.model

    def check(self, items: Sequence[BenchItem]) -> None:
        """Every match the set needs can be asked (its prompt's fields, the reference and baseline answers), checked
        before any answer is generated, as FastChat's `check_data` does before it judges."""
        blank = [["", ""] for _ in items]
        if self.mode == "pairwise-baseline":
            pair_matches(items, blank, self.baseline_answers or {}, self.prompts, self.references)
        else:
            single_matches(items, blank, self.prompts, self.references)

    def describe(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "mode": self.mode,
            "prompts": sorted(set(MODES[self.mode][0].values())),
            **({"baseline": self.baseline} if self.baseline else {}),
            "files": self.files or {},
            "reference_answers": len(self.references or {}),
            "decoding": "greedy",
            "max_new_tokens": self.max_new_tokens,
            "reference_code": "lm-sys/FastChat@0e6d3e4b fastchat/llm_judge (run_judge_single, run_judge_pair)",
        }


__all__ = [
    "GAME_WINNERS",
    "MAX_NEW_TOKENS",
    "MODES",
    "PAIR_PROMPTS",
    "PairMatch",
    "ask",
    "grade_pairs",
    "pair_matches",
    "parse_pair",
    "read_answers",
    "NEED_REF_CATS",
    "SINGLE_PROMPTS",
    "FastChatJudge",
    "JudgePrompt",
    "SingleMatch",
    "grade",
    "parse_rating",
    "read_judge_prompts",
    "single_matches",
]
