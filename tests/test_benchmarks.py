"""Benchmarks, scoring rules, runner, records and rendering (stage 4).

Every benchmark is exercised on a tiny fixture the test writes in the official format, scored by real
scorers that look a response's score up by its text; the expected numbers are worked out by hand in each
test's docstring. Sources of the rules: reference/reward-models.md §7 and §9.
"""

from __future__ import annotations

import html
import json
import math
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from leaderboards import rules
from leaderboards.benchmarks import BENCHMARKS
from leaderboards.records import fmt_score, load_record, load_records
from leaderboards.render import render
from leaderboards.runner import BenchSettings, run_benchmark
from prefalign.errors import UserError
from preference_data.records import Message, PreferencePair, write_jsonl
from reward_models.generative.scorers import _GenerativeJudge

# --------------------------------------------------------------------------------------------------------
# Real scorers implementing reward_models/base.py, driven by lookup tables
# --------------------------------------------------------------------------------------------------------


class LookupScorer:
    """Pointwise: the score of a response is table[response text]; records every call."""

    kind = "pointwise"

    def __init__(self, table: dict[str, float], name: str = "lookup-rm", model: str | None = None) -> None:
        self.table, self.name, self.model = table, name, model or name
        self.calls: list[list[str]] = []

    def describe(self) -> dict[str, Any]:
        return {"model": self.model, "table": sorted(self.table.items())}

    def score(self, prompts: list, responses: list) -> list[float]:
        assert isinstance(prompts, list) and isinstance(responses, list) and len(prompts) == len(responses)
        texts = [r[-1].content for r in responses]
        self.calls.append(texts)
        return [self.table[t] for t in texts]

    @property
    def n_scored(self) -> int:
        return sum(map(len, self.calls))


class TableJudge:
    """Pairwise: P(A preferred) = table[(A text, B text)], or from `scores` (1, 1/2, 0) when not in the table."""

    kind = "pairwise"

    def __init__(
        self,
        table: dict[tuple[str, str], float] | None = None,
        scores: dict[str, float] | None = None,
        name: str = "table-judge",
    ) -> None:
        self.table, self.scores, self.name = table or {}, scores or {}, name
        self.calls = 0

    def describe(self) -> dict[str, Any]:
        return {"model": self.name}

    def compare(self, prompts: list, responses_a: list, responses_b: list) -> list[float]:
        self.calls += 1
        out = []
        for a, b in zip(responses_a, responses_b, strict=True):
            key = (a[-1].content, b[-1].content)
            if key in self.table:
                out.append(self.table[key])
            else:
                sa, sb = self.scores[key[0]], self.scores[key[1]]
                out.append(1.0 if sa > sb else 0.0 if sa < sb else 0.5)
        return out


class ReferenceMatch:
    """Reference-conditioned: 1 if the response equals the reference answer, else 0."""

    kind = "reference"
    name = "reference-match"

    def describe(self) -> dict[str, Any]:
        return {"model": "exact-match"}

    def score_with_reference(self, prompts: list, responses: list, references: list) -> list[float]:
        return [float(r[-1].content == ref[-1].content) for r, ref in zip(responses, references, strict=True)]


@pytest.fixture
def run(tmp_path: Path):
    """run_benchmark with the cache and records in tmp_path and no progress bar."""

    def _run(bench: str, scorer: Any, data: Any = None, *, pairs: Any = None, **kw: Any):
        kw.setdefault("cache_dir", tmp_path / "cache")
        kw.setdefault("records_dir", tmp_path / "records")
        kw.setdefault("progress", False)
        return run_benchmark(bench, scorer, BenchSettings(data=data, **kw), pairs=pairs)

    return _run


def _jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


# --------------------------------------------------------------------------------------------------------
# RewardBench v1
# --------------------------------------------------------------------------------------------------------

# (subset, chosen score, rejected score): credit under the strict rule in the comment
RB1_ROWS = [
    ("alpacaeval-easy", 2, 1),  # 1
    ("alpacaeval-easy", 0, 1),  # 0
    ("mt-bench-easy", 1, 0),  # 1
    ("llmbar-natural", 1, 1),  # tie -> 0 (wrong) or 0.5 (half)
    ("xstest-should-refuse", 1, 0),  # 1
    ("xstest-should-respond", 0, 1),  # 0
    ("math-prm", 1, 0),  # 1
    ("hep-python", 1, 0),  # 1
    ("hep-python", 0, 1),  # 0
]


def _rb1(tmp_path: Path) -> tuple[Path, LookupScorer]:
    rows, table = [], {}
    for i, (subset, c, r) in enumerate(RB1_ROWS):
        rows.append(
            {
                "prompt": f"q{i}",
                "chosen": f"c{i}",
                "chosen_model": "m1",
                "rejected": f"r{i}",
                "rejected_model": "m2",
                "subset": subset,
                "id": i,
            }
        )
        table[f"c{i}"], table[f"r{i}"] = c, r
    return _jsonl(tmp_path / "rb1.jsonl", rows), LookupScorer(table)


def test_rewardbench_sections_and_weights(tmp_path: Path, run) -> None:
    """Chat      = (0.5*100 + 1*28) / (100 + 28)                = 78/128
    Chat Hard = 0 (the one example is a tie; strict > for a scalar RM)
    Safety    = (1*154 + 0*250) / 404                          = 154/404   (xstest: refuse 154, respond 250)
    Reasoning = (1*984 + 0.5*164) / (984 + 164)                = 1066/1148 (math-prm weighted 984)
    Score     = mean of the four; unweighted accuracy = 5/9."""
    path, scorer = _rb1(tmp_path)
    rec = run("rewardbench", scorer, path)
    s = rec.scores
    assert s["sections"] == pytest.approx(
        {"Chat": 78 / 128, "Chat Hard": 0.0, "Safety": 154 / 404, "Reasoning": 1066 / 1148}
    )
    assert s["headline"] == pytest.approx((78 / 128 + 0 + 154 / 404 + 1066 / 1148) / 4)
    assert s["extra"]["accuracy"] == pytest.approx(5 / 9)
    assert s["subsets"]["alpacaeval-easy"] == {"score": 0.5, "n": 2}
    assert s["subsets"]["hep-python"] == {"score": 0.5, "n": 2}
    assert rec.counts["examples"] == 9 and rec.settings["tie_policy"] == "wrong" and not rec.partial
    # The same rows as parquet give the same record scores.
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [json.loads(line) for line in path.read_text().splitlines()]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "rb1.parquet")
    assert run("rewardbench", LookupScorer(scorer.table), tmp_path / "rb1.parquet").scores == s


def test_rewardbench_tie_policy_half_and_reasoning_rule(tmp_path: Path, run) -> None:
    """With tie_policy="half" the llmbar tie earns 0.5: Chat Hard = 0.5, accuracy = 5.5/9. Reasoning is
    1/2 acc(math-prm) + 1/2 mean(acc(hep-*)) when all six hep subsets share one accuracy (984 = 6 x 164)."""
    path, scorer = _rb1(tmp_path)
    rec = run("rewardbench", scorer, path, tie_policy="half")
    assert rec.scores["sections"]["Chat Hard"] == 0.5
    assert rec.scores["extra"]["accuracy"] == pytest.approx(5.5 / 9)
    hep = {f"hep-{lang}": 0.25 for lang in ("cpp", "go", "java", "js", "python", "rust")}
    sections = rules.weighted_sections(
        {"math-prm": 1.0, **hep}, rules.REWARDBENCH_EXAMPLE_COUNTS, rules.REWARDBENCH_SECTIONS
    )
    assert sections["Reasoning"] == pytest.approx(0.5 * 1.0 + 0.5 * 0.25)
    assert sections["Chat"] is None and rules.rewardbench_score(sections) is None


def test_rewardbench_pairwise_judge_both_orders(tmp_path: Path, run) -> None:
    """A pairwise judge is asked (chosen, rejected) and (rejected, chosen); P(chosen) = (p1 + 1 - p2)/2.
    Row 0: 0.9 and 0.3 -> 0.8, correct. Row 1: 0.6 and 0.6 -> 0.5, a tie -> 0.5 under the default "half"
    policy for pairwise judges. Row 2: 0.7 and 0.9 -> 0.4, wrong. alpacaeval-easy acc = 1.5/2 over rows 0-1."""
    rows = [
        {"prompt": "q", "chosen": f"c{i}", "rejected": f"r{i}", "subset": s, "id": i}
        for i, s in enumerate(["alpacaeval-easy", "alpacaeval-easy", "mt-bench-easy"])
    ]
    table = {
        ("c0", "r0"): 0.9,
        ("r0", "c0"): 0.3,
        ("c1", "r1"): 0.6,
        ("r1", "c1"): 0.6,
        ("c2", "r2"): 0.7,
        ("r2", "c2"): 0.9,
    }
    rec = run("rewardbench", TableJudge(table), _jsonl(tmp_path / "rb.jsonl", rows))
    assert rec.settings["tie_policy"] == "half"
    assert rec.scores["subsets"]["alpacaeval-easy"]["score"] == 0.75
    assert rec.scores["subsets"]["mt-bench-easy"]["score"] == 0.0
    assert rec.counts["unique_items"] == 6  # 3 pairs x 2 orders


class SymmetricJudge(TableJudge):
    """A judge that averages both orders itself: compare(a, b) = (t(a, b) + 1 - t(b, a)) / 2."""

    symmetric = True

    def __init__(self, table: dict[tuple[str, str], float]) -> None:
        super().__init__(table)
        self.pairs_asked: list[tuple[str, str]] = []

    def compare(self, prompts: list, responses_a: list, responses_b: list) -> list[float]:
        self.pairs_asked += [(a[-1].content, b[-1].content) for a, b in zip(responses_a, responses_b, strict=True)]
        ab = super().compare(prompts, responses_a, responses_b)
        ba = super().compare(prompts, responses_b, responses_a)
        return [(x + 1 - y) / 2 for x, y in zip(ab, ba, strict=True)]


def test_a_symmetric_judge_is_asked_one_order(tmp_path: Path, run) -> None:
    """A scorer that judges both orders itself (pair_pm, think) is asked each pair once; the results equal
    asking both orders of a plain judge."""
    rows = [
        {"prompt": "q", "chosen": f"c{i}", "rejected": f"r{i}", "subset": "alpacaeval-easy", "id": i} for i in range(3)
    ]
    table = {("c0", "r0"): 0.9, ("r0", "c0"): 0.3, ("c1", "r1"): 0.2, ("r1", "c1"): 0.6}
    table |= {("c2", "r2"): 0.6, ("r2", "c2"): 0.6}
    data = _jsonl(tmp_path / "rb.jsonl", rows)
    sym = SymmetricJudge(table)
    rec = run("rewardbench", sym, data, use_cache=False)
    plain = run("rewardbench", TableJudge(table), data, use_cache=False)
    assert rec.counts["unique_items"] == 3 and sorted(sym.pairs_asked) == [("c0", "r0"), ("c1", "r1"), ("c2", "r2")]
    assert rec.scores["subsets"] == plain.scores["subsets"]
    assert rec.scores["subsets"]["alpacaeval-easy"]["score"] == pytest.approx(1.5 / 3)  # right, wrong, a tie


# --------------------------------------------------------------------------------------------------------
# RewardBench 2
# --------------------------------------------------------------------------------------------------------


def _rb2_rows() -> tuple[list[dict[str, Any]], dict[str, float]]:
    """Best-of-4 rows (chosen score; rejected scores) and Ties rows (correct scores; incorrect scores)."""
    table: dict[str, float] = {}
    rows: list[dict[str, Any]] = []

    def add(ident: str, subset: str, correct: list[float], incorrect: list[float]) -> None:
        chosen = [f"{ident}-c{k}" for k in range(len(correct))]
        rejected = [f"{ident}-r{k}" for k in range(len(incorrect))]
        table.update(zip(chosen, correct, strict=True))
        table.update(zip(rejected, incorrect, strict=True))
        rows.append(
            {
                "id": ident,
                "prompt": f"prompt {ident}",
                "chosen": chosen,
                "rejected": rejected,
                "num_correct": len(chosen),
                "num_incorrect": len(rejected),
                "total_completions": len(chosen) + len(rejected),
                "models": [],
                "subset": subset,
                "additional_metadata": {},
            }
        )

    add("f1", "Factuality", [3], [1, 2, 0])  # chosen strictly on top: 1
    add("f2", "Factuality", [2], [2, 1, 0])  # two-way tie at the top: 1/2
    add("p1", "Precise IF", [1], [1, 1, 0])  # three-way tie: 1/3
    add("m1", "Math", [5], [5, 5, 5])  # four-way tie: 1/4
    add("s1", "Safety", [0], [1, 0, 0])  # chosen below the top: 0
    add("o1", "Focus", [4], [1, 2, 3])  # 1
    add("ref:1", "Ties", [10], [4, 6])  # cim = 10-6 = 4, accurate
    add("tied:1", "Ties", [9, 8, 7], [5, 6])  # cim = 7-6 = 1, dcm = 9-7 = 2, accurate
    add("ref:2", "Ties", [3], [4])  # cim = -1, not accurate
    add("tied:2", "Ties", [8, 8], [2])  # cim = 6, dcm = 0, accurate
    add("tied:3", "Ties", [1, 2], [3])  # cim = -2, not accurate; no ref:3, so only in tied_acc
    return rows, table


def test_rewardbench2_best_of_4_and_ties_formula(tmp_path: Path, run) -> None:
    """Best-of-4: Factuality (1 + 1/2)/2, Precise IF 1/3, Math 1/4, Safety 0, Focus 1.
    Ties: ref_acc = mean(T, F) = 1/2; tied_acc = mean(T, T, F) = 2/3; P = {1, 2}.
      prompt 1: cim_tied 1 > dcm 2? no; min(4, 1) = 1 > 2? no; tanh(1/2 - 1) = tanh(-0.5)
      prompt 2: cim_tied 6 > dcm 0? yes; min(-1, 6) = -1 > 0? no; -1/0 = -inf -> tanh = -1
      preferred = 1/2, preferred_hard = 0, margin = (tanh(-0.5) - 1)/2
      Ties = 0.3*2/3 + 0.3*1/2 + 0.2*1/2 + 0.2*0 + 0.01*margin.
    Score = unweighted mean of the six subsets."""
    rows, table = _rb2_rows()
    rec = run("rewardbench2", LookupScorer(table), _jsonl(tmp_path / "rb2.jsonl", rows))
    margin = (math.tanh(-0.5) - 1) / 2
    ties = 0.3 * 2 / 3 + 0.3 * 0.5 + 0.2 * 0.5 + 0.2 * 0 + 0.01 * margin
    expected = {"Factuality": 0.75, "Precise IF": 1 / 3, "Math": 0.25, "Safety": 0.0, "Focus": 1.0, "Ties": ties}
    assert rec.scores["sections"] == pytest.approx(expected)
    assert rec.scores["headline"] == pytest.approx(sum(expected.values()) / 6)
    t = rec.scores["extra"]["ties"]
    assert (t["ref_accuracy"], t["tied_accuracy"]) == pytest.approx((0.5, 2 / 3))
    assert (t["correctness_preferred"], t["correctness_preferred_hard"]) == (0.5, 0.0)
    assert t["margin"] == pytest.approx(margin) and (t["n_ref"], t["n_tied"], t["n_both"]) == (2, 3, 2)
    assert rec.settings["tie_policy"] is None  # RewardBench 2 fixes its own tie rule


def test_best_of_n_and_ties_zero_margin_rules() -> None:
    """best_of_n gives 1/k for a k-way tie at the top; tanh(x/0 - 1) is +1, -1, or 0 for 0/0 (nan_to_num)."""
    assert rules.best_of_n([3, 1, 2, 0]) == 1.0
    assert rules.best_of_n([2, 2, 2, 0]) == pytest.approx(1 / 3)
    assert rules.best_of_n([1, 2, 0, 0]) == 0.0
    stats = rules.ties_prompt_stats([5, 5, 1], 2)
    assert stats == (True, 0, 4)
    pos = rules.ties_score({1: rules.ties_prompt_stats([9, 1], 1)}, {1: stats})
    assert pos.margin == 1.0 and pos.correctness_preferred == 1.0  # 4 > 0
    zero = rules.ties_score({1: rules.ties_prompt_stats([1, 1], 1)}, {1: rules.ties_prompt_stats([2, 2, 1], 2)})
    assert zero.margin == 0.0  # min(0, 1) / 0 = nan -> 0
    assert rules.ties_score({}, {1: stats}).score is None  # no prompt in both: the official means are NaN


def test_rewardbench2_pairwise_round_robin_matches_pointwise(tmp_path: Path, run) -> None:
    """A judge that prefers the higher lookup score (1/2 on equal scores) ranks responses by win rate in a
    round robin; the best-of-4 credits (ties at the top included) equal the pointwise ones."""
    rows, table = _rb2_rows()
    rows = [r for r in rows if r["subset"] != "Ties"]
    path = _jsonl(tmp_path / "rb2.jsonl", rows)
    point = run("rewardbench2", LookupScorer(table), path)
    pair = run("rewardbench2", TableJudge(scores=table), path)
    assert pair.scores["subsets"] == point.scores["subsets"]
    assert pair.counts["unique_items"] == 6 * 12  # 6 rows x (6 response pairs x 2 orders)


def test_dedupe_scores_each_distinct_response_once(tmp_path: Path, run) -> None:
    """Two RewardBench 2 rows with the same prompt share two responses: 8 inputs, 5 distinct. The scorer
    sees each distinct response exactly once, in batches (lists) sorted longest first."""
    table = {"x": 3.0, "yy": 1.0, "zzz": 0.0, "wwww": 3.0, "vvvvv": 2.5}
    rows = [
        {
            "id": "1",
            "prompt": "same",
            "chosen": ["x"],
            "rejected": ["yy", "zzz", "wwww"],
            "num_correct": 1,
            "subset": "Focus",
        },
        {
            "id": "2",
            "prompt": "same",
            "chosen": ["x"],
            "rejected": ["yy", "zzz", "vvvvv"],
            "num_correct": 1,
            "subset": "Focus",
        },
    ]
    scorer = LookupScorer(table)
    rec = run("rewardbench2", scorer, _jsonl(tmp_path / "d.jsonl", rows), batch_size=2)
    seen = [t for batch in scorer.calls for t in batch]
    assert sorted(seen) == sorted(table) and len(seen) == 5
    assert [len(b) for b in scorer.calls] == [2, 2, 1]
    assert [len(t) for t in seen] == sorted((len(t) for t in seen), reverse=True)
    assert (rec.counts["items"], rec.counts["unique_items"], rec.counts["scored_now"]) == (8, 5, 5)
    assert rec.scores["subsets"]["Focus"]["score"] == 0.75  # row 1: x ties wwww at 3 -> 1/2; row 2: 1


# --------------------------------------------------------------------------------------------------------
# RM-Bench
# --------------------------------------------------------------------------------------------------------


def _rmbench_rows() -> tuple[list[dict[str, Any]], dict[str, float]]:
    table: dict[str, float] = {}
    rows: list[dict[str, Any]] = []

    def add(ident: str, domain: str, chosen: list[float], rejected: list[float]) -> None:
        c = [f"{ident}-c{k}" for k in range(3)]
        r = [f"{ident}-r{k}" for k in range(3)]
        table.update(zip(c, chosen, strict=True))
        table.update(zip(r, rejected, strict=True))
        rows.append({"id": ident, "prompt": f"prompt {ident}", "chosen": c, "rejected": r, "domain": domain})

    add("chat1", "chat", [3, 2, 1], [2.5, 1.5, 0.5])  # rows [1,1,1], [0,1,1], [0,0,1]
    add("chat2", "chat", [1, 1, 1], [1, 0, 2])  # each row [0,1,0] (1 vs 1 is a tie -> wrong)
    add("math1", "math", [1, 1, 1], [0, 0, 0])  # all 1
    add("code1", "code", [0, 0, 0], [1, 1, 1])  # all 0
    add("ref1", "safety-refuse", [2, 2, 2], [1, 1, 1])  # all 1
    add("ref2", "safety-refuse", [2, 2, 2], [1, 1, 1])  # all 1
    add("resp1", "safety-response", [0, 0, 5], [1, 1, 1])  # rows [0,0,0], [0,0,0], [1,1,1]
    return rows, table


def test_rmbench_triangles_and_merged_safety(tmp_path: Path, run) -> None:
    """chat: M = [[.5, 1, .5], [0, 1, .5], [0, .5, .5]] (rows chosen style, columns rejected style):
      hard = (M01 + M02 + M12)/3 = 2/3, normal = diag mean = 2/3, easy = (M10 + M20 + M21)/3 = 1/6; chat = 1/2.
    math = 1, code = 0.
    safety pools the two files (3 items): M = [[2/3]*3, [2/3]*3, [1]*3]: hard 2/3, normal 7/9, easy 8/9,
      safety = 7/9 (averaging the two files instead would give (1 + 1/3)/2 = 2/3).
    Overall = (1/2 + 1 + 0 + 7/9)/4; Hard/Normal/Easy = means over the four domains."""
    rows, table = _rmbench_rows()
    path = tmp_path / "total_dataset.json"
    path.write_text(json.dumps(rows), encoding="utf-8")
    rec = run("rm-bench", LookupScorer(table), path)
    sub = rec.scores["subsets"]
    assert sub["chat"]["matrix"] == [[0.5, 1.0, 0.5], [0.0, 1.0, 0.5], [0.0, 0.5, 0.5]]
    assert (sub["chat"]["hard"], sub["chat"]["normal"], sub["chat"]["easy"]) == pytest.approx((2 / 3, 2 / 3, 1 / 6))
    assert (sub["safety"]["hard"], sub["safety"]["normal"], sub["safety"]["easy"]) == pytest.approx(
        (2 / 3, 7 / 9, 8 / 9)
    )
    assert sub["safety"]["n"] == 3 and "safety-refuse" not in sub
    assert rec.scores["sections"] == pytest.approx(
        {
            "Chat": 0.5,
            "Math": 1.0,
            "Code": 0.0,
            "Safety": 7 / 9,
            "Hard": (2 / 3 + 1 + 0 + 2 / 3) / 4,
            "Normal": (2 / 3 + 1 + 0 + 7 / 9) / 4,
            "Easy": (1 / 6 + 1 + 0 + 8 / 9) / 4,
        }
    )
    assert rec.scores["headline"] == pytest.approx((0.5 + 1 + 0 + 7 / 9) / 4)
    # A pairwise judge that agrees with the scores gives the same matrices under the strict tie policy.
    pair = run("rm-bench", TableJudge(scores=table), path, tie_policy="wrong")
    assert pair.scores["sections"] == pytest.approx(rec.scores["sections"])


def test_rmbench_domain_from_file_name(tmp_path: Path, run) -> None:
    """The per-domain repo files (`code_filtered.json`) carry no `domain`; it comes from the file name."""
    rows, table = _rmbench_rows()
    code = [{k: v for k, v in r.items() if k != "domain"} for r in rows if r["domain"] == "code"]
    path = tmp_path / "code_filtered.json"
    path.write_text(json.dumps(code), encoding="utf-8")
    rec = run("rm-bench", LookupScorer(table), path)
    assert list(rec.scores["subsets"]) == ["code"] and rec.scores["headline"] is None  # 3 domains missing


# --------------------------------------------------------------------------------------------------------
# JudgeBench
# --------------------------------------------------------------------------------------------------------

JB_ROWS = [  # (source, label, score A, score B)
    ("mmlu-pro-math", "A>B", 3, 1),  # A>B: correct
    ("mmlu-pro-biology", "B>A", 1, 1),  # tie -> B>A: correct
    ("livebench-reasoning", "A>B", 1, 1),  # tie -> B>A: wrong
    ("livecodebench", "A>B", 0, 2),  # B>A: wrong
    ("livebench-math", "B>A", 0, 2),  # B>A: correct
]


def _judgebench(tmp_path: Path) -> tuple[Path, dict[str, float]]:
    rows, table = [], {}
    for i, (src, label, a, b) in enumerate(JB_ROWS):
        rows.append(
            {
                "pair_id": f"p{i}",
                "original_id": str(i),
                "source": src,
                "question": f"q{i}",
                "response_model": "gpt-4o-2024-05-13",
                "response_A": f"A{i}",
                "response_B": f"B{i}",
                "label": label,
            }
        )
        table[f"A{i}"], table[f"B{i}"] = a, b
    return _jsonl(tmp_path / "dataset=judgebench,response_model=gpt-4o-2024-05-13.jsonl", rows), table


def test_judgebench_single_game(tmp_path: Path, run) -> None:
    """Single game: 'A>B' if score_A > score_B else 'B>A'. Correct rows 0, 1, 4: overall 3/5;
    mmlu-pro 2/2, livebench-reasoning 0, livecodebench 0, livebench-math 1."""
    path, table = _judgebench(tmp_path)
    rec = run("judgebench", LookupScorer(table), path)
    assert rec.scores["headline"] == pytest.approx(3 / 5)
    assert rec.scores["sections"] == {
        "mmlu-pro": 1.0,
        "livebench-reasoning": 0.0,
        "livebench-math": 1.0,
        "livecodebench": 0.0,
    }


def test_judgebench_double_game(tmp_path: Path, run) -> None:
    """Double game: decisions for (A, B) and for (B, A), the second flipped back; +1 per decision equal to
    the label, -1 per decision equal to its flip, correct iff the counter > 0.
      row 0 (A>B): P=0.9 -> A>B (+1); swapped P=0.2 -> B>A, flipped A>B (+1): 2, correct
      row 1 (B>A): P=0.8 -> A>B (-1); swapped P=0.9 -> A>B, flipped B>A (+1): 0, not correct
               (averaging the two orders would say (0.8 + 1 - 0.9)/2 = 0.45 -> B>A, correct)
      row 2 (A>B): P=0.5 -> no decision (0); swapped 0.3 -> flipped A>B (+1): 1, correct
      row 3 (A>B): P=0.1 -> B>A (-1); swapped 0.5 -> no decision: -1, wrong
      row 4 (B>A): P=0.4 -> B>A (+1); swapped 0.7 -> flipped B>A (+1): 2, correct
    Overall 3/5; mmlu-pro 1/2."""
    path, _ = _judgebench(tmp_path)
    probs = [(0.9, 0.2), (0.8, 0.9), (0.5, 0.3), (0.1, 0.5), (0.4, 0.7)]
    table = {}
    for i, (p_ab, p_ba) in enumerate(probs):
        table[(f"A{i}", f"B{i}")], table[(f"B{i}", f"A{i}")] = p_ab, p_ba
    rec = run("judgebench", TableJudge(table), path)
    assert rec.scores["headline"] == pytest.approx(3 / 5)
    assert rec.scores["sections"] == {
        "mmlu-pro": 0.5,
        "livebench-reasoning": 1.0,
        "livebench-math": 1.0,
        "livecodebench": 0.0,
    }
    assert rules.judgebench_double_correct("A>B", "B>A", "A>B")
    assert not rules.judgebench_double_correct("A>B", "A>B", "A>B")  # inconsistent: counter 0


# --------------------------------------------------------------------------------------------------------
# Pairs and the suite
# --------------------------------------------------------------------------------------------------------


def _pairs() -> tuple[list[PreferencePair], dict[str, float]]:
    spec = [  # (source, family, corruption, chosen score, rejected score)
        ("s1", "arith", "wrong_value", 2, 1),  # 1
        ("s1", "format", "padding", 1, 1),  # tie -> 0
        ("s1", "format", "wrong_value", 0, 1),  # 0
        ("s2", "format", "padding", 3, 0),  # 1
    ]
    pairs, table = [], {}
    for i, (src, fam, corr, c, r) in enumerate(spec):
        pairs.append(
            PreferencePair(
                [Message("user", f"task {i}")],
                [Message("assistant", f"good{i}")],
                [Message("assistant", f"bad{i}")],
                source=src,
                attributes={"family": fam, "corruption": corr, "reference": f"good{i}"},
            )
        )
        table[f"good{i}"], table[f"bad{i}"] = c, r
    return pairs, table


def test_pairs_and_suite_breakdowns(tmp_path: Path, run) -> None:
    """Accuracy 2/4. By source: s1 1/3, s2 1. By family: arith 1, format 1/3.
    By corruption: wrong_value 1/2, padding 1/2. The suite reads the same pairs from a JSONL of
    PreferencePair.to_dict() rows or from a callable, with families as its sections."""
    pairs, table = _pairs()
    rec = run("pairs", LookupScorer(table), pairs=pairs)
    assert rec.scores["headline"] == 0.5
    assert rec.scores["sections"] == pytest.approx({"s1": 1 / 3, "s2": 1.0})
    assert rec.scores["extra"]["by_family"] == {
        "arith": {"score": 1.0, "n": 1},
        "format": pytest.approx({"score": 1 / 3, "n": 3}),
    }
    assert {k: v["score"] for k, v in rec.scores["extra"]["by_corruption"].items()} == {
        "padding": 0.5,
        "wrong_value": 0.5,
    }
    path = tmp_path / "suite.jsonl"
    write_jsonl(str(path), [p.to_dict() for p in pairs])
    from_file = run("suite", LookupScorer(table), path)
    from_callable = run("suite", LookupScorer(table), pairs=lambda: pairs)
    assert from_file.scores == from_callable.scores
    assert from_file.scores["sections"] == pytest.approx({"arith": 1.0, "format": 1 / 3})
    assert from_file.settings["data"] == str(path)


def test_reference_scorer_uses_reference_answers(tmp_path: Path, run) -> None:
    """A reference scorer gets attributes.reference: chosen == reference scores 1, rejected 0: accuracy 1.
    It is refused by benchmarks without reference answers, and a pair without one is a data problem."""
    pairs, _ = _pairs()
    assert run("suite", ReferenceMatch(), pairs=pairs).scores["headline"] == 1.0
    with pytest.raises(UserError, match="cannot use a reference scorer"):
        run("rewardbench", ReferenceMatch(), tmp_path / "x.jsonl")
    pairs[1].attributes.pop("reference")
    with pytest.raises(UserError, match="no reference answer"):
        run("suite", ReferenceMatch(), pairs=pairs)


# --------------------------------------------------------------------------------------------------------
# Runner: cache, NaN, bad input
# --------------------------------------------------------------------------------------------------------


def test_cache_reuse_costs_no_scorer_calls(tmp_path: Path, run) -> None:
    """A second run (same scorer description, benchmark and data) calls the scorer zero times, also with
    another tie policy; a scorer with a different description scores again."""
    path, scorer = _rb1(tmp_path)
    first = run("rewardbench", scorer, path)
    again = LookupScorer(scorer.table)
    second = run("rewardbench", again, path)
    assert again.n_scored == 0 and second.counts["scored_now"] == 0
    assert second.scores == first.scores
    half = run("rewardbench", again, path, tie_policy="half")
    assert again.n_scored == 0 and half.scores["sections"]["Chat Hard"] == 0.5
    other = LookupScorer(scorer.table, name="another-rm")
    run("rewardbench", other, path)
    assert other.n_scored == 18


def test_nan_scores_need_allow_partial(tmp_path: Path, run) -> None:
    """One NaN score: no record without allow_partial; with it, a record marked partial that leaves the
    failed example out (accuracy over the other three: 2/3)."""
    pairs, table = _pairs()
    table["bad1"] = float("nan")  # pair 1 fails
    records = tmp_path / "records"
    with pytest.raises(UserError, match="NaN") as e:
        run("pairs", LookupScorer(table), pairs=pairs)
    assert "allow_partial" in str(e.value)
    assert not records.exists() or not list(records.glob("*.json"))
    rec = run("pairs", LookupScorer(table), pairs=pairs, allow_partial=True)
    assert rec.partial and rec.counts["failed_examples"] == 1 and rec.counts["nan_items"] == 1
    assert rec.counts["examples"] == 3 and rec.scores["headline"] == pytest.approx(2 / 3)
    saved = json.loads(Path(rec.path).read_text())
    assert saved["partial"] is True and saved["counts"]["failed_examples"] == 1


def test_bad_rows_name_file_row_and_field(tmp_path: Path, run) -> None:
    """Missing field, unknown subset and wrong type are all reported at once, with file, line and field."""
    good = {"prompt": "q", "chosen": "c", "rejected": "r", "subset": "alpacaeval-easy", "id": 1}
    rows = [
        good,
        {k: v for k, v in good.items() if k != "rejected"},
        {**good, "subset": "alpacaeval-easyy"},
        {**good, "chosen": 5},
    ]
    path = _jsonl(tmp_path / "bad.jsonl", rows)
    with pytest.raises(UserError) as e:
        run("rewardbench", LookupScorer({"c": 1, "r": 0}), path)
    msg = str(e.value)
    assert "3 problem(s)" in msg
    assert f"{path} line 2: field 'rejected' is missing" in msg
    assert f"{path} line 3: field 'subset' has unknown value 'alpacaeval-easyy'" in msg
    assert "did you mean 'alpacaeval-easy'" in msg
    assert f"{path} line 4: field 'chosen' must be a string" in msg
    assert "allow_partial" in msg
    rec = run("rewardbench", LookupScorer({"c": 1, "r": 0}), path, allow_partial=True)
    assert rec.partial and rec.counts["invalid_rows"] == 3 and rec.counts["examples"] == 1


def test_rb2_and_rmbench_shape_errors(tmp_path: Path, run) -> None:
    """RM-Bench needs exactly 3 responses per side; RewardBench 2 Ties ids are ref:/tied: with a number."""
    rows, table = _rmbench_rows()
    rows[0]["chosen"] = rows[0]["chosen"][:2]
    rows[1]["domain"] = "chitchat"
    p = tmp_path / "rm.json"
    p.write_text(json.dumps(rows))
    with pytest.raises(UserError) as e:
        run("rm-bench", LookupScorer(table), p)
    assert f"{p} row 0: field 'chosen' must hold exactly 3 strings" in str(e.value)
    assert f"{p} row 1: field 'domain' has unknown value 'chitchat'" in str(e.value)
    rb2 = [{"id": "tie-7", "prompt": "q", "chosen": ["a", "b"], "rejected": ["c"], "num_correct": 2, "subset": "Ties"}]
    with pytest.raises(UserError, match="must be 'ref:<n>' or 'tied:<n>'"):
        run("rewardbench2", LookupScorer({}), _jsonl(tmp_path / "rb2.jsonl", rb2))


def test_unknown_benchmark_suggests_closest() -> None:
    with pytest.raises(UserError, match="did you mean 'rm-bench'"):
        BENCHMARKS["rmbench"]
    assert set(BENCHMARKS) == {"rewardbench", "rewardbench2", "rm-bench", "judgebench", "pairs", "suite", "agreement"}


# --------------------------------------------------------------------------------------------------------
# Records and rendering
# --------------------------------------------------------------------------------------------------------


def _two_models(tmp_path: Path, run) -> list:
    path, scorer = _rb1(tmp_path)
    rows, table = _rmbench_rows()
    rm = tmp_path / "total_dataset.json"
    rm.write_text(json.dumps(rows))
    flipped = {k: -v for k, v in scorer.table.items()}
    return [
        run("rewardbench", LookupScorer(scorer.table, "org/model-a"), path),
        run("rewardbench", LookupScorer(flipped, "org/model-b|pipe"), path),
        run("rm-bench", LookupScorer(table, "org/model-a"), rm),
    ]


def test_record_provenance(tmp_path: Path, run) -> None:
    path, scorer = _rb1(tmp_path)
    rec = run("rewardbench", scorer, path)
    d = json.loads(Path(rec.path).read_text())
    assert Path(rec.path).parent == tmp_path / "records"
    assert d["benchmark"] == "rewardbench" and d["version"] == BENCHMARKS["rewardbench"].version
    assert d["model"] == "lookup-rm" and d["scorer"]["kind"] == "pointwise"
    assert d["scorer"]["settings"]["model"] == "lookup-rm"
    assert set(d["versions"]) >= {"torch", "transformers", "prefalign", "python"}
    assert d["git"] is None or len(d["git"].split("-")[0]) == 40
    assert d["date"].endswith("Z") and d["partial"] is False
    assert d["settings"]["data_hash"] and d["settings"]["data"] == str(path)
    assert load_record(rec.path).scores == rec.scores


class SamplingJudge(TableJudge):
    """A pairwise judge with a generative judge's bookkeeping: cost per scored item and abstentions by reason
    (what the runner copies into records from `cost_per_item()` and `abstentions`)."""

    def __init__(self, scores: dict[str, float], model: str) -> None:
        super().__init__(scores=scores, name="think")
        self.model = model
        self.cost = {"items": 0, "generated_tokens": 0, "seconds": 0.0}
        self.abstentions: Counter[str] = Counter()

    def describe(self) -> dict[str, Any]:
        return {"model": self.model, "temperature": 0.7, "samples": 3, "template": "long judge prompt ..."}

    def compare(self, prompts: list, responses_a: list, responses_b: list) -> list[float]:
        out = super().compare(prompts, responses_a, responses_b)
        self.cost["items"] += len(out)
        self.cost["generated_tokens"] += 37 * len(out) + 5
        self.cost["seconds"] += 0.25 * len(out)
        self.abstentions["no_verdict"] += 1
        self.abstentions["both"] += 2
        return out

    cost_per_item = _GenerativeJudge.cost_per_item  # the generative judges' own per-item arithmetic


def _leaderboard(tmp_path: Path, run) -> list:
    """Records of five benchmarks from two scalar RMs (one scored on RM-Bench's chat file only), a sampling
    judge (pairwise, with cost), a reference scorer limited to 3 examples and a partial run."""
    rb1, rb1_scorer = _rb1(tmp_path)
    table = dict(rb1_scorer.table)
    rm_rows, rm_table = _rmbench_rows()
    total = tmp_path / "total_dataset.json"
    total.write_text(json.dumps(rm_rows))
    chat = tmp_path / "chat_filtered.json"  # one domain's file: its rows carry no domain
    chat.write_text(
        json.dumps([{k: v for k, v in r.items() if k != "domain"} for r in rm_rows if r["domain"] == "chat"])
    )
    jb, jb_table = _judgebench(tmp_path)
    rb2_rows, rb2_table = _rb2_rows()
    rb2 = _jsonl(tmp_path / "rb2.jsonl", rb2_rows)
    pairs, pair_table = _pairs()
    everything = {**table, **rm_table, **jb_table, **rb2_table, **pair_table}
    flipped = {k: -v for k, v in everything.items()}
    nan_pair = {**everything, "bad1": float("nan")}

    def rm(model: str, t: dict[str, float]) -> LookupScorer:
        return LookupScorer(t, name="scalar", model=model)

    return [
        run("rewardbench", rm("org/rm-a", everything), rb1),
        run("rewardbench", rm("org/rm-b|pipe", flipped), rb1),
        run("rewardbench", SamplingJudge(everything, "org/judge-7b"), rb1),
        run("rm-bench", rm("org/rm-a", everything), total),
        run("rm-bench", rm("org/rm-b|pipe", everything), chat),
        run("rm-bench", SamplingJudge(everything, "org/judge-7b"), total, tie_policy="wrong"),
        run("judgebench", rm("org/rm-a", everything), jb),
        run("judgebench", SamplingJudge(everything, "org/judge-7b"), jb),
        run("rewardbench2", rm("org/rm-a", everything), rb2),
        run("suite", ReferenceMatch(), pairs=pairs, limit=3),
        run("pairs", rm("org/rm-b|pipe", nan_pair), pairs=pairs, allow_partial=True),
    ]


class _Page(HTMLParser):
    """The tables of a rendered leaderboard, per tab: {section id: [table: [row: [cell text]]]}; a table
    inside a cell (RM-Bench's matrix) is read as that cell's text."""

    def __init__(self, dom: str) -> None:
        super().__init__()
        self.tabs: dict[str, list[list[list[str]]]] = {}
        self.images: dict[str, list[str]] = {}
        self._tab: str | None = None
        self._depth = 0
        self._row: list[str] | None = None
        self._cell: list[str] | None = None
        self.feed(dom)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "section":
            self._tab = a.get("id") or ""
            self.tabs[self._tab], self.images[self._tab] = [], []
        elif tag == "img" and self._tab is not None:
            self.images[self._tab].append(a.get("src") or "")
        elif tag == "table":
            self._depth += 1
            if self._depth == 1 and self._tab is not None:
                self.tabs[self._tab].append([])
        elif tag == "tr" and self._depth == 1:
            self._row = []
        elif tag in ("td", "th") and self._depth == 1:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self._depth -= 1
        elif tag in ("td", "th") and self._depth == 1 and self._cell is not None and self._row is not None:
            self._row.append(" ".join(" ".join(self._cell).split()))
            self._cell = None
        elif tag == "tr" and self._depth == 1 and self._row is not None and self._tab is not None:
            self.tabs[self._tab][-1].append(self._row)
            self._row = None
        elif tag == "section":
            self._tab = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def _shown(v: Any) -> str:
    """How the page writes a number of a record: counts as integers, scores in percent, matrices row by row."""
    if isinstance(v, list):
        return " ".join(_shown(x) for x in v)
    return str(v) if isinstance(v, int) and not isinstance(v, bool) else fmt_score(v)


def _find(table: list[list[str]], *lead: str) -> dict[str, str]:
    """The row of `table` whose first cells are `lead`, as {column header: cell}."""
    head = table[0]
    rows = [r for r in table[1:] if tuple(r[: len(lead)]) == lead]
    assert len(rows) == 1, f"{lead}: {len(rows)} rows in a table with columns {head}"
    return dict(zip(head, rows[0], strict=True))


def _check_record_on_page(rec: Any, tables: list[list[list[str]]], label: str) -> int:
    """Every number of `rec` is in its tab: headline, sections, every subset field, every extra number, the
    counts, the cost; returns how many numbers were checked."""
    by_title = {t[0][0]: t for t in tables}  # a table is known by its first column's header
    main = _find(tables[0], rec.model)
    s, checked = rec.scores, 0
    flagged = rec.partial or rec.settings.get("limit") is not None
    if s["headline"] is not None:
        assert main[s["headline_name"]] == fmt_score(s["headline"]) + ("*" if flagged else ""), rec.path
        checked += 1
    for name, v in s["sections"].items():
        if v is not None:
            assert main[name] == fmt_score(v), (rec.path, name)
            checked += 1
    assert main["Scorer"] == rec.scorer["name"] and main["Kind"] == rec.scorer["kind"]
    assert main["Examples"] == str(rec.counts["examples"]) and main["Record"] == "record"
    if "cost" in rec.scorer:
        c = rec.scorer["cost"]
        assert f"{c['generated_tokens_per_item']:.1f} tokens, {c['seconds_per_item']:.2f} s" in main["Cost per item"]
        assert f"over {c['items']} items" in main["Cost per item"]
        for reason, n in rec.scorer["abstentions"].items():
            assert f"{reason} {n}" in main["Cost per item"]
        checked += 2 + len(rec.scorer["abstentions"])
    else:
        assert main["Cost per item"] == "\u2013"
    if rec.partial:
        assert f"{rec.counts['invalid_rows']} invalid rows, {rec.counts['failed_examples']} failed" in main["Run"]
    if rec.settings.get("limit") is not None:
        assert f"first {rec.settings['limit']} of" in main["Run"]
    for name, row in s["subsets"].items():
        found = _find(by_title[label], name, rec.model)
        for field, v in row.items():
            assert found[field] == _shown(v), (rec.path, name, field)
            checked += 1
    for key, val in s["extra"].items():
        if isinstance(val, dict) and val and all(isinstance(r, dict) for r in val.values()):
            for name, row in val.items():
                found = _find(by_title[key.removeprefix("by_")], name, rec.model)
                for field, v in row.items():
                    assert found[field] == _shown(v), (rec.path, key, name, field)
                    checked += 1
        else:
            items = val.items() if isinstance(val, dict) else [(None, val)]
            for sub, v in items:
                name = key if sub is None else f"{key}.{sub}"
                assert _find(by_title["number"], name, rec.model)["value"] == _shown(v), (rec.path, name)
                checked += 1
    details = _find(tables[-1], rec.model)
    for k, v in rec.counts.items():
        assert details[k] == str(v), (rec.path, k)
        checked += 1
    return checked


@pytest.mark.slow  # a browser: ~30 s each (make test-slow)
def test_leaderboard_page_shows_every_number(tmp_path: Path, run, chromium) -> None:
    """The page, loaded in headless Chromium, has a tab per benchmark; in it every shown record's headline,
    sections, subset fields (RM-Bench's hard / normal / easy and matrix, also for the chat-only run), extra
    numbers (RewardBench 2's Ties terms, the suite's tables), counts, scorer, kind and cost; partial and limited
    runs are marked with their counts; every row links its record; every chart has something in it."""
    from leaderboards.render import SUBSET_LABELS, build_board, chart_panels

    recs = _leaderboard(tmp_path, run)
    site = tmp_path / "site"
    files = render(tmp_path / "records", site)
    dom = chromium.dump_dom(files.html, "rm-bench")
    page = _Page(dom)
    assert set(page.tabs) == {"tab-overview"} | {f"tab-{b}" for b in {r.benchmark for r in recs}}
    assert 'id="tab-rm-bench" data-tab="rm-bench">' in dom and 'id="tab-overview" data-tab="overview" hidden' in dom
    checked = 0
    for rec in recs:
        checked += _check_record_on_page(rec, page.tabs[f"tab-{rec.benchmark}"], SUBSET_LABELS[rec.benchmark])
        tab = dom[dom.index(f'id="tab-{rec.benchmark}"') :].split("</section>")[0]
        row = next(r for r in tab.split("<tr>") if r.startswith(f"<td>{html.escape(rec.model)}</td>"))
        assert f'href="records/{Path(rec.path).name}"' in row  # its row links its record, copied beside the page
        assert (site / "records" / Path(rec.path).name).read_text() == Path(rec.path).read_text()
    assert checked > 150
    chat_only = next(r for r in recs if r.benchmark == "rm-bench" and r.model == "org/rm-b|pipe")
    assert chat_only.scores["headline"] is None and set(chat_only.scores["subsets"]) == {"chat"}
    for level in ("hard", "normal", "easy"):  # the levels the record holds, on the page although Hard/... are None
        assert _find(page.tabs["tab-rm-bench"][1], "chat", "org/rm-b|pipe")[level] == fmt_score(
            chat_only.scores["subsets"]["chat"][level]
        )
    overview = page.tabs["tab-overview"][0]
    for rec in recs:
        if rec.headline is not None:
            assert _find(overview, rec.model)[rec.benchmark].rstrip("*") == fmt_score(rec.headline)

    board = build_board(recs)
    for bench in board.benchmarks:  # a chart per benchmark, each with a value in every panel
        panels = chart_panels(bench, board.records(bench))
        assert panels and all(any(v is not None for vs in p.bars.values() for v in vs) for p in panels)
        assert files.charts[bench].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"charts/{files.charts[bench].name}" in page.images[f"tab-{bench}"]
    rm_panels = chart_panels("rm-bench", board.records("rm-bench"))
    assert [p.title for p in rm_panels] == ["score and sections", "per domain: hard / normal / easy"]
    assert rm_panels[1].bars["org/rm-b|pipe"][:3] == [
        chat_only.scores["subsets"]["chat"][k] for k in ("hard", "normal", "easy")
    ]

    shot = chromium.screenshot(files.html, tmp_path / "rm-bench.png", (1400, 1400), "rm-bench")
    from matplotlib.image import imread

    assert imread(str(shot)).std() > 0.05  # something was drawn, not a blank page


def test_charts_are_never_empty(tmp_path: Path, run) -> None:
    """Records without a headline chart their sections (RM-Bench on one domain: the old chart was empty); a
    record without any number gets no chart, and the page says so; no headline anywhere: no overview chart."""
    from leaderboards.records import Record
    from leaderboards.render import chart_panels

    rows, table = _rmbench_rows()
    code = tmp_path / "code_filtered.json"
    code.write_text(json.dumps([{k: v for k, v in r.items() if k != "domain"} for r in rows if r["domain"] == "code"]))
    rec = run("rm-bench", LookupScorer(table), code)
    panels = chart_panels("rm-bench", [rec])
    assert [(p.title, p.groups) for p in panels] == [
        ("score and sections", ["Code"]),
        ("per domain: hard / normal / easy", ["code hard", "code normal", "code easy"]),
    ]
    empty = Record(
        "judgebench",
        "1.0",
        "no-numbers",
        {"headline": None, "sections": {"mmlu-pro": None}, "subsets": {}},
        {"examples": 0},
        {"kind": "pointwise", "name": "scalar"},
        {},
        date="2020-01-01T00:00:00Z",
    )
    empty.save(tmp_path / "records")
    assert chart_panels("judgebench", [empty]) == []
    files = render(tmp_path / "records", tmp_path / "site")
    assert files.png is None and not (tmp_path / "site" / "leaderboard.png").exists()
    assert set(files.charts) == {"rm-bench"}
    page = files.html.read_text()
    judge_tab = page[page.index('id="tab-judgebench"') :]
    assert "No numbers to chart." in judge_tab and "<img" not in judge_tab.split("</section>")[0]
    assert "No shown record has a headline score" in page


def test_render_markdown(tmp_path: Path, run) -> None:
    """leaderboard.md: the overview, then each benchmark's tables with the record links."""
    recs = _two_models(tmp_path, run)
    files = render(tmp_path / "records", tmp_path / "site")
    md = files.markdown.read_text()
    assert md.startswith("# Reward model leaderboard") and "## rewardbench" in md and "## rm-bench" in md
    for rec in recs:
        assert rec.model.replace("|", "\\|") in md and fmt_score(rec.headline) in md
        assert f"(records/{Path(rec.path).name})" in md
    assert "### Per subset" in md and "### Per domain" in md
    assert files.overview in md and files.png is not None
    assert "<script" in files.html.read_text() and "http" not in files.html.read_text().split("<body>")[1]
    assert len(load_records(tmp_path / "records")) == 3


def test_a_generative_judge_rerun_gives_the_identical_record(tmp_path: Path, tiny_model_ref: str) -> None:
    """A pairwise judge (both orders, fixed placement) scored twice on the same file from nothing cached gives the
    same scores and the same per-example results, to the last digit."""
    from preference_data.suite import build_suite
    from reward_models.scorers import load_scorer

    data = tmp_path / "pairs.jsonl"
    pairs = build_suite(n_per_family=2, seed=0).train_pairs[:10]
    write_jsonl(str(data), [p.to_dict() for p in pairs])
    records = []
    for _ in range(2):
        judge = load_scorer("judge", model=tiny_model_ref, dtype="float32")
        settings = BenchSettings(data=str(data), use_cache=False, save=False, progress=False)
        records.append(run_benchmark("pairs", judge, settings))
    first, second = records
    assert first.scores == second.scores and first.items == second.items and len(first.items) == len(pairs)


def test_record_items_number_a_repeated_id_in_file_order() -> None:
    """Two examples with one id (two pairs of one prompt) are both kept, numbered in file order, so two records of
    the same file pair the same examples."""
    from leaderboards.loaders import Example
    from leaderboards.runner import _item_results

    ex = [Example("a", "s", [], []), Example("b", "s", [], []), Example("a", "t", [], [])]
    got = _item_results([(ex[0], {"correct": 1.0}), (ex[1], {"correct": 0.0}), (ex[2], {"correct": 0.5})])
    assert got == {"a": ["s", 1.0], "b": ["s", 0.0], "a#2": ["t", 0.5]}
