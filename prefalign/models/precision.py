"""Which floating-point precision a run computes in, decided once per device and printed.

`auto` (the default everywhere: training, scoring, reference log-probs, generation) picks bf16 where the
device multiplies bf16 matrices natively and fp32 otherwise:

  CUDA   bf16 when `torch.cuda.is_bf16_supported(including_emulation=False)` (Ampere and newer)
  CPU    bf16 when the CPU has AVX-512 BF16 or AMX tiles (torch's own capability checks); on a CPU with
         AVX2 only, bf16 matmuls are emulated: measured with torch 2.13 on 2 threads, a 2048^3 matmul ran
         at 0.3 GFLOP/s in bf16 against 114 GFLOP/s in fp32 (380x slower), so auto picks fp32
  other  fp32 (MPS, XPU, ...: no claim is made about their bf16 speed)

An explicit bf16 on a device without native support still runs, with a warning that gives the slowdown
measured on this machine (one small matmul in each precision) and how to switch.

Two vocabularies, one decision: training sections say `precision` (auto | bf16 | bf16-pure | fp32), model
loaders and scorers say `dtype` (auto | bfloat16 | float32). `decide_precision` and `decide_dtype` map both.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

TRAIN_PRECISIONS: tuple[str, ...] = ("auto", "bf16", "bf16-pure", "fp32")
DTYPES: tuple[str, ...] = ("auto", "bfloat16", "float32")
_DTYPE_ALIASES = {"bf16": "bfloat16", "fp32": "float32", "bfloat16": "bfloat16", "float32": "float32"}


@dataclass(frozen=True)
class Decision:
    """A resolved precision: `value` in the caller's vocabulary, whether it is bf16, and why."""

    requested: str
    value: str
    bf16: bool
    reason: str

    def line(self) -> str:
        """One line for the start of a run, e.g. 'precision bf16 (auto: this CPU has native bf16: AVX-512 BF16)'."""
        how = f"auto: {self.reason}" if self.requested == "auto" else f"as configured; {self.reason}"
        return f"precision {self.value} ({how})"


def default_device() -> str:
    """The device a run uses when none is named: the first CUDA GPU when one is visible, else the CPU."""
    import torch  # lazy: torch, so configs and `align ls` load without it

    return "cuda" if torch.cuda.is_available() else "cpu"


def native_bf16(device: Any = None) -> tuple[bool, str]:
    """(whether `device` multiplies bf16 natively, a short reason naming what was found)."""
    import torch  # lazy: torch, so configs and `align ls` load without it

    kind = torch.device(device if device is not None else default_device()).type
    if kind == "cuda":
        ok = torch.cuda.is_available() and torch.cuda.is_bf16_supported(including_emulation=False)
        name = torch.cuda.get_device_name() if torch.cuda.is_available() else "no visible GPU"
        return ok, f"{name} {'supports' if ok else 'lacks'} native bf16"
    if kind == "cpu":
        features = cpu_bf16_features()
        if features:
            return True, f"this CPU has native bf16: {' + '.join(features)}"
        return False, "this CPU has no native bf16 (no AVX-512 BF16 or AMX; bf16 matmuls would be emulated)"
    return False, f"device type {kind}: bf16 speed unknown, fp32 chosen"


def cpu_bf16_features() -> list[str]:
    """The CPU features that give native bf16 matmuls, as torch detects them (empty on AVX2-only CPUs).

    Empty too when the process is held below AVX-512 (`ATEN_CPU_CAPABILITY=avx2`, or oneDNN capped with
    `ONEDNN_MAX_CPU_ISA` below AVX512_CORE_BF16): bf16 is then emulated whatever the CPU could do.
    """
    import torch  # lazy: torch, so configs and `align ls` load without it

    if not torch.backends.cpu.get_cpu_capability().startswith("AVX512"):
        return []
    isa = os.environ.get("ONEDNN_MAX_CPU_ISA", "ALL").upper()
    if not any(tag in isa for tag in ("ALL", "BF16", "AMX", "FP16", "AVX10")):
        return []
    found = []
    checks = (("AVX-512 BF16", "_is_avx512_bf16_supported"), ("AMX", "_is_amx_tile_supported"))
    for name, fn in checks:
        probe = getattr(torch.cpu, fn, None)
        if probe is not None and probe():
            found.append(name)
    return found


@functools.lru_cache(maxsize=1)
def measured_bf16_slowdown(n: int = 512, repeats: int = 2) -> float:
    """How many times slower an (n, n) @ (n, n) matmul runs in bf16 than in fp32 on this CPU (best of `repeats`)."""
    import torch  # lazy: torch, so configs and `align ls` load without it

    def best(dtype: Any) -> float:
        a = torch.randn(n, n).to(dtype)
        b = torch.randn(n, n).to(dtype)
        a @ b  # warm-up
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            a @ b
            times.append(time.perf_counter() - t)
        return min(times)

    return best(torch.bfloat16) / max(best(torch.float32), 1e-9)


def _warn_emulated(value: str, knob: str, reason: str) -> None:
    slow = measured_bf16_slowdown()
    msg = (
        f"{value} requested but {reason}: a 512x512 bf16 matmul runs {slow:.0f}x slower than fp32 here "
        f"(measured now; larger matrices fare worse, ~380x at 2048 on AVX2-only CPUs); set {knob} to auto or "
        "fp32 for full speed"
    )
    log.warning(msg)
    print(f"WARNING: {msg}", flush=True)


def decide_precision(requested: str, device: Any = None, knob: str = "train.precision") -> Decision:
    """Resolve a training precision (auto | bf16 | bf16-pure | fp32) for `device` (default: `default_device()`).

    `knob` names the setting in warnings, so the user knows what to change.
    """
    if requested not in TRAIN_PRECISIONS:
        raise ValueError(f"precision {requested!r} is not one of {', '.join(TRAIN_PRECISIONS)}")
    native, reason = native_bf16(device)
    if requested == "auto":
        value = "bf16" if native else "fp32"
        return Decision(requested, value, value == "bf16", reason)
    if requested != "fp32" and not native and _is_cpu(device):
        _warn_emulated(requested, knob, reason)
    return Decision(requested, requested, requested != "fp32", reason)


def decide_dtype(requested: str, device: Any = None, knob: str = "dtype") -> Decision:
    """Resolve a weights/activations dtype (auto | bfloat16 | float32; bf16 / fp32 accepted) for `device`."""
    if requested != "auto" and requested not in _DTYPE_ALIASES:
        raise ValueError(f"dtype {requested!r} is not one of {', '.join(DTYPES)}")
    native, reason = native_bf16(device)
    if requested == "auto":
        value = "bfloat16" if native else "float32"
        return Decision(requested, value, native, reason)
    value = _DTYPE_ALIASES[requested]
    if value == "bfloat16" and not native and _is_cpu(device):
        _warn_emulated(value, knob, reason)
    return Decision(requested, value, value == "bfloat16", reason)


def _is_cpu(device: Any) -> bool:
    import torch  # lazy: torch, so configs and `align ls` load without it

    return torch.device(device if device is not None else default_device()).type == "cpu"


def announce(what: str, decision: Decision) -> None:
    """Print the decision at the start of a run: '<what>: precision bf16 (auto: ...)'."""
    print(f"{what}: {decision.line()}", flush=True)


__all__ = [
    "Decision",
    "TRAIN_PRECISIONS",
    "DTYPES",
    "native_bf16",
    "cpu_bf16_features",
    "decide_precision",
    "decide_dtype",
    "measured_bf16_slowdown",
    "default_device",
    "announce",
]
