"""The one scorer call every endpoint and every adapter goes through: items -> (S, K) components -> (S,) rewards.

The served reward is a `reward:` list (`align.rewards`: any scorer spec, rules, multi-output heads expanding to K
named components) and an optional `composition:` section (`state.py`). How each kind is served:

  pointwise (scalar, implicit, grm, multi_objective)  the scorer's own score of (prompt, response)
  reference (polar)           against the item's reference answer (OpenRLHF: the label; verl: ground_truth; native:
                              `reference`), unless the scorer looks references up itself (references: suite)
  pairwise (judge, pair_pm, think)   P(response better than the reference answer): the scorer's own
                              `compare(prompt, response, reference)`, asked once as the online loop asks (pair_pm and
                              think with both_orders average both orders themselves)
  rule (grader, judge_correctness)   on the item's prompt record: its `grader` and `meta`

`components` is the slow part (the models); `compose` is the composition over a batch. The batcher calls both for
everything scored together; the in-process adapters call `score`, the two in a row.
"""

from __future__ import annotations

import math
import threading
from typing import Any, NamedTuple

import torch

from prefalign.errors import ConfigError
from preference_data.records import Message, PromptOnly

from ..composition import CompositionSection, check_composition
from ..rewards import RewardSet, check_reward_specs, component_names
from .contracts import Item
from .state import ServedComposition, check_served_composition


class Scored(NamedTuple):
    components: torch.Tensor  # (S, K) raw component scores, NaN where one abstained
    rewards: torch.Tensor  # (S,) the served reward, NaN where it abstained


def check_served_reward(specs: Any, composition: CompositionSection | None) -> list[str]:
    """Every problem with a served `reward:` list and `composition:` section, without loading any model."""
    problems = check_reward_specs(specs)
    if problems or composition is None:
        return problems
    names, weights = component_names(specs)
    problems += check_composition(composition, names, weights, kl_in_reward=False)
    return problems + check_served_composition(composition)


class ServedReward:
    """The loaded components and the composition state (module docstring). Not thread-safe: one caller at a time
    (the batcher's one scoring thread, or an adapter holding `lock`)."""

    def __init__(
        self,
        specs: list[dict[str, Any]],
        composition: CompositionSection | None = None,
        update_every: int = 256,
        seed: int = 0,
    ) -> None:
        problems = check_served_reward(specs, composition)
        if problems:
            raise ConfigError(problems, "served reward")
        self.specs = specs
        self.set = RewardSet(specs)
        names, weights = component_names(specs)
        assert names == self.set.names
        self.names = names
        self.composition = ServedComposition(composition, names, weights, update_every, seed)
        self.pairwise = self.set.pairwise
        self.lock = threading.Lock()
        self.null_rewards = 0
        self.scored_items = 0

    @property
    def needs_reference(self) -> bool:
        """Whether every item must carry a reference answer (a pairwise judge, or POLAR with references: given)."""
        for c in self.set.components:
            if c.kind == "pairwise":
                return True
            if c.kind == "reference" and getattr(getattr(c.scorer, "opts", None), "references", "given") != "suite":
                return True
        return False

    def tokenizer(self) -> Any:
        """The first served model's tokenizer (the default template), or None for rules alone."""
        for c in self.set.components:
            tok = getattr(c.scorer, "tokenizer", None)
            if tok is not None:
                return tok
        return None

    def missing_references(self, items: list[Item], field: str) -> list[str]:
        """Problems for items without the reference answer this reward scores against."""
        if not self.needs_reference:
            return []
        kinds = ", ".join(sorted({str(c.spec["type"]) for c in self.set.components}))
        return [
            f"{field.format(i)}: the served reward ({kinds}) scores against a reference answer; send one per item"
            for i, it in enumerate(items)
            if not it.reference
        ]

    def components(self, items: list[Item]) -> torch.Tensor:
        """(S, K) raw component scores; NaN where a component abstained (counted per component)."""
        self.scored_items += len(items)
        if self.pairwise:
            c = self.set.components[0]
            probs = c.scorer.compare(
                [it.prompt for it in items],
                [[Message("assistant", it.response)] for it in items],
                [[Message("assistant", it.reference or "")] for it in items],
            )
            out = torch.tensor([[math.nan if p is None else float(p)] for p in probs], dtype=torch.float32)
            c.nan += int(torch.isnan(out).sum())
            return out.reshape(len(items), 1)
        records = []
        for it in items:
            meta = dict(it.meta)
            if it.reference is not None:
                meta["reference"] = it.reference
            records.append(PromptOnly(it.prompt, meta, it.grader, "align-serve"))
        return self.set.score(records, [it.response for it in items])

    def compose(self, R: torch.Tensor) -> torch.Tensor:
        """(S, K) -> (S,) the served reward of one batch (updates the composition state)."""
        r = self.composition.rewards(R)
        self.null_rewards += int(torch.isnan(r).sum())
        return r

    def score(self, items: list[Item]) -> Scored:
        """The one scorer call: components, then the composition, for one batch."""
        R = self.components(items)
        return Scored(R, self.compose(R))

    def describe(self) -> dict[str, Any]:
        comps = self.set.describe()
        for d, c in zip(comps, self.set.components, strict=True):
            d["kind"] = c.kind
        return {
            "components": comps,
            "names": self.names,
            "pairwise": self.pairwise,
            "needs_reference": self.needs_reference,
            "composition": self.composition.describe(),
        }

    def counters(self) -> dict[str, Any]:
        """Items scored, null rewards served, and per component: the completions it gave no score (`nan`) and why
        (the rule's reasons, the scorer's failures, a sampled judge's abstentions by reason)."""
        comps: dict[str, dict[str, Any]] = dict(self.set.failures())
        for c in self.set.components:
            for what in ("failures", "abstentions"):
                counts = getattr(c.scorer, what, None)
                if counts:
                    comps[c.name][f"scorer_{what}"] = dict(counts)
        return {"scored_items": self.scored_items, "null_rewards": self.null_rewards, "components": comps}


__all__ = ["Scored", "ServedReward", "check_served_reward"]
