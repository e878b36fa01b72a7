"""Component tables: one dict literal per kind of component, looked up with a helpful error.

Each stage declares its table as a module-level `Table` (losses, scorers, benchmarks, sources,
pairing). Entries are plain objects with a `name`, a one-line `summary` and the fields that say what
they need; `align ls` prints them with `rows()`.

An entry that is a function with parameters (the loss tables) is a `FunctionSpec`: the parameters are the
function's keyword-only arguments, so their names and defaults are written once, in the signature; allowed
values come from `Literal` annotations and the entry's `bounds`. `FunctionSpec.problems` checks a
configured set of parameters against it and reports every problem at once.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import typing
from collections.abc import Callable, Iterator, Mapping
from typing import Any, ClassVar, Generic, Literal, TypeVar

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
            raise UserError(
                f"unknown {self.kind} '{name}'{did_you_mean(name, list(self.entries))}; "
                f"choose one of: {', '.join(sorted(self.entries))} (see `align ls`)"
            ) from None

    def __contains__(self, name: object) -> bool:
        return name in self.entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.entries)

    def names(self) -> list[str]:
        return list(self.entries)

    def rows(self) -> list[dict[str, Any]]:
        out = []
        for name, e in self.entries.items():
            row: dict[str, Any] = {"name": name}
            for c in self.columns:
                v = getattr(e, c, None) if not isinstance(e, dict) else e.get(c)
                row[c] = v
            out.append(row)
        return out


@dataclasses.dataclass(frozen=True)
class Interval:
    """Allowed values of a numeric parameter: low ≤ x ≤ high, with either end optionally open."""

    low: float = -math.inf
    high: float = math.inf
    low_open: bool = False
    high_open: bool = False

    def __contains__(self, x: float) -> bool:
        above = x > self.low if self.low_open else x >= self.low
        below = x < self.high if self.high_open else x <= self.high
        return above and below

    def __str__(self) -> str:
        lo = "(" if self.low_open or self.low == -math.inf else "["
        hi = ")" if self.high_open or self.high == math.inf else "]"
        return f"{lo}{self.low:g}, {self.high:g}{hi}"  # f"{math.inf:g}" is "inf"


REAL = Interval()
POSITIVE = Interval(0.0, low_open=True)
NON_NEGATIVE = Interval(0.0)
UNIT = Interval(0.0, 1.0)


@dataclasses.dataclass(frozen=True)
class FunctionSpec:
    """A table entry that is a function with parameters: `fn`'s keyword-only arguments plus the `common`
    parameters every entry of the table accepts (applied by the table's entry point, not by `fn`).

    Subclasses set `kind` (the table's kind, for messages) and `common` ({name: (default, range, meaning)}).
    """

    name: str
    fn: Callable[..., Any]
    summary: str
    bounds: Mapping[str, Interval] = dataclasses.field(default_factory=dict, kw_only=True)

    kind: ClassVar[str] = "component"
    common: ClassVar[Mapping[str, tuple[Any, Interval, str]]] = {}

    @property
    def params(self) -> tuple[str, ...]:
        return tuple(self.defaults)

    @property
    def defaults(self) -> dict[str, Any]:
        sig = inspect.signature(self.fn)
        own = {p.name: p.default for p in sig.parameters.values() if p.kind is inspect.Parameter.KEYWORD_ONLY}
        return own | {k: v[0] for k, v in self.common.items()}

    def choices(self, param: str) -> tuple[Any, ...] | None:
        """Allowed values of a `Literal`-typed parameter, else None."""
        hint = typing.get_type_hints(self.fn).get(param)
        return typing.get_args(hint) if typing.get_origin(hint) is Literal else None

    def bound(self, param: str) -> Interval | None:
        """The allowed range of a numeric parameter (None: any number)."""
        if param in self.common:
            return self.common[param][1]
        return self.bounds.get(param)

    def problems(self, params: Mapping[str, Any], where: str) -> list[str]:
        """Every problem with `params` (unknown names, values outside the choices or the range, non-numbers), one
        line each, prefixed with `where` (the config path of the parameters)."""
        problems = []
        allowed = self.params
        for key, value in params.items():
            at = f"{where}.{key}"
            if key not in allowed:
                problems.append(
                    f"{at}: unknown parameter for {self.kind} '{self.name}'{did_you_mean(key, allowed)}; "
                    f"it takes: {', '.join(allowed)}"
                )
                continue
            choices = self.choices(key)
            if choices is not None:
                if value not in choices:
                    hint = did_you_mean(str(value), [str(c) for c in choices])
                    problems.append(
                        f"{at}: {value!r} is not allowed; choose one of {', '.join(map(repr, choices))}{hint}"
                    )
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
                problems.append(f"{at}: expected a number, got {value!r}")
                continue
            bound = self.bound(key)
            if bound is not None and value not in bound:
                problems.append(f"{at}: {value!r} is outside the allowed range {bound} for {self.kind} '{self.name}'")
        return problems
