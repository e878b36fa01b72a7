"""Scoring a prompt's candidates behind one encoding of the prompt: up to `SHARED_RESPONSES` (4) answers a segment
against two (a pair's chosen and rejected: how every prompt's answers were grouped before), in one process.

    .venv/bin/python benchmarks/shared_prompt_scoring.py --samples runs/quickstart/align/round_1/samples.json \
        --rm runs/quickstart/rm/model

Work: an align round's candidates, as the quickstart's round scores them: each prompt's K samples (`--samples`, a
round's samples.json) and its reference answer (`meta.reference`), scored by the reward model `--rm` (the scalar
scorer, its default precision: bf16 where the CPU has it natively). Equal work on both sides: the same items, the
same batch token budget, the same model; only how many answers share one encoding of their prompt differs (4, or 2
as before, the odd one alone). Printed: tokens through the model, the median seconds of `--reps` calls after a
warm-up, the ratio, and the largest score difference between the sides (the same scores, up to bf16 rounding of
differently shaped batches).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import machine_line, record_calls  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", default="runs/quickstart/align/round_1/samples.json", help="a round's samples.json")
    ap.add_argument("--rm", default="runs/quickstart/rm/model", help="a reward model directory")
    ap.add_argument("--reps", type=int, default=3, help="timed calls per side (the median counts)")
    ap.add_argument("--json-out", default="", help="also write the results to this file")
    args = ap.parse_args()

    import reward_models.batched as batched
    from preference_data.records import Message
    from preference_data.suite import prompt_only_from_dict
    from reward_models.scorers import load_scorer

    rollout = json.loads(Path(args.samples).read_text(encoding="utf-8"))["rollout"]
    prompts = [prompt_only_from_dict(p) for p in rollout["prompts"]]
    G = rollout["group_size"]
    records, answers = [], []
    for i, p in enumerate(prompts):
        group = rollout["texts"][i * G : (i + 1) * G] + [p.meta["reference"]] * ("reference" in p.meta)
        records += [p.prompt] * len(group)
        answers += [[Message("assistant", t)] for t in group]
    scorer = load_scorer("scalar", model=args.rm)
    import preference_data.packing as packing

    tokens = record_calls(packing, "pack", lambda batch: batch.real_tokens)
    print(machine_line())
    print(f"{len(prompts)} prompts, {len(answers)} answers ({G} samples and the reference each), RM {args.rm}")
    rows = {}
    for name, share in (("two a segment (before)", 2), ("shared by up to 4", batched.SHARED_RESPONSES)):
        batched.SHARED_RESPONSES = share
        scorer.score(records[:32], answers[:32])  # warm-up
        times, scores = [], None
        for _ in range(args.reps):
            tokens.clear()
            t = time.perf_counter()
            scores = scorer.score(records, answers)
            times.append(time.perf_counter() - t)
        sec = statistics.median(times)
        rows[name] = {"seconds": sec, "tokens": sum(tokens), "scores": scores}
        print(f"  {name:24s} {sum(tokens):7d} tokens  {sec:6.2f} s  ({len(answers) / sec:.1f} answers/s)")
    before, after = rows["two a segment (before)"], rows["shared by up to 4"]
    diff = max(abs(a - b) for a, b in zip(before["scores"], after["scores"], strict=True))
    ratio = before["seconds"] / after["seconds"]
    share = after["tokens"] / before["tokens"]
    print(f"  speed-up {ratio:.2f}x, tokens {share:.2f} of before; largest score difference {diff:.4f}")
    if args.json_out:
        out = {k: {"seconds": v["seconds"], "tokens": v["tokens"]} for k, v in rows.items()}
        Path(args.json_out).write_text(json.dumps({"machine": machine_line(), "rows": out, "ratio": ratio}, indent=1))


if __name__ == "__main__":
    main()
