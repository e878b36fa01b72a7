"""Shared pieces of the benchmark scripts: data, the machine's bf16 matmul peak, FLOP counting."""

from __future__ import annotations

import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
HH_HELPFUL = ROOT.parent / "shared" / "data" / "hh-rlhf" / "helpful-base" / "test.decontaminated.jsonl.gz"


def first_pairs(n: int):
    """The first n pairs of HH-RLHF helpful-base (in file order) as records."""
    from preference_data.sources import read_records

    if not HH_HELPFUL.exists():
        raise SystemExit(f"{HH_HELPFUL} not found: the benchmark needs ../shared/data beside the project")
    records, _ = read_records(str(HH_HELPFUL))
    return records[:n]


def trl_rows(pairs) -> list[dict]:
    """TRL conversational preference rows with an explicit prompt."""
    conv = lambda msgs: [m.to_dict() for m in msgs]  # noqa: E731
    return [{"prompt": conv(p.prompt), "chosen": conv(p.chosen), "rejected": conv(p.rejected)} for p in pairs]


def bf16_matmul_peak(n: int = 2048, reps: int = 20) -> float:
    """GFLOP/s of a plain bf16 (n x n) @ (n x n) matmul on this machine: the reference peak."""
    a = torch.randn(n, n, dtype=torch.bfloat16)
    b = torch.randn(n, n, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    t = time.perf_counter()
    for _ in range(reps):
        a @ b
    dt = time.perf_counter() - t
    return 2 * n ** 3 * reps / dt / 1e9


def model_dims(model_ref: str) -> dict[str, int]:
    from transformers import AutoConfig

    from preference_data.hub import resolve

    c = AutoConfig.from_pretrained(resolve(model_ref))
    h, L, inter, V = c.hidden_size, c.num_hidden_layers, c.intermediate_size, c.vocab_size
    kv = c.num_key_value_heads * (h // c.num_attention_heads)
    per_layer = h * h * 2 + h * kv * 2 + 3 * h * inter  # q, o, k, v, gate, up, down
    return {"body": per_layer * L, "head": h * V, "hidden": h, "layers": L}


def train_matmul_flops(dims: dict[str, int], tokens: int, head_tokens: int, lora: bool) -> float:
    """Matmul FLOPs of forward + backward: 2 per weight per token forward, x3 with weight gradients
    (full fine-tuning), x2 when only input gradients flow through frozen weights (LoRA). Attention
    score matmuls are left out (small at these lengths), so the rate is a slight under-estimate."""
    mult = 4 if lora else 6
    return mult * (dims["body"] * tokens + dims["head"] * head_tokens)
