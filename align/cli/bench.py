"""`align bench run` and `align bench show`: score a model on a benchmark, render the leaderboard.

    align bench run rewardbench --model runs/rm                     # a trained RM on the hub data
    align bench run rm-bench --model runs/rm --data total_dataset.json
    align bench run suite --model runs/dpo --reference builtin:smollm2-135m-instruct
    align bench show                                   # index.html (a tab per benchmark), leaderboard.md, charts

The flags of `bench run` and `bench show` are the fields of `BenchRunSettings` and `ShowSettings` below. At load
time this module imports the scorer and benchmark tables (plain data, no torch) for the choices and help text;
models load when a command runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from align.cli.common import HelpFormatter
from leaderboards.benchmarks import BENCHMARKS
from leaderboards.winrate import LC_GLM_CHOICES
from prefalign.config import option
from prefalign.errors import UserError
from prefalign.flags import flag_of
from prefalign.models.precision import DTYPES
from preference_data.comparisons import read_columns
from preference_data.io import SUFFIXES, is_hub_id
from reward_models.scorers import BATCH_TOKENS, SCORERS, SPEC_FORMS, load_scorer, scorer_spec

RUN_EXAMPLES = (
    """align bench run rewardbench --model runs/rm
  align bench run rewardbench --model runs/rm --data filtered.parquet --limit 200
  align bench run rewardbench2 --model runs/rm --native results      (+ RewardBench's own eval-set/ files)
  align bench run rm-bench --model runs/rm --data total_dataset.json --dtype float32 --option normalize=true
  align bench run suite --model runs/dpo-lora                       (a peft adapter: implicit reward vs its base)
  align bench run suite --model runs/dpo --reference builtin:smollm2-135m-instruct --option beta=0.05
  align bench run pairs --data pairs.jsonl --model runs/simpo --scorer implicit \\
      --option reference_free=true --option normalization=mean
  align bench run judgebench --scorer judge:builtin:smollm2-135m-instruct --data gpt.jsonl
  align bench run suite --scorer grader                              (the gold graders: the suite's ceiling)
  align bench run agreement --data testdata_pairwise.jsonl --preset autoj --model runs/rm
  align bench run agreement --data testset-v1.json --preset pandalm --scorer judge:builtin:smollm2-135m-instruct \\
      --tie-threshold 0.05
  align bench run agreement --data my_labels.jsonl --columns my_columns.yaml --model runs/rm

--scorer SPEC, the one way every command names a scorer (--judge of eval policy, --proxy of eval overopt,
LABEL=SPEC in rm compare, --scorer of serve take the same):
"""
    + SPEC_FORMS
    + """
the kinds (each takes the options of its dataclass in reward_models/scorers.py, e.g. ScalarOptions):"""
)

SHOW_EXAMPLES = """align bench show
  align bench show --records leaderboards/records --site leaderboards/site"""


@dataclass(kw_only=True)
class BenchRunSettings:
    """`align bench run`: the benchmark, the scorer (built from --scorer, the model flags and --option) and how the
    runner runs it. The run settings end up in `leaderboards.runner.BenchSettings`; this class moves beside it when
    leaderboards/runner.py is next changed."""

    bench: str = option(doc="benchmark (`align ls benchmarks`)", positional=True, metavar="BENCH", choices=BENCHMARKS)
    model: str | None = option(
        None, "the model to score: a directory, builtin:<name> or a hub id (not used by --scorer grader)"
    )
    scorer: str | None = option(
        None,
        "how to score (default: told from --model, see below): a scorer kind, KIND:MODEL, or a YAML mapping "
        "{type: KIND, model: ..., OPTION: VALUE}",
        metavar="SPEC",
    )
    reference: str | None = option(None, "reference model of --scorer implicit")
    data: str | None = option(
        None,
        "a local file in the benchmark's official format (JSON, JSONL, parquet) or a hub id "
        "(default: the benchmark's hub dataset; for suite: the default suite's test pairs)",
    )
    limit: int | None = option(None, "score only the first N valid examples")
    preset: str | None = option(
        None,
        "agreement: the labelled file's official format, one of `align ls presets` (llmbar, autoj, pandalm, "
        "mt-bench-human, rmb-pairwise, rmb-bon, helpsteer2)",
    )
    columns: str | None = option(None, "agreement: a YAML column map for any other labelled comparison file")
    tie_threshold: float | None = option(
        None,
        "agreement: |margin| at or below which the scorer's verdict is a tie (score units; P(first) - 1/2 "
        "for a pairwise judge); default: chosen on a held-out 30% of the items when the labels have ties",
    )
    bootstrap: int | None = option(None, "agreement: bootstrap resamples for the intervals (default 1000)")
    allow_partial: bool = option(False, "skip invalid rows and examples that score NaN; the record is marked partial")
    records: str | None = option(None, "where to write the record (default: leaderboards/records)")
    dtype: str | None = option(
        None,
        "model dtype (default: the scorer's own; a reward model (scalar) scores in float32, as its model card's "
        "recipe does; generative judges auto: bfloat16 where the device runs it natively, else float32)",
        choices=DTYPES,
    )
    batch_tokens: int | None = option(None, f"token budget of one forward pass (default {BATCH_TOKENS})")
    options: dict[str, Any] = option(
        factory=dict,
        doc="any other scorer option, e.g. normalize=true, beta=0.05, max_length=2048 (repeatable; a wrong "
        "key lists the scorer's options)",
        flag="--option",
    )
    name: str | None = option(None, "the leaderboard row (default: the model reference)")
    native: str | None = option(
        None,
        "rewardbench, rewardbench2: also write the files RewardBench's own scripts save, DIR/eval-set/<name>.json "
        "(per subset) and DIR/eval-set-scores/<name>.json (per item); rm-bench: the file RM-Bench's run_rm.py "
        "saves, DIR/total_dataset_<name>.json (the items with score_chosen and score_rejected); `align bench score "
        "--from` and the reference code read them (a pointwise scorer); judgebench: the JSONL JudgeBench's "
        "run_judge.py writes, DIR/outputs/<dataset>,judge_name=<judge>,judge_model=<name>.jsonl (a reward model or a "
        "pairwise judge)",
        metavar="DIR",
    )
    cache: bool = option(True, "reuse cached scores of an identical earlier run (--no-cache scores everything again)")

    def check(self) -> list[str]:
        if self.limit is not None and self.limit < 1:
            return [f"limit: must be a positive number of examples, got {self.limit}"]
        return []


@dataclass(kw_only=True)
class ShowSettings:
    """`align bench show`: the arguments of `leaderboards.render.render`."""

    records: str | None = option(None, "records directory (default: leaderboards/records)")
    site: str | None = option(None, "where to write the rendered files (default: leaderboards/site)")


SCORE_EXAMPLES = """align bench score arenahard --from model_judgment/gpt-4-1106-preview/model-x.jsonl \\
      --from model_judgment/gpt-4-1106-preview/model-y.jsonl
  align bench score arenahard --from model-x.jsonl --option weight=1
  align bench score arenahard --from model_judgment/gpt-4-1106-preview/model-x.jsonl \\
      --option style_control=true --option answers=model_answer   (show_result.py --style-control, v0.1)
  align bench score arenahard --from model_judgment/gpt-4.1/model-x.jsonl --option style_control=true \\
      --option version=v2.0 --option answers=model_answer   (v2.0's --control-features markdown length)
  align bench score alpacaeval --from results/my_model/weighted_alpaca_eval_gpt4_turbo/annotations.json
  align bench score alpacaeval --from annotations.json --option lc_table=df_gamed.csv   (alpaca_eval's LC GLM)
  align bench score mtbench --from model_judgment/gpt-4_single.jsonl --json
  align bench score mtbench --from model_judgment/gpt-4_pair.jsonl --option mode=pairwise-all
  align bench score judgebench --from outputs/judgebench-arena_hard.jsonl
  align bench score rewardbench --from results/eval-set-scores/my-org/my-rm.json
  align bench score rm-bench --from results/total_dataset_my-rm.json
  align bench score ifeval --from eval_results_strict.jsonl --from eval_results_loose.jsonl \\
      --option data=input_data.jsonl"""


@dataclass(kw_only=True)
class ScoreFromSettings:
    """`align bench score`: the arguments of `leaderboards.score_from.score_from`."""

    bench: str = option(
        doc="the results format: arenahard, alpacaeval, ifeval, judgebench, mtbench, rewardbench, rewardbench2 or "
        "rm-bench",
        positional=True,
        metavar="BENCH",
    )
    files: list[str] = option(
        doc="a results file in the benchmark's own format (repeat for several; arenahard: one per model, in the "
        "order its show_result.py globs them, which decides the bootstrap's draws)",
        flag="--from",
    )
    options: dict[str, Any] = option(
        factory=dict,
        doc="arenahard: weight=3 (a strong verdict's battles), rounds=100, seed=42 (the reference's defaults), "
        "style_control=true (the style-controlled score; needs answers=DIR, the model_answer folder whose rows carry "
        "the style metadata) with version=v0.1|v2.0, control=markdown,length|length|markdown (v0.1 only alone), "
        "baseline=MODEL (v0.1: gpt-4-0314; v2.0: the category's), category=hard_prompt (v2.0); "
        "ifeval: data=input_data.jsonl (the instructions' arguments, required), mode=auto|strict|loose; "
        "alpacaeval: lc_table=FILE (an instruction-difficulty CSV, e.g. AlpacaEval's df_gamed.csv: the LC win rate "
        "as alpaca_eval's length_controlled_v1 computes it; without it the toolkit's simpler GLM), "
        f"lc_glm={'|'.join(LC_GLM_CHOICES)}; "
        "mtbench: mode=auto|single|pairwise-baseline|pairwise-all (auto: by the file's rows), "
        "baseline=gpt-3.5-turbo, model_list=A,B (show_result.py's --baseline-model and --model-list)",
        flag="--option",
    )
    json: bool = option(False, "print the scores as JSON")


COMPARE_EXAMPLES = """align bench compare rm-a rm-b --bench rewardbench   (two rows' latest records)
  align bench compare records/suite__a__20261201T1200Z.json records/suite__b__20261201T1300Z.json
  align bench compare rm-a rm-b --bench rewardbench2 --correction holm"""


@dataclass(kw_only=True)
class CompareSettings:
    """`align bench compare`: the arguments of `leaderboards.compare_records.compare_records`."""

    a: str = option(doc="a record file, or a model whose latest record in --records to use", positional=True)
    b: str = option(doc="the record (or model) to compare it with", positional=True)
    bench: str | None = option(None, "the benchmark, where a model has records of several")
    records: str | None = option(None, "records directory to look models up in (default: leaderboards/records)")
    correction: str = option(
        "sidak",
        "the correction over subsets: sidak (intervals at (0.95)^(1/m)), holm (step-down on the p-values) or none",
        choices=("sidak", "holm", "none"),
    )
    bootstrap: int = option(2000, "paired bootstrap resamples")
    seed: int = option(0, "bootstrap seed")


def register(sub: argparse._SubParsersAction, add: Callable[..., argparse.ArgumentParser]) -> None:
    """Add the `bench` verb group (`run`, `show`) to the `align` parser."""
    bench = sub.add_parser(
        "bench",
        help="score models on reward-model benchmarks and render the leaderboard",
        description="score models on reward-model benchmarks and render the leaderboard",
        formatter_class=HelpFormatter,
    )
    bsub = bench.add_subparsers(dest="bench_verb", metavar="VERB")
    # the scorers in the examples come from the table, so help and table stay in step
    scorers = "\n".join(f"  {r['name']:<9} {r['kind']:<10} {r['summary']}" for r in SCORERS.rows())
    add(
        bsub,
        "run",
        cmd_run,
        "score a model on a benchmark and write its record",
        RUN_EXAMPLES + "\n" + scorers,
        settings=BenchRunSettings,
    )
    add(
        bsub,
        "score",
        cmd_score,
        "score a results file in a benchmark's own format (Arena-Hard judgments, AlpacaEval annotations, JudgeBench "
        "outputs, MT-Bench judgments) by this toolkit's rules, to put beside the reference code's number",
        SCORE_EXAMPLES,
        settings=ScoreFromSettings,
    )
    add(
        bsub,
        "compare",
        cmd_compare,
        "compare two records of one benchmark item by item: the paired difference per subset and overall, with "
        "intervals corrected over the subsets",
        COMPARE_EXAMPLES,
        settings=CompareSettings,
    )
    add(
        bsub,
        "show",
        cmd_show,
        "render the leaderboard from the records: a static page with a tab per benchmark, Markdown, PNG charts",
        SHOW_EXAMPLES,
        settings=ShowSettings,
    )


# --- run -------------------------------------------------------------------------------------------------


def _check_data(data: str) -> None:
    """A path that does not exist is an error here, before any model loads (a hub id passes through)."""
    if Path(data).expanduser().exists():
        return
    if is_hub_id(data) and not data.endswith(SUFFIXES):
        return
    raise UserError(
        f"--data {data}: no such file; give a local file in the benchmark's official format "
        f"({', '.join(SUFFIXES)}) or a hub id like org/name"
    )


def _scorer_spec(s: BenchRunSettings) -> dict[str, Any]:
    """The scorer spec from --scorer, the model flags and --option KEY=VALUE; a flag the scorer does not take is an
    error."""
    flags = {key: getattr(s, key) for key in ("reference", "dtype", "batch_tokens") if getattr(s, key) is not None}
    spec = scorer_spec(s.scorer, model=s.model, options={**flags, **s.options})
    fields = [f.name for f in dataclasses.fields(SCORERS[spec["type"]].options)]
    problems = [
        f"{flag_of(BenchRunSettings, key)} does not apply to --scorer {spec['type']} (its options: {', '.join(fields)})"
        for key in ("model", *flags)
        if key in spec and key not in fields
    ]
    if problems:  # a dotted or unknown --option key is reported by the options check, with did-you-mean
        raise UserError("; ".join(problems))
    return spec


def _bench_options(bench: str, s: BenchRunSettings) -> dict[str, Any] | None:
    """The agreement benchmark's settings from its flags (checked by the runner); the flags elsewhere are an error."""
    given = {key: getattr(s, key) for key in ("preset", "columns", "tie_threshold", "bootstrap")}
    given = {key: value for key, value in given.items() if value is not None}
    if bench != "agreement":
        if given:
            flags = ", ".join(flag_of(BenchRunSettings, key) for key in given)
            raise UserError(f"{flags} only apply to `align bench run agreement`, not to {bench}")
        return None
    if s.data is None:
        raise UserError("agreement needs --data FILE (a labelled comparison file) and --preset NAME or --columns FILE")
    if s.preset is None and s.columns is None:
        raise UserError(
            f"agreement needs --preset NAME (one of `align ls presets`) or --columns FILE (a YAML column map) to "
            f"read {s.data}"
        )
    if s.columns is not None:
        given["columns"] = read_columns(s.columns)
    return given


def _default_suite_pairs(references: bool = False) -> list[Any]:
    """The test pairs of the default suite (`align data suite` with its defaults), built in memory; with
    `references`, each carries its task's reference answer (for reference-conditioned scorers such as polar)."""
    from preference_data.suite import build_suite, with_references  # the generators: ~60 ms at start, only when run

    suite = build_suite()
    return with_references(suite, suite.test_pairs) if references else suite.test_pairs


def cmd_run(s: BenchRunSettings) -> int:
    # the runner and the records add ~25 ms to every `align` start: imported when the verb runs
    from leaderboards.native import native_problem
    from leaderboards.records import summarize
    from leaderboards.runner import BenchSettings, run_benchmark

    bench = BENCHMARKS[s.bench]
    if s.data is not None:
        _check_data(s.data)
    bench_options = _bench_options(bench.name, s)
    spec = _scorer_spec(s)
    name = spec["type"]
    kind = SCORERS[name].kind
    if kind not in bench.scorer_kinds:
        raise UserError(
            f"benchmark '{bench.name}' cannot use the {kind} scorer '{name}'; it accepts "
            f"{', '.join(bench.scorer_kinds)} scorers"
        )
    if name != "grader" and "model" not in spec:
        raise UserError(f"--scorer {name} needs a model: --model MODEL or --scorer {name}:MODEL")
    if s.native is not None and (problem := native_problem(bench.name, kind)):
        raise UserError(problem)

    pairs = None
    if bench.name == "suite" and s.data is None:
        pairs = functools.partial(_default_suite_pairs, references=kind == "reference")
    scorer = load_scorer(spec)
    settings = BenchSettings(
        data=s.data,
        limit=s.limit,
        allow_partial=s.allow_partial,
        records_dir=s.records,
        use_cache=s.cache,
        model_name=s.name,
        options=bench_options,
        native_dir=s.native,
    )
    record = run_benchmark(bench.name, scorer, settings, pairs=pairs)
    print(summarize(record))
    for path in record.settings.get("native_files", []):
        print(f"native    {path}")
    return 0


# --- show ------------------------------------------------------------------------------------------------


def cmd_score(s: ScoreFromSettings) -> int:
    from leaderboards.score_from import score_from  # numpy and the scoring rules: only when the verb runs

    scores = score_from(s.bench, s.files, s.options)
    if s.json:
        print(json.dumps([dataclasses.asdict(x) for x in scores], indent=2))
        return 0
    for x in scores:
        head = x.line or f"{x.model}: " + ", ".join(
            f"{k} {v:.4f}" if isinstance(v, float) else f"{k} n/a" for k, v in x.sections.items()
        )
        print(f"{head}  ({', '.join(f'{k} {v}' for k, v in x.counts.items())})")
    return 0


def cmd_compare(s: CompareSettings) -> int:
    from leaderboards.compare_records import compare_records, comparison_lines
    from leaderboards.records import find_record

    a = find_record(s.a, s.bench, s.records)
    b = find_record(s.b, s.bench or a.benchmark, s.records)
    for line in comparison_lines(compare_records(a, b, s.correction, s.bootstrap, s.seed)):  # type: ignore[arg-type]
        print(line)
    return 0


def cmd_show(s: ShowSettings) -> int:
    from leaderboards.render import render  # ~25 ms at start: only when the verb runs

    files = render(s.records, s.site)
    print(f"page      {files.html}  (open {files.html.resolve().as_uri()})")
    print(f"markdown  {files.markdown}")
    print(f"chart     {files.png if files.png else 'none (no shown record has a headline score)'}")
    for bench, path in files.charts.items():
        print(f"  {bench:<14} {path}")
    print()
    print(files.overview)
    return 0
