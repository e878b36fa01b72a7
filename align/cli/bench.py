"""`align bench run` and `align bench show`: score a model on a benchmark, render the leaderboard.

    align bench run rewardbench --model runs/rm                     # a trained RM on the hub data
    align bench run rm-bench --model runs/rm --data total_dataset.json
    align bench run suite --model runs/dpo --reference builtin:smollm2-135m-instruct
    align bench show                                   # index.html (a tab per benchmark), leaderboard.md, charts

At load time this module imports only argparse; `register` reads the scorer and benchmark tables (plain data,
no torch) for the help text; the commands import the rest when they run.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

RUN_EXAMPLES = """align bench run rewardbench --model runs/rm
  align bench run rewardbench --model runs/rm --data filtered.parquet --limit 200
  align bench run rm-bench --model runs/rm --data total_dataset.json --dtype float32 --option normalize=true
  align bench run suite --model runs/dpo-lora                       (a peft adapter: implicit reward vs its base)
  align bench run suite --model runs/dpo --reference builtin:smollm2-135m-instruct --option beta=0.05
  align bench run pairs --data pairs.jsonl --model runs/simpo --scorer implicit \\
      --option reference_free=true --option normalization=mean
  align bench run judgebench --model builtin:smollm2-135m-instruct --scorer judge --data gpt.jsonl
  align bench run suite --scorer grader                              (the gold graders: the suite's ceiling)
  align bench run agreement --data testdata_pairwise.jsonl --preset autoj --model runs/rm
  align bench run agreement --data testset-v1.json --preset pandalm --model builtin:smollm2-135m-instruct \
      --scorer judge --tie-threshold 0.05
  align bench run agreement --data my_labels.jsonl --columns my_columns.yaml --model runs/rm

--scorer (default: scalar for a model with a score head; implicit for a peft adapter or with --reference;
each takes the options of its dataclass in reward_models/scorers.py, e.g. ScalarOptions):"""

SHOW_EXAMPLES = """align bench show
  align bench show --records leaderboards/records --site leaderboards/site"""


def register(sub: argparse._SubParsersAction, add: Callable[..., argparse.ArgumentParser]) -> None:
    """Add the `bench` verb group (`run`, `show`) to the `align` parser."""
    bench = sub.add_parser(
        "bench",
        help="score models on reward-model benchmarks and render the leaderboard",
        description="score models on reward-model benchmarks and render the leaderboard",
    )
    bsub = bench.add_subparsers(dest="bench_verb", metavar="VERB")

    # the tables are plain data (no torch): listing their names keeps help and table in step
    from leaderboards.benchmarks import BENCHMARKS
    from reward_models.scorers import BATCH_TOKENS, SCORERS

    scorers = "\n".join(f"  {r['name']:<9} {r['kind']:<10} {r['summary']}" for r in SCORERS.rows())
    p = add(bsub, "run", cmd_run, "score a model on a benchmark and write its record", RUN_EXAMPLES + "\n" + scorers)
    p.add_argument("bench", metavar="BENCH", help=f"benchmark: {', '.join(BENCHMARKS.names())} (`align ls benchmarks`)")
    p.add_argument(
        "--model",
        default=None,
        help="the model to score: a directory, builtin:<name> or a hub id (not used by --scorer grader)",
    )
    p.add_argument(
        "--scorer",
        default=None,
        choices=SCORERS.names(),
        help="how to turn the model into scores (default: from the model, see below)",
    )
    p.add_argument("--reference", default=None, help="reference model of --scorer implicit")
    p.add_argument(
        "--data",
        default=None,
        help="a local file in the benchmark's official format (JSON, JSONL, parquet) or a hub id "
        "(default: the benchmark's hub dataset; for suite: the default suite's test pairs)",
    )
    p.add_argument("--limit", type=int, default=None, help="score only the first N valid examples")
    p.add_argument(
        "--preset",
        default=None,
        help="agreement: the labelled file's official format, one of `align ls presets` (llmbar, autoj, pandalm, "
        "mt-bench-human, rmb-pairwise, rmb-bon, helpsteer2)",
    )
    p.add_argument(
        "--columns", default=None, help="agreement: a YAML column map for any other labelled comparison file"
    )
    p.add_argument(
        "--tie-threshold",
        type=float,
        default=None,
        help="agreement: |margin| at or below which the scorer's verdict is a tie (score units; P(first) - 1/2 "
        "for a pairwise judge); default: chosen on a held-out 30%% of the items when the labels have ties",
    )
    p.add_argument(
        "--bootstrap", type=int, default=None, help="agreement: bootstrap resamples for the intervals (default 1000)"
    )
    p.add_argument(
        "--allow-partial",
        action="store_true",
        help="skip invalid rows and examples that score NaN; the record is marked partial",
    )
    p.add_argument("--records", default=None, help="where to write the record (default: leaderboards/records)")
    p.add_argument(
        "--dtype",
        default=None,
        choices=["auto", "bfloat16", "float32"],
        help="model dtype (default auto: bfloat16 where the device runs it natively, else float32)",
    )
    p.add_argument(
        "--batch-tokens", type=int, default=None, help=f"token budget of one forward pass (default {BATCH_TOKENS})"
    )
    p.add_argument(
        "--option",
        dest="options",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any other scorer option, e.g. normalize=true, beta=0.05, max_length=2048 (repeatable; a wrong "
        "key lists the scorer's options)",
    )
    p.add_argument("--name", default=None, help="the leaderboard row (default: the model reference)")
    p.add_argument(
        "--no-cache",
        action="store_true",
        help="score everything again instead of reusing cached scores of an identical earlier run",
    )

    p = add(
        bsub,
        "show",
        cmd_show,
        "render the leaderboard from the records: a static page with a tab per benchmark, Markdown, PNG charts",
        SHOW_EXAMPLES,
    )
    p.add_argument("--records", default=None, help="records directory (default: leaderboards/records)")
    p.add_argument("--site", default=None, help="where to write the rendered files (default: leaderboards/site)")


# --- run -------------------------------------------------------------------------------------------------


def _check_data(data: str) -> None:
    """A path that does not exist is an error here, before any model loads (a hub id passes through)."""
    from prefalign.errors import UserError
    from preference_data.io import SUFFIXES, is_hub_id

    if Path(data).expanduser().exists():
        return
    if is_hub_id(data) and not data.endswith(SUFFIXES):
        return
    raise UserError(
        f"--data {data}: no such file; give a local file in the benchmark's official format "
        f"({', '.join(SUFFIXES)}) or a hub id like org/name"
    )


def _scorer_options(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """Scorer options from the flags and --option KEY=VALUE; a flag the scorer does not take is an error."""
    import dataclasses

    from prefalign.config import parse_override
    from prefalign.errors import UserError
    from reward_models.scorers import SCORERS

    fields = [f.name for f in dataclasses.fields(SCORERS[name].options)]
    flags = {
        "--model": ("model", args.model),
        "--reference": ("reference", args.reference),
        "--dtype": ("dtype", args.dtype),
        "--batch-tokens": ("batch_tokens", args.batch_tokens),
    }
    opts: dict[str, Any] = {}
    problems = []
    for flag, (key, value) in flags.items():
        if value is None:
            continue
        if key not in fields:
            problems.append(f"{flag} does not apply to --scorer {name} (its options: {', '.join(fields)})")
        opts[key] = value
    for text in args.options:
        keys, value = parse_override(text)
        opts[".".join(keys)] = value  # a dotted or unknown key is reported by the options check, with did-you-mean
    if problems:
        raise UserError("; ".join(problems))
    return opts


def _bench_options(bench: str, args: argparse.Namespace) -> dict[str, Any] | None:
    """The agreement benchmark's settings from its flags (checked by the runner); the flags elsewhere are an error."""
    from prefalign.errors import UserError

    flags = {
        "--preset": ("preset", args.preset),
        "--columns": ("columns", args.columns),
        "--tie-threshold": ("tie_threshold", args.tie_threshold),
        "--bootstrap": ("bootstrap", args.bootstrap),
    }
    given = {flag: kv for flag, kv in flags.items() if kv[1] is not None}
    if bench != "agreement":
        if given:
            raise UserError(f"{', '.join(given)} only apply to `align bench run agreement`, not to {bench}")
        return None
    if args.data is None:
        raise UserError("agreement needs --data FILE (a labelled comparison file) and --preset NAME or --columns FILE")
    if args.preset is None and args.columns is None:
        raise UserError(
            f"agreement needs --preset NAME (one of `align ls presets`) or --columns FILE (a YAML column map) to "
            f"read {args.data}"
        )
    out = {key: value for key, value in given.values()}
    if args.columns is not None:
        from preference_data.comparisons import read_columns

        out["columns"] = read_columns(args.columns)
    return out


def _default_suite_pairs(references: bool = False) -> list[Any]:
    """The test pairs of the default suite (`align data suite` with its defaults), built in memory; with
    `references`, each carries its task's reference answer (for reference-conditioned scorers such as polar)."""
    from preference_data.suite import build_suite, with_references

    suite = build_suite()
    return with_references(suite, suite.test_pairs) if references else suite.test_pairs


def cmd_run(args: argparse.Namespace) -> int:
    import functools

    from leaderboards.benchmarks import BENCHMARKS
    from leaderboards.records import summarize
    from leaderboards.runner import BenchSettings, run_benchmark
    from prefalign.errors import UserError
    from reward_models.scorers import SCORERS, default_scorer, load_scorer

    bench = BENCHMARKS[args.bench]  # unknown names: UserError with did-you-mean, before anything loads
    if args.data is not None:
        _check_data(args.data)
    if args.limit is not None and args.limit < 1:
        raise UserError(f"--limit must be a positive number of examples, got {args.limit}")
    bench_options = _bench_options(bench.name, args)
    name = args.scorer or default_scorer(args.model, args.reference)
    kind = SCORERS[name].kind
    if kind not in bench.scorer_kinds:
        raise UserError(
            f"benchmark '{bench.name}' cannot use the {kind} scorer '{name}'; it accepts "
            f"{', '.join(bench.scorer_kinds)} scorers"
        )
    if name != "grader" and args.model is None:
        raise UserError(f"--scorer {name} needs --model")
    options = _scorer_options(name, args)

    pairs = None
    if bench.name == "suite" and args.data is None:
        pairs = functools.partial(_default_suite_pairs, references=kind == "reference")
    scorer = load_scorer(name, **options)
    settings = BenchSettings(
        data=args.data,
        limit=args.limit,
        allow_partial=args.allow_partial,
        records_dir=args.records,
        use_cache=not args.no_cache,
        model_name=args.name,
        options=bench_options,
    )
    record = run_benchmark(bench.name, scorer, settings, pairs=pairs)
    print(summarize(record))
    return 0


# --- show ------------------------------------------------------------------------------------------------


def cmd_show(args: argparse.Namespace) -> int:
    from leaderboards.render import render

    files = render(args.records, args.site)
    print(f"page      {files.html}  (open {files.html.resolve().as_uri()})")
    print(f"markdown  {files.markdown}")
    print(f"chart     {files.png if files.png else 'none (no shown record has a headline score)'}")
    for bench, path in files.charts.items():
        print(f"  {bench:<14} {path}")
    print()
    print(files.overview)
    return 0
