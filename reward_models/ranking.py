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


def _compare_many(
    scorer: Any, asks: list[tuple[Conversation, Conversation, Conversation]]
) -> tuple[list[float], list[bool]]:
    """P(a > b) for each (prompt, a, b), in one call of the scorer (both orders averaged unless the scorer is
    symmetric), and which comparisons failed (NaN, read as 0.5)."""
    if not asks:
        return [], []
    prompts, a, b = ([x[k] for x in asks] for k in range(3))
    p = scorer.compare(prompts, a, b)
    if not getattr(scorer, "symmetric", False):
        q = scorer.compare(prompts, b, a)
        p = [0.5 * (x + (1.0 - y)) for x, y in zip(p, q, strict=True)]
    nan = [math.isnan(x) for x in p]
    return [0.5 if bad else x for x, bad in zip(p, nan, strict=True)], nan


def rank_many(
    scorer: Any,
    prompts: Sequence[Conversation],
    candidates: Sequence[Sequence[Conversation]],
    method: Method = "round_robin",
) -> list[Ranking]:
    """`rank` for many prompts at once: every prompt's comparisons of a stage go to the scorer in one call (round
    robin: all of them; knockout: one call per bracket round), so a generative judge batches across prompts."""
    if getattr(scorer, "kind", None) != "pairwise":
        raise ValueError(
            f"ranking needs a pairwise scorer (pair_pm, think, judge), got kind {getattr(scorer, 'kind', None)!r}"
        )
    if any(len(c) < 2 for c in candidates):
        raise ValueError(f"ranking needs at least 2 candidates, got {min(len(c) for c in candidates)}")
    if method not in ("round_robin", "knockout"):
        raise ValueError(f"method must be round_robin or knockout, got {method!r}")
    if method == "round_robin":
        pairs = [[(i, j) for i in range(len(c)) for j in range(i + 1, len(c))] for c in candidates]
        asks = [(pr, c[i], c[j]) for pr, c, ps in zip(prompts, candidates, pairs, strict=True) for i, j in ps]
        probs, nan = _compare_many(scorer, asks)
        out, at = [], 0
        for c, ps in zip(candidates, pairs, strict=True):
            n = len(c)
            p = [[0.5] * n for _ in range(n)]
            for (i, j), x in zip(ps, probs[at : at + len(ps)], strict=True):
                p[i][j], p[j][i] = x, 1.0 - x
            scores = borda(p)
            out.append(Ranking(_order(scores), scores, len(ps), sum(nan[at : at + len(ps)])))
            at += len(ps)
        return out
    alive = [list(range(len(c))) for c in candidates]
    won = [[0.0] * len(c) for c in candidates]
    comparisons, failed = [0] * len(candidates), [0] * len(candidates)
    while any(len(a) > 1 for a in alive):
        brackets = [[(a[k], a[k + 1]) for k in range(0, len(a) - 1, 2)] for a in alive]
        asks = [(prompts[q], candidates[q][i], candidates[q][j]) for q, b in enumerate(brackets) for i, j in b]
        probs, nan = _compare_many(scorer, asks)
        at = 0
        for q, b in enumerate(brackets):
            if not b:
                continue
            mine = probs[at : at + len(b)]
            comparisons[q] += len(b)
            failed[q] += sum(nan[at : at + len(b)])
            at += len(b)
            nxt = [i if x >= 0.5 else j for (i, j), x in zip(b, mine, strict=True)]
            if len(alive[q]) % 2:
                nxt.append(alive[q][-1])  # a bye
            for i in nxt:
                won[q][i] += 1
            alive[q] = nxt
    return [Ranking(_order(w), w, c, f) for w, c, f in zip(won, comparisons, failed, strict=True)]


def rank(
    scorer: Any, prompt: Conversation, candidates: Sequence[Conversation], method: Method = "round_robin"
) -> Ranking:
    """Rank `candidates` (n >= 2) of one prompt with a pairwise scorer (see the module docstring)."""
    return rank_many(scorer, [prompt], [candidates], method)[0]
