"""Scorers (reward_models/scorers.py) on the tiny test model, each checked against a plain unpacked forward.

Every expected value is computed the obvious way: one sequence at a time, no packing, no batching, the
reward or log-prob read at hand-picked positions, in fp32.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
import torch

from prefalign.errors import ConfigError, UserError
from preference_data.records import Message
from preference_data.tokenize import tokenize_single
from reward_models.scorers import SCORERS, load_scorer

TINY = "builtin:tiny-llama"
STATS = {"mean": 0.25, "std": 2.0, "n": 10}


def _conv(*turns: tuple[str, str]) -> list[Message]:
    return [Message(role, content) for role, content in turns]


PROMPTS = [
    _conv(("user", "What is 2 + 2?")),
    _conv(("system", "You answer briefly."), ("user", "Name a colour.")),
    _conv(("user", "Hi"), ("assistant", "Hello! How can I help?"), ("user", "Tell me a fact about the moon, please.")),
    _conv(("user", "Write one word.")),
]
RESPONSES = [
    _conv(("assistant", "4")),
    _conv(("assistant", "Blue, the colour of a clear sky at noon.")),
    _conv(("assistant", "The Moon has no atmosphere to speak of, so its sky is black even by day.")),
    _conv(("assistant", "Word")),
]


@pytest.fixture(scope="module")
def tok(tiny_model_ref):
    from prefalign.models.hub import load_tokenizer

    return load_tokenizer(tiny_model_ref)


@pytest.fixture(scope="module")
def rm_dir(tmp_path_factory, tiny_model_ref) -> Path:
    """A tiny seq-cls RM with a large random head (distinct rewards), saved with its statistics."""
    from prefalign.models.hub import load_seq_cls, load_tokenizer
    from reward_models.checkpoint import RewardStats, save_rm

    model = load_seq_cls(tiny_model_ref, dtype="float32")
    torch.manual_seed(1)
    torch.nn.init.normal_(model.score.weight, std=1.0)
    out = tmp_path_factory.mktemp("rm") / "rm"
    save_rm(model, load_tokenizer(tiny_model_ref), out, RewardStats(**STATS, computed_on="test"))
    return out


@pytest.fixture(scope="module")
def ref_dir(tmp_path_factory, tiny_model_ref) -> Path:
    """A reference causal LM: the tiny model with perturbed weights."""
    from prefalign.models.hub import load_causal_lm, load_tokenizer

    model = load_causal_lm(tiny_model_ref, dtype="float32")
    torch.manual_seed(2)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.02 * torch.randn_like(p))
    out = tmp_path_factory.mktemp("ref") / "ref"
    model.save_pretrained(str(out))
    load_tokenizer(tiny_model_ref).save_pretrained(str(out))
    return out


@pytest.fixture(scope="module")
def scalar(rm_dir):
    return load_scorer("scalar", model=str(rm_dir), dtype="float32")


def _plain_last_token_reward(model, p: list[int], r: list[int], at: int = -1) -> float:
    h = model.model(input_ids=torch.tensor([p + r], device=model.device)).last_hidden_state[0]  # (T, H)
    return model.score(h[at]).item()


def _plain_logp(model, p: list[int], r: list[int]) -> float:
    logp = model(input_ids=torch.tensor([p + r], device=model.device)).logits[0].float().log_softmax(-1)  # (T, V)
    # the logits at position (P - 1 + i) predict response token i
    return sum(logp[len(p) - 1 + i, t].item() for i, t in enumerate(r))


# ---------------------------------------------------------------------------------------------------------
# scalar
# ---------------------------------------------------------------------------------------------------------


def test_table_lists_every_kind_with_its_needs():
    rows = {r["name"]: r for r in SCORERS.rows()}
    assert set(rows) == {
        "scalar",
        "implicit",
        "judge",
        "pair_pm",
        "grm",
        "think",
        "rb2_rate",
        "rb2_4way",
        "polar",
        "grader",
        "multi_objective",
        "ensemble",
        "refusal_rule",
    }
    assert rows["judge"]["kind"] == "pairwise" and rows["scalar"]["kind"] == "pointwise"
    assert rows["polar"]["kind"] == "reference" and rows["rb2_4way"]["kind"] == "listwise"
    assert all(r["summary"] and r["needs"] for r in rows.values())


def test_scalar_equals_plain_forward_at_the_last_token(scalar, tok):
    with torch.no_grad():
        expected = [
            _plain_last_token_reward(scalar.model, *tokenize_single(tok, p, r, response_end="template"))
            for p, r in zip(PROMPTS, RESPONSES, strict=True)
        ]
    got = scalar.score(PROMPTS, RESPONSES)
    assert got == pytest.approx(expected, abs=1e-4)
    assert len(set(round(g, 3) for g in got)) == len(got)  # distinct rewards: the check is not vacuous
    d = scalar.describe()
    assert d["model"] == scalar.opts.model and d["dtype"] == "float32" and d["normalize"] is False
    assert d["stats"]["mean"] == STATS["mean"] and scalar.kind == "pointwise" and scalar.name == "scalar"


def test_saved_rm_reads_its_reward_where_transformers_pools(scalar, tok):
    """transformers' sequence-classification head reads the last token that is not pad. SmolLM2's pad is its
    EOS; a saved RM gets a distinct pad and reads its reward at the last token of the chat template's
    rendering (ChatML's newline after <|im_end|>), so transformers' own forward on apply_chat_template's ids
    gives the scorer's number, and the EOS position gives another one (the check is not vacuous)."""
    saved = scalar.tokenizer
    assert tok.pad_token_id == tok.eos_token_id and saved.pad_token_id != saved.eos_token_id == tok.eos_token_id
    assert scalar.model.config.pad_token_id == saved.pad_token_id
    conv = [m.to_dict() for m in PROMPTS[1] + RESPONSES[1]]
    ids = saved.apply_chat_template(conv, return_tensors="pt", return_dict=True)["input_ids"]
    assert ids[0, -2].item() == tok.eos_token_id and saved.decode(ids[0, -1:]) == "\n"
    p, r = tokenize_single(tok, PROMPTS[1], RESPONSES[1])  # the policy convention: ids end at EOS
    with torch.no_grad():
        hf_pooled = scalar.model(input_ids=ids).logits[0, 0].item()
        at_eos = _plain_last_token_reward(scalar.model, p, r)
    assert scalar.score([PROMPTS[1]], [RESPONSES[1]])[0] == pytest.approx(hf_pooled, abs=1e-4)
    assert abs(at_eos - hf_pooled) > 1e-3


def test_rm_saved_before_response_end_was_recorded_is_read_at_eos(rm_dir, tok, tmp_path):
    """reward_stats.json without `response_end` (RMs saved by earlier versions) keeps its EOS reading."""
    import json
    import shutil

    legacy = tmp_path / "legacy"
    shutil.copytree(rm_dir, legacy)
    stats = json.loads((legacy / "reward_stats.json").read_text())
    del stats["response_end"]
    (legacy / "reward_stats.json").write_text(json.dumps(stats))
    scorer = load_scorer("scalar", model=str(legacy), dtype="float32")
    p, r = tokenize_single(tok, PROMPTS[1], RESPONSES[1])
    with torch.no_grad():
        at_eos = _plain_last_token_reward(scorer.model, p, r)
    assert scorer.response_end == "eos"
    assert scorer.score([PROMPTS[1]], [RESPONSES[1]])[0] == pytest.approx(at_eos, abs=1e-4)


def test_normalize_uses_the_saved_stats(rm_dir, scalar):
    norm = load_scorer({"type": "scalar", "model": str(rm_dir), "normalize": True}, dtype="float32")
    raw = scalar.score(PROMPTS, RESPONSES)
    assert norm.score(PROMPTS, RESPONSES) == pytest.approx([(x - STATS["mean"]) / STATS["std"] for x in raw], abs=1e-5)
    assert norm.describe()["normalize"] is True


def test_weights_fingerprint_changes_when_the_model_is_rewritten(tmp_path, rm_dir):
    import os
    import shutil

    from prefalign.models.hub import weights_fingerprint

    copy = tmp_path / "rm"
    shutil.copytree(rm_dir, copy)
    before = weights_fingerprint(str(copy))
    assert before is not None and before == weights_fingerprint(str(copy))
    weights = copy / "model.safetensors"
    os.utime(weights, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + 10**9))
    assert weights_fingerprint(str(copy)) != before


def test_batch_size_and_order_do_not_change_scores(rm_dir, scalar):
    """One batch (a long item makes the rows long enough that the short items share rows) vs one item per
    forward in shuffled order."""
    prompts = PROMPTS + [PROMPTS[0]]
    responses = RESPONSES + [_conv(("assistant", "A much longer answer. " * 12))]
    ref = scalar.score(prompts, responses)
    one_by_one = load_scorer("scalar", model=str(rm_dir), dtype="float32", batch_tokens=1)
    perm = list(range(len(prompts)))
    random.Random(0).shuffle(perm)
    shuffled = one_by_one.score([prompts[i] for i in perm], [responses[i] for i in perm])
    assert [shuffled[perm.index(i)] for i in range(len(prompts))] == pytest.approx(ref, abs=1e-4)
    assert one_by_one.describe() == scalar.describe()  # batch size is not part of the identity


def test_scorers_on_a_gpu_score_rows_under_one_mask_with_the_same_scores(rm_dir):
    """On a GPU the scorers pack rows under a block mask (the segment loop's launches grow with the items); the
    layout changes no score: the CPU scorer switched to it scores as with segments."""
    from prefalign.models.forward import layout_for

    segments = load_scorer("scalar", model=str(rm_dir), dtype="float32", device="cpu")
    assert segments.layout == "segments" and layout_for(segments.model, device="cpu") == "segments"
    assert layout_for(segments.model, device="cuda") == "mask" and layout_for(None, device="cuda:1") == "mask"
    prompts = PROMPTS + [PROMPTS[0]]
    responses = RESPONSES + [_conv(("assistant", "A much longer answer. " * 12))]
    masked = load_scorer("scalar", model=str(rm_dir), dtype="float32", device="cpu")
    masked.layout = "mask"
    got = masked.score(prompts, responses)
    assert got == pytest.approx(segments.score(prompts, responses), abs=1e-4)
    assert len({round(x, 3) for x in got}) == len(got)  # distinct: the comparison is not vacuous


def test_a_batch_tokenized_at_once_equals_item_by_item_and_one_bad_item_fails_alone(rm_dir):
    """`_encode_all` (one tokenizer call per batch) gives `_encode`'s ids; an item the template rejects and an
    empty response fail alone and are counted."""
    fresh = load_scorer("scalar", model=str(rm_dir), dtype="float32", device="cpu")
    prompts = PROMPTS + [PROMPTS[0]]
    responses = RESPONSES + [_conv(("assistant", "  "))]
    one_by_one = [fresh._encode(p, r) for p, r in zip(prompts, responses, strict=True)]
    assert fresh._encode_all(prompts, responses) == one_by_one
    assert fresh._encode_all(prompts, responses)[-1] is None and fresh.failures["empty_response"] == 3  # 3 calls
    template = fresh.tokenizer.chat_template
    fresh.tokenizer.chat_template = (
        "{% for m in messages %}{% if 'BOOM' in m['content'] %}{{ raise_exception('no BOOM') }}{% endif %}{% endfor %}"
        + template
    )
    try:
        bad = [*RESPONSES[:2], _conv(("assistant", "BOOM")), RESPONSES[3]]
        got = fresh._encode_all(PROMPTS, bad)
        assert got[2] is None and fresh.failures["template_error"] == 1
        assert [got[i] for i in (0, 1, 3)] == [fresh._encode(PROMPTS[i], bad[i]) for i in (0, 1, 3)]
    finally:
        fresh.tokenizer.chat_template = template


def test_empty_response_is_nan_and_the_rest_still_score(scalar):
    ref = scalar.score(PROMPTS[:2], RESPONSES[:2])
    got = scalar.score([PROMPTS[0], PROMPTS[0], PROMPTS[1]], [RESPONSES[0], _conv(("assistant", "  ")), RESPONSES[1]])
    assert math.isnan(got[1]) and [got[0], got[2]] == pytest.approx(ref, abs=1e-4)
    assert scalar.failures["empty_response"] >= 1


def test_long_prompt_is_cut_from_the_left(rm_dir, tok):
    s = load_scorer("scalar", model=str(rm_dir), dtype="float32", max_length=24)
    p, r = tokenize_single(tok, PROMPTS[2], RESPONSES[0], response_end="template")
    assert len(p) + len(r) > 24
    with torch.no_grad():
        expected = _plain_last_token_reward(s.model, p[len(p) + len(r) - 24 :], r)
    assert s.score([PROMPTS[2]], [RESPONSES[0]])[0] == pytest.approx(expected, abs=1e-4)
    assert math.isnan(s.score([PROMPTS[0]], [_conv(("assistant", "word " * 40))])[0])  # response alone too long


def test_bfloat16_is_close_to_float32(rm_dir, scalar):
    bf16 = load_scorer("scalar", model=str(rm_dir), dtype="bfloat16")
    assert bf16.describe()["dtype"] == "bfloat16"
    got, ref = bf16.score(PROMPTS, RESPONSES), scalar.score(PROMPTS, RESPONSES)
    assert all(math.isfinite(g) for g in got)
    assert got == pytest.approx(ref, abs=0.1 * max(abs(x) for x in ref))


def test_bad_specs_are_user_errors(rm_dir, tiny_model_ref):
    with pytest.raises(UserError, match="did you mean 'scalar'"):
        load_scorer("scalr", model=str(rm_dir))
    with pytest.raises(ConfigError) as e:
        load_scorer("scalar", model=str(rm_dir), normalise=True, dtype="fp8")
    assert "did you mean 'normalize'" in str(e.value) and "dtype" in str(e.value)  # both problems at once
    with pytest.raises(UserError, match="needs 'type'"):
        load_scorer({"model": str(rm_dir)})
    with pytest.raises(UserError, match="needs a reference model"):
        load_scorer("implicit", model=tiny_model_ref)
    with pytest.raises(ConfigError, match="reference_free"):
        load_scorer("implicit", model=tiny_model_ref, reference=tiny_model_ref, reference_free=True)


def test_normalize_without_stats_is_a_user_error(tmp_path, tiny_model_ref):
    from prefalign.models.hub import load_seq_cls, load_tokenizer

    d = tmp_path / "rm-nostats"
    load_seq_cls(tiny_model_ref, dtype="float32").save_pretrained(str(d))
    load_tokenizer(tiny_model_ref).save_pretrained(str(d))
    with pytest.raises(UserError, match="reward_stats.json"):
        load_scorer("scalar", model=str(d), normalize=True)


# ---------------------------------------------------------------------------------------------------------
# implicit
# ---------------------------------------------------------------------------------------------------------


def test_implicit_equals_beta_times_plain_log_ratio(ref_dir, tok, tiny_model_ref):
    s = load_scorer("implicit", model=tiny_model_ref, reference=str(ref_dir), beta=0.5, dtype="float32")
    with torch.no_grad():
        expected = [
            0.5 * (_plain_logp(s.policy, *ids) - _plain_logp(s.reference, *ids))
            for ids in (tokenize_single(tok, p, r) for p, r in zip(PROMPTS, RESPONSES, strict=True))
        ]
    got = s.score(PROMPTS, RESPONSES)
    assert got == pytest.approx(expected, abs=1e-3)
    assert any(abs(g) > 1e-2 for g in got)
    assert s.describe()["reference"] == str(ref_dir) and s.describe()["beta"] == 0.5


def _plain_token_logps(model, p: list[int], r: list[int]) -> list[float]:
    logp = model(input_ids=torch.tensor([p + r], device=model.device)).logits[0].float().log_softmax(-1)
    return [logp[len(p) - 1 + i, t].item() for i, t in enumerate(r)]


STEPPED = [
    _conv(("assistant", "Step 1: two plus two.\nStep 2: that makes four.\nStep 3: the answer is 4.")),
    _conv(("assistant", "First I read the question.\n\nThen I answer: blue.")),
    _conv(("assistant", "One step only.")),
]


def test_implicit_process_reward_by_steps_against_a_plain_forward(ref_dir, tok, tiny_model_ref):
    """Step k's reward is beta x the log-ratio summed over its tokens; the score is the worst step (min) or the
    sum (which is the outcome reward). Step ends are found on tokens: each step's text ends at its last token."""
    from reward_models.generative import split_steps

    prompts = PROMPTS[:3]
    got = {}
    for how in ("min", "sum"):
        s = load_scorer(
            "implicit", model=tiny_model_ref, reference=str(ref_dir), beta=0.5, dtype="float32", process=how
        )
        got[how] = s.score(prompts, STEPPED)
    outcome = load_scorer("implicit", model=tiny_model_ref, reference=str(ref_dir), beta=0.5, dtype="float32")
    assert got["sum"] == pytest.approx(outcome.score(prompts, STEPPED), abs=1e-3)
    for p, r, value in zip(prompts, STEPPED, got["min"], strict=True):
        p_ids, r_ids = tokenize_single(tok, p, r)
        ends = s._step_ends(r_ids)
        text = tok.decode(r_ids, skip_special_tokens=True)
        steps = split_steps(text)
        assert len(ends) == len(steps) and ends[-1] == len(r_ids) - 1
        for k, e in enumerate(ends[:-1]):  # the tokens through e spell steps 0..k, one token fewer does not
            covered = len("".join(steps[: k + 1]))
            assert len(tok.decode(r_ids[: e + 1], skip_special_tokens=True)) >= covered
            assert len(tok.decode(r_ids[:e], skip_special_tokens=True)) < covered
        with torch.no_grad():
            ratio = [
                a - b
                for a, b in zip(
                    _plain_token_logps(s.policy, p_ids, r_ids),
                    _plain_token_logps(s.reference, p_ids, r_ids),
                    strict=True,
                )
            ]
        starts = [0] + [e + 1 for e in ends[:-1]]
        steps_r = [0.5 * sum(ratio[a : e + 1]) for a, e in zip(starts, ends, strict=True)]
        assert value == pytest.approx(min(steps_r), abs=1e-3)
    assert [
        len(split_steps(tok.decode(tokenize_single(tok, p, r)[1], skip_special_tokens=True)))
        for p, r in zip(prompts, STEPPED, strict=True)
    ] == [3, 2, 1]
    with pytest.raises(Exception, match="normalization"):
        load_scorer("implicit", model=tiny_model_ref, reference=str(ref_dir), process="min", normalization="mean")


def test_reference_free_mean_is_simpo_reward(tok, tiny_model_ref):
    """r = beta / |y| * log pi(y|x), |y| counting the response tokens with the closing EOS."""
    s = load_scorer(
        "implicit", model=tiny_model_ref, reference_free=True, normalization="mean", beta=2.0, dtype="float32"
    )
    with torch.no_grad():
        expected = []
        for p, r in zip(PROMPTS, RESPONSES, strict=True):
            ids = tokenize_single(tok, p, r)
            expected.append(2.0 * _plain_logp(s.policy, *ids) / len(ids[1]))
    assert s.score(PROMPTS, RESPONSES) == pytest.approx(expected, abs=1e-3)


def test_lora_policy_uses_its_base_as_reference(tmp_path, tok, tiny_model_ref):
    """A fresh LoRA adapter has B = 0, so policy == base and the reward is 0; perturbed adapters move it."""
    from peft import LoraConfig, get_peft_model

    from prefalign.models.hub import load_causal_lm

    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    peft_model = get_peft_model(load_causal_lm(tiny_model_ref, dtype="float32"), lora)
    peft_model.save_pretrained(str(tmp_path / "fresh"))
    fresh = load_scorer("implicit", model=str(tmp_path / "fresh"), dtype="float32")
    assert fresh.describe()["reference"] == "adapter base (adapters disabled)"
    assert fresh.score(PROMPTS, RESPONSES) == pytest.approx([0.0] * len(PROMPTS), abs=1e-6)

    torch.manual_seed(3)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.normal_(std=0.5)
    peft_model.save_pretrained(str(tmp_path / "trained"))
    trained = load_scorer("implicit", model=str(tmp_path / "trained"), dtype="float32", beta=1.0)
    base = load_causal_lm(tiny_model_ref, dtype="float32")
    with torch.no_grad():
        expected = [
            _plain_logp(trained.policy, *ids) - _plain_logp(base, *ids)
            for ids in (tokenize_single(tok, p, r) for p, r in zip(PROMPTS, RESPONSES, strict=True))
        ]
    got = trained.score(PROMPTS, RESPONSES)
    assert got == pytest.approx(expected, abs=1e-3) and all(abs(g) > 1e-3 for g in got)


# ---------------------------------------------------------------------------------------------------------
# judge
# ---------------------------------------------------------------------------------------------------------


def test_judge_probabilities_shapes_and_order(tiny_model_ref):
    j = load_scorer("judge", model=tiny_model_ref, dtype="float32")
    assert j.kind == "pairwise"
    a, b = RESPONSES, RESPONSES[1:] + RESPONSES[:1]
    ab = j.compare(PROMPTS, a, b)
    ba = j.compare(PROMPTS, b, a)
    assert len(ab) == len(ba) == len(PROMPTS)
    assert all(0.0 < x < 1.0 for x in ab + ba)
    assert any(abs(x - y) > 1e-6 for x, y in zip(ab, ba, strict=True))  # swapping A and B changes the judge's input
    assert j.compare(PROMPTS[:1], a[:1], b[:1])[0] == pytest.approx(ab[0], abs=1e-5)  # batch-independent
    out = j.compare(PROMPTS[:2], [a[0], _conv(("assistant", ""))], b[:2])
    assert out[0] == pytest.approx(ab[0], abs=1e-5) and math.isnan(out[1])
    assert "[RESPONSE A]" in j.describe()["template"] and j.describe()["answers"] == ["A", "B"]


def test_judge_p_a_equals_a_plain_forward(tiny_model_ref, tok):
    """P(A) is the softmax over the next-token logits of "A" and "B" after the rendered judge prompt, computed
    here by an unpacked forward of the plain causal LM."""
    from preference_data.records import Message
    from preference_data.tokenize import tokenize_prompts
    from reward_models.model_scorers import judge_message

    j = load_scorer("judge", model=tiny_model_ref, dtype="float32")
    a, b = RESPONSES, RESPONSES[1:] + RESPONSES[:1]
    got = j.compare(PROMPTS, a, b)
    ids_ab = [tok.encode(x, add_special_tokens=False)[0] for x in ("A", "B")]
    want = []
    with torch.no_grad():
        for p, ra, rb in zip(PROMPTS, a, b, strict=True):
            (ids,) = tokenize_prompts([[Message("user", judge_message(p, ra, rb))]], tok)
            logits = j.model(input_ids=torch.tensor([ids])).logits[0, -1, ids_ab]  # (2,): A, B
            want.append(torch.softmax(logits.float(), -1)[0].item())
    assert got == pytest.approx(want, abs=1e-5)
    assert max(want) - min(want) > 1e-4  # the prompts give different probabilities


# ---------------------------------------------------------------------------------------------------------
# grader
# ---------------------------------------------------------------------------------------------------------


def test_grader_reproduces_the_gold_scores_of_suite_pairs(tmp_path):
    from preference_data.suite import build_suite, write_suite

    suite = build_suite(n_per_family=3, seed=0)
    pairs = suite.pairs
    g = load_scorer("grader")
    got_c = g.score([p.prompt for p in pairs], [p.chosen for p in pairs])
    got_r = g.score([p.prompt for p in pairs], [p.rejected for p in pairs])
    assert got_c == pytest.approx([p.attributes["gold_chosen"]["overall"] for p in pairs], abs=1e-4)
    assert got_r == pytest.approx([p.attributes["gold_rejected"]["overall"] for p in pairs], abs=1e-4)
    assert math.isnan(g.score([_conv(("user", "not a suite prompt"))], [RESPONSES[0]])[0])

    write_suite(suite, str(tmp_path / "suite"))
    from_files = load_scorer("grader", tasks=str(tmp_path / "suite"), objective="correctness")
    got = from_files.score([pairs[0].prompt], [pairs[0].rejected])
    assert got[0] == pytest.approx(pairs[0].attributes["gold_rejected"]["correctness"], abs=1e-4)
    assert from_files.describe()["n_tasks"] == len(suite.tasks)
    with pytest.raises(UserError, match="did you mean 'safety'"):
        load_scorer("grader", objective="safty")


# ---------------------------------------------------------------------------------------------------------
# the real default model
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_real_model_implicit_and_judge_smoke():
    """SmolLM2-135M-Instruct: a fitting answer is more likely than word salad (reference-free mean log-prob),
    and the judge returns probabilities for both orders."""
    real = "builtin:smollm2-135m-instruct"
    prompts = [_conv(("user", "What is the capital of France?"))] * 2
    good = _conv(("assistant", "The capital of France is Paris."))
    salad = _conv(("assistant", "Purple quantum banana sofa."))
    s = load_scorer("implicit", model=real, reference_free=True, normalization="mean", beta=1.0)
    r_good, r_salad = s.score(prompts, [good, salad])
    assert r_good > r_salad
    j = load_scorer("judge", model=real)
    p = j.compare(prompts, [good, salad], [salad, good])
    assert all(0.0 < x < 1.0 for x in p)


def test_answers_to_one_prompt_share_its_encoding_and_score_as_alone(rm_dir, scalar, monkeypatch):
    """Five answers to one prompt and a pair's two: the prompt is encoded once per segment of up to
    `SHARED_RESPONSES` answers (4 + 1 here) and once for the pair, and every score equals the item scored in a call
    of its own."""
    import preference_data.packing as packing
    from reward_models.batched import SHARED_RESPONSES

    assert SHARED_RESPONSES == 4
    extra = [
        _conv(("assistant", "A much longer answer. " * 6)),
        _conv(("assistant", "No.")),
        _conv(("assistant", "Yes")),
    ]
    prompts = [PROMPTS[0]] * 5 + [PROMPTS[1]] * 2
    responses = [RESPONSES[0], RESPONSES[1], *extra, *RESPONSES[:2]]
    alone = [scalar.score([p], [r])[0] for p, r in zip(prompts, responses, strict=True)]
    seen: list[int] = []
    original = packing.pack
    monkeypatch.setattr(packing, "pack", lambda p, rs, *a, **k: seen.append(len(rs[0])) or original(p, rs, *a, **k))
    together = scalar.score(prompts, responses)
    assert together == pytest.approx(alone, abs=1e-4)
    assert sorted(seen) == [1, 2, 4]  # four answers behind one prompt, the fifth alone, the pair
    assert len({round(x, 3) for x in together}) >= 5  # not vacuous


def test_a_chat_model_is_refused_as_a_scalar_reward_model(tiny_model_ref, tmp_path):
    """A causal LM has no reward head: transformers would draw one at random, and every score with it. The scalar
    scorer refuses it, naming what to give instead; an RM saved whole or as a LoRA adapter with its head is taken."""
    from peft import LoraConfig, get_peft_model

    from prefalign.models.hub import load_seq_cls
    from reward_models.checkpoint import head_of

    with pytest.raises(UserError, match="not a reward model: it has no trained reward head.*align rm train"):
        load_scorer("scalar", model=tiny_model_ref, dtype="float32")
    adapter = get_peft_model(
        load_seq_cls(tiny_model_ref, dtype="float32"), LoraConfig(r=2, task_type="SEQ_CLS", target_modules=["q_proj"])
    )
    adapter.save_pretrained(str(tmp_path / "adapter"))
    assert head_of(tmp_path / "adapter") is not None
    assert "score" in str(head_of(tmp_path / "adapter"))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_an_rm_saved_as_its_adapter_scores_bit_for_bit_as_saved_merged(tiny_model_ref, tmp_path, dtype):
    """A LoRA RM trained on a bf16 base (the quickstart's) saved as its adapter (`save: adapter`) loads as exactly
    the weights the same model saved merged in fp32 holds, parameters and buffers, so every score is the same in fp32
    and in bf16; the adapter directory is a fraction of the whole model's size. The same weights give the same scores
    to the last bit where the CPU's kernels do not depend on where the weights lie in memory; an AVX2-only CPU's fp32
    matmul does (the merged file's tensors are read at the offsets the file gives them, the merged adapter's are
    fresh allocations) and moves the last bits, so the scores are compared to 1e-6."""
    from peft import LoraConfig, get_peft_model

    from prefalign.models.hub import ADAPTER_BASE_FILE, load_seq_cls, load_tokenizer
    from reward_models.checkpoint import RewardStats, load_rm, save_rm

    # the checkpoint's fp32 weights are not all bf16 values: a base loaded in fp32 would not be the trained one
    assert any(
        not torch.equal(p, p.bfloat16().float()) for p in load_seq_cls(tiny_model_ref, dtype="float32").parameters()
    )
    base = load_seq_cls(tiny_model_ref, dtype="bfloat16")  # the trained base's storage, as a bf16 LoRA run has it
    model = get_peft_model(
        base,
        LoraConfig(
            r=4, lora_alpha=8, task_type="SEQ_CLS", target_modules=["q_proj", "v_proj"], modules_to_save=["score"]
        ),
    )
    torch.manual_seed(0)
    for name, p in model.named_parameters():  # a trained adapter and head: B and the score away from their start
        if "lora_B" in name or "modules_to_save" in name:
            with torch.no_grad():
                p.copy_(torch.randn_like(p) * 0.05)
    tokenizer = load_tokenizer(tiny_model_ref)
    stats = RewardStats(0.0, 1.0, 4, 1, "test")
    merged = save_rm(model, tokenizer, tmp_path / "merged", stats, dtype=torch.float32)
    adapter = save_rm(model, tokenizer, tmp_path / "adapter", stats, merge=False)
    assert (adapter / ADAPTER_BASE_FILE).exists() and not (adapter / "model.safetensors").exists()
    assert "PeftModel.from_pretrained" in (adapter / "README.md").read_text()

    whole, _, _ = load_rm(str(merged), dtype=dtype)
    small, _, _ = load_rm(str(adapter), dtype=dtype)
    a, b = whole.state_dict(), small.state_dict()
    assert sorted(a) == sorted(b)
    assert [k for k in a if a[k].dtype != b[k].dtype or not torch.equal(a[k], b[k])] == []
    assert small.config.pad_token_id == whole.config.pad_token_id
    scores = [load_scorer("scalar", model=str(d), dtype=dtype, normalize=False) for d in (merged, adapter)]
    prompts = [_conv(("user", "What is 2 + 2?")), _conv(("user", "Name a colour."))]
    responses = [_conv(("assistant", "4")), _conv(("assistant", "Blue, as the sky."))]
    got = [s.score(prompts, responses) for s in scores]
    assert got[0] == pytest.approx(got[1], rel=0, abs=1e-6) and len(set(got[0])) == 2
    # without the record the base is read in fp32 from its checkpoint, not as it trained: other weights
    (adapter / ADAPTER_BASE_FILE).unlink()
    c = load_rm(str(adapter), dtype="float32")[0].state_dict()
    assert any(not torch.equal(a[k].float(), c[k].float()) for k in a)
