"""Which typed config each YAML `kind:` means, for `align validate` and the shipped-config test."""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_origin, get_type_hints

from prefalign.config import REFUSED, load, read_yaml
from prefalign.errors import ConfigError, UserError, did_you_mean
from prefalign.models.hub import BUILTINS, is_model_dir, looks_local, run_model_dir
from prefalign.registry import Table

# kind -> (module, class); imported lazily
KINDS: dict[str, tuple[str, str]] = {
    "quickstart": ("align.quickstart", "QuickstartConfig"),
    "rm_train": ("reward_models.rm_train", "RMTrainConfig"),
    "judge_train": ("reward_models.judge_train", "JudgeTrainConfig"),
    "meta_rm_train": ("reward_models.meta_rm", "MetaRMTrainConfig"),
    "polar_pool": ("reward_models.polar.pool", "PolarPoolConfig"),
    "polar_train": ("reward_models.polar.train", "PolarTrainConfig"),
    "train": ("align.train", "TrainConfig"),
    "online": ("align.online", "OnlineConfig"),
    "iterative": ("align.iterative", "IterativeConfig"),
    "rm_strength": ("reward_models.strength", "StrengthConfig"),
    "mo_rm_train": ("reward_models.multi_objective", "MORMTrainConfig"),
}


@dataclass(frozen=True)
class OtherName:
    """Another toolkit's config name and what it is here (`align ls names`)."""

    ours: str
    note: str


def other_names() -> Table[OtherName]:
    """Every other toolkit's name the recipe configs read (their `option(aliases=...)`), and those refused
    (`prefalign.config.REFUSED`) with what to use instead."""
    found: dict[str, OtherName] = {}

    def visit(cls: type, prefix: str) -> None:
        hints = get_type_hints(cls)
        for f in dataclasses.fields(cls):
            key = f"{prefix}{f.name}"
            for name, alias in f.metadata.get("aliases", {}).items():
                is_dict = get_origin(hints[f.name]) is dict
                entry = f"{key}.{alias.entry or name}" if is_dict else key
                found.setdefault(name, OtherName(entry, alias.note))
            for value, ours in f.metadata.get("value_aliases", {}).items():
                found.setdefault(f"{key}: {value}", OtherName(f"{key}: {ours}", "value"))
            tp = hints[f.name]
            if isinstance(tp, type) and dataclasses.is_dataclass(tp):
                visit(tp, key + ".")

    for kind in ("rm_train", "train", "online", "iterative"):
        visit(config_class(kind), "")
    for name, why in REFUSED.items():
        found.setdefault(name, OtherName("(refused)", why))
    return Table("other toolkit's name", found, columns=("ours", "note"))


def config_class(kind: str) -> type:
    module, cls = KINDS[kind]
    return getattr(importlib.import_module(module), cls)


def validate_file(path: str, overrides: list[str] | None = None) -> tuple[str, Any]:
    """Build the typed config a YAML file describes; raise ConfigError listing every problem."""
    data = read_yaml(path)
    kind = data.get("kind") if isinstance(data, dict) else None
    if kind not in KINDS:
        raise ConfigError(
            [
                f"kind: {kind!r} is not a known config kind{did_you_mean(str(kind), list(KINDS))}; "
                f"use one of {', '.join(KINDS)}"
            ],
            path,
        )
    return kind, load(config_class(kind), path, overrides)


# --- what `align validate` checks beyond keys and types ---------------------------------------------------------

MODEL_KEYS = ("model", "base_model", "proxy", "judge", "teacher", "reference_model")
"""Config keys (at any depth) whose string value is a model reference: builtin, local directory or hub id."""
FILE_SUFFIX_KEYS = ("file", "prompts")
OUTPUT_KEYS = ("output_dir", "out_dir")
"""Keys whose string value is a directory the run writes: it must be creatable and writable."""
UNREADABLE = ("malformed_json", "undecodable_bytes", "not_an_object")
"""Drop reasons of rows a file holds but no format can read: `align validate` fails on them, naming the lines."""
RESERVED = ("none", "suite", "gold", "oracle", "auto", "base", "policy", "reference")
"""Values of those keys that name no path (the built-in suite, the gold graders, a role)."""
"""Keys (at any depth, or ending in `_file`) whose string value is an input file that must exist."""


def _walk(node: Any, key: str = ""):
    """(dotted key, value) for every field of a typed config and every entry of its mappings and lists."""
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        yield key, node
        for f in dataclasses.fields(node):
            yield from _walk(getattr(node, f.name), f"{key}.{f.name}" if key else f.name)
    elif isinstance(node, dict):
        yield key, node
        for k, v in node.items():
            yield from _walk(v, f"{key}.{k}" if key else str(k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _walk(v, f"{key}[{i}]")
    else:
        yield key, node


def _check_model(key: str, ref: str, problems: list[str], notes: list[str]) -> None:
    if ref.startswith("builtin:"):
        if ref.split(":", 1)[1] not in BUILTINS:
            problems.append(f"{key}: unknown builtin model '{ref}'{did_you_mean(ref[8:], list(BUILTINS))}")
        return
    if ref.lstrip().startswith(("{", "[")) or "=" in ref or ref.count(":") > 1:
        return  # a scorer spec string: checked by its own parser when the run builds it
    path = Path(ref).expanduser()
    if path.exists():
        if not is_model_dir(path) and run_model_dir(path) is None:
            problems.append(f"{key}: {ref} has no config.json (nor adapter_config.json); point at a saved model")
            return
        problems += [f"{key}: {p}" for p in model_dir_problems(run_model_dir(path) or path)]
        return
    if looks_local(ref):
        problems.append(
            f"{key}: model directory {ref} does not exist (train it first, e.g. with the recipe that writes it, or "
            "fix the path)"
        )
    elif re.fullmatch(r"[\w.\-]+/[\w.\-]+", ref):
        notes.append(f"{key}: {ref} is a hub id (downloaded when the run starts; not checked here)")
    else:
        problems.append(f"{key}: '{ref}' is neither a builtin, an existing model directory, nor a hub id org/name")


WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")


def model_dir_problems(path: Path) -> list[str]:
    """What a local model directory lacks to load: its weights, and a tokenizer (here, or for an adapter in its base
    model's directory); a GGUF-free save_pretrained directory has both. [] when it is complete."""
    out = []
    adapter = (path / "adapter_config.json").exists()
    weights = ADAPTER_WEIGHTS if adapter else WEIGHT_FILES
    if not any((path / f).exists() for f in weights):
        out.append(f"{path} has no weights ({' or '.join(weights)}); it was not saved whole")
    base = path
    if adapter and not any((path / f).exists() for f in TOKENIZER_FILES):
        try:
            base_ref = json.loads((path / "adapter_config.json").read_text(encoding="utf-8")).get(
                "base_model_name_or_path"
            )
        except (OSError, json.JSONDecodeError):
            base_ref = None
        base = Path(str(base_ref)) if base_ref and Path(str(base_ref)).is_dir() else path
    if not any((base / f).exists() for f in TOKENIZER_FILES):
        out.append(
            f"{path} has no tokenizer ({' or '.join(TOKENIZER_FILES)}); save it beside the weights "
            "(tokenizer.save_pretrained(DIR)) or copy the base model's tokenizer files in"
        )
    return out


def output_dir_problem(key: str, value: str) -> str | None:
    """Why a run could not write `value` (its output directory), or None: it is a file, or the nearest existing
    directory above it cannot be written."""
    path = Path(value).expanduser()
    if path.exists() and not path.is_dir():
        return f"{key}: {value} is a file; an output directory must be a directory (or not exist yet)"
    probe = path
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        return f"{key}: {value} cannot be created: {probe} is a file"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"{key}: {value} cannot be {'written' if probe == path else 'created'}: {probe} is not writable"
    return None


def _check_data(key: str, data: Any, problems: list[str], notes: list[str]) -> None:
    from preference_data.io import is_hub_id  # lazy: the data readers, only when a config is checked

    source = getattr(data, "source", None)
    if not isinstance(source, str) or source == "suite":
        return
    if not Path(source).expanduser().exists():
        if is_hub_id(source) and not looks_local(source):
            notes.append(f"{key}.source: {source} is a hub dataset (downloaded when the run starts; not checked here)")
        else:
            problems.append(f"{key}.source: data file {source} does not exist")
        return
    from preference_data.comparisons import mapping_for
    from preference_data.formats import detect_format
    from preference_data.io import iter_rows
    from preference_data.report import DataReport
    from preference_data.sources import read_records

    try:
        rows = iter_rows(source, DataReport(source=source))
        first = next(rows, None)
        if first is None:
            problems.append(f"{key}.source: {source} has no readable rows")
            return
        preset, columns = getattr(data, "preset", None), getattr(data, "columns", None)
        if preset is not None or columns is not None:
            from preference_data.comparisons import check_fields

            check_fields(mapping_for(preset, columns)[0], first[1], f"{source} (row {first[0]})")
            notes.append(f"{key}.source: {source}: first row read through the column map")
            return
        fmt: str = getattr(data, "format", "auto")
        if fmt == "auto":
            fmt, _ = detect_format(first[1], f"{source} ({first[0]})")
        # the whole file, as the run will read it: every row that would be dropped, counted by reason
        records, report = read_records(source, fmt)
        broken = {r: n for r, n in report.dropped.items() if r in UNREADABLE}
        for reason, n in sorted(broken.items()):
            where = ", ".join(report.examples.get(reason, []))
            detail = report.details.get(reason, "")
            problems.append(
                f"{key}.source: {source}: {n} {report.row_unit}(s) {reason.replace('_', ' ')} ({report.row_unit} "
                f"{where}{'; ' + detail if detail else ''}); fix or remove them"
            )
        other = {r: n for r, n in report.dropped.items() if r not in UNREADABLE}
        drops = "; ".join(
            f"{n} {r.replace('_', ' ')} ({report.row_unit} {', '.join(report.examples.get(r, []))})"
            for r, n in sorted(other.items())
        )
        notes.append(
            f"{key}.source: {source}: format '{fmt}', {report.rows_read} rows read, {len(records)} records"
            + (f"; a run drops {drops}" if drops else "; nothing dropped")
        )
    except UserError as e:
        problems.append(f"{key}.source: {e}")


def check_resources(cfg: Any, where: str) -> list[str]:
    """What a run of `cfg` will need, checked before it starts: every local file and model directory it names
    exists (each named by its key), every model is a builtin, a model directory or a well-formed hub id, and the
    first rows of every local data file are readable in the configured format. Raises one ConfigError listing every
    problem; returns notes (what could not be checked offline, what was read)."""
    from prefalign.training.config import HeldOutSection  # lazy, as the data readers
    from preference_data.sources import DataConfig

    problems: list[str] = []
    notes: list[str] = []
    for key, value in _walk(cfg):
        name = key.rsplit(".", 1)[-1].split("[")[0]
        if isinstance(value, str) and value.lower() in RESERVED:
            continue
        if isinstance(value, (DataConfig, HeldOutSection)):
            _check_data(key, value, problems, notes)
        elif isinstance(value, str) and value and name in MODEL_KEYS:
            if name in ("model", "base_model") or "/" in value or value.startswith("builtin:"):
                _check_model(key, value, problems, notes)  # other keys also name kinds (judge: grm)
        elif isinstance(value, str) and value and (name in FILE_SUFFIX_KEYS or name.endswith("_file")):
            if not Path(value).expanduser().exists():
                problems.append(f"{key}: file {value} does not exist")
        elif isinstance(value, str) and value and name in OUTPUT_KEYS:
            problem = output_dir_problem(key, value)
            if problem:
                problems.append(problem)
    if problems:
        raise ConfigError(problems, where)
    return notes
