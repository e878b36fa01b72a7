"""Reward-model training speed: TRL's RewardTrainer vs ours, equal work, one run.

    .venv/bin/python benchmarks/rm_train_vs_trl.py                      # full and LoRA, 16 steps, auto precision
    .venv/bin/python benchmarks/rm_train_vs_trl.py --modes full --precision fp32 --profile
    .venv/bin/python benchmarks/rm_train_vs_trl.py --trl-settings eager,compile,eager-gc

Model: builtin:smollm2-135m-instruct (`--model` names another), Bradley-Terry loss, batch 8 pairs, max length 512.
Equal work on both sides: the same pairs (the first steps x 8 HH-RLHF helpful-base pairs whose renderings fit 512
tokens, written to one file both read, so neither drops nor truncates any), one epoch over them; the same precision
(`auto`: bf16 where this CPU multiplies bf16 natively, else fp32 for both; trained weights fp32 on both, a frozen
LoRA base bf16 on both in a bf16 run); the same glibc allocator settings (`--allocator`); each side in its own
process, so its time and peak memory (max RSS) are its own. TRL runs in every setting given (eager, torch_compile,
optionally gradient checkpointing) and its fastest in steady state is the baseline. Ours runs twice: with an empty
torch.compile cache (a first run on a machine: compiling paid and timed) and with the cache that run filled.
Printed: the machine (CPU, vector capability, native bf16), pairs/s over the whole run and in steady state, peak
memory, each side's matmul FLOP rate (from the batches it really ran, padding included) as a fraction of this
machine's matmul peak in the run's precision, tokens through the model, and the ratios to TRL's best.

On a machine with a GPU both sides run on it (`--device cpu` hides it), the matmul peak is the GPU's and each
side's peak GPU memory is printed beside its max RSS; `--compile off` runs our side eager (a GPU run does anyway).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import (  # noqa: E402
    WorkMeter,
    kept_note,
    lora_config,
    model_dims,
    ours_rm_config,
    ours_train_section,
    pair_benchmark_main,
    read_pairs,
    side_result,
    trl_args,
    trl_model_dtype,
    trl_rows,
)


def side_trl(args: argparse.Namespace, out: str) -> tuple[dict, WorkMeter]:
    import time

    from datasets import Dataset
    from trl import RewardConfig, RewardTrainer

    from prefalign.models.hub import load_seq_cls, load_tokenizer

    lora = args.mode == "lora"
    meter = WorkMeter(model_dims(args.model), lora, False, "-gc" in args.setting, None)
    meter.install()
    tok = load_tokenizer(args.model)
    model = load_seq_cls(args.model, dtype=trl_model_dtype(args.precision, lora))
    model.config.pad_token_id = tok.pad_token_id
    peft_config = lora_config("SEQ_CLS", modules_to_save=["score"]) if lora else None
    trainer = RewardTrainer(
        model=model,
        args=RewardConfig(
            **trl_args(args.setting, args.precision, args.steps, out, args.batch, args.max_length), learning_rate=1e-5
        ),
        train_dataset=Dataset.from_list(trl_rows(read_pairs(args.data))),
        processing_class=tok,
        peft_config=peft_config,
    )
    ds = trainer.train_dataset
    over = sum(max(len(c), len(r)) > args.max_length for c, r in zip(ds["chosen_ids"], ds["rejected_ids"], strict=True))
    t = time.perf_counter()
    trainer.train()
    dt = time.perf_counter() - t
    return side_result(args, dt, len(ds), f"; {over} of {len(ds)} pairs truncated by TRL" if over else ""), meter


def side_ours(args: argparse.Namespace, out: str) -> tuple[dict, WorkMeter]:
    from reward_models.rm_train import run

    lora = args.mode == "lora"
    meter = WorkMeter(model_dims(args.model), lora, False, False, None)
    meter.install()
    report = run(ours_rm_config(out, args.data, ours_train_section(args, lr=1e-5), args.model))
    kept = report["train_pairs"]
    res = side_result(args, report["train_seconds"], kept, kept_note(args, kept))
    return res | {"compiled_graphs": report.get("compiled_graphs")}, meter


def main() -> None:
    sides = {"trl": side_trl, "ours": side_ours}
    pair_benchmark_main(__doc__, __file__, sides, "Bradley-Terry", "TRL RewardTrainer")


if __name__ == "__main__":
    main()
