"""The default backend: any transformers causal LM, on whatever device it sits.

How a `generate` call runs:

1. Render every prompt to token ids (`prompts.py`, in `api.GenerationEngine.generate`). Prompts with the same
   ids form one *unit* holding all their samples (n per request), so each distinct prompt is prefilled once.
2. Sort units by prompt length (`batch_order`) and pack them into batches of at most `max_rows` samples
   whose KV cache, rows x (longest prompt + longest max_new_tokens), fits in `token_budget` slots
   (`schedule.py`).
3. Per batch: prefill the distinct prompts, left-padded, at most `prefill_tokens` padded tokens per forward
   (logits of the last position only); the leading tokens every prompt of the batch shares (a system prompt, a
   judge's instructions: at least `common_prefix` of them) are run once and their keys and values given to every
   prompt (`common_head`); then write each prompt's keys and values into the batch cache
   (`cache.py`): once per unit, shared by its samples, when decoding with `attention.decode_attention`;
   copied into each sample's row otherwise.
4. Decode: every step samples one token per row (`sampling.py`, each sample with its own pre-drawn
   uniforms), checks EOS, length and stop strings, and feeds the tokens back; the cache is written in place.
   Finished rows leave the batch (their cache rows, and units without rows, dropped) once `prune_fraction`
   of the rows have finished.

The model is switched to eval mode for the call (dropout off) and restored afterwards; no gradients are kept.
Sampling is per sample and seeded, so which rows share a batch does not change what a sample draws; in bf16
the model's logits themselves can round differently with a batch's shape (see `exact_batched`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from tqdm import tqdm
from transformers.cache_utils import CacheLayerMixin, DynamicCache

from prefalign.cpu import tune_allocator
from prefalign.errors import ConfigError, UserError, did_you_mean

from .api import Completion, GenerationEngine, GenerationResult, RequestOutput, SamplingParams, Timings, Tool
from .attention import PLAIN_ATTENTION, supports_decode_attention, using_decode_attention
from .cache import SharedPrefixCache, SlabCache, cache_kwarg
from .sampling import RowSettings, sample, sample_uniforms
from .schedule import BATCH_ORDERS, Unit, batches, pieces
from .static import BucketCache, StaticSteps, prompt_bucket, row_bucket
from .weights import copy_weights


def exact_batched(batch_size: int) -> dict[str, Any]:
    """Engine options that reproduce `model.generate` on length-sorted, left-padded batches of `batch_size`
    prompts (one sample each) exactly, bf16 included: see `TransformersEngine`."""
    return {
        "max_rows": batch_size,
        "token_budget": 1 << 62,
        "prefill_tokens": 1 << 62,
        "prune_fraction": 1.0,
        "decode_attention": False,
        "batch_order": "shortest_first",
        "common_prefix": 0,
    }


STATIC_MODES = {
    "auto": "compiled on a GPU (one CUDA-graph capture per batch bucket), off on a CPU",
    "compiled": "fixed-shape caches and a decode step compiled once per bucket (CUDA graphs on a GPU)",
    "eager": "the fixed-shape caches and step, not compiled (the static path's reference)",
    "off": "caches sized to each batch, the step run eagerly (the reference)",
}
"""`TransformersEngine(static=...)`: how decode steps run (`static.py`)."""

COMMON_PREFIX = 32
"""`TransformersEngine(common_prefix=...)`'s default: leading tokens a batch's prompts must share to be run once."""


def _option_problems(
    model: Any,
    tokenizer: Any,
    sizes: dict[str, Any],
    prune_fraction: Any,
    batch_order: Any,
    eos_token_ids: Sequence[int] | None,
    static: Any = "off",
) -> list[str]:
    """Every invalid `TransformersEngine` option (`sizes`: token_budget, max_rows, prefill_tokens), with what is
    allowed."""
    problems = []
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            problems.append(f"{name}={value!r}: must be an integer >= 1")
    if not isinstance(prune_fraction, int | float) or not 0 <= prune_fraction <= 1:
        problems.append(f"prune_fraction={prune_fraction!r}: must be in [0, 1]")
    if static not in STATIC_MODES:
        problems.append(
            f"static={static!r}{did_you_mean(str(static), list(STATIC_MODES))}: choose one of "
            + "; ".join(f"'{k}' ({v})" for k, v in STATIC_MODES.items())
        )
    if batch_order not in BATCH_ORDERS:
        problems.append(
            f"batch_order={batch_order!r}{did_you_mean(str(batch_order), list(BATCH_ORDERS))}: "
            "choose one of " + "; ".join(f"'{k}' ({v})" for k, v in BATCH_ORDERS.items())
        )
    if not hasattr(model, "config") or not callable(model):
        problems.append(
            f"model: expected a loaded transformers causal LM, got {type(model).__name__}; load one "
            "with AutoModelForCausalLM.from_pretrained(...)"
        )
    if eos_token_ids is None and tokenizer.eos_token_id is None:
        problems.append("the tokenizer has no eos_token: set tokenizer.eos_token, or pass eos_token_ids")
    return problems


def stop_hit(tokenizer: Any, tokens: torch.Tensor, stops: Sequence[str], window: int) -> tuple[str, str] | None:
    """(text cut right before the earliest stop string, that string) once the text of `tokens` contains one;
    only the last `window` tokens are decoded until one of them spells a stop string."""
    tail = tokenizer.decode(tokens[-window:].tolist(), skip_special_tokens=True)
    if not any(s in tail for s in stops):
        return None
    text = tokenizer.decode(tokens.tolist(), skip_special_tokens=True)
    found = [(text.find(s), s) for s in stops if s in text]
    at, stop = min(found)
    return text[:at], stop


class TransformersEngine(GenerationEngine):
    """Generation with a transformers causal LM (see the module docstring for the schedule).

    model: a loaded causal LM (e.g. `AutoModelForCausalLM`), used as it is, in its dtype and on its device.
    tokenizer: its tokenizer (chat template, EOS). token_budget: KV-cache slots per batch (rows x columns).
    max_rows: samples decoded together at most. prefill_tokens: padded prompt tokens per prefill forward.
    prune_fraction: drop finished rows from the batch once this fraction of its rows has finished (copying
    the cache costs about one step; dead rows cost their share of every step). eos_token_ids: tokens that end
    a completion (default: the tokenizer's EOS). decode_attention: attend with `attention.decode_attention`
    while decoding (None: where the model's attention is plain, see `attention.PLAIN_ATTENTION`).
    batch_order: a key of `BATCH_ORDERS`. common_prefix: where the prompts of a batch share at least this many leading
    tokens (and the model's attention is plain), they are run once for the batch (0: off; `common_head`).

    `exact_batched` (below) gives options that reproduce, bit for bit, the greedy output of transformers' `generate`
    run on prompts sorted by length in left-padded batches: the model's own attention, fixed batches, one prefill
    per batch, no pruning. Low-precision matrix products round differently with a batch's shape and
    padding, so any other schedule changes some bf16 greedy continuations (not fp32 ones, in our tests).
    """

    backend = "transformers"

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        token_budget: int = 1 << 15,
        max_rows: int = 128,
        prefill_tokens: int = 2048,
        prune_fraction: float = 0.125,
        eos_token_ids: Sequence[int] | None = None,
        decode_attention: bool | None = None,
        batch_order: str = "longest_first",
        static: Literal["auto", "compiled", "eager", "off"] = "off",
        common_prefix: int = COMMON_PREFIX,
    ) -> None:
        sizes = {"token_budget": token_budget, "max_rows": max_rows, "prefill_tokens": prefill_tokens}
        problems = _option_problems(model, tokenizer, sizes, prune_fraction, batch_order, eos_token_ids, static)
        if isinstance(common_prefix, bool) or not isinstance(common_prefix, int) or common_prefix < 0:
            problems.append(f"common_prefix={common_prefix!r}: must be an integer >= 0 (0 = off)")
        if problems:
            raise ConfigError(problems, "TransformersEngine")
        if eos_token_ids is None:
            eos_token_ids = [tokenizer.eos_token_id]
        self.model, self.tokenizer = model, tokenizer
        self.token_budget, self.max_rows, self.prefill_tokens = token_budget, max_rows, prefill_tokens
        self.prune_fraction = float(prune_fraction)
        self.batch_order = batch_order
        self.eos_token_ids = [int(t) for t in eos_token_ids]
        pad = tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else self.eos_token_ids[0])
        text_config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
        self.text_config = text_config
        self.num_layers = int(text_config.num_hidden_layers)
        plain = supports_decode_attention(text_config)
        if decode_attention and not plain:
            raise ConfigError(
                [
                    f"decode_attention=True: model type {text_config.model_type!r} does not use plain "
                    f"attention (supported: {', '.join(sorted(PLAIN_ATTENTION))}); leave it None"
                ],
                "TransformersEngine",
            )
        self.decode_attention = plain if decode_attention is None else bool(decode_attention)
        # the common head's keys are laid out as a plain attention's cache holds them: other kinds read none
        self.common_prefix = common_prefix if plain else 0
        head_dim = getattr(text_config, "head_dim", None) or text_config.hidden_size // text_config.num_attention_heads
        self.attention_scale = float(head_dim) ** -0.5
        self.max_positions: int | None = getattr(text_config, "max_position_embeddings", None)
        self.weight_version = 0
        mode = ("compiled" if self._device().type == "cuda" else "off") if static == "auto" else static
        self.static: StaticSteps | None = None if mode == "off" else StaticSteps(compile=mode == "compiled")
        if self._device().type == "cpu":
            # a step allocates and frees (rows x vocabulary) logits and probabilities; glibc's defaults hand
            # them back to the OS and page-fault them in again, zeroed, at every step (5x the sampling time)
            tune_allocator()

    # ------------------------------------------------------------------------------------------------
    # weights

    def sync_weights(self, model: Any | None = None) -> int:
        """Use `model`'s current weights; returns the new weight version.

        When `model` is the engine's own model (or None) the sampler already sees every optimizer step, so
        only the version is bumped. Otherwise its weights (LoRA merged, for a peft model) are copied into the
        engine's model in place (`weights.copy_weights`).
        """
        if model is not None and model is not self.model:
            copy_weights(model, self.model)
        self.weight_version += 1
        return self.weight_version

    # ------------------------------------------------------------------------------------------------
    # generation

    continues_tools = True

    @torch.inference_mode()
    def _sample(
        self,
        ids: list[list[int]],
        plist: list[SamplingParams],
        timings: Timings,
        t0: float,
        progress: bool,
        tools: Sequence[Tool] = (),
    ) -> GenerationResult:
        if self.max_positions is not None:
            too_long = [(i, len(x)) for i, x in enumerate(ids) if len(x) >= self.max_positions]
            if too_long:
                i, n = too_long[0]
                raise UserError(
                    f"{len(too_long)} prompt(s) leave no room in the model's context of "
                    f"{self.max_positions} positions (prompt {i}: {n} tokens); pass max_prompt_length "
                    "to keep the last tokens of long prompts"
                )
        units = pieces(ids, plist, self.max_rows, self.batch_order)
        results: list[list[Completion | None]] = [[None] * sp.n for sp in plist]
        finish_time = [0.0] * len(plist)

        bar = None
        if progress:
            bar = tqdm(total=sum(sp.n for sp in plist), desc="generating", unit="sample")
        was_training = self.model.training
        self.model.eval()
        try:
            for batch in batches(units, plist, self.max_rows, self.token_budget):
                timings.batches += 1
                self._run_batch(batch, plist, results, finish_time, timings, t0, bar, tools)
        finally:
            self.model.train(was_training)
            if bar is not None:
                bar.close()
        timings.total_s = time.perf_counter() - t0
        outputs = [
            RequestOutput(ids[i], [c for c in results[i] if c is not None], finish_time[i]) for i in range(len(plist))
        ]
        return GenerationResult(outputs, timings, self.weight_version)

    def _answer(
        self, state: _DecodeState, b: int, step: int, called: str, tool: Tool, params: SamplingParams
    ) -> _Answer | None:
        """Batch row `b` wrote `called` (its text so far, ending in `tool`'s stop string) in `step` tokens: the text
        with the tool's answer, and the answer's tokens queued to be fed to the row (`_DecodeState.forced`), as
        `tools.generate_with_tools` goes on: from the text re-encoded as one piece. None where that encoding does
        not begin with the row's own tokens (a token spelled the stop string and more): the row ends at the stop
        string, and the caller goes on from its text."""
        text = called + (tool.call(called[: -len(tool.stop)]) or "")
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        if len(ids) >= params.max_new_tokens:
            return _Answer(text, None)
        if len(ids) < step or ids[:step] != state.out_tokens[b, :step].tolist():
            return None
        if len(ids) > step:
            state.forced[b] = ids[step:]
            state.answered[b] = state.answered.get(b, 0) + len(ids) - step
        return _Answer(text, len(ids))

    def _device(self) -> torch.device:
        return next(self.model.parameters()).device

    def _run_batch(
        self,
        batch: list[Unit],
        plist: list[SamplingParams],
        results: list[list[Completion | None]],
        finish_time: list[float],
        timings: Timings,
        t0: float,
        bar: Any,
        tools: Sequence[Tool] = (),
    ) -> None:
        device = self._device()
        samples = [s for u in batch for s in u.samples]  # row -> (request, sample index)
        R = len(samples)
        unit_of_row = torch.tensor([k for k, u in enumerate(batch) for _ in u.samples], device=device)
        prompt_lengths = torch.tensor([len(u.ids) for u in batch], device=device)
        capacity = max(plist[i].max_new_tokens for i, _ in samples)
        cache: SharedPrefixCache | SlabCache | BucketCache
        if self.static is not None:
            width = prompt_bucket(int(prompt_lengths.max()))
            param = next(self.model.parameters())
            cache = self.static.cache(
                self.model.config, row_bucket(R, self.max_rows), width + capacity, param.dtype, device
            )
            cache.start(unit_of_row, prompt_lengths, width)
        elif self.decode_attention:
            cache = SharedPrefixCache(self.num_layers, unit_of_row, prompt_lengths, capacity, self.attention_scale)
        else:
            cache = SlabCache(self.num_layers, unit_of_row, prompt_lengths, capacity)

        t = time.perf_counter()
        shared = common_head(batch, self.common_prefix)
        logits = prefill(self.model, batch, cache, self.pad_id, self.prefill_tokens, shared)
        timings.prefill_s += time.perf_counter() - t
        timings.prompt_tokens += sum(len(u.ids) - shared for u in batch) + shared

        t = time.perf_counter()
        state = (
            _StaticState(self, batch, plist, samples, cache, device)
            if isinstance(cache, BucketCache)
            else _DecodeState(self, batch, plist, samples, cache, device)
        )
        lengths, reasons = [0] * R, [""] * R
        texts: dict[int, tuple[str, str | None]] = {}  # row -> (text cut right before the stop string, the stop string)
        stops = {row: plist[i].stop for row, (i, _) in enumerate(samples) if plist[i].stop}
        tool_of = {t.stop: t for t in tools}
        told: dict[int, tuple[int, str]] = {}  # row -> (tokens up to a tool's last answer, their text)
        windows = {row: 4 * max(len(x) for x in st) + 8 for row, st in stops.items()}  # tokens that spell any stop
        eos_ids = set(self.eos_token_ids)
        plain = self.decode_attention and self.static is None
        attend = using_decode_attention(self.text_config) if plain else contextlib.nullcontext()
        with attend:
            step = 0
            while True:
                tok = state.sample(logits, step)
                step += 1
                finished = state.alive & (torch.isin(tok, state.eos) | (step >= state.limit))
                live = state.rows.tolist()
                for c in finished.nonzero().squeeze(1).tolist():
                    lengths[live[c]] = step
                    reasons[live[c]] = "eos" if int(tok[c]) in eos_ids else "length"
                for c, b in enumerate(live):
                    if b in stops and b not in texts and not reasons[b] and b not in state.forced:
                        after, before = told.get(b, (0, ""))
                        hit = stop_hit(self.tokenizer, state.out_tokens[b, after:step], stops[b], windows[b])
                        if hit is None:
                            continue
                        text, stop = before + hit[0], hit[1]
                        answer = None
                        if stop in tool_of:
                            answer = self._answer(state, b, step, text + stop, tool_of[stop], plist[samples[b][0]])
                        if answer is not None and answer.tokens is not None:  # written into the row: it goes on
                            told[b] = (answer.tokens, answer.text)
                            continue
                        if answer is not None:  # the answer fills the row's budget: it ends with it
                            texts[b], lengths[b], reasons[b] = (answer.text, None), step, "length"
                        else:
                            texts[b], lengths[b], reasons[b] = (text, stop), step, "stop"
                        finished[c] = True
                n_finished = int(finished.sum())
                if n_finished:
                    now = time.perf_counter() - t0
                    for c in finished.nonzero().squeeze(1).tolist():
                        i = samples[live[c]][0]
                        finish_time[i] = max(finish_time[i], now)
                    if bar is not None:
                        bar.update(n_finished)
                    state.alive &= ~finished
                n_alive = int(state.alive.sum())
                if n_alive == 0:
                    break
                if len(live) - n_alive >= max(1.0, self.prune_fraction * len(live)):
                    state.prune(step)
                logits = state.forward(step)
        timings.decode_s += time.perf_counter() - t
        completions = _completions(self.tokenizer, state, lengths, reasons, texts)

        for b, (i, j) in enumerate(samples):
            results[i][j] = completions[b]
            timings.generated_tokens += lengths[b] - state.answered.get(b, 0)


def common_head(batch: list[Unit], least: int) -> int:
    """How many leading tokens every prompt of `batch` shares (each keeps at least its last token to prefill), or 0
    where that is under `least` (or `least` is 0, or the batch holds one prompt)."""
    if least <= 0 or len(batch) < 2:
        return 0
    n = min(len(u.ids) for u in batch) - 1
    first = batch[0].ids
    for u in batch[1:]:
        n = next((k for k in range(n) if u.ids[k] != first[k]), n)
        if n < least:
            return 0
    return n


@dataclass(frozen=True)
class _Answer:
    text: str
    """the row's text with the tool's call and answer"""
    tokens: int | None
    """the row's tokens once the answer is fed, or None: the answer fills its budget (the row ends)"""


def prefill(
    model: Any,
    batch: list[Unit],
    cache: SharedPrefixCache | SlabCache | BucketCache,
    pad_id: int,
    prefill_tokens: int,
    shared: int = 0,
) -> torch.Tensor:
    """Run the batch's distinct prompts (left-padded, at most `prefill_tokens` padded tokens a forward) and
    write their keys/values into `cache`. Returns the last-position logits of every row (R, V).

    `shared` > 0: the prompts' first `shared` tokens are the same (`common_head`); they are run once, and each
    forward runs only the prompts' rest after them (their keys and values given as the past). The keys and values
    of every prompt are then laid out as a left-padded prefill writes them: [pads | shared | rest]."""
    device = next(model.parameters()).device
    head: DynamicCache | None = None
    if shared:
        head = DynamicCache()
        model(
            input_ids=torch.tensor([batch[0].ids[:shared]], device=device),
            position_ids=torch.arange(shared, device=device).unsqueeze(0),
            **{cache_kwarg(model): head},
            use_cache=True,
            logits_to_keep=torch.tensor([shared - 1], device=device),
        )
    logits_units: list[torch.Tensor] = []
    start = 0
    while start < len(batch):
        end, W = start + 1, len(batch[start].ids) - shared
        while end < len(batch) and (end + 1 - start) * max(W, len(batch[end].ids) - shared) <= prefill_tokens:
            W = max(W, len(batch[end].ids) - shared)
            end += 1
        chunk = batch[start:end]
        input_ids = torch.full((len(chunk), W), pad_id, dtype=torch.long)
        mask = torch.zeros((len(chunk), W), dtype=torch.long)
        for r, u in enumerate(chunk):
            input_ids[r, W - len(u.ids) + shared :] = torch.tensor(u.ids[shared:])
            mask[r, W - len(u.ids) + shared :] = 1
        positions = (mask.cumsum(-1) - 1).clamp_(min=0) + shared
        kv = DynamicCache()
        if head is not None:
            for layer_idx, layer in enumerate(head.layers):
                assert isinstance(layer, CacheLayerMixin) and layer.keys is not None and layer.values is not None
                kv.update(
                    layer.keys.expand(len(chunk), -1, -1, -1), layer.values.expand(len(chunk), -1, -1, -1), layer_idx
                )
            mask = torch.cat([torch.ones((len(chunk), shared), dtype=torch.long), mask], dim=1)
        out = model(
            input_ids=input_ids.to(device),
            attention_mask=mask.to(device),
            position_ids=positions.to(device),
            **{cache_kwarg(model): kv},
            use_cache=True,
            # an index tensor, not 1: the last position gathered into a contiguous (units, 1, hidden) tensor; the
            # slice that `1` takes is a strided view, and the output projection of a strided 3-d input expands the
            # (vocabulary x hidden) weight once per row before multiplying (2.7x the prefill's time on a CPU)
            logits_to_keep=torch.tensor([W - 1], device=device),
        )
        logits_units.append(out.logits[:, -1])  # (units, V)
        order = _left_padded_order(chunk, shared, W, device) if shared else None
        for layer_idx, layer in enumerate(kv.layers):
            # an attention layer, filled by the prefill
            assert isinstance(layer, CacheLayerMixin) and layer.keys is not None and layer.values is not None
            keys, values = layer.keys, layer.values
            if order is not None:
                index = order.view(len(chunk), 1, -1, 1).expand(-1, keys.shape[1], -1, keys.shape[3])
                keys, values = keys.gather(2, index), values.gather(2, index)
            cache.write_prompts(layer_idx, start, end, keys, values)
        start = end
    return torch.cat(logits_units).index_select(0, cache.unit_of_row)


def _left_padded_order(chunk: list[Unit], shared: int, W: int, device: torch.device) -> torch.Tensor:
    """(units, shared + W): for each column of a left-padded prompt, the column of [shared | pads | rest] (a forward
    after the shared keys) that holds it, so that a prompt's pads come first."""
    cols = torch.arange(shared + W)
    pads = torch.tensor([W - (len(u.ids) - shared) for u in chunk]).unsqueeze(1)
    order = torch.where(cols < pads, shared + cols, torch.where(cols < pads + shared, cols - pads, cols))
    return order.to(device)


def _completions(
    tokenizer: Any,
    state: _DecodeState,
    lengths: list[int],
    reasons: list[str],
    texts: dict[int, tuple[str, str | None]],
) -> list[Completion]:
    """The completion of every batch row: its first `lengths[b]` tokens and log-probs, its text (decoded, or
    `texts[b]`: cut right before the stop string it hit) and finish reason."""
    tokens_all, logps_all = state.out_tokens.tolist(), state.out_logps.tolist()
    plain = [b for b in range(len(lengths)) if b not in texts]
    decoded = tokenizer.batch_decode([tokens_all[b][: lengths[b]] for b in plain], skip_special_tokens=True)
    text_of = dict(zip(plain, decoded, strict=True))
    out = []
    for b, n in enumerate(lengths):
        text, stop = texts.get(b, (text_of.get(b, ""), None))
        out.append(Completion(text, tokens_all[b][:n], logps_all[b][:n], reasons[b], stop))  # type: ignore[arg-type]
    return out


_SAMPLE_ROWS = 128


class _DecodeState:
    """The live rows of one batch while decoding, all indexed by cache row (R' live rows of R).

    rows (R',): each live row's batch row. settings / uniforms (R', steps): its sampling settings and
    pre-drawn uniforms. limit (R',): the step at which it stops for length (max_new_tokens, or the model's
    context). out_tokens / out_logps (R, steps): what every batch row sampled, by batch row.
    """

    def __init__(
        self,
        engine: TransformersEngine,
        batch: list[Unit],
        plist: list[SamplingParams],
        samples: list[tuple[int, int]],
        cache: Any,
        device: torch.device,
    ) -> None:
        self.engine, self.cache, self.device = engine, cache, device
        R = len(samples)
        max_new = [plist[i].max_new_tokens for i, _ in samples]
        steps = max(max_new)
        self.settings = RowSettings(
            torch.tensor([plist[i].temperature for i, _ in samples], dtype=torch.float32, device=device),
            torch.tensor([plist[i].top_k for i, _ in samples], dtype=torch.long, device=device),
            torch.tensor([plist[i].top_p for i, _ in samples], dtype=torch.float32, device=device),
            torch.tensor([plist[i].min_p for i, _ in samples], dtype=torch.float32, device=device),
        )
        uniforms = torch.zeros(R, steps, dtype=torch.float32)
        row = 0
        for u in batch:
            for i, j in u.samples:
                if plist[i].temperature > 0:
                    uniforms[row, : max_new[row]] = sample_uniforms(plist[i].seed, u.ids, j, max_new[row])
                row += 1
        self.uniforms = uniforms.to(device)
        self.prompt_len = torch.tensor([len(u.ids) for u in batch for _ in u.samples], dtype=torch.long, device=device)
        self.limit = torch.tensor(max_new, dtype=torch.long, device=device)
        if engine.max_positions is not None:
            self.limit = torch.minimum(self.limit, engine.max_positions - self.prompt_len)
        self.eos = torch.tensor(engine.eos_token_ids, dtype=torch.long, device=device)
        self.out_tokens = torch.zeros(R, steps, dtype=torch.long, device=device)
        self.out_logps = torch.zeros(R, steps, dtype=torch.float32, device=device)
        self.rows = torch.arange(R, device=device)
        self.alive = torch.ones(R, dtype=torch.bool, device=device)
        self.tok = torch.zeros(R, dtype=torch.long, device=device)
        self.forced: dict[int, list[int]] = {}
        """batch row -> the tokens it is fed next instead of sampling (a tool's answer, `TransformersEngine._answer`)"""
        self.answered: dict[int, int] = {}
        """batch row -> how many of its tokens were fed, not sampled"""

    def sample(self, logits: torch.Tensor, step: int) -> torch.Tensor:
        """Draw every live row's token `step` from logits (R', V); record it and its log-prob. Rows are taken
        `_SAMPLE_ROWS` at a time, so the float32 (rows, V) temporaries stay below glibc's mmap threshold as
        tuned by `tune_allocator` (32 MiB: 128 rows x 49k vocabulary x 4 bytes = 25 MB) and are reused."""
        u = self.uniforms[:, step]
        if logits.shape[0] <= _SAMPLE_ROWS:
            self.tok, logp = sample(logits, self.settings, u)
        else:
            parts = [
                sample(logits[i : i + _SAMPLE_ROWS], self.settings.span(i, i + _SAMPLE_ROWS), u[i : i + _SAMPLE_ROWS])
                for i in range(0, logits.shape[0], _SAMPLE_ROWS)
            ]
            self.tok, logp = torch.cat([p.tokens for p in parts]), torch.cat([p.logprobs for p in parts])
        if self.forced:
            for c, b in enumerate(self.rows.tolist()):
                if b in self.forced:
                    self.tok[c], logp[c] = self.forced[b].pop(0), 0.0
                    if not self.forced[b]:
                        del self.forced[b]
        self.out_tokens[self.rows, step] = self.tok
        self.out_logps[self.rows, step] = logp
        return self.tok

    def prune(self, step: int) -> None:
        """Drop the finished rows (and the cache columns and capacity no kept row needs); `step` tokens have
        been sampled so far."""
        keep = self.alive.nonzero().squeeze(1)
        self.limit = self.limit[keep]
        self.keep_cache_rows(keep, step)
        self.rows, self.tok, self.prompt_len = self.rows[keep], self.tok[keep], self.prompt_len[keep]
        self.settings, self.uniforms = self.settings.select(keep), self.uniforms.index_select(0, keep)
        self.alive = torch.ones(keep.numel(), dtype=torch.bool, device=self.device)

    def keep_cache_rows(self, keep: torch.Tensor, step: int) -> None:
        """The cache keeps live rows `keep` (of the current R') and the capacity they still need."""
        self.cache.keep_rows(keep, self.cache.generated + int((self.limit - step).max()) + 1)

    def forward(self, step: int) -> torch.Tensor:
        """Feed the tokens just sampled (position prompt length + step - 1); returns the next logits (R', V)."""
        out = self.engine.model(
            input_ids=self.tok.unsqueeze(1),
            position_ids=(self.prompt_len + step - 1).unsqueeze(1),
            **{cache_kwarg(self.engine.model): self.cache},
            use_cache=True,
            **self.cache.model_kwargs(),
        )
        self.cache.advance()
        return out.logits[:, -1]


class _StaticState(_DecodeState):
    """The live rows of a batch decoded on the static path (`static.py`): rows keep their cache slot until the live
    rows fit a smaller row bucket, where they are then copied; the step is the engine's `StaticSteps.step`."""

    cache: BucketCache

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.slots = torch.arange(len(self.rows), device=self.device)  # each live row's row in the bucket cache

    def keep_cache_rows(self, keep: torch.Tensor, step: int) -> None:
        self.slots = self.slots.index_select(0, keep)
        steps = self.engine.static
        assert steps is not None  # a static state runs on an engine with the static path
        rows = row_bucket(keep.numel(), self.engine.max_rows)
        if rows < self.cache.rows:
            old = self.cache
            self.cache = steps.cache(old.config, rows, old.columns, old.dtype, self.device)
            self.cache.take(old, self.slots)
            self.slots = torch.arange(keep.numel(), device=self.device)

    def forward(self, step: int) -> torch.Tensor:
        steps = self.engine.static
        assert steps is not None
        return steps.step(self.engine.model, self.cache, self.tok, self.prompt_len + step - 1, self.slots)
