"""Implicit process rewards (Free Process Rewards without Process Labels, arXiv 2412.01981), as pure functions.

A policy trained with an outcome objective on r(y) = beta * log pi(y) / pi_ref(y) gives, for free, a value per
prefix: q_t = beta * sum_{i <= t} (log pi(y_i | .) - log pi_ref(y_i | .)), and the process reward of step k is
r_k = q_{end_k} - q_{end_(k-1)} (r_1 = q_{end_1}). Without a reference ("w/o ref") the log-ratio is log pi alone.
A response's score aggregates its step rewards: `min` (the reference's default: a solution is as good as its
worst step) or `sum` (= the outcome reward q_T when the steps cover the response).

- `split_steps(text)`: steps marked "Step 1:", "Step 2:", ... (each step keeps its marker), else paragraphs
  separated by blank lines, else the whole text as one step.
- `step_rewards(policy_logps, step_ends, beta, ref_logps=None)`: per-token log-probs of the response tokens and
  the index of each step's last token -> (q per step, r per step).
- `aggregate(rewards, how)`: min or sum.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Literal

_STEP = re.compile(r"(?=Step [0-9]+:)")


def split_steps(text: str) -> list[str]:
    """The steps of a response (see the module docstring); empty pieces are dropped."""
    if _STEP.search(text):
        parts = [p for p in _STEP.split(text) if p.strip()]
        if parts and not parts[0].lstrip().startswith("Step "):  # text before "Step 1:" joins the first step
            head = parts.pop(0)
            parts[0] = head + parts[0] if parts else head
        return parts
    paragraphs = [p for p in re.split(r"\n\s*\n", text) if p.strip()]
    return paragraphs or [text]


def step_rewards(
    policy_logps: Sequence[float], step_ends: Sequence[int], beta: float, ref_logps: Sequence[float] | None = None
) -> tuple[list[float], list[float]]:
    """(q_k, r_k) for each step k, from per-token log-probs and each step's last token index (increasing)."""
    if ref_logps is not None and len(ref_logps) != len(policy_logps):
        raise ValueError(f"{len(policy_logps)} policy log-probs but {len(ref_logps)} reference log-probs")
    if not step_ends:
        raise ValueError("step_ends is empty: a response has at least one step")
    if any(b <= a for a, b in zip(step_ends, step_ends[1:], strict=False)) or not 0 <= step_ends[0]:
        raise ValueError(f"step_ends must increase from 0: {list(step_ends)}")
    if step_ends[-1] >= len(policy_logps):
        raise ValueError(f"step end {step_ends[-1]} is past the {len(policy_logps)} response tokens")
    ratio = [p - (ref_logps[i] if ref_logps is not None else 0.0) for i, p in enumerate(policy_logps)]
    q, r, prev_end, prev_q = [], [], -1, 0.0
    acc = 0.0
    for end in step_ends:
        acc += math.fsum(ratio[prev_end + 1 : end + 1])
        qk = beta * acc
        q.append(qk)
        r.append(qk - prev_q)
        prev_end, prev_q = end, qk
    return q, r


def aggregate(rewards: Sequence[float], how: Literal["min", "sum"] = "min") -> float:
    """A response's score from its step rewards: the worst step (min) or their sum."""
    if not rewards:
        return math.nan
    if how == "min":
        return min(rewards)
    if how == "sum":
        return math.fsum(rewards)
    raise ValueError(f"aggregation must be 'min' or 'sum', got {how!r}")
