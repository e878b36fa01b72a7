"""Pairwise win rate against reference answers, raw and length-controlled, with bootstrap intervals.

Per item the judge gives a preference p in [0, 1] for the policy's answer over the reference answer (1: policy
better, 0.5: a tie, 0: reference better; a pairwise judge's probability is kept as it is). The raw win rate is the
mean p over the items the judge did not abstain on (p is NaN: counted and reported, left out, never a loss).

Length-controlled win rate (Dubois et al. 2024, "Length-Controlled AlpacaEval", arXiv 2404.04475, section 3; the
`length_controlled_v1` GLM of alpaca_eval's `metrics/glm_winrate.py`). AlpacaEval 2 fits, per evaluated model, a
logistic regression of the preference on

    logit P(policy preferred) = theta + phi * tanh(delta_len / std(delta_len)) + psi * instruction_difficulty

where delta_len is the difference of the two answers' lengths in characters and std its standard deviation over the
items (sample std), and reports the mean prediction with the length term set to zero ("what would the preference
be if both answers had the same length?"). Decisions written down here:

- instruction difficulty: AlpacaEval's per-instruction term is a fixed table estimated across its leaderboard's
  models (downloaded, AlpacaEval's 805 instructions only). With one policy per fit it is not identifiable, so it is
  left out: the model is theta + phi * tanh(...), and the length-controlled rate is sigmoid(theta);
- soft labels: p enters the likelihood as a probability (each item counts p times as a win and 1 - p times as a
  loss), as AlpacaEval does for its probability-valued annotations;
- regularisation: AlpacaEval fits with a cross-validated L1 penalty and pulls the weights toward two "gamed"
  baselines (also downloaded data). Here a small L2 penalty (`ridge`, on both weights) keeps the fit finite when
  length separates wins from losses perfectly, and is otherwise negligible;
- interval: percentile bootstrap over items (resampled items, the standardisation and the fit redone on each).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from prefalign.stats import bootstrap_statistic

RIDGE = 1e-2
"""L2 penalty on (theta, phi) of the length-controlled GLM (see the module docstring)."""


def pointwise_preference(policy: float, reference: float) -> float:
    """1 / 0.5 / 0 as the policy's score is above / equal to / below the reference's; NaN when either is NaN."""
    if not (math.isfinite(policy) and math.isfinite(reference)):
        return math.nan
    return 1.0 if policy > reference else 0.5 if policy == reference else 0.0


def both_orders(p_policy_first: float, p_reference_first: float) -> float:
    """A pairwise judge asked in both orders: P(policy better) averaged over positions, NaN when either is NaN.

    p_policy_first = P(A) with the policy as A; p_reference_first = P(A) with the reference as A. E.g. a judge that
    always answers A (P(A) = 1 in both orders) gives 0.5: no preference, only position bias."""
    if not (math.isfinite(p_policy_first) and math.isfinite(p_reference_first)):
        return math.nan
    return 0.5 * (p_policy_first + 1.0 - p_reference_first)


@dataclass
class LengthGLM:
    theta: float
    """The model term: logit of the preference at equal lengths."""
    phi: float
    """The length term's weight (on tanh of the standardised length difference)."""
    std: float
    """Standard deviation of the length differences the feature was standardised by (0: all equal)."""

    @property
    def lc_win_rate(self) -> float:
        return _sigmoid(self.theta)


def _sigmoid(z: float) -> float:
    return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))


def fit_length_glm(prefs: Sequence[float], len_diff: Sequence[float], ridge: float = RIDGE) -> LengthGLM:
    """Fit logit P = theta + phi * tanh(d / std(d)) to soft preferences by penalised maximum likelihood (Newton).

    prefs: (N,) preferences in [0, 1], no NaN; len_diff: (N,) len(policy) - len(reference) in characters.
    """
    import numpy as np  # lazy: numpy, only for the length-controlled fit

    p = np.asarray(prefs, dtype=np.float64)  # (N,)
    d = np.asarray(len_diff, dtype=np.float64)  # (N,)
    std = float(d.std(ddof=1)) if len(d) > 1 else 0.0
    x = np.tanh(d / std) if std > 0 else np.zeros_like(d)
    X = np.stack([np.ones_like(x), x], axis=1)  # (N, 2): model term, length term
    w = np.zeros(2)
    for _ in range(100):
        s = 1.0 / (1.0 + np.exp(-(X @ w)))  # (N,)
        grad = X.T @ (s - p) + ridge * w  # (2,)
        hess = (X * (s * (1 - s))[:, None]).T @ X + ridge * np.eye(2)  # (2, 2)
        step = np.linalg.solve(hess, grad)
        w -= step
        if float(np.abs(step).max()) < 1e-10:
            break
    return LengthGLM(float(w[0]), float(w[1]), std)


@dataclass
class WinRate:
    win_rate: float | None
    lc_win_rate: float | None
    ci95: tuple[float, float] | None
    lc_ci95: tuple[float, float] | None
    n: int
    """Items judged (abstentions left out)."""
    abstained: int
    wins: int
    ties: int
    losses: int
    length_coef: float | None
    mean_len_diff: float | None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def win_rates(
    prefs: Sequence[float],
    policy_lens: Sequence[int],
    reference_lens: Sequence[int],
    bootstrap: int = 1000,
    seed: int = 0,
    ridge: float = RIDGE,
) -> WinRate:
    """Raw and length-controlled win rates with percentile bootstrap intervals over items; NaN preferences are
    abstentions, counted and left out. E.g. prefs [1, 0.5, nan, 0] -> win rate 0.5 over 3 items, 1 abstained."""
    keep = [i for i, v in enumerate(prefs) if math.isfinite(v)]
    p = [float(prefs[i]) for i in keep]
    d = [float(policy_lens[i] - reference_lens[i]) for i in keep]
    n = len(p)
    counts = {
        "wins": sum(v > 0.5 for v in p),
        "ties": sum(v == 0.5 for v in p),
        "losses": sum(v < 0.5 for v in p),
    }
    if n == 0:
        return WinRate(None, None, None, None, 0, len(prefs), **counts, length_coef=None, mean_len_diff=None)
    glm = fit_length_glm(p, d, ridge)

    def ci(stat: Any) -> tuple[float, float] | None:
        if bootstrap <= 0:
            return None
        lo, hi = bootstrap_statistic(stat, n, bootstrap, seed)
        return None if math.isnan(lo) else (lo, hi)

    return WinRate(
        win_rate=sum(p) / n,
        lc_win_rate=glm.lc_win_rate,
        ci95=ci(lambda idx: sum(p[i] for i in idx) / len(idx)),
        lc_ci95=ci(lambda idx: fit_length_glm([p[i] for i in idx], [d[i] for i in idx], ridge).lc_win_rate),
        n=n,
        abstained=len(prefs) - n,
        **counts,
        length_coef=glm.phi,
        mean_len_diff=sum(d) / n,
    )
