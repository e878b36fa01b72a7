"""The `grader` scorer: the verifiable suite's gold graders behind the scorer interface (no model)."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefalign.config import option
from prefalign.errors import UserError, did_you_mean
from preference_data.io import iter_rows
from preference_data.records import Conversation
from preference_data.report import DataReport

from .base import ScorerKind


@dataclass
class GraderOptions:
    tasks: str | None = option(
        None,
        "where the tasks' grading params come from: a suite directory or a "
        "*_prompts.jsonl written by `align data suite`; default: regenerate the suite's "
        "tasks with `seed` and `per_family`",
    )
    seed: int = option(0, "suite seed used to regenerate the tasks (when `tasks` is not given)")
    per_family: int = option(
        200,
        "tasks per family to regenerate (when `tasks` is not given); a suite built with "
        "fewer per family is a prefix of this one",
    )
    objective: str = option(
        "overall",
        "gold score to report: 'overall' or one objective (correctness, instruction_following, conciseness, safety)",
    )


def _prompt_key(prompt: Conversation) -> tuple[tuple[str, str], ...]:
    return tuple((m.role, m.content) for m in prompt)


class GraderScorer:
    """Pointwise: the gold grade (`preference_data.suite.grade`) of a response to a suite prompt.

    A suite pair carries its family but not the grading params, so the grader finds the task by its prompt (the
    whole conversation, system turn included) in an index of suite tasks: read from the prompts files the suite
    wrote (`tasks`), or regenerated from `seed` and `per_family`. A prompt that is not in the index scores NaN.
    An empty response is graded like any other (0 on every objective, the suite's rule), not NaN.
    """

    kind: ScorerKind = "pointwise"
    name = "grader"

    def __init__(self, opts: GraderOptions) -> None:
        from preference_data import suite  # lazy: the suite's generators (0.16 s), not needed to list the scorers

        if opts.objective != "overall" and opts.objective not in suite.OBJECTIVES:
            raise UserError(
                f"objective '{opts.objective}' is unknown{did_you_mean(opts.objective, suite.OBJECTIVES)}; "
                f"use overall or one of {', '.join(suite.OBJECTIVES)}"
            )
        self.opts = opts
        self.failures: Counter[str] = Counter()
        self.index: dict[tuple[tuple[str, str], ...], tuple[str, dict[str, Any]]] = {}
        if opts.tasks is None:
            self.source = f"regenerated (seed {opts.seed}, {opts.per_family} per family)"
            for family in suite.FAMILIES:
                for task in suite.generate_tasks(family, opts.per_family, opts.seed):
                    self.index.setdefault(_prompt_key(task.prompt), (family, task.params))
        else:
            self.source = opts.tasks
            for record in self._read_prompts(opts.tasks):
                params = record.meta.get("params")
                if record.grader in suite.FAMILIES and isinstance(params, dict):
                    self.index.setdefault(_prompt_key(record.prompt), (record.grader, params))
            if not self.index:
                raise UserError(
                    f"{opts.tasks} holds no suite prompts with a grader and meta.params; point tasks at "
                    "the directory `align data suite --out DIR` wrote, or at its *_prompts.jsonl"
                )

    @staticmethod
    def _read_prompts(path: str) -> list[Any]:
        from preference_data.suite import prompt_only_from_dict  # lazy: the suite (see __init__)

        p = Path(path).expanduser()
        if not p.exists():
            raise UserError(f"tasks: {p} does not exist; give the suite directory or its *_prompts.jsonl")
        files = sorted(p.glob("*_prompts.jsonl")) if p.is_dir() else [p]
        if not files:
            raise UserError(f"tasks: {p} has no *_prompts.jsonl; write the suite with `align data suite --out {p}`")
        out = []
        for f in files:
            for _, row in iter_rows(str(f), DataReport(source=str(f))):
                if isinstance(row, dict) and "prompt" in row and "meta" in row:
                    out.append(prompt_only_from_dict(row))
        return out

    def score(self, prompts: list[Conversation], responses: list[Conversation]) -> list[float]:
        from preference_data.suite import grade  # lazy: the suite (see __init__)

        out = []
        for prompt, response in zip(prompts, responses, strict=True):
            task = self.index.get(_prompt_key(prompt))
            if task is None:
                self.failures["unknown_prompt"] += 1
                out.append(math.nan)
                continue
            g = grade(task[0], task[1], "\n\n".join(m.content for m in response))
            value = g.overall if self.opts.objective == "overall" else g.scores.get(self.opts.objective)
            if value is None:
                self.failures["objective_not_graded"] += 1
            out.append(math.nan if value is None else float(value))
        return out

    def describe(self) -> dict[str, Any]:
        model = "suite gold grader" + ("" if self.opts.objective == "overall" else f" ({self.opts.objective})")
        return {"model": model, "objective": self.opts.objective, "tasks": self.source, "n_tasks": len(self.index)}


__all__ = ["GraderOptions", "GraderScorer"]
