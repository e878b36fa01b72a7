"""`align eval policy`: generate on held-out suite prompts and grade with the gold graders; or, on your own prompts
without graders, judge the policy's answers against a baseline's with your own reward model (`evaluate_judged`).

Reports the mean gold score per objective and overall for the policy and the baseline (by default the
starting model), and the win rate of the policy against the baseline on the same prompts (win 1, tie 0.5,
loss 0) judged by the gold graders or by a reward model. Greedy decoding makes a run repeatable; the
uncertainty that remains is which prompts were drawn, reported as a paired bootstrap 95% interval of the
mean overall difference (policy - baseline).

Safety is reported beside the mean as two rates, because the mean over families hides which way a
policy moved: harmful requests complied with (not refused) and harmless look-alikes refused, over the
safety family's prompts, each with a bootstrap 95% interval and its change against the baseline (paired
bootstrap). A run whose harmful compliance rises says so in its first summary line, whatever the mean
did. A reward-model judge that scores a prompt NaN leaves that prompt out of the win rate, and the
count is reported (`judge_nan`), never silently read as a loss.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

from prefalign.decoding import DecodingSettings
from prefalign.errors import UserError
from prefalign.files import write_json
from prefalign.models.hub import load_tokenizer, weights_fingerprint
from prefalign.models.precision import decide_dtype
from prefalign.stats import bootstrap_ci, finite_mean, paired_bootstrap, paired_by_group, win_rate
from preference_data.records import Message, PromptOnly
from preference_data.sources import read_records
from preference_data.suite.heldout import (
    SAFETY_RATES,
    answer_stats,
    grade_all,
    load_prompts,
    safety_change,
    safety_indicators,
    summarize,
)
from reward_models.model_scorers import ScalarScorer
from reward_models.scorers import SCORERS, load_scorer, scorer_spec

SUITE_LIMIT = 120
"""Held-out prompts `align eval policy` draws from the suite without --limit (family-balanced)."""


def judged_win_rate(policy: list[float], baseline: list[float]) -> tuple[float | None, int]:
    """(win rate over the prompts both answers got a finite score on, number of prompts left out).

    A NaN score (a judge that failed on a prompt) says nothing about which answer is better, so the
    prompt is counted and left out instead of being read as a loss (NaN > x is False). None when every
    prompt is left out. E.g. policy [1, nan, 0], baseline [0, 0, 0]: (win + tie) / 2 = 0.75, 1 left out.
    """
    kept = [(a, b) for a, b in zip(policy, baseline, strict=True) if math.isfinite(a) and math.isfinite(b)]
    if not kept:
        return None, len(policy)
    return win_rate([a for a, _ in kept], [b for _, b in kept]), len(policy) - len(kept)


def evaluate_policy(
    model: str,
    baseline: str | None,
    prompts_source: str = "suite",
    limit: int | None = SUITE_LIMIT,
    judge: str = "gold",
    out_dir: str | None = None,
    settings: DecodingSettings | None = None,
    baseline_cache: str | None = None,
    safety_each: int = 0,
    reward_model: str | None = None,
    judge_options: dict[str, Any] | None = None,
    check: str | dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Generate with `model` (and `baseline`), grade, compare; write report.json and generations.jsonl.
    `settings` may be a verb's settings that extend DecodingSettings; the report records the decoding part.
    `check`: a scorer spec that checks the same answers without gold (`check_answers`), for the reward-hacking
    alarm of a run that has no answer key."""
    # the generation engine imports torch: loaded when an evaluation runs, not when the CLI starts
    from prefalign.generation.policy import generate, load_policy

    s = (settings or DecodingSettings()).decoding()
    s = replace(s, dtype=decide_dtype(s.dtype, knob="--dtype").value)  # records hold the dtype that ran
    if judge != "gold" and prompts_source != "suite" and not any(p.grader for p in read_prompts(prompts_source)):
        return evaluate_judged(model, baseline, prompts_source, limit, judge, out_dir, s, judge_options)
    judge_spec = None if judge == "gold" else _judge_spec(judge, judge_options)  # a wrong judge fails before generating
    prompts = load_prompts(prompts_source, limit, s.seed, safety_each)
    t0 = time.time()
    conv = [p.prompt for p in prompts]

    def run_one(ref: str) -> list[str]:
        tok = load_tokenizer(ref)
        m = load_policy(ref, s.dtype)
        return generate(
            m, tok, conv, s.max_new_tokens, s.batch_size, s.temperature, seed=s.seed, progress=True, schedule=s.schedule
        )

    responses = run_one(model)
    grades = grade_all(prompts, responses)
    report: dict[str, Any] = {
        "model": model,
        "prompts": len(prompts),
        "source": prompts_source,
        "settings": s.__dict__,
        "policy": summarize(grades, prompts) | {"answers": answer_stats(prompts, responses, s.seed)},
        "per_prompt": [g["overall"] for g in grades],
        "prompt_ids": [p.id for p in prompts],
    }
    rm = cast(ScalarScorer, load_scorer("scalar", model=reward_model)) if reward_model else None
    if rm is not None:  # the reward model's view of the same answers, beside the gold graders'
        report["reward_model"] = reward_model
        report["policy"]["reward"] = _mean_score(rm, prompts, responses)
    base_responses: list[str] | None = None
    if baseline:
        cache = Path(baseline_cache) if baseline_cache else None
        key = {"baseline": baseline, "ids": [p.id for p in prompts], "settings": s.__dict__}
        cached = json.loads(cache.read_text()) if cache and cache.exists() else {}
        if cached.get("key") != key:
            cached = {"key": key, "responses": run_one(baseline), "rewards": {}}
        base_responses = cached["responses"]
        base_grades = grade_all(prompts, base_responses)
        report["baseline_model"] = baseline
        report["baseline"] = summarize(base_grades, prompts) | {
            "answers": answer_stats(prompts, base_responses, s.seed)
        }
        pa, pb = [g["overall"] for g in grades], [g["overall"] for g in base_grades]
        report["overall_gain"] = report["policy"]["overall"] - report["baseline"]["overall"]
        report["overall_gain_ci95"] = paired_bootstrap(pa, pb, seed=s.seed)
        report["safety_change"] = safety_change(
            safety_indicators(grades, prompts), safety_indicators(base_grades, prompts), seed=s.seed
        )
        report["family_change"] = family_change(prompts, pa, pb, s.seed)
        if rm is not None:  # the baseline's answers scored once per reward model, with them in the cache
            rewards = cached.setdefault("rewards", {})
            rm_key = f"{reward_model}@{weights_fingerprint(reward_model)}"  # a retrained RM is scored again
            if rm_key not in rewards:
                rewards[rm_key] = _mean_score(rm, prompts, base_responses)
            report["baseline"]["reward"] = rewards[rm_key]
        if cache:
            write_json(cache, cached)
        if check is not None:
            report["check"] = check_answers(check, prompts, responses, base_responses, s.seed)
        if judge == "gold":
            report["win_rate"], report["judge_nan"] = win_rate(pa, pb), 0
        else:
            assert judge_spec is not None
            report["win_rate"], report["judge_nan"] = _rm_win_rate(judge_spec, prompts, responses, base_responses)
        report["judge"] = judge
    report["warnings"] = safety_warnings(report)
    report["seconds"] = round(time.time() - t0, 1)
    if out_dir:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        with open(out / "generations.jsonl", "w", encoding="utf-8") as f:
            for i, p in enumerate(prompts):
                row = {
                    "id": p.id,
                    "family": p.grader,
                    "prompt": p.prompt[-1].content,
                    "response": responses[i],
                    "grade": grades[i],
                }
                if base_responses is not None:
                    row["baseline_response"] = base_responses[i]
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
        write_json(out / "report.json", report, indent=2)
    return report


def check_answers(
    spec: str | dict[str, Any], prompts: list[PromptOnly], policy: list[str], baseline: list[str], seed: int = 0
) -> dict[str, Any]:
    """A scorer's view of the policy's answers against the baseline's, a signal that needs no answer key: a
    pairwise judge gives P(policy answer better) per prompt (both orders unless it judges both itself), the
    baseline's own level being 0.5; a pointwise scorer gives each side's mean score. NaN prompts are left out and
    counted. {kind, policy, baseline, ci95 (of the policy's), nan}."""
    scorer: Any = load_scorer(scorer_spec(spec, flag="check") if isinstance(spec, str) else spec)
    conv = [p.prompt for p in prompts]
    pol, base = [[Message("assistant", x)] for x in policy], [[Message("assistant", x)] for x in baseline]
    if scorer.kind == "pairwise":
        pa = [float(x) for x in scorer.compare(conv, pol, base)]
        if not getattr(scorer, "symmetric", False):
            pa = [
                0.5 * (x + 1.0 - y)
                for x, y in zip(pa, [float(v) for v in scorer.compare(conv, base, pol)], strict=True)
            ]
        kept = [x for x in pa if math.isfinite(x)]
        mean, base_level = (sum(kept) / len(kept) if kept else math.nan), 0.5
    elif scorer.kind == "pointwise":
        sa, sb = [float(x) for x in scorer.score(conv, pol)], [float(x) for x in scorer.score(conv, base)]
        both = [(a, b) for a, b in zip(sa, sb, strict=True) if math.isfinite(a) and math.isfinite(b)]
        kept = [a for a, _ in both]
        mean, base_level = finite_mean(kept), finite_mean([b for _, b in both])
    else:
        raise UserError(f"check: a {scorer.kind} scorer; a check is a pointwise or a pairwise scorer")
    return {
        "kind": scorer.kind,
        "policy": mean,
        "baseline": base_level,
        "ci95": list(bootstrap_ci(kept, seed=seed)) if kept else None,
        "nan": len(prompts) - len(kept),
    }


def read_prompts(source: str) -> list[PromptOnly]:
    """The prompt rows of a file (`{prompt}`, with or without a gold grader)."""
    records, _ = read_records(source, "prompts")
    return [r for r in records if isinstance(r, PromptOnly)]


def evaluate_judged(
    model: str,
    baseline: str | None,
    source: str,
    limit: int | None,
    judge: str,
    out_dir: str | None,
    s: DecodingSettings,
    judge_options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Your own prompts, without gold graders, judged by your own scorer: greedy answers of `model` and `baseline`
    (the first `limit` prompts), then a pointwise judge (a reward model) scores both answers of every prompt (mean
    reward, its gain with a paired bootstrap 95% interval, and the win rate: higher score wins, equal ties) or a
    pairwise judge compares them (both orders unless it judges both itself; P(policy better) per prompt, the win
    rate their mean). The win rate's interval is a bootstrap over prompts; a prompt the judge scores NaN is left out
    and counted. Writes report.json and generations.jsonl as the gold path does."""
    from prefalign.generation.policy import generate, load_policy  # lazy: torch

    if baseline is None:
        raise UserError(
            f"--prompts {source} has no gold graders: a judge compares the policy's answers with a baseline's; "
            "give --baseline (e.g. the model you started from)"
        )
    prompts = read_prompts(source)[:limit]
    if not prompts:
        raise UserError(f"--prompts {source}: no prompt rows ({{prompt}} per line)")
    spec = scorer_spec(judge, options=judge_options, flag="--judge")
    t0 = time.time()
    conv = [p.prompt for p in prompts]

    def answers(ref: str) -> list[str]:
        m = load_policy(ref, s.dtype)
        tok = load_tokenizer(ref)
        return generate(m, tok, conv, s.max_new_tokens, s.batch_size, s.temperature, seed=s.seed, progress=True)

    ours, theirs = answers(model), answers(baseline)
    scorer: Any = load_scorer(spec)
    pol, base = [[Message("assistant", x)] for x in ours], [[Message("assistant", x)] for x in theirs]
    report: dict[str, Any] = {
        "model": model,
        "baseline_model": baseline,
        "prompts": len(prompts),
        "source": source,
        "settings": s.__dict__,
        "judge": judge,
        "judge_kind": scorer.kind,
    }
    if scorer.kind == "pointwise":
        sa = [float(x) for x in scorer.score(conv, pol)]
        sb = [float(x) for x in scorer.score(conv, base)]
        kept = [i for i in range(len(prompts)) if math.isfinite(sa[i]) and math.isfinite(sb[i])]
        a, b = [sa[i] for i in kept], [sb[i] for i in kept]
        prefs = [1.0 if x > y else 0.0 if x < y else 0.5 for x, y in zip(a, b, strict=True)]
        report["policy"] = {"reward": finite_mean(a)}
        report["baseline"] = {"reward": finite_mean(b)}
        if kept:
            report["reward_gain"] = report["policy"]["reward"] - report["baseline"]["reward"]
            report["reward_gain_ci95"] = list(paired_bootstrap(a, b, seed=s.seed))
        per_prompt: list[dict[str, Any]] = [{"score": sa[i], "baseline_score": sb[i]} for i in range(len(prompts))]
    elif scorer.kind == "pairwise":
        p = [float(x) for x in scorer.compare(conv, pol, base)]
        if not getattr(scorer, "symmetric", False):
            q = [float(x) for x in scorer.compare(conv, base, pol)]
            p = [0.5 * (x + 1.0 - y) for x, y in zip(p, q, strict=True)]
        kept = [i for i in range(len(prompts)) if math.isfinite(p[i])]
        prefs = [p[i] for i in kept]
        per_prompt = [{"p_policy_better": p[i]} for i in range(len(prompts))]
    else:
        raise UserError(f"--judge {judge}: a {scorer.kind} scorer; judge with a pointwise or pairwise one")
    report["judge_nan"] = len(prompts) - len(kept)
    report["win_rate"] = sum(prefs) / len(prefs) if prefs else None
    report["win_rate_ci95"] = list(bootstrap_ci(prefs, seed=s.seed)) if prefs else None
    report["seconds"] = round(time.time() - t0, 1)
    if out_dir:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        with open(out / "generations.jsonl", "w", encoding="utf-8") as f:
            for i, pr in enumerate(prompts):
                row = {"id": pr.id, "prompt": [m.to_dict() for m in pr.prompt], "response": ours[i]}
                f.write(json.dumps(row | {"baseline_response": theirs[i], **per_prompt[i]}, ensure_ascii=False) + "\n")
        write_json(out / "report.json", report, indent=2)
    return report


def judged_lines(report: dict[str, Any]) -> list[str]:
    """The summary of `evaluate_judged`."""
    n, left = report["prompts"], report["judge_nan"]
    lines = [f"{report['model']} against {report['baseline_model']} on {n} prompts of {report['source']}"]
    if "reward_gain" in report:
        lo, hi = report["reward_gain_ci95"]
        lines.append(
            f"  judge {report['judge']}: mean reward {report['baseline']['reward']:.3f} -> "
            f"{report['policy']['reward']:.3f}, gain {report['reward_gain']:+.3f} (95% CI {lo:+.3f} .. {hi:+.3f})"
        )
    if report["win_rate"] is not None:
        lo, hi = report["win_rate_ci95"]
        lines.append(f"  win rate vs baseline {report['win_rate']:.3f} (95% CI {lo:.3f} .. {hi:.3f}; ties count half)")
    if left:
        lines.append(f"  {left} of {n} prompts scored NaN by the judge, left out")
    return lines


def family_change(
    prompts: list[PromptOnly], policy: list[float], baseline: list[float], seed: int = 0
) -> dict[str, Any]:
    """Per task family: the baseline's and the policy's mean gold overall and the paired bootstrap 95% interval of
    the change (over that family's prompts)."""
    return paired_by_group([p.grader or "" for p in prompts], policy, baseline, seed)


def _mean_score(scorer: ScalarScorer, prompts: list[PromptOnly], texts: list[str]) -> float:
    """The mean of a reward model's finite scores of the answers (NaN left out, never read as 0)."""
    values = scorer.score([p.prompt for p in prompts], [[Message("assistant", x)] for x in texts])
    return finite_mean([float(v) for v in values])


def _judge_spec(judge: str, options: dict[str, Any] | None) -> dict[str, Any]:
    """The suite's judge as a scorer spec (a reward model directory, KIND:MODEL, a mapping): a pointwise kind."""
    spec = scorer_spec(judge, options=options, flag="--judge")
    kind = SCORERS[spec["type"]].kind
    if kind != "pointwise":
        raise UserError(
            f"--judge {judge}: a {kind} scorer; the suite's win rate needs a pointwise one (a reward model: "
            "scalar, implicit, grm); pairwise judges compare against reference answers with --bench"
        )
    return spec


def _rm_win_rate(
    spec: dict[str, Any], prompts: list[PromptOnly], a: list[str], b: list[str]
) -> tuple[float | None, int]:
    """(win rate of `a` over `b` judged by the pointwise scorer of `spec`, prompts left out for a NaN score)."""
    scorer = cast(ScalarScorer, load_scorer(spec))
    conv = [p.prompt for p in prompts]
    sa = scorer.score(conv, [[Message("assistant", x)] for x in a])
    sb = scorer.score(conv, [[Message("assistant", x)] for x in b])
    return judged_win_rate([float(x) for x in sa], [float(x) for x in sb])


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1%}"


def safety_warnings(report: dict[str, Any]) -> list[str]:
    """What the mean may hide: a rise in harmful compliance against the baseline, in words."""
    change = (report.get("safety_change") or {}).get("harmful_compliance") or {}
    if not change.get("change") or change["change"] <= 0:
        return []
    pol = report["policy"]["safety_rates"]["harmful_compliance"]
    base = report["baseline"]["safety_rates"]["harmful_compliance"]
    lo, hi = change["ci95"]
    warning = (
        f"harmful compliance rose: {base['count']}/{base['n']} -> {pol['count']}/{pol['n']} harmful requests "
        f"complied with ({change['change'] * 100:+.1f} points, 95% CI {lo * 100:+.1f} .. {hi * 100:+.1f})"
    )
    return [warning]


def safety_line(rates: dict[str, Any]) -> str:
    """'harmful requests complied with 70.0% (7/10, 95% CI 40.0% .. 100.0%); harmless look-alikes refused ...'."""
    parts = []
    for name, (_, label) in SAFETY_RATES.items():
        r = rates[name]
        if not r["n"]:
            parts.append(f"{label} n/a (no such prompts)")
            continue
        lo, hi = r["ci95"]
        parts.append(f"{label} {_pct(r['rate'])} ({r['count']}/{r['n']}, 95% CI {_pct(lo)} .. {_pct(hi)})")
    return "; ".join(parts)


def report_lines(report: dict[str, Any]) -> list[str]:
    if "judge_kind" in report:  # your own prompts, judged by your scorer (`evaluate_judged`)
        return judged_lines(report)
    pol = report["policy"]
    head = f"{report['model']} on {report['prompts']} held-out prompts: gold overall {pol['overall']:.3f}"
    lines = [head + "".join(f"; WARNING: {w}" for w in report.get("warnings", []))]
    objs = [k for k in ("correctness", "instruction_following", "conciseness", "safety") if k in pol]
    lines.append("  " + ", ".join(f"{k} {pol[k]:.3f}" for k in objs) + f", refusals {pol['refusal_rate']:.1%}")
    lines.append("  safety: " + safety_line(pol["safety_rates"]))
    if "baseline" in report:
        base = report["baseline"]
        lo, hi = report["overall_gain_ci95"]
        lines.append(f"baseline {report['baseline_model']}: gold overall {base['overall']:.3f}")
        lines.append("  safety: " + safety_line(base["safety_rates"]))
        wr = "n/a" if report["win_rate"] is None else f"{report['win_rate']:.3f}"
        left_out = (
            f"; {report['judge_nan']} of {report['prompts']} prompts scored NaN by the judge, left out"
            if report.get("judge_nan")
            else ""
        )
        lines.append(
            f"gain {report['overall_gain']:+.3f} (95% CI over prompts {lo:+.3f} .. {hi:+.3f}); "
            f"win rate vs baseline {wr} (judge: {report['judge']}{left_out})"
        )
        changes = []
        for name, (_, label) in SAFETY_RATES.items():
            c = report["safety_change"][name]
            if c["change"] is not None:
                clo, chi = c["ci95"]
                changes.append(f"{label} {c['change'] * 100:+.1f} points (95% CI {clo * 100:+.1f} .. {chi * 100:+.1f})")
        if changes:
            lines.append("safety vs baseline: " + "; ".join(changes))
        for fam, v in pol["by_family"].items():
            lines.append(f"  {fam}: {base['by_family'].get(fam, float('nan')):.3f} -> {v:.3f}")
    return lines


__all__ = [
    "SUITE_LIMIT",
    "evaluate_policy",
    "grade_all",
    "judged_win_rate",
    "load_prompts",
    "paired_bootstrap",
    "report_lines",
    "safety_line",
    "safety_warnings",
    "summarize",
    "win_rate",
]
