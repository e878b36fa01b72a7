"""Files written whole or not at all: every report, record, cache and run file goes through here.

A write goes to a temporary name beside its target (`.NAME.PID.tmp`, never read by anything) and is renamed over
the target only once complete, so a reader sees the previous complete file or the new one, never half of either: a
run killed mid-write, or a disk that fills, leaves the previous state. A full disk (ENOSPC, or EDQUOT for a quota)
becomes a `DiskFull` error that names the path, the space left there and that the previous file is kept; the
temporary file is removed.

- `replacing(path)`: a context manager giving the temporary path for writers that take a path (safetensors,
  torch.save); renamed over `path` when the block ends without an error.
- `write_text`, `write_json`, `write_jsonl`: the usual writers, through `replacing`.
- `free_space(path)`: the space left on the disk that holds `path` (or its nearest existing parent), for messages.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from .errors import UserError

FULL = (errno.ENOSPC, errno.EDQUOT)


class DiskFull(UserError):
    """A write the disk had no room for; the previous file, if any, is kept."""


def free_space(path: str | Path) -> str:
    """'N MiB free there' for the disk holding `path` (its nearest existing parent), or 'free space unknown'."""
    p = Path(path).absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        return f"{shutil.disk_usage(p).free / 2**20:.0f} MiB free there"
    except OSError:
        return "free space unknown"


def disk_full(path: str | Path, kept: bool) -> DiskFull:
    """The error for a full disk while writing `path` (`kept`: an earlier complete file stays in place)."""
    state = f"the previous {Path(path).name} is kept" if kept else "nothing was written"
    return DiskFull(
        f"the disk is full: writing {path} failed ({free_space(path)}); {state}. Free some space and run again"
    )


@contextlib.contextmanager
def replacing(path: str | Path) -> Iterator[Path]:
    """A temporary path beside `path`, renamed over it when the block completes (see the module docstring)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    kept = target.exists()
    try:
        yield tmp
        os.replace(tmp, target)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        if e.errno in FULL:
            raise disk_full(target, kept) from e
        raise
    except BaseException:
        tmp.unlink(missing_ok=True)  # a killed or failed writer leaves no partial file behind
        raise


def write_text(path: str | Path, text: str) -> Path:
    """Write `text` (UTF-8) to `path` whole or not at all."""
    with replacing(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


def write_json(path: str | Path, obj: Any, **dumps: Any) -> Path:
    """Write `obj` as JSON (`dumps`: json.dumps keywords, e.g. indent) whole or not at all, ending in a newline."""
    return write_text(path, json.dumps(obj, **dumps) + "\n")


def write_jsonl(path: str | Path, rows: Iterable[Any], **dumps: Any) -> Path:
    """Write one JSON line per row whole or not at all (an empty file for no rows)."""
    with replacing(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, **dumps) + "\n")
    return Path(path)


__all__ = ["DiskFull", "disk_full", "free_space", "replacing", "write_json", "write_jsonl", "write_text"]
