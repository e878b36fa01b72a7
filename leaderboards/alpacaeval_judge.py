"""AlpacaEval 2's weighted judge as its reference code runs it, with any chat model as the judge.

Reference: tatsu-lab/alpaca_eval @ cd543a1, the `weighted_alpaca_eval_gpt4_turbo` annotator
(`evaluators_configs/weighted_alpaca_eval_gpt4_turbo/configs.yaml`): `SinglePairwiseAnnotator` with the prompt
`alpaca_eval_clf_gpt4_turbo/alpaca_eval_clf.txt`, `utils.make_prompts`, `utils.prompt_to_chatml`,
`processors.RandomSwitchTwoColumnsProcessor` and `completion_parsers.logprob_parser`. The prompt is the benchmark's
own file, given by the user as `--judge-prompts FILE`; nothing of it is built in.

- the order: output_1 is the reference answer, output_2 the model's; each item's two outputs are switched when
  `random.Random("is_switched_outputs" + instruction + "123").choices([False, True])` says so (the processor's
  seed, 123), and a switched item's preference is read back as 3 - preference.
- the prompt: each `{name}` of the file (a name without spaces) filled once, in the order the names first appear,
  by replacing its first occurrence (`make_prompts`); the text, ChatML (`<|im_start|>role ... <|im_end|>`), split
  into messages as `prompt_to_chatml` splits it (content stripped; a `system name=...` role a system message); the
  judge's chat template renders them with its generation prompt.
- the verdict: the judge's five most likely first tokens (`top_logprobs: 5`, read from the model's next-token
  distribution in fp32) as their decoded texts; of them `m` (output_1 better) and `M`: preference
  2 - exp(logprob(m) - logsumexp(logprob(m), logprob(M))), a token absent from the five counting as probability 0,
  and neither present an abstention (NaN, left out and counted; the reference drops the row). Two identical outputs
  are 1.5 without asking (`PairwiseAnnotatorLocal._preprocess`).
- the preference, 1..2, is 1 + P(the model's answer better), what `get_winrate` reads in annotations.json.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefalign.errors import UserError

from .policy_data import BenchItem

SEED = 123
"""The annotator's seed, which the output switch is drawn with."""
SWITCH = "is_switched_outputs"
TOP_LOGPROBS = 5
NUMERATOR = "m"
DENOMINATORS = ("m", "M")
FIELDS = ("instruction", "output_1", "output_2")
PLACEHOLDER = re.compile(r"{([^ \s]+?)}")
REFERENCE_CODE = (
    "tatsu-lab/alpaca_eval@cd543a1 weighted_alpaca_eval_gpt4_turbo (make_prompts, prompt_to_chatml, "
    "RandomSwitchTwoColumnsProcessor, logprob_parser)"
)


def read_prompt(path: str | Path) -> str:
    """AlpacaEval's ChatML prompt file (e.g. alpaca_eval_clf_gpt4_turbo/alpaca_eval_clf.txt); one that lacks a field
    or is not ChatML is an error naming the file."""
    p = Path(path)
    if not p.is_file():
        raise UserError(
            f"--judge-prompts {p}: no such file (AlpacaEval's alpaca_eval_clf_gpt4_turbo/alpaca_eval_clf.txt)"
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
        raise UserError(f"--judge-prompts {p}: " + "; ".join(problems))
    return text


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


def preference(top: Sequence[tuple[str, float]]) -> float:
    """`logprob_parser(is_binarize=False)` on the first token's top log-probabilities (text, logprob): 2 - P(m) /
    (P(m) + P(M)), a missing token counting as probability 0; NaN when neither is there."""
    found = {t: lp for t, lp in top if t in DENOMINATORS or t == NUMERATOR}
    if not found:
        return math.nan
    num = found.get(NUMERATOR, -math.inf)
    den = [found.get(t, -math.inf) for t in DENOMINATORS]
    peak = max(den)
    log_den = peak + math.log(sum(math.exp(x - peak) for x in den))
    return 2 - math.exp(num - log_den)


TopLogprobs = Callable[[list[list[dict[str, str]]]], list[list[tuple[str, float]]]]
"""(conversations) -> each one's TOP_LOGPROBS most likely next tokens after the generation prompt: (text, logprob)."""


@dataclass
class AlpacaEvalJudge:
    """A chat model judging AlpacaEval's pairs with the benchmark's own prompt (`--judge-prompts`) by the log-
    probabilities of its first token; `model` names it in the annotations."""

    model: str
    template: str
    top_logprobs: TopLogprobs
    files: dict[str, str] | None = None
    kind: str = "alpacaeval"

    @property
    def name(self) -> str:
        return self.model

    def check(self, items: Sequence[BenchItem]) -> None:
        missing = [it.id for it in items if it.reference is None]
        if missing:
            raise UserError(f"{len(missing)} item(s) without a reference output to judge against, e.g. {missing[0]}")

    def annotations(self, items: Sequence[BenchItem], answers: Sequence[str]) -> list[dict[str, Any]]:
        """Each item's {preference (1..2, NaN abstained), is_switched_outputs}, as the reference annotates it."""
        out: list[dict[str, Any]] = [{} for _ in items]
        asked, convs = [], []
        for k, (it, answer) in enumerate(zip(items, answers, strict=True)):
            ref = it.reference or ""
            swap = switched(it.turns[0])
            out[k] = {"is_switched_outputs": swap, "preference": 1.5}
            if answer == ref:
                continue
            first, second = (answer, ref) if swap else (ref, answer)
            convs.append(
                chatml(fill(self.template, {"instruction": it.turns[0], "output_1": first, "output_2": second}))
            )
            asked.append(k)
        for k, top in zip(asked, self.top_logprobs(convs) if convs else [], strict=True):
            p = preference(top)
            out[k]["preference"] = 3 - p if out[k]["is_switched_outputs"] else p
        return out

    def describe(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "mode": "alpacaeval weighted (first-token log-probabilities of m / M)",
            "files": self.files or {},
            "top_logprobs": TOP_LOGPROBS,
            "seed": SEED,
            "reference_code": REFERENCE_CODE,
        }


__all__ = [
    "AlpacaEvalJudge",
    "TOP_LOGPROBS",
    "chatml",
    "fill",
    "preference",
    "read_prompt",
    "switched",
]
