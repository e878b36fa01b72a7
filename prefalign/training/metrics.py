"""Training metrics: averaged between logging steps (as TRL does), appended to metrics.jsonl, plotted
as one PNG per metric."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path


class MetricsMixin:
    """Averages per-step metrics between logging steps (as TRL does) and appends every log to metrics.jsonl."""

    metrics_path: Path | None = None

    def _init_metrics(self, path: Path | None) -> None:
        self._stash: dict[str, list[float]] = defaultdict(list)
        self.metrics_path = path

    def stash(self, values: dict[str, float]) -> None:
        for k, v in values.items():
            if v is not None and not (isinstance(v, float) and math.isnan(v)):
                self._stash[k].append(float(v))

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:  # transformers hook
        if self._stash and "loss" in logs:
            logs.update({k: sum(v) / len(v) for k, v in self._stash.items()})
            self._stash.clear()
        super().log(logs, start_time)  # type: ignore[misc]
        if self.metrics_path is not None and self.is_world_process_zero():  # type: ignore[attr-defined]
            row = {"step": self.state.global_step, **logs}  # type: ignore[attr-defined]
            with open(self.metrics_path, "a", encoding="utf-8") as f:
                f.write(json.dumps(row) + "\n")


def plot_metrics(metrics_path: Path, out_dir: Path, keys: Sequence[str]) -> list[Path]:
    """One PNG per metric found in metrics.jsonl (train and eval_ curves on the same axes)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not metrics_path.exists():
        return []
    rows = [json.loads(line) for line in metrics_path.read_text(encoding="utf-8").splitlines() if line.strip()]
    out = []
    out_dir.mkdir(parents=True, exist_ok=True)
    for key in keys:
        fig, ax = plt.subplots(figsize=(5, 3.2))
        drawn = False
        for name in (key, f"eval_{key}"):
            pts = [(r["step"], r[name]) for r in rows if name in r]
            if pts:
                ax.plot(*zip(*pts, strict=True), marker="." if len(pts) < 30 else None, label=name)
                drawn = True
        if drawn:
            ax.set_xlabel("step")
            ax.set_title(key)
            ax.legend()
            fig.tight_layout()
            path = out_dir / f"{key.replace('/', '_')}.png"
            fig.savefig(path, dpi=90)
            out.append(path)
        plt.close(fig)
    return out
