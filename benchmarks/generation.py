"""Generation speed and memory: the engine vs the batched path it replaced vs `model.generate` per prompt.

    .venv/bin/python benchmarks/generation.py                                   # 64 prompts x 4 samples, 128 tokens
    .venv/bin/python benchmarks/generation.py --prompts 8 --samples 2 --max-new-tokens 16   # smoke run

Model: builtin:smollm2-135m-instruct, on the first GPU when one is visible (every side), else this CPU, in the
precision picked for that device (bf16 where it is native, fp32 otherwise; `--dtype` overrides). Prompts: the first
held-out suite prompts (`align eval policy`'s family-balanced subset). Sampling: temperature 1, no top-k / top-p,
`--max-new-tokens` new tokens at most (a completion ends at EOS, which is counted).

Sides, each in its own process (its peak memory, max RSS, is its own), model loading not timed, each with
the allocator tuning every `align` command applies (`prefalign.cpu.tune_allocator`):
- engine: `prefalign.generation`, every prompt prefilled once for its samples.
- batched: the evaluation generator (then `align/generate.py`, now `prefalign/generation/policy.py`) as it was
  before the engine (kept below as `baseline_generate`, the only copy), sampling, each prompt repeated
  `--samples` times; run at each of `--batch-sizes` on a short calibration (`--calibrate-prompts` x
  `--calibrate-tokens`) and then in full at the fastest.
- per-prompt: `model.generate(num_return_sequences=samples)` called once per prompt.
Printed: generated tokens/s of each, the engine's ratio to the others, and the peak memory of each: of the
whole process (max RSS, loading included) and while generating (VmHWM after a reset once the model is loaded).
The machine's load average is printed beside each run: other processes on the same cores slow every side,
and with more threads than free cores each parallel operation can wait for a descheduled thread. With
`--repeats N` every side runs N times and the fastest run counts.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

MODEL = "builtin:smollm2-135m-instruct"


# ---------------------------------------------------------------------------------------------------------
# The batched path `align eval policy` used before the engine (align/generate.py), kept as the baseline.


def _baseline_batches(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[Any],
    max_new_tokens: int,
    batch_size: int,
    temperature: float,
    max_prompt_length: int,
    seed: int,
) -> Iterator[tuple[list[int], Any, int]]:
    """(prompt indices, generated ids (b, L + new), prompt width L) per batch, prompts sorted by length."""
    from preference_data.tokenize import tokenize_prompts

    ids = tokenize_prompts(list(prompts), tokenizer, max_prompt_length)
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    torch.manual_seed(seed)
    for s in range(0, len(order), batch_size):
        idx = order[s : s + batch_size]
        L = max(len(ids[i]) for i in idx)
        input_ids = torch.tensor([[pad] * (L - len(ids[i])) + ids[i] for i in idx], device=model.device)
        mask = torch.tensor([[0] * (L - len(ids[i])) + [1] * len(ids[i]) for i in idx], device=model.device)
        gen = model.generate(
            input_ids=input_ids,
            attention_mask=mask,
            max_new_tokens=max_new_tokens,
            do_sample=temperature > 0,
            temperature=temperature if temperature > 0 else None,
            top_p=None,
            top_k=None,
            pad_token_id=pad,
            eos_token_id=tokenizer.eos_token_id,
        )
        yield idx, gen, L


@torch.no_grad()
def baseline_generate(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[Any],
    max_new_tokens: int = 96,
    batch_size: int = 16,
    temperature: float = 0.0,
    max_prompt_length: int = 512,
    seed: int = 0,
) -> list[str]:
    """Responses to each prompt, in input order, exactly as `align.generate.generate` (now
    `prefalign.generation.policy.generate`) returned them before the engine: left-padded batches of prompts
    sorted by length through `model.generate`."""
    out = [""] * len(prompts)
    for idx, gen, L in _baseline_batches(
        model, tokenizer, prompts, max_new_tokens, batch_size, temperature, max_prompt_length, seed
    ):
        for row, i in enumerate(idx):
            out[i] = tokenizer.decode(gen[row, L:], skip_special_tokens=True).strip()
    return out


# ---------------------------------------------------------------------------------------------------------
# The sides


def _count(rows: list[list[int]], eos: int) -> int:
    """New tokens per row up to and including the first EOS (what the engine counts)."""
    return sum(r.index(eos) + 1 if eos in r else len(r) for r in rows)


from benchmarks.common import on_gpu, peak_rss_since_reset, reset_peak_rss, sync  # noqa: E402


def _setup(args: argparse.Namespace, prompts: int) -> tuple[Any, Any, list[Any]]:
    from prefalign.models.hub import load_causal_lm, load_tokenizer
    from preference_data.suite.heldout import load_prompts

    tok = load_tokenizer(MODEL)
    model = load_causal_lm(MODEL, dtype=args.dtype)
    if on_gpu():  # the toolkit's auto device: generation runs where the model sits
        model.to("cuda")
    convs = [p.prompt for p in load_prompts("suite", prompts)]
    return model, tok, convs


def side_engine(args: argparse.Namespace) -> dict:
    from prefalign.generation import SamplingParams, make_engine

    model, tok, convs = _setup(args, args.prompts)
    options = {k: v for k, v in (("max_rows", args.max_rows), ("token_budget", args.token_budget)) if v}
    engine = make_engine(model, tok, **options)
    engine.generate(convs[:1], SamplingParams(max_new_tokens=4))  # warm-up, as every side gets
    params = SamplingParams(n=args.samples, temperature=1.0, max_new_tokens=args.max_new_tokens, seed=0)
    loaded = reset_peak_rss()
    sync()
    t = time.perf_counter()
    result = engine.generate(convs, params)
    sync()
    dt = time.perf_counter() - t
    peak = peak_rss_since_reset()
    reasons: dict[str, int] = {}
    for out in result.outputs:
        for c in out.completions:
            reasons[c.finish_reason] = reasons.get(c.finish_reason, 0) + 1
    return {
        "side": "engine",
        "seconds": dt,
        "tokens": result.timings.generated_tokens,
        "tokens_per_s": result.timings.generated_tokens / dt,
        "timings": result.timings.to_dict(),
        "finish_reasons": reasons,
        "options": options,
        "loaded_rss_gb": loaded,
        "generation_peak_rss_gb": peak,
    }


@torch.no_grad()
def side_batched(args: argparse.Namespace) -> dict:
    model, tok, convs = _setup(args, args.prompts)
    repeated = [c for c in convs for _ in range(args.samples)]
    list(_baseline_batches(model, tok, convs[:1], 4, 1, 1.0, 512, 0))  # warm-up
    loaded = reset_peak_rss()
    t = time.perf_counter()
    tokens = 0
    for _, gen, L in _baseline_batches(model, tok, repeated, args.max_new_tokens, args.batch_size, 1.0, 512, 0):
        tokens += _count(gen[:, L:].tolist(), tok.eos_token_id)
    sync()
    dt = time.perf_counter() - t
    return {
        "side": "batched",
        "batch_size": args.batch_size,
        "seconds": dt,
        "tokens": tokens,
        "tokens_per_s": tokens / dt,
        "loaded_rss_gb": loaded,
        "generation_peak_rss_gb": peak_rss_since_reset(),
    }


@torch.no_grad()
def side_per_prompt(args: argparse.Namespace) -> dict:
    from preference_data.tokenize import tokenize_prompts

    model, tok, convs = _setup(args, args.prompts)
    ids = tokenize_prompts(convs, tok, 512)

    def run(p: list[int], new: int) -> Any:
        return model.generate(
            input_ids=torch.tensor([p], device=model.device),
            attention_mask=torch.ones(1, len(p), dtype=torch.long, device=model.device),
            max_new_tokens=new,
            do_sample=True,
            temperature=1.0,
            top_p=None,
            top_k=None,
            num_return_sequences=args.samples,
            pad_token_id=tok.pad_token_id,
            eos_token_id=tok.eos_token_id,
        )

    run(ids[0], 4)  # warm-up
    torch.manual_seed(0)
    loaded = reset_peak_rss()
    t = time.perf_counter()
    tokens = sum(_count(run(p, args.max_new_tokens)[:, len(p) :].tolist(), tok.eos_token_id) for p in ids)
    sync()
    dt = time.perf_counter() - t
    return {
        "side": "per-prompt",
        "seconds": dt,
        "tokens": tokens,
        "tokens_per_s": tokens / dt,
        "loaded_rss_gb": loaded,
        "generation_peak_rss_gb": peak_rss_since_reset(),
    }


SIDES = {"engine": side_engine, "batched": side_batched, "per-prompt": side_per_prompt}


# ---------------------------------------------------------------------------------------------------------


def gpu_text(r: dict) -> str:
    """The GPU's peak allocation of a side that generated on one ('' on the CPU)."""
    return f", GPU peak {r['peak_gpu_gb']:.2f} GB" if r.get("peak_gpu_gb") is not None else ""


def best_of(repeats: int, run: Any) -> dict:
    """The fastest of `repeats` runs, with every run's tokens/s under `all_tokens_per_s`."""
    runs = [run() for _ in range(max(1, repeats))]
    best = max(runs, key=lambda r: r["tokens_per_s"])
    best["all_tokens_per_s"] = [r["tokens_per_s"] for r in runs]
    return best


def run_side(side: str, args: argparse.Namespace, **override: Any) -> dict:
    from benchmarks.common import spawn

    opts = {
        "prompts": args.prompts,
        "samples": args.samples,
        "max_new_tokens": args.max_new_tokens,
        "dtype": args.dtype,
        "batch_size": 0,
        "max_rows": args.max_rows,
        "token_budget": args.token_budget,
        "threads": args.threads,
        **override,
    }
    argv = ["--child", side]
    for k, v in opts.items():
        argv += [f"--{k.replace('_', '-')}", str(v)]
    return spawn(__file__, argv)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--dtype", default="auto", choices=["auto", "bfloat16", "float32"])
    ap.add_argument("--batch-sizes", default="16,32,64,128,256", help="batched baseline sizes to calibrate over")
    ap.add_argument("--calibrate-prompts", type=int, default=16)
    ap.add_argument("--calibrate-tokens", type=int, default=32)
    ap.add_argument("--sides", default="engine,batched,per-prompt")
    ap.add_argument("--repeats", type=int, default=1, help="runs per side; the fastest counts")
    ap.add_argument("--threads", type=int, default=0, help="torch threads in every side (0 = torch's default)")
    ap.add_argument("--max-rows", type=int, default=0, help="engine max_rows (0 = its default)")
    ap.add_argument("--token-budget", type=int, default=0, help="engine token_budget (0 = its default)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--batch-size", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        from benchmarks.common import report
        from prefalign.cpu import tune_allocator

        tune_allocator()
        if args.threads:
            torch.set_num_threads(args.threads)
        torch.manual_seed(0)
        load = os.getloadavg()[0]
        res = SIDES[args.child](args)
        res["load_before"], res["load_after"] = load, os.getloadavg()[0]
        report(res)
        return

    from benchmarks.common import cpu_name, machine_line
    from prefalign.models.precision import decide_dtype

    why = "set with --dtype"
    if args.dtype == "auto":
        decision = decide_dtype("auto")
        args.dtype, why = decision.value, f"auto: {decision.reason}"
    sides = args.sides.split(",")
    threads = args.threads or torch.get_num_threads()
    print(
        f"CPU: {cpu_name()}, {threads} torch threads; precision {args.dtype} ({why}); load average "
        f"{os.getloadavg()[0]:.1f} at the start"
    )
    if on_gpu():
        print(f"machine: {machine_line()}: every side generates on the GPU")
    print(
        f"{args.prompts} suite prompts x {args.samples} samples, at most {args.max_new_tokens} new tokens, "
        f"temperature 1, {MODEL}"
    )
    results: dict[str, dict] = {}
    if "batched" in sides:
        sizes = [int(x) for x in args.batch_sizes.split(",")]
        best = sizes[0]
        if len(sizes) > 1:
            cal = {}
            for b in sizes:
                r = run_side(
                    "batched",
                    args,
                    batch_size=b,
                    prompts=min(args.calibrate_prompts, args.prompts),
                    max_new_tokens=min(args.calibrate_tokens, args.max_new_tokens),
                )
                cal[b] = r["tokens_per_s"]
            best = max(cal, key=cal.get)
            print(
                "batched baseline calibration (tokens/s by batch size): "
                + ", ".join(f"{b}: {v:.1f}" for b, v in cal.items())
                + f" -> batch size {best}"
            )
        results["batched"] = best_of(args.repeats, lambda: run_side("batched", args, batch_size=best))
    for side in ("engine", "per-prompt"):
        if side in sides:
            results[side] = best_of(args.repeats, lambda side=side: run_side(side, args))
    print()
    names = {
        "engine": "engine (prefalign.generation)",
        "batched": "batched model.generate (old align path)",
        "per-prompt": "model.generate per prompt",
    }
    for side, r in results.items():
        extra = f", batch size {r['batch_size']}" if side == "batched" else ""
        gen = r.get("generation_peak_rss_gb")
        during = (
            f" (while generating {gen:.2f} GB, {gen - r['loaded_rss_gb']:+.2f} GB over the loaded model)" if gen else ""
        )
        print(
            f"  {names[side]:<42} {r['tokens_per_s']:8.1f} tokens/s  ({r['tokens']} tokens in {r['seconds']:.1f}s"
            f"{extra}), peak memory {r['peak_rss_gb']:.2f} GB{during}{gpu_text(r)}; load {r['load_before']:.1f} -> "
            f"{r['load_after']:.1f}"
            + (
                f"; all runs: {', '.join(f'{x:.1f}' for x in r['all_tokens_per_s'])}"
                if len(r["all_tokens_per_s"]) > 1
                else ""
            )
        )
    if "engine" in results:
        e = results["engine"]
        for side in ("batched", "per-prompt"):
            if side in results:
                print(
                    f"  engine / {side}: {e['tokens_per_s'] / results[side]['tokens_per_s']:.2f}x tokens/s, "
                    f"{e['peak_rss_gb'] / results[side]['peak_rss_gb']:.2f}x peak memory"
                )
    print("\n" + json.dumps(results, indent=1, default=float))


if __name__ == "__main__":
    main()
