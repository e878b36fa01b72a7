"""Weight sync from a trainer's model to a sampler: plain weights, or a peft model with LoRA merged.

`merged_named_weights` reads the trainer's model without changing it: for a LoRA layer it yields
W + sum over active adapters of B @ A x scaling (peft's `get_delta_weight`), instead of merging into the
trainer's weights and unmerging again (which, in bf16, does not give the same weights back). Names are
those of the base model (`model.layers.0.self_attn.q_proj.weight`), which is what both a separate
transformers copy and vLLM's `load_weights` expect.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from prefalign.errors import UserError


def is_peft_model(model: Any) -> bool:
    return hasattr(model, "peft_config") and hasattr(model, "base_model")


def _lora_modules(model: Any) -> dict[str, Any]:
    return {name: m for name, m in model.named_modules() if hasattr(m, "lora_A") and hasattr(m, "get_base_layer")}


def _merged(module: Any, leaf: str, param: torch.Tensor) -> torch.Tensor:
    """The base layer's `leaf` ("weight" / "bias") with the active, unmerged adapters of `module` added."""
    if getattr(module, "disable_adapters", False):
        return param
    out = param
    merged = set(getattr(module, "merged_adapters", []))
    for name in module.active_adapters:
        if name not in module.lora_A or name in merged:
            continue
        if leaf == "weight":
            variant = getattr(module, "lora_variant", {}).get(name)
            if variant is not None:
                out = variant.merge_safe(module, name, out.detach().clone())
            else:
                out = out + module.get_delta_weight(name).to(out.dtype)
        elif leaf == "bias" and getattr(module, "lora_bias", {}).get(name):
            out = out + (module.lora_B[name].bias * module.scaling[name]).to(out.dtype)
    return out


def merged_named_weights(model: Any) -> Iterator[tuple[str, torch.Tensor]]:
    """(base-model name, tensor) for every parameter of `model`; LoRA merged for a peft model (module docstring)."""
    if not is_peft_model(model):
        for name, p in model.named_parameters():
            yield name, p.detach()
        return
    lora = _lora_modules(model)
    prefix = getattr(model.base_model, "prefix", "lora_")  # the tuner's adapter-name prefix
    for name, p in model.named_parameters():
        owner, _, leaf = name.rpartition(".")
        if "original_module" in name or any(part.startswith(prefix) for part in owner.split(".")):
            continue  # adapter weights (merged below) and the copies modules_to_save replaces
        clean = (
            name.removeprefix("base_model.model.").replace(".base_layer", "").replace("modules_to_save.default.", "")
        )
        tensor = p.detach()
        if owner.endswith(".base_layer") and owner[: -len(".base_layer")] in lora:
            tensor = _merged(lora[owner[: -len(".base_layer")]], leaf, tensor)
        yield clean, tensor


@torch.no_grad()
def copy_weights(source: Any, target: Any) -> int:
    """Copy `source`'s current weights (LoRA merged) into `target` in place, casting to its dtype.

    Every parameter of `target` must be covered, with the same shape. Returns the number of tensors copied.
    """
    params = dict(target.named_parameters(remove_duplicate=False))
    covered: set[int] = set()
    problems: list[str] = []
    copied = 0
    for name, tensor in merged_named_weights(source):
        dest = params.get(name)
        if dest is None:
            problems.append(f"'{name}' is not a parameter of the sampler's model")
            continue
        if dest.shape != tensor.shape:
            problems.append(f"'{name}': shape {tuple(tensor.shape)} in the trainer, {tuple(dest.shape)} in the sampler")
            continue
        dest.copy_(tensor)
        covered.add(id(dest))
        copied += 1
    missing = sorted({n for n, p in params.items() if id(p) not in covered})
    if missing:
        problems.append(f"{len(missing)} sampler parameter(s) not found in the trainer's model: {missing[:5]}")
    if problems:
        raise UserError(
            "sync_weights: the trainer's model does not match the sampler's ("
            + "; ".join(problems[:6])
            + "); build the sampler from the same architecture as the model being trained"
        )
    return copied
