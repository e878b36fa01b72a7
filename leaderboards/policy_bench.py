"""Policy evaluation on standard prompt sets (`align eval policy --bench NAME --data FILE`).

    generate (cached) -> score (IFEval verifiers, or a judge through the one scorer interface) -> report + record

- ifeval: one answer per prompt, checked by the IFEval verifiers (`ifeval.py`); prompt- and instruction-level
  accuracy, strict and loose, with bootstrap intervals over prompts.
- alpacaeval / arenahard: one answer per prompt, compared with the set's reference answer by a judge: a pointwise
  scorer (a reward model: the higher score wins, equal scores tie) or a pairwise one (asked in both orders and
  averaged; one order for a symmetric scorer such as pair_pm). Win rate and length-controlled win rate with
  bootstrap intervals (`winrate.py`); abstentions (NaN) counted and left out.
- mtbench: two turns, the second conditioned on the policy's own first answer; each turn scored by a pointwise
  judge (a reward model's scalar, or a generative RM's 1-10); means per turn and per category with intervals.

Generations go to `<out>/generations.jsonl` with the settings that made them (`generations.key.json`); a re-run with
the same model, data and generation settings reuses them, so judging again with another judge does not regenerate.
The record (`records.Record`, section "policy") names the policy, the set, the judge and the reference answers'
generator; the leaderboard shows it in its policy tab.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from align.evaluate import PolicyEvalSettings
from prefalign.errors import UserError

from .policy_data import BenchData, BenchItem, read_bench
from .records import Record, git_commit, now, package_versions

POLICY_SECTION = "policy"
"""`Record.settings['section']` of every policy record: the leaderboard's policy tab."""
VERSION = "1"
HEADLINES = {
    "ifeval": "Prompt-level strict accuracy",
    "alpacaeval": "LC win rate",
    "arenahard": "Win rate",
    "mtbench": "Mean score",
}


@dataclass
class PolicyBenchSettings(PolicyEvalSettings):
    """The suite evaluation's decoding settings (longer answers by default) and a benchmark's own."""

    max_new_tokens: int = 256
    limit: int | None = None
    """Only the first `limit` usable items."""
    allow_partial: bool = False
    """Score the usable rows when some are unusable (reported, the record marked partial) instead of stopping."""
    bootstrap: int = 1000


# ---------------------------------------------------------------------------------------------------------
# Generation (cached)
# ---------------------------------------------------------------------------------------------------------


def _conversations(items: list[BenchItem], turn: int, answers: list[list[str]] | None = None) -> list[Any]:
    """The conversation each item's `turn`-th answer continues (turn 0: the first user turn)."""
    from preference_data.records import Message

    out = []
    for k, item in enumerate(items):
        conv = []
        for t in range(turn + 1):
            conv.append(Message("user", item.turns[t]))
            if t < turn:
                assert answers is not None
                conv.append(Message("assistant", answers[k][t]))
        out.append(conv)
    return out


def generation_key(model: str, data: BenchData, s: PolicyBenchSettings) -> dict[str, Any]:
    """What decides the generations: the model (and its weights' fingerprint), the prompts, the decoding."""
    from prefalign.models.hub import weights_fingerprint

    prompts = hashlib.sha256(json.dumps([it.turns for it in data.items]).encode()).hexdigest()[:16]
    return {
        "model": model,
        "weights": weights_fingerprint(model),
        "bench": data.name,
        "prompts": prompts,
        "max_new_tokens": s.max_new_tokens,
        "temperature": s.temperature,
        "dtype": s.dtype,
        "seed": s.seed,
    }


def generate_answers(model: str, items: list[BenchItem], s: PolicyBenchSettings) -> list[list[str]]:
    """Per item, one answer per user turn (the second turn sees the policy's own first answer)."""
    from align.generate import generate, load_policy
    from prefalign.models.hub import load_tokenizer

    tok = load_tokenizer(model)
    policy = load_policy(model, s.dtype)
    answers: list[list[str]] = [[] for _ in items]
    for turn in range(max(len(it.turns) for it in items)):
        todo = [k for k, it in enumerate(items) if len(it.turns) > turn]
        convs = _conversations([items[k] for k in todo], turn, [answers[k] for k in todo])
        out = generate(policy, tok, convs, s.max_new_tokens, s.batch_size, s.temperature, seed=s.seed, progress=True)
        for k, text in zip(todo, out, strict=True):
            answers[k].append(text)
    return answers


def cached_answers(
    model: str, data: BenchData, s: PolicyBenchSettings, out_dir: str | None
) -> tuple[list[list[str]], bool]:
    """(answers, reused): read from `out_dir` when its key matches, else generated (and written there)."""
    key = generation_key(model, data, s)
    if out_dir:
        key_file, gen_file = Path(out_dir) / "generations.key.json", Path(out_dir) / "generations.jsonl"
        if key_file.exists() and gen_file.exists() and json.loads(key_file.read_text()) == key:
            rows = [json.loads(line) for line in gen_file.read_text(encoding="utf-8").splitlines() if line.strip()]
            if [r["id"] for r in rows] == [it.id for it in data.items]:
                return [r["answers"] for r in rows], True
    answers = generate_answers(model, data.items, s)
    if out_dir:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / "generations.key.json").write_text(json.dumps(key, indent=2), encoding="utf-8")
    return answers, False


def write_generations(out_dir: str, data: BenchData, answers: list[list[str]], scored: list[dict[str, Any]]) -> None:
    with open(Path(out_dir) / "generations.jsonl", "w", encoding="utf-8") as f:
        for item, ans, sc in zip(data.items, answers, scored, strict=True):
            row = {"id": item.id, "category": item.category, "turns": item.turns, "answers": ans, **sc}
            if item.reference is not None:
                row["reference"] = item.reference
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


# ---------------------------------------------------------------------------------------------------------
# Judging through the scorer interface
# ---------------------------------------------------------------------------------------------------------


def _assistant(text: str) -> list[Any]:
    from preference_data.records import Message

    return [Message("assistant", text)]


def judge_preferences(scorer: Any, items: list[BenchItem], answers: list[str]) -> list[float]:
    """P(policy answer better than the reference answer) per item; NaN where the judge abstained."""
    from .winrate import both_orders, pointwise_preference

    prompts = _conversations(items, 0)
    pol = [_assistant(a) for a in answers]
    ref = [_assistant(it.reference or "") for it in items]
    if scorer.kind == "pointwise":
        sp, sr = scorer.score(prompts, pol), scorer.score(prompts, ref)
        return [pointwise_preference(float(a), float(b)) for a, b in zip(sp, sr, strict=True)]
    if scorer.kind == "pairwise":
        first = [float(x) for x in scorer.compare(prompts, pol, ref)]
        if getattr(scorer, "symmetric", False):
            return [x if math.isfinite(x) else math.nan for x in first]
        second = [float(x) for x in scorer.compare(prompts, ref, pol)]
        return [both_orders(a, b) for a, b in zip(first, second, strict=True)]
    raise UserError(
        f"the {scorer.kind} scorer '{scorer.name}' cannot judge answers against the reference answers; "
        "use a pointwise scorer (a reward model: scalar) or a pairwise one (judge, pair_pm, think)"
    )


def judge_turn_scores(scorer: Any, items: list[BenchItem], answers: list[list[str]]) -> list[list[float]]:
    """MT-Bench: per item, the judge's score of each turn's answer in its conversation."""
    if scorer.kind != "pointwise":
        raise UserError(
            f"mtbench scores each answer on its own; the {scorer.kind} scorer '{scorer.name}' compares two. Use a "
            "pointwise scorer: a reward model (scalar) or a generative RM giving 1-10 (grm)"
        )
    out: list[list[float]] = [[] for _ in items]
    for turn in range(2):
        convs = _conversations(items, turn, answers)
        scores = scorer.score(convs, [_assistant(a[turn]) for a in answers])
        for k, v in enumerate(scores):
            out[k].append(float(v))
    return out


# ---------------------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------------------


def _ci(values: list[float], reps: int, seed: int) -> list[float] | None:
    from reward_models.generative.scaling import bootstrap_statistic

    if not values or reps <= 0:
        return None
    lo, hi = bootstrap_statistic(lambda idx: sum(values[i] for i in idx) / len(idx), len(values), reps, seed)
    return None if math.isnan(lo) else [lo, hi]


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def check_problems(data: BenchData, allow_partial: bool) -> None:
    """Unusable rows stop the run (every problem listed) unless partial runs are allowed."""
    if not data.problems or allow_partial:
        return
    unknown = "".join(
        f"\n  unknown instruction id '{k}' in {n} row(s)" for k, n in sorted(data.unknown_instructions.items())
    )
    shown = "\n  ".join(data.problems[:20])
    more = f"\n  ... and {len(data.problems) - 20} more" if len(data.problems) > 20 else ""
    raise UserError(
        f"{data.source}: {len(data.problems)} problem(s) in {data.rows_read} rows:{unknown}\n  {shown}{more}\n"
        "Fix the file, or pass --allow-partial to score the other rows (the record is then marked partial)"
    )


def score_ifeval(data: BenchData, answers: list[list[str]], s: PolicyBenchSettings) -> tuple[dict, list[dict]]:
    from .ifeval import DETECTORS, ifeval_scores

    items = [it.ifeval for it in data.items]
    assert all(i is not None for i in items)
    res = ifeval_scores([i for i in items if i is not None], [a[0] for a in answers])
    names = ["prompt_strict", "prompt_loose", "instruction_strict", "instruction_loose"]
    scores = {
        "headline": res["prompt_strict"],
        "headline_name": HEADLINES["ifeval"],
        "units": "fraction",
        "sections": {k: res[k] for k in names},
        "intervals": {k: _ci(res["values"][k], s.bootstrap, s.seed) for k in names},
        "subsets": {
            k: {"score": v["strict"], "loose": v["loose"], "n": v["n"]} for k, v in res["by_instruction"].items()
        },
        "extra": {"detectors": DETECTORS},
    }
    per_item = [
        {"instructions": it.ifeval.instruction_ids if it.ifeval else [], **d}
        for it, d in zip(data.items, res["details"], strict=True)
    ]
    return scores, per_item


def score_pairwise(
    data: BenchData, answers: list[list[str]], scorer: Any, s: PolicyBenchSettings
) -> tuple[dict, list[dict]]:
    from .winrate import win_rates

    first = [a[0] for a in answers]
    prefs = judge_preferences(scorer, data.items, first)
    wr = win_rates(
        prefs,
        [len(a) for a in first],
        [len(it.reference or "") for it in data.items],
        bootstrap=s.bootstrap,
        seed=s.seed,
    )
    cats: dict[str, list[float]] = {}
    for it, p in zip(data.items, prefs, strict=True):
        if it.category and math.isfinite(p):
            cats.setdefault(it.category, []).append(p)
    headline = wr.lc_win_rate if data.name == "alpacaeval" else wr.win_rate
    scores = {
        "headline": headline,
        "headline_name": HEADLINES[data.name],
        "units": "fraction",
        "sections": {"win_rate": wr.win_rate, "lc_win_rate": wr.lc_win_rate},
        "intervals": {
            "win_rate": list(wr.ci95) if wr.ci95 else None,
            "lc_win_rate": list(wr.lc_ci95) if wr.lc_ci95 else None,
        },
        "subsets": {c: {"score": sum(v) / len(v), "n": len(v)} for c, v in sorted(cats.items())},
        "extra": {
            "judged": {
                "items": wr.n,
                "abstained": wr.abstained,
                "wins": wr.wins,
                "ties": wr.ties,
                "losses": wr.losses,
                "length_coef": wr.length_coef,
                "mean_len_diff_chars": wr.mean_len_diff,
            }
        },
    }
    return scores, [{"preference": None if not math.isfinite(p) else p} for p in prefs]


def score_mtbench(
    data: BenchData, answers: list[list[str]], scorer: Any, s: PolicyBenchSettings
) -> tuple[dict, list[dict]]:
    turn_scores = judge_turn_scores(scorer, data.items, answers)
    finite = lambda xs: [x for x in xs if math.isfinite(x)]
    turns = {f"turn_{t + 1}": finite([ts[t] for ts in turn_scores]) for t in range(2)}
    both = finite([x for ts in turn_scores for x in ts])
    cats: dict[str, list[float]] = {}
    for it, ts in zip(data.items, turn_scores, strict=True):
        cats.setdefault(it.category or "(none)", []).extend(finite(ts))
    abstained = sum(1 for ts in turn_scores for x in ts if not math.isfinite(x))
    scores = {
        "headline": _mean(both),
        "headline_name": HEADLINES["mtbench"],
        "units": "judge score",
        "sections": {"mean": _mean(both), **{k: _mean(v) for k, v in turns.items()}},
        "intervals": {
            "mean": _ci(both, s.bootstrap, s.seed),
            **{k: _ci(v, s.bootstrap, s.seed) for k, v in turns.items()},
        },
        "subsets": {
            c: {"score": _mean(v), "n": len(v), "ci95": _ci(v, s.bootstrap, s.seed)} for c, v in sorted(cats.items())
        },
        "extra": {"judged": {"answers": 2 * len(data.items), "abstained": abstained}},
    }
    return scores, [{"scores": [None if not math.isfinite(x) else x for x in ts]} for ts in turn_scores]


def run_policy_bench(
    model: str,
    bench: str,
    data_source: str,
    judge: Any = None,
    reference: str | None = None,
    settings: PolicyBenchSettings | None = None,
    out_dir: str | None = None,
    records_dir: str | None = None,
) -> tuple[dict[str, Any], Record]:
    """Evaluate `model` on one prompt set; `judge` is a loaded scorer (not used by ifeval). Returns the report and
    the record (saved to `records_dir` when given)."""
    from prefalign.models.precision import decide_dtype

    s = settings or PolicyBenchSettings()
    s = PolicyBenchSettings(**{**asdict(s), "dtype": decide_dtype(s.dtype, knob="--dtype").value})
    data = read_bench(bench, data_source, reference)
    check_problems(data, s.allow_partial)
    if s.limit is not None:
        data.items = data.items[: s.limit]
    if bench == "ifeval" and judge is not None:
        raise UserError("ifeval is scored by its instruction verifiers; drop --judge")
    if bench != "ifeval" and judge is None:
        raise UserError(f"{bench} needs a judge: --judge MODEL (a reward model directory, or --judge-kind judge ...)")
    t0 = time.time()
    answers, reused = cached_answers(model, data, s, out_dir)
    t_gen = time.time() - t0
    if bench == "ifeval":
        scores, per_item = score_ifeval(data, answers, s)
    elif bench == "mtbench":
        scores, per_item = score_mtbench(data, answers, judge, s)
    else:
        scores, per_item = score_pairwise(data, answers, judge, s)
    judge_desc: dict[str, Any] = (
        {"name": "ifeval verifiers", "kind": "rule", "settings": {}}
        if judge is None
        else {"name": judge.name, "kind": judge.kind, "settings": judge.describe()}
    )
    record = Record(
        benchmark=bench,
        version=VERSION,
        model=model,
        scores=scores,
        counts={
            "examples": len(data.items),
            "rows_read": data.rows_read,
            "invalid_rows": len(data.problems),
            "abstained": int((scores.get("extra", {}).get("judged") or {}).get("abstained", 0)),
        },
        scorer=judge_desc,
        settings={
            "section": POLICY_SECTION,
            "data": data_source,
            "reference_answers": reference or (data_source if data.reference_model else None),
            "reference_model": data.reference_model,
            "limit": s.limit,
            "generation": {k: getattr(s, k) for k in ("max_new_tokens", "temperature", "dtype", "seed")},
            "bootstrap": s.bootstrap,
        },
        versions=package_versions(),
        git=git_commit(),
        date=now(),
        partial=bool(data.problems),
        problems=data.problems[:20],
    )
    report = {
        "model": model,
        "bench": bench,
        "data": data_source,
        "items": len(data.items),
        "reference_model": data.reference_model,
        "judge": judge_desc["settings"].get("model") if judge is not None else judge_desc["name"],
        "generations_reused": reused,
        "generation_seconds": round(t_gen, 1),
        "problems": data.problems,
        "unknown_instructions": data.unknown_instructions,
        "record": record.to_dict(),
    }
    if out_dir:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        write_generations(out_dir, data, answers, per_item)
        (out / "report.json").write_text(json.dumps(report, indent=2, ensure_ascii=False), encoding="utf-8")
    if records_dir is not None:
        record.save(records_dir)
    return report, record


def _fmt(v: Any, units: str) -> str:
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
        return "n/a"
    return f"{100 * v:.1f}%" if units == "fraction" else f"{v:.3f}"


def report_lines(record: Record) -> list[str]:
    """What the CLI prints: the headline, every section with its interval, the judge and the reference."""
    s = record.scores
    units = s.get("units", "fraction")
    partial = "  [PARTIAL: rows skipped, see problems]" if record.partial else ""
    lines = [
        f"{record.model} on {record.benchmark} ({record.counts['examples']} prompts): "
        f"{s['headline_name']} {_fmt(s['headline'], units)}{partial}"
    ]
    for name, v in s["sections"].items():
        ci = (s.get("intervals") or {}).get(name)
        ci_text = f"  (95% CI {_fmt(ci[0], units)} .. {_fmt(ci[1], units)})" if ci else ""
        lines.append(f"  {name:<20} {_fmt(v, units)}{ci_text}")
    judged = (s.get("extra") or {}).get("judged")
    if judged:
        lines.append(
            "  judged: " + ", ".join(f"{k} {_fmt(v, '') if isinstance(v, float) else v}" for k, v in judged.items())
        )
    for name, row in (s.get("subsets") or {}).items():
        extra = f" loose {_fmt(row['loose'], units)}" if "loose" in row else ""
        lines.append(f"    {name:<44} {_fmt(row.get('score'), units)}{extra} (n={row.get('n')})")
    lines.append(
        f"  judge: {record.scorer.get('name')} ({record.scorer.get('kind')})"
        + (f" {record.scorer['settings'].get('model')}" if record.scorer.get("settings", {}).get("model") else "")
    )
    if record.settings.get("reference_model"):
        lines.append(f"  reference answers by: {record.settings['reference_model']}")
    if record.benchmark == "ifeval":
        det = (s.get("extra") or {}).get("detectors") or {}
        lines.append("  checks: " + "; ".join(f"{k}: {v}" for k, v in det.items()))
    for p in record.problems[:5]:
        lines.append(f"  skipped: {p}")
    return lines


def write_reference(model: str, source: str, out_file: str, s: PolicyBenchSettings) -> int:
    """Write an AlpacaEval-format reference file: `model`'s answers to the instructions of `source` (an AlpacaEval
    file, or 'suite' for the verifiable suite's test prompts), each row naming `model` as its generator."""
    if source == "suite":
        from align.evaluate import load_prompts

        prompts = load_prompts("suite", s.limit, s.seed)  # family-balanced when limited, like the suite evaluation
        items = [BenchItem(p.id, [p.prompt[-1].content], f"suite:{p.grader}") for p in prompts]
    else:
        items = read_bench("alpacaeval", source).items
        if s.limit is not None:
            items = items[: s.limit]
    answers = generate_answers(model, items, s)
    rows = [
        {"instruction": it.turns[0], "output": a[0], "generator": model, "dataset": it.category}
        for it, a in zip(items, answers, strict=True)
    ]
    path = Path(out_file)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rows, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return len(rows)
