"""Policy loading and one-response-per-prompt generation for evaluation, through the generation engine.

Greedy by default, so evaluations are repeatable. GPU users can pass `backend="vllm"` when vLLM is
installed (`pip install -e '.[gpu]'`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from preference_data.records import Conversation


def load_policy(ref: str, dtype: str = "bfloat16") -> Any:
    """A causal LM from a builtin, a directory, a hub id, or a peft adapter directory (merged on load)."""
    from pathlib import Path

    from preference_data.hub import base_of_adapter, load_causal_lm, resolve, torch_dtype

    path = resolve(ref)
    if (Path(path) / "adapter_config.json").exists() and not (Path(path) / "config.json").exists():
        from peft import PeftModel

        base = load_causal_lm(base_of_adapter(path), dtype="float32")
        model = PeftModel.from_pretrained(base, path).merge_and_unload().to(torch_dtype(dtype))
        model.eval()
        return model
    return load_causal_lm(ref, dtype=dtype)


def generate(model: Any, tokenizer: Any, prompts: Sequence[Conversation], max_new_tokens: int = 96,
             batch_size: int = 16, temperature: float = 0.0, max_prompt_length: int = 512, seed: int = 0,
             backend: str = "transformers", progress: bool = False) -> list[str]:
    """Responses (text, special tokens removed, stripped) to each prompt, in input order.

    One completion per prompt through the generation engine (`prefalign.generation`): prompts rendered with the
    chat template and left-truncated to `max_prompt_length` tokens, at most `batch_size` rows decoded
    together, greedy when `temperature` is 0 (the default, so evaluations repeat), otherwise sampled with
    `seed`. backend: "transformers" (`model` is a loaded causal LM) or "vllm" (a loaded model or a path).
    """
    from prefalign.generation import SamplingParams, make_engine

    options = {"max_rows": batch_size} if backend == "transformers" else {}
    engine = make_engine(model, tokenizer, backend, **options)
    params = SamplingParams(n=1, temperature=temperature, max_new_tokens=max_new_tokens, seed=seed)
    result = engine.generate([list(p) for p in prompts], params, max_prompt_length=max_prompt_length,
                             progress=progress)
    return [out.completions[0].text.strip() for out in result.outputs]
