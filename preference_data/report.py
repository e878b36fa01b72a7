"""Counting what happened to every input row: nothing is dropped or repaired without being counted."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

MAX_EXAMPLES = 5  # row numbers kept per reason


@dataclass
class DataReport:
    """Rows read and kept, and every dropped or repaired row counted by reason with its first row numbers.

    Row numbers are 1-based line numbers for JSONL files and 0-based indices for JSON lists, parquet
    and hub datasets (`row_unit` says which).
    """

    source: str = ""
    row_unit: str = "line"
    rows_read: int = 0
    records_kept: int = 0
    dropped: Counter = field(default_factory=Counter)
    repaired: Counter = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)
    details: dict[str, str] = field(default_factory=dict)

    def _note(self, reason: str, row: int | str, detail: str) -> None:
        ex = self.examples.setdefault(reason, [])
        if len(ex) < MAX_EXAMPLES:
            ex.append(str(row))
        if detail and reason not in self.details:
            self.details[reason] = detail

    def drop(self, reason: str, row: int | str, detail: str = "") -> None:
        self.dropped[reason] += 1
        self._note(reason, row, detail)

    def repair(self, reason: str, row: int | str, detail: str = "") -> None:
        self.repaired[reason] += 1
        self._note(reason, row, detail)

    @property
    def dropped_total(self) -> int:
        return sum(self.dropped.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "row_unit": self.row_unit,
            "rows_read": self.rows_read,
            "records_kept": self.records_kept,
            "dropped_total": self.dropped_total,
            "dropped": dict(self.dropped),
            "repaired": dict(self.repaired),
            "examples": self.examples,
            "details": self.details,
        }

    def lines(self) -> list[str]:
        out = [f"source: {self.source}", f"rows read: {self.rows_read}", f"records kept: {self.records_kept}"]
        if "format" in self.details:
            out.insert(1, f"format: {self.details['format']} ({self.details.get('format_why', '')})")
        for title, counter in (("dropped", self.dropped), ("repaired", self.repaired)):
            if not counter:
                out.append(f"{title}: none")
                continue
            out.append(f"{title}: {sum(counter.values())}")
            for reason, n in counter.most_common():
                rows = ", ".join(self.examples.get(reason, []))
                detail = self.details.get(reason, "")
                out.append(f"  {reason}: {n} ({self.row_unit}s {rows}){' - ' + detail if detail else ''}")
        return out
