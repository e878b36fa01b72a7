"""Nan-safe statistics over groups of completions, written once for the advantage estimators and the reward
aggregators.

Rows are completions, S = P·G of them, grouped by prompt in consecutive blocks of G (the online loop's layout). A
NaN is a reward that was not given (a scorer abstained or failed): it is left out of every statistic, never read
as a zero. A statistic over too few values is NaN; the caller decides what that means (an advantage of 0, say).
"""

from __future__ import annotations

import torch
from torch import Tensor


def group_view(x: Tensor, group_size: int) -> Tensor:
    """(S, ...) -> (S / G, G, ...) consecutive blocks of G rows; S must be a multiple of G."""
    if x.dim() < 1 or group_size < 1 or x.shape[0] % group_size:
        raise ValueError(
            f"rows must be (S, ...) with S a multiple of the group size {group_size}, got shape {tuple(x.shape)}"
        )
    return x.reshape(x.shape[0] // group_size, group_size, *x.shape[1:])


def nanstd(x: Tensor, dim: int | None = None, keepdim: bool = False, correction: int = 1) -> Tensor:
    """Standard deviation ignoring NaN, dividing by (n − correction): 1 is the sample std (TRL's `nanstd`), 0 the
    population std. NaN where n − correction ≤ 0 (fewer values than the estimate needs)."""
    valid = ~torch.isnan(x)
    if dim is None:
        n = valid.sum()
        mean = torch.nanmean(x)
    else:
        n = valid.sum(dim, keepdim=keepdim)
        mean = torch.nanmean(x, dim=dim, keepdim=True)
    sq = torch.where(valid, (x - mean) ** 2, torch.zeros_like(x))
    total = sq.sum() if dim is None else sq.sum(dim, keepdim=keepdim)
    den = n - correction
    return torch.where(den > 0, torch.sqrt(total / den.clamp(min=1)), torch.full_like(total, float("nan")))


def finite_mean(x: Tensor) -> float:
    """Mean of the non-NaN entries as a float; NaN when there are none."""
    ok = x[~torch.isnan(x)]
    return float(ok.mean()) if ok.numel() else float("nan")


__all__ = ["finite_mean", "group_view", "nanstd"]
