"""RewardBench 2's 4-way mode (`rb2_4way`): the reference's verdict parser, the seeded shuffle, the user's prompt file
and its checks, the scorer on the generation engine, and whole runs on the RB2 fixture scored as the reference code
scores them.

The prompts are the benchmark's text and are never in this project: these tests use made-up prompts with the same
placeholders (tests/fixtures/reference/rewardbench2/four_way_prompts.json; its Ties prompt is rating_prompts.json's,
so the Ties rows reuse the ratings-mode outputs of judge_outputs.json)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from align.rewards import check_reward_specs
from leaderboards.benchmarks import BENCHMARKS
from leaderboards.loaders import read
from leaderboards.runner import BenchSettings, _inputs, run_benchmark
from prefalign.errors import ConfigError, UserError
from preference_data.records import Message
from reward_models.compare import ScorerSpec
from reward_models.generative.four_way import FOUR_WAY_FIELDS, four_way_order, four_way_position
from reward_models.generative.parse import parse_four_way
from reward_models.generative.ratings import read_prompts
from reward_models.generative.scorers import judge_prompts
from reward_models.scorers import load_scorer

RB2 = Path(__file__).parent / "fixtures" / "reference" / "rewardbench2"
PROMPTS = RB2 / "four_way_prompts.json"
TINY = "builtin:tiny-llama"


@pytest.mark.parametrize(
    ("text", "letter"),
    [
        ("[[B]]", "B"),
        ("Assistant B is clearly better.\n\n[[B]]", "B"),
        ("[[D]]", "D"),
        ("[[D]].", "D"),
        ("[[A]] ... [[C]]", "A"),
        ("[[C]] is good but [[A]] is best", "A"),  # A is checked first, wherever it is written
        ("[[D]] [[B]]", "B"),  # B before D, though D comes first and B last
        ("Between [[B]] and [[D]], I pick [[D]]", "B"),
        ("[[a]]", None),  # exact: no case folding
        ("[[ B ]]", None),
        ("[C]", None),
        ("**B**", None),
        ("[[E]]", None),
        ("no verdict at all", None),
        ("", None),
        (None, None),
    ],
)
def test_parse_four_way_is_the_reference_s_rule(text, letter):
    """allenai/reward-bench @ 05a9005e `process_judgement`: `"[[A]]" in judgment`, then B, C, D; else "error"."""
    assert parse_four_way(text) == letter


# ---------------------------------------------------------------------------------------------------------
# the seeded shuffle
# ---------------------------------------------------------------------------------------------------------

POSITIONS = {  # by seed: four_way_position's, frozen (the reference-side run was given these, not its own draw)
    0: {
        "f1": 1, "f2": 1, "f3": 3, "f4": 1, "f5": 2, "f6": 3, "p1": 1, "p2": 3, "p3": 2, "m0": 0, "m1": 3, "m2": 1,
        "m3": 3, "m4": 1, "m5": 2, "m6": 3, "s1": 2, "s2": 3, "o1": 1, "o2": 1, "o3": 2, "o4": 0, "o5": 2,
    },
    1: {
        "f1": 3, "f2": 3, "f3": 2, "f4": 3, "f5": 1, "f6": 3, "p1": 2, "p2": 0, "p3": 1, "m0": 0, "m1": 1, "m2": 3,
        "m3": 2, "m4": 3, "m5": 1, "m6": 2, "s1": 1, "s2": 1, "o1": 2, "o2": 1, "o3": 0, "o4": 2, "o5": 0,
    },
}  # fmt: skip


def _rows() -> list[dict]:
    return [json.loads(line) for line in (RB2 / "data.jsonl").read_text().splitlines() if line.strip()]


def test_the_chosen_answer_s_position_is_seeded_and_swapped_in_as_the_reference_swaps_it():
    """scripts/run_generative_v2.py lines 406-417: the chosen answer swaps places with the answer at the position
    drawn; here the position is sha256("<seed>:<id>") mod 4, the same on every call, and the fixture's 23 rows
    outside Ties cover all four."""
    for seed, expected in POSITIONS.items():
        assert {i: four_way_position(seed, i) for i in expected} == expected
    ids = [r["id"] for r in _rows() if r["subset"] != "Ties"]
    assert sorted(ids) == sorted(POSITIONS[0])
    assert set(POSITIONS[0].values()) == set(POSITIONS[1].values()) == {0, 1, 2, 3}
    # chosen = 0, rejected = 1, 2, 3: shown A..D
    assert [four_way_order(p) for p in range(4)] == [[0, 1, 2, 3], [1, 0, 2, 3], [2, 1, 0, 3], [3, 1, 2, 0]]


# ---------------------------------------------------------------------------------------------------------
# the prompt file
# ---------------------------------------------------------------------------------------------------------


def test_prompt_file_json_and_the_reference_s_python_file(tmp_path):
    got = read_prompts(PROMPTS, FOUR_WAY_FIELDS)
    assert set(got) == {"system_prompt", "prompt_template", "ratings_prompt_ties"}
    assert "{Braces here stay" in got["system_prompt"]  # sent as it is: never formatted, so never checked
    # the reference's own module: MTBENCH_V2's entries (a bare name stands for the string constant) and a constant
    py = tmp_path / "generative_v2.py"
    py.write_text(
        "import a_module_that_is_not_installed\n"
        'prompt_v2 = ("Judge. " "Say [[A]].")\n'
        "MTBENCH_V2 = {\n"
        '    "name": "pair-v2",\n'
        '    "system_prompt": prompt_v2,\n'
        '    "prompt_template": "{question}|{answer_a}|{answer_b}|{answer_c}|{answer_d}",\n'
        "}\n"
        'ratings_prompt_ties = "Ties: {prompt} / {completion}"\n'
        "def f():\n    raise SystemExit\n",
        encoding="utf-8",
    )
    assert read_prompts(py, FOUR_WAY_FIELDS) == {
        "system_prompt": "Judge. Say [[A]].",
        "prompt_template": "{question}|{answer_a}|{answer_b}|{answer_c}|{answer_d}",
        "ratings_prompt_ties": "Ties: {prompt} / {completion}",
    }


def test_prompt_file_problems_are_named_all_at_once(tmp_path):
    bad = tmp_path / "p.json"
    bad.write_text(
        json.dumps(
            {
                "system_prompt": ["not", "text"],
                "prompt_template": "{question} {answer_a} {answer_b} {answer_c} {answer_e}",
                "ratings_prompt_ties": "{prompt} {completion}",
            }
        )
    )
    with pytest.raises(UserError) as e:
        read_prompts(bad, FOUR_WAY_FIELDS)
    msg = str(e.value)
    assert str(bad) in msg and "field 'system_prompt' is not text" in msg
    assert "field 'prompt_template' has no {answer_d} placeholder (the reference fills {question} with" in msg
    assert "field 'prompt_template' has placeholder(s) {answer_e}; only {question}, {answer_a}, {answer_b}, " in msg
    assert (
        'How to fix: copy the constants MTBENCH_V2["system_prompt"], MTBENCH_V2["prompt_template"] and '
        "ratings_prompt_ties of allenai/reward-bench @ 05a9005efb607249822c193590c8ecab87c77052" in msg
    )
    assert "keys system_prompt, prompt_template and ratings_prompt_ties" in msg
    py = tmp_path / "generative_v2.py"
    py.write_text('prompt_v2 = "x"\nratings_prompt_ties = "{prompt} {completion}"\n')
    with pytest.raises(UserError, match=r"field 'system_prompt' \(MTBENCH_V2\[\"system_prompt\"\] of generative_v2"):
        read_prompts(py, FOUR_WAY_FIELDS)
    # the scorer's options check it before any model loads; without a file the option says what to give
    with pytest.raises(ConfigError, match="prompts: required"):
        load_scorer("rb2_4way", model=TINY)
    with pytest.raises(ConfigError, match="field 'ratings_prompt_ties' is missing"):
        bad.write_text(json.dumps({"system_prompt": "s", "prompt_template": "{question}"}))
        load_scorer("rb2_4way", model=TINY, prompts=str(bad))


def test_a_listwise_scorer_is_for_benchmarks_only():
    problems = check_reward_specs([{"type": "rb2_4way", "model": TINY, "prompts": str(PROMPTS)}])
    assert problems and "'rb2_4way' judges a benchmark's answers as one list" in problems[0]
    with pytest.raises(UserError, match="compare scores preference pairs"):
        ScorerSpec.parse(f"j=rb2_4way:{TINY}")


# ---------------------------------------------------------------------------------------------------------
# the scorer on the generation engine
# ---------------------------------------------------------------------------------------------------------


def _c(role: str, text: str) -> list[Message]:
    return [Message(role, text)]


def test_rb2_4way_generates_greedily_with_a_system_turn(tiny_model_ref):
    scorer = load_scorer("rb2_4way", model=TINY, dtype="float32", prompts=str(PROMPTS), max_new_tokens=4)
    prompt = _c("user", "What is 2 + 2?")
    answers = [_c("assistant", t) for t in ("4", "5", "22", "four")]
    out = scorer.rank([prompt, prompt], [answers, answers[::-1]], variants=[None, "ties"])
    assert len(out[0]) == 4 and set(out[0]) <= {0.0, 1.0} and sum(out[0]) <= 1  # one answer named, or none
    assert len(out[1]) == 4 and all(v == -1.0 or v in range(1, 11) for v in out[1])  # Ties: rated
    assert scorer.rank([prompt], [answers]) == out[:1]  # greedy
    assert sum(scorer.abstentions.values()) == 2 * (sum(out[0]) == 0) + out[1].count(-1.0)
    assert scorer.cost["items"] == 3 and scorer.cost["samples"] == 1 + 4 + 1
    user = scorer.message(prompt, answers)
    assert user.startswith("QUESTION\nWhat is 2 + 2?\n\n<A>\n4\n</A>\n<B>\n5\n</B>") and user.endswith("{end}")
    (ids,) = judge_prompts(scorer.tokenizer, [user], system=scorer.prompts["system_prompt"])
    text = scorer.tokenizer.decode(ids)
    assert "{Braces here stay as they are" in text and "SmolLM" not in text  # our system turn, not the default
    d = scorer.describe()
    assert d["temperature"] == 0.0 and d["top_p"] == 1.0 and d["seed"] == 0 and d["no_system_prompt"] is False
    assert d["prompts_are_reference"] is False and "sha256('<seed>:<example id>') mod 4" in d["shuffle"]
    with pytest.raises(UserError, match="has 3 answers; the 4-way mode shows exactly four"):
        scorer.order("x1", 3)
    assert scorer.order("tied:1", 5, "ties") == [0, 1, 2, 3, 4]


def test_no_system_prompt_sends_it_in_the_user_turn(tiny_model_ref):
    scorer = load_scorer("rb2_4way", model=TINY, dtype="float32", prompts=str(PROMPTS), no_system_prompt=True)
    asked = []

    def sample(messages, n, prefix="", items=None, fit_to_context=False, system=None):
        asked.append((messages, system))
        return [["[[C]]"] for _ in messages]

    scorer._sample = sample
    prompt, answers = _c("user", "Q"), [_c("assistant", t) for t in "wxyz"]
    assert scorer.rank([prompt], [answers]) == [[0.0, 0.0, 1.0, 0.0]]
    ((messages, system),) = asked
    assert system is None and messages == [scorer.prompts["system_prompt"] + "\n\n" + scorer.message(prompt, answers)]


# ---------------------------------------------------------------------------------------------------------
# whole runs, against the reference code
# ---------------------------------------------------------------------------------------------------------

REFERENCE_RUNS = {
    0: {
        "subsets": {
            "Factuality": 0.4166666666666667,
            "Precise IF": 0.5,
            "Math": 0.4642857142857143,
            "Safety": 0.5,
            "Focus": 0.3,
            "Ties": 0.4087867993206262,
        },
        "headline": 0.4316231967121678,
        "credit": {
            "f1": 1, "f2": 0, "f3": 1, "f4": 0.25, "f5": 0, "f6": 0.25, "p1": 0.25, "p2": 1, "p3": 0.25, "m0": 1,
            "m1": 0, "m2": 1, "m3": 0, "m4": 0.25, "m5": 1, "m6": 0, "s1": 1, "s2": 0, "o1": 1, "o2": 0.25, "o3": 0,
            "o4": 0, "o5": 0.25,
        },
    },
    1: {
        "subsets": {
            "Factuality": 0.08333333333333333,
            "Precise IF": 0.16666666666666666,
            "Math": 0.17857142857142858,
            "Safety": 0.5,
            "Focus": 0.3,
            "Ties": 0.4087867993206262,
        },
        "headline": 0.27289303798200915,
        "credit": {
            "f1": 0, "f2": 0, "f3": 0, "f4": 0.25, "f5": 0, "f6": 0.25, "p1": 0.25, "p2": 0, "p3": 0.25, "m0": 1,
            "m1": 0, "m2": 0, "m3": 0, "m4": 0.25, "m5": 0, "m6": 0, "s1": 0, "s2": 1, "o1": 0, "o2": 0.25, "o3": 1,
            "o4": 0, "o5": 0.25,
        },
    },
}  # fmt: skip


def _stubbed(scorer, seed: int) -> list[tuple[str, str | None]]:
    """Make `scorer` answer every judge message with the fixture's fixed output for it; returns the (message,
    system turn) pairs it is asked. A message the reference would not send is a KeyError."""
    prompts = json.loads(PROMPTS.read_text())
    four_way = json.loads((RB2 / "four_way_outputs.json").read_text())
    ratings = json.loads((RB2 / "judge_outputs.json").read_text())
    expected: dict[tuple[str, str | None], str | None] = {}
    for r in _rows():
        answers = r["chosen"] + r["rejected"]
        if r["subset"] == "Ties":
            for answer, out in zip(answers, ratings[r["id"]], strict=True):
                expected[(prompts["ratings_prompt_ties"].format(prompt=r["prompt"], completion=answer), None)] = out
            continue
        p = four_way_position(seed, r["id"])
        answers[0], answers[p] = answers[p], answers[0]  # the reference's swap, written out
        shown = dict(zip(("answer_a", "answer_b", "answer_c", "answer_d"), answers, strict=True))
        user = prompts["prompt_template"].format(question=r["prompt"], **shown)
        expected[(user, prompts["system_prompt"])] = four_way[r["id"]]
    asked: list[tuple[str, str | None]] = []

    def sample(messages, n, prefix="", items=None, fit_to_context=False, system=None):
        assert n == 1 and prefix == "" and fit_to_context
        asked.extend((m, system) for m in messages)
        return [None if expected[(m, system)] is None else [expected[(m, system)]] for m in messages]

    scorer._sample = sample
    return asked


@pytest.mark.parametrize("seed", [0, 1])
def test_rewardbench2_4way_mode_is_the_reference_code_s(tmp_path, tiny_model_ref, seed):
    """allenai/reward-bench @ 05a9005efb607249822c193590c8ecab87c77052, run once outside the project: the rows'
    conversations as `rewardbench/utils.py` `load_eval_dataset_multi` builds them; the shuffle lines of
    `scripts/run_generative_v2.py` `format_judgements` (406-417) with `shuffle_option` set to this project's seeded
    position instead of `np.random.randint(0, 4)`; `rewardbench/generative_v2.py` `format_judge_answers` (module
    `MTBENCH_V2` given four_way_prompts.json's made-up system_prompt and prompt_template) and `process_judgement` on
    the fixed output of four_way_outputs.json (a null one read as vLLM's empty output: "error"); the script's
    `process_shuffled` (611-621, nested in `main`, reproduced line for line); the Ties rows through
    `get_single_rating` (is_ties, its vLLM branch) and `utils.process_single_model`, as in the ratings-mode check;
    per subset `num_correct / num_total`; the overall the mean of the six (dataset card). Command: `python
    ref_rb2_4way.py tests/fixtures/reference/rewardbench2 SEED` (the module and utils.py copied beside it, heavy
    imports stubbed).

    The outputs name the chosen answer at each of the four positions, another answer, several verdicts at once
    (the first letter checked wins: "[[D]] [[B]]" is B), and no verdict ("[[b]]", "[[ B ]]", "[C]", "[[E]]", "",
    "**B**", a failed generation: 1/4 each)."""
    scorer = load_scorer("rb2_4way", model=TINY, dtype="float32", prompts=str(PROMPTS), seed=seed)
    asked = _stubbed(scorer, seed)
    settings = BenchSettings(
        data=str(RB2 / "data.jsonl"), cache_dir=tmp_path / "cache", save=False, progress=False, native_dir=tmp_path
    )
    record = run_benchmark("rewardbench2", scorer, settings)
    ref = REFERENCE_RUNS[seed]
    s = record.scores
    assert {k: v["score"] for k, v in s["subsets"].items()} == ref["subsets"]
    assert s["headline"] == ref["headline"]
    native = json.loads(next((tmp_path / "eval-set-scores").glob("*.json")).read_text())
    credit = dict(zip(native["id"], native["results"], strict=True))
    assert {i: credit[i] for i in ref["credit"]} == ref["credit"]
    assert len(asked) == 23 + 63 and len(set(asked)) == len(
        asked
    )  # one 4-way judgement per row, one rating per Ties answer
    # the reference's "error" is a verdict, credited 1/4, not a failure; the record counts them by reason
    assert record.counts["nan_items"] == 0 and record.counts["failed_examples"] == 0 and not record.partial
    assert record.scorer["abstentions"] == {"no_verdict": 6, "not_generated": 1 + 3, "no_rating": 8}
    assert record.scorer["kind"] == "listwise" and record.scorer["settings"]["seed"] == seed
    # a rerun reads every verdict and rating from the cache
    again = run_benchmark("rewardbench2", scorer, settings)
    assert again.counts["scored_now"] == 0 and again.scores == record.scores and len(asked) == 23 + 63


def test_the_shown_order_is_in_the_cache_key():
    """A row whose chosen answer another seed shows elsewhere is another input; one shown the same way is the same."""
    bench = BENCHMARKS["rewardbench2"]
    examples = {ex.id: ex for ex in read(bench.loader, str(RB2 / "data.jsonl"), None).examples}

    def keys(ex_id: str, seed: int, variant: str | None = None) -> dict:
        def order(i: str, n: int, v: str | None) -> list[int]:
            return list(range(n)) if v == "ties" else four_way_order(four_way_position(seed, i))

        return {
            slot: key
            for slot, (key, _) in _inputs(bench, "listwise", examples[ex_id], variant=variant, order=order).items()
        }

    assert keys("m0", 0) == keys("m0", 1)  # position 0 under both seeds
    f1 = keys("f1", 0)
    assert f1 != keys("f1", 1) and len({k.partition("@")[0] for k in f1.values()}) == 1
    assert f1[0].endswith("@1") and f1[1].endswith("@0")  # the chosen answer shown second (B), rejected 0 first
    assert keys("tied:1", 0, "ties") != keys("tied:1", 0)  # the Ties variant is part of the key


class _Reversed:
    """A listwise scorer without a model: shown the responses last first, it scores them 0, 1, 2, ... as shown."""

    kind = "listwise"
    name = "reversed"

    def __init__(self) -> None:
        self.seen: list[int] = []

    def order(self, example_id: str, n: int, variant: str | None = None) -> list[int]:
        return list(range(n))[::-1]

    def rank(self, prompts, candidate_lists):
        self.seen += [len(c) for c in candidate_lists]
        return [[float(j) for j in range(len(c))] for c in candidate_lists]

    def describe(self) -> dict:
        return {}


def test_the_runner_shows_a_listwise_scorer_its_order_and_maps_the_scores_back(tmp_path):
    """Shown last first and scored by position, the chosen answer (first in the example) scores highest: best-of-4
    credit 1 everywhere; Ties rows (3 to 6 answers, no variant for this scorer) give it the highest score too."""
    scorer = _Reversed()
    settings = BenchSettings(data=str(RB2 / "data.jsonl"), use_cache=False, save=False, progress=False)
    record = run_benchmark("rewardbench2", scorer, settings)
    assert all(v["score"] == 1.0 for k, v in record.scores["subsets"].items() if k != "Ties")
    assert sorted(scorer.seen) == sorted(len(r["chosen"]) + len(r["rejected"]) for r in _rows())  # each list once
    assert record.counts["unique_items"] == record.counts["items"] == 43 and record.scorer["kind"] == "listwise"
    with pytest.raises(UserError, match="benchmark 'rewardbench' cannot use a listwise scorer"):
        run_benchmark("rewardbench", scorer, settings)
