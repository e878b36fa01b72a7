"""Shared fixtures: the real data folder (skipped when absent), the tiny test model, headless Chromium."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Tests run eager: compiling layers on a fresh machine's empty cache costs minutes. One test re-enables
# torch.compile to check compiled training equals eager (tests/test_rm_train.py).
os.environ.setdefault("TORCH_COMPILE_DISABLE", "1")


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not (SHARED_DATA / "hh-rlhf").exists():
        pytest.skip(f"real data folder {SHARED_DATA} is absent (it sits beside the project checkout)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def smollm2_tokenizer():
    from prefalign.models.hub import load_tokenizer

    return load_tokenizer("builtin:smollm2-135m-instruct")


@pytest.fixture(scope="session")
def tiny_model_ref() -> str:
    from prefalign.models.hub import resolve

    resolve("builtin:tiny-llama")
    return "builtin:tiny-llama"


class Chromium:
    """Headless Chromium from the command line (no driver library): the DOM after scripts ran, and screenshots."""

    def __init__(self, exe: str, profile: Path) -> None:
        self.exe, self.profile = exe, profile

    def _run(self, *args: str) -> str:
        import subprocess

        cmd = [
            self.exe,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            f"--user-data-dir={self.profile}",
            *args,
        ]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120).stdout

    def dump_dom(self, page: Path, fragment: str = "") -> str:
        """The page's DOM after its scripts ran (`fragment`: the part after '#' in the address)."""
        return self._run("--dump-dom", page.resolve().as_uri() + (f"#{fragment}" if fragment else ""))

    def screenshot(self, page: Path, out: Path, size: tuple[int, int] = (1280, 1600), fragment: str = "") -> Path:
        """A PNG of the page's first `size` pixels (width, height)."""
        self._run(
            f"--screenshot={out}",
            f"--window-size={size[0]},{size[1]}",
            page.resolve().as_uri() + (f"#{fragment}" if fragment else ""),
        )
        assert out.exists() and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"no screenshot of {page}"
        return out


@pytest.fixture
def chromium(tmp_path: Path) -> Chromium:
    """Headless Chromium (skips the test when none is installed)."""
    import shutil

    for name in ("chromium", "chromium-browser", "google-chrome"):
        if found := shutil.which(name):
            return Chromium(found, tmp_path / "chromium-profile")
    if Path("/usr/bin/chromium").exists():
        return Chromium("/usr/bin/chromium", tmp_path / "chromium-profile")
    pytest.skip("no chromium on PATH or at /usr/bin/chromium; install it to check pages in a browser")
