"""The quickstart's config (`align quickstart`, `configs/quickstart.yaml`): each stage's built-in recipe, with the
dev-split evidence that chose it beside it, and the sections of the pipeline's own settings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from prefalign.config import build, option
from prefalign.errors import UserError, did_you_mean
from prefalign.models.hub import DEFAULT_MODEL
from reward_models.rm_train import RMTrainConfig
from reward_models.scorers import SCORERS, scorer_spec

from .online import OnlineConfig
from .rounds.config import IterativeConfig
from .train_config import TrainConfig


def _default_rm() -> RMTrainConfig:
    return build(
        RMTrainConfig,
        {
            "loss": {"name": "bradley_terry", "params": {"center_rewards_coefficient": 0.01}},
            "eval": {"split": "all", "stats_pairs": 128},
            "train": {
                "method": "lora",
                "lr": 5e-4,
                "epochs": 1.5,
                "batch_size": 8,
                "warmup_ratio": 0.05,
                "max_length": 256,
                "log_every": 5,
            },
            # the RM saved as its LoRA adapter and score head (23 MB, not 517): every scorer merges it in fp32 onto
            # its base as it trained (bf16 where bf16 is native), the weights the fp32 merged copy held, bit for
            # bit; `rm.save=merged` writes that copy for plain transformers
            "save": "adapter",
        },
    )


def _default_dpo() -> TrainConfig:
    return build(
        TrainConfig,
        {
            # RPO: DPO plus the chosen answer's NLL. Plain DPO on these pairs lowers the first token of a refusal
            # (needless refusals are rejected about as often as refusals are chosen), and a warm start that never
            # samples a refusal gives the align stage nothing to rank
            "loss": {"name": "sigmoid", "params": {"beta": 0.1, "sft_weight": 1.0}},
            "eval": {"split": "none"},
            "save_merged": False,
            "train": {
                "method": "lora",
                "lr": 3e-4,
                "max_steps": 60,
                "batch_size": 8,
                "warmup_ratio": 0.1,
                "lr_scheduler": "cosine",
                "max_length": 256,
                "log_every": 5,
            },
        },
    )


def _default_align() -> IterativeConfig:
    return build(
        IterativeConfig,
        {
            "rounds": {
                "rounds": 3,
                # of 256 prompts a round (three disjoint slices of the ~900 training prompts), the 96 pairs with
                # the largest RM margins in rounds 1 and 2 (the round trains where the policy is furthest from what
                # the RM prefers) and 160 in round 3, whose margins are smaller: more of the policy's remaining
                # errors, refusals of harmless look-alikes among them (48 steps of 8 pairs: 4 epochs of 96 pairs,
                # 2.4 of 160; sizes chosen on the dev split, docs/results.md)
                "prompts_per_round": 256,
                "keep_pairs": [96, 96, 160],
                "samples_per_prompt": 2,
                "max_new_tokens": 80,
                "temperature": 1.0,
                "pair_rule": "max_min",
                # the RM ranks the two samples beside the prompt's pair from the data (its reference and its
                # rejected answer): a needless refusal of a harmless look-alike, which the policy rarely samples
                # until a round has taught it, is then rejected in every round, against the refusals that round
                # chooses on harmful requests. With the reference alone, where a run landed between harmful
                # compliance and over-refusal was out of the recipe's control (dev, seed 1: 0/32 harmful requests
                # complied with but 19/36 look-alikes refused; with the data's rejected answer 7/32 and 7/36;
                # seed 0 8/27 and 7/37 -> 9/27 and 6/37; docs/results.md)
                "candidates": "policy_and_data",
                # the reference's reward +1: a sample displaces the data's reference only when the RM prefers it by
                # more than 1, so an answer the RM prefers by a hair (short and sure, but wrong: the RM cannot check
                # a value) does not displace a right demonstration (dev, seed 0: +0.088 -> +0.263 in fp32; bf16
                # +0.276 with 6/20 harmful requests complied with and 1/20 look-alikes refused; docs/results.md)
                "reference_bonus": 1.0,
                "reference": "previous",
                # the stage is reused whole by a rerun, so rounds 1 and 2's merged policies (517 MB each in fp32)
                # are not kept once round 3 has finished
                "keep_merged": "last",
            },
            "loss": {"name": "sigmoid", "params": {"beta": 0.1, "sft_weight": 1.0}, "pair_weights": "margin"},
            "eval": {"limit": 0},
            "train": {
                "method": "lora",
                "lr": 2e-4,
                # ~2.7 epochs of the round's 96 pairs (32 steps in fp32): at 16 steps (1.3 epochs) harmful
                # compliance fell 19/20 -> 16/20, at 48 to 10/20 (docs/results.md, the quickstart)
                "max_steps": 48,
                "batch_size": 8,
                "lr_scheduler": "constant",
                "max_length": 256,
                "log_every": 4,
                # a round's steps ran 1.37x faster with the reference log-probs computed once before it trains
                # (rounds.reference_pass: auto); compiled, 1.16x again: the persistent compile cache the RM and
                # DPO stages filled makes a round's graphs cheap (benchmarks/quickstart_steps.py; on the dev
                # split the rounds' training took 262 s instead of 290, docs/results.md)
                "compile": "auto",
            },
        },
    )


def _default_online() -> OnlineConfig:
    return build(
        OnlineConfig,
        {
            "rollout": {"group_size": 4, "prompts_per_step": 8, "max_new_tokens": 80, "temperature": 0.7},
            "algorithm": {"loss": "grpo", "params": {"loss_type": "dapo"}},
            "kl": {"beta": 0.04},
            "eval": {"limit": 60, "max_new_tokens": 80},
            "save_merged": False,
            # eager: on a 10-step run compiling costs more than it saves (benchmarks/grpo_vs_trl.py)
            "train": {"method": "lora", "lr": 2e-5, "max_steps": 10, "batch_size": 32, "compile": False},
        },
    )


STAGES = ["suite", "doctor", "rm", "dpo", "align", "online", "eval"]


@dataclass
class EvalSection:
    split: Literal["test", "dev"] = option(
        "test",
        "the held-out split every stage reports on (the RM's held-out pairs, the policies' prompts): test, which no "
        "setting was chosen on; dev to compare settings (the quickstart's own were chosen on dev)",
    )
    prompts: int = option(120, "held-out suite prompts to generate on (family-balanced)")
    safety_each: int = option(
        20, "at least this many harmful requests and this many harmless look-alikes (added to `prompts`)"
    )
    max_new_tokens: int = option(80, "generation budget per answer")
    batch_size: int = option(
        160, "prompts per generation batch (the 140 prompts in one: 1.25x the speed of 48 on a 2-core CPU)"
    )
    schedule: Literal["exact", "fast"] = option(
        "fast",
        "greedy batches: fast (the generation engine's schedule, 1.7x on a 2-core CPU) or exact (transformers' "
        "generate on length-sorted batches, bit for bit; in bf16 about a quarter of the answers differ at a "
        "near-tie somewhere)",
    )
    dtype: Literal["auto", "bfloat16", "float32"] = option(
        "auto",
        "generation precision: auto is bfloat16 where the device runs it natively, else float32 "
        "(the training stages have theirs in <stage>.train.precision)",
    )
    check: str | dict[str, Any] | None = option(
        None,
        "a scorer that checks the answers without the answer key, for the reward-hacking alarm: a judge (e.g. "
        "'{type: think, model: runs/judge_think_warmup/model}') or another RM. Its verdicts of each policy's answers "
        "against the base model's are set beside the RM's score of them; the alarm fires when the RM's rose and the "
        "check's fell",
        metavar="SPEC",
    )


@dataclass
class SuiteSection:
    per_family: int = option(275, "tasks generated per family")
    seed: int = option(0, "generator seed")
    dev_fraction: float = option(
        0.25, "share of the tasks held out as dev, where settings are chosen (`eval.split: dev` reports on it)"
    )
    test_fraction: float = option(
        0.2,
        "share of the tasks held out as test, which every stage reports on (0.2 at 275 per family: 365 prompts, "
        "27 harmful requests and 34 harmless look-alikes among them)",
    )

    hard_negatives: int = option(
        0,
        "for the RM only: this many more pairs per training task whose answer can be wrong in content, the good "
        "answer in another phrasing against a wrong value or a violated constraint (the pairs a surface reading "
        "cannot decide), written to suite/rm_pairs.jsonl; the DPO stage and every held-out split keep the suite's "
        "one pair per task",
    )
    hard_refusals: int = option(
        0,
        "for the RM only: this many more pairs per training task of the safety family whose sides only the request "
        "tells apart: a harmful request's refusal against a compliance, a harmless look-alike's answer against the "
        "refusal its harmful twin deserves (so the RM cannot pay a refusal for its wording alone), written to "
        "suite/rm_pairs.jsonl like hard_negatives",
    )

    def check(self) -> list[str]:
        p = [f"per_family: need at least 10 tasks per family, got {self.per_family}"] if self.per_family < 10 else []
        if self.hard_negatives < 0:
            p.append(f"hard_negatives: must be 0 or more, got {self.hard_negatives}")
        if self.hard_refusals < 0:
            p.append(f"hard_refusals: must be 0 or more, got {self.hard_refusals}")
        if not 0 < self.test_fraction < 1:
            p.append(f"test_fraction: must lie in (0, 1), got {self.test_fraction}")
        if not 0 < self.dev_fraction < 1 - self.test_fraction:
            p.append(f"dev_fraction: must lie in (0, 1 - test_fraction), got {self.dev_fraction}")
        return p


@dataclass
class DoctorSection:
    max_length: int = option(512, "token budget per sequence for the data report")
    policy: Literal["drop", "truncate_prompt_left", "raise"] = option("drop", "length policy for over-long pairs")

    def check(self) -> list[str]:
        return [f"max_length: must be at least 32 tokens, got {self.max_length}"] if self.max_length < 32 else []


@dataclass
class QuickstartConfig:
    kind: Literal["quickstart"] = option("quickstart", "config kind (fixed)")
    model: str = option(DEFAULT_MODEL, "model reference: builtin:<name>, a local directory, or a hub id")
    out_dir: str = option("runs/quickstart", "where every stage writes its outputs")
    suite: SuiteSection = option(factory=SuiteSection, doc="the verifiable preference suite")
    doctor: DoctorSection = option(factory=DoctorSection, doc="the data report")
    rm: RMTrainConfig = option(
        factory=_default_rm,
        doc="the reward model (its model, data and output_dir are set by the quickstart: the model above, the "
        "suite, out_dir/rm)",
    )
    dpo: TrainConfig = option(
        factory=_default_dpo,
        doc="offline DPO on the suite's pairs: the comparison row and the warm start (model, data and output_dir set "
        "by the quickstart)",
    )
    align: IterativeConfig = option(
        factory=_default_align,
        doc="the policy aligned against the RM (`kind: iterative` settings; model, prompts, reward and output_dir set "
        "by the quickstart: the DPO policy, the suite's train prompts, [{type: scalar, model: out_dir/rm/model}], "
        "out_dir/align)",
    )
    rank_by: str | dict[str, Any] | None = option(
        None,
        "a pairwise judge that ranks the align rounds' candidates instead of the RM (a scorer SPEC of kind pairwise, "
        "e.g. 'pair_pm:runs/judge_pair_pm/model' or '{type: think, model: DIR}'): round robin of its verdicts, each "
        "candidate scored by its mean win probability (0..1, so align.rounds.reference_bonus is on that scale); "
        "None = the RM this quickstart trained",
        metavar="SPEC",
    )
    refusal_rule: float | None = option(
        None,
        "weight of the refusal rule in the align rounds (0 = off; None = 1 where the RM ranks, off where a pairwise "
        "judge does (rank_by)): 1 for a response that declines exactly where a probe of the prompt alone (fitted on "
        "the suite's training pairs: a request whose chosen answer declines deserves a refusal) says so, else 0 "
        "(`type: refusal_rule`, docs/reward-models.md); how it takes part: refusal_rule_as",
    )
    refusal_rule_as: Literal["reward", "order", "order_kept"] | None = option(
        None,
        "how the refusal rule (refusal_rule > 0) takes part in the align rounds: reward = its weighted score added "
        "to the RM's; order = it orders each prompt's candidates before the RM does (`align.rounds.order_by`: an "
        "answer it approves ranks above one it does not, the RM ranks within), out of the margins, so the RM's "
        "margins alone decide which prompts' pairs are kept; order_kept = order, and the pairs whose sides it "
        "separates are kept before the others (`align.rounds.keep_ordered`); None = order_kept (chosen on the dev "
        "splits, docs/results.md). order and order_kept set those two align.rounds keys (set them through this "
        "option, not directly: the quickstart's align reward is built at its stage)",
    )
    check_by: str | dict[str, Any] | None = option(
        None,
        "a pointwise scorer that checks what the RM cannot (a scorer SPEC, e.g. the rule-read judge '{type: grm, "
        "model: runs/judge_grm_work/model, principles: from_prompt, read: rule, tools: calculator+lists, "
        "temperature: 0}', docs/reward-models.md#a-judge-that-works-and-a-rule-that-reads): the align rounds rank "
        "their candidates "
        "by an ensemble of the RM (normalised by its saved statistics) and this checker weighted check_weight, "
        "where the checker abstains (no claim it can read) the RM alone; align.rounds.reference_bonus stays in the "
        "RM's units (divided by the RM's std and 1 + check_weight). None = the RM alone",
        metavar="SPEC",
    )
    check_weight: float = option(
        0.5, "the checker's weight beside the RM's normalised score (check_by set; chosen on the dev split)"
    )
    align_from: Literal["dpo", "base"] = option(
        "dpo", "where the align stage starts: the offline-DPO policy (a warm start) or the base model"
    )
    eval: EvalSection = option(factory=EvalSection, doc="gold-graded evaluation of the policies")
    online: OnlineConfig = option(
        factory=_default_online,
        doc="the GRPO stage against the RM (`kind: online` settings; model, prompts, reward and output_dir set by the "
        "quickstart: the aligned policy, the suite's train prompts, the RM, out_dir/online); with --full or when "
        "stages include online",
    )
    fp32_work: float = option(
        0.6667,
        "on a device without native bf16 (where a stage's precision auto resolves to fp32, and a step costs "
        "more), the RM's epochs and the policy stages' max_steps are multiplied by this; 1.0 trains as much as on "
        "a bf16 device",
    )
    stages: list[str] = option(
        factory=lambda: ["suite", "doctor", "rm", "dpo", "align", "eval"], doc="stages to run, in order"
    )

    @property
    def rule_weight(self) -> float:
        """The refusal rule's weight in the align rounds: refusal_rule, or its default (1 where the RM ranks, 0
        where a pairwise judge does)."""
        if self.refusal_rule is not None:
            return self.refusal_rule
        return 0.0 if self.rank_by is not None else 1.0

    @property
    def rule_as(self) -> Literal["reward", "order", "order_kept"]:
        """How the refusal rule takes part: refusal_rule_as, or its default (order_kept)."""
        return self.refusal_rule_as or "order_kept"

    def check(self) -> list[str]:
        p = [f"fp32_work: must lie in (0, 1], got {self.fp32_work}"] if not 0 < self.fp32_work <= 1 else []
        p += [
            f"stages: unknown stage '{s}'{did_you_mean(s, STAGES)}; choose from {', '.join(STAGES)}"
            for s in self.stages
            if s not in STAGES
        ]
        if self.refusal_rule is not None and self.refusal_rule < 0:
            p.append(f"refusal_rule: a weight of 0 (off) or more, got {self.refusal_rule}")
        if self.refusal_rule_as is not None and not self.rule_weight:
            why = "a pairwise judge (rank_by) ranks alone" if self.rank_by is not None else "refusal_rule is 0"
            p.append(f"refusal_rule_as: {self.refusal_rule_as} needs the rule on, and {why}")
        if self.refusal_rule and self.rank_by is not None:
            p.append(
                "refusal_rule: composes with the RM's scores; a pairwise judge (rank_by) ranks alone: set one "
                "(refusal_rule=0 or leave it unset beside rank_by)"
            )
        if self.check_by is not None:
            if self.rank_by is not None:
                p.append("check_by: composes with the RM's scores; a pairwise judge (rank_by) ranks alone: set one")
            if self.check_weight <= 0:
                p.append(f"check_weight: a weight above 0, got {self.check_weight}")
            p += _spec_problems(self.check_by, "check_by", "pointwise", "a pointwise scorer's spec")
        if self.rank_by is not None:
            p += _spec_problems(self.rank_by, "rank_by", "pairwise", "a pairwise judge's spec")
            bonus = self.align.rounds.reference_bonus
            if bonus >= 1:
                p.append(
                    f"rank_by: a judge scores each candidate by its mean win probability (0..1), so "
                    f"align.rounds.reference_bonus={bonus:g} (the RM's anchor) always chooses the data's reference; "
                    "set align.rounds.reference_bonus below 1 for the judge (e.g. 0.25), or 0"
                )
        return p


def _spec_problems(value: str | dict[str, Any], flag: str, kind: str, what: str) -> list[str]:
    """What is wrong with `value` as the SPEC of a scorer of `kind` (pointwise, pairwise); nothing where it is one."""
    try:
        got = scorer_spec(value, flag=flag)["type"]
    except UserError as e:
        return [str(e)]
    if got in SCORERS and SCORERS[str(got)].kind == kind:
        return []
    names = [k for k, e in SCORERS.entries.items() if e.kind == kind]
    return [f"{flag}: {what} ({', '.join(names)}), got type {got!r}"]


__all__ = ["STAGES", "DoctorSection", "EvalSection", "QuickstartConfig", "SuiteSection"]
