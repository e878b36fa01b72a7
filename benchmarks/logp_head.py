"""The log-prob head: the chunked head that keeps no vocabulary logits (`prefalign.models.heads`) against the plain
head (logits of every response token, then log-softmax: what a trainer without a fused head runs), in one process.

    .venv/bin/python benchmarks/logp_head.py                          # SmolLM2-135M's and Qwen2.5-0.5B's heads
    .venv/bin/python benchmarks/logp_head.py --tokens 8192 --device auto

Equal work on both sides: the same hidden states, head weight and target tokens, forward and backward (gradients of
the hidden states and the head weight, as a fully fine-tuned model with tied embeddings needs), in the precision the
toolkit picks for the device (bf16 autocast where native). Printed per head shape: the median time of a forward and
backward over `--reps` repetitions after one warm-up, the bytes each side keeps for its backward (saved tensors, the
head weight excluded: it is the model's own), the GPU's peak memory on a GPU, and the ratio.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from benchmarks.common import machine_line, resolve_precision, sync  # noqa: E402
from prefalign.models.heads import plain_token_logps, token_logps_from_hidden  # noqa: E402

SHAPES = {"smollm2-135m": (576, 49152), "qwen2.5-0.5b": (896, 151936), "qwen2.5-1.5b": (1536, 151936)}


def plain(h: torch.Tensor, w: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    logits = (h @ w.T).float()
    return plain_token_logps(logits, t)


def chunked(h: torch.Tensor, w: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    return token_logps_from_hidden(h, w, t)


def measure(fn, h, w, t, device: str, bf16: bool, reps: int) -> dict:
    saved: dict[int, int] = {}

    def pack(x):
        if x.data_ptr() != w.data_ptr():
            saved[x.untyped_storage().data_ptr()] = x.untyped_storage().nbytes()
        return x

    times = []
    peak = None
    for i in range(reps + 1):
        h.grad = w.grad = None
        if device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
        sync()
        t0 = time.perf_counter()
        with torch.autocast(device, dtype=torch.bfloat16, enabled=bf16):
            if i == 0:
                with torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x):
                    lp = fn(h, w, t)
            else:
                lp = fn(h, w, t)
        lp.sum().backward()
        sync()
        if i:
            times.append(time.perf_counter() - t0)
        if device == "cuda":
            peak = (torch.cuda.max_memory_allocated() - base) / 1024**3
    return {"seconds": statistics.median(times), "saved_gb": sum(saved.values()) / 1024**3, "peak_gpu_gb": peak}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="smollm2-135m,qwen2.5-0.5b", help=f"comma list of {', '.join(SHAPES)}")
    ap.add_argument("--tokens", type=int, default=2048, help="response tokens (N)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--device", default="auto", choices=["auto", "cpu"])
    args = ap.parse_args()
    device = "cuda" if args.device == "auto" and torch.cuda.is_available() else "cpu"
    precision, why = resolve_precision("auto")
    bf16 = precision == "bf16"
    print(f"machine: {machine_line()}\nprecision: {precision} ({why}); device {device}; {args.tokens} tokens")
    for name in args.shapes.split(","):
        H, V = SHAPES[name]
        g = torch.Generator().manual_seed(0)
        h = (torch.randn(args.tokens, H, generator=g) * 0.5).to(device).requires_grad_()
        w = (torch.randn(V, H, generator=g) * 0.02).to(device).requires_grad_()
        t = torch.randint(0, V, (args.tokens,), generator=g).to(device)
        res = {
            side: measure(fn, h, w, t, device, bf16, args.reps) for side, fn in (("plain", plain), ("chunked", chunked))
        }
        p, c = res["plain"], res["chunked"]
        gpu = f", GPU peak {p['peak_gpu_gb']:.2f} vs {c['peak_gpu_gb']:.2f} GB" if device == "cuda" else ""
        print(
            f"{name} head (hidden {H}, vocabulary {V}): plain {p['seconds'] * 1e3:.0f} ms, chunked "
            f"{c['seconds'] * 1e3:.0f} ms ({p['seconds'] / c['seconds']:.2f}x); kept for the backward "
            f"{p['saved_gb']:.2f} vs {c['saved_gb']:.3f} GB{gpu}"
        )


if __name__ == "__main__":
    main()
