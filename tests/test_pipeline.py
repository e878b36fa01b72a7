"""A pipeline's training stage is reused only for the same settings on the same inputs."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace

from align.pipeline import INPUTS_FILE, finished_run, record_inputs, run_inputs
from align.train import TrainConfig
from prefalign.config import build, dump_yaml


def finished(tmp_path, data, model):
    """A finished run of a config that reads `data` and starts from `model`: its config, report and inputs."""
    out = tmp_path / "run"
    cfg = build(
        TrainConfig,
        {
            "model": str(model),
            "output_dir": str(out),
            "data": {"source": str(data)},
            "train": {"precision": "fp32"},
        },
    )
    out.mkdir(exist_ok=True)
    dump_yaml(cfg, out / "config.yaml")
    (out / "report.json").write_text("{}")
    record_inputs(out, cfg)
    return cfg, out


def test_a_finished_run_is_reused_only_on_the_same_data_and_model(tmp_path):
    data = tmp_path / "pairs.jsonl"
    data.write_text('{"prompt": "a", "chosen": "b", "rejected": "c"}\n')
    model = tmp_path / "policy"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"weights")
    (model / "config.json").write_text("{}")
    cfg, out = finished(tmp_path, data, model)
    inputs = json.loads((out / INPUTS_FILE).read_text())
    assert inputs["data.source"].startswith("sha256:") and inputs["model"].startswith("weights:")
    assert "output_dir" not in inputs
    assert finished_run(out, cfg)
    data.write_text(data.read_text())  # rewritten with the same bytes: still the same run
    assert finished_run(out, cfg)
    data.write_text('{"prompt": "a", "chosen": "c", "rejected": "b"}\n')  # other pairs under the same path
    assert not finished_run(out, cfg)

    cfg, out = finished(tmp_path, data, model)
    assert finished_run(out, cfg)
    stat = (model / "model.safetensors").stat()
    (model / "model.safetensors").write_bytes(b"retrained")  # retrained into the same directory
    os.utime(model / "model.safetensors", ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))
    assert not finished_run(out, cfg)

    cfg, out = finished(tmp_path, data, model)
    (out / INPUTS_FILE).unlink()  # a run that did not record its inputs is not trusted
    assert not finished_run(out, cfg)
    cfg, out = finished(tmp_path, data, model)
    assert not finished_run(out, replace(cfg, train=replace(cfg.train, lr=cfg.train.lr * 2)))  # another setting


def test_inputs_skip_strings_that_are_not_paths(tmp_path):
    """A setting too long to be a file name (a prompt template, a system prompt) is no input, not an error."""

    @dataclass
    class Settings:
        template: str
        data: str

    data = tmp_path / "pairs.jsonl"
    data.write_text("{}\n")
    assert list(run_inputs(Settings("Judge the answer. " * 40, str(data)))) == ["data"]


def test_a_run_saved_before_a_setting_existed_is_the_same_run(tmp_path):
    """A config saved by an earlier version lacks settings added since; they take their defaults (which keep the
    earlier behaviour), so the finished run is still reused. A saved setting this version does not know, or a
    changed one, makes it another run."""
    import yaml

    data = tmp_path / "pairs.jsonl"
    data.write_text('{"prompt": "a", "chosen": "b", "rejected": "c"}\n')
    cfg, out = finished(tmp_path, data, "builtin:smollm2-135m-instruct")
    saved = yaml.safe_load((out / "config.yaml").read_text())
    del saved["data"]["suite_hard_negatives"]  # written before the setting existed
    (out / "config.yaml").write_text(yaml.safe_dump(saved))
    assert finished_run(out, cfg)
    saved["data"]["suite_hard_negatives"] = 3  # not the default: another run
    (out / "config.yaml").write_text(yaml.safe_dump(saved))
    assert not finished_run(out, cfg)
    del saved["data"]["suite_hard_negatives"]
    saved["train"]["a_setting_since_removed"] = 1
    (out / "config.yaml").write_text(yaml.safe_dump(saved))
    assert not finished_run(out, cfg)
