"""Voting, the SPCT correctness rule, pair-PM probabilities, the pairwise-to-pointwise advantage and implicit PRM
step rewards against hand-computed values."""

from __future__ import annotations

import math

import pytest

from reward_models.generative import (
    aggregate,
    best_index,
    draw_right,
    grm_sample_correct,
    group_advantage,
    majority,
    meta_vote,
    pair_pm_probability,
    preference_matrix,
    rft_select,
    split_steps,
    step_rewards,
    vote_scores,
)


def test_a_draw_is_right_only_when_both_sides_scored_and_the_chosen_strictly_above():
    assert draw_right(1.0, 0.0) and draw_right(0.0, -1.0)
    assert not draw_right(0.0, 0.0)  # a tie
    assert not draw_right(0.0, 1.0)
    assert not draw_right(None, 0.0) and not draw_right(1.0, None)  # an abstention


def test_voting_sums_valid_samples_and_counts_abstentions():
    v = vote_scores([(7.0, 3.0), None, (5.0, 6.0), (8.0, 2.0)])
    assert v.totals == (20.0, 11.0) and (v.used, v.abstained) == (3, 1)
    assert best_index(v.totals) == 0
    assert vote_scores([None, None]).totals is None
    with pytest.raises(ValueError, match="different numbers"):
        vote_scores([(1.0,), (1.0, 2.0)])


def test_a_tie_is_not_a_verdict():
    assert best_index((12.0, 12.0, 3.0)) is None
    assert best_index((3.0, 12.0, 11.0)) == 1
    assert best_index(None) is None


def test_meta_rm_keeps_the_top_k_meta_samples():
    samples = [(9.0, 1.0), (2.0, 8.0), None, (3.0, 7.0), (6.0, 5.0)]
    meta = [0.1, 0.9, 5.0, 0.8, 0.8]  # the abstained sample's high meta score must not count
    v = meta_vote(samples, meta, k_meta=2)
    # top 2 valid by meta: sample 1 (0.9), then samples 3 and 4 tie at 0.8 -> the earlier, 3
    assert v.totals == (5.0, 15.0) and v.used == 2 and v.abstained == 1
    assert meta_vote(samples, meta, k_meta=10).totals == (20.0, 21.0)  # every valid sample
    with pytest.raises(ValueError):
        meta_vote(samples, meta[:2], 1)


def test_spct_correctness_rule_and_rejective_selection():
    assert grm_sample_correct((8.0, 3.0, 5.0), (1.0, 0.0, 0.0))
    assert not grm_sample_correct((8.0, 8.0, 5.0), (1.0, 0.0, 0.0))  # a tie with the best is not correct
    assert not grm_sample_correct((3.0, 8.0), (1.0, 0.0))
    assert not grm_sample_correct(None, (1.0, 0.0))
    assert grm_sample_correct((7.0,), (7.0,)) and not grm_sample_correct((6.0,), (7.0,))
    with pytest.raises(ValueError, match="not unique"):
        grm_sample_correct((1.0, 2.0), (1.0, 1.0))
    assert rft_select([True, False, True]) == [0, 2]
    assert rft_select([True, True]) == []  # too easy: dropped
    assert rft_select([False, False]) == []


def test_majority_vote():
    assert majority(["A", "B", "A", None]) == "A"
    assert majority(["A", "B", None]) is None
    assert majority([None, None]) is None


def test_pair_pm_probability_averages_both_orders():
    # order (x=A, y=B): logits (2, 0) -> P(A) = 1/(1+e^-2); order (y=A, x=B): logits (0, 1) -> P(B) = 1/(1+e^-1)
    p = pair_pm_probability((2.0, 0.0), (0.0, 1.0))
    assert p == pytest.approx(0.5 * (1 / (1 + math.exp(-2)) + 1 / (1 + math.exp(-1))))
    # position bias alone (always A, equally strongly) gives exactly 0.5
    assert pair_pm_probability((1.5, 0.0), (1.5, 0.0)) == pytest.approx(0.5)
    # swapping x and y gives the complement
    assert pair_pm_probability((0.0, 1.0), (2.0, 0.0)) == pytest.approx(1 - p)
    assert pair_pm_probability((2.0, 0.0), (0.0, 1.0), temperature=2.0) == pytest.approx(
        0.5 * (1 / (1 + math.exp(-1)) + 1 / (1 + math.exp(-0.5)))
    )


def test_group_advantage_by_hand():
    # G = 3; pairs (0,1): s = -2 (A = y0 better), (0,2): +1 (y2 better), (1,2): None (abstained)
    d = preference_matrix(3, {(0, 1): -2, (0, 2): 1, (1, 2): None})
    assert d == [[0.0, 2.0, -1.0], [-2.0, 0.0, 0.0], [1.0, 0.0, 0.0]]
    # sum of squares 4+1+4+1 = 10; / (2*3*2) = 10/12; scale = sqrt(10/12 + eps)
    scale = math.sqrt(10 / 12 + 1e-6)
    assert group_advantage(d) == pytest.approx([(1 / 3) / scale, (-2 / 3) / scale, (1 / 3) / scale])
    assert sum(group_advantage(d)) == pytest.approx(0.0, abs=1e-12)  # antisymmetric d: advantages sum to zero
    with pytest.raises(ValueError):
        preference_matrix(3, {(2, 1): 1})
    with pytest.raises(ValueError):
        group_advantage([[0.0]])


def test_implicit_prm_step_rewards_by_hand():
    policy = [-1.0, -0.5, -2.0, -0.1, -0.3]
    ref = [-1.5, -0.5, -1.0, -0.6, -0.3]
    # log-ratios: 0.5, 0, -1, 0.5, 0 ; steps end at tokens 1, 3, 4 ; beta 0.1
    q, r = step_rewards(policy, [1, 3, 4], beta=0.1, ref_logps=ref)
    assert q == pytest.approx([0.05, -0.0, 0.0])
    assert r == pytest.approx([0.05, -0.05, 0.0])
    assert aggregate(r, "min") == pytest.approx(-0.05) and aggregate(r, "sum") == pytest.approx(q[-1])
    q_noref, _ = step_rewards(policy, [1, 3, 4], beta=1.0)  # w/o reference: log pi alone
    assert q_noref == pytest.approx([-1.5, -3.6, -3.9])
    with pytest.raises(ValueError):
        step_rewards(policy, [3, 1], 0.1)
    with pytest.raises(ValueError):
        step_rewards(policy, [5], 0.1)
    assert math.isnan(aggregate([], "min"))


def test_split_steps():
    text = "Let me solve it.\nStep 1: add 2 and 2.\nStep 2: that is 4.\nStep 3: answer 4."
    want = ["Let me solve it.\nStep 1: add 2 and 2.\n", "Step 2: that is 4.\n", "Step 3: answer 4."]
    assert split_steps(text) == want
    assert split_steps("First part.\n\nSecond part.\n \nThird.") == ["First part.", "Second part.", "Third."]
    assert split_steps("one line") == ["one line"]
