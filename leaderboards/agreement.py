"""Meta-evaluation against human labels: how often a reward model or judge agrees with the people who labelled a
comparison file (the `agreement` benchmark; reference/reward-models.md §7.7).

Each comparison is reduced to an `Item`: the human labels, the scorer's margin for the first response (score
difference, or a pairwise judge's order-averaged P(first) - 1/2), and what the rules in `rules.py` made of it.
`agreement_numbers` turns the items into:

- accuracy without ties: items whose human majority names a response; a score tie earns the run's tie policy;
- the tie rule: |margin| <= t is a tie verdict. t is given (`tie_threshold`), or chosen on a held-out part of
  the items (`heldout_fraction`, a hash split of the item ids) to agree most with the human labels, and every
  number that uses it is then computed on the other part only. A file without human ties needs no rule (t = 0);
- accuracy with ties and Cohen's kappa against the majority label, on three verdicts (first, second, tie);
- per annotator: the scorer's agreement and kappa with that annotator, next to the annotator's agreement with
  the majority of the others on the same items (the human ceiling); labels that disagree are kept, and the
  agreement between annotators is reported over every pair of labels given to the same item;
- both-order consistency of pairwise judges: how often asking with A and B swapped names the same response;
- best-of-n accuracy: the winner scores strictly above every loser (and the share of losers it beats);
- per-category breakdowns where the file has categories, and percentile bootstrap intervals over items.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from prefalign.config import option
from prefalign.errors import did_you_mean
from prefalign.stats import bootstrap_statistic
from preference_data.comparisons import PRESETS, ColumnMap
from preference_data.splits import split_of

from . import rules


@dataclass
class AgreementOptions:
    """Settings of the `agreement` benchmark (`align bench run agreement --preset NAME | --columns FILE`)."""

    preset: str | None = option(None, "the file's official format: one of `align ls presets`")
    columns: ColumnMap | None = option(None, "a column map for any other labelled comparison file")
    tie_threshold: float | None = option(
        None,
        "|margin| at or below which the scorer's verdict is a tie (score units, or P(first) - 1/2 for a pairwise "
        "judge); default: chosen on a held-out part of the items to agree most with the human labels",
    )
    heldout_fraction: float = option(
        0.3, "share of the two-response items (a hash split of their ids) the tie threshold is chosen on"
    )
    bootstrap: int = option(1000, "bootstrap resamples for the 95% intervals (0: none)")
    seed: int = option(0, "seed of the held-out split and the bootstrap")

    def check(self) -> list[str]:
        problems = []
        if (self.preset is None) == (self.columns is None):
            problems.append(
                "preset / columns: give exactly one: a preset (`align ls presets`) or a column map (columns)"
            )
        if self.preset is not None and self.preset not in PRESETS:
            problems.append(
                f"preset: unknown preset '{self.preset}'{did_you_mean(self.preset, PRESETS.names())}; "
                f"choose one of {', '.join(PRESETS.names())}"
            )
        if self.tie_threshold is not None and self.tie_threshold < 0:
            problems.append(f"tie_threshold: must be >= 0, got {self.tie_threshold}")
        if not 0 < self.heldout_fraction < 1:
            problems.append(f"heldout_fraction: must be between 0 and 1, got {self.heldout_fraction}")
        if self.bootstrap < 0:
            problems.append(f"bootstrap: must be >= 0, got {self.bootstrap}")
        return problems

    @property
    def map_name(self) -> str:
        return self.preset or "columns"


@dataclass
class Item:
    """One comparison as the agreement numbers see it."""

    id: str
    category: str
    kind: str  # "pair" or "best_of_n"
    labels: list[str] = field(default_factory=list)
    annotators: list[str] = field(default_factory=list)
    majority: str | None = None
    margin: float = 0.0
    """pair: the scorer's margin for the first response (see `rules.verdict`)."""
    credit: float | None = None
    """pair with a first/second majority: 1 right, 0 wrong, a score tie by the tie policy."""
    consistent: bool | None = None
    """pair, pairwise judge: both orders name the same response."""
    best_of_n: float | None = None
    """best-of-n: 1 if the winner beats every loser."""
    losers_beaten: float | None = None
    """best-of-n: share of losers the winner beats."""


def _interval(
    statistic: Callable[[list[int]], float | None], m: int, opts: AgreementOptions, salt: int
) -> list[float] | None:
    if opts.bootstrap == 0 or m == 0:
        return None
    lo, hi = bootstrap_statistic(statistic, m, opts.bootstrap, opts.seed + salt)
    return None if lo != lo else [lo, hi]  # NaN: no resample had a value


def _mean_interval(values: list[float], opts: AgreementOptions, salt: int) -> list[float] | None:
    return _interval(lambda idx: sum(values[i] for i in idx) / len(idx), len(values), opts, salt)


def _kappa_interval(a: list[str], b: list[str], opts: AgreementOptions, salt: int) -> list[float] | None:
    return _interval(lambda idx: rules.cohen_kappa([a[i] for i in idx], [b[i] for i in idx]), len(a), opts, salt)


@dataclass
class TieRule:
    threshold: float
    how: str  # "given", "held-out", "no human ties"
    heldout: set[str]
    """Ids of the items the threshold was chosen on (empty unless chosen)."""

    def describe(self) -> str:
        """The rule in words (part of the leaderboard section's name, so runs under other rules stay apart)."""
        if self.how == "given":
            return f"ties at |margin| <= {self.threshold:g}"
        if self.how == "held-out":
            return "held-out tie threshold"
        return "no human ties"


def tie_rule(items: list[Item], opts: AgreementOptions) -> TieRule:
    """The given threshold; else 0 when no human label is a tie; else the one chosen on the held-out part."""
    if opts.tie_threshold is not None:
        return TieRule(opts.tie_threshold, "given", set())
    pairs = [it for it in items if it.kind == "pair"]
    if not any("tie" in it.labels for it in pairs):
        return TieRule(0.0, "no human ties", set())
    fr = (1.0 - opts.heldout_fraction, opts.heldout_fraction, 0.0)
    held = [it for it in pairs if it.majority is not None and split_of(it.id, fr, opts.seed) == "dev"]
    t = rules.choose_tie_threshold([it.margin for it in held], [str(it.majority) for it in held])
    return TieRule(t, "held-out", {it.id for it in held})


def _leave_one_out(labels: list[str], k: int) -> str | None:
    """The majority of the labels other than the k-th (strictly more votes than any other), or None."""
    others = labels[:k] + labels[k + 1 :]
    if not others:
        return None
    counts = sorted(((others.count(v), v) for v in rules.AGREEMENT_VERDICTS), reverse=True)
    return counts[0][1] if counts[0][0] > counts[1][0] else None


def annotator_table(evaluated: list[Item], rule: TieRule) -> dict[str, dict[str, Any]]:
    """Per annotator: items, the scorer's agreement and kappa with them, and (with other labels on the same items)
    the annotator's agreement with the others' majority: the human ceiling."""
    model: dict[str, list[tuple[str, str]]] = defaultdict(list)
    ceiling: dict[str, list[float]] = defaultdict(list)
    for it in evaluated:
        v = rules.verdict(it.margin, rule.threshold)
        for k, (who, label) in enumerate(zip(it.annotators, it.labels, strict=True)):
            model[who].append((v, label))
            rest = _leave_one_out(it.labels, k)
            if rest is not None:
                ceiling[who].append(float(label == rest))
    out: dict[str, dict[str, Any]] = {}
    for who, pairs in model.items():
        a, b = [p[0] for p in pairs], [p[1] for p in pairs]
        out[who] = {
            "n": len(pairs),
            "agreement": rules.mean([float(x == y) for x, y in pairs]),
            "kappa": rules.cohen_kappa(a, b),
            "human_agreement_with_others": rules.mean(ceiling[who]) if ceiling[who] else None,
        }
    return dict(sorted(out.items(), key=lambda kv: -kv[1]["n"]))


def inter_annotator(items: list[Item], rule: TieRule) -> dict[str, Any]:
    """Agreement between the human labels given to the same item (every pair of them), the scorer's agreement with
    those same labels, and the mean Cohen's kappa over annotator pairs (weighted by shared items)."""
    multi = [it for it in items if len(it.labels) >= 2]
    human, model = [], []
    shared: dict[tuple[str, str], tuple[list[str], list[str]]] = {}
    for it in multi:
        v = rules.verdict(it.margin, rule.threshold)
        model += [float(v == y) for y in it.labels]
        for i in range(len(it.labels)):
            for j in range(i + 1, len(it.labels)):
                human.append(float(it.labels[i] == it.labels[j]))
                key = tuple(sorted((it.annotators[i], it.annotators[j])))
                a, b = shared.setdefault((key[0], key[1]), ([], []))
                first = it.annotators[i] == key[0]
                a.append(it.labels[i] if first else it.labels[j])
                b.append(it.labels[j] if first else it.labels[i])
    kappas = [(k, len(a)) for a, b in shared.values() if len(a) >= 2 and (k := rules.cohen_kappa(a, b)) is not None]
    return {
        "items_with_several_labels": len(multi),
        "items_where_annotators_disagree": sum(len(set(it.labels)) > 1 for it in multi),
        "human_pairwise_agreement": rules.mean(human),
        "model_agreement_with_those_labels": rules.mean(model),
        "human_kappa": sum(k * n for k, n in kappas) / sum(n for _, n in kappas) if kappas else None,
    }


def agreement_numbers(items: list[Item], opts: AgreementOptions, pairwise: bool, consistency: bool) -> dict[str, Any]:
    """Every agreement number of a run (see the module docstring): headline, sections, per category, extra.

    pairwise: the margins are P(first) - 1/2 (a pairwise judge); consistency: report both-order consistency
    (a pairwise judge asked each order separately)."""
    pairs = [it for it in items if it.kind == "pair"]
    bon = [it for it in items if it.kind == "best_of_n"]
    rule = tie_rule(items, opts)
    evaluated = [it for it in pairs if it.id not in rule.heldout]
    strict = [it for it in pairs if it.credit is not None]  # a first/second majority
    with_label = [it for it in evaluated if it.majority is not None]
    verdicts = [rules.verdict(it.margin, rule.threshold) for it in with_label]
    majority = [str(it.majority) for it in with_label]
    headline_values = [float(it.credit) for it in strict if it.credit is not None]
    headline_values += [float(it.best_of_n) for it in bon if it.best_of_n is not None]
    no_ties = [float(it.credit) for it in strict if it.credit is not None]
    with_ties = [float(v == y) for v, y in zip(verdicts, majority, strict=True)]
    consistent = [float(it.consistent) for it in pairs if it.consistent is not None]
    bon_all = [float(it.best_of_n) for it in bon if it.best_of_n is not None]

    sections: dict[str, float | None] = {
        "Accuracy (no ties)": rules.mean(no_ties),
        "Accuracy (with ties)": rules.mean(with_ties),
        "Kappa": rules.cohen_kappa(verdicts, majority),
        "Both-order consistency": rules.mean(consistent) if consistency else None,
        "Best-of-n": rules.mean(bon_all),
    }
    intervals = {
        "Accuracy": _mean_interval(headline_values, opts, 0),
        "Accuracy (no ties)": _mean_interval(no_ties, opts, 1),
        "Accuracy (with ties)": _mean_interval(with_ties, opts, 2),
        "Kappa": _kappa_interval(verdicts, majority, opts, 3),
        "Both-order consistency": _mean_interval(consistent, opts, 4) if consistency else None,
        "Best-of-n": _mean_interval(bon_all, opts, 5),
    }
    label_counts = {v: sum(it.majority == v for it in pairs) for v in rules.AGREEMENT_VERDICTS}
    extra: dict[str, Any] = {
        "intervals": {k: {"low": v[0], "high": v[1]} for k, v in intervals.items() if v is not None},
        "tie_rule": {
            "rule": rule.how,
            # text, not a number: the leaderboard shows numbers as percentages, and a threshold is in score units
            "threshold": f"{rule.threshold:.6g}",
            "units": "P(first) - 1/2" if pairwise else "score difference",
            "heldout_items": len(rule.heldout),
            "evaluated_items": len(evaluated),
        },
        "human_labels": {
            "pair_items": len(pairs),
            "best_of_n_items": len(bon),
            "majority_first": label_counts["first"],
            "majority_second": label_counts["second"],
            "majority_tie": label_counts["tie"],
            "no_majority": sum(it.majority is None for it in pairs),
            **inter_annotator(evaluated, rule),
        },
        "by_annotator": annotator_table(evaluated, rule),
    }
    if consistency:
        extra["position"] = {"consistency": rules.mean(consistent), "flip_rate": _flip(consistent)}
    if bon:
        extra["best_of_n"] = {
            "items": len(bon),
            "winner_beats_all": rules.mean(bon_all),
            "losers_beaten": rules.mean([float(it.losers_beaten) for it in bon if it.losers_beaten is not None]),
        }
    return {
        "headline": rules.mean(headline_values),
        "sections": sections,
        "subsets": _per_category(items, rule),
        "extra": extra,
        "tie_rule": rule,
    }


def _flip(consistent: list[float]) -> float | None:
    m = rules.mean(consistent)
    return None if m is None else 1.0 - m


def _per_category(items: list[Item], rule: TieRule) -> dict[str, dict[str, Any]]:
    """Per category (only when the file has categories): accuracy, n, and the same columns as the sections."""
    if not any(it.category for it in items):
        return {}
    groups: dict[str, list[Item]] = defaultdict(list)
    for it in items:
        groups[it.category or "(none)"].append(it)
    out = {}
    for name, group in sorted(groups.items()):
        strict = [float(it.credit) for it in group if it.credit is not None]
        bon = [float(it.best_of_n) for it in group if it.best_of_n is not None]
        evaluated = [it for it in group if it.kind == "pair" and it.majority is not None and it.id not in rule.heldout]
        ties = [float(rules.verdict(it.margin, rule.threshold) == it.majority) for it in evaluated]
        out[name] = {
            "score": rules.mean(strict + bon),
            "n": len(group),
            "no_ties": rules.mean(strict),
            "with_ties": rules.mean(ties),
            "best_of_n": rules.mean(bon),
        }
    return out
