"""Every reward source behind the one scorer interface (`reward_models/base.py`), built by name from one table.

    scorer = load_scorer("scalar", model="runs/rm", normalize=True)            # a trained reward model
    scorer = load_scorer({"type": "implicit", "model": "runs/dpo", "reference": "builtin:smollm2-135m-instruct"})
    scorer = load_scorer("judge", model="builtin:smollm2-135m-instruct")       # a chat model as pairwise judge
    scorer = load_scorer("grader")                                              # the suite's gold graders
    scorer.score(prompts, responses)   # or compare(prompts, a, b) for the judge; see `scorer.kind`

`SCORERS` lists the kinds with what each needs (`align ls scorers`); each kind's options are one dataclass
(`ScalarOptions`, `ImplicitOptions`, `JudgeOptions`, `GraderOptions`), checked by `prefalign.config.build`,
so an unknown or mistyped option is an error that lists every problem at once.

How the model scorers (scalar, implicit, judge) run:
- Tokenization is stage 1's (`tokenize_single`, `tokenize_prompts`): the chat template is rendered once, the
  prompt/response boundary is found on tokens and every response ends with the EOS generation stops at, exactly
  as in training.
- Length bucketing: items are sorted by token count (longest first) and cut into batches of at most
  `batch_tokens` tokens; a batch is packed (`pack_single`, rows as long as its longest item) and run once
  under `torch.no_grad`. Scores go back in input order; batch size and order do not change them (tests check it).
- Reading the reward: by position (`last_token_rewards` reads the packed batch's last response token), never by
  searching for a pad id. SmolLM2's pad token is its EOS `<|im_end|>`, so `AutoModelForSequenceClassification`'s
  own pooling ("last token that is not pad") would read the token *before* the closing EOS.
- `max_length` (default: the model's `max_position_embeddings`): a longer item keeps its whole response and
  loses prompt tokens from the left (TRL's `keep_end`, as in training); a response that alone does not fit, or a
  judge prompt that does not fit, scores NaN.
- A failed item scores NaN and never stops the run: an empty response, a conversation the chat template
  rejects, an item too long, a batch whose forward pass raises (retried item by item first). `scorer.failures`
  counts them by reason; the benchmark runner counts the NaNs and reports them.
- `describe()` holds what changes a score (model and a fingerprint of its weight files, dtype, normalisation,
  beta, template, ...), not what does not (batch size, device), so cached benchmark scores stay valid when only
  those change and are not reused after a model is retrained into the same directory.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

from prefalign.config import build, option
from prefalign.errors import UserError
from prefalign.models.hub import is_adapter, load_model, pad_token_id, resolve, weights_fingerprint
from prefalign.registry import Table
from preference_data.records import Conversation

from .base import Scorer, ScorerKind
from .generative.scorers import GRMOptions, GRMScorer, ThinkJudgeScorer, ThinkOptions
from .options import BATCH_TOKENS, ModelOptions, _device, _is_empty, _resolve_dtype, _response_text, _turns
from .polar.options import PolarOptions

if TYPE_CHECKING:
    from prefalign.models.batch import Layout
    from preference_data.tokenize import ResponseEnd

log = logging.getLogger(__name__)

Item = tuple[list[int], list[int]]  # (prompt ids (P,), response ids (T,)) of one scored sequence


# ---------------------------------------------------------------------------------------------------------
# Options: one dataclass per scorer kind
# ---------------------------------------------------------------------------------------------------------


@dataclass
class ScalarOptions(ModelOptions):
    normalize: bool = option(
        False,
        "report (r - mean) / std with the statistics saved beside the RM "
        "(reward_stats.json) instead of the raw head output",
    )


@dataclass
class ImplicitOptions(ModelOptions):
    reference: str | None = option(
        None,
        "reference causal LM; default when `model` is a peft adapter: its base "
        "model with the adapters disabled (no second copy in memory)",
    )
    reference_free: bool = option(
        False, "score log pi(y|x) alone, without a reference (SimPO-style with normalization 'mean')"
    )
    beta: float = option(
        0.1,
        "the beta of r = beta * (log pi(y|x) - log pi_ref(y|x)); use the beta the policy "
        "was trained with (DPO) or its gamma-free beta (SimPO)",
    )
    normalization: Literal["sum", "mean"] = option(
        "sum",
        "'sum' of response-token log-probs (DPO, Rafailov et al. 2023, eq. 5) or their 'mean' over response "
        "tokens (SimPO, Meng et al. 2024, eq. 4); applied to the log-ratio when there is a reference",
    )
    process: Literal["none", "min", "sum"] = option(
        "none",
        "implicit process reward (Free Process Rewards, arXiv 2412.01981): split the response into steps "
        "('Step k:' markers, else blank-line paragraphs), reward step k with q_k - q_(k-1) where q_k is beta x "
        "the log-ratio summed through step k's last token, and score the worst step (min) or their sum; "
        "none: the outcome reward above",
    )

    def check(self) -> list[str]:
        problems = super().check()
        if self.reference_free and self.reference is not None:
            problems.append("reference_free: true contradicts reference: give one of them")
        if self.process != "none" and self.normalization != "sum":
            problems.append(
                f"normalization: process rewards ({self.process}) sum log-ratios step by step; use normalization: sum"
            )
        return problems


@dataclass
class JudgeOptions(ModelOptions):
    pass


@dataclass
class GraderOptions:
    tasks: str | None = option(
        None,
        "where the tasks' grading params come from: a suite directory or a "
        "*_prompts.jsonl written by `align data suite`; default: regenerate the suite's "
        "tasks with `seed` and `per_family`",
    )
    seed: int = option(0, "suite seed used to regenerate the tasks (when `tasks` is not given)")
    per_family: int = option(
        200,
        "tasks per family to regenerate (when `tasks` is not given); a suite built with "
        "fewer per family is a prefix of this one",
    )
    objective: str = option(
        "overall",
        "gold score to report: 'overall' or one objective (correctness, instruction_following, conciseness, safety)",
    )


# ---------------------------------------------------------------------------------------------------------
# Shared machinery of the model scorers
# ---------------------------------------------------------------------------------------------------------


class _BatchedModel:
    """Tokenize, bucket by length, pack and run one no-grad forward per batch (scalar, implicit and judge)."""

    def __init__(self, tokenizer: Any, config: Any, opts: ModelOptions, device: Any) -> None:
        self.tokenizer = tokenizer
        self.opts = opts
        self.device = device
        self.max_length = opts.max_length or getattr(config, "max_position_embeddings", None) or 4096
        self.pad_id = pad_token_id(tokenizer)
        self.failures: Counter[str] = Counter()
        self.layout: Layout = "segments"  # packing layout; subclasses pick it from their models (`layout_for`)

    def _pick_layout(self, *models: Any) -> None:
        from prefalign.models.forward import layout_for

        self.layout = layout_for(*models)

    def _fail(self, reason: str, detail: str = "") -> None:
        if not self.failures[reason]:
            log.warning("%s: an item scores NaN (%s)%s", type(self).__name__, reason, f": {detail}" if detail else "")
        self.failures[reason] += 1

    # where response ids end (preference_data.tokenize); scalar RMs read their own setting
    response_end: ResponseEnd = "eos"

    def _encode(self, prompt: Conversation, response: Conversation) -> Item | None:
        """Token ids of one (prompt, response), the prompt cut from the left to fit; None (and counted) on failure."""
        from preference_data.tokenize import tokenize_single

        if _is_empty(response):
            self._fail("empty_response")
            return None
        try:
            p_ids, r_ids = tokenize_single(self.tokenizer, prompt, response, response_end=self.response_end)
        except UserError as e:  # the chat template rejected the conversation
            self._fail("template_error", str(e))
            return None
        if len(r_ids) >= self.max_length:
            self._fail("response_too_long", f"{len(r_ids)} response tokens >= max_length {self.max_length}")
            return None
        if len(p_ids) + len(r_ids) > self.max_length:
            p_ids = p_ids[len(p_ids) + len(r_ids) - self.max_length :]
        return p_ids, r_ids

    def _run(self, items: list[Item | None], forward: Callable[[Any], Any]) -> list[float]:
        """`forward(packed batch) -> (S,)` over every item, in length buckets; NaN where an item is None or fails."""
        out = [math.nan] * len(items)
        size = {i: len(it[0]) + len(it[1]) for i, it in enumerate(items) if it is not None}
        order = sorted(size, key=lambda i: -size[i])  # similar lengths share a batch; the longest run first
        batch: list[int] = []
        used = 0
        for i in order:
            if batch and used + size[i] > self.opts.batch_tokens:
                self._forward(batch, items, forward, out)
                batch, used = [], 0
            batch.append(i)
            used += size[i]
        if batch:
            self._forward(batch, items, forward, out)
        return out

    def _forward(
        self, idx: list[int], items: list[Item | None], forward: Callable[[Any], Any], out: list[float]
    ) -> None:
        import torch

        from preference_data.packing import pack_single

        try:
            # "mask" layout: rows as long as the batch's longest item (attention costs tokens x row length
            # under the block-diagonal mask, and the batch is one length bucket, so rows come out nearly full)
            encoded = cast("list[Item]", [items[i] for i in idx])  # `_run` batches only encoded items
            longest = max(len(p) + len(r) for p, r in encoded)
            packed = pack_single(
                [p for p, _ in encoded],
                [r for _, r in encoded],
                self.pad_id,
                row_tokens=longest,
                layout=self.layout,
            )
            with torch.no_grad():
                values = forward(packed.to(self.device)).float().cpu().tolist()
        except RuntimeError as e:
            # e.g. out of memory on one long batch: retry item by item, so one item cannot sink the run
            if len(idx) > 1:
                for i in idx:
                    self._forward([i], items, forward, out)
                return
            self._fail("forward_error", str(e).splitlines()[0] if str(e) else type(e).__name__)
            return
        for i, v in zip(idx, values, strict=True):
            out[i] = float(v)


# ---------------------------------------------------------------------------------------------------------
# scalar: a sequence-classification reward model
# ---------------------------------------------------------------------------------------------------------


class ScalarScorer(_BatchedModel):
    """Pointwise: the score head of a sequence-classification RM, read at the last token of the response."""

    kind: ScorerKind = "pointwise"
    name = "scalar"
    opts: ScalarOptions

    def __init__(self, opts: ScalarOptions) -> None:
        from .checkpoint import STATS_FILE, load_rm

        device = _device(opts.device)
        opts = _resolve_dtype(opts, device, self.name)
        if opts.normalize and not (Path(resolve(opts.model)) / STATS_FILE).exists():
            raise UserError(
                f"normalize: true needs the RM's reward statistics, but {opts.model} has no {STATS_FILE} "
                "(reward_models.checkpoint.save_rm writes it); or use normalize: false"
            )
        model, tokenizer, self.stats = load_rm(opts.model, dtype=opts.dtype)
        num_labels = getattr(model.config, "num_labels", 1)
        if num_labels != 1:
            raise UserError(
                f"{opts.model} has {num_labels} score heads; the scalar scorer reads a single reward (num_labels = 1)"
            )
        super().__init__(tokenizer, model.config, opts, device)
        self.response_end = self.stats.response_end  # where the RM was trained to read its reward
        self.model = model.to(device)
        self._pick_layout(self.model)

    def score(self, prompts: list[Conversation], responses: list[Conversation]) -> list[float]:
        from prefalign.models.forward import last_token_rewards

        items = [self._encode(p, r) for p, r in zip(prompts, responses, strict=True)]
        raw = self._run(items, lambda batch: last_token_rewards(self.model, batch)[:, 0])  # (S,)
        if not self.opts.normalize:
            return raw
        return [self.stats.normalise(r) for r in raw]

    def describe(self) -> dict[str, Any]:
        return {
            "model": self.opts.model,
            "weights": weights_fingerprint(self.opts.model),
            "dtype": self.opts.dtype,
            "normalize": self.opts.normalize,
            "stats": dataclasses.asdict(self.stats),
            "response_end": self.response_end,
            "max_length": self.max_length,
        }


# ---------------------------------------------------------------------------------------------------------
# implicit: the DPO reward of a policy against its reference
# ---------------------------------------------------------------------------------------------------------


class ImplicitScorer(_BatchedModel):
    """Pointwise: r = beta * (log pi(y|x) - log pi_ref(y|x)) (Rafailov et al. 2023, eq. 5), summed or averaged
    over response tokens; or beta * log pi(y|x) without a reference (averaged: SimPO's reward, Meng et al. 2024).

    A peft adapter's reference is its own base model with the adapters disabled (`disable_adapter()`), so
    the reference costs no memory; an untrained LoRA adapter (B = 0) therefore scores exactly 0.
    """

    kind: ScorerKind = "pointwise"
    name = "implicit"
    opts: ImplicitOptions

    def __init__(self, opts: ImplicitOptions) -> None:
        from prefalign.models.hub import load_tokenizer

        device = _device(opts.device)
        opts = _resolve_dtype(opts, device, self.name)
        self.policy = load_model(opts.model, opts.dtype, merge=False)
        self.adapter_reference = False
        self.reference = None
        if opts.reference is not None:
            self.reference = load_model(opts.reference, opts.dtype, merge=False)
            if load_tokenizer(opts.reference).get_vocab() != load_tokenizer(opts.model).get_vocab():
                raise UserError(
                    f"policy {opts.model} and reference {opts.reference} use different tokenizers; "
                    "an implicit reward compares log-probs of the same tokens, so use the policy's "
                    "own reference model"
                )
        elif not opts.reference_free:
            if not is_adapter(resolve(opts.model)):
                raise UserError(
                    f"the implicit reward of {opts.model} needs a reference model: give reference "
                    "(the model the policy was trained from), point model at a peft adapter directory "
                    "(its base is the reference), or set reference_free: true"
                )
            self.adapter_reference = True
        super().__init__(load_tokenizer(opts.model), self.policy.config, opts, device)
        self._ends: dict[tuple[int, ...], list[int]] = {}  # step ends per response (process rewards)
        self.policy.to(device)
        if self.reference is not None:
            self.reference.to(device)
        self._pick_layout(self.policy, self.reference)

    def _token_ratios(self, batch: Any) -> Any:
        """beta-free per-token log-ratios (N,) (log pi alone without a reference), in target order."""
        from prefalign.models.forward import token_logps

        logps = token_logps(self.policy, batch)
        if self.adapter_reference:
            with self.policy.disable_adapter():
                logps = logps - token_logps(self.policy, batch)
        elif self.reference is not None:
            logps = logps - token_logps(self.reference, batch)
        return logps

    def _process_rewards(self, batch: Any) -> Any:
        """Per sequence: the min or sum of its step rewards (`generative.implicit_prm`)."""
        import torch

        from .generative.implicit_prm import aggregate, step_rewards

        ratios = self._token_ratios(batch).tolist()
        seqs = batch.target_seq.tolist()
        ids = batch.target_ids.tolist()
        per: list[tuple[list[float], list[int]]] = [([], []) for _ in range(batch.num_sequences)]
        for r, s, t in zip(ratios, seqs, ids, strict=True):
            per[s][0].append(r)
            per[s][1].append(t)
        out = []
        for r, t in per:
            _, steps = step_rewards(r, self._step_ends(t), self.opts.beta)
            out.append(aggregate(steps, cast("Literal['min', 'sum']", self.opts.process)))
        return torch.tensor(out)

    def _step_ends(self, response_ids: list[int]) -> list[int]:
        """The index of each step's last token in `response_ids` (the last step ends at the last token)."""
        from .generative.implicit_prm import split_steps

        key = tuple(response_ids)
        if key not in self._ends:
            decode = lambda n: self.tokenizer.decode(response_ids[:n], skip_special_tokens=True)  # noqa: E731
            ends: list[int] = []
            chars = 0
            for step in split_steps(decode(len(response_ids)))[:-1]:
                chars += len(step)
                lo, hi = 1, len(response_ids)  # the fewest tokens whose text covers the step
                while lo < hi:
                    mid = (lo + hi) // 2
                    lo, hi = (mid + 1, hi) if len(decode(mid)) < chars else (lo, mid)
                if not ends or lo - 1 > ends[-1]:
                    ends.append(lo - 1)
            if not ends or ends[-1] != len(response_ids) - 1:
                ends.append(len(response_ids) - 1)
            self._ends[key] = ends
        return self._ends[key]

    def _rewards(self, batch: Any) -> Any:
        from prefalign.models.forward import per_sequence_sum

        if self.opts.process != "none":
            return self._process_rewards(batch)
        logps = per_sequence_sum(self._token_ratios(batch), batch)  # (S,)
        if self.opts.normalization == "mean":
            logps = logps / batch.lengths.to(logps.dtype)
        return self.opts.beta * logps

    def score(self, prompts: list[Conversation], responses: list[Conversation]) -> list[float]:
        items = [self._encode(p, r) for p, r in zip(prompts, responses, strict=True)]
        return self._run(items, self._rewards)

    def describe(self) -> dict[str, Any]:
        reference: str | None
        if self.adapter_reference:
            reference = "adapter base (adapters disabled)"
        else:
            reference = self.opts.reference
        return {
            "model": self.opts.model,
            "weights": weights_fingerprint(self.opts.model),
            "reference": reference,
            "reference_weights": weights_fingerprint(self.opts.reference),
            "reference_free": self.opts.reference_free,
            "beta": self.opts.beta,
            "normalization": self.opts.normalization,
            "process": self.opts.process,
            "dtype": self.opts.dtype,
            "max_length": self.max_length,
        }


# ---------------------------------------------------------------------------------------------------------
# judge: a chat model asked which of two responses is better
# ---------------------------------------------------------------------------------------------------------

JUDGE_TEMPLATE = (
    "Compare two responses to the conversation below and decide which one is better: more helpful, correct "
    "and harmless, and following every instruction in the conversation.\n\n"
    "[CONTEXT]\n{context}\n\n"
    "[RESPONSE A]\n{response_a}\n\n"
    "[RESPONSE B]\n{response_b}\n\n"
    "Which response is better? Answer with a single letter: A or B."
)
"""The judge's one user message, in the style of RLHFlow's pairwise preference model ("[CONTEXT] ...
[RESPONSE A] ... [RESPONSE B] ..."). It is wrapped in the model's chat template with the generation prompt, and
P(A) is read from the next-token logits. Turns are written "Role: content", separated by a blank line; a
response that is one assistant message is written as its content alone."""
JUDGE_ANSWERS = ("A", "B")


def judge_message(prompt: Conversation, response_a: Conversation, response_b: Conversation) -> str:
    """The user message the judge answers (`JUDGE_TEMPLATE` filled in)."""
    return JUDGE_TEMPLATE.format(
        context=_turns(prompt), response_a=_response_text(response_a), response_b=_response_text(response_b)
    )


class JudgeScorer(_BatchedModel):
    """Pairwise: P(A better) = softmax over the next-token logits of "A" and "B" after `JUDGE_TEMPLATE`,
    i.e. sigmoid(logit_A - logit_B). One order per call; the benchmark runner asks both orders and combines them.
    """

    kind: ScorerKind = "pairwise"
    name = "judge"
    message = staticmethod(judge_message)

    def __init__(self, opts: JudgeOptions) -> None:
        from prefalign.models.hub import load_tokenizer

        device = _device(opts.device)
        opts = _resolve_dtype(opts, device, self.name)
        self.model = load_model(opts.model, opts.dtype, merge=False)
        tokenizer = load_tokenizer(opts.model)
        ids = [tokenizer.encode(a, add_special_tokens=False) for a in JUDGE_ANSWERS]
        if any(len(i) != 1 for i in ids):
            raise UserError(
                f"the judge reads the logits of the answers {JUDGE_ANSWERS}, but {opts.model}'s tokenizer "
                f"splits them into {ids}; use a model whose tokenizer has them as single tokens"
            )
        self.answer_ids = [i[0] for i in ids]
        super().__init__(tokenizer, self.model.config, opts, device)
        self.model.to(device)
        self._pick_layout(self.model)

    def _encode_judge(self, prompt: Conversation, a: Conversation, b: Conversation) -> Item | None:
        from preference_data.records import Message
        from preference_data.tokenize import tokenize_prompts

        if _is_empty(a) or _is_empty(b):
            self._fail("empty_response")
            return None
        try:
            (ids,) = tokenize_prompts([[Message("user", self.message(prompt, a, b))]], self.tokenizer)
        except UserError as e:
            self._fail("template_error", str(e))
            return None
        if len(ids) > self.max_length:
            self._fail("too_long", f"judge prompt of {len(ids)} tokens > max_length {self.max_length}")
            return None
        # The last token (the end of the generation prompt) is packed as a one-token "response", so the packed
        # batch reports its position: the logits there predict the judge's answer.
        return ids[:-1], ids[-1:]

    def _p_a(self, batch: Any) -> Any:
        import torch

        from prefalign.models.forward import hidden_states, unwrap

        h = hidden_states(self.model, batch)[batch.last_row, batch.last_pos]  # (S, H)
        head = unwrap(self.model).get_output_embeddings()  # type: ignore[operator]
        logits = head(h).float()[:, self.answer_ids]  # (S, 2): A, B
        return torch.softmax(logits, dim=-1)[:, 0]

    def compare(
        self, prompts: list[Conversation], responses_a: list[Conversation], responses_b: list[Conversation]
    ) -> list[float]:
        items = [self._encode_judge(p, a, b) for p, a, b in zip(prompts, responses_a, responses_b, strict=True)]
        return self._run(items, self._p_a)

    def describe(self) -> dict[str, Any]:
        return {
            "model": self.opts.model,
            "weights": weights_fingerprint(self.opts.model),
            "dtype": self.opts.dtype,
            "template": JUDGE_TEMPLATE,
            "answers": list(JUDGE_ANSWERS),
            "max_length": self.max_length,
        }


PAIR_PM_TEMPLATE = "[CONTEXT] {context} [RESPONSE A] {response_a} [RESPONSE B] {response_b} \n"
"""RLHFlow's pair-PM prompt (one user message in the model's chat template). The context is written message by
message as "\n\n<turn> {role}\n {content}" and ends with "\n\n\n"; a response is its assistant text."""


def pair_pm_message(prompt: Conversation, response_a: Conversation, response_b: Conversation) -> str:
    """The pair-PM's user message for (context, A, B) (`PAIR_PM_TEMPLATE`)."""
    context = "".join(f"\n\n<turn> {m.role}\n {m.content}" for m in prompt) + "\n\n\n"
    return PAIR_PM_TEMPLATE.format(
        context=context, response_a=_response_text(response_a), response_b=_response_text(response_b)
    )


class PairPMScorer(JudgeScorer):
    """Pairwise preference model (RLHFlow pair-PM): P(A better) from the next-token probabilities of "A" and "B"
    after `PAIR_PM_TEMPLATE`, read in both orders and averaged (`generative.vote.pair_pm_probability`), so a model
    that only prefers a position scores 0.5. The general preference oracle INPO and the tournament ranking use."""

    name = "pair_pm"
    message = staticmethod(pair_pm_message)
    symmetric = True  # compare(a, b) == 1 - compare(b, a): a benchmark asks one order

    def compare(
        self, prompts: list[Conversation], responses_a: list[Conversation], responses_b: list[Conversation]
    ) -> list[float]:
        n = len(prompts)
        both = super().compare(prompts + prompts, responses_a + responses_b, responses_b + responses_a)
        return [0.5 * (both[i] + 1.0 - both[n + i]) for i in range(n)]

    def describe(self) -> dict[str, Any]:
        return super().describe() | {"template": PAIR_PM_TEMPLATE, "orders": "both, averaged"}


# ---------------------------------------------------------------------------------------------------------
# grader: the verifiable suite's gold graders
# ---------------------------------------------------------------------------------------------------------


def _prompt_key(prompt: Conversation) -> tuple[tuple[str, str], ...]:
    return tuple((m.role, m.content) for m in prompt)


class GraderScorer:
    """Pointwise: the gold grade (`preference_data.suite.grade`) of a response to a suite prompt.

    A suite pair carries its family but not the grading params, so the grader finds the task by its prompt (the
    whole conversation, system turn included) in an index of suite tasks: read from the prompts files the suite
    wrote (`tasks`), or regenerated from `seed` and `per_family`. A prompt that is not in the index scores NaN.
    An empty response is graded like any other (0 on every objective, the suite's rule), not NaN.
    """

    kind: ScorerKind = "pointwise"
    name = "grader"

    def __init__(self, opts: GraderOptions) -> None:
        from preference_data import suite

        if opts.objective != "overall" and opts.objective not in suite.OBJECTIVES:
            from prefalign.errors import did_you_mean

            raise UserError(
                f"objective '{opts.objective}' is unknown{did_you_mean(opts.objective, suite.OBJECTIVES)}; "
                f"use overall or one of {', '.join(suite.OBJECTIVES)}"
            )
        self.opts = opts
        self.failures: Counter[str] = Counter()
        self.index: dict[tuple[tuple[str, str], ...], tuple[str, dict[str, Any]]] = {}
        if opts.tasks is None:
            self.source = f"regenerated (seed {opts.seed}, {opts.per_family} per family)"
            for family in suite.FAMILIES:
                for task in suite.generate_tasks(family, opts.per_family, opts.seed):
                    self.index.setdefault(_prompt_key(task.prompt), (family, task.params))
        else:
            self.source = opts.tasks
            for record in self._read_prompts(opts.tasks):
                params = record.meta.get("params")
                if record.grader in suite.FAMILIES and isinstance(params, dict):
                    self.index.setdefault(_prompt_key(record.prompt), (record.grader, params))
            if not self.index:
                raise UserError(
                    f"{opts.tasks} holds no suite prompts with a grader and meta.params; point tasks at "
                    "the directory `align data suite --out DIR` wrote, or at its *_prompts.jsonl"
                )

    @staticmethod
    def _read_prompts(path: str) -> list[Any]:
        from preference_data.io import iter_rows
        from preference_data.report import DataReport
        from preference_data.suite import prompt_only_from_dict

        p = Path(path).expanduser()
        if not p.exists():
            raise UserError(f"tasks: {p} does not exist; give the suite directory or its *_prompts.jsonl")
        files = sorted(p.glob("*_prompts.jsonl")) if p.is_dir() else [p]
        if not files:
            raise UserError(f"tasks: {p} has no *_prompts.jsonl; write the suite with `align data suite --out {p}`")
        out = []
        for f in files:
            for _, row in iter_rows(str(f), DataReport(source=str(f))):
                if isinstance(row, dict) and "prompt" in row and "meta" in row:
                    out.append(prompt_only_from_dict(row))
        return out

    def score(self, prompts: list[Conversation], responses: list[Conversation]) -> list[float]:
        from preference_data.suite import grade

        out = []
        for prompt, response in zip(prompts, responses, strict=True):
            task = self.index.get(_prompt_key(prompt))
            if task is None:
                self.failures["unknown_prompt"] += 1
                out.append(math.nan)
                continue
            g = grade(task[0], task[1], "\n\n".join(m.content for m in response))
            value = g.overall if self.opts.objective == "overall" else g.scores.get(self.opts.objective)
            if value is None:
                self.failures["objective_not_graded"] += 1
            out.append(math.nan if value is None else float(value))
        return out

    def describe(self) -> dict[str, Any]:
        model = "suite gold grader" + ("" if self.opts.objective == "overall" else f" ({self.opts.objective})")
        return {"model": model, "objective": self.opts.objective, "tasks": self.source, "n_tasks": len(self.index)}


@dataclass
class MultiObjectiveOptions:
    model: str = option(doc="a multi-objective RM directory (its model/ folder, with multi_objective.json)")
    objective: str = option("score", "score (the gated score), one objective's reward, or all (online rewards)")
    dtype: str = option("auto", "backbone dtype: auto (bf16 where native), bfloat16, float32")


def _load_multi_objective(opts: MultiObjectiveOptions) -> Scorer:
    from .multi_objective import MultiObjectiveScorer

    return cast("Scorer", MultiObjectiveScorer(opts))


def _load_polar(opts: PolarOptions) -> Scorer:
    from .polar.scorer import PolarScorer  # it subclasses _BatchedModel, so it is imported after this module

    return PolarScorer(opts)


# ---------------------------------------------------------------------------------------------------------
# The table and the factory
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScorerEntry:
    kind: ScorerKind
    """How it is called (reward_models/base.py): pointwise score, pairwise compare, or with a reference."""
    summary: str
    needs: str
    """What it loads."""
    options: type
    """Its options dataclass."""
    load: Callable[[Any], Scorer]


SCORERS: Table[ScorerEntry] = Table(
    "scorer",
    {
        "scalar": ScorerEntry(
            "pointwise",
            "sequence-classification reward model; reward at the last response token, raw or normalised",
            "model: an RM directory (save_rm / save_pretrained, plain or peft), builtin or hub id",
            ScalarOptions,
            ScalarScorer,
        ),
        "implicit": ScorerEntry(
            "pointwise",
            "DPO implicit reward beta * (log pi - log pi_ref), summed or mean; or reference-free (SimPO); or the "
            "implicit process reward (process: min or sum over steps)",
            "model: a causal LM or peft adapter; reference: a causal LM (default: the adapter's base)",
            ImplicitOptions,
            ImplicitScorer,
        ),
        "judge": ScorerEntry(
            "pairwise",
            "generative judge: P(A better) from the next-token logits of 'A' vs 'B' (JUDGE_TEMPLATE)",
            "model: a chat causal LM",
            JudgeOptions,
            JudgeScorer,
        ),
        "pair_pm": ScorerEntry(
            "pairwise",
            "pairwise preference model (RLHFlow pair-PM): P(A) from the 'A'/'B' token probabilities, both orders "
            "averaged (PAIR_PM_TEMPLATE)",
            "model: a chat causal LM (a trained pair-PM: kind judge_train, judge.kind pair_pm)",
            JudgeOptions,
            PairPMScorer,
        ),
        "grm": ScorerEntry(
            "pointwise",
            "generative RM (DeepSeek-GRM): k sampled critiques end in Score: \\boxed{1..10}; their mean, "
            "optionally only the k_meta a meta-RM rates highest",
            "model: a chat causal LM (a trained GRM: kind judge_train, judge.kind grm); "
            "meta_model: a meta-RM (kind meta_rm_train, optional)",
            GRMOptions,
            GRMScorer,
        ),
        "think": ScorerEntry(
            "pairwise",
            "thinking judge (Think-RM): <think> reasoning then <answer>A|B</answer> (or -3..3); m samples per "
            "order, both orders; P(A) = share of verdicts for A",
            "model: a chat causal LM (a trained judge: kind judge_train, judge.kind think)",
            ThinkOptions,
            ThinkJudgeScorer,
        ),
        "polar": ScorerEntry(
            "reference",
            "POLAR policy discriminator: how likely the response comes from the same policy as the reference "
            "answer (ref <|reward|> candidate <|reward_end|>, read at the end token)",
            "model: a POLAR RM (`align rm train` kind polar_train); a reference per response (benchmark data's "
            "reference column, or references: suite)",
            PolarOptions,
            _load_polar,
        ),
        "multi_objective": ScorerEntry(
            "pointwise",
            "multi-objective RM (ArmoRM-style): per-objective ridge heads on a frozen backbone, verbosity "
            "debiasing, gated score; objective: score (gated), one objective, or all (K reward components)",
            "model: a multi-objective RM directory (`align rm train` kind mo_rm_train)",
            MultiObjectiveOptions,
            _load_multi_objective,
        ),
        "grader": ScorerEntry(
            "pointwise",
            "the verifiable suite's gold graders: the `overall` (or one objective's) gold score",
            "nothing; suite prompts (tasks regenerated or read from the suite's *_prompts.jsonl)",
            GraderOptions,
            GraderScorer,
        ),
    },
    columns=("kind", "summary", "needs"),
)


def default_scorer(model: str | None, reference: str | None) -> str:
    """The scorer kind for a model when none is named (`align bench run` without --scorer).

    scalar: a reward model (a saved `reward_stats.json`, a config whose architecture ends with
    ForSequenceClassification, or a peft adapter of task type SEQ_CLS); implicit: a peft adapter of a causal LM
    (its base is the reference), or any model when --reference is given.
    """
    import json

    if model is None:
        raise UserError("--model is required (or --scorer grader, which needs no model)")
    path = Path(resolve(model))
    what = "a hub id"
    if path.is_dir():
        if (path / "reward_stats.json").exists():
            return "scalar"
        if is_adapter(path):
            task = json.loads((path / "adapter_config.json").read_text(encoding="utf-8")).get("task_type")
            return "scalar" if task == "SEQ_CLS" else "implicit"
        archs = json.loads((path / "config.json").read_text(encoding="utf-8")).get("architectures") or []
        if any(a.endswith("ForSequenceClassification") for a in archs):
            return "scalar"
        what = f"a model with architectures {archs or 'unknown'}"
    else:
        archs = _hub_architectures(str(path))
        if any(a.endswith("ForSequenceClassification") for a in archs):
            return "scalar"
    if reference is not None:
        return "implicit"
    raise UserError(
        f"cannot tell how to score {model} ({what}: no score head, not a peft adapter, no --reference). Choose:\n"
        f"  --scorer implicit --reference REF   DPO implicit reward against REF (the model {model} was trained from)\n"
        "  --scorer implicit --option reference_free=true --option normalization=mean   SimPO-style, no reference\n"
        "  --scorer judge                       ask the model which of two responses is better (pairwise)\n"
        "  --scorer scalar                      only for a sequence-classification reward model"
    )


def _hub_architectures(ref: str) -> list[str]:
    try:
        from transformers import AutoConfig

        return list(getattr(AutoConfig.from_pretrained(ref), "architectures", None) or [])
    except (OSError, ValueError):
        return []


def load_scorer(spec: str | dict[str, Any], **options: Any) -> Scorer:
    """Build a scorer: `load_scorer("scalar", model=...)` or `load_scorer({"type": "scalar", "model": ...})`.

    `options` (and the dict's other keys) are the fields of the kind's options dataclass (`SCORERS[name].options`);
    keyword options override the dict. Unknown or mistyped options raise one `ConfigError` listing them all.
    """
    if isinstance(spec, dict):
        data = dict(spec)
        name = data.pop("type", None)
        if not isinstance(name, str):
            raise UserError(f"a scorer spec needs 'type', one of: {', '.join(SCORERS.names())}; got {spec!r}")
    elif isinstance(spec, str):
        name, data = spec, {}
    else:
        raise UserError(f"a scorer spec is a name or a mapping with 'type', got {type(spec).__name__}")
    data.update(options)
    entry = SCORERS[name]
    opts: Any = build(entry.options, data, f"scorer '{name}'")  # the kind's options dataclass
    return entry.load(opts)


__all__ = [
    "SCORERS",
    "ScorerEntry",
    "load_scorer",
    "default_scorer",
    "BATCH_TOKENS",
    "ModelOptions",
    "ScalarOptions",
    "ImplicitOptions",
    "JudgeOptions",
    "GraderOptions",
    "ScalarScorer",
    "ImplicitScorer",
    "JudgeScorer",
    "GraderScorer",
    "JUDGE_TEMPLATE",
    "JUDGE_ANSWERS",
    "judge_message",
]
