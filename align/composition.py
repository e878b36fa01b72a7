"""The `composition:` section of an online run: how the K named reward components become one advantage.

    reward:                                   # K named components (any scorers; align/rewards.py)
      - {type: grader, objective: correctness}
      - {type: grader, objective: conciseness}
    composition:
      aggregate: weighted_sum                 # `align ls aggregators`: weighted_sum gdpo dvao maxmin par dpa
      weights: {gold_correctness: 0.5, gold_conciseness: 0.5}   # default: the components' own weights
      normalize: none                         # running: per-component running mean / std first
      update: lagrangian                      # fixed | lagrangian | hypervolume | gradient
      constraints:                            # lagrangian: thresholds by component name
        - {component: gold_conciseness, threshold: 0.8, type: eq}
      lagrangian: {squash: auto, lr: 0.1, momentum: 0.1}

The math is in `reward_models.composition`; this module holds the config, checks it against the components
(names, weights, thresholds), and keeps the state (running statistics, multipliers, weights, hypervolume
buffer, threshold search) that the run checkpoints and restores. Without a `composition:` section a run is
unchanged: Σ w_k r_k into the loss's estimator.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from prefalign.config import option
from prefalign.errors import UserError, did_you_mean
from reward_models.composition import (
    AGGREGATORS,
    Constraint,
    GradientWeighting,
    HypervolumeWeighting,
    Lagrangian,
    RunningNorm,
    ThresholdCache,
    dpa_reward,
    dvao_advantages,
    gdpo_advantages,
    maxmin_group_argmin,
    maxmin_per_sample,
    nan_rows,
    par_reward,
    weighted_sum,
)


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


@dataclass
class CompositionSection:
    aggregate: str = option("weighted_sum", "aggregator (`align ls aggregators`)")
    weights: dict[str, float] | None = option(None, "weight per component name (default: each component's weight)")
    normalize: Literal["none", "running"] = option("none", "running: each component by its running mean and std first")
    update: Literal["fixed", "lagrangian", "hypervolume", "gradient"] = option("fixed", "how the weights move")
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
        if self.update == "lagrangian" and not self.constraints:
            p.append("constraints: update: lagrangian needs at least one {component, threshold}")
        if self.constraints and self.update != "lagrangian":
            p.append("constraints: only update: lagrangian uses thresholds; set update: lagrangian or remove them")
        if self.update == "lagrangian" and self.aggregate != "weighted_sum":
            p.append("update: lagrangian mixes per-component advantages itself; use aggregate: weighted_sum")
        if self.update in ("hypervolume", "gradient") and self.aggregate not in ("weighted_sum", "gdpo"):
            p.append(f"update: {self.update} moves the weights of a weighted sum; use aggregate: weighted_sum or gdpo")
        if self.search.method != "none" and self.update != "lagrangian":
            p.append("search.method: the threshold search needs update: lagrangian")
        if self.missing == "skip_group" and self.aggregate in ("maxmin", "par", "dpa"):
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
    w = dict(zip(names, weights, strict=True)) | dict(sec.weights or {})
    if any(not math.isfinite(v) for v in w.values()):
        p.append(f"composition.weights: must be finite numbers, got {w}")
    elif sec.update in ("hypervolume", "gradient"):
        total = sum(w.values())
        if abs(total - 1.0) > 1e-6 or any(v < 0 for v in w.values()):
            p.append(
                f"composition.weights: update: {sec.update} keeps the weights on the simplex; they must be >= 0 and "
                f"sum to 1, got {w} (sum {total:g})"
            )
        if sec.update == "gradient" and any(v <= 0 for v in w.values()):
            p.append("composition.weights: update: gradient moves w by softmax(log w + η s); every weight must be > 0")
    if sec.aggregate == "dpa":
        if len(sec.dpa.components) != 2:
            p.append("composition.dpa.components: name the two components of the direction (cos θ, sin θ)")
        for n in sec.dpa.components:
            unknown("dpa.components", n)
        if len(sec.dpa.angles) != 2 or sec.dpa.angles[0] > sec.dpa.angles[1]:
            p.append(f"composition.dpa.angles: must be [low, high] degrees, got {sec.dpa.angles}")
    if sec.aggregate in ("gdpo", "dvao") and kl_in_reward:
        p.append(
            f"composition.aggregate: {sec.aggregate} gives the advantage directly, so a KL in the reward would be "
            "lost; use kl.placement: loss (or kl.beta: 0)"
        )
    return p


@dataclass
class StepInputs:
    """Everything one step's composition reads, for all ranks' completions (S = P·G rows)."""

    R: torch.Tensor  # (S, K) raw component rewards, NaN where a component failed
    G: int
    estimator: Callable[[torch.Tensor], torch.Tensor]  # (S,) reward -> (S,) advantage (the loss's own estimator)
    kl: torch.Tensor | None = None  # (S,) β·KL to subtract from a reward (kl.placement: reward)
    theta: torch.Tensor | None = None  # (S,) DPA directions
    par_ref: torch.Tensor | None = None  # (S, M, K) components of reference-policy responses


class Composer:
    """The composition of one run and its state."""

    def __init__(self, sec: CompositionSection, names: list[str], weights: list[float], seed: int = 0) -> None:
        self.sec = sec
        self.names = list(names)
        w = dict(zip(names, weights, strict=True)) | dict(sec.weights or {})
        self.base_w = torch.tensor([float(w[n]) for n in names], dtype=torch.float32)
        self.norm = RunningNorm(len(names)) if sec.normalize == "running" else None
        self.lagr: Lagrangian | None = None
        self.hv: HypervolumeWeighting | None = None
        self.grad: GradientWeighting | None = None
        if sec.update == "lagrangian":
            L = sec.lagrangian
            self.lagr = Lagrangian(
                [Constraint(c.component, c.threshold, c.type) for c in sec.constraints],
                L.squash,
                L.lr,
                L.momentum,
                L.max_grad_norm,
                L.init,
                seed,
                L.fixed,
            )
        elif sec.update == "hypervolume":
            self.hv = HypervolumeWeighting([n not in sec.hypervolume.minimize for n in names])
        elif sec.update == "gradient":
            self.grad = GradientWeighting(self.base_w, sec.gradient.accumulate)
        self.search_state: dict[str, Any] = {"cache": [], "history": []}
        self.applies: torch.Tensor | None = None  # missing: skip_group: where each component applies this step

    @property
    def weights(self) -> torch.Tensor:
        return self.grad.w if self.grad is not None else self.base_w

    def index(self, name: str) -> int:
        return self.names.index(name)

    def transform(self, R: torch.Tensor) -> torch.Tensor:
        """R rescaled by the running statistics (`normalize: running`), else as is; `advantages` updates them."""
        return R if self.norm is None else self.norm.normalize(R)

    def per_component(self, X: torch.Tensor, estimator: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        """(S, K) the run's estimator applied to each component alone (the gradient method's probes)."""
        return torch.stack([estimator(X[:, k]) for k in range(X.shape[1])], -1)

    def advantages(self, inp: StepInputs) -> tuple[torch.Tensor, dict[str, float]]:
        """(S,) advantages (NaN = masked) and metrics for this step."""
        sec = self.sec
        stats: dict[str, float] = {}
        R, self.applies = inp.R, None
        if sec.missing == "skip_group":
            R, self.applies = skip_groups(inp.R, inp.G)
            for k, n in enumerate(self.names):
                stats[f"na_groups/{n}"] = float((~self.applies[:, k]).sum()) / inp.G
        if self.norm is not None:
            self.norm.update(inp.R)  # statistics of the scored values only
        X = self.transform(R)
        w = self.weights
        kl = inp.kl if inp.kl is not None else torch.zeros(X.shape[0])
        if self.lagr is not None:
            return self._lagrangian(X, inp, kl, stats)
        agg = sec.aggregate
        if agg == "gdpo":
            adv = gdpo_advantages(X, w, inp.G)
        elif agg == "dvao":
            adv = dvao_advantages(X, w, inp.G)
        else:
            if agg == "weighted_sum":
                r = weighted_sum(X, w)
            elif agg == "maxmin":
                if sec.maxmin == "per_sample":
                    r = maxmin_per_sample(X, w)
                else:
                    r, k = maxmin_group_argmin(X, w)
                    stats["maxmin/argmin"] = float(k)
            elif agg == "par":
                if inp.par_ref is None:
                    raise UserError("composition.aggregate: par needs reference-policy responses (none were drawn)")
                ref = self.transform(inp.par_ref.reshape(-1, X.shape[1]))
                r_ref = weighted_sum(ref, w).reshape(inp.par_ref.shape[0], inp.par_ref.shape[1])
                r = par_reward(weighted_sum(X, w), r_ref, sec.par.k)
            elif agg == "dpa":
                if inp.theta is None:
                    raise UserError("composition.aggregate: dpa needs a direction per prompt (none was drawn)")
                idx = [self.index(n) for n in sec.dpa.components]
                r = dpa_reward(X[:, idx], inp.theta)
            else:  # pragma: no cover - check() rejects it
                raise UserError(f"composition.aggregate: '{agg}' is not handled")
            r = r - kl
            if self.hv is not None and sec.hypervolume.apply == "reward":
                r = r * self.hv.meta
            adv = inp.estimator(r)
        if self.hv is not None:
            stats["hv/meta"] = self.hv.meta
            if sec.hypervolume.apply == "advantage":
                adv = adv * self.hv.meta
        for k, n in enumerate(self.names):
            stats[f"weight/{n}"] = float(w[k])
        return adv, stats

    def _lagrangian(
        self, X: torch.Tensor, inp: StepInputs, kl: torch.Tensor, stats: dict[str, float]
    ) -> tuple[torch.Tensor, dict[str, float]]:
        assert self.lagr is not None
        cons = [self.index(c.component) for c in self.lagr.constraints]
        obj_w = self.weights.clone()
        obj_w[cons] = 0.0
        whiten = self.sec.lagrangian.whiten

        def adv_of(r: torch.Tensor, applies: torch.Tensor | None = None) -> torch.Tensor:
            a = inp.estimator(r)
            if whiten:
                ok = ~torch.isnan(a) if applies is None else (~torch.isnan(a) & applies)
                if int(ok.sum()) > 1:
                    z = (a - a[ok].mean()) / (a[ok].std() + 1e-8)
                    a = torch.where(ok, z, a)  # a group the component does not apply to keeps its 0
            return a

        has_obj = bool((obj_w != 0).any()) or bool((kl != 0).any())
        r_obj = (weighted_sum(X, obj_w) if bool((obj_w != 0).any()) else torch.zeros(X.shape[0])) - kl
        a_obj = adv_of(r_obj) if has_obj else torch.zeros(X.shape[0])
        app = self.applies
        a_cons = torch.stack([adv_of(X[:, k], None if app is None else app[:, k]) for k in cons], -1)
        adv = self.lagr.mix(a_obj, a_cons)
        used = obj_w.clone()
        used[cons] = 1.0
        adv = adv.masked_fill(nan_rows(X, used), math.nan)
        lam = self.lagr.lambdas().detach()
        N = len(cons)
        stats["weight/objective"] = float(N - lam.sum()) if self.lagr.squashed else 1.0
        for i, c in enumerate(self.lagr.constraints):
            stats[f"multiplier/{c.component}"] = float(lam[i])
            stats[f"threshold/{c.component}"] = c.threshold
        return adv, stats

    def after_step(self, R: torch.Tensor) -> dict[str, float]:
        """After the policy step: the multiplier update from this rollout's raw component means."""
        stats: dict[str, float] = {}
        if self.lagr is None:
            return stats
        means = {n: _mean(R[:, k]) for k, n in enumerate(self.names)}
        c = self.lagr.step(means)
        for i, con in enumerate(self.lagr.constraints):
            stats[f"violation/{con.component}"] = float(c[i])
        return stats

    def observe_point(self, point: list[float]) -> dict[str, float]:
        """Hypervolume weighting: this step's evaluation point (component order)."""
        assert self.hv is not None
        hvc = self.hv.observe(point)
        out = {"hv/contribution": hvc, "hv/next_meta": self.hv.meta, "hv/buffer": float(len(self.hv.buffer))}
        for n, v in zip(self.names, point, strict=True):
            out[f"hv/point/{n}"] = v
        return out

    def eta(self, lr: float) -> float:
        g = self.sec.gradient
        return float(g.eta) if g.eta is not None else lr / g.regularization

    def state_dict(self) -> dict[str, Any]:
        return {
            "norm": self.norm.state_dict() if self.norm else None,
            "lagrangian": self.lagr.state_dict() if self.lagr else None,
            "hypervolume": self.hv.state_dict() if self.hv else None,
            "gradient": self.grad.state_dict() if self.grad else None,
            "search": self.search_state,
        }

    def load_state_dict(self, s: dict[str, Any]) -> None:
        if self.norm is not None and s.get("norm"):
            self.norm.load_state_dict(s["norm"])
        if self.lagr is not None and s.get("lagrangian"):
            self.lagr.load_state_dict(s["lagrangian"])
        if self.hv is not None and s.get("hypervolume"):
            self.hv.load_state_dict(s["hypervolume"])
        if self.grad is not None and s.get("gradient"):
            self.grad.load_state_dict(s["gradient"])
        if s.get("search"):
            self.search_state = s["search"]

    def cache(self) -> ThresholdCache:
        names = [c.component for c in self.sec.constraints]
        c = ThresholdCache(names, self.sec.search.cache_tolerance)
        for theta, value in self.search_state["cache"]:
            c.put(theta, value)
        return c

    def describe(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "aggregate": self.sec.aggregate,
            "update": self.sec.update,
            "normalize": self.sec.normalize,
            "weights": dict(zip(self.names, self.weights.tolist(), strict=True)),
        }
        if self.lagr is not None:
            d["constraints"] = [
                {"component": c.component, "threshold": c.threshold, "type": c.type} for c in self.lagr.constraints
            ]
            d["multipliers"] = dict(
                zip([c.component for c in self.lagr.constraints], self.lagr.lambdas().tolist(), strict=True)
            )
        if self.hv is not None:
            d["hypervolume"] = {"apply": self.sec.hypervolume.apply, "buffer": self.hv.buffer}
        return d


def skip_groups(R: torch.Tensor, G: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`missing: skip_group`: entries of a component that is NaN for every completion of a group become 0 (a constant
    within the group, so every group-relative estimator gives it no advantage); returns the filled (S, K) and the
    (S, K) mask of entries where the component applies."""
    g = R.reshape(-1, G, R.shape[1])
    none = torch.isnan(g).all(1, keepdim=True).expand_as(g).reshape(R.shape)
    return R.masked_fill(none, 0.0), ~none


def _mean(x: torch.Tensor) -> float:
    ok = x[~torch.isnan(x)]
    return float(ok.mean()) if len(ok) else math.nan


def plot_composition(metrics_path: Path, out: Path, names: list[str]) -> Path | None:
    """components and weights (or multipliers) over steps, one PNG."""
    import json

    rows = [json.loads(line) for line in metrics_path.read_text(encoding="utf-8").splitlines() if line.strip()]
    rows = [r for r in rows if "loss" in r]
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    steps = [r["step"] for r in rows]
    for n in names:
        ys = [r.get(f"reward/{n}", math.nan) for r in rows]
        axes[0].plot(steps, ys, label=n)
        th = [r.get(f"threshold/{n}") for r in rows]
        if any(t is not None for t in th):
            axes[0].plot(steps, [math.nan if t is None else t for t in th], "--", color="grey", lw=1)
    axes[0].set_title("component rewards (rollout means; dashed: thresholds)")
    axes[0].set_xlabel("step")
    axes[0].legend(fontsize=7)
    keys = sorted({k for r in rows for k in r if k.startswith(("weight/", "multiplier/")) or k == "hv/meta"})
    for k in keys:
        axes[1].plot(steps, [r.get(k, math.nan) for r in rows], label=k)
    axes[1].set_title("weights, multipliers, meta factor")
    axes[1].set_xlabel("step")
    if keys:
        axes[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


__all__ = ["CompositionSection", "Composer", "StepInputs", "check_composition", "plot_composition", "skip_groups"]
