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
from dataclasses import dataclass
from typing import Any

from prefalign.errors import UserError
from prefalign.stats import bootstrap_ci, paired_bootstrap
from preference_data.records import PreferencePair

from .scorers import load_scorer, scorer_spec


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
        return cls(label, scorer_spec(rest, flag=f"--scorer {label}="))


def correct_per_pair(scorer: Any, pairs: list[PreferencePair], batch: int = 64) -> list[float]:
    """1.0 where the scorer puts chosen strictly above rejected, else 0.0 (ties and NaN wrong)."""
    out: list[float] = []
    for s in range(0, len(pairs), batch):
        chunk = pairs[s : s + batch]
        prompts = [p.prompt for p in chunk]
        chosen, rejected = [p.chosen for p in chunk], [p.rejected for p in chunk]
        if scorer.kind == "pairwise":
            probs = scorer.compare(prompts, chosen, rejected)
            out += [float(not math.isnan(x) and x > 0.5) for x in probs]
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
        out += [
            float(not math.isnan(c) and not math.isnan(r) and c > r) for c, r in zip(both[:n], both[n:], strict=True)
        ]
    return out


def _same(reference: Any, chosen: list[Any]) -> bool:
    ref = reference if isinstance(reference, str) else "\n".join(str(m.get("content", "")) for m in reference)
    return ref.strip() == "\n".join(m.content for m in chosen).strip()


def compare(specs: list[ScorerSpec], pairs: list[PreferencePair], bootstrap: int = 2000, seed: int = 0) -> dict:
    """Accuracy, interval, per-family accuracy and cost of each scorer on `pairs`; paired differences to the first."""
    if not specs:
        raise UserError("give at least one --scorer LABEL=SPEC, e.g. bt=scalar:runs/rm/model")
    results: dict[str, Any] = {}
    correct: dict[str, list[float]] = {}
    for spec in specs:
        scorer: Any = load_scorer(spec.spec)
        t0 = time.perf_counter()
        c = correct_per_pair(scorer, pairs)
        seconds = time.perf_counter() - t0
        correct[spec.label] = c
        fam: dict[str, list[float]] = defaultdict(list)
        match: dict[str, list[float]] = defaultdict(list)
        for p, x in zip(pairs, c, strict=True):
            fam[str(p.attributes.get("family", p.source or "all"))].append(x)
            if (ref := p.attributes.get("reference")) is not None:
                match["chosen_is_reference" if _same(ref, p.chosen) else "chosen_differs"].append(x)
        lo, hi = bootstrap_ci(c, bootstrap, seed)
        describe = scorer.describe() if callable(getattr(scorer, "describe", None)) else {}
        results[spec.label] = {
            "scorer": spec.kind,
            "kind": scorer.kind,
            "model": spec.model,
            "dtype": describe.get("dtype"),
            "accuracy": sum(c) / len(c),
            "interval": [lo, hi],
            "seconds_per_pair": seconds / len(pairs),
            "failures": dict(getattr(scorer, "failures", {}) or {}),
            "by_family": {k: sum(v) / len(v) for k, v in sorted(fam.items())},
            # a reference scorer has it easy where the chosen answer is the reference itself (about a fifth of
            # the suite's pairs): accuracy on each side, with its pair count
            "by_reference_match": {k: {"accuracy": sum(v) / len(v), "pairs": len(v)} for k, v in sorted(match.items())},
        }
        del scorer
    first = specs[0].label
    for spec in specs[1:]:
        ours, theirs = correct[spec.label], correct[first]
        results[spec.label][f"minus_{first}"] = {
            "difference": sum(a - b for a, b in zip(ours, theirs, strict=True)) / len(ours),
            "interval": list(paired_bootstrap(ours, theirs, bootstrap, seed)),
        }
    return {"pairs": len(pairs), "bootstrap": bootstrap, "scorers": results}


def summary_lines(result: dict) -> list[str]:
    lines = [f"{'scorer':<24} {'accuracy':>8}  95% interval     s/pair   ({result['pairs']} pairs, ties and NaN wrong)"]
    first = None
    for label, r in result["scorers"].items():
        lo, hi = r["interval"]
        lines.append(f"{label:<24} {r['accuracy']:>8.3f}  {lo:.3f}..{hi:.3f}   {r['seconds_per_pair']:.4f}")
        for k, v in r["by_reference_match"].items():
            lines.append(f"{'':<24} {v['accuracy']:>8.3f}  on {v['pairs']} pairs where {k.replace('_', ' ')}")
        if first is None:
            first = label
            continue
        d = r[f"minus_{first}"]
        dlo, dhi = d["interval"]
        lines.append(f"{'':<24} {d['difference']:+.3f} vs {first} (paired 95% interval {dlo:+.3f}..{dhi:+.3f})")
    return lines
