"""The config of `align train` with a pairwise loss (`kind: dpo`, the offline DPO family): the loss, the reference and
previous-iterate models, the alerts and the recipe; what each does is beside the field and in `align/train.py`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from prefalign.config import MODEL_ALIASES, OUTPUT_DIR_ALIASES, Alias, option
from prefalign.models.hub import DEFAULT_MODEL
from prefalign.training.config import HeldOutSection as EvalSection
from prefalign.training.config import LoraSection, TrainSection
from preference_data.sources import DataConfig

from .losses import LOSSES, check_loss_config

ReferenceKind = Literal["auto", "adapters_disabled", "precomputed", "none"]


@dataclass
class LossSection:
    name: str = option(
        "sigmoid",
        "preference loss (see `align ls losses`)",
        aliases={"loss_type": Alias("TRL DPOConfig; its loss_type names are ours")},
        value_aliases={"dpo": "sigmoid"},
    )
    params: dict[str, Any] = option(
        factory=dict,
        doc="loss parameters, e.g. {beta: 0.1}; every loss also takes "
        "sft_weight (NLL of the chosen response per token)",
        aliases={
            "beta": Alias("TRL, OpenRLHF: the same β"),
            "rpo_alpha": Alias("TRL: the weight of the chosen response's per-token NLL", entry="sft_weight"),
        },
    )
    pair_weights: Literal["uniform", "margin"] = option(
        "uniform",
        "how the batch mean weights pairs: uniform, or margin: each pair's loss times its `margin` (the reward gap "
        "an iterative round's ranking recorded, or a rating gap in the data) over the training pairs' mean margin, "
        "so the pairs the reward separates most count most and the mean weight stays 1",
    )


@dataclass
class ReferenceSection:
    kind: ReferenceKind = option("auto", "auto | adapters_disabled | precomputed | none (see the module docstring)")
    model: str | None = option(None, "reference model (default: the initial policy `model`)")


@dataclass
class PreviousSection:
    model: str | None = option(
        None,
        "INPO's previous iterate π_t: the policy that generated these pairs "
        "(builtin:<name>, a local directory, or a hub id)",
    )


@dataclass
class AlertsSection:
    chosen_logp_drop: float = option(
        0.5,
        "alert when the policy's log-prob per token of the batch's chosen responses falls this many nats below the "
        "reference's for the same responses (log_ratio/chosen_per_token; needs a reference; 0 = off)",
    )

    def check(self) -> list[str]:
        return [f"chosen_logp_drop: must be >= 0, got {self.chosen_logp_drop}"] if self.chosen_logp_drop < 0 else []


@dataclass
class TrainConfig:
    kind: Literal["train"] = option("train", "config kind (fixed)")
    model: str = option(
        DEFAULT_MODEL,
        "initial policy: builtin:<name>, a local directory, or a hub id",
        aliases=MODEL_ALIASES,
    )
    output_dir: str = option(
        "runs/dpo",
        "run directory (config, metrics, report, checkpoints, adapter/merged/model)",
        aliases=OUTPUT_DIR_ALIASES,
    )
    data: DataConfig = option(factory=DataConfig, doc="training pairs")
    eval: EvalSection = option(factory=EvalSection, doc="held-out implicit-reward accuracy")
    loss: LossSection = option(factory=LossSection, doc="the preference loss")
    reference: ReferenceSection = option(factory=ReferenceSection, doc="the reference policy π_ref")
    previous: PreviousSection = option(factory=PreviousSection, doc="the previous iterate π_t (INPO)")
    train: TrainSection = option(factory=TrainSection, doc="optimisation settings")
    lora: LoraSection = option(factory=LoraSection, doc="LoRA settings (train.method: lora)")
    alerts: AlertsSection = option(factory=AlertsSection, doc="training-health alerts")
    save_merged: bool = option(True, "with LoRA, also save the adapter merged into the base under output_dir/merged")

    def check(self) -> list[str]:
        name, ref = self.loss.name, self.reference
        if name not in LOSSES:
            return check_loss_config(name, self.loss.params, True, True)
        spec = LOSSES[name]
        # name and params through the loss table; reference / previous-iterate needs are reported below
        # against the fields that provide them
        problems = check_loss_config(name, self.loss.params, spec.needs_reference, True)
        if spec.needs_reference and ref.kind == "none":
            problems.append(
                f"reference.kind: loss '{name}' needs a reference policy but reference.kind is none; use "
                "auto (adapters disabled under LoRA, precomputed otherwise), or a reference-free loss "
                "(simpo, simpo_hinge)"
            )
        if not spec.needs_reference and (ref.kind in ("adapters_disabled", "precomputed") or ref.model is not None):
            given = f"reference.kind: {ref.kind}" if ref.kind != "auto" else f"reference.model: {ref.model}"
            problems.append(
                f"reference: loss '{name}' is reference-free but a reference is configured ({given}); "
                "set reference.kind: none and reference.model: null"
            )
        if spec.needs_reference and ref.kind == "adapters_disabled":
            if self.train.method != "lora":
                problems.append(
                    "reference.kind: adapters_disabled needs train.method: lora (with full fine-tuning "
                    "use precomputed or auto)"
                )
            if ref.model not in (None, self.model):
                problems.append(
                    f"reference.model: with reference.kind adapters_disabled the reference is the base "
                    f"model '{self.model}'; set reference.model: null, or reference.kind: precomputed "
                    f"to use '{ref.model}'"
                )
        if spec.needs_previous_iterate and spec.needs_reference and ref.model is None:
            problems.append(
                f"reference.model: loss '{name}' compares the policy with a reference π_ref and the "
                "previous iterate π_t; name the reference explicitly (usually the initial policy, e.g. "
                f"reference.model: {self.model}). Left empty it would be `model`, which on later "
                "iterations is the previous iterate, not π_ref"
            )
        if spec.needs_previous_iterate and self.previous.model is None:
            problems.append(
                f"previous.model: loss '{name}' needs the previous iterate π_t (the policy that generated "
                "these pairs; the initial policy on the first iteration); set previous.model"
            )
        if not spec.needs_previous_iterate and self.previous.model is not None:
            problems.append(f"previous.model: loss '{name}' does not use a previous iterate; set previous.model: null")
        return problems


def reference_mode(cfg: TrainConfig) -> Literal["adapters_disabled", "precomputed", "none"]:
    """How the run gets log π_ref (resolves `auto`; see the module docstring)."""
    if not LOSSES[cfg.loss.name].needs_reference:
        return "none"
    if cfg.reference.kind != "auto":
        return cfg.reference.kind
    if cfg.train.method == "lora" and cfg.reference.model in (None, cfg.model):
        return "adapters_disabled"
    return "precomputed"


# --- the trainer -------------------------------------------------------------------------------------


__all__ = [
    "AlertsSection",
    "LossSection",
    "PreviousSection",
    "ReferenceKind",
    "ReferenceSection",
    "TrainConfig",
    "reference_mode",
]
