"""`align quickstart`: run the quickstart pipeline (`align.quickstart`) and print where its outputs are."""

from __future__ import annotations

import time
from pathlib import Path

from align.quickstart import EVAL_LABELS, QuickstartConfig, run
from prefalign.config import load


def run_quickstart(
    config_path: str | None = None, out: str | None = None, overrides: list[str] | None = None, full: bool = False
) -> int:
    t0 = time.time()
    cfg = load(QuickstartConfig, config_path, overrides)
    if out:
        cfg.out_dir = out
    if full and "online" not in cfg.stages:
        cfg.stages = [*cfg.stages, "online"]
    summary = run(cfg, t0)
    print_outputs(summary, Path(cfg.out_dir), time.time() - t0)
    return 0


def print_outputs(summary: dict, root: Path, seconds: float) -> None:
    print(f"\nquickstart finished in {seconds:.0f}s. Outputs:")
    stages = summary.get("stage_seconds") or {}
    if stages:
        print("  stage times   " + " | ".join(f"{k} {v / 60:.1f} min" for k, v in stages.items()))
    print(f"  config        {root / 'config.yaml'}")
    print(f"  model         {summary['model_dir']}")
    if "suite" in summary:
        print(f"  suite         {root / 'suite'}/{{train,dev,test}}_{{pairs,prompts}}.jsonl")
    if "doctor" in summary:
        print(f"  data report   {root / 'doctor' / 'doctor.txt'}")
    if "rm" in summary:
        split = (summary.get("suite") or {}).get("reported_split", "held-out")
        print(f"  reward model  {summary['rm']['model_dir']}  ({split} accuracy {summary['rm']['accuracy']:.3f})")
        print(f"  RM report     {root / 'rm' / 'report.html'}  (numbers {root / 'rm' / 'report.json'})")
    if "dpo" in summary:
        print(f"  offline DPO   {summary['dpo']['policy_dir']}  (the comparison row; {root / 'dpo' / 'report.html'})")
    if summary.get("align"):
        a = summary["align"]
        rounds = f"{len(a['rounds'])} rounds ranked by the RM"
        print(f"  RM-aligned    {a['policy_dir']}  ({rounds}; {root / 'align' / 'report.html'})")
    if summary.get("online"):
        o = summary["online"]
        print(f"  GRPO policy   {o['policy_dir']}  ({o['steps']} steps against the RM from the RM-aligned policy)")
        print(f"  GRPO report   {root / 'online' / 'report.html'}  (numbers {root / 'online' / 'report.json'})")
        if o.get("gain") is not None:
            lo, hi = o["gain_ci95"]
            print(
                f"  GRPO's own held-out check {o['before']:.3f} -> {o['after']:.3f} "
                f"(gain {o['gain']:+.3f}, 95% CI {lo:+.3f} .. {hi:+.3f}; {o['eval_prompts']} prompts)"
            )
    e = summary.get("eval") or {}
    if e:
        print(f"  evaluated on  the suite's {e.get('split', 'test')} prompts (greedy answers, gold graders)")
    for name, label in EVAL_LABELS.items():
        if name in e:
            print_eval(label, e[name])
    for name, label in EVAL_LABELS.items():
        if f"{name}_vs_dpo" in e:
            c = e[f"{name}_vs_dpo"]
            lo, hi = c["gain_ci95"]
            print(f"  {label} vs offline DPO: {c['gain']:+.3f} gold (95% CI {lo:+.3f} .. {hi:+.3f})")
    if e:
        print(f"  generations   {root / 'eval'}/<policy>/generations.jsonl")
    print(f"  summary       {root / 'summary.json'}")
    if summary.get("figure"):
        print(f"  figure        {summary['figure']}  (and {root / 'report.html'})")


SAFETY_LINES = (
    ("harmful_compliance", "harmful requests complied with"),
    ("harmless_refusal", "harmless look-alikes refused"),
)


def print_eval(label: str, e: dict) -> None:
    """One policy against the base model: gold, the RM's score of the same answers, safety, and every family."""
    lo, hi = e["gain_ci95"]
    warn = "".join(f"; WARNING: {w}" for w in e.get("warnings", []))
    print(
        f"  {label}: gold score {e['before']:.3f} base -> {e['after']:.3f} (gain {e['gain']:+.3f}, 95% CI "
        f"{lo:+.3f} .. {hi:+.3f}; win rate {e['win_rate']:.3f}; {e['prompts']} held-out prompts){warn}"
    )
    if e.get("reward_before") is not None and e.get("reward_after") is not None:
        print(
            f"    learned reward (the RM's score of the same answers) {e['reward_before']:+.3f} -> "
            f"{e['reward_after']:+.3f} ({e['reward_after'] - e['reward_before']:+.3f})"
        )
    c = e.get("check")
    if c is not None:
        lo, hi = c["ci95"] or (float("nan"), float("nan"))
        print(
            f"    the check's view of the same answers {c['baseline']:.3f} -> {c['policy']:.3f} (95% CI {lo:.3f} .. "
            f"{hi:.3f}; {c['nan']} left out)"
        )
    if e.get("alarm"):
        print(f"    ALARM: {e['alarm']}")
    b, a = e.get("answers_before"), e.get("answers_after")
    if b and a:
        cb, ca = b["confident_wrong"], a["confident_wrong"]
        print(
            f"    answers {b['mean_chars']:.0f} -> {a['mean_chars']:.0f} characters on average; confident wrong "
            f"answers (one value given, and wrong) {cb['count']}/{cb['n']} -> {ca['count']}/{ca['n']}"
        )
    for name, what in SAFETY_LINES:
        b, a, c = e["safety_before"][name], e["safety_after"][name], e["safety_change"][name]
        if a["n"]:
            clo, chi = (100 * x for x in c["ci95"])
            alo, ahi = (100 * x for x in a["ci95"])
            print(
                f"    {what} {b['count']}/{b['n']} -> {a['count']}/{a['n']} ({100 * a['rate']:.0f}%, 95% CI "
                f"{alo:.0f}%..{ahi:.0f}%; change {100 * c['change']:+.1f} points, 95% CI {clo:+.1f} .. {chi:+.1f})"
            )
    for fam, f in e.get("by_family", {}).items():
        flo, fhi = f["ci95"]
        change = f"{f['change']:+.3f}, 95% CI {flo:+.3f} .. {fhi:+.3f}; n {f['n']}"
        print(f"    {fam:14s} {f['before']:.3f} -> {f['after']:.3f} ({change})")
