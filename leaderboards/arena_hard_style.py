"""Arena-Hard's style-controlled score: the Bradley-Terry fit over the battles against the baseline gets each answer
pair's style (length; markdown headers, lists, bold) as extra features, fitted jointly with the models' coefficients,
and the score is read off the model coefficients alone. The reference has two sets of rules, one per version
(`STYLE_VERSIONS`); both are implemented here as their code runs them, not as its blog post describes style control:

- v0.1: lmarena/arena-hard-auto @ 0489bf38, `show_result.py --style-control` (`--length-control-only`,
  `--markdown-control-only`): `get_battles_from_row` (each battle's metadata), `utils_math.py`
  `construct_style_matrices`, `fit_bt`, `get_bootstrap_result_style_control`, `get_win_rate_column`. The same commit
  as the unstyled score (`leaderboards.arena_hard`).
- v2.0: lmarena/arena-hard-auto @ 196f6b82, `show_result.py --control-features markdown length` (`load_judgments`,
  `get_model_style_metadata`, `print_leaderboard_with_style_features`, `format_confidence_interval`),
  `utils/math_utils.py` (`one_hot_encode`, `fit_pairwise_model`, `bootstrap_pairwise_model`,
  `to_winrate_probabilities`). The official Arena-Hard-v2.0 configuration.

The style metadata: each row of the model_answer files carries four counts for its answer (v0.1 under
`conv_metadata`, keyed by `question_id`, the file's model in `model_id`; v2.0 under `metadata`, keyed by `uid`, the
model in `model`; written by the reference's `add_markdown_info.py` and v2.0's `gen_answer.py`): `token_len` (the
answer's tiktoken tokens) and `header_count` (h1..h6), `list_count` (ordered, unordered), `bold_count` (`**`, `__`),
each an object of counts that is summed (a plain count is taken as is).

The rules, each as "v0.1; v2.0":
- battles: `leaderboards.arena_hard.game_battles`, a game without a verdict dropped; a row with a null game or
  verdict dropped whole, ten labels (the five and their mirrored forms `A<B`, `A<<B`, `B=A`, `B<A`, `B<<A`), game 2's
  battles first, only the rows of `category` (show_result's --category, hard_prompt) against its baseline.
- length feature, t the token counts: (t_base - t_model) / (t_base + t_model + 1); (t_model - t_base) / (t_model +
  t_base).
- markdown features, c a count: (c_base - c_model) / (c_base + c_model + 1); of the densities d = c / (t + 1),
  (d_model - d_base) / (d_model + d_base + 1).
- standardised: by the mean and the population std (ddof 0), in float64; by the mean and the sample std (n - 1), in
  float32.
- design: columns the baseline, the models (in order of first battle), the style; a model column +-ln 10 (log10
  odds), Y = 1 a baseline win, each battle twice and a tie once won, once lost. Columns the sorted model names (cut
  at the last `/`, the baseline among them), +1 the model, -1 the baseline, then the style; the outcome 1, 1/2, 0 as
  a soft label.
- fit: scikit-learn's `LogisticRegression(fit_intercept=False)` with its defaults: an L2 penalty, C = 1, on every
  coefficient (so not the maximum-likelihood point, and the models coupled through the shared baseline column),
  lbfgs, tol 1e-4, 100 iterations. torch's L-BFGS on the summed cross-entropy from 0.5 everywhere, lr 0.1, 50
  iterations, tolerances 1e-9, no line search, no penalty: it stops after 50 steps, short of the maximum-likelihood
  point (on the fixture 0.8 points of win rate for one model), so the same optimizer runs here in float32.
- score: the full-data fit's win rate against the baseline in percent, rounded to 0.01; the median of the rounds'
  win rates.
- interval: 95%, the 2.5th / 97.5th percentiles of the rounds' Elos as win rates; 90%, the 5% / 95% quantiles of the
  rounds' win rates.
- draws: `np.random.choice(N, N)` per round from numpy's global generator, which `utils_math` seeds with 42 on
  import; `np.random.randint(0, n, (rounds, n))` from numpy's global generator, never seeded: its score and interval
  change from run to run.

Here every draw comes from `RandomState(seed)` (42): for v0.1 that is the reference's own stream, so the score and
the interval match it to the digit; for v2.0 it equals the reference's output when `np.random.seed(seed)` precedes
its run, and an unseeded run of the reference differs by its own bootstrap noise (score and bounds alike). v2.0's
full-data fit, which the reference never prints, is given beside as a seed-free point (`StyleScore.full_fit`).

Where these rules refuse what the reference would score:
- v2.0 `-f length` and `-f markdown` alone: its show_result slices the whole design matrix (`[:, :1]`, `[:, 1:]`),
  not the style columns: the first crashes, the second reads the length column as a model and mislabels the scores.
  Only `markdown,length` is a v2.0 rule here; v0.1's three choices build the right columns and are all rules.
- v2.0 metadata whose keys are not exactly the four above in this order: the reference reads the values by position.
- A constant feature (zero spread, e.g. no answer has any bold text), and in v2.0 a battle of two empty answers:
  the reference divides by zero (v2.0's assert fails, v0.1's scikit-learn refuses the NaN).
One case is scored differently: a v0.1 bootstrap round in which a model has no battle (a model with a handful of
battles): the reference then mislabels its columns or leaves NaN in the percentiles; here that round is left out of
that model's percentiles.
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression

from prefalign.errors import UserError, did_you_mean

from .arena_hard import ROUNDS, SEED, V2_LABELS, WEIGHT, JudgmentRow, game_battles

FEATURES = ("token_len", "header_count", "list_count", "bold_count")
"""The style counts, in the order the reference's `add_markdown_info.py` writes them and its style columns take."""
CONTROLS: dict[str, tuple[str, ...]] = {
    "markdown,length": FEATURES,  # v0.1 --style-control, v2.0 -f markdown length
    "length": FEATURES[:1],  # v0.1 --length-control-only
    "markdown": FEATURES[1:],  # v0.1 --markdown-control-only
}
V01_COEF_NAMES = {
    "token_len": "sum_assistant_a_tokens",
    "header_count": "header_count_a",
    "list_count": "list_count_a",
    "bold_count": "bold_count_a",
}
"""The names v0.1's show_result prints the style coefficients under (`STYLE_CONTROL_ELEMENTS`)."""
V2_BASELINES = {
    "hard_prompt": "o3-mini-2025-01-31",
    "coding": "o3-mini-2025-01-31",
    "math": "o3-mini-2025-01-31",
    "creative_writing": "gemini-2.0-flash-001",
    "arena-hard-v0.1": "gpt-4-0314",
}
"""v2.0's baseline per category (`utils/judge_utils.py` `JUDGE_SETTINGS`)."""
LAYOUTS = (
    "v0.1 rows name the prompt `question_id` (answer rows: `model_id`, `conv_metadata`), v2.0 rows `uid` (answer "
    "rows: `model`, `metadata`); --option version= picks"
)
V2_LBFGS = {"lr": 0.1, "max_iter": 50, "tolerance_grad": 1e-9, "tolerance_change": 1e-9}
"""`fit_pairwise_model`'s optimizer settings (torch's defaults for the rest: history 100, no line search)."""


@dataclass(frozen=True)
class StyleScore:
    model: str
    score: float
    """Percent: v0.1 the full-data fit's win rate rounded to 0.01; v2.0 the median of the rounds' win rates (without
    style control, `v2_plain_scores`: the mean of the rounds' mean outcomes)."""
    lower: float
    upper: float
    """The interval's bounds in percent (v0.1 95%, rounded to 0.01; v2.0 90%)."""
    win_rate: float
    """The unrounded number behind `score` (0..1)."""
    full_fit: float
    """The full-data fit's win rate (0..1); v0.1's score, v2.0 prints none."""
    battles: int
    line: str
    """The model's line as the reference prints it."""


@dataclass(frozen=True)
class StyleFit:
    version: str
    scores: list[StyleScore]
    coefficients: dict[str, float]
    """The style coefficients by feature: v0.1 the full-data fit's, v2.0 the median over the rounds."""
    line: str
    """The coefficients as the reference prints them."""
    method: dict[str, Any]


@dataclass(frozen=True)
class Battle:
    model: str
    question: str
    outcome: float
    """For the model against the baseline: 1 win, 1/2 tie, 0 loss."""
    where: str


Counts = dict[str, dict[str, tuple[Any, str]]]
"""model -> question -> (the answer row's style metadata as read, `FILE line N`)."""


@dataclass(frozen=True)
class StyleVersion:
    reference: str
    id_field: str
    """The prompt's id in judgment and answer rows."""
    answer_model: str
    """The answer row's field naming its model (the reference reads the first row's)."""
    metadata: str
    """The answer row's field holding the style counts."""
    by_position: bool
    """The reference reads the counts by position (v2.0), so a file must hold exactly `FEATURES` in order."""
    baseline: str | dict[str, str]
    """The baseline model, or one per category."""
    controls: tuple[str, ...]
    """The `CONTROLS` its show_result scores as meant."""
    score: Callable[..., StyleFit]
    """(judged, counts, *, baseline, control, category, weight, rounds, seed, version) -> the fit."""


def read_style_metadata(answers: str | Path, version: StyleVersion) -> Counts:
    """Every `*.jsonl` answer file under `answers` -> model -> question -> its row's style metadata (validated when
    a battle needs it)."""
    folder = Path(answers)
    files = sorted(folder.glob("*.jsonl")) if folder.is_dir() else []
    if not files:
        raise UserError(
            f"--option answers={answers}: no *.jsonl answer files there; give the benchmark's model_answer/ folder "
            f"(rows with `{version.id_field}` and `{version.metadata}`)"
        )
    out: Counts = {}
    for path in files:
        model, rows = None, {}
        for line_no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            where = f"{path} line {line_no}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise UserError(f"{where}: not JSON ({e})") from e
            for key in (version.id_field,) + ((version.answer_model,) if model is None else ()):
                if key not in row:
                    raise UserError(f"{where}: an answer row without `{key}`; {LAYOUTS}")
            model = model if model is not None else str(row[version.answer_model])
            rows[str(row[version.id_field])] = (row.get(version.metadata), where)
        if model in out:
            raise UserError(f"{path}: a second answer file for model {model!r} in {folder}")
        if model is not None:
            out[model] = rows
    return out


def _counts(counts: Counts, model: str, question: str, need: str, version: StyleVersion) -> tuple[float, ...]:
    """The four style counts of `model`'s answer to `question` (a dict of counts summed), or an error that names the
    file, row and field."""
    if model not in counts:
        raise UserError(f"{need}: no answer file names model {model!r} (answer files found for: {sorted(counts)})")
    if question not in counts[model]:
        raise UserError(f"{need}: {model}'s answer file has no row with {version.id_field} {question!r}")
    meta, where = counts[model][question]
    field = version.metadata
    if not isinstance(meta, dict):
        raise UserError(
            f"{where}: no `{field}` object (token_len, header_count, list_count, bold_count), which style control "
            "needs; arena-hard-auto's add_markdown_info.py adds it to answer files"
        )
    missing = [k for k in FEATURES if k not in meta]
    if missing:
        raise UserError(f"{where}: `{field}` has no {', '.join(missing)}")
    if version.by_position and tuple(meta) != FEATURES:
        raise UserError(
            f"{where}: `{field}` holds {list(meta)}; v2.0's show_result reads the counts by position, so only "
            f"{list(FEATURES)} in this order give its features"
        )
    out = []
    for k in FEATURES:
        v = meta[k]
        if isinstance(v, int) and not isinstance(v, bool):
            out.append(v)
        elif isinstance(v, dict) and all(isinstance(x, int | float) and not isinstance(x, bool) for x in v.values()):
            out.append(sum(v.values()))
        else:
            raise UserError(f"{where}: `{field}.{k}` must be a count or an object of counts, got {v!r}")
    return tuple(out)


def _style_pairs(
    battles: Sequence[Battle], counts: Counts, baseline: str, version: StyleVersion
) -> tuple[np.ndarray, np.ndarray]:
    """Per battle the model's and the baseline's counts: two (B, 4) integer arrays."""
    model = [_counts(counts, b.model, b.question, b.where, version) for b in battles]
    base = [_counts(counts, baseline, b.question, b.where, version) for b in battles]
    return np.asarray(model), np.asarray(base)


def _spread_check(values: np.ndarray, names: Sequence[str], fix: str) -> None:
    """A column with no spread (or NaN) has no standardised value: name it, and say `fix`."""
    bad = [n for n, ok in zip(names, np.isfinite(values).all(axis=0), strict=True) if not ok]
    if bad:
        raise UserError(
            f"style control: the {', '.join(bad)} feature is the same on every battle (or undefined), so it has "
            f"no standardised value (the reference divides by zero); {fix}"
        )


# --- v0.1 ------------------------------------------------------------------------------------------------


def _v01_battles(
    judged: Sequence[tuple[str, Sequence[JudgmentRow]]], weight: int, version: StyleVersion
) -> list[Battle]:
    """`get_battles_from_row` over the files in order: each row's game 1 then game 2 (`game_battles`)."""
    out = []
    for model, rows in judged:
        found = [
            Battle(model, _question(r, version), o, r.where)
            for r in rows
            for o in game_battles(*r.verdicts, weight=weight)
        ]
        if not found:
            raise UserError(f"arena-hard: no judged game for {model} (every verdict is missing)")
        out += found
    return out


def _v01_fit(X: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """`fit_bt`: scikit-learn's logistic regression with its defaults (L2, C = 1, lbfgs, tol 1e-4, max_iter 100)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # the reference takes the fit where it stops
        return np.asarray(LogisticRegression(fit_intercept=False).fit(X, Y).coef_[0])


def _v01_elo(coef: np.ndarray) -> np.ndarray:
    """`fit_bt`'s Elos: 400 coef + 1000, moved so that the baseline (column 0) sits at 1114."""
    elo = 400 * coef + 1000
    return elo + (1114 - elo[0])


def _v01_win_rates(elo: np.ndarray, names: Sequence[str]) -> list[float]:
    """`predict_win_rate`'s column for the baseline (names[0]), in Python floats as it computes them: its loop over
    the sorted names writes each pair's rate twice and the later write stays, so a model named before the baseline
    gets 1 minus the baseline's rate against it."""
    e0 = float(elo[0])
    return [
        1 - 1 / (1 + 10 ** ((float(e) - e0) / 400)) if m < names[0] else 1 / (1 + 10 ** ((e0 - float(e)) / 400))
        for m, e in zip(names, elo, strict=True)
    ]


def _v01_scores(
    judged: Sequence[tuple[str, Sequence[JudgmentRow]]],
    counts: Counts,
    *,
    baseline: str,
    control: tuple[str, ...],
    category: str,
    weight: int,
    rounds: int,
    seed: int,
    version: StyleVersion,
) -> StyleFit:
    """`show_result.py --style-control` (or the length / markdown variants), v0.1; `category` is v2.0's."""
    battles = _v01_battles(judged, weight, version)
    models = [baseline] + list(dict.fromkeys(b.model for b in battles))  # (P,) pd.unique's order: baseline first
    col = {m: i for i, m in enumerate(models)}
    n, p = len(battles), len(models)
    m_counts, b_counts = _style_pairs(battles, counts, baseline, version)  # (N, 4) each
    keep = [FEATURES.index(f) for f in control]
    a, b = np.tile(b_counts[:, keep].T, 2), np.tile(m_counts[:, keep].T, 2)  # (K, 2N): A the baseline, B the model
    diff = (a - b).astype(float) / ((a + b).astype(float) + 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        style = ((diff - diff.mean(axis=1)[:, None]) / diff.std(axis=1)[:, None]).T  # (2N, K)
    _spread_check(style, control, "leave it out with --option control=length or control=markdown")
    X = np.zeros((2 * n, p + len(keep)))  # each battle twice
    X[:, 0] = np.log(10)
    X[np.arange(2 * n), np.tile([col[bt.model] for bt in battles], 2)] = -np.log(10)
    X[:, p:] = style
    outcome = np.array([bt.outcome for bt in battles])
    tie = outcome == 0.5
    Y = np.concatenate([(outcome == 0) | tie, outcome == 0]).astype(float)  # a baseline win; a tie once won, once lost
    coef = _v01_fit(X, Y)
    rng = np.random.RandomState(seed)
    elos = np.full((rounds, p), np.nan)  # (R, P)
    for r in range(rounds):
        idx = rng.randint(0, n, size=n)  # what np.random.choice(range(N), N) draws
        nontie, ties = idx[~tie[idx]], idx[tie[idx]]
        take = np.concatenate([nontie, nontie, ties, ties + n])  # non-ties twice, then each tie as won and as lost
        present = X[take, :p].any(axis=0)
        elos[r] = np.where(present, _v01_elo(_v01_fit(X[take], Y[take])[:p]), np.nan)
    point = _v01_win_rates(_v01_elo(coef[:p]), models)
    low, high = (_v01_win_rates(np.nanpercentile(elos, q, axis=0), models) for q in (2.5, 97.5))
    scores = []
    for i, m in enumerate(models[1:], 1):
        score, lower, upper = (round(x[i] * 100, 2) for x in (point, low, high))  # get_win_rate_column
        interval = (round(lower - score, 1), round(upper - score, 1))
        count = sum(bt.model == m for bt in battles)
        line = f"{m}: score {round(score, 1)} 95% CI {interval}"
        scores.append(StyleScore(m, score, lower, upper, point[i], point[i], count, line))
    coefs = {f: float(c) for f, c in zip(control, coef[p:], strict=True)}
    shown = {V01_COEF_NAMES[f]: round(c, 3) for f, c in coefs.items()}
    return StyleFit(version.reference, scores, coefs, f"Style Coefficients: {shown}", {"interval": 0.95})


# --- v2.0 ------------------------------------------------------------------------------------------------


def _v2_battles(
    judged: Sequence[tuple[str, Sequence[JudgmentRow]]], weight: int, category: str, version: StyleVersion
) -> list[Battle]:
    """`load_judgments` and the category filter: a row with a null game or verdict is dropped, game 2's battles
    (the model as A) come first, then game 1's turned round; only rows of `category` (none is an error naming the
    categories found)."""
    out = []
    for model, rows in judged:
        for r in rows:
            game1, game2 = r.verdicts
            if game1 is None or game2 is None:
                continue
            unknown = [v for v in (game1, game2) if v not in V2_LABELS]
            if unknown:
                raise UserError(f"{r.where}: verdict {unknown[0]!r} is not one of v2.0's {', '.join(V2_LABELS)}")
            if "category" not in r.fields:
                raise UserError(f"{r.where}: no `category` (v2.0 judgment rows name their prompt's category)")
            if r.fields["category"] != category:
                continue
            question = _question(r, version)
            g1, g2 = V2_LABELS[game1], V2_LABELS[game2]
            outcomes = [g2[0]] * (weight if g2[1] else 1) + [1 - g1[0]] * (weight if g1[1] else 1)
            out += [Battle(model, question, o, r.where) for o in outcomes]
    if not out:
        found = sorted({str(r.fields.get("category")) for _, rows in judged for r in rows})
        raise UserError(f"--option category={category}: no judged row of that category (found: {', '.join(found)})")
    return out


def _v2_fit(X: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """`fit_pairwise_model(loss_type="bt")`: (B, D) features, (B,) outcomes -> (D,) coefficients, float32; L-BFGS
    from 0.5 on the summed binary cross-entropy with logits X @ w, `V2_LBFGS`, stopped where it stops."""
    w = torch.nn.Parameter(torch.full((X.shape[1],), 0.5))
    opt = torch.optim.LBFGS([w], **V2_LBFGS)  # type: ignore[arg-type]

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = F.binary_cross_entropy_with_logits(X @ w, y, reduction="sum")
        loss.backward()
        return loss

    with torch.enable_grad():
        opt.step(closure)
    return w.detach()


def _v2_win_rates(coef: torch.Tensor, base: int) -> torch.Tensor:
    """`to_winrate_probabilities`: (R, M) model coefficients -> (R, M) win rates against column `base`, float32."""
    e = torch.exp(coef)
    return e / (e + e[:, base : base + 1])


def _pandas_quantile(values: np.ndarray, q: float) -> float:
    """`DataFrame.quantile(q)` on a column (linear; pandas hands numpy the percentile q * 100)."""
    return float(np.percentile(values.astype(np.float64), q * 100.0))


def _v2_scores(
    judged: Sequence[tuple[str, Sequence[JudgmentRow]]],
    counts: Counts,
    *,
    baseline: str,
    control: tuple[str, ...],
    category: str,
    weight: int,
    rounds: int,
    seed: int,
    version: StyleVersion,
) -> StyleFit:
    """`show_result.py --control-features markdown length`, v2.0 (`control` is always all four features)."""
    battles = _v2_battles(judged, weight, category, version)
    m_counts, b_counts = _style_pairs(battles, counts, baseline, version)
    m, b = torch.tensor(m_counts, dtype=torch.float32), torch.tensor(b_counts, dtype=torch.float32)  # (B, 4)
    f = torch.zeros_like(m)
    f[:, 0] = (m[:, 0] - b[:, 0]) / (m[:, 0] + b[:, 0])
    dm, db = m[:, 1:] / (m[:, :1] + 1), b[:, 1:] / (b[:, :1] + 1)  # markdown densities
    f[:, 1:] = (dm - db) / (dm + db + 1)
    style = (f - torch.mean(f, dim=0)) / torch.std(f, dim=0)  # (B, 4), sample std
    _spread_check(style.numpy(), FEATURES, "v2.0 controls all four together; version=v0.1 can leave some out")
    names = sorted({bt.model.split("/")[-1] for bt in battles} | {baseline})  # (M,) one_hot_encode's columns
    col = {n: i for i, n in enumerate(names)}
    one_hot = torch.zeros(len(battles), len(names))
    rows = torch.arange(len(battles))
    one_hot[rows, torch.tensor([col[bt.model.split("/")[-1]] for bt in battles])] = 1
    one_hot[:, col[baseline]] = -1
    X = torch.cat([one_hot, style], dim=1)  # (B, M + 4)
    y = torch.tensor([bt.outcome for bt in battles], dtype=torch.float32)
    idx = torch.from_numpy(np.random.RandomState(seed).randint(0, len(battles), size=(rounds, len(battles))))
    coefs = torch.stack([_v2_fit(X[i], y[i]) for i in idx])  # (R, M + 4)
    full = _v2_fit(X, y)
    k = len(names)
    rates = _v2_win_rates(coefs[:, :k], col[baseline]).numpy()  # (R, M)
    full_rates = _v2_win_rates(full[None, :k], col[baseline])[0]
    scores = []
    for name in names:
        if name == baseline:
            continue
        med, lo, hi = (_pandas_quantile(rates[:, col[name]], q) for q in (0.5, 0.05, 0.95))
        ci = f"(-{round((med - lo) * 100, 1)} / +{round((hi - med) * 100, 1)})"
        scores.append(
            StyleScore(
                name,
                med * 100,
                lo * 100,
                hi * 100,
                med,
                float(full_rates[col[name]]),
                sum(bt.model.split("/")[-1] == name for bt in battles),
                f"{name}: score {round(med * 100, 1)} 90% CI {ci}",
            )
        )
    median = torch.quantile(coefs[:, k:], 0.5, dim=0)
    coefficients = {f: float(c) for f, c in zip(FEATURES, median, strict=True)}
    shown = ", ".join(f"{c:.4f}" for c in median.tolist())
    method = {"interval": 0.90, "full_fit_coefficients": dict(zip(FEATURES, full[k:].tolist(), strict=True))}
    return StyleFit(version.reference, scores, coefficients, f"Feature Coefs: [{shown}]", method)


def _kahan_mean(values: Sequence[float]) -> float:
    """pandas' grouped mean of a float column (`group_mean`): a compensated (Kahan) sum, then / count."""
    total = compensation = 0.0
    for v in values:
        y = v - compensation
        t = total + y
        compensation = t - total - y
        total = t
    return total / len(values)


def _group_quantile(values: Sequence[float], q: float) -> float:
    """pandas' grouped quantile (`group_quantile`, linear): v[i] + (v[i + 1] - v[i]) * frac at q * (n - 1)."""
    v = sorted(values)
    at = q * (len(v) - 1)
    i, frac = int(at), at % 1
    return v[i] if frac == 0.0 else v[i] + (v[i + 1] - v[i]) * frac


def v2_plain_scores(
    judged: Sequence[tuple[str, Sequence[JudgmentRow]]],
    *,
    baseline: str | None = None,
    category: str = "hard_prompt",
    weight: int = WEIGHT,
    rounds: int = ROUNDS,
    seed: int = SEED,
) -> StyleFit:
    """v2.0's `show_result.py` without --control-features (`print_leaderboard`): no Bradley-Terry fit; each model's
    battles (`load_judgments`, the rows of `category`) resampled with replacement `rounds` times, per round the
    models in sorted order (`groupby("model").sample(frac=1.0, replace=True)`: `choice(n, n)` from numpy's global
    generator, which the reference never seeds; here RandomState(`seed`), its draws after `np.random.seed(seed)`),
    each round's mean score; the score is the mean of the rounds' means (pandas' compensated grouped mean), the 90%
    interval their 5% and 95% grouped quantiles; the baseline printed at 50.0."""
    version = STYLE_VERSIONS["v2.0"]
    base = baseline or V2_BASELINES.get(category)
    battles = _v2_battles(judged, weight, category, version)
    outcomes: dict[str, list[float]] = {}
    for bt in battles:
        outcomes.setdefault(bt.model.split("/")[-1], []).append(bt.outcome)
    names = sorted(outcomes)
    rng = np.random.RandomState(seed)
    means: dict[str, list[float]] = {n: [] for n in names}
    for _ in range(rounds):
        for n in names:
            x = outcomes[n]
            drawn = rng.choice(len(x), size=len(x), replace=True)
            means[n].append(math.fsum(x[i] for i in drawn) / len(x))  # halves and wholes: the sum is exact
    scores = []
    for n in names:
        mean, lo, hi = _kahan_mean(means[n]), _group_quantile(means[n], 0.05), _group_quantile(means[n], 0.95)
        ci = f"(-{round((mean - lo) * 100, 1)} / +{round((hi - mean) * 100, 1)})"
        line = f"{n}: score {round(mean * 100, 1)} 90% CI {ci}"
        scores.append(StyleScore(n, mean * 100, lo * 100, hi * 100, mean, math.nan, len(outcomes[n]), line))
    scores.sort(key=lambda x: -x.win_rate)  # format_confidence_interval: by score, highest first
    reference = "lmarena/arena-hard-auto@196f6b82 show_result.py (no --control-features)"
    method = {"interval": 0.90, "baseline": base, "category": category, "rounds": rounds}
    return StyleFit(reference, scores, {}, f"baseline {base}: score 50.0 90% CI (-0.0 / +0.0)", method)


def _question(r: JudgmentRow, version: StyleVersion) -> str:
    if version.id_field not in r.fields:
        raise UserError(f"{r.where}: no `{version.id_field}`, which style control matches answers by; {LAYOUTS}")
    return str(r.fields[version.id_field])


STYLE_VERSIONS: dict[str, StyleVersion] = {
    "v0.1": StyleVersion(
        "lmarena/arena-hard-auto@0489bf38 show_result.py --style-control",
        "question_id",
        "model_id",
        "conv_metadata",
        by_position=False,
        baseline="gpt-4-0314",  # show_result.py --baseline
        controls=tuple(CONTROLS),
        score=_v01_scores,
    ),
    "v2.0": StyleVersion(
        "lmarena/arena-hard-auto@196f6b82 show_result.py --control-features markdown length",
        "uid",
        "model",
        "metadata",
        by_position=True,
        baseline=V2_BASELINES,
        controls=("markdown,length",),
        score=_v2_scores,
    ),
}


def parse_control(control: str | Sequence[str]) -> str:
    """`markdown,length` (either order, or a list), `length` or `markdown` -> its `CONTROLS` key."""
    parts = control.split(",") if isinstance(control, str) else [str(c) for c in control]
    wanted = {p.strip() for p in parts if p.strip()}
    for key in CONTROLS:
        if wanted == set(key.split(",")):
            return key
    raise UserError(f"--option control={control}: one of {', '.join(CONTROLS)}")


def style_scores(
    judged: Sequence[tuple[str, Sequence[JudgmentRow]]],
    answers: str | Path,
    version: str = "v0.1",
    *,
    control: str | Sequence[str] = "markdown,length",
    baseline: str | None = None,
    category: str = "hard_prompt",
    weight: int = WEIGHT,
    rounds: int = ROUNDS,
    seed: int = SEED,
) -> StyleFit:
    """The style-controlled scores of the judged models (`leaderboards.arena_hard.read_judgment_rows`, in the order
    the reference globs the files: the bootstrap draws rows by position) with their answers' style metadata from the
    model_answer folder `answers`. `baseline` defaults to v0.1's `gpt-4-0314` (show_result's --baseline) or v2.0's
    baseline of `category` (hard_prompt, show_result's --category)."""
    if version not in STYLE_VERSIONS:
        hint = did_you_mean(version, list(STYLE_VERSIONS))
        raise UserError(f"--option version={version}: one of {', '.join(STYLE_VERSIONS)}{hint}")
    rules = STYLE_VERSIONS[version]
    key = parse_control(control)
    if key not in rules.controls:
        raise UserError(
            f"--option control={control}: v2.0's show_result scores only markdown,length (for length or markdown "
            "alone it slices the whole design matrix: it crashes or mislabels the models); use version=v0.1"
        )
    if baseline is None:
        default = rules.baseline
        if isinstance(default, str):
            baseline = default
        elif category in default:
            baseline = default[category]
        else:
            raise UserError(
                f"--option category={category}: {version} names a baseline for {', '.join(default)}; give "
                "--option baseline=MODEL for another"
            )
    judged_as_baseline = [m for m, _ in judged if m.split("/")[-1] == baseline.split("/")[-1]]
    if judged_as_baseline:
        raise UserError(f"--from: {judged_as_baseline[0]} is the baseline ({baseline}); leave its judgment file out")
    empty = [m for m, rows in judged if not rows]
    if empty:
        raise UserError(f"arena-hard: no judged row for {', '.join(empty)}")
    counts = read_style_metadata(answers, rules)
    return rules.score(
        judged,
        counts,
        baseline=baseline,
        control=CONTROLS[key],
        category=category,
        weight=weight,
        rounds=rounds,
        seed=seed,
        version=rules,
    )
