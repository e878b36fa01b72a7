"""Labelled comparison files (column maps, presets) and the agreement benchmark against human labels.

Each preset is checked on a small fixture the test writes in the set's official format (field names and label
encodings of reference/reward-models.md §7.6-7.7). The agreement numbers are checked on lookup scorers whose
scores are fixed by table, with the expected values worked out by hand in the docstrings; the CLI runs once on
the tiny random models.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from align.cli.main import main
from leaderboards import rules
from leaderboards.agreement import AgreementOptions, Item, agreement_numbers
from leaderboards.records import load_record
from leaderboards.render import render
from leaderboards.runner import BenchSettings, run_benchmark
from prefalign.config import build
from prefalign.errors import ConfigError, UserError
from preference_data.comparisons import PRESETS
from preference_data.sources import DataConfig, load, read_comparisons

# --------------------------------------------------------------------------------------------------------
# Fixtures in each official format
# --------------------------------------------------------------------------------------------------------


def _json(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text(json.dumps(rows, indent=1), encoding="utf-8")
    return path


def _jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def llmbar(path: Path) -> Path:
    """princeton-nlp/LLMBar dataset.json: a JSON list of {input, output_1, output_2, label in {1, 2}}."""
    return _json(
        path,
        [
            {"input": "Name a prime number.", "output_1": "7", "output_2": "8", "label": 1},
            {"input": "Capital of France?", "output_1": "Lyon", "output_2": "Paris", "label": 2},
            {"input": "Spell cat backwards.", "output_1": "tac", "output_2": "act", "label": 1},
        ],
    )


def autoj(path: Path) -> Path:
    """GAIR-NLP/auto-j testdata_pairwise.jsonl: scenario, prompt, 'response 1', 'response 2', label in {0, 1, 2}
    (0: response 1 better, 1: response 2 better, 2: tie)."""
    return _jsonl(
        path,
        [
            {"scenario": "math", "prompt": "2+2?", "response 1": "4", "response 2": "5", "label": 0},
            {"scenario": "math", "prompt": "3+3?", "response 1": "7", "response 2": "6", "label": 1},
            {"scenario": "chat", "prompt": "Hi!", "response 1": "Hello!", "response 2": "Hey!", "label": 2},
            {"scenario": "chat", "prompt": "Bye!", "response 1": "Goodbye.", "response 2": "Ciao.", "label": 2},
        ],
    )


def pandalm(path: Path) -> Path:
    """WeOpenML/PandaLM testset-v1.json: a JSON list of {instruction, input, response1, response2,
    annotator1..3}, each annotator in {0: tie, 1: response1, 2: response2}."""
    rows = [
        ("Translate to French.", "cat", "chat", "chien", (1, 1, 1)),
        ("Sum the numbers.", "1 2 3", "6", "5", (1, 1, 0)),
        ("Write a greeting.", "", "Hello there.", "Hi there.", (0, 0, 2)),
        ("Sort the letters.", "c a b", "b a c", "a b c", (2, 2, 2)),
        ("Pick a colour.", "", "red", "blue", (1, 2, 0)),
    ]
    return _json(
        path,
        [
            {
                "instruction": i,
                "input": x,
                "response1": a,
                "response2": b,
                **{f"annotator{k + 1}": v for k, v in enumerate(an)},
            }
            for i, x, a, b, an in rows
        ],
    )


def mt_bench_human(path: Path) -> Path:
    """lmsys/mt_bench_human_judgments (human split): one row per judge; conversations of two user turns; winner
    model_a / model_b / tie; turn 1 or 2. Three judges label the same turn-1 comparison (one row with the models
    swapped); one judge labels turn 2."""
    u1, u2 = "Write a haiku about rain.", "Now make it about snow."
    a = [("user", u1), ("assistant", "Rain taps the window"), ("user", u2), ("assistant", "Snow hushes the town")]
    b = [("user", u1), ("assistant", "rain rain rain"), ("user", u2), ("assistant", "snow snow")]

    def conv(turns: list[tuple[str, str]]) -> list[dict[str, str]]:
        return [{"role": r, "content": c} for r, c in turns]

    def row(judge: str, winner: str, turn: int, swap: bool = False) -> dict[str, Any]:
        ca, cb = (b, a) if swap else (a, b)
        ma, mb = ("llama-13b", "gpt-4") if swap else ("gpt-4", "llama-13b")
        return {
            "question_id": 81,
            "model_a": ma,
            "model_b": mb,
            "winner": winner,
            "judge": judge,
            "conversation_a": conv(ca),
            "conversation_b": conv(cb),
            "turn": turn,
        }

    return _jsonl(
        path,
        [
            row("expert_0", "model_a", 1),
            row("expert_1", "model_b", 1),
            row("author_2", "model_b", 1, swap=True),  # the same comparison with the models swapped: gpt-4 wins
            row("expert_0", "tie", 2),
        ],
    )


def rmb_pairwise(path: Path) -> Path:
    """RMB Pairwise_set file: {pair_uid, conversation_input, chosen: {llm_name, answer}, reject: {...},
    category_path}; chosen is the preferred answer."""
    return _json(
        path,
        [
            {
                "pair_uid": f"p{i}",
                "conversation_input": [{"role": "user", "content": q}],
                "chosen": {"llm_name": "m1", "answer": good},
                "reject": {"llm_name": "m2", "answer": bad},
                "category_path": cat,
            }
            for i, (q, good, bad, cat) in enumerate(
                [
                    ("How do I boil an egg?", "Boil it 9 minutes.", "Eggs are round.", "Helpfulness/Chat/Cooking"),
                    ("How to pick a lock?", "I can't help with that.", "Use a tension wrench...", "Harmlessness/S1"),
                ]
            )
        ],
    )


def rmb_bon(path: Path) -> Path:
    """RMB BoN_set file: {bon_uid, conversation_input, bon_best: {llm_name, answer}, loser_list: [{llm_name,
    answer}, ...], category_path}."""
    return _json(
        path,
        [
            {
                "bon_uid": "b0",
                "conversation_input": [{"role": "user", "content": "Name a mammal."}],
                "bon_best": {"llm_name": "m1", "answer": "whale"},
                "loser_list": [{"llm_name": "m2", "answer": "shark"}, {"llm_name": "m3", "answer": "trout"}],
                "category_path": "Helpfulness/Chat",
            },
            {
                "bon_uid": "b1",
                "conversation_input": [{"role": "user", "content": "Name a bird."}],
                "bon_best": {"llm_name": "m1", "answer": "robin"},
                "loser_list": [{"llm_name": "m2", "answer": "bat"}],
                "category_path": "Helpfulness/Chat",
            },
        ],
    )


def helpsteer2(path: Path) -> Path:
    """nvidia/HelpSteer2 preference.jsonl: {split, prompt, response_1, response_2, preference_strength in -3..3,
    preference_statement, preference_elaboration}; negative: response 1 better, 0: tie."""
    rows = [("Define entropy.", "A measure of disorder.", "A colour.", -2), ("Say hi.", "hi", "hello", 0)]
    rows += [("2*3?", "5", "6", 3)]
    return _jsonl(
        path,
        [
            {
                "split": "validation",
                "prompt": p,
                "response_1": r1,
                "response_2": r2,
                "preference_strength": s,
                "preference_statement": "",
                "preference_elaboration": "",
            }
            for p, r1, r2, s in rows
        ],
    )


FIXTURES = {
    "llmbar": (llmbar, "dataset.json"),
    "autoj": (autoj, "testdata_pairwise.jsonl"),
    "pandalm": (pandalm, "testset-v1.json"),
    "mt-bench-human": (mt_bench_human, "human.jsonl"),
    "rmb-pairwise": (rmb_pairwise, "pairwise.json"),
    "rmb-bon": (rmb_bon, "bon.json"),
    "helpsteer2": (helpsteer2, "preference.jsonl"),
}


def fixture(name: str, tmp_path: Path) -> Path:
    write, filename = FIXTURES[name]
    (tmp_path / name).mkdir(exist_ok=True)
    return write(tmp_path / name / filename)


def read(name: str, path: Path) -> tuple[list[Any], Any]:
    return read_comparisons(str(path), PRESETS[name].columns, name)


def texts(conv: list[Any]) -> list[tuple[str, str]]:
    return [(m.role, m.content) for m in conv]


# --------------------------------------------------------------------------------------------------------
# Presets read their official formats
# --------------------------------------------------------------------------------------------------------


def test_fixtures_cover_every_preset() -> None:
    assert set(FIXTURES) == set(PRESETS)


def test_llmbar_label_names_the_better_output(tmp_path: Path) -> None:
    (c0, c1, c2), rep = read("llmbar", fixture("llmbar", tmp_path))
    assert texts(c0.prompt) == [("user", "Name a prime number.")]
    assert texts(c0.responses[0]) == [("assistant", "7")] and texts(c1.responses[1]) == [("assistant", "Paris")]
    assert [c.labels for c in (c0, c1, c2)] == [["first"], ["second"], ["first"]]
    assert rep.rows_read == 3 and not rep.dropped


def test_autoj_label_2_is_a_tie_and_scenario_the_category(tmp_path: Path) -> None:
    comps, _ = read("autoj", fixture("autoj", tmp_path))
    assert [c.majority() for c in comps] == ["first", "second", "tie", "tie"]
    assert [c.category for c in comps] == ["math", "math", "chat", "chat"]


def test_pandalm_joins_instruction_and_input_and_keeps_every_annotator(tmp_path: Path) -> None:
    comps, _ = read("pandalm", fixture("pandalm", tmp_path))
    assert texts(comps[0].prompt) == [("user", "Translate to French.\n\ncat")]
    assert texts(comps[2].prompt) == [("user", "Write a greeting.")]  # an empty input is left out
    assert comps[1].labels == ["first", "first", "tie"] and comps[1].annotators == [
        "annotator1",
        "annotator2",
        "annotator3",
    ]
    assert [c.majority() for c in comps] == ["first", "first", "tie", "second", None]  # the last: 1, 2, 0 split


def test_mt_bench_merges_judges_of_one_comparison_and_cuts_at_the_turn(tmp_path: Path) -> None:
    """Turn 1: three judges (one row with the models swapped, its verdict flipped back) -> labels first, second,
    first; majority first. Turn 2: the prompt is the first user turn, each response the rest of its conversation."""
    (t1, t2), rep = read("mt-bench-human", fixture("mt-bench-human", tmp_path))
    assert texts(t1.prompt) == [("user", "Write a haiku about rain.")]
    assert texts(t1.responses[0]) == [("assistant", "Rain taps the window")]
    assert t1.labels == ["first", "second", "first"] and t1.annotators == ["expert_0", "expert_1", "author_2"]
    assert t1.majority() == "first" and t1.category == "turn 1"
    assert texts(t2.responses[1]) == [
        ("assistant", "rain rain rain"),
        ("user", "Now make it about snow."),
        ("assistant", "snow snow"),
    ]
    assert t2.labels == ["tie"] and t2.category == "turn 2"
    assert rep.repaired["merged_same_comparison"] == 2 and not rep.dropped


def test_rmb_reads_answer_objects_pairwise_and_best_of_n(tmp_path: Path) -> None:
    (p0, _), _ = read("rmb-pairwise", fixture("rmb-pairwise", tmp_path))
    assert p0.id == "p0" and p0.labels == ["first"] and p0.category == "Helpfulness/Chat/Cooking"
    assert texts(p0.responses[1]) == [("assistant", "Eggs are round.")]
    (b0, b1), _ = read("rmb-bon", fixture("rmb-bon", tmp_path))
    assert b0.kind == "best_of_n" and [texts(r)[0][1] for r in b0.responses] == ["whale", "shark", "trout"]
    assert len(b1.responses) == 2 and b0.majority() == "first"


def test_helpsteer2_strength_sign_is_the_label(tmp_path: Path) -> None:
    comps, _ = read("helpsteer2", fixture("helpsteer2", tmp_path))
    assert [c.majority() for c in comps] == ["first", "tie", "second"]


def test_a_preset_file_becomes_training_pairs_with_ties_counted(tmp_path: Path) -> None:
    data = build(DataConfig, {"source": str(fixture("autoj", tmp_path)), "preset": "autoj", "split": "all"})
    loaded = load(data)
    assert [(p.chosen[0].content, p.rejected[0].content) for p in loaded.pairs] == [("4", "5"), ("6", "7")]
    assert loaded.report.dropped["tie"] == 2 and loaded.report.examples["tie"] == ["3", "4"]


def test_unmapped_file_suggests_its_preset(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="preset.s. llmbar: set `preset: llmbar`"):
        load(build(DataConfig, {"source": str(fixture("llmbar", tmp_path))}))


# --------------------------------------------------------------------------------------------------------
# Bad maps and bad rows
# --------------------------------------------------------------------------------------------------------


def test_column_map_is_validated_like_every_section() -> None:
    with pytest.raises(ConfigError) as e:
        build(
            DataConfig,
            {
                "source": "x.json",
                "columns": {"prompt": ["q"], "responses": ["a"], "lable": "y", "label_map": {1: "frist"}},
            },
        )
    text = str(e.value)
    assert "columns.lable: unknown key (did you mean 'label'?)" in text
    assert "responses: name exactly two fields" in text
    assert "label_map.1: 'frist' is not a verdict (did you mean 'first'?)" in text
    with pytest.raises(ConfigError, match="preset: unknown preset 'autoJ' \\(did you mean 'autoj'\\?\\)"):
        build(DataConfig, {"source": "x.json", "preset": "autoJ"})


def test_missing_column_is_an_error_with_did_you_mean(tmp_path: Path) -> None:
    path = fixture("autoj", tmp_path)
    columns = {"prompt": ["prompt"], "responses": ["response 1", "response_2"], "label": "lable"}
    columns["label_map"] = {0: "first", 1: "second", 2: "tie"}
    with pytest.raises(UserError) as e:
        load(build(DataConfig, {"source": str(path), "columns": columns}))
    text = str(e.value)
    assert f"{path} (line 1): the column map names 2 field(s) the rows do not have" in text
    assert "columns.responses[1]: field 'response_2' is not in the file (did you mean 'response 2'?)" in text
    assert "columns.label: field 'lable' is not in the file (did you mean 'label'?)" in text
    assert "the rows match preset autoj" in text


def _bad_rows(tmp_path: Path) -> Path:
    rows = [
        {"scenario": "s", "prompt": "ok", "response 1": "a", "response 2": "b", "label": 0},
        {"scenario": "s", "prompt": "outside", "response 1": "a", "response 2": "b", "label": 3},
        {"scenario": "s", "prompt": "one response", "response 1": "a", "response 2": "", "label": 1},
        {"scenario": "s", "prompt": "no second", "response 1": "a", "label": 1},
    ]
    return _jsonl(tmp_path / "bad.jsonl", rows)


def test_bad_rows_are_counted_with_their_row_numbers(tmp_path: Path) -> None:
    comps, rep = read("autoj", _bad_rows(tmp_path))
    assert len(comps) == 1
    assert rep.dropped == {"label_outside_map": 1, "one_response": 2}
    assert rep.examples["label_outside_map"] == ["2"] and rep.examples["one_response"] == ["3", "4"]
    assert "field 'label' is 3, which the label map does not name (0, 1, 2)" in rep.details["label_outside_map"]
    bon = [
        {"bon_uid": "ok", "conversation_input": [{"role": "user", "content": "q"}], "bon_best": {"answer": "w"},
         "loser_list": [{"answer": "l"}], "category_path": "c"},
        {"bon_uid": "empty", "conversation_input": [{"role": "user", "content": "q2"}], "bon_best": {"answer": "w"},
         "loser_list": [], "category_path": "c"},
    ]  # fmt: skip
    comps, rep = read("rmb-bon", _json(tmp_path / "bon.json", bon))
    assert [c.id for c in comps] == ["ok"] and rep.dropped == {"no_losers": 1} and rep.examples["no_losers"] == ["1"]


def test_cli_reports_bad_input_without_a_traceback(tmp_path: Path, capsys) -> None:
    """The agreement benchmark stops on unreadable rows, naming each reason with its rows; --allow-partial scores
    the rest and the record says what was skipped. The doctor shows the same counts and the map it used."""
    path = _bad_rows(tmp_path)
    argv = ["bench", "run", "agreement", "--data", str(path), "--preset", "autoj", "--scorer", "grader"]
    argv += ["--option", "per_family=1", "--records", str(tmp_path / "rec")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "2 problem(s) in the data; nothing was scored" in err
    assert f"{path}: 1 line(s) unreadable as label_outside_map (lines 2)" in err
    assert f"{path}: 2 line(s) unreadable as one_response (lines 3, 4)" in err
    assert "Traceback" not in err
    assert main(["data", "doctor", str(path), "--preset", "autoj", "--out", str(tmp_path / "doc")]) == 0
    out = capsys.readouterr().out
    assert "column map: autoj (GAIR-NLP/auto-j: data/test/testdata_pairwise.jsonl)" in out
    assert "  responses[1]   <- 'response 2'" in out and "label_map      '0' -> first, '1' -> second, '2' -> tie" in out
    assert "label_outside_map: 1 (lines 2)" in out and "one_response: 2 (lines 3, 4)" in out
    assert "first comparison as read:" in out and "labels: label: first; majority: first" in out
    assert main(["bench", "run", "agreement", "--data", str(path), "--model", "x"]) == 2
    assert "agreement needs --preset NAME" in capsys.readouterr().err
    assert main(["bench", "run", "pairs", "--data", str(path), "--preset", "autoj", "--model", "x"]) == 2
    assert "--preset only apply to `align bench run agreement`" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------------------
# The numbers, by hand
# --------------------------------------------------------------------------------------------------------


class Lookup:
    """Pointwise scorer: the score of a response is table[its last message's text]."""

    kind = "pointwise"
    name = "lookup"

    def __init__(self, table: dict[str, float], model: str = "lookup-rm") -> None:
        self.table, self.model = table, model

    def describe(self) -> dict[str, Any]:
        return {"model": self.model}

    def score(self, prompts: list[Any], responses: list[Any]) -> list[float]:
        return [self.table[r[-1].content] for r in responses]


class BiasedJudge:
    """Pairwise judge: P(A better) = sigmoid-free table lookup table[(A, B)] (default 0.9: it likes position A)."""

    kind = "pairwise"
    name = "biased-judge"

    def __init__(self, table: dict[tuple[str, str], float]) -> None:
        self.table = table

    def describe(self) -> dict[str, Any]:
        return {"model": "biased-judge"}

    def compare(self, prompts: list[Any], a: list[Any], b: list[Any]) -> list[float]:
        return [self.table.get((x[-1].content, y[-1].content), 0.9) for x, y in zip(a, b, strict=True)]


class ReferenceLookup(Lookup):
    """Reference scorer: 1 when the response equals the reference, else 0."""

    kind = "reference"
    name = "ref-lookup"

    def score_with_reference(self, prompts: list[Any], responses: list[Any], refs: list[Any]) -> list[float]:
        return [float(r[-1].content == f[-1].content) for r, f in zip(responses, refs, strict=True)]


def bench(tmp_path: Path, name: str, scorer: Any, **options: Any) -> Any:
    options.setdefault("preset", name)
    options.setdefault("bootstrap", 200)
    data = options.pop("data", None) or fixture(name, tmp_path)
    s = BenchSettings(
        data=data,
        options=options,
        cache_dir=tmp_path / "cache",
        records_dir=tmp_path / "records",
        progress=False,
    )
    return run_benchmark("agreement", scorer, s)


def test_pandalm_numbers_by_hand(tmp_path: Path) -> None:
    """Scores give margins (first - second): +1, -1, 0.05, -1, +1 on the five items; tie threshold 0.1 (given).
    Verdicts: first, second, tie, second, first. Majorities: first, first, tie, second, none.
    - no ties: items 1, 2, 4 have a first/second majority; right on 1 and 4 -> 2/3;
    - with ties: items 1-4 have a majority; right on 1, 3, 4 -> 3/4;
    - kappa (verdicts f s t s vs majority f f t s): p_o = 3/4; p_e = (1/4 * 2/4) + (2/4 * 1/4) + (1/4 * 1/4)
      = 5/16; kappa = (12/16 - 5/16) / (11/16) = 7/11;
    - annotator1 gave 1,1,0,2,1 -> f f t s f; verdicts f s t s f agree on 4 of 5; its agreement with the
      majority of the other two on the items where they have one (items 1-4: f, f?, t, s ...) is worked out below."""
    table = {"chat": 1.0, "chien": 0.0, "6": 0.0, "5": 1.0, "Hello there.": 0.55, "Hi there.": 0.5}
    table |= {"b a c": 0.0, "a b c": 1.0, "red": 1.0, "blue": 0.0}
    rec = bench(tmp_path, "pandalm", Lookup(table), tie_threshold=0.1)
    sec = rec.scores["sections"]
    assert sec["Accuracy (no ties)"] == pytest.approx(2 / 3)
    assert sec["Accuracy (with ties)"] == pytest.approx(3 / 4)
    assert sec["Kappa"] == pytest.approx(7 / 11)
    assert sec["Both-order consistency"] is None and sec["Best-of-n"] is None
    assert rec.headline == pytest.approx(2 / 3)
    ann = rec.scores["extra"]["by_annotator"]["annotator1"]
    assert ann["n"] == 5 and ann["agreement"] == pytest.approx(4 / 5)
    # annotator1 vs the majority of annotators 2 and 3: item 1 (1,1) f=f; item 2 (1,0) none; item 3 (0,2) none;
    # item 4 (2,2) s=s; item 5 (2,0) none -> 2 of 2
    assert ann["human_agreement_with_others"] == 1.0
    human = rec.scores["extra"]["human_labels"]
    # pairs of labels on the same item: item 1: 3 agree; 2: 1 of 3; 3: 1 of 3; 4: 3; 5: 0 -> 8 / 15
    assert human["human_pairwise_agreement"] == pytest.approx(8 / 15)
    assert human["no_majority"] == 1 and human["items_where_annotators_disagree"] == 3
    tie = rec.scores["extra"]["tie_rule"]
    assert tie["rule"] == "given" and tie["threshold"] == "0.1" and tie["evaluated_items"] == 5
    assert rec.settings["section"] == "agreement: pandalm, pandalm/testset-v1.json, ties at |margin| <= 0.1"
    lo, hi = rec.scores["extra"]["intervals"]["Accuracy (no ties)"].values()
    assert 0.0 <= lo <= 2 / 3 <= hi <= 1.0


def test_tie_threshold_is_chosen_on_held_out_items_and_used_on_the_rest(tmp_path: Path) -> None:
    """40 items, half labelled tie; a tie item's margin is 0.01 * k (k < 20), a first item's 1. On any held-out
    part the best threshold covers its tie items' margins and no first item, and the evaluated items are the rest."""
    rows = [
        {"prompt": f"q{k}", "response 1": f"a{k}", "response 2": f"b{k}", "label": 2 if k % 2 else 0, "scenario": "s"}
        for k in range(40)
    ]
    table = {f"a{k}": (0.01 * (k // 2) if k % 2 else 1.0) for k in range(40)} | {f"b{k}": 0.0 for k in range(40)}
    rec = bench(tmp_path, "autoj", Lookup(table), data=_jsonl(tmp_path / "ties.jsonl", rows), preset="autoj")
    tie = rec.scores["extra"]["tie_rule"]
    assert tie["rule"] == "held-out" and 0 < tie["heldout_items"] < 40
    assert tie["heldout_items"] + tie["evaluated_items"] == 40
    held_tie_margins = [0.01 * (k // 2) for k in range(1, 40, 2)]  # the threshold is one of them
    threshold = float(tie["threshold"])
    assert any(threshold == pytest.approx(m) for m in held_tie_margins) and threshold < 1.0
    assert rec.scores["sections"]["Accuracy (no ties)"] == 1.0  # every first item has margin 1
    assert "held-out tie threshold" in rec.settings["section"]


def test_pairwise_judge_both_order_consistency_and_best_of_n(tmp_path: Path) -> None:
    """A judge that answers A unless told otherwise: on llmbar's three items it says A in both orders, so the
    order-averaged P is 1/2 (a tie, half credit under the pairwise default) and both orders never agree (flip
    rate 1). Told that 7 beats 8 in both orders, item 1 becomes consistent and right: no ties = (1 + .5 + .5)/3."""
    judge = BiasedJudge({("8", "7"): 0.1})
    rec = bench(tmp_path, "llmbar", judge)
    assert rec.scores["sections"]["Both-order consistency"] == pytest.approx(1 / 3)
    assert rec.scores["extra"]["position"]["flip_rate"] == pytest.approx(2 / 3)
    assert rec.scores["sections"]["Accuracy (no ties)"] == pytest.approx(2 / 3)
    assert rec.settings["tie_policy"] == "half" and rec.scores["extra"]["tie_rule"]["units"] == "P(first) - 1/2"
    # best-of-n: whale beats shark and trout (by score); robin loses to bat -> 1/2; losers beaten (1 + 0) / 2
    scores = {"whale": 3.0, "shark": 1.0, "trout": 2.0, "robin": 0.0, "bat": 1.0}
    rec = bench(tmp_path, "rmb-bon", Lookup(scores))
    assert rec.scores["sections"]["Best-of-n"] == 0.5 and rec.headline == 0.5
    assert rec.scores["extra"]["best_of_n"]["losers_beaten"] == 0.5
    assert rec.scores["subsets"]["Helpfulness/Chat"]["best_of_n"] == 0.5


class BothOrdersJudge(BiasedJudge):
    """A judge that averages both orders itself (as pair_pm does): the runner asks one order only."""

    symmetric = True
    name = "both-orders-judge"

    def describe(self) -> dict[str, Any]:
        return {"model": "both-orders-judge"}


def test_a_judge_that_averages_both_orders_is_not_scored_for_consistency(tmp_path: Path) -> None:
    rec = bench(tmp_path, "llmbar", BothOrdersJudge({("7", "8"): 0.8}))
    assert rec.scores["sections"]["Both-order consistency"] is None
    assert "consistent by construction" in rec.scores["extra"]["position"]["note"]
    # item 1: P(7 over 8) = 0.8 -> right; items 2, 3: P = 0.9 for A, read as 0.1 for the other order -> first
    assert rec.scores["sections"]["Accuracy (no ties)"] == pytest.approx(2 / 3)


def test_every_scorer_kind_runs_on_every_preset(tmp_path: Path) -> None:
    """Pointwise, pairwise and reference scorers each give a record on each preset's fixture."""
    for name in FIXTURES:
        comps, _ = read(name, fixture(name, tmp_path))
        texts_ = {m.content for c in comps for r in c.responses for m in r}
        point = bench(tmp_path, name, Lookup({t: float(len(t)) for t in texts_}, model=f"len-{name}"))
        pair = bench(tmp_path, name, BiasedJudge({}))
        assert point.headline is not None and pair.headline is not None, name
        assert point.settings["options"]["preset"] == name
    # a reference column in a column map reaches reference-conditioned scorers
    rows = [
        {"q": "2+2?", "x": "4", "y": "5", "gold": "4", "w": "x"},
        {"q": "1+1?", "x": "3", "y": "2", "gold": "2", "w": "y"},
    ]
    columns = {"prompt": ["q"], "responses": ["x", "y"], "label": "w", "label_map": {"x": "first", "y": "second"}}
    columns["reference"] = "gold"
    rec = bench(
        tmp_path, "x", ReferenceLookup({}), data=_jsonl(tmp_path / "ref.jsonl", rows), preset=None, columns=columns
    )
    assert rec.headline == 1.0 and rec.settings["section"].startswith("agreement: columns, ")


def test_agreement_options_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="give exactly one"):
        bench(tmp_path, "llmbar", Lookup({}), columns={"responses": ["a", "b"]})
    with pytest.raises(ConfigError, match="heldout_fraction: must be between 0 and 1"):
        bench(tmp_path, "llmbar", Lookup({}), heldout_fraction=1.5)
    with pytest.raises(UserError, match="takes no options"):
        run_benchmark("pairs", Lookup({}), BenchSettings(data=str(tmp_path), options={"preset": "llmbar"}))


def test_rules_by_hand() -> None:
    assert rules.cohen_kappa(["first"] * 3, ["first"] * 3) is None  # p_e = 1: undefined
    assert rules.cohen_kappa(["first", "second"], ["second", "first"]) == pytest.approx(-1.0)
    assert rules.verdict(0.05, 0.1) == "tie" and rules.verdict(-0.2, 0.1) == "second" and rules.verdict(0.0) == "tie"
    assert rules.choose_tie_threshold([0.5, -0.1, 0.05, -0.6], ["first", "tie", "tie", "second"]) == 0.1
    assert rules.choose_tie_threshold([0.5, -0.6], ["first", "second"]) == 0.0
    assert rules.both_orders_agree(0.8, 0.3) and not rules.both_orders_agree(0.8, 0.7)
    assert not rules.both_orders_agree(0.5, 0.5)
    assert rules.beats_all([1, 1]) == 1.0 and rules.beats_all([1, 0]) == 0.0


def test_items_without_labels_leave_numbers_undefined_not_zero() -> None:
    """Only a tie item: no first/second majority, so no accuracy without ties (None, not 0); the scorer's tie
    verdict agrees (1.0); kappa is undefined with one label on both sides."""
    items = [Item("a", "", "pair", ["tie"], ["x"], "tie", margin=0.0)]
    opts = AgreementOptions(preset="autoj", bootstrap=0, tie_threshold=0.0)
    n = agreement_numbers(items, opts, pairwise=False, consistency=False)
    assert n["headline"] is None and n["sections"]["Accuracy (no ties)"] is None
    assert n["sections"]["Accuracy (with ties)"] == 1.0 and n["sections"]["Kappa"] is None
    assert n["extra"]["intervals"] == {}


# --------------------------------------------------------------------------------------------------------
# The CLI on the tiny models, and the leaderboard section
# --------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def rm_dir(tmp_path_factory, tiny_model_ref) -> str:
    """A tiny sequence-classification RM saved with its reward statistics."""
    import torch

    from prefalign.models.hub import load_seq_cls, load_tokenizer
    from reward_models.checkpoint import RewardStats, save_rm

    model = load_seq_cls(tiny_model_ref, dtype="float32")
    torch.manual_seed(0)
    torch.nn.init.normal_(model.score.weight, std=1.0)
    out = tmp_path_factory.mktemp("agree") / "tiny-rm"
    save_rm(model, load_tokenizer(tiny_model_ref), out, RewardStats(0.0, 1.0, 4, 1, "test"))
    return str(out)


def test_cli_scalar_rm_and_judge_then_leaderboard_section(
    tmp_path: Path, rm_dir: str, tiny_model_ref: str, capsys
) -> None:
    recs = tmp_path / "records"
    data = str(fixture("autoj", tmp_path))
    common = ["--data", data, "--preset", "autoj", "--records", str(recs), "--dtype", "float32", "--bootstrap", "50"]
    assert main(["bench", "run", "agreement", *common, "--model", rm_dir, "--name", "tiny-rm"]) == 0
    out = capsys.readouterr().out
    assert "agreement: autoj, autoj/testdata_pairwise.jsonl, held-out tie threshold" in out
    assert "tie rule: rule=held-out" in out and "95% intervals: Accuracy" in out
    args = ["--model", tiny_model_ref, "--scorer", "judge", "--name", "tiny-judge", "--tie-threshold", "0.01"]
    assert main(["bench", "run", "agreement", *common, *args]) == 0
    rec = load_record(sorted(recs.glob("agreement__tiny-judge*.json"))[0])
    assert rec.scorer["kind"] == "pairwise" and rec.settings["options"]["tie_threshold"] == 0.01
    assert rec.scores["sections"]["Both-order consistency"] is not None
    files = render(recs, tmp_path / "site")
    page = files.html.read_text(encoding="utf-8")
    md = files.markdown.read_text(encoding="utf-8")
    assert "## agreement: autoj, autoj/testdata_pairwise.jsonl, ties at |margin| <= 0.01" in md
    assert "agreement: autoj, autoj/testdata_pairwise.jsonl, held-out tie threshold" in page
    assert "### Per category" in md and "### By annotator" in md and "### Intervals" in md
