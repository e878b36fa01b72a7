"""Tokenization of preference records with exact prompt/response token boundaries.

How a pair becomes token ids (`render_pair`, `tokenize_pairs`):

1. Render text once per full conversation: prompt + chosen and prompt + rejected, and the prompt alone
   with the generation prompt appended (`<|im_start|>assistant\\n` for ChatML). Texts come from the
   tokenizer's chat template (`apply_chat_template(..., tokenize=False)`), or from the plain fallback
   below when the tokenizer has none.
2. Tokenize all texts in batches with `add_special_tokens=False`. The rendered text already holds every
   special token the template wants (BOS included), so this equals `apply_chat_template(tokenize=True)`
   and never adds a second BOS.
3. Find the boundary by comparing tokens, never by stripping strings: the prompt ids must be a token
   prefix of both full renderings. Some templates render the prompt differently alone than in context
   (a generation prompt that opens a `<think>` block, a system prompt that depends on the last turn),
   and BPE can merge across the boundary (SmolLM2 tokenizes "assistant\\n" + "  No" as
   [..., "\\n ", " No"], so a response starting with two spaces breaks the prefix); then the boundary
   is the longest common token prefix of the three renderings, counted as `boundary_mismatch`.
   Both responses always share the same prompt ids.
4. Each response ends with the EOS token that closes the last assistant turn (`<|im_end|>` for ChatML):
   that is the token generation stops at, so policy training scores it and scores nothing after it
   (`response_end="eos"`): whitespace the template writes after that EOS (ChatML's trailing "\\n") is
   dropped. Reward models read their score at the last token of the full template rendering instead
   (`response_end="template"`, the trailing "\\n" kept): that is the token transformers'
   sequence-classification head reads for `apply_chat_template(conversation)`, as TRL's RewardTrainer,
   reward-bench and RM model cards do, so a saved RM scores the same in any of those tools. If the
   response does not end with EOS up to such whitespace, EOS is appended and counted as `missing_eos`.
5. If a rendering starts with two BOS tokens (a template that writes `bos_token` before a turn marker
   that is the same token), one is removed and counted as `double_bos`.
6. The length policy is applied to prompt + longest response (both sequences share the prompt):
   `drop`, `truncate_prompt_left` or `raise` (see `LENGTH_POLICIES`). Every dropped or changed pair is
   counted in the `TokenizeReport`; nothing is dropped silently.

Plain fallback (a tokenizer without a chat template), one block per message separated by a blank line,
role names capitalised, the generation prompt "Assistant:" and the EOS token appended to the response:

    [BOS]System: {system}\\n\\nUser: {question}\\n\\nAssistant: {answer}<EOS>

BOS is written only when the tokenizer adds one to plain text by default (`tokenizer("a")`).

Left truncation of the prompt keeps no special tokens: it keeps the last tokens, which hold the latest
user turn and the generation prompt. For ChatML the BOS id (`<|im_start|>`) opens every turn, so keeping
the first token would glue a turn header onto the middle of a message; a cut-off system prompt is no
better. This matches TRL's `keep_end` truncation.

Shapes: ids are plain `list[int]`; `P`, `C`, `R` are the prompt, chosen and rejected token counts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from prefalign.errors import UserError, did_you_mean
from prefalign.stats import nearest_rank
from prefalign.training.config import LengthPolicy

from .records import Conversation, Message, PreferencePair

ResponseEnd = Literal["eos", "template"]  # where a response's ids end (module docstring, step 4)

LENGTH_POLICIES: dict[LengthPolicy, str] = {  # one line per `LengthPolicy` (prefalign.training.config)
    "drop": "remove pairs whose prompt + longest response exceeds max_length (counted as too_long)",
    "truncate_prompt_left": "remove prompt tokens from the left until the longer side fits (counted as "
    "prompt_truncated); drop pairs whose longest response leaves no room for even one "
    "prompt token (counted as response_too_long)",
    "raise": "stop with an error naming the first pair that does not fit",
}

# What each report count means. `dropped` reasons remove the pair; the others keep it.
REASONS: dict[str, str] = {
    "too_long": "dropped: prompt + longest response > max_length (policy 'drop')",
    "response_too_long": "dropped: longest response + 1 prompt token > max_length (policy 'truncate_prompt_left')",
    "prompt_truncated": "kept: prompt left-truncated to fit max_length (policy 'truncate_prompt_left')",
    "boundary_mismatch": "kept: the prompt rendered alone is not a token prefix of the full conversation; "
    "the boundary is the longest common token prefix",
    "double_bos": "repaired: the rendering started with two BOS tokens; one was removed",
    "missing_eos": "repaired: a response did not end with EOS; EOS was appended",
}
DROP_REASONS = ("too_long", "response_too_long")

_EXAMPLES_PER_REASON = 5  # record ids kept per reason in the report
_ENCODE_BATCH = 512  # texts per call to the (fast) tokenizer
_PLAIN_GENERATION_PROMPT = "Assistant:"


@dataclass
class TokenizedPair:
    """A preference pair as token ids. `prompt_ids + chosen_ids` is the chosen sequence (P + C tokens).

    chosen_ids / rejected_ids end with EOS. `attributes` is the record's own metadata (task family,
    corruption kind, ...) so per-group metrics can be computed after training.
    """

    id: str
    source: str
    prompt_ids: list[int]
    chosen_ids: list[int]
    rejected_ids: list[int]
    margin: float | None = None
    attributes: dict[str, Any] = field(default_factory=dict)

    @property
    def total_length(self) -> int:
        """P + max(C, R): the length the policy compares with `max_length`."""
        return len(self.prompt_ids) + max(len(self.chosen_ids), len(self.rejected_ids))


def _percentiles(values: list[int]) -> dict[str, int | None]:
    """Nearest-rank percentiles (each one is an observed length)."""
    if not values:
        return {"p50": None, "p90": None, "p99": None, "max": None}
    s = sorted(values)
    return {"p50": nearest_rank(s, 50), "p90": nearest_rank(s, 90), "p99": nearest_rank(s, 99), "max": s[-1]}


@dataclass
class TokenizeReport:
    """What tokenization did: counts by reason (see `REASONS`), the first record ids per reason, and
    token-length percentiles of the renderings *before* the length policy (use them to pick max_length).
    """

    policy: str = ""
    max_length: int | None = None
    n_in: int = 0
    n_out: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[str]] = field(default_factory=dict)
    lengths: dict[str, dict[str, int | None]] = field(default_factory=dict)

    def add(self, reason: str, record: str) -> None:
        """Count one occurrence of `reason` (a key of `REASONS`) for the record named `record`."""
        assert reason in REASONS, reason
        self.counts[reason] = self.counts.get(reason, 0) + 1
        ex = self.examples.setdefault(reason, [])
        if len(ex) < _EXAMPLES_PER_REASON:
            ex.append(record)

    @property
    def n_dropped(self) -> int:
        return sum(self.counts.get(r, 0) for r in DROP_REASONS)

    def set_lengths(self, prompt: list[int], chosen: list[int], rejected: list[int]) -> None:
        """Record length percentiles; each argument holds one token count per pair."""
        self.lengths = {
            "prompt": _percentiles(prompt),
            "chosen": _percentiles(chosen),
            "rejected": _percentiles(rejected),
            "total": _percentiles([p + max(c, r) for p, c, r in zip(prompt, chosen, rejected, strict=True)]),
        }

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready; `reasons` explains every key of `counts`."""
        return {
            "policy": self.policy,
            "max_length": self.max_length,
            "n_in": self.n_in,
            "n_out": self.n_out,
            "n_dropped": self.n_dropped,
            "counts": dict(self.counts),
            "examples": {k: list(v) for k, v in self.examples.items()},
            "reasons": {k: REASONS[k] for k in self.counts},
            "lengths": self.lengths,
        }

    def lines(self) -> list[str]:
        """Human-readable report: records in/kept, dropped and changed records by reason, length percentiles."""
        out = [
            f"records in: {self.n_in}, kept: {self.n_out} (policy {self.policy or 'none'}, "
            f"max_length {self.max_length})"
        ]
        groups = (
            ("dropped", [r for r in REASONS if r in DROP_REASONS]),
            ("kept with changes", [r for r in REASONS if r not in DROP_REASONS]),
        )
        for title, reasons in groups:
            found = [r for r in reasons if self.counts.get(r)]
            # a dropped record has one reason; a kept record may be counted under several
            total = sum(self.counts[r] for r in found) if title == "dropped" else ""
            out.append(f"{title}: {total}" if found else f"{title}: none")
            for r in found:
                out.append(f"  {r}: {self.counts[r]} (ids {', '.join(self.examples.get(r, []))}) - {REASONS[r]}")
        if self.lengths:
            out.append("token lengths before the length policy (p50 / p90 / p99 / max):")
            for name, q in self.lengths.items():
                out.append(f"  {name}: {q['p50']} / {q['p90']} / {q['p99']} / {q['max']}")
        return out

    def summary(self) -> str:
        """One line for logs, e.g. 'tokenized 998/1000 records (policy drop, max_length 512); too_long=2'."""
        parts = ", ".join(f"{k}={v}" for k, v in sorted(self.counts.items()))
        return (
            f"tokenized {self.n_out}/{self.n_in} records (policy {self.policy or 'none'}, "
            f"max_length {self.max_length})" + (f"; {parts}" if parts else "")
        )


# ---------------------------------------------------------------------------------------------------
# Rendering: conversation -> text (chat template or plain fallback); text -> ids in batches.


class _Renderer:
    """Text renderings for one tokenizer: its chat template, or the plain fallback (module docstring)."""

    def __init__(self, tokenizer: Any, response_end: ResponseEnd = "eos") -> None:
        if response_end not in ("eos", "template"):
            raise ValueError(f"response_end must be 'eos' or 'template', got {response_end!r}")
        self.response_end = response_end
        self.tokenizer = tokenizer
        eos_id: int | None = tokenizer.eos_token_id
        self.bos_id: int | None = tokenizer.bos_token_id
        if eos_id is None:
            raise UserError(
                f"tokenizer {getattr(tokenizer, 'name_or_path', '')!r} has no eos_token; responses must "
                "end with the token generation stops at: set tokenizer.eos_token before tokenizing"
            )
        self.eos_id: int = eos_id
        self.templated = bool(getattr(tokenizer, "chat_template", None))
        self.plain_bos = ""
        if not self.templated and self.bos_id is not None:
            with_special = tokenizer("a")["input_ids"]
            if with_special and with_special[0] == self.bos_id and tokenizer.bos_token:
                self.plain_bos = tokenizer.bos_token
        self._tail_is_space: dict[tuple[int, ...], bool] = {}

    def _template(self, conv: Conversation, generation_prompt: bool, record: str) -> str:
        from jinja2.exceptions import TemplateError  # lazy: jinja2 (0.3 s), the scorer table loads without it

        try:
            return self.tokenizer.apply_chat_template(
                [m.to_dict() for m in conv], tokenize=False, add_generation_prompt=generation_prompt
            )
        except TemplateError as e:
            raise UserError(
                f"record {record}: the chat template rejected this conversation ({e}); roles: {[m.role for m in conv]}"
            ) from e

    @staticmethod
    def _plain(conv: Sequence[Message]) -> str:
        return "\n\n".join(f"{m.role.capitalize()}: {m.content}" for m in conv)

    def prompt(self, conv: Conversation, record: str) -> str:
        """The prompt followed by the generation prompt (what a model is given to answer)."""
        if self.templated:
            return self._template(conv, True, record)
        head = self._plain(conv)
        return self.plain_bos + (head + "\n\n" if head else "") + _PLAIN_GENERATION_PROMPT

    def full(self, prompt: Conversation, response: Conversation, record: str) -> str:
        """The whole conversation, prompt followed by the response messages."""
        if self.templated:
            return self._template(list(prompt) + list(response), False, record)
        return self.plain_bos + self._plain(list(prompt) + list(response)) + self.tokenizer.eos_token

    def encode(self, texts: list[str]) -> list[list[int]]:
        """Batched tokenization without added special tokens (the text already holds them).

        Each distinct text is tokenized once (pairs built from one rated prompt repeat the prompt and
        often a response); every returned list is a fresh copy, safe to edit in place.
        """
        unique = list(dict.fromkeys(texts))
        encoded: list[list[int]] = []
        for i in range(0, len(unique), _ENCODE_BATCH):
            encoded.extend(self.tokenizer(unique[i : i + _ENCODE_BATCH], add_special_tokens=False)["input_ids"])
        by_text = dict(zip(unique, encoded, strict=True))
        return [list(by_text[t]) for t in texts]

    def strip_double_bos(self, ids: list[int]) -> bool:
        """Remove a repeated BOS at the start, in place; True when there was one."""
        b = self.bos_id
        if b is None or len(ids) < 2 or ids[0] != b or ids[1] != b:
            return False
        while len(ids) >= 2 and ids[1] == b:
            del ids[1]
        return True

    def finish_response(self, resp: list[int]) -> tuple[list[int], bool]:
        """Cut the response after its closing EOS (dropping trailing template whitespace unless `response_end`
        is 'template') or append EOS.

        Returns (response ids ending with EOS and, for 'template', the template's whitespace after it;
        whether EOS had to be appended).
        """
        eos = self.eos_id
        for j in range(len(resp) - 1, -1, -1):
            if resp[j] == eos:
                tail = tuple(resp[j + 1 :])
                if not tail:
                    return resp, False
                if tail not in self._tail_is_space:
                    self._tail_is_space[tail] = self.tokenizer.decode(list(tail)).strip() == ""
                if self._tail_is_space[tail]:
                    return (resp if self.response_end == "template" else resp[: j + 1]), False
                break  # text after the last EOS: the final turn was not closed with EOS
        return resp + [eos], True


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _split(
    renderer: _Renderer,
    prompts: list[Conversation],
    responses: list[list[Conversation]],
    records: list[str],
    report: TokenizeReport | None,
) -> list[tuple[list[int], list[list[int]]]]:
    """The boundary code every public function shares.

    For each row: render the prompt (with generation prompt) and prompt + each response, tokenize in a
    batch, and split at the token boundary. Returns one (prompt_ids, [response_ids, ...]) per row;
    all responses of a row share prompt_ids, and `prompt_ids + response_ids[k]` is the k-th full
    rendering up to its closing EOS.
    """
    texts: list[str] = []
    for conv, resps, rec in zip(prompts, responses, records, strict=True):
        texts.append(renderer.prompt(conv, rec))
        texts.extend(renderer.full(conv, r, rec) for r in resps)
    ids = renderer.encode(texts)
    out = []
    k = 0
    for resps, rec in zip(responses, records, strict=True):
        p_ids, fulls = ids[k], ids[k + 1 : k + 1 + len(resps)]
        k += 1 + len(resps)
        double = [renderer.strip_double_bos(x) for x in (p_ids, *fulls)]
        boundary = min([len(p_ids)] + [_common_prefix(p_ids, f) for f in fulls])
        finished = [renderer.finish_response(f[boundary:]) for f in fulls]
        if report is not None:
            if any(double):
                report.add("double_bos", rec)
            if boundary < len(p_ids):
                report.add("boundary_mismatch", rec)
            if any(appended for _, appended in finished):
                report.add("missing_eos", rec)
        out.append((p_ids[:boundary], [r for r, _ in finished]))
    return out


def _check_policy(
    policy: str, max_length: int | None, allowed: Sequence[LengthPolicy] = tuple(LENGTH_POLICIES)
) -> None:
    if policy not in allowed:
        raise UserError(
            f"unknown length policy {policy!r}{did_you_mean(policy, list(allowed))}; choose one of: "
            + "; ".join(f"'{p}' ({LENGTH_POLICIES[p]})" for p in allowed)
        )
    if max_length is not None and (isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 2):
        raise UserError(f"max_length must be an integer >= 2 (or None for no limit), got {max_length!r}")


def _record_name(pair: PreferencePair, row: int) -> str:
    return pair.id or f"{pair.source or 'pairs'}#{row}"


# ---------------------------------------------------------------------------------------------------
# Public API


def render_pair(
    tokenizer: Any, pair: PreferencePair, report: TokenizeReport | None = None
) -> tuple[list[int], list[int], list[int]]:
    """Token ids of one pair: (prompt_ids (P,), chosen_ids (C,), rejected_ids (R,)).

    `prompt_ids + chosen_ids` equals the template's rendering of prompt + chosen up to the EOS closing
    the last assistant turn (template whitespace after it is dropped); the same for rejected. No length
    policy here; pass `report` to collect `boundary_mismatch` / `double_bos` / `missing_eos` counts.
    """
    renderer = _Renderer(tokenizer)
    ((p_ids, (c_ids, r_ids)),) = _split(
        renderer, [pair.prompt], [[pair.chosen, pair.rejected]], [_record_name(pair, 0)], report
    )
    return p_ids, c_ids, r_ids


def tokenize_pairs(
    pairs: Sequence[PreferencePair],
    tokenizer: Any,
    max_length: int | None,
    policy: LengthPolicy,
    response_end: ResponseEnd = "eos",
) -> tuple[list[TokenizedPair], TokenizeReport]:
    """Tokenize pairs and apply the length policy to P + max(C, R) against `max_length`.

    pairs: B records. Returns (kept pairs in input order, report). `max_length=None` means no limit.
    The policy has no default on purpose: what happens to long pairs is always the caller's choice.
    Policies (`LENGTH_POLICIES`): 'drop' removes a pair that does not fit (`too_long`);
    'truncate_prompt_left' removes the oldest prompt tokens so that the longer side fits
    (`prompt_truncated`), keeping at least one prompt token, and drops the pair when the longest
    response alone leaves no room (`response_too_long`); 'raise' raises `UserError` naming the record.
    `response_end`: 'eos' for policies, 'template' for reward models (module docstring, step 4).
    """
    _check_policy(policy, max_length)
    report = TokenizeReport(policy=policy, max_length=max_length, n_in=len(pairs))
    renderer = _Renderer(tokenizer, response_end)
    records = [_record_name(p, i) for i, p in enumerate(pairs)]
    split = _split(renderer, [p.prompt for p in pairs], [[p.chosen, p.rejected] for p in pairs], records, report)
    report.set_lengths([len(p) for p, _ in split], [len(r[0]) for _, r in split], [len(r[1]) for _, r in split])

    out: list[TokenizedPair] = []
    for row, (pair, rec, (p_ids, (c_ids, r_ids))) in enumerate(zip(pairs, records, split, strict=True)):
        longest = max(len(c_ids), len(r_ids))
        if max_length is not None and len(p_ids) + longest > max_length:
            if policy == "raise":
                raise UserError(
                    f"pair {rec!r} (source {pair.source or '?'!r}, row {row}) is {len(p_ids) + longest} tokens: "
                    f"prompt {len(p_ids)} + longest response {longest} (chosen {len(c_ids)}, rejected "
                    f"{len(r_ids)}) > max_length {max_length}. Raise max_length or choose another length "
                    "policy: " + "; ".join(f"'{p}' ({d})" for p, d in LENGTH_POLICIES.items() if p != "raise")
                )
            if policy == "drop":
                report.add("too_long", rec)
                continue
            budget = max_length - longest  # prompt tokens that still fit
            if budget < 1:
                report.add("response_too_long", rec)
                continue
            p_ids = p_ids[len(p_ids) - budget :]
            report.add("prompt_truncated", rec)
        out.append(TokenizedPair(pair.id, pair.source, p_ids, c_ids, r_ids, pair.margin, dict(pair.attributes)))
    report.n_out = len(out)
    return out, report


def tokenize_prompts(
    prompts: Sequence[Conversation],
    tokenizer: Any,
    max_prompt_length: int | None = None,
    policy: LengthPolicy = "truncate_prompt_left",
    report: TokenizeReport | None = None,
) -> list[list[int]]:
    """Generation inputs: B prompts -> B id lists (each (P,), ending with the generation prompt).

    Output rows align with the input, so only 'truncate_prompt_left' (keep the last `max_prompt_length`
    tokens; counted as `prompt_truncated` in `report` when given) and 'raise' are allowed.
    """
    from prefalign.generation.prompts import render_prompts  # lazy: the generation package loads torch

    _check_policy(policy, max_prompt_length, allowed=("truncate_prompt_left", "raise"))
    records = [f"prompt#{i}" for i in range(len(prompts))]

    def repeated_bos(row: int) -> None:
        if report is not None:
            report.add("double_bos", records[row])

    ids = render_prompts(tokenizer, [list(c) for c in prompts], on_repeated_bos=repeated_bos)
    out = []
    for row, (p_ids, rec) in enumerate(zip(ids, records, strict=True)):
        if max_prompt_length is not None and len(p_ids) > max_prompt_length:
            if policy == "raise":
                raise UserError(
                    f"prompt row {row} is {len(p_ids)} tokens > max_prompt_length {max_prompt_length}; "
                    "raise max_prompt_length or use the length policy 'truncate_prompt_left'"
                )
            p_ids = p_ids[len(p_ids) - max_prompt_length :]
            if report is not None:
                report.add("prompt_truncated", rec)
        out.append(p_ids)
    if report is not None:
        report.n_in += len(prompts)
        report.n_out += len(out)
    return out


def tokenize_single(
    tokenizer: Any,
    prompt: Conversation,
    response: Conversation | str,
    report: TokenizeReport | None = None,
    response_end: ResponseEnd = "eos",
) -> tuple[list[int], list[int]]:
    """(prompt_ids (P,), response_ids (T,)) for scoring one response, with the same boundary and EOS
    rules as `render_pair`. A string response is one assistant message.
    """
    resp = [Message("assistant", response)] if isinstance(response, str) else list(response)
    ((p_ids, (r_ids,)),) = _split(_Renderer(tokenizer, response_end), [list(prompt)], [[resp]], ["single#0"], report)
    return p_ids, r_ids


def tokenize_singles(
    tokenizer: Any,
    prompts: Sequence[Conversation],
    responses: Sequence[Conversation | str],
    response_end: ResponseEnd = "eos",
) -> list[tuple[list[int], list[int]]]:
    """`tokenize_single` over many items with one batched tokenizer call (what a scorer's batch needs); a
    conversation the chat template rejects raises a `UserError` naming its index (`single#i`)."""
    resps = [[Message("assistant", r)] if isinstance(r, str) else list(r) for r in responses]
    records = [f"single#{i}" for i in range(len(resps))]
    split = _split(_Renderer(tokenizer, response_end), [list(p) for p in prompts], [[r] for r in resps], records, None)
    return [(p_ids, r_ids) for p_ids, (r_ids,) in split]


__all__ = [
    "LengthPolicy",
    "ResponseEnd",
    "LENGTH_POLICIES",
    "REASONS",
    "DROP_REASONS",
    "TokenizedPair",
    "TokenizeReport",
    "render_pair",
    "tokenize_pairs",
    "tokenize_prompts",
    "tokenize_single",
    "tokenize_singles",
]
