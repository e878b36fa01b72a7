"""`align train`: offline preference optimization (DPO, IPO, SimPO, robust/hinge/cDPO, an INPO step) from a config."""

from __future__ import annotations

import argparse

TRAIN_EXAMPLE = (
    "align train --config configs/dpo_suite.yaml\n"
    "  align train --config configs/simpo_suite.yaml train.max_steps=50 train.lr=1e-5\n"
    "  align train --config configs/ipo_suite.yaml loss.params.beta=0.5\n"
    "  align train --config configs/inpo_suite.yaml previous.model=runs/iter1/merged\n"
    "  align train --config configs/dpo_hh.yaml --resume\n"
    "  align train --config configs/dpo_suite.yaml train.method=full reference.kind=precomputed\n"
    "  torchrun --nproc_per_node 2 -m align.cli.main train --config configs/dpo_suite.yaml\n"
    "  (the losses: `align ls losses`; check a config first: `align validate configs/dpo_suite.yaml`)"
)


def cmd_train(args: argparse.Namespace) -> int:
    from align.train import TrainConfig, run, summary_lines
    from prefalign.config import load

    cfg = load(TrainConfig, args.config, args.overrides)  # every config problem, the loss's included, before loading
    report = run(cfg, resume=args.resume)
    if report:
        print("\n".join(summary_lines(report)))
        print(f"report: {report['run_report']} (numbers: {cfg.output_dir}/report.json)")
    return 0


def register(sub: argparse._SubParsersAction, add) -> None:
    p = add(
        sub,
        "train",
        cmd_train,
        "train a policy on preference pairs (DPO family, SimPO, INPO) from a config",
        TRAIN_EXAMPLE,
    )
    p.add_argument("--config", required=True, help="a `kind: train` YAML (see configs/)")
    p.add_argument("--resume", action="store_true", help="continue from the last checkpoint in output_dir")
    p.add_argument("overrides", nargs="*", help="dotted overrides, e.g. train.lr=5e-6 loss.params.beta=0.05")
