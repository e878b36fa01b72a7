"""The leaf sections of `composition:` (constraints, multipliers, dynamic weights, search, PAR, DPA), apart from the
section that holds them so that the update rules can take the parts they read without importing the whole config."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from prefalign.config import option


@dataclass
class ConstraintSpec:
    component: str = option(doc="the constrained component's name (as in reward:)")
    threshold: float = option(doc="its threshold, in the component's own units (batch mean of the raw reward)")
    type: Literal["ge", "le", "eq"] = option("ge", "ge: mean >= threshold; le: mean <= threshold; eq: equal")


@dataclass
class LagrangianSection:
    squash: Literal["auto", "sigmoid", "tanh", "none"] = option(
        "auto", "λ = squash(ξ): auto = sigmoid for ge/le, tanh for eq; none = ξ itself, clamped >= 0 for ge/le"
    )
    lr: float = option(0.1, "SGD learning rate of the multipliers")
    momentum: float = option(0.1, "SGD momentum of the multipliers")
    max_grad_norm: float = option(0.5, "gradient clipping of the multiplier update (0 = off)")
    init: float | None = option(None, "initial ξ (default: N(0, 0.01²) squashed, 0.5 unsquashed)")
    fixed: bool = option(False, "keep the multipliers at their initial values (no update)")
    whiten: bool = option(True, "normalise each component's advantage over the batch before mixing")


@dataclass
class HypervolumeSection:
    apply: Literal["advantage", "reward"] = option(
        "advantage",
        "where the meta factor 0.5 + 1.5 tanh(HVC) multiplies: the advantage after normalisation (changes the update) "
        "or the reward as released (cancels under std-normalised estimators such as GRPO's)",
    )
    point: Literal["eval", "rollout"] = option(
        "eval", "each step's point: greedy answers to held-out prompts scored by the components, or the rollout's means"
    )
    eval_prompts: int = option(16, "point: eval: held-out prompts (family-balanced)")
    eval_max_new_tokens: int = option(64, "point: eval: tokens per greedy answer")
    minimize: list[str] = option(factory=list, doc="components to minimise (the others are maximised)")


@dataclass
class GradientSection:
    layers: str | None = option(
        None, "regular expression on trainable parameter names whose gradients are probed (default: all trainable)"
    )
    eta: float | None = option(None, "step size of w <- softmax(log w + η s); default lr / regularization")
    regularization: float = option(1e-5, "η = the policy lr divided by this, when eta is not given")
    accumulate: int = option(1, "average the influence over this many steps before moving w")
    max_grad_norm: float = option(1.0, "each probe gradient is clipped to this norm (0 = off)")
    probe_completions: int = option(0, "completions per probe (0 = the whole rollout); whole prompt groups")


@dataclass
class SearchSection:
    method: Literal["none", "nelder_mead"] = option("none", "nelder_mead: search the constraint thresholds (NM-PPO)")
    ranges: dict[str, list[float]] = option(
        factory=dict, doc="initial simplex ranges [low, high] per constrained component"
    )
    steps_per_eval: int = option(5, "policy steps per evaluation of f(θ) at most (the same policy continues)")
    eval_every: int = option(1, "evaluate the held-out score every N of those steps")
    tolerance: float = option(0.05, "return early once every constraint value is within this fraction of θ")
    cache_tolerance: float = option(5e-3, "θ within this of a cached one (every coordinate) reuses its value")
    max_iters: int = option(10, "Nelder–Mead iterations at most (train.max_steps also bounds the search)")
    eval_limit: int = option(32, "held-out prompts per evaluation of f (gold overall, greedy)")
    seed: int = option(0, "seed of the initial simplex")


@dataclass
class ParSection:
    references: int = option(4, "reference-policy responses per prompt (M)")
    k: float = option(1.0, "sigmoid slope")


@dataclass
class DpaSection:
    components: list[str] = option(factory=list, doc="the two components of the direction (cos θ, sin θ)")
    angles: list[float] = option(factory=lambda: [-45.0, 45.0], doc="θ drawn uniformly in this arc (degrees)")


__all__ = [
    "ConstraintSpec",
    "DpaSection",
    "GradientSection",
    "HypervolumeSection",
    "LagrangianSection",
    "ParSection",
    "SearchSection",
]
