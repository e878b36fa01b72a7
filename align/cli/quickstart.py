"""`align quickstart`: run the quickstart pipeline (`align.quickstart`) and print where its outputs are."""

from __future__ import annotations

import time
from pathlib import Path

from align.quickstart import QuickstartConfig, run
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
    print(f"  config        {root / 'config.yaml'}")
    print(f"  model         {summary['model_dir']}")
    if "suite" in summary:
        print(f"  suite         {root / 'suite'}/{{train,test}}_{{pairs,prompts}}.jsonl")
    if "doctor" in summary:
        print(f"  data report   {root / 'doctor' / 'doctor.txt'}")
    if "rm" in summary:
        print(f"  reward model  {summary['rm']['model_dir']}  (held-out accuracy {summary['rm']['accuracy']:.3f})")
        print(f"  RM report     {root / 'rm' / 'report.html'}  (numbers {root / 'rm' / 'report.json'})")
    if "dpo" in summary:
        print(f"  DPO policy    {summary['dpo']['policy_dir']}")
        print(f"  DPO report    {root / 'dpo' / 'report.html'}  (numbers {root / 'dpo' / 'report.json'})")
    if "eval" in summary and summary["eval"]:
        e = summary["eval"]
        lo, hi = e["gain_ci95"]
        warn = "".join(f"; WARNING: {w}" for w in e.get("warnings", []))
        print(
            f"  gold score    {e['before']:.3f} before DPO -> {e['after']:.3f} after "
            f"(gain {e['gain']:+.3f}, 95% CI {lo:+.3f} .. {hi:+.3f}; win rate {e['win_rate']:.3f}){warn}"
        )
        for name, label in (
            ("harmful_compliance", "harmful       complied with"),
            ("harmless_refusal", "harmless      refused"),
        ):
            b, a, c = e["safety_before"][name], e["safety_after"][name], e["safety_change"][name]
            if a["n"]:
                lo, hi = (100 * x for x in c["ci95"])
                print(
                    f"  {label} {b['count']}/{b['n']} before DPO -> {a['count']}/{a['n']} after "
                    f"({100 * c['change']:+.1f} points, 95% CI {lo:+.1f} .. {hi:+.1f})"
                )
        print(f"  generations   {root / 'eval' / 'generations.jsonl'}")
    if summary.get("online"):
        o = summary["online"]
        print(f"  GRPO policy   {o['policy_dir']}  ({o['steps']} steps against the gold graders)")
        print(f"  GRPO report   {root / 'online' / 'report.html'}  (numbers {root / 'online' / 'report.json'})")
        if o.get("gain") is not None:
            lo, hi = o["gain_ci95"]
            print(
                f"  gold score    {o['before']:.3f} before GRPO -> {o['after']:.3f} after "
                f"(gain {o['gain']:+.3f}, 95% CI {lo:+.3f} .. {hi:+.3f})"
            )
    print(f"  summary       {root / 'summary.json'}")
