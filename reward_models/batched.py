"""The machinery every model-running scorer shares: tokenize, bucket by length, pack, one no-grad forward per
batch (`BatchedModel`), and a sequence-classification reward head read at the last token (`RewardHeadModel`: the
`scalar` and `polar` scorers). How and why (reading the reward by position, `max_length`, failures as NaN): the
docstring of `reward_models.scorers`.

Imports no scorer kind, so every kind's module (`model_scorers`, `polar.scorer`) builds on it and the table in
`reward_models.scorers` imports them all without a circle.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from prefalign.errors import UserError
from prefalign.models.hub import pad_token_id, weights_fingerprint
from preference_data.records import Conversation
from preference_data.tokenize import ResponseEnd, tokenize_single, tokenize_singles

from .checkpoint import RewardStats, load_rm
from .options import ModelOptions, _device, _is_empty, _resolve_dtype

if TYPE_CHECKING:
    from prefalign.models.batch import Layout

log = logging.getLogger(__name__)

Item = tuple[list[int], list[int]]  # (prompt ids (P,), response ids (T,)) of one scored sequence


class BatchedModel:
    """Tokenize, bucket by length, pack and run one no-grad forward per batch (scalar, implicit, judge, polar)."""

    def __init__(self, tokenizer: Any, config: Any, opts: ModelOptions, device: Any) -> None:
        self.tokenizer = tokenizer
        self.opts = opts
        self.device = device
        self.max_length = opts.max_length or getattr(config, "max_position_embeddings", None) or 4096
        self.pad_id = pad_token_id(tokenizer)
        self.failures: Counter[str] = Counter()
        self.layout: Layout = "segments"  # packing layout; subclasses pick it from their models (`layout_for`)

    def _pick_layout(self, *models: Any) -> None:
        from prefalign.models.forward import layout_for  # lazy: torch, not needed by align ls

        self.layout = layout_for(*models, device=self.device)

    def _fail(self, reason: str, detail: str = "") -> None:
        if not self.failures[reason]:
            log.warning("%s: an item scores NaN (%s)%s", type(self).__name__, reason, f": {detail}" if detail else "")
        self.failures[reason] += 1

    # where response ids end (preference_data.tokenize); scalar RMs read their own setting
    response_end: ResponseEnd = "eos"

    def _encode(self, prompt: Conversation, response: Conversation) -> Item | None:
        """Token ids of one (prompt, response), the prompt cut from the left to fit; None (and counted) on failure."""
        if _is_empty(response):
            self._fail("empty_response")
            return None
        try:
            p_ids, r_ids = tokenize_single(self.tokenizer, prompt, response, response_end=self.response_end)
        except UserError as e:  # the chat template rejected the conversation
            self._fail("template_error", str(e))
            return None
        return self._fit(p_ids, r_ids)

    def _encode_all(self, prompts: list[Conversation], responses: list[Conversation]) -> list[Item | None]:
        """`_encode` of every item, tokenized in one batched call (per item, tokenizing costs a scorer's batch
        more than the forward of a small model); when the template rejects any item, item by item, so only that
        item fails."""
        keep = [i for i, r in enumerate(responses) if not _is_empty(r)]
        try:
            ids = tokenize_singles(
                self.tokenizer, [prompts[i] for i in keep], [responses[i] for i in keep], self.response_end
            )
        except UserError:
            return [self._encode(p, r) for p, r in zip(prompts, responses, strict=True)]
        out: list[Item | None] = [None] * len(prompts)
        for _ in range(len(prompts) - len(keep)):
            self._fail("empty_response")
        for i, (p_ids, r_ids) in zip(keep, ids, strict=True):
            out[i] = self._fit(p_ids, r_ids)
        return out

    def _fit(self, p_ids: list[int], r_ids: list[int]) -> Item | None:
        """The prompt cut from the left so the item fits `max_length`; None (and counted) if the response alone
        does not fit."""
        if len(r_ids) >= self.max_length:
            self._fail("response_too_long", f"{len(r_ids)} response tokens >= max_length {self.max_length}")
            return None
        if len(p_ids) + len(r_ids) > self.max_length:
            p_ids = p_ids[len(p_ids) + len(r_ids) - self.max_length :]
        return p_ids, r_ids

    def _run(self, items: list[Item | None], forward: Callable[[Any], Any]) -> list[float]:
        """`forward(packed batch) -> (S,)` over every item, in length buckets; NaN where an item is None or fails.

        Items with the same prompt tokens go into one segment, up to `SHARED_RESPONSES` of them, the prompt encoded
        once (a pair's chosen and rejected answer, a prompt's samples and its reference): the same tokens at the
        same positions, each response attending its prompt and itself, so each score is what the item alone gets,
        for fewer tokens through the model."""
        out = [math.nan] * len(items)
        by_prompt: dict[tuple[int, ...], list[int]] = {}
        for i, it in enumerate(items):
            if it is not None:
                by_prompt.setdefault(tuple(it[0]), []).append(i)
        by_size: dict[int, list[tuple[int, ...]]] = {}  # units of k responses (one k per packed batch)
        for idx in by_prompt.values():
            for k in range(0, len(idx), SHARED_RESPONSES):
                unit = tuple(idx[k : k + SHARED_RESPONSES])
                by_size.setdefault(len(unit), []).append(unit)
        for units in by_size.values():
            size = {
                u: len(cast("Item", items[u[0]])[0]) + sum(len(cast("Item", items[i])[1]) for i in u) for u in units
            }
            order = sorted(units, key=lambda u: -size[u])  # similar lengths share a batch; the longest run first
            batch: list[tuple[int, ...]] = []
            used = 0
            for u in order:
                if batch and used + size[u] > self.opts.batch_tokens:
                    self._forward(batch, items, forward, out)
                    batch, used = [], 0
                batch.append(u)
                used += size[u]
            if batch:
                self._forward(batch, items, forward, out)
        return out

    def _forward(
        self, units: list[tuple[int, ...]], items: list[Item | None], forward: Callable[[Any], Any], out: list[float]
    ) -> None:
        import torch  # lazy (with packing): the scorer table and `align ls` load without torch

        from preference_data.packing import pack

        try:
            # "mask" layout: rows as long as the batch's longest segment (attention costs tokens x row length
            # under the block-diagonal mask, and the batch is one length bucket, so rows come out nearly full)
            encoded = [[cast("Item", items[i]) for i in u] for u in units]  # `_run` batches only encoded items
            longest = max(len(g[0][0]) + sum(len(r) for _, r in g) for g in encoded)
            packed = pack(
                [g[0][0] for g in encoded],
                [tuple(r for _, r in g) for g in encoded],
                self.pad_id,
                row_tokens=longest,
                layout=self.layout,
            )
            with torch.no_grad():
                values = forward(packed.to(self.device)).float().cpu().tolist()
        except RuntimeError as e:
            # e.g. out of memory on one long batch: retry item by item, so one item cannot sink the run
            if len(units) > 1 or len(units[0]) > 1:
                for i in (i for u in units for i in u):
                    self._forward([(i,)], items, forward, out)
                return
            self._fail("forward_error", str(e).splitlines()[0] if str(e) else type(e).__name__)
            return
        B = len(units)
        for b, u in enumerate(units):
            for k, i in enumerate(u):  # response k of segment b is sequence k * B + b
                out[i] = float(values[k * B + b])


SHARED_RESPONSES = 4
"""Responses of one prompt in one packed segment at most (a segment's attention is one square over its prompt and
all its responses: with more, the masked-out part of the square grows)."""


class RewardHeadModel(BatchedModel):
    """A sequence-classification reward model (`checkpoint.load_rm`: the model, its tokenizer and the reward
    statistics saved beside it) whose score head is read at the last token of each sequence."""

    name: str  # the scorer kind, for the dtype announcement
    opts: Any  # its options: ModelOptions with `normalize` (ScalarOptions, PolarOptions)
    stats: RewardStats

    def __init__(self, opts: Any) -> None:
        device = _device(opts.device)
        opts = _resolve_dtype(opts, device, self.name)
        self._check_options(opts)
        model, tokenizer, self.stats = load_rm(opts.model, dtype=opts.dtype)
        self._check_model(opts, model, tokenizer)
        super().__init__(tokenizer, model.config, opts, device)
        self.model = model.to(device)
        self._pick_layout(self.model)

    def _check_options(self, opts: Any) -> None:
        """Refuse options the model on disk cannot serve, before it loads (a subclass's check)."""

    def _check_model(self, opts: Any, model: Any, tokenizer: Any) -> None:
        """Refuse a loaded model this scorer cannot read (a subclass's check)."""

    def _head_scores(self, items: list[Item | None]) -> list[float]:
        """The head's output at each item's last token, normalised with the saved statistics when asked."""
        from prefalign.models.forward import last_token_rewards  # lazy: torch, not needed by align ls

        raw = self._run(items, lambda batch: last_token_rewards(self.model, batch)[:, 0])  # (S,)
        return [self.stats.normalise(r) for r in raw] if self.opts.normalize else raw

    def _describe_head(self) -> dict[str, Any]:
        return {
            "model": self.opts.model,
            "weights": weights_fingerprint(self.opts.model),
            "dtype": self.opts.dtype,
            "device": str(self.device),
            "normalize": self.opts.normalize,
            "stats": dataclasses.asdict(self.stats),
        }


__all__ = ["BatchedModel", "Item", "RewardHeadModel"]
