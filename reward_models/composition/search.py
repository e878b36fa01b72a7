"""Nelder–Mead over the thresholds of a constrained run (NM-PPO): gradient-free minimisation of f(θ) with θ keyed by
component name, a cache of evaluated thresholds within a tolerance per coordinate (never keyed by position), the
reference's coefficients and seeded initial simplex, and the early-return test of an evaluation.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch


class ThresholdCache:
    """f(θ) memoised by component name: a θ within `tol` of a cached key in every coordinate reuses its value."""

    def __init__(self, names: list[str], tol: float = 5e-3) -> None:
        self.names, self.tol = names, tol
        self.entries: list[tuple[dict[str, float], float]] = []

    def get(self, theta: dict[str, float]) -> float | None:
        for key, value in self.entries:
            if all(abs(key[n] - theta[n]) <= self.tol for n in self.names):
                return value
        return None

    def put(self, theta: dict[str, float], value: float) -> None:
        self.entries.append(({n: float(theta[n]) for n in self.names}, float(value)))


@dataclass
class NelderMeadSettings:
    alpha: float = 1.0  # reflection
    gamma: float = 2.0  # expansion
    rho: float = 0.5  # contraction
    sigma: float = 0.5  # shrink
    tol: float = 0.01  # stop when the std of f over the simplex is below
    max_iters: int = 10


def nelder_mead(
    f: Callable[[dict[str, float]], float],
    simplex: list[dict[str, float]],
    settings: NelderMeadSettings,
    should_stop: Callable[[], bool] = lambda: False,
) -> tuple[dict[str, float], float, list[dict[str, Any]]]:
    """Minimise f over thresholds keyed by name from an initial simplex of N+1 vertices (reflect, expand,
    contract, shrink with the reference's coefficients); returns the best θ, f(θ) and the history. `should_stop`
    is polled between evaluations (a training budget running out)."""
    names = list(simplex[0])
    vec = [[v[n] for n in names] for v in simplex]
    history: list[dict[str, Any]] = []

    def call(x: list[float], what: str) -> float:
        theta = dict(zip(names, x, strict=True))
        val = f(theta)
        history.append({"theta": theta, "f": val, "move": what})
        return val

    fs = [call(x, "init") for x in vec]
    for it in range(settings.max_iters):
        if should_stop():
            break
        order = sorted(range(len(vec)), key=lambda i: fs[i])
        vec, fs = [vec[i] for i in order], [fs[i] for i in order]
        mean = sum(fs) / len(fs)
        if math.sqrt(sum((v - mean) ** 2 for v in fs) / len(fs)) < settings.tol and it > 0:
            break
        n = len(names)
        c = [sum(vec[i][d] for i in range(n)) / n for d in range(n)]
        worst = vec[-1]
        r = [c[d] + settings.alpha * (c[d] - worst[d]) for d in range(n)]
        fr = call(r, "reflect")
        if fs[0] <= fr < fs[-2]:
            vec[-1], fs[-1] = r, fr
            continue
        if fr < fs[0]:
            e = [c[d] + settings.gamma * (r[d] - c[d]) for d in range(n)]
            fe = call(e, "expand") if not should_stop() else math.inf
            vec[-1], fs[-1] = (e, fe) if fe < fs[0] else (r, fr)
            continue
        k = [c[d] + settings.rho * (worst[d] - c[d]) for d in range(n)]
        fk = call(k, "contract") if not should_stop() else math.inf
        if fk < fs[-1]:
            vec[-1], fs[-1] = k, fk
            continue
        best = vec[0]
        for i in range(1, len(vec)):
            if should_stop():
                break
            vec[i] = [best[d] + settings.sigma * (vec[i][d] - best[d]) for d in range(n)]
            fs[i] = call(vec[i], "shrink")
    i = min(range(len(fs)), key=lambda j: fs[j])
    return dict(zip(names, vec[i], strict=True)), fs[i], history


def initial_simplex(ranges: dict[str, tuple[float, float]], seed: int = 0) -> list[dict[str, float]]:
    """N+1 vertices θ_i = lo_i + U(0, 1)·(hi_i − lo_i), seeded (the reference's construction)."""
    g = torch.Generator().manual_seed(seed)
    names = list(ranges)
    out = []
    for _ in range(len(names) + 1):
        u = torch.rand(len(names), generator=g, dtype=torch.float64).tolist()
        out.append({n: ranges[n][0] + u[i] * (ranges[n][1] - ranges[n][0]) for i, n in enumerate(names)})
    return out


def within(values: dict[str, float], thresholds: dict[str, float], rel: float) -> bool:
    """Every constraint value within [θ(1 − rel), θ(1 + rel)] (absolute `rel` when θ is 0)."""
    for n, t in thresholds.items():
        v = values.get(n, math.nan)
        if math.isnan(v) or abs(v - t) > (rel * abs(t) if t != 0 else rel):
            return False
    return True
