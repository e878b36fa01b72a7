"""Pairwise win rate against reference answers, raw and length-controlled, with bootstrap intervals.

Per item the judge gives a preference p in [0, 1] for the policy's answer over the reference answer (1: policy
better, 0.5: a tie, 0: reference better; a pairwise judge's probability is kept as it is). The raw win rate is the
mean p over the items the judge did not abstain on (p is NaN: counted and reported, left out, never a loss).

Length-controlled win rate (Dubois et al. 2024, "Length-Controlled AlpacaEval", arXiv 2404.04475, section 3; the
`length_controlled_v1` GLM of alpaca_eval's `metrics/glm_winrate.py`). AlpacaEval 2 fits, per evaluated model, a
logistic regression of the preference on

    logit P(policy preferred) = theta + phi * tanh(delta_len / std(delta_len)) + psi * instruction_difficulty

where delta_len is the difference of the two answers' lengths in characters and std its standard deviation over the
items (sample std), and reports the mean prediction with the length term set to zero ("what would the preference
be if both answers had the same length?"). Decisions written down here:

- instruction difficulty: AlpacaEval's per-instruction term is a fixed table estimated across its leaderboard's
  models (downloaded, AlpacaEval's 805 instructions only). With one policy per fit it is not identifiable, so this
  GLM leaves it out: the model is theta + phi * tanh(...), and the length-controlled rate is sigmoid(theta);
- soft labels: p enters the likelihood as a probability (each item counts p times as a win and 1 - p times as a
  loss), as AlpacaEval does for its probability-valued annotations;
- regularisation: AlpacaEval fits with a cross-validated L1 penalty and pulls the weights toward two "gamed"
  baselines (also downloaded data). Here a small L2 penalty (`ridge`, on both weights) keeps the fit finite when
  length separates wins from losses perfectly, and is otherwise negligible;
- interval: percentile bootstrap over items (resampled items, the standardisation and the fit redone on each).

That is the toolkit's own GLM (`fit_length_glm`), used when no instruction-difficulty table is given. With one
(`read_lc_table`: AlpacaEval's df_gamed.csv or a CSV of the same columns), `alpaca_lc_win_rate` computes the LC win
rate as alpaca_eval's `length_controlled_v1` does, to the digit (see the section at the end of this module);
`resolve_lc` decides which from the user's options, and the result names it.
"""

from __future__ import annotations

import csv
import inspect
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefalign.errors import UserError, did_you_mean
from prefalign.registry import Table
from prefalign.stats import bootstrap_statistic

RIDGE = 1e-2
"""L2 penalty on (theta, phi) of the length-controlled GLM (see the module docstring)."""


def pointwise_preference(policy: float, reference: float) -> float:
    """1 / 0.5 / 0 as the policy's score is above / equal to / below the reference's; NaN when either is NaN."""
    if not (math.isfinite(policy) and math.isfinite(reference)):
        return math.nan
    return 1.0 if policy > reference else 0.5 if policy == reference else 0.0


def both_orders(p_policy_first: float, p_reference_first: float) -> float:
    """A pairwise judge asked in both orders: P(policy better) averaged over positions, NaN when either is NaN.

    p_policy_first = P(A) with the policy as A; p_reference_first = P(A) with the reference as A. E.g. a judge that
    always answers A (P(A) = 1 in both orders) gives 0.5: no preference, only position bias."""
    if not (math.isfinite(p_policy_first) and math.isfinite(p_reference_first)):
        return math.nan
    return 0.5 * (p_policy_first + 1.0 - p_reference_first)


@dataclass
class LengthGLM:
    theta: float
    """The model term: logit of the preference at equal lengths."""
    phi: float
    """The length term's weight (on tanh of the standardised length difference)."""
    std: float
    """Standard deviation of the length differences the feature was standardised by (0: all equal)."""

    @property
    def lc_win_rate(self) -> float:
        return _sigmoid(self.theta)


def _sigmoid(z: float) -> float:
    return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))


def fit_length_glm(prefs: Sequence[float], len_diff: Sequence[float], ridge: float = RIDGE) -> LengthGLM:
    """Fit logit P = theta + phi * tanh(d / std(d)) to soft preferences by penalised maximum likelihood (Newton).

    prefs: (N,) preferences in [0, 1], no NaN; len_diff: (N,) len(policy) - len(reference) in characters.
    """
    import numpy as np  # lazy: numpy, only for the length-controlled fit

    p = np.asarray(prefs, dtype=np.float64)  # (N,)
    d = np.asarray(len_diff, dtype=np.float64)  # (N,)
    std = float(d.std(ddof=1)) if len(d) > 1 else 0.0
    x = np.tanh(d / std) if std > 0 else np.zeros_like(d)
    X = np.stack([np.ones_like(x), x], axis=1)  # (N, 2): model term, length term
    w = np.zeros(2)
    for _ in range(100):
        s = 1.0 / (1.0 + np.exp(-(X @ w)))  # (N,)
        grad = X.T @ (s - p) + ridge * w  # (2,)
        hess = (X * (s * (1 - s))[:, None]).T @ X + ridge * np.eye(2)  # (2, 2)
        step = np.linalg.solve(hess, grad)
        w -= step
        if float(np.abs(step).max()) < 1e-10:
            break
    return LengthGLM(float(w[0]), float(w[1]), std)


@dataclass
class WinRate:
    win_rate: float | None
    lc_win_rate: float | None
    ci95: tuple[float, float] | None
    lc_ci95: tuple[float, float] | None
    n: int
    """Items judged (abstentions left out)."""
    abstained: int
    wins: int
    ties: int
    losses: int
    length_coef: float | None
    mean_len_diff: float | None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def pandas_mean(values: Sequence[float]) -> float:
    """The mean as alpaca_eval's `get_winrate` takes it (`pd.Series.mean`: numpy's pairwise sum over the count), so
    a win rate over hundreds of items equals its number to the last digit (a plain left-to-right sum differs there in
    the last one or two)."""
    import numpy as np  # lazy, as for the length-controlled fit

    return float(np.asarray(values, dtype=np.float64).sum()) / len(values)


def pandas_sem(values: Sequence[float]) -> float:
    """The standard error as `get_winrate` takes it (`pd.Series.sem`: the variance with ddof 1 from numpy's pairwise
    sums, sqrt(var) / sqrt(n)); NaN for fewer than two values."""
    import numpy as np

    v = np.asarray(values, dtype=np.float64)
    if len(v) < 2:
        return math.nan
    var = ((v.sum() / len(v) - v) ** 2).sum() / (len(v) - 1)
    return float(np.sqrt(var) / np.sqrt(np.float64(len(v))))


def discrete_win_rate(prefs: Sequence[float]) -> float:
    """alpaca_eval's `discrete_win_rate` (`ZeroOneScoringRule`): each preference (P(model better), no NaN) rounded to a
    win (1) or a loss (0), an exact draw (0.5) kept, then averaged as `get_winrate` averages."""
    return pandas_mean([0.5 if p == 0.5 else float(p > 0.5) for p in prefs])


def win_rates(
    prefs: Sequence[float],
    policy_lens: Sequence[int],
    reference_lens: Sequence[int],
    bootstrap: int = 1000,
    seed: int = 0,
    ridge: float = RIDGE,
) -> WinRate:
    """Raw and length-controlled win rates with percentile bootstrap intervals over items; NaN preferences are
    abstentions, counted and left out. E.g. prefs [1, 0.5, nan, 0] -> win rate 0.5 over 3 items, 1 abstained."""
    keep = [i for i, v in enumerate(prefs) if math.isfinite(v)]
    p = [float(prefs[i]) for i in keep]
    d = [float(policy_lens[i] - reference_lens[i]) for i in keep]
    n = len(p)
    counts = {
        "wins": sum(v > 0.5 for v in p),
        "ties": sum(v == 0.5 for v in p),
        "losses": sum(v < 0.5 for v in p),
    }
    if n == 0:
        return WinRate(None, None, None, None, 0, len(prefs), **counts, length_coef=None, mean_len_diff=None)
    glm = fit_length_glm(p, d, ridge)

    def ci(stat: Any) -> tuple[float, float] | None:
        if bootstrap <= 0:
            return None
        lo, hi = bootstrap_statistic(stat, n, bootstrap, seed)
        return None if math.isnan(lo) else (lo, hi)

    return WinRate(
        win_rate=pandas_mean(p),
        lc_win_rate=glm.lc_win_rate,
        ci95=ci(lambda idx: sum(p[i] for i in idx) / len(idx)),
        lc_ci95=ci(lambda idx: fit_length_glm([p[i] for i in idx], [d[i] for i in idx], ridge).lc_win_rate),
        n=n,
        abstained=len(prefs) - n,
        **counts,
        length_coef=glm.phi,
        mean_len_diff=sum(d) / n,
    )


# ---------------------------------------------------------------------------------------------------------
# AlpacaEval 2's own length-controlled GLM, to the letter (`--option lc_table=FILE`)
# ---------------------------------------------------------------------------------------------------------
#
# tatsu-lab/alpaca_eval @ cd543a14, src/alpaca_eval/metrics/glm_winrate.py, `get_length_controlled_winrate` with
# the GLMs of its `GLM_INFO`. Per evaluated model (one annotations.json), with no intercept:
#
#     logit P(model preferred) = w_len * tanh(std_delta_len) + w_diff * instruction_difficulty + w_base * 1
#
# - std_delta_len = (len(output_1) - len(output_2)) / sample std of that difference over all the model's rows
#   (characters; output_1 is the baseline's, so the sign is the reference's, the opposite of `fit_length_glm`'s);
# - instruction_difficulty: a fixed per-instruction number from a table (AlpacaEval downloads `df_gamed.csv` from
#   its hub dataset; here the user's file, `read_lc_table`). An annotation's instruction is its row position in the
#   annotations file (pandas' `reset_index` on the file as read), or its own `index` field where it has one;
# - the last term is `not_gamed_baseline`, 1 for the evaluated model's rows;
# - soft labels: preference p = annotation - 1 (a legacy 0 read as a draw, 0.5) enters as two rows, labelled 1 with
#   weight p and labelled 0 with weight 1 - p; rows without a preference are left out of the fit, not of the mean;
# - `length_controlled_v1` adds the table's rows (two "gamed" baselines: the baseline model prompted to be verbose
#   and to be concise, `not_gamed_baseline` False, so no model term) to the fit with weight 0.2 / 2 each: rows where
#   only the length changed, which anchor w_len so that a longer answer alone cannot buy a higher LC win rate;
# - the fit is sklearn's LogisticRegressionCV: L1 penalty, liblinear, no intercept, its 10 default Cs, chosen by
#   5-fold GroupKFold (an item's two rows in one fold) on the weighted soft log loss (predictions clipped to
#   [1e-15, 1 - 1e-15], the mean over the fold's rows), random_state 123, then refitted on everything;
# - the LC win rate is 100 x the mean prediction over every row of the model with the length term at zero
#   (sigmoid(w_diff * difficulty + w_base)), its standard error 100 x that prediction's standard error of the mean;
# - a model scored against itself (generator_1 == generator_2) gets 50 without a fit.
#
# Not reproduced: writing the weights CSV, `predict_winrate` against another baseline, the warning on a large change.

ALPACA_EVAL_REF = "tatsu-lab/alpaca_eval@cd543a14 src/alpaca_eval/metrics/glm_winrate.py"
CV_FOLDS = 5
"""GLM_INFO[...]['kwargs']['n_splits']: GroupKFold folds choosing the L1 strength."""
CV_RANDOM_STATE = 123
"""fit_LogisticRegressionCV's random_state (liblinear's coordinate order)."""
LOG_LOSS_CLIP = 1e-15
"""glm_winrate.logloss: predictions clipped to [eps, 1 - eps] in the CV score."""
# the fitted weights' names, as the reference's design matrix (patsy) names its columns, in its order
LEN_TERM = "np.tanh(std_delta_len)"
DIFFICULTY_TERM = "instruction_difficulty"
BASELINE_TERM = "not_gamed_baseline.astype(float)"


@dataclass(frozen=True)
class AlpacaGLM:
    """One GLM of alpaca_eval's `GLM_INFO`."""

    summary: str
    difficulty: bool
    """Whether the formula has the instruction_difficulty term (needs a table)."""
    baseline_lambda: float | None
    """regularize_to_baseline_lambda: the table's rows join the fit with weight lambda / 2 (two gamed baselines);
    None: they do not."""


ALPACA_GLMS: Table[AlpacaGLM] = Table(
    "length-controlled GLM",
    {
        "length_controlled_v1": AlpacaGLM(
            "AlpacaEval 2's LC win rate: length, instruction difficulty, regularised toward the gamed baselines",
            difficulty=True,
            baseline_lambda=0.2,
        ),
        "length_controlled_noreg": AlpacaGLM(
            "the same formula without the gamed baselines' rows", difficulty=True, baseline_lambda=None
        ),
        "length_controlled_minimal": AlpacaGLM(
            "length term and model term only (no table needed)", difficulty=False, baseline_lambda=None
        ),
    },
    columns=("summary", "difficulty", "baseline_lambda"),
)

LC_TABLE_COLUMNS = ("index", "instruction_difficulty")
"""Columns every LC table has: the instruction's position in AlpacaEval's set (0-804) and its difficulty."""
LC_BASELINE_COLUMNS = ("preference", "std_delta_len", "not_gamed_baseline")
"""The gamed baselines' rows, which length_controlled_v1 fits with: preference in [0, 1] (empty: none), the
standardised length difference, and False (True rows join with weight 1)."""


@dataclass(frozen=True)
class LCTable:
    """An instruction-difficulty table (`read_lc_table`), optionally with the gamed baselines' rows."""

    path: str
    difficulty: dict[int, float]
    """Instruction index -> difficulty (the first row of each index)."""
    by_row: dict[int, float]
    """Row number (0-based, data rows) -> difficulty, for the first row of each index: where the reference looks
    an instruction up (`instruction_difficulty[g]` on the de-duplicated column keeps the file's row labels)."""
    baseline_rows: list[tuple[float, float, float, bool]] | None
    """(preference or NaN, std_delta_len, instruction_difficulty, not_gamed_baseline) per row, in file order;
    None when the file has no such columns."""

    def lookup(self, index: int) -> float:
        """The difficulty the reference uses for instruction `index`; an error where the file's layout would make
        it read another instruction's (or none)."""
        if index not in self.difficulty:
            raise UserError(f"{self.path}: no instruction_difficulty for instruction index {index}")
        if self.by_row.get(index) != self.difficulty[index]:
            raise UserError(
                f"{self.path}: the reference reads instruction {index}'s difficulty from row {index} of the file "
                f"(the first row of each index keeps its row number), where this file has another instruction's; "
                "order the file so its first rows are instructions 0, 1, 2, ... (as AlpacaEval's df_gamed.csv is)"
            )
        return self.difficulty[index]


def _number(text: str | None, path: str, row: int, column: str, problems: list[str], empty_nan: bool = False) -> float:
    if text is None or not text.strip():
        if empty_nan:
            return math.nan
        problems.append(f"{path} row {row}: empty {column}")
        return math.nan
    try:
        value = float(text)
    except ValueError:
        problems.append(f"{path} row {row}: {column} {text!r} is not a number")
        return math.nan
    if not math.isfinite(value) and not empty_nan:
        problems.append(f"{path} row {row}: {column} {text!r} is not finite (the reference's design matrix drops it)")
    return value


def read_lc_table(path: str) -> LCTable:
    """Read an LC table: a CSV with a header naming at least `index` (int) and `instruction_difficulty`, as
    AlpacaEval's `instruction_difficulty.csv`; and, for length_controlled_v1, also `preference`, `std_delta_len` and
    `not_gamed_baseline` (True/False), as its `df_gamed.csv` (whose `model` column, and any other, is ignored).
    Every problem is reported at once. Numbers are read with `float`, which is what pandas' read_csv gives for them
    (checked on 70,000 decimals of up to 20 digits: all the same)."""
    p = Path(path)
    if not p.is_file():
        raise UserError(f"no such file: {path} (an LC table: a CSV with columns {', '.join(LC_TABLE_COLUMNS)})")
    with p.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        header = [h.strip() for h in reader.fieldnames or []]
        reader.fieldnames = header
        rows = list(reader)
    missing = [c for c in LC_TABLE_COLUMNS if c not in header]
    if missing:
        raise UserError(
            f"{path}: no column {', '.join(missing)}; an LC table is a CSV with a header and columns "
            f"{', '.join(LC_TABLE_COLUMNS)} (AlpacaEval's instruction_difficulty.csv or df_gamed.csv)"
        )
    has_baselines = all(c in header for c in LC_BASELINE_COLUMNS)
    problems: list[str] = []
    difficulty: dict[int, float] = {}
    by_row: dict[int, float] = {}
    baseline_rows: list[tuple[float, float, float, bool]] = []
    for i, r in enumerate(rows):
        raw = (r.get("index") or "").strip()
        if not raw.lstrip("-").isdigit():
            problems.append(f"{path} row {i}: index {raw!r} is not an integer")
            continue
        d = _number(r.get("instruction_difficulty"), path, i, "instruction_difficulty", problems)
        if int(raw) not in difficulty:
            difficulty[int(raw)] = by_row[i] = d
        if has_baselines:
            pref = _number(r.get("preference"), path, i, "preference", problems, empty_nan=True)
            if math.isfinite(pref) and not 0 <= pref <= 1:
                problems.append(f"{path} row {i}: preference {pref} is outside [0, 1] (df_gamed.csv's scale)")
            sdl = _number(r.get("std_delta_len"), path, i, "std_delta_len", problems)
            flag = (r.get("not_gamed_baseline") or "").strip().lower()
            if flag not in ("true", "false"):
                problems.append(f"{path} row {i}: not_gamed_baseline must be True or False, got {flag!r}")
            baseline_rows.append((pref, sdl, d, flag == "true"))
    if problems:
        more = f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else ""
        raise UserError(f"{path}: {len(problems)} problem(s):\n  " + "\n  ".join(problems[:20]) + more)
    if not difficulty:
        raise UserError(f"{path}: no rows")
    return LCTable(path, difficulty, by_row, baseline_rows if has_baselines else None)


LC_GLM_CHOICES = ("auto", "toolkit", *ALPACA_GLMS.names())
"""What `lc_glm` takes: auto (length_controlled_v1 with a table, else the toolkit's GLM), toolkit (`fit_length_glm`),
or one of alpaca_eval's GLMs."""


def resolve_lc(glm: str, table: str | None, glm_flag: str, table_flag: str) -> tuple[str, LCTable | None]:
    """(the GLM to use: 'toolkit' or an ALPACA_GLMS name, its table read) from what the user gave; the flags name
    the options in messages (`--option lc_glm=` for `bench score`, `--lc-glm ` for `eval policy`)."""
    if glm not in LC_GLM_CHOICES:
        raise UserError(
            f"{glm_flag}{glm}: not a length-controlled GLM{did_you_mean(glm, LC_GLM_CHOICES)}; one of "
            f"{', '.join(LC_GLM_CHOICES)}"
        )
    if glm == "auto":
        glm = "length_controlled_v1" if table else "toolkit"
    needs_table = glm != "toolkit" and ALPACA_GLMS[glm].difficulty
    if table and not needs_table:
        raise UserError(f"{table_flag}{table}: {glm} uses no instruction-difficulty table; leave it out")
    if needs_table and not table:
        raise UserError(
            f"{glm_flag}{glm} needs an instruction-difficulty table: {table_flag}FILE (a CSV with columns "
            f"{', '.join(LC_TABLE_COLUMNS)}; length_controlled_v1 also {', '.join(LC_BASELINE_COLUMNS)}, as "
            "AlpacaEval's df_gamed.csv)"
        )
    if table and not Path(table).is_file():
        raise UserError(f"{table_flag}{table}: no such file (a CSV with columns {', '.join(LC_TABLE_COLUMNS)})")
    read = read_lc_table(table) if table else None
    if read is not None and ALPACA_GLMS[glm].baseline_lambda is not None and read.baseline_rows is None:
        raise UserError(
            f"{table_flag}{table}: {glm} fits with the gamed baselines' rows, which this table lacks (columns "
            f"{', '.join(LC_BASELINE_COLUMNS)}, as AlpacaEval's df_gamed.csv); with a difficulty-only table use "
            f"{glm_flag}length_controlled_noreg"
        )
    return glm, read


@dataclass
class AlpacaLC:
    """AlpacaEval's length-controlled numbers for one model (fractions; the reference prints them x 100)."""

    glm: str
    lc_win_rate: float
    lc_standard_error: float
    weights: dict[str, float]
    """The fitted weights by the reference's term names (all 0 for a model scored against itself)."""
    C: float | None
    """The inverse L1 strength the cross-validation chose (None: no fit)."""

    def describe(self, table: str | None) -> dict[str, Any]:
        """What the record says about how the LC win rate was computed."""
        return {"glm": self.glm, "reference": ALPACA_EVAL_REF, "table": table, "weights": self.weights, "C": self.C}


def _soft_log_loss(y_true: Any, y_pred: Any, true_prob: Any, true_weight: Any = None) -> float:
    """The CV score of the reference (glm_winrate.logloss_continuous): the duplicated rows' labels turned back into
    the soft target p, the log loss of the clipped prediction, times the item's weight, averaged over the rows.
    Each argument (2N',): a fold's rows (y_pred: P(label 1); true_prob: each row's own label's probability)."""
    import numpy as np

    target = np.where(np.asarray(y_true) == 1, true_prob, 1 - np.asarray(true_prob))
    q = np.clip(y_pred, LOG_LOSS_CLIP, 1 - LOG_LOSS_CLIP)
    loss = target * np.log(q) + (1 - target) * np.log(1 - q)
    if true_weight is not None:
        loss = loss * true_weight
    return float(-np.mean(loss))


def _fit_soft_logistic_cv(X: Any, p: Any, weight: Any) -> Any:
    """sklearn's LogisticRegressionCV as fit_LogisticRegressionCV calls it with soft labels: X (N, F) features,
    p (N,) preferences in [0, 1], weight (N,) or None. Each item becomes two rows (label 1 weighted p, label 0
    weighted 1 - p, times the item's weight), kept in one CV fold by their group. Returns the fitted model."""
    import numpy as np  # lazy, as sklearn: only a table-driven LC fit needs them (sklearn takes ~1 s to import)
    from sklearn import config_context
    from sklearn.linear_model import LogisticRegressionCV
    from sklearn.metrics import make_scorer
    from sklearn.model_selection import GroupKFold

    n = len(p)
    X2 = np.concatenate([X, X])  # (2N, F): the label-1 copies, then the label-0 copies
    y2 = np.concatenate([np.ones(n, dtype=np.int64), np.zeros(n, dtype=np.int64)])  # (2N,)
    prob2 = np.concatenate([p, 1 - p])  # (2N,): each copy's own label's probability
    weight2 = None if weight is None else np.concatenate([weight, weight])  # (2N,)
    params = inspect.signature(LogisticRegressionCV).parameters
    # L1: `penalty="l1"` until sklearn 1.8 deprecated it for `l1_ratios=(1,)` (the same liblinear fit)
    l1: dict[str, Any] = {"l1_ratios": (1,)} if params["penalty"].default == "deprecated" else {"penalty": "l1"}
    if "use_legacy_attributes" in params:  # sklearn >= 1.8: keep the attributes it had (silences its warning)
        l1["use_legacy_attributes"] = True
    score_params = {"true_prob": prob2} | ({} if weight2 is None else {"true_weight": weight2})
    with config_context(enable_metadata_routing=True):  # the scorer's targets and weights reach each fold
        scoring = make_scorer(_soft_log_loss, response_method="predict_proba", greater_is_better=False)
        model = LogisticRegressionCV(
            cv=GroupKFold(n_splits=CV_FOLDS),
            scoring=scoring.set_score_request(true_prob=True, true_weight=True),
            solver="liblinear",
            dual=False,
            fit_intercept=False,
            random_state=CV_RANDOM_STATE,
            **l1,
        )
        model.set_fit_request(sample_weight=True)
        model.fit(
            X2,
            y2,
            sample_weight=prob2 if weight2 is None else prob2 * weight2,
            groups=np.concatenate([np.arange(n), np.arange(n)]),
            **score_params,
        )
    return model


def alpaca_lc_win_rate(
    prefs: Sequence[float],
    output_1_lens: Sequence[int],
    output_2_lens: Sequence[int],
    indices: Sequence[int],
    glm: str = "length_controlled_v1",
    table: LCTable | None = None,
    against_itself: bool = False,
) -> AlpacaLC:
    """AlpacaEval's length-controlled win rate of one model, as `get_length_controlled_winrate(annotations,
    glm_name=glm)` computes it (see the section comment above).

    prefs: (N,) preference of output_2 (the model) in [0, 1], NaN where none; output_1_lens, output_2_lens: (N,)
    characters of the baseline's and the model's answers; indices: (N,) each row's instruction index into `table`.
    """
    import numpy as np

    spec = ALPACA_GLMS[glm]
    terms = [LEN_TERM, DIFFICULTY_TERM, BASELINE_TERM] if spec.difficulty else [LEN_TERM, BASELINE_TERM]
    if (spec.difficulty or spec.baseline_lambda is not None) and table is None:
        raise UserError(f"{glm} needs an instruction-difficulty table (`read_lc_table`)")
    if spec.baseline_lambda is not None and table is not None and table.baseline_rows is None:
        raise UserError(f"{glm} fits with the gamed baselines' rows, which {table.path} lacks")
    n = len(prefs)
    if against_itself:  # the reference skips the fit: every prediction is 1/2 by construction
        return AlpacaLC(glm, 0.5, 0.0, dict.fromkeys(terms, 0.0), None)
    delta = np.asarray(output_1_lens, dtype=np.float64) - np.asarray(output_2_lens, dtype=np.float64)  # (N,)
    judged = sum(math.isfinite(x) for x in prefs)
    if judged < CV_FOLDS or not delta.std() > 0:
        raise UserError(
            f"{glm}: {judged} judged item(s) and {'no' if not delta.std() > 0 else 'some'} spread in the length "
            f"differences; alpaca_eval's fit needs at least {CV_FOLDS} (its {CV_FOLDS}-fold cross-validation) and "
            "answers of differing lengths"
        )
    std_delta_len = delta / delta.std(ddof=1)  # (N,)
    columns = [np.tanh(std_delta_len)]
    if spec.difficulty:
        assert table is not None
        columns.append(np.array([table.lookup(int(i)) for i in indices], dtype=np.float64))
    columns.append(np.ones(n))
    X = np.stack(columns, axis=1)  # (N, F): the model's rows
    p = np.asarray(prefs, dtype=np.float64)  # (N,)
    weight = None
    if spec.baseline_lambda is not None:
        assert table is not None and table.baseline_rows is not None
        rows = table.baseline_rows
        base = [
            np.tanh([r[1] for r in rows]),
            *([np.array([r[2] for r in rows])] if spec.difficulty else []),
            np.array([float(r[3]) for r in rows]),
        ]
        X = np.concatenate([np.stack(base, axis=1), X])  # (M + N, F): the table's rows first, as the reference
        p = np.concatenate([[r[0] for r in rows], p])
        flags = np.array([r[3] for r in rows] + [True] * n)
        weight = flags.astype(np.float64) + (spec.baseline_lambda * ~flags).astype(np.float64) / 2
    keep = np.isfinite(p)
    model = _fit_soft_logistic_cv(X[keep], p[keep], None if weight is None else weight[keep])
    X_test = np.stack([np.zeros(n), *columns[1:]], axis=1)  # (N, F): the length term at zero
    pred = model.predict_proba(X_test)[:, 1]  # (N,)
    return AlpacaLC(
        glm,
        float(pred.mean()),
        float(pred.std(ddof=1) / np.sqrt(n)),
        {t: float(w) for t, w in zip(terms, model.coef_[0], strict=True)},
        float(model.C_[0]),
    )
