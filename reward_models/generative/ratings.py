"""RewardBench 2's ratings mode: a generative judge rates each answer alone, 1..10, as the reference runs it.

Reference: allenai/reward-bench @ 05a9005e, `rewardbench/generative_v2.py` (`get_single_rating`,
`_get_vllm_rating`, `run_judge_ratings_multi`) and `scripts/run_generative_v2.py --score_w_ratings` (a local
model through vLLM).

- the prompts: the benchmark's own text, not built in. The user copies the two module constants `ratings_prompt`
  and `ratings_prompt_ties` of the reference's `rewardbench/generative_v2.py` into a file (`prompts=FILE`, read by
  `read_rating_prompts`): a JSON object with those two keys, or the reference's `generative_v2.py` itself, whose
  two string constants are read with `ast` (never imported or run). Each must fill `{prompt}` and `{completion}`
  and nothing else (`str.format`, as the reference fills them).
- which prompt: `ratings_prompt_ties` for the Ties subset (the benchmark's variant "ties", `Benchmark.variant`),
  `ratings_prompt` for everything else.
- the judge message: one user turn, `template.format(prompt=<the first user turn>, completion=<the answer>)`; no
  system prompt; the judge's own chat template with the generation prompt.
- decoding: greedy (temperature 0, top_p 1), one output of at most `max_new_tokens` (2048, the script's
  `SamplingParams`; its API judges get 1024); a prompt that leaves less room in the context generates up to the
  context's end, as vLLM does.
- the rating: `parse_rating` of the output; -1 when it holds none or nothing was generated (a judge prompt that
  alone fills the context). -1 is a score, as in the reference: the best-of-4 credit goes to the answers at the
  highest rating, so a failed chosen answer loses to any rated one and four failures tie four ways (1/4); the Ties
  composite takes the ratings, -1 included.

Not reproduced: the reference renders the chat template to a string that vLLM tokenizes again, adding special
tokens a second time (a doubled BOS under templates that write one); here the template is tokenized once. Its
optional FastChat templates (`--chat_template`) are not offered.

The 4-way mode (`four_way.py`, `rb2_4way`) reads its prompts with the same `read_prompts` and rates the Ties rows with
the same `rate`.
"""

from __future__ import annotations

import ast
import hashlib
import json
import string
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefalign.config import option
from prefalign.errors import UserError
from preference_data.records import Conversation

from ..base import ScorerKind
from .parse import NO_RATING, parse_rating
from .scorers import JudgeSamplingOptions, _GenerativeJudge

PROMPT_NAMES: dict[str | None, str] = {None: "ratings_prompt", "ties": "ratings_prompt_ties"}
"""Benchmark variant -> the reference's constant (and the prompt file's key) that rates its answers."""
REFERENCE_SHA256 = {
    "ratings_prompt": "dd94ed65b24c00d411e65e8a671611ed2cba7154e97ff457b96183112b99ee14",
    "ratings_prompt_ties": "86b62377fd01e9697fd87f04ef6d1163ee694a006b838d532d1866267d9722b4",
}
"""SHA-256 of the constants' UTF-8 text at allenai/reward-bench @ 05a9005e, so a record says whether its prompts are
the reference's (`describe()["prompts_are_reference"]`)."""
REFERENCE = "allenai/reward-bench @ 05a9005efb607249822c193590c8ecab87c77052, rewardbench/generative_v2.py"


@dataclass(frozen=True)
class PromptField:
    """One of the benchmark's prompts that a user's prompt file holds."""

    name: str
    """Its key in a JSON prompt file, and in the reference's generative_v2.py the module constant of that name or
    the key of `in_dict`."""
    placeholders: tuple[str, ...]
    """The fields `str.format` fills, each required and no other allowed; () for a text sent as it is, never
    formatted (a system prompt)."""
    fills: str
    """What the reference fills the placeholders with, for the error message."""
    in_dict: str | None = None
    """The generative_v2.py dict constant that holds it under `name` (MTBENCH_V2), or None for a module constant."""

    @property
    def where(self) -> str:
        """Where generative_v2.py holds it."""
        return self.name if self.in_dict is None else f'{self.in_dict}["{self.name}"]'


RATING_FIELDS: dict[str | None, PromptField] = {
    variant: PromptField(
        name, ("prompt", "completion"), "{prompt} with the first user turn and {completion} with the answer"
    )
    for variant, name in PROMPT_NAMES.items()
}
"""The ratings mode's two prompts, by benchmark variant."""


def _and(items: Sequence[str]) -> str:
    return f"{', '.join(items[:-1])} and {items[-1]}" if len(items) > 1 else "".join(items)


def how_to_copy(fields: Sequence[PromptField]) -> str:
    """How to make a prompt file that holds `fields` (for error messages)."""
    return (
        f"copy the constants {_and([f.where for f in fields])} of {REFERENCE} unchanged into a JSON object with the "
        f"keys {_and([f.name for f in fields])}, or give that generative_v2.py file itself (docs/evaluation.md, "
        "RewardBench 2)"
    )


def _module_constants(path: Path, text: str, fix: str) -> dict[str, Any]:
    """The module-level constants of a Python file that prompts can be: `NAME = "..."` strings, and `NAME = {...}`
    dicts with string keys (their string values, a bare name standing for an earlier string constant, as
    `MTBENCH_V2["system_prompt"]` is `prompt_v2`), read with `ast`, without running the file."""
    try:
        tree = ast.parse(text, filename=str(path))
    except SyntaxError as e:
        raise UserError(f"prompts {path}: not Python ({e.msg}, line {e.lineno}); {fix}") from None
    out: dict[str, Any] = {}
    for node in tree.body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
            continue
        value = node.value
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            out[node.targets[0].id] = value.value
        elif isinstance(value, ast.Dict):
            entries: dict[str, Any] = {}
            for k, v in zip(value.keys, value.values, strict=True):
                if isinstance(k, ast.Constant) and isinstance(k.value, str):
                    if isinstance(v, ast.Constant):
                        entries[k.value] = v.value
                    elif isinstance(v, ast.Name) and isinstance(out.get(v.id), str):
                        entries[k.value] = out[v.id]
            out[node.targets[0].id] = entries
    return out


def _placeholder_problems(field: PromptField, template: str) -> list[str]:
    if not field.placeholders:
        return []  # sent as it is: a brace is just a brace
    try:
        fields = {f for _, f, _, _ in string.Formatter().parse(template) if f is not None}
    except ValueError as e:
        return [f"field '{field.name}' is not a format string ({e}); a literal brace is written {{{{ or }}}}"]
    problems = []
    braced = ["{" + p + "}" for p in field.placeholders]
    missing = [b for p, b in zip(field.placeholders, braced, strict=True) if p not in fields]
    if missing:
        problems.append(
            f"field '{field.name}' has no {', '.join(missing)} placeholder (the reference fills {field.fills})"
        )
    other = sorted(fields - set(field.placeholders))
    if other:
        problems.append(
            f"field '{field.name}' has placeholder(s) {', '.join('{' + f + '}' for f in other)}; only "
            f"{_and(braced)} are filled (a literal brace is written {{{{ or }}}})"
        )
    if not problems:  # the names are right: fill it once, so a bad conversion or spec ({prompt!x}) fails here
        try:
            template.format(**{p: "" for p in field.placeholders})
        except (ValueError, KeyError, IndexError, AttributeError) as e:
            problems.append(
                f"field '{field.name}' cannot be filled ({e}); write each placeholder plainly, e.g. {braced[0]}"
            )
    return problems


def read_prompts(path: str | Path, fields: Sequence[PromptField]) -> dict[str, str]:
    """The benchmark's prompts in a user's file -> {field name: text}. The file is a JSON object with the fields'
    names as keys, or (a `.py` file) the reference's `generative_v2.py`, whose constants are read as text (`ast`;
    never imported or run). Every problem (no file, a missing or non-text field, a missing or unknown placeholder)
    is reported at once, naming the file and the field, with how to fix it."""
    p = Path(path)
    fix = how_to_copy(fields)
    if not p.is_file():
        raise UserError(f"prompts {p}: no such file; {fix}")
    text = p.read_text(encoding="utf-8")
    found: dict[str, Any]
    if p.suffix == ".py":
        constants = _module_constants(p, text, fix)
        found = {}
        for f in fields:
            holder = constants if f.in_dict is None else constants.get(f.in_dict)
            found[f.name] = holder.get(f.name) if isinstance(holder, dict) else None
    else:
        try:
            found = json.loads(text)
        except json.JSONDecodeError as e:
            raise UserError(f"prompts {p}: not JSON ({e.msg}, line {e.lineno}); {fix}") from None
        if not isinstance(found, dict):
            raise UserError(f"prompts {p}: a JSON object is needed, got {type(found).__name__}; {fix}")
    problems = []
    out: dict[str, str] = {}
    for f in fields:
        value = found.get(f.name)
        if not isinstance(value, str):
            where = f" ({f.where} of generative_v2.py)" if p.suffix == ".py" and f.in_dict else ""
            problems.append(f"field '{f.name}'{where} is {'missing' if value is None else 'not text'}")
            continue
        problems += _placeholder_problems(f, value)
        out[f.name] = value
    if problems:
        raise UserError(f"prompts {p}: " + "; ".join(problems) + f". How to fix: {fix}")
    return out


def read_rating_prompts(path: str | Path) -> dict[str, str]:
    """The ratings mode's two prompts of a user's file -> {constant name: template} (`read_prompts`): a JSON object
    with the keys `ratings_prompt` and `ratings_prompt_ties`, or the reference's `generative_v2.py`."""
    return read_prompts(path, list(RATING_FIELDS.values()))


@dataclass
class RB2JudgeOptions(JudgeSamplingOptions):
    """A RewardBench 2 judge's settings: the reference's decoding (greedy, 2048 new tokens) and the benchmark's
    prompts from a user's file, checked against `prompt_fields` before any model loads."""

    prompts: str | None = option(None, "the benchmark's prompts: a JSON file or the reference's generative_v2.py")
    temperature: float = option(0.0, "sampling temperature of the judge (the reference: 0, greedy)")
    top_p: float = option(1.0, "nucleus sampling mass (the reference: 1, off)")
    max_new_tokens: int = option(2048, "longest judgement in tokens (the reference's vLLM judges: 2048)")

    def prompt_fields(self) -> Sequence[PromptField]:
        """The prompts this judge reads from the file."""
        raise NotImplementedError

    def check(self) -> list[str]:
        problems = super().check()
        if self.prompts is None:
            problems.append(
                "prompts: required (--option prompts=FILE), the file with the benchmark's prompts; "
                + how_to_copy(self.prompt_fields())
            )
        else:
            try:
                read_prompts(self.prompts, self.prompt_fields())
            except UserError as e:
                problems.append(str(e))
        return problems


@dataclass
class RB2RateOptions(RB2JudgeOptions):
    prompts: str | None = option(
        None,
        "the benchmark's two rating prompts: a JSON file {ratings_prompt, ratings_prompt_ties} copied from "
        "allenai/reward-bench @ 05a9005e rewardbench/generative_v2.py, or that file itself (required)",
    )

    def prompt_fields(self) -> Sequence[PromptField]:
        return list(RATING_FIELDS.values())


def _first(conv: Conversation, role: str) -> str:
    """The first `role` message's text ("" when there is none), as the reference reads the first user turn and the
    answer's first assistant message."""
    return next((m.content for m in conv if m.role == role), "")


def rating_message(template: str, prompt: Conversation, response: Conversation) -> str:
    """The judge's one user turn that rates an answer: `template` with {prompt} (the first user turn) and
    {completion} (the answer's first assistant message) filled, as `get_single_rating` fills them."""
    return template.format(prompt=_first(prompt, "user"), completion=_first(response, "assistant"))


def rate(
    judge: _GenerativeJudge, messages: list[str | None], items: int | None = None
) -> list[tuple[float, str | None]]:
    """Each rating message generated once (greedy with the reference's settings; up to the context's end where
    `max_new_tokens` does not fit) -> (its 1..10 rating or -1.0, the raw output or None when nothing was generated).
    A failed rating counts by reason in `judge.abstentions`: `no_rating` for an output without one, `not_generated`
    for no output. `items`: how many scored items the messages stand for (`_sample`)."""
    outputs = judge._sample(messages, 1, items=items, fit_to_context=True)
    out = []
    for o in outputs:
        text = o[0] if o else None
        rating = parse_rating(text)
        if rating == NO_RATING:
            judge.abstentions["no_rating" if text is not None else "not_generated"] += 1
        out.append((float(rating), text))
    return out


class RB2RateScorer(_GenerativeJudge):
    """Pointwise: RewardBench 2's 1..10 rating of one answer, -1 when the judge gives none (module docstring)."""

    kind: ScorerKind = "pointwise"
    name = "rb2_rate"
    variants = ("ties",)
    """Benchmark variants rated with their own prompt: RewardBench 2's Ties rows (`Benchmark.variant`)."""

    def __init__(self, opts: RB2RateOptions) -> None:
        assert opts.prompts is not None  # check() requires it
        self.templates = read_rating_prompts(opts.prompts)
        super().__init__(opts)
        self.last_messages: list[str | None] = []
        self.last_outputs: list[str | None] = []
        """The last call's judge messages and raw outputs (None: nothing generated), per item."""

    def message(self, prompt: Conversation, response: Conversation, variant: str | None = None) -> str:
        """The judge's one user turn for an answer: the variant's prompt with {prompt} and {completion} filled."""
        if variant not in PROMPT_NAMES:
            raise UserError(f"rb2_rate: no rating prompt for variant {variant!r}; it rates {list(PROMPT_NAMES)}")
        return rating_message(self.templates[PROMPT_NAMES[variant]], prompt, response)

    def score(
        self,
        prompts: list[Conversation],
        responses: list[Conversation],
        variants: list[str | None] | None = None,
    ) -> list[float]:
        """The ratings 1..10 of each answer, -1.0 where none could be read (`rate`)."""
        variants = variants or [None] * len(prompts)
        messages: list[str | None] = [
            self.message(p, r, v) for p, r, v in zip(prompts, responses, variants, strict=True)
        ]
        rated = rate(self, messages)
        self.last_messages = messages
        self.last_outputs = [text for _, text in rated]
        return [rating for rating, _ in rated]

    def describe(self) -> dict[str, Any]:
        sha = {k: hashlib.sha256(v.encode("utf-8")).hexdigest() for k, v in self.templates.items()}
        return self._describe() | {
            "prompts_sha256": sha,
            "prompts_are_reference": sha == REFERENCE_SHA256,
            "rating": "parse_rating: a final 1..10, else -1",
        }


__all__ = [
    "PROMPT_NAMES",
    "RATING_FIELDS",
    "PromptField",
    "RB2RateOptions",
    "RB2RateScorer",
    "rate",
    "rating_message",
    "read_prompts",
    "read_rating_prompts",
]
