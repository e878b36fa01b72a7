"""What the reward-model recipes share (`rm_train`, `polar.train`, and the ensemble of `align rm strength`): the
trainer on packed pairs with a loss from `RM_LOSSES`, the rewards of tokenized pairs, and the reward statistics
saved beside a trained RM.

The reward is read at the last real token of each response by position (see `preference_data.packing`), never
at "the last non-pad token", which is wrong when pad == EOS (as in SmolLM2).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch
from transformers import Trainer

from prefalign.models.batch import Layout
from prefalign.models.forward import PackedForward, last_token_rewards, layout_for
from prefalign.models.precision import default_device
from prefalign.training.config import TrainSection
from prefalign.training.evaluation import accuracy_report
from prefalign.training.metrics import MetricsMixin
from prefalign.training.recipe import RecipeRun
from prefalign.training.trainer import TokenBudgetSteps, training_arguments
from preference_data.packing import PackCollator, PairDataset, pack_pairs

from .checkpoint import RewardStats, load_rm
from .losses import compute_rm_loss
from .rm_config import RMLossSection


@torch.no_grad()
def pair_rewards(
    model: torch.nn.Module,
    pairs: list[Any],
    pad_id: int,
    batch_size: int,
    row_tokens: int,
    autocast: bool,
    layout: Layout,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rewards (B,) of chosen and rejected for tokenized pairs, in order (no gradients: an evaluation's pass)."""
    rc, rr = [], []
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
        for s in range(0, len(pairs), batch_size):
            chunk = pairs[s : s + batch_size]
            r = last_token_rewards(model, pack_pairs(chunk, pad_id, row_tokens, layout).to(device))[:, 0].float().cpu()
            rc.append(r[: len(chunk)])
            rr.append(r[len(chunk) :])
    model.train(was_training)
    if not rc:
        return torch.zeros(0), torch.zeros(0)
    return torch.cat(rc), torch.cat(rr)


class RMTrainer(TokenBudgetSteps, MetricsMixin, Trainer):
    """`transformers.Trainer` on packed pairs with a loss from `RM_LOSSES` and held-out pair accuracy."""

    def __init__(
        self,
        *args: Any,
        loss: RMLossSection,
        eval_pairs: list[Any],
        pad_id: int,
        row_tokens: int,
        layout: Layout,
        metrics_path: Path | None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.loss_cfg = loss
        self.eval_pairs = eval_pairs
        self.pad_id = pad_id
        self.row_tokens = row_tokens
        self.layout = layout
        self._init_metrics(metrics_path)

    @classmethod
    def on_pairs(
        cls,
        model: torch.nn.Module,
        run: RecipeRun,
        train: TrainSection,
        loss: RMLossSection,
        train_pairs: list[Any],
        eval_pairs: list[Any],
        pad_id: int,
        extra: tuple[str, ...] = (),
    ) -> RMTrainer:
        """The trainer of a recipe's run: `model` (a sequence-classification model) wrapped to give last-token
        rewards, packed pairs (`extra`: per-pair columns the batches carry, e.g. soft labels), held-out accuracy
        every `train.eval_every` steps."""
        return cls(
            model=PackedForward(model, "rewards"),
            args=training_arguments(train, str(run.checkpoints)),
            train_dataset=PairDataset(train_pairs),
            data_collator=PackCollator(
                pad_id, train.row_tokens, train.attention, extra, token_budget=train.token_budget
            ),
            loss=loss,
            eval_pairs=eval_pairs,
            pad_id=pad_id,
            row_tokens=train.row_tokens,
            layout=train.attention,
            metrics_path=run.metrics_path,
        )

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        B = int(inputs["num_pairs"])
        rewards = model(**inputs)[:, 0]  # (2B,) last-token rewards: chosen first, then rejected
        rc, rr = rewards[:B], rewards[B:]
        margins = inputs.get("margins")  # set per pair by `select_margins` (absent when no pair has one)
        # ambiguous pairs carry soft labels from `strength.soften_fraction` (absent without a strength file)
        out = compute_rm_loss(
            self.loss_cfg.name, self.loss_cfg.params, rc, rr, margins, label_smoothing=inputs.get("soft_alpha")
        )
        loss = out.losses.mean() * self.item_share  # a micro-batch of a batch cut by train.token_budget: its share
        self.stash(
            {
                "accuracy": out.accuracies.mean().item(),
                "margin": out.margins.mean().item(),
                "reward_mean": out.reward_mean.item(),
                "reward_std": out.reward_std.item(),
                "tokens": float(inputs["real_tokens"]),
            }
        )
        return (loss, {"rewards": rewards}) if return_outputs else loss

    def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix="eval"):
        if not self.eval_pairs:
            return {}
        rc, rr = pair_rewards(
            self.model.model,
            self.eval_pairs,
            self.pad_id,
            self.args.per_device_eval_batch_size,
            self.row_tokens,
            self.args.bf16,
            self.layout,
        )
        rep = accuracy_report(self.eval_pairs, rc, rr)
        losses = compute_rm_loss(self.loss_cfg.name, self.loss_cfg.params, rc, rr).losses
        metrics = {
            f"{metric_key_prefix}_loss": losses.mean().item(),
            f"{metric_key_prefix}_accuracy": rep["accuracy"],
            f"{metric_key_prefix}_margin": rep["margin"],
        }
        self.log(metrics)
        self.last_eval_report = rep
        return metrics


def train_pair_rewards(
    model: torch.nn.Module, pairs: list[Any], pad_id: int, train: TrainSection
) -> tuple[torch.Tensor, torch.Tensor]:
    """`pair_rewards` with the run's batch size, row length, layout and precision (bf16 autocast under bf16)."""
    return pair_rewards(
        model, pairs, pad_id, train.batch_size, train.row_tokens, train.precision == "bf16", train.attention
    )


def reward_statistics(
    model: torch.nn.Module, sample: list[Any], pad_id: int, train: TrainSection, computed_on: str
) -> tuple[RewardStats, dict[str, Any]]:
    """The mean and population std of the rewards of both sides of `sample` (saved beside the RM, so a scorer
    can normalise), and the first 4 pairs' rewards (a reload must score them the same).

    Compiled layers run eager here: this one no-grad pass would otherwise compile the layers' inference graphs
    anew (seconds on a first run), about what compiling saves it."""
    with torch.compiler.set_stance("force_eager"):
        rc, rr = train_pair_rewards(model, sample, pad_id, train)
    both = torch.cat([rc, rr])
    stats = RewardStats(
        mean=both.mean().item(), std=both.std(correction=0).item(), n=len(both), num_labels=1, computed_on=computed_on
    )
    first = {"ids": [p.id for p in sample[:4]], "chosen": rc[:4].tolist(), "rejected": rr[:4].tolist()}
    return stats, first


def saved_reward_statistics(
    model_dir: str | Path, sample: list[Any], pad_id: int, train: TrainSection, computed_on: str
) -> tuple[RewardStats, dict[str, Any]]:
    """`reward_statistics` of the RM saved in `model_dir`, read back in fp32 as its model card's recipe and the
    scorers' default read it: the statistics a user normalises with are those of the scores they get, whatever
    precision the RM trained in."""
    model, _, _ = load_rm(str(model_dir), dtype="float32")
    device = default_device()
    model.to(device)
    fp32 = dataclasses.replace(train, precision="fp32", attention=layout_for(model, device=device))
    return reward_statistics(model, sample, pad_id, fp32, computed_on)


PLOT_KEYS = ["loss", "accuracy", "margin", "reward_mean", "reward_std"]
"""The training curves of a reward model's run report."""


__all__ = [
    "PLOT_KEYS",
    "RMTrainer",
    "pair_rewards",
    "reward_statistics",
    "saved_reward_statistics",
    "train_pair_rewards",
]
