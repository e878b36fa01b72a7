"""The skeleton every training recipe shares, so a recipe reads top to bottom (setup, train, save, report):

    run = start_run(cfg, cfg.train, "rm train", resume)  # precision, threads, seed, run dir, config.yaml
    ...                                                   # data, model, trainer (metrics to run.metrics_path,
                                                          # checkpoints under run.checkpoints)
    stats = run.train(trainer, cfg.train, evaluates=bool(eval_pairs))  # from the resume point
    if not trainer.is_world_process_zero():
        return {}
    ...                                                   # evaluate, save
    return run.finish({...report..., **stats.to_dict()}, PLOT_KEYS)  # plots, report.json

The run directory holds config.yaml (the config as resolved: `train.precision: auto` replaced by what ran),
metrics.jsonl (appended by `MetricsMixin`; cleared at a fresh start, kept on `--resume`), checkpoints/,
plots/ and report.json.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefalign.config import dump_yaml

from .config import TrainSection
from .metrics import plot_metrics
from .trainer import evaluate_every, resolve_precision, resume_point, set_threads


@dataclass
class TrainStats:
    """What `trainer.train` did, for the report."""

    steps: int
    train_loss: float
    train_seconds: float
    pairs_per_second: float  # pairs through the optimizer per second, all processes together

    def to_dict(self) -> dict[str, Any]:
        return {
            "steps": self.steps,
            "train_loss": self.train_loss,
            "train_seconds": round(self.train_seconds, 1),
            "pairs_per_second": round(self.pairs_per_second, 3),
        }


@dataclass
class RecipeRun:
    """One training run: its directory, the precision it resolved to, and where `--resume` continues from."""

    dir: Path
    precision: str  # one-line description of the resolved precision (`resolve_precision`)
    resume_from: str | None  # the last checkpoint when resuming, else None
    started: float  # time.time() at the start

    @property
    def checkpoints(self) -> Path:
        return self.dir / "checkpoints"

    @property
    def metrics_path(self) -> Path:
        return self.dir / "metrics.jsonl"

    def train(self, trainer: Any, train: TrainSection, evaluates: bool) -> TrainStats:
        """`trainer.train()` from the resume point, evaluating every `train.eval_every` steps when `evaluates`."""
        if train.eval_every > 0 and evaluates:
            evaluate_every(trainer, train.eval_every)
        t0 = time.time()
        result = trainer.train(resume_from_checkpoint=self.resume_from)
        seconds = time.time() - t0
        pairs = result.global_step * train.batch_size * train.grad_accum * trainer.args.world_size
        return TrainStats(result.global_step, result.training_loss, seconds, pairs / max(seconds, 1e-9))

    def finish(self, report: dict[str, Any], plot_keys: list[str]) -> dict[str, Any]:
        """`report` with the metric plots and the run's total seconds added, written to report.json."""
        plots = plot_metrics(self.metrics_path, self.dir / "plots", plot_keys)
        report = {**report, "plots": [str(p) for p in plots], "seconds": round(time.time() - self.started, 1)}
        (self.dir / "report.json").write_text(json.dumps(report, indent=2, default=str), encoding="utf-8")
        return report


def start_run(cfg: Any, train: TrainSection, what: str, resume: bool) -> RecipeRun:
    """Set up a run of the recipe config `cfg` (with `output_dir`) whose optimisation section is `train`.

    Resolves `train.precision: auto` (printed, as `what`), sets threads and seeds, creates the run directory and
    writes config.yaml, clears metrics.jsonl unless resuming, and finds the checkpoint to resume from.
    """
    from transformers import set_seed

    started = time.time()
    precision = resolve_precision(train, what)
    set_threads(train)
    set_seed(train.seed)
    run = RecipeRun(Path(cfg.output_dir), precision, None, started)
    run.dir.mkdir(parents=True, exist_ok=True)
    dump_yaml(cfg, run.dir / "config.yaml")
    if not resume and run.metrics_path.exists():
        run.metrics_path.unlink()
    run.resume_from = resume_point(str(run.checkpoints), resume)
    return run
