"""Per-token log-probs of packed completions: what the update differentiates, what the frozen pass records (π_ref,
a recomputed π_old), and what the over-optimization harness sums into KL(π ‖ π_init).

Consecutive completions of one prompt are packed as one prefix-shared segment (the prompt encoded once for both);
a micro-batch is all such pairs or all single completions, one pack call each. The forward is a
`prefalign.models.forward.PackedForward` in "token_logps" mode, so a DDP or FSDP wrapper around it sees a normal
`forward` call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from prefalign.models.batch import Layout
from preference_data.packing import pack, token_parts


@dataclass
class Seq:
    """One completion in a forward: its prompt, tokens, frozen per-token log-probs and advantage."""

    prompt_ids: list[int]
    ids: list[int]
    old: list[float]  # (T,) π_old of the ratio
    ref: list[float] | None  # (T,) π_ref, when the KL needs it
    adv: float


def units(seqs: list[Seq]) -> tuple[list[tuple[Seq, Seq]], list[Seq]]:
    """Consecutive completions of the same prompt paired (one prefix-shared segment each); leftovers single."""
    pairs: list[tuple[Seq, Seq]] = []
    singles: list[Seq] = []
    i = 0
    while i < len(seqs):
        if i + 1 < len(seqs) and seqs[i + 1].prompt_ids == seqs[i].prompt_ids:
            pairs.append((seqs[i], seqs[i + 1]))
            i += 2
        else:
            singles.append(seqs[i])
            i += 1
    return pairs, singles


def micro_batches(seqs: list[Seq], batch_size: int, token_budget: int = 0) -> list[list[Seq]]:
    """Micro-batches of about `batch_size` completions, each all pairs or all singles (one pack call each); with
    `token_budget` > 0 (`train.token_budget`) one that takes more tokens (prompts once per pair) is cut into
    micro-batches of at most that many (`preference_data.packing.token_parts`, longest first)."""
    pairs, singles = units(seqs)
    groups: list[list[tuple[Seq, ...]]] = []
    per = max(1, batch_size // 2)
    groups += [list(pairs[s : s + per]) for s in range(0, len(pairs), per)]
    groups += [[(x,) for x in singles[s : s + batch_size]] for s in range(0, len(singles), batch_size)]
    out: list[list[Seq]] = []
    for group in groups:
        sizes = [len(u[0].prompt_ids) + sum(len(x.ids) for x in u) for u in group]
        parts = token_parts(sizes, token_budget) if token_budget > 0 else [list(range(len(group)))]
        out += [[x for k in part for x in group[k]] for part in parts]
    return out


def per_token_logps(forward: torch.nn.Module, mb: list[Seq], pad_id: int, device: Any, layout: Layout) -> torch.Tensor:
    """(S, T) log-probs of each completion's tokens (padded with 0), S = len(mb) in order, from `forward` (a
    PackedForward in "token_logps" mode, possibly wrapped by DDP or FSDP)."""
    paired = (
        len(mb) >= 2
        and all(mb[i].prompt_ids == mb[i + 1].prompt_ids for i in range(0, len(mb) - 1, 2))
        and len(mb) % 2 == 0
    )
    if paired:
        B = len(mb) // 2
        batch = pack(
            [mb[2 * i].prompt_ids for i in range(B)],
            [(mb[2 * i].ids, mb[2 * i + 1].ids) for i in range(B)],
            pad_id,
            1 << 30,
            layout,
        )
        order = [2 * i for i in range(B)] + [2 * i + 1 for i in range(B)]  # packed seq k*B+i -> mb index
    else:
        batch = pack([s.prompt_ids for s in mb], [(s.ids,) for s in mb], pad_id, 1 << 30, layout)
        order = list(range(len(mb)))
    batch = batch.to(device)
    values = forward(**batch.as_inputs())  # (N,) every response token, in target order
    T = max(len(s.ids) for s in mb)
    out = values.new_zeros((len(mb), T))
    pos = [0] * len(mb)
    rows, cols = [], []
    for q in batch.target_seq.tolist():
        i = order[q]
        rows.append(i)
        cols.append(pos[i])
        pos[i] += 1
    index = (torch.tensor(rows, device=values.device), torch.tensor(cols, device=values.device))
    return out.index_put(index, values)


def pad_rows(rows: list[list[float]], width: int | None = None, value: float = 0.0) -> torch.Tensor:
    """Ragged per-token lists -> (S, T) float tensor padded with `value`."""
    T = width if width is not None else max((len(r) for r in rows), default=0)
    out = torch.full((len(rows), T), value, dtype=torch.float32)
    for i, r in enumerate(rows):
        if r:
            out[i, : len(r)] = torch.tensor(r[:T], dtype=torch.float32)
    return out


__all__ = ["Seq", "micro_batches", "pad_rows", "per_token_logps", "units"]
