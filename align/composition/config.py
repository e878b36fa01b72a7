"""The `composition:` section of an online run and its checks against the run's reward components.

    reward:                                   # K named components (any scorers; align/rewards.py)
      - {type: grader, objective: correctness}
      - {type: grader, objective: conciseness}
    composition:
      aggregate: weighted_sum                 # `align ls aggregators`: weighted_sum gdpo dvao maxmin par dpa
      weights: {gold_correctness: 0.5, gold_conciseness: 0.5}   # default: the components' own weights
      normalize: none                         # running: per-component running mean / std first
      update: lagrangian                      # `align ls weight-updates`: fixed lagrangian hypervolume gradient
      constraints:                            # lagrangian: thresholds by component name
        - {component: gold_conciseness, threshold: 0.8, type: eq}
      lagrangian: {squash: auto, lr: 0.1, momentum: 0.1}

What each aggregator and update rule needs is read from its table entry (`AGGREGATORS`, `UPDATE_RULES`), so the
checks here never branch on their names.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from prefalign.config import option
from prefalign.errors import did_you_mean
from reward_models.composition import AGGREGATORS

from .rules import UPDATE_RULES
from .sections import (
    ConstraintSpec,
    DpaSection,
    GradientSection,
    HypervolumeSection,
    LagrangianSection,
    ParSection,
    SearchSection,
)


@dataclass
class CompositionSection:
    aggregate: str = option("weighted_sum", "aggregator (`align ls aggregators`)")
    weights: dict[str, float] | None = option(None, "weight per component name (default: each component's weight)")
    normalize: Literal["none", "running"] = option("none", "running: each component by its running mean and std first")
    update: Literal["fixed", "lagrangian", "hypervolume", "gradient"] = option(
        "fixed", "how the weights move (`align ls weight-updates`)"
    )
    missing: Literal["mask", "skip_group"] = option(
        "mask",
        "a NaN component: mask masks the completion (counted); skip_group leaves a component that is NaN for every "
        "completion of a prompt (an objective that does not apply to the task) out of that group's advantage, "
        "counted as na_groups/<name>, and still masks a completion NaN where its group-mates are scored",
    )
    maxmin: Literal["per_sample", "group_argmin"] = option("per_sample", "aggregate: maxmin: the mode")
    constraints: list[ConstraintSpec] = option(factory=list, doc="update: lagrangian: thresholds by name")
    lagrangian: LagrangianSection = option(factory=LagrangianSection, doc="multipliers")
    hypervolume: HypervolumeSection = option(factory=HypervolumeSection, doc="hypervolume-guided weighting")
    gradient: GradientSection = option(factory=GradientSection, doc="gradient-based weighting")
    search: SearchSection = option(factory=SearchSection, doc="Nelder–Mead threshold search")
    par: ParSection = option(factory=ParSection, doc="aggregate: par")
    dpa: DpaSection = option(factory=DpaSection, doc="aggregate: dpa")

    def check(self) -> list[str]:
        p = []
        if self.aggregate not in AGGREGATORS:
            p.append(
                f"aggregate: unknown aggregator '{self.aggregate}'{did_you_mean(self.aggregate, AGGREGATORS.names())}; "
                f"choose one of {', '.join(AGGREGATORS.names())}"
            )
            return p
        rule = UPDATE_RULES[self.update]
        if rule.constrained and not self.constraints:
            p.append(f"constraints: update: {self.update} needs at least one {{component, threshold}}")
        if self.constraints and not rule.constrained:
            p.append("constraints: only update: lagrangian uses thresholds; set update: lagrangian or remove them")
        if rule.aggregates and self.aggregate not in rule.aggregates:
            p.append(f"update: {self.update} {rule.requires}; use aggregate: {' or '.join(rule.aggregates)}")
        if self.search.method != "none" and not rule.constrained:
            p.append("search.method: the threshold search needs update: lagrangian")
        if self.missing == "skip_group" and not AGGREGATORS[self.aggregate].per_component:
            p.append(f"missing: skip_group needs per-component advantages or a weighted sum, not {self.aggregate}")
        if self.gradient.accumulate < 1:
            p.append("gradient.accumulate: must be >= 1")
        if self.par.references < 1:
            p.append("par.references: must be >= 1")
        if self.search.steps_per_eval < 1 or self.search.eval_every < 1:
            p.append("search: steps_per_eval and eval_every must be >= 1")
        return p


def check_composition(sec: CompositionSection, names: list[str], weights: list[float], kl_in_reward: bool) -> list[str]:
    """Problems of a composition against the run's component names and weights (no model loaded)."""
    p: list[str] = []
    known = set(names)

    def unknown(where: str, n: str) -> None:
        if n not in known:
            p.append(
                f"composition.{where}: '{n}' is not a reward component{did_you_mean(n, names)}; "
                f"the components are {', '.join(names)} (a component's name is its `name:`, else gold_<objective> "
                "for graders, else its type)"
            )

    for n in sec.weights or {}:
        unknown(f"weights.{n}", n)
    seen: set[str] = set()
    for i, c in enumerate(sec.constraints):
        unknown(f"constraints[{i}].component", c.component)
        if c.component in seen:
            p.append(f"composition.constraints[{i}]: '{c.component}' is constrained twice")
        seen.add(c.component)
        if not math.isfinite(c.threshold):
            p.append(f"composition.constraints[{i}].threshold: must be finite")
    for n, r in sec.search.ranges.items():
        unknown(f"search.ranges.{n}", n)
        if n not in seen:
            p.append(f"composition.search.ranges.{n}: not a constrained component (constraints: {sorted(seen)})")
        if len(r) != 2 or not r[0] <= r[1]:
            p.append(f"composition.search.ranges.{n}: must be [low, high] with low <= high, got {r}")
    if sec.search.method == "nelder_mead" and set(sec.search.ranges) != seen:
        p.append(f"composition.search.ranges: give [low, high] for every constrained component: {sorted(seen)}")
    for n in sec.hypervolume.minimize:
        unknown("hypervolume.minimize", n)
    rule = UPDATE_RULES[sec.update]
    w = dict(zip(names, weights, strict=True)) | dict(sec.weights or {})
    if any(not math.isfinite(v) for v in w.values()):
        p.append(f"composition.weights: must be finite numbers, got {w}")
    elif rule.simplex:
        total = sum(w.values())
        if abs(total - 1.0) > 1e-6 or any(v < 0 for v in w.values()):
            p.append(
                f"composition.weights: update: {sec.update} keeps the weights on the simplex; they must be >= 0 and "
                f"sum to 1, got {w} (sum {total:g})"
            )
        if rule.positive and any(v <= 0 for v in w.values()):
            p.append(
                f"composition.weights: update: {sec.update} moves w by softmax(log w + η s); every weight must be > 0"
            )
    agg = AGGREGATORS[sec.aggregate]
    if "theta" in agg.needs:
        if len(sec.dpa.components) != 2:
            p.append("composition.dpa.components: name the two components of the direction (cos θ, sin θ)")
        for n in sec.dpa.components:
            unknown("dpa.components", n)
        if len(sec.dpa.angles) != 2 or sec.dpa.angles[0] > sec.dpa.angles[1]:
            p.append(f"composition.dpa.angles: must be [low, high] degrees, got {sec.dpa.angles}")
    if agg.output == "advantage" and kl_in_reward:
        p.append(
            f"composition.aggregate: {sec.aggregate} gives the advantage directly, so a KL in the reward would be "
            "lost; use kl.placement: loss (or kl.beta: 0)"
        )
    return p


__all__ = ["CompositionSection", "ConstraintSpec", "check_composition"]
