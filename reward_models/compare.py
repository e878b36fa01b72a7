"""`align rm compare`: several scorers on the same held-out pairs, with bootstrap intervals and cost per pair.

    align rm compare --scorer polar=polar:runs/polar_finetune_suite/model \\
                     --scorer polar_no_pretrain=polar:runs/polar_finetune_nopretrain_suite/model \\
                     --scorer bt=scalar:runs/quickstart/rm/model

Each scorer is called by its kind (reward_models/base.py): pointwise scores chosen and rejected, a reference
scorer scores both against the pair's reference answer (`attributes["reference"]`; the suite's pairs get their
task's reference answer), a pairwise scorer is asked P(chosen over rejected). A pair is right when chosen scores
strictly higher (ties and NaN wrong, as RewardBench's classifier rule). Reported per scorer: accuracy with a 95%
percentile bootstrap interval over pairs, per task family, and seconds per pair (wall clock of scoring, model
loading excluded); for every scorer after the first, the paired bootstrap interval of its accuracy minus the
first's (the same resampled pairs for both), so "does A beat B" is answered with its uncertainty.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from prefalign.errors import UserError
from prefalign.stats import bootstrap_ci, paired_bootstrap
from preference_data.records import PreferencePair

from .scorers import SCORERS, load_scorer, scorer_spec


@dataclass
class ScorerSpec:
    """One compared scorer: its label and its spec (a mapping with `type`, as `load_scorer` takes it)."""

    label: str
    spec: dict[str, Any]

    @property
    def kind(self) -> str:
        return str(self.spec["type"])

    @property
    def model(self) -> str | None:
        return self.spec.get("model")

    @classmethod
    def parse(cls, text: str) -> ScorerSpec:
        """LABEL=SPEC, the spec as every command writes it (`scorer_spec`): bt=scalar:runs/rm_suite/model,
        bt=runs/rm_suite/model, judge=judge:builtin:smollm2-135m-instruct, '{type: grm, ...}'."""
        label, sep, rest = text.partition("=")
        if not (sep and label and rest) or label.lstrip().startswith("{"):
            raise UserError(
                f"--scorer {text!r}: write LABEL=SPEC, e.g. polar=polar:runs/polar_finetune_suite/model or "
                "bt=scalar:runs/quickstart/rm/model (the label names the row)"
            )
        spec = scorer_spec(rest, flag=f"--scorer {label}=")
        entry = SCORERS.entries.get(spec["type"])
        if entry is not None and entry.kind == "listwise":
            raise UserError(
                f"--scorer {text!r}: '{spec['type']}' judges a benchmark's answers as one list (align bench run "
                "rewardbench2); compare scores preference pairs: use a pointwise, pairwise or reference scorer"
            )
        return cls(label, spec)


CHECKED_CORRUPTIONS = ("wrong_value", "violated_constraint")
"""The suite's corruptions a judge must check to catch (compute the value, find the span, count the items or the
rules): a scalar RM that reads the surface is at chance on them. `compare` reports them together as `checked`."""


@dataclass
class Scored:
    """One scorer's verdicts on the pairs: `correct` per pair (1.0: chosen strictly above rejected; ties and NaN
    0.0) and, for a pairwise scorer that judges each order apart (`compare_orders`), whether the two orders agree
    (`consistent`: both put the same response first; a tie or NaN in either order is not consistent)."""

    correct: list[float]
    consistent: list[float] | None = None
    ties: int = 0  # pairs a pointwise scorer gave equal finite scores (counted wrong in `correct`)


def _pairwise(scorer: Any, chunk: list[PreferencePair]) -> tuple[list[float], list[float] | None]:
    prompts, chosen, rejected = [p.prompt for p in chunk], [p.chosen for p in chunk], [p.rejected for p in chunk]
    if not callable(getattr(scorer, "compare_orders", None)):
        probs = scorer.compare(prompts, chosen, rejected)
        return [float(not math.isnan(x) and x > 0.5) for x in probs], None
    correct, consistent = [], []
    orders = scorer.compare_orders(prompts, chosen, rejected)
    for shares in orders:
        valid = [x for x in shares if not math.isnan(x)]
        mean = sum(valid) / len(valid) if valid else math.nan
        correct.append(float(not math.isnan(mean) and mean > 0.5))
        firsts = {x > 0.5 for x in valid if x != 0.5}
        consistent.append(float(len(valid) == len(shares) and 0.5 not in valid and len(firsts) == 1))
    return correct, consistent if all(len(s) > 1 for s in orders) else None


def score_pairs(scorer: Any, pairs: list[PreferencePair], batch: int = 256) -> Scored:
    """`Scored` for `scorer` on `pairs`, asked by its kind (see the module docstring)."""
    out = Scored([], [] if callable(getattr(scorer, "compare_orders", None)) else None)
    for s in range(0, len(pairs), batch):
        chunk = pairs[s : s + batch]
        prompts = [p.prompt for p in chunk]
        chosen, rejected = [p.chosen for p in chunk], [p.rejected for p in chunk]
        if scorer.kind == "pairwise":
            c, k = _pairwise(scorer, chunk)
            out.correct += c
            if out.consistent is not None and k is not None:
                out.consistent += k
            continue
        if scorer.kind == "reference":
            refs = [p.attributes.get("reference") for p in chunk]
            if any(r is None for r in refs):
                raise UserError(
                    "a reference scorer needs each pair's reference answer (attributes.reference); the suite's "
                    "pairs carry it, a file must have it"
                )
            both = scorer.score_with_reference(prompts + prompts, chosen + rejected, refs + refs)
        else:
            both = scorer.score(prompts + prompts, chosen + rejected)
        n = len(chunk)
        for c, r in zip(both[:n], both[n:], strict=True):
            finite = not math.isnan(c) and not math.isnan(r)
            out.correct.append(float(finite and c > r))
            out.ties += finite and c == r
    return out


def correct_per_pair(scorer: Any, pairs: list[PreferencePair], batch: int = 256) -> list[float]:
    """1.0 where the scorer puts chosen strictly above rejected, else 0.0 (ties and NaN wrong)."""
    return score_pairs(scorer, pairs, batch).correct


def _same(reference: Any, chosen: list[Any]) -> bool:
    ref = reference if isinstance(reference, str) else "\n".join(str(m.get("content", "")) for m in reference)
    return ref.strip() == "\n".join(m.content for m in chosen).strip()


def _groups(pairs: list[PreferencePair], key: Callable[[PreferencePair], str | None]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = defaultdict(list)
    for i, p in enumerate(pairs):
        k = key(p)
        if k is not None:
            out[k].append(i)
    return dict(sorted(out.items()))


def _summary(values: list[float], idx: list[int], bootstrap: int, seed: int) -> dict[str, Any]:
    picked = [values[i] for i in idx]
    lo, hi = bootstrap_ci(picked, bootstrap, seed)
    return {"accuracy": sum(picked) / len(picked), "pairs": len(picked), "interval": [lo, hi]}


def _paired(ours: list[float], theirs: list[float], idx: list[int], bootstrap: int, seed: int) -> dict[str, Any]:
    a, b = [ours[i] for i in idx], [theirs[i] for i in idx]
    return {
        "difference": sum(x - y for x, y in zip(a, b, strict=True)) / len(a),
        "interval": list(paired_bootstrap(a, b, bootstrap, seed)),
    }


def scorer_report(scorer: Any, pairs: list[PreferencePair], bootstrap: int = 2000, seed: int = 0) -> dict[str, Any]:
    """One scorer on `pairs`: accuracy with its interval, overall, per task family, per corruption kind and on the
    checked corruptions (`CHECKED_CORRUPTIONS`); the position consistency of a pairwise scorer that judges each order
    apart; failures, abstentions and cost; `correct` per pair (for paired comparisons)."""
    if not pairs:
        raise UserError("no held-out pairs to score: the split is empty (a suite's dev split needs suite_dev_fraction)")
    groups = {
        "by_family": _groups(pairs, lambda p: str(p.attributes.get("family", p.source or "all"))),
        "by_corruption": _groups(pairs, lambda p: p.attributes.get("corruption")),
    }
    checked = [i for i, p in enumerate(pairs) if p.attributes.get("corruption") in CHECKED_CORRUPTIONS]
    everything = list(range(len(pairs)))
    t0 = time.perf_counter()
    scored = score_pairs(scorer, pairs)
    seconds = time.perf_counter() - t0
    c = scored.correct
    match: dict[str, list[float]] = defaultdict(list)
    for p, x in zip(pairs, c, strict=True):
        if (ref := p.attributes.get("reference")) is not None:
            match["chosen_is_reference" if _same(ref, p.chosen) else "chosen_differs"].append(x)
    describe = scorer.describe() if callable(getattr(scorer, "describe", None)) else {}
    r: dict[str, Any] = {
        "kind": scorer.kind,
        "dtype": describe.get("dtype"),
        **_summary(c, everything, bootstrap, seed),
        "seconds_per_pair": seconds / len(pairs),
        "failures": dict(getattr(scorer, "failures", {}) or {}),
        "abstentions": dict(getattr(scorer, "abstentions", {}) or {}),
        "ties": scored.ties,
        **{name: {k: _summary(c, idx, bootstrap, seed) for k, idx in g.items()} for name, g in groups.items()},
        # a reference scorer has it easy where the chosen answer is the reference itself (about a fifth of
        # the suite's pairs): accuracy on each side, with its pair count
        "by_reference_match": {k: {"accuracy": sum(v) / len(v), "pairs": len(v)} for k, v in sorted(match.items())},
        "correct": c,
    }
    if checked:
        r["checked"] = _summary(c, checked, bootstrap, seed)
    if scored.consistent:
        r["position_consistency"] = _summary(scored.consistent, everything, bootstrap, seed)
        r["consistent"] = scored.consistent
    if callable(getattr(scorer, "cost_per_item", None)):
        r["cost"] = scorer.cost_per_item()
    return r


def compare(specs: list[ScorerSpec], pairs: list[PreferencePair], bootstrap: int = 2000, seed: int = 0) -> dict:
    """`scorer_report` of each scorer on the same pairs, and each scorer after the first against the first, paired,
    overall and on the checked corruptions."""
    if not specs:
        raise UserError("give at least one --scorer LABEL=SPEC, e.g. bt=scalar:runs/rm/model")
    checked = [i for i, p in enumerate(pairs) if p.attributes.get("corruption") in CHECKED_CORRUPTIONS]
    results: dict[str, Any] = {}
    correct: dict[str, list[float]] = {}
    consistent: dict[str, list[float]] = {}
    for spec in specs:
        scorer: Any = load_scorer(spec.spec)
        r = scorer_report(scorer, pairs, bootstrap, seed)
        correct[spec.label] = r.pop("correct")
        if "consistent" in r:
            consistent[spec.label] = r.pop("consistent")
        results[spec.label] = {"scorer": spec.kind, "model": spec.model, **r}
        del scorer
    first = specs[0].label
    everything = list(range(len(pairs)))
    for spec in specs[1:]:
        ours, theirs = correct[spec.label], correct[first]
        results[spec.label][f"minus_{first}"] = _paired(ours, theirs, everything, bootstrap, seed)
        if checked:
            results[spec.label][f"checked_minus_{first}"] = _paired(ours, theirs, checked, bootstrap, seed)
        if spec.label in consistent and first not in consistent:
            results[spec.label]["deciding"] = deciding(ours, consistent[spec.label], theirs, checked, bootstrap, seed)
    return {
        "pairs": len(pairs),
        "bootstrap": bootstrap,
        "checked_corruptions": list(CHECKED_CORRUPTIONS),
        "scorers": results,
        "correct": correct,
        "consistent": consistent,
    }


def deciding(
    judge: list[float], consistent: list[float], reward: list[float], checked: list[int], bootstrap: int, seed: int
) -> dict[str, Any]:
    """The pair accuracy of `rounds.verify` (align/verify.py) on these pairs: the reward (the first scorer) orders each
    pair, a pairwise judge decides where its two orders agree (its verdict wins, right or wrong) and the reward's
    order stands where they disagree. Overall and on the checked pairs, each with its paired difference against the
    reward alone; `decided`: the share of pairs the judge decided."""
    combined = [j if k else r for j, k, r in zip(judge, consistent, reward, strict=True)]
    everything = list(range(len(judge)))
    out = {
        "decided": sum(consistent) / len(consistent),
        "all": _summary(combined, everything, bootstrap, seed),
        "minus_reward": _paired(combined, reward, everything, bootstrap, seed),
    }
    if checked:
        out["checked"] = _summary(combined, checked, bootstrap, seed)
        out["checked_minus_reward"] = _paired(combined, reward, checked, bootstrap, seed)
    return out


def _acc(v: dict[str, Any]) -> str:
    lo, hi = v["interval"]
    return f"{v['accuracy']:.3f} [{lo:.3f}, {hi:.3f}]"


def _diff(d: dict[str, Any]) -> str:
    lo, hi = d["interval"]
    return f"{d['difference']:+.3f} ({lo:+.3f}..{hi:+.3f})"


def summary_lines(result: dict) -> list[str]:
    lines = [f"{'scorer':<24} {'accuracy [95% interval]':<24} s/pair   ({result['pairs']} pairs, ties and NaN wrong)"]
    first = None
    for label, r in result["scorers"].items():
        lines.append(f"{label:<24} {_acc(r):<24} {r['seconds_per_pair']:.4f}")
        if "checked" in r:
            what = " and ".join(result["checked_corruptions"])
            lines.append(f"{'':<24} {_acc(r['checked']):<24} on the {r['checked']['pairs']} {what} pairs")
        if "position_consistency" in r:
            lines.append(f"{'':<24} {_acc(r['position_consistency']):<24} position consistency (both orders agree)")
        if r.get("ties"):
            lines.append(f"{'':<24} {r['ties']:>8d}  pairs scored equal (ties, counted wrong)")
        for k, v in r["by_reference_match"].items():
            lines.append(f"{'':<24} {v['accuracy']:>8.3f}  on {v['pairs']} pairs where {k.replace('_', ' ')}")
        if first is None:
            first = label
            continue
        for key, what in ((f"minus_{first}", "all pairs"), (f"checked_minus_{first}", "checked pairs")):
            if key in r:
                d = r[key]
                dlo, dhi = d["interval"]
                lines.append(
                    f"{'':<24} {d['difference']:+.3f} vs {first} on {what} (paired 95% interval {dlo:+.3f}..{dhi:+.3f})"
                )
        if "deciding" in r:
            d = r["deciding"]
            lines.append(
                f"{'':<24} {_acc(d['all']):<24} {first} proposing, {label} deciding where its orders agree "
                f"({d['decided']:.0%} of pairs; rounds.verify): {_diff(d['minus_reward'])} vs {first}"
            )
            if "checked" in d:
                lines.append(
                    f"{'':<24} {_acc(d['checked']):<24} the same on the checked pairs: "
                    f"{_diff(d['checked_minus_reward'])} vs {first}"
                )
    for table in ("by_family", "by_corruption"):
        names = sorted({k for r in result["scorers"].values() for k in r.get(table, {})})
        if not names:
            continue
        lines.append(f"{table.removeprefix('by_')}: " + " | ".join(result["scorers"]))
        for k in names:
            cells = [_acc(r[table][k]) if k in r.get(table, {}) else "-" for r in result["scorers"].values()]
            n = next(r[table][k]["pairs"] for r in result["scorers"].values() if k in r.get(table, {}))
            lines.append(f"  {k:<22} ({n:>3}) " + " | ".join(cells))
    return lines
