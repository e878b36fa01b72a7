"""Reward-model quality on human labels: TRL's RewardTrainer vs `align rm train`, the same pairs and settings, seeds.

    .venv/bin/python benchmarks/rm_quality_vs_trl.py                                   # LoRA and full, 3 seeds
    .venv/bin/python benchmarks/rm_quality_vs_trl.py --modes lora --seeds 0 --train-pairs 64 --eval-pairs 100

Data: HH-RLHF helpful-base and harmless-base (`../shared/data/hh-rlhf`, the test splits: no train split is public
here), each cut by a hash of the prompt into train (80%) and held-out (20%) as `align rm train` cuts them
(`data.split_fractions: [0.8, 0, 0.2]`, so no prompt is in both). From each subset, in file order, the first
--train-pairs / 2 train pairs and the first --eval-pairs / 2 held-out pairs whose renderings fit --max-length
tokens: one train file and one held-out file that both sides read, so neither drops nor truncates a pair.

Equal settings: SmolLM2-135M-Instruct (`builtin:`), Bradley-Terry loss, one epoch (train pairs / 8 steps of 8
pairs), lr (--lr-lora / --lr-full) with the same schedule (linear decay, no warm-up: TRL's default, set on ours),
the same max length, precision (`auto`: bf16 where native, else fp32 on both), LoRA r 16 / alpha 32 on every
projection with the score head trained (LoRA mode), and the seed (the Trainer's: score-head init and data order).
Each side trains in its own process.

One judge for both: each trained RM is scored in plain transformers (`AutoModelForSequenceClassification`, fp32,
one sequence per forward, no padding) on the chat template's rendering of prompt + response, the reward read at
the last token as both sides train it; a held-out pair is right when chosen scores above rejected (ties wrong).

Printed per mode: held-out accuracy per side and seed, overall and for helpful and harmless; the mean paired
difference ours − TRL with a 95% bootstrap interval (per held-out pair, its difference averaged over the seeds;
pairs resampled), overall and per subset; each side's whole training time (data preparation included, the judge's
scoring not) and the ratio. Timings depend on the machine (its line is printed first).
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
    BATCH,
    HH_SUBSETS,
    MODEL,
    hh_mixed_files,
    lora_config,
    machine_line,
    read_pairs,
    report,
    resolve_precision,
    spawn,
    trl_model_dtype,
    trl_rows,
)
from prefalign.stats import bootstrap_ci  # noqa: E402

# --- the judge -------------------------------------------------------------------------------------------------


def judge(model, tok, held_file: str) -> list[float]:
    """Per held-out pair: 1.0 when the RM scores chosen above rejected, else 0.0 (plain transformers, fp32)."""
    import torch

    model = model.float().eval()
    out = []
    with torch.no_grad():
        for p in read_pairs(held_file):
            scores = []
            for side in (p.chosen, p.rejected):
                msgs = [m.to_dict() for m in (*p.prompt, *side)]
                enc = tok.apply_chat_template(msgs, return_tensors="pt", return_dict=True)
                scores.append(model(input_ids=enc["input_ids"]).logits[0, 0].item())
            out.append(1.0 if scores[0] > scores[1] else 0.0)
    return out


# --- the two sides (each in its own process) -------------------------------------------------------------------


def side_trl(args: argparse.Namespace, out: str) -> dict:
    from datasets import Dataset
    from trl import RewardConfig, RewardTrainer

    from prefalign.models.hub import load_seq_cls, load_tokenizer

    lora = args.mode == "lora"
    t = time.perf_counter()
    tok = load_tokenizer(MODEL)
    model = load_seq_cls(MODEL, dtype=trl_model_dtype(args.precision, lora))
    model.config.pad_token_id = tok.pad_token_id
    rows = trl_rows(read_pairs(args.data))
    config = RewardConfig(
        output_dir=out,
        per_device_train_batch_size=BATCH,
        num_train_epochs=1,
        learning_rate=args.lr,
        lr_scheduler_type="linear",
        warmup_steps=0,
        bf16=args.precision == "bf16",
        use_cpu=True,
        max_length=args.max_length,
        report_to="none",
        save_strategy="no",
        logging_steps=max(1, len(rows) // BATCH),
        disable_tqdm=True,
        seed=args.seed,
        data_seed=args.seed,
    )
    peft_config = lora_config("SEQ_CLS", modules_to_save=["score"]) if lora else None
    trainer = RewardTrainer(
        model=model, args=config, train_dataset=Dataset.from_list(rows), processing_class=tok, peft_config=peft_config
    )
    kept = len(trainer.train_dataset)
    trainer.train()
    seconds = time.perf_counter() - t
    trained = trainer.model.merge_and_unload() if lora else trainer.model
    return {"seconds": seconds, "kept": kept, "right": judge(trained, tok, args.held)}


def side_ours(args: argparse.Namespace, out: str) -> dict:
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from prefalign.config import build
    from reward_models.rm_train import RMTrainConfig, run

    t = time.perf_counter()
    cfg = build(
        RMTrainConfig,
        {
            "model": MODEL,
            "output_dir": out,
            "data": {"source": args.data, "split": "all"},
            "eval": {"split": "none", "stats_pairs": 8},
            "train": {
                "method": args.mode,
                "epochs": 1,
                "batch_size": BATCH,
                "max_length": args.max_length,
                "lr": args.lr,
                "lr_scheduler": "linear",
                "warmup_ratio": 0.0,
                "precision": args.precision,
                "seed": args.seed,
            },
        },
    )
    rep = run(cfg)
    seconds = time.perf_counter() - t
    rm_dir = rep["model_dir"]
    model = AutoModelForSequenceClassification.from_pretrained(rm_dir, dtype="float32")
    return {
        "seconds": seconds,
        "kept": rep["train_pairs"],
        "right": judge(model, AutoTokenizer.from_pretrained(rm_dir), args.held),
    }


SIDES = {"trl": side_trl, "ours": side_ours}


# --- the parent ------------------------------------------------------------------------------------------------


def mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--modes", default="lora,full", help="comma list of lora, full")
    ap.add_argument("--seeds", default="0,1,2", help="comma list of seeds")
    ap.add_argument("--train-pairs", type=int, default=512, help="train pairs, half helpful, half harmless")
    ap.add_argument("--eval-pairs", type=int, default=400, help="held-out pairs, half helpful, half harmless")
    ap.add_argument("--max-length", type=int, default=512, help="token budget of prompt + response")
    ap.add_argument("--lr-lora", type=float, default=2e-4, help="learning rate with LoRA")
    ap.add_argument("--lr-full", type=float, default=1e-5, help="learning rate with full fine-tuning")
    ap.add_argument("--precision", default="auto", help="auto (bf16 where native, else fp32), bf16 or fp32")
    ap.add_argument("--out", default=None, help="write every number as JSON here")
    for name in ("--child", "--mode", "--data", "--held"):
        ap.add_argument(name, default="", help=argparse.SUPPRESS)
    ap.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--lr", type=float, default=0.0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        from prefalign.cpu import tune_allocator

        tune_allocator()
        with tempfile.TemporaryDirectory() as tmp:
            report(SIDES[args.child](args, tmp))
        return

    precision, why = resolve_precision(args.precision)
    print(f"machine: {machine_line()}")
    print(f"precision: {precision} for both sides ({why})")
    results: dict = {"machine": machine_line(), "precision": precision, "modes": {}}
    with tempfile.TemporaryDirectory() as tmp:
        train_file, held_file, subset_of = hh_mixed_files(args.train_pairs, args.eval_pairs, args.max_length, Path(tmp))
        print(
            f"data: {args.train_pairs} train pairs and {len(subset_of)} held-out pairs (half helpful-base, half "
            f"harmless-base, prompt-hash split), all fitting {args.max_length} tokens; one epoch of "
            f"{args.train_pairs // BATCH} steps x {BATCH} pairs"
        )
        for mode in args.modes.split(","):
            lr = args.lr_lora if mode == "lora" else args.lr_full
            runs: dict = {"trl": [], "ours": []}
            for seed in [int(s) for s in args.seeds.split(",")]:
                for side in ("trl", "ours"):
                    a = ["--child", side, "--mode", mode, "--seed", str(seed), "--lr", str(lr)]
                    a += ["--precision", precision, "--data", str(train_file), "--held", str(held_file)]
                    a += ["--max-length", str(args.max_length)]
                    r = spawn(__file__, a)
                    runs[side].append({**r, "seed": seed})
                    acc = {
                        s: mean([x for x, t in zip(r["right"], subset_of, strict=True) if t == s]) for s in HH_SUBSETS
                    }
                    print(
                        f"{mode:<4} seed {seed} {side:<4}  accuracy {mean(r['right']):.3f}  helpful "
                        f"{acc['helpful']:.3f}  harmless {acc['harmless']:.3f}  kept {r['kept']}  "
                        f"{r['seconds']:.0f} s  peak {r['peak_rss_gb']:.1f} GB",
                        flush=True,
                    )
            results["modes"][mode] = summarize(mode, runs, subset_of)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2))
        print(f"wrote {args.out}")


def summarize(mode: str, runs: dict, subset_of: list[str]) -> dict:
    """Print and return the mode's table: accuracy by side, the paired difference with its interval, time."""
    n = len(subset_of)
    diff = [
        mean([o["right"][i] - t["right"][i] for o, t in zip(runs["ours"], runs["trl"], strict=True)]) for i in range(n)
    ]
    out: dict = {"runs": runs}
    print(f"\n{mode}: held-out accuracy (mean over seeds), ours − TRL with a 95% bootstrap interval over pairs")
    print("| subset | pairs | TRL | ours | ours − TRL [95% CI] |")
    print("|---|---|---|---|---|")
    for name, idx in [("all", list(range(n))), *[(s, [i for i in range(n) if subset_of[i] == s]) for s in HH_SUBSETS]]:
        trl = mean([mean([r["right"][i] for i in idx]) for r in runs["trl"]])
        ours = mean([mean([r["right"][i] for i in idx]) for r in runs["ours"]])
        d = [diff[i] for i in idx]
        lo, hi = bootstrap_ci(d)
        out[name] = {"trl": trl, "ours": ours, "diff": mean(d), "ci": [lo, hi]}
        print(f"| {name} | {len(idx)} | {trl:.3f} | {ours:.3f} | {mean(d):+.3f} [{lo:+.3f}, {hi:+.3f}] |")
    t_trl, t_ours = mean([r["seconds"] for r in runs["trl"]]), mean([r["seconds"] for r in runs["ours"]])
    out["seconds"] = {"trl": t_trl, "ours": t_ours, "ratio": t_trl / t_ours}
    print(f"whole training run: TRL {t_trl:.0f} s, ours {t_ours:.0f} s: ours {t_trl / t_ours:.2f}x faster\n")
    return out


if __name__ == "__main__":
    main()
