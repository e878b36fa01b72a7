"""The static decoding path: KV caches of fixed shapes per batch bucket and one compiled (on a GPU, CUDA-graph
captured) decode step per bucket, as gpt-fast, vLLM and SGLang decode small models.

A decode step of a small model on a GPU is a few hundred kernel launches of microseconds each: launch-bound, the
GPU idle between them. Captured once into a CUDA graph (`torch.compile(mode="reduce-overhead")`), the step is one
launch. A captured graph replays fixed shapes at fixed addresses, so everything a step reads has one shape per
bucket and lives in buffers that outlast the batch:

- rows: a batch's rows sit in a bucket of `ROW_BUCKETS`-spaced sizes (the smallest that holds them); rows past the
  batch's are filler whose outputs are never read. A finished row stays in its slot until the live rows fit the
  next smaller bucket; then they are copied there (a step of that bucket's graph, captured once, serves from then
  on): finished rows leave without a new capture.
- columns: the prompt width is rounded up to a multiple of `PROMPT_MULTIPLE` (left padding, masked) and the cache
  holds it plus the batch's `max_new_tokens`; the step attends all of it under a mask, the columns not yet written
  hidden by the causal mask at `cache_position`.
- weights: the step reads the model's parameters where they are; `TransformersEngine.sync_weights` copies new
  weights into them in place, so the captured step decodes with the new policy without capturing again.

Each (rows, columns) shape is one graph, kept for the engine's life (`StaticSteps`; `compiles` counts the shapes
compiled). On a CPU there is nothing to capture; the same path runs compiled (`inductor`) or eager, and attends the
full cache width where the eager engine attends only the filled columns, so it is an option there, not the default
(`TransformersEngine(static=...)`). The eager engine stays the reference: tests check the static path's greedy
tokens and its seeded samples against it.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, cast

import torch
from transformers.cache_utils import StaticCache, StaticLayer

from .cache import cache_kwarg

ROW_BUCKETS = 4
"""Row buckets are powers of this (1, 4, 16, 64, 256, ...; the largest is the engine's max_rows)."""

PROMPT_MULTIPLE = 64
"""Prompt widths are rounded up to a multiple of this many columns."""


def row_bucket(rows: int, max_rows: int) -> int:
    """The smallest bucket (a power of `ROW_BUCKETS`, or `max_rows`) holding `rows`."""
    b = ROW_BUCKETS ** max(0, math.ceil(math.log(max(rows, 1), ROW_BUCKETS) - 1e-9))
    return min(b, max(max_rows, rows))


def prompt_bucket(width: int) -> int:
    return PROMPT_MULTIPLE * math.ceil(width / PROMPT_MULTIPLE)


class BucketCache(StaticCache):
    """transformers' `StaticCache` of `rows` x `columns`, allocated once and refilled batch after batch: the
    engine's prefill writes each unit's prompt into its rows (`write_prompts`, as `cache.SlabCache` does), right-
    aligned at `prompt_width`, and every decode step writes one column at the layers' shared fill counter."""

    def __init__(self, config: Any, rows: int, columns: int, dtype: torch.dtype, device: torch.device) -> None:
        super().__init__(config=config, max_cache_len=columns)
        text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
        heads = int(getattr(text, "num_key_value_heads", None) or text.num_attention_heads)
        head_dim = int(getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads)
        probe = torch.zeros(rows, heads, 1, head_dim, dtype=dtype, device=device)
        self.kv: list[tuple[torch.Tensor, torch.Tensor]] = []  # each layer's (keys, values), fixed addresses
        for layer in self.static_layers:
            layer.lazy_initialization(probe, probe)
            assert layer.keys is not None and layer.values is not None  # allocated just now
            self.kv.append((layer.keys, layer.values))
        self.config, self.dtype = config, dtype
        self.rows, self.columns = rows, columns
        self.mask = torch.ones(rows, columns, dtype=torch.long, device=device)  # 0 on left padding
        self.unit_of_row = torch.zeros(rows, dtype=torch.long, device=device)
        self.prompt_width = 0

    @property
    def nbytes(self) -> int:
        """The memory its keys, values and mask hold."""
        kv = sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in self.kv)
        return kv + self.mask.numel() * self.mask.element_size()

    @property
    def static_layers(self) -> list[StaticLayer]:
        """`layers`, typed: a decoder of full-attention layers, each a `StaticLayer` (allocated in `__init__`)."""
        return cast("list[StaticLayer]", self.layers)

    @property
    def fill(self) -> torch.Tensor:
        """The columns filled so far (a 0-d tensor the layers advance in place; every layer's is the same)."""
        return self.static_layers[0].cumulative_length

    def start(self, unit_of_row: torch.Tensor, prompt_lengths: torch.Tensor, prompt_width: int) -> None:
        """A new batch: its rows' units (R <= rows), the units' prompt lengths, the (bucketed) prompt width."""
        R = unit_of_row.numel()
        self.unit_of_row = unit_of_row
        self.prompt_width = prompt_width
        pad = (prompt_width - prompt_lengths).index_select(0, unit_of_row)
        cols = torch.arange(self.columns, device=self.mask.device)
        self.mask.fill_(1)
        self.mask[:R] = (cols.unsqueeze(0) >= pad.unsqueeze(1)).long()
        for layer, (keys, values) in zip(self.static_layers, self.kv, strict=True):
            keys.zero_()
            values.zero_()
            layer.cumulative_length.fill_(prompt_width)

    def write_prompts(self, layer_idx: int, u0: int, u1: int, keys: torch.Tensor, values: torch.Tensor) -> None:
        """The prefilled keys/values (u1 - u0, H, W, D) of units u0..u1-1 into their rows."""
        k_buf, v_buf = self.kv[layer_idx]
        rows = ((self.unit_of_row >= u0) & (self.unit_of_row < u1)).nonzero().squeeze(1)
        local = self.unit_of_row.index_select(0, rows) - u0
        W = keys.shape[2]
        cols = slice(self.prompt_width - W, self.prompt_width)
        k_buf[rows, :, cols] = keys.index_select(0, local)
        v_buf[rows, :, cols] = values.index_select(0, local)

    def take(self, other: BucketCache, slots: torch.Tensor) -> None:
        """Rows `slots` of `other` (the same columns) into this cache's first rows, fill counter included."""
        n = slots.numel()
        for mine, theirs, (k, v), (k_old, v_old) in zip(
            self.static_layers, other.static_layers, self.kv, other.kv, strict=True
        ):
            k[:n] = k_old.index_select(0, slots)
            v[:n] = v_old.index_select(0, slots)
            mine.cumulative_length.copy_(theirs.cumulative_length)
        self.mask[:n] = other.mask.index_select(0, slots)
        self.mask[n:] = 1
        self.prompt_width = other.prompt_width


def _decode_step(
    model: Any,
    cache: BucketCache,
    input_ids: torch.Tensor,
    position_ids: torch.Tensor,
    cache_position: torch.Tensor,
    attention_mask: torch.Tensor,
    kv_name: str = "past_key_values",
) -> torch.Tensor:
    """One token per row through `model`, written into `cache` (passed as `kv_name`, `cache_kwarg`'s answer, read
    outside the compiled step); the next logits (rows, V)."""
    out = model(
        input_ids=input_ids,
        position_ids=position_ids,
        cache_position=cache_position,
        attention_mask=attention_mask,
        **{kv_name: cache},
        use_cache=True,
    )
    return out.logits[:, -1]


CACHE_BYTES = 4 << 30
"""Default cap on the bucket caches an engine keeps (4 GiB): beyond it the least recently used bucket is freed."""


def _bucket_bytes(config: Any, rows: int, columns: int, dtype: torch.dtype) -> int:
    """What a `BucketCache` of this shape will hold (keys and values of every layer, and the mask)."""
    text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    heads = int(getattr(text, "num_key_value_heads", None) or text.num_attention_heads)
    head_dim = int(getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads)
    per = torch.tensor([], dtype=dtype).element_size()
    return 2 * int(text.num_hidden_layers) * rows * heads * columns * head_dim * per + rows * columns * 8


class StaticSteps:
    """The engine's bucket caches and its decode step, compiled once per (rows, columns) shape when `compile` is
    set (`reduce-overhead`, CUDA graphs, on a GPU; inductor on a CPU). `compiles` counts the shapes compiled.

    The caches are an LRU bounded by `max_bytes`: a new bucket that takes the total over it frees the least recently
    used ones (never the one in use). A freed bucket is allocated again when its shape comes back (its compiled
    step is kept: a graph holds no cache memory beyond the call)."""

    def __init__(self, compile: bool, max_bytes: int = CACHE_BYTES) -> None:
        self.caches: OrderedDict[tuple[int, int], BucketCache] = OrderedDict()
        self.max_bytes = max_bytes
        self.evicted = 0
        self.compile = compile
        self.shapes: set[tuple[int, int]] = set()  # the (rows, columns) shapes the step has run at
        self._step: Callable[..., torch.Tensor] = _decode_step
        if compile:
            import torch._dynamo  # lazy: only a compiled static path raises the limit on graphs a function keeps

            # one graph per (rows, columns) bucket, kept for the engine's life: room for every bucket
            torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
            mode = "reduce-overhead" if torch.cuda.is_available() else None
            self._step = torch.compile(_decode_step, mode=mode, dynamic=False, fullgraph=False)

    @property
    def compiles(self) -> int:
        """Shapes compiled so far (one graph each)."""
        return len(self.shapes) if self.compile else 0

    @property
    def nbytes(self) -> int:
        """The memory the kept bucket caches hold."""
        return sum(c.nbytes for c in self.caches.values())

    def cache(self, config: Any, rows: int, columns: int, dtype: torch.dtype, device: torch.device) -> BucketCache:
        key = (rows, columns)
        if key in self.caches:
            self.caches.move_to_end(key)
            return self.caches[key]
        while self.caches and self.nbytes + _bucket_bytes(config, rows, columns, dtype) > self.max_bytes:
            self.caches.popitem(last=False)  # the least recently used
            self.evicted += 1
        self.caches[key] = BucketCache(config, rows, columns, dtype, device)
        return self.caches[key]

    def step(
        self, model: Any, cache: BucketCache, tokens: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor
    ) -> torch.Tensor:
        """Feed `tokens` (R',) at `positions` (R',) in cache rows `slots` (R',); the next logits of those rows."""
        self.shapes.add((cache.rows, cache.columns))
        ids = torch.zeros(cache.rows, 1, dtype=torch.long, device=tokens.device)
        pos = torch.zeros(cache.rows, 1, dtype=torch.long, device=tokens.device)
        ids[slots, 0] = tokens
        pos[slots, 0] = positions
        at = cache.fill.reshape(1).clone()
        logits = self._step(model, cache, ids, pos, at, cache.mask, cache_kwarg(model))
        return logits.index_select(0, slots)
