"""`ensemble`: several reward models as one pointwise scorer, penalised where they disagree.

    scorer = load_scorer({"type": "ensemble", "members": ["runs/rm_a/model", "runs/rm_b/model"], "k": 1.0})

The score of a response is the members' mean minus `k` times their population standard deviation
(`composition.ensemble_lcb`): a response the members agree on keeps their mean, one they disagree on (where at least
one of them is outside what it learned) is pushed down, so a policy that finds a member's blind spot gains less from
it (Coste et al. 2023, "Reward Model Ensembles Help Mitigate Overoptimization"; Eisenstein et al. 2023). Members
trained apart have unlike scales: scalar members are normalised with their own saved statistics first
(`normalize`); a member on another scale (a generative judge's 1..10) is weighted onto the others' (`weights`).
Every member must be pointwise; a NaN from any member is a NaN, unless `missing: skip` lets the members that scored
decide. The members' spread of the last call is kept (`last_std`), for a run's alarm.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from preference_data.records import Conversation

from .base import ScorerKind
from .composition import ensemble_lcb, member_spread


class EnsembleScorer:
    """Pointwise: mean minus k std of the members' scores (see the module docstring); the members are built scorers
    (`scorers._load_ensemble` builds them from their specs)."""

    kind: ScorerKind = "pointwise"
    name = "ensemble"

    def __init__(
        self, k: float, normalize: bool, members: list[Any], weights: list[float] | None = None, skip: bool = False
    ) -> None:
        self.k, self.normalize, self.members, self.weights, self.skip = k, normalize, members, weights, skip
        self._w = None if weights is None else torch.tensor(weights, dtype=torch.float64)
        self.last_std: list[float] = []

    def score(self, prompts: list[Conversation], responses: list[Conversation]) -> list[float]:
        R = torch.tensor([m.score(prompts, responses) for m in self.members], dtype=torch.float64).T  # (S, M)
        self.last_std = member_spread(R, self._w)[1].tolist() if len(prompts) else []
        scores = ensemble_lcb(R, self.k, self._w, self.skip)
        return [float(x) if math.isfinite(x) else math.nan for x in scores.tolist()]

    def describe(self) -> dict[str, Any]:
        return {
            "k": self.k,
            "normalize": self.normalize,
            "weights": self.weights,
            "missing": "skip" if self.skip else "nan",
            "members": [m.describe() if hasattr(m, "describe") else {} for m in self.members],
        }


__all__ = ["EnsembleScorer"]
