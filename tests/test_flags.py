"""A verb's flags from its settings dataclass (`prefalign.flags`): names, help, types, choices, bool pairs, required
fields, `--config FILE` under the flags, and every problem reported at once naming the flag the user typed."""

from __future__ import annotations

import argparse
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest

from prefalign.config import option
from prefalign.errors import ConfigError
from prefalign.flags import add_flags, flag_of, from_args, settings_class
from prefalign.registry import Table

ROOT = Path(__file__).resolve().parents[1]
KINDS = Table("kind", {"scalar": "a reward model", "judge": "a generative judge"})


@dataclass
class Shared:
    seed: int = option(0, "random seed")


@dataclass(kw_only=True)
class Settings(Shared):
    model: str = option(doc="the model to run")
    source: str = option(doc="where the rows come from", positional=True, metavar="SOURCE")
    max_new_tokens: int = option(96, "tokens per answer")
    temperature: float = option(0.0, "0 = greedy")
    mode: Literal["fast", "exact"] = option("exact", "how to decode")
    kind: str | None = option(None, "scorer kind", choices=KINDS)
    limit: int | None = option(None, "only the first N rows")
    allow_partial: bool = option(False, "skip bad rows, 100% of them if need be")
    cache: bool = option(True, "reuse earlier results")
    k: list[int] = option(factory=lambda: [1, 2, 4], doc="sample counts")
    scorer: list[str] = option(factory=list, doc="LABEL=KIND:MODEL, repeatable")
    options: dict[str, Any] = option(factory=dict, doc="scorer options", flag="--option")
    out: str | None = option(None, "output directory")

    def check(self) -> list[str]:
        return ["limit: must be positive"] if self.limit is not None and self.limit < 1 else []


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="align try")
    add_flags(p, Settings)
    return p


def parse(*argv: str) -> Settings:
    args = parser().parse_args(list(argv))
    assert settings_class(args) is Settings
    return from_args(Settings, args, "align try")


def problems(*argv: str) -> list[str]:
    with pytest.raises(ConfigError) as e:
        parse(*argv)
    return e.value.problems


def test_help_is_the_fields_docs_with_kebab_names_choices_and_defaults():
    text = parser().format_help()
    assert "--max-new-tokens MAX_NEW_TOKENS" in text and "tokens per answer (default: 96)" in text
    assert "--mode {fast,exact}" in text and "--kind {scalar,judge}" in text
    assert "--allow-partial, --no-allow-partial" in text and "--cache, --no-cache" in text
    assert "skip bad rows, 100% of them" in text  # a % in a doc is not an argparse format
    assert "the model to run (required)" in text and "SOURCE" in text
    assert "--option KEY=VALUE" in text and "--config FILE" in text
    assert "sample counts (default: 1,2,4)" in text
    # the fields the class adds come first, then those of the settings it extends
    assert text.index("--model") < text.index("--seed")
    assert flag_of(Settings, "options") == "--option" and flag_of(Settings, "source") == "SOURCE"


def test_flags_become_typed_values():
    s = parse(
        "rows.jsonl",
        "--model",
        "m",
        "--max-new-tokens",
        "8",
        "--temperature",
        "1e-1",
        "--mode",
        "fast",
        "--kind",
        "judge",
        "--limit",
        "3",
        "--allow-partial",
        "--no-cache",
        "--k",
        "1,2",
        "--k",
        "8",
        "--scorer",
        "a=scalar:x",
        "--scorer",
        "b=judge:y",
        "--option",
        "normalize=true",
        "--option",
        "beta=0.05",
        "--option",
        "name=1e-4",
        "--seed",
        "7",
    )
    assert (s.source, s.model, s.max_new_tokens, s.temperature, s.mode, s.kind) == (
        "rows.jsonl",
        "m",
        8,
        0.1,
        "fast",
        "judge",
    )
    assert s.limit == 3 and s.allow_partial is True and s.cache is False and s.seed == 7
    assert s.k == [1, 2, 8] and s.scorer == ["a=scalar:x", "b=judge:y"]
    assert s.options == {"normalize": True, "beta": 0.05, "name": "1e-4"}  # values read as YAML scalars


def test_defaults_and_text_kept_verbatim():
    s = parse("suite", "--model", "123", "--out", "true")
    assert s.model == "123" and s.out == "true"  # a str field is never read as YAML
    assert s == Settings(model="123", source="suite", out="true")


def test_every_problem_at_once_naming_the_flag():
    found = problems("--max-new-tokens", "many", "--mode", "fsat", "--kind", "jugde", "--limit", "0", "--option", "x")
    assert "--model is required: the model to run" in found
    assert "SOURCE is required: where the rows come from" in found
    assert "--max-new-tokens: expected an integer, got 'many'" in found
    assert any(p.startswith("--mode: 'fsat' is not allowed") and "did you mean 'fast'" in p for p in found)
    assert any(p.startswith("--kind: 'jugde' is not allowed") and "did you mean 'judge'" in p for p in found)
    assert "--option: expected KEY=VALUE, got 'x'" in found
    assert len(found) == 6
    # the settings' own check() (which needs the required fields) is named by its flag too
    assert problems("rows.jsonl", "--model", "m", "--limit", "0", "--mode", "x")[1:] == ["--limit: must be positive"]


def test_a_list_element_problem_names_the_flag():
    assert "--k[1]: expected an integer, got 'x'" in problems("s", "--model", "m", "--k", "1,x")


def test_config_file_under_the_flags(tmp_path):
    f = tmp_path / "run.yaml"
    f.write_text("model: from-file\nsource: rows.jsonl\nlimit: 5\nk: [2, 4]\noptions: {beta: 0.1}\nmode: fast\n")
    s = parse("--config", str(f), "--limit", "9")
    assert (s.model, s.source, s.limit, s.k, s.options, s.mode) == (
        "from-file",
        "rows.jsonl",
        9,
        [2, 4],
        {"beta": 0.1},
        "fast",
    )


def test_config_file_problems_name_its_keys_and_read_like_the_flags(tmp_path):
    f = tmp_path / "run.yaml"
    f.write_text("max_new_token: 8\nmode: fsat\nsource: s\n")
    found = problems("--config", str(f))
    assert any(p.startswith(f"{f}: max_new_token: unknown key (did you mean 'max_new_tokens'?)") for p in found)
    assert any(p.startswith(f"{f}: mode: 'fsat' is not allowed") for p in found)
    assert "--model is required (or model: in the --config file): the model to run" in found
    # the same value typed as a flag: the same message, named by the flag
    flag = [p for p in problems("s", "--model", "m", "--mode", "fsat") if "fsat" in p]
    file = [p for p in found if "fsat" in p]
    assert flag[0].removeprefix("--mode") == file[0].removeprefix(f"{f}: mode")


def test_config_file_must_be_a_mapping(tmp_path):
    f = tmp_path / "run.yaml"
    f.write_text("- a\n- b\n")
    assert any("expected a mapping of Settings fields" in p for p in problems("--config", str(f)))


def test_flags_import_without_torch():
    code = "import sys, prefalign.flags\nprint(','.join(m for m in ('torch', 'transformers') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", f"importing prefalign.flags imported {out.stdout.strip()}"
