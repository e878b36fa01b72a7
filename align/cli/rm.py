"""`align rm ...`: train, score with, and measure preference strength with reward models."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from align.cli.common import HelpFormatter, add_config_args, config_and_overrides, guard_earlier_run
from prefalign.config import load, option, read_yaml
from prefalign.errors import UserError
from prefalign.files import write_json
from prefalign.models.precision import DTYPES
from reward_models.scorers import BATCH_TOKENS

from .configs import KINDS, check_resources

TRAIN_EXAMPLE = (
    "align rm train configs/rm_suite.yaml\n"
    "  align rm train configs/judge_pair_pm_suite.yaml   # a generative judge (kind: judge_train)\n"
    "  align rm train configs/meta_rm_grm_suite.yaml     # a GRM's meta-RM (kind: meta_rm_train)\n"
    "  align rm train configs/polar_pool_suite.yaml      # POLAR: a policy pool (kind: polar_pool)\n"
    "  align rm train configs/polar_pretrain_suite.yaml  # POLAR pre-training (kind: polar_train)\n"
    "  align rm train configs/polar_finetune_suite.yaml  # POLAR fine-tuning (kind: polar_train)\n"
    "  align rm train configs/rm_hh.yaml train.max_steps=50 train.lr=5e-5\n"
    "  align rm train configs/rm_suite.yaml --resume\n"
    "  torchrun --nproc_per_node 2 -m align.cli.main rm train --config configs/rm_suite.yaml"
)
SCORE_EXAMPLE = (
    "align rm score --model runs/rm/model --data pairs.jsonl --out scores.jsonl\n"
    "  align rm score --model runs/rm/model --data hh_test.jsonl.gz --out hh_scores.jsonl --raw"
)


RM_TRAIN_KINDS = ("rm_train", "judge_train", "meta_rm_train", "polar_pool", "polar_train", "mo_rm_train")
"""Config kinds `align rm train` runs (their module has `run` and `summary_lines`); a YAML without a kind, or
with another, is read as rm_train, whose loader then names the unknown kind."""


def cmd_train(args: argparse.Namespace) -> int:
    """A scalar RM (config kind rm_train, the default), a generative judge (kind judge_train), a GRM's
    meta-RM (kind meta_rm_train), a POLAR policy pool (kind polar_pool), a POLAR RM (kind polar_train) or a
    multi-objective RM (kind mo_rm_train)."""
    path, overrides = config_and_overrides(args)
    data = read_yaml(path) if path else {}
    kind = data.get("kind") if isinstance(data, dict) else None
    module, config = KINDS[kind if kind in RM_TRAIN_KINDS else "rm_train"]
    recipe: Any = importlib.import_module(module)
    cfg = load(getattr(recipe, config), path, overrides)
    for note in check_resources(cfg, path or "the config"):  # models, output_dir, every data row: before any work
        print(f"check: {note}", flush=True)
    guard_earlier_run(cfg.output_dir, args.resume, args.overwrite, f"align rm train {path}")
    report = recipe.run(cfg, resume=args.resume)
    if report:
        print("\n".join(recipe.summary_lines(report)))
        print(f"report: {report['run_report']} (numbers: {cfg.output_dir}/report.json)")
    return 0


# The settings of `rm score`, `rm scaling` and `rm compare` belong beside their consumers in reward_models
# (score_cli.score_file, generative.scaling.measure, compare.compare); they move there when those modules are next
# changed.


@dataclass(kw_only=True)
class ScoreSettings:
    """`align rm score`: the arguments of `reward_models.score_cli.score_file`."""

    model: str = option(doc="a trained RM directory (or any sequence-classification model)")
    data: str = option(
        doc="preference pairs, rated responses, or one response per row: {prompt, response} (or completion), or "
        "{messages} ending with the assistant's turn"
    )
    out: str = option(doc="output JSONL: one row per response, with its prompt and text beside the score")
    format: str = option("auto", "input format (default: detect)")
    raw: bool = option(False, "raw rewards instead of normalised (r - mean) / std")
    dtype: str = option(
        "float32",
        "float32: the scores of the RM's model card recipe; bfloat16 or auto (bf16 where native) is faster but its "
        "scores differ",
        choices=DTYPES,
    )
    batch_tokens: int = option(BATCH_TOKENS, "token budget per scoring batch")


def cmd_score(s: ScoreSettings) -> int:
    from reward_models.score_cli import score_file  # what a verb runs is imported when it runs (start-up time)

    n, path = score_file(
        s.model,
        s.data,
        s.out,
        normalize=not s.raw,
        fmt=s.format,
        dtype=s.dtype,
        batch_tokens=s.batch_tokens,
    )
    print(f"wrote {n} scores to {path}")
    return 0


PROBE_EXAMPLE = (
    "align rm refusal-probe --data runs/quickstart/suite/train_pairs.jsonl --out runs/refusal_probe\n"
    "  # then beside an RM in a recipe's reward: [{type: scalar, model: runs/rm/model},\n"
    "  #                                         {type: refusal_rule, probe: runs/refusal_probe, weight: 2}]"
)


@dataclass(kw_only=True)
class ProbeSettings:
    """`align rm refusal-probe`: the request probe of the refusal rule (reward_models/refusal_rule.py)."""

    data: str = option(doc="a preference-pairs file; a prompt whose chosen answer declines deserves a refusal")
    out: str = option(doc="the probe's directory (probe.safetensors, probe.json)")
    model: str = option("builtin:smollm2-135m-instruct", "the frozen chat model whose prompt states the probe reads")
    l2: float = option(0.01, "L2 penalty of the logistic regression on standardised states")


def cmd_refusal_probe(s: ProbeSettings) -> int:
    from reward_models.refusal_rule import probe_for  # lazy: torch and the model, when the verb runs

    if not Path(s.data).is_file():
        raise UserError(f"--data {s.data}: not a file; give a preference-pairs file (JSONL, JSON, Parquet)")
    out, card, fitted = probe_for(s.model, s.data, s.out, l2=s.l2)
    print(
        f"refusal probe {'fitted' if fitted else 'already fitted on the same pairs'}: {out}\n"
        f"  {card.refuse} of {card.prompts} prompts deserve a refusal (their chosen answer declines); "
        f"{card.conflicting} with pairs that disagree; training accuracy {card.train_accuracy:.3f}\n"
        f"  use it beside an RM: reward: [{{type: scalar, model: RM}}, {{type: refusal_rule, probe: {out}, "
        "weight: 2}]"
    )
    return 0


SCALING_EXAMPLE = (
    "align rm scaling --model runs/judge_grm/model --k 1,2,4,8 --limit 100\n"
    "  align rm scaling --model runs/judge_grm/model --meta-model runs/meta_rm_grm/model --out runs/grm_scaling.json\n"
    "  align rm scaling --model runs/judge_grm_work/model --k 1,8 --option principles=from_prompt --option read=rule\n"
    "  align rm scaling --draws runs/grm_scaling.json --k 1,2,4,8 --figure runs/grm_k_curve.png"
)


@dataclass(kw_only=True)
class ScalingSettings:
    """`align rm scaling`: which GRM (and meta-RM), on which pairs, at which numbers of sampled critiques."""

    model: str | None = option(
        None, "the GRM (a judge_train run's model/ directory, or any causal LM); required unless --draws"
    )
    meta_model: str | None = option(None, "a meta-RM (kind meta_rm_train) for meta-guided voting")
    k_meta: int | None = option(None, "critiques the meta-RM keeps (default: half of k)")
    k: list[int] = option(factory=lambda: [1, 2, 4, 8], doc="sample counts, each dividing the largest, comma-separated")
    data: str = option("suite", "labelled pairs: suite, a file, or a hub id")
    split: Literal["train", "dev", "test", "all"] = option("test", "the deterministic split to score")
    limit: int | None = option(None, "score only the first N pairs")
    temperature: float = option(0.8, "sampling temperature")
    max_new_tokens: int = option(160, "longest critique in tokens")
    seed: int = option(0, "sampling seed")
    dtype: str = option("auto", "auto: bfloat16 where the device runs it natively, else float32", choices=DTYPES)
    options: dict[str, Any] = option(
        factory=dict,
        doc="any other option of the grm scorer, e.g. principles=from_prompt, read=rule, tools=calculator, "
        "work_prefix=template (repeatable; a wrong key lists the scorer's options)",
        flag="--option",
    )
    out: str | None = option(None, "write the curve, cost and settings as JSON here")
    figure: str | None = option(None, "draw the curve (accuracy against k, its interval) as a PNG here")
    draws: str | None = option(
        None,
        "a JSON an earlier run wrote with --out: the curve at --k from its saved draws, nothing drawn again "
        "(--model and the sampling flags are then unused)",
    )


def _label(model: str) -> str:
    """A model directory's run name (runs/NAME/model -> NAME), else the id as given."""
    path = Path(model)
    return path.parent.name if path.name == "model" and path.parent.name else model


def _save_curve(s: ScalingSettings, result: dict[str, Any], title: str) -> None:
    """The curve drawn to --figure and the result written to --out, where asked."""
    from reward_models.generative.scaling import plot_curve

    if s.figure:
        plot_curve(result["curve"], s.figure, title)
        print(f"figure: {s.figure}")
    if s.out:
        write_json(s.out, result, indent=2)
        print(f"wrote {s.out}")


def _print_curve(curve: list[dict[str, Any]], pairs: int) -> None:
    print(f"{'k':>3}  {'voting':<6} {'accuracy':>8}  95% interval  {'ties':>5}  ({pairs} pairs, ties wrong)")
    for p in curve:
        voting = p["voting"] + (f"/{p['k_meta']}" if p["k_meta"] else "")
        print(f"{p['k']:>3}  {voting:<6} {p['accuracy']:>8.3f}  {p['low']:.3f}..{p['high']:.3f}  {p['ties']:>5.3f}")


def cmd_scaling(s: ScalingSettings) -> int:
    # what a verb runs is imported when it runs: the data readers and the sampler add ~30 ms to every start
    from preference_data.sources import DataConfig
    from preference_data.sources import load as load_source
    from reward_models.generative.scaling import curve_from_draws, measure

    ks = sorted(set(s.k))
    if s.draws is not None:
        saved = json.loads(Path(s.draws).read_text(encoding="utf-8"))
        curve = [p.to_dict() for p in curve_from_draws(saved, ks, s.k_meta)]
        _print_curve(curve, saved["pairs"])
        title = f"{_label(saved['model'])}: {saved['pairs']} pairs ({saved.get('split')})"
        _save_curve(s, saved | {"curve": curve}, title)
        return 0
    if s.model is None:
        raise UserError("--model: the GRM to sample (or --draws: a saved run's draws)")
    named = {f.name for f in dataclasses.fields(ScalingSettings)} & set(s.options)
    if named:
        raise UserError(f"--option {', '.join(sorted(named))}: set by its own flag (--{'/--'.join(sorted(named))})")
    data = dataclasses.replace(DataConfig(), source=s.data, split=s.split, limit=s.limit)
    pairs = load_source(data).pairs
    if not pairs:
        raise UserError(f"--data {s.data} --split {s.split}: no pairs to score")
    result = measure(
        s.model,
        pairs,
        ks,
        meta_model=s.meta_model,
        k_meta=s.k_meta,
        temperature=s.temperature,
        max_new_tokens=s.max_new_tokens,
        seed=s.seed,
        dtype=s.dtype,
        **s.options,
    )
    result |= {"data": s.data, "split": s.split, "limit": s.limit}
    _print_curve(result["curve"], result["pairs"])
    d = result["paired"]
    print(
        f"k={d['k'][1]} - k={d['k'][0]} (plain voting, paired over pairs): {d['difference']:+.3f} "
        f"[{d['low']:+.3f}, {d['high']:+.3f}]"
    )
    m = result["meta_paired"]
    if m is not None:
        print(
            f"k={m['k']}: meta-RM voting - plain voting (paired over pairs): {m['difference']:+.3f} "
            f"[{m['low']:+.3f}, {m['high']:+.3f}]"
        )
    a = result["meta_auc"]
    if a is not None:
        print(
            f"meta-RM ROC AUC on these draws: {a['auc']:.3f} [{a['low']:.3f}, {a['high']:.3f}] "
            f"({a['pairs']} pairs; correct share {a['correct_share']:.3f}); within a pair's draws "
            f"{a['within_pair_auc']:.3f} [{a['within_pair_low']:.3f}, {a['within_pair_high']:.3f}] "
            f"({a['within_pair_pairs']} pairs with right and wrong draws)"
        )
    c = result["cost"]
    print(
        f"cost: {c['generated_tokens_per_item'] / ks[-1]:.0f} generated tokens and "
        f"{c['seconds_per_item'] / ks[-1]:.2f}s per critique; abstentions {result['abstentions'] or 'none'}"
    )
    _save_curve(s, result, f"{_label(s.model)}: {result['pairs']} pairs ({s.split})")
    return 0


COMPARE_EXAMPLE = (
    "align rm compare --scorer polar=polar:runs/polar_finetune_suite/model "
    "--scorer polar_no_pretrain=polar:runs/polar_finetune_nopretrain_suite/model "
    "--scorer bt=scalar:runs/quickstart/rm/model --out runs/polar_compare.json"
)


@dataclass(kw_only=True)
class CompareSettings:
    """`align rm compare`: the scorers (the first is the baseline) and the held-out pairs they score."""

    scorer: list[str] = option(
        doc="LABEL=SPEC, the spec as in `align bench run --help`: bt=scalar:runs/rm/model, bt=runs/rm/model, "
        "j=judge:builtin:smollm2-135m-instruct (repeat; the first is the baseline)"
    )
    data: str = option("suite", "suite (its pairs with reference answers) or a pairs file")
    split: Literal["train", "dev", "test"] = option("test", "suite split (dev needs --suite-dev-fraction)")
    suite_per_family: int = option(200, "suite tasks per family (the quickstart's suite: 275)")
    suite_seed: int = option(0, "suite generator seed")
    suite_dev_fraction: float = option(0.0, "suite share held out as dev (the quickstart's suite: 0.25)")
    suite_test_fraction: float = option(0.2, "suite share held out as test")
    limit: int | None = option(None, "score only the first N pairs")
    bootstrap: int = option(2000, "bootstrap resamples")
    out: str | None = option(None, "write the numbers as JSON here")


def cmd_compare(s: CompareSettings) -> int:
    # what a verb runs is imported when it runs: the suite's generators alone add ~60 ms to every start
    from preference_data.sources import DataConfig
    from preference_data.sources import load as load_source
    from preference_data.suite import build_suite, with_references
    from reward_models.compare import ScorerSpec, compare, summary_lines

    specs = [ScorerSpec.parse(text) for text in s.scorer]
    if s.data == "suite":
        if s.split == "dev" and not s.suite_dev_fraction:
            raise UserError("--split dev: the suite has a dev split only with --suite-dev-fraction (e.g. 0.25)")
        suite = build_suite(s.suite_per_family, s.suite_seed, s.suite_test_fraction, None, s.suite_dev_fraction)
        pairs = with_references(suite, suite.split_lists(s.split)[0])
    else:
        pairs = load_source(dataclasses.replace(DataConfig(), source=s.data, split="all")).pairs
    if s.limit is not None:
        pairs = pairs[: s.limit]
    if not pairs:
        raise UserError(f"--data {s.data}: no pairs to score")
    result = compare(specs, pairs, bootstrap=s.bootstrap)
    result |= {"data": s.data, "split": s.split, "limit": s.limit}
    print("\n".join(summary_lines(result)))
    if s.out:
        write_json(s.out, result, indent=2)
        print(f"wrote {s.out}")
    return 0


def cmd_strength(args: argparse.Namespace) -> int:
    from reward_models.rm_train import run_strength  # imports torch: only when the verb runs
    from reward_models.strength import StrengthConfig

    cfg = load(StrengthConfig, *config_and_overrides(args))
    report = run_strength(cfg)
    print(f"preference strength of {report['pairs']} pairs from {report['members']} reward models -> {report['file']}")
    print(
        f"mean difference < 0 for {report['negative_fraction']:.1%} of pairs; "
        f"std of the difference (median) {report['median_std']:.3f}"
    )
    return 0


def register(sub: argparse._SubParsersAction, add) -> None:
    rm = sub.add_parser("rm", help="train and use reward models", formatter_class=HelpFormatter)
    rsub = rm.add_subparsers(dest="rm_verb", metavar="VERB")
    p = add(
        rsub,
        "train",
        cmd_train,
        "train a reward model from a config: Bradley-Terry (rm_train), a generative judge (judge_train), "
        "a GRM meta-RM (meta_rm_train), POLAR (polar_pool, polar_train), a multi-objective RM (mo_rm_train)",
        TRAIN_EXAMPLE,
    )
    add_config_args(p, "an rm_train (or judge_train, meta_rm_train, polar_*, mo_rm_train) YAML, e.g. from `align init`")
    p.add_argument("--resume", action="store_true", help="continue from the last checkpoint in output_dir")
    p.add_argument(
        "--overwrite", action="store_true", help="start over where output_dir holds an earlier run's checkpoints"
    )
    add(
        rsub,
        "score",
        cmd_score,
        "score every response of a data file with a reward model",
        SCORE_EXAMPLE,
        settings=ScoreSettings,
    )
    p = add(
        rsub,
        "strength",
        cmd_strength,
        "train (or load) an ensemble of RMs and write per-pair preference strength (mean/std of r_c - r_r)",
        "align rm strength configs/rm_strength_suite.yaml",
    )
    add_config_args(p, "an rm_strength YAML")
    add(
        rsub,
        "refusal-probe",
        cmd_refusal_probe,
        "fit the refusal rule's request probe: which prompts deserve a refusal, read from the prompt alone "
        "(a logistic regression on a frozen chat model's states; labels from pairs whose chosen answer declines)",
        PROBE_EXAMPLE,
        settings=ProbeSettings,
    )
    add(
        rsub,
        "scaling",
        cmd_scaling,
        "pointwise GRM pair accuracy at k sampled critiques (plain and meta-RM voting), with bootstrap intervals",
        SCALING_EXAMPLE,
        settings=ScalingSettings,
    )
    add(
        rsub,
        "compare",
        cmd_compare,
        "several scorers on the same held-out pairs: accuracy with bootstrap intervals, paired differences to the "
        "first, seconds per pair",
        COMPARE_EXAMPLE,
        settings=CompareSettings,
    )
