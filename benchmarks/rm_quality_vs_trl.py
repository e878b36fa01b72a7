"""Reward-model quality on human labels: TRL's RewardTrainer vs `align rm train`, the same pairs and settings, seeds.

    .venv/bin/python benchmarks/rm_quality_vs_trl.py                                   # LoRA and full, 3 seeds
    .venv/bin/python benchmarks/rm_quality_vs_trl.py --modes lora --seeds 0 --train-pairs 64 --eval-pairs 100
    .venv/bin/python benchmarks/rm_quality_vs_trl.py --keep benchmarks/results/quality --modes full --seeds 0
    .venv/bin/python benchmarks/rm_quality_vs_trl.py --keep benchmarks/results/quality   # the rest; tables over all

Data: HH-RLHF helpful-base and harmless-base (`../shared/data/hh-rlhf`, the test splits: no train split is public
here), each cut by a hash of the prompt into train (80%) and held-out (20%) as `align rm train` cuts them
(`data.split_fractions: [0.8, 0, 0.2]`, so no prompt is in both). From each subset, in file order, the first
--train-pairs / 2 train pairs and the first --eval-pairs / 2 held-out pairs whose renderings fit --max-length
tokens: one train file and one held-out file that both sides read, so neither drops nor truncates a pair.

Equal settings: SmolLM2-135M-Instruct (`builtin:`), Bradley-Terry loss, one epoch (train pairs / 8 steps of 8
pairs), lr (--lr-lora / --lr-full; LoRA 5e-4 as `configs/rm_hh.yaml`: at 2e-4 both sides stayed at chance on 256
pairs) with the same schedule (linear decay, no warm-up: TRL's default, set on ours),
the same max length, precision (`auto`: bf16 where native, else fp32 on both), LoRA r 16 / alpha 32 on every
projection with the score head trained (LoRA mode), and the seed (the Trainer's: score-head init and data order).
Both keep every activation for the backward (TRL's configs default to activation checkpointing, which recomputes
each forward in the backward; it is turned off, TRL's fastest). Each side trains in its own process.

One judge for both: each trained RM is scored in plain transformers (`AutoModelForSequenceClassification`, fp32,
one sequence per forward, no padding) on the chat template's rendering of prompt + response, the reward read at
the last token as both sides train it; a held-out pair is right when chosen scores above rejected (ties wrong).

Printed per mode: held-out accuracy per side and seed, overall and for helpful and harmless; the mean paired
difference ours − TRL with a 95% bootstrap interval (per held-out pair, its difference averaged over the seeds;
pairs resampled), overall and per subset; each side's whole training time (data preparation included, the judge's
scoring not) and the ratio, over the seeds whose TRL run kept its activations (a result kept before that setting
counts for accuracy only). Timings depend on the machine (its line is printed first).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import (  # noqa: E402
    MODEL,
    lora_config,
    ours_rm_config,
    read_pairs,
    trl_model_dtype,
    trl_rows,
)
from benchmarks.quality import (  # noqa: E402
    HH_SUBSETS,
    accuracy_table,
    parser,
    plain_reward,
    run_child,
    run_sides,
    start,
    subset_means,
    time_ratio,
    train_section,
    train_trl,
    trl_settings,
    write_results,
)

# --- the judge -------------------------------------------------------------------------------------------------


def judge(model, tok, held_file: str) -> list[float]:
    """Per held-out pair: 1.0 when the RM scores chosen above rejected, else 0.0 (plain transformers, fp32)."""
    import torch

    model = model.float().eval()
    out = []
    with torch.no_grad():
        for p in read_pairs(held_file):
            chosen, rejected = (
                plain_reward(model, tok, [m.to_dict() for m in (*p.prompt, *side)]) for side in (p.chosen, p.rejected)
            )
            out.append(1.0 if chosen > rejected else 0.0)
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
    config = RewardConfig(**trl_settings(args, out, len(rows)))
    peft_config = lora_config("SEQ_CLS", modules_to_save=["score"]) if lora else None
    trainer = RewardTrainer(
        model=model, args=config, train_dataset=Dataset.from_list(rows), processing_class=tok, peft_config=peft_config
    )
    timing, trained = train_trl(trainer, lora, t)
    return {**timing, "right": judge(trained, tok, args.held)}


def side_ours(args: argparse.Namespace, out: str) -> dict:
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from reward_models.rm_train import run

    t = time.perf_counter()
    rep = run(ours_rm_config(out, args.data, train_section(args)))
    seconds = time.perf_counter() - t
    rm_dir = rep["model_dir"]
    model = AutoModelForSequenceClassification.from_pretrained(rm_dir, dtype="float32")
    right = judge(model, AutoTokenizer.from_pretrained(rm_dir), args.held)
    return {"seconds": seconds, "kept": rep["train_pairs"], "right": right}


SIDES = {"trl": side_trl, "ours": side_ours}


# --- the parent ------------------------------------------------------------------------------------------------


def main() -> None:
    args = parser(__doc__, "lora,full", lr_lora=5e-4, lr_full=1e-5).parse_args()
    if args.child:
        run_child(args, SIDES)
        return
    with tempfile.TemporaryDirectory() as tmp:
        precision, train_file, held_file, subset_of, results = start(args, Path(tmp))
        child = ["--precision", precision, "--data", str(train_file), "--held", str(held_file)]
        child += ["--max-length", str(args.max_length)]

        def line(r: dict) -> str:
            acc = subset_means(r["right"], subset_of)
            return "accuracy " + "  ".join(f"{name} {acc[name]:.3f}" for name in ("all", *HH_SUBSETS))

        for mode in args.modes.split(","):
            runs = run_sides(__file__, args, mode, child, line, results)
            print()
            table = accuracy_table(runs, subset_of, "right", f"{mode}: held-out accuracy")
            results["modes"][mode] = {"runs": runs, **table, "seconds": time_ratio(runs)}
    write_results(args, results)


if __name__ == "__main__":
    main()
