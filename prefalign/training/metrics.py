"""Training metrics: averaged between logging steps (as TRL does) and appended to metrics.jsonl; training-health
alerts (a non-finite metric, or a recipe's own check) printed once and appended to alerts.jsonl as they happen,
so the run report (`report.py`) shows them while the run goes on."""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from pathlib import Path

ALERTS_FILE = "alerts.jsonl"
"""Beside metrics.jsonl: one {"step", "key", "message"} object per alert raised."""


def read_alerts(path: Path) -> list[dict]:
    """The alerts in an alerts.jsonl (a line that is not a JSON object, e.g. cut off by a crash, is skipped)."""
    out = []
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(row, dict) and "message" in row:
                out.append(row)
    return out


def append_alert(metrics_path: Path, step: int, key: str, message: str) -> None:
    """Append one alert to the alerts.jsonl beside `metrics_path` (what `MetricsMixin.alert` writes)."""
    with open(metrics_path.with_name(ALERTS_FILE), "a", encoding="utf-8") as f:
        f.write(json.dumps({"step": step, "key": key, "message": message}) + "\n")


HACKING_KEY = "reward_hacking"
HACKING_RUN = 2
"""Evaluations in a row in which the learned reward rose while held-out gold fell, before the alert fires."""


def reward_hacking(
    evals: list[tuple[int, float, float]], run: int = HACKING_RUN, signal: str = "held-out gold"
) -> str | None:
    """The alert when the learned reward rose while a check signal fell at `run` consecutive evaluations, else None.

    `evals`: (step, learned reward, check) at each evaluation, in order: the same held-out answers scored by the
    reward the run optimizes and by a signal that does not share its blind spots (`signal` names it): the gold graders
    where there are any, else a judge that checks the answers (`eval.check` of the quickstart). Each of the last
    `run` evaluations must raise the reward and lower the check against the one before it: the optimizer is finding
    what the learned reward likes and the check does not. E.g. rewards 0.1, 0.2, 0.3 with checks 0.5, 0.4, 0.3 fire
    (two rises of reward, two falls of the check); rewards 0.1, 0.2, 0.2 do not (the second did not rise)."""
    ok = [(s, r, g) for s, r, g in evals if math.isfinite(r) and math.isfinite(g)]
    if len(ok) < run + 1:
        return None
    tail = ok[-(run + 1) :]
    if not all(b[1] > a[1] and b[2] < a[2] for a, b in zip(tail, tail[1:], strict=False)):
        return None
    (s0, r0, g0), (s1, r1, g1) = tail[0], tail[-1]
    times = f"at {run} evaluations in a row" if run > 1 else "between the two evaluations"
    return (
        f"step {s1}: the learned reward rose while {signal} fell {times} (steps {s0} -> {s1}: reward {r0:.4f} -> "
        f"{r1:.4f}, {signal} {g0:.4f} -> {g1:.4f}); the policy is exploiting the reward model (reward hacking): stop "
        "earlier, raise the KL coefficient, or improve the reward model"
    )


class MetricsMixin:
    """Averages per-step metrics between logging steps (as TRL does), appends every log to metrics.jsonl, and
    raises an alert the first time a metric is NaN or infinite."""

    metrics_path: Path | None = None

    def _init_metrics(self, path: Path | None) -> None:
        self._stash: dict[str, list[float]] = defaultdict(list)
        self._nonfinite: Counter[str] = Counter()  # batches since the last log whose metric was NaN / inf
        self.metrics_path = path
        self.alerts: list[str] = []
        self._alerted: set[str] = set()
        if path is not None:  # a resumed run keeps (and does not repeat) the alerts it raised before
            for row in read_alerts(path.with_name(ALERTS_FILE)):
                self.alerts.append(str(row["message"]))
                self._alerted.add(str(row.get("key", row["message"])))

    def alert(self, key: str, message: str) -> bool:
        """Raise the alert `key` once per run: print it, keep it in `self.alerts` (the report) and append it to
        alerts.jsonl beside metrics.jsonl. Returns False when `key` was already raised."""
        if key in self._alerted:
            return False
        self._alerted.add(key)
        self.alerts.append(message)
        if self.is_world_process_zero():  # type: ignore[attr-defined]
            print(f"ALERT: {message}", flush=True)
            if self.metrics_path is not None:
                append_alert(self.metrics_path, self.state.global_step, key, message)  # type: ignore[attr-defined]
        return True

    def stash(self, values: dict[str, float]) -> None:
        for k, v in values.items():
            if v is None:
                continue
            if math.isfinite(float(v)):
                self._stash[k].append(float(v))
            else:  # left out of the mean, so one bad batch does not hide the others; counted for the alert
                self._nonfinite[k] += 1

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:  # transformers hook
        if "loss" in logs:
            if self._stash:
                logs.update({k: sum(v) / len(v) for k, v in self._stash.items()})
                self._stash.clear()
            for k, n in self._nonfinite.items():
                self.alert(
                    f"nonfinite:{k}",
                    f"step {self.state.global_step}: {n} batch(es) since the last log gave a NaN or infinite "  # type: ignore[attr-defined]
                    f"{k} (left out of the logged mean); look for a too high train.lr or bad data in those batches",
                )
            self._nonfinite.clear()
        for k, v in logs.items():
            if isinstance(v, float) and not math.isfinite(v):
                self.alert(
                    f"nonfinite:{k}",
                    f"step {self.state.global_step}: {k} is {v}; look for a too high train.lr, "  # type: ignore[attr-defined]
                    "train.max_grad_norm: 0 (no clipping) or bad data",
                )
        super().log(logs, start_time)  # type: ignore[misc]
        if self.metrics_path is not None and self.is_world_process_zero():  # type: ignore[attr-defined]
            row = {"step": self.state.global_step, **logs}  # type: ignore[attr-defined]
            with open(self.metrics_path, "a", encoding="utf-8") as f:
                f.write(json.dumps(row) + "\n")
