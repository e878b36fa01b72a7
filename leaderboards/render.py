"""Render the leaderboard from records: a static HTML page with a tab per benchmark, Markdown, and PNG charts.

For each (model, benchmark) the newest complete record is shown (the newest partial one only when no complete one
exists). The page opens on an overview (every model's headline per benchmark, and a chart of them); each
benchmark's tab shows, per model, every number its record holds:

- the headline and the sections that have a value (a section no shown record has is left out, not shown blank);
- the 95% bootstrap interval of the headline and of every subset's score, where the record has them
  (`scores.intervals`, `intervals.py`; records written before them show none);
- the scorer (name and kind: pointwise, pairwise, reference, listwise), its settings, and for generative scorers the
  cost per scored item (generated tokens, seconds) and abstentions;
- runs that are partial (invalid rows or failed scores skipped) or limited to the first examples, marked `*`
  with their counts;
- the benchmark's own breakdowns, whenever the record has them: per subset with its count (RM-Bench: per domain
  with hard / normal / easy and the 3x3 style matrix, also when one domain's file was scored; JudgeBench: per
  source; RewardBench 2: per subset, with the Ties terms), and every table or number under `scores.extra`;
- the run details (data, split, hash, tie policy, counts, versions, git commit) and a link to the record file,
  copied next to the page under `records/`.

Each benchmark gets a chart of whatever numbers exist (headline and sections; else its subsets; RM-Bench's per
domain difficulty levels as a second panel); a benchmark with no number at all gets no chart, never an empty one.
The page is self-contained (inline CSS and a few lines of JS for the tabs and for sorting by a clicked column);
the charts are PNG files beside it.
"""

from __future__ import annotations

import html
import math
import re
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prefalign.errors import UserError
from prefalign.files import write_text

from .benchmarks import BENCHMARKS
from .records import DEFAULT_RECORDS_DIR, Record, fmt_interval, fmt_score, intervals_of, load_records

DEFAULT_SITE_DIR = Path("leaderboards") / "site"
"""Where rendered files go when no directory is given (relative to the working directory)."""
TITLE = "Reward model leaderboard"
MARK = "*"
FOOTNOTE = (
    f"{MARK} partial run (invalid rows or failed scores skipped) or limited to the first examples; "
    "the Run column gives the counts."
)
SUBSET_LABELS = {
    "rewardbench": "subset",
    "rewardbench2": "subset",
    "rm-bench": "domain",
    "judgebench": "source",
    "pairs": "source",
    "suite": "task family",
    "agreement": "category",
}
"""What a benchmark's `scores.subsets` are called in its breakdown table (default: subset)."""
CI = "95% CI"
"""The column of a score's bootstrap interval (`scores.intervals`): beside the headline and each subset's score."""
HIDDEN_SETTINGS = frozenset({"model", "weights", "reference_weights", "template", "answers"})
"""Scorer settings left out of the Settings column (the model is the row; fingerprints and prompt templates are
long): the record file, linked on every row, has them all."""


# --- which records are shown ------------------------------------------------------------------------------


@dataclass
class Board:
    """The leaderboard as data: the benchmarks (table order) and per model the shown record of each."""

    benchmarks: list[str]
    rows: list[tuple[str, dict[str, Record]]]  # (model, benchmark -> record), best mean headline first
    policy: list[Record] = field(default_factory=list)
    """Policy records (section "policy", `policy_bench.py`): the newest per policy, set, data and judge; they
    have their own tab and stay out of the reward-model overview."""

    def records(self, benchmark: str) -> list[Record]:
        """The shown records of one benchmark, best headline first (records without one last)."""
        recs = [r[benchmark] for _, r in self.rows if benchmark in r]
        return sorted(recs, key=lambda r: (r.headline is None, -(r.headline or 0.0), r.model))


def _better(new: Record, old: Record | None) -> bool:
    if old is None:
        return True
    if new.partial != old.partial:
        return not new.partial  # a complete record beats a partial one, whatever their dates
    return new.date >= old.date


def build_board(records: list[Record]) -> Board:
    """Pick the shown record per (model, benchmark) and order benchmarks (table order) and models."""
    shown: dict[str, dict[str, Record]] = {}
    policy: dict[tuple[str, ...], Record] = {}
    for rec in records:
        if rec.section == POLICY_SECTION:
            key = (rec.model, rec.benchmark, str(rec.settings.get("data")), _judge_text(rec))
            if _better(rec, policy.get(key)):
                policy[key] = rec
    records = [r for r in records if r.section != POLICY_SECTION]
    for rec in records:  # keyed by section: the benchmark's name, or the section its records name
        per_model = shown.setdefault(rec.model, {})
        if _better(rec, per_model.get(rec.section)):
            per_model[rec.section] = rec
    benches = {b for m in shown.values() for b in m}
    order = [b for b in BENCHMARKS.names() if b in benches] + sorted(benches - set(BENCHMARKS.names()))

    def rank(item: tuple[str, dict[str, Record]]) -> tuple[float, str]:
        heads = [h for r in item[1].values() if (h := r.headline) is not None]
        return (-(sum(heads) / len(heads)) if heads else 1.0, item[0])

    shown_policy = sorted(policy.values(), key=lambda r: (r.benchmark, r.headline is None, -(r.headline or 0.0)))
    return Board(order, sorted(shown.items(), key=rank), shown_policy)


# --- tables as data (rendered to HTML and Markdown) -------------------------------------------------------


@dataclass
class Cell:
    text: str
    sort: float | None = None
    """The number a numeric cell sorts by (None: no number, sorted last)."""
    numeric: bool = False
    """Sorted by `sort` rather than by its text."""
    href: str | None = None
    html: str | None = None
    """Markup shown instead of the escaped text (HTML only)."""


@dataclass
class TableData:
    title: str
    head: list[str]
    rows: list[list[Cell]]
    note: str = ""
    collapsed: bool = False
    """HTML: inside a closed <details> (the text is still on the page)."""


def _subset_label(recs: list[Record]) -> str:
    return SUBSET_LABELS.get(recs[0].benchmark, "subset") if recs else "subset"


def _score_cell(v: Any) -> Cell:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return Cell(fmt_score(None), numeric=True)
    return Cell(fmt_score(float(v)), float(v), numeric=True)


def _value_cell(v: Any) -> Cell:
    """A number of a record: integers (counts) as they are, other numbers as scores in percent."""
    if isinstance(v, bool) or v is None:
        return Cell("\u2013" if v is None else str(v))
    if isinstance(v, int):
        return Cell(str(v), float(v), numeric=True)
    if isinstance(v, float):
        return _score_cell(v)
    if isinstance(v, list) and v and all(isinstance(r, list) for r in v):  # a matrix (RM-Bench's 3x3)
        rows = "".join("<tr>" + "".join(f"<td>{fmt_score(x)}</td>" for x in r) + "</tr>" for r in v)
        text = " / ".join(" ".join(fmt_score(x) for x in r) for r in v)
        return Cell(text, html=f'<table class="matrix">{rows}</table>')
    return Cell(str(v))


def _limited(rec: Record) -> bool:
    return rec.settings.get("limit") is not None


def _flag(rec: Record) -> str:
    return MARK if rec.partial or _limited(rec) else ""


def _run_cell(rec: Record) -> Cell:
    """Complete, or what made the run partial or limited, with the counts."""
    c = rec.counts
    parts = []
    if rec.partial:
        parts.append(
            f"partial{MARK}: {c.get('invalid_rows', 0)} invalid rows, {c.get('failed_examples', 0)} failed "
            f"examples skipped"
        )
    if _limited(rec):
        valid = c.get("rows_read", 0) - c.get("invalid_rows", 0)
        parts.append(f"limited{MARK} to the first {rec.settings['limit']} of {valid} valid examples")
    return Cell("; ".join(parts) or "complete")


def _settings_text(rec: Record) -> str:
    """The scorer's scalar settings (minus `HIDDEN_SETTINGS`) and the run's tie policy, as key=value."""
    s = rec.scorer.get("settings") or {}
    items = [
        f"{k}={v}"
        for k, v in s.items()
        if k not in HIDDEN_SETTINGS and not isinstance(v, (dict, list)) and v is not None and len(str(v)) <= 40
    ]
    if rec.settings.get("tie_policy"):
        items.append(f"ties={rec.settings['tie_policy']}")
    return ", ".join(items) or "\u2013"


def _cost_text(rec: Record) -> str:
    """Generated tokens and seconds per scored item, and abstentions (generative scorers); en dash otherwise."""
    cost = rec.scorer.get("cost") or {}
    parts = []
    if isinstance(cost, dict) and cost:
        tok, sec = cost.get("generated_tokens_per_item"), cost.get("seconds_per_item")
        if isinstance(tok, (int, float)):
            parts.append(f"{tok:.1f} tokens")
        if isinstance(sec, (int, float)):
            parts.append(f"{sec:.2f} s")
        if isinstance(cost.get("items"), (int, float)):
            parts.append(f"over {int(cost['items'])} items")
    abst = rec.scorer.get("abstentions") or {}
    if isinstance(abst, dict) and abst:
        total = sum(v for v in abst.values() if isinstance(v, (int, float)))
        parts.append(f"abstained {int(total)} ({', '.join(f'{k} {v}' for k, v in abst.items())})")
    return ", ".join(parts) or "\u2013"


def _is_table(v: Any) -> bool:
    return isinstance(v, dict) and bool(v) and all(isinstance(r, dict) for r in v.values())


def _flatten(prefix: str, v: Any) -> list[tuple[str, Any]]:
    if isinstance(v, dict):
        return [kv for k, sub in v.items() for kv in _flatten(f"{prefix}.{k}" if prefix else str(k), sub)]
    return [(prefix, v)]


def _long_table(title: str, label: str, recs: list[Record], get: Callable[[Record], Any]) -> TableData | None:
    """A breakdown as one row per (item, model): item, model, then every field the rows have."""
    per_rec = [(rec, get(rec)) for rec in recs]
    per_rec = [(rec, t) for rec, t in per_rec if _is_table(t)]
    if not per_rec:
        return None
    names = list(dict.fromkeys(n for _, t in per_rec for n in t))
    fields = list(dict.fromkeys(f for _, t in per_rec for r in t.values() for f in r))
    rows = []
    for name in names:
        for rec, t in per_rec:
            if name in t:
                row = t[name]
                rows.append([Cell(name), Cell(rec.model), *(_value_cell(row.get(f)) for f in fields)])
    return TableData(title, [label, "model", *fields], rows)


def _subsets_with_intervals(rec: Record) -> Any:
    """The record's subset table, each row with its 95% interval beside its score where the record has intervals."""
    subsets = rec.scores.get("subsets")
    iv = intervals_of(rec.scores).get("subsets") or {}
    if not iv or not isinstance(subsets, dict) or not _is_table(subsets):
        return subsets
    return {
        name: {"score": row.get("score"), CI: fmt_interval(iv.get(name)) or "\u2013", **row}
        for name, row in subsets.items()
    }


def _extra(key: str) -> Callable[[Record], Any]:
    return lambda rec: (rec.scores.get("extra") or {}).get(key)


def benchmark_tables(bench: str, recs: list[Record], links: dict[int, str]) -> list[TableData]:
    """Everything one benchmark's tab shows, as tables: main, breakdowns, other numbers, run details."""
    sections = list(
        dict.fromkeys(s for r in recs for s, v in (r.scores.get("sections") or {}).items() if v is not None)
    )
    has_headline = any(r.headline is not None for r in recs)
    headline_name = next((str(r.scores["headline_name"]) for r in recs if r.scores.get("headline_name")), "Score")
    has_ci = has_headline and any(intervals_of(r.scores).get("overall") for r in recs)
    head = ["Model", *([headline_name] if has_headline else []), *([CI] if has_ci else []), *sections]
    head += ["Scorer", "Kind", "Settings", "Cost per item", "Examples", "Run", "Date", "Record"]
    rows = []
    for rec in recs:
        secs = rec.scores.get("sections") or {}
        cells = [Cell(rec.model)]
        if has_headline:
            hc = _score_cell(rec.headline)
            cells.append(Cell(hc.text + _flag(rec), hc.sort, numeric=True))
        if has_ci:
            cells.append(Cell(fmt_interval(intervals_of(rec.scores).get("overall")) or "\u2013"))
        cells += [_score_cell(secs.get(s)) for s in sections]
        href = links.get(id(rec))
        cells += [
            Cell(str(rec.scorer.get("name") or "\u2013")),
            Cell(str(rec.scorer.get("kind") or "\u2013")),
            Cell(_settings_text(rec)),
            Cell(_cost_text(rec)),
            _value_cell(rec.counts.get("examples")),
            _run_cell(rec),
            Cell(rec.date[:10] or "\u2013"),
            Cell("record" if href else "\u2013", href=href),
        ]
        rows.append(cells)
    note = "Scores in percent." + (
        ""
        if has_headline
        else " No shown record has an overall score (a part it averages over is missing); see the breakdown below."
    )
    if any(intervals_of(r.scores) for r in recs):
        note += f" {CI}: the percentile bootstrap over examples, resampled within each subset (the record says how)."
    tables = [TableData(bench, head, rows, note)]

    label = _subset_label(recs)
    sub = _long_table(f"Per {label}", label, recs, _subsets_with_intervals)
    if sub is not None:
        tables.append(sub)
    extra_keys = list(dict.fromkeys(k for r in recs for k in (r.scores.get("extra") or {})))
    scalars: list[list[Cell]] = []
    for key in extra_keys:
        t = _long_table(
            key.replace("_", " ").capitalize(),
            key.removeprefix("by_"),
            recs,
            _extra(key),
        )
        if t is not None:
            tables.append(t)
            continue
        for rec in recs:
            if key in (rec.scores.get("extra") or {}):
                scalars += [
                    [Cell(name), Cell(rec.model), _value_cell(v)] for name, v in _flatten(key, rec.scores["extra"][key])
                ]
    if scalars:
        tables.append(TableData("Other numbers", ["number", "model", "value"], scalars))

    count_keys = list(dict.fromkeys(k for r in recs for k in r.counts))
    detail_head = ["model", "data", "split", "data hash", "limit", "tie policy", "batch size", *count_keys]
    detail_head += ["versions", "git", "problems"]
    details = []
    for rec in recs:
        s = rec.settings
        versions = ", ".join(f"{k} {v}" for k, v in rec.versions.items() if v)
        details.append(
            [
                Cell(rec.model),
                Cell(str(s.get("data") or "\u2013")),
                Cell(str(s.get("split") or "\u2013")),
                Cell(str(s.get("data_hash") or "\u2013")[:12]),
                Cell(str(s.get("limit") if s.get("limit") is not None else "\u2013")),
                Cell(str(s.get("tie_policy") or "\u2013")),
                Cell(str(s.get("batch_size") if s.get("batch_size") is not None else "\u2013")),
                *(_value_cell(rec.counts.get(k)) for k in count_keys),
                Cell(versions or "\u2013"),
                Cell((rec.git or "\u2013")[:12]),
                Cell("; ".join(rec.problems) or "\u2013"),
            ]
        )
    tables.append(TableData("Run details", detail_head, details, collapsed=True))
    return tables


# --- the policy tab -----------------------------------------------------------------------------------------

POLICY_SECTION = "policy"
"""The section of policy records (`leaderboards.policy_bench.POLICY_SECTION`)."""


def _judge_text(rec: Record) -> str:
    settings = rec.scorer.get("settings") or {}
    model = settings.get("model") if isinstance(settings, dict) else None
    return f"{rec.scorer.get('name')} ({rec.scorer.get('kind')})" + (f" {model}" if model else "")


def _policy_number(v: Any, units: str) -> str:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return "\u2013"
    return fmt_score(float(v)) if units == "fraction" else f"{v:.3f}"


def policy_tables(recs: list[Record], links: dict[int, str]) -> list[TableData]:
    """The policy tab: per record the policy, the set, its headline, every metric with its 95% interval, the judge
    and the reference answers' generator; then the per-category (per-instruction) breakdown."""
    head = ["Policy", "Benchmark", "Headline", "Metrics (95% CI)", "Judge", "Reference answers", "Examples", "Run"]
    head += ["Date", "Record"]
    rows = []
    for rec in recs:
        sc = rec.scores
        units = str(sc.get("units", "fraction"))
        metrics = []
        for name, v in (sc.get("sections") or {}).items():
            ci = (sc.get("intervals") or {}).get(name)
            ci_text = f" ({_policy_number(ci[0], units)}..{_policy_number(ci[1], units)})" if ci else ""
            metrics.append(f"{name} {_policy_number(v, units)}{ci_text}")
        judged = (sc.get("extra") or {}).get("judged") or {}
        abstained = f"; {judged['abstained']} abstained" if judged.get("abstained") else ""
        href = links.get(id(rec))
        headline = sc.get("headline")
        rows.append(
            [
                Cell(rec.model),
                Cell(rec.benchmark),
                Cell(
                    f"{sc.get('headline_name', 'Score')} {_policy_number(headline, units)}{_flag(rec)}",
                    float(headline) if isinstance(headline, (int, float)) else None,
                    numeric=True,
                ),
                Cell("; ".join(metrics) or "\u2013"),
                Cell(_judge_text(rec)),
                Cell(str(rec.settings.get("reference_model") or "\u2013")),
                Cell(f"{rec.counts.get('examples')}{abstained}"),
                _run_cell(rec),
                Cell(rec.date[:10] or "\u2013"),
                Cell("record" if href else "\u2013", href=href),
            ]
        )
    note = (
        "Fractions in percent (MT-Bench: the judge's own score units). "
        "Win rates are against the set's reference answers."
    )
    tables = [TableData("Policy", head, rows, note)]
    fractions = [r for r in recs if r.scores.get("units", "fraction") == "fraction"]  # judge units are in the record
    sub = _long_table("Per category", "category", fractions, lambda r: r.scores.get("subsets"))
    if sub is not None:
        tables.append(sub)
    return tables


def overview_table(board: Board, links: dict[int, str]) -> TableData:
    """Every model's headline per benchmark, and links to its records."""
    head = ["Model", *board.benchmarks, "Records"]
    rows = []
    for model, recs in board.rows:
        cells = [Cell(model)]
        for b in board.benchmarks:
            rec = recs.get(b)
            c = _score_cell(rec.headline if rec else None)
            cells.append(Cell(c.text + (_flag(rec) if rec and rec.headline is not None else ""), c.sort, numeric=True))
        shown = [(b, links[id(r)]) for b, r in recs.items() if id(r) in links]
        cells.append(
            Cell(
                ", ".join(b for b, _ in shown) or "\u2013",
                html=" ".join(f'<a href="{html.escape(h)}">{html.escape(b)}</a>' for b, h in shown),
            )
        )
        rows.append(cells)
    return TableData("Overview", head, rows, "Headline scores in percent; the tabs have every number.")


# --- charts -----------------------------------------------------------------------------------------------


@dataclass
class ChartPanel:
    title: str
    groups: list[str]
    bars: dict[str, list[float | None]] = field(default_factory=dict)
    """model -> one value (a fraction) per group, None where the model has none."""


def _subsets(rec: Record) -> dict[str, dict[str, Any]]:
    return rec.scores.get("subsets") or {}


def _fraction(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def chart_panels(bench: str, recs: list[Record]) -> list[ChartPanel]:
    """What a benchmark's chart draws: headline and sections with a value (else the subsets' scores), and any
    per-subset levels (RM-Bench's hard / normal / easy per domain). Panels without a single value are left out."""

    def panel(title: str, groups: list[str], values: Callable[[Record], list[Any]]) -> ChartPanel | None:
        p = ChartPanel(title, groups, {r.model: [_fraction(v) for v in values(r)] for r in recs})
        return p if any(v is not None for vs in p.bars.values() for v in vs) else None

    headline = next((str(r.scores["headline_name"]) for r in recs if r.scores.get("headline_name")), "Score")
    has_headline = any(r.headline is not None for r in recs)
    sections = list(
        dict.fromkeys(s for r in recs for s, v in (r.scores.get("sections") or {}).items() if v is not None)
    )
    main = panel(
        "score and sections",
        [headline] * has_headline + sections,
        lambda r: [r.headline] * has_headline + [(r.scores.get("sections") or {}).get(s) for s in sections],
    )
    label = _subset_label(recs)
    subsets = list(dict.fromkeys(s for r in recs for s in _subsets(r)))
    if main is None:
        main = panel(f"per {label}", subsets, lambda r: [(_subsets(r).get(s) or {}).get("score") for s in subsets])
    rows = [row for r in recs for row in _subsets(r).values()]
    levels = [
        f
        for f in dict.fromkeys(f for row in rows for f in row)
        if f not in ("score", "n") and all(_fraction(row[f]) is not None for row in rows if f in row)
    ]
    cells = [(s, f) for s in subsets for f in levels]
    per_level = panel(
        f"per {label}: {' / '.join(levels)}",
        [f"{s} {f}" for s, f in cells],
        lambda r: [(_subsets(r).get(s) or {}).get(f) for s, f in cells],
    )
    return [p for p in (main, per_level) if p is not None]


def draw_chart(title: str, panels: Sequence[ChartPanel], path: Path, colors: dict[str, str]) -> None:
    """Grouped bars (one bar per model in each group), scores in percent, one row per panel; `colors`: a model's
    color, the same in every chart of the page."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # lazy: matplotlib, only for the PNG
    from matplotlib.figure import Figure  # lazy: matplotlib, only for the PNG

    models = list(dict.fromkeys(m for p in panels for m in p.bars))
    widest = max(len(p.groups) for p in panels)
    fig = Figure(
        figsize=(min(16.0, max(6.0, 0.5 * widest * max(1, len(models)) ** 0.6 + 2.5)), 3.6 * len(panels) + 0.4)
    )
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(panels), 1, squeeze=False)[:, 0]
    width = 0.8 / max(1, len(models))
    for ax, p in zip(axes, panels, strict=True):
        for k, model in enumerate(models):
            vals = p.bars.get(model, [None] * len(p.groups))
            xs = [i - 0.4 + width * (k + 0.5) for i, v in enumerate(vals) if v is not None]
            ys = [100 * v for v in vals if v is not None]
            bars = ax.bar(xs, ys, width, label=model, color=colors.get(model, f"C{k % 10}"))
            bars_shown = len(p.groups) * len(models)
            if bars_shown <= 60:  # beyond that the labels overlap (the tables have the numbers)
                ax.bar_label(bars, fmt="%.1f", fontsize=6.5, padding=1, rotation=90 if bars_shown > 16 else 0)
        ax.set_xticks(
            range(len(p.groups)),
            p.groups,
            rotation=20 if len(p.groups) > 4 else 0,
            ha="right" if len(p.groups) > 4 else "center",
            fontsize=8,
        )
        ax.set_ylim(0, 108)
        ax.set_ylabel("score (%)")
        ax.set_title(p.title, fontsize=10)
        ax.grid(axis="y", alpha=0.25)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), title="model", title_fontsize=7)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(str(path), dpi=90)


def overview_panel(board: Board) -> ChartPanel | None:
    """Headlines: one group per benchmark that has any, one bar per model (None when no record has one)."""
    benches = [b for b in board.benchmarks if any(r.headline is not None for r in board.records(b))]
    if not benches:
        return None
    return ChartPanel(
        "headline scores",
        benches,
        {m: [recs[b].headline if b in recs else None for b in benches] for m, recs in board.rows},
    )


# --- files ------------------------------------------------------------------------------------------------


@dataclass
class SiteFiles:
    markdown: Path
    html: Path
    png: Path | None
    """The overview chart (None when no shown record has a headline)."""
    charts: dict[str, Path]
    """benchmark -> its chart (benchmarks with no number at all have none)."""
    overview: str
    """The overview table in Markdown (headlines per model and benchmark)."""


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", name).strip("-") or "benchmark"


def render(records_dir: str | Path | None = None, site_dir: str | Path | None = None) -> SiteFiles:
    """Render all records in `records_dir` to `site_dir` (defaults: leaderboards/records, leaderboards/site):
    index.html (tabs; links the records, copied to site_dir/records/), leaderboard.md, leaderboard.png (the
    overview chart) and charts/<benchmark>.png."""
    records = load_records(records_dir)
    if not records:
        raise UserError(f"no records in {records_dir or DEFAULT_RECORDS_DIR}; run a benchmark first")
    board = build_board(records)
    site = Path(site_dir) if site_dir is not None else DEFAULT_SITE_DIR
    (site / "records").mkdir(parents=True, exist_ok=True)
    (site / "charts").mkdir(parents=True, exist_ok=True)
    links: dict[int, str] = {}
    for rec in [r for _, recs in board.rows for r in recs.values()] + board.policy:
        if rec.path:
            dest = site / "records" / Path(rec.path).name
            shutil.copyfile(rec.path, dest)
            links[id(rec)] = f"records/{dest.name}"
    charts: dict[str, Path] = {}
    colors = {model: f"C{i % 10}" for i, (model, _) in enumerate(board.rows)}
    for old in (site / "charts").glob("*.png"):  # a chart of a benchmark no longer shown would mislead
        old.unlink()
    for b in board.benchmarks:
        panels = chart_panels(b, board.records(b))
        if panels:
            charts[b] = site / "charts" / f"{_slug(b)}.png"
            draw_chart(b, panels, charts[b], colors)
    png: Path | None = site / "leaderboard.png"
    ov = overview_panel(board)
    if ov is not None:
        draw_chart(TITLE, [ov], site / "leaderboard.png", colors)
    else:
        (site / "leaderboard.png").unlink(missing_ok=True)
        png = None
    files = SiteFiles(site / "leaderboard.md", site / "index.html", png, charts, overview_markdown(board, links))
    write_text(files.markdown, to_markdown(board, links))
    write_text(files.html, to_html(board, links, files))
    return files


# --- Markdown ---------------------------------------------------------------------------------------------


def _md_table(t: TableData) -> list[str]:
    def esc(s: str) -> str:
        return s.replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(map(esc, t.head)) + " |", "|" + "---|" * len(t.head)]
    for row in t.rows:
        lines.append("| " + " | ".join(f"[{esc(c.text)}]({c.href})" if c.href else esc(c.text) for c in row) + " |")
    return lines


def overview_markdown(board: Board, links: dict[int, str] | None = None) -> str:
    """The overview table as GitHub Markdown (what `align bench show` prints)."""
    return "\n".join(_md_table(overview_table(board, links or {})))


def to_markdown(board: Board, links: dict[int, str] | None = None) -> str:
    """The leaderboard as GitHub Markdown: the overview, then each benchmark's tables."""
    links = links or {}
    lines = [f"# {TITLE}", "", *_md_table(overview_table(board, links)), ""]
    for b in board.benchmarks:
        lines += [f"## {b}", ""]
        for t in benchmark_tables(b, board.records(b), links):
            if t.title != b:
                lines += [f"### {t.title}", ""]
            lines += [*_md_table(t), ""]
            if t.note:
                lines += [t.note, ""]
    if board.policy:
        lines += ["## Policies", ""]
        for i, t in enumerate(policy_tables(board.policy, links)):
            lines += ([f"### {t.title}", ""] if i else []) + [*_md_table(t), ""] + ([t.note, ""] if t.note else [])
    return "\n".join([*lines, FOOTNOTE, ""])


# --- HTML -------------------------------------------------------------------------------------------------

_JS = """
const panels = [...document.querySelectorAll("section.tab")], tabs = [...document.querySelectorAll("nav a")];
function show() {
  // the address names a tab (#rm-bench) and no element, so the browser keeps the page at its top
  const name = decodeURIComponent(location.hash.slice(1));
  const target = panels.some(p => p.dataset.tab === name) ? name : panels[0].dataset.tab;
  panels.forEach(p => p.hidden = p.dataset.tab !== target);
  tabs.forEach(a => a.classList.toggle("active", a.getAttribute("href") === "#" + target));
}
window.addEventListener("hashchange", show); show();
document.querySelectorAll("table.sortable").forEach(table => table.querySelectorAll("th").forEach((th, col) =>
  th.addEventListener("click", () => {
    const body = table.tBodies[0], asc = th.dataset.order !== "asc";
    table.querySelectorAll("th").forEach(h => delete h.dataset.order);
    th.dataset.order = asc ? "asc" : "desc";
    const key = tr => { const v = tr.cells[col].dataset.value;
      return v === undefined ? tr.cells[col].textContent.trim().toLowerCase() : (v === "" ? -Infinity : +v); };
    [...body.rows].sort((a, b) => (key(a) > key(b) ? 1 : key(a) < key(b) ? -1 : 0) * (asc ? 1 : -1))
      .forEach(tr => body.appendChild(tr));
  })));
"""

_CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em 2em; color: #222; }
nav { display: flex; flex-wrap: wrap; gap: 4px; border-bottom: 2px solid #ccc; margin: 1em 0; }
nav a { padding: 6px 14px; text-decoration: none; color: #333; background: #f0f0f0; border-radius: 6px 6px 0 0; }
nav a.active { background: #2b5ea7; color: white; }
table { border-collapse: collapse; font-size: 13px; margin: 6px 0 14px; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; vertical-align: top; }
th { background: #f3f3f3; cursor: pointer; user-select: none; }
th[data-order="asc"]::after { content: " \\25B2"; } th[data-order="desc"]::after { content: " \\25BC"; }
td:not([data-value]), th:first-child { text-align: left; }
tr:nth-child(even) > td { background: #fafafa; }
table.matrix td { border: none; padding: 0 4px; background: none; font-size: 11px; }
.note { color: #555; font-size: 13px; }
img { max-width: 100%; border: 1px solid #ddd; margin: 6px 0; }
"""


def _html_table(t: TableData) -> str:
    e = html.escape
    head = "".join(f"<th>{e(h)}</th>" for h in t.head)
    body = []
    for row in t.rows:
        tds = []
        for c in row:
            value = f' data-value="{"" if c.sort is None else repr(c.sort)}"' if c.numeric else ""
            inner = c.html if c.html is not None else e(c.text)
            if c.href:
                inner = f'<a href="{e(c.href)}">{inner}</a>'
            tds.append(f"<td{value}>{inner}</td>")
        body.append("<tr>" + "".join(tds) + "</tr>")
    table = f'<table class="sortable"><thead><tr>{head}</tr></thead><tbody>' + "".join(body) + "</tbody></table>"
    note = f'<p class="note">{e(t.note)}</p>' if t.note else ""
    if t.collapsed:
        return f"<details><summary>{e(t.title)}</summary>{table}{note}</details>"
    return table + note


def to_html(board: Board, links: dict[int, str] | None = None, files: SiteFiles | None = None) -> str:
    """The page: an overview tab and a tab per benchmark (see the module docstring)."""
    links = links or {}
    e = html.escape
    charts = files.charts if files else {}
    nav = ['<a href="#overview">Overview</a>'] + [f'<a href="#{_slug(b)}">{e(b)}</a>' for b in board.benchmarks]
    if board.policy:
        nav.append('<a href="#policies">Policies</a>')
    n_records = sum(len(r) for _, r in board.rows)
    sections = [
        '<section class="tab" id="tab-overview" data-tab="overview"><h2>Overview</h2>'
        f'<p class="note">{len(board.rows)} models, {len(board.benchmarks)} benchmarks, {n_records} shown records.</p>'
        + _html_table(overview_table(board, links))
        + (
            '<img src="leaderboard.png" alt="headline scores">'
            if files and files.png
            else '<p class="note">No shown record has a headline score to chart; the tabs chart their sections.</p>'
        )
        + "</section>"
    ]
    for b in board.benchmarks:
        parts = [f'<section class="tab" id="tab-{_slug(b)}" data-tab="{_slug(b)}">']
        recs = board.records(b)
        version = ", ".join(sorted({f"v{r.version}" for r in recs}))
        parts.append(f"<h2>{e(b)} <span class='note'>{e(version)}</span></h2>")
        for i, t in enumerate(benchmark_tables(b, recs, links)):
            if i:
                parts.append(f"<h3>{e(t.title)}</h3>" if not t.collapsed else "")
            parts.append(_html_table(t))
            if i == 0:
                parts.append(
                    f'<img src="charts/{e(charts[b].name)}" alt="{e(b)} chart">'
                    if b in charts
                    else '<p class="note">No numbers to chart.</p>'
                )
        parts.append("</section>")
        sections.append("".join(parts))
    if board.policy:
        parts = ['<section class="tab" id="tab-policies" data-tab="policies"><h2>Policies</h2>']
        for i, t in enumerate(policy_tables(board.policy, links)):
            parts.append((f"<h3>{e(t.title)}</h3>" if i else "") + _html_table(t))
        sections.append("".join(parts) + "</section>")
    return (
        f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>{TITLE}</title>'
        f"<style>{_CSS}</style></head>\n<body><h1>{TITLE}</h1>\n"
        f"<nav>{''.join(nav)}</nav>\n"
        + "\n".join(sections)
        + f'\n<p class="note">{e(FOOTNOTE)} Click a column header to sort.</p>\n'
        + f"<script>{_JS}</script>\n</body></html>\n"
    )
