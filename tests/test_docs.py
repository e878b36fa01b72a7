"""The front page and the manual: the README stays a front page, no link points at a missing file, every command
the README shows parses (and its recipes' configs validate), the generated references match the code, and the site
builds in strict mode (a broken link, a missing page or a broken anchor fails it)."""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.glob("*.md"))]

README_MAX_LINES = 200
"""A front page, not a lab notebook (issue 51): measurements live in docs/performance.md and docs/results.md."""

FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.M | re.S)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
SHELL = ("", "bash", "sh", "shell", "console")
"""Code-block languages whose lines are commands (an unlabelled block counts: it is usually a command)."""


def _code_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced code block."""
    return [(m.group(1), m.group(2)) for m in FENCE.finditer(text)]


def _prose(text: str) -> str:
    """The text outside fenced code blocks and inline code spans (where a `[x](y)` is not a link)."""
    return re.sub(r"`[^`\n]*`", "", FENCE.sub("", text))


def _commands(text: str) -> list[list[str]]:
    """The `align` argument lists of every command in the shell code blocks: continuation lines joined, trailing
    `# comments` dropped; `python -m align.cli.main ...` and `accelerate launch ... -m align.cli.main ...` count."""
    found = []
    for lang, body in _code_blocks(text):
        if lang not in SHELL:
            continue
        for line in body.replace("\\\n", " ").splitlines():
            if not re.match(r"^\s*([A-Z_]+=\S+\s+)*align\s", line) and " -m align.cli.main " not in line:
                continue  # not a command of ours (a diagram, another tool's command line)
            words = shlex.split(line, comments=True)
            while words and re.match(r"^[A-Z_]+=", words[0]):
                words = words[1:]  # an environment assignment before the command
            if words[:1] == ["align"]:
                found.append(words[1:])
            elif "align.cli.main" in words and words[words.index("align.cli.main") - 1] == "-m":
                found.append(words[words.index("align.cli.main") + 1 :])
    return found


def test_readme_is_a_front_page() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines (at most {README_MAX_LINES}): move details into docs/ and link them"
    )
    blocks = _code_blocks(README.read_text(encoding="utf-8"))
    first = next(body for lang, body in blocks if lang in SHELL)
    # .ci/run runs the README's test command: the first two commands stay `make quickstart`, then `make test`
    assert [line.split("#")[0].strip() for line in first.splitlines()[:2]] == ["make quickstart", "make test"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_points_at_a_file(page: Path) -> None:
    missing = []
    for target in LINK.findall(_prose(page.read_text(encoding="utf-8"))):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a URL (https:, mailto:) or an anchor on the same page
        path = target.split("#", 1)[0]
        if not (page.parent / path).exists():
            missing.append(target)
    assert not missing, f"{page.relative_to(ROOT)} links to files that do not exist: {missing}"


def _assert_parse(parser, commands: list[list[str]], where: str) -> None:
    """Each `align` command (its argv) parses; --help and --version count as parsed."""
    for argv in commands:
        try:
            parser.parse_args(argv)
        except SystemExit as e:
            if e.code in (0, None):  # --help or --version: it parsed
                continue
            pytest.fail(f"{where}: `align {shlex.join(argv)}` does not parse (argparse said why above)")


def test_every_align_command_in_the_readme_parses() -> None:
    from align.cli.main import build_parser

    commands = _commands(README.read_text(encoding="utf-8"))
    assert len(commands) >= 8, "the README's recipes lost their commands"
    _assert_parse(build_parser(), commands, "README.md")


@pytest.mark.parametrize("page", sorted(DOCS.glob("*.md")), ids=lambda p: p.name)
def test_every_align_command_in_the_manual_parses(page: Path) -> None:
    from align.cli.main import build_parser

    _assert_parse(build_parser(), _commands(page.read_text(encoding="utf-8")), f"docs/{page.name}")


@pytest.mark.timeout(600)
def test_the_readme_recipes_write_configs_that_validate(tmp_path: Path, monkeypatch, capsys) -> None:
    """The README's own-data recipes, run as a new user would in an empty folder: its example row as the pairs
    file, each `align init` as written, and each training command checked by `align validate` (the same config
    and overrides) instead of trained. Hub ids are noted by validate, not downloaded. The commands run through the
    CLI's own entry point in this process (one start-up instead of one per command)."""
    from align.cli.main import main

    text = README.read_text(encoding="utf-8")
    rows = [body for lang, body in _code_blocks(text) if lang == "json"]
    assert rows, "the README shows no example data row"
    (tmp_path / "my_pairs.jsonl").write_text(rows[0])
    monkeypatch.chdir(tmp_path)
    checked = 0
    for argv in _commands(text):
        argv = [str(ROOT / a) if a.startswith("configs/") else a for a in argv]
        if argv[:1] == ["init"] or argv[:1] == ["validate"]:
            run = argv
        elif argv[:2] == ["rm", "train"] or argv[:1] == ["train"]:
            run = ["validate", *argv[2 if argv[0] == "rm" else 1 :]]
        else:
            continue
        code = main(run)
        out = capsys.readouterr()
        assert code == 0, f"`align {shlex.join(argv)}` failed:\n{out.out}\n{out.err}"
        checked += 1
    assert checked >= 5, f"only {checked} README commands were run or validated"


def _generator():
    spec = importlib.util.spec_from_file_location("gen_reference", DOCS / "gen_reference.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_generated_references_match_the_code() -> None:
    stale = _generator().stale()
    assert not stale, (
        f"docs/{', docs/'.join(stale)} differ from what the code generates: run `python docs/gen_reference.py`"
    )


def test_the_config_reference_covers_every_key_of_the_configs_init_writes() -> None:
    from align.cli.configs import config_class
    from prefalign.config import describe

    page = (DOCS / "config-reference.md").read_text(encoding="utf-8")
    for kind in ("rm_train", "train"):
        assert f"## `kind: {kind}`" in page
        section = page.split(f"## `kind: {kind}`", 1)[1].split("\n## ", 1)[0]
        for key, *_ in describe(config_class(kind)):
            assert f"| `{key}` |" in section, f"config reference, kind {kind}: key {key} is missing"


def _mkdocs_or_skip() -> None:
    for module in ("mkdocs", "material"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed (pip install mkdocs mkdocs-material) to build the manual")


@pytest.mark.timeout(300)
def test_the_manual_builds_in_strict_mode(tmp_path: Path) -> None:
    _mkdocs_or_skip()
    site = tmp_path / "site"
    run = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"), "-d", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert run.returncode == 0, f"mkdocs build --strict failed:\n{run.stdout}\n{run.stderr}"
    for page in ("index.html", "getting-started/index.html", "config-reference/index.html"):
        assert (site / page).exists(), f"the site has no {page}"


@pytest.mark.timeout(300)
@pytest.mark.slow  # a browser: ~30 s each (make test-slow)
def test_the_manual_in_a_browser(tmp_path: Path, chromium) -> None:
    """The built home page and a guide render in headless Chromium: the pages' own text is in the DOM after the
    theme's scripts ran, and the screenshots are pictures (kept under the test's tmp_path to look at)."""
    _mkdocs_or_skip()
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "-q", "-f", str(ROOT / "mkdocs.yml"), "-d", str(site)],
        cwd=ROOT,
        check=True,
        timeout=300,
    )
    for page, text in (("index.html", "The manual"), ("data/index.html", "align data doctor")):
        assert text in chromium.dump_dom(site / page), f"{page} does not show {text!r} in a browser"
        chromium.screenshot(site / page, tmp_path / page.replace("/", "_").replace(".html", ".png"))
