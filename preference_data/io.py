"""Reading rows from files (JSON, JSONL, gzip, parquet) and hub datasets, counting every bad row.

JSONL is split on b"\\n" only (some texts contain U+2028, which `str.splitlines` would split on). Each line
is decoded and parsed on its own, so one malformed line or undecodable byte costs one row, reported with
its line number, never the whole file.
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prefalign.errors import UserError
from prefalign.models.hub import looks_local

from .report import DataReport

SUFFIXES = (".jsonl", ".jsonl.gz", ".json", ".json.gz", ".parquet")
HUB_ID = re.compile(r"[\w.\-]+/[\w.\-]+(:[\w.\-]+)?")


def is_hub_id(source: str) -> bool:
    return not Path(source).exists() and bool(HUB_ID.fullmatch(source))


def _read_bytes(path: Path) -> bytes:
    raw = path.read_bytes()
    if path.name.endswith(".gz"):
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as e:
            raise UserError(f"{path}: not a valid gzip file ({e}); re-download it or decompress it by hand") from None
    return raw


def _jsonl_rows(path: Path, raw: bytes, report: DataReport) -> Iterator[tuple[int, dict[str, Any]]]:
    report.row_unit = "line"
    for lineno, line in enumerate(raw.split(b"\n"), start=1):
        if not line.strip():
            continue
        report.rows_read += 1
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as e:
            report.drop("undecodable_bytes", lineno, f"{path}: bytes {e.start}-{e.end} of the line are not UTF-8")
            continue
        try:
            row = json.loads(text)
        except json.JSONDecodeError as e:
            report.drop("malformed_json", lineno, f"{path}: {e.msg} at column {e.colno}")
            continue
        if not isinstance(row, dict):
            report.drop("not_an_object", lineno, f"{path}: each line must be a JSON object, got {type(row).__name__}")
            continue
        yield lineno, row


def _json_rows(path: Path, raw: bytes, report: DataReport) -> Iterator[tuple[int, dict[str, Any]]]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        yield from _jsonl_rows(path, raw, report)  # per-line decoding localises the bad bytes
        return
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        if text.lstrip().startswith("{") and "\n" in text.strip():
            yield from _jsonl_rows(path, raw, report)  # JSONL saved with a .json suffix
            return
        raise UserError(
            f"{path}: not valid JSON ({e.msg} at line {e.lineno}, column {e.colno}); "
            "fix the file or save it as JSONL so bad rows can be skipped one by one"
        ) from None
    if isinstance(data, dict):
        for key in ("data", "rows", "examples", "train"):
            if isinstance(data.get(key), list):
                data = data[key]
                break
        else:
            data = [data]
    if not isinstance(data, list):
        raise UserError(f"{path}: expected a JSON list of objects, got {type(data).__name__}")
    report.row_unit = "row"
    for i, row in enumerate(data):
        report.rows_read += 1
        if not isinstance(row, dict):
            report.drop("not_an_object", i, f"{path}: each item must be a JSON object, got {type(row).__name__}")
            continue
        yield i, row


def _parquet_rows(path: Path, report: DataReport) -> Iterator[tuple[int, dict[str, Any]]]:
    import pyarrow.parquet as pq  # lazy: pyarrow, only for parquet files

    try:
        table = pq.read_table(path)
    except Exception as e:  # pyarrow raises several unrelated types for a bad file
        raise UserError(f"{path}: not a readable parquet file ({e})") from None
    report.row_unit = "row"
    for i, row in enumerate(table.to_pylist()):
        report.rows_read += 1
        yield i, row


def _hub_rows(
    source: str, split: str, report: DataReport, data_dir: str | None = None
) -> Iterator[tuple[int, dict[str, Any]]]:
    import datasets  # lazy: datasets (seconds), only for a hub id

    name = None
    if ":" in source:
        source, name = source.split(":", 1)
    try:
        ds = datasets.load_dataset(source, name, split=split, data_dir=data_dir)
    except Exception as e:  # network, missing dataset, missing split: all user-fixable
        raise UserError(
            f"could not load hub dataset '{source}' (config {name}, data_dir {data_dir}, split {split}): "
            f"{e.__class__.__name__}: {str(e).splitlines()[0] if str(e) else ''}. "
            "Check the id and split, or download it and pass the local file"
        ) from None
    report.row_unit = "row"
    for i, row in enumerate(ds):
        report.rows_read += 1
        yield i, dict(row)


def is_url(source: str) -> bool:
    return source.startswith(("https://", "http://"))


def downloaded(url: str) -> Path:
    """The local copy of a data file at `url`, downloaded once into the prefalign cache (`downloads/`)."""
    import hashlib
    import os
    import urllib.request

    from prefalign.models.hub import cache_dir, file_lock

    name = url.rstrip("/").rsplit("/", 1)[-1].split("?")[0] or "data"
    dest = cache_dir() / "downloads" / f"{hashlib.sha1(url.encode()).hexdigest()[:12]}-{name}"
    with file_lock(dest):
        if not dest.exists():
            tmp = dest.with_name(dest.name + ".partial")
            try:
                with urllib.request.urlopen(url, timeout=60) as r, open(tmp, "wb") as f:
                    f.write(r.read())
            except OSError as e:
                raise UserError(
                    f"could not download {url} ({e}); download it by hand and pass the local file"
                ) from None
            os.replace(tmp, dest)
    return dest


def iter_rows(
    source: str, report: DataReport, hub_split: str = "train", data_dir: str | None = None
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (row number, row dict) from a local file, a URL of one (downloaded once), or a hub id (`hub_split`;
    `data_dir`: the folder of the hub repository to read, e.g. helpful-base of Anthropic/hh-rlhf), recording bad rows
    in `report`."""
    if is_url(source):
        yield from iter_rows(str(downloaded(source)), report)
        return
    path = Path(source).expanduser()
    if not path.exists():
        if looks_local(source):
            raise UserError(f"data file {source} does not exist (a local path is never looked up on the hub)")
        if is_hub_id(source):
            yield from _hub_rows(source, hub_split, report, data_dir)
            return
        raise UserError(f"data source '{source}' is not an existing file, 'suite', or a hub id like 'org/name'")
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.name.endswith(SUFFIXES))
        if not files:
            raise UserError(f"{path}: directory has no data files ({', '.join(SUFFIXES)})")
        for f in files:
            yield from iter_rows(str(f), report, hub_split)
        return
    name = path.name
    if name.endswith(".parquet"):
        yield from _parquet_rows(path, report)
    elif name.endswith((".jsonl", ".jsonl.gz")):
        yield from _jsonl_rows(path, _read_bytes(path), report)
    elif name.endswith((".json", ".json.gz")):
        yield from _json_rows(path, _read_bytes(path), report)
    else:
        raise UserError(f"{path}: unknown file type; use one of {', '.join(SUFFIXES)}")
