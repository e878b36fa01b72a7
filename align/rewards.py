"""Rewards for the online loops: any scorers, through the one scorer interface, as named weighted components.

A `reward:` config section is a list of components, each a scorer spec (`type` and the kind's options, as
`reward_models.scorers.load_scorer` takes them) plus `weight` and an optional `name`:

    reward:
      - {type: grader}                                       # the suite's gold graders, overall
      - {type: grader, objective: conciseness, weight: 0.2}  # one gold objective
      - {type: scalar, model: runs/rm/model, name: rm}       # a trained reward model
      - {type: implicit, model: runs/dpo/adapter}            # a DPO policy's implicit reward
      - {type: grm, model: runs/judge_grm/model}             # a generative judge (pointwise)
      - {type: polar, model: runs/polar/model, references: suite}  # POLAR against the gold reference

Pointwise and reference scorers give one number per completion; the combined reward is Σ_k w_k r_k. A
component that abstains or fails returns NaN: the completion's reward is then NaN, the component's NaN count
is logged, and the online loop masks the completion out of the update (advantage 0, no tokens) — never a
silent zero. `grader` components grade from the prompt record itself (its family and params), so any suite
prompt file works without an index; a reference scorer gets the record's `meta.reference` unless it looks
references up itself.

A pairwise scorer (`judge`, `pair_pm`, `think`) is the one component of a pairwise-RLHF run: every group's
completions are compared pair by pair (`compare_groups`), giving the preference matrix of
`align.losses.policy_gradient.pairwise_advantages`.

`judge_correctness` (judges trained by RL): the prompt is a judge prompt built from a gold-labelled pair
(`align.judge_rl`); the completion's verdict is parsed and rewarded by the reference's rule (Think-RM
binary: 1 if it names the better response, else 0; multiclass: 1 for the exact strength, 0.5 for the right
side, else 0; GRM: 1 when the boxed score is within `tolerance` of the gold score, else 0). Unparsable
output gets 0 (a wrong answer under the rule) and is counted as `unparsed`.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import torch

from prefalign.errors import UserError, did_you_mean
from preference_data.records import Conversation, Message, PromptOnly

RULES = ("judge_correctness",)


@dataclass
class Component:
    name: str
    weight: float
    spec: dict[str, Any]
    scorer: Any = None
    kind: str = "pointwise"
    nan: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    column: int = -1  # a multi-objective RM's output column (kind "multi": one scorer gives K components)


def check_reward_specs(specs: Any, where: str = "reward") -> list[str]:
    """Every problem with a `reward:` list, without loading any model."""
    from prefalign.config import build
    from prefalign.errors import ConfigError
    from reward_models.scorers import SCORERS

    if not isinstance(specs, list) or not specs:
        return [f"{where}: must be a non-empty list of components like {{type: grader}} (see align/rewards.py)"]
    problems: list[str] = []
    names: list[str] = []
    pairwise = 0
    for i, spec in enumerate(specs):
        at = f"{where}[{i}]"
        if not isinstance(spec, dict) or not isinstance(spec.get("type"), str):
            problems.append(f"{at}: a component is a mapping with 'type' (one of {', '.join(SCORERS.names())})")
            continue
        opts = {k: v for k, v in spec.items() if k not in ("type", "weight", "name")}
        kind = spec["type"]
        weight = spec.get("weight", 1.0)
        if isinstance(weight, bool) or not isinstance(weight, int | float) or not math.isfinite(weight):
            problems.append(f"{at}.weight: must be a finite number, got {weight!r}")
        try:
            names.extend(_names_of(spec))
        except UserError as e:
            problems.append(f"{at}: {e}")
        if kind in RULES:
            bad = sorted(set(opts) - {"tolerance"})
            if bad:
                problems.append(f"{at}: judge_correctness takes only 'tolerance', got {bad}")
            continue
        if kind not in SCORERS:
            problems.append(
                f"{at}.type: unknown scorer '{kind}'{did_you_mean(kind, [*SCORERS.names(), *RULES])}; "
                f"choose one of {', '.join([*SCORERS.names(), *RULES])}"
            )
            continue
        if SCORERS[kind].kind == "pairwise":
            pairwise += 1
        try:
            build(SCORERS[kind].options, opts, at)
        except ConfigError as e:
            problems.extend(e.problems)
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        problems.append(f"{where}: component names must differ, {dup} repeat; give each a `name:`")
    if pairwise and len(specs) > 1:
        problems.append(
            f"{where}: a pairwise scorer ranks a group's completions against each other and is the only "
            "component of a pairwise run; remove the other components"
        )
    return problems


def component_names(specs: list[dict[str, Any]]) -> tuple[list[str], list[float]]:
    """The names and weights of a checked `reward:` list's components, without loading any model."""
    names: list[str] = []
    weights: list[float] = []
    for s in specs:
        n = _names_of(s)
        names += n
        weights += [float(s.get("weight", 1.0))] * len(n)
    return names, weights


def _names_of(spec: dict[str, Any]) -> list[str]:
    """A component's name, or a multi-objective RM's K names with `objective: all` (<name>_<objective>)."""
    base = str(spec.get("name") or _default_name(spec))
    if spec.get("type") == "multi_objective" and spec.get("objective") == "all":
        from reward_models.multi_objective import objectives_of

        return [f"{base}_{o}" for o in objectives_of(str(spec.get("model")))]
    return [base]


def _default_name(spec: dict[str, Any]) -> str:
    kind = str(spec.get("type"))
    if kind == "grader":
        return f"gold_{spec.get('objective', 'overall')}"
    if kind == "multi_objective":
        obj = spec.get("objective", "score")
        return "mo" if obj in ("score", "all") else f"mo_{obj}"
    return kind


class RewardSet:
    """The loaded components of a `reward:` section."""

    def __init__(self, specs: list[dict[str, Any]]) -> None:
        from reward_models.scorers import SCORERS, load_scorer

        self.components: list[Component] = []
        for spec in specs:
            name = str(spec.get("name") or _default_name(spec))
            opts = {k: v for k, v in spec.items() if k not in ("weight", "name")}
            c = Component(name, float(spec.get("weight", 1.0)), opts)
            if spec["type"] == "grader":
                from preference_data import suite

                obj = spec.get("objective", "overall")
                if obj != "overall" and obj not in suite.OBJECTIVES:
                    raise UserError(
                        f"reward component '{name}': objective '{obj}' is unknown"
                        f"{did_you_mean(obj, list(suite.OBJECTIVES))}; use overall or one of {suite.OBJECTIVES}"
                    )
            elif spec["type"] in RULES:
                c.kind = "rule"
            elif spec["type"] == "multi_objective" and spec.get("objective") == "all":
                scorer = load_scorer(dict(opts))
                for k, n in enumerate(_names_of(spec)):
                    self.components.append(Component(n, c.weight, opts, scorer, "multi", column=k))
                continue
            else:
                c.kind = SCORERS[spec["type"]].kind
                c.scorer = load_scorer({k: v for k, v in opts.items()})
            self.components.append(c)
        self.pairwise = any(c.kind == "pairwise" for c in self.components)

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.components]

    @property
    def weights(self) -> torch.Tensor:
        return torch.tensor([c.weight for c in self.components], dtype=torch.float32)

    def describe(self) -> list[dict[str, Any]]:
        out = []
        for c in self.components:
            d = {"name": c.name, "weight": c.weight, "type": c.spec["type"]}
            if c.scorer is not None and hasattr(c.scorer, "describe"):
                d["scorer"] = c.scorer.describe()
            out.append(d)
        return out

    def score(self, records: list[PromptOnly], texts: list[str]) -> torch.Tensor:
        """(S, K) component rewards of S completions (one record per completion); NaN where a component failed."""
        out = torch.full((len(texts), len(self.components)), math.nan, dtype=torch.float32)
        multi: dict[int, list[list[float]]] = {}  # one forward per multi-objective RM for all its components
        for k, c in enumerate(self.components):
            if c.kind == "pairwise":
                raise UserError(f"reward component '{c.name}' is pairwise: use it with algorithm.advantage: pairwise")
            if c.kind == "multi":
                if id(c.scorer) not in multi:
                    responses: list[Conversation] = [[Message("assistant", t)] for t in texts]
                    multi[id(c.scorer)] = c.scorer.score_multi([r.prompt for r in records], responses).tolist()
                vals: list[float | None] = [row[c.column] for row in multi[id(c.scorer)]]
            else:
                vals = self._score_one(c, records, texts)
            for i, v in enumerate(vals):
                if v is None or not math.isfinite(v):
                    c.nan += 1
                else:
                    out[i, k] = float(v)
        return out

    def _score_one(self, c: Component, records: list[PromptOnly], texts: list[str]) -> list[float | None]:
        if c.spec["type"] == "grader":
            return [_grade(r, t, c) for r, t in zip(records, texts, strict=True)]
        if c.kind == "rule":
            return [judge_correctness(r, t, c) for r, t in zip(records, texts, strict=True)]
        prompts = [r.prompt for r in records]
        responses: list[Conversation] = [[Message("assistant", t)] for t in texts]
        if c.kind == "reference":
            refs = None
            if getattr(getattr(c.scorer, "opts", None), "references", "given") != "suite":
                refs = [r.meta.get("reference") for r in records]
                missing = sum(x is None for x in refs)
                if missing:
                    raise UserError(
                        f"reward component '{c.name}' needs a reference answer per prompt and {missing} prompts have "
                        "no meta.reference; use suite prompts or set references: suite"
                    )
            return list(c.scorer.score_with_reference(prompts, responses, refs))
        return list(c.scorer.score(prompts, responses))

    def compare_groups(self, records: list[PromptOnly], groups: list[list[str]]) -> torch.Tensor:
        """(P, G, G) preference matrix d_ij = P(i ≻ j) − P(j ≻ i) ∈ [−1, 1] from the pairwise component, each
        unordered pair asked once as (A = y_i, B = y_j) (a symmetric scorer such as pair_pm averages both
        orders itself); NaN where the judge failed (counted)."""
        c = next(c for c in self.components if c.kind == "pairwise")
        P = len(groups)
        G = len(groups[0]) if groups else 0
        d = torch.zeros((P, G, G), dtype=torch.float32)
        prompts, a, b, where = [], [], [], []
        for p, (rec, texts) in enumerate(zip(records, groups, strict=True)):
            for i in range(G):
                for j in range(i + 1, G):
                    prompts.append(rec.prompt)
                    a.append([Message("assistant", texts[i])])
                    b.append([Message("assistant", texts[j])])
                    where.append((p, i, j))
        probs = c.scorer.compare(prompts, a, b) if prompts else []
        for (p, i, j), prob in zip(where, probs, strict=True):
            v = math.nan if prob is None or not math.isfinite(prob) else 2.0 * float(prob) - 1.0
            if math.isnan(v):
                c.nan += 1
            d[p, i, j], d[p, j, i] = v, -v if not math.isnan(v) else math.nan
        return d


def combine(components: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """(S, K) x (K,) -> (S,) Σ_k w_k r_k; NaN when any component with a nonzero weight is NaN."""
    used = weights != 0
    r = (torch.nan_to_num(components, nan=0.0) * weights).sum(-1)
    bad = torch.isnan(components[:, used]).any(-1) if used.any() else torch.zeros(len(r), dtype=torch.bool)
    return r.masked_fill(bad, math.nan)


def _grade(record: PromptOnly, text: str, c: Component) -> float | None:
    from preference_data.suite import grade_prompt_only

    if not record.grader or not isinstance(record.meta.get("params"), dict):
        c.failures["no_gold_grader"] += 1
        return None
    try:
        g = grade_prompt_only(record, text)
    except Exception as e:  # a grader bug must not end a long run: NaN (masked), counted, shown once
        key = f"grader_error:{type(e).__name__}"
        if not c.failures[key]:
            print(
                f"reward component '{c.name}': the gold grader failed ({type(e).__name__}: {e}) on prompt "
                f"{record.id} with the response {text[:200]!r}; that completion is masked and counted",
                flush=True,
            )
        c.failures[key] += 1
        return None
    obj = c.spec.get("objective", "overall")
    value = g.overall if obj == "overall" else g.scores.get(obj)
    if value is None:
        c.failures["objective_not_graded"] += 1
    return None if value is None else float(value)


def judge_correctness(record: PromptOnly, text: str, c: Component) -> float | None:
    """The rule reward of a judge's verdict against the gold label in `record.meta["judge"]` (module docstring):
    {"kind": "grm", "score": 1..10} or {"kind": "think", "form": "binary" | "multiclass", "label": "A" | "B",
    "strength": -3..3 (multiclass; negative = A better)}."""
    from reward_models.generative.parse import parse_grm_scores, parse_think_answer

    gold = record.meta.get("judge")
    if not isinstance(gold, dict):
        c.failures["no_gold_label"] += 1
        return None
    if gold.get("kind") == "grm":
        parsed = parse_grm_scores(text, 1)
        if parsed.scores is None:
            c.failures["unparsed"] += 1
            return 0.0
        return 1.0 if abs(parsed.scores[0] - float(gold["score"])) <= float(c.spec.get("tolerance", 1.0)) else 0.0
    form = gold.get("form", "binary")
    verdict = parse_think_answer(text, form)
    if verdict.label is None:
        c.failures["unparsed"] += 1
        return 0.0
    if form == "binary":
        return 1.0 if verdict.label == gold["label"] else 0.0
    if verdict.strength == gold["strength"]:
        return 1.0
    return 0.5 if verdict.label == gold["label"] else 0.0


__all__ = ["RULES", "RewardSet", "check_reward_specs", "combine", "component_names", "judge_correctness"]
