"""Reward-model training speed: TRL's RewardTrainer vs ours, same model, same pairs, same steps, one run.

    .venv/bin/python benchmarks/rm_train_vs_trl.py                 # full fine-tuning and LoRA, 32 steps each
    .venv/bin/python benchmarks/rm_train_vs_trl.py --steps 8 --modes full --trl-settings bf16,fp32,bf16-gc
    .venv/bin/python benchmarks/rm_train_vs_trl.py --steps 12 --modes full --ours segments,mask

Model: builtin:smollm2-135m-instruct. Data: the first 256 pairs of HH-RLHF helpful-base, in file order.
Batch 8 pairs, max length 512, the same number of optimizer steps for both. Each side runs in its own
process, so its time and peak memory (max RSS) are its own. TRL runs in each setting given (precision bf16
or fp32, gradient checkpointing on or off) and its fastest is compared; ours runs with each attention
layout given (`train.attention`: segments, the default, or mask), twice: with an empty torch.compile cache
(a first run on a machine: compiling is paid and timed) and again with the cache that run filled (every
later run). Printed: pairs/s over the whole run and after the first step (steady), the ratios, tokens
processed, peak memory, and our matmul FLOP rate as a fraction of this machine's bf16 matmul peak.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MODEL = "builtin:smollm2-135m-instruct"
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def side_trl(steps: int, setting: str, lora: bool, out: str) -> dict:
    from datasets import Dataset
    from trl import RewardConfig, RewardTrainer

    from benchmarks.common import first_pairs, trl_rows
    from prefalign.models.hub import load_seq_cls, load_tokenizer

    bf16 = setting.startswith("bf16")
    tok = load_tokenizer(MODEL)
    model = load_seq_cls(MODEL, dtype="float32")
    model.config.pad_token_id = tok.pad_token_id
    peft_config = None
    if lora:
        from peft import LoraConfig

        peft_config = LoraConfig(
            r=16, lora_alpha=32, task_type="SEQ_CLS", modules_to_save=["score"], target_modules=LORA_TARGETS
        )
    args = RewardConfig(
        output_dir=out,
        per_device_train_batch_size=8,
        max_steps=steps,
        learning_rate=1e-5,
        bf16=bf16,
        use_cpu=True,
        gradient_checkpointing=setting.endswith("-gc"),
        max_length=512,
        report_to="none",
        logging_steps=steps,
        save_strategy="no",
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    trainer = RewardTrainer(
        model=model,
        args=args,
        train_dataset=Dataset.from_list(trl_rows(first_pairs(256))),
        processing_class=tok,
        peft_config=peft_config,
    )
    kept = len(trainer.train_dataset)
    t = time.perf_counter()
    trainer.train()
    dt = time.perf_counter() - t
    return {"setting": setting, "seconds": dt, "pairs": steps * 8, "pairs_per_s": steps * 8 / dt, "kept": kept}


def side_ours(steps: int, lora: bool, attention: str, out: str) -> dict:
    from benchmarks.common import HH_HELPFUL, first_pairs, model_dims, train_matmul_flops
    from prefalign.config import build
    from prefalign.models.hub import load_tokenizer
    from preference_data.packing import padded_tokens
    from preference_data.tokenize import tokenize_pairs
    from reward_models.rm_train import RMTrainConfig, run

    cfg = build(
        RMTrainConfig,
        {
            "model": MODEL,
            "output_dir": out,
            "data": {"source": str(HH_HELPFUL), "split": "all", "limit": 256},
            "eval": {"split": "none", "stats_pairs": 8},
            "train": {
                "method": "lora" if lora else "full",
                "max_steps": steps,
                "batch_size": 8,
                "max_length": 512,
                "attention": attention,
                "row_tokens": 512,
                "lr": 1e-5,
                "precision": "bf16",
                "log_every": steps,
            },
        },
    )
    report = run(cfg)
    tok = load_tokenizer(MODEL)
    kept, _ = tokenize_pairs(first_pairs(256), tok, 512, "drop")
    used = kept[: steps * 8]
    real = sum(len(p.prompt_ids) + len(p.chosen_ids) + len(p.rejected_ids) for p in used)
    seconds = report["train_seconds"]
    return {
        "attention": attention,
        "seconds": seconds,
        "pairs_per_s": steps * 8 / seconds,
        "tokens": real,
        "padded_tokens_baseline": padded_tokens(used, 8),
        "kept": len(kept),
        "matmul_flops": train_matmul_flops(model_dims(MODEL), real, 0, lora),
    }


def child(args: argparse.Namespace) -> None:
    from benchmarks.common import report, steady_pairs_per_s, step_timer

    times = step_timer()
    with tempfile.TemporaryDirectory() as tmp:
        if args.side == "trl":
            res = side_trl(args.steps, args.setting, args.mode == "lora", tmp)
        else:
            res = side_ours(args.steps, args.mode == "lora", args.setting, tmp)
    res["steady_pairs_per_s"] = steady_pairs_per_s(times, 8)
    report(res)


def run_side(side: str, mode: str, steps: int, setting: str, inductor_cache: str | None = None) -> dict:
    from benchmarks.common import spawn

    return spawn(
        __file__,
        ["--child", side, "--mode", mode, "--steps", str(steps), "--setting", setting],
        inductor_cache=inductor_cache,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--modes", default="full,lora")
    ap.add_argument("--trl-settings", default="bf16", help="comma list of bf16, fp32, bf16-gc, fp32-gc")
    ap.add_argument("--ours", default="segments", help="comma list of our attention layouts: segments, mask")
    ap.add_argument("--no-warm", action="store_true", help="skip our second (warm compile cache) run")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--mode", default="full", help=argparse.SUPPRESS)
    ap.add_argument("--setting", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        args.side = args.child
        child(args)
        return
    import torch

    from benchmarks.common import bf16_matmul_peak

    peak = bf16_matmul_peak()
    print(f"bf16 matmul peak on this machine: {peak:.0f} GFLOP/s ({torch.get_num_threads()} threads)")
    results = {}
    for mode in args.modes.split(","):
        trl = [run_side("trl", mode, args.steps, s) for s in args.trl_settings.split(",")]
        ours = []
        for a in args.ours.split(","):
            with tempfile.TemporaryDirectory() as inductor:  # first run compiles into it, the second reuses it
                for start in ("cold", "warm")[: 1 if args.no_warm else 2]:
                    ours.append({**run_side("ours", mode, args.steps, a, inductor), "start": start})
        best = max(trl, key=lambda r: r["pairs_per_s"])
        steady_trl = max(r["steady_pairs_per_s"] or 0.0 for r in trl)
        print(
            f"\n[{mode}] {args.steps} steps x 8 pairs, max length 512 "
            f"(steady = after the first step, which pays compile and warm-up)"
        )
        for r in trl:
            print(
                f"  TRL RewardTrainer ({r['setting']}): {r['pairs_per_s']:.2f} pairs/s ({r['seconds']:.1f}s, "
                f"{r['kept']} of 256 pairs fit), steady {r['steady_pairs_per_s']:.2f} pairs/s, "
                f"peak memory {r['peak_rss_gb']:.2f} GB"
            )
        for o in ours:
            rate = o["matmul_flops"] / o["seconds"] / 1e9
            print(
                f"  ours (attention: {o['attention']}, {o['start']} compile cache): {o['pairs_per_s']:.2f} pairs/s "
                f"({o['seconds']:.1f}s), steady {o['steady_pairs_per_s']:.2f} pairs/s, "
                f"peak memory {o['peak_rss_gb']:.2f} GB"
            )
            print(
                f"    speed-up vs TRL's fastest ({best['setting']}): {o['pairs_per_s'] / best['pairs_per_s']:.2f}x "
                f"(steady {o['steady_pairs_per_s'] / steady_trl:.2f}x); "
                f"memory {o['peak_rss_gb'] / best['peak_rss_gb']:.2f}x of TRL's"
            )
            print(f"    matmul rate: {rate:.0f} GFLOP/s = {rate / peak:.0%} of the bf16 matmul peak")
        o = ours[0]
        print(
            f"  tokens: ours {o['tokens']} vs {o['padded_tokens_baseline']} for padded separate sequences "
            f"({o['padded_tokens_baseline'] / o['tokens']:.2f}x)"
        )
        results[mode] = {
            "trl": trl,
            "ours": ours,
            "peak_gflops": peak,
            "speedup": {f"{o['attention']}-{o['start']}": o["pairs_per_s"] / best["pairs_per_s"] for o in ours},
        }
    print("\n" + json.dumps(results, indent=1, default=float))


if __name__ == "__main__":
    main()
