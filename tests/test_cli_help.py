"""The command line as a new user meets it: every verb's --help renders (a literal "95%" once crashed `align eval
--help`), every example in every help parses with the flags it shows, the short ones run, required flags show as
required, `align --version` answers and `align ls | head` ends quietly."""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from align.cli.main import build_parser, main

ROOT = Path(__file__).resolve().parents[1]


def _parsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, (*path, name))


PARSERS = list(_parsers(build_parser()))


@pytest.mark.parametrize("path", [p for p, _ in PARSERS], ids=lambda p: " ".join(p) or "align")
def test_help_renders_for_every_verb(path, capsys):
    with pytest.raises(SystemExit) as e:
        main([*path, "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: align")


def _examples() -> list[tuple[str, str]]:
    """(verb, example command) for every `align ...` line of every help's examples, continuation lines joined and
    trailing remarks in parentheses or after # dropped."""
    out = []
    for path, parser in PARSERS:
        text = (parser.epilog or "").replace("\\\n", " ")
        for line in text.splitlines():
            line = line.strip()
            if not line.startswith("align "):
                continue
            line = re.split(r"\s{2,}(?:\(|#)|\s#\s", line)[0].strip()
            out.append((" ".join(path), line))
    return out


EXAMPLES = _examples()


def test_every_verb_with_examples_has_some():
    verbs = {v for v, _ in EXAMPLES}
    for path, parser in PARSERS:
        if parser.epilog:
            assert " ".join(path) in verbs, path


@pytest.mark.parametrize(("verb", "example"), EXAMPLES, ids=[e for _, e in EXAMPLES])
def test_every_help_example_parses(verb, example):
    argv = shlex.split(example)[1:]
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:
        pytest.fail(f"`{example}` (from `align {verb} --help`) does not parse: exit {e.code}")
    assert getattr(args, "fn", None) is not None or argv == [] or argv[0] in ("data", "rm", "eval", "bench")


SHORT = [
    "align ls losses",
    "align ls names",
    "align validate configs/rm_suite.yaml",
    "align validate configs/dpo_suite.yaml train.lr=5e-6 train.max_steps=20",
    "align validate configs/rm_suite.yaml configs/dpo_suite.yaml --set train.seed=1",
    "align init",
]


@pytest.mark.parametrize("example", SHORT)
def test_short_help_examples_run(example, monkeypatch, capsys):
    assert any(e == example for _, e in EXAMPLES) or example in ("align ls names",), example
    monkeypatch.chdir(ROOT)
    assert main(shlex.split(example)[1:]) == 0, capsys.readouterr().err


def test_required_flags_show_as_required_in_usage(capsys):
    with pytest.raises(SystemExit):
        main(["eval", "policy", "--help"])
    usage = capsys.readouterr().out.split("\n\n")[0]
    assert "--model MODEL" in usage and "[--model MODEL]" not in usage
    assert "[--baseline BASELINE]" in usage


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and re.match(r"align \(prefalign\) \d", capsys.readouterr().out)


def test_ls_survives_a_closed_pipe():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    code = "import sys; sys.argv = ['align', 'ls']; from align.cli.main import main; sys.exit(main())"
    proc = subprocess.run(
        f"{shlex.quote(sys.executable)} -c {shlex.quote(code)} | head -n 1",
        shell=True,
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
    )
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr


def test_ls_help_names_the_tables(capsys):
    from align.cli.tables import TABLES

    with pytest.raises(SystemExit):
        main(["ls", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert all(name in out for name in TABLES)


def test_validate_takes_overrides_positionally_and_with_set(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert main(["validate", "configs/dpo_suite.yaml", "train.lr=1e-6", "--set", "train.max_steps=3"]) == 0
    assert main(["validate", "configs/dpo_suite.yaml", "train.lr=oops"]) == 2
    assert "train.lr" in capsys.readouterr().err


def test_validate_refuses_missing_data_and_model_naming_the_key(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"kind: rm_train\nmodel: {tmp_path}/no_model\ndata:\n  source: {tmp_path}/no.jsonl\n")
    assert main(["validate", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert f"model: model directory {tmp_path}/no_model does not exist" in err
    assert f"data.source: data file {tmp_path}/no.jsonl does not exist" in err


def test_a_missing_local_model_is_never_looked_up_on_the_hub(tmp_path, monkeypatch):
    from prefalign.errors import UserError
    from prefalign.models.hub import resolve

    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    with pytest.raises(UserError, match="runs/rm does not exist"):
        resolve("runs/rm")  # `runs/` is here: a local path, though it looks like a hub id
    assert resolve("Qwen/Qwen2.5-0.5B") == "Qwen/Qwen2.5-0.5B"  # no such folder here: a hub id


def test_python_api_doctests_run():
    """The public Python API's examples (align/api.py) run as written."""
    import doctest

    import align.api

    result = doctest.testmod(align.api, optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 8 and result.failed == 0


def test_packages_are_typed():
    for pkg in ("prefalign", "preference_data", "reward_models", "align", "leaderboards"):
        assert (ROOT / pkg / "py.typed").exists(), pkg


def test_the_quickstart_help_names_only_keys_its_config_has():
    """The `keys:` lines of `align quickstart --help` name real fields of the quickstart config (and every top-level
    one), so the help stays true to the code."""
    import dataclasses

    from align.cli.main import EXAMPLES as HELP
    from align.quickstart import QuickstartConfig

    text = HELP["quickstart"].split("keys:", 1)[1]
    names = []
    for token in re.findall(r"[a-z0-9_]+(?:\.\{[a-z_,]+\}|\.[a-z_]+|\.\*)?", text.split("(docs/")[0]):
        head, _, rest = token.partition(".")
        names += [head] if not rest or rest == "*" else [f"{head}.{k}" for k in rest.strip("{}").split(",")]
    top = {f.name: f for f in dataclasses.fields(QuickstartConfig)}
    listed = {n for n in names if n in top or "." in n}
    for name in listed:
        head, _, key = name.partition(".")
        assert head in top, name
        if key:
            assert key in {f.name for f in dataclasses.fields(top[head].default_factory())}, name
    assert set(top) - {"kind"} <= {n.split(".")[0] for n in listed}


def test_validate_checks_what_a_run_needs_before_it_starts(tmp_path, capsys, tiny_model_ref):
    """A model directory without a tokenizer, an output_dir that is a file or cannot be written, and a data file with
    a malformed line each fail `align validate`, naming the key (and the line); other drops are counted in a note."""
    from prefalign.models.hub import load_causal_lm, resolve

    model = tmp_path / "no_tokenizer"
    load_causal_lm(tiny_model_ref, dtype="float32").save_pretrained(str(model))  # weights and config, no tokenizer
    good = '{"prompt": "q", "chosen": "a", "rejected": "b"}'
    data = tmp_path / "pairs.jsonl"
    data.write_text("\n".join([good, good.replace('"b"', '"c"'), "{not json", '{"prompt": "q", "chosen": ""}']) + "\n")
    blocked = tmp_path / "blocked"
    blocked.write_text("a file, not a directory")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"kind: train\nmodel: {model}\noutput_dir: {blocked}\ndata:\n  source: {data}\n  split: all\n")
    assert main(["validate", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert f"model: {model} has no tokenizer" in err
    assert f"output_dir: {blocked} is a file" in err
    assert f"data.source: {data}: 1 line(s) malformed json (line 3" in err
    # a complete model directory, a writable output_dir and readable rows: ok, with the drops counted
    data.write_text(
        "\n".join([good, good.replace('"b"', '"c"'), '{"prompt": "q", "chosen": "", "rejected": "x"}']) + "\n"
    )
    cfg.write_text(
        f"kind: train\nmodel: {resolve(tiny_model_ref)}\noutput_dir: {tmp_path / 'runs' / 'x'}\n"
        f"data:\n  source: {data}\n  split: all\n"
    )
    assert main(["validate", str(cfg)]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "3 rows read, 2 records; a run drops 1" in out and "(line 3)" in out
