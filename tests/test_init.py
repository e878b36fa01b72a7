"""The new user's path: `align init KIND` for a local model directory and a three-row JSONL of their own, then
`align validate` and one step of the run, for every kind; every key written is documented above it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from align.cli.init import INIT_KINDS
from align.cli.main import main

ROWS = [
    {
        "prompt": [{"role": "user", "content": f"What is {a} plus {b}?"}],
        "chosen": [{"role": "assistant", "content": f"{a + b}."}],
        "rejected": [{"role": "assistant", "content": f"It is {a + b + 1}, I think."}],
    }
    for a, b in [(2, 3), (7, 5), (10, 4)]
]
TINY_RUN = {  # overrides that make a run one short step on the tiny model
    "rm": ["train.max_steps=1", "train.batch_size=2", "train.precision=fp32", "eval.split=none"],
    "dpo": ["train.max_steps=1", "train.batch_size=2", "train.precision=fp32", "eval.split=none", "save_merged=false"],
    "simpo": ["train.max_steps=1", "train.batch_size=2", "train.precision=fp32", "eval.split=none"],
    "grpo": [
        "train.max_steps=1",
        "train.batch_size=4",
        "train.precision=fp32",
        "rollout.group_size=2",
        "rollout.prompts_per_step=2",
        "rollout.max_new_tokens=4",
    ],
    "iterative-dpo": [
        "train.max_steps=1",
        "train.batch_size=2",
        "train.precision=fp32",
        "rounds.rounds=1",
        "rounds.prompts_per_round=2",
        "rounds.samples_per_prompt=2",
        "rounds.max_new_tokens=4",
    ],
}


@pytest.fixture(scope="module")
def own(tmp_path_factory, tiny_model_ref) -> dict[str, str]:
    """A user's files: three pairs as JSONL, a model directory in Hugging Face format, a trained reward model."""
    from prefalign.models.hub import load_seq_cls, load_tokenizer, resolve
    from reward_models.checkpoint import RewardStats, save_rm

    root = tmp_path_factory.mktemp("own")
    data = root / "pairs.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS), encoding="utf-8")
    rm = root / "rm"
    save_rm(load_seq_cls(tiny_model_ref, dtype="float32"), load_tokenizer(tiny_model_ref), rm, RewardStats(0, 1, 1))
    return {"data": str(data), "model": resolve(tiny_model_ref), "rm": str(rm)}


def _init(kind: str, dest: Path, own: dict[str, str], *extra: str) -> Path:
    args = ["init", kind, str(dest), "--model", own["model"], "--data", own["data"], "--rm", own["rm"]]
    assert main([*args, "--output-dir", str(dest.parent / f"run-{kind}"), *extra]) == 0
    return dest


@pytest.mark.parametrize("kind", list(INIT_KINDS))
def test_init_writes_a_documented_config_that_validates(kind, tmp_path, own, capsys):
    path = _init(kind, tmp_path / f"{kind}.yaml", own, "--bench", "pairs", "--bench-data", own["data"])
    text = path.read_text()
    lines = text.splitlines()
    for i, line in enumerate(lines):  # every key has its documentation on the line(s) above it
        if line.strip() and not line.lstrip().startswith("#"):
            assert lines[i - 1].lstrip().startswith("#"), f"{kind}: {line!r} has no comment above it"
    data = yaml.safe_load(text)
    if not INIT_KINDS[kind].kind.startswith("settings:"):
        assert main(["validate", str(path)]) == 0, capsys.readouterr().err
    assert (data.get("model") or data.get("bench")) is not None


@pytest.mark.parametrize("kind", list(TINY_RUN))
def test_init_config_runs_one_step(kind, tmp_path, own):
    import importlib

    from align.cli.configs import check_resources, validate_file

    path = _init(kind, tmp_path / f"{kind}.yaml", own)
    config_kind, cfg = validate_file(str(path), ["train.compile=false", *TINY_RUN[kind]])
    check_resources(cfg, str(path))
    module = {
        "rm_train": "reward_models.rm_train",
        "train": "align.train",
        "online": "align.online",
        "iterative": "align.iterative",
    }[config_kind]
    report = importlib.import_module(module).run(cfg)
    assert report["steps"] >= 1


def test_init_bench_runs_on_the_users_pairs(tmp_path, own, capsys):
    path = _init("bench", tmp_path / "bench.yaml", own, "--bench", "pairs", "--bench-data", own["data"])
    records = tmp_path / "records"
    assert main(["bench", "run", "--config", str(path), "--records", str(records), "--dtype", "float32"]) == 0
    assert list(records.glob("*.json")), capsys.readouterr().out


def test_init_refuses_to_overwrite_and_unknown_kinds(tmp_path, own, capsys):
    path = _init("rm", tmp_path / "rm.yaml", own)
    assert main(["init", "rm", str(path)]) == 2
    assert "--force" in capsys.readouterr().err
    assert main(["init", "rn", str(tmp_path)]) == 2
    assert "choose one of ['rm'" in capsys.readouterr().err


def test_init_without_model_writes_the_embedded_model(tmp_path, own, capsys):
    """With no --model, the config names the embedded model, which runs with no download, and says so."""
    from prefalign.models.hub import DEFAULT_MODEL

    path = tmp_path / "rm.yaml"
    assert main(["init", "rm", str(path), "--data", own["data"]]) == 0
    assert yaml.safe_load(path.read_text())["model"] == DEFAULT_MODEL
    assert "embedded default (no download)" in capsys.readouterr().out
    assert main(["validate", str(path)]) == 0
