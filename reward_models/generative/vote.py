"""Turning several judge samples into one verdict, and one verdict per pair into one number per response.

Pure functions over parsed samples (`reward_models.generative.parse`); an abstained sample is None and is left
out and counted, never read as a zero or a tie.

- `vote_scores(samples)`: DeepSeek-GRM voting. k samples, each the n scores of one sampled critique (its own
  principles); the voted score of response i is S*_i = sum_j S_ij over the valid samples (range [k, 10k]).
- `meta_vote(samples, meta, k_meta)`: meta-RM guided voting: only the k_meta valid samples with the highest
  meta-RM score (ties: the earlier sample) are voted.
- `best_index(totals)`: the argmax response, or None on a tie for the top (a tie is not a verdict).
- `grm_sample_correct(scores, rewards)`: the SPCT correctness rule: n >= 2: the ground-truth best response j
  (unique argmax of `rewards`) gets a score strictly above every other; n = 1: S_1 == r_1.
- `draw_right(chosen, rejected)`: one pointwise draw on a pair is right: both responses scored and the chosen one
  strictly above (an abstention or a tie is wrong); a meta-RM's labels and its AUC both read draws by it.
- `rft_select(correct)`: rejective fine-tuning's choice for one query: the indices of correct samples, or none
  when every sample is correct ("too easy") or none is.
- `majority(labels)`: Think-RM's m-sample vote over A/B; None on a tie or when every sample abstained.
- `pair_pm_probability(...)`: RLHFlow pair-PM: P(first response better) from the logits of the tokens A and B in
  both orders, the two orders averaged.
- `group_advantage(d)`: Think-RM's pairwise-to-pointwise advantage for one group of G responses:
  A_i = mean_j d_ij / sqrt(sum_{i,j} d_ij^2 / (2 G (G-1)) + eps), from the antisymmetric preference matrix d
  (d_ij > 0: i is better). `preference_matrix(G, verdicts)` builds d from pairwise verdicts on (i, j), i < j.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Vote:
    totals: tuple[float, ...] | None  # summed score per response; None when no sample was valid
    used: int  # samples voted
    abstained: int  # samples left out because they abstained


def vote_scores(samples: Sequence[Sequence[float] | None]) -> Vote:
    """Sum the valid samples' scores per response (samples must agree on n)."""
    valid = [s for s in samples if s is not None]
    if not valid:
        return Vote(None, 0, len(samples))
    n = len(valid[0])
    if any(len(s) != n for s in valid):
        raise ValueError(f"samples score different numbers of responses: {sorted({len(s) for s in valid})}")
    totals = tuple(math.fsum(s[i] for s in valid) for i in range(n))
    return Vote(totals, len(valid), len(samples) - len(valid))


def meta_vote(samples: Sequence[Sequence[float] | None], meta: Sequence[float], k_meta: int) -> Vote:
    """Vote only the k_meta valid samples the meta-RM scores highest (ties: earlier sample first)."""
    if len(meta) != len(samples):
        raise ValueError(f"{len(samples)} samples but {len(meta)} meta-RM scores")
    if k_meta < 1:
        raise ValueError(f"k_meta must be at least 1, got {k_meta}")
    valid = [i for i, s in enumerate(samples) if s is not None and not math.isnan(meta[i])]
    keep = sorted(valid, key=lambda i: (-meta[i], i))[:k_meta]
    vote = vote_scores([samples[i] for i in sorted(keep)])
    return Vote(vote.totals, vote.used, len(samples) - len(valid))


def best_index(totals: Sequence[float] | None) -> int | None:
    """The index of the highest total, or None when totals are missing or the top is tied."""
    if not totals:
        return None
    top = max(totals)
    winners = [i for i, t in enumerate(totals) if t == top]
    return winners[0] if len(winners) == 1 else None


def grm_sample_correct(scores: Sequence[float] | None, rewards: Sequence[float]) -> bool:
    """Whether one sampled critique's scores agree with the ground truth (SPCT's rule; abstained: False)."""
    if scores is None or len(scores) != len(rewards) or not rewards:
        return False
    if len(rewards) == 1:
        return scores[0] == rewards[0]
    j = best_index(rewards)
    if j is None:
        raise ValueError(f"the ground-truth best response is not unique: rewards {list(rewards)}")
    return all(scores[j] > s for i, s in enumerate(scores) if i != j)


def draw_right(chosen: float | None, rejected: float | None) -> bool:
    """Whether one pointwise draw on a pair is right: both scored, the chosen strictly above (see the module)."""
    return chosen is not None and rejected is not None and chosen > rejected


def rft_select(correct: Sequence[bool]) -> list[int]:
    """Rejective fine-tuning: the correct samples of one query, or [] when all (too easy) or none are correct."""
    if all(correct):
        return []
    return [i for i, c in enumerate(correct) if c]


def majority(labels: Sequence[str | None]) -> str | None:
    """The most frequent non-None label; None on a tie for the most votes or when there is none."""
    counts: dict[str, int] = {}
    for x in labels:
        if x is not None:
            counts[x] = counts.get(x, 0) + 1
    if not counts:
        return None
    top = max(counts.values())
    winners = [x for x, c in counts.items() if c == top]
    return winners[0] if len(winners) == 1 else None


def _p_first_token(logit_a: float, logit_b: float, temperature: float) -> float:
    """softmax([logit_a, logit_b] / T)[0], computed stably."""
    return 1.0 / (1.0 + math.exp((logit_b - logit_a) / temperature))


def pair_pm_probability(
    ab_logits: tuple[float, float], ba_logits: tuple[float, float], temperature: float = 1.0
) -> float:
    """P(x better than y) from a pair-PM's (logit of token A, logit of token B) read with x in position A
    (`ab_logits`) and with x in position B (`ba_logits`), the two orders averaged."""
    if temperature <= 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    p_ab = _p_first_token(ab_logits[0], ab_logits[1], temperature)  # x is A: P(A)
    p_ba = 1.0 - _p_first_token(ba_logits[0], ba_logits[1], temperature)  # x is B: P(B)
    return 0.5 * (p_ab + p_ba)


def preference_matrix(g: int, verdicts: dict[tuple[int, int], float | None]) -> list[list[float]]:
    """The antisymmetric G x G matrix d from verdicts on pairs (i, j), i < j, read as (A = y_i, B = y_j): each a
    Think-RM multiclass score s (negative: A better; d_ij = -s), a binary verdict given as -1 (A) / +1 (B), or
    None (abstained: no preference, d_ij = 0)."""
    d = [[0.0] * g for _ in range(g)]
    for (i, j), s in verdicts.items():
        if not 0 <= i < j < g:
            raise ValueError(f"pair ({i}, {j}) is not (i, j) with 0 <= i < j < {g}")
        if s is not None:
            d[i][j], d[j][i] = -float(s), float(s)
    return d


def group_advantage(d: Sequence[Sequence[float]], eps: float = 1e-6) -> list[float]:
    """A_i = (1/G) sum_j d_ij / sqrt(sum_{i,j} d_ij^2 / (2 G (G - 1)) + eps) for one group (G >= 2)."""
    g = len(d)
    if g < 2 or any(len(row) != g for row in d):
        raise ValueError(f"d must be a square matrix with G >= 2 rows, got {g} rows")
    scale = math.sqrt(math.fsum(x * x for row in d for x in row) / (2 * g * (g - 1)) + eps)
    return [math.fsum(row) / g / scale for row in d]
