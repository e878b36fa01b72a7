"""An align round's sampling, before and after: the prefill's last-position logits and the rows decoded together.

    .venv/bin/python benchmarks/round_sampling.py --policy runs/quickstart/dpo/adapter \
        --prompts runs/quickstart/suite/train_prompts.jsonl

Work: what the quickstart's first round samples: 2 answers to each of 256 training prompts (`--prompts`, the first
256), temperature 1, up to 80 new tokens, from `--policy` (an adapter is merged into its base, as the round does) in
bf16 where the CPU has it natively, else fp32. Sides, in one process, each on the same prompts and seed:
- before: the prefill asks the model for the last position's logits with `logits_to_keep=1` (a strided slice of the
  hidden states; the output projection of that 3-d view copies the vocabulary weight once per prompt), 128 rows
  decoded together (the engine's default);
- prefill gathered: the last position gathered into a contiguous tensor (what the engine does now), 128 rows;
- + 512 rows: and the round's 512 samples decoded in one batch (`rounds.max_rows: 512`, the quickstart's).
Printed: seconds (prefill, decode, total; of the median run of `--reps`), generated tokens, each side's ratio to before.
The sampled text differs between sides where bf16 rounds differently with a batch's shape, so generated token counts
differ a little; in fp32 the prefill's logits are the same (tests/test_generation.py compares with `generate`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from benchmarks.common import machine_line, resolve_precision  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policy", default="runs/quickstart/dpo/adapter", help="the policy a round samples from")
    ap.add_argument("--prompts", default="runs/quickstart/suite/train_prompts.jsonl", help="suite prompts (jsonl)")
    ap.add_argument("--num-prompts", type=int, default=256)
    ap.add_argument("--samples", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=80)
    ap.add_argument("--reps", type=int, default=1, help="timed runs per side (the median counts)")
    ap.add_argument("--json-out", default="", help="also write the results to this file")
    args = ap.parse_args()

    from prefalign.generation import SamplingParams, make_engine
    from prefalign.models.hub import load_model, load_tokenizer

    precision, why = resolve_precision("auto")
    dtype = "bfloat16" if precision == "bf16" else "float32"
    model = load_model(args.policy, dtype=dtype, merge=True)
    tok = load_tokenizer(args.policy)
    lines = Path(args.prompts).read_text(encoding="utf-8").splitlines()[: args.num_prompts]
    convs = [json.loads(line)["prompt"] for line in lines]
    params = SamplingParams(n=args.samples, temperature=1.0, max_new_tokens=args.max_new_tokens, seed=7)
    forward = model.forward

    def sliced(*a, **k):  # the prefill as it was: logits_to_keep=1, a strided view of the last position
        if isinstance(k.get("logits_to_keep"), torch.Tensor):
            k["logits_to_keep"] = 1
        return forward(*a, **k)

    sides = {
        "before (logits_to_keep=1, 128 rows)": (True, {}),
        "prefill gathered, 128 rows": (False, {}),
        "prefill gathered, 512 rows (the quickstart)": (False, {"max_rows": 512, "token_budget": 1 << 17}),
    }
    print(machine_line())
    print(f"{len(convs)} prompts x {args.samples} samples, up to {args.max_new_tokens} tokens, {dtype} ({why})")
    rows = {}
    for name, (strided, options) in sides.items():
        model.forward = sliced if strided else forward
        engine = make_engine(model, tok, **options)
        engine.generate(convs[:8], SamplingParams(n=1, max_new_tokens=4))  # warm-up
        runs = [engine.generate(convs, params).timings for _ in range(args.reps)]
        t = sorted(runs, key=lambda r: r.total_s)[len(runs) // 2]  # the median run
        rows[name] = {
            "total_s": t.total_s,
            "prefill_s": t.prefill_s,
            "decode_s": t.decode_s,
            "generated_tokens": t.generated_tokens,
            "prompt_tokens": t.prompt_tokens,
            "batches": t.batches,
        }
    model.forward = forward
    base = rows[next(iter(sides))]["total_s"]
    for name, r in rows.items():
        print(
            f"  {name:46s} total {r['total_s']:6.1f} s (prefill {r['prefill_s']:5.1f}, decode {r['decode_s']:5.1f}, "
            f"{r['batches']} batches)  {r['generated_tokens']} tokens  {base / r['total_s']:.2f}x"
        )
    if args.json_out:
        out = {"machine": machine_line(), "precision": dtype, "rows": rows}
        Path(args.json_out).write_text(json.dumps(out, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
