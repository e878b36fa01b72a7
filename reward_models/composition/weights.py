"""Weight rules with state: running normalisation, hypervolume-guided and gradient-based dynamic weights, and the
Lagrange multipliers of constrained RLHF, each a small object whose whole state is `state_dict()`; and the pure
functions they use (hypervolume, influence, exponentiated gradient, the mixed constrained advantage).
Formulas and sources: `reward_models/composition/__init__.py`.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from prefalign.errors import UserError

from .aggregate import nan_rows, weighted_sum

# --- running normalisation ---------------------------------------------------------------------------------


class RunningNorm:
    """Per-component running mean and std (Chan/Welford over every finite value seen); normalise (r − m) / (s + eps)."""

    def __init__(self, K: int, eps: float = 1e-6) -> None:
        self.count = torch.zeros(K, dtype=torch.float64)
        self.mean = torch.zeros(K, dtype=torch.float64)
        self.m2 = torch.zeros(K, dtype=torch.float64)
        self.eps = eps

    def update(self, R: torch.Tensor) -> None:
        for k in range(R.shape[1]):
            x = R[:, k].double()
            x = x[~torch.isnan(x)]
            n = len(x)
            if not n:
                continue
            m = x.mean()
            m2 = ((x - m) ** 2).sum()
            tot = self.count[k] + n
            delta = m - self.mean[k]
            self.mean[k] = self.mean[k] + delta * n / tot
            self.m2[k] = self.m2[k] + m2 + delta**2 * self.count[k] * n / tot
            self.count[k] = tot

    @property
    def std(self) -> torch.Tensor:
        return torch.where(self.count > 1, (self.m2 / (self.count - 1).clamp(min=1)).sqrt(), torch.ones_like(self.m2))

    def normalize(self, R: torch.Tensor) -> torch.Tensor:
        return ((R.double() - self.mean) / (self.std + self.eps)).to(R.dtype)

    def state_dict(self) -> dict[str, Any]:
        return {"count": self.count.clone(), "mean": self.mean.clone(), "m2": self.m2.clone()}

    def load_state_dict(self, s: dict[str, Any]) -> None:
        self.count, self.mean, self.m2 = s["count"].clone(), s["mean"].clone(), s["m2"].clone()


# --- hypervolume -------------------------------------------------------------------------------------------


def hypervolume(points: list[list[float]] | torch.Tensor, ref: list[float] | torch.Tensor) -> float:
    """Exact hypervolume (every objective maximised) dominated by `points` above the reference point `ref`:
    the measure of ∪_p [ref, p]. Recursive slicing on the last objective (Fonseca et al. 2006, exact); points not
    above `ref` in every objective add nothing."""
    pts = [list(map(float, p)) for p in (points.tolist() if isinstance(points, torch.Tensor) else points)]
    r = list(map(float, ref.tolist() if isinstance(ref, torch.Tensor) else ref))
    pts = [p for p in pts if all(a > b for a, b in zip(p, r, strict=True))]
    return _hv(pts, r)


def _hv(pts: list[list[float]], ref: list[float]) -> float:
    if not pts:
        return 0.0
    d = len(ref)
    if d == 1:
        return max(p[0] for p in pts) - ref[0]
    # slice on the last objective: between consecutive levels, the (d-1)-volume of the points reaching that level
    levels = sorted({p[-1] for p in pts}, reverse=True)
    total = 0.0
    for i, top in enumerate(levels):
        below = levels[i + 1] if i + 1 < len(levels) else ref[-1]
        active = [p[:-1] for p in pts if p[-1] >= top]
        total += _hv(active, ref[:-1]) * (top - below)
    return total


def hypervolume_contribution(buffer: list[list[float]], point: list[float], ref: list[float]) -> float:
    """HV(buffer ∪ {point}) − HV(buffer), both against `ref`."""
    return hypervolume([*buffer, point], ref) - hypervolume(buffer, ref)


def hv_meta(hvc: float) -> float:
    """The meta factor of hypervolume-guided weighting: 0.5 + 1.5 tanh(HVC), in [0.5, 2)."""
    return 0.5 + 1.5 * math.tanh(hvc)


class HypervolumeWeighting:
    """The buffer of evaluation points (oriented for maximisation; the first is the reference) and the meta factor
    that applies to the next step."""

    def __init__(self, maximize: list[bool]) -> None:
        self.sign = [1.0 if m else -1.0 for m in maximize]
        self.buffer: list[list[float]] = []
        self.meta = 1.0
        self.last_hvc = 0.0

    def observe(self, point: list[float]) -> float:
        """Add this step's evaluation point; returns its contribution (0 for the first, which becomes the reference)."""
        p = [s * v for s, v in zip(self.sign, point, strict=True)]
        if any(math.isnan(v) for v in p):
            raise UserError(f"hypervolume weighting: the evaluation point {point} has NaN components")
        if not self.buffer:
            self.buffer = [p]
            self.meta, self.last_hvc = 1.0, 0.0
            return 0.0
        ref, rest = self.buffer[0], self.buffer[1:]
        hvc = hypervolume_contribution(rest, p, ref)
        if hvc > 0:
            self.buffer.append(p)
        self.meta, self.last_hvc = hv_meta(hvc), hvc
        return hvc

    def state_dict(self) -> dict[str, Any]:
        return {"buffer": [list(p) for p in self.buffer], "meta": self.meta, "last_hvc": self.last_hvc}

    def load_state_dict(self, s: dict[str, Any]) -> None:
        self.buffer = [list(p) for p in s["buffer"]]
        self.meta, self.last_hvc = float(s["meta"]), float(s["last_hvc"])


# --- gradient-based weights --------------------------------------------------------------------------------


def influence_of_gram(gram: torch.Tensor) -> torch.Tensor:
    """(K, K) Gram matrix G_kj = <g_k, g_j> of per-component gradients -> (K,) s_k = Σ_j G_kj (row sums, the
    diagonal included): how much a step on component k moves all components, to first order."""
    return gram.sum(-1)


def influence(grads: torch.Tensor) -> torch.Tensor:
    """(K, D) flattened per-component gradients -> (K,) `influence_of_gram` of their Gram matrix (in float64)."""
    g = grads.double()
    return influence_of_gram(g @ g.T).to(grads.dtype)


def exponentiated_gradient(w: torch.Tensor, s: torch.Tensor, eta: float) -> torch.Tensor:
    """Mirror ascent on the simplex: softmax(log w + η s)."""
    return torch.softmax(torch.log(w.double().clamp(min=1e-30)) + eta * s.double(), -1).to(w.dtype)


class GradientWeighting:
    """Weights on the simplex moved by exponentiated gradient on the influence, averaged over `accumulate` steps."""

    def __init__(self, w: torch.Tensor, accumulate: int = 1) -> None:
        self.w = w.clone().float()
        self.accumulate = max(1, accumulate)
        self.pending: list[torch.Tensor] = []

    def observe(self, s: torch.Tensor, eta: float) -> bool:
        """Record one step's influence; update w when `accumulate` have been seen. True when w moved."""
        self.pending.append(s.detach().double().cpu())
        if len(self.pending) < self.accumulate:
            return False
        mean = torch.stack(self.pending).mean(0)
        self.pending = []
        self.w = exponentiated_gradient(self.w.double(), mean, eta).float()
        return True

    def state_dict(self) -> dict[str, Any]:
        return {"w": self.w.clone(), "pending": [p.clone() for p in self.pending]}

    def load_state_dict(self, s: dict[str, Any]) -> None:
        self.w = s["w"].clone()
        self.pending = [p.clone() for p in s["pending"]]


# --- constrained (Lagrangian) ------------------------------------------------------------------------------


@dataclass
class Constraint:
    component: str
    threshold: float
    type: str = "ge"  # ge: mean r >= θ; le: mean r <= θ; eq: mean r = θ


SQUASHES = ("auto", "sigmoid", "tanh", "none")


class Lagrangian:
    """Multipliers of constrained RLHF, one per constraint, and their SGD-with-momentum update.

    squash 'auto': sigmoid for an inequality (λ ∈ (0, 1)), tanh for an equality (λ ∈ (−1, 1)); 'none': λ = ξ,
    clamped at >= 0 after each step for inequalities. ξ starts at `init` (default: N(0, 0.01²) from `seed` when
    squashed, 0.5 unsquashed). A `le` constraint is the `ge` constraint of −r: its violation and its advantage
    enter with the sign flipped."""

    def __init__(
        self,
        constraints: list[Constraint],
        squash: str = "auto",
        lr: float = 0.1,
        momentum: float = 0.1,
        max_grad_norm: float = 0.5,
        init: float | None = None,
        seed: int = 0,
        fixed: bool = False,
    ) -> None:
        if squash not in SQUASHES:
            raise UserError(f"lagrangian.squash: '{squash}' is not one of {', '.join(SQUASHES)}")
        self.constraints = constraints
        self.squash = squash
        self.fixed = fixed
        self.max_grad_norm = max_grad_norm
        n = len(constraints)
        if init is not None:
            xi = torch.full((n,), float(init), dtype=torch.float64)
        elif squash == "none":
            xi = torch.full((n,), 0.5, dtype=torch.float64)
        else:
            xi = torch.randn(n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * 0.01
        self.xi = torch.nn.Parameter(xi)
        self.opt = torch.optim.SGD([self.xi], lr=lr, momentum=momentum)

    @property
    def squashed(self) -> bool:
        return self.squash != "none"

    def _squash_one(self, i: int, x: torch.Tensor) -> torch.Tensor:
        if self.squash == "none":
            return x
        kind = self.squash
        if kind == "auto":
            kind = "tanh" if self.constraints[i].type == "eq" else "sigmoid"
        return torch.tanh(x) if kind == "tanh" else torch.sigmoid(x)

    def lambdas(self, x: torch.Tensor | None = None) -> torch.Tensor:
        x = self.xi if x is None else x
        return torch.stack([self._squash_one(i, x[i]) for i in range(len(self.constraints))])

    def violations(self, values: dict[str, float]) -> torch.Tensor:
        """c_i = v_i − θ_i (ge, eq) or θ_i − v_i (le), from the components' batch means."""
        out = []
        for c in self.constraints:
            v = values.get(c.component, math.nan)
            out.append((c.threshold - v) if c.type == "le" else (v - c.threshold))
        return torch.tensor(out, dtype=torch.float64)

    def step(self, values: dict[str, float]) -> torch.Tensor:
        """One multiplier update from the constraint values of the last policy step; a constraint whose value is
        NaN (no scored completion) is left out of this update. Returns the violations."""
        c = self.violations(values)
        if self.fixed:
            return c
        ok = ~torch.isnan(c)
        self.opt.zero_grad()
        loss = (self.lambdas() * torch.where(ok, c, torch.zeros_like(c))).sum()
        loss.backward()
        if self.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_([self.xi], self.max_grad_norm)
        self.opt.step()
        if self.squash == "none":
            with torch.no_grad():
                for i, con in enumerate(self.constraints):
                    if con.type != "eq":
                        self.xi[i].clamp_(min=0.0)
        return c

    def signs(self) -> torch.Tensor:
        """(N,) −1 for a `le` constraint (the `ge` constraint of −r), else 1."""
        return torch.tensor([-1.0 if c.type == "le" else 1.0 for c in self.constraints])

    def mix(self, a_obj: torch.Tensor, a_cons: torch.Tensor) -> torch.Tensor:
        """The mixed advantage with the current multipliers (`mix_advantages`)."""
        return mix_advantages(a_obj, a_cons, self.lambdas().detach(), self.signs(), self.squashed)

    def set_thresholds(self, thresholds: dict[str, float]) -> None:
        for c in self.constraints:
            if c.component in thresholds:
                c.threshold = float(thresholds[c.component])

    def state_dict(self) -> dict[str, Any]:
        return {
            "xi": self.xi.detach().clone(),
            "optimizer": copy.deepcopy(self.opt.state_dict()),  # the momentum buffer is updated in place
            "thresholds": {c.component: c.threshold for c in self.constraints},
        }

    def load_state_dict(self, s: dict[str, Any]) -> None:
        with torch.no_grad():
            self.xi.copy_(s["xi"])
        self.opt.load_state_dict(copy.deepcopy(s["optimizer"]))
        self.set_thresholds(s["thresholds"])


def mix_advantages(
    a_obj: torch.Tensor, a_cons: torch.Tensor, lam: torch.Tensor, sign: torch.Tensor, squashed: bool
) -> torch.Tensor:
    """(S,), (S, N), (N,), (N,) -> (S,) the mixed advantage of constrained RLHF: (N − Σλ) Â_obj + Σ λ_i s_i Â_i with
    squashed multipliers (λ in (0, 1) or (−1, 1)), Â_obj + Σ λ_i s_i Â_i unsquashed; s_i = −1 for `le`, else 1."""
    lam = lam.to(a_cons.dtype)
    cons = (a_cons * (lam * sign.to(a_cons.dtype))).sum(-1)
    if squashed:
        return (a_cons.shape[-1] - lam.sum()) * a_obj + cons
    return a_obj + cons


def whiten(a: torch.Tensor, ok: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """(a − mean) / (std + eps) over the entries where `ok` (sample std), the others unchanged (a group a component
    does not apply to keeps its 0); unchanged when fewer than two entries are ok."""
    if int(ok.sum()) <= 1:
        return a
    return torch.where(ok, (a - a[ok].mean()) / (a[ok].std() + eps), a)


def constrained_advantages(
    R: torch.Tensor,
    obj_w: torch.Tensor,
    cons: list[int],
    estimator: Callable[[torch.Tensor], torch.Tensor],
    kl: torch.Tensor,
    lagr: Lagrangian,
    whiten_each: bool,
    applies: torch.Tensor | None = None,
) -> torch.Tensor:
    """(S,) the constrained run's advantage (NaN = masked): the objective Σ_{k not constrained} w_k r_k − kl and each
    constrained component r_i through the run's `estimator` separately, each optionally whitened over the batch
    (`whiten_each`; where `applies` (S, K) says a component does not apply, its 0 stays), mixed by the current
    multipliers (`mix_advantages`). A completion with a NaN objective or constrained component is masked."""
    S = R.shape[0]

    def adv_of(r: torch.Tensor, where: torch.Tensor | None = None) -> torch.Tensor:
        a = estimator(r)
        if whiten_each:
            ok = ~torch.isnan(a) if where is None else (~torch.isnan(a) & where)
            a = whiten(a, ok)
        return a

    weighted = bool((obj_w != 0).any())
    has_obj = weighted or bool((kl != 0).any())
    r_obj = (weighted_sum(R, obj_w) if weighted else torch.zeros(S)) - kl
    a_obj = adv_of(r_obj) if has_obj else torch.zeros(S)
    a_cons = torch.stack([adv_of(R[:, k], None if applies is None else applies[:, k]) for k in cons], -1)
    used = obj_w.clone()
    used[cons] = 1.0
    return lagr.mix(a_obj, a_cons).masked_fill(nan_rows(R, used), math.nan)
