"""What a round's ranking can reach: how many of the policy's own samples the gold graders call right, per family.

Whatever ranks a round's candidates (the RM, a judge, the gold graders themselves) chooses among them: where none of
a prompt's samples is right, no ranker can choose a right sample, only the data's reference (which the pair rule may
already choose for every such prompt). A round's reach per family is that ceiling, measured: of the policy's
samples, how many are right (the task's `correctness` at 1, or its `overall` where the family grades no
correctness), and on how many prompts at least one is. Only prompts with a gold grader (suite prompts) are counted;
nothing here ranks or trains, it is read from the round's samples for its report (`align report RUN`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from preference_data.records import PromptOnly
from preference_data.suite.build import grade_prompt_only

from ..online.rollout import Rollout


@dataclass
class FamilyReach:
    """One family's policy samples in one round: `right` of `samples` gold-right, on `reached` of `prompts`."""

    right: int = 0
    samples: int = 0
    reached: int = 0
    prompts: int = 0
    ungraded: int = 0
    """prompts of the family whose samples the grader could not grade (no params, a grader error): not counted above"""

    def text(self) -> str:
        failed = f", {self.ungraded} prompts ungraded" if self.ungraded else ""
        return f"{self.right}/{self.samples} (prompts {self.reached}/{self.prompts}{failed})"


def is_right(prompt: PromptOnly, response: str) -> bool:
    """The gold graders' verdict on one response: its task's correctness at 1 (overall where none is graded)."""
    grade = grade_prompt_only(prompt, response)
    return grade.scores.get("correctness", grade.overall) >= 1.0


def reach(groups: Iterable[tuple[PromptOnly, list[str]]]) -> dict[str, FamilyReach]:
    """Per family (the prompt's grader), the policy samples of each (prompt, samples) that are right."""
    out: dict[str, FamilyReach] = {}
    for prompt, samples in groups:
        if not prompt.grader or not samples:
            continue
        r = out.setdefault(prompt.grader, FamilyReach())
        try:
            right = sum(is_right(prompt, s) for s in samples)
        except Exception:  # a diagnostic: a prompt it cannot grade is counted, never the end of a run
            r.ungraded += 1
            continue
        r.right, r.samples = r.right + right, r.samples + len(samples)
        r.reached, r.prompts = r.reached + (right > 0), r.prompts + 1
    return dict(sorted(out.items()))


def rollout_reach(rollout: Rollout) -> dict[str, FamilyReach]:
    """`reach` of a rollout's samples (a group's last row left out where it is the prompt's reference)."""
    groups = [g[:-1] if rollout.reference else g for g in rollout.groups()]
    return reach(zip(rollout.prompts, groups, strict=True))


def run_reach(align_dir: str | Path) -> dict[int, dict[str, FamilyReach]]:
    """Each finished round's reach, read from `align_dir/round_<t>/samples.json` (an iterative run's output)."""
    found: dict[int, dict[str, FamilyReach]] = {}
    for path in Path(align_dir).glob("round_*/samples.json"):
        t = path.parent.name.removeprefix("round_")
        if t.isdigit():
            found[int(t)] = rollout_reach(Rollout.from_json(json.loads(path.read_text())["rollout"]))
    return dict(sorted(found.items()))


def reach_json(r: dict[str, FamilyReach]) -> dict[str, Any]:
    return {family: asdict(x) for family, x in r.items()}


def reach_lines(rounds: dict[int, dict[str, FamilyReach]]) -> list[str]:
    """`align report`'s lines: per round, each family's gold-right policy samples and the prompts they reach."""
    if not any(rounds.values()):
        return []
    lines = ["policy samples the gold graders call right (what any ranker of the round can choose among):"]
    for t, r in rounds.items():
        lines.append(f"  round {t}: " + "; ".join(f"{family} {x.text()}" for family, x in r.items()))
    return lines


__all__ = ["FamilyReach", "is_right", "reach", "reach_json", "reach_lines", "rollout_reach", "run_reach"]
