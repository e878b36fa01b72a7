"""A KV cache written in place: one preallocated slab per layer, sized for a whole batch at admission.

transformers' `DynamicCache` concatenates every new key and value onto the old ones, copying the whole
cache of every layer at every decoding step; at a few hundred rows that copy costs as much as the step's
matrix multiplies on a CPU. Here each layer holds keys and values in (B, H, C, D) buffers: a step writes its
column and attends over a view of the filled part, and nothing else moves. Rows leave the batch with
`keep_rows` (one gather, done when enough rows have finished), which also drops the leading columns that
have become padding for every remaining row.

Shapes: `B` rows, `H` key/value heads, `D` head dim, `L` filled columns, `C` capacity (L <= C).
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, DynamicLayer


class SlabLayer(DynamicLayer):
    """One layer's keys and values in (B, H, C, D) buffers; `keys` / `values` are views of the filled part."""

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = capacity
        self.k_buf = self.v_buf = None
        self.length = 0

    def allocate(self, rows: int, heads: int, head_dim: int, dtype: torch.dtype, device: torch.device,
                 length: int) -> None:
        """Zeroed (rows, heads, C, head_dim) buffers whose first `length` columns count as filled (the caller
        writes the prompts' keys and values there; padding columns stay zero, so masked attention over them
        multiplies zeros, never uninitialised memory)."""
        self.k_buf = torch.zeros(rows, heads, self.capacity, head_dim, dtype=dtype, device=device)
        self.v_buf = torch.zeros_like(self.k_buf)
        self.length = length
        self.dtype, self.device = dtype, device
        self.is_initialized = True
        self._views()

    def _views(self) -> None:
        self.keys = self.k_buf[:, :, :self.length]
        self.values = self.v_buf[:, :, :self.length]

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        B, H, _, D = key_states.shape
        self.allocate(B, H, D, key_states.dtype, key_states.device, 0)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
               ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        q = key_states.shape[-2]
        if self.length + q > self.capacity:
            raise RuntimeError(f"KV slab full: {self.length} + {q} > capacity {self.capacity}")
        self.k_buf[:, :, self.length:self.length + q] = key_states
        self.v_buf[:, :, self.length:self.length + q] = value_states
        self.length += q
        self._views()
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.length

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.length + query_length, 0

    def keep_rows(self, rows: torch.Tensor, drop_columns: int = 0) -> None:
        """Keep rows (indices (B',)) and drop the first `drop_columns` columns (padding for every kept row).
        Only the filled columns are copied."""
        filled = self.length - drop_columns
        capacity = self.capacity - drop_columns
        for name in ("k_buf", "v_buf"):
            old = getattr(self, name)
            new = old.new_empty(rows.numel(), old.shape[1], capacity, old.shape[3])
            new[:, :, :filled] = old[:, :, drop_columns:self.length].index_select(0, rows)
            setattr(self, name, new)
        self.capacity, self.length = capacity, filled
        self._views()

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self.keep_rows(indices)

    def batch_repeat_interleave(self, repeats: int) -> None:
        self.k_buf = self.k_buf.repeat_interleave(repeats, dim=0)
        self.v_buf = self.v_buf.repeat_interleave(repeats, dim=0)
        self._views()


class SlabCache(Cache):
    """A transformers `Cache` of `SlabLayer`s, one per decoder layer, all of capacity C."""

    def __init__(self, num_layers: int, capacity: int) -> None:
        super().__init__(layers=[SlabLayer(capacity) for _ in range(num_layers)])

    def keep_rows(self, rows: torch.Tensor, drop_columns: int = 0) -> None:
        for layer in self.layers:
            layer.keep_rows(rows, drop_columns)

    @property
    def length(self) -> int:
        return self.layers[0].length
