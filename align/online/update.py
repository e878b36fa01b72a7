"""The update phase: the policy-gradient loss (`PG_LOSSES`) of this rank's completions backpropagated and the
optimizer stepped, `algorithm.updates_per_rollout` times; and the probe passes of gradient-based weighting.

Completions go in micro-batches of `train.batch_size` (two completions of a prompt packed as one prefix-shared
segment). The loss is Σ numerator / Σ denominator over the whole rollout and every rank: the denominators never
depend on θ, so they are summed first and each micro-batch backpropagates its numerator over that total, and
micro-batching and data parallelism give the single-batch gradient exactly. Ranks run the same number of micro-
batches (`lockstep`); under DDP only the last one's backward reduces the gradients.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from typing import Any

import torch

from prefalign.errors import UserError
from reward_models.composition import influence_of_gram

from ..composition import GradientSection
from ..losses.policy_gradient import PG_LOSSES, PGBatch, compute_pg_loss
from .config import OnlineConfig
from .learner import Learner, dummy, lockstep
from .logps import Seq, micro_batches, pad_rows
from .parallel import total
from .rollout import Rollout


@dataclass
class Frozen:
    """Per-token log-probs recorded at rollout time, no grad (S_local rows)."""

    old: list[list[float]] | None  # π_old recomputed by the policy (algorithm.old_logps: recompute), else None
    ref: list[list[float]] | None  # π_ref, when the KL needs it, else None


def loss_params(cfg: OnlineConfig) -> dict[str, Any]:
    """The loss's parameters: the configured ones and those the run supplies that its signature takes."""
    supplied: dict[str, Any] = {"max_completion_length": cfg.rollout.max_new_tokens}
    if cfg.kl_placement() == "loss":
        supplied |= {"beta": cfg.kl.beta, "kl_estimator": cfg.kl_estimator()}
    return dict(cfg.algorithm.params) | PG_LOSSES[cfg.algorithm.loss].run_params(supplied)


def sequences(
    rollout: Rollout, frozen: Frozen, adv: torch.Tensor, valid: torch.Tensor, keep: int | None = None
) -> list[Seq]:
    """The completions that enter the update (the first `keep`, valid, non-empty), with π_old, π_ref, advantage."""
    old = frozen.old or rollout.logprobs
    prompt_ids = rollout.completion_prompt_ids()
    n = rollout.size if keep is None else keep
    return [
        Seq(prompt_ids[i], rollout.token_ids[i], old[i], frozen.ref[i] if frozen.ref else None, float(adv[i]))
        for i in range(n)
        if bool(valid[i]) and rollout.token_ids[i]
    ]


def _tensors(mb: list[Seq], device: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor]:
    T = max(len(s.ids) for s in mb)
    mask = pad_rows([[1.0] * len(s.ids) for s in mb], T).to(device)
    old = pad_rows([s.old for s in mb], T).to(device)
    refs = [s.ref for s in mb]
    ref = pad_rows([r for r in refs if r is not None], T).to(device) if all(r is not None for r in refs) else None
    adv = torch.tensor([s.adv for s in mb], dtype=torch.float32, device=device)
    return mask, old, ref, adv


def backward(
    learner: Learner, cfg: OnlineConfig, seqs: list[Seq], passes: int = 0
) -> tuple[float, dict[str, list[float]]]:
    """The loss of `seqs` backpropagated. `passes` = 0: one backward pass, no optimizer step (a probe); `passes` = μ:
    μ passes each followed by an optimizer step (the update). Returns the last pass's loss and per-micro-batch
    stats."""
    name, params = cfg.algorithm.loss, loss_params(cfg)
    mbs = lockstep(micro_batches(seqs, learner.batch_size, learner.token_budget))
    den = 0.0  # the denominators never depend on θ: the whole rollout's first
    for mb in mbs:
        if mb:
            mask, old, ref, adv = _tensors(mb, learner.device)
            den += compute_pg_loss(name, params, PGBatch(old, old, mask, adv, ref)).denominator
    den = total(den)
    metrics: dict[str, list[float]] = {}
    loss_total = 0.0
    for _ in range(max(passes, 1)):
        loss_total = 0.0
        for i, mb in enumerate(mbs):
            with _sync(learner, last=i == len(mbs) - 1):
                lp = learner.logps(mb or [dummy()])
                if not mb:  # lock step only: a zero loss through the model, so the reduction sees every parameter
                    (lp.sum() * 0.0).backward()
                    continue
                mask, old, ref, adv = _tensors(mb, learner.device)
                terms = compute_pg_loss(name, params, PGBatch(lp.float(), old, mask, adv, ref))
                loss = terms.numerator / max(den, 1e-12)
                (loss * learner.loss_scale()).backward()
            loss_total += float(loss.item())
            for k, v in terms.stats.items():
                metrics.setdefault(k, []).append(v)
        if passes > 0:
            norm = learner.step(cfg.train.max_grad_norm)
            if norm is not None:
                metrics.setdefault("grad_norm", []).append(norm)
    return loss_total, metrics


def _sync(learner: Learner, last: bool) -> contextlib.AbstractContextManager[Any]:
    """DDP reduces the gradients in the last micro-batch's backward only (FSDP reduces every backward)."""
    if last or learner.world == 1 or learner.fsdp:
        return contextlib.nullcontext()
    return learner.accelerator.no_sync(learner.forward)


def update(learner: Learner, cfg: OnlineConfig, seqs: list[Seq]) -> dict[str, float]:
    """`algorithm.updates_per_rollout` passes over the rollout, each followed by an optimizer step."""
    loss, metrics = backward(learner, cfg, seqs, passes=cfg.algorithm.updates_per_rollout)
    out = {k: sum(v) / len(v) for k, v in metrics.items()}
    out["loss"] = total(loss)
    out["lr"] = learner.lr()
    return out


def probe(
    learner: Learner, cfg: OnlineConfig, rollout: Rollout, frozen: Frozen, per: torch.Tensor, sec: GradientSection
) -> torch.Tensor:
    """Gradient-based weighting: for each component k, the policy-gradient loss with advantages from r_k alone
    (`per` (S_local, K)), backpropagated without an optimizer step, clipped to `sec.max_grad_norm`, the gradients
    of the parameters matching `sec.layers` flattened into g_k; returns the influence s_k = Σ_j <g_k, g_j>. Under
    FSDP each rank holds a shard of every g_k: the Gram matrix is summed over ranks."""
    named = [(n, p) for n, p in learner.policy.named_parameters() if p.requires_grad]
    target = [p for n, p in named if sec.layers is None or re.search(sec.layers, n)]
    if not target:
        raise UserError(f"composition.gradient.layers: '{sec.layers}' matches no trainable parameter")
    keep = rollout.size
    if sec.probe_completions > 0:
        G = rollout.group_size
        keep = min(rollout.size, max(G, (sec.probe_completions // G) * G))
    grads = []
    for k in range(per.shape[1]):
        adv, valid = torch.nan_to_num(per[:keep, k], nan=0.0), ~torch.isnan(per[:keep, k])
        learner.optimizer.zero_grad(set_to_none=True)
        backward(learner, cfg, sequences(rollout, frozen, adv, valid, keep))
        if sec.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(learner.params, sec.max_grad_norm)
        grads.append(torch.cat([_local(p.grad, p).reshape(-1) for p in target]).cpu())
    learner.optimizer.zero_grad(set_to_none=True)
    g = torch.stack(grads).double()
    gram = g @ g.T  # (K, K)
    if learner.fsdp:
        gram = torch.tensor([[total(float(x)) for x in row] for row in gram.tolist()], dtype=torch.float64)
    return influence_of_gram(gram).to(torch.float32)


def _local(grad: torch.Tensor | None, p: torch.Tensor) -> torch.Tensor:
    """A parameter's gradient as a plain tensor (this rank's shard under FSDP), zeros when it has none."""
    g = grad if grad is not None else torch.zeros_like(p)
    g = g.to_local() if hasattr(g, "to_local") else g
    return g.detach().float()


__all__ = ["Frozen", "backward", "loss_params", "probe", "sequences", "update"]
