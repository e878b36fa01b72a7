"""`align train` with `kind: iterative`: iterative DPO (RLHF Workflow) and iterative INPO, round by round.

Round t (1..rounds), reading top to bottom:

  policy     π_t: the initial `model` in round 1, round t−1's trained policy after.
  sample     `rounds.samples_per_prompt` (K) completions of each of this round's prompts (a disjoint slice of the
             shuffled prompt list, as RLHFlow's per-iteration prompt sets), from π_t with the generation engine.
  score      the `reward:` components (`align.rewards`; a BT RM, the gold graders, any pointwise scorer), or one
             pairwise preference oracle (the pairwise preference model, a judge) ranking the K samples with
             `reward_models.ranking.rank` (round robin or knockout).
  pairs      `pair_rule`: max_min (best vs worst), max_random (best vs a random other), max_second (best vs the
             second best), length_penalized (max_min on r − λ·tokens). A prompt whose chosen and rejected
             rewards tie is dropped and counted; so is a prompt with a NaN reward among its samples (never read
             as a zero). Pairs of this round (`data: current`) or of every round so far (`data: cumulative`).
  train      `align.train` on those pairs with any pairwise loss (`loss:`), starting from π_t. The reference is
             `initial` (the initial model) or `previous` (π_t, the released RLHFlow loop's choice); INPO's loss
             gets π_t as its previous iterate and the initial model as π_ref.
  eval       greedy held-out completions of the new policy graded by the gold graders.

Every round's samples, scores, pairs and training run are kept under `output_dir/round_<t>/`; a finished round is
read back, not redone, and `--resume` continues an interrupted round's training from its last checkpoint, so a
killed run ends with the same weights as one that was not.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from prefalign.config import option, to_dict
from prefalign.errors import UserError
from prefalign.models.hub import DEFAULT_MODEL
from prefalign.registry import Table
from prefalign.training.config import HeldOutSection, LoraSection, TrainSection
from preference_data.records import Message, PreferencePair, PromptOnly
from reward_models.composition import weighted_sum

from .losses import LOSSES, check_loss_config
from .online.config import PolicyEvalSection, PromptsSection
from .rewards import RewardSet, check_reward_specs
from .train import LossSection, ReferenceSection

PairRule = Literal["max_min", "max_random", "max_second", "length_penalized"]
PAIR_RULES = {
    "max_min": "best vs worst (RLHFlow max_min; INPO's best-of-K vs worst-of-K)",
    "max_random": "best vs a uniformly random other sample",
    "max_second": "best vs the second best (RLHFlow max_max)",
    "length_penalized": "max_min on r - length_penalty x completion tokens (RLHFlow max_min_p)",
}


@dataclass(frozen=True)
class _Rule:
    summary: str


PAIR_RULE_TABLE = Table("pair rule", {k: _Rule(v) for k, v in PAIR_RULES.items()})
"""`align ls pair-rules`."""


@dataclass
class RoundsSection:
    rounds: int = option(3, "iterations T")
    prompts_per_round: int = option(64, "prompts sampled in each round (disjoint slices of the shuffled prompts)")
    samples_per_prompt: int = option(4, "K completions per prompt")
    max_new_tokens: int = option(128, "tokens per completion")
    temperature: float = option(1.0, "sampling temperature (RLHFlow: 1.0)")
    top_p: float = option(1.0, "nucleus sampling (1 = off)")
    seed: int = option(0, "sampling seed (per round and sample)")
    pair_rule: PairRule = option("max_min", "how a prompt's K samples become one pair (module docstring)")
    length_penalty: float = option(0.0, "length_penalized: reward penalty per completion token")
    reference: Literal["initial", "previous"] = option(
        "previous", "DPO reference of round t: the initial model, or π_t (the released RLHFlow loop)"
    )
    data: Literal["current", "cumulative"] = option("current", "train on this round's pairs, or all rounds' so far")
    ranking: Literal["round_robin", "knockout"] = option(
        "round_robin", "a pairwise oracle ranks the K samples by round robin (K(K-1)/2 comparisons) or knockout (K-1)"
    )

    def check(self) -> list[str]:
        p = []
        for name in ("rounds", "prompts_per_round", "max_new_tokens"):
            if getattr(self, name) < 1:
                p.append(f"{name}: must be >= 1")
        if self.samples_per_prompt < 2:
            p.append(f"samples_per_prompt: a pair needs K >= 2, got {self.samples_per_prompt}")
        if self.temperature <= 0:
            p.append("temperature: must be > 0 (identical greedy samples make no pairs)")
        if self.length_penalty < 0:
            p.append("length_penalty: must be >= 0")
        return p


@dataclass
class IterativeConfig:
    kind: Literal["iterative"] = option("iterative", "config kind (fixed)")
    model: str = option(DEFAULT_MODEL, "initial policy π_1 (and the `initial` reference)")
    output_dir: str = option("runs/iterative_dpo", "run directory (round_<t>/ per round)")
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


# --- pair selection ----------------------------------------------------------------------------------------


def select_pair(
    rewards: list[float],
    lengths: list[int],
    rule: PairRule,
    length_penalty: float = 0.0,
    rng: random.Random | None = None,
) -> tuple[int, int] | None:
    """(chosen index, rejected index) of one prompt's K samples, or None when the pair ties (dropped).

    Ties in the maximum go to the earliest sample. The rewards must be finite (the caller drops NaN groups)."""
    K = len(rewards)
    if K < 2:
        return None
    score = (
        [r - length_penalty * n for r, n in zip(rewards, lengths, strict=True)]
        if rule == "length_penalized"
        else rewards
    )
    best = max(range(K), key=lambda i: (score[i], -i))
    if rule in ("max_min", "length_penalized"):
        other = min(range(K), key=lambda i: (score[i], i))
    elif rule == "max_second":
        other = max((i for i in range(K) if i != best), key=lambda i: (score[i], -i))
    elif rule == "max_random":
        rng = rng or random.Random(0)
        other = rng.choice([i for i in range(K) if i != best])
    else:
        raise ValueError(f"unknown pair rule {rule!r}")
    if score[best] == score[other]:
        return None
    return best, other


# --- the run ---------------------------------------------------------------------------------------------------


def _policy_dir(report: dict[str, Any]) -> str:
    return str(report["policy_dir"])


def round_prompts(prompts: list[PromptOnly], t: int, n: int) -> list[PromptOnly]:
    """Round t's (1-based) slice of the shuffled prompts, wrapping when they run out."""
    start = ((t - 1) * n) % len(prompts)
    return [prompts[(start + i) % len(prompts)] for i in range(n)]


def sample_round(cfg: IterativeConfig, policy: str, prompts: list[PromptOnly], t: int, path: Path) -> dict[str, Any]:
    """K completions per prompt from `policy` (cached in `path`, reused only for the same policy, prompts and
    sampling settings)."""
    r = cfg.rounds
    key = {
        "policy": policy,
        "prompts": [p.id for p in prompts],
        "sampling": [r.samples_per_prompt, r.temperature, r.top_p, r.max_new_tokens, r.seed, t],
    }
    if path.exists():
        cached = json.loads(path.read_text(encoding="utf-8"))
        if cached.get("key") == key:
            return cached
    from prefalign.generation import SamplingParams, make_engine
    from prefalign.models.hub import load_causal_lm, load_tokenizer
    from prefalign.models.precision import decide_precision

    bf16 = decide_precision(cfg.train.precision).value != "fp32"
    model = load_causal_lm(policy, dtype="bfloat16" if bf16 else "float32")
    engine = make_engine(model, load_tokenizer(policy))
    res = engine.generate(
        [p.prompt for p in prompts],
        SamplingParams(
            n=r.samples_per_prompt,
            temperature=r.temperature,
            top_p=r.top_p,
            max_new_tokens=r.max_new_tokens,
            seed=r.seed * 1_000_003 + t,
        ),
    )
    data = {
        "key": key,
        "policy": policy,
        "prompts": [p.to_dict() for p in prompts],
        "texts": [[c.text for c in o.completions] for o in res.outputs],
        "lengths": [[len(c.token_ids) for c in o.completions] for o in res.outputs],
        "seconds": res.timings.total_s,
    }
    path.write_text(json.dumps(data), encoding="utf-8")
    return data


def score_round(
    rewards: RewardSet, prompts: list[PromptOnly], texts: list[list[str]], method: str
) -> list[list[float]]:
    """(P, K) rewards: Σ w_k r_k of the pointwise components, or the pairwise oracle's ranking score."""
    if rewards.pairwise:
        from reward_models.ranking import rank

        scorer = next(c.scorer for c in rewards.components if c.kind == "pairwise")
        out = []
        for p, group in zip(prompts, texts, strict=True):
            ranking = rank(scorer, p.prompt, [[Message("assistant", x)] for x in group], method)  # type: ignore[arg-type]
            out.append([float(s) for s in ranking.scores])
        return out
    K = len(texts[0])
    flat = [x for g in texts for x in g]
    records = [p for p in prompts for _ in range(K)]
    comps = rewards.score(records, flat)
    r = weighted_sum(comps, rewards.weights).view(len(prompts), K)
    return [[float(v) for v in row] for row in r.tolist()]


def build_pairs(
    cfg: IterativeConfig, prompts: list[PromptOnly], data: dict[str, Any], scores: list[list[float]], t: int
) -> tuple[list[PreferencePair], dict[str, int]]:
    rng = random.Random(cfg.rounds.seed * 7919 + t)
    pairs: list[PreferencePair] = []
    counts = {"prompts": len(prompts), "pairs": 0, "dropped_tie": 0, "dropped_nan": 0}
    for p, texts, lengths, r in zip(prompts, data["texts"], data["lengths"], scores, strict=True):
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
    counts["pairs"] = len(pairs)
    return pairs, counts


def eval_policy(cfg: IterativeConfig, policy: str, path: Path) -> dict[str, Any] | None:
    """Greedy held-out completions of `policy`, graded by the gold graders (cached in `path`)."""
    if cfg.eval.limit <= 0:
        return None
    key = {"policy": policy, "eval": to_dict(cfg.eval)}
    if path.exists():
        cached = json.loads(path.read_text(encoding="utf-8"))
        if cached.get("key") == key:
            return cached
    from align.evaluate import grade_all, load_prompts, summarize
    from prefalign.generation import SamplingParams, make_engine
    from prefalign.models.hub import load_causal_lm, load_tokenizer
    from prefalign.models.precision import decide_precision

    bf16 = decide_precision(cfg.train.precision).value != "fp32"
    prompts = load_prompts(cfg.eval.prompts, cfg.eval.limit)
    engine = make_engine(load_causal_lm(policy, dtype="bfloat16" if bf16 else "float32"), load_tokenizer(policy))
    res = engine.generate(
        [p.prompt for p in prompts], SamplingParams(n=1, temperature=0.0, max_new_tokens=cfg.eval.max_new_tokens)
    )
    grades = grade_all(prompts, [o.completions[0].text for o in res.outputs])
    s = summarize(grades, prompts)
    out = {
        "key": key,
        "policy": policy,
        "overall": s["overall"],
        "per_prompt": [g["overall"] for g in grades],
        "by_family": s["by_family"],
    }
    path.write_text(json.dumps(out), encoding="utf-8")
    return out


def round_train_config(cfg: IterativeConfig, t: int, policy: str, pairs_file: Path) -> Any:
    from preference_data.sources import DataConfig

    from .train import PreviousSection, TrainConfig

    spec = LOSSES[cfg.loss.name]
    if spec.needs_previous_iterate:  # INPO: π_ref = the initial model, π_t = this round's starting policy
        reference = ReferenceSection(kind="auto", model=cfg.model)
        previous = PreviousSection(model=policy)
    elif not spec.needs_reference:
        reference, previous = ReferenceSection(kind="none"), PreviousSection()
    else:
        ref_model = cfg.model if cfg.rounds.reference == "initial" else policy
        reference, previous = (
            ReferenceSection(kind="auto", model=None if ref_model == policy else ref_model),
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


def run(cfg: IterativeConfig, resume: bool = False) -> dict[str, Any]:
    """Run every round as `cfg` says (finished rounds are read back); return the report."""
    import time

    from prefalign.config import dump_yaml
    from prefalign.training.report import write_report

    from . import train as offline
    from .online.evaluation import gold_eval_report, log_row
    from .online.rollout import load_train_prompts
    from .pipeline import finished_run

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
    ev0 = eval_policy(cfg, policy, root / "eval_round_0.json")
    if ev0 is not None:
        evals["0"] = ev0
        log_row(metrics, {"step": 0, "round": 0, "eval_gold/overall": ev0["overall"]})
    all_pairs: list[PreferencePair] = []
    rounds_report = []
    steps = 0
    for t in range(1, cfg.rounds.rounds + 1):
        rdir = root / f"round_{t}"
        rdir.mkdir(exist_ok=True)
        rp = round_prompts(prompts, t, cfg.rounds.prompts_per_round)
        print(
            f"round {t}/{cfg.rounds.rounds}: sampling {cfg.rounds.samples_per_prompt} x {len(rp)} from {policy}",
            flush=True,
        )
        data = sample_round(cfg, policy, rp, t, rdir / "samples.json")
        scores_path = rdir / "scores.json"
        skey = {"samples": data["key"], "reward": cfg.reward, "ranking": cfg.rounds.ranking}
        cached = json.loads(scores_path.read_text(encoding="utf-8")) if scores_path.exists() else {}
        if cached.get("key") == skey:
            scores = cached["scores"]
        else:
            scores = score_round(rewards, rp, data["texts"], cfg.rounds.ranking)
            scores = [[None if not math.isfinite(x) else x for x in r] for r in scores]
            scores_path.write_text(json.dumps({"key": skey, "scores": scores}), encoding="utf-8")
        scores = [[math.nan if x is None else x for x in r] for r in scores]
        pairs, counts = build_pairs(cfg, rp, data, scores, t)
        all_pairs.extend(pairs)
        use = all_pairs if cfg.rounds.data == "cumulative" else pairs
        if not use:
            raise UserError(f"round {t}: no pairs left ({counts}); raise samples_per_prompt or the temperature")
        pairs_file = rdir / "pairs.jsonl"
        pairs_file.write_text("".join(json.dumps(p.to_dict()) + "\n" for p in use), encoding="utf-8")
        tcfg = round_train_config(cfg, t, policy, pairs_file)
        out = Path(tcfg.output_dir)
        if finished_run(out, tcfg):
            report = json.loads((out / "report.json").read_text(encoding="utf-8"))
            print(f"round {t}: already trained ({out})", flush=True)
        else:
            report = offline.run(tcfg, resume=resume)
        steps += int(report["steps"])
        policy = _policy_dir(report)
        ev = eval_policy(cfg, policy, rdir / "eval.json")
        row = {
            "step": steps,
            "round": t,
            "reward": _mean([x for r in scores for x in r]),
            "reward_best": _mean([max(r) for r in scores if all(math.isfinite(x) for x in r)]),
            **{f"pairs/{k}": v for k, v in counts.items()},
            "train_loss": report.get("train_loss"),
        }
        if ev is not None:
            evals[str(t)] = ev
            row["eval_gold/overall"] = ev["overall"]
        log_row(metrics, row)
        rounds_report.append(
            {
                "round": t,
                **counts,
                "train_pairs": len(use),
                "steps": report["steps"],
                "policy": policy,
                "sample_reward": row["reward"],
                "eval": ev["overall"] if ev else None,
            }
        )
        print(
            f"round {t}: {counts['pairs']} pairs ({counts['dropped_tie']} ties, {counts['dropped_nan']} NaN dropped); "
            f"{report['steps']} steps" + (f"; held-out gold {ev['overall']:.4f}" if ev else ""),
            flush=True,
        )
    final = evals.get(str(cfg.rounds.rounds))
    eval_report = gold_eval_report(evals, final)
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
        "eval": eval_report,
        "run_report": str(root / "report.html"),
        "dashboard_first": ["eval_gold/overall", "reward", "pairs/pairs"],
        "config": to_dict(cfg),
    }
    (root / "report.json").write_text(json.dumps(report, indent=2, default=str), encoding="utf-8")
    write_report(root)
    return report


def _mean(xs: list[float]) -> float:
    ok = [x for x in xs if math.isfinite(x)]
    return sum(ok) / len(ok) if ok else math.nan


def summary_lines(report: dict[str, Any]) -> list[str]:
    lines = [
        f"iterative {report['loss']['name']}: {len(report['rounds'])} rounds, {report['steps']} steps in "
        f"{report['seconds']}s (reference {report['reference']}, data {report['data']}, pairs {report['pair_rule']})"
    ]
    for r in report["rounds"]:
        lines.append(
            f"  round {r['round']}: {r['pairs']} pairs ({r['dropped_tie']} ties, {r['dropped_nan']} NaN dropped), "
            f"{r['steps']} steps, sample reward {r['sample_reward']:.4f}"
            + (f", held-out gold {r['eval']:.4f}" if r["eval"] is not None else "")
        )
    ev = report.get("eval") or {}
    if ev:
        lo, hi = ev["delta_ci95"]
        lines.append(
            f"held-out gold overall on {ev['prompts']} prompts: {ev['initial']:.4f} -> {ev['final']:.4f} "
            f"(delta {ev['delta']:+.4f}, 95% CI [{lo:+.4f}, {hi:+.4f}])"
        )
    lines.append(f"saved to {report['policy_dir']}")
    return lines


__all__ = ["IterativeConfig", "PAIR_RULES", "PAIR_RULE_TABLE", "run", "select_pair", "summary_lines"]
