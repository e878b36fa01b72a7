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

The log-prob of kept token i is z_i - logsumexp(z over the kept tokens); a removed token has -inf. This is
the distribution a token is drawn from and the log-prob `generate` returns for it (vLLM's
`logprobs_mode="processed_logprobs"`), not the model's raw log-softmax.

Sampling is by inverse CDF: row r draws its token from one uniform u_r in [0, 1): the first token (in
vocabulary order) whose cumulative kept probability exceeds u_r. Each sample draws its uniforms for all
steps up front from its own generator (`sample_uniforms`, seeded from the request's seed, its prompt and the
sample index), so what it samples depends on its own logits and seed alone, never on the other rows of the
batch.

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
_MASK64 = (1 << 64) - 1


class RowSettings(NamedTuple):
    """Per-row sampling settings as tensors, each (R,)."""

    temperature: torch.Tensor  # float32; 0 = greedy
    top_k: torch.Tensor  # int64; 0 = off
    top_p: torch.Tensor  # float32; 1 = off
    min_p: torch.Tensor  # float32; 0 = off

    def select(self, rows: torch.Tensor) -> "RowSettings":
        """The settings of a subset of rows (indices (R',))."""
        return RowSettings(*(t.index_select(0, rows) for t in self))


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


def _top_p_cut(z: torch.Tensor, keep_z: torch.Tensor, top_p: torch.Tensor, total: torch.Tensor,
               m: torch.Tensor) -> torch.Tensor:
    """The z value of the least probable token top-p keeps, per row: (R,).

    z (R, V): scaled logits; keep_z (R,): the top-k cut (-inf when off); top_p (R,); total (R,): the kept
    mass sum(exp(z - m)) over z >= keep_z; m (R, 1): the row maximum of z.
    """
    V = z.shape[-1]
    cut = torch.empty_like(top_p)
    need = torch.ones_like(top_p, dtype=torch.bool)
    for c in (min(_TOP_P_CANDIDATES, V), V):
        rows = need.nonzero().squeeze(1)
        if rows.numel() == 0:
            break
        zr = z.index_select(0, rows)
        vals = torch.topk(zr, c, dim=-1).values if c < V else torch.sort(zr, dim=-1, descending=True).values
        e = (vals - m.index_select(0, rows)).exp_()  # (r, c)
        e.masked_fill_(vals < keep_z.index_select(0, rows).unsqueeze(1), 0.0)
        mass = e.cumsum(-1)
        before = torch.cat([torch.zeros_like(mass[:, :1]), mass[:, :-1]], dim=-1)  # mass strictly before
        p_mass = top_p.index_select(0, rows).unsqueeze(1) * total.index_select(0, rows).unsqueeze(1)
        inside = (before < p_mass) & (e > 0)  # a prefix of the sorted row
        n_keep = inside.sum(-1).clamp_(min=1)
        done = (mass[:, -1] >= p_mass.squeeze(1)) | (n_keep < c) | (c == V)
        cut[rows] = vals.gather(1, (n_keep - 1).unsqueeze(1)).squeeze(1)
        need[rows[done]] = False
    return cut


def _kept(logits: torch.Tensor, s: RowSettings) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """For rows with temperature > 0: (z (R, V), m (R, 1) the row max of z, e (R, V) = exp(z - m) on the
    kept tokens and 0 on the removed ones)."""
    z = logits.float()
    if bool((s.temperature != 1).any()):
        z = z / s.temperature.unsqueeze(1)
    m = z.max(-1, keepdim=True).values
    e = (z - m).exp_()
    V = z.shape[-1]
    use_k = (s.top_k > 0) & (s.top_k < V)
    use_p = s.top_p < 1
    if bool(use_k.any()) or bool(use_p.any()):
        keep_z = torch.full_like(s.top_p, float("-inf"))
        if bool(use_k.any()):
            rows = use_k.nonzero().squeeze(1)
            k = s.top_k.index_select(0, rows)
            vals = torch.topk(z.index_select(0, rows), int(k.max()), dim=-1).values
            keep_z[rows] = vals.gather(1, (k - 1).unsqueeze(1)).squeeze(1)
        if bool(use_p.any()):
            rows = use_p.nonzero().squeeze(1)
            zr = z.index_select(0, rows)
            er = e.index_select(0, rows)
            kz = keep_z.index_select(0, rows)
            total = torch.where(zr >= kz.unsqueeze(1), er, torch.zeros_like(er)).sum(-1)
            cut = _top_p_cut(zr, kz, s.top_p.index_select(0, rows), total, m.index_select(0, rows))
            keep_z[rows] = torch.maximum(kz, cut)
        e.masked_fill_(z < keep_z.unsqueeze(1), 0.0)
    if bool((s.min_p > 0).any()):
        e.masked_fill_(e < s.min_p.unsqueeze(1), 0.0)  # e_i = p_i / p_max
    return z, m, e


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
        z, m, e = _kept(logits.index_select(0, rows), s.select(rows))
        lp = z - m - e.sum(-1, keepdim=True).log()
        out[rows] = lp.masked_fill_(e == 0, float("-inf"))
    return out


def sample(logits: torch.Tensor, s: RowSettings, u: torch.Tensor) -> Sampled:
    """Draw one token per row by inverse CDF from its sampling distribution.

    logits (R, V) (any float dtype); s: the rows' settings; u (R,): one uniform in [0, 1) per row.
    Returns the tokens (R,) and their log-probs (R,) under the processed distribution (0 for greedy rows).
    """
    R, V = logits.shape
    tokens = torch.empty(R, dtype=torch.long, device=logits.device)
    logps = torch.zeros(R, dtype=torch.float32, device=logits.device)
    greedy = s.temperature == 0
    all_greedy = bool(greedy.all())
    if all_greedy or bool(greedy.any()):
        if all_greedy:
            return Sampled(logits.argmax(-1), logps)
        rows = greedy.nonzero().squeeze(1)
        tokens[rows] = logits.index_select(0, rows).argmax(-1)
    rows = (~greedy).nonzero().squeeze(1)
    sampled_all = rows.numel() == R
    sub = logits if sampled_all else logits.index_select(0, rows)
    z, m, e = _kept(sub, s if sampled_all else s.select(rows))
    cdf = e.cumsum_(-1)  # e is not needed afterwards
    total = cdf[:, -1:]
    target = (u if sampled_all else u.index_select(0, rows)).unsqueeze(1) * total
    idx = torch.searchsorted(cdf, target, right=True).clamp_(max=V - 1)  # (r, 1)
    # float rounding can land on a removed token (zero width): take the last kept token before it instead
    prev = torch.where(idx > 0, cdf.gather(1, (idx - 1).clamp(min=0)), torch.zeros_like(target))
    empty = cdf.gather(1, idx) <= prev
    if bool(empty.any()):
        last = (cdf < total).sum(-1, keepdim=True).clamp_(max=V - 1)  # first index reaching the total
        idx = torch.where(empty, last, idx)
    lp = (z.gather(1, idx) - m - total.log()).squeeze(1)
    if sampled_all:
        return Sampled(idx.squeeze(1), lp)
    tokens[rows] = idx.squeeze(1)
    logps[rows] = lp
    return Sampled(tokens, logps)
