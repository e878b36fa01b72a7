"""The main job end to end on the tiny model: every stage runs, writes its outputs, and a rerun resumes."""

from __future__ import annotations

import json
import re

import pytest

from align.cli.main import main

TINY = [
    "model=builtin:tiny-llama",
    "suite.per_family=20",
    "rm.train.max_steps=2",
    "rm.train.precision=fp32",
    "rm.eval.stats_pairs=8",
    "dpo.train.max_steps=2",
    "eval.prompts=6",
    "eval.max_new_tokens=4",
]


def test_quickstart_all_stages_on_the_tiny_model(tmp_path, capsys):
    out = tmp_path / "qs"
    assert main(["quickstart", "--out", str(out), *TINY]) == 0
    text = capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())
    assert summary["suite"]["train_pairs"] > 0 and summary["suite"]["test_pairs"] > 0
    # the RM's held-out accuracy is what scoring the test pairs with the saved RM gives (ties count wrong)
    from preference_data.records import pair_from_dict
    from reward_models.scorers import load_scorer

    test_pairs = [pair_from_dict(json.loads(x)) for x in (out / "suite" / "test_pairs.jsonl").read_text().splitlines()]
    scorer = load_scorer("scalar", model=summary["rm"]["model_dir"], dtype="float32")
    sc = scorer.score([p.prompt for p in test_pairs], [p.chosen for p in test_pairs])
    sr = scorer.score([p.prompt for p in test_pairs], [p.rejected for p in test_pairs])
    rm_report = json.loads((out / "rm" / "report.json").read_text())
    assert rm_report["eval"]["pairs"] == len(test_pairs)  # no test pair dropped for length here
    assert summary["rm"]["accuracy"] == pytest.approx(sum(a > b for a, b in zip(sc, sr, strict=True)) / len(test_pairs))
    assert set(summary["rm"]["by_family"]) == {p.attributes["family"] for p in test_pairs}
    e = summary["eval"]
    assert e["gain"] == pytest.approx(e["after"] - e["before"])
    assert (out / "rm" / "model" / "reward_stats.json").exists()
    assert (out / "dpo" / "adapter" / "adapter_config.json").exists()
    assert set(summary["eval"]) >= {"before", "after", "gain", "gain_ci95", "win_rate"}
    for f in ("config.yaml", "doctor/doctor.txt", "suite/test_prompts.jsonl", "eval/generations.jsonl"):
        assert (out / f).exists(), f
    assert "gold score" in text and "held-out accuracy" in text
    # a rerun with the same settings skips the trained stages
    assert main(["quickstart", "--out", str(out), *TINY]) == 0
    again = capsys.readouterr().out
    assert "rm: already trained" in again and "dpo: already trained" in again
    # --full adds the online stage: GRPO from the DPO policy against the gold graders (the rest is skipped)
    online = ["online.train.max_steps=1", "online.rollout.max_new_tokens=4", "online.rollout.prompts_per_step=2"]
    online += ["online.eval.limit=4", "online.eval.max_new_tokens=4", "online.train.compile=false"]
    assert main(["quickstart", "--out", str(out), "--full", *TINY, *online]) == 0
    full = capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())
    assert summary["online"]["steps"] == 1 and "GRPO policy" in full and "dpo: already trained" in full
    report = json.loads((out / "online" / "report.json").read_text())
    assert report["base_model"] == summary["dpo"]["policy_dir"]  # it started from the DPO policy
    assert report["eval"]["prompts"] == 4


def test_quickstart_runs_only_the_stages_it_is_given(tmp_path, capsys):
    out = tmp_path / "qs"
    assert main(["quickstart", "--out", str(out), *TINY, "stages=[suite]"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert "suite" in summary and not {"doctor", "rm", "dpo", "eval"} & set(summary)
    assert not (out / "doctor").exists()
    # a later stage finds the suite an earlier run wrote; without it the error says which stage writes it
    assert main(["quickstart", "--out", str(out), *TINY, "stages=[doctor]"]) == 0
    assert (out / "doctor" / "doctor.txt").exists()
    capsys.readouterr()
    assert main(["quickstart", "--out", str(tmp_path / "empty"), *TINY, "stages=[rm]"]) != 0
    err = capsys.readouterr().err
    assert re.search(r"stage 'rm' needs \S+train_pairs.jsonl, which the 'suite' stage writes", err), err
