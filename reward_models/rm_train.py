"""`align rm train`: a scalar Bradley-Terry reward model on any stage-1 source.

Reads top to bottom: config -> data (load, split, tokenize with an explicit length policy) -> model
(sequence-classification head on any causal LM; LoRA or full) -> train (transformers.Trainer with packed,
prefix-shared pairs) -> evaluate (accuracy overall and per source / family / corruption) -> save (a
directory `AutoModelForSequenceClassification` loads, with reward statistics and chat template) -> report.

The reward is read at the last real token of each response by position (see `preference_data.packing`),
never at "the last non-pad token", which is wrong when pad == EOS (as in SmolLM2).
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
from transformers import Trainer

from prefalign.config import option
from prefalign.errors import UserError
from prefalign.models.batch import Layout
from prefalign.models.hub import DEFAULT_MODEL
from prefalign.training.config import HeldOutSection, LoraSection, TrainSection
from prefalign.training.metrics import MetricsMixin
from preference_data.sources import DataConfig

from .losses import RM_LOSSES, check_rm_loss_config, compute_rm_loss


@dataclass
class RMLossSection:
    name: str = option("bradley_terry", "reward-model loss (see `align ls rm-losses`)")
    params: dict[str, float] = option(factory=dict, doc="loss parameters, e.g. {center_rewards_coefficient: 0.01}")
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
    model: str = option(DEFAULT_MODEL, "base model: builtin:<name>, a local directory, or a hub id")
    output_dir: str = option(
        "runs/rm", "run directory (config, metrics, report.html with its dashboard, checkpoints, model/)"
    )
    data: DataConfig = option(factory=DataConfig, doc="training data")
    eval: EvalSection = option(factory=EvalSection, doc="held-out evaluation")
    loss: RMLossSection = option(factory=RMLossSection, doc="the reward-model loss")
    train: TrainSection = option(factory=TrainSection, doc="optimisation settings")
    lora: LoraSection = option(factory=LoraSection, doc="LoRA settings (train.method: lora)")
    strength: StrengthSection = option(factory=StrengthSection, doc="noisy-label handling from preference strength")

    def check(self) -> list[str]:
        if self.strength.adaptive_margin and self.loss.margin != "none":
            return [
                f"strength.adaptive_margin: the ensemble's margin would replace loss.margin: {self.loss.margin}; "
                "use one of them (set loss.margin: none, or strength.adaptive_margin: false)"
            ]
        return []


# --- evaluation --------------------------------------------------------------------------------------

GROUP_KEYS = ("source", "family", "corruption")


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
    """Rewards (B,) of chosen and rejected for tokenized pairs, in order."""
    from prefalign.models.forward import last_token_rewards
    from preference_data.packing import pack_pairs

    rc, rr = [], []
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
        for s in range(0, len(pairs), batch_size):
            chunk = pairs[s : s + batch_size]
            r = last_token_rewards(model, pack_pairs(chunk, pad_id, row_tokens, layout).to(device))[:, 0].float().cpu()
            rc.append(r[: len(chunk)])
            rr.append(r[len(chunk) :])
    model.train(was_training)
    if not rc:
        return torch.zeros(0), torch.zeros(0)
    return torch.cat(rc), torch.cat(rr)


def accuracy_report(pairs: list[Any], rc: torch.Tensor, rr: torch.Tensor) -> dict[str, Any]:
    """Accuracy (ties count wrong) overall and per source / task family / corruption kind."""
    correct = (rc > rr).float()
    out: dict[str, Any] = {
        "pairs": len(pairs),
        "accuracy": correct.mean().item() if len(pairs) else float("nan"),
        "margin": (rc - rr).mean().item() if len(pairs) else float("nan"),
    }
    for key in GROUP_KEYS:
        groups: dict[str, list[float]] = defaultdict(list)
        for p, c in zip(pairs, correct.tolist(), strict=True):
            value = p.source if key == "source" else p.attributes.get(key)
            if value:
                groups[str(value)].append(c)
        if len(groups) > 0 and not (
            key == "source"
            and len(groups) == 1
            and len(pairs) > 0
            and all(p.source == pairs[0].source for p in pairs)
            and "family" in pairs[0].attributes
        ):
            out[f"by_{key}"] = {k: {"accuracy": sum(v) / len(v), "pairs": len(v)} for k, v in sorted(groups.items())}
    return out


# --- the trainer -------------------------------------------------------------------------------------


class RMTrainer(MetricsMixin, Trainer):
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

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        B = int(inputs["num_pairs"])
        rewards = model(**inputs)[:, 0]  # (2B,) last-token rewards: chosen first, then rejected
        rc, rr = rewards[:B], rewards[B:]
        margins = inputs.get("margins")  # set per pair by `select_margins` (absent when no pair has one)
        # ambiguous pairs carry soft labels from `strength.soften_fraction` (absent without a strength file)
        out = compute_rm_loss(
            self.loss_cfg.name, self.loss_cfg.params, rc, rr, margins, label_smoothing=inputs.get("soft_alpha")
        )
        loss = out.losses.mean()
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


def select_margins(pairs: list[Any], loss: RMLossSection) -> dict[str, Any]:
    """Set each tokenized pair's `margin` to what `loss.margin` asks for (in place) and say what was used.

    none: every margin cleared; column: the data's own margin (pairs without one get none); rating_gap: the
    pair builder's `rating_gap` attribute. Both scaled by `loss.margin_scale`.
    """
    have = 0
    for p in pairs:
        if loss.margin == "none":
            value = None
        elif loss.margin == "column":
            value = p.margin
        else:
            value = p.attributes.get("rating_gap")
        p.margin = None if value is None else float(value) * loss.margin_scale
        have += p.margin is not None
    if loss.margin != "none" and have == 0:
        what = "a `margin` field" if loss.margin == "column" else "a rating_gap (pairs built from rated data)"
        raise UserError(
            f"loss.margin: {loss.margin}, but none of the {len(pairs)} training pairs has {what}; "
            "check the data with `align data doctor`, or set loss.margin: none"
        )
    return {"margin": loss.margin, "scale": loss.margin_scale, "pairs_with_margin": have, "pairs": len(pairs)}


def _apply_strength(pairs: list[Any], cfg: StrengthSection) -> dict[str, int]:
    """Flip / soften / re-margin tokenized pairs by ensemble preference strength (lowest mean first)."""
    rows = {}
    for line in Path(cfg.file).read_text(encoding="utf-8").splitlines():  # type: ignore[arg-type]
        if line.strip():
            r = json.loads(line)
            rows[r["id"]] = r
    known = [p for p in pairs if p.id in rows]
    if not known:
        raise UserError(
            f"strength.file {cfg.file}: none of its ids match the training pairs; compute it with "
            "`align rm strength` on the same data config"
        )
    order = sorted(known, key=lambda p: rows[p.id]["mean"])
    n_flip = int(round(cfg.flip_fraction * len(order)))
    n_soft = int(round(cfg.soften_fraction * len(order)))
    for p in order[:n_flip]:
        p.chosen_ids, p.rejected_ids = p.rejected_ids, p.chosen_ids
        rows[p.id] = {**rows[p.id], "mean": -rows[p.id]["mean"]}
    for p in pairs:
        p.attributes["soft_alpha"] = 0.0
    for p in order[n_flip : n_flip + n_soft]:
        p.attributes["soft_alpha"] = cfg.soften_alpha
    if cfg.adaptive_margin:
        for p in known:
            p.margin = max(0.0, float(rows[p.id]["mean"]))
    return {
        "with_strength": len(known),
        "flipped": n_flip,
        "softened": n_soft,
        "without_strength": len(pairs) - len(known),
    }


PLOT_KEYS = ["loss", "accuracy", "margin", "reward_mean", "reward_std"]


def run(cfg: RMTrainConfig, resume: bool = False) -> dict[str, Any]:
    """Train, evaluate and save a reward model as `cfg` says; return the report (also written to report.json)."""
    from prefalign.models.forward import PackedForward
    from prefalign.models.hub import load_seq_cls, load_tokenizer, pad_token_id
    from prefalign.training.recipe import start_run
    from prefalign.training.trainer import base_dtype, prepare_model, training_arguments
    from preference_data.packing import PackCollator, PairDataset
    from preference_data.sources import load_pairs
    from preference_data.tokenize import tokenize_pairs

    from .checkpoint import RewardStats, save_rm

    run = start_run(cfg, cfg.train, "rm train", resume)

    # data
    tokenizer = load_tokenizer(cfg.model)
    train_raw, data_report = load_pairs(cfg.data)
    train_pairs, tok_report = tokenize_pairs(
        train_raw, tokenizer, cfg.train.max_length, cfg.train.length_policy, response_end="template"
    )
    if not train_pairs:
        raise UserError(
            f"no training pairs left after tokenization (max_length={cfg.train.max_length}, "
            f"policy={cfg.train.length_policy}): {tok_report.summary()}"
        )
    eval_pairs: list[Any] = []
    eval_tok: dict[str, Any] = {}
    if cfg.eval.split != "none":
        from preference_data.sources import load as load_source

        ecfg = cfg.eval.data_config(cfg.data)
        eraw = load_source(ecfg).pairs
        eval_pairs, erep = tokenize_pairs(
            eraw, tokenizer, cfg.train.max_length, cfg.train.length_policy, response_end="template"
        )
        eval_tok = erep.to_dict()
    run.save_data_report(
        {"data": data_report.to_dict(), "tokenization": tok_report.to_dict(), "eval_tokenization": eval_tok}
    )
    margin_report = select_margins(train_pairs, cfg.loss)
    strength_report = _apply_strength(train_pairs, cfg.strength) if cfg.strength.file else None

    # model
    model = load_seq_cls(cfg.model, num_labels=1, dtype=base_dtype(cfg.train))
    model.config.pad_token_id = tokenizer.pad_token_id
    model = prepare_model(model, cfg.train, cfg.lora, "SEQ_CLS", modules_to_save=["score"])

    # train
    pad_id = pad_token_id(tokenizer)
    extra = ("soft_alpha",) if cfg.strength.file else ()
    args = training_arguments(cfg.train, str(run.checkpoints))
    trainer = RMTrainer(
        model=PackedForward(model, "rewards"),
        args=args,
        train_dataset=PairDataset(train_pairs),
        data_collator=PackCollator(pad_id, cfg.train.row_tokens, cfg.train.attention, extra),
        loss=cfg.loss,
        eval_pairs=eval_pairs,
        pad_id=pad_id,
        row_tokens=cfg.train.row_tokens,
        layout=cfg.train.attention,
        metrics_path=run.metrics_path,
    )
    trained = run.train(trainer, cfg.train, evaluates=bool(eval_pairs))
    if not trainer.is_world_process_zero():
        return {}

    # evaluate
    eval_report = {}
    if eval_pairs:
        trainer.evaluate()
        eval_report = trainer.last_eval_report

    # save, with reward statistics on (a sample of) the training data
    sample = train_pairs[: cfg.eval.stats_pairs]
    rc, rr = pair_rewards(
        model,
        sample,
        pad_id,
        cfg.train.batch_size,
        cfg.train.row_tokens,
        cfg.train.precision == "bf16",
        cfg.train.attention,
    )
    allr = torch.cat([rc, rr])
    sample_rewards = {"ids": [p.id for p in sample[:4]], "chosen": rc[:4].tolist(), "rejected": rr[:4].tolist()}
    stats = RewardStats(
        mean=allr.mean().item(),
        std=allr.std(correction=0).item(),
        n=len(allr),
        num_labels=1,
        computed_on=f"{len(sample)} training pairs of {cfg.data.source}",
    )
    card = {
        "base model": cfg.model,
        "method": cfg.train.method,
        "loss": cfg.loss.name,
        "training data": f"{cfg.data.source} ({len(train_pairs)} pairs)",
        "precision": run.precision,
    }
    if eval_report:
        card["held-out accuracy"] = f"{eval_report['accuracy']:.3f} on {eval_report['pairs']} pairs"
    model_dir = save_rm(model, tokenizer, run.dir / "model", stats, card=card)

    # report
    return run.finish(
        {
            "model_dir": str(model_dir),
            "base_model": cfg.model,
            "method": cfg.train.method,
            "precision": run.precision,
            "train_pairs": len(train_pairs),
            **trained.to_dict(),
            "eval": eval_report,
            "data": data_report.to_dict(),
            "tokenization": tok_report.to_dict(),
            "eval_tokenization": eval_tok,
            "margins": margin_report,
            "strength": strength_report,
            "reward_stats": stats.__dict__,
            "sample_rewards": sample_rewards,
        },
        PLOT_KEYS,
    )


def summary_lines(report: dict[str, Any]) -> list[str]:
    ev = report.get("eval") or {}
    lines = [
        f"trained {report['method']} RM on {report['train_pairs']} pairs, {report['steps']} steps, "
        f"{report['train_seconds']}s ({report['pairs_per_second']} pairs/s)",
        f"saved to {report['model_dir']}",
    ]
    if ev:
        lines.append(f"held-out accuracy {ev['accuracy']:.3f} on {ev['pairs']} pairs (margin {ev['margin']:.3f})")
        for key in GROUP_KEYS:
            for name, v in (ev.get(f"by_{key}") or {}).items():
                lines.append(f"  {key} {name}: {v['accuracy']:.3f} ({v['pairs']} pairs)")
    return lines


__all__ = ["RMTrainConfig", "run", "pair_rewards", "accuracy_report", "summary_lines", "RM_LOSSES", "field"]
