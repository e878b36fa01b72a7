"""The config sections every training recipe shares: optimisation (`train`), LoRA (`lora`) and the
held-out evaluation (`eval`). Each recipe's typed config (`RMTrainConfig`, `TrainConfig`) holds them."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from prefalign.config import Alias, option
from prefalign.models.batch import Layout

_Data = TypeVar("_Data", bound=Any)

LengthPolicy = Literal["drop", "truncate_prompt_left", "raise"]
"""What tokenization does with a pair longer than `max_length` (`preference_data.tokenize.LENGTH_POLICIES`)."""


@dataclass
class LoraSection:
    r: int = option(16, "LoRA rank", aliases={"lora_r": Alias("TRL"), "lora_rank": Alias("OpenRLHF")})
    alpha: int = option(32, "LoRA alpha (scale = alpha / r)", aliases={"lora_alpha": Alias("TRL, OpenRLHF")})
    dropout: float = option(0.0, "LoRA dropout", aliases={"lora_dropout": Alias("TRL, OpenRLHF")})
    target_modules: list[str] = option(
        factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        doc="module names that get adapters",
        aliases={"lora_target_modules": Alias("TRL")},
    )
    layers: list[int] = option(
        factory=list,
        doc="transformer layer indices that get adapters (empty = all); "
        "adapters only in the top layers also stop the backward pass there",
    )

    def check(self) -> list[str]:
        problems = [f"r: must be positive, got {self.r}"] if self.r <= 0 else []
        if any(i < 0 for i in self.layers):
            problems.append(f"layers: indices must be non-negative, got {self.layers}")
        return problems


@dataclass
class TrainSection:
    method: Literal["lora", "full"] = option(
        "lora",
        "LoRA adapters (base frozen) or full fine-tuning",
        aliases={"use_peft": Alias("TRL: true is lora, false full", values={True: "lora", False: "full"})},
    )
    lr: float = option(
        1e-4,
        "peak learning rate (AdamW)",
        aliases={"learning_rate": Alias("TRL, OpenRLHF"), "actor_learning_rate": Alias("OpenRLHF")},
    )
    epochs: float = option(
        1.0,
        "passes over the training pairs (ignored when max_steps > 0)",
        aliases={
            "num_train_epochs": Alias("TRL"),
            "max_epochs": Alias("OpenRLHF"),
            "num_epochs": Alias("a common name"),
        },
    )
    max_steps: int = option(-1, "optimizer steps; -1 means use epochs")
    batch_size: int = option(
        8,
        "pairs per micro-batch per process",
        aliases={
            "per_device_train_batch_size": Alias("TRL: pairs per device per micro-batch, as here"),
            "micro_train_batch_size": Alias("OpenRLHF: per GPU per micro-batch, as here"),
        },
    )
    grad_accum: int = option(
        1, "micro-batches per optimizer step", aliases={"gradient_accumulation_steps": Alias("TRL")}
    )
    token_budget: int = option(
        0,
        "tokens per forward at most (0 = no limit): a micro-batch of batch_size pairs (completions, in the online "
        "loop) that takes more is cut, longest first, into forwards of at most this many tokens, each backpropagated "
        "with its share of the loss: the same gradient at the memory of the largest piece, so batch_size can "
        "stay as the recipe wants it on a smaller device (verl's use_dynamic_bsz; a pair longer than the budget "
        "is a forward of its own)",
    )
    warmup_ratio: float = option(
        0.0,
        "fraction of the optimizer steps spent in linear warm-up, in [0, 1)",
        aliases={"lr_warmup_ratio": Alias("OpenRLHF")},
    )
    lr_scheduler: Literal["linear", "cosine", "constant", "constant_with_warmup"] = option(
        "linear", "schedule", aliases={"lr_scheduler_type": Alias("TRL")}
    )
    weight_decay: float = option(0.0, "AdamW weight decay", aliases={"l2": Alias("OpenRLHF")})
    max_grad_norm: float = option(1.0, "gradient clipping norm (0 = off)")
    precision: Literal["auto", "bf16", "bf16-pure", "fp32"] = option(
        "auto",
        aliases={
            "bf16": Alias("TRL, OpenRLHF: true is bf16 autocast, false fp32", values={True: "bf16", False: "fp32"})
        },
        doc="auto: bf16 where the device multiplies bf16 natively (CUDA with bf16; CPUs with AVX-512 BF16 or "
        "AMX), fp32 otherwise (see prefalign.models.precision); bf16: fp32 trainable weights under bf16 "
        "autocast (frozen LoRA base stored in bf16); bf16-pure: all weights bf16 (fastest, least precise); "
        "fp32: no autocast. The run prints and saves the precision it resolved to",
    )
    disable_dropout: bool = option(
        True,
        "set every dropout probability of the model to 0 before training (as TRL "
        "does), so the policy, its adapters-disabled reference and the reward "
        "are deterministic; LoRA dropout (lora.dropout) is kept",
    )
    max_length: int = option(
        1024,
        "token budget for prompt + the longer response",
        aliases={"max_len": Alias("OpenRLHF: prompt + response, as here")},
    )
    length_policy: LengthPolicy = option(
        "drop", "what to do with pairs longer than max_length (always counted in the report)"
    )
    attention: Layout = option(
        "auto",
        "how prefix-shared packed pairs are attended: auto = segments on a CPU, varlen on a GPU in bf16, mask on a "
        "GPU in fp32; segments = each pair attended on its own in one unpadded row (the least work on a CPU); "
        "varlen = the micro-batch as one token stream, one flash-attention varlen call per layer (a GPU in bf16); "
        "segments and varlen need a model using transformers' attention interface (Llama, Qwen, Mistral, Gemma "
        "do); mask = rows of row_tokens with a dense block mask (any model)",
    )
    compile: bool | Literal["auto"] = option(
        "auto",
        "torch.compile each transformer layer (regional compilation: inductor, the token dimension dynamic): "
        "auto = where it was measured to win, a CPU (it fuses the norms, rotary embeddings, activations and casts "
        "that dominate a CPU step: ~1.5x faster steps; the first run on a machine compiles for ~30 s, later runs "
        "read inductor's on-disk cache), not a GPU (on an H200 the compiled layers ran 11% slower than eager in "
        "steady state with the varlen layout and took 16 s to compile; see docs/performance.md); true = on any "
        "device; false = never. Skipped with a warning where no compiler is found (C++ on a CPU, triton on a GPU)",
    )
    row_tokens: int = option(
        512,
        "tokens per packed row for attention: mask; a longer pair gets a row of its own "
        "(attention cost grows with row length, so shorter rows are faster until padding "
        "between rows dominates)",
    )
    eval_every: int = option(0, "evaluate every N optimizer steps (0 = only at the end)")
    save_every: int = option(0, "checkpoint every N optimizer steps (0 = only at the end)")
    keep_checkpoints: int = option(
        2,
        "checkpoints kept on disk, the newest (older ones are deleted as new ones complete); 0 = keep all. "
        "A checkpoint holds the trainable weights and twice that for the optimizer",
    )
    save_precision: Literal["auto", "bf16", "fp32"] = option(
        "auto",
        "dtype of the saved model when it is a whole model (a reward model, a LoRA policy's merged copy): auto = the "
        "precision the run trained in (bf16 under bf16 or bf16-pure, fp32 under fp32), which halves the disk of a bf16 "
        "run and changes nothing where the model is loaded in bf16 again; fp32 keeps a LoRA delta merged into the "
        "weights to fp32 precision for fp32 scoring (a LoRA merge is always computed in fp32, then cast). Adapters "
        "and checkpoints are saved as trained",
    )
    log_every: int = option(1, "log metrics every N optimizer steps")
    seed: int = option(0, "seed for initialisation and data order")
    gradient_checkpointing: bool = option(False, "recompute activations in backward (less memory, slower)")
    report_to: list[str] = option(factory=list, doc="transformers integrations, e.g. [tensorboard] or [wandb]")
    num_threads: int = option(0, "torch CPU threads (0 = torch default)")

    def token_budget_unsupported(self) -> list[str]:
        """The problem a recipe whose examples are not cut by tokens (the judge, the meta-RM) reports for a set
        `token_budget` (its `check` returns it)."""
        if not self.token_budget:
            return []
        return [
            f"train.token_budget: {self.token_budget}: this recipe's examples are not cut by tokens; set it to 0 and "
            "size the batch with train.batch_size and train.grad_accum"
        ]

    def check(self) -> list[str]:
        problems = []
        for name in ("lr", "batch_size", "grad_accum", "max_length", "row_tokens", "log_every"):
            if getattr(self, name) <= 0:
                problems.append(f"{name}: must be positive, got {getattr(self, name)}")
        if self.keep_checkpoints < 0:
            problems.append(f"keep_checkpoints: must be >= 0 (0 = keep all), got {self.keep_checkpoints}")
        if self.token_budget < 0:
            problems.append(f"token_budget: must be >= 0 (0 = no limit), got {self.token_budget}")
        if self.max_steps <= 0 and self.epochs <= 0:
            problems.append("epochs: must be positive when max_steps is -1")
        if not 0 <= self.warmup_ratio < 1:
            problems.append(
                f"warmup_ratio: must lie in [0, 1) (a fraction of the optimizer steps), got {self.warmup_ratio}"
            )
        return problems


@dataclass
class HeldOutSection:
    """Held-out pairs evaluated at the end of training (and every `train.eval_every` steps)."""

    source: str | None = option(None, "evaluation source (default: the training source)")
    split: Literal["auto", "dev", "test", "train", "all", "none"] = option(
        "auto",
        "which held-out records: auto = all of `source` when it is given (a held-out file or hub split of its own), "
        "else the dev part of the training data's hash split; dev / test / train / all as in data.split; none: "
        "no held-out evaluation",
    )
    limit: int | None = option(None, "evaluate on at most N pairs")
    hub_split: str | None = option(
        None, "for a hub dataset: its split to evaluate on, e.g. test (default: the training data's hub_split)"
    )
    hub_data_dir: str | None = option(None, "for a hub dataset: its folder (default: the training data's)")

    def data_config(self, train_data: _Data) -> _Data:
        """The training data config with this section's source (when given), split, limit and hub split / folder
        (when given): what the held-out pairs are loaded with (split auto: all of a source of their own, else dev)."""
        hub = {k: getattr(self, k) for k in ("hub_split", "hub_data_dir") if getattr(self, k) is not None}
        split = self.split if self.split != "auto" else "all" if self.source or self.hub_split else "dev"
        return dataclasses.replace(
            train_data, source=self.source or train_data.source, split=split, limit=self.limit, **hub
        )
