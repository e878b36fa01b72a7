"""The learner: the policy being trained and what steps it — its packed forward, the reference, the optimizer and the
learning-rate schedule — set up for one process, DDP or FSDP.

The policy (a peft model under LoRA) is called through `PackedForward(policy, "token_logps", temperature)`:

  one process   the forward as is
  DDP           accelerate's `prepare` wraps it (gradients averaged in the backward; buffers are not broadcast,
                so only the backward communicates)
  FSDP          requested by the launcher (`accelerate launch` with an FSDP config sets ACCELERATE_USE_FSDP);
                torch's `fully_shard` (FSDP2) shards each decoder layer and then the forward, on CPU (gloo) as on
                GPU — accelerate itself enables FSDP only on accelerator devices. Every FSDP forward is collective,
                so the passes run in lock step (`lockstep`).

The reference of the KL is the LoRA base with adapters disabled (no copy), or a loaded `kl.reference`. Checkpoints
use torch's distributed state-dict helpers, which gather FSDP shards and read plain modules alike.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

import torch
from accelerate import Accelerator
from accelerate.utils import DistributedDataParallelKwargs, DistributedType
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from transformers import get_scheduler

from prefalign.generation import GenerationEngine
from prefalign.models.batch import Layout
from prefalign.models.forward import PackedForward, body
from prefalign.models.hub import load_model, load_tokenizer, pad_token_id
from prefalign.training.trainer import base_dtype, prepare_model

from .config import OnlineConfig
from .logps import Seq, micro_batches, per_token_logps
from .parallel import fsdp_requested, most, ranks

FULL = StateDictOptions(full_state_dict=True, cpu_offload=True, ignore_frozen_params=True)
PREFIX = "model."  # PackedForward's attribute holding the policy: checkpoints are keyed by the policy's own names


@dataclass
class Learner:
    accelerator: Accelerator
    policy: Any  # the model (a peft model under LoRA), unwrapped: its parameter names key the checkpoints
    forward: torch.nn.Module  # PackedForward over the policy, as DDP or FSDP wraps it
    reference: torch.nn.Module | None  # a separate reference's PackedForward; None: the LoRA base, or no KL
    params: list[torch.nn.Parameter]
    optimizer: torch.optim.Optimizer
    scheduler: Any
    tokenizer: Any
    pad_id: int
    layout: Layout
    device: torch.device
    bf16: bool  # the frozen copies (sampler, reference) live in bf16
    autocast_bf16: bool  # train.precision: bf16 autocasts the forwards
    batch_size: int  # completions per micro-batch
    fsdp: bool
    world: int
    rebuild: Callable[[], torch.nn.Module]  # the policy as built before wrapping, with its initial weights
    token_budget: int = 0  # train.token_budget: a micro-batch taking more tokens is cut into forwards of at most this

    @property
    def mode(self) -> str:
        """How the ranks share the work: single, ddp or fsdp."""
        return "single" if self.world == 1 else "fsdp" if self.fsdp else "ddp"

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.autocast_bf16)

    def logps(self, mb: list[Seq]) -> torch.Tensor:
        """(S, T) the policy's per-token log-probs of a micro-batch, with gradients."""
        with self.autocast():
            return per_token_logps(self.forward, mb, self.pad_id, self.device, self.layout)

    @torch.no_grad()
    def frozen(self, seqs: list[Seq], which: Literal["ref", "old"]) -> list[list[float]]:
        """Per-token log-probs of `seqs` under the reference, or the current policy (π_old recomputed), no grad."""
        out: list[list[float]] = [[] for _ in seqs]
        index = {id(s): i for i, s in enumerate(seqs)}
        was = self.policy.training
        self.policy.eval()
        try:
            for mb in lockstep(micro_batches(seqs, self.batch_size, self.token_budget)):
                with self.autocast(), self._frozen_forward(which) as forward:
                    lp = per_token_logps(forward, mb or [dummy()], self.pad_id, self.device, self.layout)
                for k, s in enumerate(mb or []):
                    out[index[id(s)]] = lp[k, : len(s.ids)].float().cpu().tolist()
        finally:
            self.policy.train(was)
        return out

    @contextlib.contextmanager
    def _frozen_forward(self, which: Literal["ref", "old"]) -> Iterator[torch.nn.Module]:
        if which == "old":
            yield self.forward
        elif self.reference is not None:
            yield self.reference
        else:
            with self.policy.disable_adapter():  # a peft model: its base is π_ref
                yield self.forward

    def loss_scale(self) -> float:
        """DDP and FSDP average gradients over ranks; the loss is Σ numerator / Σ denominator over every rank, so
        each rank's part is multiplied by the number of ranks."""
        return float(self.world)

    def step(self, max_grad_norm: float) -> float | None:
        """Clip (when `max_grad_norm` > 0), step the optimizer and the schedule, clear the gradients; the norm."""
        norm = None
        if max_grad_norm > 0:
            gn = torch.nn.utils.clip_grad_norm_(self.params, max_grad_norm)
            norm = float(gn.full_tensor() if hasattr(gn, "full_tensor") else gn)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return norm

    def lr(self) -> float:
        return float(self.scheduler.get_last_lr()[0])

    @contextlib.contextmanager
    def full_weights(self) -> Iterator[torch.nn.Module]:
        """The policy with every parameter whole (FSDP shards gathered for the duration; a no-op otherwise)."""
        sharded = [m for m in self.forward.modules() if isinstance(m, FSDPModule)]
        for m in sharded:
            m.unshard()
        try:
            yield self.policy
        finally:
            for m in sharded:
                m.reshard()

    @contextlib.contextmanager
    def whole_policy(self) -> Iterator[Any]:
        """The trained policy to save, whole: the policy itself, or under FSDP a fresh copy holding the gathered
        weights on rank 0 (None on the other ranks). Every rank must enter it."""
        if not self.fsdp:
            yield self.policy
            return
        state = self.trainable_state()
        if ranks()[0] != 0:
            yield None
            return
        copy = self.rebuild()
        copy.load_state_dict(state, strict=False)
        yield copy

    def sync(self, engine: GenerationEngine) -> None:
        """The sampler's weights replaced by the policy's (LoRA merged without touching the trainer)."""
        with self.full_weights() as policy:
            engine.sync_weights(policy)

    def trainable_state(self) -> dict[str, torch.Tensor]:
        """The trainable weights by the policy's parameter names (whole; on CPU). Every rank must call it."""
        state = get_model_state_dict(self._root(), options=FULL)
        trainable = {n for n, p in self.policy.named_parameters() if p.requires_grad}
        # a tied frozen weight (lm_head = the embedding) is not a named parameter, so the helper's frozen filter
        # keeps it: only the policy's trainable names go into a checkpoint
        return {
            n: v for k, v in state.items() if (n := k.removeprefix(PREFIX)) in trainable and isinstance(v, torch.Tensor)
        }

    def optimizer_state(self) -> dict[str, Any]:
        """The optimizer's state, whole and keyed by parameter name. Every rank must call it."""
        return get_optimizer_state_dict(self._root(), self.optimizer, options=FULL)

    def load_optimizer_state(self, state: dict[str, Any]) -> None:
        set_optimizer_state_dict(self._root(), self.optimizer, state, options=StateDictOptions(full_state_dict=True))

    def _root(self) -> torch.nn.Module:
        return self.forward if self.fsdp else self.accelerator.unwrap_model(self.forward)


def dummy() -> Seq:
    """A one-token completion for a rank with nothing left to run while the others run (lock step)."""
    return Seq([0], [0], [0.0], [0.0], 0.0)


def lockstep(mbs: list[list[Seq]]) -> list[list[Seq] | None]:
    """`mbs` padded with None to the largest count of any rank: with several processes each runs as many forwards
    (a rank runs `dummy()` for a None and discards it), since FSDP's forwards and DDP's reductions are collective."""
    n = most(len(mbs))
    return [*mbs, *([None] * (n - len(mbs)))]


def build_learner(cfg: OnlineConfig, checkpoint: dict[str, Any] | None = None) -> Learner:
    """The policy from `cfg.model` (a peft adapter merged into its base first), LoRA or full, on this rank's
    device, with its reference, optimizer and schedule; `checkpoint` (`state.read_checkpoint`) restores the
    trainable weights before the model is wrapped and the optimizer's and schedule's state after."""
    accelerator = Accelerator(
        cpu=not torch.cuda.is_available(),
        kwargs_handlers=[DistributedDataParallelKwargs(broadcast_buffers=False)],
    )
    # Sharded here whenever FSDP is asked for and in effect: on GPUs accelerate's `prepare` would otherwise shard
    # the forward itself (one process included) behind this loop's back; on CPU accelerate runs no FSDP, so it is
    # done here from two processes up
    fsdp = accelerator.distributed_type == DistributedType.FSDP or (fsdp_requested() and ranks()[1] > 1)
    device = accelerator.device
    train = cfg.train
    bf16 = train.precision in ("bf16", "bf16-pure")
    tokenizer = load_tokenizer(cfg.model)
    # FSDP2 shards parameters of one dtype: the base stays fp32 and the mixed-precision policy computes in bf16
    policy = load_model(cfg.model, dtype="float32" if fsdp else base_dtype(train), merge=True)
    policy = prepare_model(policy, train, cfg.lora, "CAUSAL_LM").to(device)
    layout = train.attention  # resolved by start_run; prepare_model fell back to mask for a model that needs it
    packed = PackedForward(policy, "token_logps", cfg.rollout.temperature)
    if checkpoint is not None:
        weights = {PREFIX + k: v for k, v in checkpoint["weights"].items()}
        set_model_state_dict(packed, weights, options=StateDictOptions(full_state_dict=True, strict=False))
    reference = None
    if cfg.kl.beta > 0 and not (train.method == "lora" and cfg.kl.reference in (None, cfg.model)):
        ref = load_model(cfg.kl.reference or cfg.model, dtype="bfloat16" if bf16 else "float32", merge=True)
        ref.to(device).eval().requires_grad_(False)
        reference = PackedForward(ref, "token_logps", cfg.rollout.temperature)
    if fsdp:
        shard(packed, bf16)
    forward: torch.nn.Module = packed
    params = [p for p in forward.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=train.lr, weight_decay=train.weight_decay)
    if not fsdp:
        forward, optimizer = accelerator.prepare(forward, optimizer)
    total = train.max_steps * cfg.algorithm.updates_per_rollout
    scheduler = get_scheduler(
        train.lr_scheduler,
        optimizer,
        num_warmup_steps=math.ceil(train.warmup_ratio * total),
        num_training_steps=total,
    )
    learner = Learner(
        accelerator,
        policy,
        forward,
        reference,
        params,
        optimizer,
        scheduler,
        tokenizer,
        pad_token_id(tokenizer),
        layout,
        device,
        bf16,
        train.precision == "bf16",
        train.batch_size,
        fsdp,
        ranks()[1],
        lambda: prepare_model(load_model(cfg.model, dtype="float32", merge=True), train, cfg.lora, "CAUSAL_LM"),
        token_budget=train.token_budget,
    )
    if checkpoint is not None:
        learner.load_optimizer_state(checkpoint["optimizer"])
        scheduler.load_state_dict(checkpoint["scheduler"])
    return learner


def shard(forward: PackedForward, bf16: bool) -> None:
    """FSDP2: each decoder layer, then the whole packed forward, sharded over the ranks (torch's `fully_shard`)."""
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16 if bf16 else None, reduce_dtype=torch.float32)
    layers: Any = body(forward.model).layers
    for layer in layers:
        fully_shard(layer, mp_policy=mp)
    fully_shard(forward, mp_policy=mp)


__all__ = ["Learner", "build_learner", "dummy", "lockstep"]
