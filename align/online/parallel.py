"""Data parallel for the online loop, through accelerate (`torchrun` or `accelerate launch`, DDP or FSDP).

Each rank rolls out, scores and computes the frozen log-probs of its contiguous share of the step's prompts; the
advantage phase reads every rank's rewards (group and batch statistics), gathered with accelerate's
`gather_object`; the loss denominator is summed over ranks (`total`) and the gradients are averaged by DDP or FSDP
(the learner scales the loss by the number of ranks, so N processes make the update one process makes on the whole
batch). Model wrapping and the gradient reduction are accelerate's and torch's (`align/online/learner.py`), never
written here.
"""

from __future__ import annotations

import os
from typing import Any, TypeVar

import torch
from accelerate import PartialState
from accelerate.utils import gather_object, reduce

T = TypeVar("T")


def state() -> PartialState:
    """accelerate's process state (one per process); on CPU it must be asked for (gloo), else it stays single."""
    return PartialState(cpu=not torch.cuda.is_available())


def ranks() -> tuple[int, int]:
    """(this process's rank, the number of processes)."""
    s = state()
    return s.process_index, s.num_processes


def share(items: list[T]) -> list[T]:
    """This rank's contiguous share of `items` (its length divisible by the number of processes)."""
    rank, world = ranks()
    n = len(items) // world
    return items[rank * n : (rank + 1) * n]


def gather(local: list[Any]) -> list[Any]:
    """Every rank's items, in rank order (the identity on one process)."""
    return local if ranks()[1] == 1 else list(gather_object(local))


def total(value: float) -> float:
    """`value` summed over ranks."""
    if ranks()[1] == 1:
        return value
    t = torch.tensor([value], dtype=torch.float64, device=state().device)
    return float(reduce(t, reduction="sum").item())


def most(value: int) -> int:
    """The largest `value` of any rank (lock-step loop counts: FSDP's every forward is collective)."""
    return value if ranks()[1] == 1 else max(gather([value]))


def fsdp_requested() -> bool:
    """Whether the launcher asked for FSDP (`accelerate launch` with an FSDP config sets ACCELERATE_USE_FSDP)."""
    return os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true"


__all__ = ["fsdp_requested", "gather", "most", "ranks", "share", "state", "total"]
