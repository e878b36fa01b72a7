"""Data sources: one config section (`data:`) names where records come from and how to cut them.

`source` is `suite` (the built-in verifiable preference suite), a local file or directory (JSON, JSONL,
.gz, parquet), or a hub dataset id (`org/name`, optionally `org/name:config`). The format is detected
from the first readable row unless `format` is set. Rated data becomes pairs through `pairing`.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from prefalign.config import Alias, option
from prefalign.errors import UserError, did_you_mean
from prefalign.registry import Table

from .comparisons import PRESETS, ColumnMap, adapt, mapping_for, to_pairs
from .formats import FORMATS, Record, detect_format
from .io import iter_rows
from .pairing import PAIRING, build_pairs
from .records import LabelledComparison, PreferencePair, PromptOnly, RatedResponses, text_of
from .report import DataReport
from .splits import split_of


@dataclass
class DataConfig:
    source: str = option(
        "suite",
        "'suite', a local file/dir (json, jsonl, .gz, parquet), an https URL of such a file (downloaded once), or a "
        "hub id org/name[:config] (with hub_split and hub_data_dir)",
        aliases={"dataset_name": Alias("TRL"), "dataset": Alias("OpenRLHF")},
    )
    format: str = option("auto", "row format: auto, or one of `align ls formats`")
    preset: str | None = option(
        None, "a labelled comparison file in a public set's official format: one of `align ls presets`"
    )
    columns: ColumnMap | None = option(
        None, "a labelled comparison file read through this column map (fields, label map; docs/data.md)"
    )
    split: Literal["train", "dev", "test", "all"] = option(
        "train",
        "which records to use: all, or the train / dev / test part of a deterministic cut by a hash of the prompt "
        "(split_fractions; the same record always lands in the same part)",
    )
    split_fractions: list[float] = option(factory=lambda: [0.9, 0.05, 0.05], doc="train/dev/test fractions (sum 1)")
    split_seed: int = option(0, "seed of the hash split")
    split_key: Literal["prompt", "pair"] = option("prompt", "hash the prompt (no prompt in two splits) or the pair")
    hub_split: str = option("train", "split name passed to datasets.load_dataset for hub ids")
    hub_data_dir: str | None = option(
        None, "the folder of a hub dataset to read (datasets.load_dataset's data_dir), e.g. helpful-base"
    )
    pairing: str = option(
        "max_min", "pair builder for rated data (see `align ls pairing`), or none: keep the rated records unpaired"
    )
    objective: str = option("overall_score", "score dimension the pair builder ranks by (rated data)")
    length_alpha: float = option(0.0, "length_penalized: score penalty per 100 words")
    limit: int | None = option(None, "keep only the first N records of the split (after splitting)")
    suite_per_family: int = option(200, "suite: tasks generated per family")
    suite_seed: int = option(0, "suite: generator seed")
    suite_dev_fraction: float = option(
        0.0,
        "suite: share of its tasks held out as dev (0: none, and split dev is a hash slice of its train part); the "
        "quickstart's suite holds out 0.25, so split dev and test here are the quickstart's dev and test",
    )
    suite_test_fraction: float = option(0.2, "suite: share of its tasks held out as test")
    suite_hard_negatives: int = option(
        0,
        "suite: this many more pairs per training task whose answer can be wrong in content (the good answer in "
        "another phrasing against a wrong value or a violated constraint), added to split train (and all); the "
        "held-out splits keep one pair per task",
    )

    def check(self) -> list[str]:
        problems = []
        if self.preset is not None and self.preset not in PRESETS:
            problems.append(
                f"preset: unknown preset '{self.preset}'{did_you_mean(self.preset, PRESETS.names())}; "
                f"choose one of {', '.join(PRESETS.names())}"
            )
        if self.preset is not None and self.columns is not None:
            problems.append(
                "preset / columns: give one of them; to change a preset, copy its map (`align ls presets`, "
                "preference_data/comparisons.py) into columns and edit it"
            )
        if (self.preset is not None or self.columns is not None) and self.format != "auto":
            problems.append("format: a column map (preset or columns) reads the file; leave format at auto")
        if self.format != "auto" and self.format not in FORMATS:
            problems.append(
                f"format: unknown format '{self.format}'{did_you_mean(self.format, FORMATS.names())}; "
                f"choose auto or one of {', '.join(FORMATS.names())}"
            )
        if self.pairing not in PAIRING and self.pairing != "none":
            problems.append(
                f"pairing: unknown pair builder '{self.pairing}'"
                f"{did_you_mean(self.pairing, PAIRING.names())}; choose none or one of {', '.join(PAIRING.names())}"
            )
        if len(self.split_fractions) != 3 or abs(sum(self.split_fractions) - 1) > 1e-6 or min(self.split_fractions) < 0:
            problems.append(
                f"split_fractions: need three non-negative numbers summing to 1, got {self.split_fractions}"
            )
        if self.limit is not None and self.limit <= 0:
            problems.append(f"limit: must be positive, got {self.limit}")
        if self.suite_hard_negatives < 0:
            problems.append(f"suite_hard_negatives: must be 0 or more, got {self.suite_hard_negatives}")
        if not 0 < self.suite_test_fraction < 1:
            problems.append(f"suite_test_fraction: must lie in (0, 1), got {self.suite_test_fraction}")
        elif not 0 <= self.suite_dev_fraction < 1 - self.suite_test_fraction:
            problems.append(
                f"suite_dev_fraction: must lie in [0, 1 - suite_test_fraction), got {self.suite_dev_fraction}"
            )
        return problems


@dataclass
class Loaded:
    pairs: list[PreferencePair] = field(default_factory=list)
    rated: list[RatedResponses] = field(default_factory=list)
    prompts: list[PromptOnly] = field(default_factory=list)
    comparisons: list[LabelledComparison] = field(default_factory=list)
    report: DataReport = field(default_factory=DataReport)


@dataclass(frozen=True)
class SourceKind:
    summary: str
    example: str


SOURCES: Table[SourceKind] = Table(
    "data source",
    {
        "suite": SourceKind("the built-in verifiable preference suite (generated, graded by code)", "source: suite"),
        "file": SourceKind(
            "a local JSON / JSONL (.gz) / parquet file or a directory of them",
            "source: data/pairs.jsonl",
        ),
        "hub": SourceKind(
            "a hub dataset id, optionally with a config name; hub_split and hub_data_dir pick the split and folder",
            "source: Anthropic/hh-rlhf, hub_data_dir: helpful-base",
        ),
        "url": SourceKind(
            "an https URL of a data file, downloaded once into the cache", "source: https://.../pairs.json"
        ),
    },
    columns=("summary", "example"),
)


def read_comparisons(
    source: str,
    mapping: ColumnMap,
    name: str,
    hub_split: str = "train",
    report: DataReport | None = None,
    data_dir: str | None = None,
) -> tuple[list[LabelledComparison], DataReport]:
    """All labelled comparisons of a file or hub dataset read through `mapping` (named `name`: a preset or
    'columns'), with every dropped row counted in the report (`comparisons.py`)."""
    report = report or DataReport(source=source)
    report.details.setdefault("format", f"labelled comparisons, column map '{name}'")
    report.details.setdefault("format_why", "as configured")
    return list(adapt(mapping, source)(iter_rows(source, report, hub_split, data_dir), report)), report


def read_records(
    source: str,
    fmt: str = "auto",
    hub_split: str = "train",
    report: DataReport | None = None,
    data_dir: str | None = None,
) -> tuple[list[Record], DataReport]:
    """All records of a file, URL or hub dataset, with every dropped row counted in the report."""
    report = report or DataReport(source=source)
    rows = iter_rows(source, report, hub_split, data_dir)
    if fmt == "auto":
        first = next(rows, None)
        if first is None:
            return [], report
        fmt, why = detect_format(first[1], f"{source} ({report.row_unit} {first[0]})")
        rows = itertools.chain([first], rows)
    else:
        why = "as configured"
    report.details.setdefault("format", fmt)
    report.details.setdefault("format_why", why)
    tracked = _RowTracker(rows)
    records = [(rec, _row_of(rec, tracked.last)) for rec in FORMATS[fmt].adapt(tracked, report)]
    return _drop_duplicates(records, report), report


class _RowTracker:
    """Passes (row number, row) pairs through and remembers the last row number handed out, so a record an
    adapter yields right after reading its row can be traced to it."""

    def __init__(self, rows: Iterator[tuple[int, dict[str, Any]]]) -> None:
        self.rows = rows
        self.last: int | str = "?"

    def __iter__(self) -> _RowTracker:
        return self

    def __next__(self) -> tuple[int, dict[str, Any]]:
        row_no, row = next(self.rows)
        self.last = row_no
        return row_no, row


def _row_of(record: Record, last: int | str) -> int | str:
    attributes = getattr(record, "attributes", None) or {}
    return attributes.get("row", last)


def _drop_duplicates(records: list[tuple[Record, int | str]], report: DataReport) -> list[Record]:
    """Keep the first of records with the same content (same id); count each repeat as 'ROW (same as ROW)'."""
    seen: dict[str, int | str] = {}
    out = []
    for r, row in records:
        if r.id in seen:
            report.drop(
                "duplicate",
                f"{row} (same as {report.row_unit} {seen[r.id]})",
                "same prompt and responses as an earlier row",
            )
            continue
        seen[r.id] = row
        out.append(r)
    return out


def suite_label(cfg: DataConfig) -> str:
    """How the suite of `cfg` was built, as its data report names it."""
    label = f"per_family={cfg.suite_per_family}, seed={cfg.suite_seed}"
    if cfg.suite_dev_fraction:
        label += f", dev_fraction={cfg.suite_dev_fraction}, test_fraction={cfg.suite_test_fraction}"
    elif cfg.suite_test_fraction != 0.2:
        label += f", test_fraction={cfg.suite_test_fraction}"
    if cfg.suite_hard_negatives:
        label += f", hard_negatives={cfg.suite_hard_negatives}"
    return label


def _suite(cfg: DataConfig) -> Loaded:
    from .suite import build_suite, hard_negatives  # lazy: the suite's generators (0.16 s), only for source: suite

    suite = build_suite(cfg.suite_per_family, cfg.suite_seed, cfg.suite_test_fraction, None, cfg.suite_dev_fraction)
    hard = hard_negatives(suite, cfg.suite_hard_negatives) if cfg.split in ("train", "all") else []
    report = DataReport(source=f"suite({suite_label(cfg)})", row_unit="record")
    if suite.dev_fraction:  # the suite's own three splits
        if cfg.split == "all":
            pairs, prompts = suite.pairs, suite.train_prompts + suite.test_prompts + suite.dev_prompts
        else:
            split_pairs, split_prompts = suite.split_lists(cfg.split)
            pairs, prompts = list(split_pairs), list(split_prompts)
    elif cfg.split == "test":
        pairs, prompts = list(suite.test_pairs), list(suite.test_prompts)
    elif cfg.split == "all":
        pairs, prompts = suite.train_pairs + suite.test_pairs, suite.train_prompts + suite.test_prompts
    else:
        # the suite has its own train/test split; dev is a hash slice of its train prompts
        dev_frac = cfg.split_fractions[1] / max(cfg.split_fractions[0] + cfg.split_fractions[1], 1e-9)
        want = "dev" if cfg.split == "dev" else "train"
        pick = lambda conv: split_of(text_of(conv), (1 - dev_frac, dev_frac, 0.0), cfg.split_seed) == want  # noqa: E731
        pairs = [p for p in suite.train_pairs if pick(p.prompt)]
        prompts = [p for p in suite.train_prompts if pick(p.prompt)]
        hard = [p for p in hard if pick(p.prompt)]
    pairs += hard  # after the suite's own pairs, so those are the same with and without
    report.rows_read = len(pairs) + len(prompts)
    return Loaded(pairs=pairs, prompts=prompts, report=report)


def suite_tasks(cfg: DataConfig) -> dict[str, Any]:
    """The suite's tasks as checks read them (`suite.checks.TaskView`), by task id (a suite pair's
    `attributes.task_id`): the suite `cfg` builds, every split."""
    from .suite import build_suite  # lazy: the suite's generators, only for source: suite
    from .suite.checks import TaskView

    suite = build_suite(cfg.suite_per_family, cfg.suite_seed, cfg.suite_test_fraction, None, cfg.suite_dev_fraction)
    return {t.id: TaskView(t.family, t.params, t.prompt[-1].content) for t in suite.tasks}


def load(cfg: DataConfig) -> Loaded:
    """Load, adapt, pair and split one source as `cfg` says."""
    if cfg.source == "suite":
        out = _suite(cfg)
    else:
        if cfg.preset is not None or cfg.columns is not None:
            comparisons, report = read_comparisons(
                cfg.source, *mapping_for(cfg.preset, cfg.columns), cfg.hub_split, data_dir=cfg.hub_data_dir
            )
            records: list[Record] = []
        else:
            comparisons, (records, report) = (
                [],
                read_records(cfg.source, cfg.format, cfg.hub_split, data_dir=cfg.hub_data_dir),
            )
        out = Loaded(comparisons=comparisons, report=report)
        for r in records:
            if isinstance(r, PreferencePair):
                out.pairs.append(r)
            elif isinstance(r, RatedResponses):
                out.rated.append(r)
            else:
                out.prompts.append(r)
        if out.comparisons:
            out.pairs.extend(to_pairs(out.comparisons, report))
        if out.rated and cfg.pairing != "none":
            out.pairs.extend(
                build_pairs(out.rated, cfg.pairing, cfg.objective, cfg.length_alpha, cfg.split_seed, report)
            )
        if cfg.split != "all":
            fr = tuple(cfg.split_fractions)
            key = (lambda p: text_of(p.prompt)) if cfg.split_key == "prompt" else (lambda p: p.id)
            out.pairs = [p for p in out.pairs if split_of(key(p), fr, cfg.split_seed) == cfg.split]  # type: ignore[arg-type]
            out.prompts = [p for p in out.prompts if split_of(text_of(p.prompt), fr, cfg.split_seed) == cfg.split]  # type: ignore[arg-type]
            out.rated = [r for r in out.rated if split_of(text_of(r.prompt), fr, cfg.split_seed) == cfg.split]  # type: ignore[arg-type]
    if cfg.limit is not None:
        out.pairs, out.prompts, out.rated = out.pairs[: cfg.limit], out.prompts[: cfg.limit], out.rated[: cfg.limit]
    out.report.records_kept = len(out.pairs) + len(out.prompts)
    return out


def load_pairs(cfg: DataConfig, what: str = "training") -> tuple[list[PreferencePair], DataReport]:
    """Pairs of one split; an error that says why when none are usable."""
    loaded = load(cfg)
    if not loaded.pairs:
        lines = "\n  ".join(loaded.report.lines())
        raise UserError(
            f"data.source {cfg.source} (split {cfg.split}) gave no usable preference pairs for {what}.\n  "
            f"{lines}\nRun `align data doctor {cfg.source}` for details."
        )
    return loaded.pairs, loaded.report
