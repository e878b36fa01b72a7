"""Shared fixtures: the real data folder (skipped when absent) and the tiny test model."""

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
