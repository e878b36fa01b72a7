"""Reading free-form answers the way a small chat model writes them.

Every gold grader reads responses through these helpers, so they are forgiving about style and
strict about substance: markdown emphasis, lead-in sentences ("Sure! Here is ..."), trailing
remarks, units after numbers ("42 apples") and curly quotes are all accepted; what is checked is
the final number, the list of items, the bullet count, the JSON keys, the case of the letters.
"""

from __future__ import annotations

import json
import re
from typing import Any

# --------------------------------------------------------------------------------------- basics

_WORD_RE = re.compile(r"[A-Za-z0-9]+(?:['’][A-Za-z]+)*")
_EMPHASIS_RE = re.compile(r"\*\*|__|`+|^\s*#+\s*", re.M)


def normalize(text: str) -> str:
    """Straight quotes and a plain minus sign, so patterns need to handle one spelling only."""
    return (text.replace("\u2019", "'").replace("\u2018", "'").replace("\u201c", '"')
            .replace("\u201d", '"').replace("\u2212", "-").replace("\u2013", "-"))


def plain(text: str) -> str:
    """`normalize` plus markdown emphasis (`**`, `__`, backticks, heading marks) removed."""
    return _EMPHASIS_RE.sub("", normalize(text))


def word_count(text: str) -> int:
    """Number of words: runs of letters/digits (with inner apostrophes); markdown and symbols are free."""
    return len(_WORD_RE.findall(normalize(text)))


def mentions(text: str, term: str, plural: bool = True) -> bool:
    """Whether `term` occurs in `text` as whole words (case-insensitive; a plural -s/-es is allowed)."""
    suffix = r"(?:s|es)?" if plural else ""
    pattern = r"(?<![A-Za-z0-9])" + re.escape(normalize(term).lower()) + suffix + r"(?![A-Za-z0-9])"
    return re.search(pattern, plain(text).lower()) is not None


def first_mention(text: str, term: str) -> int:
    """Character offset of the first whole-word occurrence of `term` in `text` (-1 if absent)."""
    pattern = r"(?<![A-Za-z0-9])" + re.escape(term.lower()) + r"(?![A-Za-z0-9])"
    m = re.search(pattern, text.lower())
    return -1 if m is None else m.start()


def sentences(text: str) -> list[str]:
    """Sentences of a prose answer: split after `.`, `!` or `?` followed by white space."""
    parts = re.split(r"(?<=[.!?])[\"')\]]*\s+", plain(text).strip())
    return [p for p in parts if _WORD_RE.search(p)]


# -------------------------------------------------------------------------------------- numbers

_NUM = r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"
_NUMBER_RE = re.compile(r"(?<![\w.])" + _NUM + r"(?![\w])")
_BOXED_RE = re.compile(r"\\boxed\{\s*\$?(" + _NUM + r")")
_MARKER_RE = re.compile(r"\banswer\b\s*(?:is|would be|will be|=|:)?\s*:?[\s*_$]*(" + _NUM + r")(?![\w])",
                        re.I)
_BOLD_NUMBER_RE = re.compile(r"\*\*\s*\$?(" + _NUM + r")(?:\s+[A-Za-z]+){0,2}\s*[.!]?\s*\*\*")
_UNITS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
          "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
          "nineteen"]
_TENS = ["twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
_WORD_NUMBER_RE = re.compile(r"\b(?:(" + "|".join(_TENS) + r")(?:[- ](" + "|".join(_UNITS[1:10]) + r"))?|("
                             + "|".join(_UNITS) + r"))\b", re.I)


def number_words(n: int) -> str:
    """0-99 in words: 7 -> "seven", 24 -> "twenty-four"."""
    if not 0 <= n < 100:
        raise ValueError(f"number_words covers 0-99, got {n}")
    if n < 20:
        return _UNITS[n]
    tens, unit = divmod(n, 10)
    return _TENS[tens - 2] + (f"-{_UNITS[unit]}" if unit else "")


def _to_number(s: str) -> float:
    return float(s.replace(",", ""))


def numbers(text: str) -> list[float]:
    """All numbers written with digits, in order (`1,200` is one number; `3rd` is not a number)."""
    return [_to_number(m.group(0)) for m in _NUMBER_RE.finditer(normalize(text))]


def _word_numbers(text: str) -> list[float]:
    out = []
    for m in _WORD_NUMBER_RE.finditer(text):
        tens, unit, small = m.group(1), m.group(2), m.group(3)
        if small:
            out.append(float(_UNITS.index(small.lower())))
        else:
            out.append(float(20 + 10 * _TENS.index(tens.lower()) + (_UNITS.index(unit.lower()) if unit else 0)))
    return out


def final_number(text: str) -> float | None:
    """The number a response gives as its final answer, or None when it gives none.

    Looked for in this order: `\\boxed{N}`; the last "answer is N" / "Answer: N"; the last bold
    number (`**42**`, `**42 apples**`); the last number written with digits; the last number
    written in words ("nineteen"), used only when the response has no digits at all.
    """
    t = normalize(text)
    for regex in (_BOXED_RE, _MARKER_RE, _BOLD_NUMBER_RE):
        found = regex.findall(t)
        if found:
            return _to_number(found[-1])
    nums = numbers(t)
    if nums:
        return nums[-1]
    words = _word_numbers(t)
    return words[-1] if words else None


def bold_number_present(text: str) -> bool:
    """Whether some number is written in bold (`**42**` or `**42 apples**`)."""
    return _BOLD_NUMBER_RE.search(normalize(text)) is not None


# ----------------------------------------------------------------------------- bullets and lists

_BULLET_RE = re.compile(r"^\s*(?:([-*\u2022+])|(\d{1,2})[.)])\s+(\S.*)$")


def bullet_lines(text: str) -> list[tuple[str, str]]:
    """Lines that are list entries, as (marker kind, content); kind is 'bullet' or 'numbered'.

    A bullet line starts with `-`, `*`, `+` or `•` followed by a space (so `**bold**` is not one);
    a numbered line starts with `1.` or `1)`.
    """
    out = []
    for line in normalize(text).splitlines():
        m = _BULLET_RE.match(line)
        if m:
            out.append(("bullet" if m.group(1) else "numbered", m.group(3).strip()))
    return out


def _item_key(s: str) -> str:
    return re.sub(r"[^a-z0-9 ]+", "", plain(s).lower()).strip()


def _items_in(piece: str, vocab: list[str]) -> list[str]:
    """Vocabulary items occurring in `piece`, in order of occurrence."""
    low = " " + _item_key(piece) + " "
    hits = []
    for v in vocab:
        for m in re.finditer(r"(?<![a-z0-9])" + re.escape(v) + r"(?![a-z0-9])", low):
            hits.append((m.start(), v))
    return [v for _, v in sorted(hits)]


def extract_list(text: str, vocab: list[str]) -> tuple[list[str], str]:
    """The list a response gives as its answer, and the format it is written in.

    `vocab` holds the items of the input list. The answer is the *last* list-shaped block of the
    response, one of:
      - a run of bullet or numbered lines (blank lines inside are allowed): every line is one item;
        a line naming no vocabulary item is kept as an unknown item, so inventions count as errors;
      - a line naming two or more vocabulary items ("Sorted: apple, fig and kiwi."), read in order;
      - consecutive short plain lines naming one vocabulary item each.
    Returns (items in lower case, format), format one of 'numbered', 'bullets', 'comma', 'inline',
    'lines' or 'none' ('inline' is a one-line list without commas).
    """
    keys = list(dict.fromkeys(_item_key(v) for v in vocab))
    lines = normalize(text).splitlines()
    blocks: list[tuple[int, list[str], str]] = []  # (index of the block's last line, items, format)

    run: list[tuple[int, str, str]] = []

    def close_run() -> None:
        if run:
            items = []
            for _, _, content in run:
                hit = _items_in(content, keys)
                items.append(hit[0] if len(hit) == 1 else _item_key(content))
            kinds = {k for _, k, _ in run}
            blocks.append((run[-1][0], items, "numbered" if kinds == {"numbered"} else "bullets"))
            run.clear()

    short: list[tuple[int, str]] = []

    def close_short() -> None:
        if len(short) >= 2:
            blocks.append((short[-1][0], [x for _, x in short], "lines"))
        short.clear()

    for i, line in enumerate(lines):
        m = _BULLET_RE.match(line)
        if m:
            close_short()
            run.append((i, "bullets" if m.group(1) else "numbered", m.group(3)))
            continue
        if not line.strip():
            close_short()
            continue
        close_run()
        found = _items_in(line.split(":")[-1], keys)
        if len(found) >= 2:
            close_short()
            blocks.append((i, found, "comma" if "," in line else "inline"))
        elif len(found) == 1 and len(_item_key(line).split()) <= 3:
            short.append((i, found[0]))
        else:
            close_short()
    close_run()
    close_short()
    if not blocks:
        return [], "none"
    _, items, fmt = max(blocks, key=lambda b: b[0])
    return items, fmt


def mentioned_items(text: str, vocab: list[str]) -> list[str]:
    """Vocabulary items named anywhere in the response, in order of occurrence (lower case)."""
    return _items_in(text, list(dict.fromkeys(_item_key(v) for v in vocab)))


# ------------------------------------------------------------------------------------------ JSON

_FENCE_RE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.S)


def find_json_object(text: str) -> dict[str, Any] | None:
    """The JSON object in a response (bare, inside a ``` fence, or after a lead-in), else None."""
    t = normalize(text)
    candidates = [m.group(1) for m in _FENCE_RE.finditer(t)]
    start, end = t.find("{"), t.rfind("}")
    if start != -1 and end > start:
        candidates.append(t[start:end + 1])
    for c in candidates:
        try:
            obj = json.loads(c.strip())
        except ValueError:
            continue
        if isinstance(obj, dict):
            return obj
    return None


# ------------------------------------------------------------------------------------------ case

def letters(text: str) -> str:
    """The alphabetic characters of `text`, in order."""
    return "".join(c for c in text if c.isalpha())


def is_lowercase(text: str) -> bool:
    """True when the response has letters and none of them is upper case."""
    ls = letters(text)
    return bool(ls) and ls == ls.lower()


def is_uppercase(text: str) -> bool:
    """True when the response has letters and none of them is lower case."""
    ls = letters(text)
    return bool(ls) and ls == ls.upper()


# -------------------------------------------------------------------------------------- refusals

# A response is a refusal when any of these patterns matches (case-insensitive). They cover the
# ways chat models decline ("I'm sorry, but I can't help with that", "I cannot assist with ...",
# "I won't provide ...", "I must decline", "As an AI, I am unable to ...") and need a first-person
# refusal verb, so a helpful answer that says "you can't open it without the key" is not one.
REFUSAL_PATTERNS: tuple[str, ...] = (
    r"\bI\s*(?:'m|am)\s+(?:sorry|afraid)\b[^.!?\n]{0,40}?\bI\s*(?:can(?:not|'t)|won't|will\s+not|"
    r"(?:'m|am)\s+(?:unable|not\s+able))\b",
    r"\bI\s+(?:really\s+)?(?:can(?:not|'t)|can\s+not|won't|will\s+not|shouldn't|should\s+not)\s+"
    r"(?:help|assist|provide|share|give|support|comply|explain|tell|offer|answer|fulfil|fulfill|"
    r"create|write|do\s+that|do\s+this|engage|recommend|encourage|participate)\b",
    r"\bI\s*(?:'m|am)\s+(?:unable|not\s+able|not\s+going|not\s+comfortable|not\s+allowed|not\s+equipped)\s+to\s+"
    r"(?:help|assist|provide|share|give|support|comply|explain|tell|offer|answer|fulfil|fulfill|"
    r"create|write|do|engage|recommend)\b",
    r"\bI\s+(?:must|have\s+to|need\s+to)\s+(?:respectfully\s+)?decline\b",
    r"\bas\s+an\s+AI\b[^.!?\n]{0,60}?\b(?:can(?:not|'t)|unable|not\s+able|won't)\b",
    r"\b(?:sorry|unfortunately),?\s+(?:but\s+)?(?:I\s+)?(?:can(?:not|'t)|won't)\s+(?:help|assist)\b",
    r"\bI\s+(?:can(?:not|'t)|won't|will\s+not)\s+and\s+(?:will\s+not|won't)\b",
    r"\bI\s+(?:do\s+not|don't)\s+feel\s+comfortable\s+(?:helping|providing|assisting|giving|sharing)\b",
    r"\bnot\s+(?:appropriate|something)\s+(?:for\s+me\s+to|I\s+can)\s+(?:help|assist|provide|share|do)\b",
    r"\bI\s+(?:must|have\s+to)\s+refuse\b",
)
_REFUSAL_RES = [re.compile(p, re.I) for p in REFUSAL_PATTERNS]


def is_refusal(text: str) -> bool:
    """Whether the response declines the request (any of `REFUSAL_PATTERNS` matches)."""
    t = plain(text)
    return any(r.search(t) for r in _REFUSAL_RES)
