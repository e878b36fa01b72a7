"""The packed batch: built by stage 1 (`preference_data.packing`, which documents the layouts and
shapes), run by the packed forward (`prefalign.models.forward`). Importing it does not import torch, so
configs can name the layouts."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, get_args

if TYPE_CHECKING:
    import torch

Layout = Literal["auto", "segments", "mask", "varlen"]
"""How prefix-shared pairs reach attention (`preference_data.packing`): one unpadded row attended segment by segment
("segments", the CPU's), rows of `row_tokens` with a dense block mask ("mask", any model), or one token stream with
cumulative sequence lengths and one variable-length attention call per layer ("varlen", the GPU's); "auto" is
decided per device and precision by `decide_layout` before anything is packed."""
LAYOUTS: tuple[str, ...] = get_args(Layout)
PACKABLE: tuple[str, ...] = ("segments", "mask", "varlen")


def decide_layout(requested: str, device_type: str, bf16: bool) -> Layout:
    """The layout a run packs with: `requested` unless it is "auto", which is "varlen" on a GPU computing in bf16
    (one flash-attention call per layer over the whole micro-batch), "mask" on a GPU in fp32 (the flash kernels take
    half precision only), and "segments" on a CPU (the least work there: a CPU is not bound by kernel launches)."""
    if requested != "auto":
        if requested not in PACKABLE:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {requested!r}")
        return requested  # type: ignore[return-value]
    if device_type == "cpu":
        return "segments"
    return "varlen" if bf16 else "mask"


@dataclass
class PackedBatch:
    input_ids: torch.Tensor
    position_ids: torch.Tensor
    attention_mask: torch.Tensor | None  # None for the "segments" and "varlen" layouts
    target_row: torch.Tensor
    target_pos: torch.Tensor
    target_ids: torch.Tensor
    target_seq: torch.Tensor
    last_row: torch.Tensor
    last_pos: torch.Tensor
    lengths: torch.Tensor
    num_sequences: int
    pairs: bool
    real_tokens: int
    segments: torch.Tensor | None = None
    kv_index: torch.Tensor | None = None  # "varlen": the key/value stream's token indices
    cu_seqlens: torch.Tensor | None = None  # "varlen": (2, M + 1) int32 cumulative query / key lengths
    max_seqlens: tuple[int, int] | None = None  # "varlen": the longest query and key sequence

    def as_inputs(self) -> dict[str, object]:
        """The batch as the keyword arguments of `prefalign.models.forward.PackedForward.forward`."""
        out: dict[str, object] = {f: getattr(self, f) for f in PACKED_FIELDS}
        return out | {"num_sequences": self.num_sequences, "pairs": self.pairs, "real_tokens": self.real_tokens}

    @property
    def num_pairs(self) -> int:
        return self.num_sequences // 2 if self.pairs else self.num_sequences

    def to(self, device: torch.device | str) -> PackedBatch:
        """The batch with every tensor on `device`."""
        import torch  # lazy: torch, so configs and `align ls` load without it

        return dataclasses.replace(
            self,
            **{
                f.name: getattr(self, f.name).to(device)
                for f in dataclasses.fields(self)
                if isinstance(getattr(self, f.name), torch.Tensor)
            },
        )


MICRO_BATCHES = "micro_batches"
"""The key under which a collator returns a batch it cut by a token budget (`preference_data.packing.PackCollator`):
a list of packed micro-batches, each the dict a whole batch would be, trained one forward and backward each
(`prefalign.training.trainer.TokenBudgetSteps`)."""

PACKED_FIELDS = (
    "input_ids",
    "position_ids",
    "attention_mask",
    "target_row",
    "target_pos",
    "target_ids",
    "target_seq",
    "last_row",
    "last_pos",
    "lengths",
    "segments",
    "kv_index",
    "cu_seqlens",
    "max_seqlens",
)
