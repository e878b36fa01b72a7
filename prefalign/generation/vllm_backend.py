"""The vLLM backend (GPU, behind the `gpu` extra): the same interface, vLLM colocated in this process.

vLLM runs in the trainer's process (`distributed_executor_backend="external_launcher"`, as TRL's colocate
mode does), so `sync_weights` hands the trainer's current weights straight to the loaded model's
`load_weights`, LoRA merged (`weights.merged_named_weights`), and clears vLLM's prefix cache. Prompts are
rendered to the same token ids as the transformers backend and passed as ids. Log-probs are vLLM's
`processed_logprobs` (after temperature / top-k / top-p / min-p, as in `sampling.py`). Samples follow vLLM's
own seeded sampler: the same seed gives the same samples on the same vLLM, not the transformers backend's.
vLLM is imported only when this backend is built.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any

from prefalign.errors import UserError

from .api import Completion, GenerationEngine, GenerationResult, RequestOutput, SamplingParams, Timings, Tool
from .weights import merged_named_weights

INSTALL_HINT = "pip install -e '.[gpu]'"


def import_vllm() -> Any:
    """The vllm module, or a `UserError` naming the install command."""
    try:
        import vllm  # lazy: the gpu extra, absent from a base install
    except ImportError as e:
        raise UserError(
            f"generation backend 'vllm' needs vLLM, which comes with the gpu extra: {INSTALL_HINT} "
            f"(on a machine with a CUDA GPU); or use backend 'transformers'. ({e})"
        ) from None
    return vllm


class VLLMEngine(GenerationEngine):
    """vLLM colocated with the trainer. model: a loaded transformers model (its weights are synced in at
    start, so an in-memory fine-tuned model is what samples) or a path / hub id. Extra keyword arguments go to
    `vllm.LLM` (e.g. `gpu_memory_utilization`, `max_model_len`, `enable_sleep_mode`)."""

    backend = "vllm"

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        gpu_memory_utilization: float = 0.3,
        eos_token_ids: Sequence[int] | None = None,
        **llm_kwargs: Any,
    ) -> None:
        vllm = import_vllm()
        path = model if isinstance(model, str | os.PathLike) else getattr(model, "name_or_path", None)
        if not path:
            raise UserError(
                "backend 'vllm' loads the model by name: pass a path or hub id, or a model whose "
                "name_or_path is set (from_pretrained sets it)"
            )
        for key, value in (
            ("RANK", "0"),
            ("LOCAL_RANK", "0"),
            ("WORLD_SIZE", "1"),
            ("MASTER_ADDR", "127.0.0.1"),
            ("MASTER_PORT", "29513"),
        ):
            os.environ.setdefault(key, value)
        self.tokenizer = tokenizer
        eos = tokenizer.eos_token_id
        self.eos_token_ids = [
            int(t) for t in (eos_token_ids if eos_token_ids is not None else [eos] if eos is not None else [])
        ]
        self.llm = vllm.LLM(
            model=str(path),
            gpu_memory_utilization=gpu_memory_utilization,
            distributed_executor_backend="external_launcher",
            logprobs_mode="processed_logprobs",
            **llm_kwargs,
        )
        self.weight_version = 0
        if not isinstance(model, str | os.PathLike):
            self._load(model)

    def _runner_model(self) -> Any:
        executor = self.llm.llm_engine.model_executor
        worker = executor.driver_worker
        for path in (("worker", "model_runner", "model"), ("model_runner", "model")):
            obj = worker
            try:
                for attr in path:
                    obj = getattr(obj, attr)
                return obj
            except AttributeError:
                continue
        raise UserError(
            "cannot reach vLLM's loaded model to update its weights (this vLLM version keeps it "
            "elsewhere); use a vLLM version supported by the gpu extra"
        )

    def _load(self, model: Any) -> None:
        self._runner_model().load_weights(merged_named_weights(model))
        self.llm.reset_prefix_cache()

    def sync_weights(self, model: Any | None = None) -> int:
        """Load `model`'s current weights (LoRA merged) into vLLM; returns the new weight version."""
        if model is None:
            raise UserError("the vllm backend holds its own copy of the weights: call sync_weights(trainer_model)")
        self._load(model)
        self.weight_version += 1
        return self.weight_version

    def _sample(
        self,
        ids: list[list[int]],
        plist: list[SamplingParams],
        timings: Timings,
        t0: float,
        progress: bool,
        tools: Sequence[Tool] = (),
    ) -> GenerationResult:
        vllm = import_vllm()
        sp = [
            vllm.SamplingParams(
                n=p.n,
                temperature=p.temperature,
                top_p=p.top_p,
                top_k=p.top_k if p.top_k else -1,
                min_p=p.min_p,
                max_tokens=p.max_new_tokens,
                stop=list(p.stop) or None,
                stop_token_ids=self.eos_token_ids,
                seed=p.seed,
                logprobs=0,
                skip_special_tokens=True,
            )
            for p in plist
        ]
        outs = self.llm.generate([{"prompt_token_ids": x} for x in ids], sp, use_tqdm=progress)
        timings.total_s = timings.decode_s = time.perf_counter() - t0
        results = []
        for x, out in zip(ids, outs, strict=True):
            comps = []
            for c in out.outputs:
                toks = list(c.token_ids)
                lps = [float(d[t].logprob) for t, d in zip(toks, c.logprobs or [], strict=False)]
                reason = (
                    "length" if c.finish_reason == "length" else "stop" if isinstance(c.stop_reason, str) else "eos"
                )
                comps.append(
                    Completion(
                        c.text,
                        toks,
                        lps,
                        reason,  # type: ignore[arg-type]
                        c.stop_reason if isinstance(c.stop_reason, str) else None,
                    )
                )
                timings.generated_tokens += len(toks)
            timings.prompt_tokens += len(x)
            results.append(RequestOutput(x, comps, timings.total_s))
        timings.batches = 1
        return GenerationResult(results, timings, self.weight_version)
