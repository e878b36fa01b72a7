"""What the judge recipes share (`judge_train`: pair-PM, thinking judge, GRM; `meta_rm`: a GRM's meta-RM): the
checks of their sampling settings, sampling a judge's outputs to learn from, the SPCT correctness of one GRM
draw, and the packed single-sequence dataset and collator they fine-tune on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from prefalign.generation import SamplingParams, make_engine
from prefalign.models.batch import PACKED_FIELDS
from preference_data.packing import pack_single

from .parse import parse_grm_scores
from .scorers import judge_prompts


@dataclass
class SFTExample:
    """One judge fine-tuning example: the judge's user message (or a conversation of {role, content} turns ending
    in a user's) and what it learns to write."""

    id: str
    message: str | list[dict[str, str]]
    completion: str


def sampling_problems(section: Any) -> list[str]:
    """What is wrong with a section's `samples` and `temperature` (rejection sampling needs both positive)."""
    problems = []
    if section.samples < 1:
        problems.append(f"samples: must be at least 1, got {section.samples}")
    if section.temperature <= 0:
        problems.append(f"temperature: sampling needs a positive temperature, got {section.temperature}")
    return problems


def sample_outputs(model: Any, tokenizer: Any, messages: list[str], judge: Any, prefix: str) -> list[list[str]]:
    """`judge.samples` outputs per judge message (each a user turn, then `prefix`); `judge` is a section with the
    sampling fields (samples, temperature, top_p, max_new_tokens, seed: `judge_train.JudgeSection`,
    `meta_rm.CritiqueSection`)."""
    prompts = judge_prompts(tokenizer, messages, prefix)
    params = SamplingParams(
        n=judge.samples,
        temperature=judge.temperature,
        top_p=judge.top_p,
        max_new_tokens=judge.max_new_tokens,
        seed=judge.seed,
    )
    result = make_engine(model, tokenizer).generate(prompts, params, progress=True)
    return [[c.text for c in r.completions] for r in result.outputs]


def grm_draw_correct(chosen: str, rejected: str) -> tuple[bool, bool]:
    """(correct, abstained) of one GRM draw on a pair: its critique of the chosen response scores strictly above
    its critique of the rejected one (the pointwise form of SPCT's rule); a critique without a score abstains."""
    sc, sr = parse_grm_scores(chosen, 1), parse_grm_scores(rejected, 1)
    if not (sc.ok and sr.ok):
        return False, True
    return sc.scores[0] > sr.scores[0], False  # type: ignore[index]


class SFTDataset(torch.utils.data.Dataset):
    """Tokenized single sequences: (prompt ids, completion ids), optionally with a label as a third element."""

    def __init__(self, items: list[tuple[Any, ...]]) -> None:
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> tuple[Any, ...]:
        return self.items[i]


class SFTCollator:
    """Packs (prompt ids, completion ids) sequences back to back (`preference_data.packing.pack_single`); items
    with a third element (a 0/1 label) add them as `targets`."""

    def __init__(self, pad_id: int, row_tokens: int, layout: Any) -> None:
        self.pad_id, self.row_tokens, self.layout = pad_id, row_tokens, layout

    def __call__(self, items: list[tuple[Any, ...]]) -> dict[str, Any]:
        longest = max(len(it[0]) + len(it[1]) for it in items)
        b = pack_single(
            [it[0] for it in items], [it[1] for it in items], self.pad_id, max(self.row_tokens, longest), self.layout
        )
        out: dict[str, Any] = {f: getattr(b, f) for f in PACKED_FIELDS}
        out["num_sequences"] = torch.tensor(len(items))
        out["pairs"] = torch.tensor(False)
        out["real_tokens"] = torch.tensor(b.real_tokens)
        if len(items[0]) > 2:
            out["targets"] = torch.tensor([it[2] for it in items], dtype=torch.float32)
        return out


class OrdersCollator(SFTCollator):
    """Packs (prompt 1, response 1, prompt 2, response 2) items, every item's first sequence before every
    item's second (a pair-PM's two orders of each pair: `judge_train`'s symmetric objective)."""

    def __call__(self, items: list[tuple[Any, ...]]) -> dict[str, Any]:
        return super().__call__([(it[0], it[1]) for it in items] + [(it[2], it[3]) for it in items])


__all__ = [
    "OrdersCollator",
    "SFTCollator",
    "SFTDataset",
    "SFTExample",
    "grm_draw_correct",
    "sample_outputs",
    "sampling_problems",
]
