"""Held-out pair accuracy, reported the same way by every recipe that ranks pairs: reward models
(`reward_models.rm_train`, `reward_models.polar.train`: the RM's rewards) and policies (`align.train`: the
loss's implicit rewards).

A pair is right when its chosen reward is strictly above its rejected one (ties count wrong, as RewardBench's
classifier rule). Accuracy is reported overall and per group of `GROUP_KEYS`: the pair's source, and the suite's
task family and corruption kind where the pairs carry them.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import torch

GROUP_KEYS = ("source", "family", "corruption")


def accuracy_report(pairs: list[Any], rc: torch.Tensor, rr: torch.Tensor) -> dict[str, Any]:
    """Accuracy (ties count wrong) and mean margin r_c - r_r of (B,) rewards, overall and per source / task family /
    corruption kind. A lone source is left out when the pairs carry families (the suite: every pair one source)."""
    correct = (rc > rr).float()
    out: dict[str, Any] = {
        "pairs": len(pairs),
        "accuracy": correct.mean().item() if len(pairs) else float("nan"),
        "margin": (rc - rr).mean().item() if len(pairs) else float("nan"),
    }
    for key in GROUP_KEYS:
        groups: dict[str, list[float]] = defaultdict(list)
        for p, c in zip(pairs, correct.tolist(), strict=True):
            value = p.source if key == "source" else p.attributes.get(key)
            if value:
                groups[str(value)].append(c)
        if len(groups) > 0 and not (
            key == "source"
            and len(groups) == 1
            and len(pairs) > 0
            and all(p.source == pairs[0].source for p in pairs)
            and "family" in pairs[0].attributes
        ):
            out[f"by_{key}"] = {k: {"accuracy": sum(v) / len(v), "pairs": len(v)} for k, v in sorted(groups.items())}
    return out


def group_lines(report: dict[str, Any], keys: tuple[str, ...] = GROUP_KEYS) -> list[str]:
    """One summary line per group of an `accuracy_report`, e.g. "  family arithmetic: 0.912 (34 pairs)"."""
    return [
        f"  {key} {name}: {v['accuracy']:.3f} ({v['pairs']} pairs)"
        for key in keys
        for name, v in (report.get(f"by_{key}") or {}).items()
    ]


__all__ = ["GROUP_KEYS", "accuracy_report", "group_lines"]
