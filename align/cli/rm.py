"""`align rm ...`: train, score with, and measure preference strength with reward models."""

from __future__ import annotations

import argparse

TRAIN_EXAMPLE = (
    "align rm train --config configs/rm_suite.yaml\n"
    "  align rm train --config configs/judge_pair_pm_suite.yaml   # a generative judge (kind: judge_train)\n"
    "  align rm train --config configs/meta_rm_grm_suite.yaml     # a GRM's meta-RM (kind: meta_rm_train)\n"
    "  align rm train --config configs/polar_pool_suite.yaml      # POLAR: a policy pool (kind: polar_pool)\n"
    "  align rm train --config configs/polar_pretrain_suite.yaml  # POLAR pre-training (kind: polar_train)\n"
    "  align rm train --config configs/polar_finetune_suite.yaml  # POLAR fine-tuning (kind: polar_train)\n"
    "  align rm train --config configs/rm_hh.yaml train.max_steps=50 train.lr=5e-5\n"
    "  align rm train --config configs/rm_suite.yaml --resume\n"
    "  torchrun --nproc_per_node 2 -m align.cli.main rm train --config configs/rm_suite.yaml"
)
SCORE_EXAMPLE = (
    "align rm score --model runs/rm/model --data pairs.jsonl --out scores.jsonl\n"
    "  align rm score --model runs/rm/model --data ../shared/data/hh-rlhf/helpful-base/"
    "test.decontaminated.jsonl.gz --out hh_scores.jsonl --raw"
)


RM_TRAIN_KINDS = ("rm_train", "judge_train", "meta_rm_train", "polar_pool", "polar_train", "mo_rm_train")
"""Config kinds `align rm train` runs (their module has `run` and `summary_lines`); a YAML without a kind, or
with another, is read as rm_train, whose loader then names the unknown kind."""


def cmd_train(args: argparse.Namespace) -> int:
    """A scalar RM (config kind rm_train, the default), a generative judge (kind judge_train), a GRM's
    meta-RM (kind meta_rm_train), a POLAR policy pool (kind polar_pool), a POLAR RM (kind polar_train) or a
    multi-objective RM (kind mo_rm_train)."""
    import importlib
    from typing import Any

    from align.cli.configs import KINDS
    from prefalign.config import load, read_yaml

    data = read_yaml(args.config) if args.config else {}
    kind = data.get("kind") if isinstance(data, dict) else None
    module, config = KINDS[kind if kind in RM_TRAIN_KINDS else "rm_train"]
    recipe: Any = importlib.import_module(module)
    cfg = load(getattr(recipe, config), args.config, args.overrides)
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


SCALING_EXAMPLE = (
    "align rm scaling --model runs/judge_grm/model --k 1,2,4,8 --limit 100\n"
    "  align rm scaling --model runs/judge_grm/model --meta-model runs/meta_rm_grm/model --out runs/grm_scaling.json"
)


def cmd_scaling(args: argparse.Namespace) -> int:
    import dataclasses
    import json
    from pathlib import Path

    from prefalign.errors import UserError
    from preference_data.sources import DataConfig
    from preference_data.sources import load as load_source
    from reward_models.generative.scaling import measure

    try:
        ks = sorted({int(k) for k in args.k.split(",")})
    except ValueError:
        raise UserError(f"--k: a comma-separated list of integers such as 1,2,4,8, got {args.k!r}") from None
    data = dataclasses.replace(DataConfig(), source=args.data, split=args.split, limit=args.limit)
    pairs = load_source(data).pairs
    if not pairs:
        raise UserError(f"--data {args.data} --split {args.split}: no pairs to score")
    result = measure(
        args.model,
        pairs,
        ks,
        meta_model=args.meta_model,
        k_meta=args.k_meta,
        temperature=args.temperature,
        max_new_tokens=args.max_new_tokens,
        seed=args.seed,
        dtype=args.dtype,
    )
    result |= {"data": args.data, "split": args.split, "limit": args.limit}
    print(f"{'k':>3}  {'voting':<6} {'accuracy':>8}  95% interval  {'ties':>5}  ({result['pairs']} pairs, ties wrong)")
    for p in result["curve"]:
        voting = p["voting"] + (f"/{p['k_meta']}" if p["k_meta"] else "")
        print(f"{p['k']:>3}  {voting:<6} {p['accuracy']:>8.3f}  {p['low']:.3f}..{p['high']:.3f}  {p['ties']:>5.3f}")
    c = result["cost"]
    print(
        f"cost: {c['generated_tokens_per_item'] / ks[-1]:.0f} generated tokens and "
        f"{c['seconds_per_item'] / ks[-1]:.2f}s per critique; abstentions {result['abstentions'] or 'none'}"
    )
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=2))
        print(f"wrote {args.out}")
    return 0


COMPARE_EXAMPLE = (
    "align rm compare --scorer polar=polar:runs/polar_finetune_suite/model "
    "--scorer polar_no_pretrain=polar:runs/polar_finetune_nopretrain_suite/model "
    "--scorer bt=scalar:runs/quickstart/rm/model --out runs/polar_compare.json"
)


def cmd_compare(args: argparse.Namespace) -> int:
    import dataclasses
    import json
    from pathlib import Path

    from prefalign.errors import UserError
    from reward_models.compare import ScorerSpec, compare, summary_lines

    specs = [ScorerSpec.parse(s) for s in args.scorer]
    if args.data == "suite":
        from preference_data.suite import build_suite, with_references

        suite = build_suite(args.suite_per_family, args.suite_seed)
        pairs = with_references(suite, suite.test_pairs if args.split == "test" else suite.train_pairs)
    else:
        from preference_data.sources import DataConfig
        from preference_data.sources import load as load_source

        pairs = load_source(dataclasses.replace(DataConfig(), source=args.data, split="all")).pairs
    if args.limit is not None:
        pairs = pairs[: args.limit]
    if not pairs:
        raise UserError(f"--data {args.data}: no pairs to score")
    result = compare(specs, pairs, bootstrap=args.bootstrap)
    result |= {"data": args.data, "split": args.split, "limit": args.limit}
    print("\n".join(summary_lines(result)))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=2))
        print(f"wrote {args.out}")
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
    p = add(
        rsub,
        "train",
        cmd_train,
        "train a reward model from a config: Bradley-Terry (rm_train), a generative judge (judge_train), "
        "a GRM meta-RM (meta_rm_train), POLAR (polar_pool, polar_train)",
        TRAIN_EXAMPLE,
    )
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
    p = add(
        rsub,
        "scaling",
        cmd_scaling,
        "pointwise GRM pair accuracy at k sampled critiques (plain and meta-RM voting), with bootstrap intervals",
        SCALING_EXAMPLE,
    )
    p.add_argument("--model", required=True, help="the GRM (a judge_train run's model/ directory, or any causal LM)")
    p.add_argument("--meta-model", default=None, help="a meta-RM (kind meta_rm_train) for meta-guided voting")
    p.add_argument("--k-meta", type=int, default=None, help="critiques the meta-RM keeps (default: half of k)")
    p.add_argument("--k", default="1,2,4,8", help="sample counts, each dividing the largest (default 1,2,4,8)")
    p.add_argument("--data", default="suite", help="labelled pairs: suite, a file, or a hub id (default suite)")
    p.add_argument("--split", default="test", choices=["train", "dev", "test", "all"], help="default test")
    p.add_argument("--limit", type=int, default=None, help="score only the first N pairs")
    p.add_argument("--temperature", type=float, default=0.8, help="sampling temperature (default 0.8)")
    p.add_argument("--max-new-tokens", type=int, default=160, help="longest critique (default 160)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", default="auto", choices=["auto", "bfloat16", "float32"])
    p.add_argument("--out", default=None, help="write the curve, cost and settings as JSON here")
    p = add(
        rsub,
        "compare",
        cmd_compare,
        "several scorers on the same held-out pairs: accuracy with bootstrap intervals, paired differences to the "
        "first, seconds per pair",
        COMPARE_EXAMPLE,
    )
    p.add_argument(
        "--scorer", action="append", required=True, help="LABEL=KIND:MODEL (repeat; the first is the baseline)"
    )
    p.add_argument("--data", default="suite", help="suite (its pairs with reference answers) or a pairs file")
    p.add_argument("--split", default="test", choices=["train", "test"], help="suite split (default test)")
    p.add_argument("--suite-per-family", type=int, default=200, help="suite tasks per family (default 200)")
    p.add_argument("--suite-seed", type=int, default=0)
    p.add_argument("--limit", type=int, default=None, help="score only the first N pairs")
    p.add_argument("--bootstrap", type=int, default=2000, help="bootstrap resamples (default 2000)")
    p.add_argument("--out", default=None, help="write the numbers as JSON here")
