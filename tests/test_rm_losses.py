"""Reward-model losses (reward_models/losses.py): hand-worked values, TRL parity, errors.

The shared batch has B = 3 pairs: r_chosen = (2, 0.5, 1), r_rejected = (1, 0.5, 3), so
Δ = r_c − r_r = (1, 0, −2): one right, one tie, one wrong.

    −log σ(1)  = log(1 + e^{−1}) = log 1.3678794 = 0.3132617
    −log σ(0)  = log 2                            = 0.6931472
    −log σ(−2) = 2 + log(1 + e^{−2}) = 2 + 0.1269280 = 2.1269280
"""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch

from prefalign.errors import ConfigError, UserError
from reward_models.losses import (
    RM_LOSSES,
    RMLossOutput,
    centering_penalty,
    check_rm_loss_config,
    compute_rm_loss,
)


def t(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


R_C, R_R = t(2.0, 0.5, 1.0), t(1.0, 0.5, 3.0)
BT = [0.3132617, 0.6931472, 2.1269280]


def close(actual: torch.Tensor, expected, tol: float = 1e-6) -> None:
    torch.testing.assert_close(actual, torch.as_tensor(expected, dtype=actual.dtype), atol=tol, rtol=0)


def test_bradley_terry_by_hand_and_diagnostics():
    """Accuracy is strict: (1, 0 [tie], 0) → 1/3. Margin mean (1 + 0 − 2)/3 = −1/3.
    Rewards (2, .5, 1, 1, .5, 3): mean 8/6 = 1.333333; population variance
    (0.444 + 0.694 + 0.111 + 0.111 + 0.694 + 2.778)/6 = 0.805556 → std 0.897527."""
    out = compute_rm_loss("bradley_terry", {}, R_C, R_R)
    assert isinstance(out, RMLossOutput)
    close(out.losses, BT)
    close(out.accuracies, [1.0, 0.0, 0.0], 0)
    close(out.accuracy, 1 / 3, 1e-12)
    close(out.margins, [1.0, 0.0, -2.0], 0)
    close(out.margin_mean, -1 / 3, 1e-12)
    close(out.reward_mean, 4 / 3, 1e-12)
    close(out.reward_std, 0.897527)


def test_fixed_and_per_pair_margins_by_hand():
    """Fixed m = 1: Δ = (0, −1, −3) → (0.6931472, 1.3132617, 3.0485874).
    Per-pair m = (1, 0, 0) plus fixed 0.5: Δ = (−0.5, −0.5, −2.5) →
    log(1 + e^{0.5}) = log 2.6487213 = 0.9740770 twice, and 2.5 + log(1 + e^{−2.5}) = 2.5788897.
    The logged margins stay r_c − r_r."""
    out = compute_rm_loss("bradley_terry", {"margin": 1.0}, R_C, R_R)
    close(out.losses, [0.6931472, 1.3132617, 3.0485874])
    close(out.margins, [1.0, 0.0, -2.0], 0)
    out = compute_rm_loss("bradley_terry", {"margin": 0.5}, R_C, R_R, margins=t(1.0, 0.0, 0.0))
    close(out.losses, [0.9740770, 0.9740770, 2.5788897])


def test_centering_by_hand():
    """η = 0.01, (r_c + r_r)² = (9, 1, 16) → per pair +0.09, +0.01, +0.16."""
    close(centering_penalty(R_C, R_R), [9.0, 1.0, 16.0], 0)
    out = compute_rm_loss("bradley_terry", {"center_rewards_coefficient": 0.01}, R_C, R_R)
    close(out.losses, [0.3132617 + 0.09, 0.6931472 + 0.01, 2.1269280 + 0.16])


def test_label_smoothing_by_hand():
    """−(1−α) log σ(Δ) − α log σ(−Δ) = a + αΔ with a = −log σ(Δ); α = 0.1:
    (0.3132617 + 0.1, 0.6931472 + 0, 2.1269280 − 0.2) = (0.4132617, 0.6931472, 1.9269280)."""
    out = compute_rm_loss("label_smoothed", {"label_smoothing": 0.1}, R_C, R_R)
    close(out.losses, [0.4132617, 0.6931472, 1.9269280])
    zero = compute_rm_loss("label_smoothed", {"label_smoothing": 0.0}, R_C, R_R)
    close(zero.losses, compute_rm_loss("bradley_terry", {}, R_C, R_R).losses, 1e-12)


def test_focal_by_hand():
    """γ = 2. Δ = 1: σ(1) = 0.7310586, p = 2·0.2310586 = 0.4621172, (1 − p)² = 0.2893180,
    L = 0.2893180 · 0.3132617 = 0.0906322. Δ = 0 and Δ = −2: σ ≤ 0.5 → p = 0 → plain BT."""
    out = compute_rm_loss("focal", {}, R_C, R_R)
    close(out.losses, [0.0906322, 0.6931472, 2.1269280])
    zero = compute_rm_loss("focal", {"gamma": 0.0}, R_C, R_R)
    close(zero.losses, BT)


@pytest.mark.parametrize("name", RM_LOSSES.names())
def test_swapping_flips_margins_and_gradients_flow(name):
    g = torch.Generator().manual_seed(0)
    rc = torch.randn(5, generator=g, dtype=torch.float64).requires_grad_(True)
    rr = torch.randn(5, generator=g, dtype=torch.float64).requires_grad_(True)
    out = compute_rm_loss(name, {"center_rewards_coefficient": 0.01}, rc, rr)
    swapped = compute_rm_loss(name, {"center_rewards_coefficient": 0.01}, rr, rc)
    close(swapped.margins, -out.margins, 1e-12)
    out.losses.mean().backward()
    assert torch.isfinite(rc.grad).all() and rc.grad.abs().sum() > 0
    assert not out.margins.requires_grad and not out.reward_std.requires_grad


# --------------------------------------------------------------------------------------------------
# Parity with TRL 1.16 RewardTrainer.compute_loss
# --------------------------------------------------------------------------------------------------


def _trl_reward_loss(r_chosen, r_rejected, margin=None, center=None):
    """Run TRL's `RewardTrainer.compute_loss` unbound, with a stand-in model returning the rewards as
    logits (chosen rows first, as TRL's collator) and a stand-in `self` holding what the method reads."""
    from trl import RewardTrainer

    identity = lambda x: x  # noqa: E731
    metrics: dict = defaultdict(lambda: defaultdict(list))
    fake_self = SimpleNamespace(
        model=SimpleNamespace(training=True),
        args=SimpleNamespace(center_rewards_coefficient=center),
        accelerator=SimpleNamespace(gather=identity, gather_for_metrics=identity),
        _metrics=metrics,
        _total_train_tokens=0,
        _tp_size=1,
    )
    logits = torch.cat([r_chosen, r_rejected])[:, None]  # (2B, 1)
    model = lambda **kw: SimpleNamespace(logits=logits)  # noqa: E731
    inputs = {"attention_mask": torch.ones(logits.shape[0], 4, dtype=torch.long)}
    if margin is not None:
        inputs["margin"] = margin
    loss = RewardTrainer.compute_loss(fake_self, model, inputs)
    return loss, metrics["train"]


@pytest.mark.parametrize("with_margin, center", [(False, None), (True, None), (False, 0.01), (True, 0.05)])
def test_parity_with_trl_reward_trainer(with_margin, center):
    pytest.importorskip("trl")
    g = torch.Generator().manual_seed(1)
    rc, rr = torch.randn(6, generator=g, dtype=torch.float64), torch.randn(6, generator=g, dtype=torch.float64)
    rr[0] = rc[0]  # a tie, counted wrong by both
    margin = torch.rand(6, generator=g, dtype=torch.float64) if with_margin else None
    trl_loss, trl_metrics = _trl_reward_loss(rc, rr, margin, center)
    params = {} if center is None else {"center_rewards_coefficient": center}
    ours = compute_rm_loss("bradley_terry", params, rc, rr, margins=margin)
    torch.testing.assert_close(ours.losses.mean(), trl_loss, atol=1e-12, rtol=1e-12)
    assert ours.accuracy.item() == pytest.approx(trl_metrics["accuracy"][0])
    assert ours.margin_mean.item() == pytest.approx(trl_metrics["margin"][0], abs=1e-12)
    assert ours.reward_mean.item() == pytest.approx(trl_metrics["mean_reward"][0], abs=1e-12)


# --------------------------------------------------------------------------------------------------
# Table and errors
# --------------------------------------------------------------------------------------------------


def test_per_pair_soft_labels_by_hand():
    """Soft labels α = (0.1, 0.3, 0) with the fixed margin 0.5 and centering η = 0.01 on bradley_terry.
    Δ = r_c − r_r − 0.5 = (0.5, −0.5, −2.5). (1−α)(−log σ(Δ)) + α(−log σ(−Δ)) = −log σ(Δ) + αΔ:
      −log σ(0.5)  = log(1 + e^{−0.5}) = 0.4740770, + 0.1·0.5    = 0.5240770
      −log σ(−0.5) = log(1 + e^{0.5})  = 0.9740770, + 0.3·(−0.5) = 0.8240770
      −log σ(−2.5) = 2.5 + log(1 + e^{−2.5}) = 2.5788897,  + 0   = 2.5788897
    plus η(r_c + r_r)² = (0.09, 0.01, 0.16): (0.6140770, 0.8340770, 2.7388897). The margin and centering stay."""
    alpha = t(0.1, 0.3, 0.0)
    out = compute_rm_loss(
        "bradley_terry", {"margin": 0.5, "center_rewards_coefficient": 0.01}, R_C, R_R, label_smoothing=alpha
    )
    close(out.losses, [0.6140770, 0.8340770, 2.7388897])
    close(out.margins, [1.0, 0.0, -2.0], 0)  # diagnostics are the pair's own
    # with one α for every pair, bradley_terry with soft labels is label_smoothed
    same = compute_rm_loss("bradley_terry", {}, R_C, R_R, label_smoothing=t(0.1, 0.1, 0.1))
    close(same.losses, compute_rm_loss("label_smoothed", {"label_smoothing": 0.1}, R_C, R_R).losses, 1e-12)
    # every loss honours them: α = 1/2 makes a pair's loss the same read either way (focal included)
    half = t(0.5, 0.5, 0.5)
    for name in RM_LOSSES:
        a = compute_rm_loss(name, {"margin": 0.5}, R_C, R_R, label_smoothing=half).losses
        b = compute_rm_loss(name, {"margin": -0.5}, R_R, R_C, label_smoothing=half).losses
        close(a, b, 1e-12)
    # α = 0 leaves every pair's loss as it was
    focal = compute_rm_loss("focal", {"margin": 0.5}, R_C, R_R)
    close(compute_rm_loss("focal", {"margin": 0.5}, R_C, R_R, label_smoothing=t(0, 0, 0)).losses, focal.losses, 0)


def test_table_entries_are_consistent():
    for key in RM_LOSSES:
        spec = RM_LOSSES[key]
        assert spec.name == key and 0 < len(spec.summary) <= 70
        assert spec.fn.__doc__ and len(spec.fn.__doc__.split()) > 20
        assert check_rm_loss_config(key, spec.defaults) == []
    assert {r["name"] for r in RM_LOSSES.rows()} == {"bradley_terry", "label_smoothed", "focal"}


def test_errors():
    with pytest.raises(UserError, match="did you mean 'focal'"):
        compute_rm_loss("focall", {}, R_C, R_R)
    with pytest.raises(ConfigError, match="did you mean 'gamma'"):
        compute_rm_loss("focal", {"gama": 2.0}, R_C, R_R)
    problems = check_rm_loss_config("label_smoothed", {"label_smoothing": 0.8, "center_rewards_coefficient": -1})
    assert len(problems) == 2 and all("outside the allowed range" in p for p in problems)
