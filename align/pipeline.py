"""Multi-stage pipelines: a run directory, a log with elapsed times, and training stages that resume.

A pipeline (the quickstart; the iterative loops, which run one training stage per round) is a list of
named stages writing under one directory. `Pipeline` gives each stage what it shares with the others:

- `say(msg)`: one log line prefixed with the seconds since the pipeline started;
- `wants(name)`: whether the configured `stages` include it;
- `train(name, cfg, run, lines)`: run a training recipe (`reward_models.rm_train.run`, `align.train.run`, ...)
  unless `cfg.output_dir` already holds a finished run of exactly `cfg` (its report.json, and a saved
  config.yaml equal to `cfg` with `train.precision: auto` resolved as the run resolved it) on the same inputs
  (`inputs.json`: the content hash of every local file and the weights' fingerprint of every local model the
  config names, so a data file rewritten under the same path or a model retrained into the same directory
  retrains the stage), in which case the saved report is returned. An interrupted pipeline so resumes at the
  stage where it stopped, and inside it from the stage's last checkpoint (a run of the same settings and inputs
  that did not finish is continued with the recipe's own resume; checkpoints of other settings are deleted
  first), and a changed setting or input retrains only the stages it belongs to. A run directory moved whole (or
  copied with its files' times, `cp -a`) is the same run in its new place: the saved config's and report's paths
  under the old directory are read as under the new one (`moved`, `read_report`);
- `fit_to_device(cfg, scale, name)`: where `train.precision: auto` resolves to fp32 on this device (no native
  bf16, a step costs more), the stage's training is shortened by `scale` (max_steps, else epochs), and the
  change is logged.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from prefalign.config import build, read_yaml, to_dict
from prefalign.errors import UserError
from prefalign.files import write_json
from prefalign.models.batch import decide_layout
from prefalign.models.hub import files_stamp, is_model_dir, weights_fingerprint
from prefalign.models.precision import decide_precision, default_device

INPUTS_FILE = "inputs.json"


class Pipeline:
    def __init__(self, root: str | Path, stages: Sequence[str], t0: float | None = None) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.stages = list(stages)
        self.t0 = time.time() if t0 is None else t0

    def say(self, msg: str) -> None:
        print(f"[{self.elapsed():6.1f}s] {msg}", flush=True)

    def elapsed(self) -> float:
        return time.time() - self.t0

    def wants(self, name: str) -> bool:
        return name in self.stages

    def need(self, path: Path, stage: str, made_by: str) -> Path:
        """`path`, which `stage` reads and stage `made_by` writes; a clear error when it is missing."""
        if not path.exists():
            raise UserError(
                f"stage '{stage}' needs {path}, which the '{made_by}' stage writes, and it is not there: add "
                f"'{made_by}' to stages (stages={self.stages}) or point out_dir at a run that has it"
            )
        return path

    def suite_file(self, stage: str, name: str) -> str:
        """A file of the suite stage's output (`name` under out_dir/suite), which `stage` needs."""
        return str(self.need(self.root / "suite" / name, stage, "suite"))

    def made_by(self, summary: dict[str, Any], stage: str, key: str) -> str | None:
        """`key` of an earlier stage's result: this run's (`summary`), else a finished run's report under
        out_dir/<stage>."""
        if summary.get(stage, {}).get(key):
            return str(summary[stage][key])
        report = self.root / stage / "report.json"
        return read_report(self.root / stage).get(key) if report.exists() else None

    def missing(self, stage: str, made_by: str, what: str) -> UserError:
        """The error for a stage whose input, `what`, stage `made_by` makes and neither this run nor out_dir has."""
        return UserError(
            f"stage '{stage}' needs {what}, which the '{made_by}' stage makes, and neither this run nor {self.root} "
            f"has it: add '{made_by}' to stages (stages={self.stages})"
        )

    def train(
        self,
        name: str,
        cfg: Any,
        run: Callable[[Any, bool], dict[str, Any]],
        lines: Callable[[dict[str, Any]], list[str]],
        what: str,
    ) -> dict[str, Any]:
        """The report of training `cfg` with `run`: trained now, or read back from a finished identical run; a run
        of the same settings on the same inputs that was interrupted (killed, Ctrl-C) is continued from its last
        checkpoint, and checkpoints of other settings or inputs are deleted first, so none is ever resumed."""
        out = Path(cfg.output_dir)
        if finished_run(out, cfg):
            report = read_report(out)
            self.say(f"{name}: already trained ({out}); skipping")
        else:
            resume = same_run(out, cfg)
            if resume:
                self.say(f"{name}: continuing the interrupted run in {out} (the same settings and inputs)")
            elif (dropped := clear_checkpoints(out)) > 0:
                self.say(f"{name}: deleted {dropped} checkpoint(s) in {out} of other settings or inputs")
            self.say(f"{name}: {what}")
            record_inputs(out, cfg)  # before training: an interrupted run is then recognised as this one
            report = run(cfg, resume)
        for line in lines(report):
            self.say(f"{name}: {line}")
        return report

    def fit_to_device(self, cfg: Any, scale: float, name: str) -> Any:
        """`cfg` with its training shortened by `scale` when `train.precision: auto` resolves to fp32 here."""
        train = cfg.train
        if train.precision != "auto" or scale == 1.0 or decide_precision("auto").value != "fp32":
            return cfg
        if train.max_steps > 0:
            new = dataclasses.replace(train, max_steps=max(1, round(train.max_steps * scale)))
            what = f"{train.max_steps} -> {new.max_steps} steps"
        else:
            new = dataclasses.replace(train, epochs=round(train.epochs * scale, 4))
            what = f"{train.epochs:g} -> {new.epochs:g} epochs"
        self.say(f"{name}: no native bf16 on this device (fp32 steps are slower): {what} (fp32_work {scale:g})")
        return dataclasses.replace(cfg, train=new)


def run_inputs(cfg: Any) -> dict[str, str]:
    """What a training run read besides its settings: for every string in `cfg` (but `output_dir`) that names a
    local file, the sha256 of its bytes; for a local model directory, its weights' fingerprint
    (`weights_fingerprint`: names, sizes and modification times of its weights and JSON files); for another
    directory, the names, sizes and modification times of its files. Keyed by the config path of the value."""
    out: dict[str, str] = {}

    def walk(value: Any, where: str) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                if k != "output_dir":
                    walk(v, f"{where}.{k}" if where else str(k))
        elif isinstance(value, list):
            for i, v in enumerate(value):
                walk(v, f"{where}[{i}]")
        elif isinstance(value, str) and value:
            path = Path(value)
            try:
                is_file, is_dir = path.is_file(), path.is_dir()
            except OSError:  # not a path at all (a prompt template longer than a file name may be)
                return
            if is_file:
                out[where] = "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
            elif is_dir and is_model_dir(path):
                out[where] = f"weights:{weights_fingerprint(value)}"
            elif is_dir:  # a data directory (shards)
                stamp = files_stamp((f for f in path.rglob("*") if f.is_file()), path)
                out[where] = "files:" + hashlib.sha256(json.dumps(stamp).encode()).hexdigest()

    walk(to_dict(cfg), "")
    return out


def record_inputs(run_dir: Path, cfg: Any) -> None:
    """Save `run_inputs(cfg)` beside a run as it starts, for `finished_run` and `same_run` to compare."""
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    write_json(Path(run_dir) / INPUTS_FILE, run_inputs(cfg), indent=1, sort_keys=True)


def moved(run_dir: Path) -> tuple[str, str] | None:
    """(the old directory, the new one) when the run in `run_dir` was written under another path and moved here: its
    saved config.yaml names another `output_dir` that ends as `run_dir` does (`/old/runs/qs/rm` for
    `/new/qs/rm`: `/old/runs` -> `/new`, the deepest directory that differs and everything below it kept); None when
    it was written here, or when nothing but the root is shared."""
    saved = Path(run_dir) / "config.yaml"
    if not saved.exists():
        return None
    try:
        before = read_yaml(saved).get("output_dir")
    except UserError:
        return None
    if not isinstance(before, str) or Path(before) == Path(run_dir):
        return None
    old, new = Path(before).parts, Path(run_dir).parts
    same = 0
    while same < min(len(old), len(new)) and old[-1 - same] == new[-1 - same]:
        same += 1
    if same == 0 or len(old) - same < 2 or len(new) - same < 1:  # no common tail, or the old root would be "/"
        return None
    return str(Path(*old[: len(old) - same])), str(Path(*new[: len(new) - same]))


def relocated(value: Any, move: tuple[str, str] | None) -> Any:
    """`value` (a config or report as plain data) with every string naming `move[0]` or a path under it made to
    name the same place under `move[1]`."""
    if move is None:
        return value
    old, new = move
    if isinstance(value, dict):
        return {k: relocated(v, move) for k, v in value.items()}
    if isinstance(value, list):
        return [relocated(v, move) for v in value]
    if isinstance(value, str) and (value == old or value.startswith(old + "/")):
        return new + value[len(old) :]
    return value


def read_report(run_dir: Path) -> dict[str, Any]:
    """A finished run's report.json, its paths under the directory it was written in read as under `run_dir`'s
    (`moved`)."""
    report = json.loads((Path(run_dir) / "report.json").read_text(encoding="utf-8"))
    return dict(relocated(report, moved(Path(run_dir))))


def same_run(run_dir: Path, cfg: Any) -> bool:
    """True when run_dir holds a run (finished or not) of exactly `cfg` on the same inputs: its config.yaml (which
    a recipe writes when it starts) equal to `cfg` and its inputs.json equal to `run_inputs(cfg)` now. The saved
    config is read as `cfg`'s type, so a setting added since it was written takes its default (which keeps the
    earlier behaviour) instead of making the run a different one; a saved config this version cannot read (a
    setting since removed) is a different run. A run directory moved here is compared with its paths moved too."""
    saved, inputs = run_dir / "config.yaml", run_dir / INPUTS_FILE
    if not (saved.exists() and inputs.exists()):
        return False
    try:
        before = relocated(to_dict(build(type(cfg), read_yaml(saved), str(saved))), moved(Path(run_dir)))
    except UserError:
        return False
    if _resolved(before) != _resolved(to_dict(cfg)):
        return False
    return bool(json.loads(inputs.read_text(encoding="utf-8")) == run_inputs(cfg))


def clear_checkpoints(run_dir: Path) -> int:
    """Delete every `checkpoints` directory under run_dir (a run's, or its rounds'); the number of checkpoints
    they held."""
    dirs = [d for d in run_dir.rglob("checkpoints") if d.is_dir()] if run_dir.is_dir() else []
    n = sum(1 for d in dirs for c in d.glob("checkpoint-*") if c.is_dir())
    for d in dirs:
        shutil.rmtree(d)
    return n


def _resolved(config: Any) -> Any:
    """A saved or new config (as a dict) with `train.precision: auto` and `train.attention: auto` resolved as a run
    on this device resolves them (a recipe saves them resolved; the iterative loop's config keeps auto)."""
    train = config.get("train") if isinstance(config, dict) else None
    if not isinstance(train, dict):
        return config
    device = default_device()
    precision = decide_precision(train.get("precision", "auto"), device)
    layout = decide_layout(train.get("attention", "auto"), device, precision.bf16)
    return {**config, "train": {**train, "precision": precision.value, "attention": layout}}


def finished_run(run_dir: Path, cfg: Any) -> bool:
    """True when run_dir holds a finished run of exactly this config on the same inputs (so the stage can be
    skipped): its report.json beside a run `same_run` recognises (a saved config.yaml equal to `cfg`, an inputs.json
    equal to `run_inputs(cfg)` now). A run without inputs.json (or whose data or model changed under the same path)
    is not reused. Both configs are compared with `train.precision` and `train.attention` resolved (`_resolved`)."""
    return (run_dir / "report.json").exists() and same_run(run_dir, cfg)
