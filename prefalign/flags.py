"""A verb's command-line flags from its typed settings dataclass: the fields ARE the flags, written once.

A verb declares one dataclass whose fields use `option(default, doc)` (`prefalign.config`); `add_flags` gives
the verb one flag per field plus `--config FILE`, and `from_args` builds the dataclass back through
`prefalign.config.build`, so a value typed on the command line and the same key in a YAML file are checked by
the same code, and every problem is reported at once, each naming the flag the user typed:

    field                                                  flag
    max_new_tokens: int = option(96, "tokens per answer")  --max-new-tokens N       help: the doc and default
    dtype: Literal["auto", "float32"] = option("auto", ..) --dtype {auto,float32}   (or option(choices=TABLE))
    allow_partial: bool = option(False, ...)               --allow-partial / --no-allow-partial
    limit: int | None = option(None, ...)                  --limit N                absent: None
    model: str = option(doc=...)                           --model MODEL            required (no default)
    k: list[int] = option(factory=lambda: [1, 2], ...)     --k 1,2,4 (numbers split on commas; or repeat --k)
    scorer: list[str] = option(factory=list, ...)          --scorer S               repeatable
    options: dict[str, Any] = option(factory=dict, ..., flag="--option")
                                                           --option KEY=VALUE       repeatable
    bench: str = option(doc=..., positional=True, metavar="BENCH")
                                                           BENCH                    a positional argument

`--config FILE` reads a YAML mapping of the same fields (snake_case keys, as in the dataclass); flags given on
the command line override it. Values typed as text stay text; numbers, booleans, lists and `null` are read as
YAML scalars, then `build` checks types, `Literal`s and `choices` (with did-you-mean) and the dataclass's own
`check()` for impossible combinations.

Flags are added with argparse's SUPPRESS default and no argparse `type` or `choices`, so argparse never stops at
the first bad value and a flag the user did not type never hides a value from the YAML file.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

from .config import build, optional_of, read_yaml
from .errors import ConfigError

C = TypeVar("C")

_DEST = "settings:"  # prefix of every field's argparse dest, so no field collides with the parser's own keys
_CONFIG_DEST = "settings_config_file"
_CLASS_DEST = "settings_class"
_SOURCE_DEST = "settings_source"


@dataclasses.dataclass(frozen=True)
class Flag:
    """How one field appears on the command line."""

    field: str
    label: str  # what the user types: '--max-new-tokens', or a positional's metavar ('BENCH')
    kind: Literal["text", "value", "bool", "list", "dict"]
    element: Any  # the element type of a list, the value type of a dict, else the field's type
    positional: bool


def flag_name(field: dataclasses.Field) -> str:
    """The flag of a field: `flag=` from its `option(...)`, else `--` and the name in kebab case."""
    return field.metadata.get("flag") or "--" + field.name.replace("_", "-")


def _is_text(tp: Any) -> bool:
    """Whether a value of type `tp` is typed on the command line verbatim (never read as YAML)."""
    tp = optional_of(tp)
    if tp is str:
        return True
    if get_origin(tp) is Literal:
        return all(isinstance(a, str) for a in get_args(tp))
    if get_origin(tp) in (Union, types.UnionType):
        return all(_is_text(a) for a in get_args(tp) if a is not type(None))
    return False


def _flag(f: dataclasses.Field, tp: Any) -> Flag:
    positional = bool(f.metadata.get("positional"))
    label = (f.metadata.get("metavar") or f.name.upper()) if positional else flag_name(f)
    base = optional_of(tp)
    origin = get_origin(base)
    if base is bool:
        return Flag(f.name, label, "bool", bool, positional)
    if origin is list:
        (element,) = get_args(base) or (Any,)
        return Flag(f.name, label, "list", element, positional)
    if origin is dict:
        _, value = get_args(base) or (Any, Any)
        return Flag(f.name, label, "dict", value, positional)
    return Flag(f.name, label, "text" if _is_text(tp) else "value", tp, positional)


def flags(cls: type) -> dict[str, Flag]:
    """Field name -> its flag, in field order."""
    hints = get_type_hints(cls)
    return {f.name: _flag(f, hints[f.name]) for f in dataclasses.fields(cls)}


def flag_of(cls: type, name: str) -> str:
    """What the user types for field `name` of the settings dataclass `cls` (for messages: '--batch-tokens')."""
    return flags(cls)[name].label


def _in_help_order(cls: type) -> list[dataclasses.Field]:
    """The fields the class adds first, then those of the settings it extends (a verb's flags before the shared
    ones; a field the class only re-declares keeps its place among the inherited ones)."""
    inherited = {f.name for base in cls.__mro__[1:] if dataclasses.is_dataclass(base) for f in dataclasses.fields(base)}
    own = set(vars(cls).get("__annotations__", {})) - inherited
    fields = dataclasses.fields(cls)
    return [f for f in fields if f.name in own] + [f for f in fields if f.name not in own]


# --------------------------------------------------------------------------------------------------------
# The parser
# --------------------------------------------------------------------------------------------------------


def _choices(f: dataclasses.Field, tp: Any) -> tuple[Any, ...] | None:
    if "choices" in f.metadata:
        return tuple(f.metadata["choices"])
    base = optional_of(tp)
    return get_args(base) if get_origin(base) is Literal else None


def _default(f: dataclasses.Field) -> Any:
    """The field's default (its factory called), or dataclasses.MISSING for a required field."""
    if f.default is not dataclasses.MISSING:
        return f.default
    factory = f.default_factory
    return factory() if callable(factory) else dataclasses.MISSING


def _help(f: dataclasses.Field, flag: Flag) -> str:
    """The field's doc, then its default where the doc does not already say it (argparse expands %)."""
    text = f.metadata.get("doc", "")
    default = _default(f)
    if default is dataclasses.MISSING:
        text += " (required)"
    elif "default" not in text.lower() and flag.kind != "bool":
        if default not in (None, "", [], {}):
            shown = ",".join(map(str, default)) if isinstance(default, list) else default
            text += f" (default: {shown})"
    return text.replace("%", "%%")


def add_flags(parser: argparse.ArgumentParser, cls: type) -> None:
    """Add one flag per field of the settings dataclass `cls`, and `--config FILE`, to `parser`."""
    hints = get_type_hints(cls)
    for f in _in_help_order(cls):
        flag = _flag(f, hints[f.name])
        dest = _DEST + f.name
        help_ = _help(f, flag)
        choices = _choices(f, hints[f.name])
        metavar = f.metadata.get("metavar")
        if metavar is None and choices is not None:
            metavar = "{" + ",".join(map(str, choices)) + "}"
        if flag.positional:
            if flag.kind not in ("text", "value"):
                raise TypeError(f"{cls.__name__}.{f.name}: a positional argument takes one value, not a {flag.kind}")
            parser.add_argument(dest, metavar=metavar or flag.label, nargs="?", default=argparse.SUPPRESS, help=help_)
        elif flag.kind == "bool":
            parser.add_argument(
                flag.label, dest=dest, action=argparse.BooleanOptionalAction, default=argparse.SUPPRESS, help=help_
            )
        else:
            action = "append" if flag.kind in ("list", "dict") else "store"
            metavar = metavar or ("KEY=VALUE" if flag.kind == "dict" else f.name.upper())
            added = parser.add_argument(
                flag.label, dest=dest, action=action, default=argparse.SUPPRESS, metavar=metavar, help=help_
            )
            # shown as required in the usage line (a --config file may give it instead, so argparse does not check)
            added.show_required = _default(f) is dataclasses.MISSING  # type: ignore[attr-defined]
    renamed = [f"{f.metadata['flag']} is {f.name}" for f in dataclasses.fields(cls) if f.metadata.get("flag")]
    parser.add_argument(
        "--config",
        dest=_CONFIG_DEST,
        default=None,
        metavar="FILE",
        help="a YAML file of these settings, keyed by field name (the flag without -- and with _ for -"
        + "".join(f"; {r}" for r in renamed)
        + "); flags given on the command line override it",
    )
    parser.set_defaults(**{_CLASS_DEST: cls, _SOURCE_DEST: parser.prog})


def settings_class(args: argparse.Namespace) -> type | None:
    """The settings dataclass of the verb that parsed `args` (None for a verb without one)."""
    return getattr(args, _CLASS_DEST, None)


# --------------------------------------------------------------------------------------------------------
# Back to the dataclass
# --------------------------------------------------------------------------------------------------------


def _scalar(tp: Any, text: str) -> Any:
    """A typed value's text as the value `build` checks: verbatim for text, else read as a YAML scalar."""
    if _is_text(tp):
        return text
    import yaml  # not needed to build the parser

    try:
        return yaml.safe_load(text) if text.strip() else text
    except yaml.YAMLError:
        return text


def _numbers(tp: Any) -> bool:
    return optional_of(tp) in (int, float)


def _value(flag: Flag, given: Any, problems: list[str]) -> Any:
    """The field's value from what argparse collected for its flag."""
    if flag.kind == "bool":
        return given
    if flag.kind == "list":
        items = [part for text in given for part in (text.split(",") if _numbers(flag.element) else [text])]
        return [_scalar(flag.element, t.strip() if _numbers(flag.element) else t) for t in items]
    if flag.kind == "dict":
        out: dict[str, Any] = {}
        for text in given:
            key, sep, raw = text.partition("=")
            if not sep or not key.strip():
                problems.append(f"{flag.label}: expected KEY=VALUE, got {text!r}")
                continue
            out[key.strip()] = _scalar(flag.element, raw)
        return out
    return _scalar(flag.element, given)


_LEAD = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(.*)$", re.DOTALL)


def _name_flags(problem: str, table: Mapping[str, Flag], typed: set[str], config: str | None) -> str:
    """A problem `build` wrote about a field, reworded to name the flag (or the key in the --config file)."""
    m = _LEAD.match(problem)
    if not m or m.group(1) not in table:
        return problem if config is None else f"{config}: {problem}"
    name, rest = m.groups()
    if config is not None and name not in typed and not rest.startswith(": required field is missing"):
        return f"{config}: {problem}"  # a value from the file: name the key the user wrote there
    flag = table[name]
    missing = re.match(r": required field is missing \((.*)\)$", rest, re.DOTALL)
    if missing:
        where = f" (or {name}: in the --config file)" if config else ""
        return f"{flag.label} is required{where}: {missing.group(1)}"
    return flag.label + rest


def from_args(cls: type[C], args: argparse.Namespace, source: str | None = None) -> C:
    """The settings dataclass `cls` from the flags `add_flags` added (and the --config file, which they override);
    raises one ConfigError listing every problem, each naming its flag. `source` names the command in the message
    (default: the parser's prog, e.g. 'align eval policy')."""
    source = source or getattr(args, _SOURCE_DEST, None) or "command line"
    table = flags(cls)
    config = getattr(args, _CONFIG_DEST, None)
    problems: list[str] = []
    data: dict[str, Any] = {}
    if config is not None:
        loaded = read_yaml(config)
        if isinstance(loaded, dict):
            data = loaded
        else:
            problems.append(f"{config}: expected a mapping of {cls.__name__} fields, got {type(loaded).__name__}")
    typed: set[str] = set()
    for name, flag in table.items():
        if hasattr(args, _DEST + name):
            data[name] = _value(flag, getattr(args, _DEST + name), problems)
            typed.add(name)
    where = f"{source} --config {Path(config)}" if config else source
    try:
        obj = build(cls, data, where)
    except ConfigError as e:
        # `build` also reports the constructor's TypeError for missing required fields, each already named
        repeated = f"{cls.__name__}: {cls.__name__}.__init__() missing"
        named = [_name_flags(p, table, typed, config) for p in e.problems if not p.startswith(repeated)]
        raise ConfigError(problems + named, where) from None
    if problems:
        raise ConfigError(problems, where)
    return obj


__all__ = ["Flag", "add_flags", "flag_name", "flag_of", "flags", "from_args", "settings_class"]
