"""The records' bootstrap 95% intervals (leaderboards/intervals.py): present for the headline, every section and
every subset of each benchmark, holding the point estimate, identical on a rerun, narrower on more examples, Ties
prompts resampled whole; shown by `summarize` and on the page; old records without them still load and render.

The fixtures are the ones the benchmark tests score: tests/fixtures/reference/ (the reference code's own numbers) and
the hand-worked files of tests/test_benchmarks.py.
"""

from __future__ import annotations

import functools
import json
import math
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from leaderboards.benchmarks import BENCHMARKS, Judgement, RunInfo
from leaderboards.compare_records import compare_records
from leaderboards.intervals import bootstrap_intervals, resampling_units
from leaderboards.loaders import read
from leaderboards.records import Record, fmt_interval, load_record, summarize
from leaderboards.render import CI, benchmark_tables, render
from leaderboards.runner import BenchSettings, run_benchmark
from prefalign.errors import UserError
from prefalign.stats import percentile_interval, stratified_resamples
from preference_data.records import write_jsonl
from tests.test_benchmarks import (
    LookupScorer,
    TableJudge,
    _jsonl,
    _judgebench,
    _pairs,
    _rb1,
    _rb2_rows,
    _rmbench_rows,
)
from tests.test_reference_scores import FIXTURES, TableScorer, _judgebench_judge, _rows

# --- the fixtures, each writable k times over (ids renamed, texts kept: the scorers look scores up by text) --------


def _rename(bench: str, row: dict[str, Any], k: int) -> dict[str, Any]:
    """Copy k of a row: its id made unique (a Ties prompt `ref:N` / `tied:N` becomes prompt N + 1000 k)."""
    if k == 0:
        return row
    row = dict(row)
    if bench == "judgebench":
        row["pair_id"] = f"{row['pair_id']}-{k}"
    elif bench == "rewardbench2" and row["subset"] == "Ties":
        kind, n = str(row["id"]).split(":")
        row["id"] = f"{kind}:{int(n) + 1000 * k}"
    else:
        row["id"] = f"{row['id']}-{k}"
    return row


def _write(bench: str, rows: list[dict[str, Any]], path: Path, copies: int) -> Path:
    rows = [_rename(bench, r, k) for k in range(copies) for r in rows]
    if path.suffix == ".json":
        path.write_text(json.dumps(rows), encoding="utf-8")
        return path
    return _jsonl(path, rows)


def _run(bench: str, scorer: Any, data: Any = None, pairs: Any = None, **kw: Any) -> Record:
    settings = BenchSettings(data=None if data is None else str(data), use_cache=False, save=False, progress=False)
    for key, value in kw.items():
        setattr(settings, key, value)
    return run_benchmark(bench, scorer, settings, pairs=pairs)


def _reference_table(rows: list[dict[str, Any]], scores: dict[str, Any], rb1: bool) -> dict[str, float]:
    table: dict[str, float] = {}
    for r in rows:
        if rb1:
            table[r["chosen"]], table[r["rejected"]] = scores[str(r["id"])]
        else:
            table.update(zip(r["chosen"] + r["rejected"], map(float, scores[r["id"]]), strict=True))
    return table


def _fixture(name: str, tmp: Path, copies: int = 1, **kw: Any) -> Record:
    """One record per fixture: `copies` copies of every example; `kw`: `BenchSettings` fields."""
    run = functools.partial(_run, **kw)
    tmp.mkdir(parents=True, exist_ok=True)
    if name == "ref-rewardbench":
        d = FIXTURES / "rewardbench"
        rows, scores = json.loads((d / "filtered.json").read_text()), json.loads((d / "scores.json").read_text())
        table = _reference_table(rows, scores, rb1=True)
        return run("rewardbench", TableScorer(table), _write("rewardbench", rows, tmp / "filtered.json", copies))
    if name == "ref-rewardbench2":
        d = FIXTURES / "rewardbench2"
        rows, scores = _rows(d / "data.jsonl"), json.loads((d / "scores.json").read_text())
        table = _reference_table(rows, scores, rb1=False)
        return run("rewardbench2", TableScorer(table), _write("rewardbench2", rows, tmp / "data.jsonl", copies))
    if name == "ref-rm-bench":
        d = FIXTURES / "rmbench"
        rows, table = json.loads((d / "total_dataset.json").read_text()), json.loads((d / "scores.json").read_text())
        return run("rm-bench", TableScorer(table), _write("rm-bench", rows, tmp / "total_dataset.json", copies))
    if name in ("ref-judgebench-single", "ref-judgebench-double"):
        d = FIXTURES / "judgebench"
        rows = _rows(d / "pairs.jsonl")
        data = _write("judgebench", rows, tmp / "pairs.jsonl", copies)
        if name.endswith("double"):
            return run("judgebench", _judgebench_judge(d / "judge_judgments.jsonl"), data)
        table = {}
        for r in _rows(d / "rm_judgments.jsonl"):
            table[r["response_A"]], table[r["response_B"]] = r["judgments"][0]["judgment"]["scores"]
        return run("judgebench", TableScorer(table), data)
    if name == "rewardbench":
        path, scorer = _rb1(tmp)
        return run("rewardbench", scorer, _write("rewardbench", _rows(path), tmp / "rb1x.jsonl", copies))
    if name == "rewardbench2":
        rows, table = _rb2_rows()
        return run("rewardbench2", LookupScorer(table), _write("rewardbench2", rows, tmp / "rb2.jsonl", copies))
    if name == "rm-bench":
        rows, table = _rmbench_rows()
        return run("rm-bench", LookupScorer(table), _write("rm-bench", rows, tmp / "total_dataset.json", copies))
    if name == "rm-bench-pairwise":
        rows, table = _rmbench_rows()
        data = _write("rm-bench", rows, tmp / "total_dataset.json", copies)
        return run("rm-bench", TableJudge(scores=table), data, tie_policy="wrong")
    if name == "judgebench":
        path, table = _judgebench(tmp)
        return run("judgebench", LookupScorer(table), _write("judgebench", _rows(path), tmp / "jb.jsonl", copies))
    pairs, table = _pairs()
    if name == "pairs":
        return run("pairs", LookupScorer(table), pairs=pairs * copies)
    assert name == "suite"
    path = tmp / "suite.jsonl"
    write_jsonl(str(path), [p.to_dict() for p in pairs * copies])
    return run("suite", LookupScorer(table), path)


FIXTURE_NAMES = [
    "ref-rewardbench",
    "ref-rewardbench2",
    "ref-rm-bench",
    "ref-judgebench-single",
    "ref-judgebench-double",
    "rewardbench",
    "rewardbench2",
    "rm-bench",
    "rm-bench-pairwise",
    "judgebench",
    "pairs",
    "suite",
]


def _width(bounds: list[float]) -> float:
    return bounds[1] - bounds[0]


# --- the intervals ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_every_subset_section_and_the_overall_have_an_interval_holding_the_score(tmp_path: Path, name: str) -> None:
    """Each benchmark's record: an interval for the headline, every section with a value and every subset, each
    around its point estimate; with the resampling's count, seed and method stated."""
    s = _fixture(name, tmp_path).scores
    iv = s["intervals"]
    assert (iv["level"], iv["reps"], iv["seed"]) == (0.95, 1000, 0) and "stratified by subset" in iv["method"]
    if s["headline"] is not None:
        lo, hi = iv["overall"]
        assert lo <= s["headline"] <= hi, (name, s["headline"], iv["overall"])
    assert set(iv["subsets"]) == set(s["subsets"]) and s["subsets"]
    for sub, row in s["subsets"].items():
        lo, hi = iv["subsets"][sub]
        assert lo <= row["score"] <= hi, (name, sub, row["score"], iv["subsets"][sub])
    assert set(iv["sections"]) == set(s["sections"])
    for sec, v in s["sections"].items():
        if v is not None:
            lo, hi = iv["sections"][sec]
            assert lo <= v <= hi, (name, sec, v, iv["sections"][sec])


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_a_rerun_writes_the_same_intervals(tmp_path: Path, name: str) -> None:
    first, second = _fixture(name, tmp_path / "a"), _fixture(name, tmp_path / "b")
    assert first.scores["intervals"] == second.scores["intervals"]
    assert first.scores == second.scores


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_four_copies_of_the_examples_narrow_every_interval(tmp_path: Path, name: str) -> None:
    """The same examples four times over (the same point estimates): every interval narrower where it had any width;
    one that is a point stays a point (a subset whose examples all score alike; JudgeBench's small fixture, where
    every source is all right or all wrong, so every resample, drawn within sources, scores the same)."""
    one, four = _fixture(name, tmp_path / "x1"), _fixture(name, tmp_path / "x4", copies=4)
    assert four.counts["examples"] == 4 * one.counts["examples"]
    assert four.scores["headline"] == pytest.approx(one.scores["headline"])
    a, b = one.scores["intervals"], four.scores["intervals"]
    pairs = [(a["overall"], b["overall"])] if one.scores["headline"] is not None else []
    pairs += [(bounds, b["subsets"][sub]) for sub, bounds in a["subsets"].items()]
    pairs += [(bounds, b["sections"][sec]) for sec, bounds in a["sections"].items() if bounds is not None]
    for before, after in pairs:
        assert _width(after) < _width(before) if _width(before) > 0 else _width(after) == 0, (name, before, after)
    assert _width(a["overall"] or [0, 0]) > 0 or name == "judgebench"


def test_another_seed_or_count_is_recorded_and_zero_resamples_write_none(tmp_path: Path) -> None:
    base = _fixture("ref-rewardbench", tmp_path).scores["intervals"]
    other = _fixture("ref-rewardbench", tmp_path, bootstrap=200, bootstrap_seed=7).scores["intervals"]
    assert (other["reps"], other["seed"]) == (200, 7) and other["overall"] != base["overall"]
    assert "intervals" not in _fixture("ref-rewardbench", tmp_path, bootstrap=0).scores
    with pytest.raises(UserError, match="bootstrap must be a number of resamples"):
        _fixture("ref-rewardbench", tmp_path, bootstrap=-1)


# --- RewardBench 2's Ties prompts are drawn whole --------------------------------------------------------------------


def _rb2_results() -> tuple[list[Any], RunInfo]:
    d = FIXTURES / "rewardbench2"
    rows, scores = _rows(d / "data.jsonl"), json.loads((d / "scores.json").read_text())
    table = _reference_table(rows, scores, rb1=False)
    bench = BENCHMARKS["rewardbench2"]
    parsed = read(bench.loader, str(d / "data.jsonl"), None)
    results = []
    for ex in parsed.examples:
        j = Judgement(scores=[table[r[-1].content] for r in ex.responses])
        results.append((ex, bench.rule(ex, j, "wrong")))
    return results, RunInfo("pointwise", False, "wrong", "fixture")


def test_a_ties_prompt_is_one_unit_of_its_ref_and_tied_rows() -> None:
    """The resampling units: every non-Ties row alone, in its subset; each Ties prompt's `ref:` and `tied:` rows
    together (a prompt with one of them: that row)."""
    results, _ = _rb2_results()
    examples = [ex for ex, _ in results]
    strata, keyed = resampling_units(examples, BENCHMARKS["rewardbench2"].resampling)
    by_subset = {examples[units[0][0]].group: units for units in strata}
    assert set(by_subset) == {"Factuality", "Precise IF", "Math", "Safety", "Focus", "Ties"}
    for subset, units in by_subset.items():
        if subset != "Ties":
            assert all(len(u) == 1 for u in units)
    ties = {tuple(sorted(examples[i].id for i in u)) for u in by_subset["Ties"]}
    prompts: dict[int, list[str]] = defaultdict(list)
    for ex in examples:
        if ex.group == "Ties":
            prompts[ex.meta["ties_prompt"]].append(ex.id)
    assert ties == {tuple(sorted(ids)) for ids in prompts.values()}
    assert ("ref:1", "tied:1") in ties and ("ref:10",) in ties and ("tied:11",) in ties
    assert keyed == {i for i, ex in enumerate(examples) if ex.group == "Ties"}


def test_a_resample_never_splits_a_ties_prompt_and_counts_a_prompt_drawn_twice_twice() -> None:
    """Every resample the aggregation sees: each subset keeps its size (Ties: its 11 prompts), every Ties prompt id
    holds the rows of one original prompt, both of them where it has both (never a `ref:` row without its `tied:`
    row), and a prompt drawn twice comes as two prompts (renumbered), so the composite counts it twice."""
    results, run = _rb2_results()
    bench = BENCHMARKS["rewardbench2"]
    sizes = Counter(ex.group for ex, _ in results if ex.group != "Ties")
    original: dict[int, set[str]] = defaultdict(set)
    for ex, _ in results:
        if ex.group == "Ties":
            original[ex.meta["ties_prompt"]].add(ex.meta["ties_kind"])
    seen = []

    def spy(sample: list[Any]) -> Any:
        seen.append(sample)
        return bench.aggregate(sample, run)

    point = bench.aggregate(results, run)
    iv = bootstrap_intervals(results, spy, point, bench.resampling, reps=300, seed=0)
    assert len(seen) == 300 and iv["subsets"]["Ties"] is not None
    drawn_twice = 0
    for sample in seen:
        assert Counter(ex.group for ex, _ in sample if ex.group != "Ties") == sizes
        prompts: dict[int, list[Any]] = defaultdict(list)
        for ex, _ in sample:
            if ex.group == "Ties":
                prompts[ex.meta["ties_prompt"]].append(ex)
        assert len(prompts) == len(original)  # 11 prompts drawn, none merged with another draw
        sources = []
        for rows in prompts.values():
            (source,) = {int(ex.id.split(":")[1]) for ex in rows}  # one original prompt per drawn prompt
            assert {ex.meta["ties_kind"] for ex in rows} == original[source] and len(rows) == len(original[source])
            sources.append(source)
        drawn_twice += len(sources) != len(set(sources))
    assert drawn_twice > 250  # 11 prompts drawn with replacement: a repeat in all but ~0.01% of resamples


def test_stratified_resamples_keep_each_stratum_and_its_size() -> None:
    strata = [["a", "b", "c"], ["x"], ["p", "q"]]
    draws = list(stratified_resamples(strata, 50, seed=3))
    assert draws == list(stratified_resamples(strata, 50, seed=3))
    for d in draws:
        assert set(d[:3]) <= {"a", "b", "c"} and d[3] == "x" and set(d[4:]) <= {"p", "q"} and len(d) == 6
    assert any(len(set(d[:3])) < 3 for d in draws)  # with replacement


# --- shown, and old records -------------------------------------------------------------------------------------


def test_summarize_prints_each_interval_beside_its_score(tmp_path: Path) -> None:
    rec = _fixture("ref-rewardbench", tmp_path)
    iv = rec.scores["intervals"]
    lines = summarize(rec).splitlines()
    assert lines[1].endswith(fmt_interval(iv["overall"])) and lines[1].startswith("  Score: 47.8  [")
    for name, bounds in iv["sections"].items():
        assert any(
            line.split()[: len(name.split())] == name.split() and line.endswith(fmt_interval(bounds)) for line in lines
        ), name
    for name, bounds in iv["subsets"].items():
        (line,) = [line for line in lines if line.split()[:1] == [name]]
        assert line.endswith(fmt_interval(bounds)) and f"(n={rec.scores['subsets'][name]['n']})" in line
    assert "95% bootstrap intervals, 1000 resamples (seed 0)" in summarize(rec)


def _old(rec: Record, path: Path) -> Record:
    """The record as a version without intervals wrote it."""
    d = rec.to_dict()
    d["scores"].pop("intervals")
    d["model"] = "old-model"
    path.write_text(json.dumps(d))
    return load_record(path)


def test_old_records_without_intervals_load_summarize_render_and_compare(tmp_path: Path) -> None:
    new = _fixture("ref-rewardbench", tmp_path)
    new.save(tmp_path / "records")
    old = _old(new, tmp_path / "records" / "old.json")
    assert "intervals" not in old.scores
    text = summarize(old)
    assert "[" not in text and "bootstrap" not in text and "  Score: 47.8\n" in text
    tables = benchmark_tables("rewardbench", [new, old], {})
    main, per_subset = tables[0], tables[1]
    head = main.head
    assert head[1:3] == ["Score", CI]
    rows = {r[0].text: r for r in main.rows}
    assert rows[new.model][2].text == fmt_interval(new.scores["intervals"]["overall"])
    assert rows["old-model"][2].text == "\u2013"
    sub_head = per_subset.head
    assert sub_head[:5] == ["subset", "model", "score", CI, "n"]
    for r in per_subset.rows:
        want = fmt_interval(new.scores["intervals"]["subsets"][r[0].text]) if r[1].text == new.model else "\u2013"
        assert r[3].text == want
    # only old records: no interval column at all
    only_old = benchmark_tables("rewardbench", [old], {})
    assert CI not in only_old[0].head and CI not in only_old[1].head
    files = render(tmp_path / "records", tmp_path / "site")
    page = files.html.read_text()
    assert f"<th>{CI}</th>" in page and fmt_interval(new.scores["intervals"]["overall"]) in page
    # `align bench compare` pairs a record with intervals and one without, by example
    c = compare_records(new, old, "sidak", reps=200)
    assert c.overall.diff == 0 and len(c.subsets) == len(new.scores["subsets"])


def test_a_record_keeps_its_intervals_through_the_file(tmp_path: Path) -> None:
    rec = _fixture("ref-rewardbench2", tmp_path)
    rec.save(tmp_path / "records")
    back = load_record(rec.path or "")
    assert back.scores["intervals"] == rec.scores["intervals"]
    assert all(isinstance(v, list) and len(v) == 2 for v in back.scores["intervals"]["subsets"].values())
    assert not any(
        isinstance(x, float) and math.isnan(x) for v in back.scores["intervals"]["subsets"].values() for x in v
    )


def test_the_agreement_benchmark_keeps_its_own_intervals() -> None:
    """Agreement reports its intervals itself (`extra.intervals`: accuracy with and without ties, kappa, ...): the
    runner's bootstrap leaves it alone."""
    assert BENCHMARKS["agreement"].resampling is None
    assert all(BENCHMARKS[b].resampling is not None for b in set(BENCHMARKS) - {"agreement"})


def test_the_order_statistics_and_the_resamples_are_frozen():
    """The interval's ends are the 26th smallest and largest of 1,000 (j = floor(0.025 * 1000) = 25), and the
    seeded stratified draws are fixed: a changed random stream or an off-by-one fails here."""
    assert percentile_interval([float(x) for x in range(1000)]) == (25.0, 974.0)
    frozen = [["a", "b", "b", "x"], ["b", "a", "a", "x"], ["a", "a", "c", "x"]]  # random.Random(3).choices
    assert list(stratified_resamples([["a", "b", "c"], ["x"]], 3, seed=3)) == frozen
