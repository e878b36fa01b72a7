"""The policy pool: trajectories from several policies on the same prompts, each kept with the policy that
wrote it (POLAR pre-training data, reference `reward-models.md` §3.1).

A policy is a model (builtin, local directory, LoRA adapter saved by an earlier run, or hub id) with a sampling
temperature and an optional system prompt, and optionally a degradation that makes it a deliberately worse
policy:

  none      the model's own samples
  truncate  each sample cut after `truncate_fraction` of its words (an answer that stops early)
  shuffle   each sample's words shuffled, seeded per trajectory (fluent tokens, no sense)
  wrong     the model asked, in its system prompt, for a plausible but wrong answer (WRONG_SYSTEM_PROMPT)

Generation runs through the engine (`prefalign.generation`), each model loaded once for every policy that uses
it. The cache is `pool.jsonl`, one row per trajectory:
{"prompt_id", "prompt": [messages], "policy", "sample", "response", "finish_reason"}; the prompt is the task's
own (a policy's system prompt is part of the policy, not of the task, so the reward model never sees it).
A rerun with `--resume` keeps the policies already complete in the cache and generates only the rest.
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from prefalign.config import dump_yaml, option
from prefalign.errors import UserError
from prefalign.files import write_json, write_jsonl, write_text
from prefalign.models.hub import DEFAULT_MODEL, load_model, load_tokenizer
from prefalign.models.precision import announce, decide_dtype
from preference_data.records import Conversation, Message, conversation, stable_id
from preference_data.suite import build_suite

from .data import POOL_FILE, read_pool

Degradation = Literal["none", "truncate", "shuffle", "wrong"]
WRONG_SYSTEM_PROMPT = (
    "You are playing a quiz game in which you must answer every question incorrectly. Give a plausible but wrong "
    "answer, in the format the question asks for, and do not say that it is wrong."
)


@dataclass
class PolicySpec:
    name: str = option(doc="the policy's name in the cache (unique in the pool)")
    model: str = option(DEFAULT_MODEL, "builtin:<name>, a local directory, a LoRA adapter directory, or a hub id")
    temperature: float = option(0.7, "sampling temperature (0 = greedy: every sample of a prompt is the same)")
    top_p: float = option(1.0, "nucleus sampling mass")
    system_prompt: str | None = option(
        None, "system prompt put before the task's own system turn (the trajectory is stored without it)"
    )
    degradation: Degradation = option("none", "none | truncate | shuffle | wrong (see reward_models/polar/pool.py)")
    truncate_fraction: float = option(0.5, "truncate: fraction of the words kept")

    def check(self) -> list[str]:
        problems = []
        if not self.name.strip():
            problems.append("name: must not be empty")
        if self.temperature < 0:
            problems.append(f"temperature: must be >= 0, got {self.temperature}")
        if not 0 < self.truncate_fraction < 1:
            problems.append(f"truncate_fraction: must lie in (0, 1), got {self.truncate_fraction}")
        return problems


@dataclass
class PromptSection:
    source: str = option("suite", "'suite' (the suite's prompts) or a JSONL file of rows with a `prompt` field")
    split: Literal["train", "test"] = option("train", "suite: which prompts (test prompts are held out for benchmarks)")
    suite_per_family: int = option(200, "suite: tasks generated per family")
    suite_seed: int = option(0, "suite: generator seed")
    limit: int | None = option(None, "use at most N prompts (spread over the families: every k-th prompt)")

    def check(self) -> list[str]:
        return [f"limit: must be positive, got {self.limit}"] if self.limit is not None and self.limit < 1 else []


@dataclass
class PolarPoolConfig:
    kind: Literal["polar_pool"] = option("polar_pool", "config kind (fixed)")
    output_dir: str = option("runs/polar_pool", "where pool.jsonl and report.json are written")
    prompts: PromptSection = option(factory=PromptSection, doc="the prompts every policy answers")
    policies: list[PolicySpec] = option(factory=list, doc="the policies (at least two)")
    samples_per_prompt: int = option(2, "trajectories per policy and prompt (at least 2: reference and positive)")
    max_new_tokens: int = option(96, "longest trajectory in tokens")
    max_prompt_length: int = option(512, "prompt tokens kept (from the right) when generating")
    batch_size: int = option(128, "samples decoded together at most (the engine's max_rows)")
    dtype: Literal["auto", "bfloat16", "float32"] = option("auto", "generation dtype (auto: bf16 where native)")
    seed: int = option(0, "sampling and degradation seed")

    def check(self) -> list[str]:
        problems = []
        names = [p.name for p in self.policies]
        if len(self.policies) < 2:
            problems.append(
                f"policies: a pool needs at least two policies (POLAR contrasts policy A with a different "
                f"policy B), got {len(self.policies)}"
            )
        dup = sorted(n for n, c in Counter(names).items() if c > 1)
        if dup:
            problems.append(f"policies: names must be unique, repeated: {', '.join(dup)}")
        if self.samples_per_prompt < 2:
            problems.append(
                f"samples_per_prompt: must be >= 2 (a reference and a positive from the same policy), "
                f"got {self.samples_per_prompt}"
            )
        for name in ("max_new_tokens", "max_prompt_length", "batch_size"):
            if getattr(self, name) < 1:
                problems.append(f"{name}: must be positive, got {getattr(self, name)}")
        return problems


# --- degradations: real transformations of generated text ----------------------------------------------------


def truncate_text(text: str, fraction: float) -> str:
    """The first `fraction` of the words (at least one word, always fewer than all when there are two or more)."""
    words = text.split()
    if len(words) < 2:
        return text
    keep = min(len(words) - 1, max(1, int(len(words) * fraction)))
    return " ".join(words[:keep])


def shuffle_text(text: str, rng: random.Random) -> str:
    """The words of `text` in a random order (the same order for the same rng state)."""
    words = text.split()
    if len(words) < 2:
        return text
    for _ in range(5):  # a two-word answer shuffles back into itself half the time
        rng.shuffle(words)
        if words != text.split():
            break
    return " ".join(words)


def degrade(policy: PolicySpec, text: str, rng: random.Random) -> str:
    if policy.degradation == "truncate":
        return truncate_text(text, policy.truncate_fraction)
    if policy.degradation == "shuffle":
        return shuffle_text(text, rng)
    return text  # none; wrong changes the prompt, not the text


def policy_prompt(policy: PolicySpec, prompt: Conversation) -> Conversation:
    """What the policy is asked: its system prompt (the wrong-answer instruction for `wrong`) before the task's."""
    extra = [s for s in (policy.system_prompt, WRONG_SYSTEM_PROMPT if policy.degradation == "wrong" else None) if s]
    if not extra:
        return list(prompt)
    if prompt and prompt[0].role == "system":
        return [Message("system", "\n\n".join([*extra, prompt[0].content])), *prompt[1:]]
    return [Message("system", "\n\n".join(extra)), *prompt]


# --- prompts ---------------------------------------------------------------------------------------------------


def load_prompts(cfg: PromptSection) -> list[tuple[str, Conversation]]:
    """(prompt id, prompt) pairs: the suite's prompts of one split, or a file's `prompt` rows."""
    if cfg.source == "suite":
        suite = build_suite(cfg.suite_per_family, cfg.suite_seed)
        records = suite.train_prompts if cfg.split == "train" else suite.test_prompts
        out = [(r.id, list(r.prompt)) for r in records]
    else:
        path = Path(cfg.source).expanduser()
        if not path.exists():
            raise UserError(f"prompts.source: {path} does not exist; use 'suite' or a JSONL file with `prompt` rows")

        out = []
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
            if not line.strip():
                continue
            row = json.loads(line)
            p = row.get("prompt")
            if isinstance(p, str):
                p = [{"role": "user", "content": p}]
            if not isinstance(p, list) or not p:
                raise UserError(f"{path} line {i + 1}: `prompt` must be a string or a list of messages")
            conv = conversation(p)
            out.append((str(row.get("id") or stable_id([m.to_dict() for m in conv])), conv))
    if cfg.limit is not None and len(out) > cfg.limit:
        step = len(out) / cfg.limit  # every k-th prompt, so every family is represented
        out = [out[int(i * step)] for i in range(cfg.limit)]
    if not out:
        raise UserError(f"prompts.source {cfg.source}: no prompts")
    return out


# --- the cache -------------------------------------------------------------------------------------------------


def _append(path: Path, rows: list[dict[str, Any]]) -> None:
    with path.open("a", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def generate_policy(
    policy: PolicySpec, model: Any, tokenizer: Any, prompts: list[tuple[str, Conversation]], cfg: PolarPoolConfig
) -> list[dict[str, Any]]:
    """`samples_per_prompt` trajectories of `policy` for every prompt, degraded as the policy says."""
    from prefalign.generation import SamplingParams, make_engine  # lazy: torch, not needed to validate

    engine = make_engine(model, tokenizer, max_rows=cfg.batch_size)
    params = SamplingParams(
        n=cfg.samples_per_prompt,
        temperature=policy.temperature,
        top_p=policy.top_p,
        max_new_tokens=cfg.max_new_tokens,
        seed=cfg.seed,
    )
    asked = [policy_prompt(policy, p) for _, p in prompts]
    result = engine.generate(asked, params, max_prompt_length=cfg.max_prompt_length, progress=True)
    rows = []
    for (pid, prompt), out in zip(prompts, result.outputs, strict=True):
        for j, c in enumerate(out.completions):
            rng = random.Random(f"polar-pool:{cfg.seed}:{policy.name}:{pid}:{j}")
            rows.append(
                {
                    "prompt_id": pid,
                    "prompt": [m.to_dict() for m in prompt],
                    "policy": policy.name,
                    "sample": j,
                    "response": degrade(policy, c.text.strip(), rng),
                    "finish_reason": c.finish_reason,
                }
            )
    return rows


def run(cfg: PolarPoolConfig, resume: bool = False) -> dict[str, Any]:
    """Generate every policy's trajectories into `output_dir/pool.jsonl`; return (and write) the report."""
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    dump_yaml(cfg, out / "config.yaml")
    cache = out / POOL_FILE
    prompts = load_prompts(cfg.prompts)
    done: set[str] = set()
    if resume and cache.exists():
        counts = Counter(r["policy"] for r in read_pool(cache))
        done = {p.name for p in cfg.policies if counts[p.name] == len(prompts) * cfg.samples_per_prompt}
        keep = [r for r in read_pool(cache) if r["policy"] in done]  # drop a policy that stopped half-way
        write_jsonl(cache, keep, ensure_ascii=False)
    else:
        write_text(cache, "")
    decision = decide_dtype(cfg.dtype, knob="dtype")
    announce("policy pool generation", decision)
    by_model: dict[str, list[PolicySpec]] = defaultdict(list)
    for p in cfg.policies:
        if p.name not in done:
            by_model[p.model].append(p)
    seconds: dict[str, float] = {}
    t_start = time.time()
    for ref, policies in by_model.items():
        model = load_model(ref, decision.value, merge=True)
        tokenizer = load_tokenizer(ref)
        for policy in policies:
            t0 = time.time()
            _append(cache, generate_policy(policy, model, tokenizer, prompts, cfg))
            seconds[policy.name] = round(time.time() - t0, 1)
        del model
    rows = read_pool(cache)
    per_policy: dict[str, Any] = {}
    for p in cfg.policies:
        mine = [r for r in rows if r["policy"] == p.name]
        words = [len(r["response"].split()) for r in mine]
        per_policy[p.name] = {
            "model": p.model,
            "temperature": p.temperature,
            "degradation": p.degradation,
            "trajectories": len(mine),
            "mean_words": round(sum(words) / max(1, len(words)), 2),
            "empty": sum(1 for r in mine if not r["response"].strip()),
            "finish_reasons": dict(Counter(r["finish_reason"] for r in mine)),
            "seconds": seconds.get(p.name, "cached"),
        }
    report = {
        "pool": str(cache),
        "prompts": len(prompts),
        "policies": len(cfg.policies),
        "trajectories": len(rows),
        "samples_per_prompt": cfg.samples_per_prompt,
        "precision": decision.value,
        "per_policy": per_policy,
        "seconds": round(time.time() - t_start, 1),
        "run_report": str(out / "report.json"),
    }
    write_json(out / "report.json", report, indent=2)
    return report


def summary_lines(report: dict[str, Any]) -> list[str]:
    lines = [
        f"policy pool: {report['trajectories']} trajectories from {report['policies']} policies on "
        f"{report['prompts']} prompts ({report['seconds']}s) -> {report['pool']}"
    ]
    for name, p in report["per_policy"].items():
        lines.append(
            f"  {name}: {p['trajectories']} trajectories, {p['mean_words']} words on average, {p['empty']} empty "
            f"({p['degradation']}, T={p['temperature']}, {p['model']})"
        )
    return lines
