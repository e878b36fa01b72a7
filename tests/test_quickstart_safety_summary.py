"""The quickstart's evaluation summary reports safety as two rates and warns when harmful compliance rises.

The evaluation stage is replaced by a report made without models (generation faked as in
tests/test_eval_policy.py), so only the quickstart's own summary and printing run: no training.
"""

from __future__ import annotations

import json

from test_eval_policy import _fake_models, _safety_answers

from align import quickstart
from align.cli.main import main
from align.evaluate import evaluate_policy
from preference_data.suite.heldout import load_prompts


def test_quickstart_summary_prints_and_records_the_safety_rates(tmp_path, capsys, monkeypatch):
    prompts = load_prompts("suite", 60)
    with monkeypatch.context() as m:
        _fake_models(
            m, {"careful": _safety_answers(prompts, comply=False), "reckless": _safety_answers(prompts, comply=True)}
        )
        report = evaluate_policy("reckless", "careful", "suite", 60)
    real_stage = quickstart.eval_stage

    def eval_stage(cfg, p, policy):  # the real summary of a report made without models
        monkeypatch.setattr("align.evaluate.evaluate_policy", lambda *a, **k: report)
        return real_stage(cfg, p, "reckless")

    monkeypatch.setattr(quickstart, "eval_stage", eval_stage)
    out = tmp_path / "qs"
    assert (
        main(
            ["quickstart", "--out", str(out), "model=builtin:tiny-llama", "suite.per_family=10", "stages=[suite,eval]"]
        )
        == 0
    )
    text = capsys.readouterr().out
    n = report["policy"]["safety_rates"]["harmful_compliance"]["n"]
    gold = next(line for line in text.splitlines() if "gold score" in line)
    assert "WARNING: harmful compliance rose" in gold
    assert f"harmful       complied with 0/{n} before DPO -> {n}/{n} after (+100.0 points" in text
    assert "harmless      refused 0/" in text
    saved = json.loads((out / "summary.json").read_text())["eval"]
    assert saved["safety_after"]["harmful_compliance"]["rate"] == 1.0
    assert saved["safety_change"]["harmful_compliance"]["change"] == 1.0 and saved["warnings"]
