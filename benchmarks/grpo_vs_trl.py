"""GRPO training speed and memory: TRL's GRPOTrainer vs ours, equal work, one run.

    .venv/bin/python benchmarks/grpo_vs_trl.py                       # LoRA and full, 4 steps, auto precision
    .venv/bin/python benchmarks/grpo_vs_trl.py --modes lora --steps 8 --trl-settings eager,compile

Equal work on both sides: the builtin model (SmolLM2-135M-Instruct); the same suite train prompts (the first steps
x 8 of the seeded shuffle, 8 prompts per step); group size 4; 128 new tokens at most, temperature 1.0, no top-p /
top-k; the same reward function (the suite's gold graders, overall score); loss dapo, epsilon 0.2, beta 0 (no
reference model on either side), one optimizer step per rollout, lr 1e-5; the same precision (bf16 autocast with a
bf16 frozen base under LoRA, as the toolkit decides; TRL is given the same weight dtypes); LoRA r 16 on every
projection, or full fine-tuning; no activation checkpointing on either side (TRL's default, turned off: its
fastest); each side in its own process (time and peak memory its own), no evaluation, no
checkpoints; each side's time is its training loop (TRL's `trainer.train()`, our loop from the first rollout to the
last update), model loading and saving excluded. Sampling is random on both sides, so completion lengths differ
from run to run: both are printed with the generated-token rate. TRL samples with transformers' `generate` (no
vLLM; on the GPU when one is visible, as ours); ours with the toolkit's generation engine. TRL's fastest setting is
the baseline. Steady = after the first step (which pays compiling and warm-up); every compiling side starts from an
empty compile cache.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import (  # noqa: E402
    MODEL,
    add_device_arg,
    apply_device,
    lora_config,
    machine_line,
    memory_ratio,
    memory_text,
    on_gpu,
    report,
    resolve_precision,
    spawn,
)

PROMPTS_PER_STEP = 8
GROUP = 4
MAX_NEW = 128
LR = 1e-5


def prompts(n: int) -> list:
    """The first n suite train prompts in the order the online loop uses them (seed 0)."""
    import random

    from preference_data.suite import build_suite

    ps = list(build_suite(seed=0).train_prompts)
    random.Random(0).shuffle(ps)
    return ps[:n]


def side_trl(args: argparse.Namespace, out: str) -> dict:
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from benchmarks.common import step_timer, trl_model_dtype
    from prefalign.cpu import tune_allocator
    from prefalign.models.hub import load_causal_lm, load_tokenizer
    from preference_data.suite import grade_prompt_only

    tune_allocator()
    lora = args.mode == "lora"
    ps = prompts(args.steps * PROMPTS_PER_STEP)
    rows = [{"prompt": [m.to_dict() for m in p.prompt], "record": json.dumps(p.to_dict())} for p in ps]
    lengths: list[int] = []

    def gold(prompts, completions, record, completion_ids=None, **kwargs):  # TRL passes dataset columns by name
        if completion_ids is not None:
            lengths.extend(len(c) for c in completion_ids)
        return [
            grade_prompt_only(json.loads(r), c[-1]["content"]).overall for r, c in zip(record, completions, strict=True)
        ]

    tok = load_tokenizer(args.model)
    model = load_causal_lm(args.model, dtype=trl_model_dtype(args.precision, lora))
    peft_config = lora_config("CAUSAL_LM") if lora else None
    times = step_timer()
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[gold],
        args=GRPOConfig(
            output_dir=out,
            per_device_train_batch_size=PROMPTS_PER_STEP * GROUP,
            num_generations=GROUP,
            max_completion_length=MAX_NEW,
            temperature=1.0,
            top_p=1.0,
            learning_rate=LR,
            beta=0.0,
            loss_type="dapo",
            epsilon=0.2,
            max_steps=args.steps,
            bf16=args.precision == "bf16",
            use_cpu=not on_gpu(),
            torch_compile=args.setting == "compile",
            gradient_checkpointing=False,  # TRL's default is True; off is its fastest, and ours' setting
            report_to="none",
            logging_steps=args.steps,
            save_strategy="no",
            dataloader_num_workers=0,
            disable_tqdm=True,
            seed=0,
            shuffle_dataset=False,
        ),
        train_dataset=Dataset.from_list(rows),
        processing_class=tok,
        peft_config=peft_config,
    )
    t0 = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - t0
    steps = [b - a for a, b in zip([t0, *times[:-1]], times, strict=True)]  # each optimizer step, rollout included
    return {"seconds": seconds, "step_seconds": steps, "completion_tokens": lengths}


def side_ours(args: argparse.Namespace, out: str) -> dict:
    from align.online import OnlineConfig, run
    from prefalign.config import build

    cfg = build(
        OnlineConfig,
        {
            "model": args.model,
            "output_dir": out,
            "save_merged": False,
            "reward": [{"type": "grader"}],
            "rollout": {
                "group_size": GROUP,
                "prompts_per_step": PROMPTS_PER_STEP,
                "max_new_tokens": MAX_NEW,
                "static": "compiled" if args.setting == "static" else "off",
            },
            "algorithm": {"loss": "grpo", "params": {"loss_type": "dapo", "epsilon": 0.2}},
            "eval": {"limit": 0},
            "train": {
                "method": args.mode,
                "max_steps": args.steps,
                "batch_size": 32,
                "lr": LR,
                "precision": args.precision,
                "compile": args.setting == "compile",
                "lr_scheduler": "linear",
            },
        },
    )
    rep = run(cfg)
    seconds = rep["train_seconds"]  # the loop, as TRL's `trainer.train()` is timed: loading and saving excluded
    rows = [json.loads(x) for x in (Path(out) / "metrics.jsonl").read_text().splitlines()]
    lengths = [r["completion_length"] for r in rows if "completion_length" in r]
    return {
        "seconds": seconds,
        "step_seconds": [r["step_seconds"] for r in rows if "step_seconds" in r],
        "train_seconds": rep["train_seconds"],
        "phases": rep["seconds_by_phase"],
        "mean_completion_tokens": sum(lengths) / max(len(lengths), 1),
    }


def child(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        res = (side_trl if args.child == "trl" else side_ours)(args, tmp)
    if "completion_tokens" in res:
        toks = res.pop("completion_tokens")
        res["mean_completion_tokens"] = sum(toks) / max(len(toks), 1)
    res["prompts_per_s"] = args.steps * PROMPTS_PER_STEP / res["seconds"]
    later = res["step_seconds"][1:]  # after the first step, which pays compiling and warm-up
    res["steady_prompts_per_s"] = PROMPTS_PER_STEP * len(later) / sum(later) if later else None
    res["tokens_per_s"] = res["prompts_per_s"] * GROUP * res["mean_completion_tokens"]
    report(res)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=4, help="rollout + update steps of 8 prompts x 4 completions")
    ap.add_argument("--modes", default="lora,full", help="comma list of lora, full")
    ap.add_argument("--precision", default="auto", help="auto, bf16 or fp32 (both sides)")
    ap.add_argument("--trl-settings", default="eager", help="comma list of TRL settings: eager, compile")
    ap.add_argument(
        "--ours-settings",
        default="eager,compile",
        help="comma list of our settings: eager, compile (the update's layers compiled, cold cache), static (the "
        "rollout's decode step on the static path, compiled: CUDA graphs on a GPU)",
    )
    ap.add_argument("--model", default=MODEL, help="the model both sides train (default: the builtin SmolLM2)")
    ap.add_argument("--json-out", default="", help="also write the results (the JSON printed last) to this file")
    add_device_arg(ap)
    for name in ("--child", "--mode", "--setting"):
        ap.add_argument(name, default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    apply_device(args)
    if args.child:
        child(args)
        return
    precision, why = resolve_precision(args.precision)
    print(f"machine: {machine_line()}")
    print(f"precision: {precision} for both sides ({why})")
    print(
        f"work: {args.steps} steps x {PROMPTS_PER_STEP} suite prompts x {GROUP} completions, <= {MAX_NEW} new tokens, "
        "gold-grader reward, dapo loss, beta 0, one update per rollout"
    )
    results: dict = {"machine": machine_line(), "precision": precision}
    for mode in args.modes.split(","):

        def side(who: str, setting: str, mode: str = mode) -> dict:
            a = [
                "--child",
                who,
                "--mode",
                mode,
                "--setting",
                setting,
                "--steps",
                str(args.steps),
                "--model",
                args.model,
            ]
            return {**spawn(__file__, a + ["--precision", precision]), "setting": setting}

        trl = [side("trl", s) for s in args.trl_settings.split(",")]
        ours = [side("ours", s) for s in args.ours_settings.split(",")]
        best = max(trl, key=lambda r: r["steady_prompts_per_s"] or r["prompts_per_s"])
        print(f"\n[{mode}]")
        for r in trl:
            print(
                f"  TRL GRPOTrainer ({r['setting']}): {r['prompts_per_s']:.3f} prompts/s ({r['seconds']:.1f}s), "
                f"steady {r['steady_prompts_per_s'] or 0:.3f} prompts/s, "
                f"{r['tokens_per_s']:.1f} generated tokens/s (mean completion {r['mean_completion_tokens']:.1f}), "
                f"{memory_text(r)}"
            )
        for o in ours:
            print(
                f"  ours ({o['setting']}): {o['prompts_per_s']:.3f} prompts/s ({o['seconds']:.1f}s; "
                + ", ".join(f"{k} {v}s" for k, v in o["phases"].items())
                + f"), steady {o['steady_prompts_per_s'] or 0:.3f} prompts/s, {o['tokens_per_s']:.1f} generated "
                f"tokens/s (mean completion {o['mean_completion_tokens']:.1f}), "
                f"{memory_text(o)}"
            )
            steady = (
                f"steady {o['steady_prompts_per_s'] / best['steady_prompts_per_s']:.2f}x, "
                if o["steady_prompts_per_s"] and best["steady_prompts_per_s"]
                else ""
            )
            print(
                f"    vs TRL's best ({best['setting']}): whole run {o['prompts_per_s'] / best['prompts_per_s']:.2f}x "
                f"prompts/s, {steady}{o['tokens_per_s'] / best['tokens_per_s']:.2f}x generated tokens/s, memory "
                f"{memory_ratio(o, best):.2f}x of TRL's"
            )
        results[mode] = {"trl": trl, "ours": ours, "best_trl": best["setting"]}
    print("\n" + json.dumps(results, indent=1, default=float))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(results, indent=1, default=float), encoding="utf-8")


if __name__ == "__main__":
    main()
