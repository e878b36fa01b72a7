"""`align rm ...`: train, score with, and measure preference strength with reward models."""

from __future__ import annotations

import argparse

TRAIN_EXAMPLE = (
    "align rm train --config configs/rm_suite.yaml\n"
    "  align rm train --config configs/judge_pair_pm_suite.yaml   # a generative judge (kind: judge_train)\n"
    "  align rm train --config configs/rm_hh.yaml train.max_steps=50 train.lr=5e-5\n"
    "  align rm train --config configs/rm_suite.yaml --resume\n"
    "  torchrun --nproc_per_node 2 -m align.cli.main rm train --config configs/rm_suite.yaml"
)
SCORE_EXAMPLE = (
    "align rm score --model runs/rm/model --data pairs.jsonl --out scores.jsonl\n"
    "  align rm score --model runs/rm/model --data ../shared/data/hh-rlhf/helpful-base/"
    "test.decontaminated.jsonl.gz --out hh_scores.jsonl --raw"
)


def cmd_train(args: argparse.Namespace) -> int:
    """A scalar RM (config kind rm_train, the default) or a generative judge (kind judge_train)."""
    import importlib
    from typing import Any

    from prefalign.config import load, read_yaml

    data = read_yaml(args.config) if args.config else {}
    judge = isinstance(data, dict) and data.get("kind") == "judge_train"
    recipe: Any = importlib.import_module("reward_models.judge_train" if judge else "reward_models.rm_train")
    cfg = load(recipe.JudgeTrainConfig if judge else recipe.RMTrainConfig, args.config, args.overrides)
    report = recipe.run(cfg, resume=args.resume)
    if report:
        print("\n".join(recipe.summary_lines(report)))
        print(f"report: {report['run_report']} (numbers: {cfg.output_dir}/report.json)")
    return 0


def cmd_score(args: argparse.Namespace) -> int:
    from reward_models.score_cli import score_file

    n, path = score_file(
        args.model,
        args.data,
        args.out,
        normalize=not args.raw,
        fmt=args.format,
        dtype=args.dtype,
        batch_tokens=args.batch_tokens,
    )
    print(f"wrote {n} scores to {path}")
    return 0


def cmd_strength(args: argparse.Namespace) -> int:
    from prefalign.config import load
    from reward_models.strength import StrengthConfig, run_strength

    cfg = load(StrengthConfig, args.config, args.overrides)
    report = run_strength(cfg)
    print(f"preference strength of {report['pairs']} pairs from {report['members']} reward models -> {report['file']}")
    print(
        f"mean difference < 0 for {report['negative_fraction']:.1%} of pairs; "
        f"std of the difference (median) {report['median_std']:.3f}"
    )
    return 0


def register(sub: argparse._SubParsersAction, add) -> None:
    from reward_models.scorers import BATCH_TOKENS  # plain data: the scorer table module imports no torch

    rm = sub.add_parser("rm", help="train and use reward models")
    rsub = rm.add_subparsers(dest="rm_verb", metavar="VERB")
    p = add(rsub, "train", cmd_train, "train a Bradley-Terry reward model from a config", TRAIN_EXAMPLE)
    p.add_argument("--config", required=True, help="an rm_train YAML (see configs/)")
    p.add_argument("--resume", action="store_true", help="continue from the last checkpoint in output_dir")
    p.add_argument("overrides", nargs="*", help="dotted overrides, e.g. train.lr=5e-5")
    p = add(rsub, "score", cmd_score, "score every response of a data file with a reward model", SCORE_EXAMPLE)
    p.add_argument("--model", required=True, help="a trained RM directory (or any sequence-classification model)")
    p.add_argument("--data", required=True, help="pairs, rated responses or (prompt, response) rows")
    p.add_argument("--out", required=True, help="output JSONL: one row per response")
    p.add_argument("--format", default="auto", help="input format (default: detect)")
    p.add_argument("--raw", action="store_true", help="raw rewards instead of normalised (r - mean) / std")
    p.add_argument(
        "--dtype",
        default="auto",
        choices=["auto", "bfloat16", "float32"],
        help="auto: bfloat16 where the device runs it natively, else float32",
    )
    p.add_argument("--batch-tokens", type=int, default=BATCH_TOKENS, help="token budget per scoring batch")
    p = add(
        rsub,
        "strength",
        cmd_strength,
        "train (or load) an ensemble of RMs and write per-pair preference strength (mean/std of r_c - r_r)",
        "align rm strength --config configs/rm_strength_suite.yaml",
    )
    p.add_argument("--config", required=True, help="an rm_strength YAML")
    p.add_argument("overrides", nargs="*")
