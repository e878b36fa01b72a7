"""The main job end to end on the tiny model: every stage runs, writes its outputs, and a rerun resumes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from align.cli.main import main
from align.pipeline import Pipeline
from align.quickstart import align_reward, checked_bonus, rm_pairs
from align.quickstart_config import QuickstartConfig
from benchmarks.gpu_suite import TINY_QUICKSTART
from prefalign.config import build
from prefalign.errors import ConfigError

TINY = TINY_QUICKSTART  # every stage at its smallest on the tiny model, in fp32


@pytest.mark.slow
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
    assert summary["rm"]["pairs"] == len(test_pairs) and summary["rm"]["split"] == "test"  # none dropped for length
    assert summary["rm"]["accuracy"] == pytest.approx(sum(a > b for a, b in zip(sc, sr, strict=True)) / len(test_pairs))
    assert set(summary["rm"]["by_family"]) == {p.attributes["family"] for p in test_pairs}
    for name in ("aligned", "dpo"):  # the RM-aligned policy (headline) and the offline-DPO comparison row
        e = summary["eval"][name]
        assert e["gain"] == pytest.approx(e["after"] - e["before"])
        assert set(e) >= {"before", "after", "gain", "gain_ci95", "win_rate", "by_family", "reward_before"}
        assert e["safety_after"]["harmful_compliance"]["n"] >= 2 and e["safety_after"]["harmless_refusal"]["n"] >= 2
    assert summary["eval"]["aligned"]["policy"] == summary["align"]["policy_dir"]
    # reported on test, which shares no prompt with dev (where settings are chosen) or train
    assert summary["eval"]["split"] == summary["suite"]["reported_split"] == "test"
    ids = {
        s: {json.loads(x)["id"] for x in (out / "suite" / f"{s}_prompts.jsonl").read_text().splitlines()}
        for s in ("train", "dev", "test")
    }
    assert not (ids["test"] & ids["dev"]) and not (ids["test"] & ids["train"])
    graded = json.loads((out / "eval" / "aligned" / "report.json").read_text())["prompt_ids"]
    assert set(graded) <= ids["test"]
    # the eval stage's numbers drawn in the align run it graded: the start policy at step 0, the aligned at the end
    rows = [json.loads(x) for x in (out / "align" / "metrics.jsonl").read_text().splitlines()]
    ev = [r for r in rows if r.get("from") == "quickstart eval"]
    assert [r["step"] for r in ev] == [0, summary["align"]["steps"]]
    assert ev[0]["eval_gold/overall"] == pytest.approx(summary["eval"]["dpo"]["after"])
    assert ev[1]["eval_gold/overall"] == pytest.approx(summary["eval"]["aligned"]["after"])
    reward = summary["eval"]["aligned"]["reward_after"]  # NaN where the tiny RM scores NaN: then not drawn
    assert ev[1].get("eval_reward", float("nan")) == pytest.approx(reward, nan_ok=True)
    assert summary["align"]["start"] == summary["dpo"]["policy_dir"]  # the warm start
    # by default the refusal rule (its probe fitted on the suite's training pairs) orders each prompt's candidates
    # before the RM, the pairs it separates kept first
    saved = yaml.safe_load((out / "align" / "config.yaml").read_text())
    assert [c["type"] for c in saved["reward"]] == ["scalar", "refusal_rule"]
    assert saved["rounds"]["order_by"] == ["refusal_rule"] and saved["rounds"]["keep_ordered"] is True
    assert (out / "refusal_probe").is_dir() and "the pairs it separates kept first" in text
    assert (out / "rm" / "model" / "reward_stats.json").exists()
    assert (out / "dpo" / "adapter" / "adapter_config.json").exists()
    for f in ("config.yaml", "doctor/doctor.txt", "suite/test_prompts.jsonl", "eval/aligned/generations.jsonl"):
        assert (out / f).exists(), f
    assert "RM-aligned: gold score" in text and "offline DPO: gold score" in text and "held-out accuracy" in text
    assert "learned reward (the RM's score" in text
    # summary.png draws the summary's own numbers (align.figures), shown in report.html beside the stage reports
    from align.figures import figure_data
    from align.quickstart import EVAL_LABELS

    assert (out / "summary.png").exists() and "summary.png" in (out / "report.html").read_text()
    drawn = figure_data({n: summary["eval"][n] for n in ("dpo", "aligned")}, EVAL_LABELS)
    for name, label in (("aligned", "RM-aligned"), ("dpo", "offline DPO")):
        e = summary["eval"][name]
        assert drawn["policies"][label]["overall"][0] == e["after"]
        assert drawn["reward"][label] == [e["after"], e["reward_after"]]
        rate = e["safety_after"]["harmful_compliance"]
        assert drawn["safety"]["harmful_compliance"][label]["rate"] == [rate["rate"], *rate["ci95"]]
    # a rerun with the same settings skips the trained stages
    assert main(["quickstart", "--out", str(out), *TINY]) == 0
    again = capsys.readouterr().out
    assert "rm: already trained" in again and "dpo: already trained" in again and "align: already trained" in again
    # moved whole, it is the same run in its new place: nothing retrained, its reports' paths read there
    elsewhere = tmp_path / "moved" / "qs"
    elsewhere.parent.mkdir()
    out.rename(elsewhere)
    assert main(["quickstart", "--out", str(elsewhere), *TINY]) == 0
    there = capsys.readouterr().out
    assert all(f"{stage}: already trained" in there for stage in ("rm", "dpo", "align")), there
    moved_summary = json.loads((elsewhere / "summary.json").read_text())
    assert moved_summary["align"]["policy_dir"] == str(elsewhere / "align" / "round_1" / "train" / "merged")
    assert moved_summary["eval"]["aligned"]["after"] == summary["eval"]["aligned"]["after"]
    elsewhere.rename(out)
    # another reported split evaluates the same trained stages again, on dev
    assert main(["quickstart", "--out", str(out), *TINY, "eval.split=dev"]) == 0
    dev = capsys.readouterr().out
    assert "rm: already trained" in dev and "align: already trained" in dev and "dev pairs" in dev
    on_dev = json.loads((out / "summary.json").read_text())
    assert on_dev["rm"]["split"] == on_dev["eval"]["split"] == "dev"
    assert on_dev["rm"]["pairs"] == len((out / "suite" / "dev_pairs.jsonl").read_text().splitlines())
    graded = json.loads((out / "eval" / "aligned" / "report.json").read_text())["prompt_ids"]
    assert set(graded) <= ids["dev"]
    # --full adds the online stage: GRPO against the RM from the aligned policy (the rest is skipped)
    online = ["online.train.max_steps=1", "online.rollout.max_new_tokens=4", "online.rollout.prompts_per_step=2"]
    online += ["online.eval.limit=4", "online.eval.max_new_tokens=4", "online.train.compile=false"]
    assert main(["quickstart", "--out", str(out), "--full", *TINY, *online]) == 0
    full = capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())
    assert summary["online"]["steps"] == 1 and "GRPO policy" in full and "align: already trained" in full
    report = json.loads((out / "online" / "report.json").read_text())
    assert report["base_model"] == summary["align"]["policy_dir"]  # it started from the aligned policy
    assert report["reward"][0]["scorer"]["model"] == summary["rm"]["model_dir"]  # against the RM, not gold
    assert report["eval"]["prompts"] == 4
    # the eval stage, after the online stage, grades the GRPO policy on the same prompts beside the other two
    assert summary["eval"]["online"]["policy"] == summary["online"]["policy_dir"]
    assert summary["eval"]["online"]["prompts"] == summary["eval"]["aligned"]["prompts"]
    assert "GRPO: gold score" in full and "GRPO vs offline DPO" in full and "RM-aligned vs offline DPO" in full
    # a plain rerun does not grade the GRPO run an earlier --full left in out_dir
    assert main(["quickstart", "--out", str(out), *TINY]) == 0
    assert "online" not in json.loads((out / "summary.json").read_text())["eval"]


@pytest.mark.slow  # a whole quickstart pipeline on the tiny model (~17 s): make test-slow
def test_the_align_stage_is_driven_by_the_rm(tmp_path):
    """Every pair the policy learned from is the RM's choice: chosen = the RM's best candidate, rejected = its worst
    among the samples and the data's two answers (scored again here with the saved RM). A policy stage that ignored
    the RM (the gold graders, the data's labels, random pairs) fails this."""
    from preference_data.records import Message
    from reward_models.scorers import load_scorer

    out = tmp_path / "qs"
    # the RM alone (the refusal rule, on by default, orders the candidates before it: refusal_rule=0 turns it off)
    assert main(["quickstart", "--out", str(out), *TINY, "refusal_rule=0", "stages=[suite,rm,dpo,align]"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    config = (out / "align" / "config.yaml").read_text()
    assert summary["rm"]["model_dir"] in config
    samples = json.loads((out / "align" / "round_1" / "samples.json").read_text())["rollout"]
    pairs = [json.loads(x) for x in (out / "align" / "round_1" / "pairs.jsonl").read_text().splitlines()]
    assert pairs
    rm = load_scorer("scalar", model=summary["rm"]["model_dir"], dtype="float32")
    G = samples["group_size"]
    bonus = build(QuickstartConfig, {"refusal_rule": 0}).align.rounds.reference_bonus
    assert bonus == 1.0
    by_id = {p["id"]: i for i, p in enumerate(samples["prompts"])}
    for pair in pairs:
        i = by_id[pair["attributes"]["prompt_id"]]
        prompt = samples["prompts"][i]
        candidates = samples["texts"][i * G : (i + 1) * G] + [prompt["meta"]["reference"], prompt["meta"]["rejected"]]
        conv = [[Message(m["role"], m["content"]) for m in prompt["prompt"]]] * len(candidates)
        scores = rm.score(conv, [[Message("assistant", c)] for c in candidates])
        scores[G] += bonus  # the reference's reward + align.rounds.reference_bonus (the recipe's anchor)
        best = max(range(len(candidates)), key=lambda k: (scores[k], -k))
        worst = min(range(len(candidates)), key=lambda k: (scores[k], k))
        assert pair["chosen"][0]["content"] == candidates[best]
        assert pair["rejected"][0]["content"] == candidates[worst]


def test_rank_by_puts_a_pairwise_judge_in_the_rms_place(tmp_path):
    """`rank_by: SPEC`: the align rounds' reward is that judge (kind pairwise) instead of the RM; another kind is a
    config error naming the key."""
    judged = {"rank_by": "pair_pm:builtin:tiny-llama", "align": {"rounds": {"reference_bonus": 0.25}}}
    cfg = build(QuickstartConfig, judged)
    assert align_reward(cfg, Pipeline(tmp_path, []), {}) == [{"type": "pair_pm", "model": "builtin:tiny-llama"}]
    with pytest.raises(ConfigError, match="rank_by: a pairwise judge's spec \\(judge, pair_pm, think\\)"):
        build(QuickstartConfig, {**judged, "rank_by": "scalar:runs/rm/model"})
    # the RM's anchor (+1) on a judge's 0..1 win probabilities would always choose the reference: said, not run
    with pytest.raises(ConfigError, match="reference_bonus=1 .* always chooses the data's reference"):
        build(QuickstartConfig, {"rank_by": "pair_pm:builtin:tiny-llama"})


NO_BONUS = {"align": {"rounds": {"reference_bonus": 0}}}
RULE_JUDGE = "{type: grm, model: runs/judge/model, principles: from_prompt, read: rule, temperature: 0}"


def test_check_ranks_by_the_rm_and_a_checker_beside_it(tmp_path):
    """`check_by: SPEC`: the align rounds rank by an ensemble of the RM (normalised) and the checker weighted
    check_weight, the RM alone where the checker abstains; the reference's bonus stays in the RM's units; a pairwise
    scorer, a judge in rank_by beside it or a weight of 0 are config errors naming the key."""
    rm_dir = tmp_path / "rm"
    rm_dir.mkdir()
    (rm_dir / "reward_stats.json").write_text(json.dumps({"mean": 0.5, "std": 2.0, "n": 10}))
    cfg = build(QuickstartConfig, {"check_by": RULE_JUDGE, "refusal_rule": 0})
    checked = align_reward(cfg, Pipeline(tmp_path, []), {"rm": {"model_dir": str(rm_dir)}})
    assert checked == [
        {
            "type": "ensemble",
            "name": "rm",
            "members": [
                {"type": "scalar", "model": str(rm_dir), "dtype": "auto"},
                {
                    "type": "grm",
                    "model": "runs/judge/model",
                    "principles": "from_prompt",
                    "read": "rule",
                    "temperature": 0,
                },
            ],
            "weights": [1.0, 0.5],
            "k": 0.0,
            "normalize": True,
            "missing": "skip",
        }
    ]
    # +1 in the RM's units: 1 / std 2 / (1 + 0.5) in the ensemble's weighted mean of the normalised RM and the check
    assert checked_bonus(cfg, str(rm_dir), 1.0) == pytest.approx(1 / 3)
    for bad, message in [
        ({"check_by": "pair_pm:builtin:tiny-llama"}, "check_by: a pointwise scorer's spec"),
        ({"check_by": RULE_JUDGE, "check_weight": 0}, "check_weight: a weight above 0"),
        (
            {
                "check_by": RULE_JUDGE,
                "rank_by": "pair_pm:builtin:tiny-llama",
                "align": {"rounds": {"reference_bonus": 0}},
            },
            "check_by: composes with the RM's scores",
        ),
    ]:
        with pytest.raises(ConfigError, match=re.escape(message)):
            build(QuickstartConfig, bad)


@pytest.mark.slow
def test_check_by_ranks_the_align_rounds_on_the_tiny_model(tmp_path, capsys):
    """`check_by` end to end: the align rounds' reward is the RM and the rule-read judge as one ensemble (the tiny
    judge writes no work the rule reads, so every candidate is ranked by the RM alone, none dropped), and the
    reference's bonus is put in the ensemble's units from the trained RM's statistics."""
    out = tmp_path / "qs"
    judge = (
        "{type: grm, model: builtin:tiny-llama, principles: from_prompt, read: rule, temperature: 0, max_new_tokens: 8}"
    )
    assert main(["quickstart", "--out", str(out), *TINY, f"check_by={judge}", "stages=[suite,rm,dpo,align]"]) == 0
    text = capsys.readouterr().out
    assert "ranked by the RM and the checker x0.5" in text
    saved = yaml.safe_load((out / "align" / "config.yaml").read_text())
    component, rule = saved["reward"]  # the refusal rule beside them, as by default
    assert rule["type"] == "refusal_rule" and saved["rounds"]["order_by"] == ["refusal_rule"]
    assert component["type"] == "ensemble" and component["members"][1]["read"] == "rule"
    summary = json.loads((out / "summary.json").read_text())
    std = json.loads((Path(summary["rm"]["model_dir"]) / "reward_stats.json").read_text())["std"]
    assert saved["rounds"]["reference_bonus"] == pytest.approx(1.0 / std / 1.5)
    [round_] = summary["align"]["rounds"]
    assert round_["pairs"] == 4 and round_["dropped_nan"] == 0  # the judge abstained everywhere: the RM decided


def test_quickstart_runs_only_the_stages_it_is_given(tmp_path, capsys):
    out = tmp_path / "qs"
    assert main(["quickstart", "--out", str(out), *TINY, "stages=[suite]"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert "suite" in summary and not {"doctor", "rm", "dpo", "align", "eval"} & set(summary)
    assert not (out / "doctor").exists()
    # a later stage finds the suite an earlier run wrote; without it the error says which stage writes it
    assert main(["quickstart", "--out", str(out), *TINY, "stages=[doctor]"]) == 0
    assert (out / "doctor" / "doctor.txt").exists()
    capsys.readouterr()
    assert main(["quickstart", "--out", str(tmp_path / "empty"), *TINY, "stages=[rm]"]) != 0
    err = capsys.readouterr().err
    assert re.search(r"stage 'rm' needs \S+train_pairs.jsonl, which the 'suite' stage writes", err), err


def test_the_rm_trains_on_the_hard_negatives_and_nothing_else_does(tmp_path, capsys):
    """`suite.hard_negatives`: the RM's data file is the training pairs plus the hard negatives; the suite's own
    files (what DPO trains on and what every split reports on) are the suite built without them."""
    out, plain = tmp_path / "qs", tmp_path / "plain"
    assert main(["quickstart", "--out", str(plain), *TINY, "stages=[suite]"]) == 0
    assert main(["quickstart", "--out", str(out), *TINY, "suite.hard_negatives=1", "stages=[suite]"]) == 0
    capsys.readouterr()
    for name in ("train_pairs.jsonl", "dev_pairs.jsonl", "test_pairs.jsonl", "train_prompts.jsonl"):
        assert (out / "suite" / name).read_bytes() == (plain / "suite" / name).read_bytes()
    train = (out / "suite" / "train_pairs.jsonl").read_text().splitlines()
    rm_rows = (out / "suite" / "rm_pairs.jsonl").read_text().splitlines()
    summary = json.loads((out / "summary.json").read_text())
    assert rm_rows[: len(train)] == train and len(rm_rows) == summary["suite"]["rm_pairs"] > len(train)
    hard = [json.loads(x)["attributes"] for x in rm_rows[len(train) :]]
    assert len(hard) == summary["suite"]["hard_negatives"]
    assert {a["corruption"] for a in hard} <= {"wrong_value", "violated_constraint"}
    assert {a["split"] for a in hard} == {"train"}
    cfg = build(QuickstartConfig, {"suite": {"hard_negatives": 1}})
    assert rm_pairs(cfg) == "rm_pairs.jsonl" and rm_pairs(build(QuickstartConfig, {})) == "train_pairs.jsonl"
    assert rm_pairs(build(QuickstartConfig, {"suite": {"hard_refusals": 1}})) == "rm_pairs.jsonl"
    refusals = tmp_path / "refusals"
    assert main(["quickstart", "--out", str(refusals), *TINY, "suite.hard_refusals=1", "stages=[suite]"]) == 0
    rows = [json.loads(x)["attributes"] for x in (refusals / "suite" / "rm_pairs.jsonl").read_text().splitlines()]
    extra = rows[len(train) :]
    assert len(extra) == json.loads((refusals / "summary.json").read_text())["suite"]["hard_refusals"] > 0
    assert {a["corruption"] for a in extra} == {"twin_answer", "twin_refusal"}
