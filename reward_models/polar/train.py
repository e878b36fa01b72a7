"""`align rm train` with kind polar_train: a POLAR reward model, pre-trained on a policy pool or fine-tuned on
preference pairs with reference answers (reference `reward-models.md` §3).

One config kind, two stages (`stage:`), because both optimise the same Bradley-Terry loss over the same
sequences and differ only in where rows come from:

  pretrain  rows are (reference from policy A, positive from A, negative from B) triples from a pool
            (`data.pool`, written by kind polar_pool); held out: `data.heldout_fraction` of the pool's prompts.
  finetune  rows are (prompt, reference, chosen, rejected): the suite's pairs with their tasks' reference
            answers (`data.source: suite`), or a JSONL of such rows; held out: the suite's test pairs.

Reads top to bottom: config -> rows -> model (a sequence-classification head on any causal LM, the reward and
end tokens added and the embeddings resized; a POLAR model from the pretrain stage already has them) -> train
(`reward_models.training.RMTrainer` on packed, reference-shared pairs: loss −log σ(r(ref, chosen) − r(ref,
rejected)), `reward_models.losses`) -> evaluate (held-out accuracy with a bootstrap interval) -> save (`save_rm`,
plus polar.json with the input format) -> report.

Decisions the paper leaves open, written down: the same sft wrapper ("\\n" between prompt and response) in both
stages, since the pool's prompts are chat prompts, not pre-training text; LoRA trains the two new token
embeddings too (peft `trainable_token_indices`), the rest of the embedding stays frozen.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any, Literal

from prefalign.config import option
from prefalign.errors import UserError
from prefalign.files import write_json
from prefalign.models.hub import DEFAULT_MODEL, load_seq_cls, load_tokenizer, pad_token_id
from prefalign.stats import bootstrap_ci
from prefalign.training.config import LoraSection, TrainSection
from prefalign.training.evaluation import accuracy_report, group_lines

from ..checkpoint import save_rm
from ..rm_config import RMLossSection
from .data import file_rows, pool_triples, read_pool, split_by_prompt, suite_rows, tokenize_rows
from .format import END_TOKEN, POLAR_FILE, REWARD_TOKEN, InputSection, add_polar_tokens, flatten, polar_token_ids


@dataclass
class PolarDataSection:
    pool: str | None = option(None, "pretrain: the pool (a polar_pool run directory or its pool.jsonl)")
    triples_per_prompt: int = option(2, "pretrain: (A, A, B) triples drawn per prompt, each with a fresh A != B")
    heldout_fraction: float = option(0.1, "pretrain: share of the pool's prompts held out for evaluation")
    source: str = option("suite", "finetune: 'suite' or a JSONL of {prompt, reference, chosen, rejected} rows")
    suite_per_family: int = option(200, "suite: tasks generated per family")
    suite_seed: int = option(0, "suite: generator seed")
    limit: int | None = option(None, "train on at most N rows")
    seed: int = option(0, "seed of the triple draws and the held-out split")

    def check(self) -> list[str]:
        problems = []
        if self.triples_per_prompt < 1:
            problems.append(f"triples_per_prompt: must be positive, got {self.triples_per_prompt}")
        if not 0 <= self.heldout_fraction < 1:
            problems.append(f"heldout_fraction: must lie in [0, 1), got {self.heldout_fraction}")
        if self.limit is not None and self.limit < 1:
            problems.append(f"limit: must be positive, got {self.limit}")
        return problems


@dataclass
class PolarEvalSection:
    source: str | None = option(
        None,
        "finetune: held-out rows; default the suite's test pairs when data.source is suite, a JSONL of "
        "{prompt, reference, chosen, rejected} otherwise ('none' to skip)",
    )
    limit: int | None = option(None, "evaluate on at most N pairs")
    stats_pairs: int = option(256, "training pairs used to compute the saved reward mean/std")
    bootstrap: int = option(2000, "bootstrap resamples of the held-out accuracy interval")


@dataclass
class PolarTrainConfig:
    kind: Literal["polar_train"] = option("polar_train", "config kind (fixed)")
    stage: Literal["pretrain", "finetune"] = option(
        "finetune", "pretrain: policy-discrimination triples from a pool; finetune: preference pairs with references"
    )
    model: str = option(
        DEFAULT_MODEL, "base model (a causal LM) or a POLAR model to continue from (a pretrain run's model/)"
    )
    output_dir: str = option("runs/polar", "run directory (config, metrics, report.html, checkpoints, model/)")
    data: PolarDataSection = option(factory=PolarDataSection, doc="training rows")
    eval: PolarEvalSection = option(factory=PolarEvalSection, doc="held-out evaluation")
    input: InputSection = option(factory=InputSection, doc="the POLAR input format and its token budgets")
    loss: RMLossSection = option(factory=RMLossSection, doc="the ranking loss (bradley_terry, as POLAR)")
    train: TrainSection = option(factory=TrainSection, doc="optimisation settings")
    lora: LoraSection = option(factory=LoraSection, doc="LoRA settings (train.method: lora)")

    def check(self) -> list[str]:
        problems = []
        if self.stage == "pretrain" and not self.data.pool:
            problems.append(
                "data.pool: stage pretrain needs a policy pool (the output_dir of a polar_pool run, e.g. "
                "runs/polar_pool_suite)"
            )
        if self.stage == "finetune" and self.data.pool:
            problems.append("data.pool: only stage pretrain reads a pool; finetune reads data.source")
        if self.loss.margin != "none":
            problems.append("loss.margin: POLAR rows carry no margin; use none")
        return problems


def load_rows(cfg: PolarTrainConfig) -> tuple[list[Any], list[Any], dict[str, Any]]:
    """(train rows, held-out rows, what was read)."""
    if cfg.stage == "pretrain":
        pool = read_pool(cfg.data.pool)  # type: ignore[arg-type]  # check() requires it
        rows = pool_triples(pool, cfg.data.triples_per_prompt, cfg.data.seed)
        train, held = split_by_prompt(rows, cfg.data.heldout_fraction, cfg.data.seed)
        what = {
            "pool": cfg.data.pool,
            "trajectories": len(pool),
            "policies": sorted({r["policy"] for r in pool}),
            "triples": len(rows),
        }
    else:
        suite = cfg.data.source == "suite"
        train = (
            suite_rows("train", cfg.data.suite_per_family, cfg.data.suite_seed) if suite else file_rows(cfg.data.source)
        )
        src = cfg.eval.source
        if src == "none":
            held = []
        elif src is None:
            held = suite_rows("test", cfg.data.suite_per_family, cfg.data.suite_seed) if suite else []
        else:
            held = (
                suite_rows("test", cfg.data.suite_per_family, cfg.data.suite_seed) if src == "suite" else file_rows(src)
            )
        same = sum(flatten_eq(r.reference, r.chosen) for r in train)
        what = {"source": cfg.data.source, "rows": len(train), "chosen_equals_reference": same}
    if cfg.data.limit is not None:
        train = train[: cfg.data.limit]
    if cfg.eval.limit is not None:
        held = held[: cfg.eval.limit]
    return train, held, what


def flatten_eq(a: Any, b: Any) -> bool:
    return flatten(a).strip() == flatten(b).strip()


def held_out_report(pairs: list[Any], rc: Any, rr: Any, bootstrap: int, seconds: float) -> dict[str, Any]:
    """Accuracy (ties wrong) with a percentile bootstrap interval over pairs, per group, and scoring cost."""
    rep = accuracy_report(pairs, rc, rr)
    correct = [float(c) for c in (rc > rr).tolist()]
    lo, hi = bootstrap_ci(correct, bootstrap)
    rep["interval"] = [lo, hi]
    rep["seconds_per_pair"] = seconds / max(1, len(pairs))
    by_b: dict[str, list[float]] = {}
    for p, c in zip(pairs, correct, strict=True):
        if "policy_b" in p.attributes:
            by_b.setdefault(p.attributes["policy_b"], []).append(c)
    if by_b:
        rep["by_negative_policy"] = {k: {"accuracy": sum(v) / len(v), "pairs": len(v)} for k, v in sorted(by_b.items())}
    return rep


def run(cfg: PolarTrainConfig, resume: bool = False) -> dict[str, Any]:
    """Train, evaluate and save a POLAR reward model as `cfg` says; return the report (also report.json)."""
    # lazy: transformers (the trainer), so `align validate` reads the config without it
    from prefalign.training.recipe import start_run
    from prefalign.training.trainer import base_dtype, prepare_model, saved_dtype, whole_state_dict

    from ..training import PLOT_KEYS, RMTrainer, reward_statistics, train_pair_rewards

    run = start_run(cfg, cfg.train, f"polar {cfg.stage}", resume)

    # rows -> token ids (the tokens are added first: the text holds them)
    tokenizer = load_tokenizer(cfg.model)
    added = add_polar_tokens(tokenizer)
    train_rows, held_rows, data_report = load_rows(cfg)
    train_pairs, tok = tokenize_rows(train_rows, tokenizer, cfg.input)
    eval_pairs, etok = tokenize_rows(held_rows, tokenizer, cfg.input)
    if not train_pairs:
        raise UserError(f"no POLAR training rows left after tokenization: {tok.to_dict()}")
    run.save_data_report({"data": data_report, "tokenization": tok.to_dict(), "eval_tokenization": etok.to_dict()})

    # model: a score head, the embeddings resized for the added tokens
    model = load_seq_cls(cfg.model, num_labels=1, dtype=base_dtype(cfg.train))
    add_polar_tokens(tokenizer, model)
    model.config.pad_token_id = tokenizer.pad_token_id
    model = prepare_model(
        model,
        cfg.train,
        cfg.lora,
        "SEQ_CLS",
        modules_to_save=["score"],
        trainable_tokens=list(polar_token_ids(tokenizer)),
    )

    # train
    pad_id = pad_token_id(tokenizer)
    # held-out accuracy every train.eval_every steps; the final numbers, with an interval, below
    trainer = RMTrainer.on_pairs(model, run, cfg.train, cfg.loss, train_pairs, eval_pairs, pad_id)
    trained = run.train(trainer, cfg.train, evaluates=bool(eval_pairs))
    whole = whole_state_dict(model)  # FSDP: the shards gathered for the save, every rank taking part
    if not trainer.is_world_process_zero():
        return {}

    # evaluate
    eval_report: dict[str, Any] = {}
    if eval_pairs:
        t0 = time.time()
        rc, rr = train_pair_rewards(model, eval_pairs, pad_id, cfg.train)
        eval_report = held_out_report(eval_pairs, rc, rr, cfg.eval.bootstrap, time.time() - t0)

    # save, with reward statistics and the input format
    sample = train_pairs[: cfg.eval.stats_pairs]
    computed_on = f"{len(sample)} training pairs ({cfg.stage})"
    stats, sample_rewards = reward_statistics(model, sample, pad_id, cfg.train, computed_on)
    by_id = {r.id: r for r in train_rows}
    sample_rewards["rows"] = [row_text(by_id[p.id]) for p in sample[:4]]  # a reload must score these the same
    card = {
        "kind": f"POLAR reward model ({cfg.stage}), scored against a reference answer",
        "base model": cfg.model,
        "method": cfg.train.method,
        "training rows": f"{len(train_pairs)} ({data_report})",
        "precision": run.precision,
    }
    if eval_report:
        lo, hi = eval_report["interval"]
        card["held-out accuracy"] = (
            f"{eval_report['accuracy']:.3f} [{lo:.3f}, {hi:.3f}] on {eval_report['pairs']} pairs"
        )
    model_dir = save_rm(
        model, tokenizer, run.dir / "model", stats, card=card, state=whole, dtype=saved_dtype(cfg.train)
    )
    write_json(model_dir / POLAR_FILE, polar_meta(cfg), indent=2)
    with (model_dir / "README.md").open("a", encoding="utf-8") as f:
        f.write(POLAR_CARD)

    return run.finish(
        {
            "model_dir": str(model_dir),
            "stage": cfg.stage,
            "base_model": cfg.model,
            "method": cfg.train.method,
            "precision": run.precision,
            "tokens_added": added,
            "train_pairs": len(train_pairs),
            **trained.to_dict(),
            "eval": eval_report,
            "data": data_report,
            "tokenization": tok.to_dict(),
            "eval_tokenization": etok.to_dict(),
            "reward_stats": stats.__dict__,
            "sample_rewards": sample_rewards,
        },
        PLOT_KEYS,
    )


def row_text(row: Any) -> dict[str, str]:
    """A row as flat strings (what the input format reads of it)."""
    return {
        "id": row.id,
        "prompt": flatten(row.prompt),
        "reference": flatten(row.reference),
        "chosen": flatten(row.chosen),
        "rejected": flatten(row.rejected),
    }


def polar_meta(cfg: PolarTrainConfig) -> dict[str, Any]:
    """What polar.json records: the input format the model was trained with (the scorer reads it back)."""
    return {"reward_token": REWARD_TOKEN, "end_token": END_TOKEN, "stage": cfg.stage, "input": asdict(cfg.input)}


POLAR_CARD = f"""
## POLAR input (this model is reference-conditioned)

This reward model scores a candidate answer against a reference answer, not on its own. Build one sequence per
candidate as POLAR does (`reward_models/polar/format.py`): prompt contents joined by a newline (role tags
dropped), then

    text = prompt + "\\n" + reference + "{REWARD_TOKEN}" + prompt + "\\n" + candidate + "{END_TOKEN}"

and read the score head at the final `{END_TOKEN}` token (the last token; transformers' pooling reads it, since
the pad token is distinct). `polar.json` holds the token budgets it was trained with. With this toolkit:
`load_scorer("polar", model=...).score_with_reference(prompts, responses, references)`.
"""


def summary_lines(report: dict[str, Any]) -> list[str]:
    ev = report.get("eval") or {}
    tok = report.get("tokenization") or {}
    lines = [
        f"trained POLAR {report['stage']} ({report['method']}) on {report['train_pairs']} rows, {report['steps']} "
        f"steps, {report['train_seconds']}s; {tok.get('too_long_reference', 0)} rows skipped (reference too long)",
        f"saved to {report['model_dir']}",
    ]
    if ev:
        lo, hi = ev["interval"]
        lines.append(
            f"held-out accuracy {ev['accuracy']:.3f} (95% interval {lo:.3f}..{hi:.3f}) on {ev['pairs']} pairs, "
            f"{1000 * ev['seconds_per_pair']:.1f} ms per pair"
        )
        lines += group_lines(ev, ("family", "corruption"))
        for name, v in (ev.get("by_negative_policy") or {}).items():
            lines.append(f"  negative from {name}: {v['accuracy']:.3f} ({v['pairs']} pairs)")
    return lines
