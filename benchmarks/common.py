"""Shared pieces of the benchmark scripts: data, the machine's bf16 matmul peak, FLOP counting."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
HH_HELPFUL = ROOT.parent / "shared" / "data" / "hh-rlhf" / "helpful-base" / "test.decontaminated.jsonl.gz"


def first_pairs(n: int):
    """The first n pairs of HH-RLHF helpful-base (in file order) as records."""
    from preference_data.sources import read_records

    if not HH_HELPFUL.exists():
        raise SystemExit(f"{HH_HELPFUL} not found: the benchmark needs ../shared/data beside the project")
    records, _ = read_records(str(HH_HELPFUL))
    return records[:n]


def trl_rows(pairs) -> list[dict]:
    """TRL conversational preference rows with an explicit prompt."""
    conv = lambda msgs: [m.to_dict() for m in msgs]  # noqa: E731
    return [{"prompt": conv(p.prompt), "chosen": conv(p.chosen), "rejected": conv(p.rejected)} for p in pairs]


def bf16_matmul_peak(n: int = 2048, reps: int = 20) -> float:
    """GFLOP/s of a plain bf16 (n x n) @ (n x n) matmul on this machine: the reference peak."""
    a = torch.randn(n, n, dtype=torch.bfloat16)
    b = torch.randn(n, n, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    t = time.perf_counter()
    for _ in range(reps):
        a @ b
    dt = time.perf_counter() - t
    return 2 * n**3 * reps / dt / 1e9


def model_dims(model_ref: str) -> dict[str, int]:
    from transformers import AutoConfig

    from prefalign.models.hub import resolve

    c = AutoConfig.from_pretrained(resolve(model_ref))
    h, L, inter, V = c.hidden_size, c.num_hidden_layers, c.intermediate_size, c.vocab_size
    kv = c.num_key_value_heads * (h // c.num_attention_heads)
    per_layer = h * h * 2 + h * kv * 2 + 3 * h * inter  # q, o, k, v, gate, up, down
    return {"body": per_layer * L, "head": h * V, "hidden": h, "layers": L}


def train_matmul_flops(dims: dict[str, int], tokens: int, head_tokens: int, lora: bool) -> float:
    """Matmul FLOPs of forward + backward: 2 per weight per token forward, x3 with weight gradients
    (full fine-tuning), x2 when only input gradients flow through frozen weights (LoRA). Attention
    score matmuls are left out (small at these lengths), so the rate is a slight under-estimate."""
    mult = 4 if lora else 6
    return mult * (dims["body"] * tokens + dims["head"] * head_tokens)


def spawn(script: str, args: list[str], fresh_logp_cache: bool = False, inductor_cache: str | None = None) -> dict:
    """Run one benchmark side as `python script --child ... args` in its own process (so its time and peak
    memory are its own) and return the dict it printed with `report`. The process gets an empty
    torch.compile (inductor) cache, so compiling is paid and timed as on a first run, unless
    `inductor_cache` names one to use (e.g. one a previous run filled: a warm start). `fresh_logp_cache`
    also gives it an empty log-prob cache (the converted models are shared), so precomputation is paid
    and timed in this run."""
    env = dict(os.environ)
    with tempfile.TemporaryDirectory() as cache:
        env["TORCHINDUCTOR_CACHE_DIR"] = inductor_cache or str(Path(cache) / "inductor")
        if fresh_logp_cache:
            models = Path(os.environ.get("PREFALIGN_CACHE", Path.home() / ".cache" / "prefalign")) / "models"
            env["PREFALIGN_CACHE"] = cache
            (Path(cache) / "models").symlink_to(models)
        proc = subprocess.run([sys.executable, script, *args], env=env, capture_output=True, text=True)
    lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"{' '.join(args)} failed:\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT ") :])


def step_timer() -> list[float]:
    """Record the time at the end of every optimizer step of any transformers Trainer in this process."""
    from transformers.trainer_callback import CallbackHandler

    times: list[float] = []
    original = CallbackHandler.on_step_end

    def on_step_end(self, args, state, control):
        times.append(time.perf_counter())
        return original(self, args, state, control)

    CallbackHandler.on_step_end = on_step_end
    return times


def steady_pairs_per_s(times: list[float], pairs_per_step: int) -> float | None:
    """Pairs/s after the first step (which pays compile and warm-up), from `step_timer` times."""
    return pairs_per_step * (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 else None


def report(res: dict) -> None:
    """In a child process: add the peak memory (max RSS) and print the result line `spawn` reads."""
    res["peak_rss_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2
    print("RESULT " + json.dumps(res), flush=True)


def _status_kb(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def reset_peak_rss() -> float | None:
    """Start a new peak-RSS window (Linux: `5` to /proc/self/clear_refs resets VmHWM) and return the current
    RSS in GB, so a phase's own peak can be told from the peak of loading the model before it."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return None
    kb = _status_kb("VmRSS")
    return kb / 1024**2 if kb is not None else None


def peak_rss_since_reset() -> float | None:
    """Peak RSS (GB) since the last `reset_peak_rss` (VmHWM), or None where /proc is not there."""
    kb = _status_kb("VmHWM")
    return kb / 1024**2 if kb is not None else None


def cpu_name() -> str:
    """The CPU model name from /proc/cpuinfo (or the platform's processor string)."""
    import platform

    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def auto_dtype() -> tuple[str, str]:
    """(dtype, why): bfloat16 where the CPU multiplies bf16 natively (AVX-512 BF16 or AMX), float32 otherwise
    (an AVX2-only CPU emulates bf16 hundreds of times slower than fp32)."""
    try:
        flags = set(Path("/proc/cpuinfo").read_text().split())
    except OSError:
        flags = set()
    native = sorted(flags & {"avx512_bf16", "amx_bf16"})
    if native:
        return "bfloat16", f"native bf16 ({', '.join(native)})"
    return "float32", "no native bf16 (no avx512_bf16 / amx_bf16 flag)"
