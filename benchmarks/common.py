"""Shared pieces of the benchmark scripts: equal data for both sides, the machine and its matmul peaks,
the work each side really does (FLOPs from its own batches), allocator settings, one-step profiles."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
BATCH = 8
MAX_LENGTH = 512
MODEL = "builtin:smollm2-135m-instruct"
# the real data folder beside the project (`PREFALIGN_SHARED_DATA` names it where it is elsewhere, e.g. a GPU machine)
SHARED_DATA = Path(os.environ.get("PREFALIGN_SHARED_DATA") or ROOT.parent / "shared" / "data")
HH_HELPFUL = SHARED_DATA / "hh-rlhf" / "helpful-base" / "test.decontaminated.jsonl.gz"


def record_calls(owner: Any, name: str, take: Callable[[Any], Any]) -> list:
    """Replace `owner.name` by a wrapper that calls it as before and appends `take(result)` to the returned list:
    what each call of a measured side did (its timings, its real tokens), read after the run."""
    seen: list = []
    original = getattr(owner, name)

    def recorded(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        seen.append(take(result))
        return result

    setattr(owner, name, recorded)
    return seen


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


def on_gpu() -> bool:
    """Whether the sides run on a GPU: the toolkit's `auto` device (and transformers' Trainer) is the first
    visible CUDA GPU. `--device cpu` hides the GPUs from every side (`apply_device`)."""
    return torch.cuda.is_available()


def sync() -> None:
    """Wait for the GPU's queued work (a no-op on the CPU), so a wall-clock time read after it is the work's."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def add_device_arg(ap) -> None:
    ap.add_argument(
        "--device",
        default="auto",
        choices=["auto", "cpu"],
        help="auto: every side on the first visible GPU, else the CPU (the toolkit's default); cpu: GPUs hidden "
        "from every side",
    )


def apply_device(args) -> None:
    """Hide the GPUs from this process and every side it spawns when `--device cpu` (before CUDA starts)."""
    if args.device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""


def matmul_peak(dtype: str = "bfloat16", n: int = 2048, reps: int = 10) -> float:
    """GFLOP/s of a plain (n x n) @ (n x n) matmul in `dtype` where the sides run (the GPU when they run on one,
    at n 8192, else this CPU): the reference peak."""
    dt_ = getattr(torch, dtype)
    device = "cuda" if on_gpu() else "cpu"
    n = 8192 if device == "cuda" else n
    a = torch.randn(n, n, dtype=dt_, device=device)
    b = torch.randn(n, n, dtype=dt_, device=device)
    for _ in range(2):
        a @ b
    sync()
    t = time.perf_counter()
    for _ in range(reps):
        a @ b
    sync()
    dt = time.perf_counter() - t
    return 2 * n**3 * reps / dt / 1e9


def machine_line() -> str:
    """The CPU, the vector capability torch dispatches to, its native bf16 features, and the GPUs, in one line."""
    from prefalign.models.precision import cpu_bf16_features

    features = cpu_bf16_features()
    bf16 = f"native bf16 ({' + '.join(features)})" if features else "no native bf16"
    line = (
        f"{cpu_name()}; torch CPU capability {torch.backends.cpu.get_cpu_capability()}; {bf16}; "
        f"{torch.get_num_threads()} threads"
    )
    if torch.cuda.is_available():  # the toolkit's `auto` device: models run there, not on the CPU
        gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        line += f"; GPU: {', '.join(gpus)} (CUDA {torch.version.cuda}, torch {torch.__version__})"
    return line


def resolve_precision(requested: str) -> tuple[str, str]:
    """(bf16 or fp32, why): `auto` as the toolkit decides it for this device (`prefalign.models.precision`)."""
    from prefalign.models.precision import decide_precision

    d = decide_precision(requested)
    return d.value, d.line()


def equal_pairs(n: int, max_length: int, out: Path, model: str = MODEL) -> tuple[int, int]:
    """Write to `out` (JSONL) the first `n` pairs of HH-RLHF helpful-base, in file order, whose every rendering
    fits `max_length` tokens, so both sides train on exactly these pairs with nothing dropped or truncated.
    Returns (pairs written, pairs skipped for length before the n-th kept one)."""
    from prefalign.models.hub import load_tokenizer
    from preference_data.records import write_jsonl

    pairs = first_pairs(max(256, 2 * n))
    chosen = fitting_pairs(pairs, load_tokenizer(model), max_length)[:n]
    if len(chosen) < n:
        raise SystemExit(f"only {len(chosen)} of the first {len(pairs)} pairs fit {max_length} tokens; use fewer steps")
    skipped = pairs.index(chosen[-1]) + 1 - n
    write_jsonl(str(out), [p.to_dict() for p in chosen])
    return n, skipped


def fitting_pairs(pairs: list, tok, max_length: int) -> list:
    """The pairs (in order) whose every rendering fits max_length tokens, the response read at EOS and at the
    template's end alike, so no side drops or truncates any."""
    from preference_data.tokenize import tokenize_pairs

    keep_eos, _ = tokenize_pairs(pairs, tok, max_length, "drop")
    keep_tpl, _ = tokenize_pairs(pairs, tok, max_length, "drop", response_end="template")
    ids = {p.id for p in keep_eos} & {p.id for p in keep_tpl}
    return [p for p in pairs if p.id in ids]


def read_pairs(path: str):
    from preference_data.records import pair_from_dict

    return [pair_from_dict(json.loads(line)) for line in Path(path).read_text().splitlines() if line.strip()]


class WorkMeter:
    """The matmul FLOPs each optimizer step really runs, read from the batches a transformers Trainer feeds its
    model (so padding counts where a side pads): per weight and token, 2 for a forward, +2 for input gradients,
    +2 for weight gradients of trained weights (full fine-tuning), +2 for a recomputed forward (gradient
    checkpointing), +2 for a reference forward made in the step. The LM head counts only on the positions whose
    log-probs a side computes (`head_key`: a mask or a per-sequence length in the batch). Attention score
    products are left out (small at these lengths), so every rate is a slight under-estimate, alike for both.

    `useful` counts the model FLOPs of the real tokens only (no padding) for a forward and backward (6 per weight
    and token with full fine-tuning, 4 with LoRA), with the attention score products of each real causal sequence
    (`_attention_sequences`; 3 x 4 x width per query-key pair, halved by the causal mask): the numerator of MFU. A
    side that runs a token twice (TRL encodes the prompt once per response) counts it twice: it is work it did."""

    def __init__(self, dims: dict[str, int], lora: bool, ref_in_step: bool, gc: bool, head_key: str | None):
        self.dims, self.head_key = dims, head_key
        self.mult = (4 if lora else 6) + (2 if gc else 0) + (2 if ref_in_step else 0)
        self.useful_mult = 4 if lora else 6
        self.flops: list[float] = []
        self.useful: list[float] = []
        self.tokens: list[int] = []
        self.started: float | None = None

    def install(self) -> None:
        from transformers import Trainer

        original = Trainer.training_step
        meter = self

        def training_step(trainer, model, inputs, *args, **kwargs):
            meter.add(inputs)
            return original(trainer, model, inputs, *args, **kwargs)

        Trainer.training_step = training_step
        original_train = Trainer.train

        def train(trainer, *args, **kwargs):
            sync()
            meter.started = time.perf_counter()
            return original_train(trainer, *args, **kwargs)

        Trainer.train = train

    def add(self, inputs: dict) -> None:
        ids = [v for k, v in inputs.items() if k.endswith("input_ids") and torch.is_tensor(v)]
        body = sum(int(v.numel()) for v in ids)
        head = 0
        if self.head_key is not None and self.head_key in inputs:
            head = int(inputs[self.head_key].sum())
        self.tokens.append(body)
        self.flops.append(self.mult * (self.dims["body"] * body + self.dims["head"] * head))
        masks = [v for k, v in inputs.items() if k.endswith("attention_mask") and torch.is_tensor(v) and v.dim() == 2]
        real = int(inputs["real_tokens"]) if "real_tokens" in inputs else sum(int(m.sum()) for m in masks) or body
        attn = sum(n * (m - n / 2) for n, m in _attention_sequences(inputs, real)) * 4 * self.dims["attn_width"]
        self.useful.append(
            self.useful_mult * (self.dims["body"] * real + self.dims["head"] * head) + 3 * attn * self.dims["layers"]
        )

    def steady_rate(self, times: list[float], useful: bool = False) -> float | None:
        """GFLOP/s over the steps after the first (whose time includes compiling and warm-up); `useful`: the model
        FLOPs of real tokens (MFU's numerator) instead of what the side ran."""
        flops = self.useful if useful else self.flops
        if len(times) < 2 or len(flops) < len(times):
            return None
        return sum(flops[1 : len(times)]) / (times[-1] - times[0]) / 1e9


def _attention_sequences(inputs: dict, real: int) -> list[tuple[int, int]]:
    """(queries, keys) of each causal attention sequence a batch really holds, padding left out: from our varlen
    batches' cu_seqlens, our segment batches' (offset, P, n1, n2), or the 2D attention masks of a padded batch (one
    sequence per row, its real tokens). Empty for a dense 4D mask."""
    if torch.is_tensor(inputs.get("cu_seqlens")):
        cu = inputs["cu_seqlens"].tolist()
        seqs = [(b - a, d - c) for a, b, c, d in zip(cu[0], cu[0][1:], cu[1], cu[1][1:], strict=False)]
        return seqs[:-1] if cu[0][-1] > real and seqs else seqs  # the stream's padding is a sequence of its own
    if torch.is_tensor(inputs.get("segments")):
        seqs = []
        for _, P, n1, n2 in inputs["segments"].tolist():
            seqs.append((P + n1, P + n1))
            if n2:
                seqs.append((n2, P + n2))
        return seqs
    masks = [v for k, v in inputs.items() if k.endswith("attention_mask") and torch.is_tensor(v) and v.dim() == 2]
    return [(n, n) for m in masks for n in m.sum(-1).tolist()]


def profile_step(step: int, out: Path, rows: int = 15):
    """A TrainerCallback that profiles optimizer step `step` (1-based, steady state) and writes the top
    operators by self CPU time to `out` (text)."""
    from torch.profiler import ProfilerActivity, profile
    from transformers import TrainerCallback

    class Profile(TrainerCallback):
        prof = None

        def on_step_begin(self, args, state, control, **kw):
            if state.global_step + 1 == step:
                self.prof = profile(activities=[ProfilerActivity.CPU])
                self.prof.__enter__()

        def on_step_end(self, args, state, control, **kw):
            if self.prof is not None and state.global_step == step:
                self.prof.__exit__(None, None, None)
                table = self.prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows)
                out.write_text(table)
                self.prof = None

    return Profile()


def install_callback(callback) -> None:
    """Add `callback` to every transformers Trainer made in this process."""
    from transformers import Trainer

    original = Trainer.__init__

    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        self.add_callback(callback)

    Trainer.__init__ = init


def model_dims(model_ref: str) -> dict[str, int]:
    from transformers import AutoConfig

    from prefalign.models.hub import resolve

    c = AutoConfig.from_pretrained(resolve(model_ref))
    h, L, inter, V = c.hidden_size, c.num_hidden_layers, c.intermediate_size, c.vocab_size
    head_dim = getattr(c, "head_dim", None) or h // c.num_attention_heads
    width = c.num_attention_heads * head_dim  # query / output projection width (not always the hidden size)
    kv = c.num_key_value_heads * head_dim
    per_layer = h * width * 2 + h * kv * 2 + 3 * h * inter  # q, o, k, v, gate, up, down
    return {"body": per_layer * L, "head": h * V, "hidden": h, "layers": L, "attn_width": width}


def spawn(
    script: str,
    args: list[str],
    fresh_logp_cache: bool = False,
    inductor_cache: str | None = None,
    allocator: str = "tuned",
    timeout: float | None = None,
) -> dict:
    """Run one benchmark side as `python script --child ... args` in its own process (so its time and peak
    memory are its own) and return the dict it printed with `report`. The process gets an empty
    torch.compile (inductor) cache, so compiling is paid and timed as on a first run, unless
    `inductor_cache` names one to use (e.g. one a previous run filled: a warm start). `fresh_logp_cache`
    also gives it an empty log-prob cache (the converted models are shared), so precomputation is paid
    and timed in this run. `allocator`: "tuned" gives every side the glibc settings `align` commands apply
    (`prefalign.cpu.tune_allocator`; a TRL side applies them at its start), "default" gives every side glibc's
    defaults (PREFALIGN_MALLOC_TUNING=0). `timeout`: seconds after which the side is stopped (a failure)."""
    env = dict(os.environ)
    env["PREFALIGN_MALLOC_TUNING"] = "1" if allocator == "tuned" else "0"
    with tempfile.TemporaryDirectory() as cache:
        env["TORCHINDUCTOR_CACHE_DIR"] = inductor_cache or str(Path(cache) / "inductor")
        if fresh_logp_cache:
            models = Path(os.environ.get("PREFALIGN_CACHE", Path.home() / ".cache" / "prefalign")) / "models"
            env["PREFALIGN_CACHE"] = cache
            (Path(cache) / "models").symlink_to(models)
        try:
            proc = subprocess.run(
                [sys.executable, script, *args], env=env, capture_output=True, text=True, timeout=timeout
            )
        except subprocess.TimeoutExpired:
            raise SystemExit(f"{' '.join(args)} did not finish in {timeout:.0f}s (--side-timeout)") from None
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
        sync()  # on a GPU the step's kernels may still be queued
        times.append(time.perf_counter())
        return original(self, args, state, control)

    CallbackHandler.on_step_end = on_step_end
    return times


def steady_pairs_per_s(times: list[float], pairs_per_step: int) -> float | None:
    """Pairs/s after the first step (which pays compile and warm-up), from `step_timer` times."""
    return pairs_per_step * (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 else None


def report(res: dict) -> None:
    """In a child process: add the peak memory (max RSS, and the GPU's peak allocation when it ran on one) and
    print the result line `spawn` reads."""
    res["peak_rss_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        res["peak_gpu_gb"] = torch.cuda.max_memory_allocated() / 1024**3
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


def memory_text(r: dict) -> str:
    """A side's peak memory: max RSS, and the GPU's peak allocation when it ran on one."""
    gpu = f", GPU {r['peak_gpu_gb']:.2f} GB" if r.get("peak_gpu_gb") is not None else ""
    return f"peak memory {r['peak_rss_gb']:.2f} GB{gpu}"


def memory_ratio(ours: dict, theirs: dict) -> float:
    """Our peak memory over theirs: of the GPU when both ran on one, else max RSS."""
    key = "peak_gpu_gb" if ours.get("peak_gpu_gb") and theirs.get("peak_gpu_gb") else "peak_rss_gb"
    return ours[key] / theirs[key]


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


# ------------------------------------------------------------------------------------------------------------
# the driver both training comparisons share (benchmarks/rm_train_vs_trl.py, benchmarks/dpo_vs_trl.py)

LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def lora_config(task_type: str, modules_to_save: list[str] | None = None):
    """TRL's side's LoRA: what our side's `lora` section defaults to (r 16, alpha 32, every projection)."""
    from peft import LoraConfig  # lazy: peft, only in a LoRA side's process

    return LoraConfig(
        r=16, lora_alpha=32, task_type=task_type, modules_to_save=modules_to_save, target_modules=LORA_TARGETS
    )


def trl_model_dtype(precision: str, lora: bool) -> str:
    """The dtype TRL's model is loaded in so both sides hold weights alike: trained weights in fp32 (bf16 runs
    autocast, as ours), a frozen LoRA base in bf16 when the run is bf16 (as ours; TRL's default loads it in
    fp32 and autocasts, which costs it a cast of every weight in every step)."""
    return "bfloat16" if precision == "bf16" and lora else "float32"


def trl_args(
    setting: str, precision: str, steps: int, out: str, batch: int = BATCH, max_length: int = MAX_LENGTH
) -> dict:
    """The TrainingArguments both TRL sides share for a setting: eager or compile, optional -gc (activation
    checkpointing), optional -liger (`use_liger_kernel`: Liger's fused kernels, where liger-kernel is installed)."""
    return {
        "output_dir": out,
        "per_device_train_batch_size": batch,
        "use_liger_kernel": "-liger" in setting,
        "max_steps": steps,
        "bf16": precision == "bf16",
        "use_cpu": not on_gpu(),
        "torch_compile": setting.startswith("compile"),
        "gradient_checkpointing": "-gc" in setting,
        "max_length": max_length,
        "report_to": "none",
        "logging_steps": steps,
        "save_strategy": "no",
        "dataloader_num_workers": 0,
        "disable_tqdm": True,
        "seed": 0,
    }


def child_main(args, sides: dict) -> None:
    """In a child process: time one side (`sides[args.side](args, out_dir, meter_factory)`) and print its result."""
    import tempfile

    from prefalign.cpu import tune_allocator

    tune_allocator()  # honours PREFALIGN_MALLOC_TUNING, which `spawn` sets alike for every side
    times = step_timer()
    if args.profile_step:
        install_callback(profile_step(args.profile_step, Path(args.profile_out)))
    with tempfile.TemporaryDirectory() as tmp:
        res, meter = sides[args.side](args, tmp)
    res["steps_timed"] = len(times)
    from prefalign.models import varlen

    res["varlen_calls"] = dict(varlen.CALLS)
    res["steady_pairs_per_s"] = steady = steady_pairs_per_s(times, args.batch)
    if steady and res.get("extra_seconds"):  # a pass before training (reference log-probs) spread over the epoch
        res["steady_pairs_per_s"] = 1 / (1 / steady + res["extra_seconds"] / (args.steps * args.batch))
    res["steady_gflops"] = meter.steady_rate(times)
    res["steady_model_gflops"] = meter.steady_rate(times, useful=True)
    res["first_step_seconds"] = times[0] - meter.started if times and meter.started else None
    res["executed_tokens"] = sum(meter.tokens)
    report(res)


def add_child_args(ap) -> None:
    import argparse

    for name in ("--child", "--mode", "--setting", "--data", "--profile-out"):
        ap.add_argument(name, default="", help=argparse.SUPPRESS)
    ap.add_argument("--profile-step", type=int, default=0, help=argparse.SUPPRESS)


def add_common_args(ap, trl_default: str) -> None:
    ap.add_argument("--steps", type=int, default=16, help="optimizer steps (default 16)")
    ap.add_argument("--batch", type=int, default=BATCH, help=f"pairs per optimizer step, both sides (default {BATCH})")
    ap.add_argument(
        "--max-length", type=int, default=MAX_LENGTH, help=f"token budget of a pair, both sides (default {MAX_LENGTH})"
    )
    ap.add_argument("--modes", default="full,lora", help="comma list of full, lora")
    ap.add_argument(
        "--precision", default="auto", help="auto (bf16 where native, else fp32, as the toolkit decides), bf16 or fp32"
    )
    ap.add_argument(
        "--trl-settings",
        default=trl_default,
        help="comma list of TRL settings: eager or compile, each optionally with -gc (activation checkpointing) and "
        "-liger (use_liger_kernel), e.g. eager,eager-liger,compile-gc",
    )
    ap.add_argument("--allocator", default="tuned", choices=["tuned", "default"], help="glibc settings for every side")
    ap.add_argument("--no-warm", action="store_true", help="skip our second (warm compile cache) run")
    ap.add_argument(
        "--model",
        default=MODEL,
        help="the model both sides train (default: the builtin SmolLM2); builtin:qwen2.5-0.5b-shape, "
        "builtin:qwen2.5-1.5b-shape, builtin:llama3.2-1b-shape are those architectures with random weights",
    )
    ap.add_argument(
        "--attention",
        default="auto",
        choices=["auto", "segments", "mask", "varlen"],
        help="our side's train.attention (auto: segments on a CPU, varlen on a GPU in bf16; TRL pads each pair)",
    )
    ap.add_argument(
        "--compile",
        default="auto",
        help="our side's train.compile: auto (the toolkit's default: compiled on a CPU, eager on a GPU), on, off, or a "
        "comma list such as off,on (ours runs once with each)",
    )
    ap.add_argument("--json-out", default="", help="also write the results (the JSON printed last) to this file")
    ap.add_argument(
        "--side-timeout", type=float, default=0, help="seconds after which a side is stopped and counted failed"
    )
    add_device_arg(ap)
    ap.add_argument(
        "--profile",
        action="store_true",
        help="also profile one steady-state step (the third of a 4-step run) of ours (warm compile cache) and of "
        "TRL's best setting; the top operators by self CPU time are printed",
    )


def _side_line(label: str, r: dict, peak: float) -> str:
    """One side's result line: pairs/s (whole run and steady), first step, peak memory, matmul rate against the
    peak (what it ran), and MFU (model FLOPs of the real tokens over the peak)."""
    extra = f" incl. {r['extra_seconds']:.1f}s {r['extra_what']}" if r.get("extra_seconds") else ""
    rate = r["steady_gflops"]
    flops = f"{rate:.0f} GFLOP/s = {rate / peak:.0%} of peak" if rate else "n/a"
    useful = r.get("steady_model_gflops")
    mfu = f", MFU {useful / peak:.1%}" if useful else ""
    first = f", first step {r['first_step_seconds']:.1f}s" if r.get("first_step_seconds") else ""
    return (
        f"  {label}: {r['pairs_per_s']:.3f} pairs/s ({r['seconds']:.1f}s{extra}), steady "
        f"{r['steady_pairs_per_s']:.3f} pairs/s{first}, {memory_text(r)}, "
        f"matmul {flops}{mfu}{r.get('note', '')}"
    )


def ours_train_section(args, lr: float) -> dict:
    """The `train` section of our side's config: the mode, steps, batch, length and precision TRL's side gets."""
    return {
        "method": "lora" if args.mode == "lora" else "full",
        "max_steps": args.steps,
        "batch_size": args.batch,
        "max_length": args.max_length,
        "lr": lr,
        "precision": args.precision,
        "attention": args.attention,
        "compile": {"on": True, "off": False}.get(args.compile, "auto"),
        "log_every": args.steps,
    }


def ours_rm_config(out: str, data: str, train: dict, model: str = MODEL):
    """Our side's `align rm train` config on one pairs file: every pair trains (`split: all`), no held-out split,
    reward statistics on 8 pairs; `train` is the train section."""
    from prefalign.config import build
    from reward_models.rm_train import RMTrainConfig

    return build(
        RMTrainConfig,
        {
            "model": model,
            "output_dir": out,
            "data": {"source": data, "split": "all"},
            "eval": {"split": "none", "stats_pairs": 8},
            "train": train,
        },
    )


def side_result(args, seconds: float, kept: int, note: str) -> dict:
    """What a side reports: its wall time, pairs per second over the epoch's pairs, the pairs it kept."""
    return {"seconds": seconds, "pairs_per_s": args.steps * args.batch / seconds, "kept": kept, "note": note}


def kept_note(args, kept: int) -> str:
    """A note when our side kept fewer pairs than the epoch holds (it drops none by design: a bug if it shows)."""
    n = args.steps * args.batch
    return f"; only {kept} of {n} pairs kept" if kept != n else ""


def pair_benchmark_main(doc: str, script: str, sides: dict, what: str, trl_name: str) -> None:
    """The command line of a pair-training benchmark (`dpo_vs_trl.py`, `rm_train_vs_trl.py`): a child process
    times one side of `sides` ({"trl": ..., "ours": ...}); the parent compares them (`compare`)."""
    import argparse

    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(ap, trl_default="eager,compile")
    add_child_args(ap)
    args = ap.parse_args()
    apply_device(args)
    if args.child:
        args.side = args.child
        child_main(args, sides)
        return
    compare(script, args, f"{args.steps} steps x {args.batch} pairs, max length {args.max_length}, {what}", trl_name)


def compare(script: str, args, title: str, trl_name: str) -> dict:
    """The parent: for each mode, TRL in each setting and ours cold then warm, each in its own process, on the
    same pairs in the same precision; prints every side and the ratios to TRL's best setting."""
    import tempfile

    precision, why = resolve_precision(args.precision)
    peak = matmul_peak("bfloat16" if precision == "bf16" else "float32")
    print(f"machine: {machine_line()}")
    print(f"precision: {precision} for both sides ({why}); {precision} matmul peak here {peak:.0f} GFLOP/s")
    print(f"allocator: {args.allocator} glibc settings for both sides")
    results: dict = {"machine": machine_line(), "precision": precision, "peak_gflops": peak}
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "pairs.jsonl"
        n, skipped = equal_pairs(args.steps * args.batch, args.max_length, data, args.model)
        print(
            f"data: the first {n} HH-RLHF helpful-base pairs that fit {args.max_length} tokens ({skipped} longer "
            f"ones skipped), the same file for both sides: one epoch of {args.steps} steps x {args.batch} pairs"
        )

        def side(
            which: str, mode: str, setting: str, inductor: str | None = None, prof: str = "", compile_: str = "on"
        ) -> dict:
            # a profiling run stops after its profiled step (the third: compiled and warmed up by then)
            extra = ["--profile-step", "3", "--profile-out", prof] if prof else []
            steps = min(args.steps, 4) if prof else args.steps
            a = ["--child", which, "--mode", mode, "--steps", str(steps), "--setting", setting]
            a += ["--precision", precision, "--data", str(data), "--model", args.model, "--attention", args.attention]
            a += ["--compile", compile_, "--batch", str(args.batch), "--max-length", str(args.max_length)]
            a += extra
            try:
                return spawn(
                    script,
                    a,
                    fresh_logp_cache=True,
                    inductor_cache=inductor,
                    allocator=args.allocator,
                    timeout=args.side_timeout or None,
                )
            except SystemExit as e:  # one side failing (a setting this machine lacks) leaves the others' results
                print(f"  {which} {mode} {setting or 'compile ' + compile_} failed: {str(e)[-1500:]}", flush=True)
                return {"error": str(e)[-1500:]}

        for mode in args.modes.split(","):
            trl = [{**side("trl", mode, s), "setting": s} for s in args.trl_settings.split(",")]
            ours = []
            for compile_ in args.compile.split(","):
                # the first run compiles into an empty cache, the second (unless --no-warm) reuses it
                with tempfile.TemporaryDirectory() as inductor:
                    warm = not (args.no_warm or compile_ == "off" or (compile_ == "auto" and on_gpu()))
                    for start in ("cold", "warm")[: 2 if warm else 1]:
                        r = side("ours", mode, "", inductor, compile_=compile_)
                        ours.append({**r, "start": start, "compile": compile_})
            ran = [r for r in trl if "error" not in r]
            done = [o for o in ours if "error" not in o]
            best = max(ran, key=lambda r: r["steady_pairs_per_s"] or 0.0) if ran else None
            profiles = {}
            if args.profile and best is not None:
                for who, setting in (("ours", ""), ("trl", best["setting"])):
                    out = Path(tmp) / f"profile-{who}-{mode}.txt"
                    side(who, mode, setting, None, str(out))
                    profiles[who] = out.read_text() if out.exists() else "(no profile written)"
            print(
                f"\n[{mode}] {title}; {precision}; steady = after the first step (which pays compiling and warm-up), "
                "with any pass before training (reference log-probs) spread over the epoch"
            )
            for r in ran:
                print(_side_line(f"{trl_name} ({r['setting']})", r, peak))
            for o in done:
                print(_side_line(f"ours (compile {o['compile']}, {o['start']} cache)", o, peak))
                if best is not None:
                    print(
                        f"    vs TRL's best ({best['setting']}): whole run "
                        f"{o['pairs_per_s'] / best['pairs_per_s']:.2f}x, steady "
                        f"{o['steady_pairs_per_s'] / best['steady_pairs_per_s']:.2f}x; "
                        f"memory {memory_ratio(o, best):.2f}x of TRL's"
                    )
            if done and best is not None:
                o = done[-1]
                print(
                    f"  tokens through the model per epoch: ours {o['executed_tokens']}, TRL ({best['setting']}) "
                    f"{best['executed_tokens']} ({best['executed_tokens'] / o['executed_tokens']:.2f}x)"
                )
            for who, table in profiles.items():
                print(f"\n  profile of one steady-state step, {who} ({mode}), top operators by self CPU time:\n{table}")
            label = lambda o: f"compile {o['compile']}, {o['start']}"  # noqa: E731
            results[mode] = {
                "trl": trl,
                "ours": ours,
                "best_trl": best["setting"] if best else None,
                "steady_speedup": {
                    label(o): o["steady_pairs_per_s"] / best["steady_pairs_per_s"] for o in done if best is not None
                },
                "whole_run_speedup": {label(o): o["pairs_per_s"] / best["pairs_per_s"] for o in done if best},
            }
    results["settings"] = {
        "steps": args.steps,
        "batch": args.batch,
        "max_length": args.max_length,
        "model": args.model,
        "attention": args.attention,
    }
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(results, indent=1, default=float), encoding="utf-8")
    print("\n" + json.dumps(results, indent=1, default=float))
    return results
