"""Ranking n > 2 candidates of one prompt with a pairwise scorer (pair-PM, thinking judge, or any scorer of kind
pairwise): round robin or a knockout tournament.

- `round_robin`: every unordered pair (i, j), i < j, is compared once as compare(prompt, y_i, y_j) (a symmetric
  scorer judges both orders inside; another is asked both orders and the two averaged). Candidate i scores
  its mean win probability against the others, s_i = (1 / (n - 1)) sum_{j != i} P(i > j) (a Borda count with
  probabilities); the ranking sorts by s_i, ties kept in the input order. n (n - 1) / 2 comparisons.
- `knockout`: a single-elimination bracket in the input order (a bye for the last candidate of an odd round);
  P(i > j) >= 0.5 advances i (the earlier candidate on exactly 0.5). Finds the winner in n - 1 comparisons; the
  ranking is by the round each candidate was eliminated in (the winner first, then the final's loser, ...),
  ties by input order. Cheaper, and it trusts every single comparison.
A comparison that fails (NaN) is read as 0.5, no preference, and counted in `Ranking.failed`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from preference_data.records import Conversation

Method = Literal["round_robin", "knockout"]


@dataclass
class Ranking:
    order: list[int]  # candidate indices, best first
    scores: list[
        float
    ]  # per candidate (input order): mean win probability (round robin) or rounds survived (knockout; a bye counts)
    comparisons: int
    failed: int  # comparisons that returned NaN (read as 0.5)


def borda(p: Sequence[Sequence[float]]) -> list[float]:
    """s_i = mean over j != i of p[i][j], for an n x n matrix of P(i > j) (the diagonal is ignored)."""
    n = len(p)
    if n < 2 or any(len(row) != n for row in p):
        raise ValueError(f"need a square matrix with at least 2 rows, got {n} rows")
    return [math.fsum(p[i][j] for j in range(n) if j != i) / (n - 1) for i in range(n)]


def _order(scores: Sequence[float]) -> list[int]:
    return sorted(range(len(scores)), key=lambda i: (-scores[i], i))


def _compare(scorer: Any, prompt: Conversation, pairs: list[tuple[int, int]], cands: Sequence[Conversation]):
    """P(y_i > y_j) for each (i, j), both orders averaged unless the scorer is symmetric; NaN -> 0.5, counted."""
    a = [cands[i] for i, _ in pairs]
    b = [cands[j] for _, j in pairs]
    p = scorer.compare([prompt] * len(pairs), a, b)
    if not getattr(scorer, "symmetric", False):
        q = scorer.compare([prompt] * len(pairs), b, a)
        p = [0.5 * (x + (1.0 - y)) for x, y in zip(p, q, strict=True)]
    failed = sum(math.isnan(x) for x in p)
    return [0.5 if math.isnan(x) else x for x in p], failed


def rank(
    scorer: Any, prompt: Conversation, candidates: Sequence[Conversation], method: Method = "round_robin"
) -> Ranking:
    """Rank `candidates` (n >= 2) of one prompt with a pairwise scorer (see the module docstring)."""
    if getattr(scorer, "kind", None) != "pairwise":
        raise ValueError(
            f"ranking needs a pairwise scorer (pair_pm, think, judge), got kind {getattr(scorer, 'kind', None)!r}"
        )
    n = len(candidates)
    if n < 2:
        raise ValueError(f"ranking needs at least 2 candidates, got {n}")
    if method == "round_robin":
        pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
        probs, failed = _compare(scorer, prompt, pairs, candidates)
        p = [[0.5] * n for _ in range(n)]
        for (i, j), x in zip(pairs, probs, strict=True):
            p[i][j], p[j][i] = x, 1.0 - x
        scores = borda(p)
        return Ranking(_order(scores), scores, len(pairs), failed)
    if method != "knockout":
        raise ValueError(f"method must be round_robin or knockout, got {method!r}")
    alive = list(range(n))
    won = [0.0] * n
    comparisons = failed = 0
    while len(alive) > 1:
        pairs = [(alive[k], alive[k + 1]) for k in range(0, len(alive) - 1, 2)]
        probs, f = _compare(scorer, prompt, pairs, candidates)
        comparisons, failed = comparisons + len(pairs), failed + f
        nxt = [i if x >= 0.5 else j for (i, j), x in zip(pairs, probs, strict=True)]
        if len(alive) % 2:
            nxt.append(alive[-1])  # a bye
        for i in nxt:
            won[i] += 1
        alive = nxt
    return Ranking(_order(won), won, comparisons, failed)
