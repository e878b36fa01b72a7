"""List manipulation: sort, reverse, remove duplicates, or pick the k-th item of a given list.

Correctness compares the list the response commits to (`text.committed_list`: the last bulleted,
numbered or comma-separated block, lead-ins and remarks ignored; a second, different list, a hedge
or a denial commits to none) with the expected list, item by item; for k-th item questions it is
the one item the response commits to (`text.committed_choice`, with a restatement of the input
list set aside). Whole-list tasks ask for a layout (comma-separated, numbered or bulleted), which
grades instruction_following.
"""

from __future__ import annotations

import random
import re
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
from .text import ListBlock, committed_choice, committed_list, list_blocks, normalize, word_count

WORDS = {
    "fruits": [
        "apple",
        "banana",
        "cherry",
        "grape",
        "kiwi",
        "lemon",
        "mango",
        "melon",
        "peach",
        "pear",
        "plum",
        "fig",
        "lime",
        "papaya",
        "apricot",
        "guava",
    ],
    "animals": [
        "cat",
        "dog",
        "horse",
        "tiger",
        "zebra",
        "rabbit",
        "mouse",
        "eagle",
        "shark",
        "whale",
        "otter",
        "panda",
        "camel",
        "goat",
        "wolf",
        "fox",
    ],
    "colors": [
        "red",
        "blue",
        "green",
        "yellow",
        "purple",
        "pink",
        "brown",
        "black",
        "white",
        "gray",
        "silver",
        "gold",
        "teal",
        "violet",
        "beige",
        "navy",
    ],
    "cities": [
        "Paris",
        "Tokyo",
        "Cairo",
        "Lima",
        "Oslo",
        "Rome",
        "Dublin",
        "Madrid",
        "Berlin",
        "Vienna",
        "Prague",
        "Athens",
        "Seoul",
        "Delhi",
        "Sydney",
        "Toronto",
    ],
}
ORDINALS = ["first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth"]

_TASKS = {
    "sort_alpha": ["Sort these {cat} in alphabetical order: {L}.", "Put these {cat} in alphabetical order: {L}."],
    "sort_asc": [
        "Sort these numbers from smallest to largest: {L}.",
        "Arrange these numbers in increasing order: {L}.",
    ],
    "sort_desc": [
        "Sort these numbers from largest to smallest: {L}.",
        "Arrange these numbers in decreasing order: {L}.",
    ],
    "reverse": ["Reverse the order of this list: {L}.", "Write this list backwards, last item first: {L}."],
    "dedupe": [
        "Remove the duplicates from this list, keeping the first time each item appears: {L}.",
        "Remove the repeated items from this list (keep each first occurrence): {L}.",
    ],
    "kth": ["What is the {ord} item in this list: {L}?", "Which item comes {ord} in this list: {L}?"],
}
FORMATS = {
    "comma": ["Reply with the items separated by commas.", "Give the answer on one line, separated by commas."],
    "numbered": ["Write the result as a numbered list.", "Answer with a numbered list."],
    "bullets": ["Write the result as a bulleted list.", "Answer with a bullet list."],
}
_LEADS = {
    "sort_alpha": ["Here they are in alphabetical order:", "Sorted alphabetically:", "Here is the sorted list:", ""],
    "sort_asc": ["From smallest to largest:", "Here is the sorted list:", ""],
    "sort_desc": ["From largest to smallest:", "Here is the sorted list:", ""],
    "reverse": ["Here is the list in reverse order:", "Reversed:", ""],
    "dedupe": ["Here is the list without duplicates:", "With the duplicates removed:", ""],
}


def apply_op(op: str, items: list[str], k: int = 0) -> list[str]:
    """The right answer of operation `op` (sort_alpha, sort_asc, sort_desc, reverse, dedupe, kth) on `items`,
    lowercased; a numeric sort of items that are not integers raises ValueError."""
    low = [x.lower() for x in items]
    if op == "sort_alpha":
        return sorted(low)
    if op == "sort_asc":
        return sorted(low, key=int)
    if op == "sort_desc":
        return sorted(low, key=int, reverse=True)
    if op == "reverse":
        return low[::-1]
    if op == "dedupe":
        return list(dict.fromkeys(low))
    return [low[k - 1]]


def generate(rng: random.Random) -> Draft:
    """A list of 4-7 words or numbers, an operation, and (for whole-list answers) a layout."""
    numeric = rng.random() < 0.4
    ops = (
        ["sort_asc", "sort_desc", "reverse", "dedupe", "kth"] if numeric else ["sort_alpha", "reverse", "dedupe", "kth"]
    )
    op = rng.choice(ops)
    n = rng.randint(4, 7)
    if numeric:
        cat, pool = "numbers", [str(x) for x in rng.sample(range(1, 100), 12)]
    else:
        cat = rng.choice(sorted(WORDS))
        pool = rng.sample(WORDS[cat], 12)
    if op == "dedupe":
        base = pool[: n - rng.randint(1, 2)]
        items = list(base)
        while len(items) < n:
            dup = rng.choice(base[:-1])
            pos = rng.randint(items.index(dup) + 2, len(items))
            items.insert(pos, dup)
    else:
        items = pool[:n]
        while op.startswith("sort") and apply_op(op, items) == [x.lower() for x in items]:
            rng.shuffle(items)
    k = rng.randint(2, n) if op == "kth" else 0
    fmt = None if op == "kth" else rng.choice(sorted(FORMATS))
    user = rng.choice(_TASKS[op]).format(cat=cat, L=", ".join(items), ord=ORDINALS[k - 1] if k else "")
    if fmt:
        user += " " + rng.choice(FORMATS[fmt])
    params = {
        "op": op,
        "category": cat,
        "items": items,
        "k": k,
        "format": fmt,
        "expected": apply_op(op, items, k),
        "word_budget": 15 if op == "kth" else 12 + 2 * n,
    }
    return Draft(user=user, params=params, system=maybe_system(rng))


# ------------------------------------------------------------------------------------ answers


def _display(params: Params, low: list[str]) -> list[str]:
    return [x.capitalize() if params["category"] == "cities" else x for x in low]


def _layout(items: list[str], fmt: str, lead: str, marker: str) -> str:
    if fmt == "comma":
        return (lead + " " if lead else "") + ", ".join(items) + "."
    if fmt == "numbered":
        body = "\n".join(f"{i}. {x}" for i, x in enumerate(items, 1))
    else:
        body = "\n".join(f"{marker} {x}" for x in items)
    return (lead + "\n" if lead else "") + body


def _write(params: Params, result: list[str], rng: random.Random | None, fmt: str | None = None) -> str:
    shown = _display(params, result)
    if params["op"] == "kth":
        x, o = shown[0], ORDINALS[params["k"] - 1]
        return choose(
            rng, [f"The {o} item is {x}.", f"{cap(x)}.", f"It's {x}.", f"The {o} item in the list is **{x}**."]
        )
    lead = choose(rng, _LEADS[params["op"]])
    marker = choose(rng, ["-", "*"])
    return _layout(shown, fmt or params["format"], lead, marker)


def answer(params: Params, rng: random.Random | None = None) -> str:
    """The expected list in the requested layout, with or without a short lead-in."""
    return _write(params, params["expected"], rng)


# --------------------------------------------------------------------------------------- grader

_SEP = r"[^\S\n]*(?:[,;][^\S\n]*|\s+)(?:and[^\S\n]+)?[\"']?"
# Not a list item but a position: "item 3", "number 3", "position 3", "#3".
_POSITION_RE = re.compile(r"\b(?:item|number|position|place|no\.)[^\S\n]*#?[^\S\n]*(\d+)\b|#(\d+)\b", re.I)


@lru_cache(maxsize=4096)
def _restated_re(items: tuple[str, ...]) -> re.Pattern[str]:
    low = [re.escape(x.lower()) for x in items]
    runs = [_SEP.join(low[i : i + n]) for n in range(len(low), 2, -1) for i in range(len(low) - n + 1)]
    return re.compile(r"(?<![\w])[\"']?(?:" + "|".join(runs) + r")(?![\w])", re.I)


def _restated_input(text: str, items: list[str]) -> str:
    """`text` with a restatement of the input list (three or more of its items in their given
    order: "In the list pear, apple, kiwi, fig the third is kiwi") blanked out."""
    return _restated_re(tuple(items)).sub(" ", text) if len(items) >= 3 else text


def named_item(params: Params, response: str) -> str | None:
    """The one item a response commits to as its answer to a k-th item question, or None: the
    restated input list and positions ("item 3") are set aside, then `text.committed_choice` over
    the list's items must find exactly one, not hedged or denied."""
    text = _POSITION_RE.sub(" ", _restated_input(normalize(response), params["items"]))
    cands = {x.lower(): [x] for x in params["items"]}
    return committed_choice(text, cands).answer


def layout(blocks: list[ListBlock]) -> str:
    """How a response writes its answer list: the layout of its last list block (`text.list_blocks`), or 'none'."""
    return blocks[-1].fmt if blocks else "none"


def score(params: Params, response: str) -> dict[str, float]:
    """correctness: whole-list tasks -> 1 iff the list the response commits to (`text.committed_list`)
    equals the expected list exactly (same items, same order, nothing extra); k-th item -> 1 iff the
    one item it commits to (`named_item`) is the expected one.
    instruction_following (whole-list tasks): 1 iff the answer list is written in the requested
    layout ('comma': one line separated by commas; 'numbered': "1." lines; 'bullets': "-"/"*" lines).
    conciseness: `conciseness_score(words, word_budget)`."""
    vocab = [x.lower() for x in params["items"]]
    out: dict[str, float] = {}
    if params["op"] == "kth":
        out["correctness"] = 1.0 if named_item(params, response) == params["expected"][0] else 0.0
    else:
        blocks = list_blocks(response, vocab)
        got = committed_list(response, vocab, blocks).answer
        out["correctness"] = 1.0 if got == params["expected"] else 0.0
        out["instruction_following"] = 1.0 if layout(blocks) == params["format"] else 0.0
    out["conciseness"] = conciseness_score(word_count(response), params["word_budget"])
    return out


# ---------------------------------------------------------------------------------- corruptions


def _wrong_value(params: Params, phrasing: int, rng: random.Random) -> Corrupted | None:
    exp, op = list(params["expected"]), params["op"]
    low = [x.lower() for x in params["items"]]
    if op == "kth":
        k = params["k"]
        cands = [j for j in (k - 1, k + 1) if 1 <= j <= len(low) and low[j - 1] != exp[0]]
        if not cands:
            return None
        j = rng.choice(cands)
        return Corrupted(
            _write(params, [low[j - 1]], random.Random(phrasing)),
            f"gives the {ORDINALS[j - 1]} item ({low[j - 1]}) instead of the {ORDINALS[k - 1]} ({exp[0]})",
        )
    if op == "dedupe" and rng.random() < 0.5:
        dups = [x for x in exp if low.count(x) > 1]
        x = rng.choice(dups)
        if rng.random() < 0.5:
            wrong = [y for y in exp if y != x]
            why = f"removes every copy of {x}, including the first"
        else:
            second = [i for i, y in enumerate(low) if y == x][1]
            wrong = (
                list(dict.fromkeys(low[:second]))
                + [x]
                + [y for y in dict.fromkeys(low[second + 1 :]) if y not in low[:second]]
            )
            why = f"keeps a second copy of {x}"
        if wrong == exp:
            return None
        return Corrupted(_write(params, wrong, random.Random(phrasing)), why)
    i = rng.randrange(len(exp) - 1)
    if exp[i] == exp[i + 1]:
        return None
    wrong = exp[:i] + [exp[i + 1], exp[i]] + exp[i + 2 :]
    return Corrupted(
        _write(params, wrong, random.Random(phrasing)),
        f"puts {exp[i + 1]} before {exp[i]}, so the order is wrong in one place",
    )


def _violated(params: Params, phrasing: int, rng: random.Random) -> Corrupted | None:
    if params["op"] == "kth":
        return None
    other = rng.choice([f for f in sorted(FORMATS) if f != params["format"]])
    names = {"comma": "a comma-separated line", "numbered": "a numbered list", "bullets": "a bulleted list"}
    return Corrupted(
        _write(params, params["expected"], random.Random(phrasing), fmt=other),
        f"right items, but written as {names[other]} instead of {names[params['format']]}",
    )


def _truncated(params: Params, phrasing: int, rng: random.Random) -> Corrupted | None:
    text = answer(params, random.Random(phrasing))
    if params["op"] == "kth":
        cut = truncate_before(text, _display(params, params["expected"])[0], min_words=4)
        return None if cut is None else Corrupted(cut, "cut off before it names the item")
    exp = params["expected"]
    if len(exp) < 4:
        return None
    m = rng.randint(len(exp) // 2, len(exp) - 2)
    shown = _display(params, exp)
    if params["format"] == "comma":
        head = text[: text.index(shown[0])] if shown[0] in text else ""
        cut = head + ", ".join(shown[:m]) + ","
    else:
        lines = text.splitlines()
        lead = 1 if len(lines) > len(exp) else 0
        cut = "\n".join(lines[: lead + m])
    return Corrupted(cut, f"stops after {m} of the {len(exp)} items")


_FILLERS = {
    "sort_alpha": "Alphabetical order compares words letter by letter, starting with the first letter.",
    "sort_asc": "Sorting numbers simply means comparing their values and placing the smaller ones first.",
    "sort_desc": "Sorting numbers simply means comparing their values and placing the larger ones first.",
    "reverse": "Reversing a list means that the last item becomes the first one and so on.",
    "dedupe": "Removing duplicates means keeping each item only once, in the order it first appeared.",
    "kth": "To find it, I counted the items one by one from the start of the list.",
}
_GENERIC = [
    "I went through the whole list carefully and checked every item twice.",
    "This kind of task is simple once you take it one item at a time.",
    "I double-checked the result against the original list.",
    "Lists like this are easy to check by reading them out loud one item at a time.",
]
_CLOSERS = [
    "Let me know if you would like the result in a different format or order.",
    "I hope this helps, and feel free to ask if you have any other questions about lists.",
]

_OPENERS = ["Sure, I can help you with this list task.", "This is a simple task, so let's go through it together."]


def _padding(params: Params, phrasing: int, rng: random.Random) -> Corrupted | None:
    text = answer(params, random.Random(phrasing))
    fillers = [_FILLERS[params["op"]]] + _GENERIC
    padded = pad(text, fillers, params["word_budget"], rng, _OPENERS, _CLOSERS)
    if padded is None:
        return None
    if params["format"] in ("numbered", "bullets"):  # remarks go on their own line after a list
        padded = padded.replace(text + " ", text + "\n\n", 1)
    return Corrupted(padded, "correct, but padded with explanations and filler")


def _hedged(params: Params, phrasing: int, rng: random.Random) -> Corrupted | None:
    wrong = _wrong_value(params, phrasing, rng)
    if wrong is None:
        return None
    text = answer(params, random.Random(phrasing))
    if params["op"] == "kth":
        return hedge(text, params["expected"][0], re.sub(r"[*.]", "", wrong.text.split()[-1]), wrong.text, rng)
    if params["format"] == "comma":  # the wrong list without its lead-in
        alt = " Or possibly: " + wrong.text.split(": ", 1)[-1]
    else:
        alt = "\n\nOr possibly:\n" + "\n".join(x for x in wrong.text.splitlines() if re.match(r"(?:[-*]|\d+\.) ", x))
    return Corrupted(text + alt, "gives the right list, then a different one as an alternative")


def _negated(params: Params, phrasing: int, rng: random.Random) -> Corrupted | None:
    text = answer(params, random.Random(phrasing))
    if params["op"] != "kth" and params["format"] != "comma":
        return Corrupted(f"It is definitely not this:\n{text}", "names the right list only to deny it")
    return negate(text, rng)


def _non_answer(params: Params, phrasing: int, rng: random.Random) -> Corrupted | None:
    what = {
        "sort_alpha": "sorted",
        "sort_asc": "sorted",
        "sort_desc": "sorted",
        "reverse": "reversed",
        "dedupe": "without duplicates",
        "kth": "counted",
    }[params["op"]]
    return non_answer([f"This list has {len(params['items'])} items.", f"The list needs to be {what}."], rng)


FAMILY = Family(
    name="list_ops",
    summary="sort / reverse / dedupe / k-th item of a given list, in a requested layout",
    objectives=("correctness", "instruction_following", "conciseness", "safety"),
    generate=generate,
    score=score,
    answer=answer,
    corruptions=answer_corruptions(
        _wrong_value, _padding, _truncated, _hedged, _negated, _non_answer, _violated, violated_weight=2.0
    ),
)
