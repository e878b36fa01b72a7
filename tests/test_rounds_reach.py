"""A round's reach (align/rounds/reach.py): the policy samples the gold graders call right, per family, read from a
round's saved samples by `align report`."""

from __future__ import annotations

import json

from align.cli.main import main
from align.online.rollout import Rollout
from align.rounds.reach import FamilyReach, reach, reach_lines, rollout_reach, run_reach
from preference_data.records import Message, PromptOnly
from preference_data.suite.heldout import load_prompts


def _rollout(prompts: list[PromptOnly], groups: list[list[str]], reference: bool = False) -> Rollout:
    texts = [t for g in groups for t in g]
    return Rollout(
        step=1,
        prompts=prompts,
        group_size=len(groups[0]),
        prompt_ids=[[1] for _ in prompts],
        texts=texts,
        token_ids=[[1] for _ in texts],
        logprobs=[[0.0] for _ in texts],
        finish=["eos"] * len(texts),
        reference=reference,
    )


def test_reach_counts_right_samples_and_the_prompts_they_reach_per_family():
    prompts = load_prompts("suite", 12)  # two of each family
    # per prompt: its reference (right), an empty answer and a non-answer (neither right)
    groups = [[p.meta["reference"], "", "I am not sure."] for p in prompts]
    got = reach(zip(prompts, groups, strict=True))
    assert set(got) == {p.grader for p in prompts}
    for family, r in got.items():
        n = sum(p.grader == family for p in prompts)
        assert r == FamilyReach(right=n, samples=3 * n, reached=n, prompts=n), family
    # one family's reference answer given to another family's prompt is wrong there (no value shared)
    arith = [p for p in prompts if p.grader == "arithmetic"]
    lists = [p for p in prompts if p.grader == "list_ops"]
    crossed = reach([(arith[0], [lists[0].meta["reference"]])])
    assert crossed["arithmetic"] == FamilyReach(right=0, samples=1, reached=0, prompts=1)


def test_prompts_without_a_grader_are_not_counted_and_a_rollouts_reference_row_is_left_out():
    prompts = load_prompts("suite", 6)
    user = PromptOnly([Message("user", "Tell me a joke.")])
    assert reach([(user, ["Why did the chicken cross the road?"])]) == {}
    # a prompt that names a grader but has no params to grade with is counted as ungraded, not graded as wrong
    bare = PromptOnly([Message("user", "What is 2 + 2?")], grader="arithmetic")
    assert reach([(bare, ["4"])]) == {"arithmetic": FamilyReach(ungraded=1)}
    assert FamilyReach(ungraded=1).text() == "0/0 (prompts 0/0, 1 prompts ungraded)"
    right = [[p.meta["reference"], p.meta["reference"]] for p in prompts]
    # the last row of each group is the data's reference (an online rollout with candidates: policy_and_reference):
    # only the first is the policy's sample
    with_ref = rollout_reach(_rollout(prompts, [["", g[1]] for g in right], reference=True))
    assert all(r.right == 0 and r.samples == 1 for r in with_ref.values())
    plain = rollout_reach(_rollout(prompts, right))
    assert all(r.right == 2 and r.samples == 2 and r.reached == 1 for r in plain.values())


def test_align_report_prints_each_rounds_reach_from_its_saved_samples(tmp_path, capsys):
    prompts = load_prompts("suite", 6)
    run = tmp_path / "align"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 1, "round": 1, "pairs/pairs": 6}\n')  # a run's first round logged
    for t, groups in ((1, [["", "no"] for _ in prompts]), (2, [[p.meta["reference"], ""] for p in prompts])):
        (run / f"round_{t}").mkdir(parents=True)
        rollout = _rollout(prompts, groups)
        (run / f"round_{t}" / "samples.json").write_text(json.dumps({"key": {}, "rollout": rollout.to_json()}))
    rounds = run_reach(run)
    assert list(rounds) == [1, 2]
    assert all(r.right == 0 for r in rounds[1].values()) and all(r.right == 1 for r in rounds[2].values())
    assert main(["report", str(run)]) == 0
    out = capsys.readouterr().out
    assert "  round 1: arithmetic 0/2 (prompts 0/1);" in out
    assert "  round 2: arithmetic 1/2 (prompts 1/1);" in out
    assert reach_lines({}) == [] and reach_lines({1: {}}) == []
