"""DPO training speed and memory: TRL's DPOTrainer vs ours, equal work, one run.

    .venv/bin/python benchmarks/dpo_vs_trl.py                           # full and LoRA, 16 steps, auto precision
    .venv/bin/python benchmarks/dpo_vs_trl.py --modes full --precision fp32 --profile
    .venv/bin/python benchmarks/dpo_vs_trl.py --trl-settings eager,compile,eager-precompute

Model: builtin:smollm2-135m-instruct (`--model` names another), sigmoid loss (beta 0.1), batch 8 pairs, max length
512. Equal work on both sides exactly as in `rm_train_vs_trl.py` (the same pairs from one file, nothing dropped or
truncated; one epoch; the same precision and weight dtypes; the same allocator settings; each side in its own
process). The reference: under LoRA both sides use the base with adapters disabled, in every step; with full
fine-tuning TRL keeps a second model and runs it in every step (its default), or precomputes the reference
log-probs before training (setting `*-precompute`, timed and counted in its time), and ours precomputes them into
an empty cache, counted in its time; a side's steady rate then spreads that pass over the epoch's pairs. TRL's
fastest setting in steady state is the baseline. Printed as by `rm_train_vs_trl.py`.

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

    import torch
    from datasets import Dataset
    from trl import DPOConfig, DPOTrainer

    from prefalign.models.hub import load_causal_lm, load_tokenizer

    lora = args.mode == "lora"
    precompute = args.setting.endswith("-precompute")
    setting = args.setting.removesuffix("-precompute")
    meter = WorkMeter(model_dims(args.model), lora, not precompute, "-gc" in setting, "completion_mask")
    meter.install()
    ref_seconds = [0.0]
    original = DPOTrainer._precompute_ref_logps

    def timed_precompute(self, *a, **k):  # runs inside DPOTrainer(...), before train(): timed here
        t = time.perf_counter()
        try:
            return original(self, *a, **k)
        finally:
            ref_seconds[0] += time.perf_counter() - t

    DPOTrainer._precompute_ref_logps = timed_precompute
    tok = load_tokenizer(args.model)
    model = load_causal_lm(args.model, dtype=trl_model_dtype(args.precision, lora))
    peft_config = lora_config("CAUSAL_LM") if lora else None
    trainer = DPOTrainer(
        model=model,
        args=DPOConfig(
            **trl_args(setting, args.precision, args.steps, out, args.batch, args.max_length),
            learning_rate=1e-6,
            beta=0.1,
            precompute_ref_log_probs=precompute,
        ),
        train_dataset=Dataset.from_list(trl_rows(read_pairs(args.data))),
        processing_class=tok,
        peft_config=peft_config,
    )
    ds = trainer.train_dataset
    over = sum(
        len(p) + max(len(c), len(r)) > args.max_length
        for p, c, r in zip(ds["prompt_ids"], ds["chosen_ids"], ds["rejected_ids"], strict=True)
    )
    torch.manual_seed(0)
    t = time.perf_counter()
    trainer.train()
    dt = time.perf_counter() - t + ref_seconds[0]
    res = side_result(args, dt, len(ds), f"; {over} of {len(ds)} pairs truncated by TRL" if over else "")
    if ref_seconds[0]:
        res |= {"extra_seconds": ref_seconds[0], "extra_what": "reference log-probs"}
    return res, meter


def side_ours(args: argparse.Namespace, out: str) -> tuple[dict, WorkMeter]:
    from align.train import TrainConfig, run
    from prefalign.config import build

    lora = args.mode == "lora"
    meter = WorkMeter(model_dims(args.model), lora, lora, False, "lengths")
    meter.install()
    cfg = build(
        TrainConfig,
        {
            "model": args.model,
            "output_dir": out,
            "save_merged": False,
            "data": {"source": args.data, "split": "all"},
            "eval": {"split": "none"},
            "loss": {"name": "sigmoid", "params": {"beta": 0.1}},
            "train": ours_train_section(args, lr=1e-6),
        },
    )
    report = run(cfg)
    ref_seconds = float(report["reference"].get("seconds", 0.0) or 0.0)
    seconds, kept = report["train_seconds"] + ref_seconds, report["train_pairs"]
    res = side_result(args, seconds, kept, kept_note(args, kept)) | {"compiled_graphs": report.get("compiled_graphs")}
    if ref_seconds:
        res |= {"extra_seconds": ref_seconds, "extra_what": "reference log-probs"}
    return res, meter


def main() -> None:
    sides = {"trl": side_trl, "ours": side_ours}
    pair_benchmark_main(__doc__, __file__, sides, "DPO sigmoid (beta 0.1)", "TRL DPOTrainer")


if __name__ == "__main__":
    main()
