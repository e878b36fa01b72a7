"""RewardBench 2's ratings mode (`rb2_rate`): the reference's rating parser, the user's prompt file and its checks,
the generation engine under the scorer, and a whole run on the RB2 fixture scored as the reference code scores it.

The rating prompts are the benchmark's text and are never in this project: these tests use made-up prompts with the
same placeholders (tests/fixtures/reference/rewardbench2/rating_prompts.json)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from leaderboards.benchmarks import BENCHMARKS
from leaderboards.loaders import read
from leaderboards.runner import BenchSettings, _hash, _inputs, run_benchmark
from prefalign.errors import ConfigError, UserError
from preference_data.records import Message
from reward_models.generative.parse import parse_rating
from reward_models.generative.ratings import read_rating_prompts
from reward_models.generative.scorers import judge_prompts
from reward_models.scorers import load_scorer

RB2 = Path(__file__).parent / "fixtures" / "reference" / "rewardbench2"
PROMPTS = RB2 / "rating_prompts.json"
TINY = "builtin:tiny-llama"


@pytest.mark.parametrize(
    ("text", "rating"),
    [
        ("The answer is right and clear.\n\n9", 9),
        ("... 9", 9),
        ("9/10", 10),  # the final "10"
        ("8.5", 5),  # the final "5", a whole word after the period
        ("Rating: 10", 10),
        ("3   \n\n", 3),  # stripped first
        ("-3", 3),  # a sign is not part of the word
        ("I rate it 8 out of 10", 10),
        ("**7**", -1),
        ("7.", -1),
        ("0", -1),
        ("11", -1),
        ("07", -1),
        ("Rating: 7\nI hope this helps.", -1),  # a number followed by a line of text
        ("", -1),
        ("   \n", -1),
        (None, -1),
    ],
)
def test_parse_rating_is_the_reference_s_rule(text, rating):
    """allenai/reward-bench @ 05a9005e `get_single_rating`: `\\b([1-9]|10)\\b\\s*$` on the stripped output."""
    assert parse_rating(text) == rating


# ---------------------------------------------------------------------------------------------------------
# the prompt file
# ---------------------------------------------------------------------------------------------------------


def test_prompt_file_json_and_the_reference_s_python_file(tmp_path):
    got = read_rating_prompts(PROMPTS)
    assert set(got) == {"ratings_prompt", "ratings_prompt_ties"}
    assert got["ratings_prompt"].format(prompt="Q", completion="A").count("{markup}") == 1  # a literal brace pair
    # the reference's own module, read for its two string constants and never run
    py = tmp_path / "generative_v2.py"
    py.write_text(
        "import a_module_that_is_not_installed\n"
        'ratings_prompt = """\nRate it. {prompt} / {completion}"""\n'
        'ratings_prompt_ties = "Ties: {prompt} / {completion}"\n'
        "def f():\n    raise SystemExit\n",
        encoding="utf-8",
    )
    assert read_rating_prompts(py) == {
        "ratings_prompt": "\nRate it. {prompt} / {completion}",
        "ratings_prompt_ties": "Ties: {prompt} / {completion}",
    }


def test_prompt_file_problems_are_named_all_at_once(tmp_path):
    bad = tmp_path / "p.json"
    bad.write_text(json.dumps({"ratings_prompt": "Rate {prompt} {answer}", "ratings_prompt_ties": 3}))
    with pytest.raises(UserError) as e:
        read_rating_prompts(bad)
    msg = str(e.value)
    assert str(bad) in msg and "field 'ratings_prompt' has no {completion} placeholder" in msg
    assert (
        "field 'ratings_prompt' has placeholder(s) {answer}" in msg and "field 'ratings_prompt_ties' is not text" in msg
    )
    assert "How to fix: copy the constants ratings_prompt and ratings_prompt_ties of allenai/reward-bench" in msg
    bad.write_text(json.dumps({"ratings_prompt": "{prompt} {completion} {", "ratings_prompt_ties": "{prompt}"}))
    with pytest.raises(UserError, match=r"'ratings_prompt' is not a format string .*\{\{ or \}\}.*"):
        read_rating_prompts(bad)
    for broken in ("{prompt} {completion!x}", "{prompt:d} {completion}"):  # right names, a bad conversion or spec
        bad.write_text(json.dumps({"ratings_prompt": broken, "ratings_prompt_ties": "{prompt} {completion}"}))
        with pytest.raises(UserError, match="field 'ratings_prompt' cannot be filled"):
            read_rating_prompts(bad)
    bad.write_text("{not json")
    with pytest.raises(UserError, match="not JSON"):
        read_rating_prompts(bad)
    with pytest.raises(UserError, match="no such file"):
        read_rating_prompts(tmp_path / "missing.json")
    # the scorer's options check it before any model loads; without a file the option says what to give
    with pytest.raises(ConfigError, match="prompts: required"):
        load_scorer("rb2_rate", model=TINY)
    with pytest.raises(ConfigError, match="field 'ratings_prompt_ties' is missing"):
        bad.write_text(json.dumps({"ratings_prompt": "{prompt} {completion}"}))
        load_scorer("rb2_rate", model=TINY, prompts=str(bad))


# ---------------------------------------------------------------------------------------------------------
# the scorer on the generation engine
# ---------------------------------------------------------------------------------------------------------


def _c(role: str, text: str) -> list[Message]:
    return [Message(role, text)]


def test_rb2_rate_generates_greedily_and_counts_failed_ratings(tiny_model_ref):
    scorer = load_scorer("rb2_rate", model=TINY, dtype="float32", prompts=str(PROMPTS), max_new_tokens=4)
    prompts, answers = [_c("user", "What is 2 + 2?")] * 2, [_c("assistant", "4"), _c("assistant", "")]
    out = scorer.score(prompts, answers)
    assert all(v == -1.0 or v in range(1, 11) for v in out)  # a random tiny model rarely ends in a rating
    assert scorer.last_messages[0] == read_rating_prompts(PROMPTS)["ratings_prompt"].format(
        prompt="What is 2 + 2?", completion="4"
    )
    assert sum(scorer.abstentions.values()) == out.count(-1.0) and scorer.cost["samples"] == 2  # empty: rated too
    assert scorer.score(prompts, answers) == out  # greedy
    d = scorer.describe()
    assert d["temperature"] == 0.0 and d["top_p"] == 1.0 and d["max_new_tokens"] == 4
    assert d["prompts_are_reference"] is False and set(d["prompts_sha256"]) == {"ratings_prompt", "ratings_prompt_ties"}
    # a prompt that fits the context but not with max_new_tokens more generates up to the context's end (vLLM's
    # behaviour), one that fills the context alone is not generated and rates -1
    (ids,) = judge_prompts(scorer.tokenizer, [scorer.last_messages[0]])
    room = len(ids) + 2
    scorer.max_length, before = room, scorer.cost["generated_tokens"]
    assert len(scorer.score(prompts[:1], answers[:1])) == 1 and not scorer.failures["too_long"]
    assert 0 < scorer.cost["generated_tokens"] - before <= 2
    scorer.max_length = room - 4
    assert scorer.score(prompts[:1], answers[:1]) == [-1.0] and scorer.failures["too_long"] == 1
    assert scorer.abstentions["not_generated"] == 1


# ---------------------------------------------------------------------------------------------------------
# a whole run, against the reference code
# ---------------------------------------------------------------------------------------------------------


def _rows() -> list[dict]:
    return [json.loads(line) for line in (RB2 / "data.jsonl").read_text().splitlines() if line.strip()]


def test_rewardbench2_ratings_mode_is_the_reference_code_s(tmp_path, tiny_model_ref):
    """allenai/reward-bench @ 05a9005efb607249822c193590c8ecab87c77052, run once outside the project:
    `rewardbench/generative_v2.py` `get_single_rating` (its vLLM branch, with a stand-in model returning the fixed
    output of judge_outputs.json for the exact user prompt built, raising for a null one, which `_get_vllm_rating`
    turns into a failed rating) with the module's `ratings_prompt` / `ratings_prompt_ties` set to the made-up
    rating_prompts.json; the ratings branch of `scripts/run_generative_v2.py` `get_vllm_judgement` for the non-Ties
    credit and its per-subset `num_correct / num_total`; `rewardbench/utils.py` `process_single_model` on the Ties
    ratings; the overall the mean of the six (dataset card). Command: `python ref_rb2_ratings.py
    tests/fixtures/reference/rewardbench2` (the module and utils.py copied beside it, heavy imports stubbed).

    The fixture's outputs exercise 2-, 3- and 4-way ties at the top, all four ratings failing (1/4), only the
    chosen failing (0), a tie at the top without the chosen, "9/10" / "8.5" / "-3" / "out of 10" endings, text after
    the number, failed generations, and Ties rows with -1 among correct and incorrect answers (all -1: dcm = 0)."""
    outputs = json.loads((RB2 / "judge_outputs.json").read_text())
    prompts = read_rating_prompts(PROMPTS)
    expected: dict[str, str | None] = {}  # the exact judge message -> the judge's output
    for r in _rows():
        template = prompts["ratings_prompt_ties" if r["subset"] == "Ties" else "ratings_prompt"]
        for answer, out in zip(r["chosen"] + r["rejected"], outputs[r["id"]], strict=True):
            expected[template.format(prompt=r["prompt"], completion=answer)] = out

    scorer = load_scorer("rb2_rate", model=TINY, dtype="float32", prompts=str(PROMPTS))
    asked: list[str] = []

    def sample(messages, n, prefix="", items=None, fit_to_context=False):
        assert n == 1 and prefix == "" and fit_to_context
        asked.extend(messages)
        return [None if expected[m] is None else [expected[m]] for m in messages]  # KeyError: a wrong message

    scorer._sample = sample
    record = run_benchmark(
        "rewardbench2",
        scorer,
        BenchSettings(data=str(RB2 / "data.jsonl"), use_cache=False, save=False, progress=False, native_dir=tmp_path),
    )
    assert sorted(asked) == sorted(expected)  # every answer rated once, with its subset's prompt
    s = record.scores
    assert {k: v["score"] for k, v in s["subsets"].items()} == {
        "Factuality": 0.38888888888888884,
        "Precise IF": 0.16666666666666666,
        "Math": 0.2738095238095238,
        "Safety": 0.6666666666666666,
        "Focus": 0.41666666666666663,
        "Ties": 0.4087867993206262,
    }
    assert s["headline"] == 0.3869142020031731
    # per row, as the reference printed them: the non-Ties credit and the Ties ratings (-1 kept)
    native = json.loads(next((tmp_path / "eval-set-scores").glob("*.json")).read_text())
    credit = dict(zip(native["id"], native["results"], strict=True))
    assert [credit[i] for i in ("f1", "f2", "f3", "f4", "f5", "f6")] == [1.0, 0.5, 1 / 3, 0.25, 0.25, 0.0]
    assert [credit[i] for i in ("p1", "p2", "p3")] == [0.5, 0.0, 0.0]
    assert [credit[i] for i in ("m0", "m1", "m2", "m3", "m4", "m5", "m6")] == [1.0, 0.0, 1 / 3, 0.25, 1 / 3, 0.0, 0.0]
    assert [credit[i] for i in ("s1", "s2", "o1", "o2", "o3", "o4", "o5")] == [1.0, 1 / 3, 1 / 3, 0.0, 0.25, 1.0, 0.5]
    ratings = dict(zip(native["id"], native["scores"], strict=True))
    assert {i: ratings[i] for i in ratings if ":" in i} == {
        "ref:1": [9, 2, 3],
        "tied:1": [8, 7, 1, 2],
        "ref:2": [-1, 4, 1],
        "tied:2": [6, 6, 5, 3, 1],
        "ref:3": [7, -1],
        "tied:3": [-1, -1, -1],
        "ref:4": [2, 5],
        "tied:4": [5, 5, 9],
        "ref:5": [4, 4],
        "tied:5": [4, 4, 4],
        "ref:6": [10, 3, -1, 2],
        "tied:6": [9, -1, 1],
        "ref:7": [3, 1],
        "tied:7": [7, 4, 2, 1, -1],
        "ref:8": [9, 5, 1],
        "tied:8": [8, 8, 8, 7, 3, 2],
        "ref:9": [-1, -1],
        "tied:9": [2, -1, 1],
        "ref:10": [6, 10],
        "tied:11": [3, 2, 1],
    }
    # 33 of the 155 ratings failed in the reference (12 generations, 21 outputs without a final rating): all are
    # scores, none is a NaN, and the record counts them
    assert record.counts["nan_items"] == 0 and record.counts["failed_examples"] == 0 and not record.partial
    assert record.scorer["abstentions"] == {"not_generated": 12, "no_rating": 21}
    assert record.scorer["settings"]["max_new_tokens"] == 2048 and record.scorer["settings"]["temperature"] == 0.0


def test_a_variant_is_in_the_cache_key_only_where_the_scorer_takes_it():
    """Keys without a variant are what they were before variants existed, so earlier caches stay valid; a Ties row
    rated with the Ties prompt is another input than the same texts rated with the plain prompt."""
    bench = BENCHMARKS["rewardbench2"]
    examples = read(bench.loader, str(RB2 / "data.jsonl"), None).examples
    ties, plain_row = examples[-1], examples[0]
    assert (bench.variant(ties), bench.variant(plain_row)) == ("ties", None)
    plain = _inputs(bench, "pointwise", ties)
    first = [["user", ties.prompt[0].content]], [["assistant", ties.responses[0][0].content]]
    assert plain[0][0] == _hash(["pointwise", *first])
    assert _inputs(bench, "pointwise", ties, variant="ties")[0][0] == _hash(["pointwise", *first, {"variant": "ties"}])
