"""How the composition's weights move between steps: `UPDATE_RULES`, one entry per `composition.update`, each carrying
the class that keeps the rule's state and the facts the config checks read (`align ls weight-updates`).

A rule is a `FixedWeights` with hooks the composer and the online loop call at fixed points of a step:

  weights                the (K,) weights of this step's weighted sum
  mixed(...)             rules that mix per-component advantages themselves (`mixes`): the step's advantage
  reward_scale()         a factor on the aggregated reward before the estimator (hypervolume, apply: reward)
  advantage_scale()      a factor on the advantage (hypervolume, apply: advantage)
  observe_influence(s)   per-component influence from probe gradients, before the advantage (`probes`)
  after_step(means)      after the policy step, from the rollout's component means (the multiplier update)
  observe_point(point)   after the step, an evaluation point (`point`: "eval" greedy held-out answers, "rollout")

The math and the state objects are in `reward_models.composition`; here they are wired to the config.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from prefalign.errors import UserError
from prefalign.groupstats import finite_mean
from prefalign.registry import Table
from reward_models.composition import (
    Constraint,
    GradientWeighting,
    HypervolumeWeighting,
    Lagrangian,
    constrained_advantages,
)

from .sections import ConstraintSpec, GradientSection, HypervolumeSection, LagrangianSection


@dataclass(frozen=True)
class RuleInputs:
    """What a rule is built from: the component names, their configured weights, the run's seed and the sections
    the rules read."""

    names: list[str]
    weights: torch.Tensor  # (K,)
    seed: int
    constraints: list[ConstraintSpec]
    lagrangian: LagrangianSection
    hypervolume: HypervolumeSection
    gradient: GradientSection


class FixedWeights:
    """`fixed`: the weights as configured; the base of every rule (its hooks do nothing)."""

    mixes = False  # computes the step's advantage itself from per-component advantages (`mixed`)
    probes = False  # wants per-component probe gradients before the advantage (`observe_influence`)
    point: str | None = None  # "eval" | "rollout": wants an evaluation point after each step (`observe_point`)

    def __init__(self, inp: RuleInputs) -> None:
        self.names = list(inp.names)
        self.base = inp.weights.clone()

    @property
    def weights(self) -> torch.Tensor:
        return self.base

    def mixed(
        self,
        X: torch.Tensor,
        estimator: Callable[[torch.Tensor], torch.Tensor],
        kl: torch.Tensor,
        applies: torch.Tensor | None,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        raise NotImplementedError(f"{type(self).__name__} does not mix per-component advantages")

    def reward_scale(self) -> float:
        return 1.0

    def advantage_scale(self) -> float:
        return 1.0

    def step_stats(self) -> dict[str, float]:
        return {f"weight/{n}": float(w) for n, w in zip(self.names, self.weights.tolist(), strict=True)}

    def observe_influence(self, s: torch.Tensor, lr: float) -> dict[str, float]:
        return {}

    def after_step(self, means: dict[str, float]) -> dict[str, float]:
        return {}

    def wants_initial_point(self) -> bool:
        return False

    def observe_point(self, point: list[float]) -> dict[str, float]:
        return {}

    def multipliers(self) -> Lagrangian:
        raise UserError("composition: thresholds and multipliers need update: lagrangian")

    def state_dict(self) -> dict[str, Any] | None:
        return None

    def load_state_dict(self, s: dict[str, Any]) -> None:
        return None

    def describe(self) -> dict[str, Any]:
        return {}


class LagrangianRule(FixedWeights):
    """`lagrangian`: constrained RLHF; the mixed advantage from the multipliers, updated after every policy step."""

    mixes = True

    def __init__(self, inp: RuleInputs) -> None:
        super().__init__(inp)
        L = inp.lagrangian
        self.lagr = Lagrangian(
            [Constraint(c.component, c.threshold, c.type) for c in inp.constraints],
            L.squash,
            L.lr,
            L.momentum,
            L.max_grad_norm,
            L.init,
            inp.seed,
            L.fixed,
        )
        self.whiten = L.whiten

    def mixed(
        self,
        X: torch.Tensor,
        estimator: Callable[[torch.Tensor], torch.Tensor],
        kl: torch.Tensor,
        applies: torch.Tensor | None,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        cons = [self.names.index(c.component) for c in self.lagr.constraints]
        obj_w = self.weights.clone()
        obj_w[cons] = 0.0
        adv = constrained_advantages(X, obj_w, cons, estimator, kl, self.lagr, self.whiten, applies)
        lam = self.lagr.lambdas().detach()
        stats = {"weight/objective": float(len(cons) - lam.sum()) if self.lagr.squashed else 1.0}
        for i, c in enumerate(self.lagr.constraints):
            stats[f"multiplier/{c.component}"] = float(lam[i])
            stats[f"threshold/{c.component}"] = c.threshold
        return adv, stats

    def after_step(self, means: dict[str, float]) -> dict[str, float]:
        c = self.lagr.step(means)
        return {f"violation/{con.component}": float(c[i]) for i, con in enumerate(self.lagr.constraints)}

    def multipliers(self) -> Lagrangian:
        return self.lagr

    def state_dict(self) -> dict[str, Any]:
        return self.lagr.state_dict()

    def load_state_dict(self, s: dict[str, Any]) -> None:
        self.lagr.load_state_dict(s)

    def describe(self) -> dict[str, Any]:
        cons = self.lagr.constraints
        return {
            "constraints": [{"component": c.component, "threshold": c.threshold, "type": c.type} for c in cons],
            "multipliers": dict(zip([c.component for c in cons], self.lagr.lambdas().tolist(), strict=True)),
        }


class HypervolumeRule(FixedWeights):
    """`hypervolume`: a meta factor 0.5 + 1.5 tanh(HVC) from each step's evaluation point, on the reward or the
    advantage (`hypervolume.apply`)."""

    def __init__(self, inp: RuleInputs) -> None:
        super().__init__(inp)
        h = inp.hypervolume
        self.hv = HypervolumeWeighting([n not in h.minimize for n in inp.names])
        self.apply = h.apply
        self.point = h.point

    def reward_scale(self) -> float:
        return self.hv.meta if self.apply == "reward" else 1.0

    def advantage_scale(self) -> float:
        return self.hv.meta if self.apply == "advantage" else 1.0

    def step_stats(self) -> dict[str, float]:
        return {**super().step_stats(), "hv/meta": self.hv.meta}

    def wants_initial_point(self) -> bool:
        return self.point == "eval" and not self.hv.buffer

    def observe_point(self, point: list[float]) -> dict[str, float]:
        if any(math.isnan(v) for v in point):  # a component gave no score on any answer: no point, nothing moves
            return {"hv/point_skipped": 1.0}
        hvc = self.hv.observe(point)
        out = {"hv/contribution": hvc, "hv/next_meta": self.hv.meta, "hv/buffer": float(len(self.hv.buffer))}
        for n, v in zip(self.names, point, strict=True):
            out[f"hv/point/{n}"] = v
        return out

    def state_dict(self) -> dict[str, Any]:
        return self.hv.state_dict()

    def load_state_dict(self, s: dict[str, Any]) -> None:
        self.hv.load_state_dict(s)

    def describe(self) -> dict[str, Any]:
        return {"hypervolume": {"apply": self.apply, "buffer": self.hv.buffer}}


class GradientRule(FixedWeights):
    """`gradient`: weights moved by exponentiated gradient on the influence of per-component probe gradients."""

    probes = True

    def __init__(self, inp: RuleInputs) -> None:
        super().__init__(inp)
        self.sec = inp.gradient
        self.grad = GradientWeighting(inp.weights, inp.gradient.accumulate)

    @property
    def weights(self) -> torch.Tensor:
        return self.grad.w

    def eta(self, lr: float) -> float:
        """The step size: `gradient.eta`, else the policy's learning rate / `gradient.regularization`."""
        return float(self.sec.eta) if self.sec.eta is not None else lr / self.sec.regularization

    def observe_influence(self, s: torch.Tensor, lr: float) -> dict[str, float]:
        self.grad.observe(s, self.eta(lr))
        return {f"influence/{n}": float(s[k]) for k, n in enumerate(self.names)}

    def state_dict(self) -> dict[str, Any]:
        return self.grad.state_dict()

    def load_state_dict(self, s: dict[str, Any]) -> None:
        self.grad.load_state_dict(s)


@dataclass(frozen=True)
class UpdateRule:
    """One entry of `UPDATE_RULES`: the rule's class and what the config checks read."""

    make: Callable[[RuleInputs], FixedWeights]
    summary: str
    constrained: bool = False  # reads `composition.constraints` (thresholds by component name)
    aggregates: tuple[str, ...] = ()  # the aggregators it works with (empty: any)
    requires: str = ""  # why those aggregators, for the error message
    simplex: bool = False  # the weights must be >= 0 and sum to 1
    positive: bool = False  # every weight must be > 0


UPDATE_RULES: Table[UpdateRule] = Table(
    "weight update",
    {
        "fixed": UpdateRule(FixedWeights, "w as configured"),
        "lagrangian": UpdateRule(
            LagrangianRule,
            "constrained RLHF: a multiplier per threshold, mixed advantages",
            constrained=True,
            aggregates=("weighted_sum",),
            requires="mixes per-component advantages itself",
        ),
        "hypervolume": UpdateRule(
            HypervolumeRule,
            "dynamic: meta factor 0.5 + 1.5 tanh(HVC) of each evaluation point",
            aggregates=("weighted_sum", "gdpo"),
            requires="moves the weights of a weighted sum",
            simplex=True,
        ),
        "gradient": UpdateRule(
            GradientRule,
            "dynamic: w <- softmax(log w + η s), s from probe-gradient influence",
            aggregates=("weighted_sum", "gdpo"),
            requires="moves the weights of a weighted sum",
            simplex=True,
            positive=True,
        ),
    },
    columns=("summary", "constrained", "aggregates"),
)
"""`align ls weight-updates`."""


def component_means(R: torch.Tensor, names: list[str]) -> dict[str, float]:
    """{name: mean of the scored values of its column of (S, K) R} (NaN when none was scored)."""
    return {n: finite_mean(R[:, k]) for k, n in enumerate(names)}


__all__ = [
    "UPDATE_RULES",
    "FixedWeights",
    "GradientRule",
    "HypervolumeRule",
    "LagrangianRule",
    "RuleInputs",
    "UpdateRule",
    "component_means",
]
