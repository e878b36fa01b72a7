"""`align rm strength`: preference strength of every pair from an ensemble of reward models.

Secrets of RLHF II (arXiv 2401.06080): train M reward models on the same data with different seeds and
data orders; for pair i, d_im = r_m(x, y_c) - r_m(x, y_r), strength mean û_i = (1/M) Σ_m d_im and
σ̂_i = sqrt((1/M) Σ_m (d_im - û_i)²). Pairs with the lowest û are likely mislabelled, the next ones
ambiguous. `rm train` can then flip, soften or re-margin them (its `strength:` section).

The output JSONL has one row per pair: {"id", "mean", "std", "diffs"}. The members are trained by the rm_train
recipe (`reward_models.rm_train.run_strength`, which then calls `measure_strength` here): a recipe never imports
another, and this module is the measurement the recipe ends with.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from prefalign.config import option
from prefalign.files import write_json
from prefalign.models.hub import load_tokenizer, pad_token_id
from preference_data.sources import load_pairs
from preference_data.tokenize import tokenize_pairs

from .checkpoint import load_rm
from .rm_config import RMTrainConfig
from .training import pair_rewards


@dataclass
class StrengthConfig:
    kind: Literal["rm_strength"] = option("rm_strength", "config kind (fixed)")
    base: RMTrainConfig = option(factory=RMTrainConfig, doc="how each ensemble member is trained (and the data)")
    members: int = option(3, "number of reward models M (ignored when `models` is given)")
    models: list[str] = option(factory=list, doc="already-trained RM directories to use instead of training")
    output_dir: str = option("runs/strength", "where members and strength.jsonl are written")

    def check(self) -> list[str]:
        if not self.models and self.members < 2:
            return [f"members: need at least 2 reward models for a spread, got {self.members}"]
        return []


def strength_stats(diffs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """diffs (M, B) -> mean (B,) and population std (B,) over the ensemble."""
    return diffs.mean(0), diffs.std(0, correction=0)


def measure_strength(cfg: StrengthConfig, models: list[str]) -> dict[str, Any]:
    """Score the pairs of `cfg.base.data` with every RM in `models`, write strength.jsonl and report.json under
    `cfg.output_dir`, and return the report. The members are trained by the rm_train recipe
    (`reward_models.rm_train.run_strength`) or given (`cfg.models`)."""
    out = Path(cfg.output_dir)
    tokenizer = load_tokenizer(cfg.base.model)
    raw, _ = load_pairs(cfg.base.data)
    pairs, _ = tokenize_pairs(
        raw, tokenizer, cfg.base.train.max_length, cfg.base.train.length_policy, response_end="template"
    )
    pad_id = pad_token_id(tokenizer)
    diffs = []
    for model_dir in models:
        model, _, _ = load_rm(model_dir, dtype="float32" if cfg.base.train.precision == "fp32" else "bfloat16")
        rc, rr = pair_rewards(
            model,
            pairs,
            pad_id,
            cfg.base.train.batch_size,
            cfg.base.train.row_tokens,
            autocast=False,
            layout=cfg.base.train.attention,
        )
        diffs.append(rc - rr)
        del model
    d = torch.stack(diffs)  # (M, B)
    mean, std = strength_stats(d)
    path = out / "strength.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        for i, p in enumerate(pairs):
            f.write(
                json.dumps(
                    {
                        "id": p.id,
                        "mean": mean[i].item(),
                        "std": std[i].item(),
                        "diffs": [round(x, 6) for x in d[:, i].tolist()],
                    }
                )
                + "\n"
            )
    report = {
        "file": str(path),
        "pairs": len(pairs),
        "members": len(models),
        "models": models,
        "negative_fraction": (mean < 0).float().mean().item(),
        "median_std": std.median().item() if len(pairs) else float("nan"),
    }
    write_json(out / "report.json", report, indent=2)
    return report
