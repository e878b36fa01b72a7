"""The config of iterative rounds (`kind: iterative`): the loop's settings (`RoundsSection`) and the recipe's
(`IterativeConfig`); what each setting does is in `align/iterative.py`'s docstring and beside the field."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from prefalign.config import MODEL_ALIASES, OUTPUT_DIR_ALIASES, option
from prefalign.decoding import SamplingOptions
from prefalign.errors import did_you_mean
from prefalign.models.hub import DEFAULT_MODEL
from prefalign.training.config import LoraSection, TrainSection
from reward_models.scorers import SCORERS

from ..losses import check_loss_config
from ..online.config import PolicyEvalSection, PromptsSection
from ..rewards import check_reward_specs, component_names, is_pairwise
from ..train_config import LossSection
from ..verify import VerifyRule

PairRule = Literal["max_min", "max_random", "max_second", "length_penalized"]

DATA_CANDIDATES: dict[str, tuple[str, ...]] = {
    "policy": (),
    "policy_and_reference": ("reference",),
    "policy_and_data": ("reference", "rejected"),
}
"""`rounds.candidates` -> the prompt record's `meta` answers ranked with the K samples, in this order."""


@dataclass
class RoundsSection(SamplingOptions):
    rounds: int = option(3, "iterations T")
    prompts_per_round: int = option(64, "prompts sampled in each round (disjoint slices of the shuffled prompts)")
    samples_per_prompt: int = option(
        4,
        "K completions per prompt (with candidates: policy_and_reference or policy_and_data, K = 1 ranks one sample "
        "against the data's answers: half the sampling of K = 2 for as many prompts)",
    )
    greedy_sample: bool = option(
        False,
        "decode one of each prompt's K samples greedily (temperature 0: the answer an evaluation reads), the other "
        "K - 1 at the sampling settings. What the policy says when it is sure, a refusal of a harmless look-alike it "
        "learned in a round among it, is then ranked with the rest, and rejected where the reward puts it last; "
        "sampled answers at temperature 1 show it rarely",
    )
    pair_rule: PairRule = option("max_min", "how a prompt's K samples become one pair (`align ls pair-rules`)")
    length_penalty: float = option(0.0, "length_penalized: reward penalty per completion token")
    reference_bonus: float = option(
        0.0,
        "added to the data's reference answer's reward when the pair rule ranks a prompt's candidates (with "
        "candidates: policy_and_reference or policy_and_data): a sample is chosen over the reference only when its "
        "reward beats the reference's by more than this, and the pair's margin counts it. 0 = the reward alone "
        "decides; a bonus anchors the rounds to the demonstrations where the reward is not sure, so that a sample "
        "the reward prefers by a hair (short and sure, but wrong) does not displace a right reference",
    )
    order_by: list[str] = option(
        factory=list,
        doc="names of reward components that order each prompt's candidates before the rest of the reward does: "
        "the candidates with the higher weighted sum of these rank first, whatever the other components say, and "
        "the rest of the reward orders candidates that tie on them. They do not enter the reward's sum or the "
        "pair's margin, so they decide which answer of a prompt is chosen and which rejected, and (unless "
        "keep_ordered) the reward's margin between those two decides whether keep_pairs keeps the pair. A pair "
        "whose sides they put in the reverse of the reward's order keeps the size of the reward's margin (e.g. the "
        "refusal rule, which knows from the prompt whether a refusal is right, ranks a look-alike's refusal last "
        "among its candidates). The round's reward metrics (reward, reward_best) are the sum without them",
    )
    keep_ordered: bool = option(
        False,
        "with order_by and keep_pairs: keep every pair whose sides the order_by components separate (its chosen "
        "answer above its rejected one by them) before the others, by margin among themselves; the largest margins "
        "fill the rest. So a pair that only the order makes (the refusal rule rejecting a look-alike's refusal) is "
        "trained on even where the reward's margin is small",
    )
    rejected_from: Literal["candidates", "policy"] = option(
        "candidates",
        "where the pair rule takes the rejected side: any candidate but the chosen, or the policy's own samples only "
        "(on-policy negatives: with a reference among the candidates, the data's answer against the model's own, as "
        "SPIN pairs them; the data's rejected answer is then never a pair's side unless no policy sample is left). "
        "policy pushes down what the policy itself now says, e.g. a refusal it learned to give a harmless request",
    )
    reference: Literal["initial", "previous"] = option(
        "previous", "DPO reference of round t: the initial model, or π_t (the released RLHFlow loop)"
    )
    reference_pass: Literal["auto", "once", "every_step"] = option(
        "auto",
        "how a round gets the reference's log-probs: once = one pass over the round's pairs before it trains "
        "(reference.kind: precomputed), every_step = in each step (under LoRA the base with adapters disabled: no "
        "pass before, a forward more per step); auto = once when the round's steps draw its pairs more than once "
        "(max_steps x batch_size > pairs), else every_step",
    )
    data: Literal["current", "cumulative"] = option("current", "train on this round's pairs, or all rounds' so far")
    ranking: Literal["round_robin", "knockout"] = option(
        "round_robin", "a pairwise oracle ranks the K samples by round robin (K(K-1)/2 comparisons) or knockout (K-1)"
    )
    keep_pairs: int | list[int] = option(
        0,
        "keep only the round's N pairs with the largest reward margins (0 = every pair): sample a larger "
        "prompts_per_round and train on the prompts where the reward's best candidate beats the worst by most, where "
        "the policy is furthest from what the reward prefers; the rest are dropped and counted. One N for every "
        "round, or a list of one per round (later rounds, whose margins are smaller, may keep more)",
    )
    keep_per_family: bool = option(
        False,
        "keep_pairs within each prompt family (the prompt's grader; prompts without one are one family): each "
        "family keeps its share of the N pairs in proportion to its pairs in the round (largest remainders), the "
        "largest margins within it; so a family whose pairs the reward separates by most (refusals of harmful "
        "requests against compliance) does not crowd out the others. False = the largest margins over all",
    )
    candidates: Literal["policy", "policy_and_reference", "policy_and_data"] = option(
        "policy",
        "what the reward ranks for each prompt: the K samples of π_t (RLHFlow); those and the prompt's reference "
        "response (policy_and_reference: meta.reference); or those, the reference and the data's rejected answer "
        "(policy_and_data: meta.rejected, the prompt's whole preference pair). A prompt without them ranks what it "
        "has; prompts from a preference file carry their pair's answers",
    )
    max_rows: int = option(
        512,
        "generation: samples decoded together at most (a round's 2 x 256 samples in one batch: 1.4x the rate of "
        "128 rows on a 2-core CPU, the model's weights read once per step for more rows)",
    )
    token_budget: int = option(
        1 << 17, "generation: KV-cache slots per batch (rows x (longest prompt + max_new_tokens); 3 GB at 135M)"
    )
    verify: dict[str, Any] | None = option(
        None,
        "a pairwise judge (a scorer spec, e.g. {type: think, model: runs/judge_think_warmup/model}) that checks every "
        "pair the reward selected, before keep_pairs: where it prefers the rejected side, the pair is flipped or "
        "dropped (verify_rule; align/verify.py)",
    )
    verify_rule: VerifyRule = option(
        "flip", "a pair the judge disagrees with: flip its sides (the judge's verdict wins) or drop it"
    )
    keep_merged: Literal["all", "last"] = option(
        "all",
        "under LoRA each round saves its policy merged into its start (the next round's start, 517 MB in fp32 at "
        "135M) beside its adapter: all = keep them (a rerun reads every finished round back); last = once every "
        "round has finished, delete the earlier rounds' merged copies (their adapters, pairs and samples stay; a "
        "later run that needs one trains that round, and the rounds after it, again, bit for bit)",
    )
    static: Literal["auto", "compiled", "eager", "off"] = option(
        "off",
        "generation: the decode step on fixed-shape caches per batch bucket, compiled once (CUDA graphs on a GPU) and "
        "kept across rounds, each round's policy copied into it (`prefalign.generation.static`); off = caches sized "
        "to each batch, eager steps (a CPU's fastest); auto = compiled on a GPU, off on a CPU",
    )

    def check(self) -> list[str]:
        p = self.sampling_problems()
        for name in ("rounds", "prompts_per_round", "max_rows", "token_budget"):
            if getattr(self, name) < 1:
                p.append(f"{name}: must be >= 1")
        least = 1 if DATA_CANDIDATES[self.candidates] else 2  # the data's answers can be a pair's other side
        if self.samples_per_prompt < least:
            p.append(
                f"samples_per_prompt: a pair needs two candidates: K >= 2 (or K >= 1 with candidates: "
                f"policy_and_reference or policy_and_data, the data's answers being the others), got "
                f"{self.samples_per_prompt}"
            )
        if self.length_penalty < 0:
            p.append("length_penalty: must be >= 0")
        if not (math.isfinite(self.reference_bonus) and self.reference_bonus >= 0):
            p.append(f"reference_bonus: a finite number >= 0, got {self.reference_bonus}")
        elif self.reference_bonus and "reference" not in DATA_CANDIDATES[self.candidates]:
            p.append(
                f"reference_bonus: {self.reference_bonus} needs the reference among the candidates (candidates: "
                f"policy_and_reference or policy_and_data), got candidates: {self.candidates}"
            )
        if self.keep_ordered and not self.order_by:
            p.append("keep_ordered: keeps the pairs order_by separates first; set order_by (a component's name)")
        if self.verify is not None:
            kind = self.verify.get("type")
            if kind not in SCORERS or SCORERS[str(kind)].kind != "pairwise":
                p.append(f"verify: a pairwise judge's spec (type: think, pair_pm or judge), got type {kind!r}")
        keeps = self.keep_pairs if isinstance(self.keep_pairs, list) else [self.keep_pairs]
        if isinstance(self.keep_pairs, list) and len(keeps) != self.rounds:
            p.append(
                f"keep_pairs: a list needs one entry per round ({self.rounds} rounds), got {len(keeps)}; give one "
                "number for every round or a list of rounds entries"
            )
        for keep in keeps:
            if keep < 0:
                p.append(f"keep_pairs: must be >= 0 (0 keeps every pair), got {keep}")
            elif keep > self.prompts_per_round:
                p.append(
                    f"keep_pairs: {keep} is more than the {self.prompts_per_round} prompts_per_round (one pair "
                    "a prompt); lower it or raise prompts_per_round"
                )
        return p

    def keep_in(self, t: int) -> int:
        """Round t's (1-based) keep_pairs."""
        return self.keep_pairs[t - 1] if isinstance(self.keep_pairs, list) else self.keep_pairs


@dataclass
class IterativeConfig:
    kind: Literal["iterative"] = option("iterative", "config kind (fixed)")
    model: str = option(
        DEFAULT_MODEL,
        "initial policy π_1 (and the `initial` reference)",
        aliases=MODEL_ALIASES,
    )
    output_dir: str = option("runs/iterative_dpo", "run directory (round_<t>/ per round)", aliases=OUTPUT_DIR_ALIASES)
    prompts: PromptsSection = option(factory=PromptsSection, doc="training prompts")
    rounds: RoundsSection = option(factory=RoundsSection, doc="the loop")
    reward: list[dict[str, Any]] = option(
        factory=lambda: [{"type": "grader"}],
        doc="pointwise reward components, or one pairwise oracle (judge, pair_pm, think)",
    )
    loss: LossSection = option(factory=LossSection, doc="the pairwise loss of every round (`align ls losses`)")
    train: TrainSection = option(factory=lambda: TrainSection(max_steps=10, batch_size=8, lr=5e-5), doc="per round")
    lora: LoraSection = option(factory=LoraSection, doc="LoRA settings (train.method: lora)")
    eval: PolicyEvalSection = option(factory=PolicyEvalSection, doc="held-out gold evaluation after every round")

    def check(self) -> list[str]:
        problems = check_reward_specs(self.reward)
        if self.rounds.order_by and not problems:  # the names are read from a well-formed reward list
            problems += check_order_by(self.rounds.order_by, self.reward)
        problems += check_loss_config(self.loss.name, self.loss.params, True, True)
        if self.prompts.judge != "none":
            problems.append("prompts.judge: judges are trained by RL with kind: online")
        return problems


def check_order_by(order_by: list[str], reward: list[dict[str, Any]]) -> list[str]:
    """`rounds.order_by` against a checked `reward:` list: known component names, each once, and some component
    left for the sum; a pairwise oracle ranks alone."""
    if is_pairwise(reward):
        return ["rounds.order_by: a pairwise oracle ranks the candidates alone; remove order_by or the oracle"]
    names, _ = component_names(reward)
    problems = [
        f"rounds.order_by: '{n}' is not a reward component{did_you_mean(n, names)}; the components: {', '.join(names)}"
        for n in order_by
        if n not in names
    ]
    if len(set(order_by)) != len(order_by):
        problems.append(f"rounds.order_by: each component once, got {order_by}")
    if not set(names) - set(order_by):
        problems.append(
            "rounds.order_by: names every reward component; leave at least one for the reward's sum (the margins)"
        )
    return problems


__all__ = ["DATA_CANDIDATES", "IterativeConfig", "PairRule", "RoundsSection", "check_order_by"]
