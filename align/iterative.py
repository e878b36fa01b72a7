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
  reach      how many of the K samples the gold graders call right, per family (suite prompts; a report line,
             `align.rounds.reach`): what any ranker of the round can choose among, nothing ranked by it.
  score      the reward phase (`align.online.reward`: the `reward:` components, e.g. a BT RM or a judge, Σ w_k r_k),
             or one pairwise preference oracle (the pairwise preference model, a judge) ranking the K samples with
             `reward_models.ranking.rank` (round robin or knockout).
  pairs      `pair_rule`: max_min (best vs worst), max_random (best vs a random other), max_second (best vs the
             second best), length_penalized (max_min on r − λ·tokens); `reference_bonus: δ` ranks the data's reference
             at r + δ, so a sample displaces it only by beating it by more than δ. A prompt whose chosen and rejected
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
killed run ends with the same weights as one that was not. With `rounds.keep_merged: last` (the quickstart's) the
earlier rounds' merged policies (each the next round's start) are deleted once the last round has finished; their
adapters stay, and a later run that needs one trains that round again.
"""

from __future__ import annotations

import math
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefalign.config import dump_yaml, to_dict
from prefalign.errors import UserError
from prefalign.files import write_json, write_jsonl
from prefalign.models.hub import load_tokenizer
from prefalign.stats import finite_mean
from prefalign.training.metrics import ALERTS_FILE, HACKING_KEY, append_alert
from prefalign.training.report import write_report
from preference_data.records import PreferencePair, PromptOnly
from reward_models.scorers import load_scorer

from . import train as offline
from .losses import LOSSES
from .online.evaluation import eval_lines, gold_eval_report, hacking_check, log_row
from .online.rollout import load_train_prompts
from .pipeline import finished_run, read_report, record_inputs
from .rewards import RewardSet
from .rounds.config import DATA_CANDIDATES, IterativeConfig, PairRule, RoundsSection
from .rounds.pairs import (
    PAIR_RULES,
    PairRuleSpec,
    build_pairs,
    data_text,
    dropped_text,
    keep_largest,
    score_round,
    scores_of_round,
    select_pair,
    select_pairs,
    verify_round,
)
from .rounds.reach import FamilyReach, reach_json, reach_lines, rollout_reach
from .rounds.sample import Pool, RoundEngine, candidate_pool, round_prompts, sample_key, sample_round
from .rounds.train import eval_policy, reference_pass, round_train_config


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
    verifier: Any = None,
) -> Round:
    """Round t from `policy`: sample, score, pair (verified by `verifier`, a pairwise judge, when the config names
    one), train (or read the finished training back), evaluate."""
    rdir = Path(cfg.output_dir) / f"round_{t}"
    rdir.mkdir(parents=True, exist_ok=True)
    rp = round_prompts(prompts, t, cfg.rounds.prompts_per_round)
    print(
        f"round {t}/{cfg.rounds.rounds}: sampling {cfg.rounds.samples_per_prompt} x {len(rp)} from {policy}", flush=True
    )
    rollout, sample_key = sample_round(cfg, policy, rp, t, rdir / "samples.json", engines)
    pool = candidate_pool(cfg, rollout, load_tokenizer(policy))
    scores, order = scores_of_round(cfg, rewards, pool, rdir / "scores.json", sample_key)
    pairs, counts = select_pairs(cfg, pool, scores, t, order)
    if verifier is not None:
        pairs, verified = verify_round(cfg, verifier, pairs, rdir / "verify.json")
        counts |= verified
    pairs = keep_largest(pairs, cfg.rounds.keep_in(t), counts, cfg.rounds.keep_per_family, cfg.rounds.keep_ordered)
    on_policy = [
        x for r, sampled in zip(scores, pool.on_policy, strict=True) for x, on in zip(r, sampled, strict=True) if on
    ]
    use = [*earlier, *pairs] if cfg.rounds.data == "cumulative" else pairs
    if not use:
        raise UserError(f"round {t}: no pairs left ({counts}); raise samples_per_prompt or the temperature")
    pairs_file = rdir / "pairs.jsonl"
    write_jsonl(pairs_file, (p.to_dict() for p in use))
    tcfg = round_train_config(cfg, t, policy, pairs_file, len(use))
    out = Path(tcfg.output_dir)
    report = read_report(out) if finished_run(out, tcfg) else None
    if report is not None and Path(report["policy_dir"]).exists():  # keep_merged: last may have deleted it
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
        "reach": reach_json(rollout_reach(rollout)),
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
    verifier = load_scorer(cfg.rounds.verify) if cfg.rounds.verify is not None else None
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
        r = run_round(cfg, rewards, prompts, policy, t, all_pairs, resume, engines, verifier)
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
    if cfg.rounds.keep_merged == "last":
        drop_earlier_merged(rounds_report, policy)
    write_json(root / "report.json", report, indent=2, default=str)
    write_report(root)
    return report


def drop_earlier_merged(rounds: list[dict[str, Any]], final: str) -> None:
    """Delete the merged policies of the rounds before the last (`rounds.keep_merged: last`); a round's adapter is
    kept. A round whose merged policy is gone is trained again when a later run needs it (`run_round`)."""
    freed = 0
    for r in rounds:
        path = Path(r["policy"])
        if str(path) != final and path.name == "merged" and path.is_dir():
            freed += sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
            shutil.rmtree(path)
    if freed:
        print(f"deleted the earlier rounds' merged policies ({freed / 2**20:.0f} MB; keep_merged: last)", flush=True)


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
    lines += reach_lines(
        {r["round"]: {f: FamilyReach(**x) for f, x in r.get("reach", {}).items()} for r in report["rounds"]}
    )
    lines += eval_lines(report.get("eval") or {})
    lines.append(f"saved to {report['policy_dir']}")
    return lines


__all__ = ["PAIR_RULES", "IterativeConfig", "RoundsSection", "run", "select_pair", "summary_lines"]


__all__ = [
    "DATA_CANDIDATES",
    "PAIR_RULES",
    "IterativeConfig",
    "PairRule",
    "PairRuleSpec",
    "Pool",
    "Round",
    "RoundEngine",
    "RoundsSection",
    "build_pairs",
    "candidate_pool",
    "data_text",
    "dropped_text",
    "eval_policy",
    "keep_largest",
    "reference_pass",
    "round_prompts",
    "round_train_config",
    "run",
    "run_round",
    "sample_key",
    "sample_round",
    "score_round",
    "scores_of_round",
    "select_pair",
    "select_pairs",
    "summary_lines",
    "verify_round",
]
