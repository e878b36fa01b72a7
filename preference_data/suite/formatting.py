"""Formatting constraints on open-ended advice: bullet counts, letter case, word limits,
required keywords, one-sentence answers, and JSON objects with given keys.

instruction_following is the fraction of the prompt's constraints the response satisfies, each
checked by code (`check_constraint`). Form alone is not an answer: correctness grades the content
(`content_score`): real, distinct tips on the topic (not the prompt copied back, not placeholder
JSON values, not keyword lists, not denied), as many as were asked for. Violations change exactly one
constraint, the way a model slips: one bullet too many, forgetting the case, dropping the keyword, running
over the limit, a missing key.
"""

from __future__ import annotations

import json
import random
import re
from functools import lru_cache
from typing import Any

from .base import Corrupted, Draft, Family, Params, cap, choose, maybe_system, non_answer
from .scoring import conciseness_score
from .text import (
    bullet_lines,
    find_json_object,
    is_lowercase,
    is_uppercase,
    is_word_salad,
    mentions,
    plain,
    sentences,
    sentences_and_lines,
    undenied,
    word_count,
)

# Tips per topic; the word in brackets is the tip's keyword (a constraint may require it).
TOPICS: dict[str, list[str]] = {
    "staying focused while studying": [
        "put your [phone] in another room",
        "study in short [blocks] with breaks",
        "keep a [list] of today's goals",
        "work at a clear [desk]",
        "drink [water] and have a snack",
        "turn off [notifications] on your laptop",
        "start with the hardest [subject]",
    ],
    "sleeping better": [
        "go to [bed] at the same time each night",
        "avoid [coffee] after lunch",
        "keep your [bedroom] dark and cool",
        "put [screens] away an hour before bed",
        "get some [sunlight] in the morning",
        "keep [naps] short",
        "write down your [worries] before bed",
    ],
    "saving money on groceries": [
        "make a shopping [list] and stick to it",
        "compare [prices] per unit",
        "buy [seasonal] fruit and vegetables",
        "cook [meals] at home",
        "avoid shopping when [hungry]",
        "choose store [brands]",
        "plan [leftovers] for lunch",
    ],
    "keeping a houseplant healthy": [
        "water it only when the [soil] is dry",
        "give it bright, indirect [light]",
        "use a [pot] with drainage holes",
        "wipe [dust] off the leaves",
        "feed it [fertilizer] in spring",
        "check the leaves for [pests]",
        "keep it away from cold [drafts]",
    ],
    "learning a new language": [
        "practice a little every [day]",
        "learn common [phrases] first",
        "listen to [podcasts] in the language",
        "speak with native [speakers]",
        "use [flashcards] for new words",
        "read simple [stories]",
        "label [objects] around your home",
    ],
    "running your first 5K": [
        "follow a [plan] that mixes walking and running",
        "buy comfortable [shoes]",
        "warm up before every [run]",
        "increase your [distance] slowly",
        "take [rest] days",
        "drink enough [water]",
        "run at a [pace] where you can still talk",
    ],
    "making a good first impression": [
        "arrive a little [early]",
        "make [eye] contact",
        "offer a friendly [smile]",
        "remember the person's [name]",
        "ask open [questions]",
        "listen more than you [talk]",
        "dress [neatly] for the occasion",
    ],
    "writing a clear email": [
        "use a specific [subject] line",
        "put the main [point] first",
        "keep [paragraphs] short",
        "[proofread] before sending",
        "say what [action] you need",
        "end with a polite [closing]",
        "keep the [tone] friendly",
    ],
    "staying safe in hot weather": [
        "drink [water] often",
        "wear a [hat] outside",
        "stay in the [shade] at midday",
        "wear light [clothing]",
        "use [sunscreen]",
        "avoid hard [exercise] at noon",
        "check on older [neighbours]",
    ],
    "reducing stress at work": [
        "take short [breaks]",
        "make a [plan] for the day",
        "say no to extra [tasks] when needed",
        "go for a [walk] at lunch",
        "keep your [desk] tidy",
        "talk to your [manager] about workload",
        "breathe [slowly] for a minute",
    ],
    "cooking rice": [
        "rinse the [rice] first",
        "use the right [ratio] of water",
        "bring the water to a [boil]",
        "cover the [pot] with a lid",
        "cook it on low [heat]",
        "let it [rest] for five minutes",
        "fluff it with a [fork]",
    ],
    "packing for a trip": [
        "make a packing [list]",
        "roll your [clothes]",
        "pack a small [first-aid] kit",
        "keep your [documents] in one place",
        "bring a phone [charger]",
        "choose [shoes] you can walk in",
        "leave space for [souvenirs]",
    ],
    "keeping a laptop running well": [
        "restart it [regularly]",
        "install [updates] promptly",
        "delete [files] you no longer need",
        "keep the [vents] clear",
        "back up your [photos]",
        "close unused [tabs]",
        "keep [drinks] away from the keyboard",
    ],
    "making friends in a new city": [
        "join a [club] or class",
        "say yes to [invitations]",
        "talk to your [neighbours]",
        "volunteer for a local [cause]",
        "visit the same [cafe] often",
        "try [apps] for meeting people",
        "invite [coworkers] for coffee",
    ],
    "taking care of a dog": [
        "walk it every [day]",
        "give it fresh [water]",
        "take it to the [vet] once a year",
        "brush its [coat] regularly",
        "feed it at set [times]",
        "play with [toys] together",
        "train it with small [treats]",
    ],
    "keeping a kitchen clean": [
        "wipe the [counters] after cooking",
        "wash the [dishes] right away",
        "empty the [bin] often",
        "clean the [fridge] every week",
        "sweep the [floor] daily",
        "store food in sealed [containers]",
        "replace your [sponge] often",
    ],
}

_KEY_SETS = [
    ("topic", "tips", "count"),
    ("subject", "advice", "number_of_tips"),
    ("title", "items", "total"),
    ("topic", "tips"),
    ("subject", "advice"),
]
_CASE_TEXT = {
    "lower": ["all in lowercase letters", "using only lowercase letters"],
    "upper": ["all in capital letters", "written entirely in uppercase"],
}
_NUM_WORDS = ["zero", "one", "two", "three", "four", "five", "six"]


def _tip(raw: str) -> str:
    return raw.replace("[", "").replace("]", "")


def _keyword(raw: str) -> str:
    m = re.search(r"\[([^\]]+)\]", raw)
    assert m is not None, f"a tip marks its keyword in brackets: {raw!r}"
    return m.group(1)


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


# -------------------------------------------------------------------------------------- content

# More words that belong to each topic, beside those of its tips: a tip of the model's own
# ("try a white noise machine before sleep") is on topic when it shares a word stem with them.
RELATED: dict[str, str] = {
    "staying focused while studying": "study focus concentrate distraction exam homework notes revise timer "
    "pomodoro break quiet library schedule goal task reading learn",
    "sleeping better": "sleep bed bedtime night rest nap tired wake alarm pillow mattress caffeine routine relax "
    "noise dark melatonin evening dream",
    "saving money on groceries": "money grocery groceries shop shopping store supermarket budget price cheap "
    "coupon discount sale bulk spend food meal cart",
    "keeping a houseplant healthy": "plant houseplant water soil light sun leaf leaves root pot repot "
    "fertilizer humidity prune window drainage grow",
    "learning a new language": "language learn learning word vocabulary grammar speak speaking listen "
    "practice conversation app lesson tutor fluent pronunciation read write",
    "running your first 5K": "run running runner race 5k jog jogging pace shoe stretch warm train training "
    "mile kilometer distance breath walk",
    "making a good first impression": "impression meet meeting smile eye contact handshake greet name listen "
    "polite confident dress posture conversation friendly punctual",
    "writing a clear email": "email subject recipient message paragraph sentence reply write writing tone "
    "point draft proofread greeting signature inbox short clear",
    "staying safe in hot weather": "heat hot sun sunscreen shade water hydrate drink hat cool fan temperature "
    "sweat summer sunburn noon light clothing",
    "reducing stress at work": "stress work job task break breathe relax manager colleague deadline plan "
    "priority walk calm workload boundaries rest",
    "cooking rice": "rice cook cooking water pot boil simmer lid heat grain rinse steam stove fluff ratio salt minutes",
    "packing for a trip": "pack packing trip travel suitcase bag luggage clothes list charger passport "
    "document shoes toiletries carry roll fold",
    "keeping a laptop running well": "laptop computer update software restart battery file files storage "
    "backup virus fan vent clean keyboard screen disk tab",
    "making friends in a new city": "friend friends city club group meet meetup neighbour neighbor event "
    "volunteer class coworker invite people social community",
    "taking care of a dog": "dog puppy walk walks food feed water vet exercise play toy treat train training "
    "groom brush leash",
    "keeping a kitchen clean": "kitchen clean cleaning wipe counter dish dishes sink fridge floor sweep "
    "trash bin sponge spill tidy wash",
}

# Every word the prompts' instructions use (the templates in `generate`), so copying the prompt
# back is not content.
_INSTRUCTION_WORDS = frozenset(
    "give tips tip for use exactly bullet points point all in lowercase uppercase capital letters using only "
    "written entirely include the word words at most one single sentence and reply with a json object keys key "
    "giving as here are is some".split()
    + _NUM_WORDS
)
# Function words: they make no tip by themselves.
_STOP = frozenset(
    """a an the and or but if so to of in on at by for with from as into about it its it's
is are be been am was were this that these those you your yours i me my we our they them their he she
his her there here what which who how do does did can could would should will just also too very
really not no yes sure okay ok please than then each every any all some more most less good great nice
luck thanks thank hope helps hi hello hey well""".split()
)
# Vague words: a sentence made of them and the prompt's words says nothing ("There are many good
# tips for sleeping better.", "Cooking rice is a worthy goal.").
_VAGUE = frozenset(
    """many much lot lots thing things stuff way ways goal goals idea ideas important helpful
useful easy hard simple different various several other another best better worse nice bad fine worthy
everyone anyone someone something everything anything nothing always sometimes usually people person
there's matter matters key keys help helps really quite lot advice suggestion suggestions
recommend recommendation area topic question answer list following below above think know see let
hmm tricky interesting""".split()
)
# Actions: a tip says what to do, so it has one of these (in any form: "rinse", "rinsing", "rinses"),
# unless it is one of the topic's own tips. Noun-only keyword soups ("water shade hat") are not tips.
_ACTIONS = """add aim allow apply arrive ask avoid back bake become begin boil bring brush buy call carry change
charge check choose clean clear close compare connect cook count cover cut decide delete do download drink drive
dress drop dry eat empty end enjoy exercise feed fill find finish fix fluff focus fold follow forget get give go
grab greet grow hang have help hide hydrate ignore improve include increase install invite join jog keep label
learn leave let limit listen look lower make manage meet mix move nap note offer open organise organize pack
pause pay pick place plan play practice practise prepare protect pull push put read reach reduce relax remember
remind remove repeat replace reply respect rest restart return review rinse roll run save say schedule see send
set share shop show shut sip sit skip sleep slow smile soak sort speak spend stand start stay steam step stick
stir stop store stretch study sweep switch take talk tell think throw tidy track train travel treat try turn
unplug update use visit wait wake walk warm wash watch wear wipe work write""".split()
# Values that fill a field without saying anything.
_PLACEHOLDERS = frozenset("lorem ipsum dolor placeholder string todo tbd tba foo xxx null undefined".split())


@lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """A crude stem for matching topic words: suffixes -ing/-ed/-es/-s/-ly/-er off, a doubled final
    consonant undone, -i back to -y, then the first five letters ("running" -> "run", "groceries" ->
    "groce", "studies" -> "study")."""
    w = word.lower().removesuffix("'s")
    for suf in ("ing", "ed", "ies", "es", "s", "ly", "er"):
        if w.endswith(suf) and len(w) - len(suf) >= 3:
            w = w[: -len(suf)] + ("y" if suf == "ies" else "")
            break
    if len(w) >= 4 and w[-1] == w[-2] and w[-1] not in "aeiousl":
        w = w[:-1]
    if w.endswith("i"):
        w = w[:-1] + "y"
    return w[:5]


def _forms(verb: str) -> set[str]:
    """A verb's inflected forms: rinse -> rinses, rinsed, rinsing; run -> runs, running; try -> tries."""
    base = verb.removesuffix("e")
    double = verb + verb[-1] if re.fullmatch(r"[^aeiou]*[aeiou][bdgmnprt]", verb) else verb
    out = {verb, verb + "s", verb + "es", base + "ed", base + "ing", double + "ing", double + "ed"}
    if verb.endswith("y") and verb[-2:-1] not in ("a", "e", "o", "u"):
        out |= {verb[:-1] + "ies", verb[:-1] + "ied"}
    return out


_ACTION_FORMS = frozenset(f for v in _ACTIONS for f in _forms(v)) | {"don't", "never", "always"}


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z][a-z'-]*", plain(text).lower())


def _stems(words: list[str] | str) -> set[str]:
    return {stem(w) for w in (_words(words) if isinstance(words, str) else words) if w not in _STOP}


# Verbs any advice uses: they put no tip on a topic.
_GENERIC = frozenset(
    stem(w)
    for w in """keep make take use get put go give say try let find choose start leave
bring set have stay check add ask avoid write""".split()
)
# Stems that put a tip on its topic: the topic's own words, its tips and `RELATED`, less `_GENERIC`.
TOPIC_STEMS: dict[str, frozenset[str]] = {
    t: frozenset(_stems(" ".join([t, RELATED.get(t, "")] + [_tip(x) for x in tips])) - _GENERIC)
    for t, tips in TOPICS.items()
}
_BANK = {t: [" ".join(_words(_tip(x))) for x in tips] for t, tips in TOPICS.items()}


def _prompt_stems(params: Params) -> set[str]:
    words = list(_INSTRUCTION_WORDS) + _words(params.get("topic", "")) + _words(" ".join(params.get("keys") or []))
    words += [c["word"].lower() for c in params["constraints"] if c["kind"] == "keyword"]
    return {stem(w) for w in words}


def _wordlike(w: str) -> bool:
    return 2 <= len(w) <= 20 and re.search(r"[aeiouy]", w) is not None and re.search(r"(.)\1\1", w) is None


def is_tip(params: Params, item: str, prompt_stems: set[str] | None = None) -> bool:
    """Whether `item` is a piece of advice rather than form without content: it holds one of the
    topic's own tips, or it says what to do (an action from `_ACTIONS`) in two or more distinct
    non-function words, at least one of them a real-looking, non-vague word (`_VAGUE`: "many",
    "things", "goal") the prompt does not use, and it is no word salad (`text.is_word_salad`). So
    "a a a water", the prompt copied back, "tip 1", keyword soups and noise are not tips, and a
    placeholder ("string", "lorem ipsum", "TODO") never is.

        >>> p = {"topic": "cooking rice", "constraints": [{"kind": "keyword", "word": "rice"}]}
        >>> is_tip(p, "Rinse the rice first."), is_tip(p, "a a rice a."), is_tip(p, "Give one tip for rice.")
        (True, False, False)
    """
    words = _words(item)
    if not words or any(w in _PLACEHOLDERS for w in words):
        return False
    padded = " " + " ".join(words) + " "
    if any(f" {tip} " in padded for tip in _BANK.get(params.get("topic", ""), ())):
        return True
    content = {w for w in words if w not in _STOP}
    if len(content) < 2 or is_word_salad(item, _STOP):
        return False
    if not any(w in _ACTION_FORMS for w in words):
        return False
    known = _prompt_stems(params) if prompt_stems is None else prompt_stems
    return any(_wordlike(w) and w not in _VAGUE and stem(w) not in known for w in content)


def _tip_strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _tip_strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _tip_strings(v)]
    return [str(value)]


def _items(response: str) -> list[str]:
    bullets = [c for _, c in bullet_lines(response)]
    return bullets or sentences_and_lines(response)


def content_score(params: Params, response: str) -> float:
    """The content of a formatting answer, in [0, 1] (graded as its correctness):

    the share of its tips that are real, distinct tips (`is_tip`; a repeat counts once), out of the
    tips it gives (bullet lines, else sentences) or, in a JSON answer, out of the number the prompt
    asked for when it gives a different number; 0 when no tip is on the topic (shares a stem with
    `TOPIC_STEMS`). In a JSON answer every other field must hold content too: the topic field names
    the topic, the count field equals the number of tips asked for and given; each one that does not
    halves the score. Where the prompt asks for bullets or one sentence the count is a format
    instruction (instruction_following), so it is not counted twice.

    E.g. "Give 3 tips ... as a JSON object with the keys "topic", "tips" and "count"":
    {"topic": "cooking rice", "tips": ["rinse the rice first", "use a lid", "..."], "count": 3} -> 2/3;
    the same with "count": 5 -> 1/3; {"topic": "string", "tips": ["string"], "count": 0} -> 0.
    """
    response = undenied(response)
    known = _prompt_stems(params)
    kinds = {c["kind"]: c for c in params["constraints"]}
    shape = params.get("shape") or ("json" if "json_keys" in kinds else "bullets" if "bullets" in kinds else "sentence")
    n = len(params.get("tips") or []) or kinds.get("bullets", {}).get("n", 1)
    topic = params.get("topic", "")
    fields_ok: list[bool] = []
    if shape == "json":
        obj = find_json_object(response)
        lists = [k for k, v in (obj or {}).items() if isinstance(v, list)]
        key = next((k for k in ("tips", "advice", "items") if k in lists), lists[0] if lists else None)
        if obj is not None:
            tips = _tip_strings(obj[key]) if key is not None else []
            for k, v in obj.items():
                if k in ("topic", "subject", "title"):
                    fields_ok.append(isinstance(v, str) and bool(_stems(v) & _stems(topic or v)))
                elif k in ("count", "number_of_tips", "total"):
                    num = (
                        v
                        if isinstance(v, int) and not isinstance(v, bool)
                        else int(v)
                        if isinstance(v, str) and v.strip().isdigit()
                        else None
                    )
                    fields_ok.append(num == n == len(tips))
        else:
            tips = _items(response)
        denominator = max(n, len(tips))
    else:
        tips = _items(response)
        denominator = len(tips)
    if not tips:
        return 0.0
    seen: set[frozenset[str]] = set()
    good = 0
    for t in tips:
        key_stems = frozenset(_stems(t))
        if key_stems not in seen and is_tip(params, t, known):
            good += 1
        seen.add(key_stems)
    if topic in TOPIC_STEMS and not any(_stems(t) & TOPIC_STEMS[topic] for t in tips):
        return 0.0
    return min(good, n if shape == "json" else good) / denominator * 0.5 ** fields_ok.count(False)


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
        ask = f"Give one tip for {topic} in a single sentence"
        cons.append({"kind": "sentences", "n": 1})
        if case:
            ask += ", " + rng.choice(_CASE_TEXT[case])
            cons.append({"kind": "case", "case": case})
        if case is None or rng.random() < 0.5:
            word = _keyword(tip)
            ask += f', and use the word "{word}"'
            cons.append({"kind": "keyword", "word": word})
        user = ask + "."
        params.update(tips=[_tip(tip)], case=case)
        budget = 25
    else:
        n = rng.randint(2, 4)
        keys = list(rng.choice(_KEY_SETS))
        quoted = ", ".join(f'"{k}"' for k in keys[:-1]) + f' and "{keys[-1]}"'
        user = rng.choice(
            [
                f"Reply with a JSON object with the keys {quoted}, giving {n} tips for {topic}.",
                f"Give {n} tips for {topic} as a JSON object with the keys {quoted}.",
            ]
        )
        cons.append({"kind": "json_keys", "keys": keys})
        params.update(tips=[_tip(t) for t in raw[:n]], keys=keys, case=None)
        budget = 25 + 10 * n
    params.update(spare=[_tip(t) for t in raw[len(params["tips"]) :]], constraints=cons, word_budget=budget)
    return Draft(user=user, params=params, system=maybe_system(rng))


# -------------------------------------------------------------------------------------- answers


def _bullets(params: Params, tips: list[str], rng: random.Random | None, case: str | None, extra: str = "") -> str:
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
    values = {
        "topic": params["topic"],
        "subject": params["topic"],
        "title": cap(params["topic"]),
        "tips": tips,
        "advice": tips,
        "items": tips,
        "count": len(tips),
        "number_of_tips": len(tips),
        "total": len(tips),
    }
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
    """correctness: the content (`content_score`): real tips on the topic, in the number asked for
    where the format does not already count them; form without content ("a a a water", placeholder
    JSON values, the prompt copied back) scores 0.
    instruction_following: fraction of the prompt's constraints satisfied (`check_constraint`).
    conciseness: `conciseness_score(words, word_budget)` (the budget is within any word limit)."""
    cons = params["constraints"]
    ok = sum(check_constraint(c, response) for c in cons)
    return {
        "correctness": content_score(params, response),
        "instruction_following": ok / len(cons),
        "conciseness": conciseness_score(word_count(response), params["word_budget"]),
    }


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
                options.append(
                    (
                        _bullets(params, tips[:-1], random.Random(phrasing), case),
                        f"{c['n'] - 1} bullet points instead of {c['n']}",
                    )
                )
            if "max_words" not in kinds:
                options.append(
                    (
                        _bullets(params, tips + params["spare"][:1], random.Random(phrasing), case),
                        f"{c['n'] + 1} bullet points instead of {c['n']}",
                    )
                )
        elif k == "case":
            writer = _bullets if shape == "bullets" else _sentence
            options.append(
                (
                    writer(params, tips, random.Random(phrasing), None),
                    f"ignores the request to write in {c['case']}case",
                )
            )
        elif k == "keyword":
            swap = [t for t in params["spare"] if not mentions(t, c["word"])]
            new = [swap.pop(0) if mentions(t, c["word"]) and swap else t for t in tips]
            writer = _bullets if shape == "bullets" else _sentence
            options.append(
                (
                    writer(params, new, random.Random(phrasing), case)
                    if shape != "json"
                    else _json(params, params["keys"], new, random.Random(phrasing)),
                    f'leaves out the required word "{c["word"]}"',
                )
            )
        elif k == "max_words":
            closing = (
                "These habits are simple, but if you keep them up every single day, "
                f"{params['topic']} will quickly become much easier for you. Start with the one "
                "that feels easiest, and add the others one at a time over the next few weeks."
            )
            options.append(
                (
                    _bullets(params, tips, random.Random(phrasing), case, _apply_case(closing, case)),
                    f"goes over the limit of {c['n']} words",
                )
            )
        elif k == "sentences":
            options.append(
                (
                    _sentence(params, tips + params["spare"][:1], random.Random(phrasing), case),
                    "two sentences instead of one",
                )
            )
        elif k == "json_keys":
            drop = rng.choice([x for x in c["keys"] if x not in ("tips", "advice", "items")])  # keep the content
            options.append(
                (
                    _json(params, [x for x in c["keys"] if x != drop], tips, random.Random(phrasing)),
                    f'the JSON object is missing the "{drop}" key',
                )
            )
    rng.shuffle(options)
    for text, reason in options:
        if _one_broken(params, text) is not None:
            return Corrupted(text, reason)
    return None


def _truncated(params: Params, phrasing: int, rng: random.Random) -> Corrupted | None:
    text = answer(params, random.Random(phrasing))
    if params["shape"] == "sentence":
        kw = next((c["word"] for c in params["constraints"] if c["kind"] == "keyword"), None)
        found = None if kw is None else re.search(re.escape(kw), text, re.I)
        assert kw is None or found is not None, "a sentence answer uses its keyword"
        pos = -1 if found is None else found.start()
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


def _a_for_new_words(params: Params, text: str) -> str:
    """`text` with every word the prompt does not use replaced by "a": the form kept, the content gone."""
    known = _prompt_stems(params)
    return re.sub(
        r"[A-Za-z][A-Za-z'-]*",
        lambda m: m.group(0) if stem(m.group(0)) in known else _apply_case("a", params["case"]),
        text,
    )


def _form_only(params: Params, phrasing: int, rng: random.Random) -> Corrupted | None:
    shape, n, topic, case = params["shape"], len(params["tips"]), params["topic"], params["case"]
    good = answer(params, random.Random(phrasing))
    kw = next((c["word"] for c in params["constraints"] if c["kind"] == "keyword"), "")
    options = [(_a_for_new_words(params, good), "the requested form, but every word of its own replaced by 'a'")]
    if shape == "json":
        fillers = [
            (["string"] * n, "placeholder values"),
            ([f"tip {i}" for i in range(1, n + 1)], "placeholders"),
            ([""] * n, "empty strings"),
            (["..."] * n, "ellipses"),
        ]
        for filler, why in fillers:
            options.append(
                (
                    _json(params, params["keys"], filler, random.Random(phrasing)),
                    f"valid JSON with the right keys, but {why} instead of tips",
                )
            )
    elif shape == "bullets":
        copied = [f"{topic} tip {i}" + (f" {kw}" if kw and i == 1 else "") for i in range(1, n + 1)]
        options.append(
            (
                _bullets(params, copied, random.Random(phrasing), case),
                "the requested bullets, filled with the prompt's own words",
            )
        )
    else:
        options.append(
            (
                _apply_case(f"Here is one tip for {topic}" + (f" with the word {kw}." if kw else "."), case),
                "one sentence that only repeats the prompt",
            )
        )
    rng.shuffle(options)
    for text, reason in options:
        if text != good and all(check_constraint(c, text) for c in params["constraints"]):
            return Corrupted(text, reason)
    return None


def _non_answer(params: Params, phrasing: int, rng: random.Random) -> Corrupted | None:
    topic = params["topic"]
    return non_answer([f"There are many good tips for {topic}.", f"{cap(topic)} is a good goal."], rng)


FAMILY = Family(
    name="formatting",
    summary="real tips (content) under checkable constraints: bullets, case, word limit, keyword, sentence, JSON",
    objectives=("correctness", "instruction_following", "conciseness", "safety"),
    generate=generate,
    score=score,
    answer=answer,
    corruptions={
        "violated_constraint": (4.0, _violated),
        "truncated": (1.5, _truncated),
        "form_without_content": (2.0, _form_only),
        "non_answer": (0.75, _non_answer),
    },
)
