"""Aggregators: K named component rewards (S, K) -> one reward or advantage per completion (S,).

Rows are completions, S = P·G of them, grouped by prompt in consecutive blocks of G; NaN is a component that gave
no reward. Every aggregator is a pure function; `AGGREGATORS` entries carry it with one signature,
`fn(R (S, K), w (K,), AggregateInputs) -> Aggregated(values (S,), stats)`, and say what it gives (`output`:
"reward", fed to the run's advantage estimator, or "advantage", used as is) and what it needs besides the
components (`needs`: "theta", one DPA direction per completion; "par_ref", the components of reference-policy
responses). Formulas and sources: `reward_models/composition/__init__.py`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch

from prefalign.errors import UserError
from prefalign.groupstats import group_view, nanstd
from prefalign.registry import Table


def nan_rows(R: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
    """(S,) True where a component that counts (nonzero weight, or any without weights) is NaN."""
    if weights is None:
        return torch.isnan(R).any(-1)
    used = weights != 0
    if not bool(used.any()):
        return torch.zeros(R.shape[0], dtype=torch.bool)
    return torch.isnan(R[:, used]).any(-1)


def weighted_sum(R: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """(S, K), (K,) -> (S,) Σ_k w_k r_k; NaN where a component with a nonzero weight is NaN."""
    r = (torch.nan_to_num(R, nan=0.0) * w).sum(-1)
    return r.masked_fill(nan_rows(R, w), math.nan)


def member_spread(R: torch.Tensor, w: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(S, M) rewards of M members -> (S,) their mean and population standard deviation, weighted by `w` (M,) when
    given: mean Σ w r / Σ w, std sqrt(Σ w (r - mean)^2 / Σ w), over the members that scored (NaN: left out); NaN
    where none did."""
    w = torch.ones(R.shape[-1], dtype=R.dtype) if w is None else w.to(R.dtype)
    present = ~torch.isnan(R)
    W = w * present  # (S, M): a member that gave no score weighs nothing
    r = torch.nan_to_num(R, nan=0.0)
    total = W.sum(-1)
    mean = (r * W).sum(-1) / total
    std = (((r - mean[..., None]) ** 2 * W).sum(-1) / total).sqrt()
    return mean, std


def ensemble_lcb(R: torch.Tensor, k: float, w: torch.Tensor | None = None, skip_missing: bool = False) -> torch.Tensor:
    """(S, M) rewards of M ensemble members -> (S,) their mean minus k times their population standard deviation
    (the uncertainty-penalised ensemble of Coste et al. 2023, "Reward Model Ensembles Help Mitigate
    Overoptimization", with the penalty on the std so it has the rewards' units); NaN where any member is NaN, or,
    with `skip_missing`, over the members that scored (NaN where none did). With member weights `w` (M,) both are
    weighted (`member_spread`).

    Worked example: members (1.0, 3.0), k = 0.5: mean 2.0, std 1.0, reward 1.5; members (2.0, 2.0): 2.0 whatever k;
    members (1.0, 4.0) weighted (2, 1): mean 2.0, std sqrt((2 x 1 + 1 x 4) / 3) = sqrt(2); members (1.0, NaN) with
    skip_missing: 1.0.
    """
    mean, std = member_spread(R, w)
    out = mean - k * std
    return out if skip_missing else out.masked_fill(torch.isnan(R).any(-1), math.nan)


def gdpo_advantages(R: torch.Tensor, w: torch.Tensor, G: int, eps: float = 1e-4) -> torch.Tensor:
    """GDPO: per component (r − group mean) / (group std + eps) (unbiased std, NaN left out of the statistics),
    Σ_k w_k A_k, then (A − batch mean) / (batch std + eps) over the rows without NaN; NaN rows stay NaN."""
    g = group_view(R, G)  # (P, G, K)
    A = (g - torch.nanmean(g, 1, keepdim=True)) / (
        torch.nan_to_num(nanstd(g, 1, correction=1), nan=0.0).unsqueeze(1) + eps
    )
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
    g = group_view(R, G)  # (P, G, K)
    mu = torch.nanmean(g, 1, keepdim=True)
    sd = torch.nan_to_num(nanstd(g, 1, correction=0), nan=0.0).unsqueeze(1)  # (P, 1, K)
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


# --- the table ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AggregateInputs:
    """What an aggregator may read besides the (S, K) components and the (K,) weights."""

    G: int  # completions per prompt
    theta: torch.Tensor | None = None  # (S,) DPA direction of each completion's prompt, radians
    par_ref: torch.Tensor | None = None  # (S, M, K) components of M reference-policy responses to the same prompt
    options: Mapping[str, Any] = field(default_factory=dict)  # the aggregator's own settings (see each function)


class Aggregated(NamedTuple):
    values: torch.Tensor  # (S,) rewards or advantages (the entry's `output`); NaN = masked
    stats: dict[str, float]


def _weighted_sum(R: torch.Tensor, w: torch.Tensor, a: AggregateInputs) -> Aggregated:
    return Aggregated(weighted_sum(R, w), {})


def _ensemble(R: torch.Tensor, w: torch.Tensor, a: AggregateInputs) -> Aggregated:
    """options: k (the penalty on the members' std). The components are the members; their weights are not read."""
    values = ensemble_lcb(R, float(a.options.get("k", 1.0)))
    ok = ~torch.isnan(R).any(-1)
    spread = R[ok].std(-1, correction=0).mean().item() if bool(ok.any()) and R.shape[-1] > 1 else 0.0
    return Aggregated(values, {"ensemble/std": spread})


def _gdpo(R: torch.Tensor, w: torch.Tensor, a: AggregateInputs) -> Aggregated:
    return Aggregated(gdpo_advantages(R, w, a.G), {})


def _dvao(R: torch.Tensor, w: torch.Tensor, a: AggregateInputs) -> Aggregated:
    return Aggregated(dvao_advantages(R, w, a.G), {})


def _maxmin_group_argmin(R: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
    r, k = maxmin_group_argmin(R, w)
    return r, {"maxmin/argmin": float(k)}


MAXMIN_MODES: dict[str, Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, dict[str, float]]]] = {
    "per_sample": lambda R, w: (maxmin_per_sample(R, w), {}),
    "group_argmin": _maxmin_group_argmin,
}
"""`options["maxmin"]` of the maxmin aggregator: per-sample min, or the batch's worst component (the paper)."""


def _maxmin(R: torch.Tensor, w: torch.Tensor, a: AggregateInputs) -> Aggregated:
    return Aggregated(*MAXMIN_MODES[a.options.get("maxmin", "per_sample")](R, w))


def _par(R: torch.Tensor, w: torch.Tensor, a: AggregateInputs) -> Aggregated:
    """options: k (sigmoid slope)."""
    if a.par_ref is None:
        raise UserError("composition.aggregate: par needs reference-policy responses (none were drawn)")
    S, M, K = a.par_ref.shape
    r_ref = weighted_sum(a.par_ref.reshape(-1, K), w).reshape(S, M)
    return Aggregated(par_reward(weighted_sum(R, w), r_ref, float(a.options.get("k", 1.0))), {})


def _dpa(R: torch.Tensor, w: torch.Tensor, a: AggregateInputs) -> Aggregated:
    """options: components (the two column indices of the direction)."""
    if a.theta is None:
        raise UserError("composition.aggregate: dpa needs a direction per prompt (none was drawn)")
    return Aggregated(dpa_reward(R[:, list(a.options["components"])], a.theta), {})


@dataclass(frozen=True)
class Aggregator:
    fn: Callable[[torch.Tensor, torch.Tensor, AggregateInputs], Aggregated]
    output: str  # "reward" (fed to the run's advantage estimator) or "advantage" (used as is)
    summary: str
    needs: tuple[str, ...] = ()  # AggregateInputs fields it reads besides G: "theta", "par_ref"
    per_component: bool = True  # scores each component separately first (missing: skip_group applies)


AGGREGATORS: Table[Aggregator] = Table(
    "aggregator",
    {
        "weighted_sum": Aggregator(_weighted_sum, "reward", "Σ_k w_k r_k, then the loss's advantage estimator"),
        "gdpo": Aggregator(
            _gdpo, "advantage", "each component normalised in its group, weighted sum, batch-normalised"
        ),
        "ensemble": Aggregator(
            _ensemble,
            "reward",
            "the components are an RM ensemble: their mean minus k x their std (uncertainty penalty)",
            per_component=False,
        ),
        "dvao": Aggregator(_dvao, "advantage", "components weighted by in-group std (v_k ∝ b_k σ_k)"),
        "maxmin": Aggregator(
            _maxmin,
            "reward",
            "MaxMin-RLHF: per-sample min of w_k r_k, or the batch's worst component",
            per_component=False,
        ),
        "par": Aggregator(
            _par,
            "reward",
            "σ(k (r − r_ref)) averaged over reference-policy responses",
            needs=("par_ref",),
            per_component=False,
        ),
        "dpa": Aggregator(
            _dpa,
            "reward",
            "vᵀ r with a unit direction v per prompt, given in the system prompt",
            needs=("theta",),
            per_component=False,
        ),
    },
    columns=("output", "needs", "summary"),
)
"""`align ls aggregators`."""
