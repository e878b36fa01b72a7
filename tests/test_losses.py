"""Preference-optimization losses (align/losses/pairwise.py): hand-worked values, properties, TRL parity, errors.

The shared batch `LOGPS` has B = 2 pairs with small round numbers (float64):

    pair                 0        1
    policy  chosen     -10      -20         reference chosen   -11   -19
    policy  rejected   -12      -18         reference rejected -11   -19
    chosen  lengths      4        5         previous  chosen  -10.5  -20
    rejected lengths     2       10         previous  rejected -11.5 -18

so the summed log-ratios are ρ_w = (+1, −1), ρ_l = (−1, +1) and h = ρ_w − ρ_l = (+2, −2).
"""

from __future__ import annotations

import math
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch

from align.losses import (
    COMMON_PARAMS,
    INPO_ETA,
    LOSSES,
    LossOutput,
    PairLogps,
    check_loss_config,
    combine,
    compute_loss,
    sft_nll,
)
from prefalign.errors import ConfigError, UserError


def t(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


LOGPS = PairLogps(
    policy_chosen_logps=t(-10, -20),
    policy_rejected_logps=t(-12, -18),
    chosen_lengths=t(4, 5),
    rejected_lengths=t(2, 10),
    reference_chosen_logps=t(-11, -19),
    reference_rejected_logps=t(-11, -19),
    previous_chosen_logps=t(-10.5, -20),
    previous_rejected_logps=t(-11.5, -18),
)

# −log σ(x) = log(1 + e^{−x}) = softplus(−x); and −log σ(−x) = −log σ(x) + x.
# e^{−0.2} = 0.8187308 → −log σ(0.2) = log 1.8187308 = 0.5981389; −log σ(−0.2) = 0.5981389 + 0.2.
NLS_02 = 0.5981388693815918
NLS_M02 = 0.7981388693815918


def close(actual: torch.Tensor, expected: list[float] | torch.Tensor, tol: float = 1e-6) -> None:
    torch.testing.assert_close(actual, torch.as_tensor(expected, dtype=actual.dtype), atol=tol, rtol=0)


def random_logps(B: int = 6, seed: int = 0) -> PairLogps:
    g = torch.Generator().manual_seed(seed)
    logp = lambda: -torch.rand(B, generator=g, dtype=torch.float64) * 40  # noqa: E731
    lengths = lambda: torch.randint(1, 30, (B,), generator=g)  # noqa: E731
    return PairLogps(
        policy_chosen_logps=logp(),
        policy_rejected_logps=logp(),
        reference_chosen_logps=logp(),
        reference_rejected_logps=logp(),
        chosen_lengths=lengths(),
        rejected_lengths=lengths(),
        previous_chosen_logps=logp(),
        previous_rejected_logps=logp(),
    )


# --------------------------------------------------------------------------------------------------
# Hand-worked values
# --------------------------------------------------------------------------------------------------


def test_sigmoid_by_hand():
    """β = 0.1, h = (2, −2): βh = (0.2, −0.2) → L = (0.598139, 0.798139); rewards β·ρ = ±0.1."""
    out = compute_loss("sigmoid", {"beta": 0.1}, LOGPS)
    close(out.losses, [0.598139, 0.798139])
    close(out.losses, [NLS_02, NLS_M02], 1e-12)
    close(out.chosen_rewards, [0.1, -0.1], 1e-12)
    close(out.rejected_rewards, [-0.1, 0.1], 1e-12)
    close(out.margins, [0.2, -0.2], 1e-12)
    close(out.accuracies, [1.0, 0.0])


def test_cdpo_by_hand():
    """ε = 0.1, z = βh: L = (1−ε)a + ε(a + z) = a + εz with a = −log σ(z).
    z = 0.2: 0.598139 + 0.02 = 0.618139;  z = −0.2: 0.798139 − 0.02 = 0.778139."""
    out = compute_loss("cdpo", {"beta": 0.1, "label_smoothing": 0.1}, LOGPS)
    close(out.losses, [0.618139, 0.778139])


def test_robust_by_hand():
    """ε = 0.1: L = [(1−ε)a − ε(a + z)]/(1−2ε) = a − εz/(1−2ε).
    z = 0.2: 0.598139 − 0.02/0.8 = 0.573139;  z = −0.2: 0.798139 + 0.025 = 0.823139."""
    out = compute_loss("robust", {"beta": 0.1, "label_smoothing": 0.1}, LOGPS)
    close(out.losses, [0.573139, 0.823139])


def test_ipo_by_hand():
    """β = 0.1 → target 1/(2β) = 5. Length-averaged log-ratios:
    pair 0: +1/4 − (−1/2) = 0.75 → (0.75 − 5)² = 18.0625;
    pair 1: −1/5 − (+1/10) = −0.3 → (−5.3)² = 28.09. Rewards stay β·(summed ρ) as TRL logs them."""
    out = compute_loss("ipo", {"beta": 0.1}, LOGPS)
    close(out.losses, [18.0625, 28.09], 1e-9)
    close(out.chosen_rewards, [0.1, -0.1], 1e-12)


def test_hinge_by_hand():
    """β = 0.1: relu(1 − 0.2) = 0.8, relu(1 + 0.2) = 1.2; β = 1: relu(1 − 2) = 0, relu(1 + 2) = 3."""
    close(compute_loss("hinge", {"beta": 0.1}, LOGPS).losses, [0.8, 1.2], 1e-12)
    close(compute_loss("hinge", {"beta": 1.0}, LOGPS).losses, [0.0, 3.0], 1e-12)


def test_simpo_by_hand():
    """β = 2, γ/β = 0.25 (γ = 0.5). avg log π: pair 0 chosen −10/4 = −2.5, rejected −12/2 = −6;
    pair 1 chosen −20/5 = −4, rejected −18/10 = −1.8.
    z = β(avg_w − avg_l) − γ:
    pair 0: 2·3.5 − 0.5 = 6.5 → log(1 + e^{−6.5}) = log 1.0015034 = 0.0015023;
    pair 1: 2·(−2.2) − 0.5 = −4.9 → 4.9 + log(1 + e^{−4.9}) = 4.9 + 0.0074190 = 4.9074190.
    Rewards β·avg: chosen (−5, −8), rejected (−12, −3.6)."""
    out = compute_loss("simpo", {"beta": 2.0, "gamma_beta_ratio": 0.25}, LOGPS)
    close(out.losses, [0.0015023, 4.9074190])
    close(out.chosen_rewards, [-5.0, -8.0], 1e-12)
    close(out.rejected_rewards, [-12.0, -3.6], 1e-12)
    close(out.margins, [7.0, -4.4], 1e-12)


def test_simpo_label_smoothing_and_hinge_by_hand():
    """Label smoothing ε = 0.1 adds ε·z: 0.0015023 + 0.65 = 0.6515023; 4.9074190 − 0.49 = 4.4174190.
    Hinge: relu(1 − z) = relu(−5.5) = 0 and relu(5.9) = 5.9."""
    out = compute_loss("simpo", {"beta": 2.0, "gamma_beta_ratio": 0.25, "label_smoothing": 0.1}, LOGPS)
    close(out.losses, [0.6515023, 4.4174190])
    close(compute_loss("simpo_hinge", {"beta": 2.0, "gamma_beta_ratio": 0.25}, LOGPS).losses, [0.0, 5.9], 1e-12)


def test_inpo_sum_by_hand():
    """a = 0.5, c = 1, summed log-probs. Δπ = (−10 + 12, −20 + 18) = (2, −2); Δref = (0, 0);
    Δπ_t = (−10.5 + 11.5, −20 + 18) = (1, −2).
    h = Δπ − 0.5·Δref − 0.5·Δπ_t = (1.5, −1) → (h − 1)² = (0.25, 4).
    Rewards η·(π − a·ref − (1−a)·π_t) with η = 1/(2c) = 0.5;
    chosen, pair 0: 0.5·(−10 + 0.5·11 + 0.5·10.5) = 0.5·0.75 = 0.375."""
    out = compute_loss("inpo", {"ref_mix": 0.5, "target_margin": 1.0}, LOGPS)
    close(out.losses, [0.25, 4.0], 1e-12)
    close(out.chosen_rewards[:1], [0.375], 1e-12)


def test_inpo_mean_by_hand():
    """a = 0.5, c = 1, every log-prob divided by its length.
    pair 0: Δπ = −2.5 + 6 = 3.5; Δref = −2.75 + 5.5 = 2.75; Δπ_t = −2.625 + 5.75 = 3.125
            h = 3.5 − 1.375 − 1.5625 = 0.5625 → (0.5625 − 1)² = 0.19140625;
    pair 1: Δπ = −4 + 1.8 = −2.2; Δref = −3.8 + 1.9 = −1.9; Δπ_t = −4 + 1.8 = −2.2
            h = −2.2 + 0.95 + 1.1 = −0.15 → (−1.15)² = 1.3225."""
    params = {"ref_mix": 0.5, "target_margin": 1.0, "logps_normalization": "mean"}
    close(compute_loss("inpo", params, LOGPS).losses, [0.19140625, 1.3225], 1e-12)


def test_inpo_defaults_are_the_papers_practical_setting():
    """Defaults a = τ/η = 1/3 and c = 1/(2η) with η = 0.0075 → c = 66.67; so η = 1/(2c), τ = a/(2c)."""
    defaults = LOSSES["inpo"].defaults
    assert defaults["ref_mix"] == pytest.approx(1 / 3)
    assert defaults["target_margin"] == pytest.approx(66.6667, abs=1e-4)
    eta = 1 / (2 * defaults["target_margin"])
    assert eta == pytest.approx(INPO_ETA)
    assert defaults["logps_normalization"] == "sum"


def test_sft_term_by_hand():
    """Per-token NLL of chosen: −(−10)/4 = 2.5 and −(−20)/5 = 4. With sft_weight 0.5 on DPO:
    0.598139 + 1.25 = 1.848139 and 0.798139 + 2 = 2.798139; diagnostics unchanged."""
    close(sft_nll(LOGPS), [2.5, 4.0], 1e-12)
    plain = compute_loss("sigmoid", {"beta": 0.1}, LOGPS)
    mixed = compute_loss("sigmoid", {"beta": 0.1, "sft_weight": 0.5}, LOGPS)
    close(mixed.losses, [1.848139, 2.798139])
    close(mixed.margins, plain.margins, 0)
    close(combine(plain, sft_nll(LOGPS), 0.5).losses, mixed.losses, 0)


# --------------------------------------------------------------------------------------------------
# Properties
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", LOSSES.names())
def test_swapping_chosen_and_rejected_flips_the_margin(name):
    logps = random_logps()
    out, swapped = compute_loss(name, {}, logps), compute_loss(name, {}, logps.swapped())
    close(swapped.margins, -out.margins, 1e-12)
    close(swapped.chosen_rewards, out.rejected_rewards, 1e-12)


def test_sigmoid_swap_identity():
    """−log σ(−z) − (−log σ(z)) = z, so L(swapped) − L = βh = margin."""
    logps = random_logps()
    out, swapped = compute_loss("sigmoid", {}, logps), compute_loss("sigmoid", {}, logps.swapped())
    close(swapped.losses - out.losses, out.margins, 1e-9)


@pytest.mark.parametrize("name", [n for n in LOSSES if not LOSSES[n].needs_reference])
def test_reference_free_losses_ignore_the_reference(name):
    logps = random_logps()
    other = logps._replace(
        reference_chosen_logps=logps.reference_chosen_logps * 3 + 1,
        reference_rejected_logps=logps.reference_rejected_logps - 7,
    )
    none = logps._replace(reference_chosen_logps=None, reference_rejected_logps=None)
    outs = [compute_loss(name, {}, lp) for lp in (logps, other, none)]
    for out in outs[1:]:
        for a, b in zip(outs[0], out, strict=True):
            torch.testing.assert_close(a, b, atol=0, rtol=0)


@pytest.mark.parametrize("name", [n for n in LOSSES if LOSSES[n].needs_reference])
def test_reference_losses_read_the_reference(name):
    logps = random_logps()
    other = logps._replace(reference_chosen_logps=logps.reference_chosen_logps - 5)
    assert not torch.equal(compute_loss(name, {}, logps).losses, compute_loss(name, {}, other).losses)


def test_inpo_with_ref_mix_one_is_ipo_on_mean_normalized_log_ratios():
    """a = 1 and c = 1/(2β): h = Δπ − Δref (π_t drops out), L = (h − 1/(2β))² = IPO with the same β."""
    logps = random_logps()
    for beta in (0.1, 0.5):
        ipo = compute_loss("ipo", {"beta": beta}, logps)
        params = {"ref_mix": 1.0, "target_margin": 1 / (2 * beta), "logps_normalization": "mean"}
        inpo = compute_loss("inpo", params, logps)
        for a, b in zip(ipo, inpo, strict=True):
            torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-12)
        # The previous iterate no longer matters.
        moved = logps._replace(previous_chosen_logps=logps.previous_chosen_logps + 3)
        torch.testing.assert_close(compute_loss("inpo", params, moved).losses, inpo.losses, atol=0, rtol=0)


def test_inpo_with_ref_mix_one_is_summed_ipo():
    """With "sum" normalization a = 1 gives (ρ_w − ρ_l − c)² on summed log-ratios."""
    logps = random_logps()
    h = (logps.policy_chosen_logps - logps.reference_chosen_logps) - (
        logps.policy_rejected_logps - logps.reference_rejected_logps
    )
    out = compute_loss("inpo", {"ref_mix": 1.0, "target_margin": 5.0}, logps)
    close(out.losses, (h - 5.0) ** 2, 1e-9)


def test_simpo_gamma_zero_is_length_normalized_reference_free_dpo():
    """γ = 0: −log σ(β(avg_w − avg_l)) = DPO's −log σ(βh) on average log-probs with a zero reference."""
    logps = random_logps()
    avg = PairLogps(
        logps.policy_chosen_logps / logps.chosen_lengths,
        logps.policy_rejected_logps / logps.rejected_lengths,
        reference_chosen_logps=torch.zeros(6, dtype=torch.float64),
        reference_rejected_logps=torch.zeros(6, dtype=torch.float64),
    )
    simpo = compute_loss("simpo", {"beta": 2.0, "gamma_beta_ratio": 0.0}, logps)
    dpo = compute_loss("sigmoid", {"beta": 2.0}, avg)
    for a, b in zip(simpo, dpo, strict=True):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("name", ["cdpo", "robust"])
def test_zero_label_smoothing_is_sigmoid(name):
    logps = random_logps()
    expected = compute_loss("sigmoid", {"beta": 0.3}, logps)
    out = compute_loss(name, {"beta": 0.3, "label_smoothing": 0.0}, logps)
    for a, b in zip(expected, out, strict=True):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("name", LOSSES.names())
def test_gradients_flow_to_the_policy_only_and_diagnostics_are_detached(name):
    logps = random_logps()
    pc = logps.policy_chosen_logps.clone().requires_grad_(True)
    pr = logps.policy_rejected_logps.clone().requires_grad_(True)
    out = compute_loss(name, {"sft_weight": 0.1}, logps._replace(policy_chosen_logps=pc, policy_rejected_logps=pr))
    assert isinstance(out, LossOutput) and out.losses.shape == (6,)
    out.losses.mean().backward()
    assert pc.grad is not None and torch.isfinite(pc.grad).all() and pc.grad.abs().sum() > 0
    assert not any(x.requires_grad for x in (out.chosen_rewards, out.rejected_rewards, out.margins))


def test_batch_mean_is_invariant_to_splitting():
    """Per-example losses: the mean over 8 pairs equals the mean of the means of two halves of 4."""
    logps = random_logps(B=8)
    halves = [PairLogps(*(x[i : i + 4] for x in logps)) for i in (0, 4)]
    for name in LOSSES:
        whole = compute_loss(name, {}, logps).losses.mean()
        parts = torch.stack([compute_loss(name, {}, h).losses.mean() for h in halves]).mean()
        torch.testing.assert_close(whole, parts, atol=1e-9, rtol=1e-9)


# --------------------------------------------------------------------------------------------------
# Parity with TRL 1.16's own loss code
# --------------------------------------------------------------------------------------------------


def _trl_dpo_loss(loss_type: str, logps: PairLogps, beta: float, label_smoothing: float = 0.0):
    """Run TRL's `DPOTrainer._compute_loss` on the given per-sequence log-probs, without a model.

    The trainer method is called unbound with a stand-in `self` that holds exactly the attributes the
    method reads, and a stand-in model whose per-token log-probs put each sequence's summed log-prob on
    its first completion token (zeros elsewhere, as the fused head writes for masked tokens).
    Completion masks mark |y| tokens after one prompt token, so TRL's IPO length is |y|.
    """
    from trl import DPOTrainer

    B = logps.policy_chosen_logps.shape[0]
    lengths = torch.cat([logps.chosen_lengths, logps.rejected_lengths]).long()  # (2B,)
    T = int(lengths.max()) + 1
    completion_mask = (torch.arange(T + 1)[None, :] >= 1) & (torch.arange(T + 1)[None, :] <= lengths[:, None])
    per_token = torch.zeros(2 * B, T, dtype=torch.float64)  # (2B, T)
    per_token[:, 0] = torch.cat([logps.policy_chosen_logps, logps.policy_rejected_logps])
    outputs = SimpleNamespace(
        log_probs=per_token,
        entropy=torch.zeros(2 * B, T),
        mean_logits=torch.zeros(2 * B, T),
        is_top1=torch.zeros(2 * B, T, dtype=torch.bool),
    )
    metrics: dict = defaultdict(lambda: defaultdict(list))
    identity = lambda x: x  # noqa: E731
    fake_self = SimpleNamespace(
        model=SimpleNamespace(training=True),
        accelerator=SimpleNamespace(device="cpu", gather=identity, gather_for_metrics=identity),
        ld_alpha=None,
        precompute_ref_logps=True,
        aux_loss_enabled=False,
        f_divergence_type="reverse_kl",
        loss_types=[loss_type],
        loss_weights=[1.0],
        beta=beta,
        label_smoothing=label_smoothing,
        use_weighting=False,
        _metrics=metrics,
        _total_train_tokens=0,
        _tp_size=1,
    )
    inputs = {
        "input_ids": torch.zeros(2 * B, T + 1, dtype=torch.long),
        "attention_mask": torch.ones(2 * B, T + 1, dtype=torch.long),
        "completion_mask": completion_mask.long(),
        "ref_chosen_logps": logps.reference_chosen_logps,
        "ref_rejected_logps": logps.reference_rejected_logps,
    }
    loss = DPOTrainer._compute_loss(fake_self, lambda **kw: outputs, inputs, return_outputs=False)
    return loss, metrics["train"]


@pytest.mark.parametrize(
    "name, trl_type, params",
    [
        ("sigmoid", "sigmoid", {"beta": 0.1}),
        ("sigmoid", "sigmoid", {"beta": 0.7}),
        ("ipo", "ipo", {"beta": 0.1}),
        ("ipo", "ipo", {"beta": 0.02}),
        ("robust", "robust", {"beta": 0.1, "label_smoothing": 0.2}),
        ("hinge", "hinge", {"beta": 0.1}),
        ("hinge", "hinge", {"beta": 0.05}),
    ],
)
def test_parity_with_trl_dpo_trainer(name, trl_type, params):
    pytest.importorskip("trl")
    logps = random_logps(B=5, seed=3)
    trl_loss, trl_metrics = _trl_dpo_loss(trl_type, logps, params["beta"], params.get("label_smoothing", 0.0))
    ours = compute_loss(name, params, logps)
    torch.testing.assert_close(ours.losses.mean(), trl_loss, atol=1e-10, rtol=1e-10)
    assert ours.chosen_rewards.mean().item() == pytest.approx(trl_metrics["rewards/chosen"][0], abs=1e-10)
    assert ours.rejected_rewards.mean().item() == pytest.approx(trl_metrics["rewards/rejected"][0], abs=1e-10)
    assert ours.margins.mean().item() == pytest.approx(trl_metrics["rewards/margins"][0], abs=1e-10)
    assert ours.accuracies.mean().item() == pytest.approx(trl_metrics["rewards/accuracies"][0])


# --------------------------------------------------------------------------------------------------
# The table and errors
# --------------------------------------------------------------------------------------------------


def test_table_entries_are_consistent():
    for key in LOSSES:
        spec = LOSSES[key]
        assert spec.name == key
        assert spec.fn.__doc__ and len(spec.fn.__doc__.split()) > 20, f"{key}: document the loss"
        assert 0 < len(spec.summary) <= 70, f"{key}: the summary must fit one line of `align ls`"
        for param, default in spec.defaults.items():
            # Every numeric parameter has a declared range, and the default lies in it.
            if spec.choices(param) is None:
                assert spec.bound(param) is not None, f"{key}.{param} has no range"
                assert default in spec.bound(param)
        assert (
            check_loss_config(
                key, spec.defaults, has_reference=spec.needs_reference, has_previous_iterate=spec.needs_previous_iterate
            )
            == []
        )
    assert set(COMMON_PARAMS) <= set(LOSSES["sigmoid"].params)


def test_ls_rows_have_the_needs_columns():
    rows = {r["name"]: r for r in LOSSES.rows()}
    assert set(rows["sigmoid"]) == {
        "name",
        "summary",
        "needs_reference",
        "length_normalized",
        "needs_previous_iterate",
        "params",
    }
    assert rows["simpo"]["needs_reference"] is False and rows["simpo"]["length_normalized"] is True
    assert rows["inpo"]["needs_previous_iterate"] is True
    assert rows["inpo"]["params"] == ("ref_mix", "target_margin", "logps_normalization", "sft_weight")


def test_unknown_loss_lists_options_and_suggests():
    with pytest.raises(UserError) as e:
        compute_loss("sigmod", {}, LOGPS)
    msg = str(e.value)
    assert "did you mean 'sigmoid'?" in msg
    for name in LOSSES:
        assert name in msg


def test_unknown_param_is_named_with_suggestion():
    with pytest.raises(ConfigError) as e:
        compute_loss("sigmoid", {"betta": 0.1}, LOGPS)
    assert "betta" in str(e.value) and "did you mean 'beta'?" in str(e.value)


@pytest.mark.parametrize("eps", [0.5, 0.7, -0.1])
def test_robust_epsilon_out_of_range(eps):
    with pytest.raises(ConfigError) as e:
        compute_loss("robust", {"label_smoothing": eps}, LOGPS)
    assert "label_smoothing" in str(e.value) and "[0, 0.5)" in str(e.value)


def test_bad_values_are_all_reported():
    problems = check_loss_config(
        "inpo",
        {"ref_mix": 1.5, "target_margin": "big", "logps_normalization": "avg", "sft_weight": True},
        has_reference=True,
        has_previous_iterate=True,
    )
    assert len(problems) == 4
    assert any("ref_mix" in p and "[0, 1]" in p for p in problems)
    assert any("target_margin" in p and "expected a number" in p for p in problems)
    assert any("logps_normalization" in p and "'sum', 'mean'" in p for p in problems)


def test_check_loss_config_problems():
    unknown = check_loss_config("dpo_sigmoid", {}, has_reference=True, has_previous_iterate=False)
    assert len(unknown) == 1 and "unknown loss 'dpo_sigmoid'" in unknown[0] and "sigmoid" in unknown[0]

    no_ref = check_loss_config("sigmoid", {}, has_reference=False, has_previous_iterate=False)
    assert len(no_ref) == 1 and "needs a reference" in no_ref[0]

    simpo_ref = check_loss_config("simpo", {}, has_reference=True, has_previous_iterate=False)
    assert len(simpo_ref) == 1 and "reference-free" in simpo_ref[0]

    inpo = check_loss_config("inpo", {}, has_reference=True, has_previous_iterate=False)
    assert len(inpo) == 1 and "previous policy iterate" in inpo[0]

    assert check_loss_config("simpo", {"beta": 2.5}, has_reference=False, has_previous_iterate=False) == []
    assert check_loss_config("inpo", {}, has_reference=True, has_previous_iterate=True) == []


def test_missing_input_names_the_field():
    with pytest.raises(ValueError, match="chosen_lengths"):
        compute_loss("ipo", {}, LOGPS._replace(chosen_lengths=None))
    with pytest.raises(ValueError, match="previous_chosen_logps"):
        compute_loss("inpo", {}, LOGPS._replace(previous_chosen_logps=None))
    with pytest.raises(ValueError, match="reference_rejected_logps"):
        compute_loss("sigmoid", {}, LOGPS._replace(reference_rejected_logps=None))


def test_zero_length_is_clamped_like_trl():
    """A completion of 0 tokens is averaged over 1, never divided by zero."""
    out = compute_loss("simpo", {}, LOGPS._replace(chosen_lengths=t(0, 5)))
    assert torch.isfinite(out.losses).all()
    assert math.isclose(out.chosen_rewards[0].item(), 2.0 * -10.0)
