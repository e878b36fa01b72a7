"""The GPU suite: one prepared run of the speed comparisons that matter on a GPU, part by part, into one JSON.

    python benchmarks/gpu_suite.py                                  # every part, on the first GPU
    python benchmarks/gpu_suite.py --only check,rm-0.5b,rm-1.5b     # some parts
    python benchmarks/gpu_suite.py --device cpu --smoke             # the rehearsal: every part on a tiny model
    python benchmarks/gpu_suite.py --table benchmarks/results/gpu/*.json   # the docs' GPU table from saved runs

Parts (`PARTS`, in order; each runs in its own process with its own time limit, and a part that fails or runs
out of time is recorded as such and the suite goes on):
  check          the GPU kernels against their references: the varlen flash attention (grouped-query heads, a
                 pair's later response attending its prompt's keys) against SDPA per sequence in fp32, forward and
                 backward; the chunked log-prob head against the plain head (values, gradients, peak memory);
                 a packed model's log-probs in the varlen layout against the dense-mask layout
  rm-0.5b        reward-model full fine-tuning, Qwen2.5-0.5B's shape: TRL RewardTrainer vs ours (compiled and eager)
  rm-1.5b        the same at Qwen2.5-1.5B's shape (ours compiled if compiling won at 0.5B in this run, else eager)
  dpo-0.5b       DPO (sigmoid), full fine-tuning, Qwen2.5-0.5B's shape: TRL DPOTrainer (eager, and with Liger's
                 kernels where liger-kernel is installed) vs ours
  rm-lora-135m   RM LoRA at SmolLM2-135M's shape, 8 pairs a step (the setting measured before on an H100)
  dpo-lora-0.5b  DPO with LoRA at Qwen2.5-0.5B's shape
  dpo-1.5b       DPO full and LoRA at Qwen2.5-1.5B's shape
  grpo-0.5b      GRPO, LoRA, Qwen2.5-0.5B's shape: TRL GRPOTrainer (no vLLM on either side) vs ours (eager rollouts,
                 and on the static path: the decode step captured once per bucket)
  decoder-135m   the decoder at batch 16 and 64, SmolLM2-135M's shape: the engine (eager and static, compiled)
                 vs model.generate (static cache and compiled forward; and as it comes) and the machine's limit
  quickstart     `align quickstart` as `make quickstart` runs it (the embedded model, its default settings), timed by
                 stage; its summary.json comes back beside the records (the rehearsal: the tiny model, two steps)
  cuda-tests     `pytest -m cuda` (every test, not stopping at a failure)

Models are `builtin:<shape>-shape` (`prefalign.models.hub.SHAPES`): the architecture and vocabulary at full size,
random weights, the SmolLM2 tokenizer; built once into the prefalign cache. The data are HH-RLHF helpful-base pairs
(`PREFALIGN_SHARED_DATA` names the folder holding hh-rlhf/ where ../shared/data is not beside the project).
Each run appends to `--out` (default benchmarks/results/gpu/<date>-<device>.json) one record per part: the date,
the device, the command, the seconds it took and the comparison's results as the benchmark script wrote them.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SHAPE = {
    "0.5b": "builtin:qwen2.5-0.5b-shape",
    "1.5b": "builtin:qwen2.5-1.5b-shape",
    "135m": "builtin:smollm2-135m-shape",
}
TINY = "builtin:tiny-llama"

# name: (script, its arguments, time limit in seconds, arguments of the CPU rehearsal)
_SMOKE = ["--model", TINY, "--steps", "2", "--batch", "4", "--trl-settings", "eager", "--no-warm"]


def _pair_part(
    script: str,
    shape: str,
    modes: str,
    steps: int,
    batch: int,
    trl: str,
    compile_: str,
    side: int,
    limit: int,
    smoke_modes: str | None = None,
    smoke_compile: str | None = None,
) -> tuple[str, list[str], int, list[str]]:
    """A pair-training comparison (`rm_train_vs_trl.py`, `dpo_vs_trl.py`) at a model shape, and its rehearsal on the
    tiny model (`--compile {best_compile}` takes what the rm-0.5b part found faster in this run)."""
    args = ["--model", SHAPE[shape], "--modes", modes, "--steps", str(steps), "--batch", str(batch)]
    args += ["--trl-settings", trl, "--no-warm", "--compile", compile_, "--side-timeout", str(side)]
    smoke = _SMOKE + ["--modes", smoke_modes or modes, "--compile", smoke_compile or compile_]
    return script, args, limit, smoke


RM, DPO, BEST = "rm_train_vs_trl.py", "dpo_vs_trl.py", "{best_compile}"
# every quickstart stage at its smallest on the tiny model, in fp32: the wiring, not the result (the quickstart
# part's rehearsal, and tests/test_quickstart.py's runs)
TINY_QUICKSTART = [
    "model=builtin:tiny-llama",
    "suite.per_family=30",
    "rm.train.max_steps=2",
    "rm.train.precision=fp32",
    "rm.eval.stats_pairs=8",
    "dpo.train.max_steps=2",
    "align.rounds.rounds=1",
    "align.rounds.prompts_per_round=6",
    "align.rounds.keep_pairs=4",
    "align.rounds.max_new_tokens=6",
    "align.train.max_steps=2",
    "align.train.precision=fp32",
    "eval.prompts=6",
    "eval.safety_each=2",
    "eval.max_new_tokens=4",
]
PARTS: dict[str, tuple[str, list[str], int, list[str]]] = {
    "check": ("", [], 90, []),
    "rm-0.5b": _pair_part(RM, "0.5b", "full", 10, 32, "eager", "off,on", 90, 210),
    "rm-1.5b": _pair_part(RM, "1.5b", "full", 8, 32, "eager", BEST, 100, 170),
    "dpo-0.5b": _pair_part(DPO, "0.5b", "full", 8, 16, "eager,eager-liger", BEST, 80, 200),
    "rm-lora-135m": _pair_part(RM, "135m", "lora", 16, 8, "eager", "off,on", 70, 170, smoke_compile="off"),
    "dpo-lora-0.5b": _pair_part(DPO, "0.5b", "lora", 8, 16, "eager,eager-liger", BEST, 80, 200),
    "dpo-1.5b": _pair_part(DPO, "1.5b", "full,lora", 8, 16, "eager,eager-liger", BEST, 100, 400, "lora", "off"),
    "grpo-0.5b": (
        "grpo_vs_trl.py",
        [
            "--model",
            SHAPE["0.5b"],
            "--modes",
            "lora",
            "--steps",
            "3",
            "--trl-settings",
            "eager",
            "--ours-settings",
            "eager,static",
        ],
        300,
        [
            "--model",
            TINY,
            "--modes",
            "lora",
            "--steps",
            "1",
            "--trl-settings",
            "eager",
            "--ours-settings",
            "eager,static",
        ],
    ),
    "decoder-135m": (
        "decoder.py",
        ["--model", SHAPE["135m"], "--batches", "16,64", "--new-tokens", "64"],
        240,
        ["--model", TINY, "--batches", "1,4", "--new-tokens", "8", "--repeats", "1"],
    ),
    "quickstart": (
        "quickstart",
        [],
        240,
        TINY_QUICKSTART,
    ),
    "cuda-tests": ("", [], 420, []),
}


def check_part() -> dict:
    """The GPU kernels against their references (see the module's docstring); returns the measured errors."""
    import torch

    from prefalign.models import heads, varlen
    from prefalign.models.forward import sequence_logps
    from prefalign.models.hub import load_causal_lm, load_tokenizer
    from preference_data.packing import pack

    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    torch.manual_seed(0)
    out: dict = {"device": device, "kernel": varlen.uses_kernel(torch.zeros(1, device=device, dtype=dtype))}

    def rel(a, b) -> float:
        return float((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-12))

    # 1. varlen attention: the plan of real packed pairs (prompt + chosen causal; rejected over prompt + itself)
    gen = torch.Generator().manual_seed(0)
    lens = [(int(a), int(b), int(c)) for a, b, c in torch.randint(5, 300, (24, 3), generator=gen)]
    b = pack([[1] * p for p, _, _ in lens], [([2] * c, [3] * r) for _, c, r in lens], 0, 512, "varlen")
    T, H, Hkv, d = b.input_ids.shape[1], 14, 2, 64
    q = torch.randn(1, H, T, d, device=device, dtype=dtype, requires_grad=True)
    k = torch.randn(1, Hkv, T, d, device=device, dtype=dtype, requires_grad=True)
    v = torch.randn(1, Hkv, T, d, device=device, dtype=dtype, requires_grad=True)
    plan = varlen.make_plan(b.kv_index.to(device), b.cu_seqlens.to(device), b.max_seqlens)  # type: ignore[arg-type]
    g = torch.randn(1, T, H, d, device=device, dtype=dtype)
    o = varlen.attend(q, k, v, plan, d**-0.5)
    (o * g).sum().backward()
    got = [o.detach(), q.grad, k.grad, v.grad]
    q32, k32, v32 = (x.detach().double().requires_grad_() for x in (q, k, v))
    kk = k32[0].transpose(0, 1)[plan.kv_index]
    vv = v32[0].transpose(0, 1)[plan.kv_index]
    ref = varlen.reference_attention(q32[0].transpose(0, 1), kk, vv, plan.cu_q.tolist(), plan.cu_k.tolist(), d**-0.5)[
        None
    ]
    (ref * g.double()).sum().backward()
    want = [ref.detach(), q32.grad, k32.grad, v32.grad]
    out["varlen_rel_err"] = {n: rel(a, b) for n, a, b in zip(("out", "dq", "dk", "dv"), got, want, strict=True)}
    if device == "cuda":
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(20):
            o = varlen.attend(q, k, v, plan, d**-0.5)
            o.backward(g)
        torch.cuda.synchronize()
        out["varlen_fwd_bwd_ms"] = (time.perf_counter() - t) / 20 * 1e3
        out["varlen_tokens"] = T

    # 2. the chunked log-prob head against the plain head (Qwen2.5-0.5B's head: hidden 896, vocabulary 151,936)
    N, Hd, V = (8192, 896, 151936) if device == "cuda" else (512, 64, 4096)
    h = (torch.randn(N, Hd, device=device) * 0.5).requires_grad_()
    w = (torch.randn(V, Hd, device=device) * 0.02).requires_grad_()
    t = torch.randint(0, V, (N,), device=device)
    gr = torch.randn(N, device=device)

    def plain():
        with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
            logits = (h @ w.T).float()
        return heads.plain_token_logps(logits, t)

    def chunked():
        with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
            return heads.token_logps_from_hidden(h, w, t)

    res = {}
    for name, fn in (("plain", plain), ("chunked", chunked)):
        h.grad = w.grad = None
        if device == "cuda":
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
        lp = fn()
        (lp * gr).sum().backward()
        peak = (torch.cuda.max_memory_allocated() - base) / 1024**3 if device == "cuda" else None
        res[name] = (lp.detach(), h.grad.clone(), w.grad.clone(), peak)
    out["head_rel_err"] = {n: rel(res["chunked"][i], res["plain"][i]) for i, n in enumerate(("logps", "dh", "dw"))}
    out["head_peak_gb"] = {"plain": res["plain"][3], "chunked": res["chunked"][3]}

    # 3. a packed model's log-probs and gradients: varlen layout against the dense-mask layout
    tok = load_tokenizer(TINY)
    model = load_causal_lm(TINY, dtype="float32").to(device)
    prompts = [[int(x) for x in torch.randint(10, 400, (p,), generator=gen)] for p, _, _ in lens[:8]]
    resp = [
        tuple([int(x) for x in torch.randint(10, 400, (n,), generator=gen)] for n in (c, r)) for _, c, r in lens[:8]
    ]
    grads = {}
    for layout in ("mask", "varlen"):
        model.zero_grad()
        with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
            lp = sequence_logps(model, pack(prompts, resp, tok.pad_token_id, 4096, layout).to(device))
        (lp * torch.linspace(-1, 1, lp.numel(), device=device)).sum().backward()
        grads[layout] = (lp.detach(), torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
    out["attention_calls"] = dict(varlen.CALLS)  # on a GPU: the model's layers all took the kernel
    out["model_varlen_vs_mask"] = {
        "logps_rel_err": rel(grads["varlen"][0], grads["mask"][0]),
        "grad_cosine": float(torch.nn.functional.cosine_similarity(grads["varlen"][1], grads["mask"][1], dim=0)),
    }
    return out


def run_part(name: str, args, best_compile: str, out_dir: Path, left: float = float("inf")) -> dict:
    """Run one part in its own process within its time limit (and the `left` seconds of the suite's deadline);
    returns its record."""
    script, part_args, limit, smoke_args = PARTS[name]
    log = out_dir / f"{name}.log"
    json_out = out_dir / f"{name}.json"
    json_out.unlink(missing_ok=True)
    py = sys.executable
    if name == "check":
        cmd = [py, __file__, "--check-child", str(json_out)] + (["--device", "cpu"] if args.device == "cpu" else [])
    elif name == "cuda-tests":
        cmd = [
            py,
            "-m",
            "pytest",
            "-q",
            "-rA",
            "-m",
            "cuda",
            "-p",
            "no:cacheprovider",
            str(ROOT / "tests" / "test_cuda.py"),
        ]
    elif name == "quickstart":  # into an empty folder; its record is its summary (the stages' results and seconds)
        shutil.rmtree(out_dir / "quickstart", ignore_errors=True)
        json_out = out_dir / "quickstart" / "summary.json"
        a = smoke_args if args.smoke else part_args
        cmd = [py, "-m", "align.cli.main", "quickstart", "--out", str(out_dir / "quickstart"), *a]
    else:
        a = smoke_args if args.smoke else part_args
        a = [x.replace("{best_compile}", best_compile) for x in a]
        cmd = [py, str(ROOT / "benchmarks" / script), *a, "--device", args.device, "--json-out", str(json_out)]
    limit = int(min(limit * args.time_scale, left))
    if limit < 20:
        print(f"\n=== {name}: not run, {left:.0f}s left before the deadline", flush=True)
        return {
            "part": name,
            "status": "not run: deadline",
            "seconds": 0.0,
            "command": " ".join(cmd[1:]),
            "results": None,
        }
    print(f"\n=== {name} (limit {limit}s): {' '.join(cmd[1:])}", flush=True)
    t = time.perf_counter()
    status = "ok"
    with open(log, "w") as fh:
        try:
            proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, timeout=limit, cwd=ROOT)
            status = "ok" if proc.returncode == 0 else f"exit {proc.returncode}"
        except subprocess.TimeoutExpired:
            status = f"timed out after {limit}s"
    seconds = time.perf_counter() - t
    text = log.read_text(errors="replace")
    head = text.split("\n{\n")[0].splitlines()  # the comparison's printed lines, before its JSON
    summary = [ln for ln in head if ln.startswith(("  ", "[", "machine", "precision", "data", "train.compile"))]
    whole = status != "ok" or name in ("check", "quickstart", "cuda-tests")
    print(text[-4000:] if whole else "\n".join(summary[-40:]), flush=True)
    print(f"=== {name}: {status} in {seconds:.0f}s", flush=True)
    results = json.loads(json_out.read_text()) if json_out.exists() else None
    return {
        "part": name,
        "status": status,
        "seconds": round(seconds, 1),
        "command": " ".join(cmd[1:]),
        "results": results,
    }


def compile_winner(record: dict | None) -> str | None:
    """'on' or 'off': which of ours ran faster in steady state in an RM part that ran both, else None."""
    full = ((record or {}).get("results") or {}).get("full") or {}
    rates = {o.get("compile"): o.get("steady_pairs_per_s") or 0 for o in full.get("ours", []) if "error" not in o}
    if {"on", "off"} <= rates.keys():
        return "on" if rates["on"] > rates["off"] else "off"
    return None


def device_name(device: str) -> str:
    import torch

    if device != "cpu" and torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    from benchmarks.common import cpu_name

    return cpu_name()


def table(files: list[str]) -> str:
    """The docs' GPU table (Markdown) from saved suite runs: one row per side of each comparison."""
    rows = [
        "| date | device | part | mode | side | pairs/s whole | pairs/s steady | first step s | MFU | peak GPU GB "
        "| steady vs TRL's best |",
        "|" + "---|" * 11,
    ]
    for f in files:
        for rec in json.loads(Path(f).read_text()):
            res = rec.get("results") or {}
            if rec["part"] in ("check", "cuda-tests") or not res:
                rows.append(f"| {rec['date']} | {rec['device']} | {rec['part']} | | {rec['status']} | | | | | | |")
                continue
            peak = res.get("peak_gflops") or 0
            for mode in ("full", "lora"):
                m = res.get(mode)
                if not m:
                    continue
                best = next((r for r in m["trl"] if r.get("setting") == m.get("best_trl")), None)
                for side in m["trl"] + m["ours"]:
                    if "error" in side or "pairs_per_s" not in side:  # GRPO's sides count prompts, not pairs
                        continue
                    who = f"TRL {side['setting']}" if "setting" in side else f"ours, compile {side['compile']}"
                    mfu = side.get("steady_model_gflops")
                    vs = side["steady_pairs_per_s"] / best["steady_pairs_per_s"] if best and "compile" in side else None
                    rows.append(
                        f"| {rec['date']} | {rec['device']} | {rec['part']} | {mode} | {who} | "
                        f"{side['pairs_per_s']:.2f} | "
                        f"{side['steady_pairs_per_s']:.2f} | {side.get('first_step_seconds') or 0:.1f} | "
                        f"{(mfu / peak if mfu and peak else 0):.1%} | {side.get('peak_gpu_gb') or 0:.1f} | "
                        f"{f'{vs:.2f}x' if vs else ''} |"
                    )
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default=",".join(PARTS), help=f"comma list of parts (default all: {', '.join(PARTS)})")
    ap.add_argument("--device", default="auto", choices=["auto", "cpu"], help="auto: the first GPU; cpu: hide GPUs")
    ap.add_argument("--smoke", action="store_true", help="the rehearsal: every part on a tiny model, 2 steps")
    ap.add_argument("--time-scale", type=float, default=1.0, help="multiply every part's time limit")
    ap.add_argument("--out", default="", help="the JSON records are appended here (a list)")
    ap.add_argument("--logs", default="", help="folder for each part's log and JSON (default: beside --out)")
    ap.add_argument("--deadline", type=float, default=0, help="seconds for the whole suite: a part gets what is left")
    ap.add_argument("--table", nargs="*", default=None, help="print the GPU table from these saved runs and exit")
    ap.add_argument("--check-child", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    if args.table is not None:
        print(table(args.table))
        return
    if args.check_child:
        res = check_part()
        print(json.dumps(res, indent=1))
        Path(args.check_child).write_text(json.dumps(res, indent=1))
        return
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    date = datetime.date.today().isoformat()
    device = device_name(args.device)
    out = Path(args.out or ROOT / "benchmarks" / "results" / "gpu" / f"{date}-{device.replace(' ', '_')}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    logs = Path(args.logs) if args.logs else out.parent / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    records = json.loads(out.read_text()) if out.exists() else []
    best_compile = "off"  # until rm-0.5b shows compiling wins here
    names = [n for n in args.only.split(",") if n]
    unknown = [n for n in names if n not in PARTS]
    if unknown:
        raise SystemExit(f"unknown parts {unknown}; parts: {', '.join(PARTS)}")
    print(f"gpu suite on {device}, {date}: {', '.join(names)}", flush=True)
    start = time.perf_counter()
    for name in names:
        left = args.deadline - (time.perf_counter() - start) if args.deadline else float("inf")
        rec = {"date": date, "device": device, "smoke": args.smoke, **run_part(name, args, best_compile, logs, left)}
        records.append(rec)
        out.write_text(json.dumps(records, indent=1, default=float))
        if name == "rm-0.5b":
            best_compile = compile_winner(rec) or best_compile
            print(f"(ours compiled or eager from here on: compile {best_compile})", flush=True)
    print(f"\nrecords: {out}")
    print(table([str(out)]))


if __name__ == "__main__":
    main()
