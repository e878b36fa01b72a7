"""What an online run keeps on disk so that `--resume` after a kill ends with the weights of an uninterrupted run.

checkpoints/checkpoint-<step>/online_state.pt   every `train.save_every` steps: the trainable weights (by the
                    policy's parameter names, whole), the optimizer's and the schedule's state, the composition's
                    state (multipliers, running statistics, weights, search cache), the step; written to a
                    temporary file and renamed, so a kill never leaves half a checkpoint. The newest
                    `keep_checkpoints` are kept (0 = all, for `align eval overopt` along training).
rollouts/step_<step>-rank<r>.json               each step's rollout, rewards and frozen log-probs as drawn, so a
                    resumed run reuses every rollout it drew instead of drawing (and scoring) it again.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from prefalign.errors import UserError
from prefalign.files import replacing, write_json

from ..composition import Composer
from .learner import Learner
from .parallel import ranks
from .reward import Rewards
from .rollout import ROLLOUT_VERSION, Rollout
from .update import Frozen

STATE_FILE = "online_state.pt"
STATE_FORMAT = 2  # optimizer state keyed by parameter name (torch's distributed state-dict helpers)


@dataclass
class Drawn:
    """One step's phases before the update, as this rank drew them (cached in rollouts/)."""

    rollout: Rollout
    rewards: Rewards
    frozen: Frozen
    cached: bool = False  # read back from disk (its time is not counted again)
    frozen_seconds: float = 0.0


def step_path(run_dir: Path, step: int) -> Path:
    return run_dir / "rollouts" / f"step_{step:05d}-rank{ranks()[0]}.json"


def save_drawn(path: Path, d: Drawn) -> None:
    data = {
        "version": ROLLOUT_VERSION,
        "rollout": d.rollout.to_json(),
        "rewards": d.rewards.to_json(),
        "frozen": {"old": d.frozen.old, "ref": d.frozen.ref, "seconds": d.frozen_seconds},
    }
    write_json(path, data)


def load_drawn(path: Path) -> Drawn | None:
    """The cached step, or None when there is none (or it was written by another format)."""
    if not path.exists():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    if data.get("version") != ROLLOUT_VERSION:
        return None
    f = data["frozen"]
    return Drawn(
        Rollout.from_json(data["rollout"]), Rewards.from_json(data["rewards"]), Frozen(f["old"], f["ref"]), True
    )


def read_checkpoint(ckpt: str | Path | None) -> dict[str, Any] | None:
    """A checkpoint's state (None without one); its weights and optimizer state go to `build_learner`."""
    if ckpt is None:
        return None
    state = torch.load(Path(ckpt) / STATE_FILE, map_location="cpu", weights_only=False)
    if state.get("format") != STATE_FORMAT:
        raise UserError(
            f"{ckpt}: a checkpoint of an earlier format; it cannot be resumed by this version (start the run again, "
            "or evaluate its weights with `align eval overopt --run`)"
        )
    return state


def save_checkpoint(learner: Learner, checkpoints: Path, step: int, composer: Composer | None, keep: int) -> None:
    """Write checkpoint-<step> (every rank calls this: FSDP gathers the shards); rank 0 writes and prunes."""
    weights, optimizer = learner.trainable_state(), learner.optimizer_state()
    if ranks()[0] != 0:
        return
    ckpt = checkpoints / f"checkpoint-{step}"
    ckpt.mkdir(parents=True, exist_ok=True)
    state = {
        "format": STATE_FORMAT,
        "step": step,
        "weights": weights,
        "optimizer": optimizer,
        "scheduler": learner.scheduler.state_dict(),
        "composition": composer.state_dict() if composer is not None else None,
    }
    with replacing(ckpt / STATE_FILE) as tmp:
        torch.save(state, tmp)
    write_json(ckpt / "trainer_state.json", {"global_step": step})
    olds = sorted(checkpoints.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    for old in olds[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)


__all__ = ["STATE_FILE", "Drawn", "load_drawn", "read_checkpoint", "save_checkpoint", "save_drawn", "step_path"]
