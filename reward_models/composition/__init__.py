"""Reward composition: K named component rewards -> one reward or advantage per completion.

Everything here is a pure function over tensors, or a small object whose whole state is `state_dict()` (so a
trainer checkpoints and resumes it exactly). Rows are completions, S = P·G of them, grouped by prompt in
consecutive blocks of G (the online loop's layout); columns are the K components, named by the caller.

Files: `aggregate.py` (the aggregators and their table), `weights.py` (running normalisation, dynamic weights,
Lagrange multipliers), `search.py` (Nelder–Mead over thresholds).

Aggregators (`AGGREGATORS`, `align ls aggregators`; each entry carries its function); `output` says what they give:

  weighted_sum   reward  Σ_k w_k r_k (GRPO's "sum then normalise" once the estimator normalises per group)
  gdpo           adv.    GDPO: each component normalised within its group, (r − mean) / (std + 1e-4), then
                         Σ_k w_k A_k, then normalised over the batch (arXiv 2601.05242)
  dvao           adv.    DVAO: per group, v_k = b_k σ_k / Σ_l b_l σ_l and A = Σ_k v_k (r_k − μ_k) / (σ_k + ε),
                         σ the population std; 0 for a group whose Σ b σ ≤ ε (formula from a third-party note
                         matching the abstract: objectives with more in-group variance weigh more)
  maxmin         reward  MaxMin-RLHF: `per_sample` r = min_k w_k-scaled r_k; `group_argmin` the whole batch is
                         rewarded by the one component with the lowest batch mean (the paper's algorithm)
  par            reward  PAR: mean over M reference-policy responses of σ(k (r − r_ref)), r = Σ w r; bounded in
                         (0, 1) and centred on the reference policy
  dpa            reward  directional preference: vᵀ r with a unit vector v = (cos θ, sin θ) per prompt over two
                         components (the direction also goes to the policy in its system prompt)
  ensemble       reward  the components are members of an RM ensemble: mean − k · std over them (Coste et al.
                         2023's uncertainty penalty; `ensemble_lcb`); also a scorer kind, `ensemble`

`normalize: running` first rescales every component by running mean and std (`RunningNorm`, Welford, over all
completions seen so far; the statistics are part of the checkpoint).

Weight updates (how w moves between steps):

  fixed          w as given
  lagrangian     constrained RLHF (Moskovitz et al.): thresholds per named component (ge, le, eq), multipliers
                 λ = squash(ξ) (sigmoid for inequalities, tanh for equalities, or none: ξ clamped at >= 0 for
                 inequalities), ξ updated by SGD with momentum on L = Σ_i squash(ξ_i)·c_i with c_i = mean r_i − θ_i
                 (detached) after each policy step; the mixed advantage A = (N − Σλ) Â_obj + Σ λ_i Â_i (squashed)
                 or Â_obj + Σ λ_i Â_i (unsquashed, every multiplier with its own component)
  hypervolume    dynamic weighting (Lu et al.): a meta factor 0.5 + 1.5 tanh(HVC) from the hypervolume contribution
                 of each step's evaluation point against the buffer of earlier non-dominated points; `apply:
                 reward` multiplies the reward as released (it cancels under std-normalised GRPO and batch-whitened
                 estimators: a positive scale of every reward leaves (r − mean) / std unchanged), `apply:
                 advantage` multiplies the advantage after normalisation, where it changes the update
  gradient       dynamic weighting, gradient-based: per-component probe gradients g_k, influence s = G·1 from
                 their Gram matrix G_kj = <g_k, g_j>, then exponentiated gradient w <- softmax(log w + η s)

`NelderMead` searches the thresholds of a constrained run gradient-free (NM-PPO): each evaluation continues the
same policy, results are cached by threshold (within a tolerance per coordinate, keyed by component name, never
by position) and an evaluation returns early once every constraint is within tolerance of its threshold.
"""

from .aggregate import (
    AGGREGATORS,
    MAXMIN_MODES,
    Aggregated,
    AggregateInputs,
    Aggregator,
    dpa_reward,
    dpa_system_prompt,
    dvao_advantages,
    ensemble_lcb,
    gdpo_advantages,
    maxmin_group_argmin,
    maxmin_per_sample,
    member_spread,
    nan_rows,
    par_reward,
    weighted_sum,
)
from .search import NelderMeadSettings, ThresholdCache, initial_simplex, nelder_mead, within
from .weights import (
    Constraint,
    GradientWeighting,
    HypervolumeWeighting,
    Lagrangian,
    RunningNorm,
    constrained_advantages,
    exponentiated_gradient,
    hv_meta,
    hypervolume,
    hypervolume_contribution,
    influence,
    influence_of_gram,
    mix_advantages,
    whiten,
)

__all__ = [
    "AGGREGATORS",
    "MAXMIN_MODES",
    "AggregateInputs",
    "Aggregated",
    "Aggregator",
    "Constraint",
    "GradientWeighting",
    "HypervolumeWeighting",
    "Lagrangian",
    "NelderMeadSettings",
    "RunningNorm",
    "ThresholdCache",
    "constrained_advantages",
    "dpa_reward",
    "dpa_system_prompt",
    "dvao_advantages",
    "ensemble_lcb",
    "exponentiated_gradient",
    "gdpo_advantages",
    "hv_meta",
    "hypervolume",
    "hypervolume_contribution",
    "member_spread",
    "influence",
    "influence_of_gram",
    "initial_simplex",
    "maxmin_group_argmin",
    "maxmin_per_sample",
    "mix_advantages",
    "nan_rows",
    "nelder_mead",
    "par_reward",
    "weighted_sum",
    "whiten",
    "within",
]
