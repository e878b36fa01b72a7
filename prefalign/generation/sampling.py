"""The sampling distribution of one decoding step, and seeded inverse-CDF sampling from it.

Every row of a batch carries its own settings (temperature T, top-k k, top-p p, min-p m), applied in this
order, each to the distribution the previous one left (renormalised):

1. temperature: z = logits / T. T = 0 means greedy: the distribution is a point mass on argmax(logits)
   (the first index on ties), so the log-prob of a greedy token is 0.
2. top-k (k > 0): keep the tokens with z >= the k-th largest z (tokens tied with the k-th are kept, as in
   transformers' `TopKLogitsWarper`).
3. top-p (p < 1): keep token i when the probability mass of the kept tokens strictly more probable than i
   is < p: the smallest most-probable set whose mass reaches p, with every token tied with its least
   probable member.
4. min-p (m > 0): keep the tokens whose probability is >= m x the largest probability. Truncation never
   removes the most probable token and renormalising scales all probabilities alike, so this test reads
   the same before or after steps 2-3.

The probability of kept token i is its softmax probability renormalised over the kept tokens (computed in
float32 from the model's logits), and its log-prob the log of that, i.e. z_i - logsumexp(z over the kept
tokens); a removed token has -inf. This is the distribution a token is drawn from and the log-prob
`generate` returns for it (vLLM's `logprobs_mode="processed_logprobs"`), not the model's raw log-softmax.

Sampling is by inverse CDF: row r draws its token from one uniform u_r in [0, 1): the first token (in
vocabulary order) whose cumulative kept probability exceeds u_r x the kept mass. The cumulative sum is
taken in two levels (sums of blocks of 1024 tokens, then within the block u_r falls in), so a step reads
the distribution twice and never writes a second (R, V) tensor. Each sample draws its uniforms for all
steps up front from its own generator (`sample_uniforms`, seeded from the request's seed, its prompt and the
sample index), so what it samples depends on its own logits and seed alone, never on the other rows of the
batch. It is a deterministic function of those logits: logits that differ in their last bits (a bf16 matmul
over another batch shape, LoRA merged or not) sample the same token except where u_r falls within that
rounding of a boundary between two tokens, which happens mostly in the long low-probability tail.

Shapes: `R` rows (samples decoded together), `V` vocabulary size.
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Sequence
from typing import NamedTuple

import torch

# Top-p looks for its cut among the most probable tokens first and sorts a whole row only when these
# hold less than p of the mass (a flat distribution). The cut is the same either way.
_TOP_P_CANDIDATES = 1024
_BLOCK = 1024  # tokens per block of the two-level cumulative sum
_MASK64 = (1 << 64) - 1


class RowSettings(NamedTuple):
    """Per-row sampling settings as tensors, each (R,)."""

    temperature: torch.Tensor  # float32; 0 = greedy
    top_k: torch.Tensor  # int64; 0 = off
    top_p: torch.Tensor  # float32; 1 = off
    min_p: torch.Tensor  # float32; 0 = off

    def select(self, rows: torch.Tensor) -> RowSettings:
        """The settings of a subset of rows (indices (R',))."""
        return RowSettings(*(t.index_select(0, rows) for t in self))

    def span(self, start: int, stop: int) -> RowSettings:
        """The settings of rows start..stop-1."""
        return RowSettings(*(t[start:stop] for t in self))


class Sampled(NamedTuple):
    tokens: torch.Tensor  # (R,) int64
    logprobs: torch.Tensor  # (R,) float32, under the processed distribution (module docstring)


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def sample_uniforms(seed: int, prompt_ids: Sequence[int], index: int, steps: int) -> torch.Tensor:
    """The uniforms (steps,) in [0, 1) that sample `index` of a request (`seed`, `prompt_ids`) uses, one per step.

    Drawn from a CPU `torch.Generator` seeded from (seed, a hash of the prompt ids, index), so the samples of a
    request are independent of each other and of other prompts' samples under the same seed, and a sample is
    the same whatever else is generated with it (or in which order the prompts come).
    """
    digest = hashlib.blake2b(array("q", prompt_ids).tobytes(), digest_size=8).digest()
    mixed = _splitmix64(seed & _MASK64) ^ int.from_bytes(digest, "little")
    g = torch.Generator()
    g.manual_seed(_splitmix64((_splitmix64(mixed) + index) & _MASK64) >> 1)
    return torch.rand(steps, generator=g, dtype=torch.float32)


def _top_p_cut(p: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """The probability of the least probable token top-p keeps, per row: (R,).

    p (R, V): the distribution so far (top-k applied, not necessarily summing to 1); top_p (R,).
    """
    V = p.shape[-1]
    total = p.sum(-1)
    cut = torch.empty_like(top_p)
    need = torch.ones_like(top_p, dtype=torch.bool)
    for c in (min(_TOP_P_CANDIDATES, V), V):
        rows = need.nonzero().squeeze(1)
        if rows.numel() == 0:
            break
        pr = p.index_select(0, rows)
        vals = torch.topk(pr, c, dim=-1).values if c < V else torch.sort(pr, dim=-1, descending=True).values
        mass = vals.cumsum(-1)
        before = torch.cat([torch.zeros_like(mass[:, :1]), mass[:, :-1]], dim=-1)  # mass strictly before
        p_mass = (top_p.index_select(0, rows) * total.index_select(0, rows)).unsqueeze(1)
        inside = (before < p_mass) & (vals > 0)  # a prefix of the sorted row
        n_keep = inside.sum(-1).clamp_(min=1)
        done = (n_keep < c) | (mass[:, -1] >= p_mass.squeeze(1)) | (c == V)
        cut[rows] = vals.gather(1, (n_keep - 1).unsqueeze(1)).squeeze(1)
        need[rows[done]] = False
    return cut


def _distribution(logits: torch.Tensor, s: RowSettings) -> torch.Tensor:
    """The sampling distribution (R, V) float32 of rows with temperature > 0 (module docstring): softmax
    probabilities, 0 on removed tokens, not renormalised after truncation (divide by the row sum)."""
    z = logits.float() if logits.dtype != torch.float32 else logits.clone()
    if bool((s.temperature != 1).any()):
        z.div_(s.temperature.unsqueeze(1))
    V = z.shape[-1]
    use_k = (s.top_k > 0) & (s.top_k < V)
    if bool(use_k.any()):
        rows = use_k.nonzero().squeeze(1)
        k = s.top_k.index_select(0, rows)
        zr = z.index_select(0, rows)
        kth = torch.topk(zr, int(k.max()), dim=-1).values.gather(1, (k - 1).unsqueeze(1))
        z[rows] = zr.masked_fill_(zr < kth, float("-inf"))
    p = torch.softmax(z, dim=-1)
    use_p = s.top_p < 1
    if bool(use_p.any()):
        rows = use_p.nonzero().squeeze(1)
        pr = p.index_select(0, rows)
        cut = _top_p_cut(pr, s.top_p.index_select(0, rows))
        p[rows] = pr.masked_fill_(pr < cut.unsqueeze(1), 0.0)
    use_m = s.min_p > 0
    if bool(use_m.any()):
        rows = use_m.nonzero().squeeze(1)
        pr = p.index_select(0, rows)
        floor = s.min_p.index_select(0, rows).unsqueeze(1) * pr.max(-1, keepdim=True).values
        p[rows] = pr.masked_fill_(pr < floor, 0.0)
    return p


def processed_logprobs(logits: torch.Tensor, s: RowSettings) -> torch.Tensor:
    """Log-probs (R, V) of the sampling distribution of each row (module docstring); -inf where removed.

    The reference the sampler is tested against: `sample` returns, for the token it draws, this value
    (up to float rounding in the normalising sum).
    """
    out = torch.full(logits.shape, float("-inf"), dtype=torch.float32, device=logits.device)
    greedy = s.temperature == 0
    if bool(greedy.any()):
        rows = greedy.nonzero().squeeze(1)
        out[rows, logits.index_select(0, rows).argmax(-1)] = 0.0
    rows = (~greedy).nonzero().squeeze(1)
    if rows.numel():
        p = _distribution(logits.index_select(0, rows), s.select(rows))
        out[rows] = (p / p.sum(-1, keepdim=True)).log()
    return out


def _inverse_cdf(p: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row, the first index whose cumulative p exceeds u x sum(p), and sum(p): ((R,), (R,)).

    Two levels: block sums (R, nb), then the cumulative sum inside the one block u falls in.
    """
    R, V = p.shape
    nb, tail = divmod(V, _BLOCK)
    sums = [p[:, : nb * _BLOCK].reshape(R, nb, _BLOCK).sum(-1)] if nb else []
    if tail:
        sums.append(p[:, nb * _BLOCK :].sum(-1, keepdim=True))
    block_cdf = torch.cat(sums, dim=1).cumsum_(-1)  # (R, blocks)
    total = block_cdf[:, -1]
    target = (u * total).unsqueeze(1)  # (R, 1)
    b = torch.searchsorted(block_cdf, target, right=True).clamp_(max=block_cdf.shape[1] - 1)
    before = torch.where(b > 0, block_cdf.gather(1, (b - 1).clamp(min=0)), torch.zeros_like(target))
    cols = b * _BLOCK + torch.arange(_BLOCK, device=p.device)  # (R, BLOCK)
    inside = cols < V
    block = p.gather(1, cols.clamp(max=V - 1)).masked_fill_(~inside, 0.0)
    cdf = block.cumsum_(-1).add_(before)
    j = torch.searchsorted(cdf, target, right=True)
    # float rounding can step past the block's last token with mass: take the last one that has mass
    last = (block > 0).cumsum(-1).argmax(-1, keepdim=True)
    j = torch.where((j >= _BLOCK) | (j > last), last, j)
    return (b * _BLOCK + j).squeeze(1), total


def sample(logits: torch.Tensor, s: RowSettings, u: torch.Tensor) -> Sampled:
    """Draw one token per row by inverse CDF from its sampling distribution.

    logits (R, V) (any float dtype); s: the rows' settings; u (R,): one uniform in [0, 1) per row.
    Returns the tokens (R,) and their log-probs (R,) under the processed distribution (0 for greedy rows).
    """
    R = logits.shape[0]
    greedy = s.temperature == 0
    if bool(greedy.all()):
        return Sampled(logits.argmax(-1), torch.zeros(R, dtype=torch.float32, device=logits.device))
    tokens = logits.argmax(-1) if bool(greedy.any()) else torch.empty(R, dtype=torch.long, device=logits.device)
    logps = torch.zeros(R, dtype=torch.float32, device=logits.device)
    rows = (~greedy).nonzero().squeeze(1)
    every = rows.numel() == R
    p = _distribution(logits if every else logits.index_select(0, rows), s if every else s.select(rows))
    tok, total = _inverse_cdf(p, u if every else u.index_select(0, rows))
    lp = (p.gather(1, tok.unsqueeze(1)).squeeze(1) / total).log_()
    if every:
        return Sampled(tok, lp)
    tokens[rows] = tok
    logps[rows] = lp
    return Sampled(tokens, logps)
