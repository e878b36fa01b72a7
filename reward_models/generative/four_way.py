"""RewardBench 2's 4-way mode: a generative judge sees the four answers of a prompt at once and names the best one,
as the reference runs it by default (no `--score_w_ratings`).

Reference: allenai/reward-bench @ 05a9005e, `rewardbench/generative_v2.py` (`MTBENCH_V2`, `format_judge_answers`
lines 155-171, `process_judgement` lines 174-184) and `scripts/run_generative_v2.py` with a local model through
vLLM (`format_judgements` lines 397-449, the batched generation and `process_shuffled` lines 593-623, the Ties
subset lines 625-633). Line numbers are those of that commit.

- the prompts: the benchmark's own text, not built in. The user gives a file (`prompts=FILE`, read by
  `read_prompts` with `FOUR_WAY_FIELDS`): the reference's `generative_v2.py` itself, whose dict constant
  `MTBENCH_V2` gives `system_prompt` (the constant `prompt_v2`) and `prompt_template`, and whose `ratings_prompt_ties`
  rates the Ties subset (all read with `ast`, never imported or run); or a JSON object with those three keys.
  `prompt_template` must fill `{question}` and `{answer_a}`..`{answer_d}` and nothing else; the system prompt is sent
  as it is.
- the judge messages: a system turn (`system_prompt`) and a user turn, `prompt_template.format(question=<the first
  user turn>, answer_a=..., answer_d=<each shown answer's first assistant message>)` (`format_judge_answers` reads
  `answer[1]["content"]` of conversations the loader builds as [user, assistant]); the judge's chat template with
  the generation prompt. `no_system_prompt` sends `system + "\\n\\n" + user` as the one user turn instead (the
  script's `--no_system_prompt`, lines 430-438).
- multi-turn: none. The loader builds every conversation from the row's one `prompt` string (utils.py
  `load_eval_dataset_multi`); `format_judge_answers` takes `multi_turn` and never uses it, and `format_judgements`
  computes it from the number of chosen conversations (line 399), so it is always false. Here the question is the
  first user turn and each answer its first assistant message, whatever the data holds.
- the shuffle: the chosen answer (index 0) is shown at position p in 0..3 by swapping it with the answer there
  (lines 406-417): p = 1 shows [rejected 0, chosen, rejected 1, rejected 2], p = 2 [rejected 1, rejected 0, chosen,
  rejected 2], p = 3 [rejected 2, rejected 0, rejected 1, chosen]. The reference draws p with
  `np.random.randint(0, 4)`, unseeded, so two runs differ; here p = sha256("<seed>:<example id>") mod 4
  (`four_way_position`), reproducible, and uniform over the four positions as the reference's draw is.
- decoding: greedy (temperature 0, top_p 1), one output of at most `max_new_tokens` (2048, the script's
  `SamplingParams`, lines 165-171); a prompt that leaves less room in the context generates up to the context's end,
  as vLLM does. A prompt that alone fills the context generates nothing and its verdict is "error" (older vLLM
  returns an empty output for it, which reads as "error"; newer vLLM stops the whole run).
- the verdict: `parse_four_way` (`process_judgement`): the first of `[[A]]`, `[[B]]`, `[[C]]`, `[[D]]` the output
  contains, in that order, else "error".
- the credit (`process_shuffled`): 1 when the verdict is the chosen answer's letter, 0 for another letter, 0.25 for
  "error". Here the verdict is returned as one score per answer in the example's order, 1 for the answer named and
  0 for the others (all 0 on "error"), so RewardBench 2's best-of-4 rule gives exactly that credit (1, 0, and a
  four-way tie at the top: 1/4).
- the Ties subset: always rated, as in ratings mode (lines 625-633): each answer alone with `ratings_prompt_ties`,
  `parse_rating`, -1 kept as a score (`ratings.rate`), the ratings into the Ties composite.

Not reproduced: the reference renders the chat template to text that vLLM tokenizes again, adding special tokens a
second time (a doubled BOS under templates that write one; the token ids it builds without them, line 444, are used
only for Atla judges); here the template is tokenized once. Its FastChat templates (`--chat_template`), the Gemini
prompt variant (`prompt_v2_gemini`), API judges and ensembles (PoLL) are not offered.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from prefalign.config import option
from prefalign.errors import UserError
from preference_data.records import Conversation

from ..base import ScorerKind
from .parse import FOUR_WAY_LETTERS, parse_four_way
from .ratings import (
    RATING_FIELDS,
    PromptField,
    RB2JudgeOptions,
    _first,
    rate,
    rating_message,
    read_prompts,
)
from .scorers import _GenerativeJudge

ANSWER_FIELDS = tuple(f"answer_{letter.lower()}" for letter in FOUR_WAY_LETTERS)
"""The 4-way template's answer placeholders, in the order shown (A..D)."""
FOUR_WAY_FIELDS = (
    PromptField("system_prompt", (), "", in_dict="MTBENCH_V2"),
    PromptField(
        "prompt_template",
        ("question", *ANSWER_FIELDS),
        "{question} with the first user turn and {answer_a}..{answer_d} with the four answers as shown",
        in_dict="MTBENCH_V2",
    ),
    RATING_FIELDS["ties"],
)
"""The 4-way mode's prompts: the judge's system turn and user turn (MTBENCH_V2's), and the Ties rating prompt."""
FOUR_WAY_REFERENCE_SHA256 = {
    "system_prompt": "cc81b612789438e858efeee67de4087ac07d451c750915b79b73d470ed36a5ff",
    "prompt_template": "0b53abc0dd92074fcf9351fb8edab886a23bc29ee68172e7592bd08bfe0e6221",
    "ratings_prompt_ties": "86b62377fd01e9697fd87f04ef6d1163ee694a006b838d532d1866267d9722b4",
}
"""SHA-256 of the three texts at allenai/reward-bench @ 05a9005e (`describe()["prompts_are_reference"]`)."""
SHUFFLE_RULE = (
    "the chosen answer shown at position sha256('<seed>:<example id>') mod 4, swapped with the answer there "
    "(the reference: np.random.randint(0, 4), unseeded)"
)


def four_way_position(seed: int, example_id: str) -> int:
    """Where the chosen answer is shown, 0..3 (A..D): the first 8 bytes of sha256("<seed>:<example id>") as a
    big-endian integer, mod 4. The reference draws it with `np.random.randint(0, 4)`, unseeded."""
    digest = hashlib.sha256(f"{seed}:{example_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % len(FOUR_WAY_LETTERS)


def four_way_order(position: int) -> list[int]:
    """The answers' indices as shown (chosen first in the example) when the chosen answer goes to `position`: it
    swaps places with the answer there, the others stay (`format_judgements`, lines 406-417)."""
    order = list(range(len(FOUR_WAY_LETTERS)))
    order[0], order[position] = order[position], order[0]
    return order


@dataclass
class RB2FourWayOptions(RB2JudgeOptions):
    prompts: str | None = option(
        None,
        "the benchmark's prompts: a JSON file {system_prompt, prompt_template, ratings_prompt_ties} copied from "
        "allenai/reward-bench @ 05a9005e rewardbench/generative_v2.py (MTBENCH_V2's system_prompt and "
        "prompt_template, and ratings_prompt_ties), or that file itself (required)",
    )
    seed: int = option(
        0,
        "the shuffle's seed: each example's chosen answer is shown at position sha256('<seed>:<id>') mod 4 (the "
        "reference draws it unseeded); also the sampler's seed, unused when greedy",
    )
    no_system_prompt: bool = option(
        False,
        "send the system prompt inside the user turn ('<system>\\n\\n<user>'), as the reference's --no_system_prompt, "
        "for chat templates without a system role",
    )

    def prompt_fields(self) -> Sequence[PromptField]:
        return FOUR_WAY_FIELDS


class RB2FourWayScorer(_GenerativeJudge):
    """Listwise: RewardBench 2's 4-way verdict over an example's four answers, or its Ties rows' ratings (module
    docstring)."""

    kind: ScorerKind = "listwise"
    name = "rb2_4way"
    variants = ("ties",)
    """Benchmark variants judged their own way: RewardBench 2's Ties rows, rated (`Benchmark.variant`)."""

    def __init__(self, opts: RB2FourWayOptions) -> None:
        assert opts.prompts is not None  # check() requires it
        self.prompts = read_prompts(opts.prompts, FOUR_WAY_FIELDS)
        super().__init__(opts)

    def order(self, example_id: str, n: int, variant: str | None = None) -> list[int]:
        """The example's answers as the judge is shown them: the seeded swap for a 4-way row, as they are for a
        Ties row (each rated alone)."""
        if variant == "ties":
            return list(range(n))
        if n != len(FOUR_WAY_LETTERS):
            raise UserError(
                f"rb2_4way: example {example_id} has {n} answers; the 4-way mode shows exactly four (one chosen, "
                "three rejected, as RewardBench 2's rows outside Ties have): use the official data, or rb2_rate"
            )
        return four_way_order(four_way_position(self.opts.seed, example_id))

    def message(self, prompt: Conversation, answers: list[Conversation]) -> str:
        """The judge's user turn: `prompt_template` with the first user turn and the four answers as shown."""
        if len(answers) != len(FOUR_WAY_LETTERS):
            raise UserError(f"rb2_4way: the 4-way prompt shows four answers, got {len(answers)}")
        shown = {f: _first(a, "assistant") for f, a in zip(ANSWER_FIELDS, answers, strict=True)}
        return self.prompts["prompt_template"].format(question=_first(prompt, "user"), **shown)

    def rank(
        self,
        prompts: list[Conversation],
        candidate_lists: list[list[Conversation]],
        variants: list[str | None] | None = None,
    ) -> list[list[float]]:
        """One score per shown answer of each list. A 4-way list: 1.0 for the answer the judge names and 0.0 for the
        others, all 0.0 when it names none (counted in `abstentions`: `no_verdict`, or `not_generated` for no
        output). A Ties list: each answer's rating, 1..10 or -1.0 (`ratings.rate`)."""
        variants = variants or [None] * len(prompts)
        out: list[list[float]] = [[] for _ in prompts]
        four = [i for i, v in enumerate(variants) if v != "ties"]
        if four:
            system = self.prompts["system_prompt"]
            user: list[str | None] = [self.message(prompts[i], candidate_lists[i]) for i in four]
            if self.opts.no_system_prompt:
                outputs = self._sample([f"{system}\n\n{m}" for m in user], 1, fit_to_context=True)
            else:
                outputs = self._sample(user, 1, fit_to_context=True, system=system)
            for i, o in zip(four, outputs, strict=True):
                text = o[0] if o else None
                letter = parse_four_way(text)
                if letter is None:
                    self.abstentions["no_verdict" if text is not None else "not_generated"] += 1
                out[i] = [float(letter == shown) for shown in FOUR_WAY_LETTERS]
        ties = [i for i, v in enumerate(variants) if v == "ties"]
        if ties:
            template = self.prompts["ratings_prompt_ties"]
            answers = [(i, a) for i in ties for a in candidate_lists[i]]
            messages: list[str | None] = [rating_message(template, prompts[i], a) for i, a in answers]
            for (i, _), (rating, _) in zip(answers, rate(self, messages, items=len(ties)), strict=True):
                out[i].append(rating)
        return out

    def describe(self) -> dict[str, Any]:
        sha = {k: hashlib.sha256(v.encode("utf-8")).hexdigest() for k, v in self.prompts.items()}
        return self._describe() | {
            "prompts_sha256": sha,
            "prompts_are_reference": sha == FOUR_WAY_REFERENCE_SHA256,
            "no_system_prompt": self.opts.no_system_prompt,
            "shuffle": SHUFFLE_RULE,
            "verdict": "parse_four_way: the first of [[A]], [[B]], [[C]], [[D]] the output contains, else error (1/4)",
            "ties": "each answer rated with ratings_prompt_ties; parse_rating: a final 1..10, else -1",
        }


__all__ = [
    "FOUR_WAY_FIELDS",
    "RB2FourWayOptions",
    "RB2FourWayScorer",
    "four_way_order",
    "four_way_position",
]
