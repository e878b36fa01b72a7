"""`align train` with `kind: online`: GRPO, RLOO, REINFORCE and pairwise RLHF on one online engine.

Every step reads top to bottom: rollout -> reward -> advantage -> update -> sync -> (checkpoint, eval).

  rollout    the generation engine (`prefalign.generation`, backend transformers or vLLM) samples
             `rollout.group_size` completions for each of `rollout.prompts_per_step` prompts, with the token ids
             and the sampling log-probs (π_old of the ratio). Sampling is seeded per step and per sample, so a
             step draws the same completions whatever ran before it.
  reward     the `reward:` components (`align.rewards`: gold graders, any trained scorer, a judge, POLAR against
             the gold reference), combined Σ w_k r_k; a NaN component (abstained or failed) masks the completion
             out of the update and is counted per component. A pairwise judge instead compares every pair of a
             group (pairwise RLHF, Think-RM's pairwise-to-pointwise advantage).
  frozen     the reference's per-token log-probs, computed once per rollout when the KL needs them (the LoRA base
             with adapters disabled, or a loaded `kl.reference`), and π_old recomputed by the policy when
             `algorithm.old_logps: recompute`; cached with the rollout.
  advantage  `align.losses.policy_gradient`: group (GRPO), leave-one-out (RLOO), REINFORCE baseline, pairwise;
             the KL enters the reward here (k1 summed per sequence, RLOO / REINFORCE) or the loss (GRPO, k3).
  update     `algorithm.updates_per_rollout` passes over the rollout; micro-batches of `train.batch_size`
             completions, two completions of a prompt packed as one prefix-shared segment (the prompt encoded once
             for both); the loss is Σ numerator / Σ denominator over the whole rollout, so micro-batching and data
             parallelism give the single-batch gradient exactly.
  sync       the sampler's weights are replaced by the policy's (LoRA merged without touching the trainer).
  checkpoint every `train.save_every` steps: trainable weights, optimizer, scheduler, step. Rollouts (completions,
             component rewards, frozen log-probs) are cached under rollouts/, so `--resume` after a kill continues
             to the same final weights as an uninterrupted run, reusing every rollout already drawn.
  eval       greedy completions of held-out prompts graded by the gold graders (and the reward's components),
             before the first step, every `train.eval_every` steps and at the end; the final against the initial
             with a paired bootstrap interval.

Data parallel: under `torchrun` / `accelerate launch` (WORLD_SIZE > 1) each rank rolls out and scores its
contiguous share of the step's prompts; rewards are gathered for batch statistics, the loss denominator is
summed over ranks and gradients are all-reduced before the step, so N processes make the same update as one.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from prefalign.config import option
from prefalign.errors import UserError
from prefalign.models.hub import DEFAULT_MODEL
from prefalign.training.config import LoraSection, TrainSection
from preference_data.records import PromptOnly

from .composition import Composer, CompositionSection, StepInputs, check_composition, plot_composition
from .losses.policy_gradient import (
    PG_LOSSES,
    PGBatch,
    check_pg_config,
    compute_pg_loss,
    group_advantages,
    pad_rows,
    pairwise_advantages,
    reinforce_advantages,
    rloo_advantages,
    sequence_kl,
)
from .rewards import RewardSet, check_reward_specs, combine

ROLLOUT_VERSION = 1


# --- config ----------------------------------------------------------------------------------------------


@dataclass
class PromptsSection:
    source: str = option(
        "suite",
        "training prompts: 'suite' (the verifiable suite's train prompts, regenerated from `seed`), or a JSONL of "
        "prompt records (the *_prompts.jsonl `align data suite` writes)",
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
class RolloutSection:
    group_size: int = option(4, "completions sampled per prompt (G)")
    prompts_per_step: int = option(8, "prompts per rollout (all ranks together)")
    max_new_tokens: int = option(128, "tokens per completion at most")
    temperature: float = option(1.0, "sampling temperature (the policy's log-probs use the same)")
    top_p: float = option(1.0, "nucleus sampling (1 = off); with top_p < 1 prefer algorithm.old_logps: recompute")
    top_k: int = option(0, "top-k sampling (0 = off)")
    seed: int = option(0, "sampling seed (each step and sample draws from its own stream)")
    backend: str = option("transformers", "generation backend: transformers | vllm (gpu extra)")
    token_budget: int = option(1 << 15, "transformers backend: KV-cache slots per generation batch")

    def check(self) -> list[str]:
        p = []
        for name in ("group_size", "prompts_per_step", "max_new_tokens"):
            if getattr(self, name) < 1:
                p.append(f"{name}: must be >= 1, got {getattr(self, name)}")
        if self.temperature <= 0:
            p.append(f"temperature: must be > 0 for policy-gradient sampling, got {self.temperature}")
        return p


@dataclass
class AlgorithmSection:
    loss: str = option("grpo", "policy-gradient loss (`align ls pg-losses`): grpo | rloo | reinforce")
    params: dict[str, Any] = option(factory=dict, doc="loss parameters, e.g. {epsilon: 0.2, loss_type: dapo}")
    advantage: Literal["auto", "group", "rloo", "reinforce", "pairwise"] = option(
        "auto", "advantage estimator (auto: the loss's own; pairwise: a pairwise judge compares a group's completions)"
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
    max_new_tokens: int = option(128, "tokens per greedy completion")


@dataclass
class OnlineConfig:
    kind: Literal["online"] = option("online", "config kind (fixed)")
    model: str = option(DEFAULT_MODEL, "initial policy: builtin:<name>, a local directory, or a hub id")
    output_dir: str = option("runs/grpo", "run directory")
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
        "how the reward components become one advantage (align/composition.py): aggregators, constraints, dynamic "
        "weights; absent = Σ w_k r_k into the loss's estimator",
    )

    def check(self) -> list[str]:
        problems = check_reward_specs(self.reward)
        if self.composition is not None and not problems:
            from .rewards import component_names

            names, weights = component_names(self.reward)
            problems += check_composition(
                self.composition, names, weights, self.kl.beta > 0 and placement(self) == "reward"
            )
            if any(isinstance(s, dict) and s.get("type") in ("judge", "pair_pm", "think") for s in self.reward):
                problems.append("composition: a pairwise reward is one component; remove the composition section")
        a = self.algorithm
        problems += check_pg_config(a.loss, a.params)
        if a.loss not in PG_LOSSES:
            return problems
        for reserved in ("beta", "kl_estimator", "max_completion_length"):
            if reserved in a.params:
                problems.append(
                    f"algorithm.params.{reserved}: set by the run (kl.beta, kl.estimator, rollout.max_new_tokens)"
                )
        if a.updates_per_rollout < 1:
            problems.append(f"algorithm.updates_per_rollout: must be >= 1, got {a.updates_per_rollout}")
        if self.train.max_steps < 1:
            problems.append("train.max_steps: the number of rollouts; must be >= 1")
        pairwise_reward = any(
            isinstance(s, dict) and s.get("type") in ("judge", "pair_pm", "think") for s in self.reward
        )
        adv = a.advantage_kind()
        if pairwise_reward and adv != "pairwise":
            problems.append("algorithm.advantage: a pairwise reward (judge, pair_pm, think) needs advantage: pairwise")
        if adv == "pairwise" and not pairwise_reward:
            problems.append("algorithm.advantage: pairwise needs a pairwise reward component (judge, pair_pm, think)")
        if adv in ("group", "rloo", "pairwise") and self.rollout.group_size < 2:
            problems.append(f"rollout.group_size: advantage '{adv}' compares a group; use >= 2")
        if self.kl.beta < 0:
            problems.append(f"kl.beta: must be >= 0, got {self.kl.beta}")
        if self.keep_checkpoints < 0:
            problems.append(f"keep_checkpoints: must be >= 0 (0 = keep all), got {self.keep_checkpoints}")
        if placement(self) == "loss" and a.loss != "grpo":
            problems.append(f"kl.placement: loss '{a.loss}' takes its KL in the reward; set kl.placement: reward")
        if self.prompts.judge != "none" and any(s.get("type") != "judge_correctness" for s in self.reward):
            problems.append("reward: judges trained by RL are rewarded by [{type: judge_correctness}]")
        return problems


def placement(cfg: OnlineConfig) -> str:
    return PG_LOSSES[cfg.algorithm.loss].kl_placement if cfg.kl.placement == "auto" else cfg.kl.placement


def estimator(cfg: OnlineConfig) -> Any:
    if cfg.kl.estimator != "auto":
        return cfg.kl.estimator
    return "k3" if placement(cfg) == "loss" else "k1"


# --- distributed -----------------------------------------------------------------------------------------


@dataclass
class Dist:
    rank: int = 0
    world: int = 1

    @staticmethod
    def init() -> Dist:
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if world <= 1:
            return Dist()
        import torch.distributed as dist

        if not dist.is_initialized():
            dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
        return Dist(dist.get_rank(), dist.get_world_size())

    def share(self, items: list[Any]) -> list[Any]:
        """This rank's contiguous share of `items` (len divisible by world)."""
        n = len(items) // self.world
        return items[self.rank * n : (self.rank + 1) * n]

    def gather(self, local: list[Any]) -> list[Any]:
        if self.world == 1:
            return local
        import torch.distributed as dist

        parts: list[Any] = [None] * self.world
        dist.all_gather_object(parts, local)
        return [x for p in parts for x in p]

    def sum(self, value: float) -> float:
        if self.world == 1:
            return value
        import torch.distributed as dist

        t = torch.tensor([value], dtype=torch.float64)
        dist.all_reduce(t)
        return float(t.item())

    def reduce_grads(self, params: list[torch.nn.Parameter]) -> None:
        if self.world == 1:
            return
        import torch.distributed as dist

        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            dist.all_reduce(p.grad)


# --- prompts ---------------------------------------------------------------------------------------------


def load_train_prompts(cfg: OnlineConfig) -> list[PromptOnly]:
    import random

    p = cfg.prompts
    if p.judge != "none":
        from .judge_rl import judge_prompts

        prompts = judge_prompts(p.source, p.judge, p.judge_form, p.seed)
    elif p.source == "suite":
        from preference_data.suite import build_suite

        prompts = list(build_suite(seed=p.seed).train_prompts)
    else:
        from preference_data.sources import read_records

        records, _ = read_records(p.source, "prompts")
        prompts = [r for r in records if isinstance(r, PromptOnly)]
    if not prompts:
        raise UserError(f"prompts.source {p.source}: no prompts found")
    random.Random(p.seed).shuffle(prompts)
    if p.limit:
        prompts = prompts[: p.limit]
    return prompts


def prompts_for_step(prompts: list[PromptOnly], step: int, per_step: int) -> list[PromptOnly]:
    """The step's prompts: consecutive slices of the (shuffled) prompt list, wrapping around."""
    start = (step * per_step) % len(prompts)
    return [prompts[(start + i) % len(prompts)] for i in range(per_step)]


# --- per-token log-probs of packed completions ------------------------------------------------------------


@dataclass
class Seq:
    """One completion in the update: its prompt, tokens, frozen per-token log-probs and advantage."""

    prompt_ids: list[int]
    ids: list[int]
    old: list[float]
    ref: list[float] | None
    adv: float


def units(seqs: list[Seq]) -> tuple[list[tuple[Seq, Seq]], list[Seq]]:
    """Consecutive completions of the same prompt paired (one prefix-shared segment each); leftovers single."""
    pairs: list[tuple[Seq, Seq]] = []
    singles: list[Seq] = []
    i = 0
    while i < len(seqs):
        if i + 1 < len(seqs) and seqs[i + 1].prompt_ids == seqs[i].prompt_ids:
            pairs.append((seqs[i], seqs[i + 1]))
            i += 2
        else:
            singles.append(seqs[i])
            i += 1
    return pairs, singles


def micro_batches(seqs: list[Seq], batch_size: int) -> list[list[Seq]]:
    """Micro-batches of about `batch_size` completions, each all pairs or all singles (one pack call each)."""
    pairs, singles = units(seqs)
    out: list[list[Seq]] = []
    per = max(1, batch_size // 2)
    for s in range(0, len(pairs), per):
        out.append([x for pair in pairs[s : s + per] for x in pair])
    for s in range(0, len(singles), batch_size):
        out.append(singles[s : s + batch_size])
    return out


def per_token_logps(
    model: torch.nn.Module, mb: list[Seq], pad_id: int, device: Any, temperature: float, layout: Any
) -> torch.Tensor:
    """(S, T) log-probs of each completion's tokens under `model` (padded with 0), S = len(mb) in order."""
    from prefalign.models.forward import token_logps
    from preference_data.packing import pack

    paired = (
        len(mb) >= 2
        and all(mb[i].prompt_ids == mb[i + 1].prompt_ids for i in range(0, len(mb) - 1, 2))
        and len(mb) % 2 == 0
    )
    if paired:
        B = len(mb) // 2
        batch = pack(
            [mb[2 * i].prompt_ids for i in range(B)],
            [(mb[2 * i].ids, mb[2 * i + 1].ids) for i in range(B)],
            pad_id,
            1 << 30,
            layout,
        )
        order = [2 * i for i in range(B)] + [2 * i + 1 for i in range(B)]  # packed seq k*B+i -> mb index
    else:
        batch = pack([s.prompt_ids for s in mb], [(s.ids,) for s in mb], pad_id, 1 << 30, layout)
        order = list(range(len(mb)))
    batch = batch.to(device)
    values = token_logps(model, batch, temperature=temperature)  # (N,)
    T = max(len(s.ids) for s in mb)
    out = values.new_zeros((len(mb), T))
    seq = batch.target_seq.tolist()
    pos = [0] * len(mb)
    rows, cols = [], []
    for q in seq:
        i = order[q]
        rows.append(i)
        cols.append(pos[i])
        pos[i] += 1
    out = out.index_put((torch.tensor(rows, device=values.device), torch.tensor(cols, device=values.device)), values)
    return out


# --- the run ---------------------------------------------------------------------------------------------


PLOT_KEYS = [
    "reward",
    "eval_gold/overall",
    "loss",
    "kl",
    "completion_length",
    "clip_ratio/high",
    "reward_std",
]


class OnlineRun:
    """The state of one online run (policy, sampler, optimizer, rewards) and its step."""

    def __init__(self, cfg: OnlineConfig, resume: bool) -> None:
        from prefalign.models.hub import load_model, load_tokenizer, pad_token_id
        from prefalign.models.precision import default_device
        from prefalign.training.recipe import start_run
        from prefalign.training.trainer import base_dtype, prepare_model

        self.cfg = cfg
        self.dist = Dist.init()
        self.run = start_run(cfg, cfg.train, "online", resume)
        self.dir = self.run.dir
        self.device = torch.device(
            default_device() if self.dist.world == 1 or not torch.cuda.is_available() else f"cuda:{self.dist.rank}"
        )
        self.bf16 = cfg.train.precision in ("bf16", "bf16-pure")
        self.tokenizer = load_tokenizer(cfg.model)
        self.pad_id = pad_token_id(self.tokenizer)
        self.prompts = load_train_prompts(cfg)
        if cfg.rollout.prompts_per_step % self.dist.world:
            raise UserError(
                f"rollout.prompts_per_step={cfg.rollout.prompts_per_step} must be divisible by the number of "
                f"processes ({self.dist.world})"
            )
        # a peft adapter (e.g. a DPO run's) is merged into its base first (in fp32, then cast)
        policy = load_model(cfg.model, dtype=base_dtype(cfg.train), merge=True)
        self.policy = prepare_model(policy, cfg.train, cfg.lora, "CAUSAL_LM").to(self.device)
        from prefalign.models.forward import layout_for

        self.layout = cfg.train.attention if cfg.train.attention == "mask" else layout_for(self.policy)
        self.params = [p for p in self.policy.parameters() if p.requires_grad]
        self.ref_model = None
        if cfg.kl.beta > 0 and not (cfg.train.method == "lora" and cfg.kl.reference in (None, cfg.model)):
            self.ref_model = load_model(
                cfg.kl.reference or cfg.model, dtype="bfloat16" if self.bf16 else "float32", merge=True
            )
            self.ref_model.to(self.device).eval().requires_grad_(False)
        self.engine = self.sampler()
        self.rewards = RewardSet(cfg.reward)
        self.composer = (
            Composer(cfg.composition, self.rewards.names, self.rewards.weights.tolist(), cfg.rollout.seed)
            if cfg.composition is not None
            else None
        )
        self.ref_engine: Any = None  # composition par: the initial policy's sampler, built when first needed
        from transformers import get_scheduler

        self.optimizer = torch.optim.AdamW(self.params, lr=cfg.train.lr, weight_decay=cfg.train.weight_decay)
        total = cfg.train.max_steps * cfg.algorithm.updates_per_rollout
        self.scheduler = get_scheduler(
            cfg.train.lr_scheduler,
            self.optimizer,
            num_warmup_steps=math.ceil(cfg.train.warmup_ratio * total),
            num_training_steps=total,
        )
        self.step = 0
        if self.run.resume_from is not None:
            self.load(Path(self.run.resume_from))
        self.engine.sync_weights(self.policy)

    def sampler(self) -> Any:
        """A generation engine on the initial policy (`model`), the rollout's backend and settings."""
        from prefalign.generation import make_engine
        from prefalign.models.hub import load_model

        cfg = self.cfg
        m = load_model(cfg.model, dtype="bfloat16" if self.bf16 else "float32", merge=True).to(self.device)
        options = {"token_budget": cfg.rollout.token_budget} if cfg.rollout.backend == "transformers" else {}
        return make_engine(m, self.tokenizer, cfg.rollout.backend, **options)

    def sampling(self, n: int, seed: int) -> Any:
        """The rollout section's sampling settings for n samples per prompt."""
        from prefalign.generation import SamplingParams

        r = self.cfg.rollout
        return SamplingParams(
            n=n, temperature=r.temperature, top_p=r.top_p, top_k=r.top_k, max_new_tokens=r.max_new_tokens, seed=seed
        )

    def greedy(self, source: str, limit: int, max_new_tokens: int) -> tuple[list[PromptOnly], Any]:
        """Greedy answers to `limit` held-out prompts (family-balanced) and the engine's result."""
        from prefalign.generation import SamplingParams

        from .evaluate import load_prompts

        prompts = load_prompts(source, limit)
        res = self.engine.generate(
            [p.prompt for p in prompts], SamplingParams(n=1, temperature=0.0, max_new_tokens=max_new_tokens)
        )
        return prompts, res

    # -- autocast and frozen log-probs --

    def autocast(self) -> Any:
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.cfg.train.precision == "bf16")

    @torch.no_grad()
    def frozen(self, seqs: list[Seq], which: Literal["ref", "old"]) -> list[list[float]]:
        """Per-token log-probs of `seqs` under the reference (or the current policy, for π_old), no grad."""
        out: list[list[float]] = [[] for _ in seqs]
        index = {id(s): i for i, s in enumerate(seqs)}
        was = self.policy.training
        self.policy.eval()
        try:
            for mb in micro_batches(seqs, self.cfg.train.batch_size):
                with self.autocast():
                    if which == "old":
                        lp = per_token_logps(
                            self.policy, mb, self.pad_id, self.device, self.cfg.rollout.temperature, self.layout
                        )
                    elif self.ref_model is not None:
                        lp = per_token_logps(
                            self.ref_model, mb, self.pad_id, self.device, self.cfg.rollout.temperature, self.layout
                        )
                    else:
                        with self.policy.disable_adapter():
                            lp = per_token_logps(
                                self.policy, mb, self.pad_id, self.device, self.cfg.rollout.temperature, self.layout
                            )
                for k, s in enumerate(mb):
                    out[index[id(s)]] = lp[k, : len(s.ids)].float().cpu().tolist()
        finally:
            self.policy.train(was)
        return out

    # -- rollout --

    def rollout_path(self, step: int) -> Path:
        return self.dir / "rollouts" / f"step_{step:05d}-rank{self.dist.rank}.json"

    def rollout(self, step: int) -> dict[str, Any]:
        """Sample, score and compute the frozen log-probs of this rank's prompts for `step` (cached)."""
        cfg = self.cfg
        path = self.rollout_path(step)
        if path.exists():
            data = json.loads(path.read_text(encoding="utf-8"))
            if data.get("version") == ROLLOUT_VERSION:
                data["cached"] = True
                return data
        prompts = self.dist.share(prompts_for_step(self.prompts, step, cfg.rollout.prompts_per_step))
        r = cfg.rollout
        params = self.sampling(r.group_size, r.seed * 1_000_003 + step)
        t0 = time.time()
        theta = self.directions(step, len(prompts))
        result = self.engine.generate(self.conditioned(prompts, theta), params)
        gen_s = time.time() - t0
        samples = []
        for p, out in zip(prompts, result.outputs, strict=True):
            for c in out.completions:
                samples.append(
                    {
                        "prompt_id": p.id,
                        "prompt_ids": out.prompt_ids,
                        "text": c.text,
                        "ids": c.token_ids,
                        "logprobs": c.logprobs,
                        "finish": c.finish_reason,
                    }
                )
        t1 = time.time()
        records = [p for p in prompts for _ in range(r.group_size)]
        texts = [s["text"] for s in samples]
        if self.rewards.pairwise:
            groups = [texts[i * r.group_size : (i + 1) * r.group_size] for i in range(len(prompts))]
            prefs = self.rewards.compare_groups(prompts, groups)
            components = None
            pref_list = [[[None if math.isnan(v) else v for v in row] for row in m] for m in prefs.tolist()]
        else:
            comps = self.rewards.score(records, texts)
            components = [[None if math.isnan(v) else v for v in row] for row in comps.tolist()]
            pref_list = None
        par_ref = self.par_references(prompts, step) if self.composer and cfg.composition.aggregate == "par" else None  # type: ignore[union-attr]
        score_s = time.time() - t1
        seqs = [Seq(s["prompt_ids"], s["ids"], s["logprobs"], None, 0.0) for s in samples]
        t2 = time.time()
        ref = self.frozen(seqs, "ref") if cfg.kl.beta > 0 else None
        old = self.frozen(seqs, "old") if cfg.algorithm.old_logps == "recompute" else None
        frozen_s = time.time() - t2
        data = {
            "version": ROLLOUT_VERSION,
            "step": step,
            "weight_version": result.weight_version,
            "samples": samples,
            "components": components,
            "prefs": pref_list,
            "ref_logps": ref,
            "old_logps": old,
            "theta": None if theta is None else [t for t in theta for _ in range(r.group_size)],
            "par_ref": par_ref,
            "seconds": {"generate": gen_s, "score": score_s, "frozen": frozen_s},
            "generated_tokens": result.timings.generated_tokens,
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data), encoding="utf-8")
        tmp.replace(path)
        data["cached"] = False
        return data

    # -- composition inputs drawn with the rollout --

    def directions(self, step: int, n: int) -> list[float] | None:
        """DPA: one direction θ (radians) per prompt, uniform in the configured arc, seeded by step and rank."""
        c = self.cfg.composition
        if c is None or c.aggregate != "dpa":
            return None
        g = torch.Generator().manual_seed(self.cfg.rollout.seed * 7_919 + step * 131 + self.dist.rank)
        lo, hi = (math.radians(a) for a in c.dpa.angles)
        return [lo + (hi - lo) * float(u) for u in torch.rand(n, generator=g, dtype=torch.float64)]

    def conditioned(self, prompts: list[PromptOnly], theta: list[float] | None) -> list[Any]:
        """The conversations sampled from: DPA puts each prompt's direction in a system message first."""
        if theta is None:
            return [p.prompt for p in prompts]
        from preference_data.records import Message
        from reward_models.composition import dpa_system_prompt

        names = self.cfg.composition.dpa.components  # type: ignore[union-attr]
        return [
            [Message("system", dpa_system_prompt(names, t)), *[m for m in p.prompt if m.role != "system"]]
            for p, t in zip(prompts, theta, strict=True)
        ]

    def par_references(self, prompts: list[PromptOnly], step: int) -> list[list[list[float | None]]]:
        """PAR: M responses per prompt from the initial policy (its own sampler, never synced), scored by every
        component: (P, M, K) as nested lists, None where a component failed."""
        cfg = self.cfg
        if self.ref_engine is None:
            self.ref_engine = self.sampler()
        M = cfg.composition.par.references  # type: ignore[union-attr]
        params = self.sampling(M, cfg.rollout.seed * 1_000_003 + 500_009 + step)
        res = self.ref_engine.generate([p.prompt for p in prompts], params)
        records = [p for p in prompts for _ in range(M)]
        texts = [c.text for o in res.outputs for c in o.completions]
        comps = self.rewards.score(records, texts).tolist()
        K = len(self.rewards.names)
        return [
            [[None if math.isnan(v) else v for v in comps[p * M + m]] for m in range(M)] if K else []
            for p in range(len(prompts))
        ]

    def estimate(self, r: torch.Tensor) -> torch.Tensor:
        """The run's advantage estimator on all ranks' rewards (S,) -> (S,)."""
        a = self.cfg.algorithm
        G = self.cfg.rollout.group_size
        kind = a.advantage_kind()
        if kind == "group":
            return group_advantages(r, G, a.scale)
        if kind == "rloo":
            return rloo_advantages(r, G, a.normalize)
        return reinforce_advantages(r, G, a.baseline, a.normalize)

    # -- advantages --

    def advantages(self, data: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
        """(advantages (S_local,), valid mask (S_local,), metrics) from this rank's rollout and everyone's rewards."""
        cfg = self.cfg
        G = cfg.rollout.group_size
        samples = data["samples"]
        stats: dict[str, float] = {}
        if data["prefs"] is not None:
            prefs = torch.tensor(
                [[[math.nan if v is None else v for v in row] for row in m] for m in data["prefs"]], dtype=torch.float32
            )
            local = pairwise_advantages(prefs)
            valid = torch.ones(len(samples), dtype=torch.bool)
            wins = ((torch.nan_to_num(prefs, nan=0.0) + 1) / 2).sum(-1) / max(G - 1, 1)  # mean win prob vs the group
            all_wins = self.dist.gather(wins.reshape(-1).tolist())
            stats["reward"] = sum(all_wins) / max(len(all_wins), 1)
            stats["judge_failed"] = self.dist.sum(float(torch.isnan(prefs).sum().item()) / 2)
            return local, valid, stats
        comps = torch.tensor(
            [[math.nan if v is None else v for v in row] for row in data["components"]], dtype=torch.float32
        )
        reward = combine(comps, self.rewards.weights)
        raw = torch.tensor(self.dist.gather(reward.tolist()), dtype=torch.float32)  # before any KL penalty
        penalty = torch.zeros(len(samples))
        if cfg.kl.beta > 0 and placement(cfg) == "reward":
            T = max(len(s["ids"]) for s in samples)
            mask = pad_rows([[1.0] * len(s["ids"]) for s in samples], T)
            old = data["old_logps"] or [s["logprobs"] for s in samples]
            kl = sequence_kl(pad_rows(old, T), pad_rows(data["ref_logps"], T), mask, estimator(cfg))
            stats["kl"] = float((kl.sum() / mask.sum().clamp(min=1.0)).item())  # per token
            stats["kl_penalty"] = float((cfg.kl.beta * kl).mean().item())
            penalty = cfg.kl.beta * kl
            reward = reward - penalty
        everyone = torch.tensor(self.dist.gather(reward.tolist()), dtype=torch.float32)
        comps_all = torch.tensor(self.dist.gather(comps.tolist()), dtype=torch.float32).reshape(-1, comps.shape[1])
        n = len(samples)
        lo = self.dist.rank * n
        if self.composer is None:
            adv = self.estimate(everyone)
            local_adv = adv[lo : lo + n]
            valid = ~torch.isnan(reward)
        else:
            pen_all = torch.tensor(self.dist.gather(penalty.tolist()), dtype=torch.float32)
            adv = self.compose(data, comps_all, pen_all, stats)
            local_adv = adv[lo : lo + n]
            valid = ~torch.isnan(local_adv)
            local_adv = torch.nan_to_num(local_adv, nan=0.0)
            stats["masked_completions"] = float(torch.isnan(adv).sum().item())
        finite = raw[~torch.isnan(raw)]
        stats["reward"] = float(finite.mean().item()) if len(finite) else math.nan  # the reward, KL penalty excluded
        stats["reward_std"] = float(finite.std().item()) if len(finite) > 1 else 0.0
        stats.setdefault("masked_completions", float(torch.isnan(everyone).sum().item()))
        self.last_components = comps_all
        groups = raw.view(-1, G)
        stats["zero_std_groups"] = float(
            sum(1 for g in groups if len(set(x for x in g.tolist() if not math.isnan(x))) <= 1) / len(groups)
        )
        for k, name in enumerate(self.rewards.names):
            col = comps_all[:, k]
            ok = col[~torch.isnan(col)]
            stats[f"reward/{name}"] = float(ok.mean().item()) if len(ok) else math.nan
            stats[f"reward_nan/{name}"] = float(torch.isnan(col).sum().item())
        return local_adv, valid, stats

    def compose(
        self, data: dict[str, Any], comps_all: torch.Tensor, penalty: torch.Tensor, stats: dict[str, float]
    ) -> torch.Tensor:
        """All ranks' advantages from the composition (NaN = masked); its metrics go into `stats`."""
        assert self.composer is not None
        c = self.composer
        theta = par = None
        if data.get("theta") is not None:
            theta = torch.tensor(self.dist.gather(data["theta"]), dtype=torch.float32)
        if data.get("par_ref") is not None:
            rows = self.dist.gather(data["par_ref"])  # (P, M, K) per prompt
            G = self.cfg.rollout.group_size
            t = torch.tensor(
                [[[math.nan if v is None else v for v in m] for m in p] for p in rows], dtype=torch.float32
            )
            par = t.repeat_interleave(G, 0)  # one copy per completion of the prompt
        if c.grad is not None:
            X = c.transform(comps_all)
            per = c.per_component(X, self.estimate)  # (S, K)
            n = len(data["samples"])
            lo = self.dist.rank * n
            s = self.probe(data, per[lo : lo + n])
            c.grad.observe(s, c.eta(self.scheduler.get_last_lr()[0]))
            for k, name in enumerate(c.names):
                stats[f"influence/{name}"] = float(s[k])
        adv, cstats = c.advantages(
            StepInputs(comps_all, self.cfg.rollout.group_size, self.estimate, penalty, theta, par)
        )
        stats.update(cstats)
        return adv

    def probe(self, data: dict[str, Any], per: torch.Tensor) -> torch.Tensor:
        """Gradient-based weighting: for each component k, the policy-gradient loss with advantages from r_k alone,
        backpropagated (no optimizer step), clipped to `gradient.max_grad_norm`, the gradients of the probed
        parameters flattened into g_k; returns s = Σ_j <g_k, g_j> (the influence)."""
        import re

        from reward_models.composition import influence

        gsec = self.cfg.composition.gradient  # type: ignore[union-attr]
        named = [(n, p) for n, p in self.policy.named_parameters() if p.requires_grad]
        target = [p for n, p in named if gsec.layers is None or re.search(gsec.layers, n)]
        if not target:
            raise UserError(f"composition.gradient.layers: '{gsec.layers}' matches no trainable parameter")
        samples = data["samples"]
        keep = len(samples)
        if gsec.probe_completions > 0:
            G = self.cfg.rollout.group_size
            keep = min(len(samples), max(G, (gsec.probe_completions // G) * G))
        grads = []
        for k in range(per.shape[1]):
            adv = torch.nan_to_num(per[:keep, k], nan=0.0)
            valid = ~torch.isnan(per[:keep, k])
            self.optimizer.zero_grad(set_to_none=True)
            self.backward(data, adv, valid, keep)
            self.dist.reduce_grads(self.params)
            if gsec.max_grad_norm > 0:
                torch.nn.utils.clip_grad_norm_(self.params, gsec.max_grad_norm)
            grads.append(
                torch.cat(
                    [
                        (p.grad if p.grad is not None else torch.zeros_like(p)).detach().float().reshape(-1)
                        for p in target
                    ]
                ).cpu()
            )
        self.optimizer.zero_grad(set_to_none=True)
        return influence(torch.stack(grads))

    def backward(
        self, data: dict[str, Any], adv: torch.Tensor, valid: torch.Tensor, keep: int | None = None, passes: int = 0
    ) -> tuple[float, dict[str, list[float]]]:
        """The loss of the rollout's first `keep` completions (all by default) backpropagated: Σ numerator / Σ
        denominator over every micro-batch and rank. `passes` = 0: one backward pass, no optimizer step (a
        probe); `passes` = μ: μ passes each followed by an optimizer step (the update). Returns the last pass's
        loss and the per-micro-batch stats."""
        cfg = self.cfg
        samples = data["samples"][:keep] if keep is not None else data["samples"]
        old = data["old_logps"] or [s["logprobs"] for s in data["samples"]]
        refs = data["ref_logps"]
        seqs = [
            Seq(s["prompt_ids"], s["ids"], old[i], refs[i] if refs else None, float(adv[i]))
            for i, s in enumerate(samples)
            if bool(valid[i]) and s["ids"]
        ]
        params = dict(cfg.algorithm.params)
        if cfg.algorithm.loss == "grpo":
            params["max_completion_length"] = cfg.rollout.max_new_tokens
            if placement(cfg) == "loss":
                params["beta"] = cfg.kl.beta
                params["kl_estimator"] = estimator(cfg)
        mbs = micro_batches(seqs, cfg.train.batch_size)

        def tensors(mb: list[Seq]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor]:
            T = max(len(s.ids) for s in mb)
            mask = pad_rows([[1.0] * len(s.ids) for s in mb], T).to(self.device)
            oldt = pad_rows([s.old for s in mb], T).to(self.device)
            reft = pad_rows([s.ref for s in mb], T).to(self.device) if mb[0].ref is not None else None  # type: ignore[misc]
            advt = torch.tensor([s.adv for s in mb], dtype=torch.float32, device=self.device)
            return mask, oldt, reft, advt

        # the denominators never depend on θ: the whole rollout's first, so every micro-batch's share is exact
        den = 0.0
        for mb in mbs:
            mask, oldt, reft, advt = tensors(mb)
            den += compute_pg_loss(cfg.algorithm.loss, params, PGBatch(oldt, oldt, mask, advt, reft)).denominator
        den = self.dist.sum(den)
        metrics: dict[str, list[float]] = {}
        total = 0.0
        for _ in range(max(passes, 1)):
            total = 0.0
            for mb in mbs:
                mask, oldt, reft, advt = tensors(mb)
                with self.autocast():
                    lp = per_token_logps(
                        self.policy, mb, self.pad_id, self.device, cfg.rollout.temperature, self.layout
                    )
                terms = compute_pg_loss(cfg.algorithm.loss, params, PGBatch(lp.float(), oldt, mask, advt, reft))
                loss = terms.numerator / max(den, 1e-12)
                loss.backward()
                total += float(loss.item())
                for k, v in terms.stats.items():
                    metrics.setdefault(k, []).append(v)
            if passes > 0:
                self.optimizer_step(metrics)
        return total, metrics

    def optimizer_step(self, metrics: dict[str, list[float]]) -> None:
        self.dist.reduce_grads(self.params)
        if self.cfg.train.max_grad_norm > 0:
            gn = torch.nn.utils.clip_grad_norm_(self.params, self.cfg.train.max_grad_norm)
            metrics.setdefault("grad_norm", []).append(float(gn))
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)

    # -- update --

    def update(self, data: dict[str, Any], adv: torch.Tensor, valid: torch.Tensor) -> dict[str, float]:
        total, metrics = self.backward(data, adv, valid, passes=self.cfg.algorithm.updates_per_rollout)
        out = {k: sum(v) / len(v) for k, v in metrics.items()}
        out["loss"] = self.dist.sum(total)
        out["lr"] = self.scheduler.get_last_lr()[0]
        return out

    # -- checkpoints --

    def trainable_state(self) -> dict[str, torch.Tensor]:
        return {n: p.detach().cpu().clone() for n, p in self.policy.named_parameters() if p.requires_grad}

    def save(self) -> None:
        if self.dist.rank != 0:
            return
        ckpt = self.run.checkpoints / f"checkpoint-{self.step}"
        ckpt.mkdir(parents=True, exist_ok=True)
        torch.save(
            {
                "step": self.step,
                "weights": self.trainable_state(),
                "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(),
                "composition": self.composer.state_dict() if self.composer is not None else None,
            },
            ckpt / "online_state.pt",
        )
        (ckpt / "trainer_state.json").write_text(json.dumps({"global_step": self.step}), encoding="utf-8")
        olds = sorted(self.run.checkpoints.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
        keep = self.cfg.keep_checkpoints
        for old in olds[:-keep] if keep > 0 else []:
            import shutil

            shutil.rmtree(old, ignore_errors=True)

    def load(self, ckpt: Path) -> None:
        state = torch.load(ckpt / "online_state.pt", map_location="cpu", weights_only=False)
        named = dict(self.policy.named_parameters())
        with torch.no_grad():
            for n, t in state["weights"].items():
                named[n].copy_(t)
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        if self.composer is not None and state.get("composition"):
            self.composer.load_state_dict(state["composition"])
        self.step = int(state["step"])
        print(f"resumed from {ckpt} (step {self.step})", flush=True)

    # -- evaluation --

    def component_point(self, limit: int, max_new_tokens: int) -> list[float]:
        """Hypervolume weighting: the components' means over greedy answers to `limit` held-out prompts (computed on
        rank 0, shared with every rank)."""
        point: list[float] = []
        if self.dist.rank == 0:
            prompts, res = self.greedy(self.cfg.eval.prompts, limit, max_new_tokens)
            R = self.rewards.score(prompts, [o.completions[0].text for o in res.outputs])
            point = [float(R[:, k][~torch.isnan(R[:, k])].mean()) for k in range(R.shape[1])]
        shared = [x for x in self.dist.gather([point]) if x]
        return shared[0]

    def evaluate(self, limit: int | None = None) -> dict[str, Any] | None:
        from .evaluate import grade_all, summarize

        e = self.cfg.eval
        limit = e.limit if limit is None else limit
        if limit <= 0 or self.dist.rank != 0:
            return None
        prompts, res = self.greedy(e.prompts, limit, e.max_new_tokens)
        texts = [o.completions[0].text for o in res.outputs]
        grades = grade_all(prompts, texts)
        s = summarize(grades, prompts)
        return {
            "overall": s["overall"],
            "objectives": {k: v for k, v in s.items() if isinstance(v, float)},
            "by_family": s["by_family"],
            "per_prompt": [g["overall"] for g in grades],
            "mean_length": sum(len(o.completions[0].token_ids) for o in res.outputs) / max(len(res.outputs), 1),
        }


def gold_eval_report(evals: dict[str, Any], final: dict[str, Any] | None) -> dict[str, Any]:
    """The final held-out gold score against the initial one ("0"): means, the final's bootstrap interval, the paired
    bootstrap interval of the difference, and the curve over `evals`' keys (steps or rounds); {} without both."""
    from .evaluate import bootstrap_ci, paired_bootstrap

    if final is None or "0" not in evals:
        return {}
    init = evals["0"]
    lo, hi = paired_bootstrap(final["per_prompt"], init["per_prompt"])
    return {
        "prompts": len(final["per_prompt"]),
        "initial": init["overall"],
        "final": final["overall"],
        "final_ci95": list(bootstrap_ci(final["per_prompt"])),
        "delta": final["overall"] - init["overall"],
        "delta_ci95": [lo, hi],
        "curve": {k: v["overall"] for k, v in sorted(evals.items(), key=lambda kv: int(kv[0]))},
    }


def log_row(path: Path, row: dict[str, Any]) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(row, default=float) + "\n")


@dataclass
class Loop:
    """The bookkeeping of `run`: evaluations by step, time per phase, prompts done."""

    evals: dict[str, Any]
    evals_path: Path
    timing: dict[str, float]
    prompts_done: int = 0


def train_step(o: OnlineRun, loop: Loop) -> dict[str, Any]:
    """One step: rollout -> reward -> advantage -> update -> sync (-> composition update, checkpoint, eval)."""
    cfg = o.cfg
    t_step = time.time()
    data = o.rollout(o.step)
    for k in ("generate", "score", "frozen"):
        loop.timing[k] += 0.0 if data.get("cached") else data["seconds"][k]
    adv, valid, stats = o.advantages(data)
    t0 = time.time()
    upd = o.update(data, adv, valid)
    loop.timing["update"] += time.time() - t0
    o.step += 1
    loop.prompts_done += cfg.rollout.prompts_per_step
    o.engine.sync_weights(o.policy)
    lengths = [len(s["ids"]) for s in data["samples"]]
    row = {
        "step": o.step,
        **upd,
        **stats,
        "completion_length": sum(lengths) / max(len(lengths), 1),
        "eos_fraction": sum(s["finish"] == "eos" for s in data["samples"]) / max(len(lengths), 1),
    }
    c = o.composer
    if c is not None and data["prefs"] is None:
        row.update(c.after_step(o.last_components))
        if c.hv is not None:
            h = cfg.composition.hypervolume  # type: ignore[union-attr]
            if h.point == "eval":
                point = o.component_point(h.eval_prompts, h.eval_max_new_tokens)
            else:
                point = [row.get(f"reward/{n}", math.nan) for n in c.names]
            row.update(c.observe_point(point))
    row["step_seconds"] = time.time() - t_step
    if cfg.train.save_every > 0 and o.step % cfg.train.save_every == 0:
        o.save()
    if cfg.train.eval_every > 0 and o.step % cfg.train.eval_every == 0 and o.step < cfg.train.max_steps:
        ev = o.evaluate()
        if ev is not None:
            loop.evals[str(o.step)] = ev
            row["eval_gold/overall"] = ev["overall"]
    if o.dist.rank == 0:
        log_row(o.run.metrics_path, row)
        loop.evals_path.write_text(json.dumps(loop.evals), encoding="utf-8")
        if o.step % max(cfg.train.log_every, 1) == 0:
            print(
                f"step {o.step}/{cfg.train.max_steps}: reward {row.get('reward', math.nan):.4f} "
                f"loss {row['loss']:.4f} len {row['completion_length']:.1f}"
                + (f" eval {row['eval_gold/overall']:.4f}" if "eval_gold/overall" in row else ""),
                flush=True,
            )
    return row


def threshold_search(o: OnlineRun, loop: Loop) -> dict[str, Any]:
    """NM-PPO: Nelder–Mead over the constraint thresholds, each evaluation continuing the same policy for up to
    `search.steps_per_eval` steps and returning early once every constraint is within `search.tolerance` of its
    threshold; f(θ) = −(held-out gold overall on `search.eval_limit` prompts). Evaluations are cached by threshold
    (in the checkpoint, so a resumed search replays them without training and continues where it stopped)."""
    from reward_models.composition import NelderMeadSettings, initial_simplex, nelder_mead, within

    c = o.composer
    assert c is not None and c.lagr is not None
    sec = o.cfg.composition.search  # type: ignore[union-attr]
    cache = c.cache()
    max_steps = o.cfg.train.max_steps

    def f(theta: dict[str, float]) -> float:
        hit = cache.get(theta)
        if hit is not None:
            return hit
        if o.step >= max_steps:
            return math.inf
        c.lagr.set_thresholds(theta)  # type: ignore[union-attr]
        value = math.inf
        for i in range(sec.steps_per_eval):
            if o.step >= max_steps:
                break
            row = train_step(o, loop)
            values = {n: row.get(f"reward/{n}", math.nan) for n in theta}
            last = i + 1 == sec.steps_per_eval or o.step >= max_steps
            close = within(values, theta, sec.tolerance)
            if (i + 1) % sec.eval_every == 0 or last or close:
                ev = o.evaluate(sec.eval_limit)
                value = -float(o.dist.gather([ev["overall"] if ev else None])[0])
                log_row(o.run.dir / "search.jsonl", {"step": o.step, "theta": theta, "f": value, "values": values})
            if close:
                break
        cache.put(theta, value)
        c.search_state["cache"] = [[k, v] for k, v in cache.entries]
        return value

    ranges = {n: (float(r[0]), float(r[1])) for n, r in sec.ranges.items()}
    best, fbest, history = nelder_mead(
        f,
        initial_simplex(ranges, sec.seed),
        NelderMeadSettings(max_iters=sec.max_iters),
        lambda: o.step >= max_steps,
    )
    c.lagr.set_thresholds(best)
    c.search_state["history"] = history
    return {"best_thresholds": best, "best_f": fbest, "evaluations": len(cache.entries), "history": history}


def run(cfg: OnlineConfig, resume: bool = False) -> dict[str, Any]:
    """Run the online loop as `cfg` says; return the report (also written to report.json)."""
    o = OnlineRun(cfg, resume)
    main = o.dist.rank == 0
    evals_path = o.dir / "evals.json"
    evals: dict[str, Any] = json.loads(evals_path.read_text()) if resume and evals_path.exists() else {}
    loop = Loop(evals, evals_path, {"generate": 0.0, "score": 0.0, "frozen": 0.0, "update": 0.0})
    t_start = time.time()
    search: dict[str, Any] | None = None
    try:
        if "0" not in evals:
            ev = o.evaluate()
            if ev is not None:
                evals["0"] = ev
                log_row(o.run.metrics_path, {"step": 0, "eval_gold/overall": ev["overall"]})
        c = o.composer
        if c is not None and c.hv is not None and not c.hv.buffer and cfg.composition.hypervolume.point == "eval":  # type: ignore[union-attr]
            h = cfg.composition.hypervolume  # type: ignore[union-attr]
            start = c.observe_point(o.component_point(h.eval_prompts, h.eval_max_new_tokens))
            if main:
                log_row(o.run.metrics_path, {"step": 0, **start})
        if c is not None and cfg.composition.search.method == "nelder_mead":  # type: ignore[union-attr]
            search = threshold_search(o, loop)
        while o.step < cfg.train.max_steps:
            train_step(o, loop)
    except BaseException as e:
        if main:
            o.run.stopped(o.step, e)
        raise
    train_seconds = time.time() - t_start
    evals, timing, prompts_done = loop.evals, loop.timing, loop.prompts_done
    final = o.evaluate()
    if final is not None:
        evals[str(o.step)] = final
        log_row(o.run.metrics_path, {"step": o.step, "eval_gold/overall": final["overall"]})
    if not main:
        return {}
    evals_path.write_text(json.dumps(evals), encoding="utf-8")
    from prefalign.training.recipe import save_policy

    saved = save_policy(o.policy, o.tokenizer, o.dir, cfg.train.method, cfg.save_merged)
    eval_report = gold_eval_report(evals, final)
    if eval_report:
        eval_report["initial_objectives"] = evals["0"]["objectives"]
        eval_report["final_objectives"] = final["objectives"]  # type: ignore[index]
    report = {
        **saved,
        "base_model": cfg.model,
        "method": cfg.train.method,
        "precision": o.run.precision,
        "algorithm": {
            "loss": cfg.algorithm.loss,
            "advantage": cfg.algorithm.advantage_kind(),
            "params": PG_LOSSES[cfg.algorithm.loss].defaults | dict(cfg.algorithm.params),
            "kl": {"beta": cfg.kl.beta, "placement": placement(cfg), "estimator": estimator(cfg)},
        },
        "reward": o.rewards.describe(),
        "reward_failures": {c.name: {"nan": c.nan, **dict(c.failures)} for c in o.rewards.components},
        "steps": o.step,
        "processes": o.dist.world,
        "train_seconds": round(train_seconds, 1),
        "prompts_per_second": round(prompts_done / max(train_seconds, 1e-9), 4),
        "seconds_by_phase": {k: round(v, 1) for k, v in timing.items()},
        "eval": eval_report,
    }
    if o.composer is not None:
        comp = o.composer.describe()
        if search is not None:
            comp["search"] = search
        png = plot_composition(o.run.metrics_path, o.dir / "composition.png", o.composer.names)
        if png is not None:
            comp["plot"] = str(png)
        report["composition"] = comp
    return o.run.finish(report, PLOT_KEYS)


def summary_lines(report: dict[str, Any]) -> list[str]:
    a = report["algorithm"]
    lines = [
        f"{a['loss']} ({a['advantage']} advantage, KL beta {a['kl']['beta']} in the {a['kl']['placement']}): "
        f"{report['steps']} steps in {report['train_seconds']}s ({report['prompts_per_second']} prompts/s; "
        + ", ".join(f"{k} {v}s" for k, v in report["seconds_by_phase"].items())
        + ")",
        f"saved to {report['policy_dir']}",
    ]
    ev = report.get("eval") or {}
    if ev:
        lo, hi = ev["delta_ci95"]
        lines.append(
            f"held-out gold overall on {ev['prompts']} prompts: {ev['initial']:.4f} -> {ev['final']:.4f} "
            f"(delta {ev['delta']:+.4f}, 95% CI [{lo:+.4f}, {hi:+.4f}])"
        )
    for name, f in report.get("reward_failures", {}).items():
        if f.get("nan"):
            lines.append(f"reward component {name}: {f['nan']} completions masked (NaN): {f}")
    return lines


__all__ = ["OnlineConfig", "run", "summary_lines", "prompts_for_step", "micro_batches"]
