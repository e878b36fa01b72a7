"""Multi-step arithmetic word problems (2-3 operations on small whole numbers).

Correctness is the one final number the response commits to (see `text.committed_number`: "The
answer is **19**.", "19 marbles", "Answer: 19" all read as 19; "19, or possibly 21", "It is not 19"
and two different declared answers read as no answer). Some prompts also ask for a format ("finish with 'Answer: N'",
"put the final number in bold"); those grade instruction_following. Wrong values are realistic
slips: skipping the last step, one mis-added step carried through, or a wrong operation.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from typing import Any

from .base import (
    NAMES,
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
from .text import bold_number_present, committed_number, final_number, normalize, plain, word_count

ITEMS = [
    ("apple", "apples"),
    ("marble", "marbles"),
    ("sticker", "stickers"),
    ("pencil", "pencils"),
    ("cookie", "cookies"),
    ("card", "cards"),
    ("stamp", "stamps"),
    ("book", "books"),
    ("egg", "eggs"),
    ("coin", "coins"),
    ("shell", "shells"),
    ("balloon", "balloons"),
    ("crayon", "crayons"),
    ("button", "buttons"),
    ("candle", "candles"),
    ("orange", "oranges"),
]
PACKS = ["bags", "boxes", "packs", "jars"]

_ADD = ["{N} buys {k} more {items}.", "{F} gives {N} {k} more {items}.", "{N} finds {k} more {items}."]
_SUB = ["{N} gives {k} {items} to {F}.", "{N} loses {k} {items}.", "{N} sells {k} {items}."]
_GROUPS = ["{N} buys {g} {packs} with {s} {items} in each.", "{N} gets {g} {packs} of {s} {items} each."]
_MUL = {
    2: ["Then the number of {items} {N} has doubles.", "{N} then doubles the number of {items}."],
    3: ["Then the number of {items} {N} has triples.", "{N} then triples the number of {items}."],
}
_DIV = ["{N} shares all the {items} equally among {p} friends."]
_INSTRUCTIONS = {
    "answer_line": "Finish your reply with a line of the form 'Answer: <number>'.",
    "bold": "Write the final number in bold.",
}
_ANSWER_LINE_RE = re.compile(r"^(?:final\s+)?answer\s*:\s*\$?-?\d", re.I)


def _apply(kind: str, args: list[int], cur: int) -> int:
    if kind == "add":
        return cur + args[0]
    if kind == "sub":
        return cur - args[0]
    if kind == "groups":
        return cur + args[0] * args[1]
    if kind == "mul":
        return cur * args[0]
    if kind == "div":
        return cur // args[0] if cur % args[0] == 0 else -1
    raise ValueError(kind)


def generate(rng: random.Random) -> Draft:
    """A story with a start amount, 2-3 changes and a question; sometimes a format instruction."""
    name, friend = rng.sample(NAMES, 2)
    item, items = rng.choice(ITEMS)
    packs = rng.choice(PACKS)
    start = rng.randint(5, 30)
    n_ops = 2 if rng.random() < 0.6 else 3
    cur, used_mul = start, False
    ops: list[list[Any]] = []  # [kind, *args]
    while len(ops) < n_ops:
        weights = [3, 3 if cur > 4 else 0, 2, 0 if used_mul or cur > 40 else 1]
        kind = rng.choices(["add", "sub", "groups", "mul"], weights=weights)[0]
        if kind == "add":
            args = [rng.randint(2, 15)]
        elif kind == "sub":
            args = [rng.randint(2, min(15, cur - 2))]
        elif kind == "groups":
            args = [rng.randint(2, 5), rng.randint(2, 10)]
        else:
            args, used_mul = [rng.choice([2, 3]) if cur <= 20 else 2], True
        ops.append([kind, *args])
        cur = _apply(kind, args, cur)
    divisors = [p for p in range(2, 7) if cur % p == 0 and cur // p >= 2]
    if divisors and n_ops == 2 and rng.random() < 0.4:
        ops.append(["div", rng.choice(divisors)])
        cur = cur // ops[-1][1]
    sentences = [f"{name} has {start} {items}."]
    for i, (kind, *args) in enumerate(ops):
        if kind == "div":
            template = _DIV[0]
        else:
            template = rng.choice({"add": _ADD, "sub": _SUB, "groups": _GROUPS}.get(kind) or _MUL[args[0]])
        k = args[0]
        s = template.format(N=name, F=friend, items=items, k=k, g=k, s=args[-1], packs=packs, p=k)
        if i > 0 and kind != "mul" and rng.random() < 0.5:
            s = "Then " + s
        sentences.append(s)
    question = (
        f"How many {items} does each friend get?"
        if ops[-1][0] == "div"
        else rng.choice([f"How many {items} does {name} have now?", f"How many {items} does {name} have in the end?"])
    )
    fmt = rng.choice([None, None, "answer_line", "bold"])
    user = " ".join(sentences) + " " + question
    if fmt:
        user += " " + _INSTRUCTIONS[fmt]
    params = {
        "name": name,
        "friend": friend,
        "item": item,
        "items": items,
        "packs": packs,
        "start": start,
        "ops": ops,
        "answer": cur,
        "format": fmt,
        "word_budget": 18 + 8 * len(ops) + 4 * sum(op[0] == "groups" for op in ops),
    }
    return Draft(user=user, params=params, system=maybe_system(rng))


# ------------------------------------------------------------------------------------ answers


def _steps(params: Params, error: tuple | None = None) -> list[tuple[str, str, int]]:
    """(sentence, equation, value) per operation, with an optional deliberate error:
    ("skip_last",) drops the last operation; ("slip", step, delta) mis-adds one step by `delta`;
    ("wrong_op", step) uses the wrong operation in one step. Later steps carry the error on."""
    cur, out = params["start"], []
    ops = params["ops"][:-1] if error and error[0] == "skip_last" else params["ops"]
    for i, (kind, *args) in enumerate(ops):
        wrong = bool(error and error[0] == "wrong_op" and error[1] == i)
        slip = error[2] if error and error[0] == "slip" and error[1] == i else 0
        k = args[0]
        if kind == "groups":
            gs = k + args[1] if wrong else k * args[1]
            new = cur + gs + slip
            eq = f"{k} {'+' if wrong else '×'} {args[1]} = {gs}, and {cur} + {gs} = {new}"
            sentence = f"The {params['packs']} add {eq}."
        else:
            right_sym, wrong_sym = {"add": ("+", "-"), "sub": ("-", "+"), "mul": ("×", "+"), "div": ("÷", "-")}[kind]
            if wrong:
                new = cur + k if wrong_sym == "+" else cur - k
            elif kind == "div":
                new = cur // k if cur % k == 0 else -1
            else:
                new = _apply(kind, args, cur)
            new += slip
            eq = f"{cur} {wrong_sym if wrong else right_sym} {k} = {new}"
            sentence = {
                "add": f"Adding {k}: {eq}.",
                "sub": f"Taking away {k}: {eq}.",
                "mul": f"{'Doubling' if k == 2 else 'Tripling'}: {eq}.",
                "div": f"Sharing among {k}: {eq} each.",
            }[kind]
        out.append((sentence, eq, new))
        cur = new
    return out


def _write(
    params: Params, steps: list[tuple[str, str, int]], rng: random.Random | None, fmt: str | None = "default"
) -> str:
    """The answer text for the given steps; `fmt` overrides the requested format (None: ignore it)."""
    fmt = params["format"] if fmt == "default" else fmt
    style = choose(rng, ["working", "compact", "short", "short"])
    r = steps[-1][2] if steps else params["start"]
    shown = f"**{r}**" if fmt == "bold" else str(r)
    name, items = params["name"], params["items"]
    each = params["ops"][-1][0] == "div"
    who, verb = ("each friend", "gets") if each else (name, "has")
    final = choose(
        rng,
        [
            f"So {who} {verb} {shown} {items}{'' if each else ' now'}.",
            f"That means {who} {'gets' if each else 'ends up with'} {shown} {items}.",
            f"The answer is {shown}.",
        ],
    )
    lead = choose(rng, ["", "", "Sure! ", "Let's work it out. "])
    if style == "working":
        working = " ".join(s for s, _, _ in steps)
        text = f"{lead}{name} starts with {params['start']} {items}. {working} {final}"
    elif style == "compact":
        text = lead + cap("; then ".join(eq for _, eq, _ in steps)) + ". " + final
    else:
        text = cap(final.removeprefix("So ").removeprefix("That means "))
    if fmt == "answer_line":
        text += f"\nAnswer: {r}"
    return text


def answer(params: Params, rng: random.Random | None = None) -> str:
    """A correct answer: worked steps, a compact equation chain, or one sentence."""
    return _write(params, _steps(params), rng)


# --------------------------------------------------------------------------------------- grader


def _answer_line(response: str) -> bool:
    lines = [line for line in normalize(response).strip().splitlines() if line.strip()]
    return bool(lines) and _ANSWER_LINE_RE.match(plain(lines[-1]).strip()) is not None


FORMATS: dict[str, Callable[[str], bool]] = {"answer_line": _answer_line, "bold": bold_number_present}
"""The asked formats and how each is read: 'answer_line' -> the last non-empty line reads "Answer: N" (or "Final
answer: N", markdown allowed) for some number N; 'bold' -> some number is in bold."""


def format_followed(fmt: str, response: str) -> bool:
    """Whether `response` is written in the asked format `fmt` (a key of `FORMATS`)."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown arithmetic format {fmt!r}: one of {sorted(FORMATS)}")
    return FORMATS[fmt](response)


def score(params: Params, response: str) -> dict[str, float]:
    """correctness: 1 iff the number the response commits to (`text.committed_number`) is the answer.
    instruction_following (only with a format instruction): 'answer_line' -> 1 iff the last
    non-empty line reads "Answer: N" (or "Final answer: N", markdown allowed) for some number N;
    'bold' -> 1 iff some number is in bold.
    conciseness: `conciseness_score(words, word_budget)`."""
    got = committed_number(response).answer
    out = {"correctness": 1.0 if got is not None and abs(got - params["answer"]) < 1e-6 else 0.0}
    fmt = params.get("format")
    if fmt:
        out["instruction_following"] = 1.0 if format_followed(fmt, response) else 0.0
    out["conciseness"] = conciseness_score(word_count(response), params["word_budget"])
    return out


# ---------------------------------------------------------------------------------- corruptions


def _wrong_value(params: Params, phrasing: int, rng: random.Random) -> Corrupted | None:
    n = len(params["ops"])
    errors: list[tuple] = [("skip_last",)]
    errors += [("slip", rng.randrange(n), rng.choice([-2, -1, 1, 2, 10, -10]))]
    errors += [("wrong_op", rng.randrange(n))]
    rng.shuffle(errors)
    for err in errors:
        steps = _steps(params, err)
        if not steps or any(v < 0 for _, _, v in steps) or steps[-1][2] == params["answer"]:
            continue
        w, r = steps[-1][2], params["answer"]
        if err[0] == "skip_last":
            why = "forgets the last step"
        elif err[0] == "slip":
            why = f"makes an arithmetic slip in step {err[1] + 1} and carries it through"
        else:
            why = f"uses the wrong operation in step {err[1] + 1}"
        return Corrupted(_write(params, steps, random.Random(phrasing)), f"{why}, giving {w} instead of {r}")
    return None


def _violated(params: Params, phrasing: int, rng: random.Random) -> Corrupted | None:
    fmt = params.get("format")
    if not fmt:
        return None
    text = _write(params, _steps(params), random.Random(phrasing), fmt=None)
    what = "the requested 'Answer: N' line" if fmt == "answer_line" else "the requested bold final number"
    return Corrupted(text, f"correct number but leaves out {what}")


_OPENERS = [
    "This is a word problem about {name} and some {items} that change a few times.",
    "Let's read the problem carefully and go through it one step at a time.",
]
_FILLERS = [
    "To double-check, I went through every step again and the numbers add up.",
    "So, once again, the final answer to this question is {r} {items}.",
    "Word problems like this one are easiest when you write down each change in order.",
    "In other words, after all of these changes, {who} is left with exactly {r} {items}.",
    "It is always a good idea to check your work when solving math problems like this.",
]
_CLOSERS = [
    "I hope this step-by-step explanation makes the solution clear and easy to follow.",
    "Let me know if you have any other questions about this problem!",
]


def _padding(params: Params, phrasing: int, rng: random.Random) -> Corrupted | None:
    text = answer(params, random.Random(phrasing))
    tail = ""
    if params.get("format") == "answer_line":
        text, tail = text.rsplit("\n", 1)
        tail = "\n" + tail
    each = params["ops"][-1][0] == "div"
    fill = {
        "items": params["items"],
        "name": params["name"],
        "r": params["answer"],
        "who": "each friend" if each else params["name"],
    }
    fillers = [f.format(**fill) for f in _FILLERS]
    padded = pad(text, fillers, params["word_budget"], rng, [o.format(**fill) for o in _OPENERS], _CLOSERS, ratio=1.15)
    return None if padded is None else Corrupted(padded + tail, "correct, but padded with restatements and filler")


def _truncated(params: Params, phrasing: int, rng: random.Random) -> Corrupted | None:
    text = answer(params, random.Random(phrasing))
    cut = truncate_before(text, str(params["answer"]), min_words=8)
    if cut is None or final_number(cut) == params["answer"]:
        return None
    return Corrupted(cut, "cut off before it reaches the final number")


def _wrong_number(params: Params, rng: random.Random) -> int:
    """A plausible wrong final number: the result of a realistic slip, else the answer off by one."""
    for err in [("skip_last",), ("wrong_op", rng.randrange(len(params["ops"])))]:
        steps = _steps(params, err)
        if steps and steps[-1][2] != params["answer"] and steps[-1][2] >= 0:
            return steps[-1][2]
    return params["answer"] + rng.choice([-1, 1])


def _split_answer_line(params: Params, text: str) -> tuple[str, str]:
    """(body, "\nAnswer: N" or ""): corruptions that add words keep a requested answer line last."""
    if params.get("format") == "answer_line":
        body, line = text.rsplit("\n", 1)
        return body, "\n" + line
    return text, ""


def _hedged(params: Params, phrasing: int, rng: random.Random) -> Corrupted | None:
    body, line = _split_answer_line(params, answer(params, random.Random(phrasing)))
    w, r = _wrong_number(params, rng), params["answer"]
    bad = hedge(body, str(r), str(w), f"{w} {params['items']}.", rng)
    return Corrupted(bad.text + line, bad.reason)


def _negated(params: Params, phrasing: int, rng: random.Random) -> Corrupted | None:
    body, line = _split_answer_line(params, answer(params, random.Random(phrasing)))
    bad = negate(body, rng)
    return Corrupted(bad.text + line, bad.reason)


def _non_answer(params: Params, phrasing: int, rng: random.Random) -> Corrupted | None:
    each = params["ops"][-1][0] == "div"
    who = "each friend gets" if each else f"{params['name']} has in the end"
    return non_answer(
        [
            f"The question is how many {params['items']} {who}.",
            f"This is a word problem about {params['name']} and some {params['items']}.",
        ],
        rng,
    )


FAMILY = Family(
    name="arithmetic",
    summary="word problems with 2-3 operations; graded on the final number (and a format when asked)",
    objectives=("correctness", "instruction_following", "conciseness", "safety"),
    generate=generate,
    score=score,
    answer=answer,
    corruptions=answer_corruptions(_wrong_value, _padding, _truncated, _hedged, _negated, _non_answer, _violated),
)
