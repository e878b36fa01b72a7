"""Reward components: any scorers, through the one scorer interface, as named weighted components.

A `reward:` config section is a list of components, each a scorer spec (`type` and the kind's options, as
`reward_models.scorers.load_scorer` takes them) or a rule (`RULES`), plus `weight` and an optional `name`:

    reward:
      - {type: scalar, model: runs/rm/model, name: rm}       # a trained reward model
      - {type: implicit, model: runs/dpo/adapter}            # a DPO policy's implicit reward
      - {type: grm, model: runs/judge_grm/model}             # a generative judge (pointwise)
      - {type: polar, model: runs/polar/model, references: suite}  # POLAR against the gold reference
      - {type: multi_objective, model: runs/mo_rm, objective: all} # K components, one per objective head
      - {type: length, max_words: 60, weight: 0.2}          # a length constraint (1 up to 60 words)
      - {type: grader, objective: conciseness, weight: 0.2}  # a gold objective (an oracle: users have no key)

Each component gives one number per completion, or NaN when it abstains or fails: NaN is counted per component
and never read as a zero. How a component is scored is looked up by its kind (`KIND_SCORING`): a pointwise scorer
scores (prompt, response); a reference scorer also gets the record's `meta.reference` unless it looks references
up itself; a rule reads the prompt record (`RULES`); a multi-output scorer (`MULTI_OUTPUT`) gives K components from
one forward. A pairwise scorer (`judge`, `pair_pm`, `think`) is the one component of a pairwise run: every group's
completions are compared pair by pair (`compare_groups`).

Rules:
  length             1 for an answer of at most `max_words` words, max_words / n beyond, 0 for an empty answer
  grader             the suite's gold graders on the prompt record itself (its family and params), so any suite
                     prompt file works without an index; `objective`: overall or one objective
  judge_correctness  judges trained by RL (`align.judge_rl`): the completion's verdict against the gold label in
                     the record (Think-RM binary: 1 if it names the better response, else 0; multiclass: 1 for the
                     exact strength, 0.5 for the right side, else 0; GRM: 1 when the boxed score is within
                     `tolerance` of the gold score, else 0). Unparsable output gets 0 (a wrong answer under the
                     rule) and is counted as `unparsed`.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from prefalign.config import build
from prefalign.errors import ConfigError, UserError, did_you_mean
from prefalign.registry import Table
from preference_data import suite
from preference_data.records import Conversation, Message, PromptOnly
from reward_models.generative.parse import parse_grm_scores, parse_think_answer
from reward_models.multi_objective import objectives_of
from reward_models.scorers import SCORERS, load_scorer

RESERVED = ("type", "weight", "name")  # component keys that are not the scorer's options


@dataclass
class Component:
    """One named reward component: its scorer (or rule), weight, and what it failed on."""

    name: str
    weight: float
    spec: dict[str, Any]  # type and options
    kind: str = "pointwise"  # a key of KIND_SCORING, or "pairwise"
    scorer: Any = None
    column: int = -1  # a multi-output scorer's output column
    nan: int = 0  # completions this component gave no reward
    failures: Counter[str] = field(default_factory=Counter)


# --- rules -------------------------------------------------------------------------------------------------------


def grade(record: PromptOnly, text: str, c: Component) -> float | None:
    """The gold grader's score of `text` for the suite prompt `record` (objective `c.spec["objective"]`); None
    (counted) for a prompt without a grader, an objective the task is not graded on, or a grader error."""
    if not record.grader or not isinstance(record.meta.get("params"), dict):
        c.failures["no_gold_grader"] += 1
        return None
    try:
        g = suite.grade_prompt_only(record, text)
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
    gold = record.meta.get("judge")
    if not isinstance(gold, dict):
        c.failures["no_gold_label"] += 1
        return None
    rule = VERDICT_RULES.get(str(gold.get("kind")))
    if rule is None:
        c.failures["no_gold_label"] += 1
        return None
    return rule(gold, text, c)


def _grm_verdict(gold: dict[str, Any], text: str, c: Component) -> float:
    """GRM: 1 when the boxed score is within `tolerance` of the gold score; unparsable 0 (counted)."""
    parsed = parse_grm_scores(text, 1)
    if parsed.scores is None:
        c.failures["unparsed"] += 1
        return 0.0
    return 1.0 if abs(parsed.scores[0] - float(gold["score"])) <= float(c.spec.get("tolerance", 1.0)) else 0.0


def _think_verdict(gold: dict[str, Any], text: str, c: Component) -> float:
    """Think-RM: 1 for the right verdict; multiclass 0.5 for the right side at the wrong strength; unparsable 0."""
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


# How a judge's output is checked against its gold label, by the label's kind.
VERDICT_RULES: dict[str, Callable[[dict[str, Any], str, Component], float]] = {
    "grm": _grm_verdict,
    "think": _think_verdict,
}


def length_limit(record: PromptOnly, text: str, c: Component) -> float:
    """A length constraint a user sets (no answer key): 1 for an answer of at most `max_words` words, max_words / n
    for a longer one of n words, and 0 for an empty answer (saying nothing is not a concise answer)."""
    n = len(text.split())
    limit = int(c.spec.get("max_words", 60))
    return 0.0 if n == 0 else min(1.0, limit / n)


def _check_length(opts: dict[str, Any], at: str) -> list[str]:
    bad = sorted(set(opts) - {"max_words"})
    out = [f"{at}: length takes only 'max_words', got {bad}"] if bad else []
    m = opts.get("max_words", 60)
    if isinstance(m, bool) or not isinstance(m, int) or m < 1:
        out.append(f"{at}.max_words: must be a whole number >= 1, got {m!r}")
    return out


def _check_grader(opts: dict[str, Any], at: str) -> list[str]:
    obj = opts.get("objective", "overall")
    bad = sorted(set(opts) - {"objective"})
    out = [f"{at}: a grader component takes only 'objective', got {bad}"] if bad else []
    if obj != "overall" and obj not in suite.OBJECTIVES:
        out.append(
            f"{at}.objective: '{obj}' is unknown{did_you_mean(str(obj), list(suite.OBJECTIVES))}; "
            f"use overall or one of {', '.join(suite.OBJECTIVES)}"
        )
    return out


def _check_tolerance(opts: dict[str, Any], at: str) -> list[str]:
    bad = sorted(set(opts) - {"tolerance"})
    return [f"{at}: judge_correctness takes only 'tolerance', got {bad}"] if bad else []


@dataclass(frozen=True)
class Rule:
    fn: Callable[[PromptOnly, str, Component], float | None]
    summary: str
    check: Callable[[dict[str, Any], str], list[str]]
    default_name: Callable[[dict[str, Any]], str]


RULES: Table[Rule] = Table(
    "reward rule",
    {
        "grader": Rule(
            grade,
            "the suite's gold graders on the prompt record (an oracle: the judge of every result)",
            _check_grader,
            lambda spec: f"gold_{spec.get('objective', 'overall')}",
        ),
        "judge_correctness": Rule(
            judge_correctness,
            "a judge's verdict against the record's gold label (judges trained by RL)",
            _check_tolerance,
            lambda spec: "judge_correctness",
        ),
        "length": Rule(
            length_limit,
            "1 up to max_words words, max_words / n beyond, 0 for an empty answer",
            _check_length,
            lambda spec: "length",
        ),
    },
)


# --- scoring by kind ---------------------------------------------------------------------------------------------


def _responses(texts: list[str]) -> list[Conversation]:
    return [[Message("assistant", t)] for t in texts]


def _score_pointwise(c: Component, records: list[PromptOnly], texts: list[str]) -> list[float | None]:
    return list(c.scorer.score([r.prompt for r in records], _responses(texts)))


def _score_reference(c: Component, records: list[PromptOnly], texts: list[str]) -> list[float | None]:
    refs = None
    if getattr(getattr(c.scorer, "opts", None), "references", "given") != "suite":
        refs = [r.meta.get("reference") for r in records]
        missing = sum(x is None for x in refs)
        if missing:
            raise UserError(
                f"reward component '{c.name}' needs a reference answer per prompt and {missing} prompts have "
                "no meta.reference; use suite prompts or set references: suite"
            )
    return list(c.scorer.score_with_reference([r.prompt for r in records], _responses(texts), refs))


def _score_rule(c: Component, records: list[PromptOnly], texts: list[str]) -> list[float | None]:
    rule = RULES[c.spec["type"]]
    return [rule.fn(r, t, c) for r, t in zip(records, texts, strict=True)]


KIND_SCORING: dict[str, Callable[[Component, list[PromptOnly], list[str]], list[float | None]]] = {
    "pointwise": _score_pointwise,
    "reference": _score_reference,
    "rule": _score_rule,
}
"""How a pointwise component of each kind is scored (a pairwise one compares a group: `compare_groups`)."""


def _multi_objective_name(spec: dict[str, Any]) -> str:
    obj = spec.get("objective", "score")
    return "mo" if obj in ("score", "all") else f"mo_{obj}"


@dataclass(frozen=True)
class MultiOutput:
    """A scorer type whose one model gives several components (one forward for all)."""

    expands: Callable[[dict[str, Any]], bool]  # whether this spec asks for every output
    outputs: Callable[[dict[str, Any]], list[str]]  # the output names (read without loading the model)
    default_name: Callable[[dict[str, Any]], str]
    score: Callable[[Any, list[Conversation], list[Conversation]], torch.Tensor]  # (S, K_out)


MULTI_OUTPUT: dict[str, MultiOutput] = {
    "multi_objective": MultiOutput(
        expands=lambda spec: spec.get("objective") == "all",
        outputs=lambda spec: objectives_of(str(spec.get("model"))),
        default_name=_multi_objective_name,
        score=lambda scorer, prompts, responses: scorer.score_multi(prompts, responses),
    ),
}
"""Scorer types that can give K named components (`{type: multi_objective, objective: all}`: <name>_<objective>)."""


def _default_name(spec: dict[str, Any]) -> str:
    kind = str(spec.get("type"))
    if kind in RULES:
        return RULES[kind].default_name(spec)
    if kind in MULTI_OUTPUT:
        return MULTI_OUTPUT[kind].default_name(spec)
    return kind


def _names_of(spec: dict[str, Any]) -> list[str]:
    """A component's name, or a multi-output scorer's K names (<name>_<output>)."""
    base = str(spec.get("name") or _default_name(spec))
    multi = MULTI_OUTPUT.get(str(spec.get("type")))
    if multi is not None and multi.expands(spec):
        return [f"{base}_{o}" for o in multi.outputs(spec)]
    return [base]


# --- checks, without loading any model ----------------------------------------------------------------------------


def check_reward_specs(specs: Any, where: str = "reward") -> list[str]:
    """Every problem with a `reward:` list, without loading any model."""
    kinds = [*SCORERS.names(), *(k for k in RULES.names() if k not in SCORERS)]
    if not isinstance(specs, list) or not specs:
        return [f"{where}: must be a non-empty list of components like {{type: scalar, model: DIR}} (align/rewards.py)"]
    problems: list[str] = []
    names: list[str] = []
    pairwise = 0
    for i, spec in enumerate(specs):
        at = f"{where}[{i}]"
        if not isinstance(spec, dict) or not isinstance(spec.get("type"), str):
            problems.append(f"{at}: a component is a mapping with 'type' (one of {', '.join(kinds)})")
            continue
        opts = {k: v for k, v in spec.items() if k not in RESERVED}
        kind = spec["type"]
        weight = spec.get("weight", 1.0)
        if isinstance(weight, bool) or not isinstance(weight, int | float) or not math.isfinite(weight):
            problems.append(f"{at}.weight: must be a finite number, got {weight!r}")
        try:
            names.extend(_names_of(spec))
        except UserError as e:
            problems.append(f"{at}: {e}")
        if kind in RULES:
            problems += RULES[kind].check(opts, at)
            continue
        if kind not in SCORERS:
            problems.append(
                f"{at}.type: unknown scorer '{kind}'{did_you_mean(kind, kinds)}; choose one of {', '.join(kinds)}"
            )
            continue
        if SCORERS[kind].kind == "listwise":
            problems.append(
                f"{at}.type: '{kind}' judges a benchmark's answers as one list (align bench run rewardbench2); a "
                "reward scores each response: use a pointwise or pairwise scorer"
            )
            continue
        pairwise += SCORERS[kind].kind == "pairwise"
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


def is_pairwise(specs: list[dict[str, Any]]) -> bool:
    """Whether a checked `reward:` list is one pairwise scorer (a group's completions compared pair by pair)."""
    return any(s["type"] in SCORERS and SCORERS[s["type"]].kind == "pairwise" for s in specs)


# --- the loaded components ------------------------------------------------------------------------------------------


class RewardSet:
    """The loaded components of a `reward:` section."""

    def __init__(self, specs: list[dict[str, Any]]) -> None:
        self.components: list[Component] = []
        for spec in specs:
            name = str(spec.get("name") or _default_name(spec))
            weight = float(spec.get("weight", 1.0))
            opts = {k: v for k, v in spec.items() if k not in ("weight", "name")}
            if spec["type"] in RULES:
                self.components.append(Component(name, weight, opts, "rule"))
                continue
            scorer = load_scorer(dict(opts))
            multi = MULTI_OUTPUT.get(spec["type"])
            if multi is not None and multi.expands(spec):
                for k, n in enumerate(_names_of(spec)):
                    self.components.append(Component(n, weight, opts, "multi", scorer, column=k))
                continue
            self.components.append(Component(name, weight, opts, SCORERS[spec["type"]].kind, scorer))
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

    def failures(self) -> dict[str, dict[str, int]]:
        """Per component: completions it gave no reward (`nan`) and why, when it says."""
        return {c.name: {"nan": c.nan, **dict(c.failures)} for c in self.components}

    def score(self, records: list[PromptOnly], texts: list[str]) -> torch.Tensor:
        """(S, K) component rewards of S completions (one record per completion); NaN where a component gave none."""
        out = torch.full((len(texts), len(self.components)), math.nan, dtype=torch.float32)
        multi: dict[int, list[list[float]]] = {}  # one forward per multi-output scorer for all its components
        for k, c in enumerate(self.components):
            if c.kind == "pairwise":
                raise UserError(f"reward component '{c.name}' is pairwise: use it with algorithm.advantage: pairwise")
            if c.kind == "multi":
                if id(c.scorer) not in multi:
                    score_all = MULTI_OUTPUT[c.spec["type"]].score
                    multi[id(c.scorer)] = score_all(c.scorer, [r.prompt for r in records], _responses(texts)).tolist()
                vals: list[float | None] = [row[c.column] for row in multi[id(c.scorer)]]
            else:
                vals = KIND_SCORING[c.kind](c, records, texts)
            for i, v in enumerate(vals):
                if v is None or not math.isfinite(v):
                    c.nan += 1
                else:
                    out[i, k] = float(v)
        return out

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


__all__ = [
    "KIND_SCORING",
    "MULTI_OUTPUT",
    "RULES",
    "Component",
    "RewardSet",
    "check_reward_specs",
    "component_names",
    "grade",
    "is_pairwise",
    "judge_correctness",
    "length_limit",
]
