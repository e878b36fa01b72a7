"""The quickstart's own training steps, before and after: its RM step, its offline-DPO step and an align round's
DPO step, each run in its own process with the quickstart's settings, timed per optimizer step.

    .venv/bin/python benchmarks/quickstart_steps.py                       # 16 steps of each, every variant
    .venv/bin/python benchmarks/quickstart_steps.py --only round --round-pairs runs/quickstart/align/round_1/pairs.jsonl

Variants (each stage's config is the quickstart's built-in one, `align/quickstart_config.py`, with only what is named
changed):
  rm     eager | compiled (`train.compile: auto` on a CPU: what the quickstart runs) | compiled+casts: the same
         with peft's cast of every adapter input to fp32 kept under bf16 autocast (as before 2026-11-28, evening)
  dpo    eager | compiled (what the quickstart runs), each also +casts (as before)
  round  before (the quickstart's rounds until 2026-11-28): eager, peft's casts, the reference log-probs from the
         base with adapters disabled in every step | after+casts: the reference log-probs computed once before the
         round trains (`rounds.reference_pass: auto` -> once) | after (what they run now): without the casts too |
         after+compile: the same compiled
Data: the quickstart's suite (its train pairs, 275 tasks per family); a round trains on `--round-pairs` (a round's
pairs.jsonl of a finished quickstart: on-policy samples ranked by the RM; default runs/quickstart/align/round_1/
pairs.jsonl where it exists, else the suite's pairs) from `--round-model` (default: the quickstart's offline-DPO
adapter where it exists, else the base model).

Printed per variant: the first step (compiling included), the steady seconds per step (after the first), the
steady matmul rate as a fraction of this machine's measured bf16 (or fp32) matmul peak, and the ratio of steady
step times after / before. All variants share one compile cache (as the quickstart's stages and rounds do: the
first variant that compiles pays for it, the others read the cache), started empty unless `--inductor-cache` names
one.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import (  # noqa: E402
    MODEL,
    WorkMeter,
    machine_line,
    matmul_peak,
    model_dims,
    report,
    resolve_precision,
    spawn,
    step_timer,
)

VARIANTS = {
    "rm": {
        "eager": {"compile": False},
        "compiled": {"compile": "auto"},
        "compiled+casts": {"compile": "auto", "peft_casts": True},
    },
    "dpo": {
        "eager+casts": {"compile": False, "peft_casts": True},
        "eager": {"compile": False},
        "compiled+casts": {"compile": "auto", "peft_casts": True},
        "compiled": {"compile": "auto"},
    },
    "round": {
        "before": {"compile": False, "reference": "adapters_disabled", "peft_casts": True},
        "after+casts": {"compile": False, "reference": "precomputed", "peft_casts": True},
        "after": {"compile": False, "reference": "precomputed"},
        "after+compile": {"compile": "auto", "reference": "precomputed"},
    },
}
BASELINE = {"rm": "compiled+casts", "dpo": "compiled+casts", "round": "before"}
"""The variant each stage's others are compared with: what the quickstart ran before."""
STEPS = {"rm": 176, "dpo": 60, "round": 48}
"""The quickstart's optimizer steps of each (the RM's 1.5 epochs of its ~940 train pairs, DPO's 60, a round's 48): the
projected training time is the first step, the rest at the steady rate, and a reference pass before."""
QUICKSTART = Path("runs/quickstart")


def suite_pairs(out: Path) -> Path:
    from align.quickstart_config import SuiteSection
    from preference_data.suite import build_suite, write_suite

    q = SuiteSection()
    write_suite(build_suite(q.per_family, q.seed, q.test_fraction, dev_fraction=q.dev_fraction), out)
    return out / "train_pairs.jsonl"


def timed(train: Any, args: argparse.Namespace, variant: dict[str, Any]) -> Any:
    """A stage's train section as the timed child runs it: `--steps` steps (one log line), the variant's compile
    setting, `--batch-size` pairs a step where given."""
    return dataclasses.replace(
        train,
        max_steps=args.steps,
        compile=variant["compile"],
        log_every=args.steps,
        batch_size=args.batch_size or train.batch_size,
    )


def child(args: argparse.Namespace) -> None:
    from align import quickstart_config
    from align.train import run as train_policy
    from align.train_config import ReferenceSection, TrainConfig
    from reward_models.rm_train import run as train_rm

    stage, variant = args.child.split(":")
    v = VARIANTS[stage][variant]
    if v.get("peft_casts"):  # peft's own input casts kept under bf16 autocast, as every LoRA run did before
        import align.train
        import prefalign.training.trainer as trainer

        keep_casts = trainer.apply_lora

        def with_casts(*a: Any, **k: Any) -> Any:
            return keep_casts(*a, **{**k, "autocast": False})

        trainer.apply_lora = align.train.apply_lora = with_casts  # type: ignore[assignment]
    times = step_timer()
    with tempfile.TemporaryDirectory() as tmp:
        if stage == "rm":
            cfg = quickstart_config._default_rm()
            cfg = dataclasses.replace(
                cfg,
                model=MODEL,
                output_dir=tmp,
                data=dataclasses.replace(cfg.data, source=args.data, split="all"),
                eval=dataclasses.replace(cfg.eval, split="none", stats_pairs=8),
                train=timed(cfg.train, args, v),
            )
            meter = WorkMeter(model_dims(MODEL), True, False, False, None)
            meter.install()
            rep = train_rm(cfg)
            batch = cfg.train.batch_size
        else:
            base = quickstart_config._default_dpo() if stage == "dpo" else quickstart_config._default_align()
            model, data = (MODEL, args.data) if stage == "dpo" else (args.round_model, args.round_pairs)
            reference = ReferenceSection(kind=v.get("reference", "auto"))
            cfg = TrainConfig(
                model=model,
                output_dir=tmp,
                data=dataclasses.replace(TrainConfig().data, source=data, split="all"),
                eval=dataclasses.replace(TrainConfig().eval, split="none"),
                loss=base.loss,
                reference=reference,
                save_merged=False,
                train=timed(base.train, args, v),
            )
            in_step = cfg.reference.kind != "precomputed"
            meter = WorkMeter(model_dims(MODEL), True, in_step, False, "lengths")
            meter.install()
            rep = train_policy(cfg)
            batch = cfg.train.batch_size
    ref_seconds = float((rep.get("reference") or {}).get("seconds", 0.0) or 0.0)
    steady = (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else None
    report(
        {
            "steps": len(times),
            "batch": batch,
            "first_step_seconds": times[0] - meter.started if times and meter.started else None,
            "steady_step_seconds": steady,
            "reference_seconds": ref_seconds,
            "steady_gflops": meter.steady_rate(times),
            "tokens_per_step": sum(meter.tokens) / max(1, len(meter.tokens)),
            "compiled_graphs": rep.get("compiled_graphs"),
        }
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=16, help="optimizer steps per variant (default 16)")
    ap.add_argument("--only", default="rm,dpo,round", help="comma list of rm, dpo, round")
    ap.add_argument("--variants", default="", help="comma list of variants to run (default: every one; see above)")
    ap.add_argument("--batch-size", type=int, default=0, help="pairs per step (default: each stage's own, 8)")
    ap.add_argument("--round-pairs", default=None, help="a round's pairs.jsonl (see above)")
    ap.add_argument("--round-model", default=None, help="the policy a round starts from (see above)")
    ap.add_argument("--inductor-cache", default=None, help="a compile cache to start from (default: an empty one)")
    ap.add_argument("--json-out", default="", help="also write the results to this file")
    ap.add_argument("--child", default="", help=argparse.SUPPRESS)
    ap.add_argument("--data", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    precision, why = resolve_precision("auto")
    peak = matmul_peak("bfloat16" if precision == "bf16" else "float32")
    print(f"machine: {machine_line()}")
    print(f"precision: {precision} ({why}); {precision} matmul peak here {peak:.0f} GFLOP/s")
    default_pairs = QUICKSTART / "align" / "round_1" / "pairs.jsonl"
    round_pairs = args.round_pairs or (str(default_pairs) if default_pairs.exists() else None)
    default_model = QUICKSTART / "dpo" / "adapter"
    round_model = args.round_model or (str(default_model) if default_model.exists() else MODEL)
    results: dict = {"machine": machine_line(), "precision": precision, "peak_gflops": peak, "rows": {}}
    with tempfile.TemporaryDirectory() as tmp:
        data = suite_pairs(Path(tmp) / "suite")
        round_pairs = round_pairs or str(data)
        cache = args.inductor_cache or str(Path(tmp) / "inductor")
        print(f"round: pairs {round_pairs}, from {round_model}")
        for stage in args.only.split(","):
            rows = {}
            for variant in VARIANTS[stage]:
                if args.variants and variant not in args.variants.split(","):
                    continue
                extra = ["--round-pairs", round_pairs, "--round-model", round_model, "--data", str(data)]
                extra += ["--batch-size", str(args.batch_size)]
                r = spawn(
                    __file__,
                    ["--child", f"{stage}:{variant}", "--steps", str(args.steps), *extra],
                    inductor_cache=cache,
                    fresh_logp_cache=True,  # a round's reference pass paid in every variant, never read from a cache
                )
                rows[variant] = r
                rate = r["steady_gflops"]
                ref = f", reference pass {r['reference_seconds']:.1f}s" if r["reference_seconds"] else ""
                r["projected_seconds"] = (
                    r["first_step_seconds"] + (STEPS[stage] - 1) * r["steady_step_seconds"] + r["reference_seconds"]
                )
                print(
                    f"{stage:5s} {variant:13s} first step {r['first_step_seconds']:.1f}s, steady "
                    f"{r['steady_step_seconds']:.2f}s/step of {r['batch']} pairs ({r['tokens_per_step']:.0f} tokens, "
                    f"{r['steady_step_seconds'] / r['batch']:.3f}s a pair), "
                    f"{rate:.0f} GFLOP/s = {rate / peak:.0%} of peak{ref}, peak RSS {r['peak_rss_gb']:.1f} GB; "
                    f"{STEPS[stage]} steps: {r['projected_seconds']:.0f}s",
                    flush=True,
                )
            results["rows"][stage] = rows
            base = BASELINE[stage]
            for name, a in rows.items():
                if name == base or base not in rows:
                    continue
                b = rows[base]
                print(
                    f"{stage:5s} {name} against {base}: steady step "
                    f"{b['steady_step_seconds'] / a['steady_step_seconds']:.2f}x faster, {STEPS[stage]} steps "
                    f"{b['projected_seconds'] / a['projected_seconds']:.2f}x faster"
                )
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
