"""Benchmark numbers to the letter of the reference code: fixed per-item inputs (model scores, judge verdicts,
annotations, ratings; tests/fixtures/reference/, small synthetic files in each benchmark's own format that exercise
its tricky rules) scored by this toolkit's rules, asserted against the numbers the benchmark's own code printed for
the same inputs. The reference code was run once, outside the project, from a snapshot of its repository; each
test names the repository, the commit, the function and the command.

Where the reference sums with numpy or pandas and the toolkit with Python's `sum`, a value can differ in the last
digit on other inputs (the order of a float sum); on these fixtures every asserted number is the reference's to the
digit, except where a tolerance is given and said why.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from leaderboards.runner import BenchSettings, run_benchmark
from prefalign.errors import UserError

FIXTURES = Path(__file__).parent / "fixtures" / "reference"


class TableScorer:
    """Pointwise: a response's score looked up by its text (the fixtures' texts are unique)."""

    kind = "pointwise"
    name = "table"

    def __init__(self, table: dict[str, float]) -> None:
        self.table = table

    def describe(self) -> dict:
        return {"model": "table"}

    def score(self, prompts, responses):
        return [self.table[r[-1].content] for r in responses]


class TableJudge:
    """Pairwise: P(A preferred) looked up by (A's text, B's text); NaN for a failed judgement."""

    kind = "pairwise"
    name = "table-judge"
    symmetric = False

    def __init__(self, table: dict[tuple[str, str], float]) -> None:
        self.table = table

    def describe(self) -> dict:
        return {"model": "table-judge"}

    def compare(self, prompts, a, b):
        return [self.table[(x[-1].content, y[-1].content)] for x, y in zip(a, b, strict=True)]


def _run(bench: str, scorer, data: Path, **kw):
    return run_benchmark(
        bench, scorer, BenchSettings(data=str(data), use_cache=False, save=False, progress=False, **kw)
    )


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_rewardbench2_subsets_ties_and_overall_are_the_reference_code_s():
    """allenai/reward-bench @ 05a9005e: rewardbench/utils.py `reroll_and_score_dataset` (best-of-4: 1/#tied when the
    chosen ties at the maximum), `process_single_model` (the Ties composite 0.3 tied + 0.3 ref + 0.2 pref + 0.2
    pref_hard + 0.01 margin), scripts/run_v2.py; `python ref_rb2.py` on data.jsonl with scores.json (43 rows:
    2-, 3- and 4-way ties at the top, subsets of 2-7 rows, 11 Ties prompts with ref-only, tied-only and dcm = 0)."""
    d = FIXTURES / "rewardbench2"
    rows, scores = _rows(d / "data.jsonl"), json.loads((d / "scores.json").read_text())
    table = {t: float(s) for r in rows for t, s in zip(r["chosen"] + r["rejected"], scores[r["id"]], strict=True)}
    s = _run("rewardbench2", TableScorer(table), d / "data.jsonl").scores
    assert {k: v["score"] for k, v in s["subsets"].items()} == {
        "Factuality": 0.34722222222222215,
        "Focus": 0.45,
        "Math": 0.4404761904761905,
        "Precise IF": 0.3333333333333333,
        "Safety": 0.75,
        "Ties": 0.574545582091216,
    }
    assert s["headline"] == 0.482596221353827
    # the Ties terms; the margin's mean differs from numpy's in the last digit (math.tanh vs np.tanh, sum vs mean)
    ties = s["extra"]["ties"]
    assert [
        ties[k] for k in ("tied_accuracy", "ref_accuracy", "correctness_preferred", "correctness_preferred_hard")
    ] == [
        0.7,
        0.7,
        0.4444444444444444,
        0.3333333333333333,
    ]
    assert ties["margin"] == pytest.approx(-0.10099734643394791, abs=1e-15)


def test_rewardbench_sections_and_score_are_the_reference_code_s():
    """allenai/reward-bench @ 05a9005e: scripts/run_rm.py (a tie counts wrong: `1 if chosen > rejected else 0`),
    rewardbench/utils.py `calculate_scores_per_section` (sections weighted by EXAMPLE_COUNTS); `python ref_rb1.py`
    on filtered.json with scores.json (124 rows, all 23 subsets, 16 tied pairs). The leaderboard's own table adds the
    subsets in alphabetical order and gives Reasoning 0.42876984126984125 (1.1e-16 away); its Prior Sets average is
    not computed here (docs/evaluation.md)."""
    d = FIXTURES / "rewardbench"
    rows, scores = json.loads((d / "filtered.json").read_text()), json.loads((d / "scores.json").read_text())
    table = {}
    for r in rows:
        table[r["chosen"]], table[r["rejected"]] = scores[str(r["id"])]
    s = _run("rewardbench", TableScorer(table), d / "filtered.json").scores
    assert s["sections"] == {
        "Chat": 0.5410348496940676,
        "Chat Hard": 0.3911079782790309,
        "Safety": 0.552020592020592,
        "Reasoning": 0.42876984126984136,
    }
    assert s["headline"] == 0.4782333153158829


def _judgebench_judge(path: Path) -> TableJudge:
    decision = {"A>B": 1.0, "B>A": 0.0, "A=B": 0.5, None: math.nan}
    table = {}
    for r in _rows(path):
        first, second = r["judgments"]
        table[(r["response_A"], r["response_B"])] = decision[first["decision"] if first else None]
        table[(r["response_B"], r["response_A"])] = decision[second["decision"] if second else None]
    return TableJudge(table)


def test_judgebench_games_are_the_reference_code_s():
    """ScalerLab/JudgeBench @ e2c52c28: utils/metrics.py `compute_final_metrics` (double game: +1 / -1 per order, an
    inconsistent pair not correct; a failed judgement adds 0 and the pair stays in the denominator), utils/judges.py
    (a reward model: 'A>B' if score_A > score_B else 'B>A'); `python run_judge.py --judge_name reward_model
    --single_game` and `--judge_name vanilla` on pairs.jsonl / pairs_fail.jsonl with the stored judgments (printed
    in percent: 50.00, 42.86, 52.94)."""
    d = FIXTURES / "judgebench"
    table = {}
    for r in _rows(d / "rm_judgments.jsonl"):
        table[r["response_A"]], table[r["response_B"]] = r["judgments"][0]["judgment"]["scores"]
    single = _run("judgebench", TableScorer(table), d / "pairs.jsonl").scores
    assert single["sections"] == {
        "mmlu-pro": 0.4,
        "livebench-reasoning": 0.6666666666666666,
        "livebench-math": 0.5,
        "livecodebench": 0.5,
    }
    assert single["headline"] == 0.5
    double = _run("judgebench", _judgebench_judge(d / "judge_judgments.jsonl"), d / "pairs.jsonl").scores
    assert double["sections"] == {
        "mmlu-pro": 0.6,
        "livebench-reasoning": 0.0,
        "livebench-math": 1.0,
        "livecodebench": 0.25,
    }
    assert double["headline"] == 0.42857142857142855
    # failed judgements: the reference's 52.94 (9/17), every pair kept; one order's failure leaves the other's verdict
    failed = _run("judgebench", _judgebench_judge(d / "judge_judgments_fail.jsonl"), d / "pairs_fail.jsonl")
    assert failed.scores["headline"] * 17 == pytest.approx(9) and failed.counts["examples"] == 17
    assert {k: round(100 * v, 2) for k, v in failed.scores["sections"].items()} == {
        "mmlu-pro": 66.67,
        "livebench-reasoning": 0.0,
        "livebench-math": 100.0,
        "livecodebench": 40.0,
    }


def test_alpacaeval_raw_win_rate_is_the_reference_code_s():
    """tatsu-lab/alpaca_eval @ cd543a14: metrics/winrate.py `get_winrate` -> helpers.py `describe_head2head`
    (preference 2 = the model wins, 1 = the baseline, 1.5 and the legacy 0 a draw, null dropped; win rate =
    mean(preference - 1) x 100); `alpaca_eval.evaluate(is_recompute_metrics_only=True)` on annotations.json (23 rows)
    printed win_rate 51.00052909523809, 9 wins, 9 losses, 3 draws, 21 counted."""
    from leaderboards.winrate import win_rates

    rows = json.loads((FIXTURES / "alpacaeval" / "annotations.json").read_text())
    p = [math.nan if r["preference"] is None else (0.5 if r["preference"] == 0 else r["preference"] - 1) for r in rows]
    wr = win_rates(p, [len(r["output_2"]) for r in rows], [len(r["output_1"]) for r in rows], bootstrap=0)
    assert wr.win_rate * 100 == 51.00052909523809
    assert (wr.n, wr.abstained) == (21, 2)


def test_alpacaeval_win_rate_standard_error_and_discrete_rate_over_805_rows_are_get_winrate_s(capsys):
    """tatsu-lab/alpaca_eval @ cd543a14: `metrics.get_winrate(pd.read_json("many_annotations.json"))` (805 made-up
    rows: weighted preferences to 17 digits, 1s and 2s, 1.5s, legacy 0s, nulls; pandas 3.1.1, numpy 2.4.6) printed
    win_rate 50.93921374850392, standard_error 1.0273141936514891, discrete_win_rate 51.01394169835235, 389 wins,
    373 losses, 27 draws, 789 counted. Over hundreds of rows the digits hold only with pandas' own sums (numpy's
    pairwise summation): a left-to-right sum moves the last one or two."""
    from align.cli.main import main

    path = str(FIXTURES / "alpacaeval" / "many_annotations.json")
    assert main(["bench", "score", "alpacaeval", "--from", path, "--json"]) == 0
    (got,) = json.loads(capsys.readouterr().out)
    assert got["sections"]["win_rate"] == 50.93921374850392
    assert got["sections"]["standard_error"] == 1.0273141936514891
    assert got["sections"]["discrete_win_rate"] == 51.01394169835235
    assert got["counts"] == {"counted": 789, "null": 16, "wins": 389, "draws": 27, "losses": 373}


ALPACA_LC = FIXTURES / "alpacaeval"


def test_alpacaeval_lc_win_rate_is_the_reference_code_s(tmp_path, capsys):
    """tatsu-lab/alpaca_eval @ cd543a14: src/alpaca_eval/metrics/glm_winrate.py `get_length_controlled_winrate`
    (GLM_INFO's length_controlled_v1, _noreg and _minimal; `fit_LogisticRegressionCV`: L1, liblinear, no intercept,
    GroupKFold(5) on the soft log loss, random_state 123), run unmodified from the snapshot's src/ in a throwaway venv
    (scikit-learn 1.9.1 and 1.5.2 printed the same digits; pandas 3.1.1, patsy 1.0.3), its `hf_hub_download` of
    df_gamed.csv pointed at the hand-made lc_gamed.csv, on `pd.read_json("lc_annotations.json")` (40 rows: weighted
    preferences, 1 and 2, a legacy 0, 1.5 and two nulls), `save_weights_dir` a temporary directory (weights read
    back from its CSV and from `model.coef_`). Printed:
        v1:      length_controlled_winrate 52.145689651885775, lc_standard_error 1.5730625853229228, win_rate
                 47.30132368421052; coef [-1.2768009982807977, -0.558781953509746, 0.0998167787133544], C 21.544...
        noreg:   51.96801696835346, 1.462335562184886; coef [..., 0.09119144324472471]
        minimal: 50.0, 0.0 (the L1 fit zeroes the model term); coef [-1.0357079640590114, 0.0]
        v1 on the rows reversed, each with its position as `index` (json.dumps(rows, indent=2)):
                 52.14568965188578, 1.5730625853229219
    noreg needs only the difficulty column (the reference reads it from df_gamed.csv; lc_difficulty.csv holds the
    same numbers). The digits match because the file's numbers are decoded as pd.read_json decodes them
    (`pandas_json_float`): with Python's correctly rounded floats six of the 40 preferences differ in the last bit
    and noreg's rate in the last digit."""
    from leaderboards.score_from import pandas_json_float, score_from

    # pd.read_json's decoding of two of the fixture's preferences (printed by the reference's pandas)
    assert (pandas_json_float("1.492501"), pandas_json_float("1.59472")) == (1.4925009999999999, 1.5947200000000001)
    ann = str(ALPACA_LC / "lc_annotations.json")

    def lc(path: str, **options) -> tuple[dict, dict]:
        (got,) = score_from("alpacaeval", [path], options)
        return got.sections, got.method

    sections, method = lc(ann, lc_table=str(ALPACA_LC / "lc_gamed.csv"))
    assert sections == {  # get_winrate's three besides (its standard error and discrete rate printed by it too)
        "win_rate": 47.30132368421052,
        "standard_error": 3.959263987308886,
        "discrete_win_rate": 42.10526315789473,
        "lc_win_rate": 52.145689651885775,
        "lc_standard_error": 1.5730625853229228,
    }
    assert method["glm"] == "length_controlled_v1" and method["C"] == pytest.approx(21.54434690031882)
    assert list(method["weights"].values()) == [-1.2768009982807977, -0.558781953509746, 0.0998167787133544]
    sections, method = lc(ann, lc_table=str(ALPACA_LC / "lc_difficulty.csv"), lc_glm="length_controlled_noreg")
    assert (sections["lc_win_rate"], sections["lc_standard_error"]) == (51.96801696835346, 1.462335562184886)
    assert method["weights"]["not_gamed_baseline.astype(float)"] == 0.09119144324472471
    sections, method = lc(ann, lc_glm="length_controlled_minimal")
    assert (sections["lc_win_rate"], sections["lc_standard_error"]) == (50.0, 0.0)
    assert list(method["weights"].values()) == [-1.0357079640590114, 0.0]
    rows = json.loads(Path(ann).read_text())
    indexed = tmp_path / "indexed.json"
    indexed.write_text(json.dumps([{**r, "index": i} for i, r in reversed(list(enumerate(rows)))], indent=2))
    sections, _ = lc(str(indexed), lc_table=str(ALPACA_LC / "lc_gamed.csv"))
    assert (sections["lc_win_rate"], sections["lc_standard_error"]) == (52.14568965188578, 1.5730625853229219)
    # without a table: the toolkit's own GLM, and the result says so
    sections, method = lc(ann)
    assert method["glm"] == "toolkit" and "lc_standard_error" not in sections
    # on the command line, and what is refused: a difficulty-only table for v1, a table laid out so the reference
    # (which looks instruction i up at row i) would read another instruction's difficulty
    from align.cli.main import main

    def score(*options: str) -> int:
        return main(["bench", "score", "alpacaeval", "--from", ann, *(x for o in options for x in ("--option", o))])

    assert score(f"lc_table={ALPACA_LC / 'lc_gamed.csv'}") == 0
    out = capsys.readouterr().out
    assert "lc_win_rate 52.1457, lc_standard_error 1.5731 (LC: alpaca_eval's length_controlled_v1" in out
    assert score(f"lc_table={ALPACA_LC / 'lc_difficulty.csv'}") == 2
    assert "lc_glm=length_controlled_noreg" in capsys.readouterr().err
    lines = (ALPACA_LC / "lc_difficulty.csv").read_text().splitlines()
    (tmp_path / "shuffled.csv").write_text("\n".join([lines[0], lines[2], lines[1], *lines[3:]]))
    assert score(f"lc_table={tmp_path / 'shuffled.csv'}", "lc_glm=length_controlled_noreg") == 2
    assert "from row 0 of the file" in capsys.readouterr().err


def test_alpacaeval_lc_win_rate_through_eval_policy_and_back(tmp_path):
    """`align eval policy --bench alpacaeval --lc-table FILE`: the run's LC win rate is alpaca_eval's GLM on the
    judge's preferences (its record says which GLM and table), and the annotations.json it writes (with each item's
    `index`) reads back through `bench score --from` to the same number."""
    from leaderboards.policy_bench import native_alpacaeval, score_pairwise
    from leaderboards.policy_data import BenchData, BenchItem
    from leaderboards.score_from import score_from

    ids = range(3, 35)  # rows 3-34 of the --data file: their difficulties are rows 3-34 of the table
    items = [BenchItem(str(i), [f"q{i}"], "cat", reference="r" * (30 + 11 * (i % 7))) for i in ids]
    data = BenchData("alpacaeval", "fixture", items, reference_model="gpt4_turbo")
    answers = [["p" * (15 + 17 * (i % 5)) + str(i)] for i in ids]
    table = {it.reference: 0.0 for it in items}
    table |= {a[0]: (1.0 if (i * 7) % 10 < 6 else -1.0) if i % 9 else 0.0 for i, a in zip(ids, answers, strict=True)}
    s = SimpleNamespace(
        bootstrap=0, seed=0, lc_glm="length_controlled_noreg", lc_table=str(ALPACA_LC / "lc_difficulty.csv")
    )
    scores, rows = score_pairwise(data, answers, TableScorer(table), s)
    control = scores["extra"]["length_control"]
    assert control["glm"] == "length_controlled_noreg" and control["table"] == s.lc_table
    assert scores["intervals"]["lc_win_rate"] is None  # the reference gives a standard error, kept beside it
    assert scores["sections"]["win_rate"] == 0.609375
    assert scores["sections"]["lc_win_rate"] == pytest.approx(0.5584, abs=1e-4)  # a fit, not a degenerate 1/2
    name, text = native_alpacaeval(data, answers, rows, "my-policy", "table")
    assert [r["index"] for r in json.loads(text)] == list(ids)
    (tmp_path / name).write_text(text)
    (got,) = score_from("alpacaeval", [str(tmp_path / name)], {"lc_table": s.lc_table, "lc_glm": s.lc_glm})
    assert got.sections["lc_win_rate"] == 100 * scores["sections"]["lc_win_rate"]
    assert got.sections["lc_standard_error"] == 100 * control["lc_standard_error"]


def test_mtbench_turn_averages_are_fastchat_s():
    """lm-sys/FastChat @ 0e6d3e4b: fastchat/llm_judge/show_result.py `display_result_single` (ratings of -1 dropped,
    the mean per turn, the average over every kept rating, turns pooled); `python show_result.py --mode single
    --input-file gpt-4_single.jsonl` (integer 1-10 ratings with five -1 failures) and rm_single.jsonl (float scores,
    where pandas' grouped mean and Python's sum differ in the last digit)."""
    from leaderboards.policy_bench import score_mtbench
    from leaderboards.policy_data import read_mtbench

    d = FIXTURES / "mtbench"
    data = read_mtbench(str(d / "question.jsonl"))
    answers = [[f"ans {it.id} t1", f"ans {it.id} t2"] for it in data.items]
    want = {
        "gpt-4_single.jsonl": (5.9, 5.333333333333333, 5.631578947368421, 0.0),
        "rm_single.jsonl": (0.4486801790825695, -0.5648026851788609, -0.03139065135705541, 1e-15),
    }
    for name, (t1, t2, avg, tol) in want.items():
        table = {
            f"ans {r['question_id']} t{r['turn']}": math.nan if r["score"] == -1 else float(r["score"])
            for r in _rows(d / name)
            if r["model"] == "fixture-model"
        }
        scores, _ = score_mtbench(data, answers, TableScorer(table), SimpleNamespace(bootstrap=0, seed=0))
        got = scores["sections"]
        assert (got["turn_1"], got["turn_2"], got["mean"]) == pytest.approx((t1, t2, avg), abs=tol), name
        if name == "gpt-4_single.jsonl":  # FastChat's per-category means (its show_result idiom), to the digit
            cats = {k: v["score"] for k, v in scores["subsets"].items()}
            assert cats == {"coding": 3.5, "math": 5.0, "roleplay": 8.0, "stem": 3.6666666666666665, "writing": 7.6}


def test_mtbench_pairwise_win_rates_are_show_result_s(capsys):
    """lm-sys/FastChat @ 0e6d3e4b: fastchat/llm_judge/show_result.py `display_result_pairwise` (rows with an "error"
    verdict dropped; a tie in game 1 or games that disagree a tie for both models; --model-list checked on model_1
    only; pairwise-baseline keeps the rows naming the baseline and drops its own line; win_rate_adjusted counts a tie
    half), run unmodified in a throwaway venv (pandas 3.1.1, `pd.set_option("display.precision", 17)` to print every
    digit) on gpt-4_pair.jsonl (30 hand-made rows, the layout gen_judgment.py writes: both turns, three models and the
    baseline gpt-3.5-turbo, once as model_1). Printed (win, loss, tie, win_rate, loss_rate, win_rate_adjusted):
        --mode pairwise-baseline:  model-a 3 1 5 0.33333333333333331 0.11111111111111110 0.61111111111111116
                                   model-c 1 1 1 0.33333333333333331 0.33333333333333331 0.50000000000000000
                                   model-b 2 4 3 0.22222222222222221 0.44444444444444442 0.38888888888888890
        --mode pairwise-all:       model-a 5 2 8 ... 0.59999999999999998; gpt-3.5-turbo 6 6 9 ... 0.5;
                                   model-c 1 1 1 ... 0.5; model-b 3 6 6 0.20000000000000001 0.40000000000000002 0.4...
        --mode pairwise-baseline --baseline-model model-b:
                                   gpt-3.5-turbo 4 2 3 ... 0.61111111111111116; model-a 2 1 3 ... 0.58333333333333337
        --mode pairwise-all --model-list model-a model-c:
                                   model-a 5 2 8; model-c 0 0 1; model-b 1 2 3; gpt-3.5-turbo 1 3 6"""
    from align.cli.main import main
    from leaderboards.score_from import score_from

    pair = str(FIXTURES / "mtbench" / "gpt-4_pair.jsonl")
    want = {
        (): {
            "model-a": (3, 1, 5, 0.33333333333333331, 0.11111111111111110, 0.61111111111111116),
            "model-c": (1, 1, 1, 0.33333333333333331, 0.33333333333333331, 0.5),
            "model-b": (2, 4, 3, 0.22222222222222221, 0.44444444444444442, 0.38888888888888890),
        },
        (("mode", "pairwise-all"),): {
            "model-a": (5, 2, 8, 0.33333333333333331, 0.13333333333333333, 0.59999999999999998),
            "gpt-3.5-turbo": (6, 6, 9, 0.28571428571428570, 0.28571428571428570, 0.5),
            "model-c": (1, 1, 1, 0.33333333333333331, 0.33333333333333331, 0.5),
            "model-b": (3, 6, 6, 0.20000000000000001, 0.40000000000000002, 0.40000000000000002),
        },
        (("baseline", "model-b"),): {
            "gpt-3.5-turbo": (4, 2, 3, 0.44444444444444442, 0.22222222222222221, 0.61111111111111116),
            "model-a": (2, 1, 3, 0.33333333333333331, 0.16666666666666666, 0.58333333333333337),
        },
        (("mode", "pairwise-all"), ("model_list", "model-a,model-c")): {
            "model-a": (5, 2, 8, 0.33333333333333331, 0.13333333333333333, 0.59999999999999998),
            "model-c": (0, 0, 1, 0.0, 0.0, 0.5),
            "model-b": (1, 2, 3, 0.16666666666666666, 0.33333333333333331, 0.41666666666666669),
            "gpt-3.5-turbo": (1, 3, 6, 0.10000000000000001, 0.29999999999999999, 0.40000000000000002),
        },
    }
    for options, table in want.items():
        got = score_from("mtbench", [pair], dict(options))
        assert [g.model for g in got] == list(table), (
            options
        )  # show_result.py's order: win_rate_adjusted, highest first
        for g in got:
            c, r = g.counts, g.sections
            assert (c["win"], c["loss"], c["tie"], r["win_rate"], r["loss_rate"], r["win_rate_adjusted"]) == table[
                g.model
            ]
    assert main(["bench", "score", "mtbench", "--from", pair]) == 0
    assert "model-a: win_rate 0.333333, loss_rate 0.111111, win_rate_adjusted 0.611111" in capsys.readouterr().out
    assert main(["bench", "score", "mtbench", "--from", pair, "--option", "mode=single"]) == 2
    assert "holds pairwise (g1_winner, g2_winner) judgments" in capsys.readouterr().err
    assert main(["bench", "score", "mtbench", "--from", pair, "--option", "baseline=gpt-4"]) == 2
    assert "--option mode=pairwise-all" in capsys.readouterr().err


def test_arena_hard_scores_and_intervals_are_show_result_s():
    """lmarena/arena-hard-auto @ 0489bf38 (v0.1): `show_result.py` (`get_battles_from_row`, strong verdicts counted
    --weight times, null games dropped) and `utils_math.py` (`compute_mle_elo`: sklearn's unpenalised logistic
    regression; `get_bootstrap_result`: 100 rounds of pandas' `sample(frac=1, replace=True)` from numpy's global
    generator seeded 42; `get_win_rate_column`). Run as `python show_result.py` and `--weight 1` on two models'
    judgment files, read in the order its glob read them (model-y, then model-x). Printed there:
        weight 3: model-x 56.2 (-12.5, 15.3), model-y 46.4 (-16.0, 12.4);
                  stats 56.25 [43.76, 71.53], 46.43 [30.45, 58.78]
        weight 1: model-x 58.3 (-19.2, 20.4), model-y 40.9 (-16.8, 15.9)
    and its unrounded BT fit: Elo 1043.6577880274065 / 975.1408372357324, win rates 0.562500000364611 /
    0.4642857141930359 (the solver's tolerance: the closed form is 0.5625 and 13/28)."""
    from leaderboards.arena_hard import arena_hard_scores, read_judgments

    files = [FIXTURES / "arenahard" / "model-y.jsonl", FIXTURES / "arenahard" / "model-x.jsonl"]
    y, x = arena_hard_scores(read_judgments(files))
    assert (x.score, x.lower, x.upper) == (56.25, 43.76, 71.53)
    assert (y.score, y.lower, y.upper) == (46.43, 30.45, 58.78)
    assert x.printed() == "model-x: score 56.2 95% CI (-12.5, 15.3)"
    assert y.printed() == "model-y: score 46.4 95% CI (-16.0, 12.4)"
    assert (x.win_rate, y.win_rate) == pytest.approx((0.562500000364611, 0.4642857141930359), abs=1e-9)
    assert (x.elo, y.elo) == pytest.approx((1043.6577880274065, 975.1408372357324), abs=1e-6)
    assert (x.battles, y.battles) == (32, 28)
    y1, x1 = arena_hard_scores(read_judgments(files, weight=1))
    assert x1.printed() == "model-x: score 58.3 95% CI (-19.2, 20.4)"
    assert y1.printed() == "model-y: score 40.9 95% CI (-16.8, 15.9)"


def test_arena_hard_from_a_judge_through_eval_policy_scoring():
    """The same rules behind `align eval policy --bench arenahard`: a pointwise judge's scores become each prompt's
    two games (reference as A, then the policy as A), their battles the score; a judge that abstains drops the
    prompt's games, as a null verdict does in the reference."""
    from leaderboards.arena_hard import arena_hard_scores, game_battles
    from leaderboards.policy_bench import score_arenahard
    from leaderboards.policy_data import BenchData, BenchItem

    items = [BenchItem(str(i), [f"q{i}"], reference=f"ref {i}") for i in range(6)]
    data = BenchData("arenahard", "fixture", items)
    answers = [[f"pol {i}"] for i in range(6)]
    table = {f"ref {i}": 0.0 for i in range(6)}
    table.update({"pol 0": 1.0, "pol 1": 1.0, "pol 2": 0.0, "pol 3": -1.0, "pol 4": 2.0, "pol 5": math.nan})
    scores, rows = score_arenahard(data, answers, TableScorer(table), SimpleNamespace(bootstrap=0, seed=0))
    assert rows[0]["games"] == [{"score": "B>A"}, {"score": "A>B"}]  # the policy won both games
    assert rows[2]["games"] == [{"score": "A=B"}, {"score": "A=B"}] and rows[5]["games"] == [{"score": None}] * 2
    outcomes = [b for r in rows for b in game_battles(r["games"][0]["score"], r["games"][1]["score"])]
    assert outcomes == [1, 1, 1, 1, 0.5, 0.5, 0, 0, 1, 1]
    (want,) = arena_hard_scores([("policy", outcomes)])
    assert scores["sections"]["score"] == want.score / 100 == 0.7
    assert scores["intervals"]["score"] == [want.lower / 100, want.upper / 100]
    assert scores["extra"]["judged"]["games_without_verdict"] == 2


ARENA_JUDGE_CONFIG = """\
system_prompt: SYS
prompt_template: ["<|User Prompt|>\\n{question_1}\\n\\n<|A|>\\n{answer_1}\\n<|B|>\\n{answer_2}"]
regex_pattern: \\[\\[([AB<>=]+)\\]\\]
number_of_judgment_attempts: 2
temperature: 0
max_tokens: 10
"""
ARENA_GAMES = {  # (question, model's answer, baseline's answer) -> each game's replies, one per attempt
    ("2+2?", "4", "5"): (["B is right. My final verdict is: [[B>>A]]"], ["A is right: [[A>B]]"]),
    ("Name a colour.", "Red.", "Blue."): (["Both fine.", "Then: [[A=B]]"], ["[[B>A]] and [[B>A]]"]),
    ("Capital of France?", "Paris", "Lyon"): (["[[A>B]] no wait [[B>A]]"], ["no verdict", "still none"]),
    ("Say hi.", "hi", "hello"): (["[[A>>>B]]"], ["[[]] then [[B>A]]\n"]),
}
ARENA_ROWS = [  # what the reference wrote for them
    [
        ("<|User Prompt|>\n2+2?\n\n<|A|>\n5\n<|B|>\n4", "\nB is right. My final verdict is: [[B>>A]]", "B>>A"),
        ("<|User Prompt|>\n2+2?\n\n<|A|>\n4\n<|B|>\n5", "\nA is right: [[A>B]]", "A>B"),
    ],
    [
        ("<|User Prompt|>\nName a colour.\n\n<|A|>\nBlue.\n<|B|>\nRed.", "\nBoth fine.\nThen: [[A=B]]", "A=B"),
        ("<|User Prompt|>\nName a colour.\n\n<|A|>\nRed.\n<|B|>\nBlue.", "\n[[B>A]] and [[B>A]]", "B>A"),
    ],
    [
        ("<|User Prompt|>\nCapital of France?\n\n<|A|>\nLyon\n<|B|>\nParis", "\n[[A>B]] no wait [[B>A]]", None),
        ("<|User Prompt|>\nCapital of France?\n\n<|A|>\nParis\n<|B|>\nLyon", "\nno verdict\nstill none", None),
    ],
    [
        ("<|User Prompt|>\nSay hi.\n\n<|A|>\nhello\n<|B|>\nhi", "\n[[A>>>B]]", "A>>>B"),
        ("<|User Prompt|>\nSay hi.\n\n<|A|>\nhi\n<|B|>\nhello", "\n[[]] then [[B>A]]\n", "B>A"),
    ],
]


def test_arena_hard_judging_with_its_own_judge_config_is_gen_judgment_s(tmp_path):
    """`align eval policy --bench arenahard --judge judge:MODEL --judge-prompts judge_config.yaml`: each question's
    two games (the baseline as A, then the model), the judge asked again while it gave no verdict, the verdict read by
    the config's pattern, as arena-hard-auto v0.1 does. The rows are what its own code wrote for the same replies:
    lmarena/arena-hard-auto @ 0489bf38, gen_judgment.py's `judgment` and `get_score` run from the snapshot with its
    API call (`get_answer`) answering from the replies above, the same judge settings, one question per call:
    `judgment(question=..., answer=..., baseline_answer=..., reference=None, configs=..., regex_pattern=...)`. Several
    distinct verdicts give none and stop asking; a label outside the five (`A>>>B`) is kept in the row and drops its
    game when scored."""
    from leaderboards.arena_hard import arena_hard_scores, game_battles
    from leaderboards.arenahard_judge import CONTINUE, ArenaHardJudge, read_judge_config
    from leaderboards.policy_bench import native_arenahard, score_arenahard
    from leaderboards.policy_data import BenchData, BenchItem

    (tmp_path / "judge_config.yaml").write_text(ARENA_JUDGE_CONFIG, encoding="utf-8")
    config = read_judge_config(tmp_path / "judge_config.yaml")
    items = [BenchItem(f"q{k}", [q], reference=base) for k, (q, _, base) in enumerate(ARENA_GAMES)]
    answers = [[a] for _, a, _ in ARENA_GAMES]
    replies = {}
    for rows, games in zip(ARENA_ROWS, ARENA_GAMES.values(), strict=True):
        for (user, _, _), said in zip(rows, games, strict=True):
            replies[user] = said
    asked = []

    def generate(convs):
        asked.extend(convs)
        out = []
        for c in convs:
            assert c[0] == {"role": "system", "content": "SYS"}
            attempt = sum(m["role"] == "assistant" for m in c)
            assert all(m["content"] == CONTINUE for m in c[3::2])  # every retry asks the reference's question
            out.append(replies[c[1]["content"]][attempt])
        return out

    judge = ArenaHardJudge("judge", config, generate, 10)
    data = BenchData("arenahard", "fixture", items)
    scores, rows = score_arenahard(data, answers, judge, SimpleNamespace(bootstrap=0, seed=0))
    want = [[{"user_prompt": u, "judgment": j, "score": v} for u, j, v in games] for games in ARENA_ROWS]
    assert [r["games"] for r in rows] == want
    assert len(asked) == 8 + 2  # two games a question, then the two that found no verdict asked once more
    outcomes = [b for r in rows for b in game_battles(r["games"][0]["score"], r["games"][1]["score"])]
    # q1 won strongly (x3), then won; q2 a tie, then lost; q3 no verdict; q4 game 1 dropped, game 2 lost
    assert outcomes == [1, 1, 1, 1, 0.5, 0, 0]
    (ah,) = arena_hard_scores([("policy", outcomes)])
    assert scores["sections"]["score"] == ah.score / 100
    assert scores["extra"]["judged"]["games_without_verdict"] == 2
    name, text = native_arenahard(data, answers, rows, "m", judge.name)
    assert name == "model_judgment.jsonl"
    assert [json.loads(line)["games"] for line in text.splitlines()] == want
    with pytest.raises(UserError, match="temperature: 0.7; only 0"):
        (tmp_path / "hot.yaml").write_text(ARENA_JUDGE_CONFIG.replace("temperature: 0", "temperature: 0.7"))
        read_judge_config(tmp_path / "hot.yaml")
    (tmp_path / "bad.yaml").write_text("system_prompt: 3\nprompt_template: []\n", encoding="utf-8")
    with pytest.raises(UserError, match="regex_pattern: missing.*number_of_judgment_attempts: missing"):
        read_judge_config(tmp_path / "bad.yaml")


ARENA_V2 = FIXTURES / "arenahard_judge_v2"
"""Made-up files in the layout of arena-hard-auto v2.0's: config/arena-hard-v2.0.yaml, utils/judge_utils.py (two
system prompts, two baselines), question.jsonl and one answer file holding each category's baseline answers;
canned.json the policy's answer and the judge's reply in each game; model_judgment.jsonl what the reference wrote."""


def test_arena_hard_v2_judging_with_its_own_config_is_gen_judgment_s(tmp_path):
    """`align eval policy --bench arenahard --judge judge:MODEL --judge-prompts arena-hard-v2.0.yaml --judge-settings
    judge_utils.py`: the system prompt of each question's category, one reply per game, the verdict by the config's
    patterns in turn over the reply in upper case (the first pattern that matches gives its last match), the rows in
    v2.0's layout. model_judgment.jsonl is what the reference's own command wrote for the same files and replies:
    lmarena/arena-hard-auto @ 196f6b826783b3da7310e361a805fa36f0be83f3, gen_judgment.py (`__main__`,
    `judgment`, `pairwise_judgment`, `get_score`), run in a copy of the snapshot whose utils/judge_utils.py was
    replaced by the fixture's, the fixture's questions and answers laid out under data/made-up/, and its API
    client (`registered_api_completion`) answering each user message with the reply canned.json gives it:
    `python gen_judgment.py --setting-file arena-hard-v2.0.yaml --endpoint-file api.yaml` (one worker, so the rows
    in question order). The cases: a strong verdict; a verdict in lower case (read upper-cased); only the second
    pattern matching; two verdicts (the last wins); no verdict (null); the first pattern matching though the second
    matches earlier; a mirrored label (`B<A`, one of v2.0's ten); a label outside them (`A>>>B`, kept in the row,
    dropped when scored)."""
    from leaderboards.arena_hard import arena_hard_scores, game_battles, read_judgment_rows
    from leaderboards.arena_hard_style import v2_plain_scores
    from leaderboards.arenahard_judge import ArenaHardJudge, read_judge_config
    from leaderboards.policy_bench import native_arenahard, score_arenahard
    from leaderboards.policy_data import read_arenahard

    config = read_judge_config(ARENA_V2 / "arena-hard-v2.0.yaml", ARENA_V2 / "judge_utils.py")
    assert config.version == "v2.0" and config.attempts == 1 and len(config.patterns) == 2
    assert {c: (s.baseline, s.system_prompt) for c, s in config.categories.items()} == {
        "hard_prompt": ("base-h", "Judge the hard prompt."),
        "coding": ("base-h", "Judge the hard prompt."),
        "creative_writing": ("base-c", "Judge the creative writing."),  # "Judge the " + "creative writing."
    }
    data = read_arenahard(str(ARENA_V2 / "question.jsonl"), str(ARENA_V2 / "baselines.jsonl"))
    assert not data.problems
    canned = json.loads((ARENA_V2 / "canned.json").read_text(encoding="utf-8"))
    answers = [[canned[it.id]["answer"]] for it in data.items]
    replies = {}  # (system prompt, user message) -> the canned reply
    for line in (ARENA_V2 / "model_judgment.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        for game, said in zip(row["games"], canned[row["uid"]]["replies"], strict=True):
            replies[tuple(m["content"] for m in game["prompt"])] = said
    asked = []

    def generate(convs):
        asked.append(len(convs))
        return [replies[tuple(m["content"] for m in c)] for c in convs]  # KeyError: a prompt the reference did not ask

    judge = ArenaHardJudge("made-up-judge", config, generate, 50)
    judge.check(data.items)
    scores, rows = score_arenahard(data, answers, judge, SimpleNamespace(bootstrap=0, seed=0))
    assert asked == [8]  # both games of every question in one batch, each asked once
    name, text = native_arenahard(data, answers, rows, "m", judge.name)
    assert name == "model_judgment.jsonl"
    assert text == (ARENA_V2 / "model_judgment.jsonl").read_text(
        encoding="utf-8"
    )  # the reference's rows, byte for byte
    verdicts = [(r["games"][0]["score"], r["games"][1]["score"]) for r in rows]
    assert verdicts == [("B>>A", "A>B"), ("A=B", "B>A"), (None, "B<A"), ("B>A", "A>>>B")]
    outcomes = [b for g1, g2 in verdicts for b in game_battles(g1, g2, labels=judge.labels)]
    # h1 won strongly (x3), then won; c1 a tie, then lost; k1 game 1 no verdict, game 2 won (B<A, the model as A);
    # h2 won, then game 2 dropped (A>>>B is no label)
    assert outcomes == [1, 1, 1, 1, 0.5, 0, 1, 1]
    (ah,) = arena_hard_scores([("policy", outcomes)])
    assert scores["sections"]["score"] == ah.score / 100
    assert scores["extra"]["judged"]["games_without_verdict"] == 1
    # the written rows read back as v2.0 judgment rows (`align bench score arenahard --option version=v2.0`)
    written = tmp_path / "m.jsonl"
    written.write_text(text, encoding="utf-8")
    ((model, judged),) = read_judgment_rows([written])
    assert model == "m" and [r.verdicts for r in judged] == verdicts
    with pytest.raises(UserError, match="m.jsonl line 4: verdict 'A>>>B' is not one of v2.0's"):
        v2_plain_scores([(model, judged)])  # as v2.0's show_result stops on it (a KeyError in `label_to_score`)
    assert v2_plain_scores([(model, judged[:3])], category="creative_writing").scores[0].battles == 2

    # a category the settings lack, and a baseline answer by another model than the category's: every one named
    (tmp_path / "q.jsonl").write_text(
        (ARENA_V2 / "question.jsonl").read_text().replace('"coding"', '"codng"'), encoding="utf-8"
    )
    (tmp_path / "b.jsonl").write_text(
        (ARENA_V2 / "baselines.jsonl").read_text().replace('"base-c"', '"base-h"'), encoding="utf-8"
    )
    bad = read_arenahard(str(tmp_path / "q.jsonl"), str(tmp_path / "b.jsonl"))
    with pytest.raises(UserError, match=r"'codng' \(question k1\) is not in JUDGE_SETTINGS of .*judge_utils.py") as e:
        judge.check(bad.items)
    assert "did you mean 'coding'" in str(e.value)
    assert "the creative_writing questions (c1) are judged against base-c's answers" in str(e.value)
    # the config's own problems, at once; a v0.1 file is still read as v0.1
    with pytest.raises(UserError, match="add --judge-settings utils/judge_utils.py"):
        read_judge_config(ARENA_V2 / "arena-hard-v2.0.yaml")
    cfg = (ARENA_V2 / "arena-hard-v2.0.yaml").read_text()
    (tmp_path / "bad.yaml").write_text(
        cfg.replace("reference: null", "reference: [gpt-4]").replace("{ANSWER_B}", "{ANSWER_C}"), encoding="utf-8"
    )
    with pytest.raises(UserError, match=r"prompt_template: cannot be filled \(KeyError: 'ANSWER_C'\).*reference:"):
        read_judge_config(tmp_path / "bad.yaml", ARENA_V2 / "judge_utils.py")
    (tmp_path / "code.py").write_text("JUDGE_SETTINGS = {'x': dict(baseline='b', system_prompt='s')}\n")
    with pytest.raises(UserError, match="line 1: `dict\\(baseline='b', system_prompt='s'\\)` is code"):
        read_judge_config(ARENA_V2 / "arena-hard-v2.0.yaml", tmp_path / "code.py")
    (tmp_path / "judge_config.yaml").write_text(ARENA_JUDGE_CONFIG, encoding="utf-8")
    assert read_judge_config(tmp_path / "judge_config.yaml").version == "v0.1"
    with pytest.raises(UserError, match="drop --judge-settings"):
        read_judge_config(tmp_path / "judge_config.yaml", ARENA_V2 / "judge_utils.py")


ALPACA_ROWS = [  # instruction, output_1 (the reference), output_2 (the model)
    ("Say hi.", "hello", "hi"),
    ("What is 2+2?", "4", "5"),
    ("Name a fruit.", "apple", "pear"),
    ("Pick a letter.", "p", "q"),
    ("Count to 3.", "1 2 3", "1, 2, 3"),
    ("Repeat: ok", "ok", "ok"),
]
ALPACA_TOP = {  # the output shown first -> the judge's five most likely first tokens (text, logprob)
    "hello": [("m", -0.1), ("M", -2.5), ("The", -5.0), ("Both", -6.0), ("I", -7.0)],
    "hi": [("m", -0.1), ("M", -2.5), ("The", -5.0), ("Both", -6.0), ("I", -7.0)],
    "4": [("M", -0.05), ("The", -3.0), ("Model", -4.0), ("A", -5.0), ("B", -6.0)],
    "5": [("M", -0.05), ("The", -3.0), ("Model", -4.0), ("A", -5.0), ("B", -6.0)],
    "apple": [("The", -0.5), ("Model", -1.0), ("A", -2.0), ("B", -3.0), ("C", -4.0)],
    "pear": [("The", -0.5), ("Model", -1.0), ("A", -2.0), ("B", -3.0), ("C", -4.0)],
    "p": [("m", -1.0), ("M", -1.0), ("x", -2.0), ("y", -3.0), ("z", -4.0)],
    "q": [("m", -1.0), ("M", -1.0), ("x", -2.0), ("y", -3.0), ("z", -4.0)],
    "1 2 3": [("M", -0.3), ("m", -1.4), ("x", -2.0), ("y", -3.0), ("z", -4.0)],
    "1, 2, 3": [("M", -0.3), ("m", -1.4), ("x", -2.0), ("y", -3.0), ("z", -4.0)],
}
ALPACA_PROMPT = """<|im_start|>system
You judge.
<|im_end|>
<|im_start|>user
## Instruction

{
    "instruction": \"\"\"{instruction}\"\"\",
}

{
    {"model_identifier": "m", "output": \"\"\"{output_1}\"\"\"},
    {"model_identifier": "M", "output": \"\"\"{output_2}\"\"\"}
}

## Best Model Identifier
<|im_end|>"""


def test_alpacaeval_weighted_judge_with_its_own_prompt_is_the_annotator_s(tmp_path):
    """`align eval policy --bench alpacaeval --judge judge:MODEL --judge-prompts alpaca_eval_clf.txt`: the outputs
    switched per instruction as the reference seeds it, the prompt filled and split into chat messages, the
    preference from the first token's top-5 log-probabilities of m and M. The preferences are what alpaca_eval's
    own pipeline returned for the same top-5 log-probabilities: tatsu-lab/alpaca_eval @ cd543a1,
    `PairwiseAnnotator(annotators_config=<a configs.yaml of weighted_alpaca_eval_gpt4_turbo's settings and the prompt
    above>, caching_path=None).annotate_head2head(outputs_1=<the references>, outputs_2=<the answers>,
    is_ordered=True)` with `annotators.base.get_fn_completions` returning the canned replies (the annotator as
    `alpaca_eval evaluate` builds it: seed 0, so the switch is drawn with "0"; a `SinglePairwiseAnnotator` built
    alone defaults to 123). It returned no preference where neither token is among the five (an abstention here);
    identical outputs are 1.5 without asking (`PairwiseAnnotatorLocal._preprocess`)."""
    from leaderboards.alpacaeval_judge import AlpacaEvalJudge, chatml, fill, read_prompt, switched, weighted
    from leaderboards.policy_bench import native_alpacaeval, score_pairwise
    from leaderboards.policy_data import BenchData, BenchItem

    (tmp_path / "clf.txt").write_text(ALPACA_PROMPT, encoding="utf-8")
    template = read_prompt(tmp_path / "clf.txt")
    asked = []

    def top_logprobs(convs):
        asked.extend(convs)
        return [ALPACA_TOP[c[1]["content"].split('"output": """', 1)[1].split('"""', 1)[0]] for c in convs]

    judge = AlpacaEvalJudge("judge", weighted(template), top_logprobs)
    items = [BenchItem(str(k), [q], reference=ref) for k, (q, ref, _) in enumerate(ALPACA_ROWS)]
    answers = [[a] for _, _, a in ALPACA_ROWS]
    notes = judge.annotations(items, [a[0] for a in answers])
    want = {  # instruction -> (switched, preference) as the reference printed them
        "Say hi.": (False, 1.0831726964939223),
        "What is 2+2?": (False, 2.0),
        "Pick a letter.": (True, 1.5),
        "Count to 3.": (False, 1.7502601055951177),
    }
    for (q, _, _), note in zip(ALPACA_ROWS, notes, strict=True):
        if q in want:
            assert (note["is_switched_outputs"], note["preference"]) == want[q], q
    assert math.isnan(notes[2]["preference"]) and notes[5]["preference"] == 1.5
    assert switched("Name a fruit.") == notes[2]["is_switched_outputs"]
    assert len(asked) == 5  # the identical pair is not asked
    assert asked[1] == chatml(fill(ALPACA_PROMPT, {"instruction": "What is 2+2?", "output_1": "4", "output_2": "5"}))
    assert asked[1][0] == {"role": "system", "content": "You judge."} and asked[1][1]["role"] == "user"
    data = BenchData("alpacaeval", "fixture", items)
    settings = SimpleNamespace(bootstrap=0, seed=0, lc_glm="toolkit", lc_table=None)
    scores, rows = score_pairwise(data, answers, judge, settings)
    assert scores["extra"]["judged"]["abstained"] == 1
    name, text = native_alpacaeval(data, answers, rows, "m", "judge")
    annotations = json.loads(text)
    assert [a["preference"] for a in annotations] == [
        None if math.isnan(n["preference"]) else n["preference"] for n in notes
    ]
    assert [a["is_switched_outputs"] for a in annotations] == [n["is_switched_outputs"] for n in notes]
    (tmp_path / "plain.txt").write_text("Judge {instruction} {output_1}", encoding="utf-8")
    with pytest.raises(UserError, match="no {output_2}.*not ChatML"):
        read_prompt(tmp_path / "plain.txt")


ALPACA_ANNOTATORS = FIXTURES / "alpacaeval_annotators"


def test_alpacaeval_annotators_from_their_configs_are_the_reference_s(tmp_path):
    """`--judge-prompts evaluators_configs/NAME/configs.yaml`: an AlpacaEval annotator read from its own config (its
    prompt_template, parser, parser kwargs, decoding, output switch). Four made-up annotators in that layout
    (tests/fixtures/reference/alpacaeval_annotators: regex_parser by default, ranking_parser, ranking_parser with
    its own model name and no switch, logprob_parser binarized) judge eight pairs from the canned replies in
    cases.json; the preferences are what tatsu-lab/alpaca_eval @ cd543a1's own pipeline returned for them:
    `PairwiseAnnotator(annotators_config=<the config>, caching_path=None).annotate_head2head(outputs_1=<references>,
    outputs_2=<answers>, is_ordered=True)` with `annotators.base.get_fn_completions` returning the canned replies
    (selected by the query in the prompt). The cases: a reply matching neither pattern, both, the second pattern
    after a cut (whose remainder `^` matches again), an empty reply; a ranking with text around it, a dict, rank 3,
    rank 0, rank True and 2.0, a missing model; a tie of the two digits, neither digit among the five, one of them
    alone; identical outputs (1.5 unasked)."""
    from leaderboards.alpacaeval_judge import AlpacaEvalJudge, read_annotator
    from leaderboards.policy_data import BenchItem

    cases = json.loads((ALPACA_ANNOTATORS / "cases.json").read_text(encoding="utf-8"))
    items = [BenchItem(str(k), [q], reference=ref) for k, (q, ref, _) in enumerate(cases["rows"])]
    answers = [a for _, _, a in cases["rows"]]
    nan = math.nan
    want = {  # annotator -> each row's preference as the reference returned it (None there: NaN here)
        "pick_regex": [1.0, 2.0, nan, nan, nan, 1.5, 2.0, nan],
        "rank_python": [1.0, 2.0, nan, 2.0, nan, 1.5, nan, 2.0],
        "rank_fixed": [2.0, 1.0, nan, 2.0, 1.0, 1.5, nan, nan],
        "binary_logprob": [1.0, 2.0, 1.0, nan, 2.0, 1.5, 2.0, 2.0],
    }
    for name, replies in cases["replies"].items():
        annotator = read_annotator(ALPACA_ANNOTATORS / name)  # the directory: its configs.yaml
        asked = []

        def reply(convs, replies=replies, asked=asked):
            asked.extend(convs)
            return [replies[c[-1]["content"].split("## Query\n", 1)[1].split("\n\n## Answer (a)", 1)[0]] for c in convs]

        notes = AlpacaEvalJudge("judge", annotator, reply).annotations(items, answers)
        got = [n["preference"] for n in notes]
        assert [None if math.isnan(g) else g for g in got] == [None if math.isnan(w) else w for w in want[name]], name
        assert len(asked) == 7  # the identical pair is not asked
        assert ("is_switched_outputs" in notes[0]) == (name != "rank_fixed")
        if annotator.reads == "text":
            assert notes[1]["raw_completion"] == replies["What is 3+4?"]
    regex = read_annotator(ALPACA_ANNOTATORS / "pick_regex" / "configs.yaml")
    assert (regex.parser, regex.max_tokens, regex.randomize) == ("regex_parser", 20, True)
    assert read_annotator(ALPACA_ANNOTATORS / "rank_python").max_tokens == 60  # max_tokens_to_sample
    assert read_annotator(ALPACA_ANNOTATORS / "rank_fixed").randomize is False
    # what a local judge cannot run, or the reference stops on: every problem of a config at once
    bad = tmp_path / "configs" / "bad"
    bad.mkdir(parents=True)
    (bad / "configs.yaml").write_text(
        """bad:
  prompt_template: "bad/missing.txt"
  completions_kwargs: {max_tokens: 100, temperature: 0.9, tools: [x]}
  fn_completion_parser: "ranking_parser"
  completion_parser_kwargs: {model_1_name: a, other: 1}
  batch_size: 5
  processors_to_kwargs: {JsonKeysToColumnProcessor: {}}
  shuffle: true
""",
        encoding="utf-8",
    )
    with pytest.raises(UserError) as e:
        read_annotator(bad / "configs.yaml")
    for text in (
        "shuffle: not an annotator setting",
        "other is not ranking_parser's",
        "batch_size: 5 instructions a prompt",
        "completions_kwargs.tools: function calling",
        "JsonKeysToColumnProcessor is not applied here",
        "temperature: 0.9; the judge writes greedily",
        "prompt_template: bad/missing.txt is not a file",
    ):
        assert text in str(e.value), text
    refused = {
        "fn_completion_parser: lmsys_parser": "its tie, 0, fails",
        "fn_completion_parser: pipeline_meta_parser": "a function call's arguments",
        "completion_parser_kwargs: {outputs_to_match: {0: 'x', 2: '(?:^|y)'}}": "key 0 is not a preference in 1..2",
        "{fn_completion_parser: logprob_parser, completion_parser_kwargs: {numerator_token: m, "
        "denominator_tokens: [M], log_prob_index: -1}}": "not among the denominator_tokens",
    }
    for setting, message in refused.items():
        text = f"bad:\n  prompt_template: x.txt\n  {setting}\n" if not setting.startswith("{") else f"bad: {setting}"
        (bad / "configs.yaml").write_text(text, encoding="utf-8")
        with pytest.raises(UserError, match=re.escape(message)):
            read_annotator(bad / "configs.yaml")
    (bad / "configs.yaml").write_text(
        "bad: {completion_parser_kwargs: {outputs_to_match: {1: 'a', 2: '(?:^|y)'}}}", encoding="utf-8"
    )
    with pytest.raises(UserError, match=re.escape("outputs_to_match.2: '(?:^|y)' matches the empty text")):
        read_annotator(bad / "configs.yaml")
    # no max_tokens: a text parser writes up to 2048 tokens (the API would write to the end of the context)
    (bad / "x.txt").write_text("<|im_start|>user\n{instruction} {output_1} {output_2}\n<|im_end|>", encoding="utf-8")
    (bad / "configs.yaml").write_text(
        "bad: {prompt_template: bad/x.txt, fn_completion_parser: ranking_parser}", encoding="utf-8"
    )
    assert read_annotator(bad / "configs.yaml").max_tokens == 2048
    (bad / "configs.yaml").write_text("one: {batch_size: 1}\ntwo: {batch_size: 1}\n", encoding="utf-8")
    with pytest.raises(UserError, match="a pool of 2 annotators"):
        read_annotator(bad / "configs.yaml")


ARENA_STYLE = FIXTURES / "arenahard_style"
V01_STYLE = {
    # control: (the coefficients line, {model: (score, lower, upper)} as `stats` holds them)
    "markdown,length": (
        "Style Coefficients: {'sum_assistant_a_tokens': 0.588, 'header_count_a': -0.501, 'list_count_a': 0.769, "
        "'bold_count_a': 0.294}",
        {"model-a": (62.97, 53.3, 72.69), "model-b": (47.41, 34.52, 60.12), "model-c": (71.06, 59.34, 81.66)}
        | {"model-d": (31.89, 20.04, 47.02)},
    ),
    "length": (
        "Style Coefficients: {'sum_assistant_a_tokens': 0.717}",
        {"model-a": (60.73, 52.23, 69.78), "model-b": (52.53, 38.99, 63.7), "model-c": (58.99, 48.1, 69.07)}
        | {"model-d": (43.25, 32.73, 57.16)},
    ),
    "markdown": (
        "Style Coefficients: {'header_count_a': -0.551, 'list_count_a': 0.862, 'bold_count_a': 0.324}",
        {"model-a": (58.76, 49.05, 69.96), "model-b": (53.24, 42.71, 65.37), "model-c": (59.57, 47.97, 72.91)}
        | {"model-d": (44.58, 32.01, 60.13)},
    ),
}
V2_STYLE = {
    # model: (median, 5% and 95% quantiles of the rounds' win rates, the full-data fit's win rate)
    "model-a": (0.5904534161090851, 0.509044560790062, 0.668568155169487, 0.5931174159049988),
    "model-b": (0.5245474278926849, 0.4329396039247513, 0.6263943761587143, 0.5282928943634033),
    "model-c": (0.5948286056518555, 0.4698193550109863, 0.71062673330307, 0.5853647589683533),
    "model-d": (0.43657204508781433, 0.27223330587148664, 0.5588251024484634, 0.4405744969844818),
}


V2_EXACT = torch.backends.cpu.get_cpu_capability() == "AVX2"
"""The reference's v2.0 numbers were printed on a CPU whose torch kernels are AVX2's. Its float32 L-BFGS stops after
50 steps, where the float32 sums of that CPU's kernels left it: on a CPU with AVX-512 the same code lands up to 1.2e-3
away in a win rate (measured on an Intel Xeon, in one process and in a test worker), a printed score 0.1-0.2 away.
Where the kernels are AVX2's the numbers are checked to the last bit (1e-6); elsewhere to 2.5e-3, the reference's own
spread across CPUs."""
V2_TOL = 1e-6 if V2_EXACT else 2.5e-3


def _printed_numbers(line: str) -> list[float]:
    return [float(x) for x in re.findall(r"[-+]?\d+\.\d+", line)]


def _style_judgments(version: str) -> list:
    from leaderboards.arena_hard import read_judgment_rows

    judge = {"v0.1": "gpt-4-1106-preview", "v2.0": "gpt-4.1"}[version]
    return read_judgment_rows([ARENA_STYLE / version / "model_judgment" / judge / f"model-{m}.jsonl" for m in "abcd"])


def test_arena_hard_style_control_is_show_result_s():
    """lmarena/arena-hard-auto @ 0489bf38 (v0.1): `show_result.py --style-control`, `--length-control-only`,
    `--markdown-control-only` and `--style-control --weight 1` (`get_battles_from_row`; `utils_math.py`
    `construct_style_matrices`, `fit_bt`: scikit-learn's penalised logistic regression,
    `get_bootstrap_result_style_control`: 100 rounds of `np.random.choice` from numpy's generator, seeded 42 on
    import; `get_win_rate_column`) on four models' judgment files and five answer files with made-up `conv_metadata`
    (arenahard_style/v0.1: 30 prompts; strong verdicts, ties, null verdicts), the judgment files globbed in sorted
    order. Run from the snapshot in a venv outside the project (pandas 3.1.1, numpy 2.4.6, scikit-learn 1.9.1; numpy 2
    has no `np.NAN`, which its `predict_win_rate` names: aliased to `np.nan` for the run). Printed there, per model
    the score and its 95% CI:
        --style-control: c 71.1 (-11.7, 10.6), a 63.0 (-9.7, 9.7), b 47.4 (-12.9, 12.7), d 31.9 (-11.9, 15.1)
        --length-control-only: a 60.7 (-8.5, 9.1), c 59.0 (-10.9, 10.1), b 52.5 (-13.5, 11.2), d 43.2 (-10.5, 13.9)
        --markdown-control-only: c 59.6 (-11.6, 13.3), a 58.8 (-9.7, 11.2), b 53.2 (-10.5, 12.1), d 44.6 (-12.6, 15.6)
        --style-control --weight 1: c 68.4 (-18.8, 17.1), a 65.4 (-15.5, 12.4), b 44.9 (-13.3, 14.1), d 32.2 (-14.2,
        22.4)
    each with its `Style Coefficients` line (V01_STYLE); its `stats` (score, lower, upper at 0.01) in V01_STYLE; for
    --style-control the unrounded win rates 0.6297134252125265 (a), 0.47413210557594854 (b), 0.7105697303443006 (c),
    0.31889134778952827 (d) and coefficients 0.5877108383462976, -0.5010686311471466, 0.7692372992863437,
    0.2944599939327746 (the same scikit-learn: equal to the last bit here)."""
    from leaderboards.arena_hard_style import style_scores

    judged = _style_judgments("v0.1")
    answers = ARENA_STYLE / "v0.1" / "model_answer"
    fits = {control: style_scores(judged, answers, "v0.1", control=control) for control in V01_STYLE}
    for control, (line, stats) in V01_STYLE.items():
        assert fits[control].line == line
        assert {s.model: (s.score, s.lower, s.upper) for s in fits[control].scores} == stats
    fit = fits["markdown,length"]  # --style-control
    by = {s.model: s for s in fit.scores}
    assert by["model-c"].line == "model-c: score 71.1 95% CI (-11.7, 10.6)"
    assert by["model-a"].line == "model-a: score 63.0 95% CI (-9.7, 9.7)"
    assert by["model-d"].line == "model-d: score 31.9 95% CI (-11.9, 15.1)"
    assert [by[m].win_rate for m in ("model-a", "model-b", "model-c", "model-d")] == pytest.approx(
        [0.6297134252125265, 0.47413210557594854, 0.7105697303443006, 0.31889134778952827], abs=1e-12
    )
    want = [0.5877108383462976, -0.5010686311471466, 0.7692372992863437, 0.2944599939327746]
    assert list(fit.coefficients.values()) == pytest.approx(want, abs=1e-12)
    assert [by[m].battles for m in ("model-a", "model-b", "model-c", "model-d")] == [109, 78, 95, 88]
    w1 = {s.model: s.line for s in style_scores(judged, answers, "v0.1", weight=1).scores}
    assert w1["model-c"] == "model-c: score 68.4 95% CI (-18.8, 17.1)"
    assert w1["model-d"] == "model-d: score 32.2 95% CI (-14.2, 22.4)"
    assert w1["model-b"] == "model-b: score 44.9 95% CI (-13.3, 14.1)"


def test_arena_hard_v2_without_style_control_is_show_result_s(capsys):
    """lmarena/arena-hard-auto @ 196f6b82 (v2.0): `show_result.py --judge-names gpt-4.1` without --control-features
    (`load_judgments`, the hard_prompt rows, `print_leaderboard`: per model `groupby("model").sample(frac=1.0,
    replace=True)` 100 times, the mean of the rounds' means and their 5% / 95% grouped quantiles) on the fixture's
    v2.0 judgments, run outside the project (pandas 3.1.1, numpy 2.4.6) after `np.random.seed(42)`, which makes its
    draws ours (RandomState(42); the reference never seeds them). Printed there:
        model-d 62.1 (-8.2 / +7.2), model-b 61.4 (-7.0 / +9.7), model-a 52.2 (-7.8 / +7.3),
        o3-mini-2025-01-31 50.0 (-0.0 / +0.0), model-c 41.2 (-6.2 / +7.2)
    and, read from its bootstrap frame, the means and bounds below (equal here to the last bit: no float32)."""
    from align.cli.main import main
    from leaderboards.arena_hard_style import v2_plain_scores

    want = {  # model: (mean of the rounds' means, 5% and 95% quantiles), as the reference's frame holds them
        "model-a": (0.5218396226415094, 0.44339622641509435, 0.5952830188679245),
        "model-b": (0.614423076923077, 0.5442307692307692, 0.7115384615384616),
        "model-c": (0.41244680851063825, 0.35079787234042553, 0.4843085106382979),
        "model-d": (0.62125, 0.5394886363636364, 0.6931818181818182),
    }
    fit = v2_plain_scores(_style_judgments("v2.0"))
    by = {s.model: s for s in fit.scores}
    for model, (mean, lo, hi) in want.items():
        assert by[model].win_rate == mean
        assert (by[model].lower, by[model].upper) == pytest.approx((lo * 100, hi * 100), abs=1e-12)
    assert [by[m].line for m in ("model-d", "model-b", "model-a", "model-c")] == [
        "model-d: score 62.1 90% CI (-8.2 / +7.2)",
        "model-b: score 61.4 90% CI (-7.0 / +9.7)",
        "model-a: score 52.2 90% CI (-7.8 / +7.3)",
        "model-c: score 41.2 90% CI (-6.2 / +7.2)",
    ]
    assert [by[m].battles for m in ("model-a", "model-b", "model-c", "model-d")] == [106, 78, 94, 88]
    assert [s.model for s in fit.scores] == ["model-d", "model-b", "model-a", "model-c"]  # as printed: by score
    files = [f"--from={ARENA_STYLE / 'v2.0' / 'model_judgment' / 'gpt-4.1' / f'model-{m}.jsonl'}" for m in "abcd"]
    assert main(["bench", "score", "arenahard", *files, "--option", "version=v2.0", "--json"]) == 0
    got = {m["model"]: m for m in json.loads(capsys.readouterr().out)}
    assert got["model-c"]["sections"]["win_rate"] == want["model-c"][0]
    assert main(["bench", "score", "arenahard", *files, "--option", "version=v2.0", "--option", "answers=x"]) == 2
    assert "only style control reads it" in capsys.readouterr().err


def test_arena_hard_v2_style_control_is_show_result_s():
    """lmarena/arena-hard-auto @ 196f6b82 (v2.0): `show_result.py --judge-names gpt-4.1 --control-features markdown
    length` (`load_judgments`, `print_leaderboard_with_style_features`; `utils/math_utils.py` `one_hot_encode`,
    `bootstrap_pairwise_model`, `fit_pairwise_model`: torch L-BFGS, `to_winrate_probabilities`) on the same prompts in
    v2.0's layout (arenahard_style/v2.0: `uid`, `category`, mirrored labels such as `A<<B`, rows with a null game,
    three creative_writing rows per model that --category hard_prompt leaves out; answers with `metadata`), globbed in
    sorted order, in a venv outside the project (pandas 3.1.1, numpy 2.4.6, torch 2.13.0+cpu). It draws its bootstrap
    from numpy's global generator and never seeds it: run with `np.random.seed(42)` first, which makes its draws ours
    (RandomState(42)). Printed there:
        model-c 59.5 (-12.5 / +11.6), model-a 59.0 (-8.1 / +7.8), model-b 52.5 (-9.2 / +10.2),
        o3-mini-2025-01-31 50.0 (-0.0 / +0.0), model-d 43.7 (-16.4 / +12.2)
        Feature Coefs: tensor([ 0.7221, -0.1633,  0.2237, -0.0072])
    and, observed on its `bootstrap_pairwise_model`'s coefficients through its `to_winrate_probabilities` and pandas'
    `quantile`, the numbers in V2_STYLE; the full-data fit is its `fit_pairwise_model` on the same features (which
    show_result never prints). Equal to the last bit on an AVX2 CPU, to 1e-3 elsewhere (V2_EXACT). Five unseeded runs
    printed model-c between 59.2 and 61.5 and model-d between 41.3 and 44.3: that is the reference's own noise."""
    from leaderboards.arena_hard_style import style_scores

    fit = style_scores(_style_judgments("v2.0"), ARENA_STYLE / "v2.0" / "model_answer", "v2.0")
    by = {s.model: s for s in fit.scores}
    printed = [
        "model-c: score 59.5 90% CI (-12.5 / +11.6)",
        "model-a: score 59.0 90% CI (-8.1 / +7.8)",
        "model-b: score 52.5 90% CI (-9.2 / +10.2)",
        "model-d: score 43.7 90% CI (-16.4 / +12.2)",
    ]
    lines = [by[m].line for m in ("model-c", "model-a", "model-b", "model-d")]
    coefs = "Feature Coefs: [0.7221, -0.1633, 0.2237, -0.0072]"
    if V2_EXACT:
        assert lines == printed and fit.line == coefs
    else:  # a printed number may round the other way (V2_EXACT)
        for got_line, want_line in zip(lines + [fit.line], printed + [coefs], strict=True):
            assert _printed_numbers(got_line) == pytest.approx(_printed_numbers(want_line), abs=0.31)
    for model, want in V2_STYLE.items():
        s = by[model]
        assert (s.win_rate, s.lower / 100, s.upper / 100, s.full_fit) == pytest.approx(want, abs=V2_TOL)
    assert [by[m].battles for m in ("model-a", "model-b", "model-c", "model-d")] == [106, 78, 94, 88]


def test_bench_score_arenahard_style_control(tmp_path, capsys):
    """`align bench score arenahard --option style_control=true --option answers=DIR`: the numbers above on the
    console and in --json, and errors that name the file, row and field (or the option) for what is missing."""
    from align.cli.main import main

    def score(*args: str) -> int:
        return main(["bench", "score", "arenahard", *args])

    def judgments(version: str, judge: str) -> list[str]:
        return [f"--from={ARENA_STYLE / version / 'model_judgment' / judge / f'model-{m}.jsonl'}" for m in "abcd"]

    v01, v2 = judgments("v0.1", "gpt-4-1106-preview"), judgments("v2.0", "gpt-4.1")
    answers = ARENA_STYLE / "v0.1" / "model_answer"
    style = ["--option", "style_control=true", "--option", f"answers={answers}"]
    assert score(*v01, *style) == 0
    assert "model-c: score 71.1 95% CI (-11.7, 10.6)  (battles 95)" in capsys.readouterr().out
    assert score(*v01, *style, "--option", "control=length", "--json") == 0
    got = {m["model"]: m for m in json.loads(capsys.readouterr().out)}
    assert (got["model-a"]["sections"]["score"], *got["model-a"]["interval"]) == V01_STYLE["length"][1]["model-a"]
    assert got["model-a"]["method"]["printed"] == V01_STYLE["length"][0]
    # v2.0: the full-data fit does not depend on the draws, so three rounds are enough to check it
    v2_style = ["--option", "style_control=true", "--option", f"answers={ARENA_STYLE / 'v2.0' / 'model_answer'}"]
    assert score(*v2, *v2_style, "--option", "version=2.0", "--option", "rounds=3", "--json") == 0
    got = {m["model"]: m for m in json.loads(capsys.readouterr().out)}  # `version=2.0` reads as a number: v2.0
    for model, want in V2_STYLE.items():
        assert got[model]["sections"]["full_fit"] == pytest.approx(want[3], abs=V2_TOL)
    assert got["model-a"]["method"]["style_control"].startswith("lmarena/arena-hard-auto@196f6b82")
    # what is missing or refused, named
    assert score(*v01, "--option", "style_control=true") == 2
    assert "add --option answers=DIR" in capsys.readouterr().err
    assert score(*v01, "--option", f"answers={answers}") == 2
    assert "add --option style_control=true" in capsys.readouterr().err
    assert score(*v2, *v2_style, "--option", "version=v2.0", "--option", "control=length") == 2
    assert "v2.0's show_result scores only markdown,length" in capsys.readouterr().err
    assert score(*v01, *style, "--option", "version=v2") == 2
    assert "did you mean 'v2.0'" in capsys.readouterr().err
    broken = tmp_path / "model_answer"
    broken.mkdir()
    for f in answers.glob("*.jsonl"):
        rows = [json.loads(x) for x in f.read_text().splitlines()]
        if f.stem == "model-b":
            del rows[4]["conv_metadata"]["bold_count"]
        if f.stem == "model-d":
            rows = rows[:-1]
        (broken / f.name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    style = ["--option", "style_control=true", "--option", f"answers={broken}"]
    assert score(*v01, *style) == 2
    assert f"{broken / 'model-b.jsonl'} line 5: `conv_metadata` has no bold_count" in capsys.readouterr().err
    assert score(*v01[3:], *style) == 2
    err = capsys.readouterr().err
    assert "model-d.jsonl line 30: model-d's answer file has no row with question_id 'q29'" in err


def test_bench_score_from_reads_each_reference_format(capsys):
    """`align bench score BENCH --from FILE`: the reference pipelines' own files scored by the same rules, the numbers
    the reference code printed for them (the tests above) on the console and in --json."""
    from align.cli.main import main

    ah = [str(FIXTURES / "arenahard" / f"model-{m}.jsonl") for m in ("y", "x")]
    assert main(["bench", "score", "arenahard", "--from", ah[0], "--from", ah[1]]) == 0
    out = capsys.readouterr().out
    assert "model-x: score 56.2 95% CI (-12.5, 15.3)" in out and "model-y: score 46.4 95% CI (-16.0, 12.4)" in out
    assert main(["bench", "score", "arenahard", "--from", ah[0], "--from", ah[1], "--option", "weight=1"]) == 0
    assert "model-x: score 58.3 95% CI (-19.2, 20.4)" in capsys.readouterr().out
    annotations = str(FIXTURES / "alpacaeval" / "annotations.json")
    assert main(["bench", "score", "alpacaeval", "--from", annotations, "--json"]) == 0
    (alpaca,) = json.loads(capsys.readouterr().out)
    assert alpaca["sections"]["win_rate"] == 51.00052909523809 and alpaca["counts"]["null"] == 2
    assert (
        main(["bench", "score", "mtbench", "--from", str(FIXTURES / "mtbench" / "gpt-4_single.jsonl"), "--json"]) == 0
    )
    by_model = {m["model"]: m for m in json.loads(capsys.readouterr().out)}
    got = by_model["fixture-model"]["sections"]
    assert (got["turn_1"], got["turn_2"], got["average"]) == (5.9, 5.333333333333333, 5.631578947368421)
    # JudgeBench's run_judge.py outputs: the percentages it printed (50.00, 42.86, 52.94; the test above)
    jb = FIXTURES / "judgebench"
    for name, want in (("rm_judgments", 50.0), ("judge_judgments", 300 / 7), ("judge_judgments_fail", 900 / 17)):
        assert main(["bench", "score", "judgebench", "--from", str(jb / f"{name}.jsonl"), "--json"]) == 0
        (got,) = json.loads(capsys.readouterr().out)
        assert got["sections"]["score"] == pytest.approx(want, abs=1e-12)
    assert got["sections"]["livecodebench"] == 40.0 and got["counts"]["pairs"] == 17
    # a wrong file or option: an error that names it
    assert main(["bench", "score", "judgebench", "--from", annotations]) == 2
    assert "row 0: missing field(s) label, source, judgments" in capsys.readouterr().err
    assert main(["bench", "score", "arenahard", "--from", annotations]) == 2
    assert "not an Arena-Hard judgment row" in capsys.readouterr().err
    assert main(["bench", "score", "arenahard", "--from", ah[0], "--option", "weigth=1"]) == 2
    assert "did you mean 'weight'" in capsys.readouterr().err


RB1_SECTIONS = {
    "Chat": 0.5410348496940676,
    "Chat Hard": 0.3911079782790309,
    "Safety": 0.552020592020592,
    "Reasoning": 0.42876984126984136,
}


def _rb1_scorer() -> TableScorer:
    d = FIXTURES / "rewardbench"
    rows, scores = json.loads((d / "filtered.json").read_text()), json.loads((d / "scores.json").read_text())
    table = {}
    for r in rows:
        table[r["chosen"]], table[r["rejected"]] = scores[str(r["id"])]
    return TableScorer(table)


def test_rewardbench_files_in_its_own_layout_both_ways(tmp_path, capsys):
    """`bench run rewardbench --native DIR` writes what allenai/reward-bench @ 05a9005e scripts/run_rm.py saves
    (`save_to_hub`: results/eval-set/<model>.json, the subset accuracies; results/eval-set-scores/<model>.json, one
    column per field), and `bench score rewardbench --from` either file gives the numbers ref_rb1.py printed."""
    from align.cli.main import main

    d = FIXTURES / "rewardbench"
    record = _run("rewardbench", _rb1_scorer(), d / "filtered.json", native_dir=tmp_path, model_name="org/rm")
    per_subset = json.loads((tmp_path / "eval-set" / "org" / "rm.json").read_text())
    items = json.loads((tmp_path / "eval-set-scores" / "org" / "rm.json").read_text())
    assert record.settings["native_files"] == [
        str(tmp_path / "eval-set" / "org" / "rm.json"),
        str(tmp_path / "eval-set-scores" / "org" / "rm.json"),
    ]
    # the reference's schema: model fields, one number per subset; equal-length columns, ids as in the data
    assert {per_subset.pop(k) for k in ("model", "model_type", "chat_template")} == {
        "org/rm",
        "Seq. Classifier",
        "tokenizer",
    }
    assert per_subset == {k: v["score"] for k, v in record.scores["subsets"].items()} and len(per_subset) == 23
    columns = ("id", "subset", "results", "scores_chosen", "scores_rejected", "text_chosen", "text_rejected")
    assert {len(items[c]) for c in columns} == {124} and items["model"] == "org/rm"
    rows = json.loads((d / "filtered.json").read_text())
    assert items["id"] == [r["id"] for r in rows] and items["subset"] == [r["subset"] for r in rows]
    pairs = list(zip(items["scores_chosen"], items["scores_rejected"], strict=True))
    assert items["results"] == [int(c > r) for c, r in pairs] and sum(c == r for c, r in pairs) == 16  # ties: 0
    assert (tmp_path / "eval-set" / "org" / "rm.json").read_text().startswith('{\n    "alpacaeval-easy": ')
    for path in ("eval-set-scores", "eval-set"):
        assert (
            main(["bench", "score", "rewardbench", "--from", str(tmp_path / path / "org" / "rm.json"), "--json"]) == 0
        )
        (got,) = json.loads(capsys.readouterr().out)
        assert got["model"] == "org/rm" and {k: got["sections"][k] for k in RB1_SECTIONS} == RB1_SECTIONS
        assert got["sections"]["score"] == 0.4782333153158829
    assert got["counts"] == {"subsets": 23}
    # a file of neither kind, a pairwise judge, a benchmark without such files: errors that say so, nothing scored
    (tmp_path / "other.json").write_text(json.dumps({"model": "x", "accuracy": 0.5}))
    assert main(["bench", "score", "rewardbench", "--from", str(tmp_path / "other.json")]) == 2
    assert "neither an eval-set-scores file" in capsys.readouterr().err
    with pytest.raises(UserError, match="one score per response, which a pairwise scorer"):
        _run("rewardbench", TableJudge({}), d / "filtered.json", native_dir=tmp_path)
    with pytest.raises(UserError, match="pairs has no native results layout"):
        _run("pairs", _rb1_scorer(), FIXTURES / "judgebench" / "pairs.jsonl", native_dir=tmp_path)


def test_rewardbench2_files_in_its_own_layout_both_ways(tmp_path, capsys):
    """`bench run rewardbench2 --native DIR` writes what scripts/run_v2.py saves (best-of-n `results`, the four or
    more `scores` per row, correct ones first), and `bench score rewardbench2 --from` the eval-set-scores file gives
    what ref_rb2.py printed, the Ties composite included."""
    from align.cli.main import main

    d = FIXTURES / "rewardbench2"
    rows, scores = _rows(d / "data.jsonl"), json.loads((d / "scores.json").read_text())
    table = {t: float(s) for r in rows for t, s in zip(r["chosen"] + r["rejected"], scores[r["id"]], strict=True)}
    _run("rewardbench2", TableScorer(table), d / "data.jsonl", native_dir=tmp_path, model_name="rm")
    items = json.loads((tmp_path / "eval-set-scores" / "rm.json").read_text())
    assert items["id"] == [r["id"] for r in rows] and items["scores"] == [scores[r["id"]] for r in rows]
    assert items["num_correct"] == [r["num_correct"] for r in rows]
    assert items["text"] == [r["chosen"] + r["rejected"] for r in rows]
    assert json.loads((tmp_path / "eval-set" / "rm.json").read_text())["Ties"] == 0.574545582091216
    assert (
        main(["bench", "score", "rewardbench2", "--from", str(tmp_path / "eval-set-scores" / "rm.json"), "--json"]) == 0
    )
    (got,) = json.loads(capsys.readouterr().out)
    assert got["sections"]["score"] == 0.482596221353827 and got["sections"]["Ties"] == 0.574545582091216
    assert got["counts"] == {"examples": 43, "subsets": 6}


def _compute_final_metrics(pairs: list[dict], reverse_order: bool) -> float:
    """What ScalerLab/JudgeBench @ e2c52c28 utils/metrics.py `compute_final_metrics` reads of each row (`label`,
    `judgments[i]["decision"]`, a null judgement deciding nothing) and returns, in percent: its arithmetic, so that the
    written file is read through the reference's own field accesses."""
    flip = {"A>B": "B>A", "B>A": "A>B"}
    if not reverse_order:
        return 100 * sum(p["judgments"][0]["decision"] == p["label"] for p in pairs) / len(pairs)
    correct = 0
    for p in pairs:
        j1, j2 = p["judgments"]
        d1 = j1["decision"] if j1 is not None else None
        d2 = j2["decision"] if j2 is not None else None
        d2 = flip.get(d2, d2)
        counter = sum(1 if d == p["label"] else -1 if d == flip[p["label"]] else 0 for d in (d1, d2))
        correct += counter > 0
    return 100 * correct / len(pairs)


def test_judgebench_file_in_its_own_layout_both_ways(tmp_path, capsys):
    """`bench run judgebench --native DIR` writes the JSON Lines file ScalerLab/JudgeBench @ e2c52c28 run_judge.py
    writes (outputs/<dataset>,judge_name=<judge>,judge_model=<model>.jsonl: each pair as read, with judge_name and
    judgments): for a reward model the rows of `run_judge.py --judge_name reward_model --single_game` (the stored
    rm_judgments.jsonl, to the value), for a pairwise judge both games with the decisions as shown; the reference's
    `compute_final_metrics` and `bench score judgebench --from` read it and give the run's numbers."""
    from align.cli.main import main

    d = FIXTURES / "judgebench"
    table = {}
    for r in _rows(d / "rm_judgments.jsonl"):
        table[r["response_A"]], table[r["response_B"]] = r["judgments"][0]["judgment"]["scores"]
    record = _run("judgebench", TableScorer(table), d / "pairs.jsonl", native_dir=tmp_path, model_name="table")
    name = "dataset=judgebench,response_model=gpt-4o-2024-05-13,judge_name=reward_model,judge_model=table.jsonl"
    written = tmp_path / "outputs" / name
    assert record.settings["native_files"] == [str(written)]
    rows = _rows(written)
    assert rows == _rows(d / "rm_judgments.jsonl")  # the reference's own output for these scores, field for field
    assert _compute_final_metrics(rows, reverse_order=False) == 100 * record.scores["headline"] == 50.0
    assert main(["bench", "score", "judgebench", "--from", str(written), "--json"]) == 0
    (got,) = json.loads(capsys.readouterr().out)
    assert got["model"] == "reward_model" and got["sections"]["score"] == 50.0

    # a pairwise judge: two games, the second's decision in the order shown; failed judgements null
    for pairs, judgments, expected in (
        ("pairs.jsonl", "judge_judgments.jsonl", 42.857142857142854),
        ("pairs_fail.jsonl", "judge_judgments_fail.jsonl", 100 * 9 / 17),
    ):
        out = tmp_path / pairs
        record = _run("judgebench", _judgebench_judge(d / judgments), d / pairs, native_dir=out, model_name="org/j")
        (path,) = (out / "outputs").iterdir()
        assert path.name.endswith(",judge_name=prefalign_judge,judge_model=org_j.jsonl")
        rows, reference = _rows(path), {r["pair_id"]: r for r in _rows(d / judgments)}
        for r in rows:
            assert set(r) == {*reference[r["pair_id"]]} and r["label"] == reference[r["pair_id"]]["label"]
            assert [g["decision"] for g in r["judgments"]] == [
                g["decision"] if g is not None else None for g in reference[r["pair_id"]]["judgments"]
            ]
        assert _compute_final_metrics(rows, reverse_order=True) == pytest.approx(100 * record.scores["headline"])
        assert _compute_final_metrics(rows, reverse_order=True) == pytest.approx(expected)
        assert main(["bench", "score", "judgebench", "--from", str(path), "--json"]) == 0
        (got,) = json.loads(capsys.readouterr().out)
        assert got["sections"]["score"] == pytest.approx(expected)


def test_bench_compare_pairs_two_records_item_by_item(tmp_path, capsys):
    """Two records of RewardBench on the same file (the fixture's scores, except that in one subset A ranks every pair
    right and B every pair wrong): `align bench compare` pairs them by example, finds that subset and only it
    different under Šidák's and Holm's corrections, and its overall difference is the mean of the per-example
    differences."""
    from align.cli.main import main
    from leaderboards.compare_records import compare_records

    d = FIXTURES / "rewardbench"
    rows, scores = json.loads((d / "filtered.json").read_text()), json.loads((d / "scores.json").read_text())
    table, flipped = {}, {}
    for r in rows:
        c, rj = scores[str(r["id"])]
        if r["subset"] == "hep-cpp":  # 8 pairs
            table[r["chosen"]], table[r["rejected"]] = 1.0, 0.0
            flipped[r["chosen"]], flipped[r["rejected"]] = 0.0, 1.0
        else:
            table[r["chosen"]], table[r["rejected"]] = c, rj
            flipped[r["chosen"]], flipped[r["rejected"]] = c, rj
    records = tmp_path / "records"
    a = _run("rewardbench", TableScorer(table), d / "filtered.json", model_name="a")
    b = _run("rewardbench", TableScorer(flipped), d / "filtered.json", model_name="b")
    a.save(records), b.save(records)
    assert len(a.items) == 124 and set(a.items) == set(b.items)
    for correction in ("sidak", "holm"):
        c = compare_records(a, b, correction, reps=2000, seed=0)
        differs = [s.subset for s in c.subsets if s.differs]
        assert differs == ["hep-cpp"], (correction, differs)
    diffs = [a.items[i][1] - b.items[i][1] for i in a.items]
    assert c.overall.diff == pytest.approx(sum(diffs) / len(diffs))
    assert c.overall.ci95[0] <= c.overall.diff <= c.overall.ci95[1]
    assert main(["bench", "compare", "a", "b", "--records", str(records)]) == 0
    out = capsys.readouterr().out
    assert "Šidák-corrected intervals" in out and "hep-cpp" in out and "differs" in out
    # a record without per-example results cannot be paired: said, not guessed
    old = json.loads(a.path and Path(a.path).read_text() or "{}")
    old.pop("items")
    (tmp_path / "old.json").write_text(json.dumps(old))
    assert main(["bench", "compare", str(tmp_path / "old.json"), "b", "--records", str(records)]) == 2
    assert "run the benchmark again" in capsys.readouterr().err


def test_eval_policy_judgments_in_each_benchmark_s_own_format_score_the_same(tmp_path):
    """What `align eval policy --bench B --out DIR` writes beside generations.jsonl (annotations.json, Arena-Hard's
    and FastChat's judgment JSONL) is read back by `align bench score --from` to the numbers of the run's record."""
    from leaderboards.policy_bench import (
        native_alpacaeval,
        native_arenahard,
        native_mtbench,
        score_arenahard,
        score_mtbench,
        score_pairwise,
    )
    from leaderboards.policy_data import BenchData, BenchItem
    from leaderboards.score_from import score_from

    s = SimpleNamespace(bootstrap=0, seed=0, lc_glm="auto", lc_table=None)
    items = [BenchItem(str(i), [f"q{i}", f"q{i} again"], "cat", reference=f"ref {i}") for i in range(8)]
    data = BenchData("x", "fixture", items, reference_model="gpt4_turbo")
    answers = [[f"pol {i}", f"pol {i} t2"] for i in range(8)]
    table = {f"ref {i}": 0.0 for i in range(8)}
    turn_1 = [1.0, -0.5, 0.0, 2.0, math.nan, 3.0, -2.0, 1.5]  # no -1: FastChat reads it as a failed rating
    table.update({f"pol {i}": turn_1[i] for i in range(8)})
    table.update({f"pol {i} t2": float(i % 3) for i in range(8)})
    scorer = TableScorer(table)

    def roundtrip(native, rows, bench):
        name, text = native(data, answers, rows, "my-policy", "table")
        (tmp_path / name).write_text(text)
        (got,) = score_from(bench, [str(tmp_path / name)])
        assert got.model == "my-policy"
        return got

    scores, rows = score_pairwise(data, answers, scorer, s)
    got = roundtrip(native_alpacaeval, rows, "alpacaeval")
    assert got.sections["win_rate"] == pytest.approx(100 * scores["sections"]["win_rate"], abs=1e-12)
    assert got.counts["null"] == scores["extra"]["judged"]["abstained"] == 1
    scores, rows = score_arenahard(data, answers, scorer, s)
    got = roundtrip(native_arenahard, rows, "arenahard")
    assert got.sections["score"] / 100 == scores["sections"]["score"]
    assert [x / 100 for x in got.interval] == scores["intervals"]["score"]
    scores, rows = score_mtbench(data, answers, scorer, s)
    got = roundtrip(native_mtbench, rows, "mtbench")
    assert got.sections["turn_1"] == pytest.approx(scores["sections"]["turn_1"], abs=1e-12)
    assert got.sections["average"] == pytest.approx(scores["sections"]["mean"], abs=1e-12)
    assert got.counts["failed"] == 1


RMBENCH_REFERENCE = {  # ref_rmbench.py on the file the run wrote (compute_accuracy's keys)
    "chat": 0.5079365079365079,
    "math": 0.5185185185185185,
    "code": 0.5777777777777778,
    "safety": 0.4603174603174603,
    "hard_acc": 0.444047619047619,
    "normal_acc": 0.4797619047619047,
    "easy_acc": 0.6246031746031746,
    "total_avg_acc": 0.5161375661375662,
}


def test_rmbench_file_in_its_own_layout_both_ways(tmp_path, capsys):
    """`bench run rm-bench --native DIR` writes the file THU-KEG/RM-Bench @ 73c52d7 scripts/run_rm.py saves (the
    dataset's items with `score_chosen` and `score_rejected`), and both the run and `bench score rm-bench --from`
    that file give what the reference's `scripts/utils.py::compute_accuracy` printed for it, to the last digit
    (`python ref_rmbench.py total_dataset_rm.json`, the function copied verbatim from lines 34-114; 25 items over
    the five domain files, ties among the scores, string and integer ids)."""
    from align.cli.main import main

    d = FIXTURES / "rmbench"
    rows, table = json.loads((d / "total_dataset.json").read_text()), json.loads((d / "scores.json").read_text())
    record = _run("rm-bench", TableScorer(table), d / "total_dataset.json", native_dir=tmp_path, model_name="rm")
    path = tmp_path / "total_dataset_rm.json"
    assert record.settings["native_files"] == [str(path)]
    items = json.loads(path.read_text(encoding="utf-8"))
    assert [{k: r[k] for k in ("id", "prompt", "chosen", "rejected", "domain")} for r in items] == rows
    assert [r["score_chosen"] + r["score_rejected"] for r in items] == [
        [table[t] for t in r["chosen"] + r["rejected"]] for r in rows
    ]
    assert "é" in path.read_text(encoding="utf-8")  # ensure_ascii=False, as run_rm.py writes
    ref = RMBENCH_REFERENCE
    expected = {
        "score": ref["total_avg_acc"],
        **{d.capitalize(): ref[d] for d in ("chat", "math", "code", "safety")},
        **{k.capitalize(): ref[f"{k}_acc"] for k in ("hard", "normal", "easy")},
    }
    assert {"score": record.scores["headline"], **record.scores["sections"]} == expected
    assert main(["bench", "score", "rm-bench", "--from", str(path), "--json"]) == 0
    (got,) = json.loads(capsys.readouterr().out)
    assert got["sections"] == expected and got["counts"] == {"examples": 25, "subsets": 4}
    # a RewardBench file, or an item without its three scores: errors that say what the file should hold
    (tmp_path / "other.json").write_text(json.dumps({"model": "x", "scores_chosen": [1]}))
    assert main(["bench", "score", "rm-bench", "--from", str(tmp_path / "other.json")]) == 2
    assert "not an RM-Bench results file" in capsys.readouterr().err
    items[3]["score_rejected"] = [0.5]
    path.write_text(json.dumps(items))
    assert main(["bench", "score", "rm-bench", "--from", str(path)]) == 2
    assert "item 3: 'score_rejected' is [0.5], not the three scores" in capsys.readouterr().err


def test_numpy_sum_is_numpys_order():
    """`numpy_sum` (the order reference code summing with numpy adds in) equals np.sum to the last bit."""
    import random

    import numpy as np

    from leaderboards.rules import numpy_sum

    rng = random.Random(0)
    for n in [*range(20), 127, 128, 129, 300, 1031]:
        xs = [rng.uniform(-1, 1) * 10 ** rng.randint(-4, 4) for _ in range(n)]
        assert numpy_sum(xs) == float(np.sum(np.array(xs)))


def test_bench_score_ifeval_puts_our_verdicts_beside_the_files(tmp_path, capsys):
    """`bench score ifeval --from eval_results_strict.jsonl --option data=input_data.jsonl`: the responses of an
    IFEval results file (evaluation_main.py's layout: prompt, response, instruction_id_list and its
    follow_instruction_list) checked by our verifiers beside the file's own verdicts, with their agreement and the
    instruction ids that disagree. The verdicts here follow the benchmark's definitions by hand; one is set wrong on
    purpose, and is the one disagreement reported."""
    from align.cli.main import main

    inputs = [
        {"key": 1, "prompt": "Answer in lowercase.", "instruction_id_list": ["change_case:english_lowercase"],
         "kwargs": [{}]},
        {"key": 2, "prompt": "Use fewer than 5 words, wrap in quotes.",
         "instruction_id_list": ["length_constraints:number_words", "startend:quotation"],
         "kwargs": [{"relation": "less than", "num_words": 5}, {}]},
    ]  # fmt: skip
    data = tmp_path / "input_data.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in inputs))
    rows = [
        {"prompt": inputs[0]["prompt"], "response": "all lowercase here.", "follow_instruction_list": [True]},
        {"prompt": inputs[1]["prompt"], "response": '"Two words"', "follow_instruction_list": [True, False]},
    ]  # the second verdict is wrong: the response is wrapped in double quotes
    for r, i in zip(rows, inputs, strict=True):
        r["instruction_id_list"] = i["instruction_id_list"]
        r["follow_all_instructions"] = all(r["follow_instruction_list"])
    results = tmp_path / "my-model" / "eval_results_strict.jsonl"
    results.parent.mkdir()
    results.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["bench", "score", "ifeval", "--from", str(results), "--option", f"data={data}", "--json"]) == 0
    (got,) = json.loads(capsys.readouterr().out)
    assert got["model"] == "my-model"
    assert got["sections"] == {
        "prompt_strict": 1.0,
        "instruction_strict": 1.0,
        "file_prompt_strict": 0.5,
        "file_instruction_strict": 2 / 3,
        "agreement": 2 / 3,
    }
    assert got["counts"] == {"prompts": 2, "instructions": 3, "disagreements": 1}
    assert "disagreeing: startend:quotation 1" in got["line"]
    # without the input file, or with a results file of other prompts: errors that say what to give
    assert main(["bench", "score", "ifeval", "--from", str(results)]) == 2
    assert "--option data=input_data.jsonl" in capsys.readouterr().err
    data.write_text(json.dumps({**inputs[0], "prompt": "Another prompt."}) + "\n")
    assert main(["bench", "score", "ifeval", "--from", str(results), "--option", f"data={data}"]) == 2
    assert "no row's prompt is in" in capsys.readouterr().err
