"""The `polar` scorer: a POLAR reward model scoring each response against a reference answer (kind "reference").

    scorer = load_scorer("polar", model="runs/polar_finetune_suite/model")
    scorer.score_with_reference(prompts, responses, references)      # one float per response

The input is built exactly as in training (`format.encode`, with the token budgets the model saved in
polar.json unless `max_length` overrides the whole budget), batched and packed like every model scorer
(`reward_models.batched`), and the score head is read at the closing `<|reward_end|>` token.
An item whose reference is over `max_response_length` tokens, or whose response is empty, scores NaN and is
counted in `failures` (the benchmark runner reports NaNs). A call without references is an error that says what
to pass: references are not optional for a discriminator that only knows "how close to the reference".
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from prefalign.config import build
from prefalign.errors import UserError
from prefalign.models.hub import resolve
from preference_data.records import Conversation, Message

from ..base import ScorerKind
from ..batched import Item, RewardHeadModel
from ..options import _is_empty
from .format import POLAR_FILE, InputSection, TooLong, encode, polar_token_ids
from .options import PolarOptions

NO_REFERENCE = (
    "the polar scorer scores a response against a reference answer: call "
    "score_with_reference(prompts, responses, references) with one reference (a conversation, or a string) per "
    "response, or build the scorer with references: suite to look up the suite task's reference by prompt"
)


class PolarScorer(RewardHeadModel):
    kind: ScorerKind = "reference"
    name = "polar"
    opts: PolarOptions

    def __init__(self, opts: PolarOptions) -> None:
        super().__init__(opts)
        opts = self.opts  # with the resolved dtype
        meta_file = Path(resolve(opts.model)) / POLAR_FILE
        meta = json.loads(meta_file.read_text(encoding="utf-8")) if meta_file.exists() else {}
        fmt = dict(meta.get("input") or {})
        if opts.max_length is not None:
            fmt["max_length"] = opts.max_length
            fmt["max_response_length"] = min(
                int(fmt.get("max_response_length", InputSection.max_response_length)), (opts.max_length - 6) // 2
            )
        self.input: InputSection = build(InputSection, fmt, f"{meta_file} input")
        self.max_length = self.input.max_length
        self._suite_refs: dict[tuple[tuple[str, str], ...], str] | None = None
        self.truncated = 0  # items whose prompt or candidate was cut to fit

    def _check_model(self, opts: PolarOptions, model: Any, tokenizer: Any) -> None:
        polar_token_ids(tokenizer)  # a model without the POLAR tokens is refused here, with how to train one

    def _encode_polar(self, prompt: Conversation, response: Conversation, reference: Conversation) -> Item | None:
        if _is_empty(response):
            self._fail("empty_response")
            return None
        try:
            (enc,) = encode(self.tokenizer, prompt, reference, [response], self.input)
        except TooLong as e:
            self._fail(
                "too_long_reference", f"{e.args[0]} tokens > max_response_length {self.input.max_response_length}"
            )
            return None
        self.truncated += enc.truncated  # POLAR's own rule (prompt from the left, long candidate cut), not a failure
        return enc.prefix_ids, enc.candidate_ids

    def _references(self, prompts: list[Conversation], references: list[Any] | None) -> list[Conversation]:
        if references is None:
            if self.opts.references != "suite":
                raise UserError(NO_REFERENCE)
            return [self._suite_reference(p) for p in prompts]
        if len(references) != len(prompts):
            raise UserError(f"got {len(references)} references for {len(prompts)} responses; {NO_REFERENCE}")
        out = []
        for i, r in enumerate(references):
            if r is None or (isinstance(r, str) and not r.strip()) or (isinstance(r, list) and _is_empty(r)):
                raise UserError(f"reference {i} is missing or empty; {NO_REFERENCE}")
            out.append([Message("assistant", r)] if isinstance(r, str) else list(r))
        return out

    def _suite_reference(self, prompt: Conversation) -> Conversation:
        from preference_data.suite import FAMILIES, generate_tasks  # lazy: the suite (0.16 s), references: suite

        if self._suite_refs is None:
            self._suite_refs = {}
            for family in FAMILIES:
                for t in generate_tasks(family, self.opts.suite_per_family, self.opts.suite_seed):
                    self._suite_refs.setdefault(tuple((m.role, m.content) for m in t.prompt), t.reference)
        ref = self._suite_refs.get(tuple((m.role, m.content) for m in prompt))
        if ref is None:
            raise UserError(
                "references: suite, but a prompt is not a suite task (seed "
                f"{self.opts.suite_seed}, {self.opts.suite_per_family} per family); pass its reference with "
                "score_with_reference(prompts, responses, references)"
            )
        return [Message("assistant", ref)]

    def score_with_reference(
        self, prompts: list[Conversation], responses: list[Conversation], references: list[Any] | None = None
    ) -> list[float]:
        refs = self._references(prompts, references)
        items = [self._encode_polar(p, r, ref) for p, r, ref in zip(prompts, responses, refs, strict=True)]
        return self._head_scores(items)  # read at <|reward_end|>, each sequence's last token

    def score(self, prompts: list[Conversation], responses: list[Conversation]) -> list[float]:
        """Only with `references: suite` (the reference is looked up by prompt); otherwise an error saying what
        to pass."""
        return self.score_with_reference(prompts, responses, None)

    def describe(self) -> dict[str, Any]:
        return self._describe_head() | {
            "input": dataclasses.asdict(self.input),
            "references": self.opts.references,
        }
