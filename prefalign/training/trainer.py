"""The `transformers.Trainer` glue both trainers share: LoRA set-up, the precision and storage dtype,
dropout off, `TrainingArguments` from the `train` section, compiled layers, loading a checkpoint into a wrapped
model, evaluation every N steps and the resume point. The recipes (`reward_models.rm_train`, `align.train`) read
top to bottom around it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import json
import logging
import math
import os
import shutil
import sys
from pathlib import Path
from typing import Any, cast

import torch
from accelerate.utils import DistributedType, gather_object
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.fsdp import FSDPModule
from transformers import TrainerCallback, TrainingArguments
from transformers.trainer_utils import get_last_checkpoint

from prefalign.cpu import tune_allocator
from prefalign.errors import UserError
from prefalign.models import attention
from prefalign.models.batch import MICRO_BATCHES, decide_layout
from prefalign.models.forward import body
from prefalign.models.hub import cache_dir
from prefalign.models.precision import announce, decide_precision, default_device

from .config import LoraSection, TrainSection

log = logging.getLogger(__name__)


def apply_lora(
    model: torch.nn.Module,
    lora: LoraSection,
    task_type: str,
    modules_to_save: list[str] | None = None,
    trainable_tokens: list[int] | None = None,
    autocast: bool = False,
):
    """Wrap `model` with LoRA adapters; trainable weights are kept in fp32 (the frozen base may be bf16).

    `trainable_tokens`: ids of tokens added for this run (e.g. POLAR's reward token) whose input embeddings train
    too (peft `trainable_token_indices`); the rest of the embedding stays frozen. `autocast`: every forward of the
    run is under bf16 autocast (`train.precision: bf16`), which runs each adapter's matmuls in bf16 whatever its
    input's dtype; peft's cast of every adapter input to the fp32 adapter weights' dtype is then switched off (it
    copied each LoRA layer's input to fp32 and autocast copied it back, forward and backward, for the same bf16
    product: about a fifth of an eager LoRA step on a 2-core CPU). A forward of such a model outside autocast
    fails on the dtypes, never silently."""
    from peft import LoraConfig, get_peft_model  # lazy: peft, only for LoRA
    from peft.tuners.tuners_utils import BaseTunerLayer  # lazy: peft, only for LoRA

    cfg = LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=list(lora.target_modules),
        task_type=task_type,
        modules_to_save=modules_to_save,
        layers_to_transform=list(lora.layers) or None,
        trainable_token_indices=list(trainable_tokens) if trainable_tokens else None,
    )
    model = get_peft_model(model, cfg)
    for p in model.parameters():
        if p.requires_grad:
            p.data = p.data.float()
    if autocast:
        for module in model.modules():
            if isinstance(module, BaseTunerLayer):
                module.cast_input_dtype_enabled = False  # type: ignore[assignment]
    return model


def resolve_precision(train: TrainSection, what: str) -> str:
    """Replace `train.precision: auto` by what this device runs natively (bf16 or fp32), print the decision
    (with a warning when an explicit bf16 would be emulated) and return its one-line description; and
    `train.attention: auto` by the packing layout for this device and precision (`decide_layout`: segments on a
    CPU, varlen on a GPU in bf16, mask on a GPU in fp32).

    Called at the start of every training recipe, before the config is saved, so the run's config.yaml
    and report hold the precision and layout that were really used.
    """
    device = default_device()
    decision = decide_precision(train.precision, device)
    train.precision = decision.value  # type: ignore[assignment]
    announce(what, decision)
    train.attention = decide_layout(train.attention, torch.device(device).type, decision.bf16)
    return decision.line()


def base_dtype(train: TrainSection) -> str:
    """Storage dtype of the loaded weights: a frozen LoRA base or bf16-pure training can live in bf16."""
    if train.precision == "auto":
        raise ValueError("train.precision is still 'auto': call resolve_precision(train, ...) first")
    if train.precision == "bf16-pure" or (train.precision == "bf16" and train.method == "lora"):
        return "bfloat16"
    return "float32"


def saved_dtype(train: TrainSection) -> torch.dtype:
    """The dtype a run saves a whole model in (`train.save_precision`): auto = the precision it trained in."""
    if train.precision == "auto":
        raise ValueError("train.precision is still 'auto': call resolve_precision(train, ...) first")
    wanted = train.precision if train.save_precision == "auto" else train.save_precision
    return torch.float32 if wanted == "fp32" else torch.bfloat16


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
        for key in (
            "attention_dropout",
            "attn_pdrop",
            "resid_pdrop",
            "embd_pdrop",
            "hidden_dropout",
            "hidden_dropout_prob",
            "attention_probs_dropout_prob",
            "classifier_dropout",
            "dropout",
        ):
            value = getattr(config, key, None) if config is not None else None
            if isinstance(value, float) and value > 0:
                setattr(config, key, 0.0)
                changed += 1
        dropout = getattr(module, "attention_dropout", None)
        if isinstance(dropout, float) and dropout > 0:
            # Llama-style attention modules copy the value at construction
            module.attention_dropout = 0.0  # type: ignore[assignment]
            changed += 1
    return changed


# transformers renamed TrainingArguments' `gradient_checkpointing` to `activation_checkpointing` within 5.x (5.17
# knows only the old name; later releases keep it as an alias until v6): pass whichever the installed one knows.
CHECKPOINTING_ARG = (
    "activation_checkpointing"
    if "activation_checkpointing" in {f.name for f in dataclasses.fields(TrainingArguments)}
    else "gradient_checkpointing"
)


def _distributed() -> bool:
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def training_arguments(train: TrainSection, output_dir: str, **extra: Any):
    checkpointing: dict[str, Any] = {CHECKPOINTING_ARG: train.gradient_checkpointing}
    return TrainingArguments(
        output_dir=output_dir,
        learning_rate=train.lr,
        num_train_epochs=train.epochs,
        max_steps=train.max_steps,
        per_device_train_batch_size=train.batch_size,
        per_device_eval_batch_size=train.batch_size,
        # transformers reads a warmup_steps below 1 as a fraction of the total steps (checked: 0 <= ratio < 1)
        gradient_accumulation_steps=train.grad_accum,
        warmup_steps=float(train.warmup_ratio),
        lr_scheduler_type=train.lr_scheduler,
        weight_decay=train.weight_decay,
        max_grad_norm=train.max_grad_norm if train.max_grad_norm > 0 else 0.0,
        bf16=train.precision == "bf16",
        use_cpu=not torch.cuda.is_available(),
        seed=train.seed,
        data_seed=train.seed,
        logging_steps=train.log_every,
        save_strategy="steps" if train.save_every > 0 else "no",
        save_steps=train.save_every if train.save_every > 0 else 500,
        save_total_limit=train.keep_checkpoints or None,
        eval_strategy="no",
        report_to=list(train.report_to) or "none",
        remove_unused_columns=False,
        dataloader_num_workers=0,
        disable_tqdm=os.environ.get("CI") == "true",
        ddp_backend="gloo" if _distributed() and not torch.cuda.is_available() else None,
        **checkpointing,
        **extra,
    )


class TokenBudgetSteps:
    """A `transformers.Trainer` mixin (before the Trainer in the bases) for batches that the collator cut by
    `train.token_budget` (`{MICRO_BATCHES: [packed, ...]}`, `preference_data.packing.PackCollator`): one forward and
    backward per micro-batch, each loss weighted by the micro-batch's share of the batch's pairs (`item_share`,
    which the trainer's `compute_loss` multiplies its batch-mean loss by), so the sum is the whole batch's mean
    loss and its gradient, at the peak memory of the largest micro-batch.

    With several processes every rank runs as many micro-batches as the rank with the most (the extra ones repeat
    its last micro-batch with weight 0: FSDP's forwards and backwards are collective), and the gradients are
    reduced in the last backward only (`accelerator.no_sync` around the others)."""

    item_share: float = 1.0

    def training_step(self, model: Any, inputs: dict[str, Any], num_items_in_batch: Any = None) -> torch.Tensor:
        parts = inputs.get(MICRO_BATCHES)
        if parts is None:
            return super().training_step(model, inputs, num_items_in_batch)  # type: ignore[misc]
        accelerator = self.accelerator  # type: ignore[attr-defined]
        items = [int(p["num_pairs"]) for p in parts]
        shares = [k / sum(items) for k in items]
        count = len(parts)
        if accelerator.num_processes > 1:
            if accelerator.distributed_type == DistributedType.DEEPSPEED:
                raise UserError(
                    "train.token_budget: micro-batches by token budget run under DDP and FSDP, not DeepSpeed "
                    "(its engine counts the backward passes of a step itself); set train.token_budget: 0 and size "
                    "the batch with train.batch_size and train.grad_accum"
                )
            count = max(gather_object([count]))
        parts = [*parts, *[parts[-1]] * (count - len(parts))]
        shares = [*shares, *[0.0] * (count - len(shares))]
        total = None
        try:
            for i, (part, share) in enumerate(zip(parts, shares, strict=True)):
                self.item_share = share
                sync = i == count - 1 or accelerator.num_processes == 1
                with contextlib.nullcontext() if sync else accelerator.no_sync(model):
                    loss = super().training_step(model, part, num_items_in_batch)  # type: ignore[misc]
                total = loss if total is None else total + loss
        finally:
            self.item_share = 1.0
        assert total is not None  # a cut batch has at least two micro-batches
        return total


def drawn_indices(args: Any, n: int) -> list[int] | None:
    """The indices of a dataset of `n` items that `transformers.Trainer` trains on under `args` (built by
    `training_arguments`), in the order its train dataloader draws them; None when the run draws every item
    (an epoch or more), or when the order cannot be known before training.

    The Trainer draws with a `RandomSampler`, which accelerate turns into its `SeedableRandomSampler` seeded
    with `args.data_seed` (+ the epoch); with `P` processes, micro-batch `k` of that order goes to process
    `k mod P`. A run of S optimizer steps therefore consumes the first S x batch_size x grad_accum x P
    items of the first epoch's order: the ones returned, built with the same sampler class and seed. The
    step count is `args.max_steps`, or for fractional epochs the Trainer's ceil(epochs x steps per epoch).
    """
    from accelerate.data_loader import SeedableRandomSampler  # lazy: only for a short run's sampler

    if (
        args.train_sampling_strategy != "random"
        or not args.accelerator_config.use_seedable_sampler
        or args.data_seed is None
        or n == 0
    ):
        return None
    B, GA, P = args.per_device_train_batch_size, args.gradient_accumulation_steps, max(1, args.world_size)
    batches = n // B if args.dataloader_drop_last else math.ceil(n / B)
    per_epoch = max(math.ceil(math.ceil(batches / P) / GA), 1)  # the Trainer's optimizer steps per epoch
    steps = args.max_steps if args.max_steps > 0 else math.ceil(args.num_train_epochs * per_epoch)
    drawn = steps * B * GA * P
    if drawn >= n:
        return None
    return [int(i) for i in SeedableRandomSampler(range(n), data_seed=args.data_seed)][:drawn]


def set_threads(train: TrainSection) -> None:
    """Process settings for a training run: torch threads and (on Linux/glibc) the allocator."""
    if train.num_threads > 0:
        torch.set_num_threads(train.num_threads)

    tune_allocator()


def prepare_model(
    model: torch.nn.Module,
    train: TrainSection,
    lora: LoraSection,
    task_type: str,
    modules_to_save: list[str] | None = None,
    trainable_tokens: list[int] | None = None,
):
    """A loaded model made ready to train as `train` says: dropout off (before LoRA, so `lora.dropout` stays as
    configured), LoRA adapters with `train.method: lora`, train mode, layers compiled with `train.compile`."""
    if train.attention in ("segments", "varlen") and not attention.supported(model):
        log.warning(
            "train.attention: %s does not route its attention through transformers' attention interface, which the "
            "%s layout needs; packing with a dense block mask (mask) instead",
            type(model).__name__,
            train.attention,
        )
        train.attention = "mask"
    if train.disable_dropout:
        disable_dropout(model)
    if train.method == "lora":
        model = apply_lora(
            model,
            lora,
            task_type,
            modules_to_save=modules_to_save,
            trainable_tokens=trainable_tokens,
            autocast=train.precision == "bf16",
        )
    model.train()
    compile_layers(model, train)
    return model


def compile_layers(model: torch.nn.Module, train: TrainSection) -> int:
    """`torch.compile` each transformer layer of `model` (a peft wrapper is fine) when `train.compile` says so (true;
    auto on a CPU): regional compilation, as torchtune does, so one layer's graphs serve every layer and compiling
    costs one layer's time.

    Layers compile lazily on their first call, with the token dimension dynamic so micro-batches of any length
    reuse one graph; the attention (segment or varlen) stays eager between the compiled parts (it is excluded from
    tracing). Parameter names and state dicts are unchanged. `compiled_graphs()` counts what was compiled (a run
    logs it). Returns the number of layers compiled (0 when off or not possible).
    """
    if train.compile is False:
        return 0
    if train.compile == "auto" and torch.cuda.is_available():
        log.info(
            "train.compile: auto leaves the layers eager on a GPU, where compiled layers were measured slower in "
            "steady state (train.compile: true compiles them anyway)"
        )
        return 0
    from torch import _dynamo  # lazy: dynamo costs seconds to import, only when compiling

    if _dynamo.config.disable:
        log.warning(
            "train.compile: torch.compile is switched off in this process (TORCH_COMPILE_DISABLE=1); running eager"
        )
        return 0
    layers = getattr(body(model), "layers", None)
    if not isinstance(layers, torch.nn.ModuleList) or not len(layers):
        log.warning("train.compile: %s has no `layers` list to compile; running eager", type(model).__name__)
        return 0
    if torch.cuda.is_available():
        if importlib.util.find_spec("triton") is None:
            log.warning("train.compile: triton is not installed (torch.compile needs it on a GPU); running eager")
            return 0
    elif not any(shutil.which(c) for c in ("g++", "c++", "clang++", "cl")):
        log.warning("train.compile: no C++ compiler found (torch.compile needs one on CPU); running eager")
        return 0

    # compiled kernels persist beside the converted models, so only the first run on a machine pays in full
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache_dir() / "inductor"))
    for layer in layers:
        layer.compile(dynamic=True)
    return len(layers)


def compiled_graphs() -> dict[str, int]:
    """What torch.compile compiled in this process so far: `graphs` (distinct graphs traced: one layer's parts with
    the attention between them, and any recompilation for a new shape or guard) and `frames` (frames compiled);
    zeros when nothing was compiled. A run prints it at its end: more than a handful means recompiling."""
    if "torch._dynamo" not in sys.modules:  # never imported: nothing compiled (and no import cost)
        return {"graphs": 0, "frames": 0}
    from torch._dynamo.utils import counters  # lazy: see above

    return {"graphs": int(counters["stats"]["unique_graphs"]), "frames": int(counters["frames"]["ok"])}


def keep_whole(model: torch.nn.Module) -> int:
    """Under FSDP2 (`accelerate launch` with an FSDP config on GPUs): gather every sharded parameter of `model` and
    keep it whole from now on, so a recipe's own forwards after training (held-out accuracy, reward statistics: they
    call the inner model and so skip the sharded root's hooks) see whole weights. Every rank must call it. Returns the
    number of sharded modules gathered (0 without FSDP: a no-op). Saving under FSDP takes `whole_state_dict`:
    `state_dict()` still gives the shards (DTensors)."""
    sharded = [m for m in model.modules() if isinstance(m, FSDPModule)]
    for m in sharded:
        m.set_reshard_after_forward(False, recurse=False)
        m.unshard()
    return len(sharded)


def whole_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor] | None:
    """Under FSDP2: `model`'s state dict with every shard gathered, as plain CPU tensors keyed as `model.state_dict()`
    keys them, on rank 0 (an empty dict on the others), for `save_pretrained(state_dict=...)`: a save that reads the
    model itself meets the shards' storage, freed or split. None without FSDP (save from the model). Every rank must
    call it, before any rank leaves."""
    if not any(isinstance(m, FSDPModule) for m in model.modules()):
        return None
    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return {k: v for k, v in state.items() if isinstance(v, torch.Tensor)}


CHECKPOINT_COMPLETE = "checkpoint_complete"
"""Written into checkpoint-N after everything else of it (`MarkComplete`): a checkpoint without it was cut short
(a full disk, a kill during the write) and is never resumed from."""


class MarkComplete(TrainerCallback):
    """Marks checkpoint-N complete once the trainer has written all of it (on_save follows the whole write)."""

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        ckpt = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if state.is_world_process_zero and ckpt.is_dir():
            (ckpt / CHECKPOINT_COMPLETE).write_text(f"{state.global_step}\n", encoding="utf-8")
        return control


def _complete(ckpt: Path, marked: bool) -> bool:
    if marked:  # this run marks its checkpoints: only a marked one is whole
        return (ckpt / CHECKPOINT_COMPLETE).exists()
    try:  # a checkpoint from before the marker: its trainer state (written last but the marker) must parse
        json.loads((ckpt / "trainer_state.json").read_text(encoding="utf-8"))
        return True
    except (OSError, ValueError):
        return False


def checkpoints_found(output_dir: str) -> tuple[str | None, list[str]]:
    """(the last complete checkpoint under `output_dir`, the later ones that are incomplete)."""
    if not Path(output_dir).is_dir() or get_last_checkpoint(output_dir) is None:
        return None, []
    ckpts = sorted(
        (p for p in Path(output_dir).glob("checkpoint-*") if p.is_dir() and p.name.split("-")[-1].isdigit()),
        key=lambda p: int(p.name.split("-")[-1]),
        reverse=True,
    )
    marked = any((p / CHECKPOINT_COMPLETE).exists() for p in ckpts)
    skipped: list[str] = []
    for p in ckpts:
        if _complete(p, marked):
            return str(p), skipped
        skipped.append(str(p))
    return None, skipped


def last_checkpoint(output_dir: str) -> str | None:
    """The last complete checkpoint under `output_dir` (a later one cut short is passed over)."""
    return checkpoints_found(output_dir)[0]


class InnerModelCheckpoints:
    """For a Trainer whose model wraps the trained one (`PackedForward(model, ...)`: the wrapper's `.model`):
    checkpoints hold what `save_pretrained` writes for the inner model (a peft adapter, or the full model with its
    tied weights handled), not the wrapper's raw state dict (which safetensors refuses with tied embeddings), and a
    resume loads them back into the inner model."""

    def _save(self, output_dir: str | None = None, state_dict: dict | None = None) -> None:
        trainer = cast("Any", self)
        output_dir = output_dir or trainer.args.output_dir
        assert output_dir is not None  # `training_arguments` always sets it
        inner = trainer.accelerator.unwrap_model(trainer.model).model
        if state_dict is not None:  # FSDP / DeepSpeed gather the wrapper's state dict: drop its prefix
            state_dict = {k.removeprefix("model."): v for k, v in state_dict.items()}
        if trainer.args.should_save:
            os.makedirs(output_dir, exist_ok=True)
        inner.save_pretrained(output_dir, state_dict=state_dict, is_main_process=trainer.args.should_save)
        if trainer.args.should_save:
            torch.save(trainer.args, os.path.join(output_dir, "training_args.bin"))

    def _load_from_checkpoint(self, resume_from_checkpoint: str, model: torch.nn.Module | None = None) -> None:
        trainer = cast("Any", self)
        if trainer.is_fsdp_enabled or trainer.is_deepspeed_enabled:
            return super()._load_from_checkpoint(resume_from_checkpoint, model)  # type: ignore[misc]
        load_inner_weights(trainer.model.model, Path(resume_from_checkpoint))


def load_inner_weights(inner: torch.nn.Module, ckpt: Path) -> None:
    """Load a checkpoint written by `save_pretrained` into `inner` (a peft model, or a transformers model)."""
    from safetensors.torch import load_file  # lazy, as peft below: only when resuming

    if (ckpt / "adapter_model.safetensors").exists():
        from peft import set_peft_model_state_dict  # lazy: peft, only for LoRA

        result = set_peft_model_state_dict(inner, load_file(str(ckpt / "adapter_model.safetensors")))
        unexpected = getattr(result, "unexpected_keys", [])
        if unexpected:
            raise UserError(f"checkpoint {ckpt} does not match this LoRA setup (unexpected keys {unexpected[:3]}...)")
        return
    files = sorted(ckpt.glob("model*.safetensors"))
    if not files:
        raise UserError(f"checkpoint {ckpt} has no model or adapter weights; delete it and resume from an earlier one")
    state: dict[str, torch.Tensor] = {}
    for f in files:
        state.update(load_file(str(f)))
    missing, unexpected = inner.load_state_dict(state, strict=False)
    tied = set(getattr(inner, "_tied_weights_keys", None) or {})
    missing = [k for k in missing if k not in tied and not k.endswith("lm_head.weight")]
    if missing or unexpected:
        raise UserError(
            f"checkpoint {ckpt} does not match the model (missing {missing[:3]}, unexpected {unexpected[:3]})"
        )
    inner.tie_weights()  # type: ignore[operator]


def evaluate_every(trainer: Any, every: int) -> None:
    """Run `trainer.evaluate()` every `every` optimizer steps (the final evaluation is the recipe's own)."""

    class EvalEvery(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            if state.global_step % every == 0 and state.global_step < state.max_steps:
                should_log = control.should_log
                trainer.evaluate()
                # evaluate() logs, and logging resets control.should_log: keep this step's training log
                control.should_log = should_log

    trainer.add_callback(EvalEvery())


def resume_point(output_dir: str, resume: bool) -> str | None:
    """The last checkpoint under `output_dir` when resuming (None, with a message, when there is none)."""
    found, cut_short = checkpoints_found(output_dir) if resume else (None, [])
    for ckpt in cut_short:
        print(f"--resume: passing over {ckpt}: its write did not finish (no {CHECKPOINT_COMPLETE}); it is kept")
    if resume and found is None:
        print(f"--resume: no complete checkpoint under {output_dir}; starting from the beginning")
    elif found is not None:
        print(f"--resume: continuing from {found} (the optimizer, scheduler, RNG and data position as saved)")
    return found
