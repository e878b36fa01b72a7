"""Training glue shared by every trainer (reward models in `reward_models`, policies in `align`).

Built on `transformers.Trainer`, so gradient accumulation, checkpoints, `--resume`, `report_to`
integrations and DDP / FSDP / DeepSpeed through `accelerate launch` or `torchrun` come from there.

    config.py      the config sections every training recipe shares (train, lora, held-out eval)
    trainer.py     LoRA set-up, precision, dropout, TrainingArguments, compiled layers, checkpoints, resume, eval-every
    metrics.py     metric averaging between logging steps, metrics.jsonl, training-health alerts (alerts.jsonl)
    evaluation.py  held-out pair accuracy, overall and per source / family / corruption (RMs and policies)
    report.py      the run report: report.html and one dashboard figure, from a run directory's files alone
    recipe.py      the skeleton every training recipe shares: run directory, train, report
"""
