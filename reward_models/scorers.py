"""Every reward source behind the one scorer interface (`reward_models/base.py`), built by name from one table.

    scorer = load_scorer("scalar", model="runs/rm", normalize=True)            # a trained reward model
    scorer = load_scorer({"type": "implicit", "model": "runs/dpo", "reference": "builtin:smollm2-135m-instruct"})
    scorer = load_scorer("judge", model="builtin:smollm2-135m-instruct")       # a chat model as pairwise judge
    scorer = load_scorer("grader")                                              # the suite's gold graders
    scorer.score(prompts, responses)   # or compare(prompts, a, b) for the judge; see `scorer.kind`

This module is the table and the factory: `SCORERS` lists the kinds with what each needs (`align ls scorers`);
each kind's options are one dataclass (`ScalarOptions`, `ImplicitOptions`, `JudgeOptions` in `model_scorers`,
`GraderOptions` in `grader`, `GRMOptions` and `ThinkOptions` in `generative.scorers`, `RB2RateOptions` in
`generative.ratings`, `RB2FourWayOptions` in `generative.four_way`, `PolarOptions`,
`MultiObjectiveOptions`), checked by `prefalign.config.build`, so an unknown or mistyped option is an error that
lists every problem at once. The scorers themselves live in modules that import no other kind (`batched` holds
the machinery they share), so this table imports them all and none imports it back.

How the model scorers (scalar, implicit, judge) run:
- Tokenization is stage 1's (`tokenize_single`, `tokenize_prompts`): the chat template is rendered once, the
  prompt/response boundary is found on tokens and every response ends with the EOS generation stops at, exactly
  as in training.
- Shared prompts: items with the same prompt tokens (a pair's two answers, a prompt's samples) go up to four at a
  time (`batched.SHARED_RESPONSES`) into one segment with the prompt encoded once, each response attending its
  prompt and itself (the training layout).
- Length bucketing: segments are sorted by token count (longest first) and cut into batches of at most
  `batch_tokens` tokens; a batch is packed (`preference_data.packing.pack`, rows as long as its longest segment)
  and run once under `torch.no_grad`. Scores go back in input order; batch size, order and which items share a
  prompt do not change them (tests check it).
- Reading the reward: by position (`last_token_rewards` reads the packed batch's last response token), never by
  searching for a pad id. SmolLM2's pad token is its EOS `<|im_end|>`, so `AutoModelForSequenceClassification`'s
  own pooling ("last token that is not pad") would read the token *before* the closing EOS.
- `max_length` (default: the model's `max_position_embeddings`): a longer item keeps its whole response and
  loses prompt tokens from the left (TRL's `keep_end`, as in training); a response that alone does not fit, or a
  judge prompt that does not fit, scores NaN.
- A failed item scores NaN and never stops the run: an empty response, a conversation the chat template
  rejects, an item too long, a batch whose forward pass raises (retried item by item first). `scorer.failures`
  counts them by reason; the benchmark runner counts the NaNs and reports them.
- `describe()` holds what changes a score (model and a fingerprint of its weight files, dtype, normalisation,
  beta, template, ...), not what does not (batch size, device), so cached benchmark scores stay valid when only
  those change and are not reused after a model is retrained into the same directory.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

from prefalign.config import build, option
from prefalign.errors import UserError, did_you_mean
from prefalign.models.hub import is_adapter, resolve
from prefalign.registry import Table

from .base import Scorer, ScorerKind
from .generative.four_way import RB2FourWayOptions, RB2FourWayScorer
from .generative.ratings import RB2RateOptions, RB2RateScorer
from .generative.scorers import GRMOptions, GRMScorer, ThinkJudgeScorer, ThinkOptions
from .grader import GraderOptions, GraderScorer
from .model_scorers import (
    ImplicitOptions,
    ImplicitScorer,
    JudgeOptions,
    JudgeScorer,
    PairPMScorer,
    ScalarOptions,
    ScalarScorer,
)
from .options import BATCH_TOKENS, RefusalRuleOptions
from .polar.options import PolarOptions


@dataclass
class MultiObjectiveOptions:
    model: str = option(doc="a multi-objective RM directory (its model/ folder, with multi_objective.json)")
    objective: str = option("score", "score (the gated score), one objective's reward, or all (online rewards)")
    dtype: str = option("auto", "backbone dtype: auto (bf16 where native), bfloat16, float32")


@dataclass
class EnsembleOptions:
    members: list[Any] = option(
        doc="the member reward models, each a scorer SPEC as everywhere: a reward-model directory, KIND:MODEL, or a "
        "mapping {type: KIND, model: DIR, ...}; every member pointwise"
    )
    k: float = option(1.0, "the penalty: the score is the members' mean minus k times their std (0: the plain mean)")
    normalize: bool = option(
        True, "scalar members score (r - mean) / std with their own saved statistics (members trained apart differ)"
    )
    weights: list[float] | None = option(
        None,
        "one weight per member (default: equal): the mean and the std are weighted; a member on another scale (a "
        "generative judge's 1..10) is put on the others' by its weight",
    )
    missing: Literal["nan", "skip"] = option(
        "nan",
        "a member that gives no score (a generative judge that abstained): the response gets none (nan), or the "
        "members that scored decide it (skip)",
    )

    def check(self) -> list[str]:
        problems = []
        if len(self.members) < 2:
            problems.append(f"members: an ensemble needs at least 2 reward models, got {len(self.members)}")
        if self.weights is not None:
            if len(self.weights) != len(self.members):
                problems.append(f"weights: one per member ({len(self.members)}), got {len(self.weights)}")
            if any(not isinstance(x, int | float) or x < 0 for x in self.weights) or not sum(self.weights) > 0:
                problems.append(f"weights: numbers >= 0, not all 0, got {self.weights}")
        if self.k < 0:
            problems.append(f"k: the penalty must be >= 0, got {self.k}")
        return problems


def _load_multi_objective(opts: MultiObjectiveOptions) -> Scorer:
    from .multi_objective import MultiObjectiveScorer  # lazy: torch at import, not needed to list the scorers

    return cast("Scorer", MultiObjectiveScorer(opts))


def _load_ensemble(opts: EnsembleOptions) -> Scorer:
    """The ensemble's members built from their specs through this table (each pointwise), then the ensemble."""
    from .ensemble import EnsembleScorer  # lazy: torch at import, not needed to list the scorers

    members = []
    for i, m in enumerate(opts.members):
        spec = scorer_spec(m, flag=f"members[{i}]") if isinstance(m, str) else dict(m)
        if spec.get("type") == "scalar":
            spec.setdefault("normalize", opts.normalize)
        kind = SCORERS[spec["type"]].kind
        if kind != "pointwise":
            raise UserError(f"members[{i}]: a {kind} scorer ({spec['type']}); an ensemble's members are pointwise")
        members.append(load_scorer(spec))
    return cast("Scorer", EnsembleScorer(opts.k, opts.normalize, members, opts.weights, opts.missing == "skip"))


def _load_refusal_rule(opts: RefusalRuleOptions) -> Scorer:
    from .refusal_rule import RefusalRuleScorer  # lazy: torch and the probe's model, kept out of `align ls`

    return RefusalRuleScorer(opts)


def _load_polar(opts: PolarOptions) -> Scorer:
    from .polar.scorer import PolarScorer  # lazy: kept out of `align ls` like every model module it needs

    return PolarScorer(opts)


# ---------------------------------------------------------------------------------------------------------
# The table and the factory
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScorerEntry:
    kind: ScorerKind
    """How it is called (reward_models/base.py): pointwise score, pairwise compare, with a reference, or listwise
    rank (benchmarks only)."""
    summary: str
    needs: str
    """What it loads."""
    options: type
    """Its options dataclass."""
    load: Callable[[Any], Scorer]


SCORERS: Table[ScorerEntry] = Table(
    "scorer",
    {
        "scalar": ScorerEntry(
            "pointwise",
            "sequence-classification reward model; reward at the last response token, raw or normalised",
            "model: an RM directory (save_rm / save_pretrained, plain or peft), builtin or hub id",
            ScalarOptions,
            ScalarScorer,
        ),
        "implicit": ScorerEntry(
            "pointwise",
            "DPO implicit reward beta * (log pi - log pi_ref), summed or mean; or reference-free (SimPO); or the "
            "implicit process reward (process: min or sum over steps)",
            "model: a causal LM or peft adapter; reference: a causal LM (default: the adapter's base)",
            ImplicitOptions,
            ImplicitScorer,
        ),
        "judge": ScorerEntry(
            "pairwise",
            "generative judge: P(A better) from the next-token logits of 'A' vs 'B' (JUDGE_TEMPLATE)",
            "model: a chat causal LM",
            JudgeOptions,
            JudgeScorer,
        ),
        "pair_pm": ScorerEntry(
            "pairwise",
            "pairwise preference model (RLHFlow pair-PM): P(A) from the 'A'/'B' token probabilities, both orders "
            "averaged (PAIR_PM_TEMPLATE)",
            "model: a chat causal LM (a trained pair-PM: kind judge_train, judge.kind pair_pm)",
            JudgeOptions,
            PairPMScorer,
        ),
        "grm": ScorerEntry(
            "pointwise",
            "generative RM (DeepSeek-GRM): k sampled critiques end in Score: \\boxed{1..10}; their mean, "
            "optionally only the k_meta a meta-RM rates highest",
            "model: a chat causal LM (a trained GRM: kind judge_train, judge.kind grm); "
            "meta_model: a meta-RM (kind meta_rm_train, optional)",
            GRMOptions,
            GRMScorer,
        ),
        "think": ScorerEntry(
            "pairwise",
            "thinking judge (Think-RM): <think> reasoning then <answer>A|B</answer> (or -3..3); m samples per "
            "order, both orders; P(A) = share of verdicts for A",
            "model: a chat causal LM (a trained judge: kind judge_train, judge.kind think)",
            ThinkOptions,
            ThinkJudgeScorer,
        ),
        "rb2_rate": ScorerEntry(
            "pointwise",
            "RewardBench 2's ratings mode: a chat model rates each answer alone 1..10 with the benchmark's prompt "
            "(Ties: its own), greedy; -1 when no final rating can be read",
            "model: a chat causal LM; prompts: the benchmark's two rating prompts, copied by the user "
            "(docs/evaluation.md)",
            RB2RateOptions,
            RB2RateScorer,
        ),
        "rb2_4way": ScorerEntry(
            "listwise",
            "RewardBench 2's 4-way mode: a chat model sees the four answers (the chosen one at a seeded position) "
            "and names the best, [[A]]..[[D]], greedy; Ties rows rated as rb2_rate does",
            "model: a chat causal LM; prompts: the benchmark's 4-way and Ties prompts, copied by the user "
            "(docs/evaluation.md)",
            RB2FourWayOptions,
            RB2FourWayScorer,
        ),
        "polar": ScorerEntry(
            "reference",
            "POLAR policy discriminator: how likely the response comes from the same policy as the reference "
            "answer (ref <|reward|> candidate <|reward_end|>, read at the end token)",
            "model: a POLAR RM (`align rm train` kind polar_train); a reference per response (benchmark data's "
            "reference column, or references: suite)",
            PolarOptions,
            _load_polar,
        ),
        "multi_objective": ScorerEntry(
            "pointwise",
            "multi-objective RM (ArmoRM-style): per-objective ridge heads on a frozen backbone, verbosity "
            "debiasing, gated score; objective: score (gated), one objective, or all (K reward components)",
            "model: a multi-objective RM directory (`align rm train` kind mo_rm_train)",
            MultiObjectiveOptions,
            _load_multi_objective,
        ),
        "ensemble": ScorerEntry(
            "pointwise",
            "an ensemble of reward models: the members' mean minus k x their std (penalised where they disagree)",
            "members: two or more pointwise scorer specs (reward-model directories)",
            EnsembleOptions,
            _load_ensemble,
        ),
        "refusal_rule": ScorerEntry(
            "pointwise",
            "the refusal rule: 1 when the response declines exactly where a probe of the prompt alone says the "
            "request deserves a refusal, else 0 (composed with an RM as a weighted component)",
            "probe: a refusal probe (`align rm refusal-probe`: a logistic regression on a chat model's prompt states)",
            RefusalRuleOptions,
            _load_refusal_rule,
        ),
        "grader": ScorerEntry(
            "pointwise",
            "the verifiable suite's gold graders: the `overall` (or one objective's) gold score",
            "nothing; suite prompts (tasks regenerated or read from the suite's *_prompts.jsonl)",
            GraderOptions,
            GraderScorer,
        ),
    },
    columns=("kind", "summary", "needs"),
)


def _implicit_source(model: str, reference: str | None) -> str:
    """A LoRA policy's run directory, told to score itself: its adapter (whose base is the implicit reward's
    reference), not its merged copy, which has no reference. Anything else as given."""
    run = Path(model)
    adapter = run / "adapter"
    if reference is not None or not run.is_dir() or (run / "model").is_dir() or not is_adapter(adapter):
        return model
    print(
        f"{run} is a run directory: using its adapter/ ({adapter}; the implicit reward against its base)",
        file=sys.stderr,
        flush=True,
    )
    return str(adapter)


def default_scorer(model: str | None, reference: str | None) -> str:
    """The scorer kind for a model when none is named (`align bench run` without --scorer).

    scalar: a reward model (a saved `reward_stats.json`, a config whose architecture ends with
    ForSequenceClassification, or a peft adapter of task type SEQ_CLS); implicit: a peft adapter of a causal LM
    (its base is the reference), or any model when --reference is given.
    """
    if model is None:
        raise UserError("--model is required (or --scorer grader, which needs no model)")
    path = Path(resolve(model))
    what = "a hub id"
    if path.is_dir():
        if (path / "reward_stats.json").exists():
            return "scalar"
        if is_adapter(path):
            task = json.loads((path / "adapter_config.json").read_text(encoding="utf-8")).get("task_type")
            return "scalar" if task == "SEQ_CLS" else "implicit"
        archs = json.loads((path / "config.json").read_text(encoding="utf-8")).get("architectures") or []
        if any(a.endswith("ForSequenceClassification") for a in archs):
            return "scalar"
        what = f"a model with architectures {archs or 'unknown'}"
    else:
        archs = _hub_architectures(str(path))
        if any(a.endswith("ForSequenceClassification") for a in archs):
            return "scalar"
    if reference is not None:
        return "implicit"
    raise UserError(
        f"cannot tell how to score {model} ({what}: no score head, not a peft adapter, no --reference). Choose:\n"
        f"  --scorer implicit --reference REF   DPO implicit reward against REF (the model {model} was trained from)\n"
        "  --scorer implicit --option reference_free=true --option normalization=mean   SimPO-style, no reference\n"
        "  --scorer judge                       ask the model which of two responses is better (pairwise)\n"
        "  --scorer scalar                      only for a sequence-classification reward model"
    )


def _hub_architectures(ref: str) -> list[str]:
    try:
        from transformers import AutoConfig  # lazy: transformers (seconds), only for a hub id

        return list(getattr(AutoConfig.from_pretrained(ref), "architectures", None) or [])
    except (OSError, ValueError):
        return []


SPEC_FORMS = """  KIND            a scorer kind (`align ls scorers`); its model from --model (grader needs none)
  KIND:MODEL      that kind over that model: scalar:runs/rm/model, pair_pm:builtin:smollm2-135m-instruct
  MODEL           a model directory, builtin:NAME or hub id; its kind told from it (a reward model: scalar,
                  a policy adapter: implicit)
  {type: KIND, model: MODEL, OPTION: VALUE}   a YAML mapping, as in a config's reward: list"""
"""The one way a command names a scorer (`scorer_spec`); shown in the help of every flag that takes one."""


def scorer_spec(
    text: str | dict[str, Any] | None,
    *,
    model: str | None = None,
    options: dict[str, Any] | None = None,
    flag: str = "--scorer",
    other_kinds: tuple[str, ...] = (),
) -> dict[str, Any]:
    """A scorer spec (a mapping with `type`, as `load_scorer` and a config's `reward:` list take it) from the one
    string every command takes (`SPEC_FORMS`), with a separate `model` (--model) and `options` (--option KEY=VALUE,
    which win over the string's own); a mapping already parsed (a YAML config's value) is taken as the inline one.
    `flag` names the flag in errors; `other_kinds` are kinds the caller takes besides the scorers (the served
    reward's rules)."""
    spec: dict[str, Any]
    if isinstance(text, str):
        text = text.strip()
    parsed: Any = text
    if isinstance(parsed, str) and parsed.startswith("{"):
        import yaml  # lazy: only for an inline mapping

        try:
            parsed = yaml.safe_load(parsed)
        except yaml.YAMLError as e:
            raise UserError(f"{flag} {text!r}: not a valid YAML mapping ({e})") from None
        if not isinstance(parsed, dict):
            parsed = {}  # not a mapping: reported below as one without a type
    if isinstance(parsed, dict):
        if not isinstance(parsed.get("type"), str):
            raise UserError(f"{flag} {text!r}: a mapping needs type: KIND, e.g. '{{type: scalar, model: DIR}}'")
        spec = dict(parsed)
    elif parsed is None:
        spec = {}
    else:
        kind, sep, rest = parsed.partition(":")
        if kind in SCORERS or kind in other_kinds:
            spec = {"type": kind, **({"model": rest} if sep else {})}
            if sep and not rest:
                raise UserError(f"{flag} {text!r}: the model after '{kind}:' is missing")
        elif not text:
            raise UserError(f"{flag}: empty; write one of\n{SPEC_FORMS}")
        elif sep and kind != "builtin" and re.fullmatch(r"[a-z][a-z0-9_]+", kind):
            spec = {"type": kind}  # KIND:MODEL with a kind not in the table: reported below, with did-you-mean
        else:
            spec = {"model": text}
    if model is not None:
        if "model" in spec and spec["model"] != model:
            raise UserError(f"{flag} {text!r} names its model and --model {model} names another: give it once")
        spec["model"] = model
    spec.update(options or {})
    if "type" not in spec:
        if "model" not in spec:
            raise UserError(f"{flag}: say what scores: one of\n{SPEC_FORMS}")
        spec["model"] = _implicit_source(spec["model"], spec.get("reference"))
        spec["type"] = default_scorer(spec["model"], spec.get("reference"))
    kinds = [*SCORERS.names(), *other_kinds]
    if spec["type"] not in kinds:
        raise UserError(
            f"{flag}: unknown scorer kind '{spec['type']}'{did_you_mean(spec['type'], kinds)}; one of "
            f"{', '.join(kinds)}"
        )
    return spec


def load_scorer(spec: str | dict[str, Any], **options: Any) -> Scorer:
    """Build a scorer: `load_scorer("scalar", model=...)` or `load_scorer({"type": "scalar", "model": ...})`.

    `options` (and the dict's other keys) are the fields of the kind's options dataclass (`SCORERS[name].options`);
    keyword options override the dict. Unknown or mistyped options raise one `ConfigError` listing them all.
    """
    if isinstance(spec, dict):
        data = dict(spec)
        name = data.pop("type", None)
        if not isinstance(name, str):
            raise UserError(f"a scorer spec needs 'type', one of: {', '.join(SCORERS.names())}; got {spec!r}")
    elif isinstance(spec, str):
        name, data = spec, {}
    else:
        raise UserError(f"a scorer spec is a name or a mapping with 'type', got {type(spec).__name__}")
    data.update(options)
    entry = SCORERS[name]
    opts: Any = build(entry.options, data, f"scorer '{name}'")  # the kind's options dataclass
    return entry.load(opts)


__all__ = [
    "BATCH_TOKENS",
    "SCORERS",
    "EnsembleOptions",
    "SPEC_FORMS",
    "MultiObjectiveOptions",
    "ScorerEntry",
    "default_scorer",
    "load_scorer",
    "scorer_spec",
]
