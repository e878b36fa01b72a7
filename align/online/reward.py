"""The reward phase: a rollout's completions scored by the `reward:` components (`align.rewards.RewardSet`), as a
`Rewards` record that travels, typed, to the advantage phase.

Pointwise components give (S, K) rewards by name, NaN where a component abstained or failed (counted per component
in `abstained`, never read as zero). A pairwise component instead gives each group's (G, G) preference matrix.
With PAR, the reference policy's M responses per prompt are scored by the same components: (P, M, K).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from ..rewards import RewardSet
from .parallel import gather, ranks
from .rollout import Rollout


def _nested(t: torch.Tensor | None) -> Any:
    """A tensor as nested lists with None for NaN (JSON has no NaN)."""
    if t is None:
        return None

    def walk(x: Any) -> Any:
        return [walk(v) for v in x] if isinstance(x, list) else (None if math.isnan(x) else x)

    return walk(t.tolist())


def _tensor(x: Any) -> torch.Tensor | None:
    if x is None:
        return None

    def walk(v: Any) -> Any:
        return [walk(u) for u in v] if isinstance(v, list) else (math.nan if v is None else v)

    return torch.tensor(walk(x), dtype=torch.float32)


@dataclass
class Rewards:
    """The rewards of one rollout: every rank's rows after `gather_rewards`, else this rank's."""

    names: list[str]  # (K,) component names
    weights: torch.Tensor  # (K,) their configured weights (the reward without a composition: Σ_k w_k r_k)
    components: torch.Tensor | None  # (S, K) NaN where a component gave no reward; None for a pairwise reward
    prefs: torch.Tensor | None = None  # (P, G, G) d_ij = P(i ≻ j) − P(j ≻ i) of a pairwise judge, NaN where it failed
    par_ref: torch.Tensor | None = None  # (P, M, K) components of PAR's reference responses
    abstained: dict[str, int] = field(default_factory=dict)  # completions (or comparisons) each component left NaN
    seconds: float = 0.0

    def nan_mask(self) -> torch.Tensor:
        """(S,) completions with any component NaN."""
        assert self.components is not None
        return torch.isnan(self.components).any(-1)

    def to_json(self) -> dict[str, Any]:
        return {
            "names": self.names,
            "weights": self.weights.tolist(),
            "components": _nested(self.components),
            "prefs": _nested(self.prefs),
            "par_ref": _nested(self.par_ref),
            "abstained": self.abstained,
            "seconds": self.seconds,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Rewards:
        comps = _tensor(d["components"])
        if comps is not None:
            comps = comps.reshape(-1, len(d["names"]))  # (0, K) when a rank drew nothing
        weights = torch.tensor(d["weights"], dtype=torch.float32)
        return cls(d["names"], weights, comps, _tensor(d["prefs"]), _tensor(d["par_ref"]), d["abstained"], d["seconds"])


def score_rollout(rewards: RewardSet, rollout: Rollout, par_texts: list[str] | None = None) -> Rewards:
    """Score this rank's rollout with every component (and PAR's reference responses, P·M prompt-major, if any)."""
    t0 = time.time()
    names = rewards.names
    if rewards.pairwise:
        prefs = rewards.compare_groups(rollout.prompts, rollout.groups())
        failed = int(torch.isnan(prefs).sum().item()) // 2  # each failed comparison fills two cells
        return Rewards(names, rewards.weights, None, prefs, None, {n: failed for n in names}, time.time() - t0)
    comps = rewards.score(rollout.records(), rollout.texts)
    par_ref = None
    if par_texts is not None:
        P = len(rollout.prompts)
        M = len(par_texts) // max(P, 1)
        records = [p for p in rollout.prompts for _ in range(M)]
        par_ref = rewards.score(records, par_texts).reshape(P, M, len(names))
    abstained = {n: int(torch.isnan(comps[:, k]).sum()) for k, n in enumerate(names)}
    return Rewards(names, rewards.weights, comps, None, par_ref, abstained, time.time() - t0)


def gather_rewards(local: Rewards) -> Rewards:
    """Every rank's rewards, rows in rank order (rank r's rows follow rank r − 1's); the identity on one process."""

    if ranks()[1] == 1:
        return local

    def cat(t: torch.Tensor | None, width: tuple[int, ...]) -> torch.Tensor | None:
        if t is None:
            return None
        rows = gather(t.tolist())
        return torch.tensor(rows, dtype=torch.float32).reshape(-1, *width)

    comps = cat(local.components, tuple(local.components.shape[1:])) if local.components is not None else None
    prefs = cat(local.prefs, tuple(local.prefs.shape[1:])) if local.prefs is not None else None
    par = cat(local.par_ref, tuple(local.par_ref.shape[1:])) if local.par_ref is not None else None
    abstained: dict[str, int] = {}
    for part in gather([local.abstained]):
        for k, v in part.items():
            abstained[k] = abstained.get(k, 0) + v
    return Rewards(local.names, local.weights, comps, prefs, par, abstained, local.seconds)


__all__ = ["Rewards", "gather_rewards", "score_rollout"]
