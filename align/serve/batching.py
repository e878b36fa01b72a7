"""Dynamic batching and the score cache: requests arriving together are scored together.

A request's items go into one queue. The batcher takes the first waiting request and keeps taking more until
`window` has passed since that request arrived or `max_batch` items are gathered (a request that would pass the
limit starts the next batch; a request larger than the limit is scored alone). While one batch is scored on the
scoring thread, the next gathers, so under load a batch is whatever arrived during the last one.

In a batch, identical items (the same prompt, response, reference, meta and grader) are scored once, and items
already in the cache are not scored again: the cache remembers the raw components of the last `cache_size` items
(least recently used goes first). A cached score is the score the scorer would give again: model scorers are
deterministic, and sampled judges draw from generators seeded by (seed, prompt ids, sample), whatever shares the
batch. Everything scored is one call of `ServedReward.components`, where each model scorer sorts the items by token
length and cuts them into batches of at most its `batch_tokens` (length buckets, `reward_models.batched`) and a
generative judge samples every item's critiques in one call of its generation engine. Then one call of
`ServedReward.compose` over the whole batch in arrival order (cached items included) gives the rewards and updates
the composition state.

If scoring a batch of several requests raises, each request is scored alone, so only the request that fails gets
the error (a 500 with its message) and the others their scores; the server keeps serving.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import torch

from .contracts import Item
from .scoring import Scored, ServedReward


class ScorerFailure(Exception):
    """The served reward raised on a request: the server answers 500 with this message."""


@dataclass
class _Request:
    items: list[Item]
    future: asyncio.Future
    arrived: float
    keys: list[str] = field(default_factory=list)


@dataclass
class Outcome:
    scored: Scored
    cached: int  # items answered from the cache or a duplicate in the same batch


class Batcher:
    """The queue, the scoring thread and the cache (module docstring)."""

    def __init__(self, reward: ServedReward, window_s: float, max_batch: int, cache_size: int) -> None:
        self.reward = reward
        self.window_s = window_s
        self.max_batch = max_batch
        self.cache_size = cache_size
        self.cache: OrderedDict[str, list[float]] = OrderedDict()  # key -> the K raw component scores
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="align-serve-scorer")
        self.queue: asyncio.Queue[_Request | None] | None = None
        self.task: asyncio.Task | None = None
        self.carry: _Request | None = None
        self.stats: dict[str, Any] = {
            "queued_requests": 0,  # requests received by the batcher (queued or scored)
            "batches": 0,
            "batched_items": 0,
            "largest_batch": 0,
            "cache_hits": 0,
            "scorer_errors": 0,
            "scoring_seconds": 0.0,
        }

    async def start(self) -> None:
        self.queue = asyncio.Queue()
        self.task = asyncio.create_task(self._loop(), name="align-serve-batcher")

    async def close(self) -> None:
        """Score what is queued, then stop (graceful shutdown: in-flight requests finish)."""
        if self.queue is not None and self.task is not None:
            await self.queue.put(None)
            await self.task
        self.executor.shutdown(wait=True)

    async def submit(self, items: list[Item]) -> Outcome:
        """Score `items` with whatever arrives with them; raises `ScorerFailure` when the reward raised."""
        assert self.queue is not None, "Batcher.start() first"
        loop = asyncio.get_running_loop()
        req = _Request(items, loop.create_future(), loop.time(), [it.key() for it in items])
        self.stats["queued_requests"] += 1
        await self.queue.put(req)
        return await req.future

    async def _next(self) -> list[_Request] | None:
        assert self.queue is not None
        loop = asyncio.get_running_loop()
        first = self.carry or await self.queue.get()
        self.carry = None
        if first is None:
            return None
        batch, n = [first], len(first.items)
        while n < self.max_batch:
            remaining = first.arrived + self.window_s - loop.time()
            try:
                nxt = self.queue.get_nowait() if remaining <= 0 else await asyncio.wait_for(self.queue.get(), remaining)
            except (asyncio.QueueEmpty, TimeoutError):
                break
            if nxt is None:
                await self.queue.put(None)  # stop after this batch
                break
            if n + len(nxt.items) > self.max_batch:
                self.carry = nxt
                break
            batch.append(nxt)
            n += len(nxt.items)
        return batch

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = await self._next()
            if batch is None:
                return
            outcomes = await loop.run_in_executor(self.executor, self._process, batch)
            for req, out in zip(batch, outcomes, strict=True):
                if req.future.done():  # the client went away
                    continue
                if isinstance(out, BaseException):
                    req.future.set_exception(out)
                else:
                    req.future.set_result(out)

    # --- on the scoring thread ---------------------------------------------------------------------------------

    def _process(self, batch: list[_Request]) -> list[Outcome | BaseException]:
        t0 = time.perf_counter()
        try:
            return self._score(batch)
        except Exception as e:
            if len(batch) > 1:  # isolate the request that fails
                return [self._process([req])[0] for req in batch]
            self.stats["scorer_errors"] += 1
            return [ScorerFailure(f"the served reward failed: {type(e).__name__}: {e}")]
        finally:
            self.stats["scoring_seconds"] += time.perf_counter() - t0

    def _score(self, batch: list[_Request]) -> list[Outcome | BaseException]:
        todo: dict[str, Item] = {}
        for req in batch:
            for key, it in zip(req.keys, req.items, strict=True):
                if key not in self.cache and key not in todo:
                    todo[key] = it
        rows: dict[str, list[float]] = {}
        if todo:
            R = self.reward.components(list(todo.values()))
            rows = dict(zip(todo, R.tolist(), strict=True))
        total = sum(len(r.items) for r in batch)
        hits = total - len(todo)
        R_all = torch.tensor(
            [rows[k] if k in rows else self.cache[k] for req in batch for k in req.keys], dtype=torch.float32
        ).reshape(total, len(self.reward.names))
        rewards = self.reward.compose(R_all)
        for k, row in rows.items():
            self._remember(k, row)
        for req in batch:
            for k in req.keys:
                if k in self.cache:
                    self.cache.move_to_end(k)
        self.stats["batches"] += 1
        self.stats["batched_items"] += total
        self.stats["largest_batch"] = max(self.stats["largest_batch"], total)
        self.stats["cache_hits"] += hits
        out: list[Outcome | BaseException] = []
        at = 0
        for req in batch:
            n = len(req.items)
            fresh = {k for k in req.keys if k in rows}
            out.append(Outcome(Scored(R_all[at : at + n], rewards[at : at + n]), n - len(fresh)))
            at += n
        return out

    def _remember(self, key: str, row: list[float]) -> None:
        if self.cache_size <= 0:
            return
        self.cache[key] = row
        self.cache.move_to_end(key)
        while len(self.cache) > self.cache_size:
            self.cache.popitem(last=False)


__all__ = ["Batcher", "Outcome", "ScorerFailure"]
