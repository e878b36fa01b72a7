"""NM-PPO: Nelder–Mead over a constrained run's thresholds, driving the online loop.

Each evaluation of f(θ) continues the same policy for up to `search.steps_per_eval` steps with the thresholds θ and
returns early once every constraint is within `search.tolerance` of its threshold; f(θ) = −(held-out gold overall on
`search.eval_limit` prompts). Evaluations are cached by threshold, keyed by component name (in the checkpoint, so a
resumed search replays them without training and continues where it stopped). The search math is
`reward_models.composition.search`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from reward_models.composition import NelderMeadSettings, initial_simplex, nelder_mead, within

from ..composition import Composer
from .context import Online
from .evaluation import log_row
from .parallel import gather


def threshold_search(o: Online, c: Composer, step: Callable[[Online], dict[str, Any]]) -> dict[str, Any]:
    """Run the search, one `step(o)` per policy step; returns the best thresholds, f there, and the history."""
    sec = c.sec.search
    multipliers = c.rule.multipliers()
    cache = c.cache()
    max_steps = o.cfg.train.max_steps

    def f(theta: dict[str, float]) -> float:
        hit = cache.get(theta)
        if hit is not None:
            return hit
        if o.step >= max_steps:
            return math.inf
        multipliers.set_thresholds(theta)
        value = math.inf
        for i in range(sec.steps_per_eval):
            if o.step >= max_steps:
                break
            row = step(o)
            values = {n: row.get(f"reward/{n}", math.nan) for n in theta}
            last = i + 1 == sec.steps_per_eval or o.step >= max_steps
            close = within(values, theta, sec.tolerance)
            if (i + 1) % sec.eval_every == 0 or last or close:
                ev = o.evaluate(sec.eval_limit)
                value = -float(gather([ev["overall"] if ev else None])[0])
                log_row(o.run.dir / "search.jsonl", {"step": o.step, "theta": theta, "f": value, "values": values})
            if close:
                break
        cache.put(theta, value)
        c.search_state["cache"] = [[k, v] for k, v in cache.entries]
        return value

    ranges = {n: (float(r[0]), float(r[1])) for n, r in sec.ranges.items()}
    best, fbest, history = nelder_mead(
        f, initial_simplex(ranges, sec.seed), NelderMeadSettings(max_iters=sec.max_iters), lambda: o.step >= max_steps
    )
    multipliers.set_thresholds(best)
    c.search_state["history"] = history
    return {"best_thresholds": best, "best_f": fbest, "evaluations": len(cache.entries), "history": history}


__all__ = ["threshold_search"]
