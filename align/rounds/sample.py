"""A round's prompts and samples: the slice of the prompts a round draws, the one generation engine every round
decodes with, the samples (cached with what they depend on) and the candidates the reward ranks (`Pool`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from prefalign.files import write_json
from prefalign.generation import make_engine
from prefalign.models.hub import load_model, load_tokenizer, weights_fingerprint
from prefalign.models.precision import decide_precision
from prefalign.stats import stream_seed
from preference_data.records import PromptOnly

from ..online.rollout import Rollout, draw
from .config import DATA_CANDIDATES, IterativeConfig


def round_prompts(prompts: list[PromptOnly], t: int, n: int) -> list[PromptOnly]:
    """Round t's (1-based) slice of the shuffled prompts, wrapping when they run out."""
    start = ((t - 1) * n) % len(prompts)
    return [prompts[(start + i) % len(prompts)] for i in range(n)]


@dataclass
class RoundEngine:
    """One generation engine for every round: round t's policy is loaded and copied into the engine's model in
    place (`sync_weights`), so what the engine built for its model (on the static path, a decode step compiled and
    captured per batch bucket) is built in round 1 and serves every round."""

    cfg: IterativeConfig
    engine: Any = None

    def on(self, policy: str) -> Any:
        """The engine decoding with `policy`'s weights (bf16 where the training precision is)."""
        bf16 = decide_precision(self.cfg.train.precision).value != "fp32"
        # an adapter (the quickstart's offline-DPO warm start) merged: unmerged LoRA layers decode at half the speed
        model = load_model(policy, dtype="bfloat16" if bf16 else "float32", merge=True)
        if self.engine is None:
            r = self.cfg.rounds
            self.engine = make_engine(
                model, load_tokenizer(policy), max_rows=r.max_rows, token_budget=r.token_budget, static=r.static
            )
        else:
            self.engine.sync_weights(model)
        return self.engine


def sample_key(cfg: IterativeConfig, policy: str, prompts: list[PromptOnly], t: int) -> dict[str, Any]:
    """What round t's samples depend on: the policy (path and weights' fingerprint), the prompts, the sampling."""
    r = cfg.rounds
    sampling: list[Any] = [r.samples_per_prompt, r.temperature, r.top_p, r.top_k, r.max_new_tokens, r.seed, t]
    if r.greedy_sample:  # an older cache (no greedy answer) keeps its key
        sampling.append("greedy")
    return {
        "policy": policy,
        "weights": weights_fingerprint(policy),
        "prompts": [p.id for p in prompts],
        "sampling": sampling,
    }


def sample_round(
    cfg: IterativeConfig, policy: str, prompts: list[PromptOnly], t: int, path: Path, engines: RoundEngine | None = None
) -> tuple[Rollout, dict[str, Any]]:
    """K completions per prompt from `policy` (the rollout phase) and their cache key: cached in `path` and reused
    only for the same policy (its path and its weights' fingerprint: a round retrained with other settings into the
    same directory is sampled again), prompts and sampling settings."""
    r = cfg.rounds
    key = sample_key(cfg, policy, prompts, t)
    if path.exists():
        cached = json.loads(path.read_text(encoding="utf-8"))
        if cached.get("key") == key:
            return Rollout.from_json(cached["rollout"]), key
    engine = (engines or RoundEngine(cfg)).on(policy)
    sampled = r.params(r.samples_per_prompt - r.greedy_sample, stream_seed(r.seed, t))
    greedy = replace(sampled, n=1, temperature=0.0) if r.greedy_sample else None
    if greedy is not None and sampled.n == 0:  # K = 1: the greedy answer alone
        sampled, greedy = greedy, None
    rollout = draw(engine, prompts, [p.prompt for p in prompts], sampled, t, progress=True, also=greedy)
    n, secs = len(rollout.texts), max(rollout.seconds, 1e-9)
    print(
        f"round {t}: sampled {n} answers in {secs:.1f}s ({n / secs:.1f} answers/s, "
        f"{rollout.generated_tokens / secs:.0f} tokens/s)",
        flush=True,
    )
    write_json(path, {"key": key, "rollout": rollout.to_json()})
    return rollout, key


@dataclass
class Pool:
    """Each prompt's candidates the reward ranks: its K samples, then (with `policy_and_reference`) its reference,
    then (with `policy_and_data`) the data's rejected answer."""

    prompts: list[PromptOnly]
    texts: list[list[str]]  # (P, K + the data's answers the prompt has)
    lengths: list[list[int]]  # completion tokens of each candidate
    origins: list[list[str]]  # each candidate's origin: "policy" (sampled by π_t), or the meta key it came from

    @property
    def on_policy(self) -> list[list[bool]]:
        return [[o == "policy" for o in row] for row in self.origins]


def candidate_pool(cfg: IterativeConfig, rollout: Rollout, tokenizer: Any) -> Pool:
    G = rollout.group_size
    texts, lengths, origins = [], [], []
    for i, (p, group) in enumerate(zip(rollout.prompts, rollout.groups(), strict=True)):
        texts.append(list(group))
        lengths.append([len(ids) for ids in rollout.token_ids[i * G : (i + 1) * G]])
        origins.append(["policy"] * G)
        for key in DATA_CANDIDATES[cfg.rounds.candidates]:
            text = p.meta.get(key)
            if isinstance(text, str) and text.strip():
                texts[-1].append(text)
                lengths[-1].append(len(tokenizer(text, add_special_tokens=False)["input_ids"]))
                origins[-1].append(key)
    return Pool(rollout.prompts, texts, lengths, origins)


__all__ = ["Pool", "RoundEngine", "candidate_pool", "round_prompts", "sample_key", "sample_round"]
