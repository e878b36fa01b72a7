"""Simple factual questions whose ideal answer is one short sentence.

The point of the family is length: a correct one-sentence answer beats the same answer wrapped in
restatements, background and offers of more help. Correctness checks the one fact the response
commits to (`text.committed_choice`): the right one, not a plausible wrong one, not both, not hedged.
"""

from __future__ import annotations

import random
from functools import lru_cache

from .base import (
    Corrupted,
    Draft,
    Family,
    Params,
    answer_corruptions,
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
from .text import asserted_numbers, committed_choice, group_index, number_words, word_count

# (category, subject, answer, plausible wrong answer)
_CAPITALS = [
    ("Japan", "Tokyo", "Osaka"),
    ("France", "Paris", "Lyon"),
    ("Italy", "Rome", "Milan"),
    ("Spain", "Madrid", "Barcelona"),
    ("Germany", "Berlin", "Munich"),
    ("Canada", "Ottawa", "Toronto"),
    ("Australia", "Canberra", "Sydney"),
    ("Brazil", "Brasilia", "Rio de Janeiro"),
    ("Turkey", "Ankara", "Istanbul"),
    ("Egypt", "Cairo", "Alexandria"),
    ("Kenya", "Nairobi", "Mombasa"),
    ("India", "New Delhi", "Mumbai"),
    ("China", "Beijing", "Shanghai"),
    ("Russia", "Moscow", "Saint Petersburg"),
    ("Mexico", "Mexico City", "Guadalajara"),
    ("Argentina", "Buenos Aires", "Cordoba"),
    ("Norway", "Oslo", "Bergen"),
    ("Sweden", "Stockholm", "Gothenburg"),
    ("Portugal", "Lisbon", "Porto"),
    ("Greece", "Athens", "Thessaloniki"),
    ("Poland", "Warsaw", "Krakow"),
    ("Peru", "Lima", "Cusco"),
    ("Morocco", "Rabat", "Casablanca"),
    ("Vietnam", "Hanoi", "Ho Chi Minh City"),
    ("South Korea", "Seoul", "Busan"),
    ("New Zealand", "Wellington", "Auckland"),
    ("Switzerland", "Bern", "Zurich"),
    ("Nigeria", "Abuja", "Lagos"),
    ("Ireland", "Dublin", "Cork"),
    ("Austria", "Vienna", "Salzburg"),
]
_INSTRUMENTS = [
    ("thermometer", "temperature", "air pressure"),
    ("barometer", "air pressure", "temperature"),
    ("speedometer", "speed", "distance"),
    ("odometer", "distance traveled", "speed"),
    ("hygrometer", "humidity", "wind speed"),
    ("anemometer", "wind speed", "humidity"),
    ("seismograph", "earthquakes", "volcanoes"),
    ("ammeter", "electric current", "voltage"),
    ("voltmeter", "voltage", "electric current"),
    ("altimeter", "altitude", "depth"),
    ("pedometer", "steps", "heart rate"),
    ("stopwatch", "elapsed time", "distance"),
]
_YOUNG = [
    ("cow", "calf", "foal"),
    ("dog", "puppy", "kitten"),
    ("cat", "kitten", "puppy"),
    ("horse", "foal", "calf"),
    ("sheep", "lamb", "kid"),
    ("goat", "kid", "lamb"),
    ("kangaroo", "joey", "cub"),
    ("frog", "tadpole", "larva"),
    ("duck", "duckling", "chick"),
    ("bear", "cub", "pup"),
    ("swan", "cygnet", "duckling"),
    ("deer", "fawn", "calf"),
    ("owl", "owlet", "chick"),
    ("pig", "piglet", "calf"),
    ("goose", "gosling", "duckling"),
]
_COUNTS = [
    ("days are in a week", "7", "6", "There are {a} days in a week."),
    ("months are in a year", "12", "10", "There are {a} months in a year."),
    ("hours are in a day", "24", "12", "There are {a} hours in a day."),
    ("minutes are in an hour", "60", "100", "There are {a} minutes in an hour."),
    ("legs does a spider have", "8", "6", "A spider has {a} legs."),
    ("legs does an insect have", "6", "8", "An insect has {a} legs."),
    ("sides does a hexagon have", "6", "8", "A hexagon has {a} sides."),
    ("sides does a pentagon have", "5", "6", "A pentagon has {a} sides."),
    ("planets are in the solar system", "8", "9", "There are {a} planets in the solar system."),
    ("continents are there", "7", "6", "There are {a} continents."),
    ("days are in a leap year", "366", "365", "A leap year has {a} days."),
    ("players are on a soccer team on the field", "11", "10", "A soccer team has {a} players on the field."),
    ("strings does a standard guitar have", "6", "4", "A standard guitar has {a} strings."),
    ("weeks are in a year", "52", "48", "There are {a} weeks in a year."),
    ("seconds are in a minute", "60", "100", "There are {a} seconds in a minute."),
    ("degrees are in a right angle", "90", "180", "A right angle has {a} degrees."),
    ("colors are in a rainbow", "7", "6", "A rainbow has {a} colors."),
]
_MIXES = [
    ("blue", "yellow", "green", "purple"),
    ("red", "yellow", "orange", "brown"),
    ("red", "blue", "purple", "green"),
    ("red", "white", "pink", "orange"),
    ("black", "white", "gray", "silver"),
    ("blue", "white", "light blue", "gray"),
]
_MISC = [
    (
        "What is the largest planet in our solar system?",
        "Jupiter",
        "Saturn",
        "The largest planet in our solar system is {a}.",
    ),
    ("Which planet is known as the Red Planet?", "Mars", "Venus", "{a} is known as the Red Planet."),
    ("What is the largest ocean on Earth?", "the Pacific Ocean", "the Atlantic Ocean", "The largest ocean is {a}."),
    ("What is the tallest mountain in the world?", "Mount Everest", "K2", "The tallest mountain is {a}."),
    (
        "What gas do plants take in from the air to make food?",
        "carbon dioxide",
        "oxygen",
        "Plants take in {a} from the air.",
    ),
    (
        "At what temperature does water boil at sea level, in degrees Celsius?",
        "100",
        "90",
        "Water boils at {a} degrees Celsius at sea level.",
    ),
    ("At what temperature does water freeze, in degrees Celsius?", "0", "4", "Water freezes at {a} degrees Celsius."),
    ("What is the chemical symbol for gold?", "Au", "Ag", "The chemical symbol for gold is {a}."),
    ("What is the chemical symbol for iron?", "Fe", "Ir", "The chemical symbol for iron is {a}."),
    (
        "What is the longest river in South America?",
        "the Amazon",
        "the Parana",
        "The longest river in South America is {a}.",
    ),
    ("Which organ pumps blood around the body?", "the heart", "the lungs", "{A} pumps blood around the body."),
    ("What is the hardest natural substance?", "diamond", "quartz", "The hardest natural substance is {a}."),
    ("What is the closest star to Earth?", "the Sun", "Proxima Centauri", "The closest star to Earth is {a}."),
    ("Who wrote Romeo and Juliet?", "William Shakespeare", "Charles Dickens", "Romeo and Juliet was written by {a}."),
    ("What is the main language spoken in Brazil?", "Portuguese", "Spanish", "The main language of Brazil is {a}."),
    ("How many bones are in the adult human body?", "206", "208", "An adult human body has {a} bones."),
    ("What do bees make from nectar?", "honey", "wax", "Bees make {a} from nectar."),
    ("Which animal is the largest mammal on Earth?", "the blue whale", "the elephant", "The largest mammal is {a}."),
]

_Q = {
    "capital": ["What is the capital of {s}?", "Which city is the capital of {s}?", "Name the capital of {s}."],
    "instrument": ["What does a {s} measure?", "What is a {s} used to measure?", "What is measured with a {s}?"],
    "young": ["What is a baby {s} called?", "What do you call a young {s}?", "What is the name for a baby {s}?"],
    "count": ["How many {s}?"],
    "mix": ["What color do you get when you mix {s}?", "Which color do you get by mixing {s}?"],
    "misc": ["{s}"],
}
_A = {
    "capital": ["The capital of {s} is {a}.", "{A} is the capital of {s}.", "It's {a}."],
    "instrument": ["A {s} measures {a}.", "It measures {a}.", "A {s} is used to measure {a}."],
    "young": ["A baby {s} is called a {a}.", "It's called a {a}.", "A young {s} is a {a}."],
    "mix": ["Mixing {s} gives {a}.", "You get {a}.", "{A}."],
}
_PREFIXES = ["", "", "", "Quick question: ", "I'm curious: ", "Hi! "]


def _facts() -> list[tuple[str, str, str, str]]:
    out = [("capital", s, a, w) for s, a, w in _CAPITALS]
    out += [("instrument", s, a, w) for s, a, w in _INSTRUMENTS]
    out += [("young", s, a, w) for s, a, w in _YOUNG]
    out += [("count", s, a, w) for s, a, w, _ in _COUNTS]
    out += [("mix", f"{x} and {y}", a, w) for x, y, a, w in _MIXES]
    out += [("misc", q, a, w) for q, a, w, _ in _MISC]
    return out


FACTS = _facts()
# Every answer and plausible wrong answer per category with a closed set of answers (not numbers).
_CATEGORY_ANSWERS: dict[str, list[str]] = {}
for _cat, _s, _a, _w in FACTS:
    if _cat in ("capital", "instrument", "young", "mix"):
        _CATEGORY_ANSWERS.setdefault(_cat, [])
        _CATEGORY_ANSWERS[_cat] += [x for x in (_a, _w) if x not in _CATEGORY_ANSWERS[_cat]]
_SENTENCE = {s: t for s, _, _, t in _COUNTS} | {q: t for q, _, _, t in _MISC}


# Other accepted spellings of an answer, besides the number in words and dropping a leading "the".
_ALIASES = {
    "Mount Everest": ["Everest"],
    "William Shakespeare": ["Shakespeare"],
    "carbon dioxide": ["CO2"],
    "Brasilia": ["Brasília"],
    "distance traveled": ["distance travelled", "distance"],
    "elapsed time": ["time"],
    "the Pacific Ocean": ["Pacific"],
    "the Atlantic Ocean": ["Atlantic"],
    "Rio de Janeiro": ["Rio"],
    "Bogota": ["Bogotá"],
}


def accepted(value: str) -> list[str]:
    """Every spelling of `value` the grader accepts: itself, without a leading "the", the number
    in words ("7" -> "seven"), and the listed aliases."""
    out = [value]
    if value.lower().startswith("the "):
        out.append(value[4:])
    if value.isdigit() and int(value) < 100:
        out.append(number_words(int(value)))
    return out + _ALIASES.get(value, [])


def generate(rng: random.Random) -> Draft:
    """One fact question, in one of a few phrasings."""
    cat, subject, ans, wrong = rng.choice(FACTS)
    q = rng.choice(_Q[cat]).format(s=subject)
    prefix = rng.choice(_PREFIXES)
    user = prefix + (q[0].lower() + q[1:] if prefix.endswith(": ") else q)
    params = {
        "category": cat,
        "subject": subject,
        "answer": ans,
        "wrong": wrong,
        "accepted": accepted(ans),
        "rejected": accepted(wrong),
        "word_budget": 15,
    }
    return Draft(user=user, params=params, system=maybe_system(rng))


def _write(params: Params, value: str, rng: random.Random | None) -> str:
    cat, s = params["category"], params["subject"]
    if cat in _A:
        frames = _A[cat]
    else:
        sentence = _SENTENCE[s]
        frames = [sentence, "{A}.", sentence]
    text = choose(rng, frames).format(s=s, a=value, A=cap(value))
    return choose(rng, ["", "", "", "Sure! "]) + text


def answer(params: Params, rng: random.Random | None = None) -> str:
    """One short sentence (or a bare phrase) stating the fact."""
    return _write(params, params["answer"], rng)


def _other_answers(category: str | None) -> list[str]:
    """Every other answer to a question of `category` (all capitals, all baby-animal names, ...):
    naming one beside the right answer is giving two answers. Numbers have no such list."""
    if category not in _CATEGORY_ANSWERS:
        return []
    return _CATEGORY_ANSWERS[category]


def candidates(params: Params) -> dict[str, list[str]]:
    """What the grader reads as an answer: 'right' (the accepted spellings), 'wrong' (the plausible
    wrong answer's), and every other answer of the category, each its own key."""
    return dict(_candidates(params.get("category"), tuple(params["accepted"]), tuple(params["rejected"])))


_CATEGORY_OF = group_index(_CATEGORY_ANSWERS)


def category_of(answer: str) -> str | None:
    """The category with a closed set of answers that `answer` is one of (capitals, instruments, ...; the first where
    several are), or None (a number, or an answer of no such category)."""
    return _CATEGORY_OF.get(answer.lower())


def answer_candidates(answer: str) -> dict[str, list[str]]:
    """`candidates` for a bare answer, as a reader that knows only the answer builds them: 'right' (its accepted
    spellings) and every other answer of the category it is one of (`category_of`)."""
    return {k: v for k, v in _candidates(category_of(answer), tuple(accepted(answer)), ()) if v}


def committed_answer(cands: dict[str, list[str]], answer: str, response: str) -> str | None:
    """The key of `cands` the response commits to (`text.committed_choice`), None where it commits to none; a
    number question has one number for an answer, so any other number asserted beside it is a second answer."""
    got = committed_choice(response, cands).answer
    if got == "right" and answer.isdigit() and any(n != float(answer) for n in asserted_numbers(response)):
        return None
    return got


@lru_cache(maxsize=4096)
def _candidates(
    category: str | None, right_spellings: tuple[str, ...], wrong_spellings: tuple[str, ...]
) -> tuple[tuple[str, list[str]], ...]:
    right = [a.lower() for a in right_spellings]
    out: dict[str, list[str]] = {"right": list(right_spellings)}
    out["wrong"] = [w for w in wrong_spellings if w.lower() not in right]
    for other in _other_answers(category):
        spellings = [a for a in accepted(other) if a.lower() not in right]
        if spellings and other.lower() not in right:
            out.setdefault("other:" + other.lower(), spellings)
    return tuple(out.items())


def score(params: Params, response: str) -> dict[str, float]:
    """correctness: 1 iff the response commits to the answer (`text.committed_choice` over
    `candidates`: any accepted spelling, whole words, case-insensitive; not hedged, denied, or
    given together with the plausible wrong answer or another answer of the same category; for a
    number question, together with any other number).
    conciseness: `conciseness_score(words, word_budget)` with a budget of one short sentence."""
    got = committed_answer(candidates(params), str(params.get("answer", "")), response)
    return {
        "correctness": 1.0 if got == "right" else 0.0,
        "conciseness": conciseness_score(word_count(response), params["word_budget"]),
    }


def _wrong_value(params: Params, phrasing: int, rng: random.Random) -> Corrupted | None:
    return Corrupted(
        _write(params, params["wrong"], random.Random(phrasing)),
        f"states {params['wrong']} instead of {params['answer']}",
    )


_OPENERS = [
    "Great question!",
    "That's a really interesting question, and many people wonder about it.",
    "Let me explain this clearly for you.",
]
_FILLERS = [
    "This is a well-known fact that is often taught in school.",
    "So, to put it simply, the answer is {a}.",
    "Many people learn this at a young age, but it is easy to forget.",
    "It is one of those facts that comes up often in quizzes and everyday conversation.",
    "In short, {a} is the answer to your question.",
]
_CLOSERS = [
    "I hope this helps! Let me know if you have any other questions.",
    "Feel free to ask if you want to know more about this topic!",
]


def _padding(params: Params, phrasing: int, rng: random.Random) -> Corrupted | None:
    fillers = [f.format(a=params["answer"]) for f in _FILLERS]
    padded = pad(
        answer(params, random.Random(phrasing)), fillers, params["word_budget"], rng, _OPENERS, _CLOSERS, ratio=2.0
    )
    return None if padded is None else Corrupted(padded, "correct, but buried in filler and repetition")


def _truncated(params: Params, phrasing: int, rng: random.Random) -> Corrupted | None:
    cut = truncate_before(answer(params, random.Random(phrasing)), params["answer"], min_words=3)
    return None if cut is None else Corrupted(cut, "cut off before it states the answer")


def _hedged(params: Params, phrasing: int, rng: random.Random) -> Corrupted | None:
    text = answer(params, random.Random(phrasing))
    return hedge(text, params["answer"], params["wrong"], _write(params, params["wrong"], None), rng)


def _negated(params: Params, phrasing: int, rng: random.Random) -> Corrupted | None:
    return negate(answer(params, random.Random(phrasing)), rng)


def _non_answer(params: Params, phrasing: int, rng: random.Random) -> Corrupted | None:
    cat, s = params["category"], params["subject"]
    about = {
        "capital": f"the capital of {s}",
        "instrument": f"what a {s} measures",
        "young": f"the name of a baby {s}",
        "mix": f"mixing {s}",
    }.get(cat, "this")
    return non_answer([f"You are asking about {about}.", f"That is a question about {about}."], rng)


FAMILY = Family(
    name="short_answer",
    summary="a simple factual question whose ideal answer is one short sentence",
    objectives=("correctness", "conciseness", "safety"),
    generate=generate,
    score=score,
    answer=answer,
    corruptions=answer_corruptions(_wrong_value, _padding, _truncated, _hedged, _negated, _non_answer, lead="padding"),
)
