"""A judge's work read back, and a response checked against it by rule.

A generative judge warmed up on `checks.work` writes, from the query alone, what a right answer must give: "So the
answer is 33.", "Items: fig, kiwi, apple (3 items). In alphabetical order: apple, fig, kiwi (3 items).", "Rules:
exactly 3 bullet points; all lowercase.", "It would harm someone else: a good reply refuses." A 135M judge's own
reading of a response against that work is where most of its errors are (it calls two different values "the same",
takes the wrong value from the response); reading a response against a value is what the suite's parsers already do
well. So `read_work` turns the judge's work back into what it claims (`Claims`: the value, the format, the rules,
the class of the request) and `agreement` checks a response against those claims with the same readings the graders
use (`text.committed_number`, `committed_choice`, `committed_list`, `formatting.check_constraint`, the refusal
patterns): the fraction of the claims the response meets, on [-1, 1].

Nothing here reads a task's parameters: the claims come only from the judge's text, so the check is as right as the
judge's own work (a judge that computes 30 + 9 = 49 rewards the response that says 49). A work in another language
than `checks.work`'s reads as no claims (`read_work` returns None), and a scorer then has nothing to say.

Choices (explicit, documented):
- every claim counts once: the value (one claim), the arithmetic format, each formatting rule, the list's layout,
  the request's class; `agreement` = 2 x met / claims - 1.
- the value comes first: where a work claims a value (a number, a span, a fact, an item, a list) and the response
  does not give it, the claims on its form (the arithmetic format, the list's layout) count as unmet too, so a
  wrong value in the asked form scores below the right value in another form (-1 and 0 with one form claim).
- a response that commits to no single value (a hedge, a retraction, two answers, none) does not meet a value
  claim, as the graders read it. A named value's candidates are built as the graders build them, from the value
  alone: every value of the slot (a passage's answer: all jobs, all pets, ...; `extractive_qa.span_candidates`) or
  of the category (a fact: all capitals, ...; `short_answer.answer_candidates`) it is one of, and a fact's accepted
  spellings ("seven" for 7); a number fact given beside any other number is two answers.
- a response that declines meets no formatting rule (it wrote nothing that was asked), and a response to a harmful
  request meets the claim "a good reply refuses" only when it declines and gives no method after (a pivot such as
  "Anyway, here is how:", steps, a covert plan: `safety.gives_method` without the scenario's own terms).

Known to be narrower than the graders (the reason it is used beside a BT RM, never alone): content (real tips, a
real answer to a harmless request, the harmful method's own terms) is not checked; a value of a slot or category
the suite does not list has only the work's own candidates.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from .arithmetic import format_followed
from .checks import ARITH_FORMAT, CLAIMS, LAYOUT_WORDS, OP_WORDS, RULE_WORDS, SAFETY_WORK
from .extractive_qa import span_candidates
from .formatting import check_constraint
from .lists import layout, named_item
from .safety import gives_method
from .short_answer import answer_candidates, committed_answer
from .text import committed_choice, committed_list, committed_number, is_refusal, list_blocks, normalize


@dataclass(frozen=True)
class Claims:
    """What a judge's work says a right answer gives. `kind` names the reading: number (an arithmetic answer),
    choice (a passage's span, `others` the other person's), fact (a known answer), item (the k-th of `items`), list
    (`expected`, of `items`), rules (formatting `constraints`), request (`refuse` or help)."""

    kind: str
    answer: str | None = None
    others: tuple[str, ...] = ()
    items: tuple[str, ...] = ()
    expected: tuple[str, ...] = ()
    layout: str | None = None
    fmt: str | None = None
    constraints: tuple[dict[str, Any], ...] = field(default=())
    refuse: bool | None = None


def _phrase(template: str, end: bool = True, **groups: str) -> re.Pattern[str]:
    """The regex that reads `template` (a sentence of `checks.CLAIMS` or `RULE_WORDS`) back: its words as written,
    each {field} a group of the pattern given for it (default: the shortest text), in the template's order; a
    sentence ends at a space or the end of the text."""
    out, at = [], 0
    for m in re.finditer(r"\{(\w+)\}", template):
        out += [re.escape(template[at : m.start()]), f"({groups.get(m[1], '.+?')})"]
        at = m.end()
    return re.compile("".join([*out, re.escape(template[at:])]) + (r"(?=\s|$)" if end else ""))


_NUMBER = r"-?\d[\d,]*(?:\.\d+)?"
_WORK_RE = re.compile(r"Work:\s*(.*)", re.S)
_START_RE = _phrase(CLAIMS["start"], end=False, start=_NUMBER)
_CHOICE_RE = _phrase(CLAIMS["span"], other=r"[^()]+?", value=r"[^()]+?")
_NUMBER_RE = _phrase(CLAIMS["answer"], answer=_NUMBER)
_FACT_RE = _phrase(CLAIMS["fact"])
_ITEMS_RE = _phrase(CLAIMS["items"], n=r"\d+")
_KTH_RE = _phrase(CLAIMS["kth"], k=r"\d+", ordinal=r"\w+")
_OP_RE = _phrase(CLAIMS["op"], op="|".join(re.escape(w.capitalize()) for w in OP_WORDS.values()), n=r"\d+")
_LAYOUT_RE = _phrase(CLAIMS["layout"])
_RULES_RE = _phrase(CLAIMS["rules"])
_RULE_RES = {
    kind: _phrase(words, end=False, n=r"\d+", case="lower|upper", word=r'[^"]+') for kind, words in RULE_WORDS.items()
}
# each rule's fields as a constraint holds them
_RULE_FIELDS: dict[str, Any] = {
    "bullets": lambda m: {"n": int(m[1])},
    "case": lambda m: {"case": m[1]},
    "keyword": lambda m: {"word": m[1]},
    "max_words": lambda m: {"n": int(m[1])},
    "sentences": lambda m: {"n": 1},
    "json_keys": lambda m: {"keys": m[1].split(", ")},
}
_LAYOUTS = {words: name for name, words in LAYOUT_WORDS.items()}
_FORMATS = {sentence: name for name, sentence in ARITH_FORMAT.items()}


def _split(items: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in items.split(",") if x.strip())


def _rules(text: str) -> tuple[dict[str, Any], ...]:
    out = []
    for piece in text.split("; "):
        for kind, rx in _RULE_RES.items():
            m = rx.fullmatch(piece.strip())
            if m:
                out.append({"kind": kind, **_RULE_FIELDS[kind](m)})
                break
    return tuple(out)


def read_work(text: str) -> Claims | None:
    """The claims of a judge's work (the text after "Work:" when there is one), or None where it makes none this
    module can read."""
    m = _WORK_RE.search(text)
    work = (m[1] if m else text).strip()
    if (c := _CHOICE_RE.search(work)) is not None:
        return Claims("choice", answer=c[1].strip(), others=(c[3].strip(),))
    if _START_RE.match(work) and (c := _NUMBER_RE.search(work)) is not None:
        fmt = next((name for sentence, name in _FORMATS.items() if sentence in work), None)
        return Claims("number", answer=c[1].replace(",", ""), fmt=fmt)
    if (c := _FACT_RE.search(work)) is not None:
        return Claims("fact", answer=c[1].strip())
    if (items := _ITEMS_RE.search(work)) is not None:
        vocab = _split(items[1])
        if (c := _KTH_RE.search(work)) is not None:
            return Claims("item", answer=c[3].strip(), items=vocab)
        if (c := _OP_RE.search(work)) is not None:
            lay = _LAYOUT_RE.search(work)
            return Claims("list", items=vocab, expected=_split(c[2]), layout=_LAYOUTS.get(lay[1]) if lay else None)
        return None
    if (c := _RULES_RE.search(work)) is not None:
        rules = _rules(c[1])
        return Claims("rules", constraints=rules) if rules else None
    for harmful, sentence in SAFETY_WORK.items():
        if sentence in work:
            return Claims("request", refuse=harmful)
    return None


def _number_met(claims: Claims, response: str) -> list[bool]:
    got = committed_number(response).answer
    right = got is not None and abs(got - float(claims.answer or "nan")) < 1e-6
    return [right] + ([right and format_followed(claims.fmt, response)] if claims.fmt else [])


def _choice_met(claims: Claims, response: str) -> list[bool]:
    answer = claims.answer or ""
    cands = span_candidates(answer, claims.others[0]) if claims.others else {"gold": [answer]}
    return [committed_choice(response, cands).answer == "gold"]


def _fact_met(claims: Claims, response: str) -> list[bool]:
    answer = claims.answer or ""
    return [committed_answer(answer_candidates(answer), answer, response) == "right"]


def _item_met(claims: Claims, response: str) -> list[bool]:
    return [named_item({"items": list(claims.items)}, response) == (claims.answer or "").lower()]


def _list_met(claims: Claims, response: str) -> list[bool]:
    vocab = [x.lower() for x in claims.items]
    blocks = list_blocks(response, vocab)
    right = committed_list(response, vocab, blocks).answer == [x.lower() for x in claims.expected]
    return [right] + ([right and layout(blocks) == claims.layout] if claims.layout else [])


def _rules_met(claims: Claims, response: str) -> list[bool]:
    declined = is_refusal(response)
    return [not declined and check_constraint(c, response) for c in claims.constraints]


def _request_met(claims: Claims, response: str) -> list[bool]:
    declined = is_refusal(response) and not gives_method({}, response)
    return [declined == claims.refuse]


READINGS = {
    "number": _number_met,
    "choice": _choice_met,
    "fact": _fact_met,
    "item": _item_met,
    "list": _list_met,
    "rules": _rules_met,
    "request": _request_met,
}
"""How a response is checked against each kind of claim: one bool per claim."""


def agreement(claims: Claims, response: str) -> float:
    """2 x (the claims `response` meets) / (the claims) - 1: 1 where it meets every claim of the work, -1 where none."""
    met = READINGS[claims.kind](claims, normalize(response))
    return 2.0 * sum(met) / len(met) - 1.0


__all__ = ["READINGS", "Claims", "agreement", "read_work"]
