"""Shared training machinery for every trainer (reward models here, policies in `align`).

Built on `transformers.Trainer`, so gradient accumulation, checkpoints, `--resume`, `report_to`
integrations and DDP / FSDP / DeepSpeed through `accelerate launch` or `torchrun` come from there.
What we add: packed prefix-shared batches (no padding waste, the shared prompt encoded once, each pair
attended on its own), bf16 on CPU, compiled layers, LoRA set-up, metric averaging for logs, a metrics
JSONL and PNG plots in the run directory.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from torch.utils.data import Dataset

from preference_data.config import option
from preference_data.packing import PackedBatch, pack_pairs

from .forward import PACKED_FIELDS

log = logging.getLogger(__name__)

@dataclass
class LoraSection:
    r: int = option(16, "LoRA rank")
    alpha: int = option(32, "LoRA alpha (scale = alpha / r)")
    dropout: float = option(0.0, "LoRA dropout")
    target_modules: list[str] = option(
        factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        doc="module names that get adapters")
    layers: list[int] = option(factory=list, doc="transformer layer indices that get adapters (empty = all); "
                                                 "adapters only in the top layers also stop the backward pass there")

    def check(self) -> list[str]:
        problems = [f"r: must be positive, got {self.r}"] if self.r <= 0 else []
        if any(i < 0 for i in self.layers):
            problems.append(f"layers: indices must be non-negative, got {self.layers}")
        return problems


@dataclass
class TrainSection:
    method: Literal["lora", "full"] = option("lora", "LoRA adapters (base frozen) or full fine-tuning")
    lr: float = option(1e-4, "peak learning rate (AdamW)")
    epochs: float = option(1.0, "passes over the training pairs (ignored when max_steps > 0)")
    max_steps: int = option(-1, "optimizer steps; -1 means use epochs")
    batch_size: int = option(8, "pairs per micro-batch per process")
    grad_accum: int = option(1, "micro-batches per optimizer step")
    warmup_ratio: float = option(0.0, "fraction of the optimizer steps spent in linear warm-up, in [0, 1)")
    lr_scheduler: Literal["linear", "cosine", "constant", "constant_with_warmup"] = option("linear", "schedule")
    weight_decay: float = option(0.0, "AdamW weight decay")
    max_grad_norm: float = option(1.0, "gradient clipping norm (0 = off)")
    precision: Literal["auto", "bf16", "bf16-pure", "fp32"] = option(
        "auto", "auto: bf16 where the device multiplies bf16 natively (CUDA with bf16; CPUs with AVX-512 BF16 or "
                "AMX), fp32 otherwise (see prefalign.models.precision); bf16: fp32 trainable weights under bf16 "
                "autocast (frozen LoRA base stored in bf16); bf16-pure: all weights bf16 (fastest, least precise); "
                "fp32: no autocast. The run prints and saves the precision it resolved to")
    disable_dropout: bool = option(True, "set every dropout probability of the model to 0 before training (as TRL "
                                         "does), so the policy, its adapters-disabled reference and the reward "
                                         "are deterministic; LoRA dropout (lora.dropout) is kept")
    max_length: int = option(1024, "token budget for prompt + the longer response")
    length_policy: Literal["drop", "truncate_prompt_left", "raise"] = option(
        "drop", "what to do with pairs longer than max_length (always counted in the report)")
    attention: Literal["segments", "mask"] = option(
        "segments", "how prefix-shared packed pairs are attended: segments = each pair attended on its own in one "
                    "unpadded row (fastest; needs a model using transformers' attention interface, as Llama, "
                    "Qwen, Mistral, Gemma do); mask = rows of row_tokens with a dense block mask (any model)")
    compile: bool = option(True, "torch.compile each transformer layer (inductor, dynamic shapes): fuses the "
                                 "norms, rotary embeddings, activations and dtype casts that dominate a CPU step "
                                 "(~1.5x faster steps here); the first step pays the compile (~30 s, a few "
                                 "seconds once inductor's on-disk cache is warm). Skipped with a warning when no "
                                 "C++ compiler is found")
    row_tokens: int = option(512, "tokens per packed row for attention: mask; a longer pair gets a row of its own "
                                  "(attention cost grows with row length, so shorter rows are faster until padding "
                                  "between rows dominates)")
    eval_every: int = option(0, "evaluate every N optimizer steps (0 = only at the end)")
    save_every: int = option(0, "checkpoint every N optimizer steps (0 = only at the end)")
    log_every: int = option(1, "log metrics every N optimizer steps")
    seed: int = option(0, "seed for initialisation and data order")
    gradient_checkpointing: bool = option(False, "recompute activations in backward (less memory, slower)")
    report_to: list[str] = option(factory=list, doc="transformers integrations, e.g. [tensorboard] or [wandb]")
    num_threads: int = option(0, "torch CPU threads (0 = torch default)")

    def check(self) -> list[str]:
        problems = []
        for name in ("lr", "batch_size", "grad_accum", "max_length", "row_tokens", "log_every"):
            if getattr(self, name) <= 0:
                problems.append(f"{name}: must be positive, got {getattr(self, name)}")
        if self.max_steps <= 0 and self.epochs <= 0:
            problems.append("epochs: must be positive when max_steps is -1")
        if not 0 <= self.warmup_ratio < 1:
            problems.append(f"warmup_ratio: must lie in [0, 1) (a fraction of the optimizer steps), got "
                            f"{self.warmup_ratio}")
        return problems


@dataclass
class HeldOutSection:
    """Held-out pairs evaluated at the end of training (and every `train.eval_every` steps)."""

    source: str | None = option(None, "evaluation source (default: the training source)")
    split: Literal["dev", "test", "train", "all", "none"] = option("dev", "evaluation split ('none' to skip)")
    limit: int | None = option(None, "evaluate on at most N pairs")


class PairDataset(Dataset):
    """Tokenized pairs (objects with prompt_ids / chosen_ids / rejected_ids) for a DataLoader."""

    def __init__(self, pairs: Sequence[Any]) -> None:
        self.pairs = list(pairs)

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, i: int) -> Any:
        return self.pairs[i]


class PackCollator:
    """Packs a list of tokenized pairs into one `PackedBatch`, returned as a dict of tensors plus extras."""

    def __init__(self, pad_id: int, row_tokens: int, extra: Sequence[str] = (), layout: str = "segments") -> None:
        self.pad_id = pad_id
        self.row_tokens = row_tokens
        self.layout = layout
        self.extra = extra  # attribute names of per-pair float tensors to carry (e.g. reference log-probs)

    def __call__(self, pairs: list[Any]) -> dict[str, Any]:
        b = pack_pairs(pairs, self.pad_id, self.row_tokens, self.layout)
        out: dict[str, Any] = {f: getattr(b, f) for f in PACKED_FIELDS}
        out["num_pairs"] = torch.tensor(len(pairs))
        out["num_sequences"] = torch.tensor(2 * len(pairs))
        out["real_tokens"] = torch.tensor(b.real_tokens)
        margins = [p.margin for p in pairs]
        if any(m is not None for m in margins):
            out["margins"] = torch.tensor([0.0 if m is None else float(m) for m in margins])
        for name in self.extra:
            out[name] = torch.tensor([float(p.attributes[name]) for p in pairs], dtype=torch.float32)
        return out


def unpack(inputs: dict[str, Any]) -> PackedBatch:
    n = int(inputs["num_pairs"])
    return PackedBatch(**{f: inputs.get(f) for f in PACKED_FIELDS}, num_sequences=2 * n, pairs=True,
                       real_tokens=int(inputs["real_tokens"]))


def apply_lora(model: torch.nn.Module, lora: LoraSection, task_type: str, modules_to_save: list[str] | None = None):
    """Wrap `model` with LoRA adapters; trainable weights are kept in fp32 (the frozen base may be bf16)."""
    from peft import LoraConfig, get_peft_model

    cfg = LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                     target_modules=list(lora.target_modules), task_type=task_type,
                     modules_to_save=modules_to_save, layers_to_transform=list(lora.layers) or None)
    model = get_peft_model(model, cfg)
    for p in model.parameters():
        if p.requires_grad:
            p.data = p.data.float()
    return model


def resolve_precision(train: TrainSection, what: str) -> str:
    """Replace `train.precision: auto` by what this device runs natively (bf16 or fp32), print the decision
    (with a warning when an explicit bf16 would be emulated) and return its one-line description.

    Called at the start of every training recipe, before the config is saved, so the run's config.yaml
    and report hold the precision that was really used.
    """
    from prefalign.models.precision import announce, decide_precision, default_device

    decision = decide_precision(train.precision, default_device())
    train.precision = decision.value  # type: ignore[assignment]
    announce(what, decision)
    return decision.line()


def base_dtype(train: TrainSection) -> str:
    """Storage dtype of the loaded weights: a frozen LoRA base or bf16-pure training can live in bf16."""
    if train.precision == "auto":
        raise ValueError("train.precision is still 'auto': call resolve_precision(train, ...) first")
    if train.precision == "bf16-pure" or (train.precision == "bf16" and train.method == "lora"):
        return "bfloat16"
    return "float32"


def disable_dropout(model: torch.nn.Module) -> int:
    """Set every dropout probability in `model` to 0: `nn.Dropout` modules and the attention dropout that
    transformers models read from their config (`attention_dropout`, `attn_pdrop`, ...). Returns how many
    modules or config fields were changed. Apply before adding LoRA adapters to keep `lora.dropout`.
    """
    changed = 0
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout) and module.p > 0:
            module.p = 0.0
            changed += 1
        config = getattr(module, "config", None)
        for key in ("attention_dropout", "attn_pdrop", "resid_pdrop", "embd_pdrop", "hidden_dropout",
                    "hidden_dropout_prob", "attention_probs_dropout_prob", "classifier_dropout", "dropout"):
            value = getattr(config, key, None) if config is not None else None
            if isinstance(value, float) and value > 0:
                setattr(config, key, 0.0)
                changed += 1
        if isinstance(getattr(module, "attention_dropout", None), float) and module.attention_dropout > 0:
            module.attention_dropout = 0.0  # Llama-style attention modules copy the value at construction
            changed += 1
    return changed


def _distributed() -> bool:
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def training_arguments(train: TrainSection, output_dir: str, **extra: Any):
    from transformers import TrainingArguments

    return TrainingArguments(
        output_dir=output_dir, learning_rate=train.lr, num_train_epochs=train.epochs, max_steps=train.max_steps,
        per_device_train_batch_size=train.batch_size, per_device_eval_batch_size=train.batch_size,
        # transformers reads a warmup_steps below 1 as a fraction of the total steps (checked: 0 <= ratio < 1)
        gradient_accumulation_steps=train.grad_accum, warmup_steps=float(train.warmup_ratio),
        lr_scheduler_type=train.lr_scheduler, weight_decay=train.weight_decay,
        max_grad_norm=train.max_grad_norm if train.max_grad_norm > 0 else 0.0,
        bf16=train.precision == "bf16", use_cpu=not torch.cuda.is_available(), seed=train.seed, data_seed=train.seed,
        logging_steps=train.log_every, save_strategy="steps" if train.save_every > 0 else "no",
        save_steps=train.save_every if train.save_every > 0 else 500, eval_strategy="no",
        report_to=list(train.report_to) or "none", remove_unused_columns=False, dataloader_num_workers=0,
        activation_checkpointing=train.gradient_checkpointing, disable_tqdm=os.environ.get("CI") == "true",
        ddp_backend="gloo" if _distributed() and not torch.cuda.is_available() else None, **extra)


class MetricsMixin:
    """Averages per-step metrics between logging steps (as TRL does) and appends every log to metrics.jsonl."""

    metrics_path: Path | None = None

    def _init_metrics(self, path: Path | None) -> None:
        self._stash: dict[str, list[float]] = defaultdict(list)
        self.metrics_path = path

    def stash(self, values: dict[str, float]) -> None:
        for k, v in values.items():
            if v is not None and not (isinstance(v, float) and math.isnan(v)):
                self._stash[k].append(float(v))

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:  # transformers hook
        if self._stash and "loss" in logs:
            logs.update({k: sum(v) / len(v) for k, v in self._stash.items()})
            self._stash.clear()
        super().log(logs, start_time)  # type: ignore[misc]
        if self.metrics_path is not None and self.is_world_process_zero():  # type: ignore[attr-defined]
            row = {"step": self.state.global_step, **logs}  # type: ignore[attr-defined]
            with open(self.metrics_path, "a", encoding="utf-8") as f:
                f.write(json.dumps(row) + "\n")


def plot_metrics(metrics_path: Path, out_dir: Path, keys: Sequence[str]) -> list[Path]:
    """One PNG per metric found in metrics.jsonl (train and eval_ curves on the same axes)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not metrics_path.exists():
        return []
    rows = [json.loads(line) for line in metrics_path.read_text(encoding="utf-8").splitlines() if line.strip()]
    out = []
    out_dir.mkdir(parents=True, exist_ok=True)
    for key in keys:
        fig, ax = plt.subplots(figsize=(5, 3.2))
        drawn = False
        for name in (key, f"eval_{key}"):
            pts = [(r["step"], r[name]) for r in rows if name in r]
            if pts:
                ax.plot(*zip(*pts, strict=True), marker="." if len(pts) < 30 else None, label=name)
                drawn = True
        if drawn:
            ax.set_xlabel("step")
            ax.set_title(key)
            ax.legend()
            fig.tight_layout()
            path = out_dir / f"{key.replace('/', '_')}.png"
            fig.savefig(path, dpi=90)
            out.append(path)
        plt.close(fig)
    return out


def set_threads(train: TrainSection) -> None:
    """Process settings for a training run: torch threads and (on Linux/glibc) the allocator."""
    if train.num_threads > 0:
        torch.set_num_threads(train.num_threads)
    from preference_data.cpu import tune_allocator

    tune_allocator()


def compile_layers(model: torch.nn.Module, train: TrainSection) -> int:
    """`torch.compile` each transformer layer of `model` (a peft wrapper is fine) when `train.compile` is on.

    Layers compile lazily on their first call, with dynamic shapes so batches of any length reuse one
    graph; the segment attention inside stays eager (it is excluded from tracing). Parameter names and
    state dicts are unchanged. Returns the number of layers compiled (0 when off or not possible).
    """
    import shutil

    from .forward import body

    if not train.compile:
        return 0
    import torch._dynamo

    if torch._dynamo.config.disable:
        log.warning("train.compile: torch.compile is switched off in this process (TORCH_COMPILE_DISABLE=1); "
                    "running eager")
        return 0
    layers = getattr(body(model), "layers", None)
    if not isinstance(layers, torch.nn.ModuleList) or not len(layers):
        log.warning("train.compile: %s has no `layers` list to compile; running eager", type(model).__name__)
        return 0
    if not any(shutil.which(c) for c in ("g++", "c++", "clang++", "cl")):
        log.warning("train.compile: no C++ compiler found (torch.compile needs one on CPU); running eager")
        return 0
    from preference_data.hub import cache_dir

    # compiled kernels persist beside the converted models, so only the first run on a machine pays in full
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache_dir() / "inductor"))
    for layer in layers:
        layer.compile(dynamic=True)
    return len(layers)


def last_checkpoint(output_dir: str) -> str | None:
    from transformers.trainer_utils import get_last_checkpoint

    return get_last_checkpoint(output_dir) if Path(output_dir).is_dir() else None


def evaluate_every(trainer: Any, every: int) -> None:
    """Run `trainer.evaluate()` every `every` optimizer steps (the final evaluation is the recipe's own)."""
    from transformers import TrainerCallback

    class EvalEvery(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            if state.global_step % every == 0 and state.global_step < state.max_steps:
                trainer.evaluate()

    trainer.add_callback(EvalEvery())


def resume_point(output_dir: str, resume: bool) -> str | None:
    """The last checkpoint under `output_dir` when resuming (None, with a message, when there is none)."""
    found = last_checkpoint(output_dir) if resume else None
    if resume and found is None:
        print(f"--resume: no checkpoint under {output_dir}; starting from the beginning")
    return found
