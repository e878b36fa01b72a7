"""The typed config system: YAML mirrors dataclasses; every problem reported at once with did-you-mean."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import pytest

from prefalign.config import apply_overrides, build, describe, load, option
from prefalign.errors import ConfigError


@dataclass
class Inner:
    lr: float = option(1e-4, "learning rate")
    steps: int = option(10, "optimizer steps")

    def check(self) -> list[str]:
        return ["lr: must be positive"] if self.lr <= 0 else []


@dataclass
class Outer:
    name: str = option("x", "a name")
    mode: Literal["a", "b"] = option("a", "the mode")
    tags: list[str] = option(factory=list, doc="tags")
    limit: int | None = option(None, "optional limit")
    train: Inner = option(factory=Inner, doc="training")


def test_builds_nested_and_converts():
    cfg = build(Outer, {"mode": "b", "tags": ["t"], "limit": 3, "train": {"lr": "5e-7", "steps": 2}})
    assert cfg.mode == "b" and cfg.train.lr == 5e-7 and cfg.train.steps == 2 and cfg.limit == 3


def test_reports_every_problem_at_once():
    with pytest.raises(ConfigError) as e:
        build(Outer, {"nmae": "y", "mode": "c", "limit": "many", "train": {"lr": -1.0, "stpes": 3}})
    probs = e.value.problems
    assert any("nmae: unknown key (did you mean 'name'?)" in p for p in probs)
    assert any("mode: 'c' is not allowed" in p for p in probs)
    assert any(p.startswith("limit: expected int | null") for p in probs)
    assert any("train.stpes: unknown key (did you mean 'steps'?)" in p for p in probs)
    assert any("train.lr: must be positive" in p for p in probs)
    assert len(probs) == 5


def test_overrides_and_yaml(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("name: base\ntrain:\n  lr: 0.1\n")
    cfg = load(Outer, f, ["train.steps=7", "tags=[a, b]", "limit=null"])
    assert cfg.name == "base" and cfg.train.steps == 7 and cfg.tags == ["a", "b"] and cfg.limit is None
    assert apply_overrides({}, ["a.b.c=1"]) == {"a": {"b": {"c": 1}}}


def test_describe_documents_every_field():
    rows = {r[0]: r for r in describe(Outer)}
    assert rows["train.lr"][3] == "learning rate" and rows["mode"][1] == "'a' | 'b'"


def test_cli_validate_reports_problems(tmp_path, capsys):
    from align.cli.main import main

    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: quickstart\nmodle: x\nsuite:\n  per_family: many\ndoctor:\n  policy: dorp\n  max_length: 8\n")
    assert main(["validate", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "4 problem(s)" in err and "did you mean 'model'" in err and "doctor.max_length: must be at least 32" in err
    wrong_kind = tmp_path / "k.yaml"
    wrong_kind.write_text("kind: quikstart\n")
    assert main(["validate", str(wrong_kind)]) == 2
    assert "did you mean 'quickstart'" in capsys.readouterr().err


# --- an override changes the field it names and nothing else, in every recipe ------------------------


def _leaves(cls: type, prefix: str = "") -> list[tuple[str, object, object]]:
    """(dotted name, type, default) of every non-dataclass field, recursing into sections."""
    import dataclasses
    import typing

    out = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            out.extend(_leaves(tp, f"{prefix}{f.name}."))
        elif any(dataclasses.is_dataclass(a) for a in typing.get_args(tp)):
            continue  # an optional section (data.columns), absent by default: no leaf to override
        else:
            out.append((prefix + f.name, tp, None))
    return out


def _get(d: dict, dotted: str):
    for k in dotted.split("."):
        d = d[k]
    return d


def _candidates(tp, value) -> list:
    """Values of type `tp` different from `value`, the likeliest to pass a config's checks first."""
    import typing

    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is dict:  # a mapping (a section given as YAML, e.g. rounds.verify): no leaf to override
        return []
    if origin is Literal:
        return [a for a in args if a != value]
    if value is None or (origin in (typing.Union, __import__("types").UnionType)):
        inner = [a for a in args if a is not type(None)] or [tp]
        if value is not None:  # a union's member of the value's own type (int | list[int] holding a list)
            own = [a for a in inner if isinstance(typing.get_origin(a) or a, type)]
            inner = [a for a in own if isinstance(value, typing.get_origin(a) or a)] or inner
        return [c for a in inner for c in _candidates(a, value if value is not None else _zero(a))] + (
            [None] if value is not None and type(None) in args else []
        )
    if tp is bool:
        return [not value]
    if tp is int:
        return [value + 1, value * 2 + 3, max(value - 1, 0)]
    if tp is float:
        return [value / 2 if value else 0.25, value + 0.5, value * 3 + 1]
    if tp is str:
        return [value + "x", "builtin:tiny-llama", "llmbar"]  # a model reference; a preset name (data.preset)
    if origin is list:
        return [value[:-1] if len(value) > 1 else value + value] if value else []
    return []


def _zero(tp):
    return {int: 0, float: 0.0, str: "", bool: False}.get(tp, None)


@pytest.mark.parametrize("kind", ["quickstart", "rm_train", "train", "rm_strength"])
def test_an_override_changes_exactly_the_field_it_names(kind):
    """For every leaf field of every recipe (nested defaults included, e.g. the quickstart's rm and dpo
    sections): `field=value` on the command line changes that field and nothing else."""
    import yaml

    from align.cli.configs import config_class
    from prefalign.config import to_dict

    cls = config_class(kind)
    base = to_dict(load(cls, None, []))
    changed, refused = 0, []
    for name, tp, _ in _leaves(cls):
        value = _get(base, name)
        if isinstance(value, dict):  # loss params: a mapping field, checked below through one of its keys
            continue
        for cand in _candidates(tp, value):
            try:
                got = to_dict(
                    load(
                        cls,
                        None,
                        [f"{name}={yaml.safe_dump(cand, default_flow_style=True).strip()}".replace("\n...", "")],
                    )
                )
            except ConfigError:
                continue  # this value breaks a cross-field check; try the next one
            diff = _diff(base, got)
            assert diff == {name}, f"{kind}: overriding {name} changed {sorted(diff)}"
            changed += 1
            break
        else:
            refused.append(name)
    assert changed >= 20 and len(refused) <= changed // 4, (changed, refused)


def _diff(a, b, prefix="") -> set[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = set()
        for k in set(a) | set(b):
            out |= (
                _diff(a.get(k), b.get(k), f"{prefix}{k}.")
                if isinstance(a.get(k), dict)
                else ({prefix + k} if a.get(k) != b.get(k) else set())
            )
        return out
    return {prefix.rstrip(".")} if a != b else set()


def test_quickstart_stage_override_keeps_the_stage_defaults():
    """The reported bug: one field of the quickstart's RM stage used to reset the stage to its class's defaults."""
    from align.quickstart import QuickstartConfig

    cfg = load(QuickstartConfig, None, ["rm.train.precision=fp32", "dpo.loss.params.beta=0.2"])
    assert cfg.rm.train.precision == "fp32"
    assert (cfg.rm.train.lr, cfg.rm.train.epochs, cfg.rm.train.max_length, cfg.rm.train.warmup_ratio) == (
        5e-4,
        1.5,
        256,
        0.05,
    )
    assert cfg.rm.loss.params == {"center_rewards_coefficient": 0.01} and cfg.rm.eval.split == "all"
    assert cfg.dpo.loss.params == {"beta": 0.2, "sft_weight": 1.0} and cfg.dpo.train.max_steps == 60
