"""AlpacaEval's annotators as its reference code runs them, with any chat model as the judge.

Reference: tatsu-lab/alpaca_eval @ cd543a1, `annotators/pairwise_evaluator.py` (`SinglePairwiseAnnotator`),
`annotators/base.py` (`SingleAnnotator`: `_parse_completions`, `_postprocess`), `utils.make_prompts`,
`utils.prompt_to_chatml`, `processors.RandomSwitchTwoColumnsProcessor` and `completion_parsers`. The annotator is the
benchmark's own file, given by the user as `--judge-prompts FILE` (`read_annotator`); nothing of it is built in:

- an annotator's `configs.yaml` (`evaluators_configs/NAME/configs.yaml`, or its directory): its `prompt_template`
  (read relative to the directory above the config's, as the reference reads it), `fn_completion_parser` (default
  `regex_parser`, the pairwise annotator's) with its `completion_parser_kwargs`, `completions_kwargs` (`max_tokens`
  or `max_tokens_to_sample`; `temperature`), `batch_size` and `is_randomize_output_order`. The judge model is
  --judge's, not the config's `model_name`.
- a prompt file alone (e.g. `alpaca_eval_clf_gpt4_turbo/alpaca_eval_clf.txt`): judged as
  `weighted_alpaca_eval_gpt4_turbo` judges with it (`WEIGHTED`).

The rules:

- the order: output_1 is the reference answer, output_2 the model's; unless the config sets
  `is_randomize_output_order: false`, each item's two outputs are switched when
  `random.Random("is_switched_outputs" + instruction + "0").choices([False, True])` says so (the processor's
  seed is the annotator's: 0 as `alpaca_eval evaluate` builds it, through `PairwiseAnnotator`; a
  `SinglePairwiseAnnotator` built alone defaults to 123), and a switched item's preference is read back as
  3 - preference.
- the prompt: each `{name}` of the file (a name without spaces) filled once, in the order the names first appear,
  by replacing its first occurrence (`make_prompts`); the text, ChatML (`<|im_start|>role ... <|im_end|>`), split
  into messages as `prompt_to_chatml` splits it (content stripped; a `system name=...` role a system message); the
  judge's chat template renders them with its generation prompt.
- the reply, by what the parser reads (`PARSERS`): `logprob_parser` the judge's five most likely first tokens
  (`top_logprobs: 5`, from the model's next-token distribution in fp32, decoded); `regex_parser` and
  `ranking_parser` the judge's written reply (greedy, at most `max_tokens` tokens, 2048 when the config sets none;
  the configs ask at temperature 0, and another temperature is refused for them).
- the verdict: the parser's list of annotations; anything but exactly one (a batch of one), an empty reply or a
  parser error is no annotation: an abstention here (NaN, left out and counted), a dropped row there.
  `logprob_parser`: of the five, the numerator and denominator tokens; `is_binarize: false` gives 2 - P(numerator) /
  P(denominators) (a token absent from the five counting as probability 0), `true` gives 1 when the numerator's
  log-probability beats every other denominator token's, else 2; none of them there: no annotation.
  `regex_parser`: the `outputs_to_match` pattern whose match starts first (the first listed on a tie), its key
  taken, the reply cut after the match and searched again, until none matches. `ranking_parser`: the reply read by
  `ast.literal_eval`, the `rank` of the entry whose `model` is `model_1`, kept when it is 1 or 2 (`True` and `1.0`
  count as 1, as Python's `in [1, 2]` counts them), anything else no annotation. Two identical outputs are 1.5
  without asking (`PairwiseAnnotatorLocal._preprocess`).
- the preference, 1..2, is 1 + P(the model's answer better), what `get_winrate` reads in annotations.json.

Refused with a message, as the reference cannot run them with a local judge or would stop: a pool of several
annotators (AlpacaFarm's), `batch_size` above 1, function calling (`tools`, `functions`: `pipeline_meta_parser`
reads a function call's arguments), `lmsys_parser` (its tie, 0, fails the reference's own check of the
preferences), `logprob_parser` at another position than the first token (the chain-of-thought variants), processors
other than `ChainOfThoughtProcessor` (which only adds explanation columns), `regex_parser` keys outside 1..2.
"""

from __future__ import annotations

import ast
import math
import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from prefalign.errors import UserError

from .policy_data import BenchItem

SEED = 0
"""The annotator's seed, which the output switch is drawn with: `PairwiseAnnotator`'s default, as `evaluate` runs."""
SWITCH = "is_switched_outputs"
TOP_LOGPROBS = 5
FIELDS = ("instruction", "output_1", "output_2")
PLACEHOLDER = re.compile(r"{([^ \s]+?)}")
REFERENCE_CODE = (
    "tatsu-lab/alpaca_eval@cd543a1 SinglePairwiseAnnotator (make_prompts, prompt_to_chatml, "
    "RandomSwitchTwoColumnsProcessor, completion_parsers)"
)


def switched(instruction: str, seed: int = SEED) -> bool:
    """Whether the reference shows this item's outputs switched (the model's answer as output_1)."""
    return random.Random(SWITCH + instruction + str(seed)).choices([False, True], k=1)[0]


def fill(template: str, fields: dict[str, str]) -> str:
    """`make_prompts` for one item: each name's first occurrence replaced, in the order the names first appear."""
    out = template
    for name in dict.fromkeys(PLACEHOLDER.findall(template)):
        out = out.replace("{" + name + "}", str(fields[name]), 1)
    return out


def chatml(prompt: str) -> list[dict[str, str]]:
    """`prompt_to_chatml`: ChatML text -> messages (content stripped; `system name=x` a system message)."""
    messages = []
    for part in prompt.strip().split("<|im_start|>")[1:]:
        role, _, rest = part.partition("\n")
        role = role.strip()
        messages.append(
            {"role": "system" if role.startswith("system") else role, "content": rest.split("<|im_end|>", 1)[0].strip()}
        )
    return messages


# --- the parsers: the reply (text, or the first token's top log-probabilities) -> a list of annotations ---


def logprob_parser(
    top: Sequence[tuple[str, float]],
    numerator_token: str,
    denominator_tokens: Sequence[str],
    is_binarize: bool = True,
    log_prob_index: str | int = "batch",
) -> list[float]:
    """`completion_parsers.logprob_parser` on one token's top log-probabilities (text, logprob): NaN when neither
    the numerator nor a denominator token is among them, a missing one counting as probability 0."""
    found = {t: lp for t, lp in top if t in [*denominator_tokens, numerator_token]}
    if not found:
        return [math.nan]
    num = found.get(numerator_token, -math.inf)
    if is_binarize:
        others = [found.get(t, -math.inf) for t in denominator_tokens if t != numerator_token]
        return [1 if all(num > x for x in others) else 2]
    den = [found.get(t, -math.inf) for t in denominator_tokens]
    peak = max(den)  # finite: the numerator is a denominator token (`_check_logprob`) and something was found
    log_den = peak + math.log(sum(math.exp(x - peak) for x in den))
    return [2 - math.exp(num - log_den)]


def regex_parser(completion: str, outputs_to_match: Mapping[Any, str]) -> list[Any]:
    """`completion_parsers.regex_parser`: the key of the pattern whose match starts first (the first listed on a
    tie), the text cut after that match, again until none matches."""
    if completion == "":
        raise ValueError("The completion is empty.")
    patterns = {k: re.compile(v) for k, v in outputs_to_match.items()}
    keys: list[Any] = []
    while True:
        first: re.Match[str] | None = None
        key = None
        for k, rx in patterns.items():
            m = rx.search(completion)
            if m and (first is None or m.start() < first.start()):
                first, key = m, k
        if first is None:
            return keys
        if first.end() == 0:  # an empty match at the start: the reference would search the same text forever
            raise UserError(f"regex_parser: the pattern of {key!r} matches the empty text; it must match a verdict")
        keys.append(key)
        completion = completion[first.end() :]


def ranking_parser(completion: str, model_1_name: str = "model_1") -> list[Any]:
    """`completion_parsers.ranking_parser`: the reply read as a Python literal, the rank of the entry whose `model`
    is `model_1_name` when it is 1 or 2 (as `in [1, 2]` reads it), else NaN."""
    if completion == "":
        raise ValueError("The completion is empty.")
    try:
        ordered = ast.literal_eval(completion)
        rank = [c for c in ordered if c["model"] == model_1_name][0]["rank"]
        if rank not in [1, 2]:  # the reference's `assert`
            return [math.nan]
        return [rank]
    except Exception:  # the reference logs any error and returns NaN
        return [math.nan]


@dataclass(frozen=True)
class Parser:
    """One of alpaca_eval's completion parsers: what it reads of the judge (`logprobs`: its first token's top
    log-probabilities; `text`: its written reply) and the function (reply, **kwargs) -> annotations."""

    reads: str
    parse: Callable[..., list[Any]]
    check: Callable[[dict[str, Any]], list[str]]


def _check_logprob(kw: dict[str, Any]) -> list[str]:
    problems = [f"completion_parser_kwargs: no {k}" for k in ("numerator_token", "denominator_tokens") if k not in kw]
    if "numerator_token" in kw and kw["numerator_token"] not in (kw.get("denominator_tokens") or []):
        problems.append(
            "completion_parser_kwargs: the numerator_token is not among the denominator_tokens (a preference outside "
            "1..2, which alpaca_eval's own check stops on)"
        )
    if kw.get("log_prob_index", "batch") not in ("batch", 0):
        problems.append(
            f"completion_parser_kwargs.log_prob_index: {kw['log_prob_index']!r} reads a later token's "
            "log-probabilities (a chain of thought first); only the first token's (batch, 0) are read here"
        )
    return problems


def _check_regex(kw: dict[str, Any]) -> list[str]:
    outputs = kw.get("outputs_to_match")
    if not isinstance(outputs, dict) or not outputs:
        return ["completion_parser_kwargs: regex_parser needs outputs_to_match (key: pattern)"]
    problems = []
    for key, pattern in outputs.items():
        if isinstance(key, bool) or not isinstance(key, int | float) or not 1 <= key <= 2:
            problems.append(
                f"outputs_to_match: key {key!r} is not a preference in 1..2 (alpaca_eval's own check of the "
                "preferences would stop on it)"
            )
        try:
            if re.compile(str(pattern)).search("") is not None:
                problems.append(f"outputs_to_match.{key}: {pattern!r} matches the empty text")
        except re.error as e:
            problems.append(f"outputs_to_match.{key}: {pattern!r} is not a regular expression ({e})")
    return problems


def _check_ranking(kw: dict[str, Any]) -> list[str]:
    return [f"completion_parser_kwargs: {k} is not ranking_parser's (model_1_name)" for k in kw if k != "model_1_name"]


PARSERS: dict[str, Parser] = {
    "logprob_parser": Parser("logprobs", logprob_parser, _check_logprob),
    "regex_parser": Parser("text", regex_parser, _check_regex),
    "ranking_parser": Parser("text", ranking_parser, _check_ranking),
}
"""alpaca_eval's `fn_completion_parser` names read here -> the parser."""

REFUSED_PARSERS = {
    "pipeline_meta_parser": "it reads a function call's arguments (the _fn configs' tools), which a local judge "
    "is not given",
    "json_parser": "it reads a function call's JSON arguments (the _fn configs' tools), which a local judge is not "
    "given",
    "lmsys_parser": "its tie, 0, fails alpaca_eval's own check of the preferences (1..2), which stops the run",
}


TEXT_MAX_TOKENS = 2048
"""A text parser's reply length when its config sets no `max_tokens` (the API would write to the end of the
context); `--judge-max-new-tokens` overrides it."""


@dataclass(frozen=True)
class Annotator:
    """One AlpacaEval annotator: its prompt, parser and decoding, from its configs.yaml (or its prompt file alone,
    as the weighted annotator)."""

    name: str
    template: str
    parser: str
    parser_kwargs: dict[str, Any] = field(default_factory=dict)
    max_tokens: int = 1
    temperature: float = 0.0
    randomize: bool = True
    files: dict[str, str] = field(default_factory=dict)

    @property
    def reads(self) -> str:
        return PARSERS[self.parser].reads

    def annotate(self, reply: Any) -> float:
        """One reply -> its preference (1..2, before the switch is undone), NaN when the reference has none:
        anything but one annotation, an empty reply or a parser error (`SingleAnnotator._parse_completions`)."""
        try:
            out = list(PARSERS[self.parser].parse(reply, **self.parser_kwargs))
        except UserError:
            raise
        except Exception:
            return math.nan
        if len(out) != 1 or out[0] is None:
            return math.nan
        return float(out[0])


WEIGHTED_KWARGS: dict[str, Any] = {"numerator_token": "m", "denominator_tokens": ["m", "M"], "is_binarize": False}
"""`weighted_alpaca_eval_gpt4_turbo`'s completion_parser_kwargs, what a prompt file alone is judged with."""


def weighted(template: str, files: dict[str, str] | None = None) -> Annotator:
    """The `weighted_alpaca_eval_gpt4_turbo` annotator with the prompt `template`."""
    return Annotator(
        "weighted_alpaca_eval_gpt4_turbo",
        template,
        "logprob_parser",
        dict(WEIGHTED_KWARGS),
        max_tokens=1,
        temperature=1.0,
        files=files or {},
    )


def read_prompt(path: str | Path, flag: str = "--judge-prompts") -> str:
    """AlpacaEval's ChatML prompt file (e.g. alpaca_eval_clf_gpt4_turbo/alpaca_eval_clf.txt); one that lacks a field
    or is not ChatML is an error naming the file."""
    p = Path(path)
    if not p.is_file():
        raise UserError(
            f"{flag} {p}: no such file (AlpacaEval's alpaca_eval_clf_gpt4_turbo/alpaca_eval_clf.txt, or an "
            "annotator's configs.yaml)"
        )
    text = p.read_text(encoding="utf-8")
    names = PLACEHOLDER.findall(text)
    problems = [f"no {{{f}}}" for f in FIELDS if f not in names]
    problems += [
        f"{{{n}}} appears {names.count(n)} times (one item a prompt: once)" for n in FIELDS if names.count(n) > 1
    ]
    problems += [f"{{{n}}} is not one of {', '.join(FIELDS)}" for n in dict.fromkeys(names) if n not in FIELDS]
    if not (text.strip().startswith("<|im_start|>") and text.strip().endswith("<|im_end|>")):
        problems.append("not ChatML (it must start with <|im_start|> and end with <|im_end|>)")
    if problems:
        raise UserError(f"{flag} {p}: " + "; ".join(problems))
    return text


KNOWN_KEYS = {
    "prompt_template",
    "fn_completions",
    "completions_kwargs",
    "fn_completion_parser",
    "completion_parser_kwargs",
    "batch_size",
    "is_randomize_output_order",
    "completion_key",
    "processors_to_kwargs",
}
IGNORED_PROCESSORS = ("ChainOfThoughtProcessor",)  # adds explanation columns; the preference is untouched


def read_annotator(path: str | Path) -> Annotator:
    """--judge-prompts: an annotator's configs.yaml (or its directory) -> the annotator, every problem named at once;
    any other file is read as a prompt for the weighted annotator."""
    p = Path(path)
    if p.is_dir():
        p = p / "configs.yaml"
    if p.suffix not in (".yaml", ".yml"):
        return weighted(read_prompt(p), {"prompt": str(p)})
    flag = f"--judge-prompts {p}"
    if not p.is_file():
        raise UserError(f"{flag}: no such file (an annotator's evaluators_configs/NAME/configs.yaml)")
    try:
        raw = yaml.safe_load(p.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        raise UserError(f"{flag}: not YAML ({e})") from None
    if not isinstance(raw, dict) or not raw or not all(isinstance(v, dict) for v in raw.values()):
        raise UserError(f"{flag}: not an annotator config (a mapping of the annotator's name to its settings)")
    if len(raw) > 1:
        raise UserError(
            f"{flag}: a pool of {len(raw)} annotators ({', '.join(map(str, raw))}); one annotator a config here"
        )
    name, cfg = next(iter(raw.items()))
    problems = [f"{k}: not an annotator setting ({', '.join(sorted(KNOWN_KEYS))})" for k in cfg if k not in KNOWN_KEYS]
    parser = str(cfg.get("fn_completion_parser", "regex_parser"))
    kwargs = dict(cfg.get("completion_parser_kwargs") or {})
    completions = dict(cfg.get("completions_kwargs") or {})
    if parser in REFUSED_PARSERS:
        problems.append(f"fn_completion_parser: {parser} is not read here: {REFUSED_PARSERS[parser]}")
    elif parser not in PARSERS:
        problems.append(f"fn_completion_parser: {parser} is not one of {', '.join(PARSERS)}")
    else:
        problems += PARSERS[parser].check(kwargs)
    if int(cfg.get("batch_size", 1)) != 1:
        problems.append(
            f"batch_size: {cfg['batch_size']} instructions a prompt (AlpacaFarm's); one a prompt (batch_size: 1) here"
        )
    for key in ("tools", "functions", "tool_choice", "function_call"):
        if key in completions:
            problems.append(f"completions_kwargs.{key}: function calling; a local judge writes text, given no tools")
    unknown = [k for k in (cfg.get("processors_to_kwargs") or {}) if k not in IGNORED_PROCESSORS]
    problems += [f"processors_to_kwargs: {k} is not applied here" for k in unknown]
    max_tokens = int(completions.get("max_tokens", completions.get("max_tokens_to_sample", 0)) or 0)
    temperature = float(completions.get("temperature", 0.0) or 0.0)
    reads = PARSERS[parser].reads if parser in PARSERS else None
    if reads == "logprobs" and max_tokens not in (0, 1):
        problems.append(
            f"completions_kwargs.max_tokens: {max_tokens}; logprob_parser reads every written token's top "
            "log-probabilities as one annotation each, one token here"
        )
    if reads == "text" and temperature != 0:
        problems.append(
            f"completions_kwargs.temperature: {temperature}; the judge writes greedily here (temperature 0)"
        )
    template_name = cfg.get("prompt_template")
    template_path = p.resolve().parents[1] / str(template_name) if template_name else None
    if template_path is None:
        problems.append("prompt_template: missing (the prompt file, relative to the directory above this one)")
    elif not template_path.is_file():
        problems.append(f"prompt_template: {template_name} is not a file under {p.resolve().parents[1]}")
    if problems:
        raise UserError(f"{flag}: " + "; ".join(problems))
    assert template_path is not None
    template = read_prompt(template_path, flag=f"{flag}: prompt_template")
    randomize = cfg.get("is_randomize_output_order", True)
    return Annotator(
        str(name),
        template,
        parser,
        kwargs,
        max_tokens=max_tokens or (TEXT_MAX_TOKENS if reads == "text" else 1),
        temperature=temperature,
        randomize=bool(randomize),
        files={"config": str(p), "prompt": str(template_path)},
    )


Completions = Callable[[list[list[dict[str, str]]]], list[Any]]
"""(conversations) -> each one's reply as the annotator's parser reads it: its written text, or its TOP_LOGPROBS most
likely first tokens after the generation prompt, (text, logprob)."""


@dataclass
class AlpacaEvalJudge:
    """A chat model judging AlpacaEval's pairs as one of its annotators does (`--judge-prompts`); `model` names it
    in the annotations."""

    model: str
    annotator: Annotator
    completions: Completions
    kind: str = "alpacaeval"

    @property
    def name(self) -> str:
        return self.model

    def check(self, items: Sequence[BenchItem]) -> None:
        missing = [it.id for it in items if it.reference is None]
        if missing:
            raise UserError(f"{len(missing)} item(s) without a reference output to judge against, e.g. {missing[0]}")

    def annotations(self, items: Sequence[BenchItem], answers: Sequence[str]) -> list[dict[str, Any]]:
        """Each item's {preference (1..2, NaN abstained), is_switched_outputs (when the annotator switches),
        raw_completion (a written reply)}, as the reference annotates it."""
        a = self.annotator
        out: list[dict[str, Any]] = [{} for _ in items]
        asked, convs = [], []
        for k, (it, answer) in enumerate(zip(items, answers, strict=True)):
            ref = it.reference or ""
            swap = a.randomize and switched(it.turns[0])
            out[k] = {"preference": 1.5} | ({"is_switched_outputs": swap} if a.randomize else {})
            if answer == ref:
                continue
            first, second = (answer, ref) if swap else (ref, answer)
            convs.append(chatml(fill(a.template, {"instruction": it.turns[0], "output_1": first, "output_2": second})))
            asked.append(k)
        for k, reply in zip(asked, self.completions(convs) if convs else [], strict=True):
            p = a.annotate(reply)
            out[k]["preference"] = 3 - p if out[k].get("is_switched_outputs") else p
            if a.reads == "text":
                out[k]["raw_completion"] = reply
        return out

    def describe(self) -> dict[str, Any]:
        a = self.annotator
        reads = (
            "first-token log-probabilities (top 5)"
            if a.reads == "logprobs"
            else f"written reply (greedy, at most {a.max_tokens} tokens)"
        )
        return {
            "model": self.model,
            "mode": f"alpacaeval {a.name}: {a.parser} on the judge's {reads}",
            "annotator": a.name,
            "parser": a.parser,
            "parser_kwargs": a.parser_kwargs,
            "randomize_output_order": a.randomize,
            "files": a.files,
            "top_logprobs": TOP_LOGPROBS if a.reads == "logprobs" else None,
            "max_tokens": a.max_tokens,
            "seed": SEED,
            "reference_code": REFERENCE_CODE,
        }


__all__ = [
    "PARSERS",
    "TOP_LOGPROBS",
    "AlpacaEvalJudge",
    "Annotator",
    "chatml",
    "fill",
    "logprob_parser",
    "ranking_parser",
    "read_annotator",
    "read_prompt",
    "regex_parser",
    "switched",
    "weighted",
]
