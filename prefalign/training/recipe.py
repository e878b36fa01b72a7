"""The skeleton every training recipe shares, so a recipe reads top to bottom (setup, train, save, report):

    run = start_run(cfg, cfg.train, "rm train", resume)  # precision, threads, seed, run dir, config.yaml
    ...                                                   # data, model, trainer (metrics to run.metrics_path,
                                                          # checkpoints under run.checkpoints)
    stats = run.train(trainer, cfg.train, evaluates=bool(eval_pairs))  # from the resume point
    if not trainer.is_world_process_zero():
        return {}
    ...                                                   # evaluate, save
    return run.finish({...report..., **stats.to_dict()}, PLOT_KEYS)  # report.json, report.html, dashboard.png

The run directory holds config.yaml (the config as resolved: `train.precision: auto` replaced by what ran),
metrics.jsonl and alerts.jsonl (appended by `MetricsMixin`; cleared at a fresh start, kept on `--resume`),
data_report.json (when the recipe calls `save_data_report`), checkpoints/, and at the end report.json and the
run report (report.html with dashboard.png, `report.py`). Training that stops on an error or Ctrl-C leaves
stopped.json and the run report as far as it got; `align report RUN_DIR` redraws it at any time.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import signal
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import TrainerCallback, TrainerState, set_seed
from transformers.trainer_utils import TrainOutput

from prefalign.config import dump_yaml
from prefalign.errors import UserError
from prefalign.models.hub import load_model

from ..files import free_space, write_json, write_text
from .config import TrainSection
from .metrics import ALERTS_FILE
from .report import DASHBOARD_PNG, DATA_REPORT, REPORT_HTML, STOPPED, write_report
from .trainer import (
    MarkComplete,
    compiled_graphs,
    evaluate_every,
    keep_whole,
    last_checkpoint,
    resolve_precision,
    resume_point,
    set_threads,
)


@dataclass
class TrainStats:
    """What `trainer.train` did, for the report."""

    steps: int
    train_loss: float
    train_seconds: float
    pairs_per_second: float  # pairs through the optimizer per second, all processes together
    compiled: dict[str, int]  # `compiled_graphs()` after training: graphs traced (recompiles show here)

    def to_dict(self) -> dict[str, Any]:
        return {
            "steps": self.steps,
            "train_loss": self.train_loss,
            "train_seconds": round(self.train_seconds, 1),
            "pairs_per_second": round(self.pairs_per_second, 3),
            "compiled_graphs": self.compiled["graphs"],
        }


class RunInterrupted(KeyboardInterrupt):
    """A run stopped by Ctrl-C after saving its last step (the message says how to resume)."""


class StopOnInterrupt(TrainerCallback):
    """The first SIGINT (Ctrl-C) lets the current optimizer step finish, saves a checkpoint and stops training; a
    second one stops at once (Python's KeyboardInterrupt), the last complete checkpoint left as it was."""

    def __init__(self) -> None:
        self.requested = False

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
            yield
            return

        def first(signum: int, frame: Any) -> None:
            self.requested = True
            signal.signal(signal.SIGINT, signal.default_int_handler)  # the second Ctrl-C: at once
            print("\nCtrl-C: finishing this step and saving a checkpoint (Ctrl-C again to stop at once)", flush=True)

        before = signal.signal(signal.SIGINT, first)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, before)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if self.requested:
            control.should_save = True
            control.should_training_stop = True
        return control


def disk_full(error: OSError, checkpoints: Path, step: int) -> UserError:
    """The error of a write the disk had no room for: the path, the space left, and what to resume from."""
    path = error.filename or checkpoints
    space = free_space(checkpoints)
    last = last_checkpoint(str(checkpoints))
    resume = (
        f"the last complete checkpoint is {last}: free some space and rerun with --resume"
        if last
        else "no complete checkpoint was written: free some space and run again"
    )
    return UserError(
        f"the disk is full: writing {path} at step {step} failed ({space}; a checkpoint needs about the size of "
        f"the trainable weights and twice that for the optimizer). {resume} (a checkpoint cut short is never "
        "resumed from)"
    )


def finished_at(trainer: Any, checkpoint: str | None) -> TrainOutput | None:
    """Resuming from a checkpoint of the run's last step (killed after training, while saving or evaluating): its
    weights and state loaded and no step trained. `Trainer.train` would train one step more when that step falls
    inside an epoch (it checks for the end only after a step), so a resumed run would end past the uninterrupted one.
    None for any other checkpoint. The training loss is the mean of the logged losses, weighted by the steps each
    covers (the Trainer's own on a resumed run covers only the steps after the resume)."""
    if checkpoint is None:
        return None
    state = TrainerState.load_from_json(str(Path(checkpoint) / "trainer_state.json"))
    if not 0 < state.max_steps <= state.global_step:
        return None
    trainer._load_from_checkpoint(checkpoint)
    trainer.state = state
    print(f"--resume: {checkpoint} is the last step ({state.global_step} of {state.max_steps}): nothing left to train")
    logged = [(h["step"], h["loss"]) for h in state.log_history if "loss" in h and "step" in h]
    total, last = 0.0, 0
    for step, loss in logged:
        total, last = total + loss * (step - last), step
    return TrainOutput(state.global_step, total / last if last else math.nan, {})


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
        """`trainer.train()` from the resume point, evaluating every `train.eval_every` steps when `evaluates`; under
        FSDP the weights are gathered whole afterwards (`keep_whole`)."""
        if train.eval_every > 0 and evaluates:
            evaluate_every(trainer, train.eval_every)
        t0 = time.time()
        stop = StopOnInterrupt()
        trainer.add_callback(stop)
        trainer.add_callback(MarkComplete())
        try:
            with stop.installed():
                try:
                    result = finished_at(trainer, self.resume_from) or trainer.train(
                        resume_from_checkpoint=self.resume_from
                    )
                except OSError as e:
                    if e.errno != errno.ENOSPC:
                        raise
                    raise disk_full(e, self.checkpoints, trainer.state.global_step) from e
            if stop.requested:  # the first Ctrl-C: the step finished and was saved
                raise RunInterrupted(
                    f"interrupted at step {trainer.state.global_step}: saved {self.checkpoints}/checkpoint-"
                    f"{trainer.state.global_step}; continue with the same command and --resume"
                )
        except BaseException as e:  # Ctrl-C included: say where it stopped, and leave the report of what ran
            if trainer.is_world_process_zero():
                self.stopped(trainer.state.global_step, e)
            raise
        seconds = time.time() - t0
        keep_whole(trainer.model)  # FSDP: the recipe's own forwards after training need whole weights
        pairs = result.global_step * train.batch_size * train.grad_accum * trainer.args.world_size
        compiled = compiled_graphs()
        if compiled["graphs"]:
            print(
                f"train.compile: {compiled['graphs']} graphs compiled ({compiled['frames']} frames) in "
                f"{result.global_step} steps, attention {train.attention}",
                flush=True,
            )
        return TrainStats(result.global_step, result.training_loss, seconds, pairs / max(seconds, 1e-9), compiled)

    def save_data_report(self, reports: dict[str, Any]) -> None:
        """Write the data reports ("data", "tokenization", "eval_tokenization") to data_report.json at the start,
        so the run report shows them while training runs."""
        write_json(self.dir / DATA_REPORT, reports, indent=2, default=str)

    def stopped(self, step: int, error: BaseException) -> None:
        """Record that training stopped at `step` on `error` (stopped.json) and write the run report so far."""
        why = {"step": step, "error": type(error).__name__, "message": str(error)[:500]}
        write_json(self.dir / STOPPED, why, indent=2)
        try:
            files = write_report(self.dir)
            print(f"run report so far: {files.html}", flush=True)
        except Exception as report_error:  # the training error is the one to see
            print(f"(no run report: {type(report_error).__name__}: {report_error})", flush=True)

    def finish(self, report: dict[str, Any], plot_keys: Sequence[str] = ()) -> dict[str, Any]:
        """`report` with the run's total seconds and the run report's paths added, written to report.json; then
        the run report (report.html, dashboard.png). `plot_keys`: the metrics whose panels lead the dashboard."""
        report = {
            **report,
            "seconds": round(time.time() - self.started, 1),
            "run_report": str(self.dir / REPORT_HTML),
            "dashboard_first": list(plot_keys),
        }
        write_json(self.dir / "report.json", report, indent=2, default=str)
        write_report(self.dir)
        return report


def start_run(cfg: Any, train: TrainSection, what: str, resume: bool) -> RecipeRun:
    """Set up a run of the recipe config `cfg` (with `output_dir`) whose optimisation section is `train`.

    Resolves `train.precision: auto` (printed, as `what`), sets threads and seeds, creates the run directory and
    writes config.yaml, removes the previous run's report (and unless resuming its metrics, alerts and data
    report), and finds the checkpoint to resume from.
    """
    started = time.time()
    precision = resolve_precision(train, what)
    set_threads(train)
    set_seed(train.seed)
    run = RecipeRun(Path(cfg.output_dir), precision, None, started)
    run.dir.mkdir(parents=True, exist_ok=True)
    dump_yaml(cfg, run.dir / "config.yaml")
    # what says "finished" or "stopped" goes at every start; the logs of earlier steps only at a fresh one
    stale = ["report.json", STOPPED, REPORT_HTML, DASHBOARD_PNG]
    if not resume:
        stale += [run.metrics_path.name, ALERTS_FILE, DATA_REPORT]
    for name in stale:
        (run.dir / name).unlink(missing_ok=True)
    run.resume_from = resume_point(str(run.checkpoints), resume)
    if run.resume_from is not None:
        drop_rows_after(run.metrics_path, int(Path(run.resume_from).name.rsplit("-", 1)[-1]))
    return run


def drop_rows_after(metrics: Path, step: int) -> None:
    """Keep the metrics rows of steps up to `step` (the checkpoint a run resumes from): the steps after it are
    trained again, and each step's row is written once."""
    if not metrics.exists():
        return
    rows = [line for line in metrics.read_text(encoding="utf-8").splitlines() if line.strip()]
    kept = [line for line in rows if int(json.loads(line).get("step", 0) or 0) <= step]
    if len(kept) != len(rows):
        write_text(metrics, "".join(line + "\n" for line in kept))
        print(f"--resume: {len(rows) - len(kept)} metrics rows after step {step} dropped (they are trained again)")


def save_policy(
    model: Any,
    tokenizer: Any,
    run_dir: Path,
    method: str,
    merged_too: bool,
    state: dict | None = None,
    base: str | None = None,
    dtype: torch.dtype = torch.float32,
) -> dict[str, str]:
    """Save a trained policy: under LoRA the adapter (and, with `merged_too`, the adapter merged into the base in
    fp32, since a small LoRA delta added to bf16 base weights would be partly rounded away, then saved in `dtype`:
    `saved_dtype(train)`), else the model; the tokenizer with each. Under FSDP, `state` holds the weights gathered
    whole (`whole_state_dict`), saved instead of the sharded model's, and the merged copy is the saved adapter put
    on `base` (the model reference training started from, an adapter merged first). Returns adapter_dir /
    merged_dir / policy_dir (the directory to load the policy from)."""
    if state is not None and method == "lora" and merged_too and base is None:
        raise ValueError("save_policy: under FSDP (state given) the merged copy needs the base model reference")
    saved: dict[str, str] = {}
    if method == "lora":
        model.save_pretrained(str(run_dir / "adapter"), state_dict=state)
        tokenizer.save_pretrained(str(run_dir / "adapter"))
        saved["adapter_dir"] = str(run_dir / "adapter")
        if merged_too:
            if state is None:
                merged = model.float().merge_and_unload()
            else:  # the saved adapter put on the start model
                merged = load_model(str(run_dir / "adapter"), "float32", merge=True, onto=base)
            merged = merged.to(dtype)
            merged.config.dtype = str(dtype).removeprefix("torch.")
            merged.save_pretrained(str(run_dir / "merged"))
            tokenizer.save_pretrained(str(run_dir / "merged"))
            saved["merged_dir"] = str(run_dir / "merged")
        saved["policy_dir"] = saved.get("merged_dir", saved["adapter_dir"])
    else:
        model.save_pretrained(str(run_dir / "model"), state_dict=state)
        tokenizer.save_pretrained(str(run_dir / "model"))
        saved["policy_dir"] = str(run_dir / "model")
    return saved
