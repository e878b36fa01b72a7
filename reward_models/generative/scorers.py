"""Generative scorers: judges that write a critique or a reasoning before their verdict, through the generation
engine (`prefalign.generation`), behind the one scorer interface.

- `grm` (pointwise; DeepSeek-GRM / SPCT): the judge writes criteria for the query, an analysis of the response and
  `Score: \\boxed{s}`, s in 1..10 (`GRM_TEMPLATE`). k samples (each with its own criteria) are drawn; the score is
  the mean of the valid samples' scores (the paper's sum S* over k samples divided by k, so scores stay on the
  1..10 scale when a sample abstains). With `meta_model` (a scalar RM trained to tell correct critiques from
  wrong ones, reading the judge's prompt and one critique) only the `k_meta` samples it rates highest are voted.
  With `score: expected` each critique's score is instead the judge's own expectation of it where it wrote the box
  (G-Eval's rule: the probabilities of the score tokens after `\\boxed{`, weighted by their values; `box_expectation`),
  so that two responses the judge grades alike are told apart by how sure it was, where integer scores would tie.
  With `principles: from_prompt` the criteria and the work are written from the query alone, before any response
  is shown (`GRM_PRINCIPLES_TEMPLATE`; k samples per distinct query, shared by its responses), and each response
  follows in a second user turn whose analysis ends in the score (`GRM_READING_TEMPLATE`): a judge that works
  after reading the response tends to follow it (stopping its computation where a cut-short answer stops).
- `think` (pairwise; Think-RM): the judge reasons after a forced `<think>\\n` and answers `<answer>A</answer>` /
  `<answer>B</answer>` (form `binary`) or a strength -3..3 (form `multiclass`) (`THINK_TEMPLATE`). m samples per
  order; with `both_orders` each pair is also judged with A and B swapped, and the verdicts mapped back.
  P(A better) = the mean over orders of each order's share of valid verdicts for A (a tie of votes is 0.5);
  `compare_orders` gives the orders apart, for position consistency.

An item whose every sample abstains scores NaN (counted in `failures` as `abstained`); single abstentions are
counted by reason in `abstentions`. Every call adds to `cost` (items, samples, generated tokens, seconds), which
benchmark records carry as generated tokens and seconds per scored item.
"""

from __future__ import annotations

import functools
import logging
import math
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from prefalign.config import option
from prefalign.models.hub import load_model, load_tokenizer, weights_fingerprint
from preference_data.records import Conversation, Message
from preference_data.suite.work_reading import agreement, read_work
from preference_data.suite.work_tools import list_tools

from ..base import ScorerKind
from ..model_scorers import ScalarOptions, ScalarScorer
from ..options import ModelOptions, _device, _is_empty, _resolve_dtype, _response_text, _turns
from .parse import box_opened_at, parse_grm_scores, parse_think_answer
from .vote import meta_vote, vote_scores
from .warmup import WORK_HEADER

log = logging.getLogger(__name__)

GRM_TEMPLATE = """You are a careful judge of an AI assistant's response to a user. First write the criteria that \
matter for this query, with weights. Then analyse the response against them. General criteria: instruction \
adherence, usefulness, level of detail, relevance. Score bands: 1-2 fails the request (wrong, harmful or off-topic), \
3-5 partly meets it, 6-8 meets it well, 9-10 meets it fully with nothing to improve. The score is an integer \
between 1 and 10.

[The Start of Context]
{context}
[The End of Context]

[The Start of the Response]
{response}
[The End of the Response]

Answer in exactly this format:
Specific Criteria: <criteria specific to this query, with weights>.
Analysis: <analysis of the response>.
Score: \\boxed{{<an integer from 1 to 10>}}"""

GRM_PRINCIPLES_TEMPLATE = """You are a careful judge of an AI assistant's response to a user. Before you see the \
response, write the criteria that matter for this query, with weights, and work out what a right response must give. \
General criteria: instruction adherence, usefulness, level of detail, relevance.

[The Start of Context]
{context}
[The End of Context]

Answer in exactly this format:
Specific Criteria: <criteria specific to this query, with weights>.
Work: <what a right response must give, worked out step by step>."""

GRM_READING_TEMPLATE = """Here is the response. Analyse it against your criteria and your work. Score bands: 1-2 fails \
the request (wrong, harmful or off-topic), 3-5 partly meets it, 6-8 meets it well, 9-10 meets it fully with nothing to \
improve. The score is an integer between 1 and 10.

[The Start of the Response]
{response}
[The End of the Response]

Answer in exactly this format:
Analysis: <analysis of the response>.
Score: \\boxed{{<an integer from 1 to 10>}}"""

JudgeInput = str | list[dict[str, str]]
"""What a judge is sampled from: one user message, or a conversation of {role, content} turns (the last a user's)."""

THINK_TEMPLATE = """Please act as an impartial judge and compare the two responses of AI assistants to the \
context below. Consider helpfulness, correctness, coherence, complexity, verbosity and safety. Do not let the \
order or the length of the responses influence you. {instruction}

[The Start of Context]
{context}
[The End of Context]

[The Start of Assistant A's Response]
{response_a}
[The End of Assistant A's Response]

[The Start of Assistant B's Response]
{response_b}
[The End of Assistant B's Response]"""

THINK_INSTRUCTIONS = {
    "binary": "Think step by step inside <think></think>, then give your verdict as <answer>A</answer> if A is "
    "better or <answer>B</answer> if B is better.",
    "multiclass": "Think step by step inside <think></think>, then give your verdict inside <answer></answer> as "
    "one of -3, -2, -1, 1, 2, 3: negative if A is better, positive if B is better; 3 means much better, 2 better, "
    "1 slightly better.",
}
THINK_PREFIX = "<think>\n"
WORK_PREFIXES = {"template": WORK_HEADER}
"""Named `work_prefix` values: `template`, the line before the work in the suite's warm-up (`warmup.grm_principles`)."""


ToolSet = Literal["none", "calculator", "lists", "calculator+lists"]
"""What a writing judge may call (`tools:`): the calculator, the list operations of a suite work, or both."""
TOOLS_DOC = (
    "tools the judge calls as it writes: calculator writes the exact value after each `a op b =` it writes "
    "(prefalign.generation.tools); lists writes a list operation's result after it names the operation of a suite "
    "work ('In reverse order:', 'Item 2 (the second) is'), applied to the items it copied "
    "(preference_data.suite.work_tools); calculator+lists both. Its work is then as right as the operations it chooses"
)
LISTS_TOOL = "lists: after an operation's head in a suite work, its result on the items the work copied"


def judge_tools(tools: ToolSet) -> list[Any]:
    """The `Tool`s of a `tools:` setting ('+' joins kits)."""
    from prefalign.generation.api import Tool  # lazy: the generation package loads torch
    from prefalign.generation.tools import TOOLS

    kits = {
        "none": [],
        "calculator": [TOOLS["calculator"]],
        "lists": [Tool(LISTS_TOOL, stop, call) for stop, call in list_tools().items()],
    }
    return [t for name in tools.split("+") for t in kits[name]]


JUDGE_BATCH_TOKENS = 1 << 15
"""A generative judge's KV-cache slots per generation batch (rows x (prompt + max_new_tokens)): on a CPU a decode step
costs little more for 80 rows than for 16, so a judge decodes its works in few batches (dev, suite seed 0, the works
of 150 queries: 8,192 slots in calls of 64 queries 252 s, 65,536 slots in one call 199 s; docs/results.md)."""


@dataclass
class JudgeSamplingOptions(ModelOptions):
    batch_tokens: int = option(
        JUDGE_BATCH_TOKENS,
        "KV-cache slots of one generation batch: rows x (prompt + max_new_tokens) tokens (a 135M judge: 1.4 GiB in "
        "fp32; lower it for a large judge without grouped-query attention on a small GPU)",
    )
    temperature: float = option(0.7, "sampling temperature of the judge (0 = greedy: every sample is the same)")
    top_p: float = option(0.95, "nucleus sampling mass (1 = off)")
    max_new_tokens: int = option(256, "longest judge output in tokens; a cut-off output usually abstains")
    seed: int = option(0, "sampling seed (each item's samples are seeded from it and the item's prompt)")
    tools: ToolSet = option("none", TOOLS_DOC)


@dataclass
class GRMOptions(JudgeSamplingOptions):
    k: int = option(1, "sampled critiques per response, voted (DeepSeek-GRM inference-time scaling)")
    meta_model: str | None = option(
        None,
        "a scalar meta-RM that rates critiques (with read: rule, works); only its top k_meta are voted "
        "(align rm train, kind meta_rm_train)",
    )
    k_meta: int | None = option(None, "critiques the meta-RM keeps (default: half of k, at least 1)")
    out_of_range: Literal["abstain", "clip"] = option(
        "abstain", "a score outside 1..10: the sample abstains, or is clipped into range"
    )
    score: Literal["sampled", "expected"] = option(
        "sampled",
        "a critique's score: the number it writes in its box (the paper), or the judge's expectation of that number "
        "where it opens the box (G-Eval: the score tokens' probabilities weighted by their values; one forward pass "
        "more per critique), which breaks the ties of integer scores by the judge's own confidence",
    )
    principles: Literal["with_response", "from_prompt"] = option(
        "with_response",
        "where the criteria and the work come from: written in the critique after the response is read (the "
        "paper's single message), or from the query alone before the response is shown (sampled k times per "
        "prompt and shared by its responses; the response and the analysis follow in a second turn), so the work "
        "cannot follow the response it grades",
    )
    work_prefix: str = option(
        "",
        "principles: from_prompt: text the judge's first turn starts with, given instead of generated (its tokens "
        "follow the generation prompt; the work read is the prefix and what the judge writes after it). `template` "
        "is the line a judge warmed up on the suite's checks writes before every work (its criteria, then "
        "`Work:`): given, its 34 tokens are not decoded for each query. End a prefix of your own before a space, "
        "as the tokenizer joins a space to the word after it",
    )
    read: Literal["model", "rule"] = option(
        "model",
        "principles: from_prompt: who reads a response against the judge's work: the judge, in its second turn "
        "(model), or a rule (rule: the work's claims, the value, the format, the rules, the request's class, read "
        "back by preference_data.suite.work_reading and checked with the suite graders' own readings; the score is "
        "2 x claims met / claims - 1 in [-1, 1], averaged over the k works; a work in another language than the "
        "suite's checks makes no claims and the response abstains). No second turn is generated",
    )

    @property
    def kept_by_meta(self) -> int:
        """Critiques (works) the meta-RM keeps: k_meta, or half of k, at least 1."""
        return self.k_meta or max(1, self.k // 2)

    @property
    def given_work(self) -> str:
        """The text `work_prefix` gives (a named prefix resolved)."""
        return WORK_PREFIXES.get(self.work_prefix, self.work_prefix)

    def check(self) -> list[str]:
        problems = super().check()
        if self.k < 1:
            problems.append(f"k: must be at least 1, got {self.k}")
        if self.k_meta is not None and not 1 <= self.k_meta <= self.k:
            problems.append(f"k_meta: must lie in 1..k ({self.k}), got {self.k_meta}")
        if self.k_meta is not None and self.meta_model is None:
            problems.append("k_meta: needs meta_model (the RM that picks the critiques to keep)")
        if self.read == "rule" and self.principles != "from_prompt":
            problems.append(
                "read: rule reads the work a judge writes before the response: it needs principles: from_prompt"
            )
        if self.read == "rule" and self.score == "expected":
            problems.append("score: expected is the judge's own score of its reading; read: rule writes none")
        if self.work_prefix and self.principles != "from_prompt":
            problems.append(
                "work_prefix: starts the work a judge writes before the response: needs principles: from_prompt"
            )
        if self.work_prefix.endswith((" ", "\t")):
            problems.append(
                f"work_prefix: ends in a space ({self.work_prefix[-12:]!r}); end it before the space, which the "
                "tokenizer joins to the word the judge writes next"
            )
        if self.meta_model is not None and self.principles == "from_prompt" and self.read == "model":
            problems.append(
                "meta_model: a meta-RM rates critiques written after the response, or the works a rule reads (read: "
                "rule; align rm train, kind meta_rm_train, critiques.read: rule); it does not rate a from_prompt "
                "judge's two-turn critiques"
            )
        return problems


@dataclass
class ThinkOptions(JudgeSamplingOptions):
    form: Literal["binary", "multiclass"] = option("binary", "verdict form: A/B, or a strength -3..3")
    m: int = option(1, "samples per order, majority-voted")
    both_orders: bool = option(True, "also judge each pair with A and B swapped (cancels position bias)")
    max_new_tokens: int = option(384, "longest judge output in tokens (reasoning and answer)")

    def check(self) -> list[str]:
        problems = super().check()
        if self.m < 1:
            problems.append(f"m: must be at least 1, got {self.m}")
        return problems


def judge_prompts(
    tokenizer: Any, messages: Sequence[JudgeInput], prefix: str = "", system: str | None = None
) -> list[list[int]]:
    """Token ids a judge is sampled from: each message as one user turn in the chat template (a conversation as its
    turns), after a `system` turn when one is given, with the generation prompt, followed by `prefix` (e.g. the
    forced `<think>\\n`)."""
    from prefalign.generation import render_prompts  # lazy: torch, not needed to list the scorers (align ls)

    head = [] if system is None else [{"role": "system", "content": system}]
    extra = tokenizer.encode(prefix, add_special_tokens=False) if prefix else []
    turns = [[*head, {"role": "user", "content": m}] if isinstance(m, str) else [*head, *m] for m in messages]
    return [ids + extra for ids in render_prompts(tokenizer, turns)]


def box_expectation(first: Any, after_one: Any, digit_ids: list[int], close_id: int) -> float:
    """The expected score in 1..10 from the logits where a box opens (`first`) and after a 1 written there
    (`after_one`): P(d) for the digits 1..9, renormalised over them, and a 1 read as 10 with the probability that a 0
    rather than the closing brace follows it (renormalised over those two)."""
    p = first[digit_ids[1:]].softmax(-1)  # digits 1..9
    q = after_one[[digit_ids[0], close_id]].softmax(-1)  # after a 1: "0" (10) or "}" (1)
    values = [1.0 + 9.0 * float(q[0])] + [float(d) for d in range(2, 10)]
    return float(sum(float(pi) * v for pi, v in zip(p, values, strict=True)))


def rate_critiques(meta: Any, message: str, texts: list[str]) -> list[float]:
    """A meta-RM's rating of each sampled critique of one judge message (`rate`)."""
    return rate(meta, [(message, t) for t in texts])


def rate(meta: Any, items: list[tuple[str, str]]) -> list[float]:
    """A meta-RM's rating of each (judge message, critique or work), in one call: the message as the user turn, the
    critique as the response (an empty one read as one space)."""
    return meta.score([[Message("user", m)] for m, _ in items], [[Message("assistant", t or " ")] for _, t in items])


def stop_token_ids(model: Any, tokenizer: Any) -> list[int] | None:
    """The tokens a judgement ends at: the tokenizer's EOS and the model's generation_config end tokens (a chat
    model's end-of-turn, e.g. gemma-2's `<end_of_turn>`, which is not its tokenizer's EOS), as vLLM stops; None when
    there are none (the engine then says so)."""
    ids: list[int] = [] if tokenizer.eos_token_id is None else [int(tokenizer.eos_token_id)]
    config = getattr(model, "generation_config", None)
    extra = getattr(config, "eos_token_id", None) if config is not None else None
    for t in [extra] if isinstance(extra, int) else list(extra or []):
        if int(t) not in ids:
            ids.append(int(t))
    return ids or None


class _GenerativeJudge:
    """A causal LM judge sampled through the generation engine; counts abstentions and cost."""

    name = ""

    def __init__(self, opts: Any) -> None:
        from prefalign.generation import make_engine  # lazy: torch, not needed to list the scorers (align ls)

        device = _device(opts.device)
        self.opts = _resolve_dtype(opts, device, self.name)
        self.model = load_model(opts.model, self.opts.dtype, merge=True).to(device).eval()
        self.tokenizer = load_tokenizer(opts.model)
        self.engine = make_engine(
            self.model,
            self.tokenizer,
            token_budget=self.opts.batch_tokens,
            eos_token_ids=stop_token_ids(self.model, self.tokenizer),
        )
        self.max_length = opts.max_length or getattr(self.model.config, "max_position_embeddings", None) or 4096
        self.failures: Counter[str] = Counter()
        self.last_unsampled: set[int] = set()
        self.abstentions: Counter[str] = Counter()
        self.cost = {"items": 0, "samples": 0, "generated_tokens": 0, "seconds": 0.0}

    def _fail(self, reason: str, detail: str = "") -> None:
        if not self.failures[reason]:
            log.warning("%s: an item failed (%s)%s", type(self).__name__, reason, f": {detail}" if detail else "")
        self.failures[reason] += 1

    def _sample(
        self,
        messages: Sequence[JudgeInput | None],
        n: int,
        prefix: str = "",
        items: int | None = None,
        fit_to_context: bool = False,
        system: str | None = None,
    ) -> list[list[str] | None]:
        """n sampled outputs for each judge message (None: the item failed before sampling), each message the user
        turn after an optional `system` turn. `items`: how many scored items the messages stand for (default: one
        each), for `cost`. A judge prompt with no room for `max_new_tokens` more tokens in `max_length` fails
        (`too_long`); with `fit_to_context` it generates up to `max_length` instead, as vLLM does (RewardBench 2's
        reference judges), and fails only when the prompt alone fills the context."""
        # lazy: torch, not needed to list the scorers (align ls)
        from prefalign.generation import SamplingParams
        from prefalign.generation.tools import generate_with_tools

        t0 = time.perf_counter()
        pending = [(i, m) for i, m in enumerate(messages) if m is not None]
        rendered = judge_prompts(self.tokenizer, [m for _, m in pending], prefix, system)
        rows: list[int] = []
        prompts: list[list[int]] = []
        budgets: list[int] = []
        for (i, _), ids in zip(pending, rendered, strict=True):
            room = self.max_length - len(ids)
            if room < self.opts.max_new_tokens and not (fit_to_context and room > 0):
                self._fail("too_long", f"judge prompt of {len(ids)} tokens + {self.opts.max_new_tokens} new tokens")
                continue
            rows.append(i)
            prompts.append(ids)
            budgets.append(min(room, self.opts.max_new_tokens))
        out: list[list[str] | None] = [None] * len(messages)
        if prompts:
            params = [
                SamplingParams(
                    n=n,
                    temperature=self.opts.temperature,
                    top_p=self.opts.top_p,
                    max_new_tokens=budget,
                    seed=self.opts.seed,
                )
                for budget in budgets
            ]
            texts, generated = generate_with_tools(self.engine, prompts, params, judge_tools(self.opts.tools))
            for i, t in zip(rows, texts, strict=True):
                out[i] = t
            self.cost["generated_tokens"] += generated
            self.cost["samples"] += n * len(prompts)
        self.cost["items"] += len(messages) if items is None else items
        self.cost["seconds"] += time.perf_counter() - t0
        return out

    def cost_per_item(self) -> dict[str, float]:
        items = max(1, int(self.cost["items"]))
        return {
            "items": self.cost["items"],
            "generated_tokens_per_item": self.cost["generated_tokens"] / items,
            "seconds_per_item": self.cost["seconds"] / items,
        }

    def _describe(self) -> dict[str, Any]:
        o = self.opts
        return {
            "model": o.model,
            "weights": weights_fingerprint(o.model),
            "dtype": o.dtype,
            "device": str(self.model.device),
            "temperature": o.temperature,
            "top_p": o.top_p,
            "max_new_tokens": o.max_new_tokens,
            "seed": o.seed,
            "tools": o.tools,
        }


class GRMScorer(_GenerativeJudge):
    """Pointwise generative RM: the mean score of k sampled critiques (see the module docstring)."""

    kind: ScorerKind = "pointwise"
    name = "grm"

    def __init__(self, opts: GRMOptions) -> None:
        super().__init__(opts)
        self.meta = None
        if opts.meta_model is not None:
            self.meta = ScalarScorer(ScalarOptions(model=opts.meta_model, dtype=self.opts.dtype, device=opts.device))
        # the last call's judge messages (None: not sampled), raw critiques and parsed scores, per item
        self.last_messages: list[str | None] = []
        self.last_texts: list[list[str]] = []
        self.last_samples: list[list[tuple[float, ...] | None]] = []

    @staticmethod
    def message(prompt: Conversation, response: Conversation) -> str:
        return GRM_TEMPLATE.format(context=_turns(prompt), response=_response_text(response))

    @staticmethod
    def principles_message(prompt: Conversation) -> str:
        """The first turn of `principles: from_prompt`: the query alone, asking for criteria and work."""
        return GRM_PRINCIPLES_TEMPLATE.format(context=_turns(prompt))

    @staticmethod
    def reading_conversation(prompt: Conversation, principles: str, response: Conversation) -> list[dict[str, str]]:
        """The judge's input for the analysis under `principles: from_prompt`: the query, the judge's own criteria
        and work, then the response in a second user turn."""
        return [
            {"role": "user", "content": GRMScorer.principles_message(prompt)},
            {"role": "assistant", "content": principles},
            {"role": "user", "content": GRM_READING_TEMPLATE.format(response=_response_text(response))},
        ]

    def _critiques_with_response(
        self, prompts: list[Conversation], responses: list[Conversation | None]
    ) -> list[list[tuple[JudgeInput, str]] | None]:
        """k critiques per response, each sampled from one message holding the query and the response."""
        messages: list[JudgeInput | None] = [
            None if r is None else self.message(p, r) for p, r in zip(prompts, responses, strict=True)
        ]
        texts = self._sample(messages, self.opts.k)
        return [None if m is None or t is None else [(m, x) for x in t] for m, t in zip(messages, texts, strict=True)]

    def _works(self, prompts: list[Conversation], responses: list[Conversation | None]) -> list[list[str] | None]:
        """k principles (criteria and work) per distinct query, sampled before any response is shown, for each item
        (None: its response is missing, or its query's sampling failed)."""
        first = [None if r is None else self.principles_message(p) for p, r in zip(prompts, responses, strict=True)]
        distinct = list(dict.fromkeys(m for m in first if m is not None))
        given = self.opts.given_work
        drawn = self._sample(list(distinct), self.opts.k, prefix=given, items=0)
        sampled = {m: None if t is None else [given + x for x in t] for m, t in zip(distinct, drawn, strict=True)}
        return [None if m is None else sampled[m] for m in first]

    def _critiques_from_prompt(
        self, prompts: list[Conversation], responses: list[Conversation | None]
    ) -> list[list[tuple[JudgeInput, str]] | None]:
        """k principles per distinct query (`_works`), then for each response one analysis after each of its
        query's principles."""
        convs: list[JudgeInput | None] = []
        owner: list[int] = []
        works_of = self._works(prompts, responses)
        for i, (p, r, works) in enumerate(zip(prompts, responses, works_of, strict=True)):
            for w in works or []:
                convs.append(self.reading_conversation(p, w, r))  # type: ignore[arg-type]  # r is set where m is
                owner.append(i)
        texts = self._sample(convs, 1, items=len(prompts))
        drawn: list[list[tuple[JudgeInput, str]]] = [[] for _ in prompts]
        for i, conv, t in zip(owner, convs, texts, strict=True):
            if conv is not None and t is not None:
                drawn[i].append((conv, t[0]))
        return [d or None for d in drawn]

    def score(self, prompts: list[Conversation], responses: list[Conversation]) -> list[float]:
        kept: list[Conversation | None] = []
        for r in responses:
            if _is_empty(r):
                self._fail("empty_response")
            kept.append(None if _is_empty(r) else r)
        return READS[self.opts.read](self, prompts, kept)

    def _score_by_rule(self, prompts: list[Conversation], kept: list[Conversation | None]) -> list[float]:
        """`read: rule`: each response checked against the claims of its query's k works (`work_reading`); the
        mean agreement of the works that make claims, NaN (abstained) where none does. With a meta-RM, only the
        k_meta works of a query it rates highest (of those that make claims) are voted."""
        out: list[float] = []
        self.last_samples, self.last_messages, self.last_texts = [], [], []
        works_of = self._works(prompts, kept)
        self.cost["items"] += len(prompts)  # the works are counted as no item of their own (`_works`)
        ratings = self._rate_works(prompts, works_of) if self.meta is not None else {}
        for prompt, response, works in zip(prompts, kept, works_of, strict=True):
            message = self.principles_message(prompt)
            self.last_messages.append(None if response is None else message)
            self.last_texts.append(list(works or []))
            if response is None or works is None:
                out.append(math.nan)
                self.last_samples.append([])
                continue
            text = _response_text(response)
            # one sample per work, as the reading path keeps them: None where the work makes no claim
            samples: list[tuple[float, ...] | None] = [
                None if c is None else (agreement(c, text),) for c in map(read_work, works)
            ]
            self.abstentions["no_claims"] += sum(x is None for x in samples)
            self.last_samples.append(samples)
            vote = meta_vote(samples, ratings[message], self.opts.kept_by_meta) if ratings else vote_scores(samples)
            if vote.totals is None:
                self._fail("abstained", "no work made a claim the rule reads")
                out.append(math.nan)
            else:
                out.append(vote.totals[0] / vote.used)
        return out

    def _rate_works(self, prompts: list[Conversation], works_of: list[list[str] | None]) -> dict[str, list[float]]:
        """The meta-RM's rating of each work of each distinct query (read once for all the query's responses)."""
        assert self.meta is not None
        distinct = {self.principles_message(p): w for p, w in zip(prompts, works_of, strict=True) if w is not None}
        items = [(m, w) for m, works in distinct.items() for w in works]
        rated = rate(self.meta, items)
        out: dict[str, list[float]] = {}
        for (m, _), r in zip(items, rated, strict=True):
            out.setdefault(m, []).append(r)
        return out

    def _score_by_reading(self, prompts: list[Conversation], kept: list[Conversation | None]) -> list[float]:
        """`read: model`: each critique's score, written or expected, voted over the k critiques."""
        critiques = CRITIQUES[self.opts.principles](self, prompts, kept)
        out: list[float] = []
        self.last_samples, self.last_messages, self.last_texts = [], [], []
        for prompt, response, drawn in zip(prompts, kept, critiques, strict=True):
            single = None if response is None else self.message(prompt, response)
            self.last_messages.append(single)
            self.last_texts.append([_critique_text(inp, t) for inp, t in drawn or []])
            if drawn is None:
                out.append(math.nan)
                self.last_samples.append([])
                continue
            parsed: list[tuple[float, ...] | None] = []
            rendered: dict[int, list[int]] = {}  # a judge input rendered once for its critiques
            for inp, t in drawn:
                p = parse_grm_scores(t, 1, out_of_range=self.opts.out_of_range)
                if not p.ok:
                    self.abstentions[p.reason] += 1
                elif self.opts.score == "expected":
                    if id(inp) not in rendered:
                        rendered[id(inp)] = judge_prompts(self.tokenizer, [inp])[0]
                    parsed.append((self._expected(rendered[id(inp)], t),))
                    continue
                parsed.append(p.scores)
            self.last_samples.append(parsed)
            if self.meta is not None:
                assert single is not None
                rated = rate_critiques(self.meta, single, [t for _, t in drawn])
                vote = meta_vote(parsed, rated, self.opts.kept_by_meta)
            else:
                vote = vote_scores(parsed)
            if vote.totals is None:
                self._fail("abstained", "every sampled critique abstained")
                out.append(math.nan)
            else:
                out.append(vote.totals[0] / vote.used)
        return out

    def _expected(self, prompt_ids: list[int], text: str) -> float:
        """The judge's expected score where `text` opens its last box: one forward pass over the judge prompt's
        tokens, the critique up to `\\boxed{` and a "1", whose logits give the first digit's distribution and, after
        a 1, whether a 0 follows (10) or the box closes (1)."""
        import torch  # lazy: torch, not needed to list the scorers (align ls)

        at = box_opened_at(text)
        assert at is not None  # a critique that parsed has a box
        digits, close = self._score_tokens
        ids = prompt_ids + self.tokenizer.encode(text[:at], add_special_tokens=False) + [digits[1]]
        with torch.no_grad():
            logits = self.model(input_ids=torch.tensor([ids], device=self.model.device)).logits[0, -2:].float()
        return box_expectation(logits[0], logits[1], digits, close)

    @functools.cached_property
    def _score_tokens(self) -> tuple[list[int], int]:
        """The token ids of the digits 0..9 and of the box's closing brace."""
        digits = [self.tokenizer.convert_tokens_to_ids(str(d)) for d in range(10)]
        return digits, self.tokenizer.encode("}", add_special_tokens=False)[-1]

    def describe(self) -> dict[str, Any]:
        o = self.opts
        if o.read == "rule":  # the work alone is sampled; no score is written or read, so no reading template
            return self._describe() | {
                "principles": o.principles,
                "read": o.read,
                "template": {"principles": GRM_PRINCIPLES_TEMPLATE},
                "work_prefix": o.given_work,
                "reader": "preference_data.suite.work_reading",
                "k": o.k,
                "meta_model": o.meta_model,
                "meta_weights": weights_fingerprint(o.meta_model) if o.meta_model else None,
                "k_meta": o.kept_by_meta if o.meta_model else None,
            }
        return self._describe() | {
            "score": o.score,
            "principles": o.principles,
            "read": o.read,
            "template": GRM_TEMPLATE
            if o.principles == "with_response"
            else {"principles": GRM_PRINCIPLES_TEMPLATE, "reading": GRM_READING_TEMPLATE},
            "work_prefix": o.given_work if o.principles == "from_prompt" else None,
            "k": o.k,
            "meta_model": o.meta_model,
            "meta_weights": weights_fingerprint(o.meta_model) if o.meta_model else None,
            "k_meta": o.kept_by_meta if o.meta_model else None,
            "out_of_range": o.out_of_range,
        }


def _critique_text(inp: JudgeInput, text: str) -> str:
    """A critique as one text: under `principles: from_prompt` the judge's principles and its analysis joined."""
    return text if isinstance(inp, str) else f"{inp[1]['content']}\n{text}"


# How a GRM draws its critiques, by `principles` (GRMOptions).
CRITIQUES: dict[str, Callable[[GRMScorer, list[Conversation], list[Conversation | None]], Any]] = {
    "with_response": GRMScorer._critiques_with_response,
    "from_prompt": GRMScorer._critiques_from_prompt,
}

# How a GRM reads a response into its score, by `read` (GRMOptions).
READS: dict[str, Callable[[GRMScorer, list[Conversation], list[Conversation | None]], list[float]]] = {
    "model": GRMScorer._score_by_reading,
    "rule": GRMScorer._score_by_rule,
}


class ThinkJudgeScorer(_GenerativeJudge):
    """Pairwise thinking judge: P(A better) = the share of valid verdicts for A over m samples (per order)."""

    kind: ScorerKind = "pairwise"
    name = "think"

    @staticmethod
    def message(prompt: Conversation, a: Conversation, b: Conversation, form: str) -> str:
        return THINK_TEMPLATE.format(
            instruction=THINK_INSTRUCTIONS[form],
            context=_turns(prompt),
            response_a=_response_text(a),
            response_b=_response_text(b),
        )

    @property
    def symmetric(self) -> bool:
        """With both orders judged, compare(a, b) == 1 - compare(b, a): a benchmark asks one order."""
        return bool(self.opts.both_orders)

    def compare_orders(
        self, prompts: list[Conversation], responses_a: list[Conversation], responses_b: list[Conversation]
    ) -> list[list[float]]:
        """P(A better) from each order judged (A first; with `both_orders` also B first, its verdicts mapped back):
        the share of that order's valid verdicts for A, NaN where all of them abstained. Every order and sample of
        every item goes into one batched generation."""
        o = self.opts
        orders = [False, True] if o.both_orders else [False]
        messages: list[str | None] = []
        for p, a, b in zip(prompts, responses_a, responses_b, strict=True):
            bad = _is_empty(a) or _is_empty(b)
            if bad:
                self._fail("empty_response")
            for swapped in orders:
                first, second = (b, a) if swapped else (a, b)
                messages.append(None if bad else self.message(p, first, second, o.form))
        texts = self._sample(messages, o.m, prefix=THINK_PREFIX, items=len(prompts))  # an item is a pair
        out: list[list[float]] = []
        # items that failed before sampling (an empty response, a prompt too long): counted there, not as abstained
        self.last_unsampled = {
            i for i in range(len(prompts)) if all(texts[i * len(orders) + j] is None for j in range(len(orders)))
        }
        for i in range(len(prompts)):
            shares = []
            for j, swapped in enumerate(orders):
                samples = texts[i * len(orders) + j] or []
                votes = [parse_think_answer(t, o.form) for t in samples]
                for v in votes:
                    if not v.ok:
                        self.abstentions[v.reason] += 1
                valid = [(v.label == "A") != swapped for v in votes if v.ok]  # a swapped order's "A" is response B
                shares.append(sum(valid) / len(valid) if valid else math.nan)
            out.append(shares)
        return out

    def compare(
        self, prompts: list[Conversation], responses_a: list[Conversation], responses_b: list[Conversation]
    ) -> list[float]:
        """P(A better): the mean of the orders' vote shares (`compare_orders`) that are not NaN; NaN when every
        sampled verdict of the pair abstained."""
        out = []
        for i, shares in enumerate(self.compare_orders(prompts, responses_a, responses_b)):
            valid = [x for x in shares if not math.isnan(x)]
            if not valid and i not in self.last_unsampled:
                self._fail("abstained", "every sampled verdict abstained")
            out.append(sum(valid) / len(valid) if valid else math.nan)
        return out

    def describe(self) -> dict[str, Any]:
        o = self.opts
        return self._describe() | {
            "template": THINK_TEMPLATE,
            "instruction": THINK_INSTRUCTIONS[o.form],
            "prefix": THINK_PREFIX,
            "form": o.form,
            "m": o.m,
            "both_orders": o.both_orders,
        }
