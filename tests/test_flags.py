"""A verb's flags from its settings dataclass (`prefalign.flags`): names, help, types, choices, bool pairs, required
fields, `--config FILE` under the flags, and every problem reported at once naming the flag the user typed."""

from __future__ import annotations

import argparse
import dataclasses
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


# --------------------------------------------------------------------------------------------------------
# The verbs that declare settings
# --------------------------------------------------------------------------------------------------------


def _verbs(p: argparse.ArgumentParser, path: str = "align") -> list[tuple[str, argparse.ArgumentParser]]:
    out = []
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out.append((f"{path} {name}", sub))
                out.extend(_verbs(sub, f"{path} {name}"))
    return out


def test_every_verb_with_settings_documents_each_flag_and_has_examples():
    from align.cli.main import build_parser

    converted = {}
    for name, sub in _verbs(build_parser()):
        cls = sub.get_default("settings_class")
        if cls is not None:
            converted[name] = cls
            for f in dataclasses.fields(cls):
                assert f.metadata.get("doc"), f"{name}: {f.name} has no doc"
            assert "examples:" in (sub.epilog or ""), f"{name} has no examples"
    expected = {"align eval policy", "align rm score", "align rm scaling", "align rm compare", "align bench run"}
    expected |= {"align bench show", "align data doctor", "align data suite"}
    assert expected <= set(converted)


def _settings(*argv: str) -> Any:
    from align.cli.main import build_parser

    args = build_parser().parse_args(list(argv))
    return from_args(settings_class(args), args)


def test_rm_and_bench_verbs_keep_their_flags():
    s = _settings("rm", "scaling", "--model", "g", "--k", "1,2,4,8", "--limit", "5", "--split", "dev")
    assert (s.k, s.limit, s.split, s.temperature, s.max_new_tokens) == ([1, 2, 4, 8], 5, "dev", 0.8, 160)
    s = _settings("rm", "score", "--model", "m", "--data", "d", "--out", "o", "--raw", "--batch-tokens", "512")
    assert s.raw and s.batch_tokens == 512 and s.dtype == "float32"  # the model card's precision
    s = _settings("rm", "compare", "--scorer", "a=scalar:x", "--scorer", "b=polar:y", "--suite-per-family", "3")
    assert s.scorer == ["a=scalar:x", "b=polar:y"] and s.suite_per_family == 3 and s.bootstrap == 2000
    with pytest.raises(ConfigError, match="--scorer is required"):
        _settings("rm", "compare")
    s = _settings(
        "bench", "run", "pairs", "--model", "m", "--option", "beta=0.05", "--no-cache", "--tie-threshold", "0.1"
    )
    assert (s.bench, s.options, s.cache, s.tie_threshold) == ("pairs", {"beta": 0.05}, False, 0.1)
    s = _settings("data", "doctor", "suite", "--max-length", "512", "--policy", "truncate_prompt_left")
    assert (s.source, s.max_length, s.policy, s.split) == ("suite", 512, "truncate_prompt_left", "all")
    assert _settings("data", "suite", "--out", "d", "--per-family", "3").per_family == 3


def test_cli_reports_every_problem_of_a_verb_at_once(capsys):
    from align.cli.main import main

    assert main(["eval", "policy", "--limit", "many", "--dtype", "fp16", "--bench", "ifevl"]) == 2
    err = capsys.readouterr().err
    assert "align eval policy: 4 problem(s)" in err
    assert "--model is required" in err and "--limit: expected int | null, got 'many'" in err
    assert "--dtype: 'fp16' is not allowed" in err and "did you mean 'ifeval'" in err
    assert "Traceback" not in err


def test_eval_policy_settings_from_a_config_file(tmp_path):
    from align.cli.main import build_parser
    from leaderboards.policy_bench import PolicyBenchSettings

    f = tmp_path / "eval.yaml"
    f.write_text("model: runs/dpo/model\nbench: alpacaeval\ndata: ref.json\noptions: {normalize: true}\n")
    args = build_parser().parse_args(["eval", "policy", "--config", str(f), "--option", "dtype=float32"])
    s = from_args(settings_class(args), args)
    assert isinstance(s, PolicyBenchSettings)
    assert (s.model, s.bench, s.data, s.options) == (
        "runs/dpo/model",
        "alpacaeval",
        "ref.json",
        {"dtype": "float32"},
    )
    assert s.max_new_tokens == 256  # the standard sets' default; the suite's is 96
    args = build_parser().parse_args(["eval", "policy", "--model", "m"])
    assert from_args(settings_class(args), args).max_new_tokens == 96


def test_flags_and_decoding_settings_import_without_torch():
    code = (
        "import sys\nimport prefalign.flags, prefalign.decoding, leaderboards.policy_bench\n"
        "from align.cli.main import build_parser\nbuild_parser()\n"
        "print(','.join(m for m in ('torch', 'transformers') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", f"building the parser imported {out.stdout.strip()}"
