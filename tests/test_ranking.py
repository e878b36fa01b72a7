"""Ranking n > 2 candidates with a pairwise scorer: round robin (Borda over win probabilities) and a knockout
bracket, against hand-computed cases; and with the real pair-PM scorer on the tiny model."""

from __future__ import annotations

import math

import pytest

from preference_data.records import Message
from reward_models.ranking import borda, rank


class ByNumber:
    """A pairwise preference over answers that are numbers: P(a > b) = table[(a, b)] (else from the values)."""

    kind = "pairwise"

    def __init__(self, symmetric: bool, table: dict[tuple[str, str], float] | None = None) -> None:
        self.symmetric = symmetric
        self.table = table or {}
        self.calls = 0

    def compare(self, prompts, a, b):
        self.calls += 1
        out = []
        for x, y in zip(a, b, strict=True):
            xs, ys = x[0].content, y[0].content
            if (xs, ys) in self.table:
                out.append(self.table[(xs, ys)])
            else:
                out.append(1.0 if float(xs) > float(ys) else 0.0 if float(xs) < float(ys) else 0.5)
        return out


def _c(text: str):
    return [Message("assistant", text)]


PROMPT = [Message("user", "Give a big number.")]


def test_borda_hand_computed():
    p = [[0.0, 0.9, 0.6], [0.1, 0.0, 0.3], [0.4, 0.7, 0.0]]
    assert borda(p) == pytest.approx([0.75, 0.2, 0.55])
    with pytest.raises(ValueError):
        borda([[0.5]])


def test_round_robin_orders_by_mean_win_probability():
    cands = [_c(t) for t in ("3", "9", "1", "7")]
    r = rank(ByNumber(symmetric=True), PROMPT, cands)
    assert r.order == [1, 3, 0, 2] and r.comparisons == 6 and r.failed == 0
    assert r.scores == pytest.approx([1 / 3, 1.0, 0.0, 2 / 3])


def test_round_robin_averages_both_orders_of_a_position_biased_scorer():
    # asked (a, b) this scorer says 0.8 for "2 over 5"; asked (b, a) it says 0.6 for "5 over 2": P(2 > 5) = 0.6
    table = {("2", "5"): 0.8, ("5", "2"): 0.6}
    scorer = ByNumber(symmetric=False, table=table)
    r = rank(scorer, PROMPT, [_c("2"), _c("5")])
    assert r.scores == pytest.approx([0.6, 0.4]) and r.order == [0, 1] and scorer.calls == 2


def test_knockout_bracket_byes_and_a_cycle():
    # round 1: "8" (1) beats "1" (0), "5" (2) beats "2" (3), "4" (4) has a bye; round 2: 1 vs 2, where the table
    # makes "5" beat "8", 4 has a bye; final: 2 beats 4
    cands = [_c(t) for t in ("1", "8", "5", "2", "4")]
    table = {("8", "5"): 0.3}  # a cycle-making upset: 5 beats 8
    r = rank(ByNumber(symmetric=True, table=table), PROMPT, cands, method="knockout")
    assert r.comparisons == 4  # n - 1
    assert r.order[0] == 2 and r.scores == [0.0, 1.0, 3.0, 0.0, 2.0]
    assert r.order == [2, 4, 1, 0, 3]


def test_nan_comparisons_are_no_preference_and_counted():
    table = {("1", "2"): math.nan}
    r = rank(ByNumber(symmetric=True, table=table), PROMPT, [_c("1"), _c("2"), _c("3")])
    assert r.failed == 1 and r.scores[0] == pytest.approx((0.5 + 0.0) / 2)


def test_bad_calls_are_clear_errors():
    with pytest.raises(ValueError, match="at least 2"):
        rank(ByNumber(True), PROMPT, [_c("1")])
    with pytest.raises(ValueError, match="round_robin or knockout"):
        rank(ByNumber(True), PROMPT, [_c("1"), _c("2")], method="swiss")  # type: ignore[arg-type]

    class Pointwise:
        kind = "pointwise"

    with pytest.raises(ValueError, match="pairwise scorer"):
        rank(Pointwise(), PROMPT, [_c("1"), _c("2")])


def test_round_robin_with_the_pair_pm_on_the_tiny_model(tiny_model_ref):
    """The real pair-PM: a permutation, one compare per pair (it is symmetric), scores from its probabilities."""
    from reward_models.scorers import load_scorer

    scorer = load_scorer("pair_pm", model="builtin:tiny-llama", dtype="float32")
    cands = [_c(t) for t in ("Paris.", "It is Lyon.", "I do not know.", "Paris, the capital of France.")]
    r = rank(scorer, [Message("user", "What is the capital of France?")], cands)
    assert sorted(r.order) == [0, 1, 2, 3] and r.comparisons == 6 and r.failed == 0
    p01 = scorer.compare([[Message("user", "What is the capital of France?")]], [cands[0]], [cands[1]])[0]
    assert 0.0 < p01 < 1.0
    assert all(0.0 <= s <= 1.0 for s in r.scores)
    assert math.fsum(r.scores) == pytest.approx(len(cands) / 2)  # every comparison hands out one unit of win


@pytest.mark.parametrize("method", ["round_robin", "knockout"])
def test_many_prompts_ranked_in_batched_calls_as_one_by_one(method):
    """`rank_many` gives every prompt the ranking `rank` gives it alone, asking the scorer once per stage: round robin
    in one call for all prompts, knockout once per bracket round (a generative judge batches across prompts)."""
    from reward_models.ranking import rank_many

    groups = [["3", "9", "1", "7"], ["5", "2"], ["4", "8", "6"]]
    cands = [[_c(t) for t in g] for g in groups]
    alone = [rank(ByNumber(symmetric=True), PROMPT, c, method) for c in cands]
    scorer = ByNumber(symmetric=True)
    together = rank_many(scorer, [PROMPT] * len(cands), cands, method)
    assert [(r.order, r.scores, r.comparisons, r.failed) for r in together] == [
        (r.order, r.scores, r.comparisons, r.failed) for r in alone
    ]
    assert scorer.calls == (1 if method == "round_robin" else 2)  # 4 candidates: two bracket rounds
