"""A round's pairs: the reward scores each prompt's candidates (or a pairwise oracle ranks them), the pair rule
makes one pair a prompt, a judge may verify them (`align.verify`), and the largest margins are kept."""

from __future__ import annotations

import json
import math
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from prefalign.files import write_json
from prefalign.registry import Table
from preference_data.records import Message, PreferencePair
from reward_models.composition import weighted_sum
from reward_models.ranking import Method, rank_many

from ..rewards import RewardSet
from ..verify import apply_verdicts, verify_probabilities
from .config import DATA_CANDIDATES, IterativeConfig, PairRule
from .sample import Pool

# --- pair rules ------------------------------------------------------------------------------------------------


def _worst(score: list[float], among: list[int], rng: random.Random) -> int:
    return min(among, key=lambda i: (score[i], i))


def _second(score: list[float], among: list[int], rng: random.Random) -> int:
    return max(among, key=lambda i: (score[i], -i))


def _random_other(score: list[float], among: list[int], rng: random.Random) -> int:
    return rng.choice(among)


@dataclass(frozen=True)
class PairRuleSpec:
    """How one prompt's K samples become one pair: the rejected sample among the candidates other than the chosen
    (the best), given the scores."""

    summary: str
    other: Callable[[list[float], list[int], random.Random], int]
    length_penalized: bool = False  # scores are r − length_penalty × completion tokens


PAIR_RULES: Table[PairRuleSpec] = Table(
    "pair rule",
    {
        "max_min": PairRuleSpec("best vs worst (RLHFlow max_min; INPO's best-of-K vs worst-of-K)", _worst),
        "max_random": PairRuleSpec("best vs a uniformly random other sample", _random_other),
        "max_second": PairRuleSpec("best vs the second best (RLHFlow max_max)", _second),
        "length_penalized": PairRuleSpec(
            "max_min on r - length_penalty x completion tokens (RLHFlow max_min_p)", _worst, length_penalized=True
        ),
    },
)
"""`align ls pair-rules`."""


def select_pair(
    rewards: list[float],
    lengths: list[int],
    rule: PairRule,
    length_penalty: float = 0.0,
    rng: random.Random | None = None,
    rejectable: list[bool] | None = None,
    order: list[float] | None = None,
) -> tuple[int, int] | None:
    """(chosen index, rejected index) of one prompt's K samples, or None when the pair ties (dropped).

    Ties in the maximum go to the earliest sample. The rewards must be finite (the caller drops NaN groups).
    `rejectable`: which candidates may be the rejected side (`rounds.rejected_from: policy` marks the policy's own
    samples); when none but the chosen is, any other candidate may. `order` (`rounds.order_by`): a score per
    candidate that ranks before the rewards (a higher order first; the rewards rank within an order), the pair rule
    applied to that ranking."""
    if len(rewards) < 2:
        return None
    spec = PAIR_RULES[rule]
    score = (
        [r - length_penalty * n for r, n in zip(rewards, lengths, strict=True)] if spec.length_penalized else rewards
    )
    if order is not None:
        score = ranks_of(list(zip(order, score, strict=True)))
    best = max(range(len(score)), key=lambda i: (score[i], -i))
    others = [i for i in range(len(score)) if i != best]
    among = [i for i in others if rejectable[i]] if rejectable is not None else others
    other = spec.other(score, among or others, rng or random.Random(0))
    return None if score[best] == score[other] else (best, other)


def ranks_of(keys: list[tuple[float, float]]) -> list[float]:
    """Dense ranks (0 = lowest) of the candidates' sort keys: equal keys share a rank, so ties stay ties."""
    levels = {k: float(i) for i, k in enumerate(sorted(set(keys)))}
    return [levels[k] for k in keys]


def score_round(
    rewards: RewardSet, pool: Pool, method: Method, order_by: list[str] | None = None
) -> tuple[list[list[float]], list[list[float]] | None]:
    """(P, candidates) rewards: Σ w_k r_k of the pointwise components (the reward phase), or the pairwise oracle's
    ranking score; and with `order_by` (`rounds.order_by`, pointwise only) the named components' Σ w_k r_k apart
    (the candidates' order), those components left out of the rewards."""
    if rewards.pairwise:  # every prompt's comparisons in one call of the oracle (a judge batches them)
        scorer = next(c.scorer for c in rewards.components if c.kind == "pairwise")
        cands = [[[Message("assistant", x)] for x in group] for group in pool.texts]
        ranked = rank_many(scorer, [p.prompt for p in pool.prompts], cands, method)
        return [[float(x) for x in r.scores] for r in ranked], None
    ordering = torch.tensor([n in (order_by or ()) for n in rewards.names], dtype=torch.bool)
    sum_w = rewards.weights.masked_fill(ordering, 0.0)
    order_w = rewards.weights.masked_fill(~ordering, 0.0) if order_by else None
    out: list[list[float]] = []
    order: list[list[float]] = []
    bar = tqdm(
        total=sum(len(g) for g in pool.texts),
        desc="scoring",
        unit="answer",
        disable=os.environ.get("CI") == "true",
    )
    for s in range(0, len(pool.prompts), SCORE_PROMPTS):  # a prompt's candidates scored together (prefix shared)
        groups = pool.texts[s : s + SCORE_PROMPTS]
        records = [p for p, group in zip(pool.prompts[s : s + SCORE_PROMPTS], groups, strict=True) for _ in group]
        comps = rewards.score(records, [t for group in groups for t in group])
        out += _regroup(weighted_sum(comps, sum_w).tolist(), groups)
        if order_w is not None:
            order += _regroup(weighted_sum(comps, order_w).tolist(), groups)
        bar.update(len(records))
    bar.close()
    return out, (order if order_w is not None else None)


def _regroup(flat: list[float], groups: list[list[str]]) -> list[list[float]]:
    out, at = [], 0
    for group in groups:
        out.append([float(v) for v in flat[at : at + len(group)]])
        at += len(group)
    return out


SCORE_PROMPTS = 64
"""Prompts whose candidates one call of the reward scores (the progress bar moves between calls)."""


def build_pairs(
    cfg: IterativeConfig, pool: Pool, scores: list[list[float]], t: int, order: list[list[float]] | None = None
) -> tuple[list[PreferencePair], dict[str, int]]:
    """Round t's pairs: one per prompt by the pair rule (`select_pairs`), then the largest margins kept
    (`keep_largest`)."""
    pairs, counts = select_pairs(cfg, pool, scores, t, order)
    r = cfg.rounds
    return keep_largest(pairs, r.keep_in(t), counts, r.keep_per_family, r.keep_ordered), counts


def select_pairs(
    cfg: IterativeConfig, pool: Pool, scores: list[list[float]], t: int, order: list[list[float]] | None = None
) -> tuple[list[PreferencePair], dict[str, int]]:
    """One pair per prompt by the pair rule on the reward's scores of its candidates (ranked first by `order`, the
    `rounds.order_by` components, when given); ties, NaN groups and (K = 1) prompts without a reference are dropped
    and counted. A pair's margin is the reward's (anchored) difference between its sides, its size where the order
    reversed the reward's; `reordered` counts those pairs. Each pair's attributes name its sides' origins."""
    rng = random.Random(cfg.rounds.seed * 7919 + t)
    pairs: list[PreferencePair] = []
    counts = {
        "prompts": len(pool.prompts),
        "pairs": 0,
        "dropped_tie": 0,
        "dropped_nan": 0,
        "dropped_margin": 0,
        "dropped_single": 0,
        "chosen_reference": 0,
        "rejected_data": 0,
    }
    if order is not None:
        counts["reordered"] = 0
    orders = order if order is not None else [None] * len(scores)
    for p, texts, lengths, origins, r, o in zip(
        pool.prompts, pool.texts, pool.lengths, pool.origins, scores, orders, strict=True
    ):
        if len(texts) < 2:  # K = 1 and the prompt has no reference: nothing to rank it against
            counts["dropped_single"] += 1
            continue
        if any(not math.isfinite(x) for x in [*r, *(o or ())]):
            counts["dropped_nan"] += 1
            continue
        r = anchored(r, origins, cfg.rounds.reference_bonus)
        rejectable = [g == "policy" for g in origins] if cfg.rounds.rejected_from == "policy" else None
        sel = select_pair(r, lengths, cfg.rounds.pair_rule, cfg.rounds.length_penalty, rng, rejectable, o)
        if sel is None:
            counts["dropped_tie"] += 1
            continue
        w, lo = sel
        reversed_by_order = o is not None and o[w] > o[lo] and r[w] < r[lo]
        if reversed_by_order:
            counts["reordered"] += 1
        pairs.append(
            PreferencePair(
                p.prompt,
                [Message("assistant", texts[w])],
                [Message("assistant", texts[lo])],
                margin=abs(r[w] - r[lo]) if reversed_by_order else r[w] - r[lo],
                attributes={"family": p.grader, "round": t, "prompt_id": p.id},
                source=f"round_{t}",
            )
        )
        pairs[-1].attributes["origins"] = [origins[w], origins[lo]]
        if o is not None:
            pairs[-1].attributes["ordered"] = o[w] > o[lo]  # order_by, not the reward, separates its sides
    counts["pairs"] = len(pairs)
    return pairs, counts


def anchored(rewards: list[float], origins: list[str], bonus: float) -> list[float]:
    """`rounds.reference_bonus`: the candidates' rewards with `bonus` added to the data's reference answer's."""
    return [x + bonus if o == "reference" else x for x, o in zip(rewards, origins, strict=True)] if bonus else rewards


def keep_largest(
    pairs: list[PreferencePair],
    keep: int,
    counts: dict[str, int],
    per_family: bool = False,
    ordered_first: bool = False,
) -> list[PreferencePair]:
    """The `keep` pairs with the largest margins (0: all), in prompt order (equal margins go to the earlier prompt);
    the rest are counted as `dropped_margin`, and `pairs` becomes the number kept. `per_family`
    (`rounds.keep_per_family`): each prompt family (a pair's `family` attribute; one family for prompts without)
    keeps its share of `keep` in proportion to its pairs (`family_quotas`), the largest margins within it.
    `ordered_first` (`rounds.keep_ordered`): the pairs whose sides `order_by` separates (attribute `ordered`) are
    kept before the others, by margin among themselves."""
    if keep and len(pairs) > keep:
        families = [str(p.attributes.get("family") or "") for p in pairs] if per_family else [""] * len(pairs)
        first = [ordered_first and bool(p.attributes.get("ordered")) for p in pairs]
        by_margin = sorted(range(len(pairs)), key=lambda i: (not first[i], -(pairs[i].margin or 0.0), i))
        quota = family_quotas(families, keep)
        top: list[int] = []
        for i in by_margin:
            if quota[families[i]] > 0:
                quota[families[i]] -= 1
                top.append(i)
        counts["dropped_margin"] = len(pairs) - keep
        pairs = [pairs[i] for i in sorted(top)]
    counts["pairs"] = len(pairs)
    sides = [p.attributes.get("origins") or ["policy", "policy"] for p in pairs]
    counts["chosen_reference"] = sum(c == "reference" for c, _ in sides)  # the reward chose the data's reference
    counts["rejected_data"] = sum(r == "rejected" for _, r in sides)  # the data's rejected answer ranked last
    if any("ordered" in p.attributes for p in pairs):
        counts["kept_ordered"] = sum(bool(p.attributes.get("ordered")) for p in pairs)
    return pairs


def family_quotas(families: list[str], keep: int) -> dict[str, int]:
    """How many of `keep` pairs each family keeps, in proportion to its number of pairs: the floors of
    keep x n_f / n, then one more to the largest remainders (ties to the family named first in sorted order), so
    the quotas sum to `keep` (keep <= n)."""
    n = len(families)
    sizes = {f: families.count(f) for f in sorted(set(families))}
    exact = {f: keep * k / n for f, k in sizes.items()}
    quota = {f: math.floor(x) for f, x in exact.items()}
    for f in sorted(sizes, key=lambda f: -(exact[f] - quota[f]))[: keep - sum(quota.values())]:
        quota[f] += 1
    return quota


def scores_of_round(
    cfg: IterativeConfig, rewards: RewardSet, pool: Pool, path: Path, sample_key: Any
) -> tuple[list[list[float]], list[list[float]] | None]:
    """The round's rewards of each prompt's candidates and, with `rounds.order_by`, their order (`score_round`;
    cached in `path` with the samples' key, the reward and the candidates); NaN kept as NaN."""
    key = {"samples": sample_key, "reward": cfg.reward, "ranking": cfg.rounds.ranking, "pool": cfg.rounds.candidates}
    if cfg.rounds.order_by:
        key["order_by"] = cfg.rounds.order_by
    cached = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    if cached.get("key") == key:
        scores, order = cached["scores"], cached.get("order")
    else:
        n = sum(len(r) for r in pool.texts)
        print(f"scoring {n} candidates of {len(pool.texts)} prompts with the reward ...", flush=True)
        t0 = time.perf_counter()
        fresh, fresh_order = score_round(rewards, pool, cfg.rounds.ranking, cfg.rounds.order_by)
        scores = _nan_to_none(fresh)
        order = None if fresh_order is None else _nan_to_none(fresh_order)
        secs = max(time.perf_counter() - t0, 1e-9)
        print(f"scored {n} candidates in {secs:.1f}s ({n / secs:.1f}/s)", flush=True)
        write_json(path, {"key": key, "scores": scores, **({"order": order} if order is not None else {})})
    return _none_to_nan(scores), (None if order is None else _none_to_nan(order))


def _nan_to_none(rows: list[list[float]]) -> list[list[float | None]]:
    return [[None if not math.isfinite(x) else x for x in r] for r in rows]


def _none_to_nan(rows: list[list[float | None]]) -> list[list[float]]:
    return [[math.nan if x is None else x for x in r] for r in rows]


def verify_round(
    cfg: IterativeConfig, verifier: Any, pairs: list[PreferencePair], path: Path
) -> tuple[list[PreferencePair], dict[str, int]]:
    """The judge's verdicts on the round's selected pairs applied (`align.verify`); its probabilities cached in `path`
    with the pairs and the judge, so a resumed round does not judge again."""
    key = {"pairs": [p.id for p in pairs], "verify": cfg.rounds.verify}
    cached = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    if cached.get("key") == key:
        probs = [math.nan if x is None else x for x in cached["probs"]]
    else:
        print(f"verifying {len(pairs)} pairs with the judge ...", flush=True)
        t0 = time.perf_counter()
        probs = verify_probabilities(verifier, pairs)
        print(f"verified {len(pairs)} pairs in {time.perf_counter() - t0:.1f}s", flush=True)
        write_json(path, {"key": key, "probs": [x if math.isfinite(x) else None for x in probs]})
    return apply_verdicts(pairs, probs, cfg.rounds.verify_rule)


def data_text(cfg: IterativeConfig, counts: dict[str, Any]) -> str:
    """How many of the kept pairs took a side from the data (with `candidates` that rank the data's answers)."""
    keys = DATA_CANDIDATES[cfg.rounds.candidates]
    if not keys:
        return ""
    text = f"; the data's reference chosen in {counts['chosen_reference']}"
    return text + (f", its rejected answer rejected in {counts['rejected_data']}" if "rejected" in keys else "")


def dropped_text(counts: dict[str, Any]) -> str:
    """What a round dropped, for its summary line: ties, NaN groups, (K = 1) prompts without a reference and
    (keep_pairs) the smaller margins."""
    text = f"{counts['dropped_tie']} ties, {counts['dropped_nan']} NaN dropped"
    if "verify_agree" in counts:
        acted = counts["verify_flipped"] or counts["verify_dropped"]
        verb = "flipped" if counts["verify_flipped"] else "dropped"
        text += (
            f"; the judge agreed with {counts['verify_agree']}, {verb} {acted}, had no verdict on "
            f"{counts['verify_unsure']}"
        )
    if counts.get("reordered"):
        text += f"; order_by reversed the reward's order in {counts['reordered']}"
    if "kept_ordered" in counts:
        text += f"; {counts['kept_ordered']} kept pairs separated by order_by"
    if counts.get("dropped_single"):
        text += f", {counts['dropped_single']} with one sample and no reference"
    return text + (f", {counts['dropped_margin']} below the kept margins" if counts.get("dropped_margin") else "")


__all__ = [
    "PAIR_RULES",
    "SCORE_PROMPTS",
    "PairRuleSpec",
    "build_pairs",
    "data_text",
    "dropped_text",
    "family_quotas",
    "keep_largest",
    "ranks_of",
    "score_round",
    "scores_of_round",
    "select_pair",
    "select_pairs",
    "verify_round",
]
