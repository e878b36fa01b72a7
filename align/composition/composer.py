"""The composition of one run and its state: K named component rewards (all ranks' completions) -> one advantage per
completion, through the configured aggregator (`AGGREGATORS`) and update rule (`UPDATE_RULES`), both looked up.

A step, in order (`Composer.advantages`): `missing: skip_group` fills the components a group is not graded on;
`normalize: running` updates the running statistics with the scored values and rescales; then either the rule mixes
per-component advantages itself (lagrangian) or the aggregator gives a reward (fed, minus the KL in the reward and
times the rule's reward scale, to the run's estimator) or an advantage; the rule's advantage scale applies last.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from reward_models.composition import AGGREGATORS, AggregateInputs, RunningNorm, ThresholdCache

from .config import CompositionSection
from .rules import UPDATE_RULES, RuleInputs, component_means


@dataclass
class StepInputs:
    """Everything one step's composition reads, for all ranks' completions (S = P·G rows)."""

    R: torch.Tensor  # (S, K) raw component rewards, NaN where a component gave none
    G: int
    estimator: Callable[[torch.Tensor], torch.Tensor]  # (S,) reward -> (S,) advantage (the loss's own estimator)
    kl: torch.Tensor | None = None  # (S,) β·KL to subtract from a reward (kl.placement: reward)
    theta: torch.Tensor | None = None  # (S,) DPA directions
    par_ref: torch.Tensor | None = None  # (S, M, K) components of reference-policy responses


class Composer:
    def __init__(self, sec: CompositionSection, names: list[str], weights: list[float], seed: int = 0) -> None:
        self.sec = sec
        self.names = list(names)
        w = dict(zip(names, weights, strict=True)) | dict(sec.weights or {})
        base = torch.tensor([float(w[n]) for n in names], dtype=torch.float32)
        self.norm = RunningNorm(len(names)) if sec.normalize == "running" else None
        self.aggregator = AGGREGATORS[sec.aggregate]
        self.rule = UPDATE_RULES[sec.update].make(
            RuleInputs(self.names, base, seed, sec.constraints, sec.lagrangian, sec.hypervolume, sec.gradient)
        )
        self.options: dict[str, Any] = {
            "maxmin": sec.maxmin,
            "k": sec.par.k,
            "components": [self.names.index(n) for n in sec.dpa.components if n in self.names],
        }
        self.search_state: dict[str, Any] = {"cache": [], "history": []}
        self.applies: torch.Tensor | None = None  # missing: skip_group: where each component applies this step

    @property
    def weights(self) -> torch.Tensor:
        return self.rule.weights

    def needs(self, what: str) -> bool:
        """Whether the aggregator reads `what` ("theta": DPA directions, "par_ref": reference-policy responses)."""
        return what in self.aggregator.needs

    def transform(self, R: torch.Tensor) -> torch.Tensor:
        """R rescaled by the running statistics (`normalize: running`), else as is; `advantages` updates them."""
        return R if self.norm is None else self.norm.normalize(R)

    def probe_advantages(
        self, R: torch.Tensor, estimator: Callable[[torch.Tensor], torch.Tensor]
    ) -> torch.Tensor | None:
        """(S, K) the run's estimator on each (transformed) component alone, for a rule that probes gradients."""
        if not self.rule.probes:
            return None
        X = self.transform(R)
        return torch.stack([estimator(X[:, k]) for k in range(X.shape[1])], -1)

    def observe_influence(self, s: torch.Tensor, lr: float) -> dict[str, float]:
        return self.rule.observe_influence(s, lr)

    def advantages(self, inp: StepInputs) -> tuple[torch.Tensor, dict[str, float]]:
        """(S,) advantages (NaN = masked) and metrics for this step."""
        stats: dict[str, float] = {}
        R, self.applies = inp.R, None
        if self.sec.missing == "skip_group":
            R, self.applies = skip_groups(inp.R, inp.G)
            for k, n in enumerate(self.names):
                stats[f"na_groups/{n}"] = float((~self.applies[:, k]).sum()) / inp.G
        if self.norm is not None:
            self.norm.update(inp.R)  # statistics of the scored values only
        X = self.transform(R)
        kl = inp.kl if inp.kl is not None else torch.zeros(X.shape[0])
        if self.rule.mixes:
            adv, mixed_stats = self.rule.mixed(X, inp.estimator, kl, self.applies)
            return adv, stats | mixed_stats
        par = inp.par_ref
        if par is not None:  # the reference responses' components, rescaled like the rollout's
            par = self.transform(par.reshape(-1, X.shape[1])).reshape(par.shape)
        out = self.aggregator.fn(X, self.weights, AggregateInputs(inp.G, inp.theta, par, self.options))
        stats.update(out.stats)
        adv = out.values
        if self.aggregator.output == "reward":
            adv = inp.estimator((adv - kl) * self.rule.reward_scale())
        adv = adv * self.rule.advantage_scale()
        return adv, stats | self.rule.step_stats()

    def after_step(self, R: torch.Tensor) -> dict[str, float]:
        """After the policy step: the rule's update from this rollout's raw component means."""
        return self.rule.after_step(component_means(R, self.names))

    def observe_point(self, point: list[float]) -> dict[str, float]:
        """This step's evaluation point (component order), for a rule that reads one."""
        return self.rule.observe_point(point)

    def state_dict(self) -> dict[str, Any]:
        return {
            "norm": self.norm.state_dict() if self.norm else None,
            self.sec.update: self.rule.state_dict(),
            "search": self.search_state,
        }

    def load_state_dict(self, s: dict[str, Any]) -> None:
        if self.norm is not None and s.get("norm"):
            self.norm.load_state_dict(s["norm"])
        if s.get(self.sec.update):
            self.rule.load_state_dict(s[self.sec.update])
        if s.get("search"):
            self.search_state = s["search"]

    def cache(self) -> ThresholdCache:
        """The threshold search's evaluations so far, keyed by component name."""
        c = ThresholdCache([c.component for c in self.sec.constraints], self.sec.search.cache_tolerance)
        for theta, value in self.search_state["cache"]:
            c.put(theta, value)
        return c

    def describe(self) -> dict[str, Any]:
        return {
            "aggregate": self.sec.aggregate,
            "update": self.sec.update,
            "normalize": self.sec.normalize,
            "weights": dict(zip(self.names, self.weights.tolist(), strict=True)),
            **self.rule.describe(),
        }


def skip_groups(R: torch.Tensor, G: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`missing: skip_group`: entries of a component that is NaN for every completion of a group become 0 (a constant
    within the group, so every group-relative estimator gives it no advantage); returns the filled (S, K) and the
    (S, K) mask of entries where the component applies."""
    g = R.reshape(-1, G, R.shape[1])
    none = torch.isnan(g).all(1, keepdim=True).expand_as(g).reshape(R.shape)
    return R.masked_fill(none, 0.0), ~none


__all__ = ["Composer", "StepInputs", "skip_groups"]
