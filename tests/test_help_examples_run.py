"""Help examples run as written against the run directories the documented commands produce: in an empty folder,
`align init` + `align rm train` / `align train` (one step each, the tiny model) leave `runs/rm`, `runs/dpo`,
`runs/dpo-lora` and `runs/simpo`; small files in each example's format stand in for the downloaded sets; then every
`--help` example that names only those runs and files is run, word for word."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from align.cli.main import main

pytestmark = pytest.mark.slow  # four tiny training runs and a dozen commands (make test-slow)

ONE_STEP = ["train.max_steps=1", "train.batch_size=2", "train.precision=fp32", "train.max_length=128"]

RUNS = {  # run directory -> (init kind, the command that trains it)
    "runs/rm": ("rm", ["rm", "train"]),
    "runs/dpo": ("dpo", ["train"]),
    "runs/dpo-lora": ("dpo", ["train"]),
    "runs/simpo": ("simpo", ["train"]),
}
FILES = {"pairs.jsonl", "mt_bench/question.jsonl", "alpaca_eval_gpt4_baseline.json"}


def _examples() -> list[str]:
    from tests.test_cli_help import EXAMPLES

    return [e for _, e in EXAMPLES]


def _runnable(example: str) -> bool:
    """Names only the runs and files made here (and no server, hub set or other run)."""
    words = shlex.split(example)[1:]
    if words[:1] in (["serve"], ["quickstart"], ["init"]):
        return False
    paths = [w for w in words if w.startswith("runs/") or re.search(r"\.(jsonl?|gz|parquet|ya?ml|pt|png)$", w)]
    made = [w for w in paths if any(w == r or w.startswith(r + "/") for r in RUNS) or w in FILES]
    outputs = {words[i + 1] for i, w in enumerate(words[:-1]) if w in ("--out", "--write-reference")}
    needs_hub = words[:2] == ["bench", "run"] and words[2:3] not in (["suite"], ["pairs"])
    return not needs_hub and all(p in made or p in outputs for p in paths) and any(p in made for p in paths)


@pytest.fixture(scope="module")
def folder(tmp_path_factory, tiny_model_ref) -> Path:
    import os

    from preference_data.suite import build_suite

    root = tmp_path_factory.mktemp("user")
    before = os.getcwd()
    os.chdir(root)
    try:
        pairs = build_suite(n_per_family=2, seed=0).train_pairs[:8]
        Path("pairs.jsonl").write_text("".join(json.dumps(p.to_dict()) + "\n" for p in pairs))
        Path("mt_bench").mkdir()
        Path("mt_bench/question.jsonl").write_text(
            json.dumps({"question_id": 81, "category": "writing", "turns": ["Write a haiku.", "Make it rhyme."]}) + "\n"
        )
        alpaca = [
            {"instruction": "Name a color.", "output": "Blue.", "generator": "gpt4_turbo", "dataset": "x"},
            {"instruction": "Say hi.", "output": "Hi!", "generator": "gpt4_turbo", "dataset": "x"},
        ]
        Path("alpaca_eval_gpt4_baseline.json").write_text(json.dumps(alpaca))
        for run, (kind, train) in RUNS.items():
            cfg = f"{Path(run).name}.yaml"
            init = ["init", kind, cfg, "--model", tiny_model_ref, "--data", "pairs.jsonl", "--output-dir", run]
            assert main(init) == 0, run
            assert main([*train, cfg, *ONE_STEP, "eval.split=none"]) == 0, run
        yield root
    finally:
        os.chdir(before)


def test_help_examples_run_against_the_documented_run_directories(folder, monkeypatch, capsys):
    monkeypatch.chdir(folder)
    runnable = [e for e in _examples() if _runnable(e)]
    assert len(runnable) >= 6, runnable
    failed = []
    for example in runnable:
        code = main(shlex.split(example)[1:])
        if code != 0:
            failed.append(f"{example}: exit {code}\n{capsys.readouterr().err[-600:]}")
        capsys.readouterr()
    assert not failed, "\n".join(failed)
