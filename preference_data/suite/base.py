"""What a task family is made of, and the writing helpers the families share.

A family is a seeded generator of prompts (`Draft`), a gold scorer, a writer of good answers in a
few natural phrasings, and a set of corruptions, each a realistic failure mode that turns the good
answer into a worse one and says why (`Corrupted`).

Writers take `rng: random.Random | None`: None gives the canonical phrasing (the task's reference
answer); a seeded generator picks one of several phrasings. A corruption that must keep the chosen
answer's phrasing (a wrong number written the same way) re-seeds the writer with the same
`phrasing` seed, which makes the same choices.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, TypeVar

from .text import first_mention, is_refusal, word_count

T = TypeVar("T")

Params = dict[str, Any]


@dataclass
class Draft:
    """A generated task before it gets an id: the user turn, an optional system turn, and the
    JSON-serialisable params its grader and writers need."""

    user: str
    params: Params
    system: str | None = None


class Corrupted(NamedTuple):
    """A rejected answer: its text and a human-readable reason it is worse than the good one."""

    text: str
    reason: str


# (params, phrasing seed of the chosen answer, rng) -> a corrupted answer, or None if this kind does
# not apply to this task (e.g. truncating an answer that is only three words long).
Corruptor = Callable[[Params, int, random.Random], "Corrupted | None"]


@dataclass(frozen=True)
class Family:
    """One task family: generator, gold scorer, good-answer writer and corruptions.

    name: the grader name stored in `PromptOnly.grader`.
    summary: one line for `align ls`.
    objectives: the objectives this family can grade (a task may grade a subset, e.g. list tasks
        without a format instruction have no instruction_following score).
    generate: rng -> Draft.
    score: (params, response) -> raw objective scores, before the refusal policy.
    answer: (params, rng or None) -> a good answer; None gives the reference phrasing.
    corruptions: kind -> (sampling weight, corruptor).
    hard_corruptions: kinds drawn only for the extra pairs a run asks for (`build.hard_negatives` with their
        kinds named), never for the suite's own pairs, whose content stays as it was.
    complies: (params, response, raw scores) -> whether a response that says it declines gives
        what was asked anyway, so it is not a refusal (refuse-then-comply, comply-then-disclaim).
        None: it complies when its raw correctness is above 0 (it answered the question).
    balance: a boolean params key that `build.generate_tasks` keeps evenly split (safety:
        'harmful', so the suite asks as many harmful requests as harmless look-alikes).
    """

    name: str
    summary: str
    objectives: tuple[str, ...]
    generate: Callable[[random.Random], Draft]
    score: Callable[[Params, str], dict[str, float]]
    answer: Callable[[Params, random.Random | None], str]
    corruptions: dict[str, tuple[float, Corruptor]] = field(default_factory=dict)
    hard_corruptions: dict[str, tuple[float, Corruptor]] = field(default_factory=dict)
    complies: Callable[[Params, str, dict[str, float]], bool] | None = None
    balance: str | None = None

    def declines(self, params: Params, response: str, raw: dict[str, float]) -> bool:
        """Whether `response` is a refusal: it says it declines and does not comply anyway."""
        if not is_refusal(response):
            return False
        if self.complies is not None:
            return not self.complies(params, response, raw)
        return raw.get("correctness", 0.0) <= 0.0

    @property
    def corruption_kinds(self) -> tuple[str, ...]:
        """The corruption kinds this family can produce (for `align ls`)."""
        return tuple(self.corruptions)


def answer_corruptions(
    wrong_value: Corruptor,
    padding: Corruptor,
    truncated: Corruptor,
    hedged: Corruptor,
    negated: Corruptor,
    non_answer: Corruptor,
    violated: Corruptor | None = None,
    violated_weight: float = 1.5,
    lead: Literal["wrong_value", "padding"] = "wrong_value",
) -> dict[str, tuple[float, Corruptor]]:
    """The corruption table (`Family.corruptions`) of a family whose good answer commits to one value
    (arithmetic, list_ops, short_answer, extractive_qa): one weighting for all of them.

    The family's typical failure, `lead` (a wrong value; padding for a one-sentence answer), has weight 3 and
    comes first, the other of the two 1.5; a violated format instruction (where the family asks for one)
    `violated_weight`; truncated 1.5, hedged 1, negated and non-answers 0.75 each. The order is the draw order
    of `build.make_pair`, so it is part of the suite's data.
    """
    other = "padding" if lead == "wrong_value" else "wrong_value"
    main = {"wrong_value": wrong_value, "padding": padding}
    table: dict[str, tuple[float, Corruptor]] = {lead: (3.0, main[lead])}
    if violated is not None:
        table["violated_constraint"] = (violated_weight, violated)
    return table | {
        other: (1.5, main[other]),
        "truncated": (1.5, truncated),
        "hedged": (1.0, hedged),
        "negated": (0.75, negated),
        "non_answer": (0.75, non_answer),
    }


# Shared system turns: most prompts have none, some carry a common generic one.
SYSTEM_PROMPTS: tuple[str, ...] = (
    "You are a helpful assistant.",
    "You are a friendly assistant. Answer clearly.",
)


# first names the task families draw people from (arithmetic word problems, extractive QA stories)
NAMES = [
    "Mia",
    "Leo",
    "Ana",
    "Tom",
    "Sara",
    "Omar",
    "Lena",
    "Ravi",
    "Kate",
    "Ben",
    "Nora",
    "Ivan",
    "Zoe",
    "Sam",
    "Maya",
    "Jack",
    "Lucy",
    "Noah",
    "Emma",
    "Yuki",
    "Ali",
    "Eva",
    "Hugo",
    "Iris",
]


def maybe_system(rng: random.Random, p: float = 0.3) -> str | None:
    """A generic system turn with probability `p`, else None."""
    return rng.choice(SYSTEM_PROMPTS) if rng.random() < p else None


def choose(rng: random.Random | None, options: Sequence[T]) -> T:
    """`options[0]` for the canonical phrasing (rng None), else a seeded choice."""
    return options[0] if rng is None else rng.choice(options)


def cap(s: str) -> str:
    """Upper-case the first character only ("paris is ..." -> "Paris is ...")."""
    return s[:1].upper() + s[1:]


def article(word: str) -> str:
    """'an' before a vowel, else 'a'."""
    return "an" if word[:1].lower() in "aeiou" else "a"


def truncate_before(text: str, key: str, min_words: int = 3) -> str | None:
    """`text` cut off right before the first mention of `key`, as a generation that hit its token
    limit would be; None when the key is absent or fewer than `min_words` words would remain."""
    pos = first_mention(text, key)
    if pos <= 0:
        return None
    cut = text[:pos].rstrip()
    cut = re.sub(r"[\s*_(\"']+$", "", cut)
    return cut if word_count(cut) >= min_words else None


def pad(
    text: str,
    fillers: Sequence[str],
    budget: int,
    rng: random.Random,
    openers: Sequence[str] = (),
    closers: Sequence[str] = (),
    ratio: float = 1.3,
) -> str | None:
    """`text` with needless sentences added until it is over `ratio` x `budget` words.

    One opener (restating the question) goes in front with probability 1/2 when given; fillers
    (repetition of the answer, generic remarks) go after, drawn without replacement; one closer
    (an offer of more help) may end it. None when the pool runs out before the length is reached.
    """
    pool = list(fillers)
    rng.shuffle(pool)
    head = rng.choice(list(openers)) + " " if openers and rng.random() < 0.5 else ""
    tail = " " + rng.choice(list(closers)) if closers and rng.random() < 0.5 else ""
    out = head + text
    while word_count(out + tail) <= ratio * budget or out == head + text:
        if not pool:
            return None
        out = out + " " + pool.pop()
    return out + tail


# ---------------------------------------------------------------------- shared corruption writers

# Answers that answer nothing: doubt, deflection, praise of the question. None of them declines, so
# a `non_answer` pair teaches "answer the question", not "never refuse".
NON_ANSWERS: tuple[str, ...] = (
    "I don't know.",
    "I'm not sure about that.",
    "Good question! Let me think about it.",
    "That's an interesting question.",
    "Good luck with that!",
    "Hmm, that's a tricky one.",
)


def non_answer(restatements: Sequence[str], rng: random.Random) -> Corrupted:
    """A response that does not answer: a deflection from `NON_ANSWERS`, or (half the time, when
    the family gives some) a restatement of the question with no answer in it."""
    if restatements and rng.random() < 0.5:
        return Corrupted(rng.choice(list(restatements)), "restates the question instead of answering it")
    return Corrupted(rng.choice(NON_ANSWERS), "does not answer the question")


def hedge(text: str, right: str, wrong: str, wrong_text: str, rng: random.Random) -> Corrupted:
    """The good answer `text` hedged with a wrong one, in one of a few ways a model covers its bets:
    a second answer after it ("Or possibly: ..."), an "either ... or", a parenthetical "or maybe"."""
    frames = [
        (f"{text} Or possibly: {wrong_text}", "gives the right answer, then a wrong one as an alternative"),
        (f"It is either {wrong} or {right}.", f"hedges between {wrong} and {right}"),
        (f"{text} (or maybe {wrong})", f"hedges with {wrong} beside the right answer"),
        (f"{text} But it might also be {wrong}.", f"hedges with {wrong} beside the right answer"),
    ]
    return Corrupted(*rng.choice(frames))


def negate(text: str, rng: random.Random) -> Corrupted:
    """The good answer `text`, denied or taken back: it names the right answer but commits to nothing."""
    frames = [
        (f"It is definitely not this: {text}", "names the right answer only to deny it"),
        (f"{text} Just kidding, that's wrong.", "gives the right answer, then takes it back"),
        (f"{text} Actually, no: that is wrong.", "gives the right answer, then takes it back"),
    ]
    return Corrupted(*rng.choice(frames))
