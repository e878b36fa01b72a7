"""Reward composition: K named component rewards -> one reward or advantage per completion.

Everything here is a pure function over tensors, or a small object whose whole state is `state_dict()` (so a
trainer checkpoints and resumes it exactly). Rows are completions, S = P·G of them, grouped by prompt in
consecutive blocks of G (the online loop's layout); columns are the K components, named by the caller.

Aggregators (`AGGREGATORS`, `align ls aggregators`); `output` says what they give:

  weighted_sum   reward  Σ_k w_k r_k (GRPO's "sum then normalise" once the estimator normalises per group)
  gdpo           adv.    GDPO: each component normalised within its group, (r − mean) / (std + 1e-4), then
                         Σ_k w_k A_k, then normalised over the batch (arXiv 2601.05242)
  dvao           adv.    DVAO: per group, v_k = b_k σ_k / Σ_l b_l σ_l and A = Σ_k v_k (r_k − μ_k) / (σ_k + ε),
                         σ the population std; 0 for a group whose Σ b σ ≤ ε (formula from a third-party note
                         matching the abstract: objectives with more in-group variance weigh more)
  maxmin         reward  MaxMin-RLHF: `per_sample` r = min_k w_k-scaled r_k; `group_argmin` the whole batch is
                         rewarded by the one component with the lowest batch mean (the paper's algorithm)
  par            reward  PAR: mean over M reference-policy responses of σ(k (r − r_ref)), r = Σ w r; bounded in
                         (0, 1) and centred on the reference policy
  dpa            reward  directional preference: vᵀ r with a unit vector v = (cos θ, sin θ) per prompt over two
                         components (the direction also goes to the policy in its system prompt)

`normalize: running` first rescales every component by running mean and std (`RunningNorm`, Welford, over all
completions seen so far; the statistics are part of the checkpoint).

Weight updates (how w moves between steps):

  fixed          w as given
  lagrangian     constrained RLHF (Moskovitz et al.): thresholds per named component (ge, le, eq), multipliers
                 λ = squash(ξ) (sigmoid for inequalities, tanh for equalities, or none: ξ clamped at >= 0 for
                 inequalities), ξ updated by SGD with momentum on L = Σ_i squash(ξ_i)·c_i with c_i = mean r_i − θ_i
                 (detached) after each policy step; the mixed advantage A = (N − Σλ) Â_obj + Σ λ_i Â_i (squashed)
                 or Â_obj + Σ λ_i Â_i (unsquashed, every multiplier with its own component)
  hypervolume    dynamic weighting (Lu et al.): a meta factor 0.5 + 1.5 tanh(HVC) from the hypervolume contribution
                 of each step's evaluation point against the buffer of earlier non-dominated points; `apply:
                 reward` multiplies the reward as released (it cancels under std-normalised GRPO and batch-whitened
                 estimators: a positive scale of every reward leaves (r − mean) / std unchanged), `apply:
                 advantage` multiplies the advantage after normalisation, where it changes the update
  gradient       dynamic weighting, gradient-based: per-component probe gradients g_k, influence s = G·1 from
                 their Gram matrix G_kj = <g_k, g_j>, then exponentiated gradient w <- softmax(log w + η s)

`NelderMead` searches the thresholds of a constrained run gradient-free (NM-PPO): each evaluation continues the
same policy, results are cached by threshold (within a tolerance per coordinate, keyed by component name, never
by position) and an evaluation returns early once every constraint is within tolerance of its threshold.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from prefalign.errors import UserError
from prefalign.registry import Table

# --- helpers -----------------------------------------------------------------------------------------------


def _groups(x: torch.Tensor, G: int) -> torch.Tensor:
    if x.shape[0] % G:
        raise ValueError(f"{x.shape[0]} rows do not split into groups of {G}")
    return x.reshape(x.shape[0] // G, G, *x.shape[1:])


def nan_rows(R: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
    """(S,) True where a component that counts (nonzero weight, or any without weights) is NaN."""
    if weights is None:
        return torch.isnan(R).any(-1)
    used = weights != 0
    if not bool(used.any()):
        return torch.zeros(R.shape[0], dtype=torch.bool)
    return torch.isnan(R[:, used]).any(-1)


def _nanstd(x: torch.Tensor, dim: int, unbiased: bool) -> torch.Tensor:
    """Std over `dim` ignoring NaN (n − 1 when `unbiased`); 0 where fewer values than that leave nothing."""
    ok = ~torch.isnan(x)
    n = ok.sum(dim)
    m = torch.nanmean(x, dim, keepdim=True)
    d = torch.where(ok, x - m, torch.zeros_like(x))
    den = (n - 1) if unbiased else n
    v = (d * d).sum(dim) / den.clamp(min=1)
    return torch.where(den > 0, v.sqrt(), torch.zeros_like(v))


# --- aggregators ---------------------------------------------------------------------------------------------


def weighted_sum(R: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """(S, K), (K,) -> (S,) Σ_k w_k r_k; NaN where a component with a nonzero weight is NaN."""
    r = (torch.nan_to_num(R, nan=0.0) * w).sum(-1)
    return r.masked_fill(nan_rows(R, w), math.nan)


def gdpo_advantages(R: torch.Tensor, w: torch.Tensor, G: int, eps: float = 1e-4) -> torch.Tensor:
    """GDPO: per component (r − group mean) / (group std + eps) (unbiased std, NaN left out of the statistics),
    Σ_k w_k A_k, then (A − batch mean) / (batch std + eps) over the rows without NaN; NaN rows stay NaN."""
    g = _groups(R, G)  # (P, G, K)
    A = (g - torch.nanmean(g, 1, keepdim=True)) / (_nanstd(g, 1, True).unsqueeze(1) + eps)
    a = weighted_sum(A.reshape(R.shape), w)
    ok = ~torch.isnan(a)
    if int(ok.sum()) == 0:
        return a
    m = a[ok].mean()
    s = a[ok].std() if int(ok.sum()) > 1 else torch.tensor(0.0)
    return (a - m) / (s + eps)


def dvao_advantages(R: torch.Tensor, b: torch.Tensor, G: int, eps: float = 1e-6) -> torch.Tensor:
    """DVAO: per group, population std σ_k and mean μ_k of each component, v_k = b_k σ_k / Σ_l b_l σ_l,
    A_i = Σ_k v_k (r_ik − μ_k) / (σ_k + ε); 0 for a group of one or with Σ b σ ≤ ε; NaN rows stay NaN."""
    g = _groups(R, G)  # (P, G, K)
    mu = torch.nanmean(g, 1, keepdim=True)
    sd = _nanstd(g, 1, False).unsqueeze(1)  # (P, 1, K)
    total = (b * sd).sum(-1, keepdim=True)  # (P, 1, 1)
    v = torch.where(total > eps, b * sd / total.clamp(min=eps), torch.zeros_like(sd))
    A = (v * torch.nan_to_num((g - mu) / (sd + eps), nan=0.0)).sum(-1)  # (P, G)
    if G <= 1:
        A = torch.zeros_like(A)
    out = A.reshape(-1)
    return out.masked_fill(nan_rows(R, b), math.nan)


def maxmin_per_sample(R: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """MaxMin per sample: min over the components with a nonzero weight of w_k r_k (scale each component by its
    weight; equal weights give the plain min)."""
    used = w != 0
    r = (R[:, used] * w[used]).min(-1).values
    return r.masked_fill(nan_rows(R, w), math.nan)


def maxmin_group_argmin(R: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, int]:
    """MaxMin, the paper's algorithm: the component (among nonzero weights) with the lowest batch mean of w_k r_k
    rewards the whole batch; returns that reward and the component's index."""
    used = [k for k in range(R.shape[1]) if float(w[k]) != 0]
    means = [float(torch.nanmean(R[:, k] * w[k])) for k in used]
    finite = [(m, k) for m, k in zip(means, used, strict=True) if not math.isnan(m)]
    if not finite:
        return torch.full((R.shape[0],), math.nan), -1
    k = min(finite)[1]
    r = R[:, k] * w[k]
    return r.masked_fill(nan_rows(R, w), math.nan), k


def par_reward(r: torch.Tensor, ref: torch.Tensor, k: float = 1.0) -> torch.Tensor:
    """PAR: (S,), (S, M) -> (S,) mean over the finite references of σ(k (r − r_ref)); NaN when r is NaN or no
    reference is finite."""
    ok = ~torch.isnan(ref)
    sig = torch.sigmoid(k * (r.unsqueeze(-1) - torch.nan_to_num(ref, nan=0.0)))
    n = ok.sum(-1)
    out = torch.where(ok, sig, torch.zeros_like(sig)).sum(-1) / n.clamp(min=1)
    return out.masked_fill((n == 0) | torch.isnan(r), math.nan)


def dpa_reward(R: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
    """DPA: (S, 2) components and (S,) angles in radians -> cos θ r_0 + sin θ r_1 (vᵀ r with |v| = 1)."""
    r = torch.cos(theta) * R[:, 0] + torch.sin(theta) * R[:, 1]
    return r.masked_fill(torch.isnan(R).any(-1), math.nan)


def dpa_system_prompt(names: list[str], theta: float) -> str:
    """The direction given to the policy, as DPA's system prompt does (weights round(100 cos θ), round(100 sin θ))."""
    a, b = round(100 * math.cos(theta)), round(100 * math.sin(theta))
    return (
        "You are a helpful, respectful, and honest assistant who always responds to the user in a harmless way. "
        f"Your response should maximize weighted rating = {names[0]}*{a} + {names[1]}*{b}"
    )


@dataclass(frozen=True)
class Aggregator:
    output: str  # "reward" (fed to the run's advantage estimator) or "advantage" (used as is)
    summary: str


AGGREGATORS: Table[Aggregator] = Table(
    "aggregator",
    {
        "weighted_sum": Aggregator("reward", "Σ_k w_k r_k, then the loss's advantage estimator"),
        "gdpo": Aggregator("advantage", "each component normalised in its group, weighted sum, batch-normalised"),
        "dvao": Aggregator("advantage", "components weighted by in-group std (v_k ∝ b_k σ_k), sum-of-std normalised"),
        "maxmin": Aggregator("reward", "MaxMin-RLHF: per-sample min of w_k r_k, or the batch's worst component"),
        "par": Aggregator("reward", "σ(k (r − r_ref)) averaged over reference-policy responses"),
        "dpa": Aggregator("reward", "vᵀ r with a unit direction v per prompt, given in the system prompt"),
    },
    columns=("output", "summary"),
)


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


def influence(grads: torch.Tensor) -> torch.Tensor:
    """(K, D) flattened per-component gradients -> (K,) s_k = Σ_j <g_k, g_j> (row sums of the Gram matrix,
    the diagonal included): how much a step on component k moves all components, to first order."""
    g = grads.double()
    return (g @ g.T).sum(-1).to(grads.dtype)


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

    def mix(self, a_obj: torch.Tensor, a_cons: torch.Tensor) -> torch.Tensor:
        """(S,), (S, N) -> (S,) the mixed advantage: (N − Σλ) Â_obj + Σ λ_i s_i Â_i squashed, Â_obj + Σ λ_i s_i Â_i
        unsquashed (s_i = −1 for `le`, else 1)."""
        lam = self.lambdas().detach().to(a_cons.dtype)
        sign = torch.tensor([-1.0 if c.type == "le" else 1.0 for c in self.constraints], dtype=a_cons.dtype)
        cons = (a_cons * (lam * sign)).sum(-1)
        if self.squashed:
            return (len(self.constraints) - lam.sum()) * a_obj + cons
        return a_obj + cons

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


# --- Nelder–Mead over thresholds ---------------------------------------------------------------------------


class ThresholdCache:
    """f(θ) memoised by component name: a θ within `tol` of a cached key in every coordinate reuses its value."""

    def __init__(self, names: list[str], tol: float = 5e-3) -> None:
        self.names, self.tol = names, tol
        self.entries: list[tuple[dict[str, float], float]] = []

    def get(self, theta: dict[str, float]) -> float | None:
        for key, value in self.entries:
            if all(abs(key[n] - theta[n]) <= self.tol for n in self.names):
                return value
        return None

    def put(self, theta: dict[str, float], value: float) -> None:
        self.entries.append(({n: float(theta[n]) for n in self.names}, float(value)))


@dataclass
class NelderMeadSettings:
    alpha: float = 1.0  # reflection
    gamma: float = 2.0  # expansion
    rho: float = 0.5  # contraction
    sigma: float = 0.5  # shrink
    tol: float = 0.01  # stop when the std of f over the simplex is below
    max_iters: int = 10


def nelder_mead(
    f: Callable[[dict[str, float]], float],
    simplex: list[dict[str, float]],
    settings: NelderMeadSettings,
    should_stop: Callable[[], bool] = lambda: False,
) -> tuple[dict[str, float], float, list[dict[str, Any]]]:
    """Minimise f over thresholds keyed by name from an initial simplex of N+1 vertices (reflect, expand,
    contract, shrink with the reference's coefficients); returns the best θ, f(θ) and the history. `should_stop`
    is polled between evaluations (a training budget running out)."""
    names = list(simplex[0])
    vec = [[v[n] for n in names] for v in simplex]
    history: list[dict[str, Any]] = []

    def call(x: list[float], what: str) -> float:
        theta = dict(zip(names, x, strict=True))
        val = f(theta)
        history.append({"theta": theta, "f": val, "move": what})
        return val

    fs = [call(x, "init") for x in vec]
    for it in range(settings.max_iters):
        if should_stop():
            break
        order = sorted(range(len(vec)), key=lambda i: fs[i])
        vec, fs = [vec[i] for i in order], [fs[i] for i in order]
        mean = sum(fs) / len(fs)
        if math.sqrt(sum((v - mean) ** 2 for v in fs) / len(fs)) < settings.tol and it > 0:
            break
        n = len(names)
        c = [sum(vec[i][d] for i in range(n)) / n for d in range(n)]
        worst = vec[-1]
        r = [c[d] + settings.alpha * (c[d] - worst[d]) for d in range(n)]
        fr = call(r, "reflect")
        if fs[0] <= fr < fs[-2]:
            vec[-1], fs[-1] = r, fr
            continue
        if fr < fs[0]:
            e = [c[d] + settings.gamma * (r[d] - c[d]) for d in range(n)]
            fe = call(e, "expand") if not should_stop() else math.inf
            vec[-1], fs[-1] = (e, fe) if fe < fs[0] else (r, fr)
            continue
        k = [c[d] + settings.rho * (worst[d] - c[d]) for d in range(n)]
        fk = call(k, "contract") if not should_stop() else math.inf
        if fk < fs[-1]:
            vec[-1], fs[-1] = k, fk
            continue
        best = vec[0]
        for i in range(1, len(vec)):
            if should_stop():
                break
            vec[i] = [best[d] + settings.sigma * (vec[i][d] - best[d]) for d in range(n)]
            fs[i] = call(vec[i], "shrink")
    i = min(range(len(fs)), key=lambda j: fs[j])
    return dict(zip(names, vec[i], strict=True)), fs[i], history


def initial_simplex(ranges: dict[str, tuple[float, float]], seed: int = 0) -> list[dict[str, float]]:
    """N+1 vertices θ_i = lo_i + U(0, 1)·(hi_i − lo_i), seeded (the reference's construction)."""
    g = torch.Generator().manual_seed(seed)
    names = list(ranges)
    out = []
    for _ in range(len(names) + 1):
        u = torch.rand(len(names), generator=g, dtype=torch.float64).tolist()
        out.append({n: ranges[n][0] + u[i] * (ranges[n][1] - ranges[n][0]) for i, n in enumerate(names)})
    return out


def within(values: dict[str, float], thresholds: dict[str, float], rel: float) -> bool:
    """Every constraint value within [θ(1 − rel), θ(1 + rel)] (absolute `rel` when θ is 0)."""
    for n, t in thresholds.items():
        v = values.get(n, math.nan)
        if math.isnan(v) or abs(v - t) > (rel * abs(t) if t != 0 else rel):
            return False
    return True


__all__ = [
    "AGGREGATORS",
    "Constraint",
    "GradientWeighting",
    "HypervolumeWeighting",
    "Lagrangian",
    "NelderMeadSettings",
    "RunningNorm",
    "ThresholdCache",
    "dpa_reward",
    "dpa_system_prompt",
    "dvao_advantages",
    "exponentiated_gradient",
    "gdpo_advantages",
    "hv_meta",
    "hypervolume",
    "hypervolume_contribution",
    "influence",
    "initial_simplex",
    "maxmin_group_argmin",
    "maxmin_per_sample",
    "nelder_mead",
    "par_reward",
    "weighted_sum",
    "within",
]
