"""Policy evaluation on standard prompt sets: IFEval verifiers, win rates (raw and length-controlled), the readers of
each set's official format, and `align eval policy --bench` end to end on the tiny model.

Fixtures are written by the tests in each set's official format (field names as the sets' own files have them).
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from align.cli.main import main
from leaderboards.ifeval import INSTRUCTIONS, IFEvalItem, follow, ifeval_scores, item_problems, split_sentences
from leaderboards.policy_bench import read_bench
from leaderboards.policy_data import read_arenahard, read_mtbench
from leaderboards.winrate import both_orders, fit_length_glm, pointwise_preference, win_rates
from prefalign.errors import UserError


def _jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


# --------------------------------------------------------------------------------------------------------
# IFEval: every instruction id, a response that follows it and one that does not (cheap gaming attempts included)
# --------------------------------------------------------------------------------------------------------

CASES: dict[str, tuple[dict[str, Any], str, str]] = {
    "keywords:existence": ({"keywords": ["river", "stone"]}, "A stone sat by the river.", "A river, no rocks."),
    "keywords:frequency": (
        {"keyword": "tea", "frequency": 3, "relation": "at least"},
        "Tea, tea and more tea.",
        "Tea and tea.",  # twice is not three times
    ),
    "keywords:forbidden_words": (
        {"forbidden_words": ["cat"]},
        "A category of dogs.",  # 'cat' inside a word is not the word
        "The Cat sat.",  # case does not hide it
    ),
    "keywords:letter_frequency": (
        {"letter": "z", "let_frequency": 2, "let_relation": "less than"},
        "Zoo.",
        "Zoo zebra.",  # upper and lower case both count
    ),
    "language:response_language": (
        {"language": "fr"},
        "Je pense que le chat est dans la maison avec les enfants.",
        "I think the cat is in the house with the children.",
    ),
    "length_constraints:number_sentences": (
        {"num_sentences": 3, "relation": "less than"},
        "Dr. Smith came. He left.",  # 'Dr.' does not end a sentence
        "One. Two. Three.",
    ),
    "length_constraints:number_paragraphs": (
        {"num_paragraphs": 2},
        "First part.\n***\nSecond part.",
        "First part.\n***\n\n***\nSecond part.",  # an empty paragraph between dividers
    ),
    "length_constraints:number_words": (
        {"num_words": 5, "relation": "at least"},
        "one two three four five",
        "one-two-three-four",  # hyphens split \\w+ runs: 4 words
    ),
    "length_constraints:nth_paragraph_first_word": (
        {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "Second", "num_sentences": None},
        "Intro here.\n\nSecond, the point.",
        "Intro here.\n\nThe Second point.",
    ),
    "detectable_content:number_placeholders": (
        {"num_placeholders": 2},
        "Dear [name], at [address].",
        "Dear [name].",
    ),
    "detectable_content:postscript": (
        {"postscript_marker": "P.S."},
        "Main text.\nP.S. see you",
        "Main text. PS see you",
    ),
    "detectable_format:number_bullet_lists": (
        {"num_bullets": 2},
        "* one\n* two",
        "* one\n* two\n- three",  # dashes count too: three bullets
    ),
    "detectable_format:constrained_response": ({}, "My answer is yes.", "Yes."),
    "detectable_format:number_highlighted_sections": (
        {"num_highlights": 2},
        "*first* and **second**",
        "*first* and ** **",  # an empty highlight does not count
    ),
    "detectable_format:multiple_sections": (
        {"section_spliter": "Section", "num_sections": 2},
        "Section 1\nA\nSection 2\nB",
        "Section 1\nA and a Section\nB",  # the word without a number is no section
    ),
    "detectable_format:json_format": ({}, '```json\n{"a": 1}\n```', "{'a': 1}"),
    "detectable_format:title": ({}, "<<Ode to Joy>>\nText", "<< >>\nText"),
    "combination:two_responses": ({}, "Answer one.\n******\nAnswer two.", "Same.\n******\nSame."),
    "combination:repeat_prompt": (
        {"prompt_to_repeat": "Write a poem."},
        "write a poem. Roses are red.",
        "Roses are red. Write a poem.",
    ),
    "startend:end_checker": (
        {"end_phrase": "Any other questions?"},
        'Here it is. Any other questions?"',
        "Any other questions? Bye.",
    ),
    "startend:quotation": ({}, '"All quoted."', '"Half quoted.'),
    "change_case:capital_word_frequency": (
        {"capital_frequency": 2, "capital_relation": "at least"},
        "This is VERY IMPORTANT.",
        "This is Very important.",
    ),
    "change_case:english_capital": (
        {},
        "THIS IS THE ANSWER IN CAPITALS AND IT IS FOR YOU.",
        "THIS IS THE ANSWER with one lowercase word.",
    ),
    "change_case:english_lowercase": (
        {},
        "this is the answer in lowercase and it is for you.",
        "this is the answer with One capital.",
    ),
    "punctuation:no_comma": ({}, "No commas here.", "One, comma."),
}


def test_every_instruction_id_has_a_case():
    assert sorted(CASES) == sorted(INSTRUCTIONS.names()) and len(CASES) == 25


@pytest.mark.parametrize("iid", sorted(CASES))
def test_instruction_follows_and_fails(iid):
    kwargs, good, bad = CASES[iid]
    item = IFEvalItem("1", "prompt", [iid], [kwargs], 1)
    assert item_problems(item) == []
    assert follow(item, good) == [True], f"{iid} should pass: {good!r}"
    assert follow(item, bad) == [False], f"{iid} should fail: {bad!r}"
    assert follow(item, "   ") == [False]  # an empty response follows nothing


def test_sentence_splitter_keeps_titles_decimals_and_ellipses():
    assert split_sentences("Mr. Brown paid 3.5 dollars. Then he left... Fine!") == [
        "Mr. Brown paid 3.5 dollars.",
        "Then he left...",
        "Fine!",
    ]


def test_strict_versus_loose_by_hand():
    """Instructions: repeat the prompt 'Say hi.', end with 'Bye.', no commas. Answer A wraps the answer in a preamble
    line and a closing line: strict, only the comma rule holds (1 of 3); loose, the variant without the first and
    last lines follows all three. Answer B follows all three as written. Prompt level: strict 1/2, loose 2/2;
    instruction level: strict (1 + 3)/6, loose 6/6. Markdown bold around the end phrase fails strict, and passes
    loose through the variant without asterisks."""
    item = IFEvalItem(
        "7",
        "p",
        ["combination:repeat_prompt", "startend:end_checker", "punctuation:no_comma"],
        [{"prompt_to_repeat": "Say hi."}, {"end_phrase": "Bye."}, {}],
        1,
    )
    a = "Sure! Here it is\nSay hi. Hello\nBye.\nHope this helps"
    b = "Say hi. Hello Bye."
    assert follow(item, a) == [False, False, True] and follow(item, a, loose=True) == [True, True, True]
    res = ifeval_scores([item, item], [a, b])
    assert res["prompt_strict"] == pytest.approx(0.5) and res["prompt_loose"] == pytest.approx(1.0)
    assert res["instruction_strict"] == pytest.approx(4 / 6) and res["instruction_loose"] == pytest.approx(1.0)
    bold = "Say hi. Hello **Bye.**"
    assert follow(item, bold) == [True, False, True] and follow(item, bold, loose=True) == [True, True, True]


def test_item_problems_name_unknown_ids_and_missing_arguments():
    item = IFEvalItem(
        "3",
        "p",
        ["keywords:existance", "keywords:frequency", "length_constraints:number_words"],
        [{}, {"keyword": "a", "frequency": None, "relation": "at least"}, {"num_words": 3, "relation": "about"}],
        4,
    )
    problems = item_problems(item)
    assert "did you mean 'keywords:existence'" in problems[0]
    assert "missing argument(s) frequency" in problems[1]
    assert "relation must be one of" in problems[2]


# --------------------------------------------------------------------------------------------------------
# Win rates
# --------------------------------------------------------------------------------------------------------


def test_preferences_from_scores_and_both_orders():
    assert [pointwise_preference(a, b) for a, b in [(2, 1), (1, 1), (0, 1)]] == [1.0, 0.5, 0.0]
    assert math.isnan(pointwise_preference(math.nan, 1.0))
    assert both_orders(1.0, 1.0) == 0.5  # always "A": position bias only
    assert both_orders(0.9, 0.2) == pytest.approx(0.85)
    assert math.isnan(both_orders(0.9, math.nan))


def test_length_controlled_rate_by_hand():
    """12 items, |length difference| equal everywhere: the policy is longer on 8 and shorter on 4. The judge prefers
    the longer answer 3 times in 4: wins on 6 of the 8 longer items, 1 of the 4 shorter. The GLM has two parameters
    and the data two feature values (+a, -a), so it fits both rates exactly: sigmoid(theta + phi a) = 3/4 and
    sigmoid(theta - phi a) = 1/4, hence theta = 0 and the length-controlled rate is sigmoid(0) = 1/2, while the raw
    rate is 7/12."""
    prefs = [1.0] * 6 + [0.0] * 2 + [1.0] + [0.0] * 3
    diffs = [50.0] * 8 + [-50.0] * 4
    glm = fit_length_glm(prefs, diffs, ridge=0.0)
    assert glm.theta == pytest.approx(0.0, abs=1e-8) and glm.lc_win_rate == pytest.approx(0.5)
    a = math.tanh(50.0 / glm.std)
    assert glm.phi * a == pytest.approx(math.log(3.0))
    wr = win_rates(prefs, [100 + d for d in diffs], [100] * 12, bootstrap=200)
    assert wr.win_rate == pytest.approx(7 / 12)
    assert abs(wr.lc_win_rate - 0.5) < 0.01  # the default ridge barely moves it
    assert wr.lc_ci95 is not None and wr.lc_ci95[0] <= wr.lc_win_rate <= wr.lc_ci95[1]


def test_length_loving_judge_moves_lc_toward_half():
    """A judge that always prefers the longer answer, policy longer on 8 of 10: raw 0.8; the length term explains
    the preference, so the length-controlled rate is much nearer 0.5."""
    diffs = [30, 40, 50, 60, 70, 80, 90, 100, -40, -60]
    prefs = [1.0 if d > 0 else 0.0 for d in diffs]
    wr = win_rates(prefs, [200 + d for d in diffs], [200] * 10, bootstrap=0)
    assert wr.win_rate == pytest.approx(0.8)
    assert abs(wr.lc_win_rate - 0.5) < abs(wr.win_rate - 0.5) / 2
    assert wr.length_coef > 0


def test_equal_lengths_lc_equals_raw_and_abstentions_are_counted():
    wr = win_rates([1.0, 0.5, math.nan, 0.0, 1.0], [10] * 5, [10] * 5, bootstrap=500, seed=1)
    assert wr.abstained == 1 and wr.n == 4 and (wr.wins, wr.ties, wr.losses) == (2, 1, 1)
    assert wr.win_rate == pytest.approx(2.5 / 4)
    # no length signal: the model term is the mean, shrunk a little toward 1/2 by the ridge on 4 items
    assert 0.5 < wr.lc_win_rate < 2.5 / 4 and wr.lc_win_rate == pytest.approx(2.5 / 4, abs=5e-3)
    lo, hi = wr.ci95
    assert 0.0 <= lo <= wr.win_rate <= hi <= 1.0
    assert win_rates([math.nan], [1], [1]).win_rate is None


def test_bootstrap_interval_of_constant_preferences_is_a_point():
    wr = win_rates([1.0] * 8, list(range(8)), [0] * 8, bootstrap=100)
    assert wr.ci95 == (1.0, 1.0)


# --------------------------------------------------------------------------------------------------------
# Readers of the official formats
# --------------------------------------------------------------------------------------------------------


def ifeval_file(path: Path) -> Path:
    """google-research input_data.jsonl rows; the hub copy's null-filled kwargs included."""
    null_kwargs = {"num_highlights": None, "relation": None, "num_words": None, "keywords": None}
    return _jsonl(
        path,
        [
            {
                "key": 1000,
                "prompt": "Write a short note about rivers. Do not use any commas.",
                "instruction_id_list": ["punctuation:no_comma"],
                "kwargs": [dict(null_kwargs)],
            },
            {
                "key": 1001,
                "prompt": "Describe tea in at least 5 words and include the keywords tea and leaf.",
                "instruction_id_list": ["length_constraints:number_words", "keywords:existence"],
                "kwargs": [
                    {**null_kwargs, "num_words": 5, "relation": "at least"},
                    {**null_kwargs, "keywords": ["tea", "leaf"]},
                ],
            },
            {
                "key": 1002,
                "prompt": "Answer in all lowercase letters: what is the sky?",
                "instruction_id_list": ["change_case:english_lowercase"],
                "kwargs": [{}],
            },
        ],
    )


def test_ifeval_bad_rows_are_errors_with_row_numbers_unless_partial(tmp_path):
    path = ifeval_file(tmp_path / "input_data.jsonl")
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps({"key": 9, "prompt": "x", "instruction_id_list": ["made:up"], "kwargs": [{}]}) + "\n")
        f.write(json.dumps({"key": 10, "prompt": "y", "kwargs": [{}]}) + "\n")
    data = read_bench("ifeval", str(path))
    assert len(data.items) == 3 and data.unknown_instructions == {"made:up": 1}
    assert any("line 4" in p and "unknown instruction id 'made:up'" in p for p in data.problems)
    assert any("line 5" in p and "missing field(s) instruction_id_list" in p for p in data.problems)
    from leaderboards.policy_bench import check_problems

    with pytest.raises(UserError, match="unknown instruction id 'made:up' in 1 row"):
        check_problems(data, allow_partial=False)
    check_problems(data, allow_partial=True)


def test_arenahard_v01_and_v20_formats(tmp_path):
    q1 = _jsonl(
        tmp_path / "q1.jsonl",
        [
            {
                "question_id": "a1",
                "category": "arena-hard-v0.1",
                "cluster": "Sorting",
                "turns": [{"content": "Sort 3 1"}],
            },
            {"question_id": "a2", "category": "arena-hard-v0.1", "cluster": "Math", "turns": [{"content": "2+2?"}]},
        ],
    )
    a1 = _jsonl(
        tmp_path / "gpt-4-0314.jsonl",
        [
            {
                "question_id": "a1",
                "answer_id": "x",
                "model_id": "gpt-4-0314",
                "choices": [{"index": 0, "turns": [{"content": "1 3"}]}],
            },
        ],
    )
    data = read_arenahard(str(q1), str(a1))
    assert [it.reference for it in data.items] == ["1 3"] and data.reference_model == "gpt-4-0314"
    assert any("question a2 has no reference answer" in p for p in data.problems)
    q2 = _jsonl(
        tmp_path / "q2.jsonl",
        [{"uid": "u1", "category": "hard_prompt", "subcategory": "coding", "prompt": "Write hello world in C"}],
    )
    a2 = _jsonl(
        tmp_path / "o3-mini.jsonl",
        [
            {
                "uid": "u1",
                "ans_id": "y",
                "model": "o3-mini-2025-01-31",
                "messages": [
                    {"role": "user", "content": "Write hello world in C"},
                    {"role": "assistant", "content": {"answer": "printf"}},
                ],
            }
        ],
    )
    data = read_arenahard(str(q2), str(a2))
    assert data.items[0].reference == "printf" and data.items[0].category == "hard_prompt" and not data.problems
    with pytest.raises(UserError, match="--reference"):
        read_arenahard(str(q2), None)


def test_mtbench_needs_two_turns(tmp_path):
    path = _jsonl(
        tmp_path / "question.jsonl",
        [
            {"question_id": 81, "category": "writing", "turns": ["Write a haiku.", "Now make it rhyme."]},
            {"question_id": 82, "category": "math", "turns": ["Only one turn."]},
        ],
    )
    data = read_mtbench(str(path))
    assert [it.id for it in data.items] == ["81"] and "line 2" in data.problems[0]


# --------------------------------------------------------------------------------------------------------
# The table of sets: looked up by name, each entry saying what it needs
# --------------------------------------------------------------------------------------------------------


def test_the_table_says_what_each_set_needs():
    from leaderboards.policy_bench import POLICY_BENCHMARKS, PolicyBenchSettings

    assert POLICY_BENCHMARKS.names() == ["ifeval", "alpacaeval", "arenahard", "mtbench"]
    for name in POLICY_BENCHMARKS:
        b = POLICY_BENCHMARKS[name]
        assert callable(b.read) and callable(b.score) and b.headline_name and b.turns in (1, 2)
        assert bool(b.judge) != bool(b.rule)  # a judge scores it, or rules do
    assert POLICY_BENCHMARKS["arenahard"].reference_answers == "file"
    assert POLICY_BENCHMARKS["mtbench"].judge == ("pointwise", "fastchat") and POLICY_BENCHMARKS["mtbench"].turns == 2
    # the flag's choices are the table's names
    import dataclasses

    (bench,) = [f for f in dataclasses.fields(PolicyBenchSettings) if f.name == "bench"]
    assert bench.metadata["choices"] == tuple(POLICY_BENCHMARKS.names())


def test_read_bench_looks_the_set_up(tmp_path):
    path = ifeval_file(tmp_path / "input_data.jsonl")
    with pytest.raises(UserError, match="did you mean 'ifeval'"):
        read_bench("ifevl", str(path))
    with pytest.raises(UserError, match="--reference is the answer file of arenahard; ifeval has no reference"):
        read_bench("ifeval", str(path), "answers.jsonl")


def test_align_ls_prints_the_policy_benchmarks(capsys):
    assert main(["ls", "policy-benchmarks"]) == 0
    out = capsys.readouterr().out
    assert "policy-benchmarks (4)" in out and "pointwise, pairwise" in out and "LC win rate" in out


def test_bench_flags_that_do_not_go_together_are_reported_at_once(capsys):
    assert main(["eval", "policy", "--model", "m", "--bench", "alpacaeval", "--baseline", "b"]) == 2
    err = capsys.readouterr().err
    assert "--data: --bench alpacaeval needs --data" in err and "--baseline: --bench alpacaeval compares" in err
    assert main(["eval", "policy", "--model", "m", "--bench", "ifeval", "--write-reference", "r.json"]) == 2
    err = capsys.readouterr().err
    assert "--write-reference: writes an AlpacaEval-format file" in err and "--write-reference: needs --data" in err


def test_hub_id_offline_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(UserError, match="could not load hub dataset 'google/IFEval'"):
        read_bench("ifeval", "google/IFEval")


# --------------------------------------------------------------------------------------------------------
# End to end on the tiny model
# --------------------------------------------------------------------------------------------------------


def alpacaeval_file(path: Path) -> Path:
    rows = [
        {
            "instruction": "Name a fruit.",
            "output": "An apple is a fruit.",
            "generator": "gpt4_turbo",
            "dataset": "helpful_base",
        },
        {"instruction": "Say hello.", "output": "Hello!", "generator": "gpt4_turbo", "dataset": "oasst"},
        {"instruction": "Count to three.", "output": "1, 2, 3", "generator": "gpt4_turbo", "dataset": "oasst"},
    ]
    path.write_text(json.dumps(rows, indent=1), encoding="utf-8")
    return path


def _run(*args: str) -> int:
    """The CLI with short sampled answers (the tiny random model's greedy answer is an immediate end of turn)."""
    flags = ["--max-new-tokens", "8", "--temperature", "1.0", "--dtype", "float32", "--bootstrap", "50"]
    return main(["eval", "policy", *flags, *args])


def test_ifeval_cli_end_to_end(tmp_path, tiny_model_ref, capsys):
    data = ifeval_file(tmp_path / "input_data.jsonl")
    out, records = tmp_path / "run", tmp_path / "records"
    assert (
        _run(
            "--bench",
            "ifeval",
            "--data",
            str(data),
            "--model",
            tiny_model_ref,
            "--out",
            str(out),
            "--records",
            str(records),
        )
        == 0
    )
    report = json.loads((out / "report.json").read_text())
    rows = [json.loads(x) for x in (out / "generations.jsonl").read_text().splitlines()]
    assert report["items"] == len(rows) == 3
    # the report's numbers are what re-checking the saved answers gives
    items = [it.ifeval for it in read_bench("ifeval", str(data)).items]
    res = ifeval_scores(items, [r["answers"][0] for r in rows])
    sections = report["record"]["scores"]["sections"]
    assert sections["prompt_strict"] == pytest.approx(res["prompt_strict"])
    assert sections["instruction_loose"] == pytest.approx(res["instruction_loose"])
    assert "Prompt-level strict accuracy" in capsys.readouterr().out
    # the answers in the reference scorer's own input: evaluation_lib.read_prompt_to_response_dict's fields, each
    # prompt as input_data.jsonl holds it
    assert report["native"] == str(out / "input_response_data.jsonl")
    given = [json.loads(x) for x in (out / "input_response_data.jsonl").read_text().splitlines()]
    source = [json.loads(x) for x in data.read_text().splitlines()]
    assert all(set(g) == {"prompt", "response"} for g in given)
    assert {g["prompt"]: g["response"] for g in given} == {
        src["prompt"]: r["answers"][0] for src, r in zip(source, rows, strict=True)
    }
    (rec,) = list(records.glob("*.json"))
    assert json.loads(rec.read_text())["settings"]["section"] == "policy"
    # the leaderboard shows it in its policy tab, outside the reward-model overview
    from leaderboards.render import render

    site = render(records, tmp_path / "site")
    md = site.markdown.read_text()
    assert "## Policies" in md and "| builtin:tiny-llama | ifeval | Prompt-level strict accuracy" in md
    assert "ifeval verifiers (rule)" in md
    assert 'href="#policies"' in site.html.read_text()


def test_alpacaeval_cli_with_pointwise_then_pairwise_judge_reuses_generations(tmp_path, tiny_model_ref, capsys):
    data = alpacaeval_file(tmp_path / "alpaca_eval_gpt4_baseline.json")
    out = tmp_path / "run"
    common = ("--bench", "alpacaeval", "--data", str(data), "--model", tiny_model_ref, "--out", str(out))
    implicit = ("--judge", f"implicit:{tiny_model_ref}", "--option", "reference_free=true")
    assert _run(*common, *implicit, "--option", "normalization=mean", "--option", "dtype=float32") == 0
    first = json.loads((out / "report.json").read_text())
    rec = first["record"]
    assert rec["scorer"]["name"] == "implicit" and rec["settings"]["reference_model"] == "gpt4_turbo"
    judged = rec["scores"]["extra"]["judged"]
    assert (
        judged["items"] + judged["abstained"] == 3
        and judged["wins"] + judged["ties"] + judged["losses"] == judged["items"]
    )
    assert not first["generations_reused"]
    assert _run(*common, "--judge", f"judge:{tiny_model_ref}", "--option", "dtype=float32") == 0
    second = json.loads((out / "report.json").read_text())
    assert second["generations_reused"] and second["record"]["scorer"]["kind"] == "pairwise"
    prefs = [json.loads(x)["preference"] for x in (out / "generations.jsonl").read_text().splitlines()]
    finite = [p for p in prefs if p is not None]
    assert second["record"]["scores"]["sections"]["win_rate"] == pytest.approx(sum(finite) / len(finite))
    assert "LC win rate" in capsys.readouterr().out


def test_judge_abstention_is_counted(tiny_model_ref):
    """An empty answer is scored NaN by the judge (reward_models.scorers): counted as an abstention, not a loss."""
    from leaderboards.policy_bench import judge_preferences
    from leaderboards.policy_data import BenchItem
    from reward_models.scorers import load_scorer

    scorer = load_scorer("implicit", model=tiny_model_ref, reference_free=True, dtype="float32")
    items = [BenchItem("1", ["Hi?"], reference="Hello."), BenchItem("2", ["Bye?"], reference="Bye.")]
    prefs = judge_preferences(scorer, items, ["", "Goodbye now."])
    assert math.isnan(prefs[0]) and math.isfinite(prefs[1])
    wr = win_rates(prefs, [0, 12], [6, 4], bootstrap=0)
    assert wr.abstained == 1 and wr.n == 1


def test_mtbench_cli_two_turns(tmp_path, tiny_model_ref, capsys):
    data = _jsonl(
        tmp_path / "question.jsonl",
        [
            {"question_id": 81, "category": "writing", "turns": ["Write a haiku.", "Now make it rhyme."]},
            {"question_id": 82, "category": "math", "turns": ["What is 2+2?", "And times 3?"]},
        ],
    )
    out = tmp_path / "run"
    judge = ("--judge", f"implicit:{tiny_model_ref}", "--option", "reference_free=true")
    assert _run("--bench", "mtbench", "--data", str(data), "--model", tiny_model_ref, "--out", str(out), *judge) == 0
    rows = [json.loads(x) for x in (out / "generations.jsonl").read_text().splitlines()]
    assert all(len(r["answers"]) == 2 and len(r["scores"]) == 2 for r in rows)
    rec = json.loads((out / "report.json").read_text())["record"]
    assert set(rec["scores"]["subsets"]) == {"writing", "math"}
    t1 = [r["scores"][0] for r in rows if r["scores"][0] is not None]
    assert rec["scores"]["sections"]["turn_1"] == pytest.approx(sum(t1) / len(t1))
    pairwise = ("--judge", f"judge:{tiny_model_ref}")
    assert _run("--bench", "mtbench", "--data", str(data), "--model", tiny_model_ref, "--out", str(out), *pairwise) == 2
    assert "mtbench scores each answer on its own" in capsys.readouterr().err


JUDGE_PROMPTS = [  # made-up texts in judge_prompts.jsonl's layout, with the fields FastChat's templates fill
    {"name": "single-v1", "type": "single", "system_prompt": "S1", "prompt_template": "Q {question} A {answer}"},
    {
        "name": "single-math-v1",
        "type": "single",
        "system_prompt": "SM",
        "prompt_template": "Q {question} R {ref_answer_1} A {answer}",
    },
    {
        "name": "single-v1-multi-turn",
        "type": "single",
        "system_prompt": "S2",
        "prompt_template": "{question_1}|{answer_1}|{question_2}|{answer_2}",
    },
    {
        "name": "single-math-v1-multi-turn",
        "type": "single",
        "system_prompt": "SM2",
        "prompt_template": "{question_1}|{ref_answer_1}|{answer_1}|{question_2}|{ref_answer_2}|{answer_2}",
    },
    {
        "name": "pair-v2",
        "type": "pairwise",
        "system_prompt": "P",
        "prompt_template": "{question}|{answer_a}|{answer_b}",
    },
    {
        "name": "pair-math-v1",
        "type": "pairwise",
        "system_prompt": "PM",
        "prompt_template": "{question}|{ref_answer_1}|{answer_a}|{answer_b}",
    },
    {
        "name": "pair-v2-multi-turn",
        "type": "pairwise",
        "system_prompt": "P2",
        "prompt_template": "{question_1}|{answer_a_1}|{answer_b_1}|{question_2}|{answer_a_2}|{answer_b_2}",
    },
    {
        "name": "pair-math-v1-multi-turn",
        "type": "pairwise",
        "system_prompt": "PM2",
        "prompt_template": "{ref_answer_1}|{ref_answer_2}|{answer_a_1}|{answer_b_1}|{answer_a_2}|{answer_b_2}",
        "output_format": "[[rating_a,rating_b]]",
    },
]


PROMPT_ROWS = [{"output_format": "[[rating]]" if p["type"] == "single" else "[[A]]", **p} for p in JUDGE_PROMPTS]


def _judge_prompts(path: Path) -> Path:
    return _jsonl(path, PROMPT_ROWS)


def test_fastchat_rating_is_read_as_run_judge_single_reads_it():
    """fastchat/llm_judge/common.py (lm-sys/FastChat @ 0e6d3e4b): the first [[x]], else the first [x], as a
    literal; -1 when neither."""
    from leaderboards.mtbench_judge import parse_rating

    cases = {
        "Rating: [[7]]": 7,
        "[[8.5]] overall": 8.5,
        "first [[3]] then [[9]]": 3,
        "a [2] before [[6]]": 6,  # the double brackets win wherever they are
        "only [4]": 4,
        "[7.]": 7.0,
        "rated 7/10": -1,
        "[[ 7 ]]": -1,
        "[[-3]]": -1,
        "[[05]]": -1,  # no Python literal: FastChat's thread raises; here a failed rating
        "": -1,
    }
    assert {k: parse_rating(k) for k in cases} == cases
    assert isinstance(parse_rating("[[7]]"), int) and isinstance(parse_rating("[[7.0]]"), float)


def test_fastchat_matches_prompts_and_references(tmp_path):
    """gen_judgment's single mode: turn 1 of the questions without a reference, then with one, then turn 2 the same
    way; each with its prompt, the reference answer's turns where its category needs one."""
    from leaderboards.mtbench_judge import grade, read_answers, read_judge_prompts, single_matches
    from leaderboards.policy_data import BenchItem

    prompts = read_judge_prompts(_judge_prompts(tmp_path / "judge_prompts.jsonl"))
    refs_file = _jsonl(tmp_path / "gpt-4.jsonl", [{"question_id": 2, "choices": [{"turns": ["r1", "r2"]}]}])
    refs = read_answers(refs_file)
    items = [
        BenchItem("1", ["w1", "w2"], "writing"),
        BenchItem("2", ["m1", "m2"], "math"),
        BenchItem("3", ["x"], "stem"),
    ]
    answers = [["a1", "a2"], ["b1", "b2"], ["c1"]]
    matches = single_matches(items, answers, prompts, refs)
    assert [(m.item.id, m.turn, m.prompt.name, m.user_prompt) for m in matches] == [
        ("1", 1, "single-v1", "Q w1 A a1"),
        ("3", 1, "single-v1", "Q x A c1"),
        ("2", 1, "single-math-v1", "Q m1 R r1 A b1"),
        ("1", 2, "single-v1-multi-turn", "w1|a1|w2|a2"),
        ("2", 2, "single-math-v1-multi-turn", "m1|r1|b1|m2|r2|b2"),
    ]
    asked = []

    def judge(convs):
        asked.extend(convs)
        return ["[[9]]", "no rating", "[5]", "[[2.5]]", "[[10]]"]

    assert [g[0] for g in grade(matches, judge)] == [9, -1, 5, 2.5, 10]
    assert asked[2] == [{"role": "system", "content": "SM"}, {"role": "user", "content": "Q m1 R r1 A b1"}]
    with pytest.raises(UserError, match="question 2 \\(math\\).*--judge-reference"):
        single_matches(items, answers, prompts, None)
    broken = tmp_path / "broken.jsonl"
    broken.write_text(json.dumps(PROMPT_ROWS[0]) + "\n{not json\n")
    with pytest.raises(UserError, match="broken.jsonl line 2: not JSON"):
        read_judge_prompts(broken)
    _jsonl(broken, PROMPT_ROWS[:1])
    with pytest.raises(UserError, match="no judge prompt named single-math-v1, single-v1-multi-turn"):
        read_judge_prompts(broken)
    _jsonl(broken, [{"question_id": 1, "choices": []}])
    with pytest.raises(UserError, match="broken.jsonl line 1: needs question_id and choices"):
        read_answers(broken)
    odd = {**prompts, "single-v1": replace(prompts["single-v1"], prompt_template="{question} {verdict}")}
    with pytest.raises(UserError, match="judge prompt single-v1: its template names {verdict}"):
        single_matches(items, answers, odd, refs)


def test_mtbench_single_grading_scores_each_turn_by_its_rating(tmp_path):
    """Fixed judgments in place of a judge's replies (in gen_judgment's order: turn 1 of the non-reference
    questions, turn 1 of the math one, then turn 2 the same way): each rating lands on its question and turn, a
    failed one (-1) is left out of every mean and counted, and the rows written carry them."""
    from leaderboards.mtbench_judge import FastChatJudge, read_judge_prompts
    from leaderboards.policy_bench import PolicyBenchSettings, native_mtbench, score_mtbench
    from leaderboards.policy_data import BenchData, BenchItem

    prompts = read_judge_prompts(_judge_prompts(tmp_path / "judge_prompts.jsonl"))
    items = [
        BenchItem("1", ["w1", "w2"], "writing"),
        BenchItem("2", ["m1", "m2"], "math"),
        BenchItem("3", ["s1", "s2"], "stem"),
    ]
    replies = iter(["[[8]]", "[[6]]", "[[3]]", "[[9]]", "no rating", "[[05]]"])  # items 1, 3, 2 at turn 1; then turn 2
    judge = FastChatJudge("j", prompts, {"2": ["r1", "r2"]}, lambda convs: [next(replies) for _ in convs])
    data = BenchData("mtbench", "q.jsonl", items)
    scores, rows = score_mtbench(data, [["a", "b"]] * 3, judge, PolicyBenchSettings(model="m", bootstrap=0))
    assert [r["scores"] for r in rows] == [[8.0, 9.0], [3.0, None], [6.0, None]]  # [[05]]: no literal, -1
    assert scores["sections"] == {"mean": pytest.approx(26 / 4), "turn_1": pytest.approx(17 / 3), "turn_2": 9.0}
    assert scores["subsets"]["math"]["score"] == 3.0 and scores["extra"]["judged"] == {"answers": 6, "abstained": 2}
    name, text = native_mtbench(data, [["a", "b"]] * 3, rows, "m", judge.name)
    written = [json.loads(x) for x in text.splitlines()]
    assert name == "model_judgment_single.jsonl"
    assert [(r["question_id"], r["turn"], r["judge"], r["score"]) for r in written] == [
        (1, 1, ["j", "single-v1"], 8.0),
        (1, 2, ["j", "single-v1-multi-turn"], 9.0),
        (2, 1, ["j", "single-math-v1"], 3.0),
        (2, 2, ["j", "single-math-v1-multi-turn"], -1),
        (3, 1, ["j", "single-v1"], 6.0),
        (3, 2, ["j", "single-v1-multi-turn"], -1),
    ]
    assert written[2]["user_prompt"] == "Q m1 R r1 A a" and written[5]["judgment"] == "no rating"


def test_fastchat_pairwise_verdicts_are_run_judge_pair_s():
    """fastchat/llm_judge/common.py `run_judge_pair`: [[A]], [[B]], [[C]] looked for in that order anywhere in the
    judgment; two ratings within TIE_DELTA (0.1) tie."""
    from leaderboards.mtbench_judge import parse_pair

    marks = {"[[A]]": "A", "x [[B]]": "B", "[[B]] then [[A]]": "A", "[[C]]": "tie", "A is better": "error", "": "error"}
    assert {k: parse_pair(k, "[[A]]") for k in marks} == marks
    ratings = {"[[7, 3]]": "A", "[[5,5.05]]": "tie", "[[5, 5.2]]": "B", "[2, 9]": "B", "[[8]]": "error"}
    assert {k: parse_pair(k, "[[rating_a,rating_b]]") for k in ratings} == ratings


def test_fastchat_pair_matches_both_games(tmp_path):
    """play_a_match_pair: game 1 the model's answer as A, game 2 the baseline's; a game's A names model_1 in game 1
    and model_2 in game 2."""
    from leaderboards.mtbench_judge import grade_pairs, pair_matches, read_judge_prompts
    from leaderboards.policy_data import BenchItem

    prompts = read_judge_prompts(_judge_prompts(tmp_path / "judge_prompts.jsonl"), "pairwise-baseline")
    items = [BenchItem("1", ["w1", "w2"], "writing"), BenchItem("2", ["m1", "m2"], "math")]
    mine, theirs = [["a1", "a2"], ["b1", "b2"]], {"1": ["x1", "x2"], "2": ["y1", "y2"]}
    matches = pair_matches(items, mine, theirs, prompts, {"2": ["r1", "r2"]})
    assert [(m.item.id, m.turn, m.prompt.name, m.user_prompts) for m in matches] == [
        ("1", 1, "pair-v2", ("w1|a1|x1", "w1|x1|a1")),
        ("2", 1, "pair-math-v1", ("m1|r1|b1|y1", "m1|r1|y1|b1")),
        ("1", 2, "pair-v2-multi-turn", ("w1|a1|x1|w2|a2|x2", "w1|x1|a1|w2|x2|a2")),
        ("2", 2, "pair-math-v1-multi-turn", ("r1|r2|b1|y1|b2|y2", "r1|r2|y1|b1|y2|b2")),
    ]
    replies = ["[[A]]", "[[A]]", "[[B]]", "[[C]]", "none", "[[B]]", "[[9, 2]]", "[[2, 9]]"]
    graded = grade_pairs(matches, lambda convs: replies[: len(convs)])
    assert [(w1, w2) for w1, w2, _, _ in graded] == [
        ("model_1", "model_2"),  # game 1 for the model, game 2 for the baseline: a tie by position
        ("model_2", "tie"),
        ("error", "model_1"),
        ("model_1", "model_1"),  # [[9, 2]] with the model as A, [[2, 9]] with it as B: both for the model
    ]
    with pytest.raises(UserError, match="question 2: the baseline's answer file .* no turn 1"):
        pair_matches(items, mine, {"1": ["x1", "x2"]}, prompts, {"2": ["r1", "r2"]})
    with pytest.raises(UserError, match="no judge prompt named pair-v2"):
        read_judge_prompts(_jsonl(tmp_path / "single_only.jsonl", PROMPT_ROWS[:4]), "pairwise-baseline")


def test_mtbench_graded_with_fastchat_prompts_by_a_chat_model(tmp_path, tiny_model_ref):
    """`align eval policy --bench mtbench --judge judge:MODEL --judge-prompts FILE`: each answer graded by the chat
    model's greedy judgment; model_judgment_single.jsonl carries the prompt's name, the user prompt and the judgment
    of every (question, turn); failed ratings counted; a rerun writes the same record and the same judgments."""
    data = _jsonl(
        tmp_path / "question.jsonl",
        [
            {"question_id": 81, "category": "writing", "turns": ["Write a haiku.", "Now make it rhyme."]},
            {"question_id": 111, "category": "math", "turns": ["What is 2+2?", "And times 3?"]},
        ],
    )
    prompts = _judge_prompts(tmp_path / "judge_prompts.jsonl")
    refs = _jsonl(tmp_path / "gpt-4.jsonl", [{"question_id": 111, "choices": [{"turns": ["4", "12"]}]}])
    flags = ["--bench", "mtbench", "--data", str(data), "--model", tiny_model_ref, "--max-new-tokens", "4"]
    judge = ["--judge", f"judge:{tiny_model_ref}", "--judge-prompts", str(prompts), "--judge-max-new-tokens", "6"]
    runs = []
    for name in ("a", "b"):
        assert _run(*flags, *judge, "--judge-reference", str(refs), "--out", str(tmp_path / name)) == 0
        report = json.loads((tmp_path / name / "report.json").read_text())
        rows = [json.loads(x) for x in Path(report["native"]).read_text().splitlines()]
        runs.append((report["record"]["scores"], report["record"]["counts"], rows))
    scores, counts, rows = runs[0]
    assert [(r["question_id"], r["turn"], r["judge"][1]) for r in rows] == [
        (81, 1, "single-v1"),
        (81, 2, "single-v1-multi-turn"),
        (111, 1, "single-math-v1"),
        (111, 2, "single-math-v1-multi-turn"),
    ]
    assert (
        rows[2]["user_prompt"]
        == "Q What is 2+2? R 4 A "
        + json.loads((tmp_path / "a" / "generations.jsonl").read_text().splitlines()[1])["answers"][0]
    )
    assert all(isinstance(r["judgment"], str) and r["judge"][0] == tiny_model_ref for r in rows)
    assert counts["abstained"] == sum(r["score"] == -1 for r in rows)
    assert runs[1] == runs[0]
    assert _run(*flags, *judge, "--out", str(tmp_path / "c")) == 2  # a math question needs its reference
    # pairwise against a baseline's answers: both games of every (question, turn) in FastChat's pair rows, which
    # `bench score mtbench` reads back to the run's own numbers
    base = _jsonl(
        tmp_path / "gpt-3.5-turbo.jsonl",
        [{"question_id": q, "choices": [{"turns": ["One.", "Two."]}]} for q in (81, 111)],
    )
    pair = ["--judge-mode", "pairwise-baseline", "--judge-baseline", str(base), "--judge-reference", str(refs)]
    assert _run(*flags, *judge, *pair, "--out", str(tmp_path / "p")) == 0
    report = json.loads((tmp_path / "p" / "report.json").read_text())
    rows = [json.loads(x) for x in Path(report["native"]).read_text().splitlines()]
    assert [(r["question_id"], r["turn"], r["model_2"], r["judge"][1]) for r in rows] == [
        (81, 1, "gpt-3.5-turbo", "pair-v2"),
        (81, 2, "gpt-3.5-turbo", "pair-v2-multi-turn"),
        (111, 1, "gpt-3.5-turbo", "pair-math-v1"),
        (111, 2, "gpt-3.5-turbo", "pair-math-v1-multi-turn"),
    ]
    assert all(r["g1_user_prompt"] != r["g2_user_prompt"] for r in rows)
    scores = report["record"]["scores"]
    assert scores["headline_name"].startswith("Adjusted win rate against gpt-3.5-turbo")
    errors = sum("error" in (r["g1_winner"], r["g2_winner"]) for r in rows)
    assert scores["extra"]["judged"] == {"answers": 4, "games": 8, "abstained": errors}  # no verdict: dropped


def test_mtbench_pairwise_record_equals_show_result_s_reading_of_its_file(tmp_path, capsys):
    """A pairwise-baseline grading (fixed judgments in place of a judge's replies) scored by the run, its
    model_judgment_pair.jsonl written, and that file scored by `align bench score mtbench` (show_result.py's
    pairwise rules): the same win, loss, tie and rates."""
    from leaderboards.mtbench_judge import FastChatJudge, read_judge_prompts
    from leaderboards.policy_bench import PolicyBenchSettings, native_mtbench, score_mtbench
    from leaderboards.policy_data import BenchData, BenchItem

    prompts = read_judge_prompts(_judge_prompts(tmp_path / "judge_prompts.jsonl"), "pairwise-baseline")
    items = [BenchItem(str(q), [f"q{q}", f"r{q}"], "writing") for q in range(1, 6)]
    data = BenchData("mtbench", "q.jsonl", items)
    replies = iter(["[[A]]", "[[B]]", "[[A]]", "[[A]]", "[[C]]", "[[B]]", "[[B]]", "[[A]]", "?", "[[A]]"] * 2)
    judge = FastChatJudge(
        "j",
        prompts,
        None,
        lambda convs: [next(replies) for _ in convs],
        16,
        "pairwise-baseline",
        "base",
        {it.id: ["x", "y"] for it in items},
    )
    s = PolicyBenchSettings(model="m", bench="mtbench", data="q.jsonl", bootstrap=200)
    scores, rows = score_mtbench(data, [["a", "b"]] * 5, judge, s)
    # per (question, turn): (A,B) both for the model; (A,A) a tie by position; (C,B) a tie; (B,A) both for the
    # baseline; (?,A) dropped. Ten rows: 2 wins, 2 losses, 4 ties, 2 dropped
    assert scores["extra"]["tally"] == {"win": 2, "loss": 2, "tie": 4}
    assert scores["sections"]["win_rate_adjusted"] == pytest.approx(0.5)
    name, text = native_mtbench(data, [["a", "b"]] * 5, rows, "m", "fastchat:j")
    (tmp_path / name).write_text(text)
    assert (
        main(["bench", "score", "mtbench", "--from", str(tmp_path / name), "--option", "baseline=base", "--json"]) == 0
    )
    got = json.loads(capsys.readouterr().out)[0]
    assert got["model"] == "m" and got["sections"] == pytest.approx(scores["sections"])


def test_write_reference_then_compare(tmp_path, tiny_model_ref):
    ref = tmp_path / "reference.json"
    assert (
        _run(
            "--bench",
            "alpacaeval",
            "--data",
            "suite",
            "--limit",
            "2",
            "--model",
            tiny_model_ref,
            "--write-reference",
            str(ref),
        )
        == 0
    )
    rows = json.loads(ref.read_text())
    assert len(rows) == 2 and rows[0]["generator"] == tiny_model_ref and rows[0]["dataset"].startswith("suite:")


def test_hand_run_fixtures_read_cleanly(tmp_path):
    """The files `benchmarks/policy_bench_fixtures.py` writes for runs by hand: every IFEval instruction id, no
    problems; MT-Bench questions with two turns."""
    from benchmarks.policy_bench_fixtures import write

    ifeval, mt = write(tmp_path)
    data = read_bench("ifeval", str(ifeval))
    assert not data.problems and {it.ifeval.instruction_ids[0] for it in data.items} == set(INSTRUCTIONS.names())
    assert len(read_bench("mtbench", str(mt)).items) == 4


def test_arenahard_judged_by_a_chat_model_with_its_own_judge_config(tmp_path, tiny_model_ref, capsys):
    """`align eval policy --bench arenahard --judge judge:MODEL --judge-prompts judge_config.yaml`: the chat model
    judges both games of every question with the config's prompts, v0.1's or v2.0's (the rules are checked against
    the reference code in tests/test_reference_scores.py). The tiny random judge writes no verdict, which the run
    says; MT-Bench's own judge flags are refused with Arena-Hard, and a config that cannot be used is refused before
    anything runs."""
    q = _jsonl(
        tmp_path / "question.jsonl",
        [{"question_id": f"a{k}", "category": "arena-hard-v0.1", "turns": [{"content": f"{k}+2?"}]} for k in range(2)],
    )
    base = _jsonl(
        tmp_path / "gpt-4-0314.jsonl",
        [
            {"question_id": f"a{k}", "model_id": "gpt-4-0314", "choices": [{"turns": [{"content": "4"}]}]}
            for k in (0, 1)
        ],
    )
    cfg = tmp_path / "judge_config.yaml"
    cfg.write_text(
        "system_prompt: Judge.\nprompt_template: ['Q {question_1} A {answer_1} B {answer_2}']\n"
        "regex_pattern: \\[\\[([AB<>=]+)\\]\\]\nnumber_of_judgment_attempts: 2\ntemperature: 0\nmax_tokens: 4096\n",
        encoding="utf-8",
    )
    flags = ["--bench", "arenahard", "--data", str(q), "--reference", str(base), "--model", tiny_model_ref]
    judge = ["--judge", f"judge:{tiny_model_ref}", "--judge-prompts", str(cfg), "--judge-max-new-tokens", "4"]
    capsys.readouterr()
    assert _run(*flags, *judge, "--out", str(tmp_path / "run")) == 2
    assert "arenahard: the judge gave no verdict on any game" in capsys.readouterr().err
    assert _run(*flags, *judge, "--judge-mode", "pairwise-baseline", "--judge-baseline", str(base)) == 2
    assert "judges take their baseline answers from the set (--reference, --data)" in capsys.readouterr().err
    cfg.write_text("system_prompt: Judge.\n", encoding="utf-8")
    assert _run(*flags, *judge) == 2
    assert "prompt_template: missing" in capsys.readouterr().err
    # v2.0: its arena-hard-v2.0.yaml and utils/judge_utils.py, whose entry for the question's category gives the
    # system prompt and the baseline (the reference file's model)
    v2 = tmp_path / "arena-hard-v2.0.yaml"
    v2.write_text(
        "temperature: 0.0\nmax_tokens: 4096\nreference: null\nregex_patterns: ['\\[\\[([AB<>=]+)\\]\\]', "
        "'\\[([AB<>=]+)\\]']\nprompt_template: 'Q {QUESTION} A {ANSWER_A} B {ANSWER_B}'\n",
        encoding="utf-8",
    )
    settings = tmp_path / "judge_utils.py"
    settings.write_text("JUDGE_SETTINGS = {'arena-hard-v0.1': {'baseline': 'gpt-4-0314', 'system_prompt': 'Judge.'}}\n")
    judge = ["--judge", f"judge:{tiny_model_ref}", "--judge-prompts", str(v2), "--judge-max-new-tokens", "4"]
    assert _run(*flags, *judge, "--judge-settings", str(settings), "--out", str(tmp_path / "v2")) == 2
    assert "arenahard: the judge gave no verdict on any game" in capsys.readouterr().err
    assert _run(*flags, *judge) == 2
    assert "add --judge-settings utils/judge_utils.py" in capsys.readouterr().err
    assert _run(*flags, "--judge", f"judge:{tiny_model_ref}", "--judge-settings", str(settings)) == 2
    assert "--judge-settings: Arena-Hard v2.0's per-category judge settings" in capsys.readouterr().err


def test_alpacaeval_judged_by_a_chat_model_with_its_own_prompt(tmp_path, tiny_model_ref):
    """`align eval policy --bench alpacaeval --judge judge:MODEL --judge-prompts FILE`: the chat model's first-token
    log-probabilities of m and M judge each pair (the rules are checked against the reference code in
    tests/test_reference_scores.py); the annotations keep the reference's output order. The tiny random judge rarely
    puts m or M among its five likeliest tokens: each item is then an abstention, counted."""
    from leaderboards.alpacaeval_judge import switched

    data = alpacaeval_file(tmp_path / "alpaca_eval_gpt4_baseline.json")
    prompt = tmp_path / "clf.txt"
    prompt.write_text(
        "<|im_start|>system\nJudge.\n<|im_end|>\n<|im_start|>user\n{instruction}\nm: {output_1}\nM: {output_2}\n"
        "Answer m or M.\n<|im_end|>",
        encoding="utf-8",
    )
    out = tmp_path / "run"
    flags = ("--bench", "alpacaeval", "--data", str(data), "--model", tiny_model_ref, "--out", str(out))
    assert (
        _run(*flags, "--judge", f"judge:{tiny_model_ref}", "--judge-prompts", str(prompt), "--lc-glm", "toolkit") == 0
    )
    report = json.loads((out / "report.json").read_text())
    assert report["record"]["scorer"]["kind"] == "alpacaeval"
    judged = report["record"]["scores"]["extra"]["judged"]
    assert (judged["items"], judged["abstained"]) == (0, 3)  # neither m nor M among the tiny judge's five
    notes = json.loads(Path(report["native"]).read_text())
    assert [(n["preference"], n["is_switched_outputs"]) for n in notes] == [
        (None, switched(n["instruction"])) for n in notes
    ]
    flags = (*flags[:-1], str(tmp_path / "again"))  # a rerun: the same record and annotations
    assert (
        _run(*flags, "--judge", f"judge:{tiny_model_ref}", "--judge-prompts", str(prompt), "--lc-glm", "toolkit") == 0
    )
    again = json.loads((tmp_path / "again" / "report.json").read_text())
    assert again["record"]["scores"] == report["record"]["scores"]
    assert (tmp_path / "again" / "annotations.json").read_text() == Path(report["native"]).read_text()


def test_alpacaeval_judged_by_a_chat_model_as_an_annotator_config_says(tmp_path, tiny_model_ref):
    """`--judge-prompts evaluators_configs/NAME/configs.yaml` with a text parser (ranking_parser; the rules are
    checked against the reference code in tests/test_reference_scores.py): the judge writes each reply greedily,
    the annotations keep it (`raw_completion`); the tiny random judge writes no Python list, so every item is an
    abstention, counted; a rerun gives the same annotations."""
    from leaderboards.alpacaeval_judge import switched

    configs = (
        Path(__file__).parent / "fixtures" / "reference" / "alpacaeval_annotators" / "rank_python" / "configs.yaml"
    )
    data = alpacaeval_file(tmp_path / "alpaca_eval_gpt4_baseline.json")
    judge = ("--judge", f"judge:{tiny_model_ref}", "--judge-prompts", str(configs), "--judge-max-new-tokens", "6")
    notes = []
    for run in ("run", "again"):
        out = tmp_path / run
        flags = ("--bench", "alpacaeval", "--data", str(data), "--model", tiny_model_ref, "--out", str(out))
        assert _run(*flags, *judge, "--lc-glm", "toolkit") == 0
        report = json.loads((out / "report.json").read_text())
        notes.append((out / "annotations.json").read_text())
    settings = report["record"]["scorer"]["settings"]
    assert (settings["annotator"], settings["parser"], settings["max_tokens"]) == ("rank_python", "ranking_parser", 6)
    assert settings["files"]["config"].split(" sha256:")[0] == str(configs)
    assert settings["files"]["prompt"].split(" sha256:")[0].endswith("rank_python/prompt.txt")
    judged = report["record"]["scores"]["extra"]["judged"]
    assert (judged["items"], judged["abstained"]) == (0, 3)
    rows = json.loads(notes[0])
    assert [(r["preference"], r["is_switched_outputs"]) for r in rows] == [
        (None, switched(r["instruction"])) for r in rows
    ]
    assert all(isinstance(r["raw_completion"], str) for r in rows)
    assert notes[0] == notes[1]
