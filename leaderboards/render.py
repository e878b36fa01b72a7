"""Render the leaderboard from records: a Markdown table, a static HTML page and a PNG bar chart.

One row per model, one column per benchmark headline and per section. For each (model, benchmark) the
newest complete record is shown (the newest partial one only when no complete one exists; partial or
limited runs are marked with `*`). The HTML page is self-contained (inline CSS and a few lines of JS that
sort by a clicked column) and links every shown record, copied next to it under `records/`.
"""

from __future__ import annotations

import html
import shutil
from dataclasses import dataclass
from pathlib import Path

from prefalign.errors import UserError

from .records import DEFAULT_RECORDS_DIR, Record, fmt_score, load_records

DEFAULT_SITE_DIR = Path("leaderboards") / "site"
"""Where rendered files go when no directory is given (relative to the working directory)."""
MARK = "*"
FOOTNOTE = (
    f"{MARK} partial run (invalid rows or failed scores skipped) or limited to the first examples; "
    "the record has the counts."
)


@dataclass
class Column:
    benchmark: str
    section: str | None  # None: the benchmark's headline

    @property
    def label(self) -> str:
        return self.benchmark if self.section is None else f"{self.benchmark}: {self.section}"


@dataclass
class Board:
    """The leaderboard as data: columns, and per model the shown record of each benchmark."""

    columns: list[Column]
    rows: list[tuple[str, dict[str, Record]]]  # (model, benchmark -> record), best first

    def value(self, rec: Record | None, col: Column) -> float | None:
        """The number a column shows for a record (None when absent)."""
        if rec is None:
            return None
        if col.section is None:
            return rec.scores.get("headline")
        return (rec.scores.get("sections") or {}).get(col.section)

    def cell(self, rec: Record | None, col: Column) -> str:
        """The cell text: percent with one decimal, headline flagged when the run was partial or limited."""
        text = fmt_score(self.value(rec, col))
        flagged = rec is not None and (rec.partial or rec.settings.get("limit") is not None)
        return text + MARK if flagged and col.section is None else text


def _better(new: Record, old: Record | None) -> bool:
    if old is None:
        return True
    if new.partial != old.partial:
        return not new.partial  # a complete record beats a partial one, whatever their dates
    return new.date >= old.date


def build_board(records: list[Record]) -> Board:
    """Pick the shown record per (model, benchmark) and lay out the columns (benchmark table order)."""
    from .benchmarks import BENCHMARKS

    shown: dict[str, dict[str, Record]] = {}
    for rec in records:
        per_model = shown.setdefault(rec.model, {})
        if _better(rec, per_model.get(rec.benchmark)):
            per_model[rec.benchmark] = rec
    benches = {b for m in shown.values() for b in m}
    order = [b for b in BENCHMARKS.names() if b in benches] + sorted(benches - set(BENCHMARKS.names()))
    columns: list[Column] = []
    for b in order:
        columns.append(Column(b, None))
        sections: list[str] = []
        for m in shown.values():
            for s in (m[b].scores.get("sections") or {}) if b in m else ():
                if s not in sections:
                    sections.append(s)
        columns += [Column(b, s) for s in sections]

    def rank(item: tuple[str, dict[str, Record]]) -> tuple[float, str]:
        heads = [h for r in item[1].values() if (h := r.scores.get("headline")) is not None]
        return (-(sum(heads) / len(heads)) if heads else 1.0, item[0])

    return Board(columns, sorted(shown.items(), key=rank))


def render(records_dir: str | Path | None = None, site_dir: str | Path | None = None) -> dict[str, Path]:
    """Render all records in `records_dir` to `site_dir` (defaults: leaderboards/records, leaderboards/site).

    Writes leaderboard.md, index.html (links the records, copied to site_dir/records/) and leaderboard.png;
    returns their paths as {"markdown", "html", "png"}.
    """
    records = load_records(records_dir)
    if not records:
        raise UserError(f"no records in {records_dir or DEFAULT_RECORDS_DIR}; run a benchmark first")
    board = build_board(records)
    site = Path(site_dir) if site_dir is not None else DEFAULT_SITE_DIR
    (site / "records").mkdir(parents=True, exist_ok=True)
    links: dict[int, str] = {}
    for _, recs in board.rows:
        for rec in recs.values():
            if rec.path:
                dest = site / "records" / Path(rec.path).name
                shutil.copyfile(rec.path, dest)
                links[id(rec)] = f"records/{dest.name}"
    paths = {"markdown": site / "leaderboard.md", "html": site / "index.html", "png": site / "leaderboard.png"}
    paths["markdown"].write_text(to_markdown(board, links), encoding="utf-8")
    paths["html"].write_text(to_html(board, links), encoding="utf-8")
    to_png(board, paths["png"])
    return paths


def _record_links(recs: dict[str, Record], links: dict[int, str]) -> list[tuple[str, str]]:
    return [(b, links[id(r)]) for b, r in recs.items() if id(r) in links]


def to_markdown(board: Board, links: dict[int, str] | None = None) -> str:
    """The leaderboard as a GitHub Markdown table (scores in percent)."""
    links = links or {}

    def esc(s: str) -> str:
        return s.replace("|", "\\|")

    head = ["Model", *(c.label for c in board.columns), "Records"]
    lines = ["# Reward model leaderboard", "", "| " + " | ".join(map(esc, head)) + " |", "|" + "---|" * len(head)]
    for model, recs in board.rows:
        cells = [
            esc(model),
            *(board.cell(recs.get(c.benchmark), c) for c in board.columns),
            ", ".join(f"[{b}]({href})" for b, href in _record_links(recs, links)),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join([*lines, "", FOOTNOTE, ""])


_SORT_JS = """
document.querySelectorAll("#board th").forEach((th, col) => th.addEventListener("click", () => {
  const body = th.closest("table").tBodies[0], asc = th.dataset.order !== "asc";
  document.querySelectorAll("#board th").forEach(h => delete h.dataset.order);
  th.dataset.order = asc ? "asc" : "desc";
  const key = tr => { const v = tr.cells[col].dataset.value;
    return v === undefined ? tr.cells[col].textContent.trim().toLowerCase() : (v === "" ? -Infinity : +v); };
  [...body.rows].sort((a, b) => (key(a) > key(b) ? 1 : key(a) < key(b) ? -1 : 0) * (asc ? 1 : -1))
    .forEach(tr => body.appendChild(tr));
}));
"""

_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; font-size: 14px; }
th, td { border: 1px solid #ccc; padding: 4px 8px; text-align: right; }
th { background: #f3f3f3; cursor: pointer; user-select: none; }
th[data-order="asc"]::after { content: " \\25B2"; } th[data-order="desc"]::after { content: " \\25BC"; }
td:first-child, th:first-child, td:last-child { text-align: left; }
tr:nth-child(even) td { background: #fafafa; }
"""


def to_html(board: Board, links: dict[int, str] | None = None) -> str:
    """A self-contained HTML page; clicking a column header sorts by it."""
    links = links or {}
    e = html.escape
    head = "".join(f"<th>{e(label)}</th>" for label in ["Model", *(c.label for c in board.columns), "Records"])
    body = []
    for model, recs in board.rows:
        tds = [f"<td>{e(model)}</td>"]
        for c in board.columns:
            v = board.value(recs.get(c.benchmark), c)
            tds.append(
                f'<td data-value="{"" if v is None else repr(float(v))}">{e(board.cell(recs.get(c.benchmark), c))}</td>'
            )
        tds.append(
            "<td>" + " ".join(f'<a href="{e(href)}">{e(b)}</a>' for b, href in _record_links(recs, links)) + "</td>"
        )
        body.append("<tr>" + "".join(tds) + "</tr>")
    return (
        f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>Reward model leaderboard</title>'
        f"<style>{_CSS}</style></head>\n<body><h1>Reward model leaderboard</h1>\n"
        f"<p>Scores in percent. Click a column header to sort.</p>\n"
        f'<table id="board"><thead><tr>{head}</tr></thead>\n<tbody>\n'
        + "\n".join(body)
        + f"\n</tbody></table>\n<p>{e(FOOTNOTE)}</p>\n<script>{_SORT_JS}</script>\n</body></html>\n"
    )


def to_png(board: Board, path: str | Path) -> None:
    """A grouped bar chart of each model's benchmark headlines (matplotlib, Agg canvas, no display)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    heads = [c for c in board.columns if c.section is None]
    models = [m for m, _ in board.rows]
    fig = Figure(figsize=(max(6.0, 1.2 * len(models) * max(1, len(heads)) ** 0.5 + 2), 4.5))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    width = 0.8 / max(1, len(heads))
    for k, col in enumerate(heads):
        xs, ys = [], []
        for i, (_, recs) in enumerate(board.rows):
            v = board.value(recs.get(col.benchmark), col)
            if v is not None:
                xs.append(i - 0.4 + width * (k + 0.5))
                ys.append(100 * v)
        bars = ax.bar(xs, ys, width, label=col.benchmark)
        ax.bar_label(bars, fmt="%.1f", fontsize=7)
    ax.set_xticks(range(len(models)), models, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("score (%)")
    ax.set_ylim(0, 105)
    ax.set_title("Reward model leaderboard")
    if heads:
        ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    fig.savefig(str(path), dpi=100)
