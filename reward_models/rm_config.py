"""The config of the Bradley-Terry reward-model recipe (`align rm train`, kind rm_train; `reward_models.rm_train`),
apart from the recipe: the ensemble of `align rm strength` nests it (`reward_models.strength.StrengthConfig.base`)
and the POLAR recipe takes its loss section.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from prefalign.config import MODEL_ALIASES, OUTPUT_DIR_ALIASES, Alias, option
from prefalign.models.hub import DEFAULT_MODEL
from prefalign.training.config import HeldOutSection, LoraSection, TrainSection
from preference_data.sources import DataConfig

from .losses import check_rm_loss_config


@dataclass
class RMLossSection:
    name: str = option("bradley_terry", "reward-model loss (see `align ls rm-losses`)")
    params: dict[str, float] = option(
        factory=dict,
        doc="loss parameters, e.g. {center_rewards_coefficient: 0.01}",
        aliases={"center_rewards_coefficient": Alias("TRL RewardConfig: the same coefficient")},
    )
    margin: Literal["none", "column", "rating_gap"] = option(
        "none",
        "per-pair margin m subtracted from r_c - r_r (Llama 2, eq. 2): none; column = the data's own "
        "`margin` field (TRL-format data); rating_gap = the score gap a pair builder recorded for rated "
        "data (UltraFeedback-style), times margin_scale. `align data doctor` shows which pairs carry which",
    )
    margin_scale: float = option(1.0, "factor applied to the per-pair margin (e.g. 0.25 for 1-10 rating gaps)")

    def check(self) -> list[str]:
        problems = [p.removeprefix("loss.") for p in check_rm_loss_config(self.name, self.params, where="loss")]
        if self.margin_scale < 0:
            problems.append(f"margin_scale: must be >= 0, got {self.margin_scale}")
        return problems


@dataclass
class StrengthSection:
    file: str | None = option(None, "per-pair preference strength from `align rm strength` (JSONL: id, mean, std)")
    flip_fraction: float = option(0.0, "swap chosen/rejected for this lowest fraction by mean strength")
    soften_fraction: float = option(
        0.0,
        "give the next-lowest fraction (ambiguous pairs) soft labels: the configured "
        "loss, its margin and centering kept (see reward_models/losses.py)",
    )
    soften_alpha: float = option(0.3, "soft label α of softened pairs: (1 - α)·L(Δ) + α·L(-Δ)")
    adaptive_margin: bool = option(False, "use the ensemble's mean reward difference as each pair's margin")

    def check(self) -> list[str]:
        problems = []
        if not 0 <= self.flip_fraction + self.soften_fraction <= 1:
            problems.append("flip_fraction + soften_fraction: must lie in [0, 1]")
        if not 0 <= self.soften_alpha <= 0.5:
            problems.append(f"soften_alpha: must lie in [0, 0.5], got {self.soften_alpha}")
        if self.file is None and (self.flip_fraction or self.soften_fraction or self.adaptive_margin):
            problems.append("file: flip/soften/adaptive_margin need a strength file from `align rm strength`")
        return problems


@dataclass
class EvalSection(HeldOutSection):
    stats_pairs: int = option(256, "training pairs used to compute the saved reward mean/std")


@dataclass
class RMTrainConfig:
    kind: Literal["rm_train"] = option("rm_train", "config kind (fixed)")
    model: str = option(
        DEFAULT_MODEL,
        "base model: builtin:<name>, a local directory, or a hub id",
        aliases=MODEL_ALIASES,
    )
    output_dir: str = option(
        "runs/rm",
        "run directory (config, metrics, report.html with its dashboard, checkpoints, model/)",
        aliases=OUTPUT_DIR_ALIASES,
    )
    data: DataConfig = option(factory=DataConfig, doc="training data")
    eval: EvalSection = option(factory=EvalSection, doc="held-out evaluation")
    loss: RMLossSection = option(factory=RMLossSection, doc="the reward-model loss")
    train: TrainSection = option(factory=TrainSection, doc="optimisation settings")
    lora: LoraSection = option(factory=LoraSection, doc="LoRA settings (train.method: lora)")
    strength: StrengthSection = option(factory=StrengthSection, doc="noisy-label handling from preference strength")
    save: Literal["merged", "adapter"] = option(
        "merged",
        "how a LoRA RM is saved: merged = one whole model (train.save_precision), loaded by plain transformers "
        "alone; adapter = the LoRA adapter and score head (a few MB instead of the whole model's 517 MB at 135M in "
        "fp32) with the precision its base trained in, which every scorer here merges in fp32 on loading: the "
        "same weights, bit for bit, as merged with train.save_precision: fp32 (peft and the base model needed "
        "to load it elsewhere; its model card shows how)",
    )

    def check(self) -> list[str]:
        problems = []
        if self.strength.adaptive_margin and self.loss.margin != "none":
            problems.append(
                f"strength.adaptive_margin: the ensemble's margin would replace loss.margin: {self.loss.margin}; "
                "use one of them (set loss.margin: none, or strength.adaptive_margin: false)"
            )
        if self.save == "adapter" and self.train.method != "lora":
            problems.append(
                f"save: adapter needs train.method: lora (a {self.train.method} fine-tune has no adapter); "
                "use save: merged"
            )
        return problems


__all__ = ["EvalSection", "RMLossSection", "RMTrainConfig", "StrengthSection"]
