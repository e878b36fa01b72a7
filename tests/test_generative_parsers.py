"""The judges' readers on malformed output: they never raise, and what they cannot read abstains with a reason."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reward_models.generative import parse_grm_scores, parse_pair_pm, parse_think_answer

# ---------------------------------------------------------------------------------------------------------
# pointwise GRM: the last \boxed{...} with n scores

GRM_CASES = [
    # (text, n, expected scores or None, reason)
    ("Analysis: fine.\nScores: \\boxed{7, 3}", 2, (7.0, 3.0), "ok"),
    ("Score: \\boxed{8}", 1, (8.0,), "ok"),
    ("Score: \\\\boxed{ 9 }", 1, (9.0,), "ok"),  # two backslashes (JSON-escaped output)
    ("Scores: \\boxed[6, 5]", 2, (6.0, 5.0), "ok"),
    ("Scores: \\boxed{$7$, $2$}", 2, (7.0, 2.0), "ok"),
    ("first \\boxed{2, 9} then I changed my mind \\boxed{9, 2}", 2, (9.0, 2.0), "ok"),  # the last box counts
    ("Scores: 7 and 3", 2, None, "no_box"),
    ("", 2, None, "empty"),
    ("   \n ", 1, None, "empty"),
    ("Scores: \\boxed{7, 3", 2, None, "unclosed_box"),
    ("Scores: \\boxed{7}", 2, None, "count_mismatch"),
    ("Scores: \\boxed{7, 3, 5}", 2, None, "count_mismatch"),
    ("Scores: \\boxed{}", 1, None, "not_a_number"),
    ("Scores: \\boxed{11, 3}", 2, None, "out_of_range"),
    ("Scores: \\boxed{0, 3}", 2, None, "out_of_range"),
    ("Scores: \\boxed{-5}", 1, None, "out_of_range"),
    ("Scores: \\boxed{seven, 3}", 2, None, "not_a_number"),
    ("Scores: \\boxed{nan, 3}", 2, None, "not_a_number"),
    ("Scores: \\boxed{inf}", 1, None, "not_a_number"),
    ("Scores: \\boxed{1e1}", 1, None, "not_a_number"),  # not how a 1..10 score is written
    ("Scores: \\boxed{7/10}", 1, None, "not_a_number"),
    ("Scores: \\boxed{８}", 1, None, "not_a_number"),  # a full-width digit is not read as 8
    ("Scores: \\boxed{7.5, 3}", 2, (7.5, 3.0), "ok"),
    ("Scores: \\boxed{7, 3}" + "x" * 100_000, 2, (7.0, 3.0), "ok"),
    ("x" * 100_000 + "\\boxed{" + "9" * 100_000, 1, None, "unclosed_box"),
    ("Évaluation — très bien 👍 \\boxed{6}", 1, (6.0,), "ok"),
]


@pytest.mark.parametrize("text,n,scores,reason", GRM_CASES)
def test_grm_reader_on_hand_written_outputs(text, n, scores, reason):
    got = parse_grm_scores(text, n)
    assert (got.scores, got.reason) == (scores, reason)
    assert got.ok == (scores is not None)


def test_grm_reader_clips_only_when_asked():
    assert parse_grm_scores("\\boxed{11, 0}", 2, out_of_range="clip").scores == (10.0, 1.0)
    assert parse_grm_scores("\\boxed{11, 0}", 2).scores is None


def test_grm_reader_counts_the_boxes_it_saw():
    assert parse_grm_scores("\\boxed{1} \\boxed{2} \\boxed{3}", 1).boxes == 3


@pytest.mark.parametrize("bad", [None, 7, b"\\boxed{7}", ["\\boxed{7}"]])
def test_grm_reader_takes_non_text_as_empty(bad):
    assert parse_grm_scores(bad, 1).reason == "empty"


# ---------------------------------------------------------------------------------------------------------
# pairwise thinking judge: the last <answer>...</answer>

THINK_CASES = [
    ("<think>A is right.</think><answer>A</answer>", "binary", "A", None, "ok"),
    ("<think>...</think>\n<answer> B </answer>", "binary", "B", None, "ok"),
    ("<answer>Assistant A</answer>", "binary", "A", None, "ok"),
    ("<answer>Response B.</answer>", "binary", "B", None, "ok"),
    ("<answer>[[A]]</answer>", "binary", "A", None, "ok"),
    ("<ANSWER>(B)</ANSWER>", "binary", "B", None, "ok"),
    ("<answer>A</answer> on reflection <answer>B</answer>", "binary", "B", None, "ok"),  # the last block
    ("<answer>Both</answer>", "binary", None, None, "ambiguous_answer"),  # not the B of "Both"
    ("<answer>A or B</answer>", "binary", None, None, "ambiguous_answer"),
    ("<answer>a</answer>", "binary", None, None, "ambiguous_answer"),
    ("<answer></answer>", "binary", None, None, "ambiguous_answer"),
    ("<answer>C</answer>", "binary", None, None, "ambiguous_answer"),
    ("I pick A.", "binary", None, None, "no_answer_tag"),
    ("<answer>A", "binary", None, None, "unclosed_answer_tag"),
    ("", "binary", None, None, "empty"),
    ("<answer>" + "A" * 1000 + "</answer>", "binary", None, None, "ambiguous_answer"),
    ("<answer>-3</answer>", "multiclass", "A", -3, "ok"),
    ("<answer>2</answer>", "multiclass", "B", 2, "ok"),
    ("<answer>+1</answer>", "multiclass", "B", 1, "ok"),
    ("<answer>0</answer>", "multiclass", None, None, "ambiguous_answer"),
    ("<answer>13</answer>", "multiclass", None, None, "ambiguous_answer"),
    ("<answer>-4</answer>", "multiclass", None, None, "ambiguous_answer"),
    ("<answer>A</answer>", "multiclass", None, None, "ambiguous_answer"),
    ("<answer>−2</answer>", "multiclass", None, None, "ambiguous_answer"),  # unicode minus: not read
]


@pytest.mark.parametrize("text,form,label,strength,reason", THINK_CASES)
def test_think_reader_on_hand_written_outputs(text, form, label, strength, reason):
    got = parse_think_answer(text, form)
    assert (got.label, got.strength, got.reason) == (label, strength, reason)


@pytest.mark.parametrize(
    "text,label,reason",
    [("A", "A", "ok"), (" B\n", "B", "ok"), ("B.", "B", "ok"), ("AB", None, "ambiguous_answer"), ("", None, "empty")],
)
def test_pair_pm_reader(text, label, reason):
    got = parse_pair_pm(text)
    assert (got.label, got.reason) == (label, reason)


# ---------------------------------------------------------------------------------------------------------
# property: random text never raises, and a reading is either a valid verdict or an abstention with a reason

_ALPHABET = st.sampled_from(list("AB0123456789-+.,$ {}[]()\\/<>:abxyz\n\t") + ["boxed", "<answer>", "</answer>", "é"])
_TEXT = st.one_of(st.text(max_size=300), st.lists(_ALPHABET, max_size=120).map("".join))


@settings(max_examples=400, deadline=None)
@given(text=_TEXT, n=st.integers(min_value=1, max_value=4))
def test_readers_never_raise_on_random_text(text, n):
    g = parse_grm_scores(text, n)
    assert (g.scores is None) == (g.reason != "ok")
    if g.scores is not None:
        assert len(g.scores) == n and all(1.0 <= s <= 10.0 for s in g.scores)
    for form in ("binary", "multiclass"):
        t = parse_think_answer(text, form)
        assert (t.label is None) == (t.reason != "ok") and t.label in (None, "A", "B")
        if form == "multiclass" and t.label is not None:
            assert t.strength in (-3, -2, -1, 1, 2, 3) and (t.strength < 0) == (t.label == "A")
    p = parse_pair_pm(text)
    assert (p.label is None) == (p.reason != "ok")
