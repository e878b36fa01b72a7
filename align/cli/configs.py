"""Which typed config each YAML `kind:` means, for `align validate` and the shipped-config test."""

from __future__ import annotations

import importlib
from typing import Any

from prefalign.config import load, read_yaml
from prefalign.errors import ConfigError, did_you_mean

# kind -> (module, class); imported lazily
KINDS: dict[str, tuple[str, str]] = {
    "quickstart": ("align.quickstart", "QuickstartConfig"),
    "rm_train": ("reward_models.rm_train", "RMTrainConfig"),
    "judge_train": ("reward_models.judge_train", "JudgeTrainConfig"),
    "meta_rm_train": ("reward_models.meta_rm", "MetaRMTrainConfig"),
    "polar_pool": ("reward_models.polar.pool", "PolarPoolConfig"),
    "polar_train": ("reward_models.polar.train", "PolarTrainConfig"),
    "train": ("align.train", "TrainConfig"),
    "online": ("align.online", "OnlineConfig"),
    "iterative": ("align.iterative", "IterativeConfig"),
    "rm_strength": ("reward_models.strength", "StrengthConfig"),
    "mo_rm_train": ("reward_models.multi_objective", "MORMTrainConfig"),
}


def config_class(kind: str) -> type:
    module, cls = KINDS[kind]
    return getattr(importlib.import_module(module), cls)


def validate_file(path: str, overrides: list[str] | None = None) -> tuple[str, Any]:
    """Build the typed config a YAML file describes; raise ConfigError listing every problem."""
    data = read_yaml(path)
    kind = data.get("kind") if isinstance(data, dict) else None
    if kind not in KINDS:
        raise ConfigError(
            [
                f"kind: {kind!r} is not a known config kind{did_you_mean(str(kind), list(KINDS))}; "
                f"use one of {', '.join(KINDS)}"
            ],
            path,
        )
    return kind, load(config_class(kind), path, overrides)
