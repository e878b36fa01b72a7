"""A rule-read judge's works, with the engine reading nothing twice and as it read before.

    .venv/bin/python benchmarks/judge_reading.py --judge runs/judge_grm_work/model

Work: the works a rule-read GRM (`configs/judge_grm_work_suite.yaml`; `principles: from_prompt, read: rule, tools:
calculator, work_prefix: template`, greedy, up to 192 new tokens) writes for `--per-family` pairs of each family of
the suite's `--split` (the first ones, in the split's order; suite seed `--suite-seed`, the quickstart's sizes), both
responses of every pair scored in one call as `align rm compare` scores them, on the CPU in bf16 where it is native,
else fp32. Sides, in one process, the same judge, pairs and settings:
- before: every prompt read whole (`common_prefix: 0`), and a calculator call ended the work, which a further engine
  call continued from its prompt and text re-read (`tools.generate_with_tools`' loop);
- now (the engine's defaults): the leading tokens every prompt of a batch shares read once a batch, and a calculator
  call continued on the work's own row as it decodes.
Printed: seconds, seconds a pair, reading and decoding seconds, engine calls, generated tokens, the ratio, and
whether the two sides wrote the same works and scores (they do in fp32: tests/test_generation.py and
tests/test_generation_tools.py check the engine's tokens against `generate` and the loop).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import machine_line, record_calls, resolve_precision  # noqa: E402


def balanced_pairs(split: str, per_family: int, seed: int) -> list:
    """The first `per_family` pairs of each family of the quickstart's suite's `split`."""
    from preference_data.suite import build_suite

    suite = build_suite(275, seed, 0.2, dev_fraction=0.25)
    by_family: dict[str, list] = defaultdict(list)
    for p in {"dev": suite.dev_pairs, "test": suite.test_pairs}[split]:
        by_family[p.attributes["family"]].append(p)
    return [p for pairs in by_family.values() for p in pairs[:per_family]]


def run_side(judge: str, dtype: str, pairs: list, before: bool) -> dict:
    """Score both responses of every pair in one call; the engine's calls timed."""
    from reward_models.scorers import load_scorer

    scorer = load_scorer(
        "grm",
        model=judge,
        dtype=dtype,
        principles="from_prompt",
        read="rule",
        tools="calculator",
        temperature=0,
        max_new_tokens=192,
        work_prefix="template",
    )
    engine = scorer.engine
    if before:
        engine.common_prefix = 0
        engine.continues_tools = False
    calls = record_calls(engine, "generate", lambda result: result.timings)
    t0 = time.perf_counter()
    scores = scorer.score([p.prompt for p in pairs] * 2, [p.chosen for p in pairs] + [p.rejected for p in pairs])
    seconds = time.perf_counter() - t0
    n = len(pairs)
    right = sum(c > r for c, r in zip(scores[:n], scores[n:], strict=True) if not (math.isnan(c) or math.isnan(r)))
    return {
        "seconds": seconds,
        "seconds_per_pair": seconds / n,
        "reading_s": sum(t.prefill_s for t in calls),
        "decoding_s": sum(t.decode_s for t in calls),
        "engine_calls": len(calls),
        "generated_tokens": sum(t.generated_tokens for t in calls),
        "accuracy": right / n,
        "works": [list(w) for w in scorer.last_texts[:n]],
        "scores": [None if math.isnan(s) else s for s in scores],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--judge", default="runs/judge_grm_work/model", help="a rule-read GRM (judge_grm_work_suite)")
    ap.add_argument("--split", default="dev", choices=["dev", "test"])
    ap.add_argument("--per-family", type=int, default=25)
    ap.add_argument("--suite-seed", type=int, default=0)
    ap.add_argument("--json-out", default="", help="also write the results to this file")
    args = ap.parse_args()

    precision, why = resolve_precision("auto")
    dtype = "bfloat16" if precision == "bf16" else "float32"
    pairs = balanced_pairs(args.split, args.per_family, args.suite_seed)
    print(machine_line())
    print(f"{len(pairs)} {args.split} pairs of suite seed {args.suite_seed}; {dtype} ({why})")
    sides = {name: run_side(args.judge, dtype, pairs, name == "before") for name in ("before", "now")}
    print(
        f"{'side':<8} {'seconds':>8} {'s/pair':>7} {'reading':>8} {'decoding':>9} {'calls':>6} {'tokens':>7} {'acc':>6}"
    )
    for name, s in sides.items():
        print(
            f"{name:<8} {s['seconds']:>8.1f} {s['seconds_per_pair']:>7.3f} {s['reading_s']:>8.1f} "
            f"{s['decoding_s']:>9.1f} {s['engine_calls']:>6} {s['generated_tokens']:>7} {s['accuracy']:>6.3f}"
        )
    before, now = sides["before"], sides["now"]
    same_works = sum(a == b for a, b in zip(before["works"], now["works"], strict=True))
    same_scores = before["scores"] == now["scores"]
    print(f"now / before: {before['seconds'] / now['seconds']:.2f}x faster")
    print(f"the same works: {same_works} of {len(pairs)}; the same scores: {same_scores}")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"machine": machine_line(), "dtype": dtype, **sides}, indent=1))


if __name__ == "__main__":
    main()
