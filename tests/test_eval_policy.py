"""Policy evaluation: batched generation on held-out suite prompts, gold grading, win rate."""

from __future__ import annotations

import json

import pytest

from align.cli.main import main
from align.evaluate import load_prompts, paired_bootstrap, win_rate


def test_prompt_subset_is_family_balanced_and_graded():
    prompts = load_prompts("suite", 12)
    assert len(prompts) == 12 and len({p.grader for p in prompts}) == 6
    assert all(p.meta.get("params") for p in prompts)


def test_win_rate_and_bootstrap_by_hand():
    assert win_rate([1.0, 0.5, 0.0], [0.5, 0.5, 1.0]) == pytest.approx(0.5)  # win, tie, loss
    lo, hi = paired_bootstrap([1.0] * 10, [0.0] * 10)
    assert lo == hi == 1.0


def test_eval_policy_cli_end_to_end(tmp_path, tiny_model_ref, capsys):
    out = tmp_path / "eval"
    code = main(["eval", "policy", "--model", tiny_model_ref, "--baseline", tiny_model_ref, "--limit", "6",
                 "--max-new-tokens", "6", "--dtype", "float32", "--out", str(out)])
    assert code == 0
    report = json.loads((out / "report.json").read_text())
    assert report["prompts"] == 6 and 0 <= report["policy"]["overall"] <= 1
    # the same model against itself, greedy: identical answers, every comparison a tie
    assert report["win_rate"] == 0.5 and report["overall_gain"] == 0
    rows = [json.loads(x) for x in (out / "generations.jsonl").read_text().splitlines()]
    assert len(rows) == 6 and all("overall" in r["grade"] for r in rows)
    assert "gold overall" in capsys.readouterr().out


def test_eval_policy_rejects_prompts_without_graders(tmp_path, capsys):
    f = tmp_path / "p.jsonl"
    f.write_text('{"prompt": "hello"}\n')
    assert main(["eval", "policy", "--model", "builtin:tiny-llama", "--prompts", str(f)]) == 2
    assert "no prompts with a gold grader" in capsys.readouterr().err
