"""Policy evaluation: batched generation on held-out suite prompts, gold grading, win rate."""

from __future__ import annotations

import json
import math

import pytest

from align.cli.main import main
from align.evaluate import evaluate_policy, judged_win_rate, report_lines, win_rate
from prefalign.stats import paired_bootstrap
from preference_data.suite.heldout import load_prompts


def test_prompt_subset_is_family_balanced_and_graded():
    prompts = load_prompts("suite", 12)
    assert len(prompts) == 12 and len({p.grader for p in prompts}) == 6
    assert all(p.meta.get("params") for p in prompts)


def test_win_rate_and_bootstrap_by_hand():
    assert win_rate([1.0, 0.5, 0.0], [0.5, 0.5, 1.0]) == pytest.approx(0.5)  # win, tie, loss
    lo, hi = paired_bootstrap([1.0] * 10, [0.0] * 10)
    assert lo == hi == 1.0


def test_eval_policy_cli_end_to_end(tmp_path, tiny_model_ref, capsys):
    """The tiny model against a perturbed copy of itself: the report's numbers are what regrading the saved
    generations with the gold graders gives."""
    import torch

    from prefalign.models.hub import load_causal_lm, load_tokenizer
    from preference_data.suite import grade_prompt_only

    other = load_causal_lm(tiny_model_ref, dtype="float32")
    torch.manual_seed(3)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(0.5 * torch.randn_like(p))
    base_dir = tmp_path / "baseline"
    other.save_pretrained(str(base_dir))
    load_tokenizer(tiny_model_ref).save_pretrained(str(base_dir))
    out = tmp_path / "eval"
    code = main(
        [
            "eval",
            "policy",
            "--model",
            tiny_model_ref,
            "--baseline",
            str(base_dir),
            "--limit",
            "6",
            "--max-new-tokens",
            "6",
            "--dtype",
            "float32",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    report = json.loads((out / "report.json").read_text())
    rows = [json.loads(x) for x in (out / "generations.jsonl").read_text().splitlines()]
    assert report["prompts"] == len(rows) == 6
    assert any(r["response"] != r["baseline_response"] for r in rows)  # two different models really ran
    by_id = {p.id: p for p in load_prompts("suite", 6)}
    pa = [grade_prompt_only(by_id[r["id"]], r["response"]).overall for r in rows]
    pb = [grade_prompt_only(by_id[r["id"]], r["baseline_response"]).overall for r in rows]
    assert report["policy"]["overall"] == pytest.approx(sum(pa) / 6)
    assert report["baseline"]["overall"] == pytest.approx(sum(pb) / 6)
    assert report["overall_gain"] == pytest.approx((sum(pa) - sum(pb)) / 6)
    wins = sum(1.0 if a > b else 0.5 if a == b else 0.0 for a, b in zip(pa, pb, strict=True))
    assert report["win_rate"] == pytest.approx(wins / 6)
    assert "gold overall" in capsys.readouterr().out


def test_eval_numbers_for_known_answers(monkeypatch):
    """Reference answers against non-answers: every gold score 1 against 0, every prompt a win."""
    prompts = load_prompts("suite", 12)
    ref = {
        _key(p.prompt): (
            "I'm sorry, but I can't help with that."
            if p.grader == "safety" and p.meta["params"]["harmful"]
            else p.meta["reference"]
        )
        for p in prompts
    }
    _fake_models(monkeypatch, {"good": ref, "junk": {k: "x" for k in ref}})
    report = evaluate_policy("good", "junk", "suite", 12)
    assert report["policy"]["overall"] == 1.0 and report["baseline"]["overall"] == 0.0
    assert report["win_rate"] == 1.0 and report["overall_gain"] == 1.0
    assert tuple(report["overall_gain_ci95"]) == (1.0, 1.0)


def test_eval_policy_rejects_prompts_without_graders(tmp_path, capsys):
    f = tmp_path / "p.jsonl"
    f.write_text('{"prompt": "hello"}\n')
    assert main(["eval", "policy", "--model", "builtin:tiny-llama", "--prompts", str(f)]) == 2
    assert "no prompts with a gold grader" in capsys.readouterr().err


def test_judged_win_rate_leaves_nan_out_and_counts_it():
    # policy [1, nan, 0] vs baseline [0, 0, 0]: a win and a tie over the 2 finite prompts, 1 left out
    assert judged_win_rate([1.0, math.nan, 0.0], [0.0, 0.0, 0.0]) == (0.75, 1)
    assert judged_win_rate([math.nan], [0.0]) == (None, 1)
    assert judged_win_rate([1.0, 0.0], [0.0, 0.0]) == (0.75, 0)


def _fake_models(monkeypatch, answers: dict[str, dict[tuple, str]]) -> None:
    """Generation without a model: `answers[model][prompt]` is what `model` says to `prompt`."""
    import align.evaluate
    import prefalign.generation.policy

    monkeypatch.setattr(align.evaluate, "load_tokenizer", lambda ref: None)
    monkeypatch.setattr(prefalign.generation.policy, "load_policy", lambda ref, dtype="bfloat16": ref)
    monkeypatch.setattr(
        prefalign.generation.policy,
        "generate",
        lambda model, tok, conv, *a, **k: [answers[model][_key(c)] for c in conv],
    )


def _key(conv) -> tuple:
    return tuple((m.role, m.content) for m in conv)


def _safety_answers(prompts, comply: bool) -> dict[tuple, str]:
    """Refuse harmful requests and answer everything else with the reference, or (comply) refuse the
    harmless look-alikes and give harmful requests the steps after a refusal."""
    out = {}
    for p in prompts:
        harmful = p.grader == "safety" and p.meta["params"]["harmful"]
        if p.grader == "safety" and comply:
            out[_key(p.prompt)] = (
                "I can't help with that. Anyway, here is how: first, wait until they are out. Then go in quietly."
                if harmful
                else "I'm sorry, but I can't help with that."
            )
        else:
            out[_key(p.prompt)] = "I'm sorry, but I can't help with that." if harmful else p.meta["reference"]
    return out


def test_eval_reports_safety_rates_and_warns_when_harmful_compliance_rises(monkeypatch, tmp_path):
    prompts = load_prompts("suite", 60)
    _fake_models(
        monkeypatch,
        {"careful": _safety_answers(prompts, comply=False), "reckless": _safety_answers(prompts, comply=True)},
    )
    report = evaluate_policy("reckless", "careful", "suite", 60, out_dir=str(tmp_path))
    n_harmful = sum(p.grader == "safety" and p.meta["params"]["harmful"] for p in prompts)
    n_harmless = sum(p.grader == "safety" and not p.meta["params"]["harmful"] for p in prompts)
    assert n_harmful and n_harmless
    pol, base = report["policy"]["safety_rates"], report["baseline"]["safety_rates"]
    assert pol["harmful_compliance"] == {"rate": 1.0, "count": n_harmful, "n": n_harmful, "ci95": (1.0, 1.0)}
    assert pol["harmless_refusal"]["rate"] == 1.0 and base["harmless_refusal"]["rate"] == 0.0
    assert base["harmful_compliance"]["rate"] == 0.0
    assert report["safety_change"]["harmful_compliance"]["change"] == 1.0
    assert report["safety_change"]["harmless_refusal"]["ci95"] == (1.0, 1.0)
    assert report["warnings"] and "harmful compliance rose" in report["warnings"][0]
    lines = report_lines(report)
    assert "WARNING: harmful compliance rose" in lines[0]  # the summary line says so, whatever the mean did
    assert any(line.startswith("safety vs baseline: harmful requests complied with +100.0 points") for line in lines)
    saved = json.loads((tmp_path / "report.json").read_text())
    assert saved["policy"]["safety_rates"]["harmful_compliance"]["count"] == n_harmful
    # the reverse run (compliance falls) warns about nothing
    assert evaluate_policy("careful", "reckless", "suite", 60)["warnings"] == []


def test_eval_counts_nan_judge_scores_instead_of_losses(monkeypatch, tmp_path, capsys):
    import align.evaluate

    prompts = load_prompts("suite", 12)
    same = _safety_answers(prompts, comply=False)
    _fake_models(monkeypatch, {"a": same, "b": same})

    class HalfBroken:  # a judge that fails on every other prompt and scores the rest 0
        kind = "pointwise"

        def score(self, conv, responses):
            return [math.nan if i % 2 else 0.0 for i in range(len(responses))]

    specs = []
    monkeypatch.setattr(align.evaluate, "load_scorer", lambda spec: specs.append(spec) or HalfBroken())
    report = evaluate_policy("a", "b", "suite", 12, judge="scalar:rm_dir", out_dir=str(tmp_path))
    assert specs == [{"type": "scalar", "model": "rm_dir"}]  # the judge is a scorer spec, as everywhere
    assert report["judge_nan"] == 6 and report["win_rate"] == 0.5  # ties on the 6 finite prompts
    assert json.loads((tmp_path / "report.json").read_text())["judge_nan"] == 6
    assert "6 of 12 prompts scored NaN by the judge, left out" in "\n".join(report_lines(report))


def test_baseline_answers_and_their_reward_are_cached_across_policies(monkeypatch, tmp_path):
    """The eval stage grades several policies against one base model: the base model's answers are generated once
    and its answers scored by the reward model once (both in `baseline_cache`); a retrained reward model in the same
    directory scores them again, and other decoding settings generate them again."""
    import align.evaluate
    import prefalign.generation.policy
    from prefalign.decoding import DecodingSettings

    prompts = load_prompts("suite", 12)
    careful = _safety_answers(prompts, comply=False)
    _fake_models(monkeypatch, {"a": careful, "b": careful, "base": _safety_answers(prompts, comply=True)})
    generated: list[str] = []
    fake_generate = prefalign.generation.policy.generate
    monkeypatch.setattr(
        prefalign.generation.policy, "generate", lambda m, *a, **k: generated.append(m) or fake_generate(m, *a, **k)
    )
    scored: list[int] = []

    class Length:  # a reward model: the answer's length
        kind = "pointwise"

        def score(self, conv, responses):
            scored.append(len(responses))
            return [float(len(r[0].content)) for r in responses]

    monkeypatch.setattr(align.evaluate, "load_scorer", lambda kind, model: Length())
    rm = tmp_path / "rm"
    rm.mkdir()
    (rm / "config.json").write_text("{}")
    (rm / "model.safetensors").write_text("v1")
    cache = str(tmp_path / "baseline.json")

    def run(policy: str, settings: DecodingSettings | None = None) -> dict:
        return evaluate_policy(
            policy, "base", "suite", 12, settings=settings, baseline_cache=cache, reward_model=str(rm)
        )

    first, second = run("a"), run("b")
    assert generated == ["a", "base", "b"] and scored == [12, 12, 12]  # a, base, b: base once
    assert first["baseline"]["reward"] == second["baseline"]["reward"] != first["policy"]["reward"]
    (rm / "model.safetensors").write_text("v2, retrained")
    run("a")
    assert scored[3:] == [12, 12]  # the new RM scores the base model's (cached) answers again
    run("a", DecodingSettings(max_new_tokens=7))
    assert generated[-2:] == ["a", "base"]  # other settings: other base answers
