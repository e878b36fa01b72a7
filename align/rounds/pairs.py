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
) -> tuple[int, int] | None:
    """(chosen index, rejected index) of one prompt's K samples, or None when the pair ties (dropped).

    Ties in the maximum go to the earliest sample. The rewards must be finite (the caller drops NaN groups).
    `rejectable`: which candidates may be the rejected side (`rounds.rejected_from: policy` marks the policy's own
    samples); when none but the chosen is, any other candidate may."""
    if len(rewards) < 2:
        return None
    spec = PAIR_RULES[rule]
    score = (
        [r - length_penalty * n for r, n in zip(rewards, lengths, strict=True)] if spec.length_penalized else rewards
    )
    best = max(range(len(score)), key=lambda i: (score[i], -i))
    others = [i for i in range(len(score)) if i != best]
    among = [i for i in others if rejectable[i]] if rejectable is not None else others
    other = spec.other(score, among or others, rng or random.Random(0))
    return None if score[best] == score[other] else (best, other)


def score_round(rewards: RewardSet, pool: Pool, method: Method) -> list[list[float]]:
    """(P, candidates) rewards: Σ w_k r_k of the pointwise components (the reward phase), or the pairwise oracle's
    ranking score."""
    if rewards.pairwise:  # every prompt's comparisons in one call of the oracle (a judge batches them)
        scorer = next(c.scorer for c in rewards.components if c.kind == "pairwise")
        cands = [[[Message("assistant", x)] for x in group] for group in pool.texts]
        ranked = rank_many(scorer, [p.prompt for p in pool.prompts], cands, method)
        return [[float(x) for x in r.scores] for r in ranked]
    out: list[list[float]] = []
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
        flat = weighted_sum(comps, rewards.weights).tolist()
        at = 0
        for group in groups:
            out.append([float(v) for v in flat[at : at + len(group)]])
            at += len(group)
        bar.update(len(records))
    bar.close()
    return out


SCORE_PROMPTS = 64
"""Prompts whose candidates one call of the reward scores (the progress bar moves between calls)."""


def build_pairs(
    cfg: IterativeConfig, pool: Pool, scores: list[list[float]], t: int
) -> tuple[list[PreferencePair], dict[str, int]]:
    """Round t's pairs: one per prompt by the pair rule (`select_pairs`), then the largest margins kept
    (`keep_largest`)."""
    pairs, counts = select_pairs(cfg, pool, scores, t)
    return keep_largest(pairs, cfg.rounds.keep_in(t), counts), counts


def select_pairs(
    cfg: IterativeConfig, pool: Pool, scores: list[list[float]], t: int
) -> tuple[list[PreferencePair], dict[str, int]]:
    """One pair per prompt by the pair rule on the reward's scores of its candidates; ties, NaN groups and (K = 1)
    prompts without a reference are dropped and counted. Each pair's attributes name its sides' origins."""
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
    for p, texts, lengths, origins, r in zip(pool.prompts, pool.texts, pool.lengths, pool.origins, scores, strict=True):
        if len(texts) < 2:  # K = 1 and the prompt has no reference: nothing to rank it against
            counts["dropped_single"] += 1
            continue
        if any(not math.isfinite(x) for x in r):
            counts["dropped_nan"] += 1
            continue
        r = anchored(r, origins, cfg.rounds.reference_bonus)
        rejectable = [o == "policy" for o in origins] if cfg.rounds.rejected_from == "policy" else None
        sel = select_pair(r, lengths, cfg.rounds.pair_rule, cfg.rounds.length_penalty, rng, rejectable)
        if sel is None:
            counts["dropped_tie"] += 1
            continue
        w, lo = sel
        pairs.append(
            PreferencePair(
                p.prompt,
                [Message("assistant", texts[w])],
                [Message("assistant", texts[lo])],
                margin=r[w] - r[lo],
                attributes={"family": p.grader, "round": t, "prompt_id": p.id},
                source=f"round_{t}",
            )
        )
        pairs[-1].attributes["origins"] = [origins[w], origins[lo]]
    counts["pairs"] = len(pairs)
    return pairs, counts


def anchored(rewards: list[float], origins: list[str], bonus: float) -> list[float]:
    """`rounds.reference_bonus`: the candidates' rewards with `bonus` added to the data's reference answer's."""
    return [x + bonus if o == "reference" else x for x, o in zip(rewards, origins, strict=True)] if bonus else rewards


def keep_largest(pairs: list[PreferencePair], keep: int, counts: dict[str, int]) -> list[PreferencePair]:
    """The `keep` pairs with the largest margins (0: all), in prompt order (equal margins go to the earlier prompt);
    the rest are counted as `dropped_margin`, and `pairs` becomes the number kept."""
    if keep and len(pairs) > keep:
        top = sorted(sorted(range(len(pairs)), key=lambda i: (-(pairs[i].margin or 0.0), i))[:keep])
        counts["dropped_margin"] = len(pairs) - keep
        pairs = [pairs[i] for i in top]
    counts["pairs"] = len(pairs)
    sides = [p.attributes.get("origins") or ["policy", "policy"] for p in pairs]
    counts["chosen_reference"] = sum(c == "reference" for c, _ in sides)  # the reward chose the data's reference
    counts["rejected_data"] = sum(r == "rejected" for _, r in sides)  # the data's rejected answer ranked last
    return pairs


def scores_of_round(
    cfg: IterativeConfig, rewards: RewardSet, pool: Pool, path: Path, sample_key: Any
) -> list[list[float]]:
    """The round's scores of each prompt's candidates (cached in `path` with the samples' key, the reward and the
    candidates); NaN kept as NaN."""
    key = {"samples": sample_key, "reward": cfg.reward, "ranking": cfg.rounds.ranking, "pool": cfg.rounds.candidates}
    cached = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    if cached.get("key") == key:
        scores = cached["scores"]
    else:
        n = sum(len(r) for r in pool.texts)
        print(f"scoring {n} candidates of {len(pool.texts)} prompts with the reward ...", flush=True)
        t0 = time.perf_counter()
        scores = [
            [None if not math.isfinite(x) else x for x in r] for r in score_round(rewards, pool, cfg.rounds.ranking)
        ]
        secs = max(time.perf_counter() - t0, 1e-9)
        print(f"scored {n} candidates in {secs:.1f}s ({n / secs:.1f}/s)", flush=True)
        write_json(path, {"key": key, "scores": scores})
    return [[math.nan if x is None else x for x in r] for r in scores]


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
    "keep_largest",
    "score_round",
    "scores_of_round",
    "select_pair",
    "select_pairs",
    "verify_round",
]
