"""Policy-gradient losses, advantage and KL estimators: hand-computed values and TRL 1.16's own computation."""

from __future__ import annotations

import math
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch

from align.iterative import select_pair
from align.losses.policy_gradient import (
    PGBatch,
    check_pg_config,
    compute_pg_loss,
    group_advantages,
    kl_estimate,
    pairwise_advantages,
    reinforce_advantages,
    rloo_advantages,
    sequence_kl,
)
from reward_models.composition import weighted_sum as combine

# --- advantages by hand -------------------------------------------------------------------------------


def test_group_advantage_by_hand():
    r = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0])
    a = group_advantages(r, 4)
    # group 1: mean 0.25, sample std sqrt((0.75² + 3·0.25²)/3) = 0.5
    assert a[:4].tolist() == pytest.approx([0.75 / 0.5001, -0.25 / 0.5001, -0.25 / 0.5001, -0.25 / 0.5001])
    assert a[4:].tolist() == [0.0, 0.0, 0.0, 0.0]  # a group that all agree carries no signal
    # Dr. GRPO: no division
    assert group_advantages(r, 4, "none")[:4].tolist() == pytest.approx([0.75, -0.25, -0.25, -0.25])
    # batch std: sample std of all 8 rewards
    std = torch.tensor([1.0, 0, 0, 0, 1, 1, 1, 1]).std().item()
    assert group_advantages(r, 4, "batch")[0].item() == pytest.approx(0.75 / (std + 1e-4))


def test_group_advantage_skips_nan_rewards():
    r = torch.tensor([1.0, math.nan, 0.0, 0.0])
    a = group_advantages(r, 4)
    # statistics over the 3 valid rewards: mean 1/3, std sqrt((4/9 + 1/9 + 1/9)/2) = sqrt(1/3)
    std = math.sqrt(1 / 3)
    assert a[0].item() == pytest.approx((2 / 3) / (std + 1e-4))
    assert a[1].item() == 0.0  # the unscorable completion gets no advantage (and is masked by the trainer)
    assert a[2].item() == pytest.approx((-1 / 3) / (std + 1e-4))


def test_rloo_and_reinforce_by_hand():
    r = torch.tensor([1.0, 0.0, 0.0, 0.0])
    assert rloo_advantages(r, 4).tolist() == pytest.approx([1.0, -1 / 3, -1 / 3, -1 / 3])
    # a NaN sibling is left out of the leave-one-out mean: baselines over the other valid samples
    r2 = torch.tensor([1.0, math.nan, 0.0, 0.5])
    assert rloo_advantages(r2, 4).tolist() == pytest.approx([1.0 - 0.25, 0.0, 0.0 - 0.75, 0.5 - 0.5])
    assert reinforce_advantages(r, 4, "group_mean").tolist() == pytest.approx([0.75, -0.25, -0.25, -0.25])
    assert reinforce_advantages(r, 2, "batch_mean").tolist() == pytest.approx([0.75, -0.25, -0.25, -0.25])
    assert reinforce_advantages(r, 4, "none").tolist() == [1.0, 0.0, 0.0, 0.0]
    n = reinforce_advantages(r, 4, "none", normalize=True)
    assert n.mean().item() == pytest.approx(0.0, abs=1e-6)


def test_pairwise_advantage_by_hand():
    d = torch.tensor([[[0.0, 1.0], [-1.0, 0.0]]])
    # mean_j d_ij = ±0.5; scale sqrt((1 + 1) / (2·2·1)) = sqrt(0.5)
    assert pairwise_advantages(d, eps=0.0).tolist() == pytest.approx([0.5 / math.sqrt(0.5), -0.5 / math.sqrt(0.5)])
    # three candidates, 0 beats 1 and 2 fully, 1 and 2 tie
    d3 = torch.tensor([[[0.0, 1.0, 1.0], [-1.0, 0.0, 0.0], [-1.0, 0.0, 0.0]]])
    scale = math.sqrt(4 / (2 * 3 * 2))
    assert pairwise_advantages(d3, eps=0.0).tolist() == pytest.approx([2 / 3 / scale, -1 / 3 / scale, -1 / 3 / scale])


def test_kl_estimators_by_hand():
    lp, ref = torch.tensor([-1.0]), torch.tensor([-2.0])  # log r = ref − lp = −1
    assert kl_estimate(lp, ref, "k1").item() == pytest.approx(1.0)
    assert kl_estimate(lp, ref, "k2").item() == pytest.approx(0.5)
    assert kl_estimate(lp, ref, "k3").item() == pytest.approx(math.exp(-1) - 1 + 1)
    # k3 is never negative; k1 is where the policy is less likely than the reference
    lp2, ref2 = torch.tensor([-3.0]), torch.tensor([-1.0])
    assert kl_estimate(lp2, ref2, "k1").item() == pytest.approx(-2.0)
    assert kl_estimate(lp2, ref2, "k3").item() > 0
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    seq = sequence_kl(torch.tensor([[-1.0, -1.0, -9.0]]), torch.tensor([[-2.0, -1.5, 0.0]]), mask, "k1")
    assert seq.item() == pytest.approx(1.0 + 0.5)  # the padded token is left out


def test_combine_masks_nan_components():
    comps = torch.tensor([[1.0, 0.5], [math.nan, 0.5], [1.0, math.nan]])
    r = combine(comps, torch.tensor([1.0, 2.0]))
    assert r[0].item() == pytest.approx(2.0)
    assert math.isnan(r[1].item()) and math.isnan(r[2].item())
    # a zero-weight component that failed does not mask the completion
    assert combine(comps, torch.tensor([1.0, 0.0]))[2].item() == pytest.approx(1.0)


# --- losses by hand ---------------------------------------------------------------------------------


def _batch(adv: float = 1.0) -> PGBatch:
    old = torch.tensor([[-1.0, -2.0]])
    lp = old + torch.tensor([[0.1, -0.3]])  # ratios e^0.1 ≈ 1.105, e^-0.3 ≈ 0.741
    return PGBatch(lp, old, torch.ones(1, 2), torch.tensor([adv]))


def test_grpo_clipped_surrogate_by_hand():
    t = compute_pg_loss("grpo", {"loss_type": "dapo"}, _batch(1.0))
    # token 1: min(1.105, clip 1.105) = 1.105; token 2: min(0.741, clip→0.8) = 0.741
    want = -(math.exp(0.1) + math.exp(-0.3)) / 2
    assert (t.numerator / t.denominator).item() == pytest.approx(want, rel=1e-6)
    # negative advantage: token 2 is clipped at 0.8 (the max of −ρA and −clip(ρ)A)
    t = compute_pg_loss("grpo", {"loss_type": "dapo"}, _batch(-1.0))
    assert (t.numerator / t.denominator).item() == pytest.approx((math.exp(0.1) + 0.8) / 2, rel=1e-6)
    assert t.stats["clip_ratio/low"] == pytest.approx(0.5)
    # dr_grpo divides by sequences × max_completion_length
    t = compute_pg_loss("grpo", {"loss_type": "dr_grpo", "max_completion_length": 8}, _batch(1.0))
    assert t.denominator == 8.0


def test_grpo_kl_in_the_loss_by_hand():
    b = _batch(0.0)._replace(ref_logps=torch.tensor([[-2.0, -2.0]]))
    t = compute_pg_loss("grpo", {"loss_type": "grpo", "beta": 0.5, "kl_estimator": "k1"}, b)
    k1 = (b.logps - b.ref_logps).mean().item()
    assert (t.numerator / t.denominator).item() == pytest.approx(0.5 * k1, rel=1e-6)


def test_rloo_and_reinforce_losses_by_hand():
    b = PGBatch(
        torch.tensor([[-1.0, -1.0], [-2.0, 0.0]]),
        torch.tensor([[-1.0, -1.0], [-2.0, 0.0]]),
        torch.tensor([[1.0, 1.0], [1.0, 0.0]]),
        torch.tensor([0.5, -1.0]),
    )
    t = compute_pg_loss("rloo", {}, b)  # ratio 1 everywhere: −mean(A)
    assert (t.numerator / t.denominator).item() == pytest.approx(-(0.5 - 1.0) / 2)
    t = compute_pg_loss("reinforce", {}, b)  # −A · Σ log π per sequence, mean: −(0.5·−2 + −1·−2)/2
    assert (t.numerator / t.denominator).item() == pytest.approx(-(0.5 * -2.0 + -1.0 * -2.0) / 2)


def test_pg_config_errors_name_the_field():
    assert "did you mean" in check_pg_config("grop", {})[0]
    problems = check_pg_config("grpo", {"loss_type": "dapoo", "epsilonn": 0.1})
    assert any("loss_type" in p for p in problems) and any("epsilonn" in p for p in problems)


# --- against TRL 1.16 on the same tensors -------------------------------------------------------------


def _fake_trl(loss_type: str, beta: float, eps_low: float, eps_high: float, logps: torch.Tensor, level: str = "token"):
    acc = SimpleNamespace(
        reduce=lambda t, reduction="sum": t,
        gather=lambda t: t,
        gather_for_metrics=lambda t: t,
        num_processes=1,
        sync_gradients=True,
    )
    return SimpleNamespace(
        _get_per_token_logps_and_entropies=lambda *a, **k: (logps, torch.zeros_like(logps), None),
        top_entropy_quantile=1.0,
        off_policy_mask_threshold=None,
        importance_sampling_level=level,
        beta=beta,
        args=SimpleNamespace(use_bias_correction_kl=False, delta=None, steps_per_generation=1),
        loss_type=loss_type,
        epsilon_low=eps_low,
        epsilon_high=eps_high,
        use_vllm=False,
        vllm_importance_sampling_correction=False,
        model=SimpleNamespace(training=True),
        current_gradient_accumulation_steps=1,
        _entropy_bonus_enabled=False,
        aux_loss_enabled=False,
        _metrics=defaultdict(lambda: defaultdict(list)),
        accelerator=acc,
        max_completion_length=6,
    )


@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "bnpo", "dr_grpo"])
@pytest.mark.parametrize("level", ["token", "sequence"])
def test_grpo_loss_equals_trl(loss_type, level):
    from trl import GRPOTrainer

    g = torch.Generator().manual_seed(3)
    S, T = 4, 6
    old = -torch.rand(S, T, generator=g) * 3
    lp = old + torch.randn(S, T, generator=g) * 0.3
    ref = old + torch.randn(S, T, generator=g) * 0.2
    mask = torch.ones(S, T)
    mask[1, 4:] = 0
    mask[3, 2:] = 0
    adv = torch.randn(S, generator=g)
    beta = 0.04
    fake = _fake_trl(loss_type, beta, 0.2, 0.28, lp, level)
    inputs = {
        "prompt_ids": torch.zeros(S, 1, dtype=torch.long),
        "prompt_mask": torch.ones(S, 1, dtype=torch.long),
        "completion_ids": torch.zeros(S, T, dtype=torch.long),
        "completion_mask": mask,
        "advantages": adv,
        "old_per_token_logps": old,
        "ref_per_token_logps": ref,
        "num_items_in_batch": mask.sum(),
    }
    trl_loss = GRPOTrainer._compute_loss(fake, None, inputs)
    params = {
        "loss_type": loss_type,
        "epsilon": 0.2,
        "epsilon_high": 0.28,
        "beta": beta,
        "importance_sampling_level": level,
        "max_completion_length": 6,
    }
    t = compute_pg_loss("grpo", params, PGBatch(lp, old, mask, adv, ref))
    assert (t.numerator / t.denominator).item() == pytest.approx(trl_loss.item(), rel=1e-5, abs=1e-7)


def test_rloo_loss_equals_trl():
    from trl import RLOOTrainer

    g = torch.Generator().manual_seed(5)
    S, T = 4, 5
    old = -torch.rand(S, T, generator=g) * 2
    lp = old + torch.randn(S, T, generator=g) * 0.1
    mask = torch.ones(S, T)
    mask[2, 3:] = 0
    adv = torch.randn(S, generator=g)
    fake = _fake_trl("rloo", 0.0, 0.2, 0.2, lp)
    inputs = {
        "prompt_ids": torch.zeros(S, 1, dtype=torch.long),
        "prompt_mask": torch.ones(S, 1, dtype=torch.long),
        "completion_ids": torch.zeros(S, T, dtype=torch.long),
        "completion_mask": mask,
        "advantages": adv,
        "old_logps": (old * mask).sum(-1),
    }
    trl_loss = RLOOTrainer._compute_loss(fake, None, inputs)
    t = compute_pg_loss("rloo", {}, PGBatch(lp, old, mask, adv))
    assert (t.numerator / t.denominator).item() == pytest.approx(trl_loss.item(), rel=1e-5)


# --- pair selection by hand -----------------------------------------------------------------------------


def test_pair_rules_by_hand():
    r, n = [0.2, 0.9, 0.1, 0.5], [10, 100, 10, 10]
    assert select_pair(r, n, "max_min") == (1, 2)
    assert select_pair(r, n, "max_second") == (1, 3)
    # length penalty 0.01/token: scores 0.1, -0.1, 0.0, 0.4 -> best 3, worst 1
    assert select_pair(r, n, "length_penalized", 0.01) == (3, 1)
    import random

    picks = {select_pair(r, n, "max_random", rng=random.Random(s))[1] for s in range(50)}
    assert picks == {0, 2, 3}  # never the best itself
    assert select_pair([0.5, 0.5, 0.5], [1, 1, 1], "max_min") is None  # a tie is dropped
    # rejectable (rounds.rejected_from: policy): the rejected side only among the marked; none but the chosen: any
    assert select_pair([0.1, 0.9, 0.5], [1, 1, 1], "max_min", rejectable=[False, True, True]) == (1, 2)
    assert select_pair([0.1, 0.9, 0.5], [1, 1, 1], "max_min", rejectable=[False, True, False]) == (1, 0)
    assert select_pair([0.7, 0.7, 0.1], [1, 1, 1], "max_second") is None
