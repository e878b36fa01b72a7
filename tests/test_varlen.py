"""The GPU's packed layout and heads, checked on the CPU: the "varlen" layout (one token stream, variable-length
attention sequences; `preference_data.packing`, `prefalign.models.varlen`) gives exactly what the other layouts
give, in fp32, for log-probs, rewards and gradients; the layout `auto` resolves to per device; the chunked log-prob
head (`prefalign.models.heads`) gives the plain head's values and gradients while keeping far less for its
backward. The flash kernel itself is checked against the same reference on a GPU (tests/test_cuda.py)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from prefalign.models import heads, varlen
from prefalign.models.batch import decide_layout
from prefalign.models.forward import last_token_rewards, per_sequence_sum, sequence_logps, token_logps
from preference_data.packing import STREAM_MULTIPLE, pack, pack_pairs


@pytest.fixture(scope="module")
def tiny(tiny_model_ref):
    from prefalign.models.hub import load_causal_lm, load_tokenizer

    return load_tokenizer(tiny_model_ref), load_causal_lm(tiny_model_ref, dtype="float32")


def _pairs(tok, n: int = 6):
    from preference_data.records import Message, PreferencePair
    from preference_data.tokenize import tokenize_pairs

    pairs = [
        PreferencePair(
            prompt=[Message("user", f"What is {a} times {b}? Answer briefly." + " Please." * (a % 4))],
            chosen=[Message("assistant", f"{a * b}.")],
            rejected=[Message("assistant", f"I believe it is {a * b + 1}, though I am not certain." * (1 + b % 2))],
            id=f"p{a}",
        )
        for a, b in [(2, 3), (7, 5), (10, 4), (6, 6), (9, 1), (3, 8), (12, 7), (4, 4)][:n]
    ]
    tp, _ = tokenize_pairs(pairs, tok, None, "drop")
    return tp


def test_varlen_batch_describes_each_sequence_and_pads_the_stream():
    """prompt + chosen is one causal sequence, rejected another whose keys are the prompt's and its own; the
    padding is one more; the stream is a multiple of STREAM_MULTIPLE tokens."""
    b = pack([[1, 2, 3], [4, 5]], [([6, 7], [8]), ([9], [10, 11, 12])], 0, 512, "varlen")
    assert b.input_ids.shape == (1, STREAM_MULTIPLE)
    assert b.input_ids[0, :14].tolist() == [1, 2, 3, 6, 7, 8, 4, 5, 9, 10, 11, 12, 0, 0]
    assert b.position_ids[0, :12].tolist() == [0, 1, 2, 3, 4, 3, 0, 1, 2, 2, 3, 4]
    cu_q, cu_k = b.cu_seqlens.tolist()
    assert cu_q == [0, 5, 6, 9, 12, STREAM_MULTIPLE]
    assert cu_k == [0, 5, 9, 12, 17, 17 + STREAM_MULTIPLE - 12]
    assert b.kv_index[:17].tolist() == [0, 1, 2, 3, 4, 0, 1, 2, 5, 6, 7, 8, 6, 7, 9, 10, 11]
    assert b.max_seqlens == (STREAM_MULTIPLE - 12, STREAM_MULTIPLE - 12)
    assert b.segments is None and b.attention_mask is None


@pytest.mark.parametrize("layout", ["segments", "mask"])
def test_varlen_logps_and_gradients_equal_the_other_layouts(tiny, layout):
    tok, model = tiny
    tp = _pairs(tok)

    def grads(lay: str):
        model.zero_grad()
        lp = sequence_logps(model, pack_pairs(tp, tok.pad_token_id, 150, lay))
        (lp * torch.linspace(-1, 1, lp.numel())).sum().backward()
        return lp.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    want, want_g = grads(layout)
    got, got_g = grads("varlen")
    torch.testing.assert_close(got, want, atol=1e-4, rtol=0)
    assert got_g.keys() == want_g.keys()
    for n in want_g:
        torch.testing.assert_close(got_g[n], want_g[n], atol=1e-5, rtol=1e-4, msg=n)


def test_every_layout_holds_several_responses_per_prompt(tiny):
    """Three answers behind one prompt (the scorers' shape: a prompt's samples and its reference): in every layout
    each later answer sees the prompt and itself only, so each gets what it gets encoded alone."""
    tok, model = tiny
    tp = _pairs(tok, 4)
    prompts = [p.prompt_ids for p in tp]
    responses = [(p.chosen_ids, p.rejected_ids, p.chosen_ids[:2] + p.rejected_ids[:3]) for p in tp]
    with torch.no_grad():
        out = {}
        for layout in ("mask", "varlen", "segments"):
            b = pack(prompts, responses, tok.pad_token_id, 150, layout)
            out[layout] = per_sequence_sum(token_logps(model, b), b)
        separate = []
        for k in range(3):
            for p, rs in zip(prompts, responses, strict=True):
                ids = torch.tensor([p + list(rs[k])])
                lp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), -1).gather(-1, ids[0, 1:, None])
                separate.append(lp[len(p) - 1 :, 0].sum())
    torch.testing.assert_close(out["varlen"], out["mask"], atol=1e-4, rtol=0)
    torch.testing.assert_close(out["varlen"], torch.stack(separate), atol=1e-4, rtol=0)
    torch.testing.assert_close(out["segments"], torch.stack(separate), atol=1e-4, rtol=0)
    seg = pack(prompts, responses, tok.pad_token_id, 150, "segments").segments
    assert seg.shape == (4, 5) and seg[:, 2:].tolist() == [[len(r) for r in rs] for rs in responses]


def test_segments_of_three_answers_give_the_mask_layouts_gradients(tiny):
    """The segment attention's own backward over a segment of three answers equals autograd under the block mask."""
    tok, model = tiny
    tp = _pairs(tok, 4)
    prompts = [p.prompt_ids for p in tp]
    responses = [(p.rejected_ids, p.chosen_ids, p.rejected_ids[:4]) for p in tp]

    def grads(layout: str):
        model.zero_grad()
        b = pack(prompts, responses, tok.pad_token_id, 150, layout)
        lp = per_sequence_sum(token_logps(model, b), b)
        (lp * torch.linspace(-1, 1, lp.numel())).sum().backward()
        return lp.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    want, want_g = grads("mask")
    got, got_g = grads("segments")
    torch.testing.assert_close(got, want, atol=1e-4, rtol=0)
    for n in want_g:
        torch.testing.assert_close(got_g[n], want_g[n], atol=1e-5, rtol=1e-4, msg=n)


def test_varlen_rewards_equal_segments_and_isolate_pairs(tiny_model_ref, tiny):
    from prefalign.models.hub import load_seq_cls

    tok, _ = tiny
    torch.manual_seed(0)
    rm = load_seq_cls(tiny_model_ref, dtype="float32")
    tp = _pairs(tok)
    with torch.no_grad():
        want = last_token_rewards(rm, pack_pairs(tp, tok.pad_token_id, 150, "segments"))
        got = last_token_rewards(rm, pack_pairs(tp, tok.pad_token_id, 150, "varlen"))
        changed = list(tp)
        changed[1] = dataclasses.replace(tp[1], chosen_ids=tp[1].chosen_ids[:-1] + [tp[2].chosen_ids[0]])
        other = last_token_rewards(rm, pack_pairs(changed, tok.pad_token_id, 150, "varlen"))
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    keep = [i for i in range(2 * len(tp)) if i != 1]  # chosen sequences first, then rejected
    torch.testing.assert_close(other[keep], got[keep], atol=1e-6, rtol=0)
    assert not torch.allclose(other[1], got[1])


def test_varlen_refuses_attention_dropout_in_training(tiny_model_ref, tiny):
    from prefalign.models.hub import load_causal_lm

    tok, _ = tiny
    model = load_causal_lm(tiny_model_ref, dtype="float32")
    model.config.attention_dropout = 0.1
    for layer in model.model.layers:
        layer.self_attn.attention_dropout = 0.1
    model.train()
    with pytest.raises(ValueError, match="disable_dropout"):
        sequence_logps(model, pack_pairs(_pairs(tok, 2), tok.pad_token_id, 150, "varlen"))


def test_reference_attention_aligns_a_short_query_at_the_bottom_right():
    """A later response's first query sees every prompt key and itself, as flash attention's causal varlen does."""
    torch.manual_seed(0)
    q, k, v = torch.randn(3, 4, 8), torch.randn(5, 2, 8), torch.randn(5, 2, 8)
    out = varlen.reference_attention(q, k, v, [0, 3], [0, 5], 8**-0.5)
    kk, vv = k.repeat_interleave(2, 1), v.repeat_interleave(2, 1)
    for j in range(3):
        s = torch.einsum("hd,khd->hk", q[j], kk[: 3 + j]) * 8**-0.5
        torch.testing.assert_close(out[j], torch.einsum("hk,khd->hd", s.softmax(-1), vv[: 3 + j]))


@pytest.mark.parametrize(
    ("requested", "device", "bf16", "want"),
    [
        ("auto", "cpu", True, "segments"),
        ("auto", "cpu", False, "segments"),
        ("auto", "cuda", True, "varlen"),
        ("auto", "cuda", False, "mask"),
        ("mask", "cuda", True, "mask"),
        ("varlen", "cpu", False, "varlen"),
    ],
)
def test_auto_layout_is_decided_per_device_and_precision(requested, device, bf16, want):
    assert decide_layout(requested, device, bf16) == want


def test_training_resolves_auto_and_saves_what_ran(tmp_path, monkeypatch):
    """A recipe replaces `attention: auto` (and `precision: auto`) before saving its config."""
    from prefalign.config import build
    from prefalign.training.config import TrainSection
    from prefalign.training.trainer import resolve_precision

    train = build(TrainSection, {"precision": "bf16"})  # bf16: varlen on a GPU (fp32 there packs "mask")
    assert train.attention == "auto"
    resolve_precision(train, "test")
    assert train.attention == ("varlen" if torch.cuda.is_available() else "segments")


# --- the chunked log-prob head ------------------------------------------------------------------------------


def _saved_bytes(fn) -> int:
    """Bytes of the tensors autograd keeps for the backward of `fn()` (distinct storages)."""
    seen: dict[int, int] = {}

    def pack_hook(t):
        seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack_hook, lambda t: t):
        out = fn()
    return sum(seen.values()), out


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_chunked_head_equals_the_plain_head_and_keeps_no_logits(temperature):
    torch.manual_seed(0)
    N, H, V = 300, 32, 2000
    h = torch.randn(N, H, requires_grad=True)
    w = (torch.randn(V, H) * 0.3).requires_grad_()
    t = torch.randint(0, V, (N,))
    g = torch.randn(N)

    def plain():
        logits = (h @ w.T).float() / temperature
        return heads.plain_token_logps(logits, t)

    results = {}
    for name, fn in (("plain", plain), ("chunked", lambda: heads.token_logps_from_hidden(h, w, t, temperature, 64))):
        h.grad = w.grad = None
        saved, lp = _saved_bytes(fn)
        (lp * g).sum().backward()
        results[name] = (lp.detach(), h.grad.clone(), w.grad.clone(), saved)
    for i in range(3):
        torch.testing.assert_close(results["chunked"][i], results["plain"][i], atol=2e-5, rtol=1e-4)
    logits_bytes = N * V * 4
    assert results["plain"][3] >= logits_bytes  # the plain head keeps the logits for its backward ...
    # ... the chunked one keeps its inputs (the weight is the model's own) and a few numbers per token
    assert results["chunked"][3] <= h.numel() * 4 + w.numel() * 4 + N * 16 < logits_bytes / 2


def test_chunked_head_under_bf16_autocast_follows_the_plain_head():
    torch.manual_seed(0)
    N, H, V = 200, 64, 3000
    h = torch.randn(N, H, requires_grad=True)
    w = (torch.randn(V, H) * 0.1).requires_grad_()
    t = torch.randint(0, V, (N,))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = (h @ w.T).float()
        want = heads.plain_token_logps(logits, t)
        got = heads.token_logps_from_hidden(h, w, t, chunk=48)
    torch.testing.assert_close(got, want, atol=1e-3, rtol=1e-3)
    want.sum().backward()
    gw, gh = w.grad.clone(), h.grad.clone()
    h.grad = w.grad = None
    got.sum().backward()
    for a, b in ((h.grad, gh), (w.grad, gw)):
        assert torch.nn.functional.cosine_similarity(a.flatten(), b.flatten(), dim=0) > 0.999


def test_token_logps_takes_the_chunked_head_for_a_plain_linear_head(tiny, monkeypatch):
    tok, model = tiny
    calls = []
    original = heads.token_logps_from_hidden
    monkeypatch.setattr(heads, "token_logps_from_hidden", lambda *a, **k: calls.append(1) or original(*a, **k))
    with torch.no_grad():
        token_logps(model, pack_pairs(_pairs(tok, 2), tok.pad_token_id, 150, "segments"))
    assert calls


@pytest.mark.parametrize("budget", [1, 40, 95, 10_000])
def test_token_parts_cut_longest_first_within_the_budget(budget):
    from preference_data.packing import token_parts

    sizes = [30, 5, 50, 30, 12, 90, 7, 30]
    parts = token_parts(sizes, budget)
    assert sorted(i for p in parts for i in p) == list(range(len(sizes)))  # every item once
    for p in parts:
        assert len(p) == 1 or sum(sizes[i] for i in p) <= budget  # only a lone item may exceed the budget
    flat = [i for p in parts for i in p]
    assert [sizes[i] for i in flat] == sorted(sizes, reverse=True)  # longest first; ties keep their order
    assert flat == sorted(range(len(sizes)), key=lambda i: (-sizes[i], i))
    if budget == 10_000:
        assert len(parts) == 1


def test_the_collator_cuts_a_batch_only_over_its_budget():
    from prefalign.models.batch import MICRO_BATCHES
    from preference_data.packing import PackCollator, pair_tokens

    pairs = [
        dataclasses.make_dataclass("P", ["prompt_ids", "chosen_ids", "rejected_ids", "margin", "attributes"])(
            list(range(1, 2 + k)), [7] * (3 + k), [8] * (2 + 2 * k), None, {}
        )
        for k in range(6)
    ]
    need = sum(pair_tokens(p) for p in pairs)
    whole = PackCollator(0, 512, "segments", token_budget=need)(pairs)
    assert MICRO_BATCHES not in whole and int(whole["num_pairs"]) == 6
    cut = PackCollator(0, 512, "segments", token_budget=need - 1)(pairs)[MICRO_BATCHES]
    assert len(cut) >= 2 and sum(int(m["num_pairs"]) for m in cut) == 6
    assert all(int(m["real_tokens"]) <= need - 1 for m in cut)
