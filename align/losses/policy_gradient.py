"""Policy-gradient losses over sampled completions: advantage estimators, KL estimators and the clipped
surrogate losses of GRPO, RLOO and REINFORCE, chosen through `PG_LOSSES`.

Everything is a pure function over tensors of S completions (G per prompt, prompts consecutive: sample j of
prompt i is row i*G + j) padded to T tokens:

    logps      (S, T)  log π_θ of each completion token (carries gradients)
    old_logps  (S, T)  log π_old: the sampling log-probs the generation engine returned with the tokens
    ref_logps  (S, T)  log π_ref (KL), or None when β = 0
    mask       (S, T)  1.0 on completion tokens, 0.0 on padding
    advantages (S,)    one scalar per completion, broadcast to its tokens

Advantages (reference/algorithms.md §8, TRL 1.16 `GRPOTrainer` / `RLOOTrainer`); a NaN reward (a scorer that
abstained or failed) is left out of every group statistic and its completion gets advantage 0 and mask 0,
never a silent zero reward:

    group_advantages      GRPO: (r − mean_group) / (std + 1e-4); scale "group" (group std), "batch" (batch
                          std, PPO-Lite) or "none" (Dr. GRPO: no division)
    rloo_advantages       RLOO: r_i − mean of the other valid samples of its group; optionally batch-normalised
    reinforce_advantages  REINFORCE with a baseline: r − (group mean | batch mean | 0); optionally
                          batch-normalised (REINFORCE++-baseline)
    pairwise_advantages   pairwise RLHF (Think-RM): A_i = (1/G) Σ_j d_ij / sqrt(Σ d_ij² / (2G(G−1)) + ε) from
                          the antisymmetric preference matrix d of each group

KL estimators (§8.3), with log r = log π_ref − log π_θ: k1 = −log r, k2 = ½ (log r)², k3 = (r − 1) − log r.
`kl_in_reward` subtracts β Σ_t k1 (or k2/k3) per sequence from the reward before the advantage (RLOO,
REINFORCE); `PG_LOSSES` entries add β·KL̂ per token to the loss when `kl_placement` is "loss" (GRPO).

The losses return `PGTerms(numerator, denominator)`: the loss is Σ numerator / Σ denominator over every
micro-batch and every data-parallel rank. The denominator never depends on θ (token or sequence counts), so
the trainer sums it over the whole rollout batch first and backpropagates numerator / total on each
micro-batch: gradient accumulation and data parallelism give exactly the single-batch loss.

    grpo   token ratio ρ = exp(logps − old_logps) (or the sequence-level mean log-ratio, GSPO), clipped
           −min(ρA, clip(ρ, 1−ε_low, 1+ε_high)A) per token, plus β·KL̂ in the loss; aggregated by `loss_type`:
           grpo (per-sequence token mean, then mean over sequences), dapo (sum over tokens / tokens in the
           batch, TRL's default), bnpo (token mean per micro-batch, then mean over micro-batches), dr_grpo
           (sum / (sequences × max_completion_length))
    rloo   sequence ratio exp(Σ logps − Σ old_logps), clipped, mean over sequences (TRL `RLOOTrainer`)
    reinforce  −A · Σ_t log π_θ per sequence, mean over sequences (no ratio: one update per rollout)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Literal, NamedTuple

import torch
from torch import Tensor

from prefalign.errors import ConfigError, did_you_mean
from prefalign.groupstats import group_view, nanstd
from prefalign.registry import NON_NEGATIVE, POSITIVE, FunctionSpec, Interval, Table

ADV_EPS = 1e-4  # TRL's std floor in GRPO / RLOO normalisation

KLEstimator = Literal["k1", "k2", "k3"]


# --------------------------------------------------------------------------------------------------
# KL estimators (§8.3)
# --------------------------------------------------------------------------------------------------


def kl_estimate(logps: Tensor, ref_logps: Tensor, estimator: KLEstimator) -> Tensor:
    """Per-token KL(π_θ‖π_ref) estimate on tokens sampled from π_θ, same shape as the inputs.

    log r = log π_ref − log π_θ; k1 = −log r (unbiased, can be negative), k2 = ½ (log r)² (biased, low
    variance), k3 = exp(log r) − 1 − log r (unbiased, ≥ 0; TRL GRPO's)."""
    log_r = ref_logps - logps
    if estimator == "k1":
        return -log_r
    if estimator == "k2":
        return 0.5 * log_r**2
    if estimator == "k3":
        return torch.exp(log_r) - 1 - log_r
    raise ValueError(f"unknown KL estimator {estimator!r}; use k1, k2 or k3")


def sequence_kl(logps: Tensor, ref_logps: Tensor, mask: Tensor, estimator: KLEstimator) -> Tensor:
    """(S,) Σ_t KL̂ over each completion's tokens (the KL-in-reward penalty before β)."""
    return (kl_estimate(logps, ref_logps, estimator) * mask).sum(-1)


# --------------------------------------------------------------------------------------------------
# Advantage estimators (§8.1, §8.2; reward-models.md §5.1)
# --------------------------------------------------------------------------------------------------


def _finish(advantages: Tensor) -> Tensor:
    """Unscorable completions (NaN) carry no signal: advantage 0 (their tokens are also masked)."""
    return torch.nan_to_num(advantages, nan=0.0)


def group_advantages(
    rewards: Tensor, group_size: int, scale: Literal["group", "batch", "none"] = "group", eps: float = ADV_EPS
) -> Tensor:
    """GRPO: Â_i = (r_i − mean_group(r)) / (std + eps); std of the group ("group"), of the batch ("batch"),
    or no division ("none", Dr. GRPO). (S,) -> (S,); NaN rewards are left out of the statistics and get 0."""
    g = group_view(rewards, group_size)
    mean = torch.nanmean(g, dim=1, keepdim=True)
    adv = g - mean
    if scale == "group":
        std = nanstd(g, dim=1, keepdim=True) if group_size > 1 else torch.zeros_like(mean)
        adv = adv / (torch.nan_to_num(std, nan=0.0) + eps)
    elif scale == "batch":
        std = nanstd(rewards) if rewards.numel() > 1 else rewards.new_zeros(())
        adv = adv / (torch.nan_to_num(std, nan=0.0) + eps)
    elif scale != "none":
        raise ValueError(f"scale must be group, batch or none, got {scale!r}")
    return _finish(adv.reshape(-1))


def rloo_advantages(rewards: Tensor, group_size: int, normalize: bool = False, eps: float = ADV_EPS) -> Tensor:
    """RLOO: A_i = r_i − (1/(n−1)) Σ_{j≠i} r_j over the n valid samples of the group; optionally
    (A − mean) / (std + eps) over the batch. A group with one valid sample gives 0."""
    g = group_view(rewards, group_size)
    valid = (~torch.isnan(g)).sum(dim=1, keepdim=True)
    total = torch.nansum(g, dim=1, keepdim=True)
    if group_size < 2:
        return torch.zeros_like(rewards)
    adv = (g - (total - g) / (valid - 1)).reshape(-1)
    if normalize:
        adv = (adv - torch.nanmean(adv)) / (torch.nan_to_num(nanstd(adv), nan=0.0) + eps)
    return _finish(adv)


def reinforce_advantages(
    rewards: Tensor,
    group_size: int,
    baseline: Literal["group_mean", "batch_mean", "none"] = "group_mean",
    normalize: bool = False,
    eps: float = ADV_EPS,
) -> Tensor:
    """REINFORCE with a baseline: A = r − b, b the group mean (REINFORCE++-baseline), the batch mean, or 0;
    optionally (A − mean) / (std + eps) over the batch (REINFORCE++)."""
    g = group_view(rewards, group_size)
    if baseline == "group_mean":
        adv = (g - torch.nanmean(g, dim=1, keepdim=True)).reshape(-1)
    elif baseline == "batch_mean":
        adv = rewards - torch.nanmean(rewards)
    elif baseline == "none":
        adv = rewards.clone()
    else:
        raise ValueError(f"baseline must be group_mean, batch_mean or none, got {baseline!r}")
    if normalize:
        adv = (adv - torch.nanmean(adv)) / (torch.nan_to_num(nanstd(adv), nan=0.0) + eps)
    return _finish(adv)


def pairwise_advantages(prefs: Tensor, eps: float = 1e-6) -> Tensor:
    """Pairwise RLHF (Think-RM `compute_grpo_difference_advantage`): prefs (P, G, G) with d_ij > 0 when i beats
    j, antisymmetric, diagonal 0; NaN where a comparison failed (left out of the sums). Returns (P*G,):
    A_i = ((1/G) Σ_j d_ij) / sqrt(Σ_{i,j} d_ij² / (2G(G−1)) + eps)."""
    if prefs.dim() != 3 or prefs.shape[1] != prefs.shape[2]:
        raise ValueError(f"prefs must be (P, G, G), got {tuple(prefs.shape)}")
    G = prefs.shape[1]
    if G < 2:
        return torch.zeros(prefs.shape[0] * G, dtype=prefs.dtype)
    d = torch.nan_to_num(prefs, nan=0.0)
    mean = d.sum(-1) / G  # (P, G)
    scale = torch.sqrt((d**2).sum((-1, -2)) / (2 * G * (G - 1)) + eps)  # (P,)
    return (mean / scale[:, None]).reshape(-1)


@dataclasses.dataclass(frozen=True)
class AdvantageSpec:
    """One entry of `ADVANTAGES`: the estimator and what it reads.

    `input` "rewards": fn(rewards (S,), group_size, **options) -> (S,); "preferences": fn(prefs (P, G, G)) -> (S,),
    for a pairwise judge's comparisons. `options` name the fields of the run's `algorithm` section the estimator
    takes as keyword arguments (their values are passed as configured)."""

    name: str
    fn: Callable[..., Tensor]
    summary: str
    input: Literal["rewards", "preferences"] = "rewards"
    options: tuple[str, ...] = ()
    compares_group: bool = True  # reads the other completions of the prompt (needs group_size >= 2)


ADVANTAGES: Table[AdvantageSpec] = Table(
    "advantage estimator",
    {
        "group": AdvantageSpec(
            "group", group_advantages, "GRPO group-normalised (scale: group | batch | none)", options=("scale",)
        ),
        "rloo": AdvantageSpec(
            "rloo", rloo_advantages, "leave-one-out baseline (optionally batch-normalised)", options=("normalize",)
        ),
        "reinforce": AdvantageSpec(
            "reinforce",
            reinforce_advantages,
            "REINFORCE with a baseline (group_mean | batch_mean | none)",
            options=("baseline", "normalize"),
            compares_group=False,
        ),
        "pairwise": AdvantageSpec(
            "pairwise",
            pairwise_advantages,
            "pairwise-to-pointwise group advantage from a pairwise judge (Think-RM)",
            input="preferences",
        ),
    },
    columns=("summary", "input", "options"),
)
"""`align ls advantages`."""


def estimate_advantages(name: str, rewards: Tensor, group_size: int, options: Any) -> Tensor:
    """(S,) advantages of (S,) rewards with the reward-input estimator `name`, its options read from `options`
    (an object with the entry's option fields, e.g. the run's `algorithm` section)."""
    spec = ADVANTAGES[name]
    if spec.input != "rewards":
        raise ValueError(f"advantage estimator '{name}' reads {spec.input}, not rewards")
    return spec.fn(rewards, group_size, **{k: getattr(options, k) for k in spec.options})


# --------------------------------------------------------------------------------------------------
# Losses
# --------------------------------------------------------------------------------------------------


class PGBatch(NamedTuple):
    """S completions padded to T tokens (module docstring)."""

    logps: Tensor  # (S, T) with gradients
    old_logps: Tensor  # (S, T)
    mask: Tensor  # (S, T) float
    advantages: Tensor  # (S,)
    ref_logps: Tensor | None = None  # (S, T)


class PGTerms(NamedTuple):
    """The loss is Σ numerator / Σ denominator over micro-batches and ranks (module docstring)."""

    numerator: Tensor  # () differentiable
    denominator: float
    stats: dict[str, float]  # detached diagnostics: clip fractions, kl, ratio


def _clip_stats(ratio: Tensor, adv: Tensor, mask: Tensor, lo: float, hi: float) -> dict[str, float]:
    low = ((ratio < 1 - lo) & (adv < 0)).float()
    high = ((ratio > 1 + hi) & (adv > 0)).float()
    n = mask.sum().clamp(min=1.0)
    return {
        "clip_ratio/low": ((low * mask).sum() / n).item(),
        "clip_ratio/high": ((high * mask).sum() / n).item(),
    }


def _per_sequence_mean(per_token: Tensor, mask: Tensor, _: int) -> tuple[Tensor, float]:
    """grpo: each sequence's token mean, summed; over the number of sequences."""
    return (per_token.sum(-1) / mask.sum(-1).clamp(min=1.0)).sum(), float(mask.shape[0])


def _token_sum(per_token: Tensor, mask: Tensor, _: int) -> tuple[Tensor, float]:
    """dapo: every token's term, summed; over the number of tokens."""
    return per_token.sum(), float(mask.sum().item())


def _micro_batch_token_mean(per_token: Tensor, mask: Tensor, _: int) -> tuple[Tensor, float]:
    """bnpo: the token mean of this micro-batch, averaged over micro-batches."""
    return per_token.sum() / mask.sum().clamp(min=1.0), 1.0


def _constant_length(per_token: Tensor, mask: Tensor, max_completion_length: int) -> tuple[Tensor, float]:
    """dr_grpo: every token's term, summed; over sequences x a constant length (the completion budget)."""
    return per_token.sum(), float(mask.shape[0] * (max_completion_length or mask.shape[1]))


# GRPO's loss types (TRL's `loss_type`): how the masked per-token terms become the numerator and the
# weight-independent denominator of the exact-batching sum.
GRPO_REDUCTIONS: dict[str, Callable[[Tensor, Tensor, int], tuple[Tensor, float]]] = {
    "grpo": _per_sequence_mean,
    "dapo": _token_sum,
    "bnpo": _micro_batch_token_mean,
    "dr_grpo": _constant_length,
}


def grpo_loss(
    b: PGBatch,
    *,
    epsilon: float = 0.2,
    epsilon_high: float = -1.0,
    loss_type: Literal["grpo", "dapo", "bnpo", "dr_grpo"] = "dapo",
    importance_sampling_level: Literal["token", "sequence"] = "token",
    beta: float = 0.0,
    kl_estimator: KLEstimator = "k3",
    max_completion_length: int = 0,
) -> PGTerms:
    """GRPO's clipped surrogate (TRL 1.16 `GRPOTrainer._compute_loss`, loss types grpo / dapo / bnpo / dr_grpo).

    ρ = exp(log π_θ − log π_old) per token, or exp of the sequence's mean log-ratio (`importance_sampling_level:
    sequence`, GSPO); ℓ = −min(ρA, clip(ρ, 1−ε, 1+ε_high)A) + β·KL̂ (KL̂ from `kl_estimator`, k3 as TRL;
    β = 0 needs no reference). `epsilon_high` < 0 means ε (TRL's default; DAPO uses 0.28).
    `max_completion_length`: dr_grpo's constant (the rollout's max_new_tokens; 0 = T of the batch).
    """
    hi = epsilon if epsilon_high < 0 else epsilon_high
    mask = b.mask
    adv = b.advantages[:, None]
    log_ratio = b.logps - b.old_logps
    if importance_sampling_level == "sequence":
        log_ratio = ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0))[:, None]
    ratio = torch.exp(log_ratio)
    per_token = -torch.min(ratio * adv, torch.clamp(ratio, 1 - epsilon, 1 + hi) * adv)
    stats = _clip_stats(ratio.expand_as(mask).detach(), adv.expand_as(mask), mask, epsilon, hi)
    if beta != 0.0:
        if b.ref_logps is None:
            raise ValueError("grpo_loss: beta > 0 needs ref_logps")
        kl = kl_estimate(b.logps, b.ref_logps, kl_estimator)
        per_token = per_token + beta * kl
        stats["kl"] = ((kl.detach() * mask).sum() / mask.sum().clamp(min=1.0)).item()
    per_token = per_token.expand_as(mask) * mask
    if loss_type not in GRPO_REDUCTIONS:
        raise ValueError(f"unknown loss_type {loss_type!r}; known: {', '.join(GRPO_REDUCTIONS)}")
    num, den = GRPO_REDUCTIONS[loss_type](per_token, mask, max_completion_length)
    return PGTerms(num, den, stats)


def rloo_loss(b: PGBatch, *, epsilon: float = 0.2, epsilon_high: float = -1.0) -> PGTerms:
    """RLOO's clipped surrogate on the sequence ratio exp(Σ_t log π_θ − Σ_t log π_old), mean over sequences
    (TRL 1.16 `RLOOTrainer._compute_loss`). The KL enters the reward (`kl_in_reward`), not this loss."""
    hi = epsilon if epsilon_high < 0 else epsilon_high
    seq = (b.logps * b.mask).sum(-1)
    old = (b.old_logps * b.mask).sum(-1)
    ratio = torch.exp(seq - old)
    adv = b.advantages
    per_seq = -torch.min(ratio * adv, torch.clamp(ratio, 1 - epsilon, 1 + hi) * adv)
    valid = (b.mask.sum(-1) > 0).float()
    stats = {
        "clip_ratio/low": (((ratio < 1 - epsilon) & (adv < 0)).float() * valid).sum().item()
        / max(valid.sum().item(), 1),
        "clip_ratio/high": (((ratio > 1 + hi) & (adv > 0)).float() * valid).sum().item() / max(valid.sum().item(), 1),
    }
    return PGTerms((per_seq * valid).sum(), float(valid.sum().item()), stats)


def reinforce_loss(b: PGBatch) -> PGTerms:
    """REINFORCE: −A · Σ_t log π_θ(y_t) per sequence, mean over sequences (on-policy, one update per rollout)."""
    seq = (b.logps * b.mask).sum(-1)
    valid = (b.mask.sum(-1) > 0).float()
    return PGTerms((-(b.advantages * seq) * valid).sum(), float(valid.sum().item()), {})


@dataclasses.dataclass(frozen=True)
class PGLossSpec(FunctionSpec):
    """One entry of `PG_LOSSES`: the loss function, the advantage estimator it is used with by default, and
    where its KL penalty goes by default."""

    advantage: str
    kl_placement: Literal["loss", "reward"]
    kind: ClassVar[str] = "policy-gradient loss"

    def run_params(self, supplied: Mapping[str, Any]) -> dict[str, Any]:
        """The run-supplied values (`RUN_PARAMS`) this loss takes as parameters (those in its signature)."""
        return {k: v for k, v in supplied.items() if k in self.defaults}


PG_LOSSES: Table[PGLossSpec] = Table(
    "policy-gradient loss",
    {
        "grpo": PGLossSpec(
            "grpo",
            grpo_loss,
            "GRPO clipped surrogate, token (or sequence, GSPO) ratio, KL k3 in the loss; loss_type "
            "grpo | dapo | bnpo | dr_grpo (Shao+ 2024; TRL GRPOTrainer)",
            advantage="group",
            kl_placement="loss",
            bounds={"epsilon": POSITIVE, "epsilon_high": Interval(-1.0), "beta": NON_NEGATIVE},
        ),
        "rloo": PGLossSpec(
            "rloo",
            rloo_loss,
            "RLOO: leave-one-out advantage, clipped sequence ratio, KL k1 in the reward (Ahmadian+ 2024)",
            advantage="rloo",
            kl_placement="reward",
            bounds={"epsilon": POSITIVE, "epsilon_high": Interval(-1.0)},
        ),
        "reinforce": PGLossSpec(
            "reinforce",
            reinforce_loss,
            "REINFORCE with a baseline: -A * sum log pi, KL in the reward (Williams 1992; REINFORCE++)",
            advantage="reinforce",
            kl_placement="reward",
        ),
    },
    columns=("summary", "advantage", "kl_placement", "params"),
)


RUN_PARAMS: dict[str, str] = {
    "beta": "kl.beta (the KL coefficient, when the KL goes into the loss)",
    "kl_estimator": "kl.estimator",
    "max_completion_length": "rollout.max_new_tokens",
}
"""Loss parameters the online run sets from its other sections; a loss takes those in its signature, and a config
may not set them in `algorithm.params`."""


def check_pg_config(name: str, params: Mapping[str, Any], where: str = "algorithm") -> list[str]:
    """Every problem with policy-gradient loss `name` and `params` (empty when fine)."""
    if name not in PG_LOSSES:
        return [
            f"{where}.loss: unknown policy-gradient loss '{name}'{did_you_mean(name, PG_LOSSES.names())}; "
            f"choose one of: {', '.join(PG_LOSSES.names())}"
        ]
    own = {k: v for k, v in params.items() if k not in RUN_PARAMS}
    problems = PG_LOSSES[name].problems(own, f"{where}.params")
    for reserved in sorted(set(params) & set(RUN_PARAMS)):
        problems.append(f"{where}.params.{reserved}: set by the run from {RUN_PARAMS[reserved]}")
    return problems


def compute_pg_loss(name: str, params: Mapping[str, Any], batch: PGBatch) -> PGTerms:
    """Look `name` up in `PG_LOSSES`, validate `params`, compute the terms on `batch`."""
    spec = PG_LOSSES[name]
    problems = spec.problems(params, "algorithm.params")
    if problems:
        raise ConfigError(problems, source=f"policy-gradient loss '{name}'")
    return spec.fn(batch, **(spec.defaults | dict(params)))


__all__ = [
    "ADVANTAGES",
    "PG_LOSSES",
    "RUN_PARAMS",
    "AdvantageSpec",
    "PGBatch",
    "PGLossSpec",
    "PGTerms",
    "check_pg_config",
    "compute_pg_loss",
    "estimate_advantages",
    "group_advantages",
    "grpo_loss",
    "kl_estimate",
    "pairwise_advantages",
    "reinforce_advantages",
    "reinforce_loss",
    "rloo_advantages",
    "rloo_loss",
    "sequence_kl",
]
