"""Which samples the transformers backend decodes together (steps 1 and 2 of `transformers_backend`).

Prompts with the same token ids form one unit holding all their samples (n per request), so each distinct
prompt is prefilled once; a unit with more samples than a batch has rows is cut into pieces. Pieces are sorted by
prompt length (`BATCH_ORDERS`) and packed into batches of at most `max_rows` samples whose KV cache,
rows x (longest prompt + longest max_new_tokens), fits in `token_budget` slots.
"""

from __future__ import annotations

from dataclasses import dataclass

from .api import SamplingParams

BATCH_ORDERS: dict[str, str] = {
    "longest_first": "batches filled longest prompt first (the heaviest batch runs first, so memory peaks early)",
    "shortest_first": "batches filled shortest prompt first, as transformers-based evaluation loops usually do",
}


@dataclass
class Unit:
    """One distinct prompt and the samples (request, sample index) drawn from it."""

    ids: list[int]
    samples: list[tuple[int, int]]


def pieces(ids: list[list[int]], plist: list[SamplingParams], max_rows: int, batch_order: str) -> list[Unit]:
    """The units of the rendered prompts `ids`, cut to at most `max_rows` samples each, in `batch_order`."""
    units: dict[tuple[int, ...], Unit] = {}
    for i, (p, sp) in enumerate(zip(ids, plist, strict=True)):
        unit = units.setdefault(tuple(p), Unit(p, []))
        unit.samples.extend((i, j) for j in range(sp.n))
    out = [Unit(u.ids, u.samples[s : s + max_rows]) for u in units.values() for s in range(0, len(u.samples), max_rows)]
    out.sort(key=lambda u: len(u.ids) if batch_order == "shortest_first" else -len(u.ids))
    return out


def batches(pieces: list[Unit], plist: list[SamplingParams], max_rows: int, token_budget: int) -> list[list[Unit]]:
    """Consecutive pieces while rows <= max_rows and the KV slots fit the budget."""
    out: list[list[Unit]] = []
    cur: list[Unit] = []
    rows = longest = new = 0
    for u in pieces:
        u_new = max(plist[i].max_new_tokens for i, _ in u.samples)
        r, lp, nn = rows + len(u.samples), max(longest, len(u.ids)), max(new, u_new)
        if cur and (r > max_rows or r * (lp + nn) > token_budget):
            out.append(cur)
            cur, r, lp, nn = [], len(u.samples), len(u.ids), u_new
        cur.append(u)
        rows, longest, new = r, lp, nn
    if cur:
        out.append(cur)
    return out


__all__ = ["BATCH_ORDERS", "Unit", "batches", "pieces"]
