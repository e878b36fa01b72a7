"""Inference-time scaling of a pointwise GRM and the meta-RM's labels and metrics, against hand-computed cases."""

from __future__ import annotations

import json
import math
import random

import pytest

from align.cli.main import main
from prefalign.stats import bootstrap_ci, roc_auc, within_group_auc
from reward_models.generative.scaling import group_score, meta_auc, pair_right_share, scaling_curve
from reward_models.generative.scorers import GRMScorer
from reward_models.meta_rm import label_critiques


def test_group_score_is_the_mean_of_valid_draws_or_of_the_meta_top():
    assert group_score([8.0, None, 6.0, 4.0]) == pytest.approx(6.0)
    assert math.isnan(group_score([None, None]))
    # meta keeps the 2 valid draws rated highest: ratings 0.9 (None: skipped), 0.5, 0.7 -> draws 3 and 2
    assert group_score([8.0, None, 6.0, 4.0], meta=[0.1, 0.9, 0.5, 0.7], k_meta=2) == pytest.approx(5.0)
    assert group_score([8.0, 2.0], meta=[0.3, 0.2]) == 8.0  # default k_meta: half of k


def test_pair_right_share_cuts_draws_into_disjoint_groups():
    chosen = [9.0, 3.0, 7.0, None]
    rejected = [2.0, 5.0, 7.0, 1.0]
    # k=1: right, wrong, tie (wrong), abstained (wrong)
    assert pair_right_share(chosen, rejected, 1) == 0.25
    # k=2: group 0: 6 vs 3.5 right; group 1: 7 vs 4 right
    assert pair_right_share(chosen, rejected, 2) == 1.0
    # k=4: 19/3 vs 15/4 right
    assert pair_right_share(chosen, rejected, 4) == 1.0
    with pytest.raises(ValueError):
        pair_right_share(chosen, rejected, 3)


def test_scaling_curve_with_and_without_meta_voting():
    chosen = [[9.0, 3.0, 7.0, None], [2.0, 2.0, 2.0, 2.0]]
    rejected = [[2.0, 5.0, 7.0, 1.0], [9.0, 9.0, 9.0, 9.0]]
    # meta rates the wrong draw 1 low on pair 0: with k=2, k_meta=1 group 0 votes draw 0 (9 vs 2, right)
    meta_c = [[0.9, 0.1, 0.5, 0.5], [0.0] * 4]
    meta_r = [[0.9, 0.1, 0.4, 0.6], [0.0] * 4]
    points = scaling_curve(chosen, rejected, [1, 2, 4], meta_c, meta_r, bootstrap=200)
    got = {(p.k, p.voting): p.accuracy for p in points}
    assert got[(1, "mean")] == pytest.approx((0.25 + 0.0) / 2)
    assert got[(2, "mean")] == pytest.approx((1.0 + 0.0) / 2)
    # k=2 meta (k_meta 1): group 0 -> chosen draw 0 (9) vs rejected draw 0 (2): right; group 1: chosen draw 2 or 3
    # (0.5 tie: the earlier, draw 2 = 7) vs rejected draw 3 (0.6: 1.0): right -> 1.0 on pair 0, 0 on pair 1
    assert got[(2, "meta")] == pytest.approx(0.5)
    assert (1, "meta") not in got and all(p.pairs == 2 for p in points)
    ties = {(p.k, p.voting): p.ties for p in points}
    assert ties[(1, "mean")] == pytest.approx((0.25 + 0.0) / 2)  # pair 0's draw 2: 7 vs 7
    assert ties[(4, "mean")] == 0.0
    for p in points:
        assert p.low <= p.accuracy <= p.high


def test_bootstrap_interval_brackets_the_mean_and_narrows_with_more_data():
    """The curve's interval is `prefalign.stats.bootstrap_ci` over the pairs' right shares."""
    small = bootstrap_ci([1.0, 0.0] * 10, reps=500)
    large = bootstrap_ci([1.0, 0.0] * 500, reps=500)
    assert small[0] < 0.5 < small[1] and large[0] < 0.5 < large[1]
    assert (large[1] - large[0]) < (small[1] - small[0])
    assert bootstrap_ci([0.7] * 5) == (0.7, 0.7)


def test_meta_labels_follow_the_rejective_rule_per_draw():
    crit = label_critiques(
        ["Score: \\boxed{8}", "Score: \\boxed{3}", "no box", "\\boxed{5}"],
        ["Score: \\boxed{2}", "Score: \\boxed{3}", "\\boxed{1}", "\\boxed{11}"],
        "mc",
        "mr",
    )
    assert [c.correct for c in crit] == [True, True, False, False, False, False, False, False]
    assert [c.message for c in crit[:2]] == ["mc", "mr"]


def test_roc_auc_hand_computed():
    assert roc_auc([0.9, 0.8, 0.1], [True, True, False]) == 1.0
    assert roc_auc([0.1, 0.9], [True, False]) == 0.0
    assert roc_auc([0.5, 0.5, 0.9, 0.1], [True, False, True, False]) == pytest.approx((0.5 + 1 + 1 + 1) / 4)
    assert math.isnan(roc_auc([0.3], [True]))


def test_roc_auc_from_ranks_is_the_pairwise_definition():
    rng = random.Random(1)
    for _ in range(200):
        scores = [rng.choice([0.0, 0.5, 1.0, 2.0]) for _ in range(12)]
        labels = [rng.random() < 0.5 for _ in range(12)]
        pos = [s for s, y in zip(scores, labels, strict=True) if y]
        neg = [s for s, y in zip(scores, labels, strict=True) if not y]
        if pos and neg:
            want = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg) / (len(pos) * len(neg))
            assert roc_auc(scores, labels) == pytest.approx(want)


def test_meta_auc_labels_each_draw_as_training_does_and_leaves_unrated_pairs_out():
    # pair 1: draw 0 right (1 > 0), draw 1 abstained on the chosen side (wrong); pair 2: draw 0 wrong, draw 1 right;
    # pair 3 was not rated (an empty response)
    chosen = [[1.0, None], [0.0, 1.0], [1.0, 1.0]]
    rejected = [[0.0, 0.0], [1.0, 0.0], [0.0, 0.0]]
    meta_c = [[0.9, 0.1], [0.5, 0.3], None]
    meta_r = [[0.8, 0.2], [0.5, 0.3], None]
    got = meta_auc(chosen, rejected, meta_c, meta_r, bootstrap=200)
    # positives 0.9, 0.8, 0.3, 0.3 against negatives 0.1, 0.2, 0.5, 0.5: 4 + 4 + 2 + 2 wins of 16
    assert got["auc"] == pytest.approx(12 / 16)
    assert got["pairs"] == 2 and got["correct_share"] == 0.5
    assert got["low"] <= got["auc"] <= got["high"]
    # inside each pair: pair 1 ranks its right draw first (1.0), pair 2 its wrong one (0.0)
    assert got["within_pair_auc"] == 0.5 and got["within_pair_pairs"] == 2


def test_within_group_auc_ranks_inside_each_group_whatever_its_level():
    """Scores that only tell the groups apart (every score of an all-right group above every score of a mixed one)
    pool to a high AUC but rank nothing inside a group; groups with one label are left out."""
    groups = [
        ([5.0, 5.0], [True, True]),  # one label: left out
        ([1.0, 1.0, 1.0], [True, False, False]),  # all tied inside: 0.5
        ([0.2, 0.1], [False, True]),  # wrong first: 0.0
        ([0.3, 0.4], [False, True]),  # right first: 1.0
    ]
    got = within_group_auc(groups, reps=200)
    assert got["groups"] == 3 and got["auc"] == pytest.approx(0.5)
    assert got["low"] <= got["auc"] <= got["high"]
    pooled = roc_auc([x for s, _ in groups for x in s], [y for _, ys in groups for y in ys])
    assert pooled > 0.6  # the pooled AUC credits the all-right group's level
    assert math.isnan(within_group_auc([([1.0], [True])])["auc"])


def test_scaling_a_rule_read_judge_writes_each_querys_works_once_for_both_sides(
    tmp_path, tiny_model_ref, monkeypatch, capsys
):
    """`align rm scaling --option ...` reaches the grm scorer's other options; both sides of every pair are scored
    in one call, so a judge that works from the query alone writes each query's works once; an option that has
    its own flag is refused through --option."""
    asked: list[int] = []
    works = GRMScorer._works

    def counted(self, prompts, responses):
        asked.append(len(prompts))
        return works(self, prompts, responses)

    monkeypatch.setattr(GRMScorer, "_works", counted)
    rows = [
        {
            "prompt": [{"role": "user", "content": f"What is {a} plus 2?"}],
            "chosen": [{"role": "assistant", "content": f"{a + 2}."}],
            "rejected": [{"role": "assistant", "content": f"{a + 3}."}],
        }
        for a in (1, 5, 9)
    ]
    data, out = tmp_path / "pairs.jsonl", tmp_path / "curve.json"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = ["rm", "scaling", "--model", tiny_model_ref, "--data", str(data), "--split", "all", "--k", "1,2"]
    args += ["--max-new-tokens", "4", "--dtype", "float32", "--out", str(out)]
    assert main([*args, "--option", "principles=from_prompt", "--option", "read=rule"]) == 0
    assert asked == [6]  # the three chosen and three rejected responses, one call
    result = json.loads(out.read_text())
    assert [p["k"] for p in result["curve"]] == [1, 2] and result["pairs"] == 3
    # the paired difference is the mean of the pairs' differences between the curve's two plain points
    plain = {p["k"]: p["accuracy"] for p in result["curve"] if p["voting"] == "mean"}
    assert result["paired"]["difference"] == pytest.approx(plain[2] - plain[1])
    assert result["paired"]["low"] <= result["paired"]["difference"] <= result["paired"]["high"]
    assert result["scorer"]["read"] == "rule" and result["scorer"]["principles"] == "from_prompt"
    draws = result["draws"]  # every draw kept: a pair's shares at k = 1 read back from them
    assert len(draws["chosen"]) == len(draws["rejected"]) == 3 and all(len(d) == 2 for d in draws["chosen"])
    assert draws["meta_chosen"] is None
    ones = [p["shares"] for p in result["curve"] if p["k"] == 1][0]
    assert ones == [pair_right_share(c, r, 1) for c, r in zip(draws["chosen"], draws["rejected"], strict=True)]
    assert main([*args, "--option", "temperature=0"]) == 2
    assert "--option temperature: set by its own flag" in capsys.readouterr().err
    # the curve again from the saved draws, nothing drawn: the same points, and a figure of them
    again, png = tmp_path / "again.json", tmp_path / "curve.png"
    asked.clear()
    assert main(["rm", "scaling", "--draws", str(out), "--k", "1,2", "--figure", str(png), "--out", str(again)]) == 0
    assert asked == [] and png.read_bytes()[:4] == b"\x89PNG"
    redrawn = json.loads(again.read_text())["curve"]
    assert [(p["k"], p["accuracy"], p["shares"]) for p in redrawn] == [
        (p["k"], p["accuracy"], p["shares"]) for p in result["curve"]
    ]
    assert main(["rm", "scaling", "--draws", str(out), "--k", "3"]) == 2  # 3 does not divide the 2 draws
    assert "each k must divide the 2 draws" in capsys.readouterr().err
    assert main(["rm", "scaling", "--k", "1"]) == 2 and "--model" in capsys.readouterr().err
