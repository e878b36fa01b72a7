"""`align train`: offline preference optimization (DPO family, IPO, SimPO, an INPO step) on any stage-1 source.

Reads top to bottom: config (validated, loss included, before any model loads) -> data (load, split,
tokenize with an explicit length policy) -> policy (LoRA or full) -> frozen log-probs (reference and
previous iterate, precomputed and cached unless the reference is the LoRA base with adapters disabled;
only for the training pairs the run draws, one pass per model) -> train (transformers.Trainer on packed,
prefix-shared pairs; the loss comes only from `align.losses.compute_loss`) -> evaluate (implicit-reward
accuracy overall and per source / family / corruption) -> save (a peft adapter plus a merged copy, or the
full model; tokenizer with each) -> report.

Reference handling (`reference.kind`):
  auto               the loss decides: none for reference-free losses (SimPO); with LoRA and the reference
                     being the initial policy, `adapters_disabled`; otherwise `precomputed`
  adapters_disabled  the same packed batch runs through the same model under peft's `disable_adapter()`
                     and `torch.no_grad()`: the frozen base is the reference, no second copy in memory
  precomputed        log π_ref computed once before training (`align.reference`), cached on disk and
                     carried into batches as per-pair columns; the reference model is freed before training
  none               no reference (reference-free losses only)
INPO's previous iterate π_t (`previous.model`) is precomputed the same way, with two exceptions where it is
the reference's model (`align.reference.same_model`; INPO's first iteration, π_t = π_ref = the initial policy):
with a precomputed reference one pass fills both roles' columns, and with the adapters-disabled reference
the trainer reuses that forward's numbers as π_t's (no precomputed pass at all: the adapters-disabled
forward runs for π_ref anyway, so π_t costs nothing, and no column is carried).

Precomputed columns cover only the training pairs the run draws: a run shorter than an epoch
(`train.max_steps`, or `train.epochs` below 1) draws steps x batch_size x grad_accum x processes pairs,
known before training from the trainer's seeded sampler (`prefalign.training.trainer.drawn_indices`).
The trainer keeps the whole training set and its own order, so the run trains exactly as it would with
columns on every pair (same batches, schedule, logged epochs and `--resume`); the held-out pairs all get
columns. The report says how many training pairs got frozen log-probs (`frozen_train_pairs`) out of
`train_pairs`.

Logged per optimizer step (averaged over the micro-batches between log steps), TRL's names where TRL
has them: loss, logps/{chosen,rejected} (summed per sequence), rewards/{chosen,rejected,margins,accuracies}
(the loss's implicit rewards), lengths/{chosen,rejected} (response tokens), logps/chosen_per_token, and
log_ratio/per_token: the mean per-token log-ratio log π_θ − log π_ref over all chosen and rejected tokens of
the batch. It is not a KL: the tokens come from the data, not from π_θ, so it does not estimate
KL(π_θ‖π_ref) (which needs samples from π_θ, as the online stage's `kl` has) and it goes negative when the
policy lowers the data's likelihood (DPO lowers the rejected responses'); it shows how far the policy has
moved on the training responses, and the run report says so beside it. log_ratio/chosen_per_token is the same
over the chosen tokens alone. An alert fires (printed once, kept in the report) when it falls below
−`alerts.chosen_logp_drop` nats: the policy gives the preferred responses less probability than the reference
gives the very same responses. DPO-style losses can raise the margin by pushing both responses down ("likelihood
displacement"). The alert compares the two models on one batch; the per-token log-prob of one batch against
another's says nothing (batches differ by more than a nat from their lengths and wording alone). A loss without
a reference (SimPO) has nothing to compare with and raises no such alert.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import Trainer

from prefalign.errors import UserError
from prefalign.models.forward import PackedForward
from prefalign.models.hub import load_model, load_tokenizer, pad_token_id
from prefalign.training.evaluation import accuracy_report, group_lines
from prefalign.training.metrics import MetricsMixin
from prefalign.training.recipe import RecipeRun, save_policy, start_run
from prefalign.training.trainer import (
    InnerModelCheckpoints,
    TokenBudgetSteps,
    apply_lora,
    base_dtype,
    compile_layers,
    disable_dropout,
    drawn_indices,
    saved_dtype,
    training_arguments,
    whole_state_dict,
)
from preference_data.packing import PackCollator, PairDataset
from preference_data.training_pairs import load_training_pairs

from .losses import LOSSES, LossOutput, PairLogps, compute_loss
from .reference import columns, frozen_logps, same_model
from .train_config import (
    LossSection,
    TrainConfig,
    reference_mode,
)

PLOT_KEYS = [
    "loss",
    "logps/chosen",
    "logps/rejected",
    "rewards/chosen",
    "rewards/rejected",
    "rewards/margins",
    "rewards/accuracies",
    "lengths/chosen",
    "lengths/rejected",
    "logps/chosen_per_token",
    "log_ratio/per_token",
    "log_ratio/chosen_per_token",
]


def batch_diagnostics(logps: PairLogps, out: LossOutput) -> dict[str, float]:
    """Per-batch metrics from the loss inputs (B,) and its `LossOutput` (all detached)."""
    pc, pr = logps.policy_chosen_logps.detach(), logps.policy_rejected_logps.detach()
    assert logps.chosen_lengths is not None and logps.rejected_lengths is not None  # the trainer passes lengths
    lc, lr = logps.chosen_lengths.float(), logps.rejected_lengths.float()
    d = {
        "logps/chosen": pc.mean().item(),
        "logps/rejected": pr.mean().item(),
        "rewards/chosen": out.chosen_rewards.mean().item(),
        "rewards/rejected": out.rejected_rewards.mean().item(),
        "rewards/margins": out.margins.mean().item(),
        "rewards/accuracies": out.accuracies.mean().item(),
        "lengths/chosen": lc.mean().item(),
        "lengths/rejected": lr.mean().item(),
        "logps/chosen_per_token": (pc.sum() / lc.sum().clamp(min=1)).item(),
    }
    if logps.reference_chosen_logps is not None:
        assert logps.reference_rejected_logps is not None  # frozen log-probs come for both sides
        # Σ over sequences of the summed log-ratios / Σ tokens = mean per-token log-ratio on the data's tokens
        ratio = (pc - logps.reference_chosen_logps).sum() + (pr - logps.reference_rejected_logps).sum()
        d["log_ratio/per_token"] = (ratio / (lc.sum() + lr.sum()).clamp(min=1)).item()
        chosen_ratio = (pc - logps.reference_chosen_logps).sum() / lc.sum().clamp(min=1)
        d["log_ratio/chosen_per_token"] = chosen_ratio.item()
    return d


class PreferenceTrainer(InnerModelCheckpoints, TokenBudgetSteps, MetricsMixin, Trainer):
    """`transformers.Trainer` on packed pairs with a loss from `LOSSES`, frozen log-probs from the batch (or the
    adapters-disabled base) and held-out implicit-reward accuracy."""

    def __init__(
        self,
        *args: Any,
        loss: LossSection,
        ref_mode: str,
        use_previous: bool,
        eval_pairs: list[Any],
        alert_drop: float,
        metrics_path: Path | None,
        previous_is_reference: bool = False,
        margin_scale: float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.loss_cfg = loss
        self.margin_scale = margin_scale  # pair_weights margin: 1 / the training pairs' mean margin
        self.ref_mode = ref_mode
        self.use_previous = use_previous
        self.previous_is_reference = previous_is_reference  # π_t is π_ref's model: its numbers serve both
        self.eval_pairs = eval_pairs
        self.alert_drop = alert_drop
        self.last_eval_report: dict[str, Any] = {}
        self._init_metrics(metrics_path)

    def pair_logps(self, model: torch.nn.Module, inputs: dict[str, Any]) -> PairLogps:
        """Policy log-probs from `model` (the wrapped PackedForward) plus the frozen ones for this batch."""
        B = int(inputs["num_pairs"])
        logps = model(**inputs)  # (2B,) summed response log-probs: chosen, then rejected
        lengths = inputs["lengths"]  # (2B,) response tokens
        ref_c = ref_r = prev_c = prev_r = None
        if self.ref_mode == "adapters_disabled":
            # the same batch through the same wrapper with the LoRA adapters off: the base is π_ref
            wrapper = self.model  # the PackedForward this trainer was built with
            assert wrapper is not None
            peft_model: Any = wrapper.model  # adapters_disabled runs under LoRA: a peft model
            with torch.no_grad(), peft_model.disable_adapter():
                ref = wrapper(**inputs).detach()  # (2B,)
            ref_c, ref_r = ref[:B], ref[B:]
        elif self.ref_mode == "precomputed":
            c, r = columns("reference")
            ref_c, ref_r = inputs[c], inputs[r]
        if self.use_previous and self.previous_is_reference:
            prev_c, prev_r = ref_c, ref_r
        elif self.use_previous:
            c, r = columns("previous")
            prev_c, prev_r = inputs[c], inputs[r]
        for role, col in (("reference", ref_c), ("previous", prev_c)):
            if col is not None and bool(torch.isnan(col).any()):
                raise RuntimeError(
                    f"a batch holds pairs whose precomputed {role} log-probs are NaN: pairs without them (the run "
                    "drew others than `prefalign.training.trainer.drawn_indices` expected: a changed sampler in "
                    "transformers or accelerate?), or a frozen pass that gave NaN"
                )
        return PairLogps(logps[:B], logps[B:], ref_c, ref_r, lengths[:B], lengths[B:], prev_c, prev_r)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        logps = self.pair_logps(model, inputs)
        out = compute_loss(self.loss_cfg.name, self.loss_cfg.params, logps)
        losses = out.losses
        if self.margin_scale is not None:  # pair_weights: margin (every training pair has one: `margin_weights`)
            losses = losses * (inputs["margins"].to(losses) * self.margin_scale)
        loss = losses.mean() * self.item_share  # a micro-batch of a batch cut by train.token_budget: its share
        self.stash(batch_diagnostics(logps, out))
        return (loss, {"chosen_rewards": out.chosen_rewards}) if return_outputs else loss

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        super().log(logs, start_time)  # MetricsMixin adds the averaged batch metrics to `logs`
        ratio = logs.get("log_ratio/chosen_per_token")  # policy vs reference on the same chosen responses
        if ratio is not None and self.alert_drop > 0 and -ratio > self.alert_drop:
            self.alert(  # once per run (MetricsMixin keeps it in self.alerts and alerts.jsonl)
                "chosen_logp_drop",
                f"step {self.state.global_step}: the policy gives the chosen responses {-ratio:.3f} nats per token "
                f"less log-probability than the reference gives the same responses (log_ratio/chosen_per_token "
                f"{ratio:.3f}; alerts.chosen_logp_drop={self.alert_drop}). The policy is making the preferred "
                "responses less likely; consider a lower train.lr, a larger beta, or loss.params.sft_weight > 0",
            )

    @torch.no_grad()
    def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix="eval"):
        if not self.eval_pairs:
            return {}
        model = self.model
        was_training = model.training
        model.eval()
        rc, rr, losses = [], [], []
        bs = self.args.per_device_eval_batch_size
        with self.accelerator.autocast():
            for s in range(0, len(self.eval_pairs), bs):
                inputs = self._prepare_inputs(self.data_collator.pack(self.eval_pairs[s : s + bs]))
                out = compute_loss(self.loss_cfg.name, self.loss_cfg.params, self.pair_logps(model, inputs))
                rc.append(out.chosen_rewards.float().cpu())
                rr.append(out.rejected_rewards.float().cpu())
                losses.append(out.losses.float().cpu())
        model.train(was_training)
        rep = accuracy_report(self.eval_pairs, torch.cat(rc), torch.cat(rr))
        rep["loss"] = torch.cat(losses).mean().item()
        pre = metric_key_prefix  # eval_rewards/* join the training curves' dashboard panels
        metrics = {
            f"{pre}_loss": rep["loss"],
            f"{pre}_rewards/accuracies": rep["accuracy"],
            f"{pre}_rewards/margins": rep["margin"],
        }
        self.log(metrics)
        self.last_eval_report = rep
        return metrics


# --- the recipe --------------------------------------------------------------------------------------


@dataclass
class Setup:
    """Everything `run` needs once the data, the policy, the frozen log-probs and the trainer are ready."""

    run: RecipeRun  # the run directory, resolved precision and resume point
    trainer: PreferenceTrainer  # around PackedForward(policy, "logps")
    model: Any  # the policy itself (a peft model under LoRA)
    tokenizer: Any
    train_pairs: list[Any]
    eval_pairs: list[Any]
    reports: dict[str, Any]  # data / tokenization / frozen log-prob reports


def margin_weights(pairs: list[Any], source: str) -> dict[str, float]:
    """`pair_weights: margin`: the training pairs' mean margin (a pair's weight is its margin over it) and the
    largest weight; a pair without a finite, non-negative margin is an error naming it."""
    bad = [p for p in pairs if p.margin is None or not math.isfinite(p.margin) or p.margin < 0]
    if bad:
        ids = ", ".join(str(p.id) for p in bad[:5])
        raise UserError(
            f"{source}: loss.pair_weights: margin needs a finite margin >= 0 on every training pair; {len(bad)} of "
            f"{len(pairs)} lack one (ids {ids}{', ...' if len(bad) > 5 else ''}). Give the rows a `margin` field, "
            "or use pair_weights: uniform"
        )
    mean = sum(p.margin for p in pairs) / max(len(pairs), 1)
    if mean <= 0:
        raise UserError(f"{source}: loss.pair_weights: margin: every training pair's margin is 0 (nothing to weight)")
    return {"mean_margin": mean, "max_weight": max(p.margin for p in pairs) / mean}


def setup(cfg: TrainConfig, resume: bool = False) -> Setup:
    """Data, policy, frozen log-probs and trainer for `cfg` (everything before `trainer.train`)."""
    run = start_run(cfg, cfg.train, "train", resume)
    spec = LOSSES[cfg.loss.name]
    ref_mode = reference_mode(cfg)

    # data
    tokenizer = load_tokenizer(cfg.model)
    data = load_training_pairs(cfg.data, cfg.eval, tokenizer, cfg.train.max_length, cfg.train.length_policy)
    train_pairs, eval_pairs = data.train, data.eval
    pad_id = pad_token_id(tokenizer)
    weighting = margin_weights(train_pairs, cfg.data.source) if cfg.loss.pair_weights == "margin" else None

    # policy
    args = training_arguments(cfg.train, str(run.checkpoints))  # sets up the device (and the process group under DDP)
    weights_dtype = base_dtype(cfg.train)
    model = load_model(cfg.model, dtype=weights_dtype, merge=True)  # a LoRA policy (an adapter dir) merged first
    if cfg.train.disable_dropout:
        disable_dropout(model)  # before LoRA, so lora.dropout stays as configured

    # frozen log-probs, before any update (the initial policy's weights serve when it is the frozen model): one
    # pass per model, whatever roles it fills, over the training pairs the run draws and all held-out pairs
    frozen: list[tuple[list[str], str]] = []  # (roles, model)
    if ref_mode == "precomputed":
        frozen.append((["reference"], cfg.reference.model or cfg.model))
    previous_is_reference = False
    if spec.needs_previous_iterate:
        assert cfg.previous.model is not None  # required by `TrainConfig.check`
        if ref_mode == "adapters_disabled" and same_model(cfg.previous.model, cfg.model):
            previous_is_reference = True  # the adapters-disabled base is the initial policy: π_t = π_ref
        elif frozen and same_model(cfg.previous.model, frozen[0][1]):
            frozen[0][0].append("previous")
        else:
            frozen.append((["previous"], cfg.previous.model))
    drawn = drawn_indices(args, len(train_pairs)) if frozen else None
    frozen_train = train_pairs if drawn is None else [train_pairs[i] for i in drawn]
    frozen_reports: dict[str, dict[str, Any]] = {}
    for roles, ref in frozen:
        shared = frozen_logps(
            roles,
            ref,
            {"train": frozen_train, "eval": eval_pairs},
            precision=cfg.train.precision,
            weights_dtype=weights_dtype,
            max_length=cfg.train.max_length,
            length_policy=cfg.train.length_policy,
            pad_id=pad_id,
            row_tokens=cfg.train.row_tokens,
            layout=cfg.train.attention,
            batch_size=cfg.train.batch_size,
            device=args.device,
            model=model if same_model(ref, cfg.model) else None,
        )
        frozen_reports.update(dict.fromkeys(roles, shared))
    if previous_is_reference:
        frozen_reports["previous"] = {"model": cfg.previous.model, "from": "reference (adapters disabled)"}
    extra = tuple(c for roles, _ in frozen for role in roles for c in columns(role))

    if cfg.train.method == "lora":
        model = apply_lora(model, cfg.lora, "CAUSAL_LM", autocast=cfg.train.precision == "bf16")
    model.train()
    compile_layers(model, cfg.train)

    # trainer
    trainer = PreferenceTrainer(
        model=PackedForward(model, "logps"),
        args=args,
        train_dataset=PairDataset(train_pairs),
        # a pair without frozen columns (one the run was not expected to draw) gets NaN, refused in `pair_logps`: the
        # dataloader collates a batch ahead, so the batch after the last step may be such pairs and never be used
        data_collator=PackCollator(
            pad_id,
            cfg.train.row_tokens,
            cfg.train.attention,
            extra,
            missing=float("nan"),
            token_budget=cfg.train.token_budget,
        ),
        loss=cfg.loss,
        ref_mode=ref_mode,
        use_previous=spec.needs_previous_iterate,
        previous_is_reference=previous_is_reference,
        eval_pairs=eval_pairs,
        alert_drop=cfg.alerts.chosen_logp_drop,
        metrics_path=run.metrics_path,
        margin_scale=None if weighting is None else 1 / weighting["mean_margin"],
    )
    data_reports = data.reports()
    run.save_data_report(data_reports)
    reports = {
        **data_reports,
        "reference": {
            "mode": ref_mode,
            "model": (cfg.reference.model or cfg.model) if ref_mode != "none" else None,
            **frozen_reports.get("reference", {}),
        },
        "previous": frozen_reports.get("previous"),
        "frozen_train_pairs": len(frozen_train) if frozen else None,
        "pair_weights": {"kind": cfg.loss.pair_weights, **(weighting or {})},
    }
    return Setup(run, trainer, model, tokenizer, train_pairs, eval_pairs, reports)


def run(cfg: TrainConfig, resume: bool = False) -> dict[str, Any]:
    """Train, evaluate and save a policy as `cfg` says; return the report (also written to report.json)."""
    s = setup(cfg, resume)
    trainer, model, tokenizer, run_dir = s.trainer, s.model, s.tokenizer, s.run.dir

    # train
    trained = s.run.train(trainer, cfg.train, evaluates=bool(s.eval_pairs))
    whole = whole_state_dict(model)  # FSDP: the shards gathered for the save, every rank taking part
    if not trainer.is_world_process_zero():
        return {}

    # evaluate
    eval_report = {}
    if s.eval_pairs:
        trainer.evaluate()
        eval_report = trainer.last_eval_report

    # save
    saved = save_policy(
        model, tokenizer, run_dir, cfg.train.method, cfg.save_merged, whole, cfg.model, saved_dtype(cfg.train)
    )

    # report
    return s.run.finish(
        {
            **saved,
            "base_model": cfg.model,
            "method": cfg.train.method,
            "precision": s.run.precision,
            "loss": {"name": cfg.loss.name, "params": LOSSES[cfg.loss.name].defaults | dict(cfg.loss.params)},
            "reference": s.reports["reference"],
            "previous": s.reports["previous"],
            "train_pairs": len(s.train_pairs),
            "frozen_train_pairs": s.reports["frozen_train_pairs"],
            "pair_weights": s.reports["pair_weights"],
            **trained.to_dict(),
            "eval": eval_report,
            "alerts": trainer.alerts,
            "data": s.reports["data"],
            "tokenization": s.reports["tokenization"],
            "eval_tokenization": s.reports["eval_tokenization"],
        },
        PLOT_KEYS,
    )


def summary_lines(report: dict[str, Any]) -> list[str]:
    ev = report.get("eval") or {}
    ref = report.get("reference") or {}
    lines = [
        f"trained a {report['method']} policy with loss '{report['loss']['name']}' on {report['train_pairs']} "
        f"pairs, {report['steps']} steps, {report['train_seconds']}s ({report['pairs_per_second']} pairs/s)",
        f"reference: {ref.get('mode')}"
        + (f" ({', '.join(f'{k}: cache {v}' for k, v in ref['cache'].items())})" if ref.get("cache") else ""),
        f"saved to {report['policy_dir']}",
    ]
    if report.get("frozen_train_pairs") is not None:
        lines.insert(
            2,
            f"frozen log-probs precomputed for {report['frozen_train_pairs']} of {report['train_pairs']} training "
            "pairs (those the run draws)",
        )
    if report.get("adapter_dir") and report["adapter_dir"] != report["policy_dir"]:
        lines.append(f"adapter: {report['adapter_dir']}")
    if ev:
        lines.append(
            f"held-out implicit-reward accuracy {ev['accuracy']:.3f} on {ev['pairs']} pairs "
            f"(margin {ev['margin']:.3f}, loss {ev['loss']:.4f})"
        )
        lines += group_lines(ev)
    lines.extend(f"ALERT: {a}" for a in report.get("alerts", []))
    return lines


__all__ = [
    "TrainConfig",
    "Setup",
    "setup",
    "run",
    "summary_lines",
    "reference_mode",
    "batch_diagnostics",
]
