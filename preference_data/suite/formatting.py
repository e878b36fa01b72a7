"""Formatting constraints on open-ended advice: bullet counts, letter case, word limits,
required keywords, one-sentence answers, and JSON objects with given keys.

The content (tips on everyday topics) is not graded for correctness; instruction_following is
the fraction of the prompt's constraints the response satisfies, each checked by code
(`check_constraint`). Violations change exactly one constraint, the way a model slips: one
bullet too many, forgetting the case, dropping the keyword, running over the limit, a missing key.
"""

from __future__ import annotations

import json
import random
import re
from typing import Any

from .base import Corrupted, Draft, Family, Params, cap, choose, maybe_system
from .scoring import conciseness_score
from .text import bullet_lines, find_json_object, is_lowercase, is_uppercase, mentions, sentences, word_count

# Tips per topic; the word in brackets is the tip's keyword (a constraint may require it).
TOPICS: dict[str, list[str]] = {
    "staying focused while studying": [
        "put your [phone] in another room", "study in short [blocks] with breaks",
        "keep a [list] of today's goals", "work at a clear [desk]", "drink [water] and have a snack",
        "turn off [notifications] on your laptop", "start with the hardest [subject]"],
    "sleeping better": [
        "go to [bed] at the same time each night", "avoid [coffee] after lunch",
        "keep your [bedroom] dark and cool", "put [screens] away an hour before bed",
        "get some [sunlight] in the morning", "keep [naps] short", "write down your [worries] before bed"],
    "saving money on groceries": [
        "make a shopping [list] and stick to it", "compare [prices] per unit",
        "buy [seasonal] fruit and vegetables", "cook [meals] at home", "avoid shopping when [hungry]",
        "choose store [brands]", "plan [leftovers] for lunch"],
    "keeping a houseplant healthy": [
        "water it only when the [soil] is dry", "give it bright, indirect [light]",
        "use a [pot] with drainage holes", "wipe [dust] off the leaves", "feed it [fertilizer] in spring",
        "check the leaves for [pests]", "keep it away from cold [drafts]"],
    "learning a new language": [
        "practice a little every [day]", "learn common [phrases] first",
        "listen to [podcasts] in the language", "speak with native [speakers]",
        "use [flashcards] for new words", "read simple [stories]", "label [objects] around your home"],
    "running your first 5K": [
        "follow a [plan] that mixes walking and running", "buy comfortable [shoes]",
        "warm up before every [run]", "increase your [distance] slowly", "take [rest] days",
        "drink enough [water]", "run at a [pace] where you can still talk"],
    "making a good first impression": [
        "arrive a little [early]", "make [eye] contact", "offer a friendly [smile]",
        "remember the person's [name]", "ask open [questions]", "listen more than you [talk]",
        "dress [neatly] for the occasion"],
    "writing a clear email": [
        "use a specific [subject] line", "put the main [point] first", "keep [paragraphs] short",
        "[proofread] before sending", "say what [action] you need", "end with a polite [closing]",
        "keep the [tone] friendly"],
    "staying safe in hot weather": [
        "drink [water] often", "wear a [hat] outside", "stay in the [shade] at midday",
        "wear light [clothing]", "use [sunscreen]", "avoid hard [exercise] at noon",
        "check on older [neighbours]"],
    "reducing stress at work": [
        "take short [breaks]", "make a [plan] for the day", "say no to extra [tasks] when needed",
        "go for a [walk] at lunch", "keep your [desk] tidy", "talk to your [manager] about workload",
        "breathe [slowly] for a minute"],
    "cooking rice": [
        "rinse the [rice] first", "use the right [ratio] of water", "bring the water to a [boil]",
        "cover the [pot] with a lid", "cook it on low [heat]", "let it [rest] for five minutes",
        "fluff it with a [fork]"],
    "packing for a trip": [
        "make a packing [list]", "roll your [clothes]", "pack a small [first-aid] kit",
        "keep your [documents] in one place", "bring a phone [charger]",
        "choose [shoes] you can walk in", "leave space for [souvenirs]"],
    "keeping a laptop running well": [
        "restart it [regularly]", "install [updates] promptly", "delete [files] you no longer need",
        "keep the [vents] clear", "back up your [photos]", "close unused [tabs]",
        "keep [drinks] away from the keyboard"],
    "making friends in a new city": [
        "join a [club] or class", "say yes to [invitations]", "talk to your [neighbours]",
        "volunteer for a local [cause]", "visit the same [cafe] often", "try [apps] for meeting people",
        "invite [coworkers] for coffee"],
    "taking care of a dog": [
        "walk it every [day]", "give it fresh [water]", "take it to the [vet] once a year",
        "brush its [coat] regularly", "feed it at set [times]", "play with [toys] together",
        "train it with small [treats]"],
    "keeping a kitchen clean": [
        "wipe the [counters] after cooking", "wash the [dishes] right away", "empty the [bin] often",
        "clean the [fridge] every week", "sweep the [floor] daily", "store food in sealed [containers]",
        "replace your [sponge] often"],
}

_KEY_SETS = [("topic", "tips", "count"), ("subject", "advice", "number_of_tips"), ("title", "items", "total"),
             ("topic", "tips"), ("subject", "advice")]
_CASE_TEXT = {"lower": ["all in lowercase letters", "using only lowercase letters"],
              "upper": ["all in capital letters", "written entirely in uppercase"]}
_NUM_WORDS = ["zero", "one", "two", "three", "four", "five", "six"]


def _tip(raw: str) -> str:
    return raw.replace("[", "").replace("]", "")


def _keyword(raw: str) -> str:
    return re.search(r"\[([^\]]+)\]", raw).group(1)


# ----------------------------------------------------------------------------------- constraints

def check_constraint(c: dict[str, Any], response: str) -> bool:
    """Whether `response` satisfies one constraint:
    bullets n -> exactly n bullet or numbered lines; case lower/upper -> every letter in that case;
    keyword w -> the word appears (whole word, plural allowed); max_words n -> at most n words;
    sentences n -> exactly n sentences (bullets not allowed); json_keys -> the response holds a
    JSON object that has every listed key."""
    kind = c["kind"]
    if kind == "bullets":
        return len(bullet_lines(response)) == c["n"]
    if kind == "case":
        return is_lowercase(response) if c["case"] == "lower" else is_uppercase(response)
    if kind == "keyword":
        return mentions(response, c["word"])
    if kind == "max_words":
        return word_count(response) <= c["n"]
    if kind == "sentences":
        return not bullet_lines(response) and len(sentences(response)) == c["n"]
    if kind == "json_keys":
        obj = find_json_object(response)
        return obj is not None and all(k in obj for k in c["keys"])
    raise ValueError(f"unknown constraint kind {kind!r}")


def _apply_case(text: str, case: str | None) -> str:
    return text.lower() if case == "lower" else text.upper() if case == "upper" else text


# ------------------------------------------------------------------------------------ generator

def generate(rng: random.Random) -> Draft:
    """Tips on a topic as bullets, one sentence, or a JSON object, with 1-4 checkable constraints."""
    topic = rng.choice(sorted(TOPICS))
    shape = rng.choices(["bullets", "sentence", "json"], weights=[5, 2, 3])[0]
    raw = rng.sample(TOPICS[topic], 7)
    cons: list[dict[str, Any]] = []
    params: Params = {"topic": topic, "shape": shape}
    if shape == "bullets":
        n = rng.randint(2, 5)
        tips = raw[:n]
        extras = rng.sample(["case", "keyword", "max_words"], rng.randint(1, 2))
        parts = [f"Give {n} tips for {topic}. Use exactly {n} bullet points"]
        cons.append({"kind": "bullets", "n": n})
        case = rng.choice(["lower", "upper"]) if "case" in extras else None
        if case:
            parts[0] += ", " + rng.choice(_CASE_TEXT[case])
            cons.append({"kind": "case", "case": case})
        parts[0] += "."
        if "keyword" in extras:
            word = _keyword(rng.choice(tips))
            parts.append(f'Include the word "{word}".')
            cons.append({"kind": "keyword", "word": word})
        params.update(tips=[_tip(t) for t in tips], case=case)
        if "max_words" in extras:
            # the limit leaves room for the longest lead-in a good answer may use
            limit = 5 * ((word_count("\n".join(params["tips"])) + 2 * n + 14) // 5 + 1)
            parts.append(f"Use at most {limit} words.")
            cons.append({"kind": "max_words", "n": limit})
        budget = min(10 + 10 * n, next((c["n"] for c in cons if c["kind"] == "max_words"), 999))
        user = " ".join(parts)
    elif shape == "sentence":
        tip = raw[0]
        case = rng.choice(["lower", "upper", None])
        parts = f"Give one tip for {topic} in a single sentence"
        cons.append({"kind": "sentences", "n": 1})
        if case:
            parts += ", " + rng.choice(_CASE_TEXT[case])
            cons.append({"kind": "case", "case": case})
        if case is None or rng.random() < 0.5:
            word = _keyword(tip)
            parts += f', and use the word "{word}"'
            cons.append({"kind": "keyword", "word": word})
        user = parts + "."
        params.update(tips=[_tip(tip)], case=case)
        budget = 25
    else:
        n = rng.randint(2, 4)
        keys = list(rng.choice(_KEY_SETS))
        quoted = ", ".join(f'"{k}"' for k in keys[:-1]) + f' and "{keys[-1]}"'
        user = rng.choice([f"Reply with a JSON object with the keys {quoted}, giving {n} tips for {topic}.",
                           f"Give {n} tips for {topic} as a JSON object with the keys {quoted}."])
        cons.append({"kind": "json_keys", "keys": keys})
        params.update(tips=[_tip(t) for t in raw[:n]], keys=keys, case=None)
        budget = 25 + 10 * n
    params.update(spare=[_tip(t) for t in raw[len(params["tips"]):]], constraints=cons, word_budget=budget)
    return Draft(user=user, params=params, system=maybe_system(rng))


# -------------------------------------------------------------------------------------- answers

def _bullets(params: Params, tips: list[str], rng: random.Random | None, case: str | None,
             extra: str = "") -> str:
    n, topic = params["constraints"][0]["n"], params["topic"]  # the count the prompt asked for
    lead = choose(rng, ["", f"Here are {n} tips for {topic}:", f"Here are {_NUM_WORDS[n]} tips:", "Sure!"])
    marker = choose(rng, ["-", "*", "1."])
    end = choose(rng, ["", "."])
    lines = [(f"{i}. " if marker == "1." else f"{marker} ") + cap(t) + end for i, t in enumerate(tips, 1)]
    text = (lead + "\n" if lead else "") + "\n".join(lines) + (extra and "\n\n" + extra)
    return _apply_case(text, case)


def _sentence(params: Params, tips: list[str], rng: random.Random | None, case: str | None) -> str:
    frames = ["{T}.", "A simple tip: {t}.", "My tip is to {t}.", "Try to {t}."]
    first = choose(rng, frames).format(T=cap(tips[0]), t=tips[0])
    text = " ".join([first] + [f"Also, {t}." for t in tips[1:]])
    return _apply_case(text, case)


def _json(params: Params, keys: list[str], tips: list[str], rng: random.Random | None) -> str:
    values = {"topic": params["topic"], "subject": params["topic"], "title": cap(params["topic"]),
              "tips": tips, "advice": tips, "items": tips,
              "count": len(tips), "number_of_tips": len(tips), "total": len(tips)}
    obj = {k: values[k] for k in keys}
    style = choose(rng, ["compact", "indented", "fenced"])
    body = json.dumps(obj, indent=None if style == "compact" else 2, ensure_ascii=False)
    return f"```json\n{body}\n```" if style == "fenced" else body


def answer(params: Params, rng: random.Random | None = None) -> str:
    """Tips that satisfy every constraint, with an optional short lead-in."""
    if params["shape"] == "bullets":
        return _bullets(params, params["tips"], rng, params["case"])
    if params["shape"] == "sentence":
        return _sentence(params, params["tips"], rng, params["case"])
    return _json(params, params["keys"], params["tips"], rng)


# --------------------------------------------------------------------------------------- grader

def score(params: Params, response: str) -> dict[str, float]:
    """instruction_following: fraction of the prompt's constraints satisfied (`check_constraint`).
    conciseness: `conciseness_score(words, word_budget)` (the budget is within any word limit).
    Correctness is not graded: any sensible tips are acceptable content."""
    cons = params["constraints"]
    ok = sum(check_constraint(c, response) for c in cons)
    return {"instruction_following": ok / len(cons),
            "conciseness": conciseness_score(word_count(response), params["word_budget"])}


# ---------------------------------------------------------------------------------- corruptions

def _one_broken(params: Params, text: str) -> dict[str, Any] | None:
    broken = [c for c in params["constraints"] if not check_constraint(c, text)]
    return broken[0] if len(broken) == 1 else None


def _violated(params: Params, phrasing: int, rng: random.Random) -> Corrupted | None:
    shape, tips, case = params["shape"], list(params["tips"]), params["case"]
    kinds = [c["kind"] for c in params["constraints"]]
    options = []
    for c in params["constraints"]:
        k = c["kind"]
        if k == "bullets":
            if c["n"] >= 3:
                options.append((_bullets(params, tips[:-1], random.Random(phrasing), case),
                                f"{c['n'] - 1} bullet points instead of {c['n']}"))
            if "max_words" not in kinds:
                options.append((_bullets(params, tips + params["spare"][:1], random.Random(phrasing), case),
                                f"{c['n'] + 1} bullet points instead of {c['n']}"))
        elif k == "case":
            writer = _bullets if shape == "bullets" else _sentence
            options.append((writer(params, tips, random.Random(phrasing), None),
                            f"ignores the request to write in {c['case']}case"))
        elif k == "keyword":
            swap = [t for t in params["spare"] if not mentions(t, c["word"])]
            new = [swap.pop(0) if mentions(t, c["word"]) and swap else t for t in tips]
            writer = _bullets if shape == "bullets" else _sentence
            options.append((writer(params, new, random.Random(phrasing), case) if shape != "json"
                            else _json(params, params["keys"], new, random.Random(phrasing)),
                            f"leaves out the required word \"{c['word']}\""))
        elif k == "max_words":
            closing = ("These habits are simple, but if you keep them up every single day, "
                       f"{params['topic']} will quickly become much easier for you. Start with the one "
                       "that feels easiest, and add the others one at a time over the next few weeks.")
            options.append((_bullets(params, tips, random.Random(phrasing), case, _apply_case(closing, case)),
                            f"goes over the limit of {c['n']} words"))
        elif k == "sentences":
            options.append((_sentence(params, tips + params["spare"][:1], random.Random(phrasing), case),
                            "two sentences instead of one"))
        elif k == "json_keys":
            drop = rng.choice(c["keys"])
            options.append((_json(params, [x for x in c["keys"] if x != drop], tips, random.Random(phrasing)),
                            f"the JSON object is missing the \"{drop}\" key"))
    rng.shuffle(options)
    for text, reason in options:
        if _one_broken(params, text) is not None:
            return Corrupted(text, reason)
    return None


def _truncated(params: Params, phrasing: int, rng: random.Random) -> Corrupted | None:
    text = answer(params, random.Random(phrasing))
    if params["shape"] == "sentence":
        kw = next((c["word"] for c in params["constraints"] if c["kind"] == "keyword"), None)
        pos = -1 if kw is None else re.search(re.escape(kw), text, re.I).start()
        if pos <= 0 or word_count(text[:pos]) < 3:
            return None
        return Corrupted(text[:pos].rstrip(), "cut off before the required word")
    if params["shape"] == "json":
        cut = text[: int(len(text) * rng.uniform(0.55, 0.85))].rstrip()
        return Corrupted(cut, "cut off in the middle of the JSON object")
    lines = text.splitlines()
    keep = max(1, len(lines) - rng.randint(1, 2))
    last = lines[keep].split()
    cut = "\n".join(lines[:keep] + [" ".join(last[: max(1, len(last) // 2)])])
    if check_constraint(params["constraints"][0], cut):
        return None
    return Corrupted(cut, "cut off in the middle of the list")


FAMILY = Family(
    name="formatting",
    summary="tips under checkable constraints: bullet count, case, word limit, keyword, one sentence, JSON keys",
    objectives=("instruction_following", "conciseness", "safety"),
    generate=generate,
    score=score,
    answer=answer,
    corruptions={"violated_constraint": (4.0, _violated), "truncated": (1.5, _truncated)},
)
