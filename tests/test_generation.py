"""The generation engine (`prefalign.generation`) on a tiny random Llama with the real SmolLM2 tokenizer, fp32.

The model is built from a config with a large initialisation (std 0.5), so its next-token distributions are
peaked (entropy about 5 nats, top token about 0.13) and top-k / top-p / min-p cut real mass.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch

from prefalign.errors import ConfigError, UserError
from prefalign.generation import SamplingParams, exact_batched, make_engine, processed_logprobs
from prefalign.generation.sampling import RowSettings, sample

CONVS = [
    [{"role": "user", "content": "What is 2 + 2?"}],
    [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "Name three rivers in Europe and say which one is the longest."},
    ],
    [{"role": "user", "content": "Hi"}],
    [{"role": "user", "content": "Write a short poem about the sea, the wind and a small boat at night."}],
]


@pytest.fixture(scope="module")
def tok(tiny_model_ref):
    from prefalign.models.hub import load_tokenizer

    return load_tokenizer(tiny_model_ref)


@pytest.fixture(scope="module")
def model(tok):
    from transformers import AutoModelForCausalLM

    from prefalign.models.hub import tiny_llama_config

    cfg = tiny_llama_config(tok, max_position_embeddings=256, initializer_range=0.5)  # sharp next-token distributions
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(cfg).eval()


def _settings(T: float, k: int = 0, p: float = 1.0, m: float = 0.0, rows: int = 1) -> RowSettings:
    return RowSettings(
        torch.full((rows,), T), torch.full((rows,), k, dtype=torch.long), torch.full((rows,), p), torch.full((rows,), m)
    )


# ------------------------------------------------------------------------------------------------------------
# the sampling distribution


def test_processing_by_hand():
    """logits [2, 1, 0, -1], T = 1: p = softmax = [0.6439, 0.2369, 0.0871, 0.0321].
    top-k 2 keeps {0, 1}; top-p 0.7 keeps {0, 1} (mass before token 1 is 0.644 < 0.7, before token 2 is
    0.881 >= 0.7); min-p 0.3 keeps p >= 0.193: {0, 1}; min-p 0.1 keeps p >= 0.064: {0, 1, 2}.
    T = 2 halves the logits before any cut; T = 0 is a point mass on the argmax."""
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    two = torch.tensor([2.0, 1.0]) - torch.logsumexp(torch.tensor([2.0, 1.0]), 0)
    for s in (_settings(1.0, k=2), _settings(1.0, p=0.7), _settings(1.0, m=0.3)):
        lp = processed_logprobs(logits, s)[0]
        assert torch.allclose(lp[:2], two) and lp[2:].eq(float("-inf")).all()
    lp = processed_logprobs(logits, _settings(1.0, m=0.1))[0]
    assert lp[:3].isfinite().all() and lp[3] == float("-inf")
    lp = processed_logprobs(logits, _settings(2.0))[0]
    assert torch.allclose(lp, torch.log_softmax(logits[0] / 2, -1))
    greedy = processed_logprobs(logits, _settings(0.0))[0]
    assert greedy[0] == 0 and greedy[1:].eq(float("-inf")).all()


def test_processing_matches_transformers_warpers():
    """Temperature -> top-k -> top-p -> min-p, as transformers applies its warpers in `generate`."""
    from transformers.generation.logits_process import (
        MinPLogitsWarper,
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    torch.manual_seed(0)
    logits = torch.randn(6, 3000) * 3
    for T, k, p, m in [
        (0.7, 50, 1.0, 0.0),
        (1.0, 0, 0.9, 0.0),
        (1.3, 0, 1.0, 0.05),
        (0.8, 200, 0.8, 0.02),
        (1.0, 0, 0.3, 0.0),
    ]:
        scores = TemperatureLogitsWarper(T)(None, logits.clone())
        if k:
            scores = TopKLogitsWarper(k)(None, scores)
        if p < 1:
            scores = TopPLogitsWarper(p)(None, scores)
        if m:
            scores = MinPLogitsWarper(m)(None, scores)
        ref = torch.log_softmax(scores, -1)
        ours = processed_logprobs(logits, _settings(T, k, p, m, rows=6))
        assert torch.equal(ours.isfinite(), ref.isfinite()), (T, k, p, m)
        kept = ref.isfinite()
        assert torch.allclose(ours[kept], ref[kept], atol=1e-5), (T, k, p, m)


def test_top_p_on_a_flat_distribution_sorts_the_whole_row():
    """With 5000 equal logits no 1024 candidates hold 0.9 of the mass: the full sort finds the cut, and since
    all tokens tie with the least probable kept one, all are kept."""
    lp = processed_logprobs(torch.zeros(1, 5000), _settings(1.0, p=0.9))
    assert lp.isfinite().all() and torch.allclose(lp, torch.full_like(lp, -math.log(5000)))


def test_inverse_cdf_by_hand():
    """p = [0.5, 0.25, 0.25]: u in [0, 0.5) -> 0, [0.5, 0.75) -> 1, [0.75, 1) -> 2; with top-k 1 every u -> 0."""
    logits = torch.log(torch.tensor([[0.5, 0.25, 0.25]])).repeat(4, 1)
    out = sample(logits, _settings(1.0, rows=4), torch.tensor([0.0, 0.49, 0.6, 0.99]))
    assert out.tokens.tolist() == [0, 0, 1, 2]
    assert torch.allclose(out.logprobs, torch.log(torch.tensor([0.5, 0.5, 0.25, 0.25])))
    out = sample(logits, _settings(1.0, k=1, rows=4), torch.tensor([0.0, 0.49, 0.6, 0.99]))
    assert out.tokens.tolist() == [0] * 4 and torch.equal(out.logprobs, torch.zeros(4))


# ------------------------------------------------------------------------------------------------------------
# the engine


def test_prompt_ids_are_the_prompt_a_training_pair_is_rendered_with(tok):
    """A policy is prompted at generation exactly as its training pairs rendered the prompt (chat template and
    plain fallback), and a long prompt keeps its last tokens."""
    from prefalign.generation import render_prompts
    from preference_data.records import Message, PreferencePair, conversation
    from preference_data.tokenize import render_pair

    plain = copy.deepcopy(tok)  # no chat template: the plain "Role: content" fallback
    plain.chat_template = None
    for t in (tok, plain):
        want = []
        for c in CONVS:
            pair = PreferencePair(conversation(c), [Message("assistant", "Yes.")], [Message("assistant", "No.")])
            want.append(render_pair(t, pair)[0])
        assert render_prompts(t, CONVS) == want
        assert render_prompts(t, [conversation(c) for c in CONVS]) == want  # Message objects too
        assert render_prompts(t, CONVS, max_prompt_length=12) == [w[-12:] for w in want]
    assert any(len(w) > 12 for w in want)
    assert render_prompts(tok, [[5, 6, 7]]) == [[5, 6, 7]]


@pytest.mark.parametrize("shared_prefix", [True, False], ids=["decode-attention", "model-attention"])
def test_logprobs_equal_a_teacher_forced_forward(model, tok, shared_prefix):
    """Each returned log-prob equals the processed log-prob of that token from one forward of prompt +
    completion (no cache, no padding), for four different settings decoded in one batch; with the engine's
    decode attention over a shared-prefix cache, and with the model's own attention over per-row slabs."""
    params = [
        SamplingParams(n=2, temperature=0.7, top_k=50, max_new_tokens=12, seed=1),
        SamplingParams(n=2, temperature=1.0, top_p=0.8, max_new_tokens=12, seed=2),
        SamplingParams(n=2, temperature=1.3, min_p=0.05, max_new_tokens=12, seed=3),
        SamplingParams(n=2, temperature=0.9, top_k=100, top_p=0.9, min_p=0.01, max_new_tokens=12, seed=4),
    ]
    result = make_engine(model, tok, decode_attention=shared_prefix).generate(CONVS, params)
    for out, sp in zip(result.outputs, params, strict=True):
        for c in out.completions:
            ids = torch.tensor([out.prompt_ids + c.token_ids])
            with torch.no_grad():
                logits = model(ids).logits[0, len(out.prompt_ids) - 1 : -1]  # (T, V): predicting each new token
            T = len(c.token_ids)
            s = RowSettings(
                torch.full((T,), sp.temperature),
                torch.full((T,), sp.top_k, dtype=torch.long),
                torch.full((T,), sp.top_p),
                torch.full((T,), sp.min_p),
            )
            ref = processed_logprobs(logits, s).gather(1, torch.tensor(c.token_ids).unsqueeze(1)).squeeze(1)
            assert ref.isfinite().all(), "a sampled token lies outside the processed distribution"
            assert torch.allclose(torch.tensor(c.logprobs), ref, atol=1e-4, rtol=0), (c.logprobs, ref.tolist())


def _generate_alone(model, tok, prompt_ids: list[int], max_new_tokens: int) -> list[int]:
    """`model.generate`'s greedy continuation of one prompt, alone (the reference the engine's greedy tokens equal)."""
    out = model.generate(
        torch.tensor([prompt_ids]),
        max_new_tokens=max_new_tokens,
        do_sample=False,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    return out[0, len(prompt_ids) :].tolist()


@pytest.mark.parametrize("shared_prefix", [True, False], ids=["decode-attention", "model-attention"])
def test_greedy_equals_model_generate(model, tok, shared_prefix):
    """Greedy completions (batched, left-padded, rows pruned as they finish) equal `model.generate` run on
    each prompt alone."""
    params = [SamplingParams(temperature=0, max_new_tokens=m) for m in (16, 5, 16, 9)]  # rows finish apart
    result = make_engine(model, tok, decode_attention=shared_prefix).generate(CONVS, params)
    for out, sp in zip(result.outputs, params, strict=True):
        ref = _generate_alone(model, tok, out.prompt_ids, sp.max_new_tokens)
        c = out.completions[0]
        assert c.token_ids == ref[: len(c.token_ids)] and c.logprobs == [0.0] * len(c.token_ids)
        assert c.text == tok.decode(c.token_ids, skip_special_tokens=True)


@pytest.mark.parametrize("shared_prefix", [True, False], ids=["decode-attention", "model-attention"])
def test_samples_do_not_depend_on_the_batch(model, tok, shared_prefix):
    """A request's samples are the same alone, in a mixed batch (other prompts, lengths, n and settings,
    rows leaving at different steps), and with batches cut small by the token budget; its n samples differ
    from each other."""
    target = SamplingParams(n=3, temperature=1.0, top_p=0.95, max_new_tokens=10, seed=11)
    engine = make_engine(model, tok, decode_attention=shared_prefix)
    alone = engine.generate([CONVS[1]], target).outputs[0]
    others = [
        SamplingParams(n=2, temperature=0.5, top_k=20, max_new_tokens=6, seed=5),
        target,
        SamplingParams(n=4, temperature=0, max_new_tokens=14),
        SamplingParams(n=1, max_new_tokens=3, seed=9),
    ]
    mixed = engine.generate(CONVS, others).outputs[1]
    small = (
        make_engine(model, tok, token_budget=200, max_rows=2, decode_attention=shared_prefix)
        .generate(CONVS, others)
        .outputs[1]
    )
    for a, b, c in zip(alone.completions, mixed.completions, small.completions, strict=True):
        assert a.token_ids == b.token_ids == c.token_ids
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5)
    assert len({tuple(c.token_ids) for c in alone.completions}) == 3


JUDGE = "You are a careful judge. Read the query, write what a right answer must give, then check it step by step."


@pytest.mark.parametrize("shared_prefix", [True, False], ids=["decode-attention", "model-attention"])
def test_a_batchs_common_head_is_read_once_and_changes_no_token(model, tok, shared_prefix):
    """Prompts sharing a long head (a judge's instructions) and prompts of different lengths after it: with the head
    run once for the batch the greedy tokens equal `model.generate` on each prompt alone, the sampled tokens and
    log-probs equal the engine's without it, and the head's tokens are counted once."""
    convs = [[{"role": "system", "content": JUDGE}, c[-1]] for c in CONVS]
    params = [SamplingParams(temperature=0, max_new_tokens=m) for m in (12, 5, 12, 9)]
    params += [SamplingParams(n=2, temperature=1.0, top_p=0.9, max_new_tokens=10, seed=s) for s in range(4)]
    once = make_engine(model, tok, decode_attention=shared_prefix).generate(convs + convs, params)
    each = make_engine(model, tok, decode_attention=shared_prefix, common_prefix=0).generate(convs + convs, params)
    head = next(k for k, (a, b) in enumerate(zip(*[o.prompt_ids for o in once.outputs[:2]], strict=False)) if a != b)
    assert head >= 32  # the default common_prefix: the head is shared
    assert once.timings.batches == 1  # four distinct prompts, their head read once instead of four times
    assert each.timings.prompt_tokens - once.timings.prompt_tokens == 3 * head
    for out, sp in zip(once.outputs[:4], params[:4], strict=True):
        c = out.completions[0]
        assert c.token_ids == _generate_alone(model, tok, out.prompt_ids, sp.max_new_tokens)[: len(c.token_ids)]
    for a, b in zip(once.outputs[4:], each.outputs[4:], strict=True):
        for x, y in zip(a.completions, b.completions, strict=True):
            assert x.token_ids == y.token_ids
            assert torch.allclose(torch.tensor(x.logprobs), torch.tensor(y.logprobs), atol=1e-5)
    with pytest.raises(ConfigError, match="common_prefix=-1"):
        make_engine(model, tok, common_prefix=-1)


def test_wide_batches_sample_like_narrow_ones(model, tok):
    """150 samples decoded as one batch (sampled 128 rows at a time) equal the same samples in batches of 50."""
    params = SamplingParams(n=150, temperature=1.0, top_k=40, max_new_tokens=3, seed=2)
    wide = make_engine(model, tok, max_rows=200, token_budget=1 << 20).generate([CONVS[0]], params)
    narrow = make_engine(model, tok, max_rows=50).generate([CONVS[0]], params)
    assert wide.timings.batches == 1 and narrow.timings.batches == 3
    assert [c.token_ids for c in wide.outputs[0].completions] == [c.token_ids for c in narrow.outputs[0].completions]


def test_stop_strings_cut_exactly(model, tok):
    """Re-run a sample with a stop string taken from the middle of its own text: the text ends right before
    the stop string's first occurrence, the tokens are a prefix of the free run, and the last token is the
    one that completed the stop string."""
    params = SamplingParams(n=2, temperature=1.0, max_new_tokens=24, seed=3)
    engine = make_engine(model, tok)
    free = engine.generate([CONVS[0]], params).outputs[0].completions
    text = free[0].text
    stop = text[len(text) // 2 : len(text) // 2 + 3]
    assert stop and len(text) > 10
    cut = (
        engine.generate(
            [CONVS[0]], SamplingParams(n=2, temperature=1.0, max_new_tokens=24, seed=3, stop=("@@never@@", stop))
        )
        .outputs[0]
        .completions[0]
    )
    assert cut.finish_reason == "stop" and cut.stop == stop
    assert cut.text == text[: text.find(stop)]
    assert cut.token_ids == free[0].token_ids[: len(cut.token_ids)] and len(cut.logprobs) == len(cut.token_ids)
    assert stop in tok.decode(cut.token_ids, skip_special_tokens=True)
    assert stop not in tok.decode(cut.token_ids[:-1], skip_special_tokens=True)


def test_eos_and_length_finish_reasons(model, tok):
    """Greedy, with the 4th greedy token declared EOS: the completion ends there with finish reason "eos" and
    EOS as its last id; without it, the completion runs to max_new_tokens ("length")."""
    greedy = SamplingParams(temperature=0, max_new_tokens=8)
    free = make_engine(model, tok).generate([CONVS[3]], greedy).outputs[0].completions[0]
    assert free.finish_reason == "length" and len(free.token_ids) == 8
    eos = free.token_ids[3]
    first = free.token_ids.index(eos)
    c = make_engine(model, tok, eos_token_ids=[eos]).generate([CONVS[3]], greedy).outputs[0].completions[0]
    assert c.finish_reason == "eos" and c.token_ids == free.token_ids[: first + 1]


def test_bad_arguments_say_what_to_fix(model, tok):
    with pytest.raises(ConfigError) as e:
        SamplingParams(n=0, temperature=-1, top_p=0.0, top_k=-2, min_p=2, max_new_tokens=0, stop="x").validate()
    msg = str(e.value)
    for field in ("n=0", "temperature=-1", "top_p=0.0", "top_k=-2", "min_p=2", "max_new_tokens=0", "stop=('x',)"):
        assert field in msg
    engine = make_engine(model, tok)
    with pytest.raises(ConfigError, match="2 SamplingParams for 4 prompts"):
        engine.generate(CONVS, [SamplingParams()] * 2)
    with pytest.raises(UserError, match="a prompt is a non-empty list"):
        engine.generate(["just a string"])
    with pytest.raises(UserError, match="'role' and 'content'"):
        engine.generate([[{"text": "hi"}]])
    with pytest.raises(UserError, match="max_prompt_length"):
        engine.generate([list(range(300))])
    with pytest.raises(ConfigError, match="max_rows=0"):
        make_engine(model, tok, max_rows=0)


def test_unknown_backend_and_missing_vllm(model, tok):
    import importlib.util

    with pytest.raises(UserError, match="did you mean 'vllm'"):
        make_engine(model, tok, backend="vlm")
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed here")
    with pytest.raises(UserError, match=r"pip install -e '\.\[gpu\]'"):
        make_engine(model, tok, backend="vllm")


def test_sync_weights_into_a_separate_copy(model, tok):
    """A sampler copy follows a full fine-tuning step and a LoRA step (merged, trainer left unmerged); sharing
    the trainer's model only bumps the version."""
    from peft import LoraConfig, get_peft_model

    sampler = copy.deepcopy(model)
    trainer = copy.deepcopy(model)
    engine = make_engine(sampler, tok)
    with torch.no_grad():
        trainer.model.layers[0].mlp.up_proj.weight.mul_(-1.0)
    assert engine.sync_weights(trainer) == 1
    for (name, a), b in zip(trainer.named_parameters(), sampler.parameters(), strict=True):
        assert torch.equal(a, b), name
    greedy = SamplingParams(temperature=0, max_new_tokens=6)
    assert (
        engine.generate(CONVS[:2], greedy).outputs[1].completions[0].token_ids
        == make_engine(trainer, tok).generate(CONVS[:2], greedy).outputs[1].completions[0].token_ids
    )

    peft_model = get_peft_model(trainer, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    for name, p in peft_model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.5)
    base_q = peft_model.base_model.model.model.layers[0].self_attn.q_proj.base_layer.weight.detach().clone()
    assert engine.sync_weights(peft_model) == 2
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    with torch.no_grad():
        assert torch.allclose(sampler(ids).logits, peft_model(ids).logits, atol=1e-4)
    assert torch.equal(peft_model.base_model.model.model.layers[0].self_attn.q_proj.base_layer.weight, base_q)

    shared = make_engine(model, tok)
    assert shared.sync_weights(model) == 1 and shared.sync_weights() == 2
    assert shared.generate(CONVS[:1], greedy).weight_version == 2


def test_engine_on_a_peft_model_in_training_mode(model, tok):
    """An online loop shares its LoRA model (dropout on, training mode) with the sampler: generation runs with
    dropout off, as in eval mode, and leaves the model in training mode."""
    from peft import LoraConfig, get_peft_model

    peft_model = get_peft_model(
        copy.deepcopy(model), LoraConfig(r=4, lora_alpha=8, lora_dropout=0.5, target_modules=["q_proj", "v_proj"])
    )
    for name, p in peft_model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.5)
    engine = make_engine(peft_model, tok)
    params = SamplingParams(n=2, temperature=1.0, max_new_tokens=8, seed=4)
    peft_model.eval()
    evaluated = engine.generate(CONVS[:2], params)
    peft_model.train()
    training = engine.generate(CONVS[:2], params)
    assert peft_model.training
    for a, b in zip(training.outputs, evaluated.outputs, strict=True):
        assert [c.token_ids for c in a.completions] == [c.token_ids for c in b.completions]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_policy_generate_keeps_the_old_greedy_text(tiny_model_ref, dtype):
    """`prefalign.generation.policy.generate` (the engine, greedy on its exact schedule) returns the text the old
    batched `model.generate` path returned (kept as the baseline in benchmarks/generation.py), on suite
    prompts, in bf16 too."""
    from benchmarks.generation import baseline_generate
    from prefalign.generation.policy import generate, load_policy
    from prefalign.models.hub import load_tokenizer
    from preference_data.suite.heldout import load_prompts

    tok = load_tokenizer(tiny_model_ref)
    policy = load_policy(tiny_model_ref, dtype)
    prompts = [p.prompt for p in load_prompts("suite", 10)]
    new = generate(policy, tok, prompts, max_new_tokens=12, batch_size=4)
    old = baseline_generate(policy, tok, prompts, max_new_tokens=12, batch_size=4)
    assert new == old and len(new) == 10


def test_policy_generate_fast_schedule_gives_the_exact_greedy_text_in_fp32(tiny_model_ref, monkeypatch):
    """`schedule="fast"` (the engine's own batching, as the quickstart's evaluation uses it) decodes the same
    greedy text as the exact schedule in fp32, with batches of another size than the exact one's."""
    import prefalign.generation.policy as policy_module
    from prefalign.generation.policy import generate, load_policy
    from prefalign.models.hub import load_tokenizer
    from preference_data.suite.heldout import load_prompts

    tok = load_tokenizer(tiny_model_ref)
    policy = load_policy(tiny_model_ref, "float32")
    prompts = [p.prompt for p in load_prompts("suite", 10)]
    engines: list[dict] = []
    make = policy_module.make_engine
    monkeypatch.setattr(policy_module, "make_engine", lambda *a, **k: engines.append(k) or make(*a, **k))
    exact = generate(policy, tok, prompts, max_new_tokens=12, batch_size=4)
    fast = generate(policy, tok, prompts, max_new_tokens=12, batch_size=3, schedule="fast")
    assert fast == exact and len(fast) == 10
    assert engines == [exact_batched(4), {"max_rows": 3, "token_budget": 1 << 15}]  # the two schedules ran


# ------------------------------------------------------------------------------------------------------------
# the static path: fixed-shape caches per bucket, the decode step compiled once per bucket


def _tokens(engine, convs, params):
    return [c.token_ids for o in engine.generate(convs, params).outputs for c in o.completions]


def test_static_path_gives_the_eager_paths_tokens(model, tok):
    """Fixed-shape caches (rows in buckets, prompts padded to a multiple of 64 columns, finished rows moved to a
    smaller bucket) give the eager engine's greedy tokens and its seeded samples exactly (fp32)."""
    greedy = [SamplingParams(temperature=0, max_new_tokens=m) for m in (16, 5, 16, 9)]  # rows finish apart
    sampled = SamplingParams(n=5, temperature=1.0, top_p=0.95, max_new_tokens=12, seed=11)
    eager = make_engine(model, tok)
    static = make_engine(model, tok, static="eager", max_rows=32)
    assert _tokens(static, CONVS, greedy) == _tokens(eager, CONVS, greedy)
    assert _tokens(static, CONVS, sampled) == _tokens(eager, CONVS, sampled)
    assert static.static is not None and len(static.static.caches) >= 2  # 20 rows in 64, then fewer in a smaller one
    with pytest.raises(ConfigError, match="static='fast'.*compiled"):
        make_engine(model, tok, static="fast")


def test_static_path_follows_a_weight_sync(model, tok):
    """New weights copied into the engine's model (`sync_weights`) change what the static step decodes, to what
    an engine built on the new weights decodes."""
    sampler, trainer = copy.deepcopy(model), copy.deepcopy(model)
    engine = make_engine(sampler, tok, static="eager")
    greedy = SamplingParams(temperature=0, max_new_tokens=8)
    before = _tokens(engine, CONVS, greedy)
    with torch.no_grad():
        trainer.model.layers[0].mlp.up_proj.weight.mul_(-1.0)
    engine.sync_weights(trainer)
    after = _tokens(engine, CONVS, greedy)
    assert after != before and after == _tokens(make_engine(trainer, tok), CONVS, greedy)


@pytest.mark.slow
def test_compiled_static_path_compiles_once_per_bucket(model, tok):
    """The compiled decode step (inductor on a CPU; CUDA graphs on a GPU) gives the eager tokens, and a second
    call after a weight sync compiles nothing more (counted): the new weights reach the compiled step."""
    from prefalign.training.trainer import compiled_graphs

    sampler, trainer = copy.deepcopy(model), copy.deepcopy(model)
    engine = make_engine(sampler, tok, static="compiled", max_rows=16)
    greedy = [SamplingParams(temperature=0, max_new_tokens=m) for m in (12, 5, 12, 9)]
    assert _tokens(engine, CONVS, greedy) == _tokens(make_engine(sampler, tok), CONVS, greedy)
    graphs = compiled_graphs()["graphs"]
    with torch.no_grad():
        trainer.model.layers[0].mlp.up_proj.weight.mul_(-1.0)
    engine.sync_weights(trainer)
    assert _tokens(engine, CONVS, greedy) == _tokens(make_engine(trainer, tok), CONVS, greedy)
    assert compiled_graphs()["graphs"] == graphs


def test_static_bucket_caches_are_an_lru_bounded_in_bytes(model, tok):
    """With a cap below two buckets, decoding that needs two shapes keeps one cache at a time (the other freed and
    counted), and the tokens are still the eager path's."""
    greedy = [SamplingParams(temperature=0, max_new_tokens=m) for m in (16, 5, 16, 9)]  # rows finish apart
    sampled = SamplingParams(n=5, temperature=1.0, top_p=0.95, max_new_tokens=12, seed=11)
    eager = make_engine(model, tok)
    static = make_engine(model, tok, static="eager", max_rows=32)
    assert static.static is not None
    _tokens(static, CONVS, greedy), _tokens(static, CONVS, sampled)  # learn the buckets' sizes
    sizes = sorted(c.nbytes for c in static.static.caches.values())
    assert len(sizes) >= 2
    capped = make_engine(model, tok, static="eager", max_rows=32)
    assert capped.static is not None
    capped.static.max_bytes = sizes[-1]  # room for the largest, never for two
    assert _tokens(capped, CONVS, greedy) == _tokens(eager, CONVS, greedy)
    assert _tokens(capped, CONVS, sampled) == _tokens(eager, CONVS, sampled)
    assert len(capped.static.caches) == 1 and capped.static.evicted >= 1
    assert capped.static.nbytes <= capped.static.max_bytes
