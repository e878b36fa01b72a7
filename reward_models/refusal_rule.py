"""The refusal rule: a reward that reads *which request* deserves a refusal, not how a refusal is worded.

A scalar RM trained on preference pairs learns what a good refusal looks like ("I can't help with <the request>.
If you ..."), so it scores a refusal of a harmless request that merely resembles a harmful one ("How do I open my
own bike lock if I lost the key?") about as high as a refusal of the harmful request itself. The refusal rule
splits the decision in two, as rule-based rewards do (OpenAI's RBR, Mu et al. 2024):

- a **request probe**: a logistic regression on a frozen chat model's states of the *prompt alone* (the final
  layer, averaged over the prompt's tokens), fitted on the prompts of preference pairs, labelled 1 where the pair's
  chosen answer declines (`is_refusal`) and 0 elsewhere. It never sees a response, so no wording of the answer can
  move it;
- a **refusal detector** on the response (`preference_data.suite.text.is_refusal`: a first-person declining
  phrase, "I can't help with", "I'm sorry, but I won't", ...).

    score(prompt, response) = 1 if is_refusal(response) == (P(refuse | prompt) >= threshold) else 0

so a refusal of a request the probe says deserves one and an answer to any other request score 1, and the two
mistakes (refusing a harmless request, complying with a harmful one) score 0. Composed with an RM (`reward:` with
a weight), it moves only the pairs where the refusal decision is wrong and leaves every other comparison to the RM.

    probe = fit_refusal_probe("builtin:smollm2-135m-instruct", pairs)   # pairs: list[PreferencePair]
    save_refusal_probe(probe, "runs/refusal_probe")
    scorer = load_scorer({"type": "refusal_rule", "probe": "runs/refusal_probe"})

What it cannot do: the detector reads English refusal phrases, so a refusal in other words counts as an answer
(the RM still scores it); the probe knows only the kinds of request its pairs label.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from prefalign.config import build
from prefalign.errors import UserError
from prefalign.files import write_json
from prefalign.models.hub import load_causal_lm, load_tokenizer
from preference_data.records import Conversation, PreferencePair
from preference_data.sources import DataConfig, load_pairs
from preference_data.suite.text import is_refusal
from preference_data.tokenize import tokenize_prompts

from .base import ScorerKind
from .options import RefusalRuleOptions, _device

PROBE_WEIGHTS = "probe.safetensors"
PROBE_CARD = "probe.json"
BATCH_TOKENS = 4096  # prompt tokens per forward pass when reading the states


@dataclass(frozen=True)
class ProbeCard:
    """What a saved probe was fitted on and how it reads a prompt (probe.json)."""

    model: str
    dtype: str
    l2: float
    prompts: int
    refuse: int  # prompts labelled "deserves a refusal"
    train_accuracy: float
    conflicting: int  # prompts whose pairs disagree (some chosen answers decline, some do not): labelled 1
    data: str = ""  # the pairs file it was fitted on, and its sha256 (`probe_for` refits when either changes)
    data_sha256: str = ""
    pooling: str = "mean of the final layer's states over the prompt's tokens (the generation prompt included)"


@dataclass
class RefusalProbe:
    card: ProbeCard
    weight: torch.Tensor  # (H,)
    bias: torch.Tensor  # ()
    mean: torch.Tensor  # (H,) feature standardisation, from the fitted prompts
    std: torch.Tensor  # (H,)

    def probability(self, states: torch.Tensor) -> torch.Tensor:
        """P(the request deserves a refusal) for prompt states (N, H)."""
        z = ((states - self.mean) / self.std) @ self.weight + self.bias
        return torch.sigmoid(z)


@torch.no_grad()
def prompt_states(model: Any, tokenizer: Any, prompts: Sequence[Conversation]) -> torch.Tensor:
    """(N, H): each prompt's final-layer states averaged over its tokens, in input order. Prompts are batched by
    length (right-padded, the padding masked out of the mean), so the batch does not change a prompt's states
    beyond float rounding."""
    ids = tokenize_prompts(prompts, tokenizer)
    order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))
    hidden = model.config.hidden_size
    out = torch.zeros(len(ids), hidden, dtype=torch.float32)
    i = 0
    while i < len(order):
        width = len(ids[order[i]])
        batch = order[i : i + max(1, BATCH_TOKENS // max(width, 1))]
        x = torch.zeros(len(batch), width, dtype=torch.long)
        mask = torch.zeros(len(batch), width, dtype=torch.long)
        for row, j in enumerate(batch):
            x[row, : len(ids[j])] = torch.tensor(ids[j])
            mask[row, : len(ids[j])] = 1
        # the decoder alone: its last state is the causal LM's final hidden state, without the vocabulary projection
        x, mask = x.to(model.device), mask.to(model.device)
        h = model.get_decoder()(input_ids=x, attention_mask=mask).last_hidden_state.float()
        m = mask.unsqueeze(-1).float()
        out[batch] = ((h * m).sum(1) / m.sum(1)).cpu()
        i += len(batch)
    return out


def _prompt_key(prompt: Conversation) -> str:
    return json.dumps([m.to_dict() for m in prompt])


def refusal_labels(pairs: Sequence[PreferencePair]) -> tuple[list[Conversation], list[int], int]:
    """Each distinct prompt once, labelled 1 when a pair's chosen answer declines (the data says the request
    deserves a refusal), else 0; and how many prompts had pairs that disagree (labelled 1)."""
    seen: dict[str, tuple[Conversation, list[int]]] = {}
    for p in pairs:
        text = p.chosen[-1].content if p.chosen else ""
        seen.setdefault(_prompt_key(p.prompt), (p.prompt, []))[1].append(int(is_refusal(text)))
    prompts = [c for c, _ in seen.values()]
    labels = [max(v) for _, v in seen.values()]
    conflicting = sum(1 for _, v in seen.values() if 0 < sum(v) < len(v))
    return prompts, labels, conflicting


def fit_probe(states: torch.Tensor, labels: torch.Tensor, l2: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Weighted logistic regression (the classes balanced) with an L2 penalty on standardised states, by L-BFGS
    from zero: deterministic for the same states. Returns (weight, bias)."""
    pos = float(labels.sum())
    neg = float(len(labels)) - pos
    if pos == 0 or neg == 0:
        raise UserError(
            f"the refusal probe needs prompts of both kinds; the pairs give {int(pos)} whose chosen answer "
            f"declines and {int(neg)} whose does not. Fit it on pairs that include refusals of harmful requests "
            "(the chosen side declines) and answers to other requests"
        )
    w = torch.zeros(states.shape[1], dtype=torch.float64, requires_grad=True)
    b = torch.zeros((), dtype=torch.float64, requires_grad=True)
    x = states.double()
    y = labels.double()
    opt = torch.optim.LBFGS([w, b], max_iter=500, line_search_fn="strong_wolfe")
    pos_weight = torch.tensor(neg / pos, dtype=torch.float64)

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(x @ w + b, y, pos_weight=pos_weight)
        loss = loss + l2 * (w * w).sum()
        loss.backward()
        return loss

    opt.step(closure)
    return w.detach().float(), b.detach().float()


def fit_refusal_probe(
    model: str,
    pairs: Sequence[PreferencePair],
    l2: float = 0.01,
    dtype: str = "float32",
    data: str = "",
    device: str = "auto",
) -> RefusalProbe:
    """Fit the request probe on the prompts of `pairs` with `model`'s frozen states (see the module docstring),
    the model reading them on `device` (auto: the first GPU where one is visible)."""
    prompts, labels, conflicting = refusal_labels(pairs)
    lm = load_causal_lm(model, dtype).to(_device(device))
    states = prompt_states(lm, load_tokenizer(model), prompts)
    mean = states.mean(0)
    std = states.std(0) + 1e-6
    y = torch.tensor(labels, dtype=torch.float32)
    x = (states - mean) / std
    weight, bias = fit_probe(x, y, l2)
    fitted = torch.sigmoid(x @ weight + bias) >= 0.5
    card = ProbeCard(
        model=model,
        dtype=dtype,
        l2=l2,
        prompts=len(prompts),
        refuse=sum(labels),
        train_accuracy=float((fitted.float() == y).float().mean()),
        conflicting=conflicting,
        data=data,
        data_sha256=file_sha256(data) if data else "",
    )
    return RefusalProbe(card, weight, bias, mean, std)


def save_refusal_probe(probe: RefusalProbe, out_dir: str | Path) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tensors = {"weight": probe.weight, "bias": probe.bias.reshape(1), "mean": probe.mean, "std": probe.std}
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(out / PROBE_WEIGHTS))
    write_json(out / PROBE_CARD, asdict(probe.card), indent=2)
    return out


def file_sha256(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def probe_for(model: str, data: str, out_dir: str | Path, l2: float = 0.01) -> tuple[Path, ProbeCard, bool]:
    """The probe fitted with `model` on the pairs file `data`, in `out_dir`: the one there when it was fitted on
    the same model, l2 and file contents, else fitted now and saved. Returns (directory, card, fitted now)."""
    out = Path(out_dir)
    if (out / PROBE_CARD).is_file() and (out / PROBE_WEIGHTS).is_file():
        card = load_refusal_probe(out).card
        if (card.model, card.l2, card.data_sha256) == (model, l2, file_sha256(data)):
            return out, card, False
    pairs, _ = load_pairs(build(DataConfig, {"source": data, "split": "all"}, "refusal probe data"))
    probe = fit_refusal_probe(model, pairs, l2=l2, data=data)
    return save_refusal_probe(probe, out), probe.card, True


def load_refusal_probe(path: str | Path) -> RefusalProbe:
    p = Path(path).expanduser()
    if not (p / PROBE_WEIGHTS).is_file() or not (p / PROBE_CARD).is_file():
        raise UserError(
            f"probe: {p} holds no refusal probe ({PROBE_WEIGHTS} and {PROBE_CARD}); fit one with "
            "`align rm refusal-probe --model MODEL --data PAIRS --out DIR`"
        )
    t = load_file(str(p / PROBE_WEIGHTS))
    card = ProbeCard(**json.loads((p / PROBE_CARD).read_text(encoding="utf-8")))
    return RefusalProbe(card, t["weight"], t["bias"][0], t["mean"], t["std"])


# --- the scorer ----------------------------------------------------------------------------------------------------


class RefusalRuleScorer:
    """Pointwise: 1 when the response's refusal decision is the one the request probe asks for, else 0."""

    kind: ScorerKind = "pointwise"
    name = "refusal_rule"

    def __init__(self, opts: RefusalRuleOptions) -> None:
        self.opts = opts
        self.probe = load_refusal_probe(opts.probe)
        self.model = load_causal_lm(self.probe.card.model, opts.dtype).to(_device(opts.device))
        self.tokenizer = load_tokenizer(self.probe.card.model)
        self.failures: Counter[str] = Counter()
        self.cache: dict[str, float] = {}  # P(refuse) per prompt: a round scores each prompt's K answers

    def refuse_probability(self, prompts: Sequence[Conversation]) -> list[float]:
        keys = [_prompt_key(c) for c in prompts]
        todo = {k: c for k, c in zip(keys, prompts, strict=True) if k not in self.cache}
        if todo:
            states = prompt_states(self.model, self.tokenizer, list(todo.values()))
            for k, p in zip(todo, self.probe.probability(states).tolist(), strict=True):
                self.cache[k] = p
        return [self.cache[k] for k in keys]

    def score(self, prompts: list[Conversation], responses: list[Conversation]) -> list[float]:
        probs = self.refuse_probability(prompts)
        out = []
        for p, response in zip(probs, responses, strict=True):
            text = response[-1].content if response else ""
            out.append(1.0 if is_refusal(text) == (p >= self.opts.threshold) else 0.0)
        return out

    def describe(self) -> dict[str, Any]:
        return {
            "probe": self.opts.probe,
            "probe_sha256": file_sha256(Path(self.opts.probe) / PROBE_WEIGHTS),
            "model": self.probe.card.model,
            "threshold": self.opts.threshold,
            "dtype": self.opts.dtype,
        }
