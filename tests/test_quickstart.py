"""The main job end to end on the tiny model: every stage runs, writes its outputs, and a rerun resumes."""

from __future__ import annotations

import json

from align.cli.main import main

TINY = ["model=builtin:tiny-llama", "suite.per_family=20", "rm.train.max_steps=2",
        "rm.eval.stats_pairs=8", "dpo.train.max_steps=2", "eval.prompts=6",
        "eval.max_new_tokens=4"]


def test_quickstart_all_stages_on_the_tiny_model(tmp_path, capsys):
    out = tmp_path / "qs"
    assert main(["quickstart", "--out", str(out), *TINY]) == 0
    text = capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())
    assert summary["suite"]["train_pairs"] > 0 and summary["suite"]["test_pairs"] > 0
    assert 0 <= summary["rm"]["accuracy"] <= 1 and summary["rm"]["by_family"]
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
