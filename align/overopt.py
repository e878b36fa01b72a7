"""`align eval overopt`: reward-model over-optimization, proxy against gold (Gao, Schulman & Hilton 2022).

A proxy reward model (any pointwise scorer, usually a Bradley-Terry RM trained on gold-labelled suite pairs) is
optimized two ways, and the gold graders of the verifiable suite say what the optimization bought:

  best-of-n   ONE pool of N samples per held-out prompt from the initial policy; for every n <= N the unbiased
              estimator (`bon_estimate`) gives the expected proxy and gold score of the sample best-of-n picks by
              proxy, as if BoN_n had been run many times. x-axis: d = sqrt(KL_bon), KL_bon = log n - (n-1)/n, the
              analytic value the paper uses; Beirami et al. (2024) show it is an upper bound on the true KL.
  RL          each saved checkpoint of an online run trained against the proxy (`kind: online`, a
              `{type: scalar, model: PROXY}` reward, `keep_checkpoints: 0`): samples on the same prompts, their
              proxy and gold scores, and KL(pi || pi_init) by Monte Carlo (k1 on the checkpoint's own samples: the
              mean over samples of sum_t log pi(y_t) - log pi_init(y_t); pi_init is the LoRA base with adapters
              disabled, or the run's `model` after full fine-tuning). Step 0 is the initial policy (KL 0).

Scores are gains over the initial policy, so R(0) = 0: BoN subtracts each prompt's n = 1 estimate (the pool mean)
from its n estimate; RL subtracts the step-0 mean. The paper's forms are fitted by least squares; both are linear
in (alpha, beta), so the fit is exact linear least squares without an intercept (`fit_form`):

  best-of-n   R(d) = d (alpha - beta d)       features [d, -d^2]      d* = alpha / (2 beta), R* = alpha^2 / (4 beta)
  RL          R(d) = d (alpha - beta log d)   features [d, -d log d]  d* = exp(alpha / beta - 1), R* = beta d*

(no peak when beta <= 0: the fitted curve keeps rising; a best-of-n fit with beta > 0 and alpha <= 0 only falls on
d >= 0, so its peak is d* = 0, R* = 0). Sampling is seeded per sample: sample k of a prompt is
drawn with seed `sample_seed(seed, k)` as its own request (the engine still prefills each prompt once, since
requests with the same prompt share a unit), so it is the same sample whatever N is, and raising N draws only
samples N_old .. N-1. The checkpoints draw with the same seeds (common random numbers: a change between
checkpoints is the policy's, not the sampler's noise); their first `rl_samples` samples of the initial policy are
the pool's first samples.

Caching (under OUT/cache/): samples per policy (model, weights fingerprint or checkpoint file, sampling settings)
keyed by prompt id and sample index; proxy scores per scorer description (spec and weights fingerprint); per-sample
log-ratios per checkpoint. A rerun with more prompts, a larger N or new checkpoints computes only what is missing.

A sample whose proxy score is NaN (the scorer failed on it) or whose gold grader raised is left out and counted,
never read as 0: BoN uses the prompt's remaining pool (a prompt with fewer than n valid samples is left out of
that n and counted), RL averages over the valid samples.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from prefalign.errors import UserError
from preference_data.records import PromptOnly

# ------------------------------------------------------------------------------------------ the math


def bon_ns(N: int) -> list[int]:
    """The reported n: powers of two up to N, and N. E.g. bon_ns(48) = [1, 2, 4, 8, 16, 32, 48]."""
    ns = [1 << i for i in range(N.bit_length()) if 1 << i <= N]
    return ns if ns[-1] == N else [*ns, N]


def kl_bon(n: int) -> float:
    """KL_bon = log n - (n - 1) / n (Stiennon et al. 2020; Gao et al. 2022), an upper bound on KL(BoN_n || pi)
    (Beirami et al. 2024). kl_bon(1) = 0, kl_bon(2) = log 2 - 1/2 = 0.1931."""
    return math.log(n) - (n - 1) / n


def bon_weights(N: int, n: int) -> list[float]:
    """Weight of the i-th smallest of N pooled samples (i = 1..N) in E[best-of-n]: C(i-1, n-1) / C(N, n), the
    probability that a uniformly drawn n-subset has sample i as its largest. Sums to 1; zero for i < n."""
    total = math.comb(N, n)
    return [math.comb(i - 1, n - 1) / total for i in range(1, N + 1)]


def bon_estimate(proxy: Sequence[float], gold: Sequence[float], n: int) -> tuple[float, float]:
    """(E[proxy], E[gold]) of the sample best-of-n picks by proxy, n drawn without replacement from the pool.

    The unbiased estimator of Gao et al. (2022, appendix): sort the pool by proxy ascending and weight the i-th
    by C(i-1, n-1) / C(N, n). Ties in proxy are broken uniformly at random: a group of tied samples occupying
    sorted positions a..b shares the weights of those positions equally (each member gets their mean), which is
    the average of the estimator over every order of the tied samples, and equals the expectation when best-of-n
    picks uniformly among its tied maxima. E.g. proxy [1, 2, 2], gold [0, 1, 0], n = 2: the subsets {1,2}, {1,2'},
    {2,2'} pick gold 1, 0 and (1 + 0) / 2, so E[gold] = 0.5; the weights (0, 1/3, 2/3) averaged over the tie give
    (0, 1/2, 1/2) and the same 0.5.
    """
    N = len(proxy)
    if not 1 <= n <= N or len(gold) != N:
        raise ValueError(f"best-of-{n} needs 1 <= n <= pool size ({N}) and one gold score per sample")
    order = sorted(range(N), key=lambda i: proxy[i])
    w = bon_weights(N, n)
    shared = [0.0] * N
    a = 0
    while a < N:
        b = a
        while b + 1 < N and proxy[order[b + 1]] == proxy[order[a]]:
            b += 1
        mean_w = sum(w[a : b + 1]) / (b - a + 1)
        for pos in range(a, b + 1):
            shared[pos] = mean_w
        a = b + 1
    e_proxy = sum(shared[pos] * proxy[i] for pos, i in enumerate(order))
    e_gold = sum(shared[pos] * gold[i] for pos, i in enumerate(order))
    return e_proxy, e_gold


FORMS: dict[str, str] = {
    "bon": "R(d) = d (alpha - beta d)",
    "rl": "R(d) = d (alpha - beta log d)",
}


@dataclass
class Fit:
    """A least-squares fit of one functional form to (d, gain) points."""

    form: str  # a key of FORMS
    alpha: float
    beta: float
    r2: float | None  # 1 - SS_res / SS_tot (SS_tot about the mean gain); None when every gain is equal
    d_star: float | None  # where the fitted curve peaks; None when it keeps rising (beta <= 0)
    peak: float | None  # the fitted gain at d_star
    points: int

    def predict(self, d: float) -> float:
        return fit_curve(self.form, self.alpha, self.beta, d)


def fit_curve(form: str, alpha: float, beta: float, d: float) -> float:
    if form == "bon":
        return d * (alpha - beta * d)
    return 0.0 if d <= 0 else d * (alpha - beta * math.log(d))  # d log d -> 0 as d -> 0


def fit_form(form: str, d: Sequence[float], gain: Sequence[float]) -> Fit | None:
    """Least-squares (alpha, beta) of `FORMS[form]` through (d, gain); None with fewer than two points at d > 0.

    Both forms are linear in (alpha, beta): gain = alpha x1 + beta x2 with x = [d, -d^2] (bon) or [d, -d log d]
    (rl), and no intercept since R(0) = 0. Points at d = 0 add nothing to the fit (both features vanish) but
    count in R^2."""
    import numpy as np

    if form not in FORMS:
        raise ValueError(f"unknown form {form!r}; one of {list(FORMS)}")
    dd = np.asarray(d, dtype=np.float64)
    y = np.asarray(gain, dtype=np.float64)
    if int((dd > 0).sum()) < 2:
        return None
    second = -dd * dd if form == "bon" else -np.where(dd > 0, dd * np.log(np.where(dd > 0, dd, 1.0)), 0.0)
    X = np.stack([dd, second], axis=1)  # (P, 2)
    (alpha, beta), *_ = np.linalg.lstsq(X, y, rcond=None)
    resid = y - X @ np.array([alpha, beta])
    ss_tot = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - float((resid**2).sum()) / ss_tot if ss_tot > 0 else None
    d_star: float | None = None
    peak: float | None = None
    if beta > 0:
        if form == "bon":  # on d >= 0: with alpha <= 0 the curve only falls, so its peak is R(0) = 0
            d_star, peak = (alpha / (2 * beta), alpha * alpha / (4 * beta)) if alpha > 0 else (0.0, 0.0)
        else:
            d_star = math.exp(alpha / beta - 1)
            peak = beta * d_star
    return Fit(form, float(alpha), float(beta), r2, d_star, peak, len(dd))


# ------------------------------------------------------------------------------------------ settings


@dataclass
class OveroptSettings:
    n: int = 64  # pool size N per prompt (best-of-n for n = 1..N)
    rl_samples: int = 4  # samples per prompt and checkpoint
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 128
    seed: int = 0  # sampling seed (per sample, `sample_seed`) and the prompt subset
    dtype: str = "auto"  # the sampler's; log-probs for the KL are computed in float32
    batch_size: int = 16  # completions per log-prob forward
    token_budget: int = 1 << 15  # KV-cache slots per generation batch
    chunk_prompts: int = 16  # prompts per generate call; samples are saved after each

    def problems(self) -> list[str]:
        out = []
        for name in ("n", "rl_samples", "max_new_tokens", "batch_size", "chunk_prompts"):
            if getattr(self, name) < 1:
                out.append(f"--{name.replace('_', '-')}: must be >= 1, got {getattr(self, name)}")
        if self.temperature <= 0:
            out.append(f"--temperature: must be > 0 (best-of-n samples), got {self.temperature}")
        if self.seed < 0:
            out.append(f"--seed: must be >= 0, got {self.seed}")
        return out


def sample_seed(seed: int, k: int) -> int:
    """The engine seed of sample k (k < 1,000,003): one request per sample, so sample k does not depend on N."""
    return seed * 1_000_003 + k


def _hash(obj: Any) -> str:
    return hashlib.sha1(json.dumps(obj, sort_keys=True, default=str).encode("utf-8")).hexdigest()[:12]


# ------------------------------------------------------------------------------------------ the proxy


def _looks_local(ref: str) -> bool:
    """A reference that names a local path (a hub id is `org/name`; builtin refs start with builtin:)."""
    if ref.startswith("builtin:"):
        return False
    return ref.startswith((".", "/", "~")) or ref.count("/") != 1 or Path(ref).exists()


def proxy_spec(text: str | None, run_cfg: Any | None = None) -> dict[str, Any]:
    """The proxy as a scorer spec: an inline mapping (`{type: scalar, model: DIR}`), a reward-model directory
    (its kind found by `default_scorer`), or, without --proxy, the one model-based reward of the online run."""
    from reward_models.scorers import SCORERS, default_scorer

    if text is None:
        comps = [s for s in (run_cfg.reward if run_cfg is not None else []) if s.get("type") != "grader"]
        if len(comps) != 1:
            raise UserError(
                "--proxy is missing: give the proxy reward model the policy was optimized against, e.g. "
                "--proxy runs/rm_suite/model (train one with `align rm train --config configs/rm_suite.yaml`)"
                + ("" if run_cfg is None else f"; the run's reward has {len(comps)} non-gold components")
            )
        spec = {k: v for k, v in comps[0].items() if k not in ("weight", "name")}
    elif text.lstrip().startswith("{"):
        import yaml

        try:
            spec = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise UserError(f"--proxy {text!r}: not a valid mapping: {e}") from None
        if not isinstance(spec, dict) or not isinstance(spec.get("type"), str):
            raise UserError(
                f"--proxy {text!r}: a scorer spec is a mapping with 'type', e.g. {{type: scalar, model: DIR}}"
            )
    else:
        if _looks_local(text) and not Path(text).expanduser().exists():
            raise UserError(
                f"--proxy {text}: no such reward model directory; train one with "
                "`align rm train --config configs/rm_suite.yaml` (it writes runs/rm_suite/model)"
            )
        spec = {"type": default_scorer(text, None), "model": text}
    kind = spec["type"]
    if kind not in SCORERS:
        raise UserError(f"--proxy: unknown scorer type '{kind}'; one of {', '.join(SCORERS.names())}")
    if SCORERS[kind].kind != "pointwise":
        raise UserError(f"--proxy: a '{kind}' scorer is {SCORERS[kind].kind}; best-of-n needs a pointwise score")
    for key in ("model", "reference"):
        ref = spec.get(key)
        if isinstance(ref, str) and _looks_local(ref) and not Path(ref).expanduser().exists():
            raise UserError(f"--proxy: {key} {ref} does not exist")
    return spec


def proxy_description(spec: dict[str, Any]) -> dict[str, Any]:
    """What changes the proxy's scores, without loading it: the spec and its models' weight fingerprints."""
    from prefalign.models.hub import weights_fingerprint

    out: dict[str, Any] = {"spec": spec}
    for key in ("model", "reference", "meta_model"):
        if isinstance(spec.get(key), str):
            out[f"{key}_weights"] = weights_fingerprint(spec[key])
    return out


# ------------------------------------------------------------------------------------------ the cache


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
        (self.root / f"samples-{policy_key}.key.json").write_text(json.dumps(key, indent=2), encoding="utf-8")
        with open(self.root / f"samples-{policy_key}.jsonl", "a", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")

    def values(self, name: str) -> dict[str, float | None]:
        path = self.root / f"{name}.json"
        return json.loads(path.read_text(encoding="utf-8"))["values"] if path.exists() else {}

    def put_values(self, name: str, key: dict[str, Any], values: dict[str, float | None]) -> None:
        path = self.root / f"{name}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"key": key, "values": values}), encoding="utf-8")
        tmp.replace(path)


# ------------------------------------------------------------------------------------------ the policies


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
    run_cfg: Any  # the online run's OnlineConfig, or None without a run
    settings: OveroptSettings
    device: Any = None
    tokenizer: Any = None
    engine: Any = None
    policy: Any = None
    init: Any = None
    loaded_step: int | None = field(default=None)

    def sampler(self) -> Any:
        if self.engine is None:
            from prefalign.generation import make_engine
            from prefalign.models.hub import load_model, load_tokenizer
            from prefalign.models.precision import default_device

            self.device = default_device()
            self.tokenizer = load_tokenizer(self.model)
            m = load_model(self.model, self.settings.dtype, merge=True).to(self.device)
            self.engine = make_engine(m, self.tokenizer, token_budget=self.settings.token_budget)
        return self.engine

    def trainable(self) -> Any:
        """The run's policy as it was built for training (LoRA or full), in float32, on the device."""
        if self.policy is None:
            from prefalign.models.hub import load_model
            from prefalign.training.trainer import prepare_model

            cfg = self.run_cfg
            self.sampler()
            base = load_model(cfg.model, dtype="float32", merge=True)
            train = replace(cfg.train, compile=False)
            self.policy = prepare_model(base, train, cfg.lora, "CAUSAL_LM").to(self.device).eval()
            if cfg.train.method != "lora":
                self.init = load_model(cfg.model, dtype="float32", merge=True).to(self.device).eval()
        return self.policy

    def load_checkpoint(self, policy: Policy) -> None:
        import torch

        if self.loaded_step == policy.step:
            return
        model = self.trainable()
        assert policy.checkpoint is not None
        state = torch.load(policy.checkpoint / "online_state.pt", map_location="cpu", weights_only=False)
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
        import torch

        from prefalign.models.forward import layout_for
        from prefalign.models.hub import pad_token_id

        from .online import Seq, micro_batches, per_token_logps

        model = self.trainable()
        pad = pad_token_id(self.tokenizer)
        layout = layout_for(model)
        seqs = [Seq(s["prompt_ids"], s["ids"], [], None, 0.0) for s in samples]
        out = [0.0] * len(seqs)
        index = {id(s): i for i, s in enumerate(seqs)}
        T = self.settings.temperature
        with torch.no_grad():
            for mb in micro_batches([s for s in seqs if s.ids], self.settings.batch_size):
                lp = per_token_logps(model, mb, pad, self.device, T, layout)
                if self.init is not None:
                    ref = per_token_logps(self.init, mb, pad, self.device, T, layout)
                else:
                    with model.disable_adapter():
                        ref = per_token_logps(model, mb, pad, self.device, T, layout)
                diff = (lp.float() - ref.float()).sum(-1)  # (S,) padding is 0 in both
                for s, v in zip(mb, diff.tolist(), strict=True):
                    out[index[id(s)]] = float(v)
        return out


def policy_key(model: str, settings: OveroptSettings, checkpoint: Path | None) -> tuple[str, dict[str, Any]]:
    """The cache key of a policy's samples: the model and its weights, the checkpoint file, the sampling settings."""
    from prefalign.models.hub import weights_fingerprint

    key: dict[str, Any] = {
        "model": model,
        "weights": weights_fingerprint(model),
        "temperature": settings.temperature,
        "top_p": settings.top_p,
        "max_new_tokens": settings.max_new_tokens,
        "seed": settings.seed,
        "dtype": settings.dtype,
    }
    if checkpoint is not None:
        f = checkpoint / "online_state.pt"
        st = f.stat()
        key["checkpoint"] = {"path": str(f.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    return _hash(key), key


def find_checkpoints(run_dir: str) -> tuple[Any, list[Path]]:
    """The online run's config and its checkpoints (checkpoint-N/online_state.pt), by step."""
    from prefalign.config import load
    from prefalign.errors import ConfigError

    from .online import OnlineConfig

    d = Path(run_dir)
    if not (d / "config.yaml").exists():
        raise UserError(f"--run {run_dir}: no config.yaml; give the output_dir of an `align train` run of kind online")
    try:
        cfg = load(OnlineConfig, d / "config.yaml")
    except ConfigError as e:
        raise UserError(f"--run {run_dir}: its config.yaml is not an online run's ({e})") from None
    ckpts = sorted(
        (p for p in (d / "checkpoints").glob("checkpoint-*") if (p / "online_state.pt").exists()),
        key=lambda p: int(p.name.split("-")[1]),
    )
    if not ckpts:
        raise UserError(
            f"--run {run_dir}: no checkpoints (checkpoints/checkpoint-N/online_state.pt); train with "
            "train.save_every > 0 and keep_checkpoints: 0 (keep all), e.g. configs/grpo_proxy_suite.yaml"
        )
    return cfg, ckpts


# ------------------------------------------------------------------------------------------ the run


@dataclass
class Scored:
    """One policy's samples on the prompts: per prompt, per sample k, the proxy and gold score (NaN = failed)
    and the log-ratio (RL checkpoints)."""

    proxy: dict[str, list[float]]
    gold: dict[str, list[float]]
    log_ratio: dict[str, list[float]] | None = None
    lengths: dict[str, list[int]] = field(default_factory=dict)


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
            from reward_models.scorers import load_scorer

            self._scorer = load_scorer(self.proxy_spec)
        return self._scorer

    def draw(self, policy: Policy, count: int, key: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
        """Samples 0..count-1 of every prompt from `policy`, drawing only those not cached."""
        from prefalign.generation import SamplingParams

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
                params = [
                    SamplingParams(
                        n=1,
                        temperature=self.s.temperature,
                        top_p=self.s.top_p,
                        max_new_tokens=self.s.max_new_tokens,
                        seed=sample_seed(self.s.seed, k),
                    )
                    for _, k in part
                ]
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
        from preference_data.records import Message
        from preference_data.suite import grade_prompt_only

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
        return {p.id: [float(cached[f"{p.id}:{k}"]) for k in range(len(samples[p.id]))] for p in self.prompts}  # type: ignore[arg-type]


def first(scored: Scored, m: int) -> Scored:
    """The first m samples of every prompt."""
    return Scored(
        {i: v[:m] for i, v in scored.proxy.items()},
        {i: v[:m] for i, v in scored.gold.items()},
        None,
        {i: v[:m] for i, v in scored.lengths.items()},
    )


def bon_points(scored: Scored, prompt_ids: list[str], ns: list[int], seed: int = 0) -> list[dict[str, Any]]:
    """The best-of-n curve: per n, mean proxy and gold estimates and their gains over n = 1 (per prompt, then
    averaged), over the prompts with at least n valid samples."""
    from .evaluate import bootstrap_ci

    points = []
    for n in ns:
        p_abs, g_abs, p_gain, g_gain, left_out = [], [], [], [], 0
        for pid in prompt_ids:
            ok = [
                (a, b)
                for a, b in zip(scored.proxy[pid], scored.gold[pid], strict=True)
                if math.isfinite(a) and math.isfinite(b)
            ]
            if len(ok) < n:
                left_out += 1
                continue
            proxy, gold = [a for a, _ in ok], [b for _, b in ok]
            ep, eg = bon_estimate(proxy, gold, n)
            p1, g1 = sum(proxy) / len(proxy), sum(gold) / len(gold)  # the n = 1 estimate: the pool mean
            p_abs.append(ep)
            g_abs.append(eg)
            p_gain.append(ep - p1)
            g_gain.append(eg - g1)
        kl = kl_bon(n)
        m = len(g_gain)
        points.append(
            {
                "n": n,
                "kl_bon_upper_bound": kl,
                "d": math.sqrt(kl),
                "proxy": sum(p_abs) / m if m else None,
                "gold": sum(g_abs) / m if m else None,
                "proxy_gain": sum(p_gain) / m if m else None,
                "gold_gain": sum(g_gain) / m if m else None,
                "gold_gain_ci95": list(bootstrap_ci(g_gain, seed=seed)) if m else None,
                "prompts": m,
                "prompts_left_out": left_out,
            }
        )
    return points


def rl_point(step: int, scored: Scored, base: Scored | None) -> dict[str, Any]:
    """One checkpoint: mean proxy and gold over its valid samples, gains over step 0, KL by k1 (mean log-ratio)."""

    def mean(xs: dict[str, list[float]]) -> float | None:
        vals = [v for row in xs.values() for v in row if math.isfinite(v)]
        return sum(vals) / len(vals) if vals else None

    proxy, gold = mean(scored.proxy), mean(scored.gold)
    if scored.log_ratio is None:  # the initial policy
        kl, se = 0.0, 0.0
    else:
        lr = [v for row in scored.log_ratio.values() for v in row]
        kl = sum(lr) / len(lr)
        var = sum((v - kl) ** 2 for v in lr) / max(len(lr) - 1, 1)
        se = math.sqrt(var / len(lr))
    bp, bg = (mean(base.proxy), mean(base.gold)) if base is not None else (proxy, gold)
    return {
        "step": step,
        "kl": kl,
        "kl_se": se,
        "d": math.sqrt(max(kl, 0.0)),  # a k1 estimate can dip below 0 by noise; d reads it as 0
        "proxy": proxy,
        "gold": gold,
        "proxy_gain": None if proxy is None or bp is None else proxy - bp,
        "gold_gain": None if gold is None or bg is None else gold - bg,
        "samples": sum(len(v) for v in scored.gold.values()),
        "proxy_nan": sum(1 for row in scored.proxy.values() for v in row if not math.isfinite(v)),
        "gold_nan": sum(1 for row in scored.gold.values() for v in row if not math.isfinite(v)),
        "mean_length": sum(map(sum, scored.lengths.values())) / max(sum(map(len, scored.lengths.values())), 1),
    }


def fits(points: list[dict[str, Any]], form: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for which in ("gold", "proxy"):
        pts = [(p["d"], p[f"{which}_gain"]) for p in points if p[f"{which}_gain"] is not None]
        f = fit_form(form, [d for d, _ in pts], [g for _, g in pts])
        out[which] = asdict(f) if f is not None else None
    return out


def verdict(points: list[dict[str, Any]], label: str) -> str:
    """Whether gold peaks and then falls while proxy keeps rising, in words."""
    pts = [p for p in points if p["gold_gain"] is not None and p["proxy_gain"] is not None]
    if len(pts) < 3:
        return "too few points to tell"
    gold = [p["gold_gain"] for p in pts]
    proxy = [p["proxy_gain"] for p in pts]
    i = max(range(len(pts)), key=lambda j: gold[j])
    last = len(pts) - 1
    if max(gold) == min(gold):
        return f"gold does not move ({gold[0]:+.4f} at every point); proxy {proxy[0]:+.4f} -> {proxy[last]:+.4f}"
    proxy_rising = proxy[last] >= max(proxy)
    if i == 0 and gold[last] < gold[0]:
        head = f"gold never rises above the initial policy: it falls to {gold[last]:+.4f} at {label} {pts[last][label]}"
        if proxy_rising:
            return f"{head} while proxy keeps rising (to {proxy[last]:+.4f}): over-optimization from the start"
        return f"{head}; proxy does not keep rising either (highest {max(proxy):+.4f}, last {proxy[last]:+.4f})"
    if i < last and gold[last] < gold[i]:
        head = (
            f"gold peaks at {label} {pts[i][label]} (d {pts[i]['d']:.2f}, {gold[i]:+.4f}) and falls to "
            f"{gold[last]:+.4f} at {label} {pts[last][label]}"
        )
        if proxy_rising:
            return f"{head} while proxy keeps rising ({proxy[i]:+.4f} -> {proxy[last]:+.4f}): over-optimization"
        return f"{head}; proxy does not keep rising either (highest {max(proxy):+.4f}, last {proxy[last]:+.4f})"
    return (
        f"gold is highest at the last point ({label} {pts[last][label]}, d {pts[last]['d']:.2f}, {gold[last]:+.4f}): "
        f"no over-optimization within the range measured; proxy {proxy[last]:+.4f}"
    )


def run_overopt(
    proxy: str | None,
    run_dir: str | None = None,
    model: str | None = None,
    prompts_source: str = "suite",
    limit: int | None = 64,
    out_dir: str = "runs/overopt",
    settings: OveroptSettings | None = None,
) -> dict[str, Any]:
    """Best-of-n from the initial policy and (with `run_dir`) the online run's checkpoints, proxy against gold;
    writes report.json, summary.txt and overopt.png under `out_dir` (module docstring)."""
    from prefalign.models.hub import DEFAULT_MODEL
    from prefalign.models.precision import decide_dtype

    from .evaluate import load_prompts

    s = settings or OveroptSettings()
    problems = s.problems()
    if problems:
        raise UserError("align eval overopt: " + "; ".join(problems))
    t0 = time.time()
    run_cfg, ckpts = find_checkpoints(run_dir) if run_dir else (None, [])
    if run_cfg is not None and model is not None and model != run_cfg.model:
        raise UserError(
            f"--model {model}: the run {run_dir} started from {run_cfg.model}; best-of-n and step 0 use the run's "
            "initial policy, so leave --model out"
        )
    model = run_cfg.model if run_cfg is not None else (model or DEFAULT_MODEL)
    spec = proxy_spec(proxy, run_cfg)
    s = replace(s, dtype=decide_dtype(s.dtype, knob="--dtype").value)
    prompts = load_prompts(prompts_source, limit, s.seed)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    models = Models(model, run_cfg, s)
    job = Overopt(prompts, spec, models, Cache(out / "cache"), s)
    ids = [p.id for p in prompts]

    # best-of-n: one pool of N samples per prompt from the initial policy
    pool_size = max(s.n, s.rl_samples if ckpts else 1)
    key, key_data = policy_key(model, s, None)
    init = Policy("initial policy", 0, None, key)
    pool = job.score(init, job.draw(init, pool_size, key_data), kl=False)
    bon = bon_points(first(pool, s.n), ids, bon_ns(s.n), s.seed)
    report: dict[str, Any] = {
        "model": model,
        "proxy": job.proxy_desc,
        "gold": "suite gold graders (overall)",
        "prompts": len(prompts),
        "source": prompts_source,
        "settings": asdict(s),
        "bon": {
            "pool": s.n,
            "kl": "analytic KL_bon = log n - (n-1)/n, an upper bound on the true KL (Beirami et al. 2024)",
            "ties": "ties in proxy broken uniformly at random (the estimator averaged over the tied orders)",
            "points": bon,
            "fit": fits(bon, "bon"),
            "verdict": verdict(bon, "n"),
        },
    }

    # RL: each checkpoint, against step 0 = the initial policy's first rl_samples samples
    if run_cfg is not None:
        m = s.rl_samples
        base = first(pool, m)
        points = [rl_point(0, base, None)]
        for ck in ckpts:
            step = int(ck.name.split("-")[1])
            k, k_data = policy_key(model, s, ck)
            pol = Policy(f"checkpoint {step}", step, ck, k)
            scored = job.score(pol, job.draw(pol, m, k_data), kl=True)
            points.append(rl_point(step, scored, base))
        report["rl"] = {
            "run": str(run_dir),
            "reward": run_cfg.reward,
            "kl_beta": run_cfg.kl.beta,
            "samples_per_prompt": m,
            "kl": "Monte Carlo k1 on each checkpoint's samples: mean of sum_t log pi(y_t) - log pi_init(y_t)",
            "points": points,
            "fit": fits(points, "rl"),
            "verdict": verdict(points, "step"),
        }
        trained_on = [{k: v for k, v in c.items() if k not in ("weight", "name")} for c in run_cfg.reward]
        if trained_on != [spec]:
            report["rl"]["note"] = f"the run was trained on the reward {run_cfg.reward}, not on this proxy alone"
    proxy_nan = sum(1 for row in pool.proxy.values() for v in row if not math.isfinite(v))
    report["failures"] = {
        "proxy_nan_in_pool": proxy_nan,
        "proxy_failures": dict(getattr(job._scorer, "failures", {}) or {}),
        "gold_errors": job.gold_errors,
    }
    report["work"] = {"samples_drawn": job.drawn, "proxy_scores_computed": job.scored}
    report["seconds"] = round(time.time() - t0, 1)
    report["summary"] = summary_lines(report)
    report["plot"] = str(out / "overopt.png") if plot(report, out / "overopt.png") else None
    (out / "report.json").write_text(json.dumps(report, indent=2, default=str), encoding="utf-8")
    (out / "summary.txt").write_text("\n".join(report["summary"]) + "\n", encoding="utf-8")
    return report


# ------------------------------------------------------------------------------------------ report and plot


def _fit_line(f: dict[str, Any] | None, what: str) -> str:
    if f is None:
        return f"  fit {what}: too few points at d > 0"
    r2 = "n/a" if f["r2"] is None else f"{f['r2']:.3f}"
    peak = (
        f"d* {f['d_star']:.3f}, predicted peak {f['peak']:+.4f}"
        if f["d_star"] is not None
        else "no peak on d > 0 (beta <= 0)"
    )
    return f"  fit {what}: {FORMS[f['form']]}, alpha {f['alpha']:.4f}, beta {f['beta']:.4f}, R^2 {r2}; {peak}"


def summary_lines(report: dict[str, Any]) -> list[str]:
    s = report["settings"]
    b = report["bon"]
    lines = [
        f"over-optimization of {report['proxy']['spec']} on {report['prompts']} held-out prompts, "
        f"gold = {report['gold']}, initial policy {report['model']} (temperature {s['temperature']}, "
        f"{s['max_new_tokens']} new tokens)",
        f"best-of-n from one pool of {b['pool']} samples per prompt; d = sqrt(KL_bon), KL_bon = log n - (n-1)/n "
        "(an upper bound on the true KL)",
    ]
    for p in b["points"]:
        if p["gold_gain"] is None:
            lines.append(f"  n {p['n']:>4}: no prompt has {p['n']} valid samples")
            continue
        lo, hi = p["gold_gain_ci95"]
        lines.append(
            f"  n {p['n']:>4}  d {p['d']:.3f}  proxy {p['proxy_gain']:+.4f}  gold {p['gold_gain']:+.4f} "
            f"[{lo:+.4f}, {hi:+.4f}]"
            + (f"  ({p['prompts_left_out']} prompts left out)" if p["prompts_left_out"] else "")
        )
    lines.append("  " + b["verdict"])
    lines.append(_fit_line(b["fit"]["gold"], "gold"))
    lines.append(_fit_line(b["fit"]["proxy"], "proxy"))
    rl = report.get("rl")
    if rl:
        lines.append(
            f"RL checkpoints of {rl['run']} (KL beta {rl['kl_beta']}), {rl['samples_per_prompt']} samples per prompt; "
            "d = sqrt(KL), KL by Monte Carlo k1"
        )
        for p in rl["points"]:
            pg = "n/a" if p["proxy_gain"] is None else f"{p['proxy_gain']:+.4f}"
            gg = "n/a" if p["gold_gain"] is None else f"{p['gold_gain']:+.4f}"
            lines.append(
                f"  step {p['step']:>4}  KL {p['kl']:.4f} (se {p['kl_se']:.4f})  d {p['d']:.3f}  proxy {pg}  gold {gg}"
                f"  len {p['mean_length']:.1f}" + (f"  proxy NaN {p['proxy_nan']}" if p["proxy_nan"] else "")
            )
        lines.append("  " + rl["verdict"])
        lines.append(_fit_line(rl["fit"]["gold"], "gold"))
        lines.append(_fit_line(rl["fit"]["proxy"], "proxy"))
        if rl.get("note"):
            lines.append("  note: " + rl["note"])
    f = report["failures"]
    if f["proxy_nan_in_pool"] or f["gold_errors"]:
        lines.append(
            f"left out: {f['proxy_nan_in_pool']} pool samples the proxy scored NaN {f['proxy_failures'] or ''}; "
            f"gold grader errors {f['gold_errors'] or 0}"
        )
    w = report["work"]
    lines.append(
        f"{w['samples_drawn']} samples drawn, {w['proxy_scores_computed']} proxy scores computed (the rest cached)"
    )
    return lines


def plot(report: dict[str, Any], path: Path) -> bool:
    """Gold and proxy gains against d with the fitted curves: a column per method, a row per score."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    methods = [("bon", "best-of-n (d = sqrt(KL_bon), upper bound)", "n")]
    if report.get("rl"):
        methods.append(("rl", "RL checkpoints (d = sqrt(KL), k1)", "step"))
    fig = Figure(figsize=(5.2 * len(methods), 7.0))
    FigureCanvasAgg(fig)
    axes = fig.subplots(2, len(methods), squeeze=False)
    for col, (name, title, label) in enumerate(methods):
        sec = report[name]
        for row, which in enumerate(("gold", "proxy")):
            ax = axes[row][col]
            pts = [(p["d"], p[f"{which}_gain"], p[label]) for p in sec["points"] if p[f"{which}_gain"] is not None]
            if pts:
                ax.plot(
                    [d for d, _, _ in pts], [g for _, g, _ in pts], "o", color=f"C{row}", label=f"{which} (measured)"
                )
                for d, g, lab in pts:
                    ax.annotate(str(lab), (d, g), textcoords="offset points", xytext=(3, 3), fontsize=7)
            f = sec["fit"][which]
            if f is not None and pts:
                hi = max(max(d for d, _, _ in pts), min(f["d_star"] or 0.0, 2 * max(d for d, _, _ in pts)))
                xs = [hi * i / 100 for i in range(101)]
                ax.plot(
                    xs,
                    [fit_curve(f["form"], f["alpha"], f["beta"], x) for x in xs],
                    "-",
                    color=f"C{row}",
                    alpha=0.7,
                    label=f"fit {FORMS[f['form']]}",
                )
                if f["d_star"] is not None and f["d_star"] <= hi:
                    ax.axvline(f["d_star"], color=f"C{row}", ls=":", lw=1)
            ax.axhline(0.0, color="0.6", lw=0.8)
            ax.set_title(f"{title}: {which}", fontsize=9)
            ax.set_xlabel("d")
            ax.set_ylabel(f"{which} gain over the initial policy")
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(str(path), dpi=110)
    return True


__all__ = [
    "FORMS",
    "Fit",
    "OveroptSettings",
    "bon_estimate",
    "bon_ns",
    "bon_weights",
    "fit_form",
    "kl_bon",
    "run_overopt",
    "sample_seed",
    "summary_lines",
    "verdict",
]
