"""Batched generation with transformers on CPU (bf16), prompts rendered with the chat template.

Prompts are sorted by length and generated in batches with left padding (so every row's new tokens start at
the same column); results come back in the input order. Greedy by default, so evaluations are repeatable.
GPU users can pass `backend="vllm"` when vLLM is installed (`pip install -e .[gpu]`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from prefalign.errors import UserError
from preference_data.records import Conversation


def load_policy(ref: str, dtype: str = "auto") -> Any:
    """A causal LM from a builtin, a directory, a hub id, or a peft adapter directory (merged on load).

    `dtype: auto` is bfloat16 where the device runs it natively, else float32; the choice is printed."""
    from pathlib import Path

    from prefalign.models.hub import base_of_adapter, load_causal_lm, resolve, torch_dtype
    from prefalign.models.precision import announce, decide_dtype

    decision = decide_dtype(dtype, knob="--dtype")
    announce(f"generation with {ref}", decision)
    dtype = decision.value

    path = resolve(ref)
    if (Path(path) / "adapter_config.json").exists() and not (Path(path) / "config.json").exists():
        from peft import PeftModel

        base = load_causal_lm(base_of_adapter(path), dtype="float32")
        model = PeftModel.from_pretrained(base, path).merge_and_unload().to(torch_dtype(dtype))
        model.eval()
        return model
    return load_causal_lm(ref, dtype=dtype)


@torch.no_grad()
def generate(model: Any, tokenizer: Any, prompts: Sequence[Conversation], max_new_tokens: int = 96,
             batch_size: int = 16, temperature: float = 0.0, max_prompt_length: int = 512, seed: int = 0,
             backend: str = "transformers", progress: bool = False) -> list[str]:
    """Responses (text, special tokens removed) to each prompt, in input order."""
    if backend == "vllm":
        return _generate_vllm(model, prompts, max_new_tokens, temperature, seed)
    if backend != "transformers":
        raise UserError(f"unknown generation backend '{backend}'; use transformers or vllm")
    from preference_data.tokenize import tokenize_prompts

    ids = tokenize_prompts(list(prompts), tokenizer, max_prompt_length)
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    out: list[str] = [""] * len(ids)
    torch.manual_seed(seed)
    batches = range(0, len(order), batch_size)
    if progress:
        from tqdm import tqdm

        batches = tqdm(batches, desc="generating", unit="batch")
    for s in batches:
        idx = order[s:s + batch_size]
        L = max(len(ids[i]) for i in idx)
        input_ids = torch.tensor([[pad] * (L - len(ids[i])) + ids[i] for i in idx])
        mask = torch.tensor([[0] * (L - len(ids[i])) + [1] * len(ids[i]) for i in idx])
        gen = model.generate(input_ids=input_ids, attention_mask=mask, max_new_tokens=max_new_tokens,
                             do_sample=temperature > 0, temperature=temperature if temperature > 0 else None,
                             top_p=None, top_k=None, pad_token_id=pad, eos_token_id=tokenizer.eos_token_id)
        for row, i in enumerate(idx):
            out[i] = tokenizer.decode(gen[row, L:], skip_special_tokens=True).strip()
    return out


def _generate_vllm(model_path: Any, prompts: Sequence[Conversation], max_new_tokens: int, temperature: float,
                   seed: int) -> list[str]:
    try:
        from vllm import LLM, SamplingParams
    except ImportError:
        raise UserError("backend vllm needs the gpu extra: pip install -e '.[gpu]'") from None
    llm = LLM(model=str(model_path), seed=seed)
    params = SamplingParams(max_tokens=max_new_tokens, temperature=temperature)
    outs = llm.chat([[m.to_dict() for m in p] for p in prompts], params)
    return [o.outputs[0].text.strip() for o in outs]
