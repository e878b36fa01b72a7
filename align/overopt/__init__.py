"""`align eval overopt`: reward-model over-optimization, proxy against gold (Gao, Schulman & Hilton 2022).

A proxy reward model (any pointwise scorer, usually a Bradley-Terry RM trained on gold-labelled suite pairs) is
optimized two ways, and the gold graders of the verifiable suite say what the optimization bought:

  best-of-n   ONE pool of N samples per held-out prompt from the initial policy; for every n <= N the unbiased
              estimator (`bon_estimate`) gives the expected proxy and gold score of the sample best-of-n picks by
              proxy, as if BoN_n had been run many times. x-axis: d = sqrt(KL_bon), KL_bon = log n - (n-1)/n, the
              analytic value the paper uses; Beirami et al. (2024) show it is an upper bound on the true KL.
  RL          each saved checkpoint of an online run trained against the proxy (`kind: online`, a
              `{type: scalar, model: PROXY}` reward, `keep_checkpoints: 0`): samples on the same prompts, their
              proxy and gold scores, and KL(pi || pi_init) by Monte Carlo (k1 on the checkpoint's own samples: the
              mean over samples of sum_t log pi(y_t) - log pi_init(y_t); pi_init is the LoRA base with adapters
              disabled, or the run's `model` after full fine-tuning). Step 0 is the initial policy (KL 0).

Scores are gains over the initial policy, so R(0) = 0: BoN subtracts each prompt's n = 1 estimate (the pool mean)
from its n estimate; RL subtracts the step-0 mean. The paper's forms are fitted by least squares; both are linear
in (alpha, beta), so the fit is exact linear least squares without an intercept (`fit_form`):

  best-of-n   R(d) = d (alpha - beta d)       features [d, -d^2]      d* = alpha / (2 beta), R* = alpha^2 / (4 beta)
  RL          R(d) = d (alpha - beta log d)   features [d, -d log d]  d* = exp(alpha / beta - 1), R* = beta d*

(no peak when beta <= 0: the fitted curve keeps rising; a best-of-n fit with beta > 0 and alpha <= 0 only falls on
d >= 0, so its peak is d* = 0, R* = 0). Sampling is seeded per sample: sample k of a prompt is
drawn with seed `stream_seed(seed, k)` as its own request (the engine still prefills each prompt once, since
requests with the same prompt share a unit), so it is the same sample whatever N is, and raising N draws only
samples N_old .. N-1. The checkpoints draw with the same seeds (common random numbers: a change between
checkpoints is the policy's, not the sampler's noise); their first `rl_samples` samples of the initial policy are
the pool's first samples.

Caching (under OUT/cache/): samples per policy (model, weights fingerprint or checkpoint file, sampling settings)
keyed by prompt id and sample index; proxy scores per scorer description (spec and weights fingerprint); per-sample
log-ratios per checkpoint. A rerun with more prompts, a larger N or new checkpoints computes only what is missing.

A sample whose proxy score is NaN (the scorer failed on it) or whose gold grader raised is left out and counted,
never read as 0: BoN uses the prompt's remaining pool (a prompt with fewer than n valid samples is left out of
that n and counted), RL averages over the valid samples.

Files: `estimate.py` (the estimators, fits and verdict, pure), `harness.py` (settings, proxy, cache, policies, the
job), `report.py` (the run, its summary and plot), `settings.py` (the verb's flags, torch-free: the package imports only
it, so `align --help` stays fast).
"""

from __future__ import annotations

from .settings import OveroptSettings

__all__ = ["OveroptSettings"]  # the run: align.overopt.report.run_overopt (loads torch)
