"""The packed batch: built by stage 1 (`preference_data.packing`, which documents the layouts and
shapes), run by the packed forward (`prefalign.models.forward`). Importing it does not import torch, so
configs can name the layouts."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, get_args

if TYPE_CHECKING:
    import torch

Layout = Literal["segments", "mask"]
"""How prefix-shared pairs reach attention: one unpadded row attended segment by segment, or rows of
`row_tokens` with a dense block mask (`preference_data.packing`)."""
LAYOUTS: tuple[str, ...] = get_args(Layout)


@dataclass
class PackedBatch:
    input_ids: torch.Tensor
    position_ids: torch.Tensor
    attention_mask: torch.Tensor | None  # None for the "segments" layout
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
)
