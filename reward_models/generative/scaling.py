"""Inference-time scaling of a pointwise GRM: pair accuracy at k = 1, 2, 4, ... sampled critiques, plain voting
and meta-RM guided voting, with a bootstrap interval over pairs (`align rm scaling`).

K critiques of each response are drawn once (K = the largest k). For a given k the K draws are cut into K/k
disjoint groups of k consecutive draws; in each group a response scores the mean of its valid critiques'
scores (`GRMScorer`'s vote: the paper's sum over samples divided by the valid count), or of the k_meta valid
ones the meta-RM rates highest. A pair is right in a group when the chosen response's score is strictly above
the rejected one's (a tie, or a response with no valid critique, is wrong). Accuracy at k is the mean over pairs
of the share of groups the pair is right in: the expected accuracy of a k-sample judge, with every draw used
once at every k. The interval is the percentile bootstrap over pairs (`prefalign.stats.bootstrap_ci`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from prefalign.errors import UserError
from prefalign.stats import bootstrap_ci, bootstrap_statistic, roc_auc, within_group_auc

from ..model_scorers import ScalarOptions, ScalarScorer
from ..scorers import load_scorer
from .scorers import rate_critiques
from .vote import draw_right, meta_vote, vote_scores

Draws = Sequence[float | None]  # one parsed score per draw (None: abstained)


def default_k_meta(k: int) -> int:
    """Critiques the meta-RM keeps out of k when not told otherwise (as `GRMScorer`): half, at least 1."""
    return max(1, k // 2)


def group_score(scores: Draws, meta: Sequence[float] | None = None, k_meta: int | None = None) -> float:
    """One response's score from one group of draws (NaN when no draw is valid)."""
    samples = [None if s is None else (s,) for s in scores]
    vote = meta_vote(samples, meta, k_meta or default_k_meta(len(scores))) if meta is not None else vote_scores(samples)
    return math.nan if vote.totals is None else vote.totals[0] / vote.used


def pair_outcomes(
    chosen: Draws,
    rejected: Draws,
    k: int,
    meta_chosen: Sequence[float] | None = None,
    meta_rejected: Sequence[float] | None = None,
    k_meta: int | None = None,
) -> tuple[float, float]:
    """(share of the len(chosen) // k groups of draws in which the chosen response scores strictly higher, share
    in which the two scores tie)."""
    if len(chosen) != len(rejected) or len(chosen) % k:
        raise ValueError(f"need the same number of draws on both sides, a multiple of k={k}")
    groups = len(chosen) // k
    right = ties = 0
    for g in range(groups):
        sl = slice(g * k, (g + 1) * k)
        mc = meta_chosen[sl] if meta_chosen is not None else None
        mr = meta_rejected[sl] if meta_rejected is not None else None
        sc, sr = group_score(chosen[sl], mc, k_meta), group_score(rejected[sl], mr, k_meta)
        valid = not math.isnan(sc) and not math.isnan(sr)
        right += valid and sc > sr
        ties += valid and sc == sr
    return right / groups, ties / groups


def pair_right_share(chosen: Draws, rejected: Draws, k: int, *args: Any, **kwargs: Any) -> float:
    """The share of groups in which the chosen response scores strictly higher (see `pair_outcomes`)."""
    return pair_outcomes(chosen, rejected, k, *args, **kwargs)[0]


@dataclass
class ScalingPoint:
    k: int
    voting: str  # "mean" or "meta"
    k_meta: int | None
    accuracy: float
    low: float
    high: float
    pairs: int
    ties: float  # share of (pair, group) outcomes where the two responses score the same (counted wrong)
    shares: list[float]  # each pair's share of groups it is right in, in pair order (accuracy is their mean)

    def to_dict(self) -> dict[str, Any]:
        return self.__dict__.copy()


def scaling_curve(
    chosen: Sequence[Draws],
    rejected: Sequence[Draws],
    ks: Sequence[int],
    meta_chosen: Sequence[Sequence[float]] | None = None,
    meta_rejected: Sequence[Sequence[float]] | None = None,
    k_meta: int | None = None,
    bootstrap: int = 2000,
    seed: int = 0,
) -> list[ScalingPoint]:
    """Accuracy at each k with plain voting and, when meta ratings are given, meta-RM voting (k >= 2)."""
    points = []
    for k in ks:
        modes: list[tuple[str, int | None]] = [("mean", None)]
        if meta_chosen is not None and k >= 2:
            modes.append(("meta", k_meta or default_k_meta(k)))
        for mode, km in modes:
            outcomes = [
                pair_outcomes(
                    c,
                    r,
                    k,
                    meta_chosen[i] if mode == "meta" and meta_chosen is not None else None,
                    meta_rejected[i] if mode == "meta" and meta_rejected is not None else None,
                    km,
                )
                for i, (c, r) in enumerate(zip(chosen, rejected, strict=True))
            ]
            shares = [o[0] for o in outcomes]
            lo, hi = bootstrap_ci(shares, bootstrap, seed)
            n = len(shares)
            acc = sum(shares) / n if n else math.nan
            ties = sum(o[1] for o in outcomes) / n if n else math.nan
            points.append(ScalingPoint(k, mode, km, acc, lo, hi, n, ties, shares))
    return points


def meta_auc(
    chosen: Sequence[Draws],
    rejected: Sequence[Draws],
    meta_chosen: Sequence[Sequence[float] | None],
    meta_rejected: Sequence[Sequence[float] | None],
    bootstrap: int = 2000,
    seed: int = 0,
) -> dict[str, float]:
    """The meta-RM's ROC AUC on these pairs' draws, each labelled as its training labels them (`meta_rm`): draw j is
    correct where the chosen response's score in it is strictly above the rejected one's (a draw without both
    scores is wrong), and both of its critiques (for a judge that works from the query, its one work, rated on
    each side alike) carry that label. A pair whose ratings are None (an empty response: nothing was rated) is left
    out, as the training sampler leaves it out. The interval is the percentile bootstrap over pairs. Beside it, the
    within-pair AUC: the mean over pairs with right and wrong draws of the AUC among that pair's draws (what guided
    voting ranks by; the pooled AUC also credits telling the pairs a judge gets right from those it gets wrong)."""
    rows = []  # one (ratings, labels) per rated pair
    for c, r, mc, mr in zip(chosen, rejected, meta_chosen, meta_rejected, strict=True):
        if mc is None or mr is None:
            continue
        labels = [draw_right(a, b) for a, b in zip(c, r, strict=True)]
        rows.append(([*mc, *mr], labels + labels))

    def auc(idx: Sequence[int]) -> float:
        return roc_auc([x for i in idx for x in rows[i][0]], [y for i in idx for y in rows[i][1]])

    labels = [y for _, ys in rows for y in ys]
    low, high = bootstrap_statistic(auc, len(rows), bootstrap, seed)
    within = within_group_auc(rows, bootstrap, seed)  # inside each pair: the ranking guided voting uses
    return {
        "auc": auc(range(len(rows))),
        "low": low,
        "high": high,
        "pairs": len(rows),
        "correct_share": sum(labels) / len(labels) if labels else math.nan,
        "within_pair_auc": within["auc"],
        "within_pair_low": within["low"],
        "within_pair_high": within["high"],
        "within_pair_pairs": within["groups"],  # pairs with right and wrong draws
    }


def curve_from_draws(saved: dict[str, Any], ks: Sequence[int], k_meta: int | None = None) -> list[ScalingPoint]:
    """The curve at `ks` from the draws a `measure` result saved (`--out`'s `draws`), without drawing again; each k
    divides the number of draws per response."""
    draws = saved.get("draws")
    if not draws:
        raise UserError("the saved result has no draws (written by `align rm scaling --out` before draws were kept)")
    per = int(saved["draws_per_response"])
    if bad := [k for k in ks if k < 1 or per % k]:
        raise UserError(f"--k {bad}: each k must divide the {per} draws per response the file holds")
    return scaling_curve(
        draws["chosen"], draws["rejected"], ks, draws.get("meta_chosen"), draws.get("meta_rejected"), k_meta
    )


def plot_curve(curve: Sequence[dict[str, Any]], path: str, title: str) -> None:
    """Accuracy against k (log2 axis) with its 95% interval, a line per voting rule, as a PNG at `path`."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # lazy: matplotlib, only when a figure is asked for
    from matplotlib.figure import Figure

    fig = Figure(figsize=(5.0, 3.6))
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    for i, voting in enumerate(dict.fromkeys(p["voting"] for p in curve)):
        pts = [p for p in curve if p["voting"] == voting]
        ks = [p["k"] for p in pts]
        acc = [p["accuracy"] for p in pts]
        ax.plot(ks, acc, "o-", color=f"C{i}", label="plain voting" if voting == "mean" else "meta-RM voting")
        ax.fill_between(ks, [p["low"] for p in pts], [p["high"] for p in pts], color=f"C{i}", alpha=0.2)
    ticks = sorted({p["k"] for p in curve})
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks, [str(k) for k in ticks])
    ax.set_xlabel("k (sampled works or critiques per response)")
    ax.set_ylabel("pair accuracy (ties wrong)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def paired_difference(before: Sequence[float], after: Sequence[float]) -> dict[str, float]:
    """The mean of after - before over pairs (each pair's share of groups it is right in) and its percentile
    bootstrap interval."""
    diffs = [b - a for a, b in zip(before, after, strict=True)]
    low, high = bootstrap_ci(diffs, 2000, 0)
    return {"difference": sum(diffs) / len(diffs) if diffs else math.nan, "low": low, "high": high}


def measure(
    model: str,
    pairs: list[Any],
    ks: Sequence[int],
    meta_model: str | None = None,
    k_meta: int | None = None,
    **options: Any,
) -> dict[str, Any]:
    """Draw max(ks) critiques of every response of `pairs` with the GRM at `model`, rate them with the meta-RM
    when given, and return the curve with the draws' cost and abstentions."""
    big = max(ks, default=0)
    if not ks or min(ks) < 1 or any(big % k for k in ks):
        raise UserError(f"k: every k must be at least 1 and divide the largest, got {list(ks)} (try 1, 2, 4, 8)")
    scorer: Any = load_scorer("grm", model=model, k=big, **options)
    prompts = [p.prompt for p in pairs]
    # both sides in one call: a judge that works from the query alone (principles: from_prompt) writes each query's
    # k works once for its two responses
    scorer.score(prompts + prompts, [p.chosen for p in pairs] + [p.rejected for p in pairs])
    draws = [[None if s is None else s[0] for s in row] or [None] * big for row in scorer.last_samples]
    texts, messages, n = list(scorer.last_texts), list(scorer.last_messages), len(pairs)
    sides = [(draws[:n], texts[:n], messages[:n]), (draws[n:], texts[n:], messages[n:])]
    rated: list[list[list[float] | None]] | None = None  # per side, per pair: the meta-RM's ratings (None: none)
    if meta_model is not None:
        meta = ScalarScorer(ScalarOptions(model=meta_model, dtype=scorer.opts.dtype, normalize=False))
        memo: dict[tuple[str, tuple[str, ...]], list[float]] = {}  # a query's works, the same on both sides

        def rate(msg: str | None, row: list[str]) -> list[float] | None:
            if not row or msg is None:
                return None
            key = (msg, tuple(row))
            if key not in memo:
                memo[key] = rate_critiques(meta, msg, row)
            return memo[key]

        rated = [[rate(msg, row) for msg, row in zip(m, t, strict=True)] for _, t, m in sides]
    meta_sides = [[row or [0.0] * big for row in side] for side in rated] if rated else None
    curve = scaling_curve(
        sides[0][0],
        sides[1][0],
        ks,
        meta_sides[0] if meta_sides else None,
        meta_sides[1] if meta_sides else None,
        k_meta,
    )
    plain = {p.k: p.shares for p in curve if p.voting == "mean"}
    guided = {p.k: p.shares for p in curve if p.voting == "meta"}
    small = min(ks)
    return {
        "model": model,
        "meta_model": meta_model,
        "pairs": len(pairs),
        "draws_per_response": big,
        "curve": [p.to_dict() for p in curve],
        # plain voting at the largest k against the smallest, pair by pair (the same draws): the paired interval
        "paired": {"k": [small, big], **paired_difference(plain[small], plain[big])},
        # meta-RM voting against plain voting at the largest k (the same draws)
        "meta_paired": {"k": big, **paired_difference(plain[big], guided[big])} if big in guided else None,
        # how well the meta-RM's ratings separate these draws' correct critiques (works) from wrong ones
        "meta_auc": meta_auc(sides[0][0], sides[1][0], rated[0], rated[1]) if rated else None,
        # every draw's parsed score per pair and side, and the meta-RM's ratings: another voting rule can be read
        # from these without drawing again
        "draws": {
            "chosen": [list(d) for d in sides[0][0]],
            "rejected": [list(d) for d in sides[1][0]],
            "meta_chosen": rated[0] if rated else None,
            "meta_rejected": rated[1] if rated else None,
        },
        "cost": scorer.cost_per_item(),
        "abstentions": dict(scorer.abstentions),
        "scorer": scorer.describe(),
    }
