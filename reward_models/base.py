"""The one interface every reward source speaks (stage 2).

A scorer states its `kind` so benchmarks and trainers call it correctly:

- "pointwise":  `score(prompts, responses) -> list[float]`, one scalar per (prompt, response).
- "pairwise":   `compare(prompts, responses_a, responses_b) -> list[float]`, P(a preferred to b) in [0, 1].
- "reference":  `score_with_reference(prompts, responses, references) -> list[float]` (POLAR-style, or a
                 grader that needs the benchmark's reference answer).
- "listwise":   `rank(prompts, candidate_lists) -> list[list[float]]`, one score per candidate of each list, in
                 the order given (RewardBench 2's 4-way judge, `rb2_4way`: 1 for the answer it names, 0 for the
                 others). It may define `order(example_id, n, variant) -> list[int]`, the candidates' indices in
                 the order it is to be shown them (its seeded shuffle); the benchmark runner shows them so, keys
                 its cache by that order and maps the scores back. Only benchmarks that judge lists of answers
                 take it (RewardBench 2); a listwise scorer is no reward for training.

Prompts and responses are conversations (`list[Message]`); a response is the assistant continuation.
Scores may be NaN when a scorer fails on an item; callers count and report those.

A scorer that judges some benchmark examples its own way names those variants in `variants: tuple[str, ...]`
(`rb2_rate`, `rb2_4way`: RewardBench 2's Ties rows, "ties"); the benchmark runner then passes `variants=`, one
`str | None` per item, to its method as a keyword (`leaderboards.benchmarks.Benchmark.variant`).
"""

from __future__ import annotations

from typing import Literal, Protocol, runtime_checkable

ScorerKind = Literal["pointwise", "pairwise", "reference", "listwise"]


@runtime_checkable
class Scorer(Protocol):
    kind: ScorerKind
    name: str

    def describe(self) -> dict:
        """Settings that identify this scorer in a benchmark record (model, normalisation, dtype, ...)."""
        ...
