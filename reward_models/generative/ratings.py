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
"""

from __future__ import annotations

import ast
import hashlib
import json
import string
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
PLACEHOLDERS = ("prompt", "completion")
"""The fields each prompt fills: the first user turn and the answer rated."""
REFERENCE_SHA256 = {
    "ratings_prompt": "dd94ed65b24c00d411e65e8a671611ed2cba7154e97ff457b96183112b99ee14",
    "ratings_prompt_ties": "86b62377fd01e9697fd87f04ef6d1163ee694a006b838d532d1866267d9722b4",
}
"""SHA-256 of the constants' UTF-8 text at allenai/reward-bench @ 05a9005e, so a record says whether its prompts are
the reference's (`describe()["prompts_are_reference"]`)."""
REFERENCE = "allenai/reward-bench @ 05a9005efb607249822c193590c8ecab87c77052, rewardbench/generative_v2.py"
HOW_TO_COPY = (
    f"copy the constants {' and '.join(PROMPT_NAMES.values())} of {REFERENCE} unchanged into a JSON object with "
    "those two keys, or give that generative_v2.py file itself (docs/evaluation.md, RewardBench 2)"
)


def _module_strings(path: Path, text: str) -> dict[str, Any]:
    """The module-level `NAME = "..."` string constants of a Python file, read without running it."""
    try:
        tree = ast.parse(text, filename=str(path))
    except SyntaxError as e:
        raise UserError(f"prompts {path}: not Python ({e.msg}, line {e.lineno}); {HOW_TO_COPY}") from None
    out: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
                out[node.targets[0].id] = node.value.value
    return out


def _placeholder_problems(name: str, template: str) -> list[str]:
    try:
        fields = {f for _, f, _, _ in string.Formatter().parse(template) if f is not None}
    except ValueError as e:
        return [f"field '{name}' is not a format string ({e}); a literal brace is written {{{{ or }}}}"]
    problems = []
    missing = [p for p in PLACEHOLDERS if p not in fields]
    if missing:
        problems.append(
            f"field '{name}' has no {', '.join('{' + p + '}' for p in missing)} placeholder (the reference fills "
            "{prompt} with the first user turn and {completion} with the answer)"
        )
    other = sorted(fields - set(PLACEHOLDERS))
    if other:
        problems.append(
            f"field '{name}' has placeholder(s) {', '.join('{' + f + '}' for f in other)}; only {{prompt}} and "
            "{completion} are filled (a literal brace is written {{ or }})"
        )
    return problems


def read_rating_prompts(path: str | Path) -> dict[str, str]:
    """The two rating prompts of a user's file -> {constant name: template}. The file is a JSON object with the keys
    `ratings_prompt` and `ratings_prompt_ties`, or (a `.py` file) the reference's `generative_v2.py`; every problem
    (no file, a missing or non-text key, a missing or unknown placeholder) is reported at once, naming the file and
    the field, with how to fix it."""
    p = Path(path)
    if not p.is_file():
        raise UserError(f"prompts {p}: no such file; {HOW_TO_COPY}")
    text = p.read_text(encoding="utf-8")
    data: Any
    if p.suffix == ".py":
        data = _module_strings(p, text)
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise UserError(f"prompts {p}: not JSON ({e.msg}, line {e.lineno}); {HOW_TO_COPY}") from None
        if not isinstance(data, dict):
            raise UserError(f"prompts {p}: a JSON object is needed, got {type(data).__name__}; {HOW_TO_COPY}")
    problems = []
    out: dict[str, str] = {}
    for name in PROMPT_NAMES.values():
        value = data.get(name)
        if not isinstance(value, str):
            problems.append(f"field '{name}' is {'missing' if value is None else 'not text'}")
            continue
        problems += _placeholder_problems(name, value)
        out[name] = value
    if problems:
        raise UserError(f"prompts {p}: " + "; ".join(problems) + f". How to fix: {HOW_TO_COPY}")
    return out


@dataclass
class RB2RateOptions(JudgeSamplingOptions):
    prompts: str | None = option(
        None,
        "the benchmark's two rating prompts: a JSON file {ratings_prompt, ratings_prompt_ties} copied from "
        "allenai/reward-bench @ 05a9005e rewardbench/generative_v2.py, or that file itself (required)",
    )
    temperature: float = option(0.0, "sampling temperature of the judge (the reference: 0, greedy)")
    top_p: float = option(1.0, "nucleus sampling mass (the reference: 1, off)")
    max_new_tokens: int = option(2048, "longest judgement in tokens (the reference's vLLM judges: 2048)")

    def check(self) -> list[str]:
        problems = super().check()
        if self.prompts is None:
            problems.append(
                "prompts: required (--option prompts=FILE), the file with the benchmark's rating prompts; "
                + HOW_TO_COPY
            )
        else:
            try:
                read_rating_prompts(self.prompts)
            except UserError as e:
                problems.append(str(e))
        return problems


def _first(conv: Conversation, role: str) -> str:
    """The first `role` message's text ("" when there is none), as the reference reads the first user turn and the
    answer's first assistant message."""
    return next((m.content for m in conv if m.role == role), "")


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
        template = self.templates[PROMPT_NAMES[variant]]
        return template.format(prompt=_first(prompt, "user"), completion=_first(response, "assistant"))

    def score(
        self,
        prompts: list[Conversation],
        responses: list[Conversation],
        variants: list[str | None] | None = None,
    ) -> list[float]:
        """The ratings 1..10 of each answer, -1.0 where none could be read (a failed rating counts by reason in
        `abstentions`: `no_rating` for an output without one, `not_generated` for no output)."""
        variants = variants or [None] * len(prompts)
        messages: list[str | None] = [
            self.message(p, r, v) for p, r, v in zip(prompts, responses, variants, strict=True)
        ]
        outputs = self._sample(messages, 1, fit_to_context=True)
        self.last_messages = messages
        self.last_outputs = [o[0] if o else None for o in outputs]
        out = []
        for text in self.last_outputs:
            rating = parse_rating(text)
            if rating == NO_RATING:
                self.abstentions["no_rating" if text is not None else "not_generated"] += 1
            out.append(float(rating))
        return out

    def describe(self) -> dict[str, Any]:
        sha = {k: hashlib.sha256(v.encode("utf-8")).hexdigest() for k, v in self.templates.items()}
        return self._describe() | {
            "prompts_sha256": sha,
            "prompts_are_reference": sha == REFERENCE_SHA256,
            "rating": "parse_rating: a final 1..10, else -1",
        }


__all__ = ["PROMPT_NAMES", "RB2RateOptions", "RB2RateScorer", "read_rating_prompts"]
