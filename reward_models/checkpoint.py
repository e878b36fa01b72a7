"""Saving and loading trained reward models: a directory `AutoModelForSequenceClassification` loads.

Layout of a saved RM directory:
  config.json, model.safetensors       merged weights (full fine-tuning, or LoRA merged into the base), or
  adapter_config.json, adapter_model.safetensors   a peft adapter whose `modules_to_save` holds the score head
  tokenizer files, chat_template.jinja the tokenizer and chat template the RM was trained with
  reward_stats.json                    normalisation statistics of the rewards on the training data:
                                       {"mean", "std", "n", "num_labels", "computed_on"}

Scores are reported raw or normalised as (r - mean) / std, so a reward model's scale travels with it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from preference_data.errors import UserError
from preference_data.hub import base_of_adapter, load_seq_cls, load_tokenizer, resolve, torch_dtype

STATS_FILE = "reward_stats.json"


@dataclass
class RewardStats:
    mean: float = 0.0
    std: float = 1.0
    n: int = 0
    num_labels: int = 1
    computed_on: str = ""

    def normalise(self, r: float) -> float:
        return (r - self.mean) / (self.std if self.std > 1e-8 else 1.0)


def save_rm(model: Any, tokenizer: Any, out_dir: str | Path, stats: RewardStats, merge: bool = True) -> Path:
    """Write `model` (plain or peft) so that it reloads and scores identically."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if hasattr(model, "merge_and_unload") and merge:
        import copy

        # merge in fp32: a small LoRA delta added to bf16 weights would be partly rounded away
        model = copy.deepcopy(model).float().merge_and_unload()
        model.config.dtype = "float32"
    model.save_pretrained(str(out), safe_serialization=True)
    tokenizer.save_pretrained(str(out))
    (out / STATS_FILE).write_text(json.dumps(asdict(stats), indent=2), encoding="utf-8")
    return out


def read_stats(path: str | Path) -> RewardStats:
    f = Path(path) / STATS_FILE
    if not f.exists():
        return RewardStats(computed_on="none (no reward_stats.json; scores are raw)")
    return RewardStats(**json.loads(f.read_text(encoding="utf-8")))


def load_rm(ref: str, dtype: str = "bfloat16") -> tuple[Any, Any, RewardStats]:
    """(model in eval mode, tokenizer, stats) for a saved RM directory, a builtin, or a hub id."""
    path = resolve(ref)
    p = Path(path)
    if (p / "adapter_config.json").exists() and not (p / "config.json").exists():
        from peft import PeftModel

        base = load_seq_cls(base_of_adapter(path), dtype=dtype)
        model = PeftModel.from_pretrained(base, path, torch_dtype=torch_dtype(dtype))
        model.eval()
    else:
        model = load_seq_cls(ref, dtype=dtype)
    if p.exists() and not (p / STATS_FILE).exists() and not (p / "config.json").exists():
        raise UserError(f"{p} is not a reward model directory (no config.json or adapter_config.json)")
    return model, load_tokenizer(ref if not (p / "tokenizer_config.json").exists() else path), read_stats(p)
