"""The typed config system: YAML mirrors dataclasses; every problem reported at once with did-you-mean."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import pytest

from preference_data.config import apply_overrides, build, describe, load, option
from preference_data.errors import ConfigError


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
