"""`align rm train` for a GRM's meta reward model (a config of kind `meta_rm_train`).

DeepSeek-GRM's meta-RM guided voting (reference: reward-models.md section 4.3): a pointwise scalar RM trained
with binary cross-entropy to predict whether one sampled critique is correct; at inference it rates the k
critiques of a response and only the top k_meta are voted (`GRMScorer` with `meta_model`).

Reads top to bottom: config -> critiques sampled from the GRM (`judge`) for the chosen and the rejected
response of each labelled pair, `samples` draws each -> labels by the rejective fine-tuning rule (draw j is
correct when its score for the chosen is strictly above its score for the rejected; both critiques of the draw
carry that label, and a critique that abstains is wrong) -> a scalar RM (score head on `model`, LoRA or full)
trained on (judge message, critique) by an objective from `OBJECTIVES` -> held-out critiques: accuracy at p = 0.5,
ROC AUC, the within-query AUC and the share of correct critiques (the base rate a constant guess reaches) -> the RM
saved where `GRMScorer` reads a meta-RM. The labelled critiques are kept in the run's directory (`critiques.jsonl`,
`held_out_critiques.jsonl`: message, text, correct, pair).

Two objectives (`objective:`). `pointwise` is the paper's: BCE of the logit against each critique's label, over all
critiques pooled; it rewards telling the queries a judge gets right from those it gets wrong as much as telling a
query's right critiques from its wrong ones, yet guided voting only ever compares one query's critiques.
`within_query` trains exactly that comparison: Bradley-Terry on (right critique, wrong critique) of one group (one
pair's critiques of one judge message), every such combination of a group; a group whose critiques are all right
or all wrong teaches nothing and is left out (counted). The held-out report's within-query AUC (the mean over
groups with both labels of the AUC inside the group) measures what guided voting uses, whichever objective trained.

With `critiques.read: rule` the judge is a rule-read GRM (`principles: from_prompt, read: rule`): it writes its works
from each pair's query alone, and work j is correct where the rule, reading both responses against its claims, scores
the chosen one strictly higher. The meta-RM learns (judge message, work) -> correct, and a `grm` scorer with `read:
rule` and `meta_model` votes only the k_meta works of a query it rates highest.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import torch
from transformers import Trainer

from prefalign.config import option
from prefalign.errors import UserError
from prefalign.files import write_jsonl
from prefalign.models.forward import PackedForward
from prefalign.models.hub import DEFAULT_MODEL, load_model, load_seq_cls, load_tokenizer, pad_token_id
from prefalign.stats import bootstrap_statistic, roc_auc, within_group_auc
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
from .generative.scorers import GRMOptions, GRMScorer, ToolSet, rate
from .generative.training import (
    OrdersCollator,
    SFTCollator,
    SFTDataset,
    grm_draw_correct,
    sample_outputs,
    sampling_problems,
)
from .generative.vote import draw_right
from .losses import compute_rm_loss
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
    tools: ToolSet = option("none", "read: rule: tools the judge calls as it writes its works (`grm`'s tools)")
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
    objective: Literal["pointwise", "within_query"] = option(
        "pointwise",
        "pointwise: BCE on each critique's label, pooled (DeepSeek-GRM's); within_query: Bradley-Terry on (right, "
        "wrong) critiques of one pair's judge message, the comparison guided voting makes",
    )
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
    pair: str = ""  # the id of the pair it was sampled for (a group is one pair's critiques of one message)

    @property
    def group(self) -> tuple[str, str]:
        return self.pair, self.message


def label_critiques(
    chosen: list[str], rejected: list[str], message_c: str, message_r: str, pair: str = ""
) -> list[Critique]:
    """The RFT rule per draw (see the module docstring): both critiques of draw j get its label."""
    out = []
    for c, r in zip(chosen, rejected, strict=True):
        ok = grm_draw_correct(c, r)[0]
        out += [Critique(message_c, c, ok, pair), Critique(message_r, r, ok, pair)]
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
        out += label_critiques(texts[2 * i], texts[2 * i + 1], messages[2 * i], messages[2 * i + 1], pairs[i].id)
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
            out.append(Critique(message, w, draw_right(c[0] if c else None, r[0] if r else None), p.id))
    return out


SAMPLERS = {"model": _critiques_of_responses, "rule": _works_of_queries}
"""How a meta-RM's training critiques are sampled and labelled, by `critiques.read`."""


Item = tuple[Any, ...]


def pointwise_items(critiques: list[Critique], tokenizer: Any, max_length: int) -> tuple[list[Item], int]:
    """(message ids, critique ids, label) per critique that fits in `max_length`, and how many did not."""
    items, too_long = [], 0
    for c in critiques:
        p, r = tokenize_single(tokenizer, [Message("user", c.message)], c.text or " ", response_end="template")
        if len(p) + len(r) > max_length:
            too_long += 1
            continue
        items.append((p, r, float(c.correct)))
    return items, too_long


def groups_of(critiques: Sequence[Critique]) -> list[list[int]]:
    """The indices of each group's critiques (one pair's critiques of one judge message), in first-seen order."""
    groups: dict[tuple[str, str], list[int]] = {}
    for i, c in enumerate(critiques):
        groups.setdefault(c.group, []).append(i)
    return list(groups.values())


def within_query_items(critiques: list[Critique], tokenizer: Any, max_length: int) -> tuple[list[Item], int]:
    """(message, right critique, message, wrong critique) ids for every right/wrong combination inside a group."""
    items, too_long = [], 0
    for idx in groups_of(critiques):
        tokens, long = pointwise_items([critiques[i] for i in idx], tokenizer, max_length)
        too_long += long
        right = [t for t in tokens if t[2] == 1.0]
        wrong = [t for t in tokens if t[2] == 0.0]
        items += [(r[0], r[1], w[0], w[1]) for r in right for w in wrong]
    return items, too_long


Logs = dict[str, float]


def bce_loss(logits: torch.Tensor, targets: torch.Tensor | None) -> tuple[torch.Tensor, Logs]:
    """Binary cross-entropy of each critique's logit against its 0/1 label."""
    assert targets is not None, "pointwise items carry their labels (SFTCollator's targets)"
    loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, targets)
    acc = ((logits.detach() > 0).float() == targets).float().mean().item()
    return loss, {"bce": loss.item(), "accuracy": acc, "logit_mean": logits.detach().mean().item()}


def within_query_loss(logits: torch.Tensor, targets: torch.Tensor | None) -> tuple[torch.Tensor, Logs]:
    """Bradley-Terry (`RM_LOSSES`' bradley_terry) of each right critique's logit over the wrong one's (the
    collator packs every item's right critique before every item's wrong one; no labels: the order is the label)."""
    b = logits.shape[0] // 2
    out = compute_rm_loss("bradley_terry", {}, logits[:b], logits[b:])
    loss = out.losses.mean()
    return loss, {"bt": loss.item(), "accuracy": out.accuracy.item(), "logit_mean": out.reward_mean.item()}


@dataclass(frozen=True)
class MetaObjective:
    summary: str
    items: Callable[[list[Critique], Any, int], tuple[list[Item], int]]  # training items, and how many too long
    collator: type[SFTCollator]  # packs a batch of `items`
    loss: Callable[[torch.Tensor, torch.Tensor | None], tuple[torch.Tensor, Logs]]  # (logits, labels) -> loss, logs
    unit: str  # what one training item is, for the report


OBJECTIVES: dict[str, MetaObjective] = {
    "pointwise": MetaObjective(
        "binary cross-entropy on each critique's label, pooled (DeepSeek-GRM)",
        pointwise_items,
        SFTCollator,
        bce_loss,
        "critiques",
    ),
    "within_query": MetaObjective(
        "Bradley-Terry on a group's (right, wrong) critiques",
        within_query_items,
        OrdersCollator,
        within_query_loss,
        "right/wrong pairs of critiques",
    ),
}
"""How a meta-RM learns from its labelled critiques, by `objective`."""


class MetaRMTrainer(MetricsMixin, Trainer):
    """A score head's logits through the objective's loss."""

    objective: MetaObjective

    def __init__(self, *args: Any, objective: MetaObjective, metrics_path: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.objective = objective
        self._init_metrics(metrics_path)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        targets = inputs.pop("targets", None)
        logits = model(**inputs)[:, 0]
        loss, logs = self.objective.loss(logits, targets)
        self.stash(logs)
        return (loss, {"rewards": logits}) if return_outputs else loss


PLOT_KEYS = ["loss", "accuracy", "logit_mean"]


def held_out_report(scorer: Any, critiques: list[Critique]) -> dict[str, Any]:
    """Accuracy at p = 0.5 (logit 0; raw, unnormalised rewards), ROC AUC and the base rate, with percentile
    bootstrap intervals over the held-out queries (a query's critiques, those of one judge message, resampled
    together: they are not independent); and the within-query AUC (`prefalign.stats.within_group_auc` over the
    groups of `groups_of`), the ranking guided voting uses."""
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
    within = within_group_auc([([rated[i] for i in g], [labels[i] for i in g]) for g in groups_of(critiques)])
    return {
        "critiques": n,
        "queries": len(units),
        "correct_share": sum(labels) / n if n else math.nan,
        "accuracy": accuracy(everything) if n else math.nan,
        "accuracy_ci95": list(bootstrap_statistic(accuracy, len(units))),
        "auc": auc(everything) if n else math.nan,
        "auc_ci95": list(bootstrap_statistic(auc, len(units))),
        "within_query_auc": within["auc"],
        "within_query_auc_ci95": [within["low"], within["high"]],
        "within_query_groups": within["groups"],
    }


def run(cfg: MetaRMTrainConfig, resume: bool = False) -> dict[str, Any]:
    """Sample and label critiques, train the meta-RM by its objective, rate held-out critiques, save."""
    run_ = start_run(cfg, cfg.train, "rm train (meta-RM)", resume)
    dtype: Literal["bfloat16", "float32"] = "bfloat16" if cfg.train.precision == "bf16" else "float32"
    pairs, data_report = load_pairs(cfg.data)
    critiques = sample_critiques(pairs, cfg.critiques, dtype)
    write_jsonl(run_.dir / "critiques.jsonl", (asdict(c) for c in critiques))  # what it learns from, kept
    tokenizer = load_tokenizer(cfg.model)
    objective = OBJECTIVES[cfg.objective]
    items, too_long = objective.items(critiques, tokenizer, cfg.train.max_length)
    positives = sum(c.correct for c in critiques)
    counts = {
        "pairs": len(pairs),
        "critiques": len(critiques),
        "correct": positives,
        "too_long": too_long,
        "training_items": len(items),  # critiques (pointwise) or right/wrong pairs of critiques (within_query)
    }
    run_.save_data_report({"data": data_report.to_dict(), "examples": counts})
    if not items or positives in (0, len(critiques)):
        mixed = "" if cfg.objective == "pointwise" else " in the same group (one pair's critiques of one message)"
        wrote = "no correct" if positives == 0 else "only correct" if positives == len(critiques) else "too few mixed"
        raise UserError(
            f"the meta-RM needs correct and wrong critiques{mixed} to learn from ({counts}): the GRM "
            f"{cfg.critiques.judge} wrote {wrote} ones; warm it up or train it first (kind judge_train, judge.kind "
            "grm), or raise critiques.samples"
        )

    model = load_seq_cls(cfg.model, num_labels=1, dtype=base_dtype(cfg.train))
    model.config.pad_token_id = tokenizer.pad_token_id
    model = prepare_model(model, cfg.train, cfg.lora, "SEQ_CLS", modules_to_save=["score"])
    pad_id = pad_token_id(tokenizer)
    trainer = MetaRMTrainer(
        model=PackedForward(model, "rewards"),
        args=training_arguments(cfg.train, str(run_.checkpoints)),
        train_dataset=SFTDataset(items),
        data_collator=objective.collator(pad_id, cfg.train.row_tokens, cfg.train.attention),
        objective=objective,
        metrics_path=run_.metrics_path,
    )
    trained = run_.train(trainer, cfg.train, evaluates=False)
    whole = whole_state_dict(model)  # FSDP: the shards gathered for the save, every rank taking part
    if not trainer.is_world_process_zero():
        return {}
    stats = RewardStats(mean=0.0, std=1.0, n=0, computed_on="none: a meta-RM's logit is read raw (p = sigmoid)")
    rated = "works (read: rule)" if cfg.critiques.read == "rule" else "critiques"
    card = {"base model": cfg.model, f"rates {rated} of": cfg.critiques.judge, "loss": objective.summary}
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
            "objective": cfg.objective,
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
    objective = OBJECTIVES[report.get("objective", "pointwise")]
    lines = [
        f"trained a meta-RM ({report['method']}, {report.get('objective', 'pointwise')}) on "
        f"{ex.get('training_items', ex['critiques'] - ex['too_long'])} {objective.unit} from {ex['critiques']} "
        f"critiques of {report['judge']} ({ex['correct']} correct) from {ex['pairs']} pairs, {report['steps']} steps, "
        f"{report['train_seconds']}s",
        f"saved to {report['model_dir']}",
    ]
    ev = report.get("eval") or {}
    if ev:
        lines.append(
            f"held-out: {ev['critiques']} critiques, {ev['correct_share']:.3f} correct; meta-RM accuracy "
            f"{ev['accuracy']:.3f}{_interval(ev.get('accuracy_ci95'))}, "
            f"AUC {ev['auc']:.3f}{_interval(ev.get('auc_ci95'))}"
            + (
                f", within-query AUC {ev['within_query_auc']:.3f}{_interval(ev['within_query_auc_ci95'])} "
                f"({ev['within_query_groups']} groups with right and wrong critiques)"
                if "within_query_auc" in ev
                else ""
            )
        )
    return lines


def _interval(ci: list[float] | None) -> str:
    """' [low, high]' for a report's interval; nothing for a report written before intervals were."""
    return f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else ""
