"""Held-out evaluation: greedy answers to held-out prompts graded by the gold graders (the judge of every result,
never the reward), shared by the online loop, the iterative loop and their reports.

An evaluation is a dict (it goes to evals.json as is): overall, objectives, by_family, safety_rates, per_prompt (the
overall score of each prompt, for paired intervals), prompt_ids, mean_length, and, given the run's reward components,
`reward`: the learned reward Σ_k w_k r_k of the same answers (its mean over the answers it scored) and
`reward_components`.
The two side by side at every evaluation show reward hacking: the learned reward rising while gold falls
(`prefalign.training.metrics.reward_hacking`). The final evaluation against the initial one ("0") gives the run's
headline: the means, the final's bootstrap interval and the paired bootstrap interval of the difference.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from prefalign.generation import GenerationEngine, SamplingParams
from prefalign.groupstats import finite_mean
from prefalign.stats import bootstrap_ci, paired_bootstrap
from prefalign.training.metrics import reward_hacking
from preference_data.records import PromptOnly
from preference_data.suite.heldout import grade_all, load_prompts, summarize
from reward_models.composition import weighted_sum

from ..rewards import RewardSet
from .config import PolicyEvalSection


def greedy(
    engine: GenerationEngine, source: str, limit: int, max_new_tokens: int
) -> tuple[list[PromptOnly], list[str], list[int]]:
    """Greedy answers to `limit` held-out prompts (family-balanced): the prompts, the texts, their token counts."""
    prompts = load_prompts(source, limit)
    res = engine.generate(
        [p.prompt for p in prompts], SamplingParams(n=1, temperature=0.0, max_new_tokens=max_new_tokens)
    )
    done = [o.completions[0] for o in res.outputs]
    return prompts, [c.text for c in done], [len(c.token_ids) for c in done]


def gold_eval(
    engine: GenerationEngine, sec: PolicyEvalSection, limit: int | None = None, rewards: RewardSet | None = None
) -> dict[str, Any] | None:
    """The held-out gold evaluation of the engine's current weights (None when `limit` is 0), with the learned
    reward of the same answers when `rewards` (pointwise components) is given."""
    limit = sec.limit if limit is None else limit
    if limit <= 0:
        return None
    prompts, texts, lengths = greedy(engine, sec.prompts, limit, sec.max_new_tokens)
    grades = grade_all(prompts, texts)
    s = summarize(grades, prompts)
    out = {
        "overall": s["overall"],
        "objectives": {k: v for k, v in s.items() if isinstance(v, float)},
        "by_family": s["by_family"],
        "safety_rates": s["safety_rates"],
        "per_prompt": [g["overall"] for g in grades],
        "prompt_ids": [p.id for p in prompts],  # for paired comparisons with other saved evaluations
        "mean_length": sum(lengths) / max(len(lengths), 1),
    }
    if rewards is not None and not rewards.pairwise:
        R = rewards.score(prompts, texts)
        out["reward"] = finite_mean(weighted_sum(R, rewards.weights))
        out["reward_components"] = {n: finite_mean(R[:, k]) for k, n in enumerate(rewards.names)}
    return out


def hacking_check(evals: dict[str, Any]) -> str | None:
    """The reward-hacking alert over a run's evaluations so far (keys: steps or rounds), or None."""
    points = [
        (int(k), v["reward"], v["overall"])
        for k, v in sorted(evals.items(), key=lambda kv: int(kv[0]))
        if v.get("reward") is not None
    ]
    return reward_hacking(points)


def component_point(
    engine: GenerationEngine, rewards: RewardSet, source: str, limit: int, max_new_tokens: int
) -> list[float]:
    """The components' means over greedy answers to `limit` held-out prompts (the hypervolume rule's point)."""
    prompts, texts, _ = greedy(engine, source, limit, max_new_tokens)
    R = rewards.score(prompts, texts)
    return [finite_mean(R[:, k]) for k in range(R.shape[1])]


def gold_eval_report(evals: dict[str, Any], final: dict[str, Any] | None) -> dict[str, Any]:
    """The final held-out gold score against the initial one ("0"): means, the final's bootstrap interval, the paired
    bootstrap interval of the difference, and the curve over `evals`' keys (steps or rounds); {} without both."""
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
        "initial_objectives": init.get("objectives", {}),
        "final_objectives": final.get("objectives", {}),
        "initial_safety": init.get("safety_rates"),
        "final_safety": final.get("safety_rates"),
        "reward_initial": init.get("reward"),
        "reward_final": final.get("reward"),
        "reward_components_initial": init.get("reward_components"),
        "reward_components_final": final.get("reward_components"),
    }


def eval_lines(ev: dict[str, Any]) -> list[str]:
    """The held-out evaluation of a run (online or iterative): gold overall with its interval, the learned reward of
    the same answers, and each gold objective beside each learned component, initial -> final."""
    if not ev:
        return []
    lo, hi = ev["delta_ci95"]
    lines = [
        f"held-out gold overall on {ev['prompts']} prompts: {ev['initial']:.4f} -> {ev['final']:.4f} "
        f"(delta {ev['delta']:+.4f}, 95% CI [{lo:+.4f}, {hi:+.4f}])"
    ]
    if ev.get("reward_initial") is not None and ev.get("reward_final") is not None:
        lines.append(f"  learned reward of the same answers: {ev['reward_initial']:+.4f} -> {ev['reward_final']:+.4f}")
    gold = [
        f"{k} {v:.3f} -> {ev['final_objectives'].get(k, math.nan):.3f}" for k, v in ev["initial_objectives"].items()
    ]
    if gold:
        lines.append("  gold objectives: " + ", ".join(gold))
    comps = ev.get("reward_components_initial") or {}
    final = ev.get("reward_components_final") or {}
    if comps:
        lines.append(
            "  learned components: "
            + ", ".join(f"{k} {v:+.3f} -> {final.get(k, math.nan):+.3f}" for k, v in comps.items())
        )
    return lines


def log_row(path: Path, row: dict[str, Any]) -> None:
    """Append one metrics row (JSONL)."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(row, default=float) + "\n")


__all__ = ["component_point", "eval_lines", "gold_eval", "gold_eval_report", "greedy", "hacking_check", "log_row"]
