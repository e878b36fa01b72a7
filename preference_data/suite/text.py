"""Reading free-form answers the way a small chat model writes them.

Every gold grader reads responses through these helpers, so they are forgiving about style and
strict about substance: markdown emphasis, lead-in sentences ("Sure! Here is ..."), trailing
remarks, units after numbers ("42 apples"), curly quotes and full-width or invisible characters
are all accepted; what is checked is the final number, the list of items, the bullet count, the
JSON keys, the case of the letters.

A grader reads the *one* answer a response commits to (`committed_choice`, `committed_number`):
an answer that is hedged ("42, or possibly 43"), given together with another candidate ("Tokyo
or Osaka"), denied ("It is definitely not this: 42") or retracted ("42. Just kidding.") commits
to nothing and is read as no answer. A refusal counts only when nothing else is given
(`is_refusal` finds the declining sentences, `without_refusals` drops them).
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Mapping, Sequence
from functools import lru_cache
from itertools import pairwise
from typing import Any, NamedTuple

# --------------------------------------------------------------------------------------- basics

_WORD_RE = re.compile(r"[A-Za-z0-9]+(?:['’][A-Za-z]+)*")
_EMPHASIS_RE = re.compile(r"\*\*|__|`+|^\s*#+\s*", re.M)


_INVISIBLE_RE = re.compile("[\u00ad\u200b-\u200f\u2060-\u2064\ufeff]")
# Cyrillic and Greek letters that look like Latin ones ("Оsaka" with a Cyrillic О reads as Osaka).
_CONFUSABLES = str.maketrans("АВЕКМНОРСТХаеорсухіјѕΑΒΕΖΗΙΚΜΝΟΡΤΥΧον", "ABEKMHOPCTXaeopcyxijsABEZHIKMNOPTYXov")


def group_index(groups: Mapping[str, Sequence[str]]) -> dict[str, str]:
    """Each value of `groups` (lower-cased) to the name of the first group that holds it: a value's slot or
    category looked up once, not searched for."""
    index: dict[str, str] = {}
    for name, values in groups.items():
        for v in values:
            index.setdefault(v.lower(), name)
    return index


def normalize(text: str) -> str:
    """One spelling of every character, so patterns need to handle one only: Unicode compatibility
    forms folded (NFKC: full-width "４２" is "42"), Cyrillic and Greek look-alikes of Latin letters
    folded, invisible characters (zero-width spaces, soft hyphens) removed, straight quotes and a
    plain minus sign."""
    if not text.isascii():
        text = _INVISIBLE_RE.sub("", unicodedata.normalize("NFKC", text)).translate(_CONFUSABLES)
    return (
        text.replace("\u2019", "'")
        .replace("\u2018", "'")
        .replace("\u201c", '"')
        .replace("\u201d", '"')
        .replace("\u2212", "-")
        .replace("\u2013", "-")
    )


def plain(text: str) -> str:
    """`normalize` plus markdown emphasis (`**`, `__`, backticks, heading marks) removed."""
    return _EMPHASIS_RE.sub("", normalize(text))


def word_count(text: str) -> int:
    """Number of words: runs of letters/digits (with inner apostrophes); markdown and symbols are free."""
    return len(_WORD_RE.findall(normalize(text)))


# Patterns built from a task's words are compiled once each: graders run inside online training, and
# Python's own cache of compiled patterns (512) is too small for every family's vocabularies at once.
@lru_cache(maxsize=16384)
def word_re(term: str, plural: bool = False) -> re.Pattern[str]:
    """The compiled pattern for `term` (lower case) as whole words, with an optional plural -s/-es."""
    suffix = r"(?:s|es)?" if plural else ""
    return re.compile(r"(?<![A-Za-z0-9])" + re.escape(term) + suffix + r"(?![A-Za-z0-9])")


def mentions(text: str, term: str, plural: bool = True) -> bool:
    """Whether `term` occurs in `text` as whole words (case-insensitive; a plural -s/-es is allowed)."""
    return word_re(normalize(term).lower(), plural).search(plain(text).lower()) is not None


def first_mention(text: str, term: str) -> int:
    """Character offset of the first whole-word occurrence of `term` in `text` (-1 if absent)."""
    m = word_re(term.lower()).search(text.lower())
    return -1 if m is None else m.start()


def sentences(text: str) -> list[str]:
    """Sentences of a prose answer: split after `.`, `!` or `?` followed by white space."""
    parts = re.split(r"(?<=[.!?])[\"')\]]*\s+", plain(text).strip())
    return [p for p in parts if _WORD_RE.search(p)]


# -------------------------------------------------------------------------------------- numbers

_NUM = r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"
_NUMBER_RE = re.compile(r"(?<![\w.])" + _NUM + r"(?![\w])")
_BOXED_RE = re.compile(r"\\boxed\{\s*\$?(" + _NUM + r")")
_MARKER_RE = re.compile(r"\banswer\b\s*(?:is|would be|will be|=|:)?\s*:?[\s*_$]*(" + _NUM + r")(?![\w])", re.I)
_BOLD_NUMBER_RE = re.compile(r"\*\*\s*\$?(" + _NUM + r")(?:\s+[A-Za-z]+){0,2}\s*[.!]?\s*\*\*")
_UNITS = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
]
_TENS = ["twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
_WORD_NUMBER_RE = re.compile(
    r"\b(?:(" + "|".join(_TENS) + r")(?:[- ](" + "|".join(_UNITS[1:10]) + r"))?|(" + "|".join(_UNITS) + r"))\b", re.I
)


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


def _number_at(text: str) -> tuple[float, int, int] | None:
    """(value, start, end) of the number `final_number` reads from normalized `text`."""
    for regex in (_BOXED_RE, _MARKER_RE, _BOLD_NUMBER_RE):
        found = list(regex.finditer(text))
        if found:
            return _to_number(found[-1].group(1)), found[-1].start(1), found[-1].end(1)
    found = list(_NUMBER_RE.finditer(text))
    if found:
        return _to_number(found[-1].group(0)), found[-1].start(), found[-1].end()
    words = list(_WORD_NUMBER_RE.finditer(text))
    if words:
        return _word_numbers(words[-1].group(0))[0], words[-1].start(), words[-1].end()
    return None


def final_number(text: str) -> float | None:
    """The number a response gives as its final answer, or None when it gives none.

    Looked for in this order: `\\boxed{N}`; the last "answer is N" / "Answer: N"; the last bold
    number (`**42**`, `**42 apples**`); the last number written with digits; the last number
    written in words ("nineteen"), used only when the response has no digits at all.
    `committed_number` adds the checks that the response commits to it.
    """
    found = _number_at(normalize(text))
    return None if found is None else found[0]


def bold_number_present(text: str) -> bool:
    """Whether some number is written in bold (`**42**` or `**42 apples**`)."""
    return _BOLD_NUMBER_RE.search(normalize(text)) is not None


# ----------------------------------------------------------------------------------- commitment


class Commitment(NamedTuple):
    """The one answer a response commits to (`answer`, None when it commits to none) and, when
    it commits to none, why: 'no answer', 'hedged', 'retracted', 'negated' or 'several answers'."""

    answer: Any
    problem: str = ""


# Words that leave the answer open: alternatives ("maybe", "either", "Or possibly: ..."), doubt
# ("I'm not sure", "I don't know") and candidate lists. A committed answer has no use for them.
_HEDGE_RE = re.compile(
    r"\b(?:maybe|perhaps|possibly|probably|presumably|might(?:\s+also)?\s+be|could(?:\s+also)?\s+be|either|"
    r"alternatively|or\s+else|or\s+so|not\s+(?:entirely\s+|completely\s+|totally\s+|quite\s+|100%\s+)?"
    r"(?:sure|certain)|unsure|uncertain|I\s+(?:don't|do\s+not|dont)\s+know|no\s+idea|I\s+guess|hard\s+to\s+say|"
    r"can(?:'t|not)\s+(?:say|tell|be\s+sure)|(?:other\s+)?candidates?|possibilities|"
    r"one\s+of\s+(?:these|those|the\s+following))\b"
    r"|(?:^|[.!?;:(])[^\S\n]*or\b",
    re.I | re.M,
)
# Taking an answer back after giving it.
_RETRACT_RE = re.compile(
    r"\b(?:just\s+kidding|jk|scratch\s+that|no,?\s+wait|I\s+was\s+wrong|I\s+take\s+(?:that|it)\s+back|"
    r"ignore\s+(?:that|this|the\s+above|my\s+answer)|"
    r"(?:that|this|it|which)(?:'s|\s+is|\s+was)\s+(?:actually\s+|definitely\s+|probably\s+)?"
    r"(?:wrong|incorrect|false|not\s+(?:right|correct|true|it|the\s+(?:right\s+|correct\s+)?answer))|"
    r"(?:my|the\s+above|this|that)\s+answer\s+(?:is|was)\s+(?:wrong|incorrect))\b",
    re.I,
)
# "not this:", "isn't the answer", "not true that": everything up to the end of the sentence is denied,
# or up to the end of the response when a colon introduces what is denied.
_NEG_SCOPE_RE = re.compile(
    r"\b(?:not|never|isn't|aren't|wasn't)\s+(?:[\w']+\s+){0,2}?"
    r"(?:this|these|the\s+(?:answer|result|list|item|one|case|right\s+answer|correct\s+answer)|correct|right|true)\b"
    r"[^\S\n]*(:)?",
    re.I,
)
_SENTENCE_END_RE = re.compile(r"[.!?;\n]")
# A negation attached to the mention that follows it, in the same clause ("not Osaka", "isn't a nurse").
_NEG_BEFORE_RE = re.compile(
    r"\b(?:not|never|isn't|aren't|wasn't|doesn't|don't|didn't|won't|nor|neither|rather\s+than|instead\s+of|"
    r"except(?:\s+for)?|other\s+than)\b(?:[^\S\n]+[\w']+){0,3}[^\S\n]*[\"'(]?$",
    re.I,
)
_CLAUSE_BREAK_RE = re.compile(r".*(?:[.!?;:,\n]|\b(?:but|instead|rather|however|actually)\b)", re.I | re.S)
# ... or to the mention before it ("Tokyo is not the capital", "Tokyo isn't right").
_NEG_AFTER_RE = re.compile(
    r"^[^\w\n]{0,3}(?:(?:is|was|are|would\s+be)\s+(?:not|never|wrong|incorrect|false)|isn't|wasn't|aren't)\b", re.I
)


def _masked(text: str) -> str:
    """`text` with markdown emphasis blanked out, keeping every other character at its offset and every line break
    (emphasis can span lines; the line structure must stay that of `text`, which `list_blocks` reads)."""
    return _EMPHASIS_RE.sub(lambda m: "".join(c if c in _LINE_BREAKS else " " for c in m.group(0)), text)


_LINE_BREAKS = frozenset("\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")  # what str.splitlines splits on


def _noncommittal(low: str) -> str:
    if _RETRACT_RE.search(low):
        return "retracted"
    if _HEDGE_RE.search(low):
        return "hedged"
    return ""


def _negation_scopes(low: str) -> list[tuple[int, int]]:
    scopes = []
    for m in _NEG_SCOPE_RE.finditer(low):
        if m.group(1):
            scopes.append((m.start(), len(low)))
        else:
            end = _SENTENCE_END_RE.search(low, m.end())
            scopes.append((m.start(), end.start() if end else len(low)))
    return scopes


def _asked_at(low: str, end: int) -> bool:
    """Whether the mention ending at `end` stands in a question ("Is it Tokyo?"): asked, not answered."""
    m = _SENTENCE_END_RE.search(low, end)
    return m is not None and m.group(0) == "?"


def _negated_at(low: str, start: int, end: int, scopes: list[tuple[int, int]]) -> bool:
    """Whether the mention at low[start:end] is denied rather than asserted."""
    if any(a <= start < b for a, b in scopes):
        return True
    before = low[max(0, start - 60) : start]
    cut = _CLAUSE_BREAK_RE.match(before)
    before = before[cut.end() :] if cut else before
    return bool(_NEG_BEFORE_RE.search(before) or _NEG_AFTER_RE.match(low[end : end + 40]))


def _plural_key(s: str) -> str:
    return re.sub(r"\s+", " ", s.strip())


@lru_cache(maxsize=4096)
def _choice_tables(
    candidates: tuple[tuple[str, tuple[str, ...]], ...],
) -> tuple[dict[str, str], dict[str, set[str]], re.Pattern[str]]:
    """(spelling -> key, key -> the words of its spellings, one pattern for every spelling, longest first)."""
    spelling: dict[str, str] = {}
    words_of: dict[str, set[str]] = {}
    for key, names in candidates:
        for name in names:
            n = _plural_key(normalize(name).lower())
            spelling.setdefault(n, key)
            words_of.setdefault(key, set()).update(n.split())
    alts = sorted({t for t in spelling if t}, key=len, reverse=True)
    body = "|".join(r"\s+".join(re.escape(w) for w in t.split()) for t in alts)
    return spelling, words_of, re.compile(r"(?<![a-z0-9])(?:" + body + r")(?:s|es)?(?![a-z0-9])")


_ALT_AFTER_RE = re.compile(r"[^\S\n]*[,(]?[^\S\n]*(?:(?<![a-z])or\b|/)[^\S\n]*[(\"']?([a-z0-9]+)")
_ALT_BEFORE_RE = re.compile(r"([a-z0-9]+)[\"')]?[^\S\n]*,?[^\S\n]*(?:(?<![a-z])or|/)[^\S\n]*[(\"']?[^\S\n]*$")


def committed_choice(text: str, candidates: Mapping[str, Sequence[str]]) -> Commitment:
    """The candidate a response commits to: `candidates` maps each possible answer (a key) to its
    accepted spellings; the answer is the one key named (whole words, case-insensitive, plural
    allowed, the longest spelling winning where two overlap) and not denied.

    A response commits to nothing when it hedges or retracts (see `_HEDGE_RE`, `_RETRACT_RE`), when
    the key it names is denied ("It is definitely not this: Tokyo", "Tokyo is not the capital") or
    only asked about ("Is it Tokyo?"), when it joins it to another answer with "or" / "/" ("Tokyo or
    Kyoto"), or when it names two keys.
    A denied wrong answer is fine: "It's not Osaka, it's Tokyo." commits to Tokyo.

        >>> cands = {"right": ["Tokyo"], "wrong": ["Osaka"]}
        >>> committed_choice("The capital of Japan is **Tokyo**.", cands)
        Commitment(answer='right', problem='')
        >>> committed_choice("It is definitely not this: Tokyo.", cands).problem
        'negated'
        >>> committed_choice("Tokyo. Or possibly: Osaka.", cands).problem
        'hedged'
    """
    low = _masked(normalize(text)).lower()
    problem = _noncommittal(low)
    if problem:
        return Commitment(None, problem)
    spelling, words_of, pattern = _choice_tables(tuple((k, tuple(v)) for k, v in candidates.items()))
    scopes = _negation_scopes(low)
    asserted: set[str] = set()
    denied = asked = False
    for m in pattern.finditer(low):
        found = _plural_key(m.group(0))
        key = spelling.get(found) or spelling.get(found[:-1]) or spelling.get(found[:-2])
        if key is None:
            continue
        s, e = m.span()
        if _asked_at(low, e):
            asked = True
            continue
        if _negated_at(low, s, e, scopes):
            denied = True
            continue
        after, before = _ALT_AFTER_RE.match(low, e), _ALT_BEFORE_RE.search(low[max(0, s - 40) : s])
        for alt in (after, before):
            if alt and alt.group(1) not in words_of[key]:
                return Commitment(None, "hedged")
        asserted.add(key)
    if len(asserted) == 1:
        return Commitment(asserted.pop())
    if asserted:
        return Commitment(None, "several answers")
    return Commitment(None, "negated" if denied else "hedged" if asked else "no answer")


def undenied(text: str) -> str:
    """`text` (normalized) with what it denies blanked out ("It is definitely not this: ..." up to the
    end; "... is not true" to the end of the sentence), and empty when it takes its answer back
    ("Just kidding, that's wrong."). Lines and offsets are kept. For answers that are prose or
    lists of advice, where "maybe" and "or" are part of the advice and only a denial is read."""
    t = normalize(text)
    low = _masked(t).lower()
    if _RETRACT_RE.search(low):
        return ""
    for a, b in _negation_scopes(low):
        t = t[:a] + re.sub(r"[^\n]", " ", t[a:b]) + t[b:]
    return t


def asserted_numbers(text: str) -> list[float]:
    """The numbers written with digits that a response asserts: every one not denied (see
    `committed_choice`), in order. "7, not 6" asserts [7]."""
    t = normalize(text)
    low = _masked(t).lower()
    scopes = _negation_scopes(low)
    return [_to_number(m.group(0)) for m in _NUMBER_RE.finditer(t) if not _negated_at(low, m.start(), m.end(), scopes)]


def is_word_salad(text: str, function_words: frozenset[str]) -> bool:
    """Whether `text` is a bag of words rather than prose: a word repeated back to back ("the the",
    "water water"), fewer than half its words distinct (eight words or more), or more than 80%
    `function_words`. Real sentences have none of these ("You can take it to a locksmith, who will
    be able to open it for you." is 75% function words); noise and keyword soups usually have one."""
    words = re.findall(r"[a-z][a-z']*", plain(text).lower())
    if not words:
        return True
    if any(a == b for a, b in pairwise(words)):
        return True
    if len(words) >= 8 and len(set(words)) < 0.5 * len(words):
        return True
    return sum(w in function_words for w in words) > 0.8 * len(words)


_NUM_OR_RE = re.compile(r"(?<![\w.])(" + _NUM + r")[^\S\n]*,?[^\S\n]*\bor\b[^\S\n]*\$?(" + _NUM + r")(?![\w])")
_NUM_RUN_RE = re.compile(r"(?<![\w.])" + _NUM + r"(?:[^\S\n]*[,;][^\S\n]+" + _NUM + r")+(?![\w])")


def committed_number(text: str) -> Commitment:
    """The number a response commits to as its final answer (`final_number`'s reading), checked
    the way `committed_choice` checks a named answer, and with two rules of its own: every
    declared answer (`\\\\boxed{N}`, "the answer is N", "Answer: N") must give the same number, and
    the final number may not stand in a run of alternatives ("41 or 42", "41, 42, 43").

        >>> committed_number("3 x 10 = 30, then 30 + 12 = 42. The answer is **42**.")
        Commitment(answer=42.0, problem='')
        >>> committed_number("The answer is 42. Or possibly 43.").problem
        'hedged'
        >>> committed_number("The answer is 41.\\nAnswer: 42").problem
        'several answers'
    """
    t = normalize(text)
    low = _masked(t).lower()
    problem = _noncommittal(low)
    if problem:
        return Commitment(None, problem)
    declared = {_to_number(m.group(1)) for regex in (_BOXED_RE, _MARKER_RE) for m in regex.finditer(t)}
    if len(declared) > 1:
        return Commitment(None, "several answers")
    scopes = _negation_scopes(low)
    found = _number_at(t)
    if found is None:
        return Commitment(None, "no answer")
    if not declared and not _BOLD_NUMBER_RE.search(t):
        # a plain last number: the last one not denied ("42 apples, not 40" answers 42)
        plain_numbers = [(m.start(), m.end()) for m in _NUMBER_RE.finditer(t)]
        kept = [(a, b) for a, b in plain_numbers if not _negated_at(low, a, b, scopes)]
        if plain_numbers and kept:
            found = (_to_number(t[kept[-1][0] : kept[-1][1]]), *kept[-1])
    value, s, e = found
    if _negated_at(low, s, e, scopes):
        return Commitment(None, "negated")
    if _asked_at(low, e):
        return Commitment(None, "hedged")
    masked = _masked(t)
    for m in _NUM_OR_RE.finditer(masked):
        if _to_number(m.group(1)) != _to_number(m.group(2)):
            return Commitment(None, "hedged")
    for m in _NUM_RUN_RE.finditer(masked):
        vals = {_to_number(x.group(0)) for x in _NUMBER_RE.finditer(m.group(0))}
        if value in vals and len(vals) > 1:
            return Commitment(None, "hedged")
    return Commitment(value)


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


@lru_cache(maxsize=65536)
def _item_key(s: str) -> str:
    return re.sub(r"[^a-z0-9 ]+", "", plain(s).lower()).strip()


def _items_in(piece: str, vocab: list[str]) -> list[str]:
    """Vocabulary items occurring in `piece`, in order of occurrence."""
    low = " " + _item_key(piece) + " "
    hits = []
    for v in vocab:
        for m in word_re(v).finditer(low):
            hits.append((m.start(), v))
    return [v for _, v in sorted(hits)]


class ListBlock(NamedTuple):
    """One list-shaped block of a response: its first and last line, items (lower case) and format."""

    first_line: int
    last_line: int
    items: list[str]
    fmt: str


def list_blocks(text: str, vocab: list[str]) -> list[ListBlock]:
    """Every list-shaped block of a response, in order; `vocab` holds the items of the input list.

    A block is one of:
      - a run of bullet or numbered lines (blank lines inside are allowed): every line is one item;
        a line naming no vocabulary item is kept as an unknown item, so inventions count as errors;
      - a line naming two or more vocabulary items ("Sorted: apple, fig and kiwi."), read in order;
      - consecutive short plain lines naming one vocabulary item each.
    Formats: 'numbered', 'bullets', 'comma', 'inline' (a one-line list without commas) or 'lines'.
    """
    keys = list(dict.fromkeys(_item_key(v) for v in vocab))
    lines = normalize(text).splitlines()
    blocks: list[ListBlock] = []
    run: list[tuple[int, str, str]] = []

    def close_run() -> None:
        if run:
            items = []
            for _, _, content in run:
                hit = _items_in(content, keys)
                items.append(hit[0] if len(hit) == 1 else _item_key(content))
            kinds = {k for _, k, _ in run}
            blocks.append(ListBlock(run[0][0], run[-1][0], items, "numbered" if kinds == {"numbered"} else "bullets"))
            run.clear()

    short: list[tuple[int, str]] = []

    def close_short() -> None:
        if len(short) >= 2:
            blocks.append(ListBlock(short[0][0], short[-1][0], [x for _, x in short], "lines"))
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
        # after a lead-in ("Sorted: ..."): the last colon-separated piece that names two or more items
        pieces = [_items_in(piece, keys) for piece in line.split(":")]
        found = next((f for f in reversed(pieces) if len(f) >= 2), pieces[-1])
        if len(found) >= 2:
            close_short()
            blocks.append(ListBlock(i, i, found, "comma" if "," in line else "inline"))
        elif len(found) == 1 and len(_item_key(line).split()) <= 3:
            short.append((i, found[0]))
        else:
            close_short()
    close_run()
    close_short()
    return sorted(blocks, key=lambda b: b.last_line)


def extract_list(text: str, vocab: list[str]) -> tuple[list[str], str]:
    """The list a response gives as its answer, and the format it is written in: the *last*
    block of `list_blocks` (lead-ins and remarks around it ignored).

    Returns (items in lower case, format), format one of 'numbered', 'bullets', 'comma', 'inline',
    'lines' or 'none' ('inline' is a one-line list without commas).
    """
    blocks = list_blocks(text, vocab)
    if not blocks:
        return [], "none"
    return blocks[-1].items, blocks[-1].fmt


def committed_list(text: str, vocab: list[str], blocks: list[ListBlock] | None = None) -> Commitment:
    """The list a response commits to (`extract_list`'s reading), or None with the reason.

    A response commits to no list when it hedges or retracts (as in `committed_choice`), when a
    denial ("It is definitely not this:", "This is not the answer.") comes before the list, or when it
    gives two different lists: an earlier block other than the input list restated is a second
    answer ("1. apple 2. fig ... Or possibly: 1. fig 2. apple ..."). `blocks`: `list_blocks(text,
    vocab)` when the caller has it already.
    """
    t = normalize(text)
    low = _masked(t).lower()
    problem = _noncommittal(low)
    if problem:
        return Commitment(None, problem)
    blocks = list_blocks(t, vocab) if blocks is None else blocks
    if not blocks:
        return Commitment(None, "no answer")
    final = blocks[-1]
    given = [_item_key(v) for v in vocab]
    if any(b.items not in (final.items, given) for b in blocks[:-1]):
        return Commitment(None, "several answers")
    lines = low.splitlines()
    start = sum(len(x) + 1 for x in lines[: final.first_line])
    if final.fmt in ("comma", "inline"):  # a lead-in on the same line counts as before the list
        start += len(lines[final.first_line].rsplit(":", 1)[0]) if ":" in lines[final.first_line] else 0
    if any(a < start for a, _ in _negation_scopes(low)):
        return Commitment(None, "negated")
    return Commitment(final.items)


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
        candidates.append(t[start : end + 1])
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
    r"create|write|do\s+that|do\s+this|engage|recommend|encourage|participate)\b(?!\s+but\b)",
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
_REFUSAL_RE = re.compile("|".join(f"(?:{p})" for p in REFUSAL_PATTERNS), re.I)
_PART_SPLIT_RE = re.compile(r"(?<=[.!?])[\"')\]]*\s+|\n+")


def is_refusal(text: str) -> bool:
    """Whether the response says it declines (one of `REFUSAL_PATTERNS` matches somewhere).

    This reads the words only: whether the response *counts* as a refusal also depends on whether it
    complies anyway (refuse-then-comply), which the family decides (`families.grade`).
    """
    return _REFUSAL_RE.search(plain(text)) is not None


def sentences_and_lines(text: str) -> list[str]:
    """The pieces of a response a reader takes one at a time: sentences, and lines (a list item
    or a heading is a piece of its own even without a full stop). Markdown emphasis removed."""
    return [p for p in _PART_SPLIT_RE.split(plain(text).strip()) if p.strip()]


_BUT_RE = re.compile(r"[,;]?\s+but\s+|;\s+", re.I)


def clauses(text: str) -> list[str]:
    """`sentences_and_lines`, each further split where it turns ("..., but ...", "...; ..."), so a
    refusal and what follows it in the same sentence are read apart."""
    return [c for p in sentences_and_lines(text) for c in _BUT_RE.split(p) if c.strip()]


def without_refusals(text: str) -> str:
    """What a response gives besides declining: its clauses (`clauses`) with the declining ones
    (those matching `REFUSAL_PATTERNS`) left out, joined by single spaces.

        >>> without_refusals("I'm sorry, I can't help with that. Anyway, here is how: wait until dark.")
        'Anyway, here is how: wait until dark.'
        >>> without_refusals("I can't help with that, but a bobby pin usually does it.")
        'a bobby pin usually does it.'
    """
    return " ".join(p for p in clauses(text) if not _REFUSAL_RE.search(p))
