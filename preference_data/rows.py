"""What every row adapter shares (the format adapters in `formats.py`, the comparison presets in
`comparisons.py`): the row stream, the exception that drops a row under a named reason, and the parsing of a
field that holds a string or messages."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .records import Message

Rows = Iterator[tuple[int, dict[str, Any]]]
"""(row number, row) pairs from `io.iter_rows`."""


class Skip(Exception):
    """Raised by a row converter: the row is dropped and counted under `reason`."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.detail = detail


def parse_messages(value: Any, name: str) -> list[Message]:
    """A string (one message, role assigned later) or a list of {role, content} dicts."""
    if isinstance(value, str):
        return [Message("", value)]
    if isinstance(value, dict) and "role" in value and "content" in value:
        value = [value]
    if not isinstance(value, list):
        raise Skip(
            "wrong_type", f"field '{name}' must be a string or a list of {{role, content}}, got {type(value).__name__}"
        )
    out = []
    for i, m in enumerate(value):
        if not isinstance(m, dict) or "role" not in m or "content" not in m:
            raise Skip("wrong_type", f"field '{name}[{i}]' must be {{role, content}}, got {str(m)[:60]!r}")
        if m["role"] not in ("system", "user", "assistant"):
            raise Skip("bad_role", f"field '{name}[{i}].role' is {m['role']!r}; use system, user or assistant")
        if not isinstance(m["content"], str):
            raise Skip("wrong_type", f"field '{name}[{i}].content' must be a string")
        out.append(Message(m["role"], m["content"]))
    return out


def common_prefix(a: list[Message], b: list[Message]) -> int:
    """How many leading messages `a` and `b` share (an implicit prompt is the shared prefix)."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n
