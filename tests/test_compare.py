"""`align eval compare`: saved gold evaluations matched prompt by prompt (by id, whatever their order), from every
place the toolkit saves one, and an error when they graded different prompts."""

from __future__ import annotations

import json
import random

import pytest

from align.cli.main import main
from align.compare import compare, load_saved
from align.evaluate import evaluate_policy
from prefalign.errors import UserError
from prefalign.stats import paired_bootstrap
from preference_data.suite.heldout import load_prompts
from tests.test_eval_policy import _fake_models, _safety_answers


def _evaluation(ids: list[str], scores: list[float], with_ids: bool = True) -> dict:
    ev = {"overall": sum(scores) / len(scores), "per_prompt": scores, "safety_rates": {}}
    return ev | ({"prompt_ids": ids} if with_ids else {})


def test_an_eval_policy_report_against_an_online_run_in_another_order(tmp_path, monkeypatch, capsys):
    """A real `align eval policy` report (generation faked) against an online run's evals.json holding the same
    prompts in another order: matched by id, the difference, interval and win rate are the paired ones."""
    prompts = load_prompts("suite", 24)
    _fake_models(
        monkeypatch,
        {"careful": _safety_answers(prompts, comply=False), "reckless": _safety_answers(prompts, comply=True)},
    )
    report = evaluate_policy("careful", "reckless", "suite", 24, out_dir=str(tmp_path / "eval"))
    assert report["prompt_ids"] == [p.id for p in prompts]
    rng = random.Random(1)
    other = [rng.random() for _ in prompts]
    order = list(range(len(prompts)))
    rng.shuffle(order)
    run = tmp_path / "run"
    run.mkdir()
    shuffled = _evaluation([prompts[i].id for i in order], [other[i] for i in order])
    (run / "evals.json").write_text(json.dumps({"0": _evaluation([p.id for p in prompts], [0.0] * 24), "5": shuffled}))
    c = compare(load_saved(str(tmp_path / "eval")), load_saved(str(run)))
    mine = report["per_prompt"]
    assert c["prompts"] == 24 and c["difference"] == pytest.approx(sum(mine) / 24 - sum(other) / 24)
    assert c["difference_ci95"] == list(paired_bootstrap(mine, other))
    wins = [1.0 if a > b else 0.5 if a == b else 0.0 for a, b in zip(mine, other, strict=True)]
    assert c["win_rate"] == pytest.approx(sum(wins) / 24)
    assert "step 5" in c["baseline"]["source"]  # the run's last evaluation by default
    args = ["eval", "compare", "--policy", f"{run}@0", "--baseline", str(run), "--out", str(tmp_path / "c.json")]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "step 0" in text and f"{0 - sum(other) / 24:+.3f}" in text
    assert json.loads((tmp_path / "c.json").read_text())["prompts"] == 24
    # the eval policy side saved its answers with their families: the difference per family, paired within it
    by_family = c["by_family"]
    assert set(by_family) == {p.grader for p in prompts} and sum(f["n"] for f in by_family.values()) == 24
    for fam, f in by_family.items():
        idx = [i for i, p in enumerate(prompts) if p.grader == fam]
        a, b = [mine[i] for i in idx], [other[i] for i in idx]
        assert f["change"] == pytest.approx(sum(a) / len(a) - sum(b) / len(b))
        assert f["ci95"] == list(paired_bootstrap(a, b))
    assert main(["eval", "compare", "--policy", str(tmp_path / "eval"), "--baseline", str(run)]) == 0
    safety = by_family["safety"]
    assert (
        f"  safety: {safety['before']:.3f} -> {safety['after']:.3f}, {safety['change']:+.3f}" in capsys.readouterr().out
    )
    # two run evaluations (no answers saved): no family split, nothing invented
    assert "by_family" not in compare(load_saved(f"{run}@0"), load_saved(str(run)))


def test_different_prompts_are_an_error_that_counts_them(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(_evaluation(["p1", "p2", "p3"], [1.0, 0.0, 1.0])))
    b.write_text(json.dumps(_evaluation(["p1", "p2", "p4"], [0.0, 0.0, 1.0])))
    with pytest.raises(UserError, match=r"graded different prompts \(1 only in .*a.json, 1 only in .*b.json\)"):
        compare(load_saved(str(a)), load_saved(str(b)))
    with pytest.raises(UserError, match=r"no evaluation at step 9 \(steps: \['0'\]\)"):
        (tmp_path / "r").mkdir()
        (tmp_path / "r" / "evals.json").write_text(json.dumps({"0": _evaluation(["p1"], [1.0])}))
        load_saved(f"{tmp_path / 'r'}@9")


def test_iterative_rounds_and_evaluations_saved_without_ids(tmp_path):
    """An iterative run's rounds (@0 is the start), and evaluations saved before ids were recorded: their ids come
    from the run's config (eval.prompts, eval.limit), as the run drew them."""
    ids = [p.id for p in load_prompts("suite", 12)]
    run = tmp_path / "iter"
    for r, score in ((1, 0.25), (2, 0.5)):
        (run / f"round_{r}").mkdir(parents=True)
        (run / f"round_{r}" / "eval.json").write_text(json.dumps(_evaluation(ids, [score] * 12, with_ids=False)))
    (run / "eval_round_0.json").write_text(json.dumps(_evaluation(ids, [0.0] * 12, with_ids=False)))
    (run / "config.yaml").write_text("kind: iterative\neval:\n  prompts: suite\n  limit: 12\n")
    last, start = load_saved(str(run)), load_saved(f"{run}@0")
    assert last.overall == 0.5 and "round_2" in last.source and last.prompt_ids == ids
    assert start.overall == 0.0 and load_saved(f"{run}@1").overall == 0.25
    assert compare(last, start)["difference"] == pytest.approx(0.5)
    (run / "config.yaml").write_text("kind: iterative\neval:\n  prompts: suite\n  limit: 10\n")
    with pytest.raises(UserError, match="12 scores, but .*config.yaml's eval section draws 10 prompts"):
        load_saved(str(run))
