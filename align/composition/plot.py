"""`composition.png` in an online run's directory: the component rewards with their thresholds, and the weights,
multipliers and meta factor over steps, read from metrics.jsonl."""

from __future__ import annotations

import json
import math
from pathlib import Path


def plot_composition(metrics_path: Path, out: Path, names: list[str]) -> Path | None:
    """components and weights (or multipliers) over steps, one PNG."""
    rows = [json.loads(line) for line in metrics_path.read_text(encoding="utf-8").splitlines() if line.strip()]
    rows = [r for r in rows if "loss" in r]
    if not rows:
        return None
    import matplotlib  # lazy: a second of import time, needed only once at the end of a run

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


__all__ = ["plot_composition"]
