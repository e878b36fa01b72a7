"""DPO training speed and memory: TRL's DPOTrainer vs ours, same model, same pairs, same steps, one run.

    .venv/bin/python benchmarks/dpo_vs_trl.py                  # full fine-tuning and LoRA, 32 steps each
    .venv/bin/python benchmarks/dpo_vs_trl.py --steps 8 --modes full --trl-settings bf16,fp32

Model: builtin:smollm2-135m-instruct. Data: the first 256 pairs of HH-RLHF helpful-base, in file order.
Batch 8 pairs, max length 512, sigmoid loss (beta 0.1), the same number of optimizer steps. Each side runs
in its own process so its peak memory (max RSS) is its own. TRL: full fine-tuning keeps a second reference
model in memory (its default); LoRA uses the base with adapters disabled. Ours: full fine-tuning precomputes
the reference log-probs once (into an empty cache, and that time is counted); LoRA uses disabled adapters.
Printed: pairs/s for each, the ratio, peak memory, and our matmul FLOP rate as a fraction of this machine's
bf16 matmul peak.
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
    import torch
    from datasets import Dataset
    from trl import DPOConfig, DPOTrainer

    from benchmarks.common import first_pairs, trl_rows
    from prefalign.models.hub import load_causal_lm, load_tokenizer

    tok = load_tokenizer(MODEL)
    # TRL's fastest CPU setting: bf16 weights and autocast, no gradient checkpointing
    model = load_causal_lm(MODEL, dtype="bfloat16" if setting.startswith("bf16") else "float32")
    peft_config = None
    if lora:
        from peft import LoraConfig

        peft_config = LoraConfig(r=16, lora_alpha=32, task_type="CAUSAL_LM", target_modules=LORA_TARGETS)
    args = DPOConfig(
        output_dir=out,
        per_device_train_batch_size=8,
        max_steps=steps,
        learning_rate=1e-6,
        beta=0.1,
        bf16=setting.startswith("bf16"),
        use_cpu=True,
        gradient_checkpointing=setting.endswith("-gc"),
        max_length=512,
        report_to="none",
        logging_steps=steps,
        save_strategy="no",
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    trainer = DPOTrainer(
        model=model,
        args=args,
        train_dataset=Dataset.from_list(trl_rows(first_pairs(256))),
        processing_class=tok,
        peft_config=peft_config,
    )
    torch.manual_seed(0)
    t = time.perf_counter()
    trainer.train()
    dt = time.perf_counter() - t
    return {"setting": setting, "seconds": dt, "pairs_per_s": steps * 8 / dt, "kept": len(trainer.train_dataset)}


def side_ours(steps: int, lora: bool, out: str) -> dict:
    from align.train import TrainConfig, run
    from benchmarks.common import HH_HELPFUL, first_pairs, model_dims, train_matmul_flops
    from prefalign.config import build
    from prefalign.models.hub import load_tokenizer
    from preference_data.packing import padded_tokens
    from preference_data.tokenize import tokenize_pairs

    cfg = build(
        TrainConfig,
        {
            "model": MODEL,
            "output_dir": out,
            "save_merged": False,
            "data": {"source": str(HH_HELPFUL), "split": "all", "limit": 256},
            "eval": {"split": "none"},
            "loss": {"name": "sigmoid", "params": {"beta": 0.1}},
            "train": {
                "method": "lora" if lora else "full",
                "max_steps": steps,
                "batch_size": 8,
                "max_length": 512,
                "row_tokens": 512,
                "lr": 1e-6,
                "precision": "bf16",
                "log_every": steps,
            },
        },
    )
    report = run(cfg)
    ref_seconds = float(report["reference"].get("seconds", 0.0) or 0.0)
    seconds = report["train_seconds"] + ref_seconds
    tok = load_tokenizer(MODEL)
    kept, _ = tokenize_pairs(first_pairs(256), tok, 512, "drop")
    used = kept[: steps * 8]
    real = sum(len(p.prompt_ids) + len(p.chosen_ids) + len(p.rejected_ids) for p in used)
    resp = sum(len(p.chosen_ids) + len(p.rejected_ids) for p in used)
    dims = model_dims(MODEL)
    # policy forward + backward, plus a forward of the reference (on the fly with LoRA, precomputed otherwise)
    flops = train_matmul_flops(dims, real, resp, lora) + 2 * (dims["body"] * real + dims["head"] * resp)
    return {
        "seconds": seconds,
        "train_seconds": report["train_seconds"],
        "reference_seconds": ref_seconds,
        "pairs_per_s": steps * 8 / seconds,
        "tokens": real,
        "padded_tokens_baseline": padded_tokens(used, 8),
        "kept": len(kept),
        "matmul_flops": flops,
    }


def child(args: argparse.Namespace) -> None:
    from benchmarks.common import report

    with tempfile.TemporaryDirectory() as tmp:
        if args.side == "trl":
            res = side_trl(args.steps, args.setting, args.mode == "lora", tmp)
        else:
            res = side_ours(args.steps, args.mode == "lora", tmp)
    report(res)


def run_side(side: str, mode: str, steps: int, setting: str = "") -> dict:
    from benchmarks.common import spawn

    return spawn(
        __file__, ["--child", side, "--mode", mode, "--steps", str(steps), "--setting", setting], fresh_logp_cache=True
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--modes", default="full,lora")
    ap.add_argument("--trl-settings", default="bf16", help="comma list of bf16, fp32, bf16-gc, fp32-gc")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--mode", default="full", help=argparse.SUPPRESS)
    ap.add_argument("--setting", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        args.side = args.child
        child(args)
        return
    from benchmarks.common import bf16_matmul_peak

    peak = bf16_matmul_peak()
    print(f"bf16 matmul peak on this machine: {peak:.0f} GFLOP/s")
    results = {}
    for mode in args.modes.split(","):
        trl = [run_side("trl", mode, args.steps, s) for s in args.trl_settings.split(",")]
        ours = run_side("ours", mode, args.steps)
        best = max(trl, key=lambda r: r["pairs_per_s"])
        rate = ours["matmul_flops"] / ours["seconds"] / 1e9
        print(f"\n[{mode}] {args.steps} steps x 8 pairs, max length 512, DPO sigmoid")
        for r in trl:
            print(
                f"  TRL DPOTrainer ({r['setting']}): {r['pairs_per_s']:.2f} pairs/s ({r['seconds']:.1f}s), "
                f"peak memory {r['peak_rss_gb']:.2f} GB"
            )
        print(
            f"  ours: {ours['pairs_per_s']:.2f} pairs/s ({ours['seconds']:.1f}s incl. {ours['reference_seconds']:.1f}s "
            f"reference log-probs), peak memory {ours['peak_rss_gb']:.2f} GB"
        )
        print(
            f"  speed-up vs TRL's fastest ({best['setting']}): {ours['pairs_per_s'] / best['pairs_per_s']:.2f}x; "
            f"memory {ours['peak_rss_gb'] / best['peak_rss_gb']:.2f}x of TRL's"
        )
        print(
            f"  tokens: ours {ours['tokens']} vs {ours['padded_tokens_baseline']} padded separate sequences "
            f"({ours['padded_tokens_baseline'] / ours['tokens']:.2f}x)"
        )
        print(f"  our matmul rate: {rate:.0f} GFLOP/s = {rate / peak:.0%} of the bf16 matmul peak")
        results[mode] = {"trl": trl, "ours": ours, "speedup": ours["pairs_per_s"] / best["pairs_per_s"]}
    print("\n" + json.dumps(results, indent=1, default=float))


if __name__ == "__main__":
    main()
