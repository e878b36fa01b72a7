"""Component tables: one dict literal per kind of component, looked up with a helpful error.

Each stage declares its table as a module-level `Table` (losses, scorers, benchmarks, sources,
pairing). Entries are plain objects with a `name`, a one-line `summary` and the fields that say what
they need; `align ls` prints them with `rows()`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Generic, TypeVar

from .errors import UserError, did_you_mean

T = TypeVar("T")


class Table(Generic[T]):
    def __init__(self, kind: str, entries: dict[str, T], columns: tuple[str, ...] = ("summary",)) -> None:
        self.kind = kind
        self.entries = entries
        self.columns = columns

    def __getitem__(self, name: str) -> T:
        try:
            return self.entries[name]
        except KeyError:
            raise UserError(f"unknown {self.kind} '{name}'{did_you_mean(name, list(self.entries))}; "
                            f"choose one of: {', '.join(sorted(self.entries))} (see `align ls`)") from None

    def __contains__(self, name: object) -> bool:
        return name in self.entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.entries)

    def names(self) -> list[str]:
        return list(self.entries)

    def rows(self) -> list[dict[str, Any]]:
        out = []
        for name, e in self.entries.items():
            row = {"name": name}
            for c in self.columns:
                v = getattr(e, c, None) if not isinstance(e, dict) else e.get(c)
                row[c] = v
            out.append(row)
        return out
