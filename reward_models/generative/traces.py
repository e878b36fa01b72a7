"""A stronger judge's outputs as warm-up examples (`judge.examples: traces`), for data without a generator.

Think-RM and DeepSeek-GRM warm a small judge up on the reasoning of a stronger one before any sampling. For the
verifiable suite that reasoning is written from the task (`warmup.py`); for a user's own pairs it comes from a file,
one JSON object per line:

- thinking judge (`judge.kind: think`):
  `{"prompt": ..., "response_a": "...", "response_b": "...", "reasoning": "...", "verdict": "A"}`; with
  `judge.form: multiclass` the verdict is a strength -3..3 without 0 (negative: A better). The judge learns to
  write `<think>\\n{reasoning}\\n</think>\\n<answer>{verdict}</answer>` after the Think-RM message of (prompt,
  response_a, response_b). The positions are the file's: to balance them, give each pair in both orders.
- generative RM (`judge.kind: grm`): `{"prompt": ..., "response": "...", "critique": "...", "score": 7}`, the
  score an integer 1..10; the judge learns `{critique}\\nScore: \\\\boxed{score}` (a critique that already ends in
  its boxed score is kept as written).

`prompt` is a string (one user turn) or a list of `{"role", "content"}` messages. Every row is checked; the
problems of a file are reported together with their line numbers and nothing is trained on a file that has any.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prefalign.errors import UserError
from preference_data.records import Conversation, Message, conversation, stable_id

from .parse import parse_grm_scores, parse_think_answer
from .scorers import THINK_PREFIX, GRMScorer, ThinkJudgeScorer
from .training import SFTExample

MAX_LISTED = 20  # problems listed in an error; the rest are counted


def _prompt(value: Any) -> Conversation | None:
    if isinstance(value, str) and value.strip():
        return [Message("user", value)]
    if isinstance(value, list) and value and all(isinstance(m, dict) and {"role", "content"} <= set(m) for m in value):
        return conversation(value)
    return None


def _text(row: dict[str, Any], key: str, problems: list[str]) -> str:
    v = row.get(key)
    if not isinstance(v, str) or not v.strip():
        problems.append(f"`{key}` must be a non-empty string, got {json.dumps(v)[:60]}")
        return ""
    return v


def _think_row(row: dict[str, Any], form: str) -> tuple[str, str, list[str]]:
    problems: list[str] = []
    prompt = _prompt(row.get("prompt"))
    if prompt is None:
        problems.append("`prompt` must be a string or a list of {role, content} messages")
    a, b, reasoning = (_text(row, k, problems) for k in ("response_a", "response_b", "reasoning"))
    verdict = str(row.get("verdict", "")).strip()
    if parse_think_answer(f"<answer>{verdict}</answer>", form).label is None:  # type: ignore[arg-type]
        want = "A or B" if form == "binary" else "one of -3, -2, -1, 1, 2, 3"
        problems.append(f"`verdict` must be {want} (judge.form: {form}), got {json.dumps(row.get('verdict'))}")
    if problems or prompt is None:
        return "", "", problems
    message = ThinkJudgeScorer.message(prompt, [Message("assistant", a)], [Message("assistant", b)], form)
    body = reasoning.strip().removeprefix("<think>").removesuffix("</think>").strip()
    return message, f"{THINK_PREFIX}{body}\n</think>\n<answer>{verdict}</answer>", []


def _grm_row(row: dict[str, Any], form: str) -> tuple[str, str, list[str]]:
    problems: list[str] = []
    prompt = _prompt(row.get("prompt"))
    if prompt is None:
        problems.append("`prompt` must be a string or a list of {role, content} messages")
    response, critique = _text(row, "response", problems), _text(row, "critique", problems)
    score = row.get("score")
    if not isinstance(score, int) or isinstance(score, bool) or not 1 <= score <= 10:
        problems.append(f"`score` must be an integer 1..10, got {json.dumps(score)}")
    if problems or prompt is None:
        return "", "", problems
    body = critique.strip()
    boxed = parse_grm_scores(body, 1)
    if boxed.ok and boxed.scores != (float(score),):  # type: ignore[arg-type]  # an int 1..10, checked above
        return "", "", [f"the critique's own boxed score {boxed.scores[0]:g} differs from `score` {score}"]  # type: ignore[index]
    completion = body if boxed.ok else f"{body}\nScore: \\boxed{{{score}}}"
    return GRMScorer.message(prompt, [Message("assistant", response)]), completion, []


ROW_READERS: dict[str, Callable[[dict[str, Any], str], tuple[str, str, list[str]]]] = {
    "think": _think_row,
    "grm": _grm_row,
}


def trace_examples(path: str, judge: Any) -> tuple[list[SFTExample], dict[str, int]]:
    """The examples of a traces file for `judge` (a `JudgeSection`: kind think or grm, and form)."""
    if judge.kind not in ROW_READERS:
        raise UserError(f"judge.examples: traces is for think and grm judges, not {judge.kind}")
    file = Path(path)
    if not file.is_file():
        raise UserError(f"judge.traces: {path} is not a file (a JSONL of a stronger judge's outputs)")
    reader = ROW_READERS[judge.kind]
    out: list[SFTExample] = []
    problems: list[str] = []
    with file.open(encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                problems.append(f"{path}:{line_no}: not JSON ({e.msg})")
                continue
            if not isinstance(row, dict):
                problems.append(f"{path}:{line_no}: a row must be a JSON object")
                continue
            message, completion, row_problems = reader(row, judge.form)
            problems += [f"{path}:{line_no}: {p}" for p in row_problems]
            if not row_problems:
                out.append(SFTExample(stable_id("trace", message, completion), message, completion))
    if problems:
        listed = "\n  ".join(problems[:MAX_LISTED])
        more = f"\n  ... and {len(problems) - MAX_LISTED} more" if len(problems) > MAX_LISTED else ""
        raise UserError(
            f"judge.traces: {len(problems)} problem(s) in {path}; nothing was trained:\n  {listed}{more}\n"
            "The row formats are in docs/reward-models.md (judge warm-up from a stronger judge's traces)."
        )
    if not out:
        raise UserError(f"judge.traces: {path} holds no rows")
    return out, {"rows": len(out)}


__all__ = ["ROW_READERS", "trace_examples"]
