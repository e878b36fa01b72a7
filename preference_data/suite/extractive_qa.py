"""Extractive QA over a short generated passage about two people.

Both people have the same kinds of facts (job, pet, weekly outing, instrument), so every question
has a plausible wrong answer in the passage: the other person's fact. Correctness: the response
commits to the gold span (`text.committed_choice`), not to the other person's, not to both, and
not to a hedge between them.
"""

from __future__ import annotations

import random

from .base import (
    NAMES,
    Corrupted,
    Draft,
    Family,
    Params,
    answer_corruptions,
    article,
    cap,
    choose,
    hedge,
    maybe_system,
    negate,
    non_answer,
    pad,
    truncate_before,
)
from .scoring import conciseness_score
from .text import committed_choice, group_index, word_count

PEOPLE = [*NAMES, "Felix", "Clara", "Diego", "Hana", "Marco", "Tara"]  # the shared names, then a few more
CITIES = ["Lisbon", "Denver", "Leeds", "Osaka", "Perth", "Quebec", "Bergen", "Porto", "Austin", "Cork", "Malmo", "Graz"]
JOBS = [
    "baker",
    "nurse",
    "teacher",
    "pilot",
    "farmer",
    "dentist",
    "plumber",
    "painter",
    "chef",
    "lawyer",
    "librarian",
    "mechanic",
    "architect",
    "engineer",
    "journalist",
    "pharmacist",
    "florist",
    "carpenter",
    "tailor",
    "firefighter",
]
ANIMALS = ["cat", "dog", "rabbit", "parrot", "hamster", "turtle"]
PETS = [
    "Rex",
    "Luna",
    "Max",
    "Bella",
    "Milo",
    "Coco",
    "Oscar",
    "Daisy",
    "Rocky",
    "Pepper",
    "Toby",
    "Willow",
    "Ziggy",
    "Biscuit",
    "Shadow",
    "Bingo",
    "Olive",
    "Pickle",
]
COLORS = ["black", "white", "brown", "gray", "golden", "spotted", "ginger"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
PLACES = ["library", "market", "pool", "gym", "park", "museum", "beach", "cinema", "bakery", "zoo"]
INSTRUMENTS = ["piano", "guitar", "violin", "drums", "flute", "cello", "trumpet", "harp"]

SLOTS = ("job", "pet", "color", "day", "place", "instrument")
_INSTRUCTIONS = [
    "Read the passage and answer the question.",
    "Answer the question using the passage.",
    "Use the passage below to answer the question.",
]


def _facts(rng: random.Random) -> dict[str, list[str]]:
    return {
        "job": rng.sample(JOBS, 2),
        "animal": [rng.choice(ANIMALS)] * 2 if rng.random() < 0.4 else rng.sample(ANIMALS, 2),
        "pet": rng.sample(PETS, 2),
        "color": rng.sample(COLORS, 2),
        "day": rng.sample(DAYS, 2),
        "place": rng.sample(PLACES, 2),
        "instrument": rng.sample(INSTRUMENTS, 2),
    }


def _sentences(rng: random.Random, p: list[str], f: dict[str, list[str]], city: str) -> dict[str, str]:
    a, b = p
    j, an, pe, co, d, pl, ins = (f[k] for k in ("job", "animal", "pet", "color", "day", "place", "instrument"))
    return {
        "intro": rng.choice(
            [f"{a} and {b} are neighbours in {city}.", f"{a} and {b} are old friends who live in {city}."]
        ),
        "job": rng.choice(
            [
                f"{a} works as {article(j[0])} {j[0]}, while {b} is {article(j[1])} {j[1]}.",
                f"{b} is {article(j[1])} {j[1]}, and {a} works as {article(j[0])} {j[0]}.",
            ]
        ),
        "pet": rng.choice(
            [
                f"{a} has {article(co[0])} {co[0]} {an[0]} called {pe[0]}, and {b} has {article(co[1])} "
                f"{co[1]} {an[1]} named {pe[1]}.",
                f"{b}'s {an[1]} is {co[1]} and is called {pe[1]}; {a} owns {article(co[0])} {co[0]} "
                f"{an[0]} named {pe[0]}.",
            ]
        ),
        "outing": rng.choice(
            [
                f"Every {d[0]}, {a} goes to the {pl[0]}, but {b} visits the {pl[1]} on {d[1]}s.",
                f"On {d[1]}s {b} visits the {pl[1]}, and every {d[0]} {a} goes to the {pl[0]}.",
            ]
        ),
        "instrument": rng.choice(
            [
                f"In the evenings, {a} plays the {ins[0]} and {b} practises the {ins[1]}.",
                f"{b} plays the {ins[1]} in a band, and {a} is learning the {ins[0]}.",
            ]
        ),
    }


def generate(rng: random.Random) -> Draft:
    """A 4-5 sentence passage about two people and a question about one fact of one of them."""
    people = rng.sample(PEOPLE, 2)
    facts, city = _facts(rng), rng.choice(CITIES)
    s = _sentences(rng, people, facts, city)
    slot = rng.choice(SLOTS)
    needed = {
        "job": "job",
        "pet": "pet",
        "color": "pet",
        "day": "outing",
        "place": "outing",
        "instrument": "instrument",
    }[slot]
    others = [k for k in ("job", "pet", "outing", "instrument") if k != needed]
    chosen = rng.sample(others, rng.randint(1, 2)) + [needed]
    order = [k for k in ("job", "pet", "outing", "instrument") if k in chosen]
    passage = " ".join([s["intro"]] + [s[k] for k in order])
    who = rng.randrange(2)
    x, other = people[who], people[1 - who]
    an, pl, d = facts["animal"][who], facts["place"][who], facts["day"][who]
    question = {
        "job": rng.choice([f"What is {x}'s job?", f"What does {x} do for a living?"]),
        "pet": rng.choice([f"What is the name of {x}'s {an}?", f"What is {x}'s {an} called?"]),
        "color": rng.choice([f"What color is {x}'s {an}?", f"What is the color of {x}'s {an}?"]),
        "day": rng.choice([f"On which day does {x} go to the {pl}?", f"When does {x} go to the {pl}?"]),
        "place": rng.choice([f"Where does {x} go every {d}?", f"Which place does {x} visit on {d}s?"]),
        "instrument": rng.choice([f"Which instrument does {x} play?", f"What instrument does {x} play?"]),
    }[slot]
    key = "day" if slot == "day" else slot
    gold, distractor = facts[key][who], facts[key][1 - who]
    user = f"{rng.choice(_INSTRUCTIONS)}\n\nPassage: {passage}\n\nQuestion: {question}"
    params = {
        "slot": slot,
        "person": x,
        "other": other,
        "animal": an,
        "place": pl,
        "day": d,
        "city": city,
        "gold": gold,
        "distractor": distractor,
        "word_budget": 20,
    }
    return Draft(user=user, params=params, system=maybe_system(rng))


# ------------------------------------------------------------------------------------ answers


def _write(params: Params, value: str, rng: random.Random | None, style: int | None = None) -> str:
    x, an, pl, d = params["person"], params["animal"], params["place"], params["day"]
    v = value
    frames = {
        "job": [
            f"{x} works as {article(v)} {v}.",
            f"{cap(article(v))} {v}.",
            f"{x} is {article(v)} {v}.",
            f"According to the passage, {x} is {article(v)} {v}.",
        ],
        "pet": [f"{x}'s {an} is called {v}.", f"{v}.", f"It is called {v}.", f"The {an}'s name is **{v}**."],
        "color": [f"{x}'s {an} is {v}.", f"{cap(v)}.", f"It is {v}.", f"According to the passage, it is {v}."],
        "day": [f"{x} goes to the {pl} on {v}s.", f"On {v}.", f"Every {v}.", f"According to the passage, on {v}s."],
        "place": [f"{x} goes to the {v} every {d}.", f"The {v}.", f"To the {v}.", f"{x} visits the **{v}**."],
        "instrument": [
            f"{x} plays the {v}.",
            f"The {v}.",
            f"{cap(v)}.",
            f"According to the passage, {x} plays the {v}.",
        ],
    }[params["slot"]]
    return frames[style] if style is not None else choose(rng, frames)


def answer(params: Params, rng: random.Random | None = None) -> str:
    """The gold span in a short sentence or as a bare phrase."""
    return _write(params, params["gold"], rng)


# --------------------------------------------------------------------------------------- grader

# Every value a question's slot can take: naming another one beside the gold span is a second answer.
_SLOT_VALUES = {"job": JOBS, "pet": PETS, "color": COLORS, "day": DAYS, "place": PLACES, "instrument": INSTRUMENTS}


def candidates(params: Params) -> dict[str, list[str]]:
    """What the grader reads as an answer: 'gold', 'distractor' (the other person's span) and every
    other value of the question's slot (all jobs for a job question, ...), each its own key."""
    return span_candidates(params["gold"], params["distractor"], params.get("slot", ""))


_SLOT_OF = group_index(_SLOT_VALUES)


def slot_of(value: str) -> str:
    """The slot whose values include `value` (job, pet, color, ...; the first where several do), "" where none does."""
    return _SLOT_OF.get(value.lower(), "")


def span_candidates(gold: str, distractor: str, slot: str | None = None) -> dict[str, list[str]]:
    """`candidates` from the two spans alone: the slot is the one `gold` is a value of (`slot_of`) unless given."""
    out = {"gold": [gold], "distractor": [distractor]}
    for v in _SLOT_VALUES.get(slot_of(gold) if slot is None else slot, []):
        if v.lower() not in (gold.lower(), distractor.lower()):
            out["other:" + v.lower()] = [v]
    return out


def score(params: Params, response: str) -> dict[str, float]:
    """correctness: 1 iff the response commits to the gold span (`text.committed_choice` over
    `candidates`: whole words, case-insensitive, plural allowed); naming the other person's span
    too, hedging, or denying the span is 0.
    conciseness: `conciseness_score(words, word_budget)`."""
    got = committed_choice(response, candidates(params)).answer
    return {
        "correctness": 1.0 if got == "gold" else 0.0,
        "conciseness": conciseness_score(word_count(response), params["word_budget"]),
    }


def _wrong_value(params: Params, phrasing: int, rng: random.Random) -> Corrupted | None:
    text = _write(params, params["distractor"], random.Random(phrasing))
    return Corrupted(
        text,
        f"answers with {params['other']}'s {params['slot']} ({params['distractor']}) "
        f"instead of {params['person']}'s ({params['gold']})",
    )


_OPENERS = [
    "The passage describes two people, so let's look at the right one.",
    "To answer this, we need to find the part of the passage about {x}.",
]
_FILLERS = [
    "The passage tells a short story about two people who live in {city}.",
    "I found this in the sentence of the passage that talks about {x}.",
    "So, to answer the question directly: {bare}",
    "Both people are described in the passage, but the question only asks about {x}.",
    "This detail is stated clearly in the passage, so there is no doubt about it.",
]
_CLOSERS = [
    "Let me know if you have any other questions about the passage.",
    "I hope this helps you understand the passage better!",
]


def _padding(params: Params, phrasing: int, rng: random.Random) -> Corrupted | None:
    fill = {"x": params["person"], "city": params["city"], "bare": _write(params, params["gold"], None, style=1)}
    padded = pad(
        answer(params, random.Random(phrasing)),
        [f.format(**fill) for f in _FILLERS],
        params["word_budget"],
        rng,
        [o.format(**fill) for o in _OPENERS],
        _CLOSERS,
    )
    return None if padded is None else Corrupted(padded, "correct, but padded with restatements and filler")


def _truncated(params: Params, phrasing: int, rng: random.Random) -> Corrupted | None:
    cut = truncate_before(answer(params, random.Random(phrasing)), params["gold"], min_words=3)
    return None if cut is None else Corrupted(cut, "cut off before it gives the answer")


def _hedged(params: Params, phrasing: int, rng: random.Random) -> Corrupted | None:
    text = answer(params, random.Random(phrasing))
    return hedge(text, params["gold"], params["distractor"], _write(params, params["distractor"], None, style=1), rng)


def _negated(params: Params, phrasing: int, rng: random.Random) -> Corrupted | None:
    return negate(answer(params, random.Random(phrasing)), rng)


def _non_answer(params: Params, phrasing: int, rng: random.Random) -> Corrupted | None:
    x = params["person"]
    return non_answer(
        [
            f"The passage is about {x} and {params['other']}.",
            f"The question asks about {x}, who lives in {params['city']}.",
            "The passage does not say.",
        ],
        rng,
    )


FAMILY = Family(
    name="extractive_qa",
    summary="a question about one of two people in a short passage; the answer is a span of it",
    objectives=("correctness", "conciseness", "safety"),
    generate=generate,
    score=score,
    answer=answer,
    corruptions=answer_corruptions(_wrong_value, _padding, _truncated, _hedged, _negated, _non_answer),
)
