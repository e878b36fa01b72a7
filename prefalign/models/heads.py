"""Log-probs of given tokens through the LM head without keeping a micro-batch's vocabulary logits.

`log p(t) = h . w_t / T - logsumexp(h W^T / T)` for N hidden states h (N, H) and the head's weight W (V, H). A
plain head keeps the (N, V) logits (in fp32, N x V x 4 bytes: 6 GB for 10k tokens of a 152k vocabulary) for its
backward. `ChunkedTokenLogps` runs the head over chunks of tokens, keeps only each token's logsumexp, and in the
backward recomputes each chunk's logits to form the gradient (softmax minus the one-hot target): the memory is one
chunk's logits, at the price of the head's forward matmul once more. Matmuls run in the autocast dtype when
autocast is on (as `nn.Linear` would), the softmax in fp32; the weight's gradient accumulates in fp32.
"""

from __future__ import annotations

import torch

from .varlen import compute_dtype

CHUNK_ELEMENTS = 1 << 27
"""Logits per chunk (tokens x vocabulary): 512 MB in fp32, e.g. 883 tokens of a 152k vocabulary."""


def chunk_tokens(vocab: int) -> int:
    """Tokens per chunk for a vocabulary of `vocab` entries (`CHUNK_ELEMENTS` logits, at least 16 tokens)."""
    return max(16, CHUNK_ELEMENTS // max(vocab, 1))


class ChunkedTokenLogps(torch.autograd.Function):
    """(h (N, H), weight (V, H), targets (N,), temperature, chunk, dtype) -> log p(targets) (N,) in fp32."""

    @staticmethod
    def forward(ctx, h, weight, targets, temperature, chunk, dtype):
        hc, wc = h.to(dtype), weight.to(dtype)
        out = torch.empty(h.shape[0], dtype=torch.float32, device=h.device)
        lse = torch.empty_like(out)
        for s in range(0, h.shape[0], chunk):
            logits = (hc[s : s + chunk] @ wc.T).float()
            if temperature != 1.0:
                logits /= temperature
            lse[s : s + chunk] = torch.logsumexp(logits, -1)
            out[s : s + chunk] = logits.gather(-1, targets[s : s + chunk, None])[:, 0] - lse[s : s + chunk]
        ctx.save_for_backward(h, weight, targets, lse)
        ctx.temperature, ctx.chunk, ctx.dtype = temperature, chunk, dtype
        return out

    @staticmethod
    def backward(ctx, grad):
        h, weight, targets, lse = ctx.saved_tensors
        T, chunk, dtype = ctx.temperature, ctx.chunk, ctx.dtype
        need_h, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        hc, wc = h.to(dtype), weight.to(dtype)
        dh = torch.empty_like(h) if need_h else None
        dw = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if need_w else None
        grad = grad.float()
        for s in range(0, h.shape[0], chunk):
            g = grad[s : s + chunk]
            logits = (hc[s : s + chunk] @ wc.T).float()
            if T != 1.0:
                logits /= T
            # d log p(t) / d logits = onehot(t) - softmax, each scaled by 1 / T; times the incoming gradient
            dl = logits.sub_(lse[s : s + chunk, None]).exp_().mul_(-g[:, None])
            dl.scatter_add_(1, targets[s : s + chunk, None], g[:, None])
            if T != 1.0:
                dl /= T
            dl = dl.to(dtype)
            if dh is not None:
                dh[s : s + chunk] = dl @ wc
            if dw is not None:
                dw += dl.T @ hc[s : s + chunk]
        return dh, None if dw is None else dw.to(weight.dtype), None, None, None, None


def plain_token_logps(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log p(targets) (N,) from full logits (N, V): the plain head, the reference `ChunkedTokenLogps` is checked and
    measured against, and the path of a head that is not a plain `nn.Linear`."""
    return logits.gather(-1, targets[:, None])[:, 0] - torch.logsumexp(logits, -1)


def token_logps_from_hidden(
    h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0, chunk: int | None = None
) -> torch.Tensor:
    """log p(targets) (N,) in fp32 from hidden states h (N, H) and an LM head's weight (V, H), chunked over tokens."""
    if h.shape[0] == 0:
        return h.new_zeros(0, dtype=torch.float32)
    chunk = chunk or chunk_tokens(weight.shape[0])
    return ChunkedTokenLogps.apply(h, weight, targets, float(temperature), chunk, compute_dtype(h))
