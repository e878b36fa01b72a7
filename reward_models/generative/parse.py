"""Readers of generative judges' text: they never raise, and what they cannot read is an abstention with a reason.

A judge's output is untrusted text (a sampled model, possibly steered by the responses it judges). Each reader
returns a small result whose value is None when the text does not hold one clear verdict, with `reason` naming why,
so callers count abstentions instead of scoring them as a silent zero or a silent tie.

- `parse_grm_scores(text, n)`: the pointwise generative RM (DeepSeek-GRM / SPCT). The verdict is the *last*
  `\\boxed{...}` (one or two backslashes; `\\boxed[...]` too) holding exactly `n` comma-separated numbers, one per
  response in order. Scores are meant to be integers 1..10: a score outside [1, 10] abstains by default
  (`out_of_range="clip"` clips instead, as some reimplementations do); a non-finite or non-numeric one abstains.
- `parse_think_answer(text, form)`: the pairwise thinking judge (Think-RM). The verdict is the last
  `<answer>...</answer>` block. `binary`: its content must be the letter A or B (optionally "Assistant A",
  "Response B", "[[A]]", "(B)", a final period); `multiclass`: one of -3, -2, -1, 1, 2, 3 (negative: A is better;
  |s| 3/2/1 = much better / better / slightly better). A block with anything else ("A or B", "Both", "13") abstains:
  the reference's "last A/B character in the block" reading would take the B of "Both".
- `parse_pair_pm(text)`: the pairwise preference model's generated answer: the text, stripped, must be A or B.
- `parse_rating(text)`: RewardBench 2's ratings mode: an integer 1..10 ending the text, else -1 (the reference's
  failed rating, which is a score there, not an abstention; see its docstring).
- `parse_four_way(text)`: RewardBench 2's 4-way mode: the letter A..D of the first of `[[A]]`, `[[B]]`, `[[C]]`,
  `[[D]]` the text contains, checked in that order, else None (the reference's "error", credited 1/4 there).

Reasons: empty, no_box, unclosed_box, count_mismatch (the box holds another number of scores), not_a_number,
out_of_range, no_answer_tag, unclosed_answer_tag, ambiguous_answer. Readers look at bounded windows of the text
(from the last marker), so 100 kB of output costs one reverse scan.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Literal

MAX_BOX_CHARS = 200  # a verdict box longer than this is not a list of n <= 16 scores


@dataclass(frozen=True)
class GRMParse:
    scores: tuple[float, ...] | None  # one per response, in order; None = abstained
    reason: str = "ok"
    boxes: int = 0  # verdict boxes seen (the last one is read)

    @property
    def ok(self) -> bool:
        return self.scores is not None


@dataclass(frozen=True)
class PairParse:
    label: Literal["A", "B"] | None  # the preferred response; None = abstained
    strength: int | None = None  # multiclass only: -3..3 without 0 (negative = A better)
    reason: str = "ok"

    @property
    def ok(self) -> bool:
        return self.label is not None


_BOX = re.compile(r"\\{1,2}boxed\s*([\{\[])")
_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)")


def box_opened_at(text: str) -> int | None:
    """Where the last verdict box's content starts in `text` (just after `\\boxed{`), None without one."""
    starts = list(_BOX.finditer(text))
    return starts[-1].end() if starts else None


def parse_grm_scores(
    text: object, n: int, low: float = 1.0, high: float = 10.0, out_of_range: Literal["abstain", "clip"] = "abstain"
) -> GRMParse:
    """The n scores of the last verdict box in `text` (see the module docstring); never raises."""
    if not isinstance(text, str) or not text.strip():
        return GRMParse(None, "empty")
    if n < 1:
        return GRMParse(None, "count_mismatch")
    starts = list(_BOX.finditer(text))
    if not starts:
        return GRMParse(None, "no_box")
    last = starts[-1]
    close = "}" if last.group(1) == "{" else "]"
    end = text.find(close, last.end(), last.end() + MAX_BOX_CHARS)
    if end < 0:
        return GRMParse(None, "unclosed_box", len(starts))
    parts = [p.strip() for p in text[last.end() : end].split(",")]
    if len(parts) != n:
        return GRMParse(None, "count_mismatch", len(starts))
    scores = []
    for p in parts:
        p = p.removeprefix("$").removesuffix("$").strip()
        if not _NUMBER.fullmatch(p):
            return GRMParse(None, "not_a_number", len(starts))
        v = float(p)
        if not math.isfinite(v):
            return GRMParse(None, "not_a_number", len(starts))
        if not low <= v <= high:
            if out_of_range != "clip":
                return GRMParse(None, "out_of_range", len(starts))
            v = min(max(v, low), high)
        scores.append(v)
    return GRMParse(tuple(scores), "ok", len(starts))


_ANSWER_OPEN = "<answer>"
_ANSWER_CLOSE = "</answer>"
_LETTER = re.compile(r"(?:(?:assistant|response|model|output)\s*)?[\[\(]*\s*([AB])\s*[\]\)]*\.?", re.IGNORECASE)
_STRENGTH = re.compile(r"[\[\(]*\s*([+-]?[123])\s*[\]\)]*\.?")


def _letter(content: str) -> Literal["A", "B"] | None:
    m = _LETTER.fullmatch(content.strip())
    if m is None or m.group(1) not in ("A", "B"):  # a lower-case "a" is an article, not a verdict
        return None
    return "A" if m.group(1) == "A" else "B"


def parse_think_answer(text: object, form: Literal["binary", "multiclass"] = "binary") -> PairParse:
    """The verdict of the last `<answer>...</answer>` block of `text` (see the module docstring); never raises."""
    if not isinstance(text, str) or not text.strip():
        return PairParse(None, None, "empty")
    lower = text.lower()
    start = lower.rfind(_ANSWER_OPEN)
    if start < 0:
        return PairParse(None, None, "no_answer_tag")
    end = lower.find(_ANSWER_CLOSE, start)
    if end < 0:
        return PairParse(None, None, "unclosed_answer_tag")
    content = text[start + len(_ANSWER_OPEN) : end]
    if len(content) > MAX_BOX_CHARS:
        return PairParse(None, None, "ambiguous_answer")
    if form == "binary":
        label = _letter(content)
        return PairParse(label, None, "ok") if label else PairParse(None, None, "ambiguous_answer")
    m = _STRENGTH.fullmatch(content.strip())
    if m is None:
        return PairParse(None, None, "ambiguous_answer")
    s = int(m.group(1))
    return PairParse("A" if s < 0 else "B", s, "ok")


def parse_pair_pm(text: object) -> PairParse:
    """A pairwise preference model's generated verdict: exactly A or B; never raises."""
    if not isinstance(text, str) or not text.strip():
        return PairParse(None, None, "empty")
    if len(text) > MAX_BOX_CHARS:
        return PairParse(None, None, "ambiguous_answer")
    label = _letter(text)
    return PairParse(label, None, "ok") if label else PairParse(None, None, "ambiguous_answer")


_FINAL_RATING = re.compile(r"\b([1-9]|10)\b\s*$")
NO_RATING = -1
"""RewardBench 2's failed rating: a real score of -1, below every valid one (1..10)."""


def parse_rating(text: object) -> int:
    """The 1..10 rating that ends a judge's output, or -1 (`NO_RATING`); never raises.

    RewardBench 2's ratings mode, allenai/reward-bench @ 05a9005e `rewardbench/generative_v2.py`
    `get_single_rating`: the pattern `\\b([1-9]|10)\\b\\s*$` searched in the stripped text, its group read as an
    int and kept if in 1..10. So the number must be the last thing written, as a whole word: "... 9" -> 9,
    "9/10" -> 10 (the final "10"), "8.5" -> 5, while "**7**", "7.", "0", "11" and a number followed by more text
    are -1, as is an empty or missing output.
    """
    if not isinstance(text, str):
        return NO_RATING
    m = _FINAL_RATING.search(text.strip())
    if m is None:
        return NO_RATING
    rating = int(m.group(1))
    return rating if 1 <= rating <= 10 else NO_RATING


FOUR_WAY_LETTERS = "ABCD"
"""The answers' letters in RewardBench 2's 4-way prompt, in the order shown."""


def parse_four_way(text: object) -> str | None:
    """The letter (A..D) a RewardBench 2 4-way judge names, or None (the reference's "error"); never raises.

    allenai/reward-bench @ 05a9005e `rewardbench/generative_v2.py` `process_judgement` (lines 174-184): whether the
    text *contains* "[[A]]", then "[[B]]", "[[C]]", "[[D]]", the first found winning. So the letter checked first
    wins, not the verdict written first or last ("[[C]] ... [[A]]" -> A), the match is exact ("[[a]]", "[[ A ]]",
    "[A]" -> None), and an empty or missing output is None.
    """
    if not isinstance(text, str):
        return None
    return next((letter for letter in FOUR_WAY_LETTERS if f"[[{letter}]]" in text), None)
