"""The recipes on human data read what a user has: the public datasets through `datasets` (HH-RLHF's hub repository,
its train split training and its test split held out) or the files a paper publishes (FineGrainedRLHF), never a
path only this project's checkout has. Here they are pointed at the local copies under ../shared/data by overrides,
as a user without the hub would point them at theirs, checked by `align validate` and run for one step."""

from __future__ import annotations

from pathlib import Path

import pytest

from align.cli.configs import check_resources, validate_file
from prefalign.config import read_yaml

ROOT = Path(__file__).resolve().parents[1]
HUMAN = ("rm_hh.yaml", "dpo_hh.yaml", "mo_rm_finegrained.yaml")


@pytest.mark.parametrize("name", HUMAN)
def test_human_data_recipes_name_public_sources_only(name):
    text = (ROOT / "configs" / name).read_text()
    assert "shared/data" not in text and "../" not in text.split("kind:")[1], name
    data = read_yaml(str(ROOT / "configs" / name))
    sources = [data["data"]["source"]] + ([data["preference"]["source"]] if "preference" in data else [])
    for s in sources:
        assert s == "Anthropic/hh-rlhf" or s.startswith("https://"), (name, s)
    if data["data"]["source"] == "Anthropic/hh-rlhf":  # trains on the hub's train split, holds out its test split
        assert (data["data"]["hub_split"], data["data"]["split"]) == ("train", "all")
        assert (data["eval"]["hub_split"], data["eval"]["split"]) == ("test", "all")


def _local(name: str, shared: Path) -> list[str]:
    if name == "mo_rm_finegrained.yaml":
        fg = str(shared / "finegrained-rlhf" / "qa_feedback" / "dev_feedback.json")
        return [f"data.source={fg}", f"preference.source={fg}"]
    hh = str(shared / "hh-rlhf" / "helpful-base" / "test.decontaminated.jsonl.gz")
    held = str(shared / "hh-rlhf" / "harmless-base" / "test.decontaminated.jsonl.gz")
    return [f"data.source={hh}", f"eval.source={held}"]


@pytest.mark.parametrize("name", HUMAN)
def test_human_data_recipes_validate_on_local_copies(name, shared_data):
    kind, cfg = validate_file(str(ROOT / "configs" / name), _local(name, shared_data))
    notes = check_resources(cfg, name)
    assert any("rows read" in n and "records" in n for n in notes), notes  # the whole file read, as the run reads it


@pytest.mark.parametrize("name", ["rm_hh.yaml", "dpo_hh.yaml"])
def test_hh_recipes_run_a_step_on_local_copies(name, shared_data, tmp_path):
    import importlib

    from align.cli.configs import config_class

    tiny = [
        "model=builtin:tiny-llama",
        f"output_dir={tmp_path / 'run'}",
        "data.limit=16",
        "eval.limit=8",
        "train.max_steps=1",
        "train.batch_size=4",
        "train.precision=fp32",
        "train.compile=false",
    ]
    kind, cfg = validate_file(str(ROOT / "configs" / name), _local(name, shared_data) + tiny)
    module = {"rm_train": "reward_models.rm_train", "train": "align.train"}[kind]
    assert isinstance(cfg, config_class(kind))
    report = importlib.import_module(module).run(cfg)
    assert report["steps"] == 1 and report["eval"]["pairs"] == 8
