"""Reward-model training speed: TRL's RewardTrainer vs ours, same model, same pairs, same steps, one run.

    .venv/bin/python benchmarks/rm_train_vs_trl.py                 # full fine-tuning and LoRA, 32 steps each
    .venv/bin/python benchmarks/rm_train_vs_trl.py --steps 8 --modes full --trl-settings bf16,fp32,bf16-gc

Model: builtin:smollm2-135m-instruct. Data: the first 256 pairs of HH-RLHF helpful-base, in file order.
Batch 8 pairs, max length 512, the same number of optimizer steps for both. TRL runs in each setting
given (precision bf16 or fp32, gradient checkpointing on or off) and its fastest is compared. Printed:
pairs/s for each, the ratio, tokens processed, and our matmul FLOP rate as a fraction of this machine's
bf16 matmul peak.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import (HH_HELPFUL, bf16_matmul_peak, first_pairs, model_dims,  # noqa: E402
                               train_matmul_flops, trl_rows)

MODEL = "builtin:smollm2-135m-instruct"


def run_trl(pairs, steps: int, setting: str, lora: bool, out: str) -> dict:
    from datasets import Dataset
    from trl import RewardConfig, RewardTrainer

    from preference_data.hub import load_seq_cls, load_tokenizer

    bf16 = setting.startswith("bf16")
    tok = load_tokenizer(MODEL)
    model = load_seq_cls(MODEL, dtype="float32")
    model.config.pad_token_id = tok.pad_token_id
    peft_config = None
    if lora:
        from peft import LoraConfig

        peft_config = LoraConfig(r=16, lora_alpha=32, task_type="SEQ_CLS", modules_to_save=["score"],
                                 target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                                 "down_proj"])
    args = RewardConfig(output_dir=out, per_device_train_batch_size=8, max_steps=steps, learning_rate=1e-5,
                        bf16=bf16, use_cpu=True, gradient_checkpointing=setting.endswith("-gc"), max_length=512,
                        report_to="none", logging_steps=steps, save_strategy="no", dataloader_num_workers=0,
                        disable_tqdm=True)
    trainer = RewardTrainer(model=model, args=args, train_dataset=Dataset.from_list(trl_rows(pairs)),
                            processing_class=tok, peft_config=peft_config)
    kept = len(trainer.train_dataset)
    t = time.perf_counter()
    trainer.train()
    dt = time.perf_counter() - t
    return {"setting": setting, "seconds": dt, "pairs": steps * 8, "pairs_per_s": steps * 8 / dt, "kept": kept}


def run_ours(pairs, steps: int, lora: bool, out: str) -> dict:
    from preference_data.config import build
    from preference_data.hub import load_tokenizer
    from preference_data.packing import padded_tokens
    from preference_data.tokenize import tokenize_pairs
    from reward_models.rm_train import RMTrainConfig, run

    cfg = build(RMTrainConfig, {
        "model": MODEL, "output_dir": out,
        "data": {"source": str(HH_HELPFUL), "split": "all", "limit": len(pairs)},
        "eval": {"split": "none", "stats_pairs": 8},
        "train": {"method": "lora" if lora else "full", "max_steps": steps, "batch_size": 8, "max_length": 512,
                  "row_tokens": 512, "lr": 1e-5, "precision": "bf16", "log_every": steps},
    })
    report = run(cfg)
    tok = load_tokenizer(MODEL)
    kept, _ = tokenize_pairs(pairs, tok, 512, "drop")
    used = kept[: steps * 8]
    real = sum(len(p.prompt_ids) + len(p.chosen_ids) + len(p.rejected_ids) for p in used)
    return {"seconds": report["train_seconds"], "pairs": steps * 8, "pairs_per_s": steps * 8 / report["train_seconds"],
            "tokens": real, "padded_tokens_baseline": padded_tokens(used, 8), "kept": len(kept)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--modes", default="full,lora")
    ap.add_argument("--trl-settings", default="bf16", help="comma list of bf16, fp32, bf16-gc, fp32-gc")
    args = ap.parse_args()
    torch.manual_seed(0)
    pairs = first_pairs(256)
    peak = bf16_matmul_peak()
    dims = model_dims(MODEL)
    print(f"bf16 matmul peak on this machine: {peak:.0f} GFLOP/s ({torch.get_num_threads()} threads)")
    results = {}
    for mode in args.modes.split(","):
        lora = mode == "lora"
        with tempfile.TemporaryDirectory() as tmp:
            trl = [run_trl(pairs, args.steps, s, lora, f"{tmp}/trl-{s}") for s in args.trl_settings.split(",")]
            ours = run_ours(pairs, args.steps, lora, f"{tmp}/ours")
        best = max(trl, key=lambda r: r["pairs_per_s"])
        flops = train_matmul_flops(dims, ours["tokens"], 0, lora)
        rate = flops / ours["seconds"] / 1e9
        print(f"\n[{mode}] {args.steps} steps x 8 pairs, max length 512")
        for r in trl:
            print(f"  TRL RewardTrainer ({r['setting']}): {r['pairs_per_s']:.2f} pairs/s ({r['seconds']:.1f}s, "
                  f"{r['kept']} of 256 pairs fit)")
        print(f"  ours (packed, prefix-shared, bf16): {ours['pairs_per_s']:.2f} pairs/s ({ours['seconds']:.1f}s, "
              f"{ours['kept']} of 256 pairs fit)")
        print(f"  speed-up vs TRL's fastest ({best['setting']}): {ours['pairs_per_s'] / best['pairs_per_s']:.2f}x")
        print(f"  tokens: ours {ours['tokens']} vs {ours['padded_tokens_baseline']} for padded separate sequences "
              f"({ours['padded_tokens_baseline'] / ours['tokens']:.2f}x)")
        print(f"  our matmul rate: {rate:.0f} GFLOP/s = {rate / peak:.0%} of the bf16 matmul peak")
        results[mode] = {"trl": trl, "ours": ours, "speedup": ours["pairs_per_s"] / best["pairs_per_s"],
                         "matmul_gflops": rate, "peak_gflops": peak}
    print("\n" + json.dumps(results, indent=1, default=float))


if __name__ == "__main__":
    main()
