"""The over-optimization harness's machinery: its settings, the proxy, the cache, the policies (the initial one
and an online run's checkpoints), and the job that draws, scores and measures their samples. The phases are the
online stage's: the generation engine samples, the per-token log-probs come from `align.online.logps`, checkpoints
are `align.online.state`'s."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from prefalign.config import load
from prefalign.errors import ConfigError, UserError
from prefalign.files import write_json
from prefalign.generation import make_engine
from prefalign.models.forward import PackedForward, layout_for
from prefalign.models.hub import load_model, load_tokenizer, looks_local, pad_token_id, weights_fingerprint
from prefalign.models.precision import default_device
from prefalign.stats import stream_seed
from prefalign.training.trainer import prepare_model
from preference_data.records import Message, PromptOnly
from preference_data.suite import grade_prompt_only
from reward_models.scorers import SCORERS, load_scorer, scorer_spec

from ..online.config import OnlineConfig
from ..online.logps import Seq, micro_batches, per_token_logps
from ..online.state import STATE_FILE
from .estimate import Scored
from .settings import OveroptSettings


def _hash(obj: Any) -> str:
    return hashlib.sha1(json.dumps(obj, sort_keys=True, default=str).encode("utf-8")).hexdigest()[:12]


# --- the proxy -------------------------------------------------------------------------------------------


def proxy_spec(text: str | None, run_cfg: Any | None = None) -> dict[str, Any]:
    """The proxy as a scorer spec, written as everywhere (`scorer_spec`: a reward-model directory, KIND:MODEL, an
    inline mapping `{type: scalar, model: DIR}`), or, without --proxy, the one model-based reward of the online
    run."""
    if text is None:
        comps = [s for s in (run_cfg.reward if run_cfg is not None else []) if s.get("type") != "grader"]
        if len(comps) != 1:
            raise UserError(
                "--proxy is missing: give the proxy reward model the policy was optimized against, e.g. "
                "--proxy runs/rm_suite/model (train one with `align rm train --config configs/rm_suite.yaml`)"
                + ("" if run_cfg is None else f"; the run's reward has {len(comps)} non-gold components")
            )
        spec = {k: v for k, v in comps[0].items() if k not in ("weight", "name")}
    else:
        model = text.partition(":")[2] if text.partition(":")[0] in SCORERS else text
        if not text.lstrip().startswith("{") and looks_local(model) and not Path(model).expanduser().exists():
            raise UserError(
                f"--proxy {text}: no such reward model directory; train one with "
                "`align rm train --config configs/rm_suite.yaml` (it writes runs/rm_suite/model)"
            )
        spec = scorer_spec(text, flag="--proxy")
    kind = spec["type"]
    if kind not in SCORERS:
        raise UserError(f"--proxy: unknown scorer type '{kind}'; one of {', '.join(SCORERS.names())}")
    if SCORERS[kind].kind != "pointwise":
        raise UserError(f"--proxy: a '{kind}' scorer is {SCORERS[kind].kind}; best-of-n needs a pointwise score")
    for key in ("model", "reference"):
        ref = spec.get(key)
        if isinstance(ref, str) and looks_local(ref) and not Path(ref).expanduser().exists():
            raise UserError(f"--proxy: {key} {ref} does not exist")
    return spec


def proxy_description(spec: dict[str, Any]) -> dict[str, Any]:
    """What changes the proxy's scores, without loading it: the spec and its models' weight fingerprints."""
    out: dict[str, Any] = {"spec": spec}
    for key in ("model", "reference", "meta_model"):
        if isinstance(spec.get(key), str):
            out[f"{key}_weights"] = weights_fingerprint(spec[key])
    return out


# --- the cache -------------------------------------------------------------------------------------------


class Cache:
    """Samples, proxy scores and log-ratios under OUT/cache/, each file keyed by what its values depend on."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def samples(self, policy_key: str) -> dict[tuple[str, int], dict[str, Any]]:
        path = self.root / f"samples-{policy_key}.jsonl"
        out: dict[tuple[str, int], dict[str, Any]] = {}
        if path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                if line.strip():  # a line cut by a kill is incomplete JSON only at the end
                    try:
                        row = json.loads(line)
                    except json.JSONDecodeError:
                        continue
                    out[(row["prompt"], row["k"])] = row
        return out

    def add_samples(self, policy_key: str, key: dict[str, Any], rows: list[dict[str, Any]]) -> None:
        write_json(self.root / f"samples-{policy_key}.key.json", key, indent=2)
        with open(self.root / f"samples-{policy_key}.jsonl", "a", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")

    def values(self, name: str) -> dict[str, float | None]:
        path = self.root / f"{name}.json"
        return json.loads(path.read_text(encoding="utf-8"))["values"] if path.exists() else {}

    def put_values(self, name: str, key: dict[str, Any], values: dict[str, float | None]) -> None:
        path = self.root / f"{name}.json"
        write_json(path, {"key": key, "values": values})


# --- the policies ----------------------------------------------------------------------------------------


@dataclass
class Policy:
    """One policy to sample from: the initial model (step 0) or a checkpoint of the online run."""

    label: str
    step: int
    checkpoint: Path | None
    key: str  # the cache key of its samples


@dataclass
class Models:
    """What is loaded, lazily: the sampler (an engine over a plain copy of the initial model) and, for the KL,
    the trainable policy in float32 (a LoRA base shares its weights with pi_init)."""

    model: str
    run_cfg: OnlineConfig | None  # the online run's config, or None without a run
    settings: OveroptSettings
    device: Any = None
    tokenizer: Any = None
    engine: Any = None
    policy: Any = None
    init: Any = None
    loaded_step: int | None = field(default=None)

    def sampler(self) -> Any:
        if self.engine is None:
            self.device = default_device()
            self.tokenizer = load_tokenizer(self.model)
            m = load_model(self.model, self.settings.dtype, merge=True).to(self.device)
            self.engine = make_engine(m, self.tokenizer, token_budget=self.settings.token_budget)
        return self.engine

    def trainable(self) -> Any:
        """The run's policy as it was built for training (LoRA or full), in float32, on the device."""
        if self.policy is None:
            cfg = self.run_cfg
            assert cfg is not None, "a trainable policy needs the online run's config"
            self.sampler()
            base = load_model(cfg.model, dtype="float32", merge=True)
            train = replace(cfg.train, compile=False)
            self.policy = prepare_model(base, train, cfg.lora, "CAUSAL_LM").to(self.device).eval()
            if cfg.train.method != "lora":
                self.init = load_model(cfg.model, dtype="float32", merge=True).to(self.device).eval()
        return self.policy

    def load_checkpoint(self, policy: Policy) -> None:
        if self.loaded_step == policy.step:
            return
        model = self.trainable()
        assert policy.checkpoint is not None
        state = torch.load(policy.checkpoint / STATE_FILE, map_location="cpu", weights_only=False)
        named = dict(model.named_parameters())
        missing = [n for n in state["weights"] if n not in named]
        if missing:
            raise UserError(
                f"{policy.checkpoint}: weights {missing[:3]} are not in the policy built from the run's config "
                "(model, train.method, lora); was the config changed after training?"
            )
        with torch.no_grad():
            for n, t in state["weights"].items():
                named[n].copy_(t)
        self.sampler().sync_weights(model)
        self.loaded_step = policy.step

    def log_ratios(self, samples: list[dict[str, Any]]) -> list[float]:
        """sum_t log pi(y_t) - log pi_init(y_t) of each sample (the k1 terms), at the sampling temperature."""
        model = self.trainable()
        pad = pad_token_id(self.tokenizer)
        layout = layout_for(model)
        seqs = [Seq(s["prompt_ids"], s["ids"], [], None, 0.0) for s in samples]
        out = [0.0] * len(seqs)
        index = {id(s): i for i, s in enumerate(seqs)}
        T = self.settings.temperature
        policy = PackedForward(model, "token_logps", T)
        init = PackedForward(self.init, "token_logps", T) if self.init is not None else None
        with torch.no_grad():
            for mb in micro_batches([s for s in seqs if s.ids], self.settings.batch_size):
                lp = per_token_logps(policy, mb, pad, self.device, layout)
                if init is not None:
                    ref = per_token_logps(init, mb, pad, self.device, layout)
                else:
                    with model.disable_adapter():
                        ref = per_token_logps(policy, mb, pad, self.device, layout)
                diff = (lp.float() - ref.float()).sum(-1)  # (S,) padding is 0 in both
                for s, v in zip(mb, diff.tolist(), strict=True):
                    out[index[id(s)]] = float(v)
        return out


def policy_key(model: str, settings: OveroptSettings, checkpoint: Path | None) -> tuple[str, dict[str, Any]]:
    """The cache key of a policy's samples: the model and its weights, the checkpoint file, the sampling settings."""
    key: dict[str, Any] = {
        "model": model,
        "weights": weights_fingerprint(model),
        "temperature": settings.temperature,
        "top_p": settings.top_p,
        "max_new_tokens": settings.max_new_tokens,
        "seed": settings.seed,
        "dtype": settings.dtype,
    }
    if settings.top_k:  # keys of pools drawn before top-k was a setting stay valid
        key["top_k"] = settings.top_k
    if checkpoint is not None:
        f = checkpoint / STATE_FILE
        st = f.stat()
        key["checkpoint"] = {"path": str(f.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    return _hash(key), key


def find_checkpoints(run_dir: str) -> tuple[OnlineConfig, list[Path]]:
    """The online run's config and its checkpoints (checkpoint-N/online_state.pt), by step."""
    d = Path(run_dir)
    if not (d / "config.yaml").exists():
        raise UserError(f"--run {run_dir}: no config.yaml; give the output_dir of an `align train` run of kind online")
    try:
        cfg = load(OnlineConfig, d / "config.yaml")
    except ConfigError as e:
        raise UserError(f"--run {run_dir}: its config.yaml is not an online run's ({e})") from None
    ckpts = sorted(
        (p for p in (d / "checkpoints").glob("checkpoint-*") if (p / STATE_FILE).exists()),
        key=lambda p: int(p.name.split("-")[1]),
    )
    if not ckpts:
        raise UserError(
            f"--run {run_dir}: no checkpoints (checkpoints/checkpoint-N/online_state.pt); train with "
            "train.save_every > 0 and keep_checkpoints: 0 (keep all), e.g. configs/grpo_proxy_suite.yaml"
        )
    return cfg, ckpts


# --- the job ---------------------------------------------------------------------------------------------


class Overopt:
    def __init__(
        self, prompts: list[PromptOnly], proxy: dict[str, Any], models: Models, cache: Cache, s: OveroptSettings
    ) -> None:
        self.prompts, self.proxy_spec, self.models, self.cache, self.s = prompts, proxy, models, cache, s
        self.proxy_desc = proxy_description(proxy)
        self.proxy_key = _hash(self.proxy_desc)
        self._scorer: Any = None
        self.drawn = 0  # samples generated in this run (the rest came from the cache)
        self.scored = 0  # proxy scores computed in this run
        self.gold_errors: dict[str, int] = {}

    def scorer(self) -> Any:
        if self._scorer is None:
            self._scorer = load_scorer(self.proxy_spec)
        return self._scorer

    def draw(self, policy: Policy, count: int, key: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
        """Samples 0..count-1 of every prompt from `policy`, drawing only those not cached."""
        have = self.cache.samples(policy.key)
        todo = [(p, k) for p in self.prompts for k in range(count) if (p.id, k) not in have]
        if todo:
            if policy.checkpoint is not None:
                self.models.load_checkpoint(policy)
            engine = self.models.sampler()
            print(f"{policy.label}: drawing {len(todo)} samples ({len(have)} cached)", flush=True)
            per_chunk = self.s.chunk_prompts * count
            for c in range(0, len(todo), per_chunk):
                part = todo[c : c + per_chunk]
                params = [self.s.params(1, stream_seed(self.s.seed, k)) for _, k in part]
                res = engine.generate([p.prompt for p, _ in part], params, progress=True)
                rows = []
                for (p, k), out in zip(part, res.outputs, strict=True):
                    comp = out.completions[0]
                    row = {
                        "prompt": p.id,
                        "k": k,
                        "prompt_ids": out.prompt_ids,
                        "ids": comp.token_ids,
                        "text": comp.text,
                        "finish": comp.finish_reason,
                    }
                    rows.append(row)
                    have[(p.id, k)] = row
                self.cache.add_samples(policy.key, key, rows)
                self.drawn += len(rows)
        return {p.id: [have[(p.id, k)] for k in range(count)] for p in self.prompts}

    def score(self, policy: Policy, samples: dict[str, list[dict[str, Any]]], kl: bool) -> Scored:
        name = f"proxy-{self.proxy_key}"
        cached = self.cache.values(name)
        tag = {p.id: f"{policy.key}:{p.id}" for p in self.prompts}
        todo = [
            (p, k, s) for p in self.prompts for k, s in enumerate(samples[p.id]) if f"{tag[p.id]}:{k}" not in cached
        ]
        if todo:
            print(f"{policy.label}: scoring {len(todo)} samples with the proxy", flush=True)
            values = self.scorer().score(
                [p.prompt for p, _, _ in todo], [[Message("assistant", s["text"])] for *_, s in todo]
            )
            for (p, k, _), v in zip(todo, values, strict=True):
                v = float(v) if v is not None else math.nan
                cached[f"{tag[p.id]}:{k}"] = v if math.isfinite(v) else None
            self.cache.put_values(name, self.proxy_desc, cached)
            self.scored += len(todo)
        out = Scored({}, {})
        for p in self.prompts:
            rows = samples[p.id]
            out.proxy[p.id] = [
                math.nan if (v := cached[f"{tag[p.id]}:{k}"]) is None else float(v) for k in range(len(rows))
            ]
            golds = []
            for s in rows:
                try:
                    golds.append(float(grade_prompt_only(p, s["text"]).overall))
                except Exception as e:  # a grader bug on one sample: NaN, counted and reported
                    key = type(e).__name__
                    self.gold_errors[key] = self.gold_errors.get(key, 0) + 1
                    golds.append(math.nan)
            out.gold[p.id] = golds
            out.lengths[p.id] = [len(s["ids"]) for s in rows]
        if kl:
            out.log_ratio = self.log_ratios(policy, samples)
        return out

    def log_ratios(self, policy: Policy, samples: dict[str, list[dict[str, Any]]]) -> dict[str, list[float]]:
        name = f"logratio-{policy.key}"
        cached = self.cache.values(name)
        todo = [(p.id, k, s) for p in self.prompts for k, s in enumerate(samples[p.id]) if f"{p.id}:{k}" not in cached]
        if todo:
            self.models.load_checkpoint(policy)
            print(f"{policy.label}: log-ratios of {len(todo)} samples for the KL", flush=True)
            values = self.models.log_ratios([s for *_, s in todo])
            for (pid, k, _), v in zip(todo, values, strict=True):
                cached[f"{pid}:{k}"] = v
            self.cache.put_values(name, {"policy": policy.key, "temperature": self.s.temperature}, cached)
        return {p.id: [_float(cached[f"{p.id}:{k}"]) for k in range(len(samples[p.id]))] for p in self.prompts}


def _float(v: float | None) -> float:
    return math.nan if v is None else float(v)


__all__ = ["Cache", "Models", "Overopt", "OveroptSettings", "Policy", "find_checkpoints", "policy_key", "proxy_spec"]
