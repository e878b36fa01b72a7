"""`align train`: train a policy from a config (offline pairs, online RL, iterative rounds; the kinds below)."""

from __future__ import annotations

import argparse
import importlib
from typing import Any

from align.cli.common import add_config_args, config_and_overrides, guard_earlier_run
from align.cli.configs import check_resources, config_class
from prefalign.config import load, read_yaml
from prefalign.errors import ConfigError, did_you_mean

TRAIN_EXAMPLE = (
    "align train configs/dpo_suite.yaml\n"
    "  align train configs/simpo_suite.yaml train.max_steps=50 train.lr=1e-5\n"
    "  align train configs/ipo_suite.yaml loss.params.beta=0.5\n"
    "  align train configs/inpo_suite.yaml previous.model=runs/iter1/merged\n"
    "  align train configs/dpo_hh.yaml --resume\n"
    "  align train configs/dpo_suite.yaml train.method=full reference.kind=precomputed\n"
    "  torchrun --nproc_per_node 2 -m align.cli.main train --config configs/dpo_suite.yaml\n"
    "  align train configs/grpo_suite.yaml            (online: GRPO against the suite RM)\n"
    "  align train configs/iterative_dpo_suite.yaml   (iterative DPO rounds; --resume continues a round)\n"
    "  (the losses: `align ls losses`; check a config first: `align validate configs/dpo_suite.yaml`)"
)


TRAIN_KINDS = {
    "train": "align.train",  # offline pairs
    "online": "align.online",  # GRPO / RLOO / REINFORCE / pairwise RLHF / judges by RL
    "iterative": "align.iterative",  # iterative DPO / INPO rounds
}


def cmd_train(args: argparse.Namespace) -> int:
    path, overrides = config_and_overrides(args)
    assert path is not None  # required: config_and_overrides says how to give one
    data = read_yaml(path)
    kind = data.get("kind", "train") if isinstance(data, dict) else "train"
    if kind not in TRAIN_KINDS:
        raise ConfigError(
            [
                f"kind: '{kind}' is not trained by `align train`{did_you_mean(str(kind), list(TRAIN_KINDS))}; "
                f"it runs {', '.join(TRAIN_KINDS)} (reward models: `align rm train`)"
            ],
            path,
        )
    module = importlib.import_module(TRAIN_KINDS[kind])
    cfg: Any = load(config_class(kind), path, overrides)  # every config problem before loading a model
    for note in check_resources(cfg, path or "the config"):  # models, output_dir, every data row: before any work
        print(f"check: {note}", flush=True)
    guard_earlier_run(cfg.output_dir, args.resume, args.overwrite, f"align train {path}")
    report = module.run(cfg, resume=args.resume)
    if report:
        print("\n".join(module.summary_lines(report)))
        print(f"report: {report['run_report']} (numbers: {cfg.output_dir}/report.json)")
    return 0


def register(sub: argparse._SubParsersAction, add) -> None:
    p = add(
        sub,
        "train",
        cmd_train,
        "train a policy from a config: offline pairs (kind train: DPO family, SimPO, INPO), online RL (kind online: "
        "GRPO, RLOO, REINFORCE, pairwise RLHF, judges by RL) or iterative rounds (kind iterative: DPO, INPO)",
        TRAIN_EXAMPLE,
    )
    add_config_args(p, "a `kind: train | online | iterative` YAML (see configs/, or write one with `align init`)")
    p.add_argument("--resume", action="store_true", help="continue from the last checkpoint in output_dir")
    p.add_argument(
        "--overwrite", action="store_true", help="start over where output_dir holds an earlier run's checkpoints"
    )
