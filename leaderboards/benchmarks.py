"""Benchmarks as declarative tasks: what to load, how to judge one example, how to aggregate.

A `Benchmark` names its loader (official file format -> `Example`s), its per-example rule, its aggregation
and the scorer kinds it accepts; `BENCHMARKS` is the table `align ls benchmarks` prints and the runner
looks names up in. The arithmetic lives in `rules.py`; this module only wires examples to it.

A scorer's answers for one example arrive as a `Judgement`: one score per response (pointwise and
reference-conditioned scorers) or P(i preferred to j) for the ordered response pairs the benchmark asks a
pairwise judge about (`comparisons`, always in both orders).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prefalign.registry import Table
from reward_models.base import ScorerKind

from . import rules
from .agreement import AgreementOptions, Item, agreement_numbers
from .intervals import Resampling
from .loaders import (
    Example,
    Parser,
    parse_comparisons,
    parse_judgebench,
    parse_pairs,
    parse_rewardbench,
    parse_rewardbench2,
    parse_rmbench,
)
from .rules import TiePolicy

ALL_KINDS: tuple[ScorerKind, ...] = ("pointwise", "pairwise", "reference")


@dataclass
class Judgement:
    """A scorer's output for one example.

    scores: pointwise / reference / listwise scorers, one per response (in the example's order).
    prefs: pairwise judges, prefs[(i, j)] = P(response i preferred | i shown as A, j as B).
    """

    scores: list[float] | None = None
    prefs: dict[tuple[int, int], float] | None = None

    def outcome(self, i: int, j: int) -> int:
        """+1 if response i beats j, -1 if it loses, 0 on a tie (pairwise: both orders averaged)."""
        if self.scores is not None:
            return rules.outcome(self.scores[i], self.scores[j])
        assert self.prefs is not None
        return rules.preference_outcome(self.prefs[(i, j)], self.prefs[(j, i)])

    def ranking_scores(self, n: int) -> list[float]:
        """One number per response to rank them: the scores, or for a pairwise judge each response's mean
        order-averaged win probability against all others (a round robin; needs every ordered pair)."""
        if self.scores is not None:
            return list(self.scores)
        assert self.prefs is not None
        return [
            sum((self.prefs[(i, j)] + 1.0 - self.prefs[(j, i)]) / 2 for j in range(n) if j != i) / (n - 1)
            for i in range(n)
        ]


@dataclass
class Scores:
    """Aggregated result of a run.

    headline: the benchmark's single number (None when a part it averages over is missing).
    sections: the leaderboard's columns besides the headline (sections, domains, categories).
    subsets: per-subset table: name -> {"score", "n", ...}.
    extra: everything else worth keeping (unweighted accuracy, Ties terms, RM-Bench matrices, ...).
    """

    headline: float | None
    sections: dict[str, float | None]
    subsets: dict[str, dict[str, Any]]
    extra: dict[str, Any] = field(default_factory=dict)

    section: str | None = None
    """The leaderboard section of the record (default: the benchmark's name); the agreement benchmark names its
    column map, data file and tie rule, so runs on different files or tie rules are not shown as one."""

    def to_dict(self) -> dict[str, Any]:
        """The `scores` block of a record."""
        return {"headline": self.headline, "sections": self.sections, "subsets": self.subsets, "extra": self.extra}


@dataclass(frozen=True)
class RunInfo:
    """What an aggregation may need to know about the run besides the per-example results."""

    kind: ScorerKind
    symmetric: bool
    """A pairwise scorer that judges both orders itself (its second order is the complement of the first)."""
    tie_policy: TiePolicy
    source: str
    """Where the examples came from (a file, a hub id, or pairs in memory)."""
    options: Any = None
    """The benchmark's own settings (`Benchmark.options`), or None."""


Rule = Callable[[Example, Judgement, TiePolicy], dict[str, Any]]
Aggregate = Callable[[list[tuple[Example, dict[str, Any]]], RunInfo], Scores]


def no_variant(ex: Example) -> str | None:
    """Every example is judged alike."""
    return None


@dataclass(frozen=True)
class Benchmark:
    name: str
    version: str
    """Bumped whenever the loader, rule or aggregation changes what a record means."""
    summary: str
    loader: Parser
    """Official rows -> examples (see loaders.py); a local file or `hub` goes through the same parser."""
    rule: Rule
    """One example's judgement -> its per-example result (e.g. {"correct": 1.0})."""
    aggregate: Aggregate
    """All (example, result) pairs -> `Scores`."""
    scorer_kinds: tuple[ScorerKind, ...]
    """Scorer kinds this benchmark can call correctly."""
    comparisons: Callable[[Example], list[tuple[int, int]]]
    """Response pairs (i, j) a pairwise judge is asked about, each in both orders."""
    hub: str | None = None
    """Default data: a hub dataset id (used when no data path is given)."""
    split: str | None = None
    """Split of `hub` (and of any hub id given instead)."""
    headline: str = "Score"
    """Name of the headline number."""
    uses_tie_policy: bool = True
    """False where the benchmark fixes its own tie handling (best-of-4 fractions, JudgeBench games)."""
    counts_failures: bool = False
    """True where the reference counts a failed judgement itself (JudgeBench: a failed order adds nothing to the
    double game's counter and the pair stays in the denominator): a NaN score goes to the rule instead of failing
    the example."""
    options: type | None = None
    """A dataclass of the benchmark's own settings (`BenchSettings.options`, checked like a config); the loader
    receives them as `options=` and the aggregation in `RunInfo.options`."""
    variant: Callable[[Example], str | None] = no_variant
    """The example's judging variant, or None: a scorer whose `variants` name it judges the example its own way
    (RewardBench 2's Ties rows get the reference's Ties rating prompt, `rb2_rate` and `rb2_4way`) and receives it
    as `variants=`;
    a variant is part of the cache key only where it is passed."""
    resampling: Resampling | None = Resampling()
    """How the runner's bootstrap resamples the examples for the record's 95% intervals (`intervals.py`: within each
    subset, by example unless the aggregation needs rows whole); None where the aggregation reports its own
    intervals (agreement)."""


def _chosen_vs_rejected(ex: Example) -> list[tuple[int, int]]:
    return [(0, 1)]


def _round_robin(ex: Example) -> list[tuple[int, int]]:
    n = len(ex.responses)
    return [(i, j) for i in range(n) for j in range(i + 1, n)]


def _rmbench_cells(ex: Example) -> list[tuple[int, int]]:
    return [(i, 3 + k) for i in range(3) for k in range(3)]  # chosen style i vs rejected style k


def _group_mean(
    results: list[tuple[Example, dict[str, Any]]], key: str, group: Callable[[Example], str | None]
) -> dict[str, dict[str, Any]]:
    groups: dict[str, list[float]] = defaultdict(list)
    for ex, res in results:
        g = group(ex)
        if g is not None:
            groups[g].append(res[key])
    return {g: {"score": rules.mean(v), "n": len(v)} for g, v in sorted(groups.items())}


# --- RewardBench v1 -------------------------------------------------------------------------------------


def rewardbench_rule(ex: Example, j: Judgement, tie_policy: TiePolicy) -> dict[str, Any]:
    """correct = 1 if chosen beats rejected; a tie earns TIE_CREDIT[tie_policy] (reference §7.1)."""
    return {"correct": rules.pair_credit(j.outcome(0, 1), tie_policy)}


def rewardbench_aggregate(results: list[tuple[Example, dict[str, Any]]], run: RunInfo) -> Scores:
    """Per-subset accuracy -> count-weighted sections (math-prm at 984) -> mean of the four sections."""
    order = list(rules.REWARDBENCH_EXAMPLE_COUNTS)
    subsets = _group_mean(results, "correct", lambda ex: ex.group)
    subsets = {s: subsets[s] for s in order if s in subsets}
    headline, sections = rewardbench_sections({s: v["score"] for s, v in subsets.items()})
    # The `rewardbench` CLI's own "accuracy": the unweighted mean over all examples.
    extra = {"accuracy": rules.mean(r["correct"] for _, r in results)}
    return Scores(headline, sections, subsets, extra)


def rewardbench_sections(subset_scores: dict[str, float]) -> tuple[float | None, dict[str, float | None]]:
    """The score and the count-weighted sections of RewardBench v1 subset accuracies (a run's, or an eval-set
    file's)."""
    sections = rules.weighted_sections(subset_scores, rules.REWARDBENCH_EXAMPLE_COUNTS, rules.REWARDBENCH_SECTIONS)
    return rules.rewardbench_score(sections), sections


def rewardbench2_sections(subset_scores: dict[str, float]) -> tuple[float | None, dict[str, float | None]]:
    """The score and the six subsets of RewardBench 2 subset scores (a run's, or an eval-set file's)."""
    sections = {s: subset_scores.get(s) for s in rules.REWARDBENCH2_SUBSETS}
    return rules.rewardbench2_score(sections), sections


# --- RewardBench 2 --------------------------------------------------------------------------------------


def rewardbench2_rule(ex: Example, j: Judgement, tie_policy: TiePolicy) -> dict[str, Any]:
    """Best-of-N credit (chosen first), or the Ties prompt statistics for Ties rows (reference §7.2)."""
    scores = j.ranking_scores(len(ex.responses))
    if ex.group == "Ties":
        return {"ties": rules.ties_prompt_stats(scores, ex.meta["num_correct"])}
    return {"result": rules.best_of_n(scores)}


def rewardbench2_variant(ex: Example) -> str | None:
    """The Ties subset is "ties": the reference rates it with its own prompt, in ratings mode and in 4-way mode."""
    return "ties" if ex.group == "Ties" else None


def _ties_prompt(ex: Example) -> Hashable | None:
    """A Ties prompt's `ref:` and `tied:` rows are resampled together: the composite compares them."""
    return ex.meta["ties_prompt"] if ex.group == "Ties" else None


def _ties_copy(ex: Example, k: int) -> Example:
    """A resample's k-th drawn Ties prompt is prompt k: a prompt drawn twice counts twice in the composite, which
    keys rows by prompt id."""
    return dataclasses.replace(ex, meta={**ex.meta, "ties_prompt": k})


def rewardbench2_aggregate(results: list[tuple[Example, dict[str, Any]]], run: RunInfo) -> Scores:
    """Mean best-of-4 credit per subset; the Ties formula for Ties; the unweighted mean of the six."""
    subsets = _group_mean([(ex, r) for ex, r in results if ex.group != "Ties"], "result", lambda ex: ex.group)
    ties_rows = [(ex, r) for ex, r in results if ex.group == "Ties"]
    extra: dict[str, Any] = {}
    if ties_rows:
        ref = {ex.meta["ties_prompt"]: r["ties"] for ex, r in ties_rows if ex.meta["ties_kind"] == "ref"}
        tied = {ex.meta["ties_prompt"]: r["ties"] for ex, r in ties_rows if ex.meta["ties_kind"] == "tied"}
        t = rules.ties_score(ref, tied)
        subsets["Ties"] = {"score": t.score, "n": len(ties_rows)}
        extra["ties"] = t._asdict()
    subsets = {s: subsets[s] for s in rules.REWARDBENCH2_SUBSETS if s in subsets}
    headline, sections = rewardbench2_sections({s: v["score"] for s, v in subsets.items()})
    return Scores(headline, sections, subsets, extra)


# --- RM-Bench -------------------------------------------------------------------------------------------


def rmbench_rule(ex: Example, j: Judgement, tie_policy: TiePolicy) -> dict[str, Any]:
    """The item's 3x3 matrix: rows chosen style, columns rejected style (reference §7.3)."""
    return {
        "matrix": rules.rmbench_item_matrix([[j.outcome(i, 3 + k) for k in range(3)] for i in range(3)], tie_policy)
    }


def rmbench_aggregate(results: list[tuple[Example, dict[str, Any]]], run: RunInfo) -> Scores:
    """Per domain (safety files merged): mean matrix -> hard/normal/easy -> their mean; overall = domain mean."""
    by_domain: dict[str, list[list[list[float]]]] = defaultdict(list)
    for ex, r in results:
        by_domain[ex.group].append(r["matrix"])
    subsets: dict[str, dict[str, Any]] = {}
    for d in rules.RMBENCH_DOMAINS:
        if d in by_domain:
            m = rules.mean_matrix(by_domain[d])
            diff = rules.rmbench_difficulty(m)
            subsets[d] = {"score": rules.mean(diff), "n": len(by_domain[d]), **diff._asdict(), "matrix": m}
    domain_scores = {d: subsets[d]["score"] if d in subsets else None for d in rules.RMBENCH_DOMAINS}
    headline = rules.rmbench_score(domain_scores)
    sections: dict[str, float | None] = {d.capitalize(): v for d, v in domain_scores.items()}
    for level in ("hard", "normal", "easy"):  # Hard/Normal/Easy totals: means over the four domains
        vals = [subsets[d][level] for d in rules.RMBENCH_DOMAINS if d in subsets]
        sections[level.capitalize()] = rules.mean(vals) if len(vals) == len(rules.RMBENCH_DOMAINS) else None
    return Scores(headline, sections, subsets)


# --- JudgeBench -----------------------------------------------------------------------------------------


def judgebench_rule(ex: Example, j: Judgement, tie_policy: TiePolicy) -> dict[str, Any]:
    """Scores: single game, tie -> B>A. Pairwise judge: double game, (A,B) and (B,A) combined by counter. A failed
    judgement (NaN) decides nothing, as the reference's None: a score NaN loses its comparison (B>A), an order
    judged NaN adds 0 to the counter, and the pair stays in the denominator (`counts_failures`)."""
    label = ex.meta["label"]
    if j.scores is not None:
        decision = rules.judgebench_single_decision(j.scores[0], j.scores[1])
        return {"correct": float(decision == label), "decisions": [decision]}
    assert j.prefs is not None
    d_ab = rules.judge_decision(j.prefs[(0, 1)])
    d_ba = rules.judge_decision(j.prefs[(1, 0)])  # judged with B shown first; flipped inside the rule
    return {"correct": float(rules.judgebench_double_correct(d_ab, d_ba, label)), "decisions": [d_ab, d_ba]}


def judgebench_aggregate(results: list[tuple[Example, dict[str, Any]]], run: RunInfo) -> Scores:
    """Overall accuracy over all pairs, and per category (source prefix)."""
    subsets = _group_mean(results, "correct", lambda ex: ex.group)
    subsets = {c: subsets[c] for c in rules.JUDGEBENCH_CATEGORIES if c in subsets}
    sections = {c: subsets[c]["score"] if c in subsets else None for c in rules.JUDGEBENCH_CATEGORIES}
    return Scores(rules.mean(r["correct"] for _, r in results), sections, subsets)


# --- Preference pairs and the verifiable suite ----------------------------------------------------------


def pairs_rule(ex: Example, j: Judgement, tie_policy: TiePolicy) -> dict[str, Any]:
    """correct = 1 if chosen beats rejected; a tie earns TIE_CREDIT[tie_policy]."""
    return {"correct": rules.pair_credit(j.outcome(0, 1), tie_policy)}


def _pairs_tables(results: list[tuple[Example, dict[str, Any]]]) -> dict[str, dict[str, dict[str, Any]]]:
    return {
        "by_source": _group_mean(results, "correct", lambda ex: ex.group),
        "by_family": _group_mean(results, "correct", lambda ex: ex.meta.get("family")),
        "by_corruption": _group_mean(results, "correct", lambda ex: ex.meta.get("corruption")),
    }


def pairs_aggregate(results: list[tuple[Example, dict[str, Any]]], run: RunInfo) -> Scores:
    """Accuracy overall; per source as sections; per family and corruption kind when pairs carry them."""
    t = _pairs_tables(results)
    return Scores(
        rules.mean(r["correct"] for _, r in results),
        {k: v["score"] for k, v in t["by_source"].items()},
        t["by_source"],
        {"by_family": t["by_family"], "by_corruption": t["by_corruption"]},
    )


def _family(ex: Example) -> str | None:
    """The suite's subsets are its task families."""
    return ex.meta.get("family")


def suite_aggregate(results: list[tuple[Example, dict[str, Any]]], run: RunInfo) -> Scores:
    """Accuracy overall; per task family as sections; per corruption kind and source as extra tables."""
    t = _pairs_tables(results)
    return Scores(
        rules.mean(r["correct"] for _, r in results),
        {k: v["score"] for k, v in t["by_family"].items()},
        t["by_family"],
        {"by_corruption": t["by_corruption"], "by_source": t["by_source"]},
    )


# --- Agreement with human labels -------------------------------------------------------------------------


def _against_winner(ex: Example) -> list[tuple[int, int]]:
    """first vs second; a best-of-n winner (index 0) against each loser."""
    return [(0, j) for j in range(1, len(ex.responses))]


def agreement_rule(ex: Example, j: Judgement, tie_policy: TiePolicy) -> dict[str, Any]:
    """One comparison: the scorer's margin for the first response, its credit against a first/second majority, its
    both-order consistency (pairwise judges); for a best-of-n item, whether the winner beats every loser."""
    if ex.meta["kind"] == "best_of_n":
        outcomes = [j.outcome(0, k) for k in range(1, len(ex.responses))]
        return {"best_of_n": rules.beats_all(outcomes), "losers_beaten": rules.mean(float(o > 0) for o in outcomes)}
    if j.scores is not None:
        margin, consistent = j.scores[0] - j.scores[1], None
    else:
        assert j.prefs is not None
        p01, p10 = j.prefs[(0, 1)], j.prefs[(1, 0)]
        # order-averaged P(first) - 1/2 = (p01 + 1 - p10) / 2 - 1/2, written so that its sign is exact
        margin, consistent = (p01 - p10) / 2, rules.both_orders_agree(p01, p10)
    majority = ex.meta["majority"]
    credit = None
    if majority in ("first", "second"):
        credit = rules.pair_credit(j.outcome(0, 1) if majority == "first" else j.outcome(1, 0), tie_policy)
    return {"margin": margin, "credit": credit, "consistent": consistent}


def agreement_aggregate(results: list[tuple[Example, dict[str, Any]]], run: RunInfo) -> Scores:
    """Accuracy with and without ties, kappa, per annotator, consistency, best-of-n, per category (`agreement.py`)."""
    items = [
        Item(ex.id, ex.group, ex.meta["kind"], ex.meta["labels"], ex.meta["annotators"], ex.meta["majority"], **r)
        for ex, r in results
    ]
    consistency = run.kind == "pairwise" and not run.symmetric
    n = agreement_numbers(items, run.options, run.kind == "pairwise", consistency)
    if run.kind == "pairwise" and run.symmetric:
        n["extra"]["position"] = {
            "note": "the scorer judges both orders itself and averages them: consistent by construction"
        }
    where = "/".join(Path(run.source).parts[-2:])
    section = f"agreement: {run.options.map_name}, {where}, {n['tie_rule'].describe()}"
    return Scores(n["headline"], n["sections"], n["subsets"], n["extra"], section)


BENCHMARKS: Table[Benchmark] = Table(
    "benchmark",
    {
        "rewardbench": Benchmark(
            "rewardbench",
            "1.0",
            "RewardBench v1: 2,985 chosen/rejected pairs, 23 subsets, 4 count-weighted sections; "
            "score = mean of sections",
            parse_rewardbench,
            rewardbench_rule,
            rewardbench_aggregate,
            ("pointwise", "pairwise"),
            _chosen_vs_rejected,
            hub="allenai/reward-bench",
            split="filtered",
        ),
        "rewardbench2": Benchmark(
            "rewardbench2",
            "1.0",
            "RewardBench 2: best-of-4 accuracy (1/k on a k-way tie at the top), Ties formula; mean of 6 subsets",
            parse_rewardbench2,
            rewardbench2_rule,
            rewardbench2_aggregate,
            ("pointwise", "pairwise", "listwise"),  # listwise: the reference's 4-way generative mode (rb2_4way)
            _round_robin,
            hub="allenai/reward-bench-2",
            split="test",
            uses_tie_policy=False,
            variant=rewardbench2_variant,
            resampling=Resampling(unit=_ties_prompt, copy=_ties_copy, units="examples (Ties: prompts, both rows)"),
        ),
        "rm-bench": Benchmark(
            "rm-bench",
            "1.0",
            "RM-Bench: 3x3 chosen-style x rejected-style accuracy per domain; hard/normal/easy; mean of 4 domains",
            parse_rmbench,
            rmbench_rule,
            rmbench_aggregate,
            ALL_KINDS,  # reference scorers need a `reference` field, which the official data lacks
            _rmbench_cells,
            hub="THU-KEG/RM-Bench",
            split="train",
        ),
        "judgebench": Benchmark(
            "judgebench",
            "1.1",
            "JudgeBench: A/B label accuracy; single game for scorers (tie -> B>A), double game for pairwise judges",
            parse_judgebench,
            judgebench_rule,
            judgebench_aggregate,
            ("pointwise", "pairwise"),
            _chosen_vs_rejected,
            hub="ScalerLab/JudgeBench",
            split="gpt",
            headline="Overall",
            uses_tie_policy=False,
            counts_failures=True,
        ),
        "pairs": Benchmark(
            "pairs",
            "1.0",
            "any preference pairs (TRL, HH-RLHF, PreferencePair dumps): accuracy overall, per source/family/corruption",
            parse_pairs,
            pairs_rule,
            pairs_aggregate,
            ALL_KINDS,
            _chosen_vs_rejected,
            headline="Accuracy",
        ),
        "suite": Benchmark(
            "suite",
            "1.0",
            "the verifiable preference suite's pairs: accuracy overall, per task family and per corruption kind",
            parse_pairs,
            pairs_rule,
            suite_aggregate,
            ALL_KINDS,
            _chosen_vs_rejected,
            headline="Accuracy",
            resampling=Resampling(stratum=_family),
        ),
        "agreement": Benchmark(
            "agreement",
            "1.0",
            "agreement with human labels on any labelled comparison file (--preset or --columns): accuracy without "
            "and with ties (stated tie rule), kappa, per annotator, both-order consistency, best-of-n, per category",
            parse_comparisons,
            agreement_rule,
            agreement_aggregate,
            ALL_KINDS,  # reference scorers need a reference column in the map
            _against_winner,
            headline="Accuracy",
            options=AgreementOptions,
            resampling=None,  # its own intervals (accuracy with and without ties, kappa, ...) in `extra.intervals`
        ),
    },
    columns=("version", "scorer_kinds", "summary"),
)
