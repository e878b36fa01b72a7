"""`align rm train` for generative judges (a config of kind `judge_train`): pair-PM, thinking judge, GRM.

Reads top to bottom: config -> training examples built from labelled pairs -> SFT of a causal LM on them
(LoRA or full; packed sequences; loss = mean negative log-likelihood of the judge's answer tokens, or for a pair-PM
with `judge.objective: symmetric` the logistic loss of its A-vs-B logit read in both orders, `OBJECTIVES`) -> held-out
accuracy of the trained judge through its scorer -> save (the model or adapter directory the scorer loads).

How each kind turns a labelled pair (prompt, chosen, rejected) into what the judge learns to write:
- `pair_pm` (RLHFlow pair-PM): the pair-PM message with the chosen response at position A or B uniformly at
  random (seeded); the answer is that letter. Deterministic, no sampling.
- `think` (Think-RM warm-up): the current model is sampled `judge.samples` times per pair (order randomised)
  after the forced `<think>\\n`; a sample whose verdict matches the label is kept (`judge.keep: all`, or only the
  longest correct one per pair, `longest`), and the judge is fine-tuned on its own correct reasoning
  (rejection sampling: there is no long-CoT data here).
- `grm` (SPCT rejective fine-tuning): `judge.samples` critiques of the chosen and of the rejected response; draw j
  is correct when its score for the chosen is strictly above its score for the rejected (the pointwise form of
  SPCT's rule: the pair is scored one response per call). Pairs where every draw is correct ("too easy") or none
  is are dropped; the critiques of the correct draws are kept. SPCT's rule-based RL stage needs the online
  trainer.
A pair whose samples all abstain or are wrong contributes nothing and is counted; a run that keeps no example
stops with an error naming the counts. For the multiclass think form a trace is correct when its strength
equals the gold strength of the pair (graded pairs; `generative/warmup.py`), or its sign matches (ungraded).

`judge.examples: template` (think, grm) is the format warm-up a small model needs before it can be
rejection-sampled: the target outputs are written from the pairs' gold grades (`generative/warmup.py`), no
sampling. Then a second run with `model:` set to the warm-up's `model/` directory and `examples: sampled`
does the rejective fine-tuning.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import random
import shutil
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from transformers import Trainer

from prefalign.config import option
from prefalign.errors import UserError
from prefalign.models.forward import PackedForward
from prefalign.models.hub import DEFAULT_MODEL, is_adapter, load_model, load_tokenizer, pad_token_id, resolve
from prefalign.training.config import HeldOutSection, LoraSection, TrainSection
from prefalign.training.metrics import MetricsMixin
from prefalign.training.recipe import start_run
from prefalign.training.trainer import (
    InnerModelCheckpoints,
    base_dtype,
    prepare_model,
    training_arguments,
    whole_state_dict,
)
from preference_data.records import Message, conversation
from preference_data.sources import DataConfig, load_pairs, suite_tasks
from preference_data.sources import load as load_source
from preference_data.tokenize import tokenize_single

from .compare import scorer_report
from .generative.parse import parse_think_answer
from .generative.scorers import THINK_PREFIX, GRMScorer, ThinkJudgeScorer, ToolSet
from .generative.traces import trace_examples
from .generative.training import (
    OrdersCollator,
    SFTCollator,
    SFTDataset,
    SFTExample,
    grm_draw_correct,
    sample_outputs,
    sampling_problems,
)
from .generative.vote import rft_select
from .generative.warmup import gold_grades, grm_targets, grm_two_turn_targets, strength, think_target
from .losses import bradley_terry_loss
from .model_scorers import JUDGE_ANSWERS, judge_answer_ids, pair_pm_message
from .scorers import load_scorer

log = logging.getLogger(__name__)

JudgeKind = Literal["pair_pm", "think", "grm"]


@dataclass
class JudgeSection:
    kind: JudgeKind = option("pair_pm", "which judge: pair_pm, think (thinking judge) or grm (generative RM)")
    form: Literal["binary", "multiclass"] = option("binary", "think: verdict form (A/B, or a strength -3..3)")
    samples: int = option(4, "think, grm: outputs sampled per pair (per response for grm) to select from")
    temperature: float = option(0.8, "think, grm: sampling temperature")
    top_p: float = option(0.95, "think, grm: nucleus sampling mass")
    max_new_tokens: int = option(256, "think, grm: longest sampled output")
    keep: Literal["all", "longest"] = option("all", "think: keep every correct trace, or the longest per pair")
    examples: Literal["sampled", "template", "traces"] = option(
        "sampled",
        "think, grm: rejection-sampled from the model (sampled); written as the check of each suite task, the "
        "verdict from its gold grades, as a warm-up (template; reward_models/generative/warmup.py); or read from "
        "a stronger judge's outputs in a file (traces; see `traces`)",
    )
    orders: Literal["both", "random"] = option(
        "both",
        "pair_pm, think (template, traces): each pair learnt with the chosen response at A and at B (both: "
        "positions balanced, two examples a pair) or at one seeded random position (random)",
    )
    traces: str | None = option(
        None,
        "examples: traces: a JSONL file of a stronger judge's outputs: think rows {prompt, response_a, response_b, "
        "reasoning, verdict A|B}, grm rows {prompt, response, critique, score 1..10} (docs/reward-models.md)",
    )
    principles: Literal["with_response", "from_prompt"] = option(
        "with_response",
        "grm (examples: template): the criteria and the work written in the critique after the response "
        "(with_response: one example per response), or from the query alone in a first turn, the response and its "
        "analysis in a second (from_prompt: one example per distinct query and one per response; the scorer's "
        "`principles`, which the held-out evaluation uses too)",
    )
    read: Literal["model", "rule"] = option(
        "model",
        "grm, principles: from_prompt: who reads a response against the judge's work (the scorer's `read`): the "
        "judge in a second turn (model: the warm-up teaches both turns), or a rule (rule: the warm-up teaches the "
        "work alone, one example per distinct query; preference_data.suite.work_reading checks each response "
        "against it in the held-out evaluation)",
    )
    tools: ToolSet = option(
        "none",
        "think, grm: tools the judge calls as it writes in its held-out evaluation (the scorer's `tools`; "
        "calculator: the exact value after each `a op b =` it writes; lists: a list operation's result). Training is "
        "unchanged: the warm-up's work already writes every value right",
    )
    objective: Literal["nll", "symmetric"] = option(
        "nll",
        "pair_pm: what the answer is trained by: nll (the answer letter's next-token likelihood, each order of a "
        "pair an example of its own) or symmetric (both orders of a pair in one batch, loss -log sigmoid(z_AB - "
        "z_BA), z = logit(A) - logit(B) at the answer: a preference for a position cancels, only the answers' "
        "contents are learnt; needs orders: both)",
    )
    seed: int = option(0, "position shuffling and sampling seed")
    eval_temperature: float = option(
        0.0, "think, grm: the held-out evaluation's sampling temperature (0: greedy, the same numbers every rerun)"
    )

    def check(self) -> list[str]:
        problems = []
        if self.examples != "sampled" and self.kind == "pair_pm":
            problems.append(
                f"examples: {self.examples} is a warm-up for think and grm; pair_pm learns the label directly"
            )
        if self.objective == "symmetric" and (self.kind != "pair_pm" or self.orders != "both"):
            problems.append(
                f"objective: symmetric reads a pair-PM's two orders of a pair together: it needs kind: pair_pm and "
                f"orders: both (got kind: {self.kind}, orders: {self.orders})"
            )
        if self.tools != "none" and self.kind == "pair_pm":
            problems.append(f"tools: {self.tools} is for judges that write (think, grm); pair_pm writes one letter")
        if (self.examples == "traces") != (self.traces is not None):
            problems.append(
                "traces: give a traces file exactly when examples: traces"
                if self.traces is not None
                else "examples: traces needs traces: FILE (a stronger judge's outputs, docs/reward-models.md)"
            )
        if self.read == "rule" and self.principles != "from_prompt":
            problems.append("read: rule reads the work a judge writes from the query: it needs principles: from_prompt")
        if self.principles == "from_prompt" and (self.kind != "grm" or self.examples != "template"):
            problems.append(
                "principles: from_prompt is built for judge.kind: grm with examples: template (the suite's checks "
                f"written in two turns), not kind {self.kind} with examples: {self.examples}"
            )
        return problems + sampling_problems(self)


@dataclass
class JudgeTrainConfig:
    kind: Literal["judge_train"] = option("judge_train", "config kind (fixed)")
    model: str = option(DEFAULT_MODEL, "base causal LM: builtin:<name>, a local directory, or a hub id")
    output_dir: str = option(
        "runs/judge", "run directory (config, metrics, report.html with its dashboard, checkpoints, model/)"
    )
    judge: JudgeSection = option(factory=JudgeSection, doc="the judge kind and how its examples are built")
    data: DataConfig = option(factory=DataConfig, doc="labelled pairs to learn from")
    eval: HeldOutSection = option(factory=HeldOutSection, doc="held-out pairs the trained judge is scored on")
    train: TrainSection = option(factory=TrainSection, doc="optimisation settings")
    lora: LoraSection = option(factory=LoraSection, doc="LoRA settings (train.method: lora)")

    def check(self) -> list[str]:
        return self.train.token_budget_unsupported()


Built = tuple[list[SFTExample], dict[str, int]]
ExampleBuilder = Callable[[list[Any], JudgeSection, Any, Any], Built]


# --- examples ----------------------------------------------------------------------------------------------


def positions(pairs: list[Any], orders: str, seed: int) -> list[tuple[bool, ...]]:
    """Where each pair's chosen response goes, one tuple per pair (True: at B): both positions (A, then B), or one
    uniformly random position (seeded)."""
    if orders == "both":
        return [(False, True) for _ in pairs]
    rng = random.Random(seed)
    return [(rng.random() < 0.5,) for _ in pairs]


def _sides(p: Any, flip: bool) -> tuple[Any, Any]:
    """(response A, response B) with the chosen response at B when `flip`."""
    return (p.rejected, p.chosen) if flip else (p.chosen, p.rejected)


def pair_pm_examples(pairs: list[Any], seed: int, orders: str = "both") -> list[SFTExample]:
    """One example per position of a pair (`positions`); the answer is the letter the chosen response is at."""
    return [
        SFTExample(p.id, pair_pm_message(p.prompt, *_sides(p, flip)), "B" if flip else "A")
        for p, flips in zip(pairs, positions(pairs, orders, seed), strict=True)
        for flip in flips
    ]


def _think_messages(pairs: list[Any], judge: JudgeSection) -> tuple[list[bool], list[str]]:
    """The judge message of each pair with the chosen response at A or B uniformly at random (seeded);
    flips[i] is True when the chosen response is B."""
    flips = [f for (f,) in positions(pairs, "random", judge.seed)]
    messages = [
        ThinkJudgeScorer.message(p.prompt, *_sides(p, f), judge.form) for p, f in zip(pairs, flips, strict=True)
    ]
    return flips, messages


def _text(conv: Any) -> str:
    return "\n".join(m.content for m in conv)


def _think_template(pairs: list[Any], judge: JudgeSection, tasks: dict[str, Any], counts: Counter[str]) -> Built:
    """One example per position of a pair of a suite task: the judge message and the check written out."""
    out: list[SFTExample] = []
    for p, flips in zip(pairs, positions(pairs, judge.orders, judge.seed), strict=True):
        task = tasks.get(p.attributes.get("task_id", ""))
        if task is None:
            counts["no_check"] += 1
            continue
        targets = [think_target(task, _text(p.chosen), _text(p.rejected), f, judge.form) for f in flips]
        if any(t is None for t in targets):
            counts["not_worse"] += 1
            continue
        for flip, target in zip(flips, targets, strict=True):
            msg = ThinkJudgeScorer.message(p.prompt, *_sides(p, flip), judge.form)
            out.append(SFTExample(p.id, msg, THINK_PREFIX + str(target)))
    return out, dict(counts)


def _grm_one_turn(p: Any, task: Any, seen: set[str], judge: JudgeSection) -> list[SFTExample] | None:
    """`principles: with_response`: each response's message and its critique written out."""
    targets = grm_targets(task, _text(p.chosen), _text(p.rejected))
    if targets is None:
        return None
    return [
        SFTExample(p.id, GRMScorer.message(p.prompt, p.chosen), targets[0]),
        SFTExample(p.id, GRMScorer.message(p.prompt, p.rejected), targets[1]),
    ]


def _grm_two_turns(p: Any, task: Any, seen: set[str], judge: JudgeSection) -> list[SFTExample] | None:
    """`principles: from_prompt`: the query's criteria and work (once per distinct query in `seen`), then each
    response's analysis and score after them (`read: model`; with `read: rule` the work alone)."""
    targets = grm_two_turn_targets(task, _text(p.chosen), _text(p.rejected))
    if targets is None:
        return None
    principles, *readings = targets
    first = GRMScorer.principles_message(p.prompt)
    out = [] if first in seen else [SFTExample(p.id, first, principles)]
    seen.add(first)
    if judge.read == "rule":  # the rule reads the responses: the work is all the judge writes
        return out
    for response, reading in zip((p.chosen, p.rejected), readings, strict=True):
        out.append(SFTExample(p.id, GRMScorer.reading_conversation(p.prompt, principles, response), reading))
    return out


# How a GRM's warm-up examples of one pair are written, by `judge.principles`.
GRM_LAYOUTS: dict[str, Callable[[Any, Any, set[str], JudgeSection], list[SFTExample] | None]] = {
    "with_response": _grm_one_turn,
    "from_prompt": _grm_two_turns,
}


def _grm_template(pairs: list[Any], judge: JudgeSection, tasks: dict[str, Any], counts: Counter[str]) -> Built:
    """The examples of each pair of a suite task, in the layout `judge.principles` names (`GRM_LAYOUTS`)."""
    out: list[SFTExample] = []
    seen: set[str] = set()
    for p in pairs:
        task = tasks.get(p.attributes.get("task_id", ""))
        examples = None if task is None else GRM_LAYOUTS[judge.principles](p, task, seen, judge)
        if examples is None:
            counts["no_check" if task is None else "not_worse"] += 1
            continue
        out += examples
    return out, dict(counts)


# Warm-up examples written as the check of a suite task, by judge kind (pair_pm learns its label directly).
TEMPLATES: dict[str, Callable[[list[Any], JudgeSection, dict[str, Any], Counter[str]], Built]] = {
    "think": _think_template,
    "grm": _grm_template,
}


def template_examples(
    pairs: list[Any], judge: JudgeSection, tasks: dict[str, Any]
) -> tuple[list[SFTExample], dict[str, int]]:
    """Warm-up examples written as the check of each pair's suite task (`tasks`: task id -> `TaskView`, from
    `preference_data.sources.suite_tasks`); pairs without a task are skipped and counted (`no_check`)."""
    counts: Counter[str] = Counter(pairs=len(pairs), no_check=0, not_worse=0)
    out, _ = TEMPLATES[judge.kind](pairs, judge, tasks, counts)
    counts["pairs_kept"] = counts["pairs"] - counts["no_check"] - counts["not_worse"]
    if counts["no_check"]:
        first = next(p for p in pairs if p.attributes.get("task_id", "") not in tasks)
        log.warning(
            "%d of %d pairs are not pairs of a suite task this run can check (first: id %s) and are skipped by "
            "examples: template; for other data, warm up on a stronger judge's outputs (examples: traces)",
            counts["no_check"],
            len(pairs),
            first.id,
        )
    return out, dict(counts)


def think_examples(
    pairs: list[Any], judge: JudgeSection, model: Any, tokenizer: Any
) -> tuple[list[SFTExample], dict[str, int]]:
    """Rejection-sampled reasoning traces whose verdict matches the label (see the module docstring)."""
    flips, messages = _think_messages(pairs, judge)
    samples = sample_outputs(model, tokenizer, messages, judge, THINK_PREFIX)
    out: list[SFTExample] = []
    counts = {"pairs": len(pairs), "samples": 0, "correct": 0, "abstained": 0, "pairs_kept": 0, "ungraded": 0}
    for p, f, msg, texts in zip(pairs, flips, messages, samples, strict=True):
        want = "B" if f else "A"
        grades = gold_grades(p)
        want_strength = None
        if judge.form == "multiclass" and grades is not None:
            want_strength = strength(*grades) * (1 if f else -1)
        counts["ungraded"] += judge.form == "multiclass" and grades is None
        good = []
        for t in texts:
            v = parse_think_answer(t, judge.form)
            counts["samples"] += 1
            counts["abstained"] += not v.ok
            if v.label == want and (want_strength is None or v.strength == want_strength):
                good.append(t)
        counts["correct"] += len(good)
        if judge.keep == "longest" and good:
            good = [max(good, key=len)]
        counts["pairs_kept"] += bool(good)
        out += [SFTExample(p.id, msg, THINK_PREFIX + t) for t in good]
    return out, counts


def grm_examples(
    pairs: list[Any], judge: JudgeSection, model: Any, tokenizer: Any
) -> tuple[list[SFTExample], dict[str, int]]:
    """SPCT rejective fine-tuning examples (see the module docstring)."""
    messages = []
    for p in pairs:
        messages += [GRMScorer.message(p.prompt, p.chosen), GRMScorer.message(p.prompt, p.rejected)]
    samples = sample_outputs(model, tokenizer, messages, judge, "")
    out: list[SFTExample] = []
    counts = {"pairs": len(pairs), "draws": 0, "correct": 0, "abstained": 0, "too_easy": 0, "pairs_kept": 0}
    for i, p in enumerate(pairs):
        chosen, rejected = samples[2 * i], samples[2 * i + 1]
        correct = []
        for c, r in zip(chosen, rejected, strict=True):
            ok, abstained = grm_draw_correct(c, r)
            counts["draws"] += 1
            counts["abstained"] += abstained
            correct.append(ok)
        counts["correct"] += sum(correct)
        counts["too_easy"] += all(correct)
        keep = rft_select(correct)
        counts["pairs_kept"] += bool(keep)
        for j in keep:
            out.append(SFTExample(p.id, messages[2 * i], chosen[j]))
            out.append(SFTExample(p.id, messages[2 * i + 1], rejected[j]))
    return out, counts


# --- the trainer -------------------------------------------------------------------------------------------


class SFTTrainer(InnerModelCheckpoints, MetricsMixin, Trainer):
    """Mean negative log-likelihood of the completion tokens of packed sequences."""

    def __init__(self, *args: Any, metrics_path: Path | None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._init_metrics(metrics_path)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        logps = model(**inputs)  # (S,) summed completion log-probs
        tokens = inputs["lengths"].sum().clamp(min=1)
        loss = -logps.sum() / tokens
        self.stash({"nll_per_token": loss.item(), "tokens": float(inputs["real_tokens"])})
        return (loss, {"logps": logps}) if return_outputs else loss


class PairPMOrdersTrainer(SFTTrainer):
    """The symmetric pair-PM objective: a batch holds each pair read with its chosen response at A (first half) and
    at B (second half); z = logit(A) - logit(B) at the answer position, s = z_AB - z_BA, loss = mean softplus(-s)
    (-log sigmoid s). A bias toward a position adds the same amount to both z and cancels in s."""

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        loss, stats = symmetric_pair_pm_loss(model(**inputs))
        self.stash(stats)
        return (loss, {}) if return_outputs else loss


def symmetric_pair_pm_loss(logits: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
    """The symmetric objective from the (2n, 2) logits of A and B, the n pairs' chosen-at-A reads first:
    mean softplus(-(z_AB - z_BA)), z = logit(A) - logit(B); and its batch's share of pairs ranked right,
    of pairs right in both orders alone, and the mean position bias (z_AB + z_BA) / 2."""
    z = logits[:, 0] - logits[:, 1]
    n = z.shape[0] // 2
    bt = bradley_terry_loss(z[:n], z[n:])  # -log sigmoid(z_AB - z_BA): z read as the two "rewards" of the pair
    stats = {
        "pair_accuracy": float(bt.accuracy),
        "both_orders_right": float(((z[:n] > 0) & (z[n:] < 0)).float().mean()),
        "position_bias": float(bt.reward_mean),  # the mean of every z: each pair's (z_AB + z_BA) / 2, averaged
    }
    return bt.losses.mean(), stats


PLOT_KEYS = ["loss", "nll_per_token", "pair_accuracy", "both_orders_right"]


def _encode(e: SFTExample, tokenizer: Any) -> tuple[list[int], list[int]]:
    """An example's (prompt ids, completion ids)."""
    prompt = [Message("user", e.message)] if isinstance(e.message, str) else conversation(e.message)
    return tokenize_single(tokenizer, prompt, [Message("assistant", e.completion)])


def _tokenize(examples: list[SFTExample], tokenizer: Any, max_length: int) -> tuple[list[Any], int]:
    items, too_long = [], 0
    for e in examples:
        p, r = _encode(e, tokenizer)
        if len(p) + len(r) > max_length:
            too_long += 1
            continue
        items.append((p, r))
    return items, too_long


def _tokenize_orders(examples: list[SFTExample], tokenizer: Any, max_length: int) -> tuple[list[Any], int]:
    """The symmetric objective's items: (prompt A-first, [A], prompt B-first, [B]) per pair, from
    `pair_pm_examples(orders="both")` (a pair's two examples in a row); the response is the answer token alone. A
    pair whose either order is over `max_length` is left out whole (counted as its two examples)."""
    answers = judge_answer_ids(tokenizer, tokenizer.name_or_path)
    items, too_long = [], 0
    for ab, ba in zip(examples[::2], examples[1::2], strict=True):
        (p1, r1), (p2, r2) = _encode(ab, tokenizer), _encode(ba, tokenizer)
        if (ab.completion, ba.completion) != JUDGE_ANSWERS or (r1[0], r2[0]) != tuple(answers):
            raise UserError(
                f"pair {ab.id}: the symmetric pair-PM objective needs its two orders in a row, answered "
                f"{JUDGE_ANSWERS} by the tokens {answers}; got {ab.completion!r}, {ba.completion!r} written as "
                f"{r1[:1]}, {r2[:1]}"
            )
        if max(len(p1), len(p2)) + 1 > max_length:
            too_long += 2
            continue
        items.append((p1, r1[:1], p2, r2[:1]))
    return items, too_long


@dataclass(frozen=True)
class Objective:
    """How a judge's examples are trained: tokenized into items, read by a forward, batched by a collator, lost
    by a trainer."""

    items: Callable[[list[SFTExample], Any, int], tuple[list[Any], int]]
    forward: Callable[[Any, Any], PackedForward]  # (model, tokenizer) -> the wrapper the trainer calls
    collator: type
    trainer: type


OBJECTIVES: dict[str, Objective] = {
    "nll": Objective(_tokenize, lambda m, tok: PackedForward(m, "logps"), SFTCollator, SFTTrainer),
    "symmetric": Objective(
        _tokenize_orders,
        lambda m, tok: PackedForward(m, "answer_logits", answers=judge_answer_ids(tok, tok.name_or_path)),
        OrdersCollator,
        PairPMOrdersTrainer,
    ),
}


def _sampling(judge: JudgeSection) -> dict[str, Any]:
    return {
        "temperature": judge.temperature,
        "top_p": judge.top_p,
        "max_new_tokens": judge.max_new_tokens,
        "tools": judge.tools,
    }


# The scorer options a trained judge is evaluated with, by kind (pair_pm reads its answer's probability: no sampling).
SCORER_OPTIONS: dict[str, Callable[[JudgeSection], dict[str, Any]]] = {
    "pair_pm": lambda judge: {},
    "think": lambda judge: _sampling(judge) | {"form": judge.form},
    "grm": lambda judge: _sampling(judge) | {"principles": judge.principles, "read": judge.read},
}


def _accuracy(kind: JudgeKind, judge: JudgeSection, model_dir: str, pairs: list[Any], dtype: str) -> dict[str, Any]:
    """Held-out accuracy of the saved judge through its scorer (ties and NaN count wrong), per family and corruption
    kind with bootstrap intervals, its position consistency (pairwise judges) and its cost (`compare.scorer_report`);
    generative judges decode at `judge.eval_temperature` (0: greedy, the same numbers on every rerun)."""
    opts: dict[str, Any] = {"model": model_dir, "dtype": dtype, **SCORER_OPTIONS[kind](judge)}
    if kind != "pair_pm":
        opts["temperature"] = judge.eval_temperature
    scorer: Any = load_scorer(kind, **opts)
    report = scorer_report(scorer, pairs)
    report.pop("correct")
    report.pop("consistent", None)
    return {"pairs": len(pairs), "nan_pairs": sum((report.get("failures") or {}).values()), **report}


def _pair_pm_built(pairs: list[Any], judge: JudgeSection, model: Any, tokenizer: Any) -> Built:
    return pair_pm_examples(pairs, judge.seed, judge.orders), {}


# How a judge kind's training examples are built, by `judge.examples` (pair_pm learns the pair's label; the config
# check refuses `examples: template` for it).
EXAMPLE_BUILDERS: dict[str, dict[str, ExampleBuilder]] = {
    "pair_pm": {"sampled": _pair_pm_built},
    "think": {"sampled": think_examples},
    "grm": {"sampled": grm_examples},
}


def run(cfg: JudgeTrainConfig, resume: bool = False) -> dict[str, Any]:
    """Build examples, fine-tune, evaluate and save a judge as `cfg` says; return the report."""
    run_ = start_run(cfg, cfg.train, f"rm train ({cfg.judge.kind} judge)", resume)
    tokenizer = load_tokenizer(cfg.model)
    pairs, data_report = load_pairs(cfg.data)
    # A warm-up run's adapter directory is a valid start: merged (in fp32) into its base.
    from_adapter = is_adapter(resolve(cfg.model))
    model = load_model(cfg.model, dtype=base_dtype(cfg.train), merge=True)
    counts: dict[str, int] = {"pairs": len(pairs)}
    held_out = load_source(cfg.eval.data_config(cfg.data)).pairs if cfg.eval.split != "none" else []
    if cfg.eval.split != "none" and not held_out:
        raise UserError(
            f"eval.split: {cfg.eval.split} holds no pairs, so the trained judge could not be evaluated; nothing was "
            "trained. For the suite give data.suite_dev_fraction (e.g. 0.25) for a dev split, or set eval.split: test "
            "or none"
        )
    model.eval()
    if cfg.judge.examples == "template":
        tasks = suite_tasks(cfg.data) if cfg.data.source == "suite" else {}
        examples, built = template_examples(pairs, cfg.judge, tasks)
    elif cfg.judge.examples == "traces":
        examples, built = trace_examples(str(cfg.judge.traces), cfg.judge)
    else:
        examples, built = EXAMPLE_BUILDERS[cfg.judge.kind][cfg.judge.examples](pairs, cfg.judge, model, tokenizer)
    counts |= built
    objective = OBJECTIVES[cfg.judge.objective]
    items, too_long = objective.items(examples, tokenizer, cfg.train.max_length)
    counts |= {"examples": len(examples), "too_long": too_long, "kept": len(items)}
    run_.save_data_report({"data": data_report.to_dict(), "examples": counts})
    if not items:
        raise UserError(
            f"no {cfg.judge.kind} training example left ({counts}): the sampled outputs were never correct or "
            "never followed the answer format, no pair carries gold grades (examples: template), or every "
            "example exceeds train.max_length; warm the model up first (judge.examples: template), raise "
            "judge.samples, use a stronger base model, or start from pair_pm"
        )
    model = prepare_model(model, cfg.train, cfg.lora, "CAUSAL_LM")
    pad_id = pad_token_id(tokenizer)
    trainer = objective.trainer(
        model=objective.forward(model, tokenizer),
        args=training_arguments(cfg.train, str(run_.checkpoints)),
        train_dataset=SFTDataset(items),
        data_collator=objective.collator(pad_id, cfg.train.row_tokens, cfg.train.attention),
        metrics_path=run_.metrics_path,
    )
    trained = run_.train(trainer, cfg.train, evaluates=False)
    whole = whole_state_dict(model)  # FSDP: the shards gathered for the save, every rank taking part
    if not trainer.is_world_process_zero():
        return {}
    model_dir = run_.dir / "model"
    if from_adapter and cfg.train.method == "lora":
        # The new adapter sits on the merged warm-up model, which has no directory of its own: save the merge
        # (fp32, so the two small deltas are not rounded away); under FSDP, the gathered adapter on that model.
        if whole is not None:  # the gathered adapter, put on the warm-up model read again
            gathered = run_.dir / "adapter.gathered"
            try:
                model.save_pretrained(str(gathered), state_dict=whole)
                model, whole = load_model(str(gathered), "float32", merge=False, onto=cfg.model), None
            finally:
                shutil.rmtree(gathered, ignore_errors=True)
        model = model.float().merge_and_unload()
    model.save_pretrained(str(model_dir), state_dict=whole)
    tokenizer.save_pretrained(str(model_dir))
    eval_report: dict[str, Any] = {}
    if cfg.eval.split != "none":
        dtype = "bfloat16" if cfg.train.precision == "bf16" else "float32"
        eval_report = _accuracy(cfg.judge.kind, cfg.judge, str(model_dir), held_out, dtype)
    return run_.finish(
        {
            "model_dir": str(model_dir),
            "base_model": cfg.model,
            "judge": dataclasses.asdict(cfg.judge),
            "method": cfg.train.method,
            "precision": run_.precision,
            "examples": counts,
            "train_pairs": len(pairs),
            **trained.to_dict(),
            "eval": eval_report,
            "data": data_report.to_dict(),
        },
        PLOT_KEYS,
    )


def summary_lines(report: dict[str, Any]) -> list[str]:
    ev = report.get("eval") or {}
    lines = [
        f"trained a {report['judge']['kind']} judge ({report['method']}) on {report['examples']['kept']} examples "
        f"from {report['train_pairs']} pairs, {report['steps']} steps, {report['train_seconds']}s",
        f"examples: {report['examples']}",
        f"saved to {report['model_dir']}",
    ]
    if ev:
        cost = ev.get("cost")
        extra = (
            f"; {cost['generated_tokens_per_item']:.0f} generated tokens and {cost['seconds_per_item']:.2f}s per item"
            if cost
            else ""
        )
        lo, hi = ev.get("interval", [math.nan, math.nan])
        lines.append(
            f"held-out accuracy {ev['accuracy']:.3f} [{lo:.3f}, {hi:.3f}] on {ev['pairs']} pairs "
            f"({ev['nan_pairs']} NaN, {ev.get('ties', 0)} ties){extra}"
        )
        for key, what in (
            ("checked", "on the wrong-value and violated-constraint pairs"),
            ("position_consistency", "position consistency"),
        ):
            if key in ev:
                v = ev[key]
                lines.append(f"  {v['accuracy']:.3f} [{v['interval'][0]:.3f}, {v['interval'][1]:.3f}] {what}")
        lines += [
            f"  {name}: {v['accuracy']:.3f} ({v['pairs']} pairs)"
            for table in ("by_family", "by_corruption")
            for name, v in (ev.get(table) or {}).items()
        ]
    return lines
