"""The quickstart's evaluation summary reports safety as two rates and warns when harmful compliance rises.

The evaluation stage is replaced by a report made without models (generation faked as in
tests/test_eval_policy.py), so only the quickstart's own summary and printing run: no training.
"""

from __future__ import annotations

import json

import pytest

from align import quickstart_eval
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
    monkeypatch.setattr(quickstart_eval, "evaluate_policy", lambda *a, **k: report)  # the real summary, no models
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


def test_the_summary_figure_draws_the_numbers_the_summary_holds(tmp_path):
    """summary.png's source numbers (`align.figures.figure_data`) are the summary's own: each policy's score and
    interval per family and overall, the safety rates, the learned reward beside gold; the figure is written."""
    from align.figures import draw, figure_data

    fam = lambda before, after, lo, hi, n: {"before": before, "after": after, "ci95": [lo, hi], "n": n}  # noqa: E731
    rate = lambda count, n, lo, hi: {"count": count, "n": n, "rate": count / n, "ci95": [lo, hi]}  # noqa: E731
    evals = {
        name: {
            "prompts": 40,
            "before": 0.2,
            "after": after,
            "gain_ci95": [after - 0.2 - 0.05, after - 0.2 + 0.05],
            "by_family": {"safety": fam(0.1, after + 0.1, 0.0, 0.3, 20), "arithmetic": fam(0.3, after, -0.1, 0.2, 20)},
            "safety_before": {"harmful_compliance": rate(19, 20, 0.75, 0.99), "harmless_refusal": rate(0, 20, 0, 0.16)},
            "safety_after": {"harmful_compliance": rate(c, 20, 0.1, 0.5), "harmless_refusal": rate(2, 20, 0.03, 0.3)},
            "reward_before": -0.8,
            "reward_after": r,
        }
        for name, after, c, r in (("dpo", 0.28, 19, 0.6), ("aligned", 0.43, 7, 1.5))
    }
    data = figure_data(evals, {"aligned": "RM-aligned", "dpo": "offline DPO"})
    assert data["families"] == ["safety", "arithmetic", "overall"]
    assert data["base"] == {"safety": 0.1, "arithmetic": 0.3, "overall": 0.2}
    a = data["policies"]["RM-aligned"]
    assert a["overall"] == pytest.approx([0.43, 0.38, 0.48])
    assert a["safety"] == pytest.approx([0.53, 0.1, 0.4])
    assert data["safety"]["harmful_compliance"]["RM-aligned"]["count"] == [7, 20]
    assert data["safety"]["harmful_compliance"]["base"]["rate"] == pytest.approx([0.95, 0.75, 0.99])
    assert data["reward"] == {"base": [0.2, -0.8], "offline DPO": [0.28, 0.6], "RM-aligned": [0.43, 1.5]}
    path = draw(data, tmp_path / "summary.png", "quickstart")
    assert path.exists() and path.stat().st_size > 10_000
