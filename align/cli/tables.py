"""The tables `align ls` prints; each is imported only when asked for."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from prefalign.models.hub import BUILTINS
from prefalign.registry import Table


def _lazy(module: str, attr: str) -> Callable[[], Table[Any]]:
    def get() -> Table[Any]:
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as e:
            if e.name and e.name.startswith(module.split(".")[0]):
                return Table(attr.lower(), {})  # a stage not built yet has an empty table
            raise
        return getattr(mod, attr)

    return get


TABLES: dict[str, Callable[[], Table[Any]]] = {
    "losses": _lazy("align.losses", "LOSSES"),
    "pg-losses": _lazy("align.losses.policy_gradient", "PG_LOSSES"),
    "pair-rules": _lazy("align.iterative", "PAIR_RULES"),
    "advantages": _lazy("align.losses.policy_gradient", "ADVANTAGES"),
    "weight-updates": _lazy("align.composition", "UPDATE_RULES"),
    "aggregators": _lazy("reward_models.composition", "AGGREGATORS"),
    "rm-losses": _lazy("reward_models.losses", "RM_LOSSES"),
    "scorers": _lazy("reward_models.scorers", "SCORERS"),
    "benchmarks": _lazy("leaderboards.benchmarks", "BENCHMARKS"),
    "policy-benchmarks": _lazy("leaderboards.policy_bench", "POLICY_BENCHMARKS"),
    "sources": _lazy("preference_data.sources", "SOURCES"),
    "formats": _lazy("preference_data.formats", "FORMATS"),
    "presets": _lazy("preference_data.comparisons", "PRESETS"),
    "pairing": _lazy("preference_data.pairing", "PAIRING"),
    "families": _lazy("preference_data.suite", "FAMILIES"),
    "models": _lazy("align.cli.tables", "MODELS"),
    "names": _lazy("align.cli.tables", "NAMES"),
}


@dataclass(frozen=True)
class Builtin:
    summary: str


def _models() -> Table[Any]:
    return Table("builtin model", {f"builtin:{k}": Builtin(v) for k, v in BUILTINS.items()})


def __getattr__(name: str) -> Any:
    if name == "MODELS":
        return _models()
    if name == "NAMES":  # TRL's and OpenRLHF's config names, as the recipe configs read them
        from .configs import other_names

        return other_names()
    raise AttributeError(name)


def print_table(name: str, table: Table[Any]) -> None:
    rows = table.rows()
    print(f"\n{name} ({len(rows)})")
    if not rows:
        print("  (none yet)")
        return
    cols = ["name", *table.columns]
    cells = [[_fmt(r.get(c)) for c in cols] for r in rows]
    widths = [min(max(len(c), *(len(row[i]) for row in cells)), 70) for i, c in enumerate(cols)]
    print("  " + "  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)))
    for row in cells:
        print("  " + "  ".join(v[:70].ljust(w) for v, w in zip(row, widths, strict=True)))


def _fmt(v: Any) -> str:
    if isinstance(v, bool):
        return "yes" if v else "-"
    if isinstance(v, (tuple, list)):
        return ", ".join(map(str, v)) or "-"
    return "" if v is None else str(v)
