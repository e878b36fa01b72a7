"""`align rm compare` with a pairwise judge after a pointwise reward: the judge deciding the reward's pairs
(`rounds.verify`'s rule) is measured from the same verdicts the two scorers gave."""

from __future__ import annotations

import json

import pytest

from reward_models.compare import deciding


def test_deciding_takes_the_judge_where_its_orders_agree_and_the_reward_elsewhere() -> None:
    judge, consistent, reward = [1.0, 0.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 1.0]
    d = deciding(judge, consistent, reward, checked=[0, 1], bootstrap=200, seed=0)
    assert d["decided"] == 0.5
    assert d["all"]["accuracy"] == 0.75 and d["minus_reward"]["difference"] == 0.25
    assert d["checked"]["accuracy"] == 0.5 and d["checked_minus_reward"]["difference"] == 0.5


@pytest.mark.slow
def test_compare_reports_the_judge_deciding_the_rewards_pairs(tmp_path, tiny_model_ref, capsys) -> None:
    from align.cli.main import main

    out = tmp_path / "compare.json"
    think = "think={type: think, model: builtin:tiny-llama, max_new_tokens: 6, temperature: 0}"
    argv = ["rm", "compare", "--suite-per-family", "2", "--scorer", "gold=grader", "--scorer", think, "--out", str(out)]
    assert main(argv) == 0
    result = json.loads(out.read_text(encoding="utf-8"))
    j, g, k = result["correct"]["think"], result["correct"]["gold"], result["consistent"]["think"]
    d = result["scorers"]["think"]["deciding"]
    assert d["decided"] == pytest.approx(sum(k) / len(k))
    assert d["all"]["accuracy"] == pytest.approx(sum(a if c else b for a, c, b in zip(j, k, g, strict=True)) / len(j))
    assert "gold proposing, think deciding" in capsys.readouterr().out


def test_ties_of_a_pointwise_scorer_are_counted_and_wrong() -> None:
    """A pointwise scorer that gives both sides the same score is wrong on that pair, and the report says how many
    pairs were ties (a generative RM's integer scores tie often)."""
    from preference_data.records import Message, PreferencePair
    from reward_models.compare import scorer_report

    class Length:  # scores a response by its length in words: equal lengths tie
        kind = "pointwise"

        def score(self, prompts, responses):
            return [float(len(r[-1].content.split())) for r in responses]

    def pair(chosen: str, rejected: str) -> PreferencePair:
        return PreferencePair(
            [Message("user", "Say something.")], [Message("assistant", chosen)], [Message("assistant", rejected)]
        )

    pairs = [pair("one two three", "one"), pair("one two", "three four"), pair("a", "b"), pair("x", "y z")]
    r = scorer_report(Length(), pairs, bootstrap=50)
    assert r["ties"] == 2 and r["accuracy"] == 0.25
