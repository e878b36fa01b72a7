"""Pairwise preference losses: pure functions over per-sequence log-probs, chosen through `LOSSES`.

Every loss has the same shape of call, `fn(logps: PairLogps, *, <params>) -> LossOutput`, so the
trainer never branches on the loss name:

    logps  = PairLogps(policy_chosen_logps, policy_rejected_logps,
                       reference_chosen_logps, reference_rejected_logps,
                       chosen_lengths, rejected_lengths)                      # every tensor (B,)
    out    = compute_loss("sigmoid", {"beta": 0.1}, logps)                    # validates params
    loss   = out.losses.mean()                                               # () scalar to backprop

Conventions (reference/algorithms.md §0 and §10.1):

- `*_logps` are log π(y|x) summed over completion tokens only (prompt and padding masked), one value
  per sequence. `*_lengths` are the completion-token counts |y| of the same sequences. Averages
  ("avg", "mean-normalized") divide the sum by |y|, clamped to at least 1 as TRL does, so an empty
  completion cannot divide by zero.
- ρ(y) = log π_θ(y|x) − log π_ref(y|x) is a per-response log-ratio; h = ρ(y_w) − ρ(y_l) is the pairwise
  margin of the DPO family.
- Diagnostics are detached. For losses with a reference the implicit rewards are β·ρ computed from
  the *summed* log-ratios, exactly what TRL logs as `rewards/chosen` and `rewards/rejected`, whatever
  normalization the loss itself uses (so IPO's logged rewards are not length-averaged, as in TRL).

`LOSSES` is the one table of losses; `align ls losses` prints it. `check_loss_config` reports every
problem of a (name, params) choice before any model loads; `compute_loss` raises the same problems.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar, Literal, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from prefalign.errors import ConfigError, did_you_mean
from prefalign.registry import NON_NEGATIVE, POSITIVE, UNIT, FunctionSpec, Interval, Table

# --------------------------------------------------------------------------------------------------
# Inputs and outputs
# --------------------------------------------------------------------------------------------------


class PairLogps(NamedTuple):
    """Per-sequence log-probs of B preference pairs; every tensor is (B,).

    The policy log-probs carry gradients; reference and previous-iterate log-probs come from frozen
    models (or precomputed columns) and are treated as constants. Fields a loss does not need may be
    None; a loss that needs a missing field raises a ValueError naming it.
    """

    policy_chosen_logps: Tensor  # (B,) Σ_t log π_θ(y_w,t | x, y_w,<t)
    policy_rejected_logps: Tensor  # (B,) Σ_t log π_θ(y_l,t | x, y_l,<t)
    reference_chosen_logps: Tensor | None = None  # (B,) log π_ref(y_w|x)
    reference_rejected_logps: Tensor | None = None  # (B,) log π_ref(y_l|x)
    chosen_lengths: Tensor | None = None  # (B,) completion tokens |y_w|
    rejected_lengths: Tensor | None = None  # (B,) completion tokens |y_l|
    previous_chosen_logps: Tensor | None = None  # (B,) log π_t(y_w|x), INPO's previous iterate
    previous_rejected_logps: Tensor | None = None  # (B,) log π_t(y_l|x)

    def swapped(self) -> PairLogps:
        """The same pairs with chosen and rejected exchanged (for symmetry checks and label flips)."""
        return PairLogps(
            self.policy_rejected_logps,
            self.policy_chosen_logps,
            self.reference_rejected_logps,
            self.reference_chosen_logps,
            self.rejected_lengths,
            self.chosen_lengths,
            self.previous_rejected_logps,
            self.previous_chosen_logps,
        )


class LossOutput(NamedTuple):
    """Per-example losses plus detached diagnostics; every tensor is (B,).

    Train on `losses.mean()` (the batch mean, as TRL). `accuracies` counts a tie as wrong
    (strictly chosen_rewards > rejected_rewards), as TRL's `rewards/accuracies`.
    """

    losses: Tensor  # (B,) per-pair loss, differentiable
    chosen_rewards: Tensor  # (B,) implicit reward of y_w, detached
    rejected_rewards: Tensor  # (B,) implicit reward of y_l, detached
    margins: Tensor  # (B,) chosen_rewards − rejected_rewards, detached

    @property
    def accuracies(self) -> Tensor:
        """(B,) 1.0 where chosen_rewards > rejected_rewards strictly, else 0.0."""
        return (self.chosen_rewards > self.rejected_rewards).to(self.losses.dtype)


def _output(losses: Tensor, chosen_rewards: Tensor, rejected_rewards: Tensor) -> LossOutput:
    chosen_rewards, rejected_rewards = chosen_rewards.detach(), rejected_rewards.detach()
    return LossOutput(losses, chosen_rewards, rejected_rewards, chosen_rewards - rejected_rewards)


def _need(value: Tensor | None, field: str, loss: str) -> Tensor:
    if value is None:
        raise ValueError(f"loss '{loss}' needs `{field}` in PairLogps, but it is None")
    return value


def _lengths(value: Tensor | None, field: str, loss: str, like: Tensor) -> Tensor:
    """Completion-token counts as `like`'s dtype, clamped to ≥ 1 (TRL's `.clamp(min=1.0)`)."""
    return _need(value, field, loss).to(like.dtype).clamp(min=1.0)


def _log_ratios(logps: PairLogps, loss: str) -> tuple[Tensor, Tensor]:
    """(ρ(y_w), ρ(y_l)), each (B,): summed policy minus summed reference log-probs."""
    ref_w = _need(logps.reference_chosen_logps, "reference_chosen_logps", loss)
    ref_l = _need(logps.reference_rejected_logps, "reference_rejected_logps", loss)
    return logps.policy_chosen_logps - ref_w, logps.policy_rejected_logps - ref_l


# --------------------------------------------------------------------------------------------------
# DPO family (reference/algorithms.md §1; TRL 1.16 `DPOTrainer._compute_loss`)
# --------------------------------------------------------------------------------------------------


def sigmoid_loss(logps: PairLogps, *, beta: float = 0.1) -> LossOutput:
    """DPO: L = −log σ(β h), h = ρ(y_w) − ρ(y_l) on summed log-probs.

    Rafailov et al. 2023, "Direct Preference Optimization", Eq. 7; TRL `loss_type="sigmoid"`.
    Inputs (B,): policy and reference chosen/rejected logps. Returns losses (B,) and rewards β·ρ.
    """
    rho_w, rho_l = _log_ratios(logps, "sigmoid")  # (B,), (B,)
    h = rho_w - rho_l  # (B,)
    return _output(-F.logsigmoid(beta * h), beta * rho_w, beta * rho_l)


def cdpo_loss(logps: PairLogps, *, beta: float = 0.1, label_smoothing: float = 0.1) -> LossOutput:
    """Conservative DPO: L = −(1−ε) log σ(β h) − ε log σ(−β h).

    Mitchell 2023, "A note on DPO with noisy preferences & relationship to IPO" (cDPO): the DPO
    likelihood under labels flipped with probability ε. This was TRL ≤ 0.28's `sigmoid` with
    `label_smoothing=ε`; TRL 1.16 no longer has it. ε ∈ [0, 0.5]; ε = 0 is `sigmoid`. Default 0.1 is
    this toolkit's choice (the note fixes none). Inputs (B,) as `sigmoid`; returns losses (B,).
    """
    rho_w, rho_l = _log_ratios(logps, "cdpo")
    z = beta * (rho_w - rho_l)  # (B,)
    losses = -(1 - label_smoothing) * F.logsigmoid(z) - label_smoothing * F.logsigmoid(-z)
    return _output(losses, beta * rho_w, beta * rho_l)


def robust_loss(logps: PairLogps, *, beta: float = 0.1, label_smoothing: float = 0.1) -> LossOutput:
    """Robust DPO: L = [(1−ε)(−log σ(β h)) − ε(−log σ(−β h))] / (1 − 2ε).

    Chowdhury et al. 2024, "Provably Robust DPO", the rDPO loss (an unbiased estimate of the clean
    DPO loss under symmetric label flips with rate ε); TRL `loss_type="robust"`, `label_smoothing=ε`.
    ε ∈ [0, 0.5) (the denominator vanishes at 0.5); ε = 0 is `sigmoid`; default 0.1 is the paper's
    suggestion quoted in TRL's config docs. Inputs (B,) as `sigmoid`; returns losses (B,).
    """
    rho_w, rho_l = _log_ratios(logps, "robust")
    z = beta * (rho_w - rho_l)  # (B,)
    clean = -(1 - label_smoothing) * F.logsigmoid(z)
    flipped = -label_smoothing * F.logsigmoid(-z)
    return _output((clean - flipped) / (1 - 2 * label_smoothing), beta * rho_w, beta * rho_l)


def ipo_loss(logps: PairLogps, *, beta: float = 0.1) -> LossOutput:
    """IPO: L = (h̄ − 1/(2β))², h̄ = ρ(y_w)/|y_w| − ρ(y_l)/|y_l| (length-averaged log-ratios).

    Azar et al. 2023, "A General Theoretical Paradigm to Understand Learning from Human
    Preferences", Eq. 17, with the paper's τ written β. The length averaging is TRL 1.16's (each
    summed log-ratio divided by its completion-token count clamped to ≥ 1; TRL says the IPO authors
    confirmed it). Inputs (B,): policy/reference logps and chosen/rejected lengths. Returns losses
    (B,); rewards are β·ρ on *summed* log-ratios, as TRL logs them.
    """
    rho_w, rho_l = _log_ratios(logps, "ipo")
    n_w = _lengths(logps.chosen_lengths, "chosen_lengths", "ipo", rho_w)  # (B,)
    n_l = _lengths(logps.rejected_lengths, "rejected_lengths", "ipo", rho_l)  # (B,)
    h_bar = rho_w / n_w - rho_l / n_l  # (B,)
    return _output((h_bar - 1 / (2 * beta)) ** 2, beta * rho_w, beta * rho_l)


def hinge_loss(logps: PairLogps, *, beta: float = 0.1) -> LossOutput:
    """SLiC-HF hinge: L = max(0, 1 − β h) on summed log-ratios.

    Zhao et al. 2023, "SLiC-HF", the rank-calibration loss max(0, δ − log π(y_w) + log π(y_l)) with
    δ = 1/β after scaling by β, applied to policy-vs-reference log-ratios as TRL `loss_type="hinge"`.
    Inputs (B,) as `sigmoid`; returns losses (B,).
    """
    rho_w, rho_l = _log_ratios(logps, "hinge")
    return _output(torch.relu(1 - beta * (rho_w - rho_l)), beta * rho_w, beta * rho_l)


# --------------------------------------------------------------------------------------------------
# SimPO (reference/algorithms.md §2; princeton-nlp/SimPO `SimPOTrainer.simpo_loss`)
# --------------------------------------------------------------------------------------------------


def _simpo_logits(logps: PairLogps, beta: float, loss: str) -> tuple[Tensor, Tensor]:
    """(β·avg log π(y_w), β·avg log π(y_l)), each (B,). Reference inputs are never read."""
    pi_w, pi_l = logps.policy_chosen_logps, logps.policy_rejected_logps
    avg_w = pi_w / _lengths(logps.chosen_lengths, "chosen_lengths", loss, pi_w)  # (B,)
    avg_l = pi_l / _lengths(logps.rejected_lengths, "rejected_lengths", loss, pi_l)  # (B,)
    return beta * avg_w, beta * avg_l


def simpo_loss(
    logps: PairLogps, *, beta: float = 2.0, gamma_beta_ratio: float = 0.25, label_smoothing: float = 0.0
) -> LossOutput:
    """SimPO: L = −(1−ε) log σ(z) − ε log σ(−z), z = β(avg_w − avg_l) − γ, γ = β·gamma_beta_ratio.

    Meng et al. 2024, "SimPO: Simple Preference Optimization with a Reference-Free Reward", Eq. 6;
    avg = summed log-prob / completion tokens. Reference-free: reference inputs are ignored.
    `gamma_beta_ratio` is the unit the SimPO code tunes (γ/β; TRL's CPO `simpo_gamma` is γ itself).
    Label smoothing ε ∈ [0, 0.5] as in the SimPO code (default 0 = the paper's loss). Defaults are the
    SimPO code's (β = 2.0, γ/β = 0.25). Inputs (B,): policy logps and lengths. Returns losses (B,)
    and rewards β·avg log π.
    """
    r_w, r_l = _simpo_logits(logps, beta, "simpo")
    z = r_w - r_l - beta * gamma_beta_ratio  # (B,)
    losses = -(1 - label_smoothing) * F.logsigmoid(z) - label_smoothing * F.logsigmoid(-z)
    return _output(losses, r_w, r_l)


def simpo_hinge_loss(logps: PairLogps, *, beta: float = 2.0, gamma_beta_ratio: float = 0.25) -> LossOutput:
    """SimPO, hinge variant: L = max(0, 1 − β((avg_w − avg_l) − γ/β)).

    The SimPO code's `loss_type="hinge"` (`relu(1 − β·logits)`, logits = avg_w − avg_l − γ/β).
    Reference-free. Inputs (B,): policy logps and lengths. Returns losses (B,), rewards β·avg log π.
    """
    r_w, r_l = _simpo_logits(logps, beta, "simpo_hinge")
    return _output(torch.relu(1 - (r_w - r_l - beta * gamma_beta_ratio)), r_w, r_l)


# --------------------------------------------------------------------------------------------------
# INPO (reference/algorithms.md §3; smiles724/MNPO `mnpo_loss` with history weights [1, 0])
# --------------------------------------------------------------------------------------------------

INPO_ETA = 0.0075
"""The practical η of INPO (MNPO config `eta`); `target_margin` defaults to 1/(2η) ≈ 66.67."""


def inpo_loss(
    logps: PairLogps,
    *,
    ref_mix: float = 1 / 3,
    target_margin: float = 1 / (2 * INPO_ETA),
    logps_normalization: Literal["sum", "mean"] = "sum",
) -> LossOutput:
    """INPO step: h = Δπ − a·Δref − (1−a)·Δπ_t, L = (h − c)².

    Zhang et al. 2024, "Iterative Nash Policy Optimization" (arXiv 2407.00617), the per-iteration loss
    L_t; formula checked against the MNPO code with history weights [1, 0] (no authors' code was found).
    Δπ = log π_θ(y_w|x) − log π_θ(y_l|x), and likewise Δref for π_ref and Δπ_t for the frozen previous
    iterate π_t (the policy that generated this iteration's pairs).

    Parameters, and their mapping to the paper's (η, τ) (η = inverse OMD step size, τ = KL strength):

    - `ref_mix` a = τ/η ∈ [0, 1] (default 1/3, i.e. τ = η/3);
    - `target_margin` c = 1/(2η) > 0 (default 1/(2·0.0075) ≈ 66.67);
      conversely η = 1/(2c) and τ = a/(2c).
    - `logps_normalization`: "sum" uses summed log-probs (default; the only scale on which c ≈ 67 nats
      is sensible), "mean" divides every log-prob by its completion length first (what MNPO and other
      reimplementations built on the SimPO trainer do). The papers leave this open.

    Reductions: a = 1 removes π_t and gives IPO on the same log-ratios, L = (Δπ − Δref − c)², with
    IPO's β = 1/(2c) = η; with "mean" this is exactly the `ipo` entry (TRL's length-averaged IPO).
    a = 0 gives online IPO with π_t as the reference.

    Inputs (B,): policy, reference and previous-iterate logps; lengths when "mean". Returns losses
    (B,); rewards are η·(log π_θ − a·log π_ref − (1−a)·log π_t) on *summed* log-probs, η = 1/(2c),
    so that with a = 1 they equal the `ipo` entry's β·ρ.
    """
    loss = "inpo"
    a = ref_mix
    ref_w = _need(logps.reference_chosen_logps, "reference_chosen_logps", loss)
    ref_l = _need(logps.reference_rejected_logps, "reference_rejected_logps", loss)
    prev_w = _need(logps.previous_chosen_logps, "previous_chosen_logps", loss)
    prev_l = _need(logps.previous_rejected_logps, "previous_rejected_logps", loss)
    # Anchored log-ratio of each response: log π_θ − a·log π_ref − (1−a)·log π_t, summed over tokens.
    rho_w = logps.policy_chosen_logps - a * ref_w - (1 - a) * prev_w  # (B,)
    rho_l = logps.policy_rejected_logps - a * ref_l - (1 - a) * prev_l  # (B,)
    if logps_normalization == "mean":
        # Dividing each log-prob by |y| before mixing equals dividing the mixed sum (linearity).
        h = rho_w / _lengths(logps.chosen_lengths, "chosen_lengths", loss, rho_w) - rho_l / _lengths(
            logps.rejected_lengths, "rejected_lengths", loss, rho_l
        )
    else:
        h = rho_w - rho_l  # (B,)
    eta = 1 / (2 * target_margin)
    return _output((h - target_margin) ** 2, eta * rho_w, eta * rho_l)


# --------------------------------------------------------------------------------------------------
# Optional SFT term on the chosen responses, mixable with any loss
# --------------------------------------------------------------------------------------------------


def sft_nll(logps: PairLogps) -> Tensor:
    """Per-token negative log-likelihood of each chosen response: −log π_θ(y_w|x)/|y_w|, shape (B,).

    The SimPO code's `sft_weight` term (its chosen log-probs are already averaged) and RPO's NLL term.
    The batch mean weights every pair equally; TRL's `sft` loss type instead averages over all chosen
    tokens of the batch, which weights long responses more. Lengths are clamped to ≥ 1.
    """
    pi_w = logps.policy_chosen_logps
    return -pi_w / _lengths(logps.chosen_lengths, "chosen_lengths", "sft term", pi_w)


def combine(output: LossOutput, extra: Tensor, weight: float) -> LossOutput:
    """`output` with `weight · extra` (B,) added to its per-example losses; diagnostics unchanged.

    `compute_loss` uses it for the `sft_weight` parameter every loss accepts:
    L_total = L_pref + sft_weight · sft_nll.
    """
    return output._replace(losses=output.losses + weight * extra)


# --------------------------------------------------------------------------------------------------
# The table
# --------------------------------------------------------------------------------------------------

FLIP_RATE = Interval(0.0, 0.5)  # ε of a symmetric label-flip model

COMMON_PARAMS: dict[str, tuple[float, Interval, str]] = {
    # name: (default, allowed range, meaning); accepted by every loss, applied by `compute_loss`.
    "sft_weight": (0.0, NON_NEGATIVE, "weight of the per-token NLL of the chosen response (`sft_nll`)"),
}


@dataclasses.dataclass(frozen=True)
class LossSpec(FunctionSpec):
    """One entry of `LOSSES`: the function and what it needs.

    `params` (names) and `defaults` are read from `fn`'s keyword-only arguments plus `COMMON_PARAMS`,
    so they are written once; `bounds` gives the allowed range of each numeric parameter.
    """

    needs_reference: bool  # reads reference_*_logps
    length_normalized: bool  # reads *_lengths and averages log-probs per token (by default)
    needs_previous_iterate: bool  # reads previous_*_logps (the frozen π_t of an online iteration)

    kind: ClassVar[str] = "loss"
    common: ClassVar[Mapping[str, tuple[Any, Interval, str]]] = COMMON_PARAMS


LOSSES: Table[LossSpec] = Table(
    "loss",
    {
        "sigmoid": LossSpec(
            "sigmoid",
            sigmoid_loss,
            "DPO: -log σ(βh) on summed log-ratios (Rafailov+ 2023, Eq. 7)",
            needs_reference=True,
            length_normalized=False,
            needs_previous_iterate=False,
            bounds={"beta": POSITIVE},
        ),
        "cdpo": LossSpec(
            "cdpo",
            cdpo_loss,
            "conservative DPO: DPO under label flips of rate ε (Mitchell 2023)",
            needs_reference=True,
            length_normalized=False,
            needs_previous_iterate=False,
            bounds={"beta": POSITIVE, "label_smoothing": FLIP_RATE},
        ),
        "robust": LossSpec(
            "robust",
            robust_loss,
            "rDPO: unbiased DPO under label flips, ε in [0, 0.5) (Chowdhury+ 2024)",
            needs_reference=True,
            length_normalized=False,
            needs_previous_iterate=False,
            bounds={"beta": POSITIVE, "label_smoothing": Interval(0.0, 0.5, high_open=True)},
        ),
        "ipo": LossSpec(
            "ipo",
            ipo_loss,
            "IPO: (h̄ - 1/(2β))², length-averaged log-ratios (Azar+ 2023, Eq. 17)",
            needs_reference=True,
            length_normalized=True,
            needs_previous_iterate=False,
            bounds={"beta": POSITIVE},
        ),
        "hinge": LossSpec(
            "hinge",
            hinge_loss,
            "SLiC-HF hinge: max(0, 1 - βh) on summed log-ratios (Zhao+ 2023)",
            needs_reference=True,
            length_normalized=False,
            needs_previous_iterate=False,
            bounds={"beta": POSITIVE},
        ),
        "simpo": LossSpec(
            "simpo",
            simpo_loss,
            "SimPO: reference-free -log σ(βΔavg logπ - γ) (Meng+ 2024, Eq. 6)",
            needs_reference=False,
            length_normalized=True,
            needs_previous_iterate=False,
            bounds={"beta": POSITIVE, "gamma_beta_ratio": NON_NEGATIVE, "label_smoothing": FLIP_RATE},
        ),
        "simpo_hinge": LossSpec(
            "simpo_hinge",
            simpo_hinge_loss,
            "SimPO hinge: max(0, 1 - β(Δavg logπ - γ/β)), reference-free",
            needs_reference=False,
            length_normalized=True,
            needs_previous_iterate=False,
            bounds={"beta": POSITIVE, "gamma_beta_ratio": NON_NEGATIVE},
        ),
        "inpo": LossSpec(
            "inpo",
            inpo_loss,
            "INPO: (Δπ - aΔref - (1-a)Δπ_t - c)², a=τ/η, c=1/(2η) (Zhang+ 2024)",
            needs_reference=True,
            length_normalized=False,
            needs_previous_iterate=True,
            bounds={"ref_mix": UNIT, "target_margin": POSITIVE},
        ),
    },
    columns=("summary", "needs_reference", "length_normalized", "needs_previous_iterate", "params"),
)


# --------------------------------------------------------------------------------------------------
# Validation and the one entry point
# --------------------------------------------------------------------------------------------------


def check_loss_config(
    name: str, params: Mapping[str, Any], has_reference: bool, has_previous_iterate: bool, where: str = "loss"
) -> list[str]:
    """Every problem with choosing loss `name` with `params`, as human-readable lines (empty if fine).

    Called by config validation before any model loads. `has_reference`: a reference model (or
    precomputed reference log-probs) is configured; `has_previous_iterate`: the previous policy
    iterate's log-probs will be available. `where` prefixes each line with the config path.
    """
    if name not in LOSSES:
        return [
            f"{where}.name: unknown loss '{name}'{did_you_mean(name, LOSSES.names())}; "
            f"choose one of: {', '.join(LOSSES.names())} (see `align ls losses`)"
        ]
    spec = LOSSES[name]
    problems = spec.problems(params, f"{where}.params")
    if spec.needs_reference and not has_reference:
        problems.append(
            f"{where}.name: loss '{name}' needs a reference model but none is configured; "
            f"set one, or use a reference-free loss (simpo, simpo_hinge)"
        )
    if not spec.needs_reference and has_reference:
        problems.append(
            f"{where}.name: loss '{name}' is reference-free but a reference model is configured; "
            f"remove the reference (it would be loaded and never used)"
        )
    if spec.needs_previous_iterate and not has_previous_iterate:
        problems.append(
            f"{where}.name: loss '{name}' needs the previous policy iterate's log-probs "
            f"(an online/iterative recipe provides them); offline, use 'ipo' (INPO with ref_mix=1)"
        )
    return problems


def compute_loss(name: str, params: Mapping[str, Any], logps: PairLogps) -> LossOutput:
    """Look `name` up in `LOSSES`, validate `params`, and compute the loss on `logps` (tensors (B,)).

    Missing params take the function's defaults. Unknown names, unknown params and out-of-range
    values raise `UserError`/`ConfigError` naming them. `sft_weight` > 0 adds
    `sft_weight · sft_nll(logps)` to the per-example losses (see `combine`).
    Returns a `LossOutput` whose tensors are all (B,).
    """
    spec = LOSSES[name]
    problems = spec.problems(params, "loss.params")
    if problems:
        raise ConfigError(problems, source=f"loss '{name}'")
    resolved = spec.defaults | dict(params)
    out = spec.fn(logps, **{k: v for k, v in resolved.items() if k not in COMMON_PARAMS})
    if resolved["sft_weight"]:
        out = combine(out, sft_nll(logps), resolved["sft_weight"])
    return out
