"""Loaders: official benchmark files (JSON, JSONL, parquet, or the hub id) -> validated `Example`s.

Each parser accepts rows exactly as the benchmark publishes them (field names and types from
`reference/reward-models.md` §7) and checks every row. A bad row (missing field, wrong type, unknown subset)
becomes one problem line naming the file, the row, the field and the fix; the runner stops on problems
unless partial results were asked for. Reading files and hub datasets is shared with stage 1
(`preference_data.io.iter_rows`), so a hub id goes through `datasets.load_dataset` in one place.

An `Example` is one benchmark item in a common shape: a prompt and the candidate responses in the
benchmark's own order (chosen first), plus what the scoring rule needs (`meta`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from prefalign.errors import UserError, did_you_mean
from preference_data import formats
from preference_data.comparisons import adapt, mapping_for
from preference_data.io import iter_rows
from preference_data.records import Conversation, LabelledComparison, Message, PreferencePair, conversation
from preference_data.report import DataReport

from . import rules

Rows = Iterator[tuple[int, dict[str, Any]]]


@dataclass
class Example:
    """One benchmark item.

    group: the subset (RewardBench), domain (RM-Bench), category (JudgeBench) or source (pairs).
    responses: candidate assistant continuations in the benchmark's order (chosen first).
    meta: what the rule needs (num_correct, ties kind/prompt id, JudgeBench label, suite family, ...).
    reference: a reference answer, for reference-conditioned scorers (None when the data has none).
    row: where the item came from, for messages.
    """

    id: str
    group: str
    prompt: Conversation
    responses: list[Conversation]
    meta: dict[str, Any] = field(default_factory=dict)
    reference: Conversation | None = None
    row: str = ""


@dataclass
class Parsed:
    """Examples from one source plus one line per bad row."""

    examples: list[Example]
    problems: list[str]
    rows_read: int
    source: str


class _Row:
    """Field access for one row that records problems instead of raising, so every problem is reported."""

    def __init__(self, row: dict[str, Any], where: str, problems: list[str]) -> None:
        self.row, self.where, self.problems = row, where, problems
        self.ok = True

    def bad(self, msg: str) -> None:
        self.ok = False
        self.problems.append(f"{self.where}: {msg}")

    def get(self, name: str, kind: type | tuple[type, ...], what: str, required: bool = True) -> Any:
        if name not in self.row or self.row[name] is None:
            if required:
                self.bad(
                    f"field '{name}' is missing; every row needs '{name}' ({what}) "
                    f"(fields present: {', '.join(sorted(map(str, self.row))) or 'none'})"
                )
            return None
        v = self.row[name]
        if not isinstance(v, kind) or (isinstance(v, bool) and bool not in _tuple(kind)):
            self.bad(f"field '{name}' must be {what}, got {type(v).__name__} {_short(v)}")
            return None
        return v

    def strings(self, name: str, n: int | None = None, at_least: int = 1) -> list[str] | None:
        v = self.get(name, (list, tuple), f"a list of {n if n else 'one or more'} strings")
        if v is None:
            return None
        if any(not isinstance(x, str) for x in v):
            bad = next(type(x).__name__ for x in v if not isinstance(x, str))
            self.bad(f"field '{name}' must hold only strings, found a {bad}")
            return None
        if n is not None and len(v) != n:
            self.bad(f"field '{name}' must hold exactly {n} strings, got {len(v)}")
            return None
        if len(v) < at_least:
            self.bad(f"field '{name}' must hold at least {at_least} string(s), got {len(v)}")
            return None
        return list(v)

    def prompt(self, name: str = "prompt") -> Conversation | None:
        """A string (one user turn) or a list of {role, content} messages ending with a user turn."""
        v = self.get(name, (str, list), "a string or a list of {role, content} messages")
        if v is None:
            return None
        if isinstance(v, str):
            return [Message("user", v)]
        conv = _messages(v)
        if conv is None:
            self.bad(f"field '{name}' must be a list of {{role, content}} messages with string contents")
        return conv


def _tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _short(v: Any) -> str:
    s = repr(v)
    return s if len(s) <= 60 else s[:57] + "..."


def _messages(v: list[Any]) -> Conversation | None:
    if not all(isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in v):
        return None
    return conversation(v)


def _assistant(text: str) -> Conversation:
    return [Message("assistant", text)]


def _id(v: Any, fallback: str) -> str:
    return fallback if v is None else str(v)


def _where(source: str, report: DataReport, row_no: int) -> str:
    return f"{source} {report.row_unit} {row_no}"


def _unknown(r: _Row, name: str, value: str, allowed: tuple[str, ...] | list[str]) -> None:
    r.bad(
        f"field '{name}' has unknown value {value!r}{did_you_mean(value, list(allowed))}; "
        f"allowed: {', '.join(allowed)}. Use the official file unchanged, or drop rows of other subsets"
    )


# ---------------------------------------------------------------------------------------------------------
# Parsers, one per benchmark: (rows, report, source) -> Parsed
# ---------------------------------------------------------------------------------------------------------


def parse_rewardbench(rows: Rows, report: DataReport, source: str) -> Parsed:
    """allenai/reward-bench rows: prompt (str), chosen (str), rejected (str), subset (str), id (int).

    chosen_model / rejected_model are carried along when present. The subset must be one of the 23 scored
    subsets (`rules.REWARDBENCH_EXAMPLE_COUNTS`).
    """
    examples: list[Example] = []
    problems: list[str] = []
    for row_no, row in rows:
        r = _Row(row, _where(source, report, row_no), problems)
        prompt = r.prompt()
        chosen = r.get("chosen", str, "a string (the chosen response)")
        rejected = r.get("rejected", str, "a string (the rejected response)")
        subset = r.get("subset", str, "the subset name")
        ident = r.get("id", (int, str), "an integer id")
        if subset is not None and subset not in rules.REWARDBENCH_EXAMPLE_COUNTS:
            _unknown(r, "subset", subset, list(rules.REWARDBENCH_EXAMPLE_COUNTS))
        if r.ok:
            # r.ok: every required field is present
            assert prompt is not None
            examples.append(
                Example(
                    _id(ident, str(row_no)),
                    subset,
                    prompt,
                    [_assistant(chosen), _assistant(rejected)],
                    {k: row[k] for k in ("chosen_model", "rejected_model") if k in row},
                    row=r.where,
                )
            )
    return Parsed(examples, problems, report.rows_read, source)


_TIES_ID = re.compile(r"(ref|tied):(\d+)")


def parse_rewardbench2(rows: Rows, report: DataReport, source: str) -> Parsed:
    """allenai/reward-bench-2 rows: id (str), prompt (str), chosen (list[str]), rejected (list[str]),
    num_correct (int), subset (str); total_completions, num_incorrect, models, additional_metadata optional.

    Responses are `chosen + rejected` in that order, as the official code unrolls them. Ties rows have ids
    `ref:<n>` or `tied:<n>`; their first `num_correct` responses are the correct ones.
    """
    examples: list[Example] = []
    problems: list[str] = []
    canonical = {s.lower(): s for s in rules.REWARDBENCH2_SUBSETS}
    seen_ties: dict[str, str] = {}
    for row_no, row in rows:
        r = _Row(row, _where(source, report, row_no), problems)
        ident = r.get("id", (str, int), "a string id")
        prompt = r.prompt()
        chosen = r.strings("chosen")
        rejected = r.strings("rejected")
        num_correct = r.get("num_correct", int, "an integer (how many leading responses are correct)")
        subset = r.get("subset", str, "the subset name")
        meta: dict[str, Any] = {"num_correct": num_correct}
        if subset is not None:
            if subset.lower() not in canonical:
                _unknown(r, "subset", subset, rules.REWARDBENCH2_SUBSETS)
            else:
                subset = canonical[subset.lower()]
        n = len(chosen or []) + len(rejected or [])
        total = row.get("total_completions")
        if r.ok and total is not None and total != n:
            r.bad(
                f"field 'total_completions' is {total!r} but chosen + rejected hold {n} responses; "
                "the row is inconsistent, use the official file unchanged"
            )
        if r.ok and subset == "Ties":
            m = _TIES_ID.fullmatch(str(ident))
            if not m:
                r.bad(f"field 'id' of a Ties row must be 'ref:<n>' or 'tied:<n>', got {ident!r}")
            elif not 1 <= num_correct < n:
                r.bad(
                    f"field 'num_correct' is {num_correct} but a Ties row needs at least one correct and one "
                    f"incorrect response among its {n}"
                )
            elif m.group(1) == "tied" and num_correct < 2:
                r.bad("field 'num_correct' of a 'tied:' row must be at least 2 (several correct answers)")
            elif str(ident) in seen_ties:
                r.bad(f"field 'id' {ident!r} repeats {seen_ties[str(ident)]}; each Ties prompt appears once")
            else:
                seen_ties[str(ident)] = r.where
                meta.update(ties_kind=m.group(1), ties_prompt=int(m.group(2)))
        if r.ok:
            # r.ok: every required field is present
            assert prompt is not None and chosen is not None and rejected is not None
            examples.append(
                Example(str(ident), subset, prompt, [_assistant(t) for t in chosen + rejected], meta, row=r.where)
            )
    return Parsed(examples, problems, report.rows_read, source)


def parse_rmbench(rows: Rows, report: DataReport, source: str) -> Parsed:
    """THU-KEG/RM-Bench rows: id, prompt (str), chosen (3 str), rejected (3 str), domain (str).

    Styles are ordered [concise, detailed plain, detailed markdown]. The per-domain repo files
    (`<domain>_filtered.json`) have no `domain` field; it is then taken from the file name. An optional
    `reference` (a string or a message list; not in the official data) is a reference answer for
    reference-conditioned scorers such as polar.
    """
    examples: list[Example] = []
    problems: list[str] = []
    stem = Path(source).name.split("_")[0].split(".")[0]
    file_domain = stem if stem in rules.RMBENCH_FILE_DOMAINS else None
    for row_no, row in rows:
        r = _Row(row, _where(source, report, row_no), problems)
        ident = r.get("id", (str, int), "an id")
        prompt = r.prompt()
        chosen = r.strings("chosen", n=3)
        rejected = r.strings("rejected", n=3)
        domain = r.get("domain", str, "the domain", required=file_domain is None) or file_domain
        reference = r.get("reference", (str, list), "a reference answer (a string or messages)", required=False)
        if domain is not None and domain not in rules.RMBENCH_FILE_DOMAINS:
            _unknown(r, "domain", domain, rules.RMBENCH_FILE_DOMAINS)
        if r.ok:
            # r.ok: every required field is present
            assert domain is not None and prompt is not None and chosen is not None and rejected is not None
            examples.append(
                Example(
                    _id(ident, str(row_no)),
                    rules.rmbench_domain(domain),
                    prompt,
                    [_assistant(t) for t in chosen + rejected],
                    {"domain": domain},
                    _reference(reference),
                    row=r.where,
                )
            )
    return Parsed(examples, problems, report.rows_read, source)


def parse_judgebench(rows: Rows, report: DataReport, source: str) -> Parsed:
    """ScalerLab/JudgeBench rows: pair_id, original_id, source, question, response_model, response_A,
    response_B (str), label ('A>B' or 'B>A'). The category is the `source` prefix."""
    examples: list[Example] = []
    problems: list[str] = []
    for row_no, row in rows:
        r = _Row(row, _where(source, report, row_no), problems)
        ident = r.get("pair_id", (str, int), "the pair id")
        question = r.prompt("question")
        a = r.get("response_A", str, "a string (response A)")
        b = r.get("response_B", str, "a string (response B)")
        label = r.get("label", str, "'A>B' or 'B>A'")
        src = r.get("source", str, "the question source (e.g. mmlu-pro-math)")
        category = rules.judgebench_category(src) if src is not None else None
        if label is not None and label not in rules.JUDGEBENCH_LABELS:
            _unknown(r, "label", label, rules.JUDGEBENCH_LABELS)
        if src is not None and category is None:
            r.bad(
                f"field 'source' is {src!r}, which starts with none of the categories "
                f"{', '.join(rules.JUDGEBENCH_CATEGORIES)}; use the official file unchanged"
            )
        if r.ok:
            # r.ok: every required field is present
            assert category is not None and question is not None
            examples.append(
                Example(
                    str(ident),
                    category,
                    question,
                    [_assistant(a), _assistant(b)],
                    # as read, for the file run_judge.py writes (`native`)
                    {
                        "label": label,
                        "source": src,
                        "pair_id": ident,
                        "original_id": row.get("original_id"),
                        "response_model": row.get("response_model"),
                    },
                    row=r.where,
                )
            )
    return Parsed(examples, problems, report.rows_read, source)


def _reference(value: Any) -> Conversation | None:
    if isinstance(value, str):
        return _assistant(value)
    if isinstance(value, list):
        return _messages(value)
    return None


def pair_example(pair: PreferencePair, where: str = "") -> Example:
    """A preference pair as an example: responses [chosen, rejected], grouped by source.

    Suite pairs carry `family` and `corruption` in their attributes; a reference answer, when the data has
    one, is `attributes["reference"]` (a string or a message list).
    """
    a = pair.attributes
    return Example(
        pair.id,
        pair.source or "(none)",
        pair.prompt,
        [pair.chosen, pair.rejected],
        {"family": a.get("family"), "corruption": a.get("corruption")},
        _reference(a.get("reference")),
        row=where or pair.id,
    )


def parse_pairs(rows: Rows, report: DataReport, source: str) -> Parsed:
    """Preference pairs in any pair format stage 1 reads (TRL standard/conversational, HH-RLHF, this
    toolkit's `PreferencePair.to_dict()` dumps); dropped rows are reported with their row numbers."""
    first = next(rows, None)
    if first is None:
        return Parsed([], [], report.rows_read, source)
    fmt, why = formats.detect_format(first[1], f"{source} {report.row_unit} {first[0]}")
    report.details.setdefault("format", fmt)
    report.details.setdefault("format_why", why)
    if formats.FORMATS[fmt].yields != "pairs":
        raise UserError(
            f"{source}: rows look like '{fmt}' data ({formats.FORMATS[fmt].summary}), not preference "
            "pairs; this benchmark needs pairs {prompt, chosen, rejected}"
        )

    def again() -> Rows:
        yield first
        yield from rows

    # a format that yields "pairs" adapts rows to PreferencePair records
    examples = [pair_example(cast(PreferencePair, p)) for p in formats.FORMATS[fmt].adapt(again(), report)]
    return Parsed(examples, [], report.rows_read, source)  # the adapter's drops are in `report`


def comparison_example(c: LabelledComparison, where: str) -> Example:
    """A labelled comparison as an example: responses in the file's order ([first, second], or [winner, *losers]),
    grouped by the file's category; the human labels go to `meta`."""
    meta = {"kind": c.kind, "labels": c.labels, "annotators": c.annotators, "majority": c.majority()}
    return Example(c.id, c.category, c.prompt, c.responses, meta, c.reference, row=where)


def parse_comparisons(rows: Rows, report: DataReport, source: str, options: Any = None) -> Parsed:
    """Any labelled comparison file, read through the column map of `options` (`AgreementOptions`: a preset or
    columns; stage 1's `preference_data.comparisons`). Rows it cannot read are counted in `report` by reason
    with their row numbers (and become problems in `read`); rows merged into an earlier comparison (another
    annotator's label of it) are not problems, and `rows_read` counts them once."""
    if options is None:
        raise UserError(f"{source}: a labelled comparison file needs a column map: a preset or columns")
    mapping, name = mapping_for(options.preset, options.columns)
    report.details.setdefault("format", f"labelled comparisons, column map '{name}'")
    examples = [
        comparison_example(c, _where(source, report, c.attributes.get("row", 0)))
        for c in adapt(mapping, source)(rows, report)
    ]
    merged = report.repaired.get("merged_same_comparison", 0)
    return Parsed(examples, [], report.rows_read - merged, source)


def examples_from_pairs(pairs: list[PreferencePair], source: str = "pairs") -> Parsed:
    """Examples from pairs already in memory (e.g. built by the suite generator)."""
    problems = [
        f"{source} item {i}: not a PreferencePair ({type(p).__name__}); pass PreferencePair objects"
        for i, p in enumerate(pairs)
        if not isinstance(p, PreferencePair)
    ]
    examples = [pair_example(p, f"{source} item {i}") for i, p in enumerate(pairs) if isinstance(p, PreferencePair)]
    return Parsed(examples, problems, len(pairs), source)


Parser = Callable[[Rows, DataReport, str], Parsed]


def read(parser: Parser, source: str, split: str | None) -> Parsed:
    """Read a local file (JSON/JSONL/parquet) or a hub id (`org/name`, optionally `org/name:config`) and parse it.

    Rows that cannot even be read (malformed JSON lines) are counted by stage 1's reader and reported too.
    """
    report = DataReport(source=source)
    parsed = parser(iter_rows(source, report, hub_split=split or "train"), report, source)
    dropped = []
    for reason, n in report.dropped.most_common():
        rows = ", ".join(report.examples.get(reason, []))
        more = ", ..." if n > len(report.examples.get(reason, [])) else ""
        detail = report.details.get(reason, "").removeprefix(f"{source}: ")
        dropped.append(
            f"{source}: {n} {report.row_unit}(s) unreadable as {reason} ({report.row_unit}s {rows}{more})"
            + (f": {detail}" if detail else "")
        )
    parsed.problems[:0] = dropped
    return parsed
