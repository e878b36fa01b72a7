"""Result records: one JSON file per benchmark run, with everything needed to reproduce it.

A record holds the benchmark (name, version, data source and content hash), the scores (headline, sections,
per-subset table, their bootstrap intervals), example counts (scored, invalid rows, failed scores), the scorer's
own description (`scorer.describe()`), the settings of the run (tie policy, limit), package versions, the git
commit of the code, the date, and whether it is partial. The leaderboard is rendered from these files only.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from prefalign.errors import UserError
from prefalign.files import write_json

SCHEMA = 1
DEFAULT_RECORDS_DIR = Path("leaderboards") / "records"
"""Where records go when no directory is given (relative to the working directory)."""


@dataclass
class Record:
    benchmark: str
    version: str
    model: str
    """The leaderboard row this record belongs to (the scorer's model, or its name)."""
    scores: dict[str, Any]
    """{"headline", "headline_name", "sections", "subsets", "extra"} (see benchmarks.Scores), and "intervals": the
    95% bootstrap intervals {"overall": [low, high], "sections": {name: [low, high]}, "subsets": {name: [low, high]},
    "level", "reps", "seed", "method"} (`intervals.py`; a bound pair is null where no resample has a value; records
    written before them have none)."""
    counts: dict[str, int]
    """examples, rows_read, invalid_rows, failed_examples, items, unique_items, scored_now, nan_items."""
    scorer: dict[str, Any]
    """{"kind", "name", "settings": scorer.describe()}."""
    settings: dict[str, Any]
    """How the run was done: data source and hash, split, limit, tie policy, batch size."""
    versions: dict[str, str | None] = field(default_factory=dict)
    git: str | None = None
    date: str = ""
    partial: bool = False
    problems: list[str] = field(default_factory=list)
    """Why the record is partial: invalid rows and failed items, one line each (first ones only)."""
    items: dict[str, list[Any]] = field(default_factory=dict)
    """Per example: id -> [subset, result in [0, 1]] (`align bench compare` pairs two records by these ids)."""
    schema: int = SCHEMA
    path: str | None = field(default=None, compare=False)
    """Where the record was saved (not stored in the file)."""

    @property
    def section(self) -> str:
        """The leaderboard section (tab) the record is shown in: `settings.section` where the benchmark names one
        (the agreement benchmark: column map, data file and tie rule), else the benchmark's name."""
        return str(self.settings.get("section") or self.benchmark)

    @property
    def headline(self) -> float | None:
        """The benchmark's single number (a fraction in [0, 1]), or None."""
        return self.scores.get("headline")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: non-finite floats (e.g. a NaN in a scorer's settings) become null."""
        d = asdict(self)
        d.pop("path")
        return _finite(d)

    @classmethod
    def from_dict(cls, d: dict[str, Any], path: str | None = None) -> Record:
        """Inverse of `to_dict`; unknown keys (from newer schemas) are ignored, missing core keys are an error."""
        names = set(cls.__dataclass_fields__) - {"path"}
        missing = {"benchmark", "version", "model", "scores", "counts", "scorer", "settings"} - set(d)
        if missing:
            raise UserError(
                f"{path or 'record'}: not a benchmark record (missing {', '.join(sorted(missing))}); "
                "remove it from the records directory or re-run the benchmark"
            )
        return cls(**{k: v for k, v in d.items() if k in names}, path=path)

    def save(self, records_dir: str | Path | None = None) -> Path:
        """Write the record as `<benchmark>__<model>__<date>.json` (atomically) and return the path."""
        out = Path(records_dir) if records_dir is not None else DEFAULT_RECORDS_DIR
        out.mkdir(parents=True, exist_ok=True)
        stamp = re.sub(r"[^0-9TZ]", "", self.date) or "undated"
        base = f"{self.benchmark}__{_slug(self.model)}__{stamp}"
        path = out / f"{base}.json"
        n = 1
        while path.exists():
            n += 1
            path = out / f"{base}-{n}.json"
        write_json(path, self.to_dict(), indent=2, ensure_ascii=False, allow_nan=False)
        self.path = str(path)
        return path


def _finite(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")[:80] or "model"


def load_record(path: str | Path) -> Record:
    """Read one record file."""
    try:
        d = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise UserError(f"{path}: cannot read record ({e}); fix or delete the file") from None
    if not isinstance(d, dict):
        raise UserError(f"{path}: a record must be a JSON object; fix or delete the file")
    return Record.from_dict(d, str(path))


def load_records(records_dir: str | Path | None = None) -> list[Record]:
    """All records in a directory (`*.json`, not recursive), oldest first."""
    d = Path(records_dir) if records_dir is not None else DEFAULT_RECORDS_DIR
    if not d.is_dir():
        raise UserError(
            f"no benchmark records yet: {d} does not exist. A record is written by every benchmark run, e.g.\n"
            "  align bench run suite --model runs/quickstart/rm/model\n"
            "  align bench run rewardbench --model runs/quickstart/rm/model --data path/to/filtered.jsonl\n"
            "then `align bench show` lists them (or pass --records DIR where they were written)"
        )
    recs = [load_record(p) for p in sorted(d.glob("*.json"))]
    return sorted(recs, key=lambda r: r.date)


def package_versions() -> dict[str, str | None]:
    """Versions of what decides a score (read from package metadata; nothing heavy is imported)."""
    out: dict[str, str | None] = {"python": sys.version.split()[0]}
    for pkg in ("prefalign", "torch", "transformers", "datasets"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = None
    return out


def git_commit(where: str | Path | None = None) -> str | None:
    """The commit of the code that produced a record (with '-dirty' if tracked files changed); None outside git."""
    cwd = str(where or Path(__file__).resolve().parent)
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=10)
        if head.returncode != 0:
            return None
        # --no-optional-locks: a read-only look that never refreshes (writes) the index
        dirty = subprocess.run(
            ["git", "--no-optional-locks", "status", "--porcelain", "--untracked-files=no"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("-dirty" if dirty.returncode == 0 and dirty.stdout.strip() else "")


def now() -> str:
    """UTC timestamp used for record dates (sortable ISO 8601)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def fmt_score(v: float | None) -> str:
    """A score as shown on leaderboards: percent with one decimal, or an en dash when absent."""
    return "\u2013" if v is None else f"{100 * v:.1f}"


def _number(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return "\u2013" if v is None else str(v)


def _extra_lines(extra: dict[str, Any]) -> list[str]:
    """The flat blocks of `scores.extra` (a few numbers each, e.g. the tie rule) one line each, and the intervals;
    long tables stay in the record and on the rendered page."""
    lines = []
    for key, v in extra.items():
        if key == "intervals" and isinstance(v, dict):
            cells = [f"{k} {fmt_score(r.get('low'))}..{fmt_score(r.get('high'))}" for k, r in v.items()]
            lines.append("  95% intervals: " + "; ".join(cells))
        elif isinstance(v, dict) and v and not any(isinstance(x, (dict, list)) for x in v.values()):
            lines.append(f"  {key.replace('_', ' ')}: " + ", ".join(f"{k}={_number(x)}" for k, x in v.items()))
    return lines


def intervals_of(scores: dict[str, Any]) -> dict[str, Any]:
    """A record's bootstrap intervals block (`Record.scores`), or {} for a record written without one."""
    iv = scores.get("intervals")
    return iv if isinstance(iv, dict) and isinstance(iv.get("subsets"), dict) else {}


def fmt_interval(bounds: Any) -> str:
    """An interval as shown beside its score: "[low, high]" in percent, or "" when there is none."""
    if not isinstance(bounds, (list, tuple)) or len(bounds) != 2 or None in bounds:
        return ""
    return f"[{fmt_score(bounds[0])}, {fmt_score(bounds[1])}]"


def summarize(record: Record) -> str:
    """A short plain-text report of one record (what the CLI prints after a run)."""
    s = record.scores
    iv = intervals_of(s)
    sections_iv, subsets_iv = iv.get("sections") or {}, iv.get("subsets") or {}
    headline = f"  {s.get('headline_name', 'Score')}: {fmt_score(s.get('headline'))}"
    lines = [
        f"{record.section} v{record.version}  model: {record.model}" + ("  [PARTIAL]" if record.partial else ""),
        f"{headline}  {fmt_interval(iv.get('overall'))}".rstrip(),
    ]
    for name, v in (s.get("sections") or {}).items():
        lines.append(f"    {name:<24} {fmt_score(v):>6}  {fmt_interval(sections_iv.get(name))}".rstrip())
    subsets = s.get("subsets") or {}
    if subsets and list(subsets) != list(s.get("sections") or {}):
        lines.append("  subsets:")
        for name, row in subsets.items():
            n = f"(n={row.get('n')})"
            lines.append(
                f"    {name:<24} {fmt_score(row.get('score')):>6}  {n:<8} {fmt_interval(subsets_iv.get(name))}".rstrip()
            )
    if iv:
        lines.append(
            f"  [low, high]: {100 * iv.get('level', 0.95):.0f}% bootstrap intervals, {iv.get('reps')} resamples "
            f"(seed {iv.get('seed')}): {iv.get('method')}"
        )
    lines += _extra_lines(s.get("extra") or {})
    c = record.counts
    scored = "lists scored" if record.scorer.get("kind") == "listwise" else "responses scored"  # a list per example
    lines.append(
        f"  examples {c.get('examples')}, {scored} {c.get('scored_now')} "
        f"(unique {c.get('unique_items')} of {c.get('items')}), invalid rows {c.get('invalid_rows')}, "
        f"failed examples {c.get('failed_examples')}"
    )
    if record.path:
        lines.append(f"  record: {record.path}")
    return "\n".join(lines)


def find_record(ref: str, benchmark: str | None = None, records_dir: str | Path | None = None) -> Record:
    """A record file, or the latest record in `records_dir` whose model is `ref` (of `benchmark` where given)."""
    if Path(ref).is_file():
        return load_record(Path(ref))
    recs = [r for r in load_records(records_dir) if r.model == ref and benchmark in (None, r.benchmark)]
    if not recs:
        raise UserError(
            f"no record file {ref} and no record of a model named {ref}"
            + (f" on {benchmark}" if benchmark else "")
            + f" in {records_dir or DEFAULT_RECORDS_DIR} (`align bench show` lists them)"
        )
    benches = sorted({r.benchmark for r in recs})
    if len(benches) > 1:
        raise UserError(f"{ref} has records of {', '.join(benches)}: choose one with --bench")
    return recs[-1]
