"""Typed configs: dataclasses whose YAML mirrors them field for field.

- Each field is documented once, with `doc=` in `option(...)`; `align validate` and the docs read it.
- `build(cls, data)` checks a plain dict against the dataclass: unknown keys (with did-you-mean), wrong
  types, values outside `choices`, and every config's own `check()` for impossible combinations. All
  problems are collected and raised together as one `ConfigError`.
- `apply_overrides(data, ["train.lr=5e-7", ...])` applies dotted command-line overrides; values are
  parsed as YAML scalars (so `true`, `3`, `1e-4`, `[1, 2]` work).
- A verb's settings are a dataclass of the same kind whose fields are its flags (`prefalign.flags`): the CLI
  parses them back through `build`, so a flag and the same key in a YAML file are checked by the same code.
- Other toolkits' names (TRL's `learning_rate`, OpenRLHF's `micro_train_batch_size`, ...) are declared on the field
  they mean (`option(..., aliases={...})`): `build` reads them as that field with a one-line note, also written flat
  at the top level of a recipe (a TRL-style config), and refuses the names with no equivalent (`REFUSED`), saying
  which keys to use. `align ls names` lists them all (`align.cli.configs.other_names`; the manual's table is
  generated from it).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

from .errors import ConfigError, UserError, did_you_mean
from .files import write_text

C = TypeVar("C")
_MISSING = dataclasses.MISSING


@dataclasses.dataclass(frozen=True)
class Alias:
    """Another toolkit's name for a field: where it comes from and how its meaning compares (`note`), and for a
    field that takes a different kind of value there, how theirs map to ours (`values`, e.g. bf16: true -> bf16)."""

    note: str
    values: dict[Any, Any] | None = None
    entry: str | None = None  # on a dict field (`params`): the entry it becomes, when not its own name


MODEL_ALIASES = {"model_name_or_path": Alias("TRL"), "pretrain": Alias("OpenRLHF")}
"""Other toolkits' names of a recipe's `model` (every recipe config declares them on its field)."""
OUTPUT_DIR_ALIASES = {"save_path": Alias("OpenRLHF")}
"""Other toolkits' names of a recipe's `output_dir`."""

REFUSED: dict[str, str] = {
    "max_prompt_length": "TRL's separate prompt budget has no equivalent here: train.max_length bounds the prompt plus "
    "the longer response, and train.length_policy: truncate_prompt_left cuts a long prompt from the left",
    "max_completion_length": "no separate completion budget: train.max_length bounds the prompt plus the longer "
    "response (online runs: rollout.max_new_tokens)",
    "train_batch_size": "OpenRLHF's global batch: set train.batch_size (per process and micro-batch) and "
    "train.grad_accum; the global batch is batch_size x grad_accum x processes",
    "per_device_eval_batch_size": "held-out evaluation runs in batches of train.batch_size",
    "zero_stage": "DeepSpeed runs through `accelerate launch --config_file` with a DeepSpeed config, not a key here",
    "deepspeed": "DeepSpeed runs through `accelerate launch --config_file` with a DeepSpeed config, not a key here",
    "packing": "pairs are always packed (prompt once, no padding); nothing to set",
    "padding_free": "pairs are always packed (prompt once, no padding); nothing to set",
    "use_liger_kernel": "the log-prob head is always chunked (no vocabulary logits kept); nothing to set",
    "ref_model": "reference.model (with reference.kind) names the reference policy",
    "ref_model_name_or_path": "reference.model (with reference.kind) names the reference policy",
}
"""Other toolkits' names that have no field here, with the keys to use instead."""


def option(
    default: Any = _MISSING,
    doc: str = "",
    *,
    factory: Any = None,
    choices: Iterable[Any] | None = None,
    flag: str | None = None,
    metavar: str | None = None,
    positional: bool = False,
    aliases: dict[str, Alias] | None = None,
    value_aliases: dict[Any, Any] | None = None,
) -> Any:
    """A documented config field. Use `factory=` for mutable defaults (lists, dicts, sub-configs).

    `choices` limits the value to a set of names given at run time (a component table's keys, so the names are
    written once, in the table); `build` reports a value outside them with did-you-mean, as it does for a `Literal`.
    `flag`, `metavar` and `positional` shape the field's command-line flag when the dataclass is a verb's
    settings (`prefalign.flags`): the flag's spelling where it is not the field's name in kebab case (kept for
    users' commands), the placeholder shown in `--help`, and a positional argument instead of a flag.
    `aliases`: other toolkits' names of this field (see the module docstring); on a dict field (`params`), the names
    of its entries. `value_aliases`: other names of this field's values (loss.name: dpo -> sigmoid), read with a
    note."""
    meta: dict[str, Any] = {"doc": doc}
    if aliases:
        meta["aliases"] = dict(aliases)
    if value_aliases:
        meta["value_aliases"] = dict(value_aliases)
    if choices is not None:
        meta["choices"] = tuple(choices)
    if flag is not None:
        meta["flag"] = flag
    if metavar is not None:
        meta["metavar"] = metavar
    if positional:
        meta["positional"] = True
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=meta)
    if default is _MISSING:
        return dataclasses.field(metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def _type_name(tp: Any) -> str:
    origin = get_origin(tp)
    if origin is Literal:
        return " | ".join(repr(a) for a in get_args(tp))
    if origin in (Union, types.UnionType):
        return " | ".join(_type_name(a) for a in get_args(tp))
    if origin is list:
        (a,) = get_args(tp) or (Any,)
        return f"list[{_type_name(a)}]"
    if origin is dict:
        k, v = get_args(tp) or (Any, Any)
        return f"dict[{_type_name(k)}, {_type_name(v)}]"
    if tp is type(None):
        return "null"
    return getattr(tp, "__name__", str(tp))


def _convert(tp: Any, value: Any, where: str, problems: list[str], notes: list[str]) -> Any:
    """Check `value` against type `tp`; return the converted value (or None after recording a problem)."""
    origin = get_origin(tp)
    if tp is Any:
        return value
    if origin in (Union, types.UnionType):
        args = get_args(tp)
        if value is None and type(None) in args:
            return None
        others = [a for a in args if a is not type(None)]
        if len(others) == 1 and isinstance(others[0], type) and dataclasses.is_dataclass(others[0]):
            return _convert(others[0], value, where, problems, notes)  # an optional section: report its own problems
        for a in args:
            if a is type(None):
                continue
            trial: list[str] = []
            trial_notes: list[str] = []  # an alternative that fails leaves no notes
            out = _convert(a, value, where, trial, trial_notes)
            if not trial:
                notes.extend(trial_notes)
                return out
        problems.append(f"{where}: expected {_type_name(tp)}, got {value!r}")
        return None
    if origin is Literal:
        allowed = get_args(tp)
        if value not in allowed:
            problems.append(
                f"{where}: {value!r} is not allowed; choose one of {', '.join(map(repr, allowed))}"
                f"{did_you_mean(str(value), [str(a) for a in allowed])}"
            )
            return None
        return value
    if origin is list:
        (a,) = get_args(tp) or (Any,)
        if not isinstance(value, list):
            problems.append(f"{where}: expected a list ({_type_name(tp)}), got {value!r}")
            return None
        return [_convert(a, v, f"{where}[{i}]", problems, notes) for i, v in enumerate(value)]
    if origin is dict:
        k, v = get_args(tp) or (Any, Any)
        if not isinstance(value, dict):
            problems.append(f"{where}: expected a mapping ({_type_name(tp)}), got {value!r}")
            return None
        return {kk: _convert(v, vv, f"{where}.{kk}", problems, notes) for kk, vv in value.items()}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            problems.append(f"{where}: expected a mapping of {tp.__name__} fields, got {value!r}")
            return None
        return _build(tp, value, where, problems, notes)
    if tp is bool:
        if isinstance(value, bool):
            return value
        problems.append(f"{where}: expected true or false, got {value!r}")
        return None
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        problems.append(f"{where}: expected an integer, got {value!r}")
        return None
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):  # YAML reads "1e-4" (no dot) as a string
            try:
                return float(value)
            except ValueError:
                pass
        problems.append(f"{where}: expected a number, got {value!r}")
        return None
    if tp is str:
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
        problems.append(f"{where}: expected a string, got {value!r}")
        return None
    return value


def _default_of(f: dataclasses.Field) -> Any:
    if f.default is not _MISSING:
        return f.default
    if f.default_factory is not _MISSING:
        return f.default_factory()
    return _MISSING


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """`over` laid on `base`, recursively for mappings present in both."""
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _aliases(cls: type) -> dict[str, tuple[str, Alias]]:
    """Other toolkits' names of `cls`'s fields: name -> (field, Alias)."""
    out = {}
    for f in dataclasses.fields(cls):
        for name, alias in f.metadata.get("aliases", {}).items():
            out[name] = (f.name, alias)
    return out


def _section_aliases(cls: type) -> dict[str, tuple[str, str, Alias]]:
    """Names of the fields of `cls`'s sections (dataclass-typed fields) that may be written flat at the top level of
    a recipe, as TRL and OpenRLHF configs are: other toolkits' names and our own, where one section alone has the
    name. name -> (section, field, Alias; an empty note for our own name)."""
    hints = get_type_hints(cls)
    found: dict[str, list[tuple[str, str, Alias]]] = {}
    for f in dataclasses.fields(cls):
        tp = optional_of(hints[f.name])
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            for name, (field, alias) in _aliases(tp).items():
                found.setdefault(name, []).append((f.name, field, alias))
            for g in dataclasses.fields(tp):
                found.setdefault(g.name, []).append((f.name, g.name, Alias("")))
    return {name: places[0] for name, places in found.items() if len({p[0] for p in places}) == 1}


def optional_of(tp: Any) -> Any:
    """`X` for `X | None`, else `tp`."""
    if get_origin(tp) in (Union, types.UnionType):
        rest = [a for a in get_args(tp) if a is not type(None)]
        if len(rest) == 1:
            return rest[0]
    return tp


def _translate(cls: type, data: dict[str, Any], where: str, problems: list[str], notes: list[str]) -> dict[str, Any]:
    """`data` with other toolkits' names of `cls`'s fields (and, at the top level, of its sections' fields) read
    as ours, each with a note; names in REFUSED become problems saying what to use."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    own, flat = _aliases(cls), _section_aliases(cls) if not where else {}
    out: dict[str, Any] = {}
    moved: dict[str, dict[str, Any]] = {}
    for key, value in data.items():
        here = f"{where}.{key}" if where else str(key)
        if key in fields:  # an alias met earlier may have filled a dict field (params) already: keep both
            merged = isinstance(out.get(key), dict) and isinstance(value, dict)
            out[key] = {**value, **out[key]} if merged else value
        elif key in own:
            field, alias = own[key]
            target = fields[field]
            if isinstance(_default_of(target), dict):
                entry = alias.entry or key  # an entry of a dict field (params)
                out[field] = {**(out.get(field) or data.get(field) or {}), entry: value}
                notes.append(f"{here} ({alias.note}) read as {where + '.' if where else ''}{field}.{entry}")
                continue
            if field in data:
                problems.append(f"{here}: {field} is given too; give one of them ({alias.note})")
                continue
            out[field] = alias.values.get(value, value) if alias.values and _hashable(value) else value
            notes.append(f"{here} ({alias.note}) read as {where + '.' if where else ''}{field}")
        elif key in flat:  # written flat at the top level: moved into its section, whose build reads it
            section, field, alias = flat[key]
            moved.setdefault(section, {})[key] = value
            if not alias.note:
                notes.append(f"{here} read as {section}.{field} (it belongs in the {section} section)")
        elif key in REFUSED:
            problems.append(f"{here}: not a key here: {REFUSED[key]}")
        else:
            out[key] = value  # unknown: `_build` names it with did-you-mean
    for section, values in moved.items():
        current = out.get(section, data.get(section))
        current = current if isinstance(current, dict) else {}
        for key in values.keys() & current.keys():
            problems.append(f"{key}: given at the top level and in {section}; give it once")
        out[section] = {**current, **values}
    return out


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def _build(cls: type[C], data: dict[str, Any], where: str, problems: list[str], notes: list[str]) -> C:
    hints = get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    if not where:  # a section's own names were read as ours by its parent, before its defaults filled it in
        data = _translate(cls, data, where, problems, notes)
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        here = f"{where}.{key}" if where else str(key)
        if key not in fields:
            problems.append(
                f"{here}: unknown key{did_you_mean(str(key), list(fields))}; {cls.__name__} has: {', '.join(fields)}"
            )
            continue
        value_aliases = fields[key].metadata.get("value_aliases")
        if value_aliases and _hashable(value) and value in value_aliases:
            notes.append(f"{here}: {value!r} read as {value_aliases[value]!r}")
            value = value_aliases[value]
        n = len(problems)
        default = _default_of(fields[key])
        section = optional_of(hints[key])
        if isinstance(value, dict) and isinstance(section, type) and dataclasses.is_dataclass(section):
            value = _translate(section, value, here, problems, notes)  # before the defaults fill it in
        if isinstance(value, dict) and dataclasses.is_dataclass(default):
            # a partial section changes the fields it names and keeps the rest of the field's own default
            # (which may differ from its class's defaults, as the quickstart's rm and dpo sections do)
            value = _merge(to_dict(default), value)
        converted = _convert(hints[key], value, here, problems, notes)
        allowed = fields[key].metadata.get("choices")
        if allowed is not None and len(problems) == n and converted is not None and converted not in allowed:
            problems.append(
                f"{here}: {converted!r} is not allowed; choose one of {', '.join(map(str, allowed))}"
                f"{did_you_mean(str(converted), [str(a) for a in allowed])}"
            )
        if len(problems) == n:  # a field with a problem keeps its default, so cross-field checks still run
            kwargs[key] = converted
    for name, f in fields.items():
        if name not in data and f.default is _MISSING and f.default_factory is _MISSING:
            here = f"{where}.{name}" if where else name
            problems.append(f"{here}: required field is missing ({f.metadata.get('doc', '')})")
    try:
        obj = cls(**{k: v for k, v in kwargs.items()})
    except TypeError as e:  # a required field was missing; already reported
        problems.append(f"{where or cls.__name__}: {e}")
        return None  # type: ignore[return-value]
    check = getattr(obj, "check", None)
    if callable(check):
        for p in check():
            problems.append(f"{where}.{p}" if where and not p.startswith(where) else p)
    return obj


def build(cls: type[C], data: dict[str, Any], source: str = "config") -> C:
    """Build a config from a plain dict, raising one ConfigError that lists every problem."""
    if not isinstance(data, dict):
        raise ConfigError(
            [f"the top level must be a mapping of {cls.__name__} fields, got {type(data).__name__}"], source
        )
    problems: list[str] = []
    notes: list[str] = []  # other toolkits' names read as ours: printed to stderr
    obj = _build(cls, data, "", problems, notes)
    if problems:
        raise ConfigError(problems, source)
    if notes:
        import sys

        for note in dict.fromkeys(notes):
            print(f"note: {source}: {note}", file=sys.stderr)
    return obj


def parse_override(text: str) -> tuple[list[str], Any]:
    import yaml

    if "=" not in text:
        raise UserError(f"override '{text}' must look like section.key=value (e.g. train.lr=5e-7)")
    key, raw = text.split("=", 1)
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key.strip().split("."), value


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply dotted overrides (`a.b=1`) to a nested dict in place and return it."""
    for text in overrides:
        keys, value = parse_override(text)
        node = data
        for k in keys[:-1]:
            if not isinstance(node.get(k), dict):
                node[k] = {}
            node = node[k]
        node[keys[-1]] = value
    return data


def read_yaml(path: str | Path) -> dict[str, Any]:
    import yaml

    p = Path(path)
    if not p.exists():
        raise UserError(f"config file {p} does not exist; list the shipped recipes with `ls configs/`")
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        raise UserError(f"{p}: not valid YAML: {e}") from None
    return data if data is not None else {}


def load(
    cls: type[C], path: str | Path | None = None, overrides: list[str] | None = None, base: dict[str, Any] | None = None
) -> C:
    """Read YAML (or start from `base`), apply overrides, and build the typed config."""
    data = dict(base or {})
    if path is not None:
        data = read_yaml(path)
    apply_overrides(data, list(overrides or []))
    return build(cls, data, str(path) if path else cls.__name__)


def to_dict(cfg: Any) -> Any:
    if dataclasses.is_dataclass(cfg):
        return {f.name: to_dict(getattr(cfg, f.name)) for f in dataclasses.fields(cfg)}
    if isinstance(cfg, list):
        return [to_dict(v) for v in cfg]
    if isinstance(cfg, dict):
        return {k: to_dict(v) for k, v in cfg.items()}
    return cfg


def dump_yaml(cfg: Any, path: str | Path) -> None:
    import yaml

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    write_text(path, yaml.safe_dump(to_dict(cfg), sort_keys=False))


def describe(cls: type, prefix: str = "") -> list[tuple[str, str, str, str]]:
    """(dotted name, type, default, doc) for every field, recursively: the config's documentation."""
    rows = []
    hints = get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        name = f"{prefix}{f.name}"
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            rows.append((name, tp.__name__, "", f.metadata.get("doc", "")))
            rows.extend(describe(tp, name + "."))
            continue
        if f.default is not _MISSING:
            default = repr(f.default)
        elif f.default_factory is not _MISSING:
            default = repr(f.default_factory())
        else:
            default = "(required)"
        rows.append((name, _type_name(tp), default, f.metadata.get("doc", "")))
    return rows


__all__ = [
    "option",
    "build",
    "load",
    "apply_overrides",
    "parse_override",
    "read_yaml",
    "to_dict",
    "dump_yaml",
    "describe",
    "typing",
]
