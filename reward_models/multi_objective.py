"""Multi-objective reward model (ArmoRM-style): K regression heads on a frozen backbone, verbosity debiasing and an
optional gating network, trained by `align rm train --config configs/mo_rm_suite.yaml` (kind mo_rm_train).

  features   one forward of the frozen backbone per (prompt, response): h_resp, the last hidden state at the
             response's last token, and h_prompt, the one at the prompt's last token (the start of the assistant
             turn: ArmoRM's gating token).
  stage 1    per objective k, ridge regression w_k on h_resp without intercept (a constant cancels in every
             comparison), the penalty α chosen from 1e-4 .. 1e4 by validation MSE on a seeded 80/20 split, then
             refitted on all rows; missing labels (NaN) are left out of that objective's fit. R = W h_resp ∈ R^K.
  debias     optional: a verbosity attribute (here the response length in tokens / 100, regressed like the
             others); for every other objective i the first λ_i of an increasing grid with
             Spearman(R_i − λ_i R_v, R_v) <= `corr_threshold` on the training rows (never passing: λ_i = 1), and
             R'_i = R_i − λ_i R_v; the verbosity head itself is not an objective of the output.
  stage 2    optional gating: an MLP on h_prompt, g(x) = softmax(z / T) over the K objectives, score =
             logit_scale · Σ_k g_k R'_k, trained by Bradley–Terry −log σ(s_c − s_r) on the training pairs with the
             backbone and the heads frozen. Without gating the score is the mean of R'.

Training data: the verifiable suite's pairs carry the gold graders' per-objective scores of both responses
(`gold_chosen`, `gold_rejected`), the attribute scores the heads regress on. The run reports per-objective accuracy
on held-out pairs (for objective k, the pairs whose gold scores differ on k: does R'_k order them as gold does;
ties wrong) and, with `compare_with`, the same table for a scalar BT RM's one score.

The scorer `multi_objective` (in the table of reward_models.scorers) reads the saved model: `score` gives the gated
score or one objective, `score_multi` the (B, K) named objective rewards, the K components of a composition.
"""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from prefalign.config import option
from prefalign.errors import UserError
from prefalign.models.hub import DEFAULT_MODEL, load_model, load_tokenizer, pad_token_id, resolve
from prefalign.models.precision import announce, decide_dtype, default_device
from preference_data.records import Conversation
from preference_data.suite import OBJECTIVES, build_suite
from preference_data.tokenize import tokenize_single

from .model_scorers import ScalarOptions, ScalarScorer

MO_FILE = "multi_objective.json"
HEADS_FILE = "heads.pt"
ALPHAS = [10.0**e for e in range(-4, 5)]
PENALTY_GRID = [0.0, 0.01, 0.025, 0.05, 0.075, 0.1, 0.125, 0.15, 0.2, *[round(0.05 * i, 2) for i in range(5, 20)]]


@dataclass
class GatingSection:
    enabled: bool = option(True, "train the gating network (else the score is the mean of the objectives)")
    hidden: int = option(256, "width of each hidden layer")
    layers: int = option(2, "hidden layers")
    dropout: float = option(0.2, "dropout after each hidden layer")
    temperature: float = option(10.0, "softmax temperature of the gates")
    steps: int = option(300, "AdamW steps (full batch)")
    lr: float = option(1e-3, "AdamW learning rate")


@dataclass
class MORMTrainConfig:
    kind: Literal["mo_rm_train"] = option("mo_rm_train", "config kind (fixed)")
    backbone: str = option(DEFAULT_MODEL, "frozen backbone: a causal LM or a sequence-classification RM (its trunk)")
    output_dir: str = option("runs/mo_rm_suite", "where the heads, gating and report go")
    objectives: list[str] = option(
        factory=lambda: ["correctness", "instruction_following", "conciseness", "safety"],
        doc="the suite objectives to regress (gold per-objective scores of each response)",
    )
    suite_seed: int = option(0, "seed of the verifiable suite (train pairs fit, test pairs evaluate)")
    limit: int = option(0, "train pairs at most (0 = all)")
    debias: Literal["none", "length"] = option("length", "verbosity debiasing against a response-length head")
    corr_threshold: float = option(0.03, "debias: the Spearman correlation a debiased objective must not exceed")
    gating: GatingSection = option(factory=GatingSection, doc="stage 2")
    compare_with: str | None = option(None, "a scalar BT RM directory scored on the same held-out pairs")
    max_length: int = option(1024, "tokens per (prompt, response) at most (the prompt is cut from the left)")
    batch_size: int = option(16, "sequences per backbone forward")
    dtype: str = option("auto", "backbone dtype: auto (bf16 where native), bfloat16, float32")
    seed: int = option(0, "seed of the validation split and the gating network")

    def check(self) -> list[str]:
        p = [
            f"objectives: '{o}' is not a suite objective; choose from {', '.join(OBJECTIVES)}"
            for o in self.objectives
            if o not in OBJECTIVES
        ]
        if not self.objectives:
            p.append("objectives: name at least one")
        if len(set(self.objectives)) != len(self.objectives):
            p.append("objectives: each at most once")
        return p


# --- features ----------------------------------------------------------------------------------------------


class Backbone:
    """The frozen trunk and tokenizer; `features` gives (h_prompt, h_resp) per (prompt, response)."""

    def __init__(self, ref: str, dtype: str = "auto", max_length: int = 1024, batch_size: int = 16) -> None:
        self.ref = ref
        self.tokenizer = load_tokenizer(ref)
        self.pad_id = pad_token_id(self.tokenizer)
        self.device = torch.device(default_device())
        decision = decide_dtype(dtype, self.device, knob="dtype")
        announce("multi-objective RM backbone", decision)
        self.dtype = decision.value
        path = Path(resolve(ref))
        cfg = json.loads((path / "config.json").read_text()) if (path / "config.json").exists() else {}
        seq_cls = any(str(a).endswith("ForSequenceClassification") for a in cfg.get("architectures", []))
        model = load_model(ref, dtype=self.dtype, merge=True, head="seq_cls" if seq_cls else "causal_lm")
        self.trunk = (getattr(model, "model", None) or model.base_model).to(self.device).eval()
        self.trunk.requires_grad_(False)
        self.max_length, self.batch_size = max_length, batch_size
        self.skipped = 0

    @torch.no_grad()
    def features(self, prompts: list[Conversation], responses: list[Conversation]) -> tuple[torch.Tensor, ...]:
        """(h_prompt (N, d), h_resp (N, d), lengths (N,), ok (N,) bool): float32 on the CPU; a row that cannot be
        encoded (empty response, template error) is zero with ok False, and counted."""
        items: list[tuple[list[int], list[int]] | None] = []
        for p, r in zip(prompts, responses, strict=True):
            if not any(m.content.strip() for m in r):  # an empty answer has nothing to score: NaN, counted
                items.append(None)
                continue
            try:
                p_ids, r_ids = tokenize_single(self.tokenizer, p, r, response_end="eos")
            except UserError:
                items.append(None)
                continue
            if not r_ids:
                items.append(None)
                continue
            keep = self.max_length - len(r_ids)
            if keep < 1:
                r_ids = r_ids[: self.max_length - 1]
                keep = 1
            items.append((p_ids[-keep:], r_ids))
        d = self.trunk.config.hidden_size
        n = len(items)
        hp, hr = torch.zeros(n, d), torch.zeros(n, d)
        lengths = torch.zeros(n)
        ok = torch.tensor([it is not None for it in items])
        self.skipped += int((~ok).sum())
        order = sorted((i for i in range(n) if items[i] is not None), key=lambda i: -sum(map(len, items[i])))  # type: ignore[arg-type]
        for s in range(0, len(order), self.batch_size):
            idx = order[s : s + self.batch_size]
            seqs = [items[i][0] + items[i][1] for i in idx]  # type: ignore[index]
            T = max(map(len, seqs))
            ids = torch.full((len(idx), T), self.pad_id, dtype=torch.long)
            mask = torch.zeros((len(idx), T), dtype=torch.long)
            for j, sq in enumerate(seqs):
                ids[j, : len(sq)] = torch.tensor(sq)
                mask[j, : len(sq)] = 1
            with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.dtype == "bfloat16"):
                h = self.trunk(input_ids=ids.to(self.device), attention_mask=mask.to(self.device)).last_hidden_state
            h = h.float().cpu()
            for j, i in enumerate(idx):
                P, R = len(items[i][0]), len(items[i][1])  # type: ignore[index]
                hp[i] = h[j, P - 1]
                hr[i] = h[j, P + R - 1]
                lengths[i] = R
        return hp, hr, lengths, ok


# --- stage 1: ridge heads and debiasing -----------------------------------------------------------------------


def ridge(X: torch.Tensor, y: torch.Tensor, alpha: float) -> torch.Tensor:
    """argmin_w |Xw − y|² + α|w|² (no intercept), in float64."""
    X, y = X.double(), y.double()
    A = X.T @ X + alpha * torch.eye(X.shape[1], dtype=torch.float64)
    return torch.linalg.solve(A, X.T @ y)


def fit_head(X: torch.Tensor, y: torch.Tensor, seed: int) -> tuple[torch.Tensor, float, float]:
    """Ridge with α chosen by validation MSE (seeded 80/20 split) and refitted on every row; rows with NaN labels
    are left out. Returns (w, α, validation MSE)."""
    ok = ~torch.isnan(y)
    X, y = X[ok], y[ok]
    if len(y) < 5:
        raise UserError(f"a head has {len(y)} labelled rows; at least 5 are needed")
    idx = list(range(len(y)))
    random.Random(seed).shuffle(idx)
    cut = int(0.8 * len(idx))
    tr, va = torch.tensor(idx[:cut]), torch.tensor(idx[cut:])
    best = (math.inf, ALPHAS[0])
    for a in ALPHAS:
        w = ridge(X[tr], y[tr], a)
        mse = float(((X[va].double() @ w - y[va].double()) ** 2).mean())
        if mse < best[0]:
            best = (mse, a)
    return ridge(X, y, best[1]).float(), best[1], best[0]


def spearman(a: torch.Tensor, b: torch.Tensor) -> float:
    """Spearman's rank correlation (average ranks for ties)."""

    def ranks(x: torch.Tensor) -> torch.Tensor:
        order = torch.argsort(x)
        r = torch.empty_like(x, dtype=torch.float64)
        xs = x[order]
        i = 0
        while i < len(xs):
            j = i
            while j + 1 < len(xs) and xs[j + 1] == xs[i]:
                j += 1
            r[order[i : j + 1]] = (i + j) / 2.0
            i = j + 1
        return r

    ra, rb = ranks(a.double()), ranks(b.double())
    ra, rb = ra - ra.mean(), rb - rb.mean()
    den = float(ra.norm() * rb.norm())
    return float((ra * rb).sum()) / den if den > 0 else 0.0


def verbosity_penalties(R: torch.Tensor, v: torch.Tensor, threshold: float) -> list[float]:
    """For each column of R, the first λ of PENALTY_GRID with Spearman(R_i − λ v, v) <= threshold, else 1."""
    out = []
    for i in range(R.shape[1]):
        lam = next((p for p in PENALTY_GRID if spearman(R[:, i] - p * v, v) <= threshold), 1.0)
        out.append(lam)
    return out


# --- the model ---------------------------------------------------------------------------------------------------


class Gating(torch.nn.Module):
    def __init__(self, d: int, K: int, hidden: int, layers: int, dropout: float, temperature: float) -> None:
        super().__init__()
        mods: list[torch.nn.Module] = []
        width = d
        for _ in range(layers):
            mods += [torch.nn.Linear(width, hidden), torch.nn.ReLU(), torch.nn.Dropout(dropout)]
            width = hidden
        mods.append(torch.nn.Linear(width, K))
        self.net = torch.nn.Sequential(*mods)
        self.temperature = temperature
        self.logit_scale = torch.nn.Parameter(torch.ones(1))

    def forward(self, h_prompt: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.net(h_prompt) / self.temperature, -1)


@dataclass
class Heads:
    """W (K, d), the debiasing penalties λ (K,) against the verbosity head w_v (d,) (or None), the gating."""

    objectives: list[str]
    W: torch.Tensor
    penalties: torch.Tensor
    w_verbosity: torch.Tensor | None
    gating: Gating | None

    def rewards(self, h_resp: torch.Tensor) -> torch.Tensor:
        """(N, K) debiased objective rewards R' = R − λ R_v."""
        R = h_resp @ self.W.T
        if self.w_verbosity is not None:
            R = R - self.penalties * (h_resp @ self.w_verbosity).unsqueeze(-1)
        return R

    def score(self, h_prompt: torch.Tensor, h_resp: torch.Tensor) -> torch.Tensor:
        R = self.rewards(h_resp)
        if self.gating is None:
            return R.mean(-1)
        self.gating.eval()
        with torch.no_grad():
            g = self.gating(h_prompt)
        return self.gating.logit_scale.detach() * (g * R).sum(-1)


def save_heads(heads: Heads, out: Path, meta: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    torch.save(
        {
            "W": heads.W,
            "penalties": heads.penalties,
            "w_verbosity": heads.w_verbosity,
            "gating": heads.gating.state_dict() if heads.gating is not None else None,
        },
        out / HEADS_FILE,
    )
    (out / MO_FILE).write_text(json.dumps({"objectives": heads.objectives, **meta}, indent=2), encoding="utf-8")


def load_heads(path: str | Path) -> tuple[Heads, dict[str, Any]]:
    p = Path(path)
    if not (p / MO_FILE).exists():
        raise UserError(
            f"{p} is not a multi-objective RM (no {MO_FILE}); train one with `align rm train --config "
            "configs/mo_rm_suite.yaml`"
        )
    meta = json.loads((p / MO_FILE).read_text(encoding="utf-8"))
    t = torch.load(p / HEADS_FILE, map_location="cpu", weights_only=True)
    gating = None
    if t["gating"] is not None:
        g = meta["gating"]
        gating = Gating(t["W"].shape[1], len(meta["objectives"]), g["hidden"], g["layers"], 0.0, g["temperature"])
        gating.load_state_dict(t["gating"])
        gating.eval()
    return Heads(meta["objectives"], t["W"], t["penalties"], t["w_verbosity"], gating), meta


def objectives_of(path: str | Path) -> list[str]:
    """The objective names a saved multi-objective RM outputs (read from its json, no model loaded)."""
    p = Path(path) / MO_FILE
    if not p.exists():
        raise UserError(f"{path}: not a multi-objective RM (no {MO_FILE})")
    return list(json.loads(p.read_text(encoding="utf-8"))["objectives"])


# --- training ---------------------------------------------------------------------------------------------------


def _rows(pairs: list[Any], objectives: list[str]) -> tuple[list[Conversation], list[Conversation], torch.Tensor]:
    """Unique (prompt, response) rows of suite pairs with their gold per-objective labels (NaN when missing)."""
    seen: dict[tuple[str, str], int] = {}
    prompts: list[Conversation] = []
    responses: list[Conversation] = []
    labels: list[list[float]] = []
    for p in pairs:
        for side in ("chosen", "rejected"):
            resp = getattr(p, side)
            key = (json.dumps([m.content for m in p.prompt]), json.dumps([m.content for m in resp]))
            if key in seen:
                continue
            gold = p.attributes.get(f"gold_{side}") or {}
            seen[key] = len(prompts)
            prompts.append(p.prompt)
            responses.append(resp)
            labels.append([float(gold[o]) if gold.get(o) is not None else math.nan for o in objectives])
    return prompts, responses, torch.tensor(labels, dtype=torch.float32)


def per_objective_accuracy(
    pairs: list[Any], objectives: list[str], score_c: torch.Tensor, score_r: torch.Tensor
) -> dict[str, Any]:
    """For each objective, accuracy over the pairs whose gold scores differ on it; `score_*` are (N, K) (or (N, 1)
    for one scalar used for every objective). Ties in the scores are wrong."""
    out: dict[str, Any] = {}
    for k, o in enumerate(objectives):
        col = min(k, score_c.shape[1] - 1)
        right = n = 0
        for i, p in enumerate(pairs):
            gc, gr = p.attributes["gold_chosen"].get(o), p.attributes["gold_rejected"].get(o)
            if gc is None or gr is None or gc == gr:
                continue
            n += 1
            d = float(score_c[i, col] - score_r[i, col])
            right += int((d > 0) == (gc > gr) and d != 0)
        out[o] = {"accuracy": right / n if n else math.nan, "pairs": n}
    return out


def run(cfg: MORMTrainConfig, resume: bool = False) -> dict[str, Any]:
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    suite = build_suite(seed=cfg.suite_seed)
    train_pairs = list(suite.train_pairs)[: cfg.limit or None]
    test_pairs = list(suite.test_pairs)
    bb = Backbone(cfg.backbone, cfg.dtype, cfg.max_length, cfg.batch_size)
    prompts, responses, Y = _rows(train_pairs, cfg.objectives)
    hp, hr, lengths, ok = bb.features(prompts, responses)
    hp, hr, lengths, Y = hp[ok], hr[ok], lengths[ok], Y[ok]
    heads_w, alphas, mses = [], {}, {}
    for k, o in enumerate(cfg.objectives):
        w, a, mse = fit_head(hr, Y[:, k], cfg.seed)
        heads_w.append(w)
        alphas[o], mses[o] = a, mse
    W = torch.stack(heads_w)
    penalties = torch.zeros(len(cfg.objectives))
    w_v = None
    if cfg.debias == "length":
        w_v, a, mse = fit_head(hr, lengths / 100.0, cfg.seed)
        alphas["verbosity"], mses["verbosity"] = a, mse
        penalties = torch.tensor(verbosity_penalties(hr @ W.T, hr @ w_v, cfg.corr_threshold))
    gating = None
    heads = Heads(list(cfg.objectives), W, penalties, w_v, None)
    gate_log: list[float] = []
    if cfg.gating.enabled:
        gating = train_gating(cfg, bb, heads, train_pairs, gate_log)
        heads.gating = gating
    meta = {
        "backbone": cfg.backbone,
        "debias": cfg.debias,
        "penalties": dict(zip(cfg.objectives, penalties.tolist(), strict=True)),
        "alphas": alphas,
        "validation_mse": mses,
        "gating": {
            "enabled": cfg.gating.enabled,
            "hidden": cfg.gating.hidden,
            "layers": cfg.gating.layers,
            "temperature": cfg.gating.temperature,
        },
        "max_length": cfg.max_length,
        "train_rows": int(len(Y)),
    }
    save_heads(heads, out / "model", meta)
    # held-out evaluation
    hp_c, hr_c, _, ok_c = bb.features([p.prompt for p in test_pairs], [p.chosen for p in test_pairs])
    hp_r, hr_r, _, ok_r = bb.features([p.prompt for p in test_pairs], [p.rejected for p in test_pairs])
    both = ok_c & ok_r
    kept = [p for p, k in zip(test_pairs, both.tolist(), strict=True) if k]
    Rc, Rr = heads.rewards(hr_c[both]), heads.rewards(hr_r[both])
    sc, sr = heads.score(hp_c[both], hr_c[both]), heads.score(hp_r[both], hr_r[both])
    report: dict[str, Any] = {
        "model_dir": str(out / "model"),
        "backbone": cfg.backbone,
        "objectives": cfg.objectives,
        "train_rows": int(len(Y)),
        "skipped_rows": bb.skipped,
        "test_pairs": len(kept),
        "per_objective": per_objective_accuracy(kept, cfg.objectives, Rc, Rr),
        "overall_accuracy": float(((sc - sr) > 0).float().mean()) if len(kept) else math.nan,
        "penalties": meta["penalties"],
        "alphas": alphas,
        "validation_mse": mses,
        "gating_loss": gate_log[-1] if gate_log else None,
        "seconds": round(time.time() - t0, 1),
    }
    if cfg.compare_with:
        bt = ScalarScorer(ScalarOptions(model=cfg.compare_with))
        bc = torch.tensor(bt.score([p.prompt for p in kept], [p.chosen for p in kept])).unsqueeze(-1)
        br = torch.tensor(bt.score([p.prompt for p in kept], [p.rejected for p in kept])).unsqueeze(-1)
        report["bt"] = {
            "model": cfg.compare_with,
            "per_objective": per_objective_accuracy(kept, cfg.objectives, bc, br),
            "overall_accuracy": float(((bc - br)[:, 0] > 0).float().mean()),
        }
    report["run_report"] = str(out / "report.json")
    (out / "report.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    return report


def train_gating(cfg: MORMTrainConfig, bb: Backbone, heads: Heads, pairs: list[Any], log: list[float]) -> Gating:
    """Stage 2: the gating MLP by Bradley–Terry on the training pairs, backbone and heads frozen (full batch)."""
    torch.manual_seed(cfg.seed)
    hp_c, hr_c, _, ok_c = bb.features([p.prompt for p in pairs], [p.chosen for p in pairs])
    _, hr_r, _, ok_r = bb.features([p.prompt for p in pairs], [p.rejected for p in pairs])
    both = ok_c & ok_r
    Rc, Rr = heads.rewards(hr_c[both]), heads.rewards(hr_r[both])
    g = cfg.gating
    net = Gating(hp_c.shape[1], len(cfg.objectives), g.hidden, g.layers, g.dropout, g.temperature)
    opt = torch.optim.AdamW(net.parameters(), lr=g.lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, max(g.steps, 1))
    x = hp_c[both]
    for _ in range(g.steps):
        gate = net(x)
        d = net.logit_scale * (gate * (Rc - Rr)).sum(-1)
        loss = torch.nn.functional.softplus(-d).mean()  # −log σ(s_c − s_r)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        log.append(float(loss.detach()))
    net.eval()
    return net


def summary_lines(report: dict[str, Any]) -> list[str]:
    lines = [
        f"multi-objective RM on {report['backbone']}: {report['train_rows']} training rows, "
        f"{report['test_pairs']} held-out pairs; saved to {report['model_dir']}",
        "per-objective accuracy on held-out pairs (pairs whose gold scores differ on the objective):",
    ]
    bt = report.get("bt")
    for o, v in report["per_objective"].items():
        extra = f"   BT RM {bt['per_objective'][o]['accuracy']:.3f}" if bt else ""
        lines.append(f"  {o:<22} {v['accuracy']:.3f} ({v['pairs']} pairs){extra}")
    lines.append(
        f"  overall (gated score)  {report['overall_accuracy']:.3f}"
        + (f"   BT RM {bt['overall_accuracy']:.3f}" if bt else "")
    )
    return lines


# --- the scorer -----------------------------------------------------------------------------------------------------


class MultiObjectiveScorer:
    """Pointwise: the gated score (or one objective's reward) of a saved multi-objective RM; `score_multi` gives
    all K objective rewards."""

    kind = "pointwise"
    name = "multi_objective"

    def __init__(self, opts: Any) -> None:
        self.opts = opts
        self.heads, self.meta = load_heads(opts.model)
        if opts.objective not in ("score", "all", *self.heads.objectives):
            raise UserError(
                f"objective: '{opts.objective}' is not an output of {opts.model}; choose score, all or one of "
                f"{', '.join(self.heads.objectives)}"
            )
        self.backbone = Backbone(self.meta["backbone"], opts.dtype, self.meta.get("max_length", 1024))
        self.objectives = list(self.heads.objectives)

    def score_multi(self, prompts: list[Conversation], responses: list[Conversation]) -> torch.Tensor:
        """(B, K) objective rewards R' (NaN rows where a response could not be encoded)."""
        _, hr, _, ok = self.backbone.features(prompts, responses)
        R = self.heads.rewards(hr)
        return R.masked_fill(~ok.unsqueeze(-1), math.nan)

    def score(self, prompts: list[Conversation], responses: list[Conversation]) -> list[float]:
        hp, hr, _, ok = self.backbone.features(prompts, responses)
        if self.opts.objective in ("score", "all"):
            s = self.heads.score(hp, hr)
        else:
            s = self.heads.rewards(hr)[:, self.objectives.index(self.opts.objective)]
        return s.masked_fill(~ok, math.nan).tolist()

    def describe(self) -> dict[str, Any]:
        return {"model": self.opts.model, "objective": self.opts.objective, **self.meta}


__all__ = ["MORMTrainConfig", "MultiObjectiveScorer", "objectives_of", "run", "summary_lines"]
