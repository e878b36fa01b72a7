"""A round's training and evaluation: the offline trainer's config for the round's pairs (the reference, once or
every step) and the held-out gold evaluation of the trained policy."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

from prefalign.config import to_dict
from prefalign.files import write_json
from prefalign.models.hub import weights_fingerprint
from prefalign.training.config import HeldOutSection
from preference_data.sources import DataConfig

from ..losses import LOSSES
from ..online.evaluation import gold_eval
from ..online.parallel import ranks
from ..rewards import RewardSet
from ..train_config import PreviousSection, ReferenceKind, ReferenceSection, TrainConfig
from .config import IterativeConfig
from .sample import RoundEngine


def eval_policy(
    cfg: IterativeConfig, policy: str, path: Path, rewards: RewardSet, engines: RoundEngine | None = None
) -> dict[str, Any] | None:
    """The held-out gold evaluation of `policy`, with the learned reward of the same answers (cached in `path`)."""
    if cfg.eval.limit <= 0:
        return None
    key = {"policy": policy, "weights": weights_fingerprint(policy), "eval": to_dict(cfg.eval), "reward": cfg.reward}
    if path.exists():
        cached = json.loads(path.read_text(encoding="utf-8"))
        if cached.get("key") == key:
            return cached
    out = {
        "key": key,
        "policy": policy,
        **(gold_eval((engines or RoundEngine(cfg)).on(policy), cfg.eval, rewards=rewards) or {}),
    }
    write_json(path, out)
    return out


def reference_pass(cfg: IterativeConfig, pairs: int, processes: int | None = None) -> Literal["once", "every_step"]:
    """`rounds.reference_pass` for a round of `pairs` training pairs (`auto` resolved): once when the round's steps
    draw more pairs than it has (max_steps x batch_size x grad_accum x `processes`, default this launch's count)."""
    if cfg.rounds.reference_pass != "auto":
        return cfg.rounds.reference_pass
    t = cfg.train
    drawn = t.max_steps * t.batch_size * t.grad_accum * (processes or ranks()[1])
    revisited = drawn > pairs if t.max_steps > 0 else t.epochs > 1
    return "once" if revisited else "every_step"


def round_train_config(cfg: IterativeConfig, t: int, policy: str, pairs_file: Path, pairs: int) -> TrainConfig:
    spec = LOSSES[cfg.loss.name]
    if spec.needs_previous_iterate:  # INPO: π_ref = the initial model, π_t = this round's starting policy
        reference = ReferenceSection(kind="auto", model=cfg.model)
        previous = PreviousSection(model=policy)
    elif not spec.needs_reference:
        reference, previous = ReferenceSection(kind="none"), PreviousSection()
    else:
        ref_model = cfg.model if cfg.rounds.reference == "initial" else policy
        kind: ReferenceKind = "precomputed" if reference_pass(cfg, pairs) == "once" else "auto"
        reference, previous = (
            ReferenceSection(kind=kind, model=None if ref_model == policy else ref_model),
            PreviousSection(),
        )
    return TrainConfig(
        model=policy,
        output_dir=str(Path(cfg.output_dir) / f"round_{t}" / "train"),
        data=DataConfig(source=str(pairs_file), split="all"),
        eval=HeldOutSection(split="none"),
        loss=cfg.loss,
        reference=reference,
        previous=previous,
        train=replace(cfg.train, seed=cfg.train.seed + t),
        lora=cfg.lora,
    )


__all__ = ["eval_policy", "reference_pass", "round_train_config"]
