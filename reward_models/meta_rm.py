"""`align rm train` for a GRM's meta reward model (a config of kind `meta_rm_train`).

DeepSeek-GRM's meta-RM guided voting (reference: reward-models.md section 4.3): a pointwise scalar RM trained
with binary cross-entropy to predict whether one sampled critique is correct; at inference it rates the k
critiques of a response and only the top k_meta are voted (`GRMScorer` with `meta_model`).

Reads top to bottom: config -> critiques sampled from the GRM (`judge`) for the chosen and the rejected
response of each labelled pair, `samples` draws each -> labels by the rejective fine-tuning rule (draw j is
correct when its score for the chosen is strictly above its score for the rejected; both critiques of the draw
carry that label, and a critique that abstains is wrong) -> a scalar RM (score head on `model`, LoRA or full)
trained on (judge message, critique) with BCE on its logit -> held-out critiques: accuracy at p = 0.5, ROC AUC
and the share of correct critiques (the base rate a constant guess reaches) -> the RM saved where `GRMScorer`
reads a meta-RM. The labelled critiques are kept in the run's directory (`critiques.jsonl`,
`held_out_critiques.jsonl`: message, text, correct).

With `critiques.read: rule` the judge is a rule-read GRM (`principles: from_prompt, read: rule`): it writes its works
from each pair's query alone, and work j is correct where the rule, reading both responses against its claims, scores
the chosen one strictly higher. The meta-RM learns (judge message, work) -> correct, and a `grm` scorer with `read:
rule` and `meta_model` votes only the k_meta works of a query it rates highest.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import torch
from transformers import Trainer

from prefalign.config import option
from prefalign.errors import UserError
from prefalign.files import write_jsonl
from prefalign.models.forward import PackedForward
from prefalign.models.hub import DEFAULT_MODEL, load_model, load_seq_cls, load_tokenizer, pad_token_id
from prefalign.stats import bootstrap_statistic, roc_auc
from prefalign.training.config import HeldOutSection, LoraSection, TrainSection
from prefalign.training.metrics import MetricsMixin
from prefalign.training.recipe import start_run
from prefalign.training.trainer import (
    base_dtype,
    prepare_model,
    saved_dtype,
    training_arguments,
    whole_state_dict,
)
from preference_data.records import Message
from preference_data.sources import DataConfig, load_pairs
from preference_data.sources import load as load_source
from preference_data.tokenize import tokenize_single

from .checkpoint import RewardStats, save_rm
from .generative.scorers import GRMOptions, GRMScorer, rate
from .generative.training import SFTCollator, SFTDataset, grm_draw_correct, sample_outputs, sampling_problems
from .generative.vote import draw_right
from .model_scorers import ScalarOptions, ScalarScorer


@dataclass
class CritiqueSection:
    judge: str = option("", "the GRM whose critiques are rated (a `judge_train` run's model/ directory)")
    samples: int = option(4, "critiques sampled per response")
    temperature: float = option(0.8, "sampling temperature")
    top_p: float = option(0.95, "nucleus sampling mass")
    max_new_tokens: int = option(160, "longest critique")
    seed: int = option(0, "sampling seed")
    read: Literal["model", "rule"] = option(
        "model",
        "what is rated: the judge's critiques of each response (model: the paper's), or the works a rule-read judge "
        "writes from the query alone (rule: `grm` with principles: from_prompt, read: rule; work j of a query is "
        "correct where the rule, reading both responses against it, scores the chosen strictly higher)",
    )
    tools: Literal["none", "calculator"] = option("none", "read: rule: tools the judge calls as it writes its works")
    work_prefix: str = option("", "read: rule: the text each work starts with, given (`grm`'s work_prefix)")

    def check(self) -> list[str]:
        problems = []
        if not self.judge:
            problems.append("judge: name the GRM whose critiques are rated (e.g. runs/judge_grm/model)")
        if self.read == "model" and (self.tools != "none" or self.work_prefix):
            problems.append("tools, work_prefix: options of the works a rule reads: set read: rule, or leave them")
        return problems + sampling_problems(self)


@dataclass
class MetaRMTrainConfig:
    kind: Literal["meta_rm_train"] = option("meta_rm_train", "config kind (fixed)")
    model: str = option(DEFAULT_MODEL, "base of the scalar meta-RM (a score head is added)")
    output_dir: str = option(
        "runs/meta_rm", "run directory (config, metrics, report.html with its dashboard, checkpoints, model/)"
    )
    critiques: CritiqueSection = option(factory=CritiqueSection, doc="the GRM and how its critiques are sampled")
    data: DataConfig = option(factory=DataConfig, doc="labelled pairs whose critiques are sampled")
    eval: HeldOutSection = option(factory=HeldOutSection, doc="held-out pairs whose critiques are rated")
    train: TrainSection = option(factory=TrainSection, doc="optimisation settings")
    lora: LoraSection = option(factory=LoraSection, doc="LoRA settings (train.method: lora)")

    def check(self) -> list[str]:
        problems = self.train.token_budget_unsupported()
        # `all` is a whole file of training pairs, except for the suite, whose `all` holds its held-out splits too
        if self.data.split in ("dev", "test") or (self.data.split == "all" and self.data.source == "suite"):
            problems.append(
                f"data.split: a meta-RM learns from the GRM's critiques of training pairs only (held-out pairs go in "
                f"eval:, never into training), got {self.data.split}"
                + (" on the suite (its `all` holds dev and test); use split: train" if self.data.split == "all" else "")
            )
        return problems


@dataclass
class Critique:
    message: str  # the GRM's user message
    text: str  # one sampled critique
    correct: bool


def label_critiques(chosen: list[str], rejected: list[str], message_c: str, message_r: str) -> list[Critique]:
    """The RFT rule per draw (see the module docstring): both critiques of draw j get its label."""
    out = []
    for c, r in zip(chosen, rejected, strict=True):
        ok = grm_draw_correct(c, r)[0]
        out += [Critique(message_c, c, ok), Critique(message_r, r, ok)]
    return out


def sample_critiques(pairs: list[Any], cfg: CritiqueSection, dtype: str) -> list[Critique]:
    """`cfg.samples` critiques (or works, `read: rule`) of each pair from the GRM, labelled."""
    return SAMPLERS[cfg.read](pairs, cfg, dtype)


def _critiques_of_responses(pairs: list[Any], cfg: CritiqueSection, dtype: str) -> list[Critique]:
    """`cfg.samples` critiques of each response of each pair, labelled by draw (`label_critiques`)."""
    judge = load_model(cfg.judge, dtype, merge=True)
    tokenizer = load_tokenizer(cfg.judge)
    messages = []
    for p in pairs:
        messages += [GRMScorer.message(p.prompt, p.chosen), GRMScorer.message(p.prompt, p.rejected)]
    texts = sample_outputs(judge, tokenizer, messages, cfg, "")
    out: list[Critique] = []
    for i in range(len(pairs)):
        out += label_critiques(texts[2 * i], texts[2 * i + 1], messages[2 * i], messages[2 * i + 1])
    return out


def _works_of_queries(pairs: list[Any], cfg: CritiqueSection, dtype: str) -> list[Critique]:
    """`cfg.samples` works of each pair's query by the rule-read judge, each labelled by whether the rule's reading
    of the two responses against it scores the chosen strictly higher (a work without a claim is wrong). A query
    shared by several pairs gives its works once per pair, each with that pair's label."""
    scorer = GRMScorer(
        GRMOptions(
            model=cfg.judge,
            dtype=dtype,  # type: ignore[arg-type]  # bfloat16 or float32, from the train section
            principles="from_prompt",
            read="rule",
            k=cfg.samples,
            temperature=cfg.temperature,
            top_p=cfg.top_p,
            max_new_tokens=cfg.max_new_tokens,
            seed=cfg.seed,
            tools=cfg.tools,
            work_prefix=cfg.work_prefix,
        )
    )
    prompts, n = [p.prompt for p in pairs], len(pairs)
    scorer.score(prompts + prompts, [p.chosen for p in pairs] + [p.rejected for p in pairs])
    out: list[Critique] = []
    for i, p in enumerate(pairs):
        chosen, rejected, works = scorer.last_samples[i], scorer.last_samples[n + i], scorer.last_texts[i]
        if not chosen or not rejected:  # an empty response: nothing was read against the works
            continue
        message = scorer.principles_message(p.prompt)
        for c, r, w in zip(chosen, rejected, works, strict=True):
            out.append(Critique(message, w, draw_right(c[0] if c else None, r[0] if r else None)))
    return out


SAMPLERS = {"model": _critiques_of_responses, "rule": _works_of_queries}
"""How a meta-RM's training critiques are sampled and labelled, by `critiques.read`."""


class BCETrainer(MetricsMixin, Trainer):
    """Binary cross-entropy of a score head's logit against 0/1 labels."""

    def __init__(self, *args: Any, metrics_path: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._init_metrics(metrics_path)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        targets = inputs.pop("targets")
        logits = model(**inputs)[:, 0]
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, targets)
        with torch.no_grad():
            acc = ((logits > 0).float() == targets).float().mean().item()
        self.stash({"bce": loss.item(), "accuracy": acc, "logit_mean": logits.mean().item()})
        return (loss, {"rewards": logits}) if return_outputs else loss


PLOT_KEYS = ["loss", "accuracy", "logit_mean"]


def _tokenize(critiques: list[Critique], tokenizer: Any, max_length: int) -> tuple[list[Any], int]:
    items, too_long = [], 0
    for c in critiques:
        p, r = tokenize_single(tokenizer, [Message("user", c.message)], c.text or " ", response_end="template")
        if len(p) + len(r) > max_length:
            too_long += 1
            continue
        items.append((p, r, float(c.correct)))
    return items, too_long


def held_out_report(scorer: Any, critiques: list[Critique]) -> dict[str, Any]:
    """Accuracy at p = 0.5 (logit 0; raw, unnormalised rewards), ROC AUC and the base rate, with percentile
    bootstrap intervals over the held-out queries (a query's critiques, those of one judge message, resampled
    together: they are not independent)."""
    rated = rate(scorer, [(c.message, c.text) for c in critiques])
    labels = [c.correct for c in critiques]
    right = [float((s > 0) == y) for s, y in zip(rated, labels, strict=True)]
    groups: dict[str, list[int]] = {}
    for i, c in enumerate(critiques):
        groups.setdefault(c.message, []).append(i)
    units = list(groups.values())

    def items(idx: Sequence[int]) -> list[int]:
        return [i for u in idx for i in units[u]]

    def accuracy(idx: Sequence[int]) -> float:
        chosen = items(idx)
        return sum(right[i] for i in chosen) / len(chosen)

    def auc(idx: Sequence[int]) -> float:
        chosen = items(idx)
        return roc_auc([rated[i] for i in chosen], [labels[i] for i in chosen])

    n, everything = len(critiques), range(len(units))
    return {
        "critiques": n,
        "queries": len(units),
        "correct_share": sum(labels) / n if n else math.nan,
        "accuracy": accuracy(everything) if n else math.nan,
        "accuracy_ci95": list(bootstrap_statistic(accuracy, len(units))),
        "auc": auc(everything) if n else math.nan,
        "auc_ci95": list(bootstrap_statistic(auc, len(units))),
    }


def run(cfg: MetaRMTrainConfig, resume: bool = False) -> dict[str, Any]:
    """Sample and label critiques, train the meta-RM with BCE, rate held-out critiques, save."""
    run_ = start_run(cfg, cfg.train, "rm train (meta-RM)", resume)
    dtype: Literal["bfloat16", "float32"] = "bfloat16" if cfg.train.precision == "bf16" else "float32"
    pairs, data_report = load_pairs(cfg.data)
    critiques = sample_critiques(pairs, cfg.critiques, dtype)
    write_jsonl(run_.dir / "critiques.jsonl", (asdict(c) for c in critiques))  # what it learns from, kept
    tokenizer = load_tokenizer(cfg.model)
    items, too_long = _tokenize(critiques, tokenizer, cfg.train.max_length)
    positives = sum(c.correct for c in critiques)
    counts = {"pairs": len(pairs), "critiques": len(critiques), "correct": positives, "too_long": too_long}
    run_.save_data_report({"data": data_report.to_dict(), "examples": counts})
    if not items or positives in (0, len(critiques)):
        raise UserError(
            f"the meta-RM needs correct and wrong critiques to learn from ({counts}): the GRM "
            f"{cfg.critiques.judge} wrote {'no correct' if positives == 0 else 'only correct'} ones; warm it up "
            "or train it first (kind judge_train, judge.kind grm), or raise critiques.samples"
        )

    model = load_seq_cls(cfg.model, num_labels=1, dtype=base_dtype(cfg.train))
    model.config.pad_token_id = tokenizer.pad_token_id
    model = prepare_model(model, cfg.train, cfg.lora, "SEQ_CLS", modules_to_save=["score"])
    pad_id = pad_token_id(tokenizer)
    trainer = BCETrainer(
        model=PackedForward(model, "rewards"),
        args=training_arguments(cfg.train, str(run_.checkpoints)),
        train_dataset=SFTDataset(items),  # (prompt ids, critique ids, label)
        data_collator=SFTCollator(pad_id, cfg.train.row_tokens, cfg.train.attention),
        metrics_path=run_.metrics_path,
    )
    trained = run_.train(trainer, cfg.train, evaluates=False)
    whole = whole_state_dict(model)  # FSDP: the shards gathered for the save, every rank taking part
    if not trainer.is_world_process_zero():
        return {}
    stats = RewardStats(mean=0.0, std=1.0, n=0, computed_on="none: a meta-RM's logit is read raw (p = sigmoid)")
    rated = "works (read: rule)" if cfg.critiques.read == "rule" else "critiques"
    card = {"base model": cfg.model, f"rates {rated} of": cfg.critiques.judge, "loss": "binary cross-entropy"}
    model_dir = save_rm(
        model, tokenizer, run_.dir / "model", stats, card=card, state=whole, dtype=saved_dtype(cfg.train)
    )

    eval_report: dict[str, Any] = {}
    if cfg.eval.split != "none":
        ecfg = cfg.eval.data_config(cfg.data)
        held = sample_critiques(load_source(ecfg).pairs, cfg.critiques, dtype)
        write_jsonl(run_.dir / "held_out_critiques.jsonl", (asdict(c) for c in held))
        scorer = ScalarScorer(ScalarOptions(model=str(model_dir), dtype=dtype, normalize=False))
        eval_report = held_out_report(scorer, held)
    return run_.finish(
        {
            "model_dir": str(model_dir),
            "base_model": cfg.model,
            "judge": cfg.critiques.judge,
            "read": cfg.critiques.read,
            "method": cfg.train.method,
            "precision": run_.precision,
            "examples": counts,
            "train_pair_ids": [p.id for p in pairs],  # what it learned from: checkable against any held-out split
            **trained.to_dict(),
            "eval": eval_report,
            "data": data_report.to_dict(),
        },
        PLOT_KEYS,
    )


def summary_lines(report: dict[str, Any]) -> list[str]:
    ex = report["examples"]
    lines = [
        f"trained a meta-RM ({report['method']}) on {ex['critiques'] - ex['too_long']} critiques of "
        f"{report['judge']} ({ex['correct']} correct) from {ex['pairs']} pairs, {report['steps']} steps, "
        f"{report['train_seconds']}s",
        f"saved to {report['model_dir']}",
    ]
    ev = report.get("eval") or {}
    if ev:
        lines.append(
            f"held-out: {ev['critiques']} critiques, {ev['correct_share']:.3f} correct; meta-RM accuracy "
            f"{ev['accuracy']:.3f}{_interval(ev.get('accuracy_ci95'))}, "
            f"AUC {ev['auc']:.3f}{_interval(ev.get('auc_ci95'))}"
        )
    return lines


def _interval(ci: list[float] | None) -> str:
    """' [low, high]' for a report's interval; nothing for a report written before intervals were."""
    return f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else ""
