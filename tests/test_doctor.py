"""`align data doctor`: counts, reasons with line numbers, lengths, boundary checks — never a traceback."""

from __future__ import annotations

import json

from align.cli.main import main


def test_doctor_reports_each_bad_row_with_its_line(tmp_path, capsys):
    rows = [
        '{"prompt": "What is 2+2?", "chosen": "4", "rejected": "5"}',
        '{"prompt": "broken", "chosen": "a", ',
        '{"prompt": "Name a fruit.", "chosen": "", "rejected": "A chair."}',
        '{"prompt": "What is 2+2?", "chosen": "4", "rejected": "5"}',
        '{"prompt": "Say hi.", "chosen": "Hi!", "rejected": "No."}',
    ]
    f = tmp_path / "bad.jsonl"
    f.write_text("\n".join(rows) + "\n")
    out = tmp_path / "report"
    assert main(["data", "doctor", str(f), "--out", str(out), "--model", "builtin:tiny-llama"]) == 0
    text = capsys.readouterr().out
    assert "rows read: 5" in text and "records kept: 2" in text
    assert "malformed_json: 1 (lines 2)" in text
    assert "empty_field: 1 (lines 3)" in text
    assert "duplicate: 1 (lines 4 (same as line 1))" in text
    assert "⟦" in text  # the rendered example marks the prompt/response boundary
    report = json.loads((out / "doctor.json").read_text())
    assert report["data"]["dropped"] == {"malformed_json": 1, "empty_field": 1, "duplicate": 1}
    assert report["tokenization"]["lengths"]["prompt"]["max"] > 0


def test_doctor_on_real_hh_split(shared_data, tmp_path, capsys):
    src = shared_data / "hh-rlhf/helpful-base/test.decontaminated.jsonl.gz"
    assert main(["data", "doctor", str(src), "--out", str(tmp_path), "--max-length", "512"]) == 0
    report = json.loads((tmp_path / "doctor.json").read_text())
    assert report["data"]["rows_read"] == 2219
    assert report["pairs"] + report["data"]["dropped_total"] == 2219
    tok = report["tokenization"]
    assert (
        tok["n_in"] == report["pairs"]
        and tok["n_out"] + sum(v for k, v in tok["counts"].items() if k in ("too_long", "response_too_long"))
        == tok["n_in"]
    )
    assert "p90" in tok["lengths"]["chosen"]


def test_doctor_bad_source_is_a_clear_error(tmp_path, capsys):
    assert main(["data", "doctor", str(tmp_path / "missing.jsonl")]) == 2
    assert "missing.jsonl" in capsys.readouterr().err
    weird = tmp_path / "w.jsonl"
    weird.write_text('{"foo": 1}\n')
    assert main(["data", "doctor", str(weird)]) == 2
    assert "cannot tell the data format" in capsys.readouterr().err


def test_doctor_on_the_suite(tmp_path, capsys):
    assert main(["data", "doctor", "suite", "--out", str(tmp_path), "--model", "builtin:tiny-llama"]) == 0
    report = json.loads((tmp_path / "doctor.json").read_text())
    assert report["pairs"] > 1000 and report["tokenization"]["counts"].get("boundary_mismatch", 0) == 0


def test_doctor_pairs_rated_data_as_the_recipe_would(tmp_path, capsys):
    """--pairing and --objective reach the pair builder: rated rows become the pairs a recipe with the same
    data.pairing and data.objective trains on, so the report counts those."""

    def scored(*xs):
        return [{"overall_score": x, "brevity": -x} for x in xs]

    rows = [
        {"prompt": "Name a color.", "responses": ["Red.", "Blue is a color.", "A chair."], "scores": scored(3, 2, 1)},
        {"prompt": "Say hi.", "responses": ["Hi!", "Hello there.", "No."], "scores": scored(3, 1, 2)},
        {"prompt": "Count.", "responses": ["1 2 3", "one"], "scores": [3, 1]},  # numbers, not mappings: dropped
    ]
    f = tmp_path / "rated.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    common = ["data", "doctor", str(f), "--model", "builtin:tiny-llama", "--format", "rated"]
    assert main([*common, "--out", str(tmp_path / "a"), "--pairing", "max_second"]) == 0
    second = json.loads((tmp_path / "a" / "doctor.json").read_text())
    assert main([*common, "--out", str(tmp_path / "b"), "--pairing", "none"]) == 0
    none = json.loads((tmp_path / "b" / "doctor.json").read_text())
    assert second["data"] != none["data"]  # the pair builder ran (or not) as asked
    assert second["data"]["dropped"] == {"wrong_type": 1}  # the row of bare numbers, counted, never a traceback
    reports = {}
    for objective in ("overall_score", "brevity"):
        assert main([*common, "--out", str(tmp_path / objective), "--objective", objective]) == 0
        reports[objective] = json.loads((tmp_path / objective / "doctor.json").read_text())
    assert reports["brevity"]["example"] != reports["overall_score"]["example"]  # ranked by another objective
    assert main([*common, "--out", str(tmp_path / "c"), "--pairing", "max_mn"]) != 0
    assert "did you mean 'max_min'" in capsys.readouterr().err
