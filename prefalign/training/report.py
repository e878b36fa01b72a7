"""The run report: report.html and dashboard.png in a run directory, made from that directory's files alone.

    files = write_report("runs/rm")     # ReportFiles(html=runs/rm/report.html, figure=runs/rm/dashboard.png)

Written at the end of every training run (`RecipeRun.finish`), when training stops on an error or Ctrl-C
(`RecipeRun.train`), and by `align report RUN_DIR` for a run in progress or interrupted. It is a pure function of
the directory: any metric name is drawn, every file may be missing, and a file that cannot be read is named in
the report instead of stopping it. What it reads:

    config.yaml       the resolved config, shown as written
    metrics.jsonl     one object per log, {"step", <metric>: value, ...} (`MetricsMixin`); `eval_<metric>` is the
                      held-out value of <metric>. After `--resume` a step logged again replaces the earlier value.
    alerts.jsonl      alerts raised during training, as they happened (`MetricsMixin.alert`)
    data_report.json  the data and tokenization reports, when the recipe writes them at the start
    report.json       the recipe's final report: final numbers, outputs (`*_dir`), alerts, and its data reports
    stopped.json      written when training stopped on an exception or Ctrl-C (`RecipeRun.train`)
    checkpoints/      the last checkpoint (where `--resume` continues) and its trainer_state.json

The dashboard is one figure with a panel per metric (chosen and rejected variants of a metric share a panel;
held-out values are marked points on their metric's panel). Raw logged values are drawn faint, with a smoothed
line on top (`SMOOTHING`), except a series of fewer than `MIN_SMOOTHED` points, drawn as its points joined by lines;
NaN or infinite values are marked with a red x on the step axis. A panel whose every value is the same is left out
and named in the figure's caption (`constant_panels`).
"""

from __future__ import annotations

import html
import json
import math
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prefalign.errors import UserError

from ..files import write_text
from .metrics import ALERTS_FILE, read_alerts

REPORT_HTML = "report.html"
DASHBOARD_PNG = "dashboard.png"
DATA_REPORT = "data_report.json"
DATA_KEYS = ("data", "tokenization", "eval_tokenization", "examples")
"""Sections of a data report: rows read and dropped, tokenization of the training and held-out pairs, and the
training examples a recipe built from them (a judge's kept, correct and abstained samples, ...)."""
STOPPED = "stopped.json"
RUN_FILES = ("config.yaml", "metrics.jsonl", "report.json")
"""A directory holding none of these is not a run directory."""

SMOOTHING = 0.8
"""Weight of the exponential moving average drawn over each raw curve, per logged point, debiased as TensorBoard's
smoothing slider does: s_t = w s_{t-1} + (1 - w) x_t, drawn as s_t / (1 - w^t), so the line starts at the first
value instead of at 0. It follows about the last 1 / (1 - w) = 5 logged values: enough to read the trend of a
per-batch accuracy that jumps between 0.4 and 1.0, short enough to follow a 30-step run."""
NOT_SMOOTHED = frozenset({"learning_rate"})
"""Metrics drawn as logged: a schedule is not a noisy estimate."""
MIN_SMOOTHED = 10
"""A series logged fewer times than this (per round, per evaluation) is drawn as its points joined by lines, never
smoothed: an average over three rounds would draw values no round had."""
BOOKKEEPING = frozenset(
    {
        "step",
        "epoch",
        "round",
        "total_flos",
        "train_runtime",
        "train_samples_per_second",
        "train_steps_per_second",
        "train_loss",
        "eval_runtime",
        "eval_samples_per_second",
        "eval_steps_per_second",
    }
)
"""Keys of metrics.jsonl that are not curves (transformers' end-of-training summary, counters)."""
LEADING = (
    "loss",
    "accuracy",
    "rewards/accuracies",
    "margin",
    "rewards/margins",
    "rewards/chosen",
    "logps/chosen",
    "reward_mean",
    "reward_std",
    "nll_per_token",
    "logps/chosen_per_token",
    "log_ratio/per_token",
    "kl",
)
"""Panels shown first, in this order, after the ones the recipe names (report.json `dashboard_first`)."""
METRIC_NOTES = {
    "log_ratio/per_token": "mean log π_θ − log π_ref per token of the pairs' own responses (offline data, not "
    "samples of π_θ): how far the policy moved on them; not a KL, and negative when it lowered their likelihood",
    "kl_estimate": "the name log_ratio/per_token had before: a log-ratio on the data's tokens, not a KL",
    "kl": "KL(π_θ‖π_ref) per token, estimated on the policy's own samples (the run's kl estimator)",
}
"""What a metric is, where its name could mislead: shown beside it in the report's table."""
TRAILING = ("lengths/chosen", "tokens", "learning_rate", "grad_norm")
"""Panels shown last, in this order; every other metric sits between, alphabetically."""
HACKING = ("eval_reward", "eval_gold/overall")
"""The learned reward and the held-out gold score of the same held-out answers: drawn on one panel (two y axes), first,
so a learned reward that rises while gold falls (reward hacking) shows at a glance."""
HACKING_CHECK = ("eval_reward", "eval_check")
"""The learned reward and a check of the same answers that needs no gold (a judge's verdicts against the start's
answers): the same panel for a run without an answer key."""
PAIRED = ("chosen", "rejected")
"""`<name>/chosen` and `<name>/rejected` share a panel (same unit, and their gap is the point)."""


# --- reading a run directory ------------------------------------------------------------------------------


@dataclass
class RunView:
    """What a run directory holds, read without failing (problems are collected instead)."""

    dir: Path
    config_text: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    rows: list[dict[str, Any]] = field(default_factory=list)
    """metrics.jsonl rows that have a step, in file order."""
    report: dict[str, Any] | None = None
    """report.json (present when the run finished)."""
    data: dict[str, Any] = field(default_factory=dict)
    """The data reports (`DATA_KEYS`; data_report.json, else report.json)."""
    alerts: list[dict[str, Any]] = field(default_factory=list)
    stopped: dict[str, Any] | None = None
    checkpoint: Path | None = None
    max_steps: int | None = None
    problems: list[str] = field(default_factory=list)
    """Files or lines that could not be read, each naming the file (and line)."""

    @property
    def series(self) -> dict[str, list[tuple[int, float]]]:
        """metric -> [(step, value)] sorted by step; a step logged again (after `--resume`) keeps its last value."""
        by_key: dict[str, dict[int, float]] = {}
        for row in self.rows:
            for k, v in row.items():
                if k in BOOKKEEPING or isinstance(v, bool) or not isinstance(v, (int, float)):
                    continue
                by_key.setdefault(k, {})[int(row["step"])] = float(v)
        return {k: sorted(v.items()) for k, v in by_key.items()}

    @property
    def last_step(self) -> int | None:
        return max((int(r["step"]) for r in self.rows), default=None)

    @property
    def status(self) -> tuple[str, str]:
        """(finished | stopped | running | empty, one sentence for the reader)."""
        of = f" of {self.max_steps}" if self.max_steps else ""
        resume = (
            f"`--resume` continues from {self.checkpoint.name}"
            if self.checkpoint is not None
            else "No checkpoint was saved (train.save_every: 0), so `--resume` starts over"
        )
        if self.report is not None:
            steps = self.report.get("steps", self.last_step)
            secs = self.report.get("seconds")
            return "finished", f"Finished: {steps} steps" + (f" in {secs} s." if secs is not None else ".")
        if self.stopped is not None:
            step = self.stopped.get("step", self.last_step)
            why = f"{self.stopped.get('error', 'an error')}: {self.stopped.get('message', '')}".rstrip(": ")
            return "stopped", f"Stopped at step {step}{of} by {why}. {resume}."
        if self.rows:
            return "running", f"In progress or interrupted: last logged step {self.last_step}{of}. {resume}."
        return "empty", "No steps logged yet."


def _read_json(path: Path, problems: list[str]) -> Any:
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        problems.append(f"{path.name}: not readable as JSON ({e}); left out")
        return None


def read_run(run_dir: str | Path) -> RunView:
    """Read a run directory (see the module docstring); a directory that is no run is a `UserError`."""
    d = Path(run_dir)
    if not d.is_dir():
        raise UserError(f"{d}: no such directory; give a run directory (the output_dir of a training run)")
    if not any((d / f).exists() for f in RUN_FILES):
        raise UserError(
            f"{d}: not a run directory (none of {', '.join(RUN_FILES)} is there); give the output_dir of a training run"
        )
    view = RunView(d)
    problems = view.problems

    cfg_path = d / "config.yaml"
    if cfg_path.exists():
        import yaml  # lazy: only to read a saved config, as prefalign.config does

        view.config_text = cfg_path.read_text(encoding="utf-8")
        try:
            loaded = yaml.safe_load(view.config_text)
            view.config = loaded if isinstance(loaded, dict) else {}
        except yaml.YAMLError as e:
            problems.append(f"config.yaml: not valid YAML ({e}); shown as text")

    metrics = d / "metrics.jsonl"
    if metrics.exists():
        for n, line in enumerate(metrics.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                problems.append(f"metrics.jsonl line {n}: not JSON (cut off while being written?); skipped")
                continue
            if not isinstance(row, dict) or not isinstance(row.get("step"), int):
                problems.append(f"metrics.jsonl line {n}: not an object with an integer `step`; skipped")
                continue
            view.rows.append(row)

    report = _read_json(d / "report.json", problems)
    if report is not None and not isinstance(report, dict):
        problems.append("report.json: not a JSON object; left out")
        report = None
    view.report = report
    data = _read_json(d / DATA_REPORT, problems)
    source = data if isinstance(data, dict) else (report or {})
    view.data = {k: source[k] for k in DATA_KEYS if isinstance(source.get(k), dict)}

    view.alerts = read_alerts(d / ALERTS_FILE)
    seen = {str(a["message"]) for a in view.alerts}
    for msg in (report or {}).get("alerts") or []:  # a recipe's alerts from before alerts.jsonl existed
        if str(msg) not in seen:
            view.alerts.append({"message": str(msg)})
    stopped = _read_json(d / STOPPED, problems)
    view.stopped = stopped if isinstance(stopped, dict) else None

    ckpts = [p for p in (d / "checkpoints").glob("checkpoint-*") if p.name.split("-")[-1].isdigit()]
    view.checkpoint = max(ckpts, key=lambda p: int(p.name.split("-")[-1]), default=None)
    train = view.config.get("train") if isinstance(view.config.get("train"), dict) else {}
    max_steps = (train or {}).get("max_steps")
    if isinstance(max_steps, int) and max_steps > 0:
        view.max_steps = max_steps
    elif view.checkpoint is not None:
        state = _read_json(view.checkpoint / "trainer_state.json", problems)
        if isinstance(state, dict) and isinstance(state.get("max_steps"), int):
            view.max_steps = state["max_steps"]
    return view


# --- smoothing and panels ---------------------------------------------------------------------------------


def smooth(values: Sequence[float], weight: float = SMOOTHING) -> list[float]:
    """Debiased exponential moving average (see `SMOOTHING`); NaN / inf values are skipped (the output repeats
    the last smoothed value there, NaN before the first finite one).

    >>> smooth([1.0, 0.0], 0.5)   # s1 = 0.5 -> 0.5/0.5 = 1.0; s2 = 0.25 -> 0.25/0.75 = 1/3
    [1.0, 0.3333333333333333]
    """
    out, s, n = [], 0.0, 0
    for v in values:
        if math.isfinite(v):
            s = weight * s + (1.0 - weight) * v
            n += 1
        out.append(s / (1.0 - weight**n) if n else math.nan)
    return out


@dataclass
class Panel:
    """One axes of the dashboard: training curves and held-out points of one quantity."""

    title: str
    curves: list[str]
    """Training metrics: raw values faint, a smoothed line on top."""
    held_out: list[str]
    """`eval_<metric>` names: held-out values as marked points."""
    twin: tuple[str, str] | None = None
    """Two held-out series drawn against two y axes (`HACKING`)."""


def _pair_base(name: str) -> str | None:
    head, _, last = name.rpartition("/")
    return head if head and last in PAIRED else None


def panels(names: Iterable[str], first: Sequence[str] = ()) -> list[Panel]:
    """Group metric names into dashboard panels and order them: `first`, then `LEADING`, the rest alphabetically,
    then `TRAILING`. `<x>/chosen` and `<x>/rejected` share the panel "<x>"; `eval_<m>` joins the panel of <m>
    (or gets its own when only held-out values exist)."""
    names = [n for n in names if n not in BOOKKEEPING]
    train = [n for n in names if not n.startswith("eval_")]
    members: dict[str, list[str]] = {}
    for n in sorted(set(train) | {n[len("eval_") :] for n in names if n.startswith("eval_")}):
        members.setdefault(_pair_base(n) or n, []).append(n)
    out = []
    for title, ms in members.items():
        ms.sort(key=lambda m: PAIRED.index(m.rpartition("/")[2]) if _pair_base(m) else 0)
        out.append(Panel(title, [m for m in ms if m in train], [f"eval_{m}" for m in ms if f"eval_{m}" in names]))

    def rank(p: Panel) -> tuple[int, int, str]:
        lead = (p.curves or [h[len("eval_") :] for h in p.held_out])[0]
        for group, order in ((0, tuple(first)), (1, LEADING), (3, TRAILING)):
            if lead in order or p.title in order:
                return group, order.index(lead if lead in order else p.title), ""
        return 2, 0, p.title

    ordered = sorted(out, key=rank)
    if all(h in names for h in HACKING_CHECK):
        ordered.insert(0, Panel("learned reward vs the check (same answers, no gold)", [], [], twin=HACKING_CHECK))
    if all(h in names for h in HACKING):
        ordered.insert(0, Panel("learned reward vs held-out gold (same answers)", [], [], twin=HACKING))
    return ordered


def _draw_twin(ax: Any, series: dict[str, list[tuple[int, float]]], twin: tuple[str, str]) -> None:
    """Two held-out series on one panel, each against its own y axis, in two colours."""
    right = ax.twinx()
    for axis, name, color in ((ax, twin[0], "C0"), (right, twin[1], "C3")):
        pts = [(x, y) for x, y in series[name] if math.isfinite(y)]
        if pts:
            axis.plot(*zip(*pts, strict=True), color=color, marker="D", ms=5, lw=1.4, label=name)
        axis.set_ylabel(name, color=color, fontsize=8)
        axis.tick_params(axis="y", labelcolor=color, labelsize=8)


def constant_panels(shown: list[Panel], series: dict[str, list[tuple[int, float]]]) -> dict[str, float]:
    """The panels whose finite values are all one number (a counter that stayed 0, a fixed prompt count): their
    title -> that value. A panel with a single logged value is not constant: it has nothing to compare with."""
    out = {}
    for p in shown:
        if p.twin is not None:
            continue
        values = [v for name in p.curves + p.held_out for _, v in series[name] if math.isfinite(v)]
        if len(values) > 1 and len(set(values)) == 1:
            out[p.title] = values[0]
    return out


# --- the figure -------------------------------------------------------------------------------------------


def draw_dashboard(view: RunView, path: Path) -> bool:
    """Draw every panel of the run into one PNG at `path`; False (nothing written) when no metric was logged."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # lazy: matplotlib, only to draw
    from matplotlib.figure import Figure  # lazy: matplotlib, only to draw

    series = view.series
    first = (view.report or {}).get("dashboard_first") or ()
    shown = panels(series, first)
    constant = constant_panels(shown, series)
    shown = [p for p in shown if p.title not in constant]
    if not shown:
        return False
    ncols = min(3, len(shown))
    nrows = math.ceil(len(shown) / ncols)
    fig = Figure(figsize=(4.4 * ncols, 2.9 * nrows + 0.5))
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    steps = [s for pts in series.values() for s, _ in pts]
    lo, hi = min(steps), max(steps)
    for k, (ax, panel) in enumerate(zip(axes.flat, shown, strict=False)):
        if panel.twin is not None:
            _draw_twin(ax, series, panel.twin)
            ax.set_title(panel.title, fontsize=10)
            ax.grid(alpha=0.25)
            if hi > lo:
                ax.set_xlim(lo - 0.02 * (hi - lo), hi + 0.02 * (hi - lo))
            continue
        nonfinite: list[int] = []
        for i, name in enumerate(panel.curves):
            pts = series[name]
            xs = [s for s, _ in pts]
            ys = [v for _, v in pts]
            color = f"C{i}"
            label = name.rpartition("/")[2] if len(panel.curves) > 1 else "train"
            finite = [(x, y) for x, y in pts if math.isfinite(y)]
            nonfinite += [x for x, y in pts if not math.isfinite(y)]
            if name in NOT_SMOOTHED or len(finite) < MIN_SMOOTHED:  # as logged: a schedule, or a few points
                if finite:
                    marker = "o" if len(finite) < MIN_SMOOTHED else None  # a few points: drawn as points
                    ax.plot(*zip(*finite, strict=True), color=color, lw=1.6, marker=marker, label=label)
                continue
            if finite:
                ax.plot(
                    *zip(*finite, strict=True), color=color, lw=0.9, alpha=0.3, marker="." if len(finite) == 1 else None
                )
            sm = [(x, y) for x, y in zip(xs, smooth(ys), strict=True) if math.isfinite(y)]
            if sm:
                ax.plot(*zip(*sm, strict=True), color=color, lw=1.8, label=f"{label} (smoothed)")
        for i, name in enumerate(panel.held_out):
            pts = [(x, y) for x, y in series[name] if math.isfinite(y)]
            nonfinite += [x for x, y in series[name] if not math.isfinite(y)]
            if pts:
                base = name[len("eval_") :]
                k = panel.curves.index(base) if base in panel.curves else i
                label = "held-out" + (f" {base.rpartition('/')[2]}" if len(panel.curves) > 1 else "")
                ax.plot(
                    *zip(*pts, strict=True),
                    color=f"C{k}" if len(panel.curves) > 1 else "black",
                    ls=":",
                    lw=1.2,
                    marker="D",
                    ms=6,
                    mec="black",
                    mew=0.8,
                    label=label,
                )
        if nonfinite:
            ax.plot(
                nonfinite,
                [0.04] * len(nonfinite),
                "x",
                color="red",
                ms=7,
                mew=2,
                transform=ax.get_xaxis_transform(),
                label="NaN / inf",
            )
        ax.set_title(panel.title, fontsize=10)
        ax.grid(alpha=0.25)
        ax.tick_params(labelsize=8)
        ax.legend(fontsize=7, loc="best")
        if hi > lo:  # every panel on the same step axis
            ax.set_xlim(lo - 0.02 * (hi - lo), hi + 0.02 * (hi - lo))
        if k + ncols >= len(shown):  # the lowest panel of its column
            ax.set_xlabel("step", fontsize=9)
    for ax in axes.flat[len(shown) :]:
        ax.set_visible(False)
    fig.suptitle(f"{view.dir.name}: {view.status[1].split('. ')[0]}", fontsize=11)
    if constant:
        caption = "constant over the run (not drawn): " + ", ".join(f"{k} = {_num(v)}" for k, v in constant.items())
        fig.text(0.5, 0.005, caption, ha="center", va="bottom", fontsize=8, color="#555", wrap=True)
    fig.tight_layout(rect=(0, 0.03 if constant else 0, 1, 1))
    fig.savefig(str(path), dpi=80)
    return True


# --- the page ---------------------------------------------------------------------------------------------

_CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em 2em; color: #222; max-width: 1400px; }
h1 { margin-bottom: 0.2em; } h2 { margin-top: 1.4em; border-bottom: 1px solid #ddd; padding-bottom: 2px; }
.status { padding: 6px 10px; border-radius: 4px; display: inline-block; }
.finished { background: #e6f4ea; } .stopped { background: #fde8e8; } .running { background: #fff6dd; }
.empty { background: #eee; }
.alert { background: #fde8e8; border-left: 4px solid #c62828; padding: 4px 10px; margin: 4px 0; }
.ok { color: #2e7d32; } .note { color: #555; font-size: 13px; } .problem { color: #b26a00; }
table { border-collapse: collapse; font-size: 13px; margin: 6px 0; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f3f3f3; } td.n { text-align: right; }
pre { background: #f7f7f7; padding: 8px; overflow-x: auto; font-size: 12px; }
img { max-width: 100%; border: 1px solid #ddd; }
.cols { display: flex; flex-wrap: wrap; gap: 2em; }
"""


def _num(v: Any) -> str:
    """A number as the report shows it: integers in full, other floats with 4 significant digits."""
    if isinstance(v, bool) or v is None:
        return html.escape(str(v))
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            return str(v)
        return str(int(v)) if v.is_integer() and abs(v) < 1e15 else f"{v:.4g}"
    return html.escape(str(v))


_NUMBER = re.compile(r"^-?(\d[\d.]*(e[-+]?\d+)?|nan|inf)(\s|$)")


def _table(head: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """An HTML table of already escaped cells; cells that start with a number are right-aligned."""
    e = html.escape
    body = "".join(
        "<tr>" + "".join(f"<td{' class=n' if _NUMBER.match(str(c)) else ''}>{c}</td>" for c in r) + "</tr>"
        for r in rows
    )
    return "<table><tr>" + "".join(f"<th>{e(h)}</th>" for h in head) + f"</tr>{body}</table>"


def _scalars(d: dict[str, Any]) -> list[tuple[str, Any]]:
    return [(k, v) for k, v in d.items() if not isinstance(v, (dict, list))]


def _breakdowns(d: dict[str, Any]) -> str:
    """Nested {name: {field: number}} tables of a report section (e.g. eval's by_family), one table each."""
    out = []
    for key, val in d.items():
        if isinstance(val, dict) and val and all(isinstance(r, dict) for r in val.values()):
            fields = list(dict.fromkeys(f for r in val.values() for f in r))
            out.append(
                f"<div><b>{html.escape(key)}</b>"
                + _table(
                    [key.removeprefix("by_"), *fields],
                    ([html.escape(n), *(_num(r.get(f)) for f in fields)] for n, r in val.items()),
                )
                + "</div>"
            )
        elif isinstance(val, dict) and val:
            out.append(
                f"<div><b>{html.escape(key)}</b>"
                + _table(["", "value"], ([html.escape(k), _num(v)] for k, v in val.items()))
                + "</div>"
            )
    return f'<div class="cols">{"".join(out)}</div>' if out else ""


def _counted(title: str, counts: dict[str, Any], explain: dict[str, Any], examples: dict[str, Any]) -> str:
    if not counts:
        return f"<p>{html.escape(title)}: none</p>"
    rows = [
        [
            html.escape(r),
            _num(n),
            html.escape(str(explain.get(r, ""))),
            html.escape(", ".join(map(str, examples.get(r, [])))),
        ]
        for r, n in sorted(counts.items(), key=lambda kv: -kv[1])
    ]
    return f"<p>{html.escape(title)}: {sum(counts.values())}</p>" + _table(["reason", "count", "what", "first"], rows)


def _data_section(view: RunView) -> str:
    if not view.data:
        where = "written when the run finishes" if view.report is None else "not in report.json"
        return f'<p class="note">No data report ({where}).</p>'
    parts = []
    data = view.data.get("data")
    if data:
        parts.append(
            f"<p>Source <code>{html.escape(str(data.get('source', '')))}</code>: {_num(data.get('rows_read'))} "
            f"{html.escape(str(data.get('row_unit', 'row')))}s read, {_num(data.get('records_kept'))} kept, "
            f"{_num(data.get('dropped_total', 0))} dropped.</p>"
        )
        parts.append(
            _counted("Dropped", data.get("dropped") or {}, data.get("details") or {}, data.get("examples") or {})
        )
        parts.append(
            _counted("Repaired", data.get("repaired") or {}, data.get("details") or {}, data.get("examples") or {})
        )
    for key, title in (
        ("tokenization", "Tokenization (training pairs)"),
        ("eval_tokenization", "Tokenization (held-out pairs)"),
    ):
        tok = view.data.get(key)
        if not tok:
            continue
        parts.append(
            f"<p><b>{title}</b>: {_num(tok.get('n_in'))} in, {_num(tok.get('n_out'))} kept, "
            f"{_num(tok.get('n_dropped', 0))} dropped (length policy {html.escape(str(tok.get('policy')))}, "
            f"max_length {_num(tok.get('max_length'))}).</p>"
        )
        if tok.get("counts"):
            parts.append(_counted("By reason", tok["counts"], tok.get("reasons") or {}, tok.get("examples") or {}))
        lengths = tok.get("lengths") or {}
        if lengths:
            cols = list(dict.fromkeys(c for v in lengths.values() for c in v))
            parts.append(
                _table(
                    ["tokens", *cols], ([html.escape(k), *(_num(v.get(c)) for c in cols)] for k, v in lengths.items())
                )
            )
    examples = view.data.get("examples")
    if examples:
        parts.append("<p><b>Training examples built from the pairs</b></p>")
        parts.append(_table(["count", "value"], ([html.escape(str(k)), _num(v)] for k, v in examples.items())))
    return "\n".join(parts)


def _metrics_table(view: RunView) -> str:
    series = view.series
    rows = []
    for p in panels(series, (view.report or {}).get("dashboard_first") or ()):
        for name in p.curves:
            pts = series[name]
            finite = [v for _, v in pts if math.isfinite(v)]
            smoothed = name not in NOT_SMOOTHED and len(finite) >= MIN_SMOOTHED
            sm = smooth([v for _, v in pts])[-1] if smoothed else math.nan
            held = series.get(f"eval_{name}", [])
            note = f"<br><span class='note'>{html.escape(METRIC_NOTES[name])}</span>" if name in METRIC_NOTES else ""
            rows.append(
                [
                    html.escape(name) + note,
                    f"{_num(pts[-1][1])} <span class='note'>(step {pts[-1][0]})</span>",
                    "" if math.isnan(sm) else _num(sm),
                    _num(min(finite)) if finite else "",
                    _num(max(finite)) if finite else "",
                    f"{_num(held[-1][1])} <span class='note'>(step {held[-1][0]})</span>" if held else "",
                    _num(len(pts)),
                    _num(len(pts) - len(finite)) if len(finite) < len(pts) else "",
                ]
            )
        for name in p.held_out if not p.curves else ():
            pts = series[name]
            rows.append(
                [
                    html.escape(name),
                    "",
                    "",
                    "",
                    "",
                    f"{_num(pts[-1][1])} <span class='note'>(step {pts[-1][0]})</span>",
                    _num(len(pts)),
                    "",
                ]
            )
    return _table(["metric", "last", "smoothed", "min", "max", "held-out (last)", "points", "NaN/inf"], rows)


def _outputs(view: RunView) -> str:
    rows = []
    for k, v in (view.report or {}).items():
        if k.endswith("_dir") and isinstance(v, str):
            p = Path(v)
            try:
                rel = os.path.relpath(p.resolve(), view.dir.resolve())
            except ValueError:  # another drive (Windows)
                rel = str(p)
            href = rel if not rel.startswith("..") else p.resolve().as_uri()
            rows.append([html.escape(k), f'<a href="{html.escape(href)}">{html.escape(v)}</a>'])
    note = "" if rows else '<p class="note">No saved model yet (it is written when the run finishes).</p>'
    if view.checkpoint is not None:
        rows.append(["last checkpoint", html.escape(str(view.checkpoint))])
    return note + (_table(["what", "where"], rows) if rows else "")


def _alert_text(alert: dict[str, Any]) -> str:
    msg = str(alert["message"])
    return msg if "step" not in alert or msg.startswith("step") else f"step {alert['step']}: {msg}"


def to_html(view: RunView, figure: str | None) -> str:
    """The report page for `view`; `figure` is the dashboard PNG's file name beside it (None: no steps logged)."""
    e = html.escape
    kind, text = view.status
    report = view.report or {}
    parts = [
        f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>Run report: {e(view.dir.name)}</title>'
        f"<style>{_CSS}</style></head><body>",
        f"<h1>Run report: {e(view.dir.name)}</h1>",
        f'<p class="note">{e(str(view.dir))}</p>',
        f'<p class="status {kind}">{e(text)}</p>',
    ]
    parts.append("<h2>Outputs</h2>" + _outputs(view))
    parts.append("<h2>Alerts</h2>")
    if view.alerts:
        parts += [f'<div class="alert">{e(_alert_text(a))}</div>' for a in view.alerts]
    else:
        parts.append('<p class="ok">No alerts raised (chosen log-prob collapse, NaN or infinite metrics).</p>')

    facts = [(k, v) for k, v in _scalars(report) if v is not None and not k.endswith("_dir") and k != "run_report"]
    ev = report.get("eval")
    blocks = []
    if facts:
        blocks.append(
            "<div><h2>Final numbers</h2>" + _table(["", "value"], ([e(k), _num(v)] for k, v in facts)) + "</div>"
        )
    if isinstance(ev, dict) and ev:
        blocks.append(
            "<div><h2>Held-out evaluation</h2>"
            + _table(["", "value"], ([e(k), _num(v)] for k, v in _scalars(ev)))
            + _breakdowns(ev)
            + "</div>"
        )
    if blocks:
        parts.append('<div class="cols">' + "".join(blocks) + "</div>")

    parts.append("<h2>Training curves</h2>")
    if figure is not None:
        parts.append(
            f'<img src="{e(figure)}" alt="training dashboard">'
            f'<p class="note">Faint: the values as logged; line: smoothed (exponential moving average, weight '
            f"{SMOOTHING} per logged point, debiased as in TensorBoard); diamonds: held-out evaluation; red x: NaN "
            f"or infinite values. {e(', '.join(sorted(NOT_SMOOTHED)))}, and any metric logged fewer than "
            f"{MIN_SMOOTHED} times, is drawn as logged (points joined by lines); a panel whose value never changed "
            "is left out and named under the figure.</p>" + _metrics_table(view)
        )
    else:
        parts.append("<p><b>No steps logged yet.</b></p>")
    parts.append("<h2>Data</h2>" + _data_section(view))
    parts.append("<h2>Config</h2>")
    parts.append(
        f"<pre>{e(view.config_text)}</pre>" if view.config_text is not None else '<p class="note">No config.yaml.</p>'
    )
    if report:
        parts.append(
            "<h2>report.json</h2><details><summary>everything the recipe reported</summary>"
            f"<pre>{e(json.dumps(report, indent=2, default=str))}</pre></details>"
        )
    if view.problems:
        parts.append(
            "<h2>Problems reading the run</h2>" + "".join(f'<p class="problem">{e(p)}</p>' for p in view.problems)
        )
    parts.append("</body></html>\n")
    return "\n".join(parts)


# --- writing ----------------------------------------------------------------------------------------------


@dataclass
class ReportFiles:
    html: Path
    figure: Path | None
    """The dashboard PNG (None when no step was logged)."""
    status: str
    """One sentence: finished, stopped, in progress or interrupted, or no steps logged yet."""


def write_report(run_dir: str | Path) -> ReportFiles:
    """Write report.html and dashboard.png into `run_dir` from its files (see the module docstring)."""
    view = read_run(run_dir)
    png = view.dir / DASHBOARD_PNG
    drawn = draw_dashboard(view, png)
    if not drawn:
        png.unlink(missing_ok=True)  # a figure left by an earlier run would contradict the page
    out = view.dir / REPORT_HTML
    write_text(out, to_html(view, png.name if drawn else None))
    return ReportFiles(out, png if drawn else None, view.status[1])
