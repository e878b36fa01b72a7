"""A KV cache written in place: one preallocated slab per layer, sized for a whole batch at admission.

transformers' `DynamicCache` concatenates every new key and value onto the old ones, copying the whole
cache of every layer at every decoding step; at a few hundred rows that copy costs as much as the step's
matrix multiplies on a CPU. Here each layer holds keys and values in buffers of C columns (the batch's
longest prompt + its longest completion): a step writes one column and nothing else moves. Rows leave the
batch with `keep_rows` (one gather, done when enough rows have finished), which also drops the leading
columns that have become padding for every remaining row and shrinks C to what the kept rows still need.

Two modes, both (B, H, C, D) contiguous buffers:
- dynamic (`static=False`, for the model's own attention): attention sees views of the L filled columns.
- static (`static=True`, for `attention.decode_attention`): attention always sees all C columns (the
  caller masks the unfilled ones). A bf16 batched matmul against a view of part of a buffer copies it
  first; against a whole contiguous buffer it does not, which costs less than the extra columns: q @ K^T
  over 30 layers at 128 rows x 244 columns takes 46 ms on one core, against 1.4 ms per layer (42 ms) for
  a 64-row view of 200 of 264 columns.

Shapes: `B` rows, `H` key/value heads, `D` head dim, `L` filled columns, `C` capacity (L <= C).
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, DynamicLayer


class SlabLayer(DynamicLayer):
    """One layer's keys and values in (B, H, C, D) buffers `k_buf` / `v_buf`."""

    def __init__(self, capacity: int, static: bool = False) -> None:
        super().__init__()
        self.capacity = capacity
        self.static = static
        self.k_buf = self.v_buf = None
        self.length = 0

    @staticmethod
    def _zeros(rows: int, heads: int, capacity: int, head_dim: int, dtype: torch.dtype,
               device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        k = torch.zeros(rows, heads, capacity, head_dim, dtype=dtype, device=device)
        return k, torch.zeros_like(k)

    def allocate(self, rows: int, heads: int, head_dim: int, dtype: torch.dtype, device: torch.device,
                 length: int) -> None:
        """Zeroed buffers whose first `length` columns count as filled (the caller writes the prompts' keys and
        values there; padding and unfilled columns stay zero, so masked attention multiplies zeros, never
        uninitialised memory)."""
        self.k_buf, self.v_buf = self._zeros(rows, heads, self.capacity, head_dim, dtype, device)
        self.length = length
        self.dtype, self.device = dtype, device
        self.is_initialized = True
        self._views()

    def _views(self) -> None:
        end = self.capacity if self.static else self.length
        self.keys = self.k_buf[:, :, :end]
        self.values = self.v_buf[:, :, :end]

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
        return (self.capacity if self.static else self.length + query_length), 0

    def keep_rows(self, rows: torch.Tensor, drop_columns: int = 0, capacity: int | None = None) -> None:
        """Keep rows (indices (B',)), drop the first `drop_columns` columns (padding for every kept row) and
        resize to `capacity` columns (default: the current one less the dropped). Copies the filled columns."""
        filled = self.length - drop_columns
        capacity = self.capacity - drop_columns if capacity is None else capacity
        if capacity < filled:
            raise ValueError(f"capacity {capacity} < {filled} filled columns")
        _, H, _, D = self.v_buf.shape
        k, v = self._zeros(rows.numel(), H, capacity, D, self.v_buf.dtype, self.v_buf.device)
        k[:, :, :filled] = self.k_buf[:, :, drop_columns:self.length].index_select(0, rows)
        v[:, :, :filled] = self.v_buf[:, :, drop_columns:self.length].index_select(0, rows)
        self.k_buf, self.v_buf = k, v
        self.capacity, self.length = capacity, filled
        self._views()

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self.keep_rows(indices)

    def batch_repeat_interleave(self, repeats: int) -> None:
        self.keep_rows(torch.arange(self.v_buf.shape[0], device=self.v_buf.device).repeat_interleave(repeats))


class SlabCache(Cache):
    """A transformers `Cache` of `SlabLayer`s, one per decoder layer, all of capacity C."""

    def __init__(self, num_layers: int, capacity: int, static: bool = False) -> None:
        super().__init__(layers=[SlabLayer(capacity, static) for _ in range(num_layers)])

    def keep_rows(self, rows: torch.Tensor, drop_columns: int = 0, capacity: int | None = None) -> None:
        for layer in self.layers:
            layer.keep_rows(rows, drop_columns, capacity)

    @property
    def length(self) -> int:
        """Filled columns L."""
        return self.layers[0].length

    @property
    def capacity(self) -> int:
        return self.layers[0].capacity
