"""Frozen log-probs: the reference policy's (and INPO's previous iterate's) per-pair log-probs, computed once.

A loss with a reference needs log π_ref(y|x) for every chosen and rejected response. Under LoRA the
trainer gets them on the fly from the base model with adapters disabled (no second copy). Otherwise
they are computed here once, before training, and carried into each batch as per-pair columns (the
`PackCollator` `extra` attributes `ref_chosen_logps`, `ref_rejected_logps`, and `prev_*` for INPO's
previous iterate π_t), so the frozen model is never in memory during training: a separately loaded
model is freed right after, and when the frozen model *is* the initial policy its weights are read
before the first optimizer step.

The pass is batched, without gradients, in the run's precision (bf16 autocast unless `fp32`), packed
and prefix-shared exactly like training batches. Results are cached on disk:

    <PREFALIGN_CACHE or ~/.cache/prefalign>/logps/<key>.safetensors    tensors "chosen", "rejected" (B,)

`key` hashes everything the numbers depend on (`cache_parts`): the token ids of every pair in order,
the model reference with the fingerprint of its files (`prefalign.models.hub.weights_fingerprint`: name,
size and mtime of each weights and config file; for hub models, of their snapshot in the local hub cache),
the precision and weight dtype, and the length settings. A rerun, a `--resume`, or another data-parallel
rank reuses the file; a file lock makes concurrent ranks compute it once.

No pair is run twice, and none that training will not use:

- Only the training pairs the run draws get columns. A run shorter than an epoch (`train.max_steps`, or
  `train.epochs` below 1) draws steps x batch_size x grad_accum x processes pairs, the first ones of the
  epoch's seeded shuffle; `prefalign.training.trainer.drawn_indices` gives those indices, in the order the
  trainer's dataloader draws them, from the same sampler class and seed that dataloader uses. The trainer
  still holds the whole training set, so batches, learning-rate schedule, logged epoch and `--resume` are
  exactly those of a run with columns on every pair; the other pairs carry NaN in those columns, and a
  batch holding one stops the run with an error (`PreferenceTrainer.pair_logps`), never trains on a
  missing number (the dataloader collates one batch ahead, so such a batch is built but never used). The
  cache key covers the drawn pairs in order, so a `--resume` with the same settings reuses the file.
  Held-out pairs are all evaluated, so all of them get columns.
- A model that fills two roles is run once (`frozen_logps` with several roles): when the reference and
  the previous iterate are the same model (`same_model`: the same reference, or the same resolved path with
  the same weights fingerprint; INPO's first iteration), one pass fills both roles' columns.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from tqdm.auto import tqdm

from prefalign.errors import UserError
from prefalign.files import replacing
from prefalign.models.batch import Layout
from prefalign.models.forward import sequence_logps
from prefalign.models.hub import cache_dir, file_lock, load_causal_lm, resolve, weights_fingerprint
from preference_data.packing import pack_pairs

CACHE_VERSION = 1  # bump when the meaning of a cached number changes
COLUMNS = {"reference": "ref", "previous": "prev"}  # role -> column prefix in pair attributes / batches


def columns(role: str) -> tuple[str, str]:
    """The per-pair column names a role's log-probs travel under: (`<p>_chosen_logps`, `<p>_rejected_logps`)."""
    p = COLUMNS[role]
    return f"{p}_chosen_logps", f"{p}_rejected_logps"


def same_model(a: str, b: str) -> bool:
    """Whether model references `a` and `b` name the same weights: the same reference, or the same resolved
    location (builtin, local directory or hub id) with the same weights fingerprint."""
    if a == b:
        return True

    def where(ref: str) -> str:
        path = Path(resolve(ref))
        return str(path.resolve()) if path.exists() else str(path)

    try:
        return where(a) == where(b) and weights_fingerprint(a) == weights_fingerprint(b)
    except UserError:  # a reference that does not resolve names no weights to share
        return False


# --- cache keys --------------------------------------------------------------------------------------


def data_fingerprint(pairs: Sequence[Any]) -> str:
    """sha256 of the token ids of every pair, in order (prompt, chosen, rejected)."""
    h = hashlib.sha256()
    for p in pairs:
        h.update(json.dumps([p.prompt_ids, p.chosen_ids, p.rejected_ids]).encode())
    return h.hexdigest()


def cache_parts(
    pairs: Sequence[Any], model_ref: str, precision: str, weights_dtype: str, max_length: int, length_policy: str
) -> dict[str, Any]:
    """Everything a cached set of log-probs depends on (hashed into the file name)."""
    return {
        "version": CACHE_VERSION,
        "data": data_fingerprint(pairs),
        "pairs": len(pairs),
        "model": model_ref,
        "weights": weights_fingerprint(model_ref),
        "precision": precision,
        "weights_dtype": weights_dtype,
        "max_length": max_length,
        "length_policy": length_policy,
    }


def cache_file(parts: dict[str, Any]) -> Path:
    key = hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:40]
    return cache_dir() / "logps" / f"{key}.safetensors"


def _read(path: Path, n: int) -> tuple[torch.Tensor, torch.Tensor] | None:

    try:
        t = load_file(str(path))
    except Exception:  # a damaged file is recomputed
        return None
    if t["chosen"].shape != (n,) or t["rejected"].shape != (n,):
        return None
    return t["chosen"], t["rejected"]


def _write(path: Path, chosen: torch.Tensor, rejected: torch.Tensor, parts: dict[str, Any]) -> None:
    with replacing(path) as tmp:  # a reader sees the old state or the whole file
        save_file(
            {"chosen": chosen.contiguous(), "rejected": rejected.contiguous()},
            str(tmp),
            metadata={"parts": json.dumps(parts, sort_keys=True)},
        )


# --- the computation ---------------------------------------------------------------------------------


@torch.no_grad()
def pair_logps(
    model: torch.nn.Module,
    pairs: Sequence[Any],
    pad_id: int,
    batch_size: int,
    row_tokens: int,
    autocast: bool,
    layout: Layout,
    device: torch.device | str = "cpu",
    desc: str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed response log-probs of chosen (B,) and rejected (B,) for tokenized pairs, in order, in fp32."""

    device = torch.device(device)
    was_training = model.training
    model.eval()
    chosen, rejected = [], []
    starts = range(0, len(pairs), batch_size)
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
        for s in tqdm(starts, desc=desc, disable=desc is None or os.environ.get("CI") == "true", leave=False):
            chunk = pairs[s : s + batch_size]
            logps = sequence_logps(model, pack_pairs(chunk, pad_id, row_tokens, layout).to(device)).float()  # (2b,)
            chosen.append(logps[: len(chunk)].cpu())
            rejected.append(logps[len(chunk) :].cpu())
    model.train(was_training)
    if not chosen:
        return torch.zeros(0), torch.zeros(0)
    return torch.cat(chosen), torch.cat(rejected)


def frozen_logps(
    roles: Sequence[str],
    model_ref: str,
    sets: dict[str, Sequence[Any]],
    *,
    precision: str,
    weights_dtype: str,
    max_length: int,
    length_policy: str,
    pad_id: int,
    row_tokens: int,
    batch_size: int,
    layout: Layout,
    device: torch.device | str = "cpu",
    model: torch.nn.Module | None = None,
) -> dict[str, Any]:
    """Compute (or read from the cache) the log-probs of `model_ref` for each named pair set and attach them
    as columns of every role in `roles`.

    roles: "reference" and/or "previous" (column prefix `ref` / `prev`, see `columns`): one pass serves
    every role the model fills. `model`: those weights already in memory (the initial policy, before any
    update); otherwise the model is loaded only on a cache miss, and freed before returning. Returns a
    report: {"roles", "model", "cache": {set: "hit"|"miss"}, "files": {set: path}, "pairs": {set: count},
    "seconds"}.
    """
    t0 = time.time()
    label = " and ".join(roles)
    report: dict[str, Any] = {"roles": list(roles), "model": model_ref, "cache": {}, "files": {}, "pairs": {}}
    loaded: torch.nn.Module | None = None
    try:
        for name, pairs in sets.items():
            if not pairs:
                continue
            parts = cache_parts(pairs, model_ref, precision, weights_dtype, max_length, length_policy)
            path = cache_file(parts)
            with file_lock(path):
                got = _read(path, len(pairs)) if path.exists() else None
                report["cache"][name] = "hit" if got is not None else "miss"
                if got is None:
                    if model is None and loaded is None:
                        loaded = load_causal_lm(model_ref, dtype=weights_dtype)
                    net = model if model is not None else loaded
                    assert net is not None
                    net.to(device)
                    got = pair_logps(
                        net,
                        pairs,
                        pad_id,
                        batch_size,
                        row_tokens,
                        autocast=precision == "bf16",
                        device=device,
                        desc=f"{label} log-probs ({name})",
                        layout=layout,
                    )
                    _write(path, got[0], got[1], parts)
            report["files"][name] = str(path)
            report["pairs"][name] = len(pairs)
            if int(os.environ.get("RANK", "0")) == 0:
                print(
                    f"{label} log-probs of {len(pairs)} {name} pairs from {model_ref}: "
                    f"{'cache hit' if report['cache'][name] == 'hit' else 'computed and cached'} ({path})",
                    flush=True,
                )
            for role in roles:
                attach(pairs, role, *got)
    finally:
        if loaded is not None:  # the frozen model is not needed in memory during training
            del loaded
            gc.collect()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
    report["seconds"] = round(time.time() - t0, 1)
    return report


def attach(pairs: Sequence[Any], role: str, chosen: torch.Tensor, rejected: torch.Tensor) -> None:
    """Store per-pair log-probs in each pair's attributes under `columns(role)` (read by `PackCollator`)."""
    c_name, r_name = columns(role)
    for p, c, r in zip(pairs, chosen.tolist(), rejected.tolist(), strict=True):
        p.attributes[c_name] = c
        p.attributes[r_name] = r
