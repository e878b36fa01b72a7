"""The typed config of `kind: online` (`OnlineConfig`) and its sections; the YAML mirrors it field for field.

What a loss, an advantage estimator or a reward component needs is read from its table entry (`PG_LOSSES`,
`ADVANTAGES`, the reward components' kinds), so the checks never branch on their names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from prefalign.config import MODEL_ALIASES, OUTPUT_DIR_ALIASES, option
from prefalign.decoding import GREEDY_EVAL_TOKENS, SamplingOptions
from prefalign.models.hub import DEFAULT_MODEL
from prefalign.training.config import LoraSection, TrainSection

from ..composition import CompositionSection, check_composition
from ..losses.policy_gradient import ADVANTAGES, PG_LOSSES, KLEstimator, check_pg_config
from ..rewards import check_reward_specs, component_names, is_pairwise


@dataclass
class PromptsSection:
    source: str = option(
        "suite",
        "training prompts: 'suite' (the verifiable suite's train prompts, regenerated from `seed`), a file of "
        "prompt records ({prompt: ...} rows; the *_prompts.jsonl `align data suite` writes), or a preference data "
        "file, whose distinct prompts are used (each with its first pair's answers as meta.reference and "
        "meta.rejected)",
    )
    limit: int = option(0, "use at most N prompts (0 = all)")
    seed: int = option(0, "suite seed ('suite' source) and the prompt order")
    judge: Literal["none", "grm", "think"] = option(
        "none",
        "judges trained by RL: the prompts are judge prompts built from the gold-labelled pairs of `source` "
        "(grm: one per response; think: one per pair, A/B order random), rewarded by judge_correctness",
    )
    judge_form: Literal["binary", "multiclass"] = option("binary", "judge: think: the verdict format")


@dataclass
class RolloutSection(SamplingOptions):
    group_size: int = option(4, "completions sampled per prompt (G)")
    prompts_per_step: int = option(8, "prompts per rollout (all ranks together)")
    candidates: Literal["policy", "policy_and_reference"] = option(
        "policy",
        "what each prompt's group holds: G samples of the policy, or those and the prompt's reference response "
        "(meta.reference, e.g. the data's chosen answer) as one more member, ranked by the same reward: where the "
        "reward prefers it to every sample (a refusal no sample contains) its advantage pulls the policy towards it; "
        "where a sample beats it, the sample's advantage rises (off-policy guidance in the group, as LUFFY)",
    )
    backend: str = option("transformers", "generation backend: transformers | vllm (gpu extra)")
    token_budget: int = option(1 << 15, "transformers backend: KV-cache slots per generation batch")
    static: Literal["auto", "compiled", "eager", "off"] = option(
        "off",
        "transformers backend: the decode step on fixed-shape caches per batch bucket, compiled once (CUDA graphs on a "
        "GPU), the policy's weights copied into it at every sync (`prefalign.generation.static`); off = caches sized "
        "to each batch, eager steps (a CPU's fastest); auto = compiled on a GPU, off on a CPU",
    )

    @property
    def rows_per_prompt(self) -> int:
        """Completions per prompt in a step's rollout: the G samples, and the reference with `policy_and_reference`."""
        return self.group_size + (self.candidates == "policy_and_reference")

    def check(self) -> list[str]:
        p = self.sampling_problems()
        for name in ("group_size", "prompts_per_step"):
            if getattr(self, name) < 1:
                p.append(f"{name}: must be >= 1, got {getattr(self, name)}")
        return p


@dataclass
class AlgorithmSection:
    loss: str = option("grpo", "policy-gradient loss (`align ls pg-losses`): grpo | rloo | reinforce")
    params: dict[str, Any] = option(factory=dict, doc="loss parameters, e.g. {epsilon: 0.2, loss_type: dapo}")
    advantage: Literal["auto", "group", "rloo", "reinforce", "pairwise"] = option(
        "auto",
        "advantage estimator (`align ls advantages`; auto: the loss's own; pairwise: a pairwise judge compares a "
        "group's completions)",
    )
    scale: Literal["group", "batch", "none"] = option("group", "group advantage: the std it divides by")
    baseline: Literal["group_mean", "batch_mean", "none"] = option("group_mean", "reinforce advantage: the baseline")
    normalize: bool = option(False, "rloo / reinforce: normalise advantages over the batch")
    old_logps: Literal["sampler", "recompute"] = option(
        "sampler",
        "π_old of the ratio: the log-probs the sampler returned with each token, or a no-grad policy forward at "
        "rollout time (use with top_p / top_k, whose sampling log-probs are of the truncated distribution)",
    )
    updates_per_rollout: int = option(1, "optimizer steps per rollout (μ); each is one pass over the rollout")

    def advantage_kind(self) -> str:
        return PG_LOSSES[self.loss].advantage if self.advantage == "auto" else self.advantage


@dataclass
class KLSection:
    beta: float = option(0.0, "KL coefficient (0 = no reference model is run)")
    estimator: Literal["auto", "k1", "k2", "k3"] = option("auto", "auto: k3 in the loss, k1 in the reward")
    placement: Literal["auto", "loss", "reward"] = option(
        "auto", "where the KL goes: added per token to the loss (grpo) or subtracted from the reward (auto: the loss's)"
    )
    reference: str | None = option(
        None, "reference policy (default: the initial `model`; under LoRA its adapters-disabled base, no copy)"
    )


@dataclass
class PolicyEvalSection:
    prompts: str = option("suite", "held-out prompts: 'suite' (its test prompts) or a JSONL of prompt records")
    limit: int = option(64, "held-out prompts (family-balanced); 0 = no evaluation")
    max_new_tokens: int = option(GREEDY_EVAL_TOKENS, "tokens per greedy completion")


@dataclass
class OnlineConfig:
    kind: Literal["online"] = option("online", "config kind (fixed)")
    model: str = option(
        DEFAULT_MODEL,
        "initial policy: builtin:<name>, a local directory, or a hub id",
        aliases=MODEL_ALIASES,
    )
    output_dir: str = option("runs/grpo", "run directory", aliases=OUTPUT_DIR_ALIASES)
    prompts: PromptsSection = option(factory=PromptsSection, doc="training prompts")
    rollout: RolloutSection = option(factory=RolloutSection, doc="sampling")
    reward: list[dict[str, Any]] = option(
        factory=lambda: [{"type": "grader"}], doc="reward components (align/rewards.py): scorer specs with weight"
    )
    algorithm: AlgorithmSection = option(factory=AlgorithmSection, doc="loss and advantage")
    kl: KLSection = option(factory=KLSection, doc="KL to the reference")
    eval: PolicyEvalSection = option(factory=PolicyEvalSection, doc="held-out gold evaluation")
    train: TrainSection = option(
        factory=lambda: TrainSection(max_steps=20, batch_size=16, lr=1e-5),
        doc="optimisation: max_steps = rollouts; batch_size = completions per micro-batch; grad_accum unused",
    )
    lora: LoraSection = option(factory=LoraSection, doc="LoRA settings (train.method: lora)")
    save_merged: bool = option(True, "with LoRA, also save the adapter merged into the base under output_dir/merged")
    keep_checkpoints: int = option(
        2, "checkpoints kept on disk, the newest; 0 = keep all (e.g. for `align eval overopt` along training)"
    )
    composition: CompositionSection | None = option(
        None,
        "how the reward components become one advantage (align/composition): aggregators, constraints, dynamic "
        "weights; absent = Σ w_k r_k into the loss's estimator",
    )

    def kl_placement(self) -> Literal["loss", "reward"]:
        """Where the KL goes: the configured placement, or the loss's own (`PG_LOSSES`)."""
        return PG_LOSSES[self.algorithm.loss].kl_placement if self.kl.placement == "auto" else self.kl.placement

    def kl_estimator(self) -> KLEstimator:
        """k3 in the loss, k1 in the reward, unless set."""
        if self.kl.estimator != "auto":
            return self.kl.estimator
        return "k3" if self.kl_placement() == "loss" else "k1"

    def check(self) -> list[str]:
        problems = check_reward_specs(self.reward)
        pairwise = not problems and is_pairwise(self.reward)
        if self.composition is not None and not problems:
            names, weights = component_names(self.reward)
            kl_in_reward = self.kl.beta > 0 and self.kl_placement() == "reward"
            problems += check_composition(self.composition, names, weights, kl_in_reward)
            if pairwise:
                problems.append("composition: a pairwise reward is one component; remove the composition section")
        a = self.algorithm
        problems += check_pg_config(a.loss, a.params)
        if a.loss not in PG_LOSSES:
            return problems
        if a.updates_per_rollout < 1:
            problems.append(f"algorithm.updates_per_rollout: must be >= 1, got {a.updates_per_rollout}")
        if self.train.max_steps < 1:
            problems.append("train.max_steps: the number of rollouts; must be >= 1")
        adv = ADVANTAGES[a.advantage_kind()]
        reads_preferences = adv.input == "preferences"
        if pairwise and not reads_preferences:
            problems.append("algorithm.advantage: a pairwise reward (judge, pair_pm, think) needs advantage: pairwise")
        if reads_preferences and not pairwise and not check_reward_specs(self.reward):
            problems.append(
                f"algorithm.advantage: {adv.name} needs a pairwise reward component (judge, pair_pm, think)"
            )
        if adv.compares_group and self.rollout.group_size < 2:
            problems.append(f"rollout.group_size: advantage '{adv.name}' compares a group; use >= 2")
        if self.kl.beta < 0:
            problems.append(f"kl.beta: must be >= 0, got {self.kl.beta}")
        if self.keep_checkpoints < 0:
            problems.append(f"keep_checkpoints: must be >= 0 (0 = keep all), got {self.keep_checkpoints}")
        if self.kl_placement() == "loss" and "beta" not in PG_LOSSES[a.loss].params:
            problems.append(f"kl.placement: loss '{a.loss}' takes its KL in the reward; set kl.placement: reward")
        if self.prompts.judge != "none" and any(s.get("type") != "judge_correctness" for s in self.reward):
            problems.append("reward: judges trained by RL are rewarded by [{type: judge_correctness}]")
        if self.prompts.judge != "none" and self.rollout.candidates == "policy_and_reference":
            problems.append("rollout.candidates: judge prompts carry no reference response; use candidates: policy")
        return problems


__all__ = [
    "AlgorithmSection",
    "KLSection",
    "OnlineConfig",
    "PolicyEvalSection",
    "PromptsSection",
    "RolloutSection",
]
