"""The rollout phase: this step's prompts, G sampled completions of each from the generation engine, as a `Rollout`.

Rows are completions, prompt-major: sample j of prompt i is row i*G + j (S = P·G). Sampling is seeded per step and
per sample (`prefalign.stats.stream_seed`), so a step draws the same completions whatever ran before it, and a
resumed run redraws nothing it cached. With DPA (`composition.aggregate: dpa`) each prompt gets a direction θ that
goes into a system message first (`conditioned`); with PAR, M responses of the initial policy per prompt are drawn
by a sampler that is never synced (`reference_texts`).
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass, replace
from typing import Any

import torch

from prefalign.errors import UserError
from prefalign.generation import GenerationEngine, SamplingParams, make_engine
from prefalign.models.hub import load_model
from prefalign.stats import stream_seed
from preference_data.records import Conversation, Message, PreferencePair, PromptOnly, RatedResponses
from preference_data.sources import read_records
from preference_data.suite import build_suite, prompt_only_from_dict
from reward_models.composition import dpa_system_prompt

from ..judge_rl import judge_prompts
from .config import PromptsSection, RolloutSection

ROLLOUT_VERSION = 2  # the cached rollouts' format (rollouts/step_*.json)
PAR_STREAM = 500_009  # PAR's reference samples draw from streams PAR_STREAM + step, apart from the rollout's


@dataclass
class Rollout:
    """G completions of each of P prompts, drawn by one rank at one step (rows prompt-major, S = P·G)."""

    step: int
    prompts: list[PromptOnly]  # (P,)
    group_size: int  # G
    prompt_ids: list[list[int]]  # (P,) the rendered prompt tokens (with a DPA system message when conditioned)
    texts: list[str]  # (S,)
    token_ids: list[list[int]]  # (S,)
    logprobs: list[list[float]]  # (S,) per token, the sampling distribution's (π_old of the ratio)
    finish: list[str]  # (S,) eos | length | stop
    directions: list[float] | None = None  # (P,) DPA θ in radians
    reference: bool = False  # the last row of each group is the prompt's reference response, not a sample
    weight_version: int = 0  # the sampler's weights version
    seconds: float = 0.0
    generated_tokens: int = 0

    @property
    def size(self) -> int:
        return len(self.texts)

    def records(self) -> list[PromptOnly]:
        """(S,) the prompt record of each completion."""
        return [p for p in self.prompts for _ in range(self.group_size)]

    def groups(self) -> list[list[str]]:
        """(P, G) the completions of each prompt."""
        G = self.group_size
        return [self.texts[i * G : (i + 1) * G] for i in range(len(self.prompts))]

    def completion_prompt_ids(self) -> list[list[int]]:
        """(S,) each completion's prompt tokens."""
        return [ids for ids in self.prompt_ids for _ in range(self.group_size)]

    def reference_rows(self) -> list[int]:
        """The rows that hold a prompt's reference response (none unless `reference`)."""
        G = self.group_size
        return [i * G + G - 1 for i in range(len(self.prompts))] if self.reference else []

    def sampled_rows(self) -> list[int]:
        """The rows the policy sampled."""
        refs = set(self.reference_rows())
        return [i for i in range(self.size) if i not in refs]

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["prompts"] = [p.to_dict() for p in self.prompts]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Rollout:
        return cls(**{**data, "prompts": [prompt_only_from_dict(p) for p in data["prompts"]]})


# --- prompts -----------------------------------------------------------------------------------------------------


def load_train_prompts(p: PromptsSection) -> list[PromptOnly]:
    """The training prompts `p` names (the suite's, a prompt file's, or judge prompts), shuffled by `p.seed`."""
    if p.judge != "none":
        prompts = judge_prompts(p.source, p.judge, p.judge_form, p.seed)
    elif p.source == "suite":
        prompts = list(build_suite(seed=p.seed).train_prompts)
    else:  # prompt rows, or the prompts of a preference data file (each distinct prompt once)
        records, _ = read_records(p.source)
        prompts = [r for r in records if isinstance(r, PromptOnly)]
        seen = {q.id for q in prompts}
        for r in records:
            if isinstance(r, (PreferencePair, RatedResponses)):
                q = PromptOnly(prompt=r.prompt, source=r.source)
                if q.id not in seen:  # the id is the prompt's alone; the first pair of a prompt gives its answers
                    seen.add(q.id)
                    q.meta.update(pair_answers(r))
                    prompts.append(q)
    if not prompts:
        raise UserError(f"prompts.source {p.source}: no prompts found")
    random.Random(p.seed).shuffle(prompts)
    return prompts[: p.limit] if p.limit else prompts


def pair_answers(r: PreferencePair | RatedResponses) -> dict[str, str]:
    """A preference pair's answers as a prompt record's `meta` (`reference`: the chosen answer, `rejected`: the
    rejected one), so `candidates: policy_and_reference` / `policy_and_data` rank them beside the policy's samples;
    only one-message answers qualify (a multi-turn answer is no single candidate), and rated responses give none."""
    if not isinstance(r, PreferencePair):
        return {}
    one = [m[0].content for m in (r.chosen, r.rejected) if len(m) == 1 and m[0].role == "assistant"]
    return {"reference": one[0], "rejected": one[1]} if len(one) == 2 else {}


def prompts_for_step(prompts: list[PromptOnly], step: int, per_step: int) -> list[PromptOnly]:
    """The step's prompts: consecutive slices of the (shuffled) prompt list, wrapping around."""
    start = (step * per_step) % len(prompts)
    return [prompts[(start + i) % len(prompts)] for i in range(per_step)]


def dpa_directions(seed: int, step: int, rank: int, n: int, angles: list[float]) -> list[float]:
    """DPA: one direction θ (radians) per prompt, uniform in the arc `angles` (degrees), seeded by step and rank."""
    g = torch.Generator().manual_seed(seed * 7_919 + step * 131 + rank)
    lo, hi = (math.radians(a) for a in angles)
    return [lo + (hi - lo) * float(u) for u in torch.rand(n, generator=g, dtype=torch.float64)]


def conditioned(prompts: list[PromptOnly], directions: list[float] | None, names: list[str]) -> list[Conversation]:
    """The conversations sampled from: with DPA directions, each prompt's direction in a system message first."""
    if directions is None:
        return [p.prompt for p in prompts]
    return [
        [Message("system", dpa_system_prompt(names, t)), *[m for m in p.prompt if m.role != "system"]]
        for p, t in zip(prompts, directions, strict=True)
    ]


# --- sampling ------------------------------------------------------------------------------------------------------


def build_sampler(model: str, tokenizer: Any, rollout: RolloutSection, bf16: bool, device: Any) -> GenerationEngine:
    """A generation engine on its own copy of `model` (a peft adapter merged), the rollout's backend and settings."""
    m = load_model(model, dtype="bfloat16" if bf16 else "float32", merge=True).to(device)
    options = (
        {"token_budget": rollout.token_budget, "static": rollout.static} if rollout.backend == "transformers" else {}
    )
    return make_engine(m, tokenizer, rollout.backend, **options)


def draw(
    engine: GenerationEngine,
    prompts: list[PromptOnly],
    conversations: list[Conversation],
    params: SamplingParams,
    step: int,
    directions: list[float] | None = None,
    progress: bool = False,
    also: SamplingParams | None = None,
) -> Rollout:
    """`params.n` completions of each prompt (sampled from `conversations`, the prompts as the policy sees them);
    `also`: `also.n` more of each at other settings (e.g. one greedy answer), after them in its group, decoded in
    the same batches; `progress`: a progress bar (samples done, rate, time left)."""
    P = len(conversations)
    plist = [params] * P + ([also] * P if also is not None else [])
    result = engine.generate(
        [*conversations, *conversations] if also is not None else conversations, plist, progress=progress
    )
    outs = result.outputs
    groups = [outs[i].completions + (outs[P + i].completions if also is not None else []) for i in range(P)]
    done = [c for g in groups for c in g]
    return Rollout(
        step=step,
        prompts=prompts,
        group_size=params.n + (also.n if also is not None else 0),
        prompt_ids=[out.prompt_ids for out in outs[:P]],
        texts=[c.text for c in done],
        token_ids=[c.token_ids for c in done],
        logprobs=[c.logprobs for c in done],
        finish=[c.finish_reason for c in done],
        directions=directions,
        weight_version=result.weight_version,
        seconds=result.timings.total_s,
        generated_tokens=result.timings.generated_tokens,
    )


def draw_step(
    engine: GenerationEngine,
    prompts: list[PromptOnly],
    rollout: RolloutSection,
    step: int,
    directions: list[float] | None = None,
    dpa_names: list[str] | None = None,
) -> Rollout:
    """One step's rollout: `rollout.group_size` samples per prompt from stream `step` of `rollout.seed`."""
    params = rollout.params(rollout.group_size, stream_seed(rollout.seed, step))
    return draw(engine, prompts, conditioned(prompts, directions, dpa_names or []), params, step, directions)


def with_references(rollout: Rollout, tokenizer: Any, max_new_tokens: int) -> Rollout:
    """`rollout` with each prompt's reference response (`meta.reference`) as one more member of its group, after its
    samples (G + 1 rows a prompt). Its tokens are the reference's and the tokenizer's eos, as a sample that ended
    (cut to `max_new_tokens`, "length", like a sample); its log-probs are left empty for the caller: π_old of a row
    nobody sampled is the current policy's, recomputed (`Learner.frozen(..., "old")`)."""
    G = rollout.group_size
    texts: list[str] = []
    token_ids: list[list[int]] = []
    logprobs: list[list[float]] = []
    finish: list[str] = []
    for i, p in enumerate(rollout.prompts):
        ref = p.meta.get("reference")
        if not isinstance(ref, str) or not ref.strip():
            raise UserError(
                f"prompt {p.id}: no reference response (meta.reference), which rollout.candidates: "
                "policy_and_reference adds to its group; give every training prompt one, or use candidates: policy"
            )
        ids = [*tokenizer.encode(ref, add_special_tokens=False), tokenizer.eos_token_id]
        cut = len(ids) > max_new_tokens
        rows = slice(i * G, (i + 1) * G)
        text = tokenizer.decode(ids[:max_new_tokens], skip_special_tokens=True) if cut else ref
        texts += [*rollout.texts[rows], text]
        token_ids += [*rollout.token_ids[rows], ids[:max_new_tokens]]
        logprobs += [*rollout.logprobs[rows], []]
        finish += [*rollout.finish[rows], "length" if cut else "eos"]
    return replace(
        rollout, group_size=G + 1, texts=texts, token_ids=token_ids, logprobs=logprobs, finish=finish, reference=True
    )


def reference_texts(
    engine: GenerationEngine, prompts: list[PromptOnly], rollout: RolloutSection, m: int, step: int
) -> list[str]:
    """PAR: m responses per prompt from the initial policy's own sampler (never synced), (P·m,) prompt-major."""
    res = engine.generate([p.prompt for p in prompts], rollout.params(m, stream_seed(rollout.seed, PAR_STREAM + step)))
    return [c.text for o in res.outputs for c in o.completions]


__all__ = [
    "ROLLOUT_VERSION",
    "Rollout",
    "build_sampler",
    "conditioned",
    "dpa_directions",
    "draw",
    "draw_step",
    "load_train_prompts",
    "prompts_for_step",
    "reference_texts",
    "with_references",
]
