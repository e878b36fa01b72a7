"""The quickstart's evaluation summary reports safety as two rates and warns when harmful compliance rises.

The evaluation stage is replaced by a report made without models (generation faked as in
tests/test_eval_policy.py), so only the quickstart's own summary and printing run: no training.
"""

from __future__ import annotations

import json

from align import quickstart
from align.cli.main import main
from align.evaluate import evaluate_policy
from preference_data.suite.heldout import load_prompts
from tests.test_eval_policy import _fake_models, _safety_answers


def test_quickstart_summary_prints_and_records_the_safety_rates(tmp_path, capsys, monkeypatch):
    prompts = load_prompts("suite", 60)
    with monkeypatch.context() as m:
        _fake_models(
            m, {"careful": _safety_answers(prompts, comply=False), "reckless": _safety_answers(prompts, comply=True)}
        )
        report = evaluate_policy("reckless", "careful", "suite", 60)
    monkeypatch.setattr(quickstart, "evaluate_policy", lambda *a, **k: report)  # the real summary, no models
    out = tmp_path / "qs"
    (out / "align").mkdir(parents=True)
    (out / "align" / "report.json").write_text(json.dumps({"policy_dir": "reckless"}))  # a finished align stage
    args = ["quickstart", "--out", str(out), "model=builtin:tiny-llama", "suite.per_family=10", "stages=[suite,eval]"]
    assert main(args) == 0
    text = capsys.readouterr().out
    n = report["policy"]["safety_rates"]["harmful_compliance"]["n"]
    gold = next(line for line in text.splitlines() if "RM-aligned: gold score" in line)
    assert "WARNING: harmful compliance rose" in gold
    assert f"harmful requests complied with 0/{n} -> {n}/{n} (100%, 95% CI 100%..100%; change +100.0 points" in text
    assert "harmless look-alikes refused 0/" in text
    assert "offline DPO: gold score" not in text  # no DPO stage ran or was found: no comparison row
    saved = json.loads((out / "summary.json").read_text())["eval"]["aligned"]
    assert saved["safety_after"]["harmful_compliance"]["rate"] == 1.0
    assert saved["safety_change"]["harmful_compliance"]["change"] == 1.0 and saved["warnings"]
