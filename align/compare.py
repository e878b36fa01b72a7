"""`align eval compare`: two saved gold evaluations of the same held-out prompts, compared without generating again.

A saved evaluation is any of what the toolkit writes:
  - `align eval policy --out DIR` (DIR or DIR/report.json; the quickstart's eval/<policy> too): the policy's side;
  - an online run directory (its evals.json): the last evaluation, or the one at step N with `DIR@N`;
  - an iterative run directory: the last round's eval.json, or round N's with `DIR@N` (round 0: the start);
  - any of those JSON files itself.

The two are matched prompt by prompt through their prompt ids (recorded with every evaluation; an evaluation saved
before ids were recorded gets them from its run's config.yaml, `eval.prompts` and `eval.limit`, as the run drew
them). The result: each side's mean gold score and safety rates as saved, the paired difference of the means with a
paired bootstrap 95% interval over the prompts, and the win rate of the first over the second (the same statistics
`align eval policy --baseline` computes, here from the saved scores); and, where a side saved its answers with their
task family (`align eval policy --out`'s generations.jsonl, the quickstart's eval/<policy>), the same difference per
family, with its interval over that family's prompts.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefalign.config import option
from prefalign.errors import UserError
from prefalign.stats import paired_bootstrap, paired_by_group, win_rate


@dataclass(kw_only=True)
class CompareSettings:
    """`align eval compare`: its flags are these fields (`prefalign.flags`)."""

    policy: str = option(doc="the saved evaluation to compare (a directory, a JSON file, or RUN_DIR@STEP)")
    baseline: str = option(doc="the saved evaluation it is compared against, of the same prompts")
    seed: int = option(0, "the paired bootstrap's seed")
    out: str | None = option(None, "also write the comparison as JSON to this file")
    figure: str | None = option(None, "also draw it (gold with the paired interval, the safety rates) to this PNG")


@dataclass
class SavedEval:
    """One saved gold evaluation: where it came from, the mean and per-prompt gold scores, the prompts' ids."""

    source: str  # the file (and step or round) it was read from
    model: str | None
    overall: float
    per_prompt: list[float]
    prompt_ids: list[str]
    safety_rates: dict[str, Any]
    families: dict[str, str] | None = None
    """prompt id -> task family, where the evaluation saved its answers with them (generations.jsonl)"""


def _read(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise UserError(f"{path}: cannot read a saved evaluation ({e})") from e


def _round_dirs(run: Path) -> dict[int, Path]:
    return {
        int(m.group(1)): d / "eval.json"
        for d in run.glob("round_*")
        if (m := re.fullmatch(r"round_(\d+)", d.name)) and (d / "eval.json").exists()
    }


def locate(ref: str) -> tuple[Path, str | None]:
    """(the JSON file of a saved evaluation, the step/round key inside it or None) for `ref` (see the module doc)."""
    path, _, at = ref.partition("@")
    p = Path(path)
    if not p.exists():
        raise UserError(f"{path}: no such file or directory (a saved evaluation: see `align eval compare --help`)")
    if p.is_file():
        return p, at or None
    if (p / "report.json").exists() and "per_prompt" in _read(p / "report.json"):
        return p / "report.json", None
    if (p / "evals.json").exists():
        return p / "evals.json", at or None
    rounds = _round_dirs(p)
    if rounds:
        if at == "0" and (p / "eval_round_0.json").exists():
            return p / "eval_round_0.json", None
        if at:
            if int(at) not in rounds:
                raise UserError(f"{ref}: no round {at} with an evaluation (rounds: {sorted(rounds)})")
            return rounds[int(at)], None
        return rounds[max(rounds)], None
    raise UserError(
        f"{path}: no saved evaluation here (report.json with per_prompt, evals.json, or round_*/eval.json); "
        "evaluate with `align eval policy --out DIR` or give the run's eval.limit > 0"
    )


def _ids_from_run(run: Path, n: int, what: str) -> list[str]:
    """The prompt ids a run's evaluation drew, from its config.yaml (`eval.prompts`, `eval.limit`)."""
    # lazy: the suite's generators (~120 ms at every `align` start) and yaml, only for evaluations saved without ids
    import yaml

    from preference_data.suite.heldout import load_prompts

    cfg_path = run / "config.yaml"
    cfg = yaml.safe_load(cfg_path.read_text(encoding="utf-8")) if cfg_path.exists() else None
    ev = (cfg or {}).get("eval") or {}
    if "prompts" not in ev or "limit" not in ev:
        raise UserError(f"{what}: saved without prompt ids, and {cfg_path} names no eval.prompts / eval.limit")
    ids = [p.id for p in load_prompts(ev["prompts"], ev["limit"])]
    if len(ids) != n:
        raise UserError(f"{what}: {n} scores, but {cfg_path}'s eval section draws {len(ids)} prompts")
    return ids


def load_saved(ref: str) -> SavedEval:
    """The saved evaluation `ref` names."""
    path, at = locate(ref)
    data = _read(path)
    run = path.parent
    if isinstance(data, dict) and isinstance(data.get("policy"), dict) and "per_prompt" in data:  # eval policy
        ev, model, what = data["policy"], data.get("model"), str(path)
        rows = _generations(path.parent / "generations.jsonl")
        if not data.get("prompt_ids") and rows is None:
            raise UserError(f"{path}: saved without prompt ids and without generations.jsonl beside it")
        ids = data.get("prompt_ids") or [r["id"] for r in rows or []]
        families = {r["id"]: r["family"] for r in rows} if rows and all("family" in r for r in rows) else None
        return SavedEval(what, model, ev["overall"], data["per_prompt"], ids, ev.get("safety_rates") or {}, families)
    if isinstance(data, dict) and "per_prompt" in data:  # one evaluation (an iterative round's)
        ev, what = data, str(path)
        run = run.parent if path.name == "eval.json" else run  # round_N/eval.json: the run is one level up
    elif isinstance(data, dict) and data and all(k.isdigit() for k in data):  # evals.json: step -> evaluation
        key = at if at is not None else max(data, key=int)
        if key not in data:
            raise UserError(f"{ref}: no evaluation at step {key} (steps: {sorted(data, key=int)})")
        ev, what = data[key], f"{path} step {key}"
    else:
        raise UserError(f"{path}: not a saved gold evaluation (no per_prompt scores)")
    ids = ev.get("prompt_ids") or _ids_from_run(run, len(ev["per_prompt"]), what)
    return SavedEval(what, ev.get("policy"), ev["overall"], ev["per_prompt"], ids, ev.get("safety_rates") or {})


def _generations(path: Path) -> list[dict[str, Any]] | None:
    """The answers an `eval policy --out` saved (id, family, ...), or None where there are none."""
    if not path.exists():
        return None
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def compare(a: SavedEval, b: SavedEval, seed: int = 0) -> dict[str, Any]:
    """`a` against `b` on the prompts both graded, matched by id; an error when they graded different prompts."""
    if len(set(a.prompt_ids)) != len(a.prompt_ids) or len(set(b.prompt_ids)) != len(b.prompt_ids):
        raise UserError("a saved evaluation lists a prompt id twice; it cannot be matched prompt by prompt")
    if set(a.prompt_ids) != set(b.prompt_ids):
        only_a = len(set(a.prompt_ids) - set(b.prompt_ids))
        only_b = len(set(b.prompt_ids) - set(a.prompt_ids))
        raise UserError(
            f"the two evaluations graded different prompts ({only_a} only in {a.source}, {only_b} only in "
            f"{b.source}); evaluate both on the same prompt set and limit"
        )
    index = {pid: i for i, pid in enumerate(b.prompt_ids)}
    pa = a.per_prompt
    pb = [b.per_prompt[index[pid]] for pid in a.prompt_ids]
    lo, hi = paired_bootstrap(pa, pb, seed=seed)
    mean_a, mean_b = sum(pa) / len(pa), sum(pb) / len(pb)
    families = a.families or b.families
    by_family = paired_by_group([families[pid] for pid in a.prompt_ids], pa, pb, seed) if families else None
    return {
        "policy": {"source": a.source, "model": a.model, "overall": mean_a, "safety_rates": a.safety_rates},
        "baseline": {"source": b.source, "model": b.model, "overall": mean_b, "safety_rates": b.safety_rates},
        "prompts": len(pa),
        "difference": mean_a - mean_b,
        "difference_ci95": [lo, hi],
        "win_rate": win_rate(pa, pb),
        **({"by_family": by_family} if by_family else {}),
    }


def compare_lines(c: dict[str, Any]) -> list[str]:
    lo, hi = c["difference_ci95"]
    lines = []
    for side in ("policy", "baseline"):
        s = c[side]
        rates = "; ".join(
            f"{name.replace('_', ' ')} {r['count']}/{r['n']}" for name, r in s["safety_rates"].items() if r.get("n")
        )
        model = f" ({s['model']})" if s.get("model") else ""
        head = f"{side:8s} {s['source']}{model}: gold overall {s['overall']:.3f}"
        lines.append(head + (f"; {rates}" if rates else ""))
    lines.append(
        f"difference {c['difference']:+.3f} (paired bootstrap 95% CI {lo:+.3f} .. {hi:+.3f}, {c['prompts']} prompts); "
        f"win rate {c['win_rate']:.3f}"
    )
    for fam, f in (c.get("by_family") or {}).items():
        flo, fhi = f["ci95"]
        lines.append(
            f"  {fam or '(no family)'}: {f['before']:.3f} -> {f['after']:.3f}, {f['change']:+.3f} "
            f"[{flo:+.3f}, {fhi:+.3f}] ({f['n']} prompts)"
        )
    return lines


__all__ = ["CompareSettings", "SavedEval", "compare", "compare_lines", "load_saved", "locate"]
