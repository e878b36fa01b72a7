"""`align rm train`: a scalar Bradley-Terry reward model on any stage-1 source.

Reads top to bottom: config -> data (load, split, tokenize with an explicit length policy) -> model
(sequence-classification head on any causal LM; LoRA or full) -> train (transformers.Trainer with packed,
prefix-shared pairs) -> evaluate (accuracy overall and per source / family / corruption) -> save (a
directory `AutoModelForSequenceClassification` loads, with reward statistics and chat template) -> report.

The config is `reward_models.rm_config.RMTrainConfig`; the trainer, the rewards of pairs and the saved reward
statistics are the components every reward-model recipe shares (`reward_models.training`). `run_strength` is
`align rm strength`: M runs of this recipe with other seeds, then `reward_models.strength` measures each pair.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from prefalign.config import dump_yaml
from prefalign.errors import UserError
from prefalign.models.hub import load_seq_cls, load_tokenizer, pad_token_id
from prefalign.models.precision import decide_precision, default_device
from prefalign.training.evaluation import accuracy_report, group_lines
from prefalign.training.recipe import start_run
from prefalign.training.trainer import base_dtype, prepare_model, resolve_precision, saved_dtype, whole_state_dict
from preference_data.training_pairs import load_training_pairs

from .checkpoint import RewardStats, load_rm, save_rm, write_stats
from .rm_config import RMLossSection, RMTrainConfig, StrengthSection  # RMTrainConfig: `align validate` finds it here
from .strength import StrengthConfig, measure_strength
from .training import PLOT_KEYS, RMTrainer, saved_reward_statistics, train_pair_rewards


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


def run(cfg: RMTrainConfig, resume: bool = False) -> dict[str, Any]:
    """Train, evaluate and save a reward model as `cfg` says; return the report (also written to report.json)."""
    run = start_run(cfg, cfg.train, "rm train", resume)

    # data
    tokenizer = load_tokenizer(cfg.model)
    data = load_training_pairs(
        cfg.data, cfg.eval, tokenizer, cfg.train.max_length, cfg.train.length_policy, response_end="template"
    )
    train_pairs, eval_pairs = data.train, data.eval
    run.save_data_report(data.reports())
    margin_report = select_margins(train_pairs, cfg.loss)
    strength_report = _apply_strength(train_pairs, cfg.strength) if cfg.strength.file else None

    # model
    model = load_seq_cls(cfg.model, num_labels=1, dtype=base_dtype(cfg.train))
    model.config.pad_token_id = tokenizer.pad_token_id
    model = prepare_model(model, cfg.train, cfg.lora, "SEQ_CLS", modules_to_save=["score"])

    # train
    pad_id = pad_token_id(tokenizer)
    extra = ("soft_alpha",) if cfg.strength.file else ()
    trainer = RMTrainer.on_pairs(model, run, cfg.train, cfg.loss, train_pairs, eval_pairs, pad_id, extra)
    trained = run.train(trainer, cfg.train, evaluates=bool(eval_pairs))
    whole = whole_state_dict(model)  # FSDP: the shards gathered for the save, every rank taking part
    if not trainer.is_world_process_zero():
        return {}

    # evaluate
    eval_report = {}
    if eval_pairs:
        trainer.evaluate()
        eval_report = trainer.last_eval_report

    # save, with reward statistics on (a sample of) the training data, measured on the saved weights in fp32 (the
    # precision of the model card's recipe and of every scoring command's default)
    sample = train_pairs[: cfg.eval.stats_pairs]
    computed_on = f"{len(sample)} training pairs of {cfg.data.source}"
    card = {
        "base model": cfg.model,
        "method": cfg.train.method,
        "loss": cfg.loss.name,
        "training data": f"{cfg.data.source} ({len(train_pairs)} pairs)",
        "precision": run.precision,
    }
    if eval_report:
        card["held-out accuracy"] = f"{eval_report['accuracy']:.3f} on {eval_report['pairs']} pairs"
    model_dir = save_rm(
        model,
        tokenizer,
        run.dir / "model",
        RewardStats(computed_on="pending"),
        merge=cfg.save == "merged",
        card=card,
        state=whole,
        dtype=saved_dtype(cfg.train),
    )
    stats, sample_rewards = saved_reward_statistics(model_dir, sample, pad_id, cfg.train, computed_on)
    write_stats(model_dir, stats, card)

    # report
    reports = data.reports()
    return run.finish(
        {
            "model_dir": str(model_dir),
            "base_model": cfg.model,
            "method": cfg.train.method,
            "precision": run.precision,
            "train_pairs": len(train_pairs),
            **trained.to_dict(),
            "eval": eval_report,
            "data": reports["data"],
            "tokenization": reports["tokenization"],
            "eval_tokenization": reports["eval_tokenization"],
            "margins": margin_report,
            "strength": strength_report,
            "reward_stats": stats.__dict__,
            "sample_rewards": sample_rewards,
        },
        PLOT_KEYS,
    )


def heldout_report(cfg: RMTrainConfig, model_dir: str, source: str) -> dict[str, Any]:
    """What `run` reports as `eval` (accuracy and margin, overall and per source / family / corruption), for the
    RM saved in `model_dir` on the pairs of `source`, tokenized with `cfg`'s length settings and scored in its
    precision: one trained RM evaluated on another held-out set without training it again. `tokenization` says
    what the length policy dropped."""
    from prefalign.models.forward import layout_for  # lazy: torch, as the trainer's own imports

    precision = decide_precision(cfg.train.precision).value
    tokenizer = load_tokenizer(model_dir)
    data = load_training_pairs(
        dataclasses.replace(cfg.data, source=source, split="all", limit=None),
        dataclasses.replace(cfg.eval, source=None, split="none"),
        tokenizer,
        cfg.train.max_length,
        cfg.train.length_policy,
        response_end="template",
    )
    model, _, _ = load_rm(model_dir, dtype="bfloat16" if precision != "fp32" else "float32")
    device = default_device()
    model.to(device)
    layout = layout_for(model, device=device)  # segments on a CPU, a block mask on a GPU (as the scorers pick)
    train = dataclasses.replace(cfg.train, precision=precision, attention=layout)  # type: ignore[arg-type]
    rc, rr = train_pair_rewards(model, data.train, pad_token_id(tokenizer), train)
    return {**accuracy_report(data.train, rc, rr), "source": source, "tokenization": data.reports()["tokenization"]}


def run_strength(cfg: StrengthConfig) -> dict[str, Any]:
    """`align rm strength`: train `cfg.members` reward models with this recipe (seeds 1000 apart, no held-out
    evaluation) unless `cfg.models` names trained ones, then measure each pair's preference strength from them
    (`reward_models.strength`); return that report."""
    resolve_precision(cfg.base.train, "rm strength")
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    dump_yaml(cfg, out / "config.yaml")
    models = list(cfg.models)
    if not models:
        for m in range(cfg.members):
            member = dataclasses.replace(
                cfg.base,
                output_dir=str(out / f"member{m}"),
                train=dataclasses.replace(cfg.base.train, seed=cfg.base.train.seed + 1000 * m + 1),
                eval=dataclasses.replace(cfg.base.eval, split="none"),
            )
            models.append(run(member)["model_dir"])
    return measure_strength(cfg, models)


def summary_lines(report: dict[str, Any]) -> list[str]:
    ev = report.get("eval") or {}
    lines = [
        f"trained {report['method']} RM on {report['train_pairs']} pairs, {report['steps']} steps, "
        f"{report['train_seconds']}s ({report['pairs_per_second']} pairs/s)",
        f"saved to {report['model_dir']}",
    ]
    if ev:
        lines.append(f"held-out accuracy {ev['accuracy']:.3f} on {ev['pairs']} pairs (margin {ev['margin']:.3f})")
        lines += group_lines(ev)
    return lines


__all__ = ["RMTrainConfig", "run", "run_strength", "select_margins", "summary_lines"]
