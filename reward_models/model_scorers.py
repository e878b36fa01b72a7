"""The model scorers of the table in `reward_models.scorers`: `scalar` (a sequence-classification RM), `implicit`
(the DPO reward of a policy against its reference), `judge` and `pair_pm` (a chat model asked which of two responses
is better), each with its options dataclass. How they run: the docstring of `reward_models.scorers`; the batching
they share: `reward_models.batched`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

from prefalign.config import option
from prefalign.errors import UserError
from prefalign.models.hub import is_adapter, load_model, load_tokenizer, resolve, weights_fingerprint
from preference_data.records import Conversation, Message
from preference_data.tokenize import tokenize_prompts

from .base import ScorerKind
from .batched import BatchedModel, Item, RewardHeadModel
from .checkpoint import STATS_FILE
from .generative.implicit_prm import aggregate, split_steps, step_rewards
from .options import ModelOptions, _device, _is_empty, _resolve_dtype, _response_text, _turns

# ---------------------------------------------------------------------------------------------------------
# Options: one dataclass per scorer kind
# ---------------------------------------------------------------------------------------------------------


@dataclass
class ScalarOptions(ModelOptions):
    dtype: Literal["auto", "bfloat16", "float32"] = option(
        "float32",
        "weights and activations. float32 (the default) scores exactly as the RM's model card's plain-transformers "
        "recipe; bfloat16 (or auto: bf16 where the device runs it natively) is about 4x faster on such a device, "
        "but its scores differ from the card's and can order a close pair the other way (docs/reward-models.md)",
    )
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


# ---------------------------------------------------------------------------------------------------------
# scalar: a sequence-classification reward model
# ---------------------------------------------------------------------------------------------------------


class ScalarScorer(RewardHeadModel):
    """Pointwise: the score head of a sequence-classification RM, read at the last token of the response."""

    kind: ScorerKind = "pointwise"
    name = "scalar"
    opts: ScalarOptions

    def __init__(self, opts: ScalarOptions) -> None:
        super().__init__(opts)
        self.response_end = self.stats.response_end  # where the RM was trained to read its reward

    def _check_options(self, opts: ScalarOptions) -> None:
        if opts.normalize and not (Path(resolve(opts.model)) / STATS_FILE).exists():
            raise UserError(
                f"normalize: true needs the RM's reward statistics, but {opts.model} has no {STATS_FILE} "
                "(reward_models.checkpoint.save_rm writes it); or use normalize: false"
            )

    def _check_model(self, opts: ScalarOptions, model: Any, tokenizer: Any) -> None:
        num_labels = getattr(model.config, "num_labels", 1)
        if num_labels != 1:
            raise UserError(
                f"{opts.model} has {num_labels} score heads; the scalar scorer reads a single reward (num_labels = 1)"
            )

    def score(self, prompts: list[Conversation], responses: list[Conversation]) -> list[float]:
        return self._head_scores(self._encode_all(prompts, responses))

    def describe(self) -> dict[str, Any]:
        return self._describe_head() | {"response_end": self.response_end, "max_length": self.max_length}


# ---------------------------------------------------------------------------------------------------------
# implicit: the DPO reward of a policy against its reference
# ---------------------------------------------------------------------------------------------------------


class ImplicitScorer(BatchedModel):
    """Pointwise: r = beta * (log pi(y|x) - log pi_ref(y|x)) (Rafailov et al. 2023, eq. 5), summed or averaged
    over response tokens; or beta * log pi(y|x) without a reference (averaged: SimPO's reward, Meng et al. 2024).

    A peft adapter's reference is its own base model with the adapters disabled (`disable_adapter()`), so
    the reference costs no memory; an untrained LoRA adapter (B = 0) therefore scores exactly 0.
    """

    kind: ScorerKind = "pointwise"
    name = "implicit"
    opts: ImplicitOptions

    def __init__(self, opts: ImplicitOptions) -> None:
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
        from prefalign.models.forward import token_logps  # lazy: torch, not needed to list the scorers

        logps = token_logps(self.policy, batch)
        if self.adapter_reference:
            with self.policy.disable_adapter():
                logps = logps - token_logps(self.policy, batch)
        elif self.reference is not None:
            logps = logps - token_logps(self.reference, batch)
        return logps

    def _process_rewards(self, batch: Any) -> Any:
        """Per sequence: the min or sum of its step rewards (`generative.implicit_prm`)."""
        import torch  # lazy: the scorer table loads without torch

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
        from prefalign.models.forward import per_sequence_sum  # lazy: torch

        if self.opts.process != "none":
            return self._process_rewards(batch)
        logps = per_sequence_sum(self._token_ratios(batch), batch)  # (S,)
        if self.opts.normalization == "mean":
            logps = logps / batch.lengths.to(logps.dtype)
        return self.opts.beta * logps

    def score(self, prompts: list[Conversation], responses: list[Conversation]) -> list[float]:
        items = self._encode_all(prompts, responses)
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


def judge_answer_ids(tokenizer: Any, model: str) -> list[int]:
    """The token ids of the judge's answers (`JUDGE_ANSWERS`), each one token of `model`'s tokenizer."""
    ids = [tokenizer.encode(a, add_special_tokens=False) for a in JUDGE_ANSWERS]
    if any(len(i) != 1 for i in ids):
        raise UserError(
            f"the judge reads the logits of the answers {JUDGE_ANSWERS}, but {model}'s tokenizer "
            f"splits them into {ids}; use a model whose tokenizer has them as single tokens"
        )
    return [i[0] for i in ids]


class JudgeScorer(BatchedModel):
    """Pairwise: P(A better) = softmax over the next-token logits of "A" and "B" after `JUDGE_TEMPLATE`,
    i.e. sigmoid(logit_A - logit_B). One order per call; the benchmark runner asks both orders and combines them.
    """

    kind: ScorerKind = "pairwise"
    name = "judge"
    message = staticmethod(judge_message)

    def __init__(self, opts: JudgeOptions) -> None:
        device = _device(opts.device)
        opts = _resolve_dtype(opts, device, self.name)
        self.model = load_model(opts.model, opts.dtype, merge=False)
        tokenizer = load_tokenizer(opts.model)
        self.answer_ids = judge_answer_ids(tokenizer, opts.model)
        super().__init__(tokenizer, self.model.config, opts, device)
        self.model.to(device)
        self._pick_layout(self.model)

    def _encode_judge(self, prompt: Conversation, a: Conversation, b: Conversation) -> Item | None:
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
        import torch  # lazy: the scorer table loads without torch

        from prefalign.models.forward import answer_logits_from_hidden, hidden_states, unwrap  # lazy: torch

        h = hidden_states(self.model, batch)[batch.last_row, batch.last_pos]  # (S, H)
        head = unwrap(self.model).get_output_embeddings()  # type: ignore[operator]
        logits = answer_logits_from_hidden(h, head, self.answer_ids)  # (S, 2): A, B, in fp32
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

    def compare_orders(
        self, prompts: list[Conversation], responses_a: list[Conversation], responses_b: list[Conversation]
    ) -> list[list[float]]:
        """P(A better) read with A first and read with B first (mapped back), per item."""
        n = len(prompts)
        both = super().compare(prompts + prompts, responses_a + responses_b, responses_b + responses_a)
        return [[both[i], 1.0 - both[n + i]] for i in range(n)]

    def compare(
        self, prompts: list[Conversation], responses_a: list[Conversation], responses_b: list[Conversation]
    ) -> list[float]:
        return [0.5 * (x + y) for x, y in self.compare_orders(prompts, responses_a, responses_b)]

    def describe(self) -> dict[str, Any]:
        return super().describe() | {"template": PAIR_PM_TEMPLATE, "orders": "both, averaged"}


__all__ = [
    "ImplicitOptions",
    "ImplicitScorer",
    "JUDGE_ANSWERS",
    "JUDGE_TEMPLATE",
    "JudgeOptions",
    "JudgeScorer",
    "PAIR_PM_TEMPLATE",
    "PairPMScorer",
    "ScalarOptions",
    "ScalarScorer",
    "judge_answer_ids",
    "judge_message",
    "pair_pm_message",
]
