"""The advantage phase: every rank's `Rewards` -> this rank's `Advantages`, one scalar per completion.

Without a `composition:` section the reward is Σ_k w_k r_k (NaN when a weighted component is NaN: the completion is
masked), minus β·Σ_t KL̂ when the KL goes into the reward, through the run's estimator (`ADVANTAGES`, looked up by
`algorithm.advantage`). With one, the composer turns the components into advantages (`align.composition`). A
pairwise judge's preference matrices go to an estimator that reads preferences. The estimator sees every rank's
rows, so group and batch statistics are those of the whole step; `local` picks this rank's rows.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from reward_models.composition import weighted_sum

from ..composition import Composer, StepInputs
from ..losses.policy_gradient import ADVANTAGES, estimate_advantages, sequence_kl
from .config import OnlineConfig
from .logps import pad_rows
from .reward import Rewards
from .rollout import Rollout


@dataclass
class Advantages:
    """This rank's completions: the advantage of each (0 where masked) and which enter the update; the step's
    reward statistics (every rank's)."""

    values: torch.Tensor  # (S_local,)
    valid: torch.Tensor  # (S_local,) bool: a masked completion contributes no tokens
    stats: dict[str, float]


def estimator(cfg: OnlineConfig) -> Callable[[torch.Tensor], torch.Tensor]:
    """The run's estimator of (S,) rewards -> (S,) advantages (groups of `rollout.rows_per_prompt`)."""
    kind, G = cfg.algorithm.advantage_kind(), cfg.rollout.rows_per_prompt
    return lambda r: estimate_advantages(kind, r, G, cfg.algorithm)


def kl_penalty(
    cfg: OnlineConfig, rollout: Rollout, old: list[list[float]] | None, ref: list[list[float]] | None
) -> tuple[torch.Tensor | None, dict[str, float]]:
    """(S_local,) β·Σ_t KL̂(π_old ‖ π_ref) per completion when the KL goes into the reward (else None), and the
    per-token KL and mean penalty of this rank's completions."""
    if not (cfg.kl.beta > 0 and cfg.kl_placement() == "reward") or ref is None:
        return None, {}
    T = max((len(ids) for ids in rollout.token_ids), default=0)
    mask = pad_rows([[1.0] * len(ids) for ids in rollout.token_ids], T)
    kl = sequence_kl(pad_rows(old or rollout.logprobs, T), pad_rows(ref, T), mask, cfg.kl_estimator())
    penalty = cfg.kl.beta * kl
    per_token = float((kl.sum() / mask.sum().clamp(min=1.0)).item())
    return penalty, {"kl": per_token, "kl_penalty": float(penalty.mean().item())}


def _zero_std_share(raw: torch.Tensor, G: int) -> float:
    """The share of prompts whose finite rewards are all equal (a group that gives GRPO no signal)."""
    groups = raw.view(-1, G)
    same = sum(1 for g in groups if len({x for x in g.tolist() if not math.isnan(x)}) <= 1)
    return same / max(len(groups), 1)


def _reference_stats(groups: torch.Tensor) -> dict[str, float]:
    """(P, G + 1) rewards, each group's reference last: its mean reward and the share of groups where the reward
    ranks it above every finite sample (where it pulls the policy towards itself)."""
    ref, samples = groups[:, -1], torch.nan_to_num(groups[:, :-1], nan=-math.inf)
    finite = ref[~torch.isnan(ref)]
    best = (~torch.isnan(ref)) & (ref > samples.max(dim=1).values)
    return {
        "reward/reference": float(finite.mean().item()) if len(finite) else math.nan,
        "reference_best": float(best.float().mean().item()) if len(groups) else math.nan,
    }


def _from_rewards(
    cfg: OnlineConfig,
    r: Rewards,
    penalty: torch.Tensor | None,
    composer: Composer | None,
    theta: torch.Tensor | None,
    local: slice,
) -> Advantages:
    assert r.components is not None
    comps, G = r.components, cfg.rollout.rows_per_prompt
    raw = weighted_sum(comps, r.weights)  # (S,) the reward before any KL penalty
    stats: dict[str, float] = {}
    if composer is None:
        reward = raw if penalty is None else raw - penalty
        adv = estimator(cfg)(reward)
        values, valid = adv[local], ~torch.isnan(reward[local])
        stats["masked_completions"] = float(torch.isnan(reward).sum().item())
    else:
        par = None if r.par_ref is None else r.par_ref.repeat_interleave(G, 0)  # one copy per completion
        kl = penalty if penalty is not None else torch.zeros(comps.shape[0])
        adv, cstats = composer.advantages(StepInputs(comps, G, estimator(cfg), kl, theta, par))
        stats.update(cstats)
        valid = ~torch.isnan(adv[local])
        values = torch.nan_to_num(adv[local], nan=0.0)
        stats["masked_completions"] = float(torch.isnan(adv).sum().item())
    sampled = torch.ones(raw.shape[0], dtype=torch.bool)
    if cfg.rollout.rows_per_prompt > cfg.rollout.group_size:  # the last row of each group is the reference
        sampled.view(-1, G)[:, -1] = False
        stats |= _reference_stats(raw.view(-1, G))
    finite = raw[sampled & ~torch.isnan(raw)]  # the policy's samples: the reward, KL penalty excluded
    stats["reward"] = float(finite.mean().item()) if len(finite) else math.nan
    stats["reward_std"] = float(finite.std().item()) if len(finite) > 1 else 0.0
    stats["zero_std_groups"] = float(_zero_std_share(raw, G))
    for k, name in enumerate(r.names):
        col = comps[:, k]
        ok = col[~torch.isnan(col)]
        stats[f"reward/{name}"] = float(ok.mean().item()) if len(ok) else math.nan
        stats[f"reward_nan/{name}"] = float(torch.isnan(col).sum().item())
    return Advantages(values, valid, stats)


def _from_preferences(
    cfg: OnlineConfig,
    r: Rewards,
    penalty: torch.Tensor | None,
    composer: Composer | None,
    theta: torch.Tensor | None,
    local: slice,
) -> Advantages:
    assert r.prefs is not None
    G = cfg.rollout.rows_per_prompt
    adv = ADVANTAGES[cfg.algorithm.advantage_kind()].fn(r.prefs)  # (S,)
    wins = ((torch.nan_to_num(r.prefs, nan=0.0) + 1) / 2).sum(-1) / max(G - 1, 1)  # mean win prob vs the group
    stats = {"reward": float(wins.mean().item()), "judge_failed": float(torch.isnan(r.prefs).sum().item()) / 2}
    values = adv[local]
    return Advantages(values, torch.ones(len(values), dtype=torch.bool), stats)


BY_INPUT: dict[str, Callable[..., Advantages]] = {"rewards": _from_rewards, "preferences": _from_preferences}
"""How an estimator's input (`AdvantageSpec.input`) is read from the rewards."""


def compute_advantages(
    cfg: OnlineConfig,
    rewards: Rewards,
    penalty: torch.Tensor | None,
    composer: Composer | None,
    theta: torch.Tensor | None,
    local: slice,
) -> Advantages:
    """This rank's advantages from every rank's rewards, KL penalties and DPA directions (per completion)."""
    spec = ADVANTAGES[cfg.algorithm.advantage_kind()]
    return BY_INPUT[spec.input](cfg, rewards, penalty, composer, theta, local)


__all__ = ["Advantages", "compute_advantages", "estimator", "kl_penalty"]
