"""The decoder's speed at batch 1, 16, 64 and 256 against `model.generate` at its fastest documented setting, and
against the machine's limit.

    .venv/bin/python benchmarks/decoder.py                                   # SmolLM2-135M, 64 new tokens
    .venv/bin/python benchmarks/decoder.py --batches 1,16 --new-tokens 16 --model builtin:tiny-llama   # smoke run

Work, equal on every side: `B` distinct held-out suite prompts (`align eval policy`'s family-balanced subset),
greedy, exactly `--new-tokens` new tokens each (EOS is not a stop on any side), in the precision the toolkit picks
for the device (bf16 where native; `--dtype` overrides).

Sides, each in its own process (its compile caches and memory are its own), the first two calls of each batch
size untimed (the first compiles, when the side compiles; its time is reported) and the best of `--repeats` timed
calls counted:
- engine: `prefalign.generation` as the toolkit runs it (caches sized to each batch, eager steps; `static: off`);
- engine-static: the static path (`static: compiled`: fixed-shape caches per bucket, the step compiled once per
  bucket; CUDA graphs on a GPU, inductor on a CPU);
- generate-static: transformers' `model.generate` with its static cache and the forward compiled
  (`cache_implementation="static"`, `torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)`: the
  setting transformers documents as its fastest);
- generate: `model.generate` as it comes (dynamic cache, eager).
The limit of a decode step: the larger of the weights' bytes over the measured memory bandwidth (a large tensor
copy) and the step's FLOPs (2 x parameters x rows) over the measured matmul peak. Printed: tokens/s of each side,
the engine's ratios and the limit's tokens/s at each batch size; `--json-out` writes the rows as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from benchmarks.common import (  # noqa: E402
    MODEL,
    add_device_arg,
    apply_device,
    machine_line,
    matmul_peak,
    on_gpu,
    spawn,
    sync,
)

SIDES = ("engine", "engine-static", "generate-static", "generate")


def _setup(args: argparse.Namespace, n: int) -> tuple[Any, Any, list[Any]]:
    from prefalign.models.hub import load_causal_lm, load_tokenizer
    from prefalign.models.precision import decide_precision
    from preference_data.suite.heldout import load_prompts

    dtype = args.dtype if args.dtype != "auto" else ("bfloat16" if decide_precision("auto").bf16 else "float32")
    tok = load_tokenizer(args.model)
    model = load_causal_lm(args.model, dtype=dtype)
    if on_gpu():
        model.to("cuda")
    model.eval()
    convs = [p.prompt for p in load_prompts("suite", n)][:n]
    return model, tok, convs


def _timed(run: Any, repeats: int) -> tuple[float, float]:
    """(seconds of the first call (compiling, where the side compiles), best seconds of `repeats` calls after a
    second, untimed one)."""
    sync()
    t = time.perf_counter()
    run()
    sync()
    first = time.perf_counter() - t
    run()  # a compiled step's first replay still sets up (allocations, lazily loaded kernels): untimed too
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        run()
        sync()
        best = min(best, time.perf_counter() - t)
    return first, best


def side(args: argparse.Namespace) -> dict:
    batches = [int(b) for b in args.batches.split(",")]
    model, tok, convs = _setup(args, max(batches))
    rows = []
    if args.child.startswith("engine"):
        from prefalign.generation import SamplingParams, make_engine

        static = "compiled" if args.child == "engine-static" else "off"
        engine = make_engine(model, tok, static=static, eos_token_ids=[-1], max_rows=max(batches), token_budget=1 << 22)
        params = SamplingParams(temperature=0, max_new_tokens=args.new_tokens)
        for b in batches:
            first, best = _timed(lambda b=b: engine.generate(convs[:b], params), args.repeats)
            rows.append({"batch": b, "first_s": first, "seconds": best, "tokens_per_s": b * args.new_tokens / best})
    else:
        from preference_data.tokenize import tokenize_prompts

        if args.child == "generate-static":
            model.generation_config.cache_implementation = "static"
            model.forward = torch.compile(model.forward, mode="reduce-overhead" if on_gpu() else None, fullgraph=True)
        device = next(model.parameters()).device
        for b in batches:
            ids = tokenize_prompts(convs[:b], tok)  # the ids the engine decodes from, left-padded here
            width = max(len(x) for x in ids)
            enc = {
                "input_ids": torch.tensor([[tok.pad_token_id] * (width - len(x)) + x for x in ids], device=device),
                "attention_mask": torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in ids], device=device),
            }

            def run(enc: Any = enc) -> Any:
                return model.generate(
                    **enc,
                    do_sample=False,
                    max_new_tokens=args.new_tokens,
                    min_new_tokens=args.new_tokens,
                    pad_token_id=tok.pad_token_id,
                )

            with torch.inference_mode():
                first, best = _timed(run, args.repeats)
            rows.append({"batch": b, "first_s": first, "seconds": best, "tokens_per_s": b * args.new_tokens / best})
    params = sum(p.numel() for p in model.parameters())
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    return {"side": args.child, "rows": rows, "params": params, "weight_bytes": weight_bytes, "dtype": dtype}


def bandwidth_gb_s(mb: int = 1024) -> float:
    """Measured memory bandwidth (GB/s): a large tensor copied, bytes read plus written."""
    device = "cuda" if on_gpu() else "cpu"
    a = torch.empty(mb * 1024 * 1024, dtype=torch.uint8, device=device)
    b = torch.empty_like(a)
    b.copy_(a)
    sync()
    t = time.perf_counter()
    for _ in range(5):
        b.copy_(a)
    sync()
    return 2 * a.numel() * 5 / (time.perf_counter() - t) / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=MODEL)
    ap.add_argument("--batches", default="1,16,64,256")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--dtype", default="auto", choices=["auto", "bfloat16", "float32"])
    ap.add_argument("--sides", default=",".join(SIDES))
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--json-out", default=None, help="write the rows as JSON here")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    add_device_arg(ap)
    args = ap.parse_args()
    apply_device(args)
    if args.child:
        print("RESULT " + json.dumps(side(args)), flush=True)
        return
    print(machine_line(), flush=True)
    passed = ["--model", args.model, "--batches", args.batches, "--new-tokens", str(args.new_tokens)]
    passed += ["--dtype", args.dtype, "--repeats", str(args.repeats), "--device", args.device]
    results = {}
    for name in args.sides.split(","):
        results[name] = spawn(__file__, ["--child", name, *passed])
        print(f"{name}: " + ", ".join(f"B={r['batch']} {r['tokens_per_s']:.0f} tok/s" for r in results[name]["rows"]))
    any_side = next(iter(results.values()))
    dtype = any_side["dtype"]
    peak = matmul_peak(dtype) * 1e9
    bw = bandwidth_gb_s() * 1e9
    table = []
    for i, b in enumerate(int(x) for x in args.batches.split(",")):
        step_limit = max(any_side["weight_bytes"] / bw, 2 * any_side["params"] * b / peak)
        row: dict[str, Any] = {"batch": b, "limit_tokens_per_s": b / step_limit}
        for name, r in results.items():
            row[name] = r["rows"][i]["tokens_per_s"]
            row[f"{name}_first_s"] = r["rows"][i]["first_s"]
        table.append(row)
    print(
        f"\nmatmul peak {peak / 1e12:.2f} TFLOP/s ({dtype}), memory bandwidth {bw / 1e9:.0f} GB/s, "
        f"{any_side['params'] / 1e6:.0f}M parameters, {args.new_tokens} new tokens a row"
    )
    ours = [n for n in results if n.startswith("engine")]
    theirs = [n for n in results if n.startswith("generate")]
    pairs = [(a, b) for a in ours for b in theirs]
    head = ["batch", *results, "limit", *[f"{a} / {b}" for a, b in pairs], *[f"{a} of limit" for a in ours]]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for row in table:
        cells = [str(row["batch"]), *[f"{row[n]:.0f}" for n in results], f"{row['limit_tokens_per_s']:.0f}"]
        cells += [f"{row[a] / row[b]:.2f}x" for a, b in pairs]
        cells += [f"{row[a] / row['limit_tokens_per_s']:.0%}" for a in ours]
        print("| " + " | ".join(cells) + " |")
    if args.json_out:
        Path(args.json_out).parent.mkdir(parents=True, exist_ok=True)
        record = {
            "date": time.strftime("%Y-%m-%d"),
            "machine": machine_line(),
            "command": " ".join(sys.argv),
            "dtype": dtype,
            "matmul_peak_tflops": peak / 1e12,
            "bandwidth_gb_s": bw / 1e9,
            "rows": table,
        }
        Path(args.json_out).write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
