"""Packed, prefix-shared batches: no padding waste and the shared prompt encoded once.

A pair becomes one segment `prompt + chosen + rejected` (K responses of one prompt: `prompt + r_1 + ... + r_K`).
Position ids restart at len(prompt) for each later response, whose tokens see the prompt and themselves but never
an earlier response's tokens, so every
token sees exactly what it would see in its own sequence `prompt + response` (tests check the log-probs
match separate encoding). Three layouts (`prefalign.models.batch.PACKABLE`) say how that visibility reaches the model:

  "segments"  all segments back to back in ONE row, no padding at all, no mask; `segments` lists
              (offset, P, n_1, ..., n_K) per segment and `prefalign.models.attention` attends each segment on its
              own (the work is the sum of the segments' squares). A CPU's choice.
  "mask"      segments packed into rows of at most `row_tokens` tokens (or the longest segment, if
              longer) by first-fit-decreasing, rows padded at the end to the longest row, and a 4D
              boolean mask (block-diagonal between segments) that any attention kernel accepts.
  "varlen"    all segments back to back in ONE row (as "segments"), padded at the end to a multiple of
              `STREAM_MULTIPLE` tokens, and described as variable-length attention sequences: a segment's
              prompt + first response is one causal sequence; each later response is a sequence whose queries
              are its own tokens and whose keys are its prompt's tokens and its own (causal, aligned at the
              bottom right); the padding is one more. `kv_index` lists the key stream's token positions (the
              prompt's keys repeated for each later response), `cu_seqlens` the (2, M + 1) cumulative query and
              key lengths, so one flash-attention varlen call per layer attends the whole micro-batch
              (`prefalign.models.varlen`).

Shapes (B pairs in the batch, S = 2B sequences with chosen first then rejected, R rows, L row length,
N response tokens in all):
  input_ids      (R, L)        token ids, pad at the end of rows
  position_ids   (R, L)
  attention_mask (R, 1, L, L)  bool, True = may attend ("mask" layout; None for "segments" and "varlen")
  segments       (G, 2 + K')   (offset, P, n_1, ..., n_K') per segment of the row, K' = max(K, 2) ("segments"; R = 1)
  kv_index       (Tk,)         key/value stream positions ("varlen" layout; R = 1)
  cu_seqlens     (2, M + 1)    int32 cumulative query and key lengths of the M attention sequences ("varlen")
  max_seqlens    (2,)          the longest query and key sequence, as Python ints ("varlen")
  target_row/target_pos (N,)   where the logits predicting each response token are (position of token - 1)
  target_ids     (N,)          the response tokens
  target_seq     (N,)          which sequence (0..S-1) each response token belongs to
  last_row/last_pos (S,)       the last token of each response (reward models read their score there)
  lengths        (S,)          response token counts

The same layout with an empty `rejected` part serves single (prompt, response) sequences for scoring
and SFT; then S = B and `pairs` is False.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch.utils.data import Dataset

from prefalign.models.batch import MICRO_BATCHES, PACKABLE, PACKED_FIELDS, Layout, PackedBatch

STREAM_MULTIPLE = 64
"""The "varlen" layout pads its one stream to a multiple of this many tokens (a few shapes repeat; matmul tiles)."""


def _segments_fit(lengths: Sequence[int], row_tokens: int) -> list[list[int]]:
    """First-fit-decreasing packing of segment indices into rows of at most max(row_tokens, longest) tokens.

    Every row is later padded to the longest row, so balanced rows waste least; the order of segments inside
    a batch does not matter (each sequence keeps its index).
    """
    cap = max([row_tokens, *lengths])
    rows: list[list[int]] = []
    used: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        for r, u in enumerate(used):
            if u + lengths[i] <= cap:
                rows[r].append(i)
                used[r] += lengths[i]
                break
        else:
            rows.append([i])
            used.append(lengths[i])
    return rows


def pack(
    prompts: Sequence[Sequence[int]],
    responses: Sequence[Sequence[Sequence[int]]],
    pad_id: int,
    row_tokens: int,
    layout: Layout,
) -> PackedBatch:
    """Pack B prompts, each with K responses (K = 2 for pairs: chosen, rejected; K = 1 for single sequences; any K,
    e.g. a prompt's candidates encoded behind it once).

    Sequence numbering: response k of prompt i is sequence k*B + i (all chosen first, then all rejected).
    `row_tokens` only matters for the "mask" layout.
    """
    if layout not in PACKABLE:
        raise ValueError(f"layout must be one of {PACKABLE} (decide 'auto' first: decide_layout), got {layout!r}")
    B = len(prompts)
    K = len(responses[0]) if B else 1
    seg_len = [len(p) + sum(len(r) for r in rs) for p, rs in zip(prompts, responses, strict=True)]
    rows = [list(range(B))] if layout != "mask" else _segments_fit(seg_len, row_tokens)
    L = max(sum(seg_len[i] for i in row) for row in rows)
    if layout == "varlen":
        L = -(-L // STREAM_MULTIPLE) * STREAM_MULTIPLE
    R = len(rows)
    input_ids = torch.full((R, L), pad_id, dtype=torch.long)
    position_ids = torch.zeros((R, L), dtype=torch.long)
    use_mask = layout == "mask"
    mask = torch.zeros((R, 1, L, L), dtype=torch.bool) if use_mask else None
    segments = torch.zeros((B, 2 + max(K, 2)), dtype=torch.long)
    t_row: list[int] = []
    t_pos: list[int] = []
    t_ids: list[int] = []
    t_seq: list[int] = []
    last_row = torch.zeros(K * B, dtype=torch.long)
    last_pos = torch.zeros(K * B, dtype=torch.long)
    lengths = torch.zeros(K * B, dtype=torch.long)
    kv_index: list[range] = []  # "varlen": the key stream, one range per run of positions
    cu_q, cu_k = [0], [0]
    for r, row in enumerate(rows):
        off = 0
        for i in row:
            p = list(prompts[i])
            P = len(p)
            input_ids[r, off : off + P] = torch.tensor(p, dtype=torch.long)
            position_ids[r, off : off + P] = torch.arange(P)
            if layout == "segments":
                segments[i, : 2 + K] = torch.tensor([off, P, *[len(x) for x in responses[i]]])
            if mask is not None:
                mask[r, 0, off : off + P, off : off + P] = torch.ones(P, P, dtype=torch.bool).tril()
            cur = off + P
            for k, resp in enumerate(responses[i]):
                n = len(resp)
                s = k * B + i
                input_ids[r, cur : cur + n] = torch.tensor(list(resp), dtype=torch.long)
                position_ids[r, cur : cur + n] = torch.arange(P, P + n)
                if mask is not None:
                    mask[r, 0, cur : cur + n, off : off + P] = True  # sees the prompt ...
                    mask[r, 0, cur : cur + n, cur : cur + n] = torch.ones(
                        n, n, dtype=torch.bool
                    ).tril()  # ... and itself
                # logits at (token position - 1) predict each response token; the first one is predicted
                # by the last prompt token, which every response shares
                pred = [off + P - 1] + list(range(cur, cur + n - 1))
                t_row.extend([r] * n)
                t_pos.extend(pred)
                t_ids.extend(resp)
                t_seq.extend([s] * n)
                last_row[s], last_pos[s], lengths[s] = r, cur + n - 1, n
                if layout == "varlen" and k == 0:  # prompt + first response: one causal sequence
                    kv_index.append(range(off, cur + n))
                    cu_q.append(cu_q[-1] + P + n)
                    cu_k.append(cu_k[-1] + P + n)
                elif layout == "varlen" and n:  # a later response: its queries over the prompt's keys and its own
                    kv_index += [range(off, off + P), range(cur, cur + n)]
                    cu_q.append(cu_q[-1] + n)
                    cu_k.append(cu_k[-1] + P + n)
                cur += n
            off = cur
    if mask is not None:
        # padding positions attend to themselves only, so no row of the mask is empty (avoids NaN in softmax)
        for r in range(R):
            used = sum(seg_len[i] for i in rows[r])
            idx = torch.arange(used, L)
            mask[r, 0, idx, idx] = True
    varlen: dict[str, Any] = {}
    if layout == "varlen":
        if cu_q[-1] < L:  # the padding: one more sequence, attending itself only (never read)
            kv_index.append(range(cu_q[-1], L))
            cu_k.append(cu_k[-1] + L - cu_q[-1])
            cu_q.append(L)
        q_lens = [b - a for a, b in zip(cu_q, cu_q[1:], strict=False)]
        k_lens = [b - a for a, b in zip(cu_k, cu_k[1:], strict=False)]
        varlen = {
            "kv_index": torch.tensor([i for run in kv_index for i in run], dtype=torch.long),
            "cu_seqlens": torch.tensor([cu_q, cu_k], dtype=torch.int32),
            "max_seqlens": (max(q_lens, default=0), max(k_lens, default=0)),
        }
    return PackedBatch(
        input_ids,
        position_ids,
        mask,
        torch.tensor(t_row),
        torch.tensor(t_pos),
        torch.tensor(t_ids),
        torch.tensor(t_seq),
        last_row,
        last_pos,
        lengths,
        K * B,
        K == 2,
        real_tokens=sum(seg_len),
        segments=segments if layout == "segments" else None,
        **varlen,
    )


def pack_pairs(pairs: Sequence, pad_id: int, row_tokens: int, layout: Layout) -> PackedBatch:
    """Pack tokenized pairs (objects with prompt_ids, chosen_ids, rejected_ids)."""
    return pack(
        [p.prompt_ids for p in pairs], [(p.chosen_ids, p.rejected_ids) for p in pairs], pad_id, row_tokens, layout
    )


def pack_single(
    prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], pad_id: int, row_tokens: int, layout: Layout
) -> PackedBatch:
    """Pack (prompt, response) sequences, e.g. for scoring."""
    return pack(prompts, [(r,) for r in responses], pad_id, row_tokens, layout)


class PairDataset(Dataset):
    """Tokenized pairs (objects with prompt_ids / chosen_ids / rejected_ids) for a DataLoader."""

    def __init__(self, pairs: Sequence[Any]) -> None:
        self.pairs = list(pairs)

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, i: int) -> Any:
        return self.pairs[i]


def pair_tokens(pair: Any) -> int:
    """Tokens a tokenized pair takes in a packed batch: its prompt once, both responses."""
    return len(pair.prompt_ids) + len(pair.chosen_ids) + len(pair.rejected_ids)


def token_parts(sizes: Sequence[int], budget: int) -> list[list[int]]:
    """Item indices cut into micro-batches of at most `budget` tokens (`sizes`: each item's tokens), longest first,
    so items of like length share a micro-batch and a micro-batch's shape repeats from batch to batch; an item
    longer than the budget is a micro-batch of its own. Deterministic: equal sizes keep their order."""
    order = sorted(range(len(sizes)), key=lambda i: (-sizes[i], i))
    parts: list[list[int]] = []
    used = budget + 1
    for i in order:
        if used + sizes[i] > budget:
            parts.append([])
            used = 0
        parts[-1].append(i)
        used += sizes[i]
    return parts


class PackCollator:
    """Packs a list of tokenized pairs into one `PackedBatch`, returned as a dict of tensors plus extras.

    token_budget: when > 0 and a batch's pairs take more tokens than this (`pair_tokens`), the batch comes back as
    `{MICRO_BATCHES: [packed, ...]}`, cut by `token_parts`; a trainer runs one forward and backward per micro-batch
    with each loss weighted by its share of the batch's pairs, which gives the whole batch's gradient at the peak
    memory of its largest micro-batch (verl's `use_dynamic_bsz`, OpenRLHF's packed micro-batches)."""

    def __init__(
        self,
        pad_id: int,
        row_tokens: int,
        layout: Layout,
        extra: Sequence[str] = (),
        missing: float | None = None,
        token_budget: int = 0,
    ) -> None:
        self.pad_id = pad_id
        self.row_tokens = row_tokens
        self.layout = layout
        self.extra = extra  # attribute names of per-pair float tensors to carry (e.g. reference log-probs)
        # the value of an `extra` a pair lacks (e.g. NaN, for the consumer to refuse); None: such a batch is an error
        self.missing = missing
        self.token_budget = token_budget

    def __call__(self, pairs: list[Any]) -> dict[str, Any]:
        sizes = [pair_tokens(p) for p in pairs]
        if self.token_budget <= 0 or sum(sizes) <= self.token_budget:
            return self.pack(pairs)
        return {MICRO_BATCHES: [self.pack([pairs[i] for i in part]) for part in token_parts(sizes, self.token_budget)]}

    def pack(self, pairs: list[Any]) -> dict[str, Any]:
        """The pairs in one packed batch, whatever the token budget."""
        b = pack_pairs(pairs, self.pad_id, self.row_tokens, self.layout)
        out: dict[str, Any] = {f: getattr(b, f) for f in PACKED_FIELDS}
        out["num_pairs"] = torch.tensor(len(pairs))
        out["num_sequences"] = torch.tensor(2 * len(pairs))
        out["real_tokens"] = torch.tensor(b.real_tokens)
        margins = [p.margin for p in pairs]
        if any(m is not None for m in margins):
            out["margins"] = torch.tensor([0.0 if m is None else float(m) for m in margins])
        for name in self.extra:
            lacking = sum(name not in p.attributes for p in pairs)
            if lacking and self.missing is None:
                raise RuntimeError(f"{lacking} of the {len(pairs)} pairs in this batch have no '{name}' value")
            values = [float(p.attributes.get(name, self.missing)) for p in pairs]
            out[name] = torch.tensor(values, dtype=torch.float32)
        return out
