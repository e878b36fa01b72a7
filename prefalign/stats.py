"""Statistics every stage reports with, written once: percentile bootstrap intervals and per-stream seeds.

Torch-free (plain Python), so records, leaderboards and reports use it without loading torch; the tensor
statistics over groups of completions (nan-safe mean and std) are in `prefalign.groupstats`.

Bootstrap (Efron's percentile interval): the statistic is recomputed on `reps` resamples of the items drawn with
replacement from `random.Random(seed)` (or within strata, each keeping its size: `stratified_resamples`); the
interval at `level` is the pair of order statistics `stats[j]` and `stats[k - 1 - j]` with
`j = floor((1 - level) / 2 * k)` of the k resamples on which the statistic is defined — symmetric, so each tail
holds the same number of resamples (j below the lower end, j above the upper). E.g. 2000 resamples at 95%: the
51st smallest and the 51st largest.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

SEED_STRIDE = 1_000_003  # a prime larger than any stream count: seed s, stream k -> s * SEED_STRIDE + k


def stream_seed(seed: int, k: int) -> int:
    """The seed of stream `k` (a step, a round, a sample index) of a run seeded with `seed`.

    Distinct (seed, k) pairs give distinct seeds for k < SEED_STRIDE, so stream k draws the same values whatever
    other streams ran before it (a resumed run, a larger best-of-n pool). stream_seed(0, 5) = 5,
    stream_seed(2, 5) = 2_000_011."""
    return seed * SEED_STRIDE + k


Num = TypeVar("Num", int, float)


def nearest_rank(sorted_values: Sequence[Num], q: float) -> Num:
    """The nearest-rank q-th percentile (0 < q <= 100) of values sorted ascending: always an observed value."""
    return sorted_values[max(0, math.ceil(q / 100 * len(sorted_values)) - 1)]


def percentile_interval(stats: Sequence[float], level: float = 0.95) -> tuple[float, float]:
    """The symmetric percentile interval of bootstrap replicates (module docstring); (nan, nan) when empty."""
    if not stats:
        return (math.nan, math.nan)
    s = sorted(stats)
    k = len(s)
    j = min(int((1 - level) / 2 * k), (k - 1) // 2)
    return (s[j], s[k - 1 - j])


def bootstrap_statistic(
    statistic: Callable[[list[int]], float | None], m: int, reps: int = 2000, seed: int = 0, level: float = 0.95
) -> tuple[float, float]:
    """Percentile bootstrap interval of any statistic of m items (a mean, an accuracy, Cohen's kappa, ...).

    `statistic(indices)` is evaluated on `reps` resamples of the item indices 0..m-1; a resample on which it is
    undefined (None or NaN, e.g. kappa when every drawn item has one label) is left out. (nan, nan) when there
    are no items or no resample has a value."""
    if m == 0 or reps < 1:
        return (math.nan, math.nan)
    return percentile_interval(bootstrap_replicates(statistic, m, reps, seed), level)


def bootstrap_replicates(
    statistic: Callable[[list[int]], float | None], m: int, reps: int = 2000, seed: int = 0
) -> list[float]:
    """The statistic on `reps` resamples of the indices 0..m-1 (those where it is defined), as
    `bootstrap_statistic` draws them: for a p-value or several intervals from one set of resamples."""
    rng = random.Random(seed)
    stats: list[float] = []
    for _ in range(reps):
        v = statistic([rng.randrange(m) for _ in range(m)])
        if v is not None and not math.isnan(v):
            stats.append(v)
    return stats


Unit = TypeVar("Unit")


def stratified_resamples(strata: Sequence[Sequence[Unit]], reps: int, seed: int = 0) -> Iterator[list[Unit]]:
    """`reps` stratified resamples drawn from `random.Random(seed)`: in each, every stratum's units drawn with
    replacement, as many as the stratum holds (so every stratum keeps its size), strata in the given order.

    A unit is whatever is resampled whole (an example, or the rows of one prompt); the statistic of each resample
    then goes to `percentile_interval`. E.g. strata [[a, b], [c]] give resamples such as [a, a, c] or [b, a, c],
    never [a, b, b] (c's stratum keeps its one unit)."""
    rng = random.Random(seed)
    for _ in range(reps):
        yield [u for units in strata for u in rng.choices(units, k=len(units))]


def bootstrap_ci(values: Sequence[float], reps: int = 2000, seed: int = 0, level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval of mean(values), resampling the items (e.g. prompts)."""
    return bootstrap_statistic(lambda idx: sum(values[i] for i in idx) / len(idx), len(values), reps, seed, level)


def paired_bootstrap(
    a: Sequence[float], b: Sequence[float], reps: int = 2000, seed: int = 0, level: float = 0.95
) -> tuple[float, float]:
    """Percentile bootstrap interval of mean(a − b) over paired items (the same prompts scored twice)."""
    if len(a) != len(b):
        raise ValueError(f"paired_bootstrap: {len(a)} and {len(b)} values are not paired")
    return bootstrap_ci([x - y for x, y in zip(a, b, strict=True)], reps, seed, level)


def paired_by_group(
    groups: Sequence[str], a: Sequence[float], b: Sequence[float], seed: int = 0
) -> dict[str, dict[str, Any]]:
    """Per group (e.g. a task family), over its paired items: n, b's mean (`before`), a's (`after`), the change and
    its paired bootstrap 95% interval."""
    out: dict[str, dict[str, Any]] = {}
    for g in sorted(set(groups)):
        idx = [i for i, x in enumerate(groups) if x == g]
        ga, gb = [a[i] for i in idx], [b[i] for i in idx]
        out[g] = {
            "n": len(idx),
            "before": sum(gb) / len(gb),
            "after": sum(ga) / len(ga),
            "change": (sum(ga) - sum(gb)) / len(idx),
            "ci95": list(paired_bootstrap(ga, gb, seed=seed)),
        }
    return out


def win_rate(policy: Sequence[float], baseline: Sequence[float]) -> float:
    """The share of items on which `policy` scores above `baseline` (a tie counts half): win 1, tie 0.5, loss 0."""
    return sum(1.0 if a > b else 0.5 if a == b else 0.0 for a, b in zip(policy, baseline, strict=True)) / len(policy)


def roc_auc(scores: Sequence[float], labels: Sequence[bool]) -> float:
    """P(a positive outscores a negative), ties half (the Mann-Whitney statistic); NaN with one class only.
    From the positives' mid-ranks, so O(n log n): cheap enough to bootstrap over thousands of items."""
    n_pos = sum(1 for y in labels if y)
    n_neg = len(labels) - n_pos
    if len(scores) != len(labels):
        raise ValueError(f"{len(scores)} scores for {len(labels)} labels")
    if not n_pos or not n_neg:
        return math.nan
    order = sorted(range(len(scores)), key=scores.__getitem__)
    rank_sum, i = 0.0, 0
    while i < len(order):
        j = i  # order[i..j]: one run of equal scores, each given the run's mean rank (1-based)
        while j + 1 < len(order) and scores[order[j + 1]] == scores[order[i]]:
            j += 1
        rank_sum += (i + j + 2) / 2 * sum(1 for t in range(i, j + 1) if labels[order[t]])
        i = j + 1
    return (rank_sum - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def within_group_auc(
    groups: Sequence[tuple[Sequence[float], Sequence[bool]]], reps: int = 2000, seed: int = 0
) -> dict[str, float]:
    """The mean over groups holding both labels of the ROC AUC inside each group (how well the scores rank one
    group's positives above its negatives, whatever the level of each group), with its percentile bootstrap
    interval over those groups; `groups` counts them (NaN mean when there are none)."""
    aucs = [roc_auc(s, y) for s, y in groups if any(y) and not all(y)]
    low, high = bootstrap_ci(aucs, reps, seed)
    return {"auc": sum(aucs) / len(aucs) if aucs else math.nan, "low": low, "high": high, "groups": len(aucs)}


def finite_mean(values: Sequence[float]) -> float:
    """Mean of the finite values; NaN when there are none (a NaN never reads as a zero)."""
    ok = [v for v in values if v is not None and math.isfinite(v)]
    return sum(ok) / len(ok) if ok else math.nan


__all__ = [
    "SEED_STRIDE",
    "bootstrap_ci",
    "bootstrap_statistic",
    "finite_mean",
    "paired_bootstrap",
    "paired_by_group",
    "percentile_interval",
    "roc_auc",
    "stratified_resamples",
    "stream_seed",
    "win_rate",
]
