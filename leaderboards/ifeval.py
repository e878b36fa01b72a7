"""IFEval (Zhou et al. 2023, arXiv 2311.07911): verifiable instructions, checked by code.

A record of the official file (google-research `instruction_following_eval/data/input_data.jsonl`, hub
`google/IFEval`) is `{"key": int, "prompt": str, "instruction_id_list": [str], "kwargs": [dict]}`: one kwargs dict
per instruction id, holding that instruction's arguments (the hub copy fills arguments an instruction does not take
with null). `INSTRUCTIONS` holds the 25 instruction ids of the benchmark, each with the arguments it needs and its
check, written from the benchmark's definitions (its `instructions.py`):

- a null, empty or zero argument counts as absent, as the reference scorer drops falsy arguments before building an
  instruction; an instruction whose required argument is absent cannot be checked: the row is reported with its
  row number (`ifeval_problems`), never scored as a silent zero;
- relations are "less than" (count < N) and "at least" (count >= N);
- an empty response follows no instruction.

Strict and loose (`follow`): strict checks the response as given; loose passes an instruction when any of eight
variants passes: the response, without its first line, without its last line, without both, and each of these four
with every `*` removed (the benchmark's upper bound for formatting noise such as a "Sure, here it is:" line or
markdown bold). Reported (`ifeval_scores`) at prompt level (every instruction of a prompt followed) and instruction
level (each instruction on its own), strict and loose.

Two checks of the reference scorer rest on data we do not ship, and are approximations here, said in every report
(`DETECTORS`):

- sentence counting (`length_constraints:number_sentences`) uses NLTK's punkt model, a download; here sentences are
  split by IFEval's own rule-based splitter (the one its `instructions_util.split_into_sentences` defines: ". ! ?"
  end a sentence, except after titles, initials, acronyms, decimals, web suffixes and inside "..."), which agrees
  with punkt on ordinary prose;
- capital words (`change_case:capital_word_frequency`) are counted over NLTK's word tokens, which also need punkt;
  here a token is a run of letters, digits, apostrophes and hyphens (a hyphenated word is one word, as there);
- language (`language:response_language`, and the English check of `change_case:english_capital` /
  `english_lowercase`) is detected with `langdetect` (a dependency), as the reference does, seeded so that a rerun
  gives the same verdicts (the reference leaves it unseeded: its verdict on a short or mixed-script text can change
  from run to run); in an environment without it a built-in approximation decides: the Unicode script of the
  letters (Cyrillic, Arabic, Devanagari, Hangul, kana, Han, Thai, Hebrew, Greek, Bengali, Tamil, ...), and for
  Latin script the language whose common function words cover most of the words. As in the reference, a text in
  which no language can be detected (no letters) follows the instruction.

Against the reference scorer's own verdicts (`align bench score ifeval --from eval_results_*.jsonl`,
docs/evaluation.md): 99.8% of 2,830 instruction checks agree with langdetect, 99.1% with the built-in approximation.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from prefalign.registry import Table

RELATIONS = ("less than", "at least")
CONSTRAINED_RESPONSES = ("My answer is yes.", "My answer is no.", "My answer is maybe.")
"""detectable_format:constrained_response: the response contains one of these."""


def _compare(count: int, relation: str, n: int) -> bool:
    return count < n if relation == "less than" else count >= n


# ---------------------------------------------------------------------------------------------------------
# Text units: words, sentences, paragraphs
# ---------------------------------------------------------------------------------------------------------


def count_words(text: str) -> int:
    """Runs of word characters (`\\w+`), the benchmark's word count."""
    return len(re.findall(r"\w+", text))


_TITLES = r"(Mr|St|Mrs|Ms|Dr)[.]"
_STARTERS = (
    r"(Mr|Mrs|Ms|Dr|Prof|Capt|Cpt|Lt|He\s|She\s|It\s|They\s|Their\s|Our\s|We\s|But\s|However\s|That\s|This\s|Wherever)"
)
_ACRONYM = r"([A-Z][.][A-Z][.](?:[A-Z][.])?)"
_WEB = r"[.](com|net|org|io|gov|edu|me)"
_COMPANY = r"(Inc|Ltd|Jr|Sr|Co)"


def split_sentences(text: str) -> list[str]:
    """Sentences by IFEval's rule-based splitter (see the module docstring). A dot that does not end a sentence is
    first rewritten to a placeholder, then every remaining '.', '?' and '!' ends one."""
    dot, stop = "\x00", "\x01"
    t = " " + text.replace("\n", " ") + "  "
    t = re.sub(_TITLES, lambda m: m.group(1) + dot, t)
    t = re.sub(_WEB, lambda m: dot + m.group(1), t)
    t = re.sub(r"([0-9])[.]([0-9])", lambda m: m.group(1) + dot + m.group(2), t)
    t = re.sub(r"\.{2,}", lambda m: dot * len(m.group(0)) + stop, t)
    t = t.replace("Ph.D.", f"Ph{dot}D{dot}")
    t = re.sub(r"\s([A-Za-z])[.] ", lambda m: f" {m.group(1)}{dot} ", t)
    t = re.sub(_ACRONYM + " " + _STARTERS, lambda m: f"{m.group(1)}{stop} {m.group(2)}", t)
    t = re.sub(r"([A-Za-z])[.]([A-Za-z])[.]([A-Za-z])[.]", lambda m: dot.join(m.groups()) + dot, t)
    t = re.sub(r"([A-Za-z])[.]([A-Za-z])[.]", lambda m: dot.join(m.groups()) + dot, t)
    t = re.sub(" " + _COMPANY + "[.] " + _STARTERS, lambda m: f" {m.group(1)}{stop} {m.group(2)}", t)
    t = re.sub(" " + _COMPANY + "[.]", lambda m: f" {m.group(1)}{dot}", t)
    t = re.sub(r" ([A-Za-z])[.]", lambda m: f" {m.group(1)}{dot}", t)
    # closing quotes go before the end mark, so the quote stays in its sentence
    t = t.replace(".\u201d", "\u201d.").replace('."', '".').replace('!"', '"!').replace('?"', '"?')
    for mark in ".?!":
        t = t.replace(mark, mark + stop)
    sentences = [s.strip() for s in t.replace(dot, ".").split(stop)]
    if sentences and not sentences[-1]:
        sentences = sentences[:-1]
    return sentences


def _paragraphs_by_divider(text: str) -> list[str] | None:
    """Paragraphs separated by the markdown divider `***`; None when an inner paragraph is empty."""
    parts = re.split(r"\s?\*\*\*\s?", text)
    kept = []
    for i, p in enumerate(parts):
        if p.strip():
            kept.append(p)
        elif 0 < i < len(parts) - 1:
            return None
    return kept


# ---------------------------------------------------------------------------------------------------------
# Language detection
# ---------------------------------------------------------------------------------------------------------

# Unicode ranges that name a language (or a small family, resolved by the stop words below)
_SCRIPTS: list[tuple[str, str]] = [
    ("\u0400-\u04ff", "cyrillic"),
    ("\u0590-\u05ff", "he"),
    ("\u0600-\u06ff\u0750-\u077f", "arabic"),
    ("\u0900-\u097f", "devanagari"),
    ("\u0980-\u09ff", "bn"),
    ("\u0a00-\u0a7f", "pa"),
    ("\u0a80-\u0aff", "gu"),
    ("\u0b80-\u0bff", "ta"),
    ("\u0c00-\u0c7f", "te"),
    ("\u0c80-\u0cff", "kn"),
    ("\u0d00-\u0d7f", "ml"),
    ("\u0e00-\u0e7f", "th"),
    ("\u0370-\u03ff", "el"),
    ("\uac00-\ud7af\u1100-\u11ff", "ko"),
    ("\u3040-\u30ff", "ja"),
    ("\u4e00-\u9fff", "zh-cn"),
]
# Common function words per language, for texts in Latin script and to tell apart languages sharing a script
_STOPWORDS: dict[str, str] = {
    "en": "the and of to is in that it for you with on are this be as was have not but",
    "es": "el la de que y en los se del las por un una es con para no lo como",
    "pt": "o a de que e do da em um para com não uma os no se na por mais",
    "fr": "le la de et les des est un une du en que qui pas pour dans sur avec ce",
    "de": "der die und das ist nicht ein eine zu den mit von sich auf für des auch",
    "it": "il di che la e per un una non sono del della è con le lo gli",
    "pl": "i w nie na się z do to że jest jak co ale o tak przez",
    "fi": "ja on ei se että hän oli ovat mutta tai kun joka myös niin",
    "sw": "na ya wa kwa ni la za katika kuwa hii hiyo huo yake",
    "vi": "và của là có không được cho những một các người này trong",
    "ru": "и в не на что с как это по но он она они к у же",
    "uk": "і в не на що з як це та але він вона вони до у є",
    "bg": "и в не на че с като това за но той тя те да е се",
    "ar": "في من على إلى عن أن هذا التي الذي مع كان",
    "fa": "و در به از که این را با است برای آن یک",
    "ur": "اور کے میں کی ہے کو سے یہ کہ پر نہیں",
    "hi": "और के में की है को से यह कि पर नहीं एक",
    "mr": "आणि आहे या व ते की हे एक आहेत ला",
    "ne": "र छ को मा पनि यो हो गर्न भएको",
}
_SCRIPT_FAMILIES = {"cyrillic": ("ru", "uk", "bg"), "arabic": ("ar", "fa", "ur"), "devanagari": ("hi", "mr", "ne")}
_LATIN = ("en", "es", "pt", "fr", "de", "it", "pl", "fi", "sw", "vi")


def _builtin_detect(text: str) -> str | None:
    """The approximate language of `text` (an ISO 639-1 code as langdetect names it), None without letters."""
    letters = [c for c in text if c.isalpha()]
    if not letters:
        return None
    counts: Counter[str] = Counter()
    for c in letters:
        for ranges, name in _SCRIPTS:
            if re.match(f"[{ranges}]", c):
                counts[name] += 1
                break
        else:
            counts["latin"] += 1
    script = counts.most_common(1)[0][0]
    if script == "ja" or (script == "zh-cn" and counts["ja"]):
        return "ja"
    words = [w.lower() for w in re.findall(r"\w+", text)]

    def best(candidates: tuple[str, ...]) -> str:
        hits = {lang: sum(w in set(_STOPWORDS[lang].split()) for w in words) for lang in candidates}
        return max(candidates, key=lambda lang: (hits[lang], -candidates.index(lang)))

    if script == "latin":
        return best(_LATIN)
    if script in _SCRIPT_FAMILIES:
        return best(_SCRIPT_FAMILIES[script])
    return script


def _langdetect() -> Callable[[str], str | None] | None:
    try:
        import langdetect  # a dependency; an environment without it gets the built-in approximation above
    except ImportError:
        return None
    langdetect.DetectorFactory.seed = 0  # the detector samples; a fixed seed makes it repeatable

    def detect(text: str) -> str | None:
        try:
            return str(langdetect.detect(text))
        except langdetect.LangDetectException:
            return None

    return detect


_DETECT = _langdetect()
LANGUAGE_DETECTOR = "langdetect" if _DETECT is not None else "built-in approximation (script and function words)"
DETECTORS = {
    "language": LANGUAGE_DETECTOR,
    "sentences": "rule-based splitter (IFEval's split_into_sentences) in place of NLTK punkt",
    "capital_words": "letter/digit/apostrophe/hyphen runs in place of NLTK word_tokenize",
}
"""How the checks that need outside data were made (see the module docstring); part of every report."""


def detect_language(text: str) -> str | None:
    """The language of `text` (langdetect's code, e.g. 'en', 'zh-cn'), or None when none can be detected."""
    return _DETECT(text) if _DETECT is not None else _builtin_detect(text)


def _is_language(text: str, language: str) -> bool:
    found = detect_language(text)
    return found is None or found == language  # undetectable: followed, as in the reference scorer


# ---------------------------------------------------------------------------------------------------------
# The checks: (response, arguments) -> followed
# ---------------------------------------------------------------------------------------------------------


def _existence(r: str, a: dict[str, Any]) -> bool:
    return all(re.search(k, r, flags=re.IGNORECASE) for k in a["keywords"])


def _frequency(r: str, a: dict[str, Any]) -> bool:
    return _compare(len(re.findall(a["keyword"], r, flags=re.IGNORECASE)), a["relation"], a["frequency"])


def _forbidden(r: str, a: dict[str, Any]) -> bool:
    return not any(re.search(rf"\b{w}\b", r, flags=re.IGNORECASE) for w in a["forbidden_words"])


def _letter_frequency(r: str, a: dict[str, Any]) -> bool:
    return _compare(r.lower().count(str(a["letter"]).lower()), a["let_relation"], a["let_frequency"])


def _number_paragraphs(r: str, a: dict[str, Any]) -> bool:
    paragraphs = _paragraphs_by_divider(r)
    return paragraphs is not None and len(paragraphs) == a["num_paragraphs"]


def _nth_paragraph_first_word(r: str, a: dict[str, Any]) -> bool:
    parts = r.split("\n\n")
    n = sum(1 for p in parts if p.strip())
    nth = a["nth_paragraph"]
    if nth > n or nth > len(parts) or not parts[nth - 1].strip():
        return False  # the reference indexes the split parts, empty ones included
    word = parts[nth - 1].split()[0].lstrip("'\"")
    first = re.split(r"[.,?!'\"]", word, maxsplit=1)[0].lower()
    return n == a["num_paragraphs"] and first == str(a["first_word"]).lower()


def _bullets(r: str, a: dict[str, Any]) -> bool:
    stars = re.findall(r"^\s*\*[^\*].*$", r, flags=re.MULTILINE)
    dashes = re.findall(r"^\s*-.*$", r, flags=re.MULTILINE)
    return len(stars) + len(dashes) == a["num_bullets"]


def _highlights(r: str, a: dict[str, Any]) -> bool:
    single = [h for h in re.findall(r"\*[^\n\*]*\*", r) if h.strip("*").strip()]
    double = [h for h in re.findall(r"\*\*[^\n\*]*\*\*", r) if h[2:-2].strip()]
    return len(single) + len(double) >= a["num_highlights"]


def _sections(r: str, a: dict[str, Any]) -> bool:
    parts = re.split(r"\s?" + re.escape(str(a["section_spliter"])) + r"\s?\d+\s?", r)
    return len(parts) - 1 >= a["num_sections"]


def _json(r: str, a: dict[str, Any]) -> bool:
    text = r.strip()
    for fence in ("```json", "```Json", "```JSON", "```"):
        if text.startswith(fence):
            text = text[len(fence) :]
            break
    text = text.removesuffix("```").strip()
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def _title(r: str, a: dict[str, Any]) -> bool:
    return any(t[2:-2].strip() for t in re.findall(r"<<[^\n]+>>", r))


def _two_responses(r: str, a: dict[str, Any]) -> bool:
    parts = r.split("******")
    kept = []
    for i, p in enumerate(parts):
        if p.strip():
            kept.append(p.strip())
        elif 0 < i < len(parts) - 1:
            return False
    return len(kept) == 2 and kept[0] != kept[1]


def _postscript(r: str, a: dict[str, Any]) -> bool:
    marker = str(a["postscript_marker"])
    pattern = {"P.P.S": r"\s*p\.\s?p\.\s?s.*$", "P.S.": r"\s*p\.\s?s\..*$"}.get(marker)
    return bool(re.findall(pattern or r"\s*" + re.escape(marker.lower()) + r".*$", r.lower(), flags=re.MULTILINE))


def _capital_words(text: str) -> int:
    return sum(1 for w in re.findall(r"[\w'\-]+", text) if w.isupper())


def _end(r: str, a: dict[str, Any]) -> bool:
    return r.strip().strip('"').lower().endswith(str(a["end_phrase"]).strip().lower())


def _quotation(r: str, a: dict[str, Any]) -> bool:
    t = r.strip()
    return len(t) > 1 and t[0] == '"' and t[-1] == '"'


@dataclass(frozen=True)
class Instruction:
    summary: str
    check: Callable[[str, dict[str, Any]], bool]
    required: tuple[str, ...] = ()
    """Arguments the check needs (from the row's kwargs dict for this instruction)."""
    relation: str | None = None
    """The argument that must be one of `RELATIONS`, if any."""
    integers: tuple[str, ...] = field(default=())
    """Arguments that must be whole numbers."""


INSTRUCTIONS: Table[Instruction] = Table(
    "IFEval instruction",
    {
        "keywords:existence": Instruction("every keyword appears", _existence, ("keywords",)),
        "keywords:frequency": Instruction(
            "a keyword appears fewer than / at least N times",
            _frequency,
            ("keyword", "frequency", "relation"),
            "relation",
            ("frequency",),
        ),
        "keywords:forbidden_words": Instruction("none of the words appears", _forbidden, ("forbidden_words",)),
        "keywords:letter_frequency": Instruction(
            "a letter appears fewer than / at least N times",
            _letter_frequency,
            ("letter", "let_frequency", "let_relation"),
            "let_relation",
            ("let_frequency",),
        ),
        "language:response_language": Instruction(
            "the whole response is in the language", lambda r, a: _is_language(r, str(a["language"])), ("language",)
        ),
        "length_constraints:number_sentences": Instruction(
            "fewer than / at least N sentences",
            lambda r, a: _compare(len(split_sentences(r)), a["relation"], a["num_sentences"]),
            ("num_sentences", "relation"),
            "relation",
            ("num_sentences",),
        ),
        "length_constraints:number_paragraphs": Instruction(
            "exactly N paragraphs separated by ***", _number_paragraphs, ("num_paragraphs",), None, ("num_paragraphs",)
        ),
        "length_constraints:number_words": Instruction(
            "fewer than / at least N words",
            lambda r, a: _compare(count_words(r), a["relation"], a["num_words"]),
            ("num_words", "relation"),
            "relation",
            ("num_words",),
        ),
        "length_constraints:nth_paragraph_first_word": Instruction(
            "N paragraphs separated by blank lines; paragraph i starts with the word",
            _nth_paragraph_first_word,
            ("num_paragraphs", "nth_paragraph", "first_word"),
            None,
            ("num_paragraphs", "nth_paragraph"),
        ),
        "detectable_content:number_placeholders": Instruction(
            "at least N [placeholders]",
            lambda r, a: len(re.findall(r"\[.*?\]", r)) >= a["num_placeholders"],
            ("num_placeholders",),
            None,
            ("num_placeholders",),
        ),
        "detectable_content:postscript": Instruction(
            "a postscript starting with the marker", _postscript, ("postscript_marker",)
        ),
        "detectable_format:number_bullet_lists": Instruction(
            "exactly N markdown bullet points", _bullets, ("num_bullets",), None, ("num_bullets",)
        ),
        "detectable_format:constrained_response": Instruction(
            "contains one of 'My answer is yes./no./maybe.'",
            lambda r, a: any(c in r.strip() for c in CONSTRAINED_RESPONSES),
        ),
        "detectable_format:number_highlighted_sections": Instruction(
            "at least N *highlighted* sections", _highlights, ("num_highlights",), None, ("num_highlights",)
        ),
        "detectable_format:multiple_sections": Instruction(
            "at least N sections marked 'SPLITTER k'",
            _sections,
            ("section_spliter", "num_sections"),
            None,
            ("num_sections",),
        ),
        "detectable_format:json_format": Instruction("the whole response is JSON (code fences allowed)", _json),
        "detectable_format:title": Instruction("a title in <<double angular brackets>>", _title),
        "combination:two_responses": Instruction("two different responses separated by ******", _two_responses),
        "combination:repeat_prompt": Instruction(
            "starts by repeating the request word for word",
            lambda r, a: r.strip().lower().startswith(str(a["prompt_to_repeat"]).strip().lower()),
            ("prompt_to_repeat",),
        ),
        "startend:end_checker": Instruction("ends with the exact phrase", _end, ("end_phrase",)),
        "startend:quotation": Instruction("wrapped in double quotation marks", _quotation),
        "change_case:capital_word_frequency": Instruction(
            "fewer than / at least N words in capitals",
            lambda r, a: _compare(_capital_words(r), a["capital_relation"], a["capital_frequency"]),
            ("capital_frequency", "capital_relation"),
            "capital_relation",
            ("capital_frequency",),
        ),
        "change_case:english_capital": Instruction(
            "English, all capital letters", lambda r, a: r.isupper() and _is_language(r, "en")
        ),
        "change_case:english_lowercase": Instruction(
            "English, all lowercase letters", lambda r, a: r.islower() and _is_language(r, "en")
        ),
        "punctuation:no_comma": Instruction("no commas", lambda r, a: "," not in r),
    },
)


# ---------------------------------------------------------------------------------------------------------
# Reading rows, checking, aggregating
# ---------------------------------------------------------------------------------------------------------


@dataclass
class IFEvalItem:
    key: str
    prompt: str
    instruction_ids: list[str]
    kwargs: list[dict[str, Any]]
    row: int


def present_args(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The arguments an instruction gets: falsy values (null, '', 0, []) are absent, as in the reference scorer."""
    return {k: v for k, v in kwargs.items() if v}


def item_problems(item: IFEvalItem) -> list[str]:
    """What keeps an item from being scored: unknown instruction ids, missing or malformed arguments."""
    problems = []
    if len(item.kwargs) != len(item.instruction_ids):
        problems.append(f"{len(item.instruction_ids)} instruction ids but {len(item.kwargs)} kwargs dicts")
        return problems
    for iid, kw in zip(item.instruction_ids, item.kwargs, strict=True):
        if iid not in INSTRUCTIONS:
            from prefalign.errors import did_you_mean

            problems.append(f"unknown instruction id '{iid}'{did_you_mean(iid, INSTRUCTIONS.names())}")
            continue
        spec = INSTRUCTIONS[iid]
        args = present_args(kw if isinstance(kw, dict) else {})
        missing = [k for k in spec.required if k not in args]
        if missing:
            problems.append(f"{iid}: missing argument(s) {', '.join(missing)}")
            continue
        if spec.relation and args[spec.relation] not in RELATIONS:
            problems.append(f"{iid}: {spec.relation} must be one of {RELATIONS}, got {args[spec.relation]!r}")
        bad = [k for k in spec.integers if isinstance(args[k], bool) or not isinstance(args[k], int)]
        if bad:
            problems.append(f"{iid}: {', '.join(bad)} must be whole numbers")
    return problems


def loose_variants(response: str) -> list[str]:
    """The eight responses the loose score tries (see the module docstring)."""
    lines = response.split("\n")
    cut = ["\n".join(lines[1:]).strip(), "\n".join(lines[:-1]).strip(), "\n".join(lines[1:-1]).strip()]
    base = [response, *cut]
    return base + [r.replace("*", "") for r in base]


def follow(item: IFEvalItem, response: str, loose: bool = False) -> list[bool]:
    """Per instruction of a checked item (see `item_problems`): followed by the response (loose: by any variant)."""
    candidates = loose_variants(response) if loose else [response]
    out = []
    for iid, kw in zip(item.instruction_ids, item.kwargs, strict=True):
        spec, args = INSTRUCTIONS[iid], present_args(kw)
        out.append(any(r.strip() and spec.check(r, args) for r in candidates))
    return out


def levels(verdicts: list[list[bool]]) -> tuple[float, float]:
    """(prompt level, instruction level) accuracy of per-prompt instruction verdicts: the share of prompts whose
    every instruction is followed, and the share of instructions followed."""
    flat = [v for prompt in verdicts for v in prompt]
    return sum(all(p) for p in verdicts) / len(verdicts), sum(flat) / len(flat)


def ifeval_scores(items: list[IFEvalItem], responses: list[str]) -> dict[str, Any]:
    """Prompt- and instruction-level accuracy (`levels`), strict and loose, over checked items; per instruction id
    too.

    E.g. two prompts, [a, b] both followed and [c] not followed: prompt level 1/2, instruction level 2/3.
    """
    details = [
        {"strict": follow(item, response), "loose": follow(item, response, loose=True)}
        for item, response in zip(items, responses, strict=True)
    ]
    modes = ("strict", "loose")
    verdicts = {m: [d[m] for d in details] for m in modes}
    acc = {m: levels(verdicts[m]) if details else (None, None) for m in modes}
    by_id: dict[str, dict[str, list[float]]] = {}
    for item, d in zip(items, details, strict=True):
        for iid, s, lo in zip(item.instruction_ids, d["strict"], d["loose"], strict=True):
            got = by_id.setdefault(iid, {"strict": [], "loose": []})
            got["strict"].append(float(s))
            got["loose"].append(float(lo))
    mean = lambda v: sum(v) / len(v)
    return {
        **{f"prompt_{m}": acc[m][0] for m in modes},
        **{f"instruction_{m}": acc[m][1] for m in modes},
        "values": {
            **{f"prompt_{m}": [float(all(v)) for v in verdicts[m]] for m in modes},
            **{f"instruction_{m}": [float(x) for v in verdicts[m] for x in v] for m in modes},
        },
        "by_instruction": {
            iid: {"strict": mean(d["strict"]), "loose": mean(d["loose"]), "n": len(d["strict"])}
            for iid, d in sorted(by_id.items())
        },
        "details": details,
    }
