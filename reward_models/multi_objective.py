"""Multi-objective reward model (ArmoRM-style): K regression heads on a frozen backbone, verbosity debiasing and an
optional gating network, trained by `align rm train --config configs/mo_rm_suite.yaml` (kind mo_rm_train).

  features   the frozen backbone's last hidden state at the response's last token (h_resp) and at the prompt's
             last token (h_prompt: the start of the assistant turn, ArmoRM's gating token), each (prompt,
             response) as if encoded alone; the answers to one prompt are packed behind it (a block mask: each
             answer sees the prompt and itself), so the prompt is encoded once however many answers it has.
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

Training data (`data:`, split by a hash of the prompt into train and test): answers with per-objective labels —
rated records (several answers to a prompt, each scored per objective: `format: finegrained_labels` for
FineGrainedRLHF's relevance / factuality / completeness feedback, HelpSteer's or UltraFeedback's ratings) or pairs
whose attributes carry per-objective scores of both sides (the verifiable suite's `gold_chosen` / `gold_rejected`,
its gold graders' scores). The gating network and the overall accuracy use preference pairs: `preference:` (e.g.
FineGrainedRLHF's pairwise human preferences, `format: finegrained`), else the data's own pairs.

The run reports, on held-out data: per-objective accuracy (for objective k, every two answers to one prompt whose
labels differ on k: does R'_k order them as the labels do; ties wrong) and the overall accuracy of the gated score
on held-out preference pairs; beside them the same numbers for a scalar Bradley–Terry head fitted on the same frozen
features from the preference pairs (`linear_bt`: what one scalar learns from pairwise preferences alone) and, with
`compare_with`, for a trained scalar BT RM.

The scorer `multi_objective` (in the table of reward_models.scorers) reads the saved model: `score` gives the gated
score or one objective, `score_multi` the (B, K) named objective rewards, the K components of a composition.
"""

from __future__ import annotations

import json
import math
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import torch
from tqdm.auto import tqdm

from prefalign.config import option
from prefalign.errors import UserError
from prefalign.files import write_json
from prefalign.models.forward import hidden_states, layout_for
from prefalign.models.hub import DEFAULT_MODEL, load_model, load_tokenizer, pad_token_id, resolve
from prefalign.models.precision import announce, decide_dtype, default_device
from prefalign.training.evaluation import accuracy_report
from preference_data.packing import pack
from preference_data.records import Conversation, PreferencePair, RatedResponses
from preference_data.sources import DataConfig, load
from preference_data.suite import OBJECTIVES
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
class MODataConfig(DataConfig):
    split_fractions: list[float] = option(
        factory=lambda: [0.8, 0.0, 0.2],
        doc="train/dev/test fractions by a hash of the prompt: train is fitted, test evaluated (`split` is not read)",
    )


@dataclass
class MORMTrainConfig:
    kind: Literal["mo_rm_train"] = option("mo_rm_train", "config kind (fixed)")
    backbone: str = option(DEFAULT_MODEL, "frozen backbone: a causal LM or a sequence-classification RM (its trunk)")
    output_dir: str = option("runs/mo_rm_suite", "where the heads, gating and report go")
    data: MODataConfig = option(
        factory=MODataConfig,
        doc="answers with per-objective labels: rated records, or pairs with gold_chosen / gold_rejected (the suite)",
    )
    preference: DataConfig | None = option(
        None,
        "preference pairs for the gating and the overall accuracy, split by prompt as `data` is (default: the "
        "data's own pairs)",
    )
    objectives: list[str] = option(
        factory=lambda: ["correctness", "instruction_following", "conciseness", "safety"],
        doc="the label names to regress (the suite: its gold objectives; a rated file: its score keys)",
    )
    debias: Literal["none", "length"] = option("length", "verbosity debiasing against a response-length head")
    corr_threshold: float = option(0.03, "debias: the Spearman correlation a debiased objective must not exceed")
    gating: GatingSection = option(factory=GatingSection, doc="stage 2")
    linear_bt: bool = option(
        True, "also fit a scalar Bradley-Terry head on the same features from the preference pairs, for comparison"
    )
    compare_with: str | None = option(None, "a scalar BT RM directory scored on the same held-out data")
    max_length: int = option(1024, "tokens per (prompt, response) at most (the prompt is cut from the left)")
    batch_size: int = option(16, "sequences per backbone forward")
    dtype: str = option("auto", "backbone dtype: auto (bf16 where native), bfloat16, float32")
    seed: int = option(0, "seed of the validation split and the gating network")

    def check(self) -> list[str]:
        p = []
        if self.data.source == "suite":
            p += [
                f"objectives: '{o}' is not a suite objective; choose from {', '.join(OBJECTIVES)}"
                for o in self.objectives
                if o not in OBJECTIVES
            ]
        if not self.objectives:
            p.append("objectives: name at least one")
        if len(set(self.objectives)) != len(self.objectives):
            p.append("objectives: each at most once")
        if self.data.split_fractions[2] <= 0:
            p.append("data.split_fractions: the test fraction must be positive (held-out data is evaluated)")
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
        self.model = model.to(self.device).eval()
        self.layout = layout_for(self.model, device=self.device)  # the CPU's segments, a block mask elsewhere
        self.model.requires_grad_(False)
        self.trunk = getattr(model, "model", None) or model.base_model
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
        # answers to one prompt share it: the prompt is encoded once and each answer attends to it and itself
        groups: dict[tuple[int, ...], list[int]] = {}
        for i, it in enumerate(items):
            if it is not None:
                groups.setdefault(tuple(it[0]), []).append(i)
        packs: list[list[tuple[int, ...]]] = []  # prompts with the same number of answers, <= batch_size answers
        by_k: dict[int, list[tuple[int, ...]]] = {}
        for key, members in groups.items():
            by_k.setdefault(len(members), []).append(key)
        for k, keys in sorted(by_k.items()):
            per = max(1, self.batch_size // k)
            packs += [keys[s : s + per] for s in range(0, len(keys), per)]
        quiet = n < 256 or os.environ.get("CI") == "true"  # a bar only where encoding takes a while
        for keys in tqdm(packs, desc="encoding prompts and answers", unit="batch", disable=quiet):
            rows = [groups[key] for key in keys]
            batch = pack(
                [list(key) for key in keys],
                [[items[i][1] for i in members] for members in rows],  # type: ignore[index]
                self.pad_id,
                self.max_length,
                self.layout,
            ).to(self.device)
            with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.dtype == "bfloat16"):
                h = hidden_states(self.model, batch).float().cpu()
            B = len(keys)
            last_row, last_pos, n_tok = batch.last_row.cpu(), batch.last_pos.cpu(), batch.lengths.cpu()
            for b, members in enumerate(rows):
                prompt_row, prompt_pos = last_row[b], last_pos[b] - n_tok[b]  # the token before answer 0
                for k, i in enumerate(members):
                    seq = k * B + b
                    hp[i] = h[prompt_row, prompt_pos]
                    hr[i] = h[last_row[seq], last_pos[seq]]
                    lengths[i] = n_tok[seq]
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
    write_json(out / MO_FILE, {"objectives": heads.objectives, **meta}, indent=2)


def load_heads(path: str | Path) -> tuple[Heads, dict[str, Any]]:
    p = Path(path)
    if not (p / MO_FILE).exists():
        raise UserError(f"{p} is not a multi-objective RM (no {MO_FILE}){_run_dir_hint(p)}")
    meta = json.loads((p / MO_FILE).read_text(encoding="utf-8"))
    t = torch.load(p / HEADS_FILE, map_location="cpu", weights_only=True)
    gating = None
    if t["gating"] is not None:
        g = meta["gating"]
        gating = Gating(t["W"].shape[1], len(meta["objectives"]), g["hidden"], g["layers"], 0.0, g["temperature"])
        gating.load_state_dict(t["gating"])
        gating.eval()
    return Heads(meta["objectives"], t["W"], t["penalties"], t["w_verbosity"], gating), meta


def _run_dir_hint(p: Path) -> str:
    if (p / "model" / MO_FILE).exists():
        return f"; {p} is a training run: its model is {p / 'model'}"
    return "; train one with `align rm train --config configs/mo_rm_suite.yaml`"


def objectives_of(path: str | Path) -> list[str]:
    """The objective names a saved multi-objective RM outputs (read from its json, no model loaded)."""
    p = Path(path) / MO_FILE
    if not p.exists():
        raise UserError(f"{path}: not a multi-objective RM (no {MO_FILE}){_run_dir_hint(Path(path))}")
    return list(json.loads(p.read_text(encoding="utf-8"))["objectives"])


# --- training ---------------------------------------------------------------------------------------------------


@dataclass
class LabelledData:
    """One split's objective-labelled answers (rated records) and preference pairs."""

    rated: list[RatedResponses]
    pairs: list[PreferencePair]
    dropped: dict[str, int]


def as_rated(pairs: list[PreferencePair]) -> list[RatedResponses]:
    """Pairs whose attributes carry per-objective scores of both sides (`gold_chosen`, `gold_rejected`: the suite's
    gold graders) as rated records of two answers; other pairs are left out."""
    out = []
    for p in pairs:
        gc, gr = p.attributes.get("gold_chosen"), p.attributes.get("gold_rejected")
        if not (isinstance(gc, dict) and isinstance(gr, dict)):
            continue
        scores = [
            {k: float(v) for k, v in g.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
            for g in (gc, gr)
        ]
        out.append(RatedResponses(p.prompt, [p.chosen, p.rejected], scores, {"pair": p.id}, p.source))
    return out


def labelled_data(cfg: MORMTrainConfig, split: Literal["train", "test"]) -> LabelledData:
    """The split's labelled answers (`data`) and preference pairs (`preference`, else the data's pairs); the
    limit applies to the training split only."""
    limit = cfg.data.limit if split == "train" else None
    # with a preference file the rated records are not paired (their pairs would go unused)
    loaded = load(replace(cfg.data, split=split, limit=limit, pairing="none" if cfg.preference else cfg.data.pairing))
    dropped = dict(loaded.report.dropped)
    pairs = loaded.pairs
    if cfg.preference is not None:  # split as the data is, so no prompt is held out on one side and fitted on the other
        pref = load(
            replace(
                cfg.preference,
                split=split,
                split_fractions=cfg.data.split_fractions,
                split_seed=cfg.data.split_seed,
                split_key="prompt",
                limit=cfg.preference.limit if split == "train" else None,
            )
        )
        pairs = pref.pairs
        dropped.update({f"preference.{k}": v for k, v in pref.report.dropped.items()})
    return LabelledData(loaded.rated + as_rated(loaded.pairs), pairs, dropped)


def _key(prompt: Conversation, response: Conversation) -> str:
    return json.dumps([[[m.role, m.content] for m in prompt], [[m.role, m.content] for m in response]])


class FeatureCache:
    """The backbone's features of each distinct (prompt, response), computed once: an answer that appears in the
    labelled rows, in several preference pairs and in the evaluation is encoded one time."""

    def __init__(self, bb: Backbone) -> None:
        self.bb = bb
        self.rows: dict[str, tuple[torch.Tensor, torch.Tensor, float, bool]] = {}

    def __call__(self, prompts: list[Conversation], responses: list[Conversation]) -> tuple[torch.Tensor, ...]:
        """(h_prompt (N, d), h_resp (N, d), lengths (N,), ok (N,)) as `Backbone.features`."""
        keys = [_key(p, r) for p, r in zip(prompts, responses, strict=True)]
        todo: dict[str, int] = {}
        for i, k in enumerate(keys):
            if k not in self.rows and k not in todo:
                todo[k] = i
        if todo:
            idx = list(todo.values())
            hp, hr, lengths, ok = self.bb.features([prompts[i] for i in idx], [responses[i] for i in idx])
            for j, k in enumerate(todo):
                self.rows[k] = (hp[j], hr[j], float(lengths[j]), bool(ok[j]))
        got = [self.rows[k] for k in keys]
        d = self.bb.trunk.config.hidden_size
        if not got:
            return torch.zeros(0, d), torch.zeros(0, d), torch.zeros(0), torch.zeros(0, dtype=torch.bool)
        return (
            torch.stack([g[0] for g in got]),
            torch.stack([g[1] for g in got]),
            torch.tensor([g[2] for g in got]),
            torch.tensor([g[3] for g in got]),
        )


def _rows(
    rated: list[RatedResponses], objectives: list[str]
) -> tuple[list[Conversation], list[Conversation], torch.Tensor]:
    """Distinct (prompt, response) rows of rated records with their per-objective labels (NaN when missing; a
    repeated answer keeps its first labels)."""
    seen: set[str] = set()
    prompts: list[Conversation] = []
    responses: list[Conversation] = []
    labels: list[list[float]] = []
    for r in rated:
        for resp, sc in zip(r.responses, r.scores, strict=True):
            key = _key(r.prompt, resp)
            if key in seen:
                continue
            seen.add(key)
            prompts.append(r.prompt)
            responses.append(resp)
            labels.append([float(sc[o]) if o in sc else math.nan for o in objectives])
    return prompts, responses, torch.tensor(labels, dtype=torch.float32).reshape(len(labels), len(objectives))


def per_objective_accuracy(
    rated: list[RatedResponses], objectives: list[str], scores: list[torch.Tensor]
) -> dict[str, Any]:
    """For each objective, accuracy over every two answers to one prompt whose labels differ on it; `scores[i]` is
    record i's (n_i, K) objective scores (or (n_i, 1): one scalar used for every objective). Ties in the scores
    are wrong; a comparison with an unscored answer (NaN) is left out and counted."""
    out: dict[str, Any] = {}
    for k, o in enumerate(objectives):
        right = n = unscored = 0
        for r, s in zip(rated, scores, strict=True):
            col = min(k, s.shape[1] - 1)
            for i in range(len(r.responses)):
                for j in range(i + 1, len(r.responses)):
                    gi, gj = r.scores[i].get(o), r.scores[j].get(o)
                    if gi is None or gj is None or gi == gj:
                        continue
                    d = float(s[i, col] - s[j, col])
                    if math.isnan(d):
                        unscored += 1
                        continue
                    n += 1
                    right += int(d != 0 and (d > 0) == (gi > gj))
        out[o] = {"accuracy": right / n if n else math.nan, "pairs": n, "unscored": unscored}
    return out


def pair_accuracy(pairs: list[PreferencePair], score_c: torch.Tensor, score_r: torch.Tensor) -> tuple[float, int]:
    """(accuracy, pairs scored) of `accuracy_report` over the pairs whose two scores are numbers (ties wrong); a pair
    with a NaN side (an answer that could not be encoded) is left out."""
    ok = ~(torch.isnan(score_c) | torch.isnan(score_r))
    kept = [p for p, k in zip(pairs, ok.tolist(), strict=True) if k]
    return accuracy_report(kept, score_c[ok], score_r[ok])["accuracy"], len(kept)


def fit_bt_head(diff: torch.Tensor, seed: int) -> tuple[torch.Tensor, float, float]:
    """A linear Bradley–Terry head on h_resp: w = argmin mean softplus(−(h_c − h_r)·w) + α|w|², α chosen from
    ALPHAS·1e-4 by validation loss on a seeded 80/20 split of the pairs, then refitted on all. `diff` is
    h_c − h_r (N, d). Returns (w, α, validation loss)."""
    if len(diff) < 5:
        raise UserError(f"the linear BT head has {len(diff)} training pairs; at least 5 are needed")
    X = diff.double()

    def fit(rows: torch.Tensor, alpha: float) -> torch.Tensor:
        w = torch.zeros(X.shape[1], dtype=torch.float64, requires_grad=True)
        opt = torch.optim.LBFGS([w], lr=1.0, max_iter=200, line_search_fn="strong_wolfe")

        def closure() -> torch.Tensor:
            opt.zero_grad()
            loss = torch.nn.functional.softplus(-(X[rows] @ w)).mean() + alpha * (w * w).sum()
            loss.backward()
            return loss

        opt.step(closure)
        return w.detach()

    idx = list(range(len(X)))
    random.Random(seed).shuffle(idx)
    cut = int(0.8 * len(idx))
    tr, va = torch.tensor(idx[:cut]), torch.tensor(idx[cut:])
    best = (math.inf, 0.0)
    for a in (1e-4 * x for x in ALPHAS):
        w = fit(tr, a)
        val = float(torch.nn.functional.softplus(-(X[va] @ w)).mean())
        if val < best[0]:
            best = (val, a)
    return fit(torch.arange(len(X)), best[1]).float(), best[1], best[0]


Rows = Callable[[list[Conversation], list[Conversation]], torch.Tensor]
"""A scorer of (prompt, answer) rows: (N, K) objective scores or (N,) one score, NaN where it cannot score."""


def on_features(feats: FeatureCache, score: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> Rows:
    """`score(h_prompt, h_resp)` as a row scorer over the cached features (NaN for unencodable answers)."""

    def rows(prompts: list[Conversation], responses: list[Conversation]) -> torch.Tensor:
        hp, hr, _, ok = feats(prompts, responses)
        s = score(hp, hr)
        return s.masked_fill(~(ok.unsqueeze(-1) if s.dim() == 2 else ok), math.nan)

    return rows


def held_out(test: LabelledData, objectives: list[str], objective_rows: Rows, overall_rows: Rows) -> dict[str, Any]:
    """One scorer on the held-out split: per-objective accuracy of `objective_rows` on the labelled answers, and
    the accuracy of `overall_rows` on the preference pairs."""
    per_record = []
    for r in test.rated:
        s = objective_rows([r.prompt] * len(r.responses), r.responses)
        per_record.append(s.unsqueeze(-1) if s.dim() == 1 else s)
    prompts = [p.prompt for p in test.pairs]
    acc, scored = pair_accuracy(
        test.pairs,
        overall_rows(prompts, [p.chosen for p in test.pairs]),
        overall_rows(prompts, [p.rejected for p in test.pairs]),
    )
    return {
        "per_objective": per_objective_accuracy(test.rated, objectives, per_record),
        "overall_accuracy": acc,
        "test_pairs": scored,
    }


def run(cfg: MORMTrainConfig, resume: bool = False) -> dict[str, Any]:
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    train, test = labelled_data(cfg, "train"), labelled_data(cfg, "test")
    if not train.rated:
        raise UserError(
            f"data.source {cfg.data.source}: no answers with per-objective labels in the train split; give rated "
            "records (e.g. format: finegrained_labels, helpsteer) or pairs whose attributes hold gold_chosen / "
            "gold_rejected (the suite)"
        )
    present = {k for r in train.rated for sc in r.scores for k in sc}
    missing = [o for o in cfg.objectives if o not in present]
    if missing:
        raise UserError(
            f"objectives: {', '.join(missing)} label no answer of data.source {cfg.data.source}; its labels are "
            f"{', '.join(sorted(present)) or 'none'}"
        )
    if (cfg.gating.enabled or cfg.linear_bt) and not train.pairs:
        raise UserError(
            f"no preference pairs in the train split of {(cfg.preference or cfg.data).source} for the gating / the "
            "linear BT head; give `preference:` (e.g. format: finegrained) or set gating.enabled: false and "
            "linear_bt: false"
        )
    bb = Backbone(cfg.backbone, cfg.dtype, cfg.max_length, cfg.batch_size)
    feats = FeatureCache(bb)
    # every answer the run reads, encoded in one pass: a prompt is encoded once with all its answers
    every = [(r.prompt, a) for r in train.rated + test.rated for a in r.responses]
    every += [(p.prompt, a) for p in train.pairs + test.pairs for a in (p.chosen, p.rejected)]
    feats([p for p, _ in every], [a for _, a in every])
    prompts, responses, Y = _rows(train.rated, cfg.objectives)
    hp, hr, lengths, ok = feats(prompts, responses)
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
    heads = Heads(list(cfg.objectives), W, penalties, w_v, None)
    gate_log: list[float] = []
    pc = feats([p.prompt for p in train.pairs], [p.chosen for p in train.pairs])
    pr = feats([p.prompt for p in train.pairs], [p.rejected for p in train.pairs])
    both = pc[3] & pr[3]
    if cfg.gating.enabled:
        heads.gating = train_gating(cfg, pc[0][both], heads.rewards(pc[1][both]), heads.rewards(pr[1][both]), gate_log)
    bt_w = None
    if cfg.linear_bt:
        bt_w, bt_alpha, bt_val = fit_bt_head(pc[1][both] - pr[1][both], cfg.seed)
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
    # held-out evaluation: per-objective on the labelled answers, overall on the preference pairs
    ours = held_out(
        test, cfg.objectives, on_features(feats, lambda hp, hr: heads.rewards(hr)), on_features(feats, heads.score)
    )
    report: dict[str, Any] = {
        "model_dir": str(out / "model"),
        "backbone": cfg.backbone,
        "data": {
            "source": cfg.data.source,
            "format": cfg.data.format,
            "preference": cfg.preference.source if cfg.preference else cfg.data.source,
            "train_labelled_prompts": len(train.rated),
            "train_pairs": len(train.pairs),
            "test_labelled_prompts": len(test.rated),
            "dropped": train.dropped,  # rows of the files (read whole, before the split) left out, by reason
        },
        "objectives": cfg.objectives,
        "train_rows": int(len(Y)),
        "skipped_rows": bb.skipped,
        **ours,
        "penalties": meta["penalties"],
        "alphas": alphas,
        "validation_mse": mses,
        "gating_loss": gate_log[-1] if gate_log else None,
    }
    if bt_w is not None:
        linear = on_features(feats, lambda hp, hr: hr @ bt_w)
        report["linear_bt"] = {
            "alpha": bt_alpha,
            "validation_loss": bt_val,
            **held_out(test, cfg.objectives, linear, linear),
        }
    if cfg.compare_with:
        bt = ScalarScorer(ScalarOptions(model=cfg.compare_with))

        def scalar(prompts: list[Conversation], responses: list[Conversation]) -> torch.Tensor:
            return torch.tensor(bt.score(prompts, responses), dtype=torch.float32)

        report["bt"] = {"model": cfg.compare_with, **held_out(test, cfg.objectives, scalar, scalar)}
    report["seconds"] = round(time.time() - t0, 1)
    report["run_report"] = str(out / "report.json")
    write_json(out / "report.json", report, indent=2)
    return report


def train_gating(
    cfg: MORMTrainConfig, h_prompt: torch.Tensor, Rc: torch.Tensor, Rr: torch.Tensor, log: list[float]
) -> Gating:
    """Stage 2: the gating MLP by Bradley–Terry on the training pairs' objective rewards (chosen Rc, rejected Rr),
    backbone and heads frozen (full batch)."""
    torch.manual_seed(cfg.seed)
    g = cfg.gating
    net = Gating(h_prompt.shape[1], len(cfg.objectives), g.hidden, g.layers, g.dropout, g.temperature)
    opt = torch.optim.AdamW(net.parameters(), lr=g.lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, max(g.steps, 1))
    for _ in range(g.steps):
        gate = net(h_prompt)
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
    data = report.get("data", {})
    lines = [
        f"multi-objective RM on {report['backbone']}: {report['train_rows']} labelled training answers "
        f"({data.get('train_labelled_prompts', '?')} prompts), {data.get('train_pairs', '?')} preference pairs; "
        f"saved to {report['model_dir']}",
        "held-out accuracy per objective (two answers to one prompt whose labels differ on it):",
    ]
    others = [(name, report[key]) for key, name in (("linear_bt", "linear BT"), ("bt", "BT RM")) if key in report]
    head = f"  {'objective':<22} {'heads':>7}" + "".join(f" {name:>10}" for name, _ in others) + "   pairs"
    lines.append(head)
    for o, v in report["per_objective"].items():
        cols = "".join(f" {r['per_objective'][o]['accuracy']:>10.3f}" for _, r in others)
        lines.append(f"  {o:<22} {v['accuracy']:>7.3f}{cols}   {v['pairs']}")
    cols = "".join(f" {r['overall_accuracy']:>10.3f}" for _, r in others)
    lines.append(
        f"  {'preference pairs':<22} {report['overall_accuracy']:>7.3f}{cols}   {report['test_pairs']}  (gated score)"
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
