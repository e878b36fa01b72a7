"""Arena-Hard's score, as its reference code computes it (lmarena/arena-hard-auto @ 0489bf38, v0.1:
`show_result.py` `get_battles_from_row`, `utils_math.py` `compute_mle_elo`, `get_bootstrap_result`,
`predict_win_rate`, `get_win_rate_column`).

Every prompt is judged in two games: game 1 with the baseline's answer as A and the model's as B, game 2 with the
model's as A. A game's verdict is one of five labels (`A>>B`, `A>B`, `A=B`, `B>A`, `B>>A`); any other value (a
judge whose output had no verdict) drops that game. Each game becomes battles of the model against the baseline: a
strong verdict (`>>`) counts `weight` times (3 by default), any other once; a tie is a tie.

The reference fits a Bradley-Terry model to all battles by an unpenalised logistic regression (each battle twice, a
tie once as a win and once as a loss) and anchors the baseline at 1000 Elo. Every battle involves the baseline, so the
fit separates by model and has a closed form: the model's win probability against the baseline is its battles'
mean outcome (win 1, tie 1/2, loss 0), and its Elo is 1000 + 400 log10(w / (1 - w)); the reference's solver reaches
it to its tolerance (0.562500000364611 for 0.5625).

The interval: `num_rounds` (100) resamples of the whole battle table with replacement, all models' battles together
in the order the judgment files were read, drawn as pandas' `sample(frac=1, replace=True)` draws them from numpy's
global generator seeded 42 (`RandomState.randint(0, n, n)`); per model, the 2.5th and 97.5th percentiles
(`np.percentile`, linear) of the resampled Elos, each turned into a win rate against the baseline. The score, lower
and upper bounds are win rates in percent rounded to 0.01 (`get_win_rate_column`); the printed line rounds them to
0.1 and shows the bounds as offsets from the score.

One case differs: a resample where a model won (or lost) every battle has no finite maximum-likelihood Elo; the
reference's solver stops somewhere large, here the win rate is clipped to [1e-9, 1 - 1e-9]. A percentile lands on
such a round only when more than 2.5% of rounds are degenerate (a handful of battles).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from prefalign.errors import UserError

VERDICTS: dict[str, tuple[float, bool]] = {
    "A>>B": (1.0, True),
    "A>B": (1.0, False),
    "A=B": (0.5, False),
    "B>A": (0.0, False),
    "B>>A": (0.0, True),
}
"""A verdict label -> (outcome for A: 1 win, 1/2 tie, 0 loss; whether it is strong)."""
V2_LABELS: dict[str, tuple[float, bool]] = {
    "A>B": (1.0, False),
    "A>>B": (1.0, True),
    "A=B": (0.5, False),
    "A<<B": (0.0, True),
    "A<B": (0.0, False),
    "B>A": (0.0, False),
    "B>>A": (0.0, True),
    "B=A": (0.5, False),
    "B<<A": (1.0, True),
    "B<A": (1.0, False),
}
"""v2.0's verdict labels (@ 196f6b82, `show_result.py` `load_judgments` `label_to_score`): the five and their
mirrored forms, as `VERDICTS` reads them."""

WEIGHT = 3
"""How many battles a strong verdict counts for (`show_result.py --weight`, default 3)."""
ROUNDS = 100
"""Bootstrap resamples (`show_result.py --num-rounds`, default 100)."""
SEED = 42
"""The seed `utils_math.py` sets on numpy's global generator when it is imported."""
CLIP = 1e-9


def game_battles(
    game1: str | None, game2: str | None, weight: int = WEIGHT, labels: Mapping[str, tuple[float, bool]] = VERDICTS
) -> list[float]:
    """One prompt's battles, as outcomes for the model against the baseline (1 win, 1/2 tie, 0 loss).

    game1: the verdict with the baseline as A and the model as B; game2: with the model as A. A verdict outside
    `labels` (v0.1's five by default, `V2_LABELS` for a v2.0 judge's), None or a parse failure, drops its game, as
    the v0.1 reference does."""
    out: list[float] = []
    for verdict, model_is_a in ((game1, False), (game2, True)):
        if verdict is None or verdict not in labels:
            continue
        a_outcome, strong = labels[verdict]
        outcome = a_outcome if model_is_a else 1.0 - a_outcome
        out += [outcome] * (weight if strong and outcome != 0.5 else 1)
    return out


def elo(win_rate: float) -> float:
    """The Bradley-Terry Elo of a model with this win probability against the baseline (anchored at 1000)."""
    w = min(max(win_rate, CLIP), 1.0 - CLIP)
    return 1000.0 + 400.0 * math.log10(w / (1.0 - w))


def win_rate_of(elo_rating: float) -> float:
    """`predict_win_rate` against the baseline at 1000."""
    return 1.0 / (1.0 + 10.0 ** ((1000.0 - elo_rating) / 400.0))


@dataclass(frozen=True)
class ArenaHardScore:
    model: str
    win_rate: float
    """The model's win probability against the baseline, unrounded (0..1)."""
    elo: float
    score: float
    """Win rate in percent, rounded to 0.01 as `get_win_rate_column` does."""
    lower: float
    upper: float
    """Bootstrap 2.5th / 97.5th percentiles, as win rates in percent rounded to 0.01."""
    battles: int

    def printed(self) -> str:
        """The numbers of show_result.py's line: score and interval offsets rounded to 0.1."""
        interval = (round(self.lower - self.score, 1), round(self.upper - self.score, 1))
        return f"{self.model}: score {round(self.score, 1)} 95% CI {interval}"


def arena_hard_scores(
    battles: Sequence[tuple[str, Sequence[float]]], rounds: int = ROUNDS, seed: int = SEED
) -> list[ArenaHardScore]:
    """Per model, its Arena-Hard score from its battles against the baseline.

    battles: (model, outcomes) in the order the reference reads the judgment files (the bootstrap resamples the
    concatenated table, so the order decides which rows a round draws)."""
    names = [m for m, _ in battles]
    if len(set(names)) != len(names):
        raise UserError(f"arena-hard: a model appears twice among {names}")
    owner = np.concatenate([np.full(len(o), i) for i, (_, o) in enumerate(battles)]).astype(np.intp)
    outcome = np.concatenate([np.asarray(o, dtype=np.float64) for _, o in battles])
    n = len(outcome)
    if n == 0:
        raise UserError("arena-hard: no battles (every game's verdict is missing)")
    empty = [m for m, o in battles if not len(o)]
    if empty:
        raise UserError(f"arena-hard: no judged game for {', '.join(empty)}")
    rng = np.random.RandomState(seed)
    boot = np.full((rounds, len(names)), np.nan)
    for r in range(rounds):
        idx = rng.randint(0, n, size=n)
        counts = np.bincount(owner[idx], minlength=len(names))
        sums = np.bincount(owner[idx], weights=outcome[idx], minlength=len(names))
        for i in range(len(names)):
            if counts[i]:
                boot[r, i] = elo(sums[i] / counts[i])
    out = []
    for i, (name, o) in enumerate(battles):
        w = float(np.mean(np.asarray(o, dtype=np.float64)))
        col = boot[:, i][np.isfinite(boot[:, i])]
        lo, hi = float(np.percentile(col, 2.5)), float(np.percentile(col, 97.5))
        out.append(
            ArenaHardScore(
                model=name,
                win_rate=w,
                elo=elo(w),
                score=round(w * 100, 2),
                lower=round(win_rate_of(lo) * 100, 2),
                upper=round(win_rate_of(hi) * 100, 2),
                battles=len(o),
            )
        )
    return out


@dataclass(frozen=True)
class JudgmentRow:
    """One judged prompt of a judgment file: the row as read, and its two games' verdicts."""

    fields: dict[str, Any]
    """The row's fields (`model`, `question_id` in v0.1, `uid` and `category` in v2.0, ...)."""
    verdicts: tuple[str | None, str | None]
    """Game 1 (the baseline's answer as A), game 2 (the model's as A); None where the game or its `score` is null."""
    where: str
    """`FILE line N`, for messages."""


_ROW_NEEDS = (
    "each row needs `model` and `games`: two objects (or null) whose `score` is a verdict label such as A>>B, A>B, "
    "A=B, B>A, B>>A (or null)"
)


def _verdict(game: Any) -> str | None:
    if game is None:
        return None
    if not isinstance(game, dict):
        raise ValueError(f"a game must be an object with a `score`, got {game!r}")
    score = game.get("score")
    return score if isinstance(score, str) else None


def read_judgment_rows(paths: Sequence[str | Path]) -> list[tuple[str, list[JudgmentRow]]]:
    """Arena-Hard judgment files (model_judgment/<judge>/<model>.jsonl, one model each) -> (model, rows) per file, in
    the order given; a row that is not a judgment is an error naming the file and line. A null game reads as a game
    without a verdict (the v0.1 reference cannot read one; v2.0's drops its row)."""
    out = []
    for path in paths:
        model, rows = None, []
        with open(path, encoding="utf-8") as f:
            for line_no, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                    games = row["games"]
                    if not isinstance(games, list) or len(games) != 2:
                        raise ValueError("`games` must be a list of the two games")
                    model = model or row["model"]
                    if row["model"] != model:
                        raise ValueError(f"`model` is {row['model']!r}, earlier rows say {model!r}")
                    verdicts = (_verdict(games[0]), _verdict(games[1]))
                except KeyError as e:
                    raise UserError(
                        f"{path} line {line_no}: not an Arena-Hard judgment row (no field {e}); {_ROW_NEEDS}"
                    ) from e
                except (ValueError, TypeError) as e:
                    raise UserError(f"{path} line {line_no}: not an Arena-Hard judgment row ({e}); {_ROW_NEEDS}") from e
                rows.append(JudgmentRow(row, verdicts, f"{path} line {line_no}"))
        if model is None:
            raise UserError(f"{path}: no judgment rows")
        out.append((str(model), rows))
    return out


def read_judgments(paths: Sequence[str | Path], weight: int = WEIGHT) -> list[tuple[str, list[float]]]:
    """Arena-Hard judgment files -> (model, battles) per file, in the order given (`read_judgment_rows`, each row's
    games through `game_battles`)."""
    return [
        (model, [b for r in rows for b in game_battles(*r.verdicts, weight=weight)])
        for model, rows in read_judgment_rows(paths)
    ]
