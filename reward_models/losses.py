"""Bradley-Terry reward-model losses: pure functions over scalar rewards, chosen through `RM_LOSSES`.

Every loss has the same call, `fn(r_chosen, r_rejected, margins=None, *, <params>) -> RMLossOutput`:

    out  = compute_rm_loss("bradley_terry", {"center_rewards_coefficient": 0.01}, r_chosen, r_rejected)
    loss = out.losses.mean()      # () scalar to backprop; equals TRL RewardTrainer's loss

Conventions (reference/reward-models.md §1–2):

- `r_chosen`, `r_rejected` (B,) are the scalar head's outputs for the two responses of each pair.
- Δ = r_chosen − r_rejected − m, where m (B,) is the pair's required margin: the data's per-pair
  `margin` column plus the fixed `margin` parameter (both 0 unless given). Every loss here uses the
  same Δ. The papers define margins only for plain BT; using them with label smoothing and focal
  weighting is this toolkit's choice ("Secrets of RLHF II" does combine soft labels with margins).
- Every loss here is a function of Δ, L(Δ). Soft labels (per pair, `compute_rm_loss(label_smoothing=α)`)
  say a pair is preferred the other way with probability α_i: its loss is (1 − α_i)·L(Δ_i) + α_i·L(−Δ_i),
  margin included, whatever the loss (Secrets of RLHF II softens ambiguous pairs so; for BT this is
  `label_smoothed` with a per-pair α).
- Reward centering (Eisenstein et al. 2023, arXiv 2312.09244, Eq. 2) is the `center_rewards_coefficient`
  parameter every loss accepts; its per-example form η·(r_c + r_r)² is added to each pair's loss, so
  the batch mean is TRL's `loss + η·mean((r_c + r_r)²)` exactly.
- Diagnostics are detached: accuracy counts a tie as wrong (strict r_c > r_r, as TRL and the official
  RewardBench), margins are r_c − r_r without m, and reward mean/std are over all 2B rewards.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from prefalign.errors import ConfigError, did_you_mean
from prefalign.registry import NON_NEGATIVE, REAL, FunctionSpec, Interval, Table


class RMLossOutput(NamedTuple):
    """Per-pair losses plus detached diagnostics. Train on `losses.mean()`."""

    losses: Tensor  # (B,) per-pair loss, differentiable
    margins: Tensor  # (B,) r_chosen − r_rejected, detached (the required margin m not subtracted)
    accuracies: Tensor  # (B,) 1.0 where r_chosen > r_rejected strictly (a tie counts wrong), else 0.0
    reward_mean: Tensor  # () mean of all 2B rewards, detached
    reward_std: Tensor  # () population std (correction 0) of all 2B rewards, detached

    @property
    def accuracy(self) -> Tensor:
        """() fraction of pairs ranked strictly correctly."""
        return self.accuracies.mean()

    @property
    def margin_mean(self) -> Tensor:
        """() mean of r_chosen − r_rejected (TRL's logged `margin`)."""
        return self.margins.mean()


def _delta(r_chosen: Tensor, r_rejected: Tensor, margins: Tensor | float | None) -> Tensor:
    """Δ = r_c − r_r − m, shape (B,)."""
    delta = r_chosen - r_rejected
    return delta if margins is None else delta - margins


def _output(losses: Tensor, r_chosen: Tensor, r_rejected: Tensor) -> RMLossOutput:
    r_c, r_r = r_chosen.detach(), r_rejected.detach()
    rewards = torch.cat([r_c, r_r])  # (2B,) chosen rows first
    return RMLossOutput(losses, r_c - r_r, (r_c > r_r).to(losses.dtype), rewards.mean(), rewards.std(correction=0))


def bradley_terry_loss(r_chosen: Tensor, r_rejected: Tensor, margins: Tensor | float | None = None) -> RMLossOutput:
    """Bradley-Terry: L = −log σ(r_c − r_r − m).

    Ouyang et al. 2022 (InstructGPT), Eq. 1, with the margin of Touvron et al. 2023 (Llama 2), Eq. 2;
    TRL `RewardTrainer.compute_loss`. Inputs: r_chosen, r_rejected (B,), margins m (B,), a float or
    None. Returns losses (B,) and diagnostics.
    """
    return _output(-F.logsigmoid(_delta(r_chosen, r_rejected, margins)), r_chosen, r_rejected)


def label_smoothed_loss(
    r_chosen: Tensor, r_rejected: Tensor, margins: Tensor | float | None = None, *, label_smoothing: float = 0.1
) -> RMLossOutput:
    """Label-smoothed BT: L = −[(1−α) log σ(Δ) + α log σ(−Δ)], Δ = r_c − r_r − m.

    Wang et al. 2024, "Secrets of RLHF in Large Language Models Part II: Reward Modeling"
    (arXiv 2401.06080), label smoothing L_LS (log(1 − σ(Δ)) = log σ(−Δ)). α ∈ [0, 0.5]; α = 0 is
    `bradley_terry`. Default 0.1 is this toolkit's choice (the paper's value is not verified).
    Inputs (B,) as `bradley_terry`; returns losses (B,).
    """
    delta = _delta(r_chosen, r_rejected, margins)  # (B,)
    losses = -(1 - label_smoothing) * F.logsigmoid(delta) - label_smoothing * F.logsigmoid(-delta)
    return _output(losses, r_chosen, r_rejected)


def focal_loss(
    r_chosen: Tensor, r_rejected: Tensor, margins: Tensor | float | None = None, *, gamma: float = 2.0
) -> RMLossOutput:
    """Focal ranking loss: L = (1 − p)^γ · (−log σ(Δ)), p = 2·relu(σ(Δ) − 0.5), Δ = r_c − r_r − m.

    Cai et al. 2024, "InternLM2 Technical Report" (arXiv 2403.17297), the reward model's focal
    ranking loss, as implemented in xtuner `RewardModel.focal_loss` (γ = 2 there). Pairs already
    ranked with confidence (σ(Δ) → 1) are down-weighted; wrongly ranked pairs (σ(Δ) ≤ 0.5, p = 0) keep
    the full BT loss. As in xtuner the weight (1 − p)^γ is not detached: gradients flow through it.
    γ = 0 is `bradley_terry`. Inputs (B,) as `bradley_terry`; returns losses (B,).
    """
    delta = _delta(r_chosen, r_rejected, margins)  # (B,)
    p = 2 * torch.relu(torch.sigmoid(delta) - 0.5)  # (B,) in [0, 1)
    return _output((1 - p) ** gamma * -F.logsigmoid(delta), r_chosen, r_rejected)


def centering_penalty(r_chosen: Tensor, r_rejected: Tensor) -> Tensor:
    """Per-pair reward-centering penalty (r_c + r_r)², shape (B,).

    Eisenstein et al. 2023, "Helping or Herding? Reward Model Ensembles Mitigate but do not Eliminate
    Reward Hacking" (arXiv 2312.09244), Eq. 2; TRL adds η·mean((r_c + r_r)²) to the loss
    (`center_rewards_coefficient` η, suggested 0.01). Its batch mean times η is TRL's term.
    """
    return (r_chosen + r_rejected) ** 2


# --------------------------------------------------------------------------------------------------
# The table
# --------------------------------------------------------------------------------------------------

COMMON_RM_PARAMS: dict[str, tuple[float, Interval, str]] = {
    # name: (default, allowed range, meaning); accepted by every RM loss, applied by `compute_rm_loss`.
    "margin": (0.0, REAL, "fixed margin m added to every pair's (data) margin; Δ = r_c − r_r − m"),
    "center_rewards_coefficient": (
        0.0,
        NON_NEGATIVE,
        "η of reward centering, η·(r_c + r_r)² per pair (TRL suggests 0.01)",
    ),
}


@dataclasses.dataclass(frozen=True)
class RMLossSpec(FunctionSpec):
    """One entry of `RM_LOSSES`. `params` and `defaults` are read from `fn`'s keyword-only arguments
    plus `COMMON_RM_PARAMS`; `bounds` gives each parameter's allowed range."""

    kind: ClassVar[str] = "reward-model loss"
    common: ClassVar[Mapping[str, tuple[Any, Interval, str]]] = COMMON_RM_PARAMS


RM_LOSSES: Table[RMLossSpec] = Table(
    "reward-model loss",
    {
        "bradley_terry": RMLossSpec(
            "bradley_terry", bradley_terry_loss, "Bradley-Terry: -log σ(r_c - r_r - m) (InstructGPT; TRL)"
        ),
        "label_smoothed": RMLossSpec(
            "label_smoothed",
            label_smoothed_loss,
            "BT, label smoothing: -(1-α)log σ(Δ) - α log σ(-Δ) (Secrets of RLHF II)",
            bounds={"label_smoothing": Interval(0.0, 0.5)},
        ),
        "focal": RMLossSpec(
            "focal",
            focal_loss,
            "focal BT: (1-p)^γ·(-log σ(Δ)), p = 2·relu(σ(Δ)-0.5) (InternLM2)",
            bounds={"gamma": NON_NEGATIVE},
        ),
    },
    columns=("summary", "params"),
)


def check_rm_loss_config(name: str, params: Mapping[str, Any], where: str = "reward_model.loss") -> list[str]:
    """Every problem with choosing RM loss `name` with `params`, as human-readable lines (empty if fine)."""
    if name not in RM_LOSSES:
        return [
            f"{where}.name: unknown reward-model loss '{name}'{did_you_mean(name, RM_LOSSES.names())}; "
            f"choose one of: {', '.join(RM_LOSSES.names())} (see `align ls`)"
        ]
    return RM_LOSSES[name].problems(params, f"{where}.params")


def compute_rm_loss(
    name: str,
    params: Mapping[str, Any],
    r_chosen: Tensor,
    r_rejected: Tensor,
    margins: Tensor | None = None,
    label_smoothing: Tensor | None = None,
) -> RMLossOutput:
    """Look `name` up in `RM_LOSSES`, validate `params` and compute the loss; all tensors (B,).

    `margins` is the data's per-pair margin column (or None); the `margin` parameter is added to it.
    `label_smoothing` α (B,) in [0, 0.5] gives pairs soft labels: (1 − α)·L(Δ) + α·L(−Δ) per pair (module
    docstring); α = 0 keeps a pair's loss. `center_rewards_coefficient` η > 0 then adds η·(r_c + r_r)².
    """
    spec = RM_LOSSES[name]
    problems = check_rm_loss_config(name, params)
    if problems:
        raise ConfigError(problems, source=f"reward-model loss '{name}'")
    resolved = spec.defaults | dict(params)
    m: Tensor | float | None = margins
    if resolved["margin"]:
        m = resolved["margin"] if m is None else m + resolved["margin"]
    own = {k: v for k, v in resolved.items() if k not in COMMON_RM_PARAMS}
    out = spec.fn(r_chosen, r_rejected, m, **own)
    if label_smoothing is not None:
        # the same pair read the other way: rewards swapped and the margin negated turn Δ into −Δ
        flipped = spec.fn(r_rejected, r_chosen, None if m is None else -m, **own).losses
        alpha = label_smoothing.to(out.losses.dtype)
        out = out._replace(losses=(1 - alpha) * out.losses + alpha * flipped)
    if resolved["center_rewards_coefficient"]:
        out = out._replace(
            losses=out.losses + resolved["center_rewards_coefficient"] * centering_penalty(r_chosen, r_rejected)
        )
    return out
