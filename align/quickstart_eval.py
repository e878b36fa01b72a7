"""The quickstart's eval stage (`align quickstart`, stage `eval`): the trained policies' greedy answers to held-out
suite prompts graded by the gold graders against the base model's, the RM's score of the same answers (the learned
reward's rise), an optional check of them that needs no answer key (`eval.check`) and the reward-hacking alarm that
compares the two, each policy against the offline-DPO row; the numbers written into the align run it graded."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from prefalign.decoding import DecodingSettings
from prefalign.files import write_jsonl
from prefalign.stats import paired_bootstrap
from prefalign.training.metrics import ALERTS_FILE, append_alert, read_alerts, reward_hacking
from prefalign.training.report import write_report

from .evaluate import evaluate_policy, report_lines
from .pipeline import Pipeline
from .quickstart_config import QuickstartConfig

EVAL_POLICIES = {"online": "online", "aligned": "align", "dpo": "dpo"}
"""The policies the eval stage grades (its summary's keys) and the stage that trains each, the headline first."""


def eval_stage(cfg: QuickstartConfig, p: Pipeline, summary: dict[str, Any]) -> dict[str, Any]:
    """Gold-graded greedy answers of the base model, the offline-DPO policy (the comparison row), the RM-aligned
    policy and, when this run includes the online stage, the GRPO policy to the same held-out prompts, and the RM's
    score of each answer; every trained policy against the offline-DPO row (paired)."""
    policies = {
        name: p.made_by(summary, stage, "policy_dir")
        for name, stage in EVAL_POLICIES.items()
        if stage != "online" or p.wants("online")  # a GRPO run left in out_dir by an earlier --full is not graded
    }
    if not any(policies.values()):
        p.say("eval: no trained policy (add the dpo and align stages); skipping")
        return {}
    prompts = p.suite_file("eval", f"{cfg.eval.split}_prompts.jsonl")
    rm = p.made_by(summary, "rm", "model_dir")
    settings = DecodingSettings(
        max_new_tokens=cfg.eval.max_new_tokens,
        batch_size=cfg.eval.batch_size,
        dtype=cfg.eval.dtype,
        schedule=cfg.eval.schedule,
    )
    out: dict[str, Any] = {"split": cfg.eval.split}
    for name, policy in policies.items():
        if policy is None:
            continue
        p.say(f"eval: {name} policy against the base model on {cfg.eval.split} prompts ({cfg.eval.prompts} + safety)")
        report = evaluate_policy(
            policy,
            cfg.model,
            prompts,
            cfg.eval.prompts,
            "gold",
            str(p.root / "eval" / name),
            settings,
            baseline_cache=str(p.root / "eval" / "baseline.json"),
            safety_each=cfg.eval.safety_each,
            reward_model=rm,
            check=cfg.eval.check,
        )
        for line in report_lines(report):
            p.say(f"eval {name}: {line}")
        out[name] = eval_summary(report)
        alarm = hacking_alarm(out[name], cfg.eval.check)
        if alarm is not None:
            out[name]["alarm"] = alarm
            p.say(f"ALARM ({name}): {alarm}")
    for name in ("aligned", "online"):
        if name in out and "dpo" in out:
            a, d = out[name], out["dpo"]
            lo, hi = paired_bootstrap(a["per_prompt"], d["per_prompt"])
            out[f"{name}_vs_dpo"] = {"gain": a["after"] - d["after"], "gain_ci95": [lo, hi]}
    if "aligned" in out and (p.root / "align" / "metrics.jsonl").exists():
        start = out.get("dpo") if cfg.align_from == "dpo" else None
        record_eval_in_run(p.root / "align", out["aligned"], start, cfg.eval.split)
    return out


def hacking_alarm(e: dict[str, Any], check: str | dict[str, Any] | None) -> str | None:
    """The reward-hacking alarm of one evaluated policy, from signals that need no answer key: the RM's mean score of
    its answers against the base model's, and the check's (`eval.check`) verdicts of the same answers; None without
    a check or when they do not diverge (`prefalign.training.metrics.reward_hacking` over the two points)."""
    c, rb, ra = e.get("check"), e.get("reward_before"), e.get("reward_after")
    if check is None or c is None or rb is None or ra is None:
        return None
    return reward_hacking([(0, rb, c["baseline"]), (1, ra, c["policy"])], run=1, signal=f"the check ({check})")


EVAL_ROW = "quickstart eval"
"""The `from` of the rows the eval stage writes into the align run's metrics (replaced when the stage runs again)."""


def record_eval_in_run(run_dir: Path, end: dict[str, Any], start: dict[str, Any] | None, split: str) -> None:
    """Write the eval stage's numbers into the align run it graded, at the steps its policies were at (the start
    policy at step 0, the aligned one at the last step), and redraw its report: its dashboard's first panel is then
    the learned reward and the gold score of the same held-out answers, start and end, as an online run's."""
    path = run_dir / "metrics.jsonl"
    rows = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]
    rows = [r for r in rows if r.get("from") != EVAL_ROW]
    last = max((int(r["step"]) for r in rows), default=0)
    for step, e in ((0, start), (last, end)):
        if e is not None:
            r = e.get("reward_after")
            reward = {"eval_reward": r} if r is not None and math.isfinite(r) else {}  # NaN: no point drawn
            c = (e.get("check") or {}).get("policy")
            check = {"eval_check": c} if c is not None and math.isfinite(c) else {}
            rows.append(
                {"step": step, "eval_gold/overall": e["after"], **reward, **check, "from": EVAL_ROW, "split": split}
            )
    write_jsonl(path, rows)
    alerts = [a for a in read_alerts(run_dir / ALERTS_FILE) if a.get("key") != CHECK_ALARM_KEY]
    write_jsonl(run_dir / ALERTS_FILE, alerts)
    if end.get("alarm"):
        append_alert(path, last, CHECK_ALARM_KEY, end["alarm"])
    write_report(run_dir)


CHECK_ALARM_KEY = "reward_hacking_check"
"""The alarm the eval stage writes into the align run (replaced when the stage runs again)."""


def eval_summary(report: dict[str, Any]) -> dict[str, Any]:
    """What the quickstart keeps of one policy's evaluation against the base model."""
    return {
        "policy": report["model"],
        "prompts": report["prompts"],
        "before": report["baseline"]["overall"],
        "after": report["policy"]["overall"],
        "gain": report["overall_gain"],
        "gain_ci95": report["overall_gain_ci95"],
        "win_rate": report["win_rate"],
        "per_prompt": report["per_prompt"],
        "by_family": report["family_change"],
        "safety_before": report["baseline"]["safety_rates"],
        "safety_after": report["policy"]["safety_rates"],
        "safety_change": report["safety_change"],
        "reward_before": report["baseline"].get("reward"),
        "reward_after": report["policy"].get("reward"),
        "answers_before": report["baseline"].get("answers"),
        "answers_after": report["policy"].get("answers"),
        "check": report.get("check"),
        "warnings": report["warnings"],
        "before_by_objective": {k: v for k, v in report["baseline"].items() if isinstance(v, float)},
        "after_by_objective": {k: v for k, v in report["policy"].items() if isinstance(v, float)},
    }


__all__ = ["CHECK_ALARM_KEY", "EVAL_POLICIES", "eval_stage", "eval_summary", "hacking_alarm", "record_eval_in_run"]
