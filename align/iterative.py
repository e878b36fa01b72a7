"""`align train` with `kind: iterative`: iterative DPO (RLHF Workflow) and iterative INPO, round by round.

Round t (1..rounds), reading top to bottom:

  policy     π_t: the initial `model` in round 1, round t−1's trained policy after.
  sample     `rounds.samples_per_prompt` (K) completions of each of this round's prompts (a disjoint slice of the
             shuffled prompt list, as RLHFlow's per-iteration prompt sets), from π_t: the online stage's rollout
             phase (`align.online.rollout`, a `Rollout` with K completions per prompt). `rounds.candidates:
             policy_and_reference` adds the prompt record's reference response (`meta.reference`, e.g. the data's
             chosen answer) to the K candidates the reward ranks: rejection sampling over on-policy samples and a
             demonstration, so a behaviour the policy never samples (a refusal) can still be chosen, and the
             rejected side stays on-policy when the reference wins. `policy_and_data` adds the data's rejected
             answer too (`meta.rejected`): the reward ranks the prompt's whole preference pair with the samples, so
             a mistake the data shows (a needless refusal of a harmless request) stays in reach of every round
             whether or not the policy samples it.
  score      the reward phase (`align.online.reward`: the `reward:` components, e.g. a BT RM or a judge, Σ w_k r_k),
             or one pairwise preference oracle (the pairwise preference model, a judge) ranking the K samples with
             `reward_models.ranking.rank` (round robin or knockout).
  pairs      `pair_rule`: max_min (best vs worst), max_random (best vs a random other), max_second (best vs the
             second best), length_penalized (max_min on r − λ·tokens). A prompt whose chosen and rejected
             rewards tie is dropped and counted; so is a prompt with a NaN reward among its samples (never read
             as a zero). `keep_pairs: N` keeps the N pairs with the largest reward margins (sample more prompts
             than N: the round trains where the reward's best beats the worst by most; a list gives each round
             its own N). Pairs of this round
             (`data: current`) or of every round so far (`data: cumulative`); each carries its margin, which
             `loss.pair_weights: margin` turns into its weight in the loss.
  train      `align.train` on those pairs with any pairwise loss (`loss:`), starting from π_t. The reference is
             `initial` (the initial model) or `previous` (π_t, the released RLHFlow loop's choice); INPO's loss
             gets π_t as its previous iterate and the initial model as π_ref.
  eval       greedy held-out completions of the new policy graded by the gold graders (`align.online.evaluation`).

Every round's samples, scores, pairs and training run are kept under `output_dir/round_<t>/`; a finished round is
read back, not redone, and `--resume` continues an interrupted round's training from its last checkpoint, so a
killed run ends with the same weights as one that was not.
"""

from __future__ import annotations

import json
import math
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from tqdm.auto import tqdm

from prefalign.config import MODEL_ALIASES, OUTPUT_DIR_ALIASES, dump_yaml, option, to_dict
from prefalign.decoding import SamplingOptions
from prefalign.errors import UserError
from prefalign.generation import make_engine
from prefalign.models.hub import DEFAULT_MODEL, load_model, load_tokenizer, weights_fingerprint
from prefalign.models.precision import decide_precision
from prefalign.registry import Table
from prefalign.stats import finite_mean, stream_seed
from prefalign.training.config import HeldOutSection, LoraSection, TrainSection
from prefalign.training.metrics import ALERTS_FILE, HACKING_KEY, append_alert
from prefalign.training.report import write_report
from preference_data.records import Message, PreferencePair, PromptOnly
from preference_data.sources import DataConfig
from reward_models.composition import weighted_sum
from reward_models.ranking import Method, rank_many

from . import train as offline
from .losses import LOSSES, check_loss_config
from .online.config import PolicyEvalSection, PromptsSection
from .online.evaluation import eval_lines, gold_eval, gold_eval_report, hacking_check, log_row
from .online.parallel import ranks
from .online.rollout import Rollout, draw, load_train_prompts
from .pipeline import finished_run, record_inputs
from .rewards import RewardSet, check_reward_specs
from .train import LossSection, PreviousSection, ReferenceKind, ReferenceSection, TrainConfig

PairRule = Literal["max_min", "max_random", "max_second", "length_penalized"]


# --- pair rules ------------------------------------------------------------------------------------------------


def _worst(score: list[float], best: int, rng: random.Random) -> int:
    return min(range(len(score)), key=lambda i: (score[i], i))


def _second(score: list[float], best: int, rng: random.Random) -> int:
    return max((i for i in range(len(score)) if i != best), key=lambda i: (score[i], -i))


def _random_other(score: list[float], best: int, rng: random.Random) -> int:
    return rng.choice([i for i in range(len(score)) if i != best])


@dataclass(frozen=True)
class PairRuleSpec:
    """How one prompt's K samples become one pair: the rejected sample given the scores and the chosen (best)."""

    summary: str
    other: Callable[[list[float], int, random.Random], int]
    length_penalized: bool = False  # scores are r − length_penalty × completion tokens


PAIR_RULES: Table[PairRuleSpec] = Table(
    "pair rule",
    {
        "max_min": PairRuleSpec("best vs worst (RLHFlow max_min; INPO's best-of-K vs worst-of-K)", _worst),
        "max_random": PairRuleSpec("best vs a uniformly random other sample", _random_other),
        "max_second": PairRuleSpec("best vs the second best (RLHFlow max_max)", _second),
        "length_penalized": PairRuleSpec(
            "max_min on r - length_penalty x completion tokens (RLHFlow max_min_p)", _worst, length_penalized=True
        ),
    },
)
"""`align ls pair-rules`."""


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
    pair_rule: PairRule = option("max_min", "how a prompt's K samples become one pair (`align ls pair-rules`)")
    length_penalty: float = option(0.0, "length_penalized: reward penalty per completion token")
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
        problems += check_loss_config(self.loss.name, self.loss.params, True, True)
        if self.prompts.judge != "none":
            problems.append("prompts.judge: judges are trained by RL with kind: online")
        return problems


def select_pair(
    rewards: list[float],
    lengths: list[int],
    rule: PairRule,
    length_penalty: float = 0.0,
    rng: random.Random | None = None,
) -> tuple[int, int] | None:
    """(chosen index, rejected index) of one prompt's K samples, or None when the pair ties (dropped).

    Ties in the maximum go to the earliest sample. The rewards must be finite (the caller drops NaN groups)."""
    if len(rewards) < 2:
        return None
    spec = PAIR_RULES[rule]
    score = (
        [r - length_penalty * n for r, n in zip(rewards, lengths, strict=True)] if spec.length_penalized else rewards
    )
    best = max(range(len(score)), key=lambda i: (score[i], -i))
    other = spec.other(score, best, rng or random.Random(0))
    return None if score[best] == score[other] else (best, other)


# --- the run ---------------------------------------------------------------------------------------------------


def round_prompts(prompts: list[PromptOnly], t: int, n: int) -> list[PromptOnly]:
    """Round t's (1-based) slice of the shuffled prompts, wrapping when they run out."""
    start = ((t - 1) * n) % len(prompts)
    return [prompts[(start + i) % len(prompts)] for i in range(n)]


@dataclass
class RoundEngine:
    """One generation engine for every round: round t's policy is loaded and copied into the engine's model in
    place (`sync_weights`), so what the engine built for its model (on the static path, a decode step compiled and
    captured per batch bucket) is built in round 1 and serves every round."""

    cfg: IterativeConfig
    engine: Any = None

    def on(self, policy: str) -> Any:
        """The engine decoding with `policy`'s weights (bf16 where the training precision is)."""
        bf16 = decide_precision(self.cfg.train.precision).value != "fp32"
        # an adapter (the quickstart's offline-DPO warm start) merged: unmerged LoRA layers decode at half the speed
        model = load_model(policy, dtype="bfloat16" if bf16 else "float32", merge=True)
        if self.engine is None:
            r = self.cfg.rounds
            self.engine = make_engine(
                model, load_tokenizer(policy), max_rows=r.max_rows, token_budget=r.token_budget, static=r.static
            )
        else:
            self.engine.sync_weights(model)
        return self.engine


def sample_key(cfg: IterativeConfig, policy: str, prompts: list[PromptOnly], t: int) -> dict[str, Any]:
    """What round t's samples depend on: the policy (path and weights' fingerprint), the prompts, the sampling."""
    r = cfg.rounds
    sampling = [r.samples_per_prompt, r.temperature, r.top_p, r.top_k, r.max_new_tokens, r.seed, t]
    return {
        "policy": policy,
        "weights": weights_fingerprint(policy),
        "prompts": [p.id for p in prompts],
        "sampling": sampling,
    }


def sample_round(
    cfg: IterativeConfig, policy: str, prompts: list[PromptOnly], t: int, path: Path, engines: RoundEngine | None = None
) -> tuple[Rollout, dict[str, Any]]:
    """K completions per prompt from `policy` (the rollout phase) and their cache key: cached in `path` and reused
    only for the same policy (its path and its weights' fingerprint: a round retrained with other settings into the
    same directory is sampled again), prompts and sampling settings."""
    r = cfg.rounds
    key = sample_key(cfg, policy, prompts, t)
    if path.exists():
        cached = json.loads(path.read_text(encoding="utf-8"))
        if cached.get("key") == key:
            return Rollout.from_json(cached["rollout"]), key
    params = r.params(r.samples_per_prompt, stream_seed(r.seed, t))
    engine = (engines or RoundEngine(cfg)).on(policy)
    rollout = draw(engine, prompts, [p.prompt for p in prompts], params, t, progress=True)
    n, secs = len(rollout.texts), max(rollout.seconds, 1e-9)
    print(
        f"round {t}: sampled {n} answers in {secs:.1f}s ({n / secs:.1f} answers/s, "
        f"{rollout.generated_tokens / secs:.0f} tokens/s)",
        flush=True,
    )
    path.write_text(json.dumps({"key": key, "rollout": rollout.to_json()}), encoding="utf-8")
    return rollout, key


@dataclass
class Pool:
    """Each prompt's candidates the reward ranks: its K samples, then (with `policy_and_reference`) its reference,
    then (with `policy_and_data`) the data's rejected answer."""

    prompts: list[PromptOnly]
    texts: list[list[str]]  # (P, K + the data's answers the prompt has)
    lengths: list[list[int]]  # completion tokens of each candidate
    origins: list[list[str]]  # each candidate's origin: "policy" (sampled by π_t), or the meta key it came from

    @property
    def on_policy(self) -> list[list[bool]]:
        return [[o == "policy" for o in row] for row in self.origins]


def candidate_pool(cfg: IterativeConfig, rollout: Rollout, tokenizer: Any) -> Pool:
    G = rollout.group_size
    texts, lengths, origins = [], [], []
    for i, (p, group) in enumerate(zip(rollout.prompts, rollout.groups(), strict=True)):
        texts.append(list(group))
        lengths.append([len(ids) for ids in rollout.token_ids[i * G : (i + 1) * G]])
        origins.append(["policy"] * G)
        for key in DATA_CANDIDATES[cfg.rounds.candidates]:
            text = p.meta.get(key)
            if isinstance(text, str) and text.strip():
                texts[-1].append(text)
                lengths[-1].append(len(tokenizer(text, add_special_tokens=False)["input_ids"]))
                origins[-1].append(key)
    return Pool(rollout.prompts, texts, lengths, origins)


def score_round(rewards: RewardSet, pool: Pool, method: Method) -> list[list[float]]:
    """(P, candidates) rewards: Σ w_k r_k of the pointwise components (the reward phase), or the pairwise oracle's
    ranking score."""
    if rewards.pairwise:  # every prompt's comparisons in one call of the oracle (a judge batches them)
        scorer = next(c.scorer for c in rewards.components if c.kind == "pairwise")
        cands = [[[Message("assistant", x)] for x in group] for group in pool.texts]
        ranked = rank_many(scorer, [p.prompt for p in pool.prompts], cands, method)
        return [[float(x) for x in r.scores] for r in ranked]
    out: list[list[float]] = []
    bar = tqdm(
        total=sum(len(g) for g in pool.texts),
        desc="scoring",
        unit="answer",
        disable=os.environ.get("CI") == "true",
    )
    for s in range(0, len(pool.prompts), SCORE_PROMPTS):  # a prompt's candidates scored together (prefix shared)
        groups = pool.texts[s : s + SCORE_PROMPTS]
        records = [p for p, group in zip(pool.prompts[s : s + SCORE_PROMPTS], groups, strict=True) for _ in group]
        comps = rewards.score(records, [t for group in groups for t in group])
        flat = weighted_sum(comps, rewards.weights).tolist()
        at = 0
        for group in groups:
            out.append([float(v) for v in flat[at : at + len(group)]])
            at += len(group)
        bar.update(len(records))
    bar.close()
    return out


SCORE_PROMPTS = 64
"""Prompts whose candidates one call of the reward scores (the progress bar moves between calls)."""


def build_pairs(
    cfg: IterativeConfig, pool: Pool, scores: list[list[float]], t: int
) -> tuple[list[PreferencePair], dict[str, int]]:
    rng = random.Random(cfg.rounds.seed * 7919 + t)
    pairs: list[PreferencePair] = []
    kinds: list[tuple[str, str]] = []  # per pair: the origins of its chosen and rejected answers
    counts = {
        "prompts": len(pool.prompts),
        "pairs": 0,
        "dropped_tie": 0,
        "dropped_nan": 0,
        "dropped_margin": 0,
        "dropped_single": 0,
        "chosen_reference": 0,
        "rejected_data": 0,
    }
    for p, texts, lengths, origins, r in zip(pool.prompts, pool.texts, pool.lengths, pool.origins, scores, strict=True):
        if len(texts) < 2:  # K = 1 and the prompt has no reference: nothing to rank it against
            counts["dropped_single"] += 1
            continue
        if any(not math.isfinite(x) for x in r):
            counts["dropped_nan"] += 1
            continue
        sel = select_pair(r, lengths, cfg.rounds.pair_rule, cfg.rounds.length_penalty, rng)
        if sel is None:
            counts["dropped_tie"] += 1
            continue
        w, lo = sel
        pairs.append(
            PreferencePair(
                p.prompt,
                [Message("assistant", texts[w])],
                [Message("assistant", texts[lo])],
                margin=r[w] - r[lo],
                attributes={"family": p.grader, "round": t, "prompt_id": p.id},
                source=f"round_{t}",
            )
        )
        kinds.append((origins[w], origins[lo]))
    keep = cfg.rounds.keep_in(t)
    if keep and len(pairs) > keep:  # the largest margins, in prompt order; equal margins go to the earlier prompt
        top = sorted(sorted(range(len(pairs)), key=lambda i: (-(pairs[i].margin or 0.0), i))[:keep])
        counts["dropped_margin"] = len(pairs) - keep
        pairs, kinds = [pairs[i] for i in top], [kinds[i] for i in top]
    counts["pairs"] = len(pairs)
    counts["chosen_reference"] = sum(c == "reference" for c, _ in kinds)  # the reward chose the data's reference
    counts["rejected_data"] = sum(r == "rejected" for _, r in kinds)  # the data's rejected answer ranked last
    return pairs, counts


def eval_policy(
    cfg: IterativeConfig, policy: str, path: Path, rewards: RewardSet, engines: RoundEngine | None = None
) -> dict[str, Any] | None:
    """The held-out gold evaluation of `policy`, with the learned reward of the same answers (cached in `path`)."""
    if cfg.eval.limit <= 0:
        return None
    key = {"policy": policy, "weights": weights_fingerprint(policy), "eval": to_dict(cfg.eval), "reward": cfg.reward}
    if path.exists():
        cached = json.loads(path.read_text(encoding="utf-8"))
        if cached.get("key") == key:
            return cached
    out = {
        "key": key,
        "policy": policy,
        **(gold_eval((engines or RoundEngine(cfg)).on(policy), cfg.eval, rewards=rewards) or {}),
    }
    path.write_text(json.dumps(out), encoding="utf-8")
    return out


def reference_pass(cfg: IterativeConfig, pairs: int, processes: int | None = None) -> Literal["once", "every_step"]:
    """`rounds.reference_pass` for a round of `pairs` training pairs (`auto` resolved): once when the round's steps
    draw more pairs than it has (max_steps x batch_size x grad_accum x `processes`, default this launch's count)."""
    if cfg.rounds.reference_pass != "auto":
        return cfg.rounds.reference_pass
    t = cfg.train
    drawn = t.max_steps * t.batch_size * t.grad_accum * (processes or ranks()[1])
    revisited = drawn > pairs if t.max_steps > 0 else t.epochs > 1
    return "once" if revisited else "every_step"


def round_train_config(cfg: IterativeConfig, t: int, policy: str, pairs_file: Path, pairs: int) -> TrainConfig:
    spec = LOSSES[cfg.loss.name]
    if spec.needs_previous_iterate:  # INPO: π_ref = the initial model, π_t = this round's starting policy
        reference = ReferenceSection(kind="auto", model=cfg.model)
        previous = PreviousSection(model=policy)
    elif not spec.needs_reference:
        reference, previous = ReferenceSection(kind="none"), PreviousSection()
    else:
        ref_model = cfg.model if cfg.rounds.reference == "initial" else policy
        kind: ReferenceKind = "precomputed" if reference_pass(cfg, pairs) == "once" else "auto"
        reference, previous = (
            ReferenceSection(kind=kind, model=None if ref_model == policy else ref_model),
            PreviousSection(),
        )
    return TrainConfig(
        model=policy,
        output_dir=str(Path(cfg.output_dir) / f"round_{t}" / "train"),
        data=DataConfig(source=str(pairs_file), split="all"),
        eval=HeldOutSection(split="none"),
        loss=cfg.loss,
        reference=reference,
        previous=previous,
        train=replace(cfg.train, seed=cfg.train.seed + t),
        lora=cfg.lora,
    )


def scores_of_round(
    cfg: IterativeConfig, rewards: RewardSet, pool: Pool, path: Path, sample_key: Any
) -> list[list[float]]:
    """The round's scores of each prompt's candidates (cached in `path` with the samples' key, the reward and the
    candidates); NaN kept as NaN."""
    key = {"samples": sample_key, "reward": cfg.reward, "ranking": cfg.rounds.ranking, "pool": cfg.rounds.candidates}
    cached = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    if cached.get("key") == key:
        scores = cached["scores"]
    else:
        n = sum(len(r) for r in pool.texts)
        print(f"scoring {n} candidates of {len(pool.texts)} prompts with the reward ...", flush=True)
        t0 = time.perf_counter()
        scores = [
            [None if not math.isfinite(x) else x for x in r] for r in score_round(rewards, pool, cfg.rounds.ranking)
        ]
        secs = max(time.perf_counter() - t0, 1e-9)
        print(f"scored {n} candidates in {secs:.1f}s ({n / secs:.1f}/s)", flush=True)
        path.write_text(json.dumps({"key": key, "scores": scores}), encoding="utf-8")
    return [[math.nan if x is None else x for x in r] for r in scores]


def data_text(cfg: IterativeConfig, counts: dict[str, Any]) -> str:
    """How many of the kept pairs took a side from the data (with `candidates` that rank the data's answers)."""
    keys = DATA_CANDIDATES[cfg.rounds.candidates]
    if not keys:
        return ""
    text = f"; the data's reference chosen in {counts['chosen_reference']}"
    return text + (f", its rejected answer rejected in {counts['rejected_data']}" if "rejected" in keys else "")


def dropped_text(counts: dict[str, Any]) -> str:
    """What a round dropped, for its summary line: ties, NaN groups, (K = 1) prompts without a reference and
    (keep_pairs) the smaller margins."""
    text = f"{counts['dropped_tie']} ties, {counts['dropped_nan']} NaN dropped"
    if counts.get("dropped_single"):
        text += f", {counts['dropped_single']} with one sample and no reference"
    return text + (f", {counts['dropped_margin']} below the kept margins" if counts.get("dropped_margin") else "")


@dataclass
class Round:
    """What one round made: its pairs, the trained policy and the numbers for the report."""

    pairs: list[PreferencePair]
    policy: str
    steps: int
    row: dict[str, Any]  # metrics.jsonl
    summary: dict[str, Any]  # report.json's rounds[]
    eval: dict[str, Any] | None


def run_round(
    cfg: IterativeConfig,
    rewards: RewardSet,
    prompts: list[PromptOnly],
    policy: str,
    t: int,
    earlier: list[PreferencePair],
    resume: bool,
    engines: RoundEngine | None = None,
) -> Round:
    """Round t from `policy`: sample, score, pair, train (or read the finished training back), evaluate."""
    rdir = Path(cfg.output_dir) / f"round_{t}"
    rdir.mkdir(parents=True, exist_ok=True)
    rp = round_prompts(prompts, t, cfg.rounds.prompts_per_round)
    print(
        f"round {t}/{cfg.rounds.rounds}: sampling {cfg.rounds.samples_per_prompt} x {len(rp)} from {policy}", flush=True
    )
    rollout, sample_key = sample_round(cfg, policy, rp, t, rdir / "samples.json", engines)
    pool = candidate_pool(cfg, rollout, load_tokenizer(policy))
    scores = scores_of_round(cfg, rewards, pool, rdir / "scores.json", sample_key)
    pairs, counts = build_pairs(cfg, pool, scores, t)
    on_policy = [
        x for r, sampled in zip(scores, pool.on_policy, strict=True) for x, on in zip(r, sampled, strict=True) if on
    ]
    use = [*earlier, *pairs] if cfg.rounds.data == "cumulative" else pairs
    if not use:
        raise UserError(f"round {t}: no pairs left ({counts}); raise samples_per_prompt or the temperature")
    pairs_file = rdir / "pairs.jsonl"
    pairs_file.write_text("".join(json.dumps(p.to_dict()) + "\n" for p in use), encoding="utf-8")
    tcfg = round_train_config(cfg, t, policy, pairs_file, len(use))
    out = Path(tcfg.output_dir)
    if finished_run(out, tcfg):
        report = json.loads((out / "report.json").read_text(encoding="utf-8"))
        print(f"round {t}: already trained ({out})", flush=True)
    else:
        report = offline.run(tcfg, resume=resume)
        record_inputs(out, tcfg)
    trained = str(report["policy_dir"])
    ev = eval_policy(cfg, trained, rdir / "eval.json", rewards, engines)
    row = {
        "round": t,
        "reward": finite_mean(on_policy),  # the learned reward of π_t's samples (not the reference's)
        "reward_best": finite_mean([max(r) for r in scores if all(math.isfinite(x) for x in r)]),
        **{f"pairs/{k}": v for k, v in counts.items()},
        "train_loss": report.get("train_loss"),
    }
    if ev is not None:
        row["eval_gold/overall"] = ev["overall"]
        if ev.get("reward") is not None:
            row["eval_reward"] = ev["reward"]
    summary = {
        "round": t,
        **counts,
        "train_pairs": len(use),
        "steps": report["steps"],
        "policy": trained,
        "sample_reward": row["reward"],
        "eval": ev["overall"] if ev else None,
    }
    print(
        f"round {t}: {counts['pairs']} pairs ({dropped_text(counts)}){data_text(cfg, counts)}; "
        f"{report['steps']} steps" + (f"; held-out gold {ev['overall']:.4f}" if ev else ""),
        flush=True,
    )
    return Round(pairs, trained, int(report["steps"]), row, summary, ev)


def run(cfg: IterativeConfig, resume: bool = False) -> dict[str, Any]:
    """Run every round as `cfg` says (finished rounds are read back); return the report."""
    root = Path(cfg.output_dir)
    root.mkdir(parents=True, exist_ok=True)
    dump_yaml(cfg, root / "config.yaml")
    (root / "report.json").unlink(missing_ok=True)
    metrics = root / "metrics.jsonl"
    metrics.write_text("", encoding="utf-8")
    t0 = time.time()
    prompts = load_train_prompts(cfg.prompts)
    rewards = RewardSet(cfg.reward)
    policy = cfg.model
    evals: dict[str, Any] = {}
    engines = RoundEngine(cfg)
    ev0 = eval_policy(cfg, policy, root / "eval_round_0.json", rewards, engines)
    if ev0 is not None:
        evals["0"] = ev0
        row0 = {"step": 0, "round": 0, "eval_gold/overall": ev0["overall"]}
        log_row(metrics, row0 | ({"eval_reward": ev0["reward"]} if ev0.get("reward") is not None else {}))
    all_pairs: list[PreferencePair] = []
    rounds_report = []
    steps = 0
    hacked = False
    (root / ALERTS_FILE).unlink(missing_ok=True)
    for t in range(1, cfg.rounds.rounds + 1):
        r = run_round(cfg, rewards, prompts, policy, t, all_pairs, resume, engines)
        all_pairs.extend(r.pairs)
        policy, steps = r.policy, steps + r.steps
        if r.eval is not None:
            evals[str(t)] = r.eval
        log_row(metrics, {"step": steps, **r.row})
        alert = hacking_check(evals)
        if alert is not None and not hacked:
            hacked = True
            print(f"ALERT: {alert}", flush=True)
            append_alert(metrics, steps, HACKING_KEY, alert)
        rounds_report.append(r.summary)
    final = evals.get(str(cfg.rounds.rounds))
    report = {
        "policy_dir": policy,
        "base_model": cfg.model,
        "loss": {"name": cfg.loss.name, "params": LOSSES[cfg.loss.name].defaults | dict(cfg.loss.params)},
        "rounds": rounds_report,
        "reference": cfg.rounds.reference,
        "data": cfg.rounds.data,
        "pair_rule": cfg.rounds.pair_rule,
        "reward": rewards.describe(),
        "steps": steps,
        "seconds": round(time.time() - t0, 1),
        "eval": gold_eval_report(evals, final),
        "run_report": str(root / "report.html"),
        "dashboard_first": ["eval_gold/overall", "reward", "pairs/pairs"],
        "config": to_dict(cfg),
    }
    (root / "report.json").write_text(json.dumps(report, indent=2, default=str), encoding="utf-8")
    write_report(root)
    return report


def summary_lines(report: dict[str, Any]) -> list[str]:
    lines = [
        f"iterative {report['loss']['name']}: {len(report['rounds'])} rounds, {report['steps']} steps in "
        f"{report['seconds']}s (reference {report['reference']}, data {report['data']}, pairs {report['pair_rule']})"
    ]
    for r in report["rounds"]:
        lines.append(
            f"  round {r['round']}: {r['pairs']} pairs ({dropped_text(r)}), "
            f"{r['steps']} steps, sample reward {r['sample_reward']:.4f}"
            + (f", held-out gold {r['eval']:.4f}" if r["eval"] is not None else "")
        )
    lines += eval_lines(report.get("eval") or {})
    lines.append(f"saved to {report['policy_dir']}")
    return lines


__all__ = ["PAIR_RULES", "IterativeConfig", "RoundsSection", "run", "select_pair", "summary_lines"]
