"""Bootstrap 95% intervals of a reward-model benchmark's headline, sections and subsets, kept in every record.

A percentile bootstrap over examples (`prefalign.stats`): the examples are resampled with replacement and the
benchmark's own aggregation (`Benchmark.aggregate`) is run on each resample, so the overall interval keeps the
benchmark's weighting whatever it is (RewardBench 1's count-weighted sections, RewardBench 2's Ties composite and
mean of six, RM-Bench's per-domain matrices, JudgeBench's games). How a benchmark is resampled is its
`Resampling`:

- stratified by subset: each subset's units are drawn within the subset, as many as it holds, so every subset keeps
  its size in every resample and a subset's interval is the plain bootstrap of its own examples (the overall
  interval is conditional on the subset sizes, as the weighting is);
- the unit is the example, except where the aggregation needs several rows whole: RewardBench 2's Ties composite
  compares a prompt's `ref:` and `tied:` rows, so a Ties prompt is drawn whole (both rows), and a prompt drawn twice
  is renumbered per draw so that it counts twice (the composite keys its rows by prompt id).

The aggregation is the benchmark's own, called once per resample: no shortcut through per-subset means, so no
benchmark's weighting has to be restated here. It is one pass over the examples (grouped means; RM-Bench's 3x3 mean
per domain), so the default 1,000 resamples of 3,000 examples take one to two seconds (measured on a busy 2-core
CPU: RewardBench's 2,985 0.9 s, RewardBench 2's 1,865 0.8 s, RM-Bench's 1,327 0.7 s, 3,000 pairs with their three
tables 1.7 s); `BenchSettings.bootstrap` sets the number (0: no intervals). A statistic that is undefined on a resample
(None, e.g. a headline that needs a missing part) is left out of that resample, as `bootstrap_statistic` does; one
undefined on every resample has no interval (null).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from prefalign.stats import percentile_interval, stratified_resamples

from .loaders import Example

LEVEL = 0.95
DEFAULT_REPS = 1000
"""Resamples per run: the interval's ends are the 26th smallest and the 26th largest of 1,000
(`percentile_interval`)."""


class Aggregated(Protocol):
    """What an aggregation returns (`benchmarks.Scores`), as far as the intervals read it."""

    headline: float | None
    sections: dict[str, float | None]
    subsets: dict[str, dict[str, Any]]


def by_subset(ex: Example) -> str | None:
    """The example's `group`: the subset (RewardBench), domain (RM-Bench), category (JudgeBench) or source (pairs)."""
    return ex.group


def alone(ex: Example) -> Hashable | None:
    """Every example is its own unit."""
    return None


@dataclass(frozen=True)
class Resampling:
    """How the bootstrap resamples a benchmark's examples (module docstring)."""

    stratum: Callable[[Example], str | None] = by_subset
    """The subset an example is drawn within: the key its aggregation reports it under in `scores.subsets` (examples
    with none, e.g. suite pairs without a family, are drawn among themselves)."""
    unit: Callable[[Example], Hashable | None] = alone
    """Examples of one stratum with the same key are drawn together as one unit; None: the example alone."""
    copy: Callable[[Example, int], Example] | None = None
    """The examples of a keyed unit as the k-th drawn unit of a resample, for an aggregation that keys rows by an id a
    unit drawn twice would share (RewardBench 2's Ties prompts); None: the same examples again."""
    units: str = "examples"
    """What is resampled, in words (the record's `method`)."""


def resampling_units(examples: Sequence[Example], r: Resampling) -> tuple[list[list[tuple[int, ...]]], set[int]]:
    """The strata (first-seen order), each a list of units (the indices of their examples, in file order), and the
    indices of the examples in keyed units (those `r.copy` renumbers)."""
    strata: dict[str | None, dict[Hashable, list[int]]] = {}
    keyed: set[int] = set()
    for i, ex in enumerate(examples):
        key = r.unit(ex)
        units = strata.setdefault(r.stratum(ex), {})
        if key is None:
            units[("alone", i)] = [i]
        else:
            units.setdefault(("unit", key), []).append(i)
            keyed.add(i)
    return [[tuple(u) for u in units.values()] for units in strata.values()], keyed


def _value(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return float(v)


def _interval(values: list[float]) -> list[float] | None:
    if not values:
        return None
    lo, hi = percentile_interval(values, LEVEL)
    return [lo, hi]


def bootstrap_intervals(
    results: list[tuple[Example, dict[str, Any]]],
    aggregate: Callable[[list[tuple[Example, dict[str, Any]]]], Aggregated],
    point: Aggregated,
    resampling: Resampling,
    reps: int = DEFAULT_REPS,
    seed: int = 0,
) -> dict[str, Any]:
    """The record's `scores.intervals`: 95% percentile intervals of the headline ("overall"), of every section and of
    every subset's score of `point` (the aggregation of `results`), from `aggregate` run on `reps` stratified
    resamples of `results` drawn with `seed` (module docstring); each [low, high], or None where no resample has a
    value."""
    strata, keyed = resampling_units([ex for ex, _ in results], resampling)
    copy = resampling.copy
    overall: list[float] = []
    sections: dict[str, list[float]] = {name: [] for name in point.sections}
    subsets: dict[str, list[float]] = {name: [] for name in point.subsets}
    for drawn in stratified_resamples(strata, reps, seed):
        sample = [
            (copy(results[i][0], k), results[i][1]) if copy is not None and i in keyed else results[i]
            for k, unit in enumerate(drawn)
            for i in unit
        ]
        s = aggregate(sample)
        if (v := _value(s.headline)) is not None:
            overall.append(v)
        for name, got in sections.items():
            if (v := _value(s.sections.get(name))) is not None:
                got.append(v)
        for name, got in subsets.items():
            if (v := _value((s.subsets.get(name) or {}).get("score"))) is not None:
                got.append(v)
    return {
        "overall": _interval(overall),
        "sections": {name: _interval(v) for name, v in sections.items()},
        "subsets": {name: _interval(v) for name, v in subsets.items()},
        "level": LEVEL,
        "reps": reps,
        "seed": seed,
        "method": f"percentile bootstrap over {resampling.units}, stratified by subset, the benchmark's aggregation "
        "rerun on each resample",
    }
