"""`align bench compare A B`: two records of one benchmark on the same data, compared item by item.

Every record keeps each example's result (`Record.items`: id -> [subset, value], the value a fraction in [0, 1]: a
pair's credit, RewardBench 2's best-of-4 share, RM-Bench's mean over its 3x3 matrix). The comparison pairs the two
records' examples by id and, per subset and over all examples, reports the mean difference A - B with a paired
percentile bootstrap (the same resampled examples on both sides) and a two-sided bootstrap p-value (twice the
smaller share of resampled differences on either side of 0).

Several subsets are several tests, so the per-subset claims are corrected for their number m:
- sidak (default): each subset's interval at level (1 - 0.05)^(1/m) (family-wise error 0.05 when the subsets are
  independent), and a subset differs where that interval excludes 0;
- holm: the p-values sorted ascending, the k-th (from 0) compared with 0.05 / (m - k) until one fails (step-down;
  the intervals stay at 95%);
- none: 95% intervals, each subset on its own.
The overall row (all examples, equally weighted) is one test and is not corrected; it is the examples' mean, which
equals the benchmark's headline only where the headline is a plain mean (the record's headlines are shown beside it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from prefalign.errors import UserError
from prefalign.stats import bootstrap_replicates, percentile_interval

from .records import Record

Correction = Literal["sidak", "holm", "none"]
CORRECTIONS: tuple[Correction, ...] = ("sidak", "holm", "none")
ALPHA = 0.05


def item_value(result: dict[str, Any]) -> float | None:
    """One example's result as a fraction in [0, 1], or None where the benchmark's result has none."""
    for key in ("correct", "result"):
        v = result.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v)
    matrix = result.get("matrix")
    if isinstance(matrix, list) and matrix:
        cells = [float(c) for row in matrix for c in row]
        return sum(cells) / len(cells)
    return None


@dataclass(frozen=True)
class Difference:
    subset: str
    n: int
    a: float
    b: float
    diff: float
    """mean(A) - mean(B) over the examples both records scored."""
    ci95: tuple[float, float]
    ci_corrected: tuple[float, float]
    """At the corrected level (sidak); the 95% interval otherwise."""
    p: float
    differs: bool
    """Under the correction: the corrected interval excludes 0 (sidak, none) or Holm's step-down rejects (holm)."""


@dataclass(frozen=True)
class Comparison:
    benchmark: str
    a: str
    b: str
    correction: Correction
    level: float
    """The per-subset intervals' level (sidak: (1 - 0.05)^(1/m))."""
    overall: Difference
    subsets: list[Difference]
    headlines: tuple[float | None, float | None]
    unmatched: tuple[int, int]
    """Examples only A, only B scored (left out)."""
    reps: int


def _paired(subset: str, a: Sequence[float], b: Sequence[float], reps: int, seed: int, level: float) -> Difference:
    d = [x - y for x, y in zip(a, b, strict=True)]
    m = len(d)
    boot = bootstrap_replicates(lambda idx: sum(d[i] for i in idx) / m, m, reps, seed)
    below = sum(1 for v in boot if v <= 0) / reps
    above = sum(1 for v in boot if v >= 0) / reps
    p = min(1.0, 2 * min(below, above))
    ci95 = percentile_interval(boot, 0.95)
    corrected = percentile_interval(boot, level)
    diff = sum(d) / m
    return Difference(
        subset, m, sum(a) / m, sum(b) / m, diff, ci95, corrected, p, not corrected[0] <= 0 <= corrected[1]
    )


def compare_records(
    a: Record, b: Record, correction: Correction = "sidak", reps: int = 2000, seed: int = 0
) -> Comparison:
    """Compare record `a` with record `b` (same benchmark and data) item by item."""
    problems = []
    if a.benchmark != b.benchmark:
        problems.append(f"the records are of different benchmarks ({a.benchmark}, {b.benchmark})")
    ha, hb = a.settings.get("data_hash"), b.settings.get("data_hash")
    if ha and hb and ha != hb:
        problems.append(f"the records scored different data (data_hash {ha} vs {hb})")
    for r in (a, b):
        if not r.items:
            problems.append(
                f"{r.path or r.model}: the record keeps no per-example results (written by an older version); "
                "run the benchmark again to compare it"
            )
    if problems:
        raise UserError("cannot compare: " + "; ".join(problems))
    if correction not in CORRECTIONS:
        raise UserError(f"--correction {correction}: choose one of {', '.join(CORRECTIONS)}")
    common = [i for i in a.items if i in b.items]
    if not common:
        raise UserError("cannot compare: the records share no example ids")
    groups: dict[str, list[str]] = {}
    for i in common:
        groups.setdefault(str(a.items[i][0]), []).append(i)
    m = len(groups)
    level = (1 - ALPHA) ** (1 / m) if correction == "sidak" else 1 - ALPHA
    subsets = [
        _paired(g, [a.items[i][1] for i in ids], [b.items[i][1] for i in ids], reps, seed, level)
        for g, ids in sorted(groups.items())
    ]
    if correction == "holm":
        order = sorted(range(m), key=lambda k: subsets[k].p)
        rejected = set()
        for rank, k in enumerate(order):
            if subsets[k].p > ALPHA / (m - rank):
                break
            rejected.add(k)
        subsets = [Difference(**{**s.__dict__, "differs": k in rejected}) for k, s in enumerate(subsets)]
    overall = _paired("(all)", [a.items[i][1] for i in common], [b.items[i][1] for i in common], reps, seed, 0.95)
    return Comparison(
        benchmark=a.benchmark,
        a=a.model,
        b=b.model,
        correction=correction,
        level=level,
        overall=overall,
        subsets=subsets,
        headlines=(a.headline, b.headline),
        unmatched=(len(a.items) - len(common), len(b.items) - len(common)),
        reps=reps,
    )


def comparison_lines(c: Comparison) -> list[str]:
    """What the CLI prints."""
    pct = lambda x: "n/a" if x is None or not math.isfinite(x) else f"{100 * x:+.1f}"
    head = lambda x: "n/a" if x is None else f"{100 * x:.1f}"
    pv = lambda p: f"p < {1 / c.reps:.2g}" if p == 0 else f"p = {p:.3g}"  # no resample on the other side of 0
    lines = [
        f"{c.benchmark}: A = {c.a} (headline {head(c.headlines[0])}), B = {c.b} (headline {head(c.headlines[1])})",
        f"A - B in points over {c.overall.n} paired examples: {pct(c.overall.diff)} "
        f"[{pct(c.overall.ci95[0])}, {pct(c.overall.ci95[1])}] (paired bootstrap 95%), {pv(c.overall.p)}",
    ]
    if c.unmatched != (0, 0):
        lines.append(f"left out: {c.unmatched[0]} examples only A scored, {c.unmatched[1]} only B")
    what = {
        "sidak": f"Šidák-corrected intervals at {100 * c.level:.2f}% over {len(c.subsets)} subsets",
        "holm": f"Holm's step-down over {len(c.subsets)} subsets (95% intervals shown)",
        "none": "95% intervals, uncorrected",
    }[c.correction]
    lines.append(f"per subset ({what}):")
    width = max(len(s.subset) for s in c.subsets)
    for s in c.subsets:
        lo, hi = s.ci_corrected
        mark = "  differs" if s.differs else ""
        lines.append(
            f"  {s.subset:<{width}}  n={s.n:<5} A {100 * s.a:5.1f}  B {100 * s.b:5.1f}  A-B {pct(s.diff)} "
            f"[{pct(lo)}, {pct(hi)}]  {pv(s.p)}{mark}"
        )
    return lines
