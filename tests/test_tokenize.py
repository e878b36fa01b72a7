"""Tokenization on the real SmolLM2 tokenizer: boundaries, BOS/EOS checks, length policies, fallback."""

from __future__ import annotations

import copy
import json

import pytest

from prefalign.errors import UserError
from prefalign.models.hub import load_tokenizer
from preference_data.records import Message, PreferencePair
from preference_data.tokenize import (
    LENGTH_POLICIES,
    REASONS,
    TokenizeReport,
    render_pair,
    tokenize_pairs,
    tokenize_prompts,
    tokenize_single,
)

BOS, EOS, NEWLINE = 1, 2, 198  # <|im_start|>, <|im_end|>, "\n" in the SmolLM2 vocabulary

CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
    "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("builtin:smollm2-135m-instruct")


def with_template(tok, template):
    t = copy.deepcopy(tok)
    t.chat_template = template
    return t


def u(text):
    return Message("user", text)


def a(text):
    return Message("assistant", text)


def s(text):
    return Message("system", text)


def template_ids(tok, conv, generation_prompt=False):
    out = tok.apply_chat_template([m.to_dict() for m in conv], tokenize=True, add_generation_prompt=generation_prompt)
    return list(out["input_ids"] if hasattr(out, "keys") else out)


PROMPTS = {
    "single_turn": [u("What is 2+2?")],
    "single_turn_system": [s("Answer in one word."), u("Capital of France?")],
    "multi_turn": [u("Hi!"), a("Hello, how can I help?"), u("Name a prime number.")],
    "multi_turn_system": [s("Be brief."), u("Hi!"), a("Hello."), u("Name a colour.\nJust one.")],
}


@pytest.mark.parametrize("name", list(PROMPTS))
def test_boundary_matches_full_template_rendering(tok, name):
    prompt = PROMPTS[name]
    chosen, rejected = "Seven — it is prime.", "I won't answer that 😀\n\n  sorry"
    pair = PreferencePair(prompt, [a(chosen)], [a(rejected)])
    report = TokenizeReport()
    p, c, r = render_pair(tok, pair, report)

    # prompt ids are the generation-prompt rendering; prompt + response is the full rendering up to
    # its closing EOS (the template's trailing "\n" is the only dropped token)
    assert p == template_ids(tok, prompt, generation_prompt=True)
    assert p + c + [NEWLINE] == template_ids(tok, prompt + [a(chosen)])
    assert p + r + [NEWLINE] == template_ids(tok, prompt + [a(rejected)])
    assert tok.decode(c) == chosen + "<|im_end|>"
    assert tok.decode(r) == rejected + "<|im_end|>"
    assert p[0] == BOS and p[1] != BOS  # exactly one BOS at the start
    assert c[-1] == EOS and r[-1] == EOS and EOS not in c[:-1]
    assert report.counts == {}
    has_system = prompt[0].role == "system"
    assert tok.decode(p).startswith(
        f"<|im_start|>system\n{prompt[0].content}"
        if has_system
        else "<|im_start|>system\nYou are a helpful AI assistant named SmolLM"
    )


def test_multi_message_response_is_all_response(tok):
    prompt = [u("Ask me a question back.")]
    chosen = [a("What is your name?"), u("Ada."), a("Nice to meet you, Ada.")]
    p, c, r = render_pair(tok, PreferencePair(prompt, chosen, [a("No.")]))
    assert p + c + [NEWLINE] == template_ids(tok, prompt + chosen)
    assert tok.decode(c) == (
        "What is your name?<|im_end|>\n<|im_start|>user\nAda.<|im_end|>\n"
        "<|im_start|>assistant\nNice to meet you, Ada.<|im_end|>"
    )


def test_batched_pairs_equal_per_pair_rendering(tok):
    pairs = [
        PreferencePair(
            PROMPTS[n],
            [a(f"good {i} naïve café 日本")],
            [a(f"bad {i}")],
            margin=float(i),
            attributes={"family": n, "corruption": "wrong_value"},
            source="unit",
        )
        for i, n in enumerate(PROMPTS)
    ]
    out, report = tokenize_pairs(pairs, tok, max_length=None, policy="raise")
    assert [t.id for t in out] == [p.id for p in pairs]
    for t, pair in zip(out, pairs, strict=True):
        assert (t.prompt_ids, t.chosen_ids, t.rejected_ids) == render_pair(tok, pair)
        assert t.prompt_ids + t.chosen_ids + [NEWLINE] == template_ids(tok, pair.prompt + pair.chosen)
        assert (t.margin, t.source, t.attributes) == (pair.margin, "unit", pair.attributes)
    assert report.n_in == report.n_out == 4 and report.counts == {}


def test_response_starting_with_spaces_is_a_counted_boundary_mismatch(tok):
    # "\n" (end of the generation prompt) + "  No" tokenizes as ["\n ", " No"]: the prompt alone is not a
    # token prefix of the full rendering, so the pair's shared boundary moves one token to the left
    pair = PreferencePair([u("Sure?")], [a("Yes.")], [a("  No.")], id="spaces-1")
    report = TokenizeReport()
    p, c, r = render_pair(tok, pair, report)
    gen = template_ids(tok, pair.prompt, generation_prompt=True)
    assert report.counts == {"boundary_mismatch": 1} and report.examples["boundary_mismatch"] == ["spaces-1"]
    assert p == gen[:-1] and gen[-1] == NEWLINE
    assert p + c + [NEWLINE] == template_ids(tok, pair.prompt + pair.chosen)
    assert p + r + [NEWLINE] == template_ids(tok, pair.prompt + pair.rejected)
    assert tok.decode(c) == "\nYes.<|im_end|>" and tok.decode(r) == "\n  No.<|im_end|>"


def test_boundary_mismatch_falls_back_to_common_prefix(tok):
    # a template whose generation prompt opens a thinking block that the in-context turn does not have
    think = CHATML.replace("'<|im_start|>assistant\n'", "'<|im_start|>assistant\n<think>\n'")
    t = with_template(tok, think)
    pair = PreferencePair([u("2+2?")], [a("4")], [a("5")], id="think-1")
    report = TokenizeReport()
    p, c, r = render_pair(t, pair, report)
    full_c = template_ids(t, pair.prompt + pair.chosen)
    assert report.counts == {"boundary_mismatch": 1} and report.examples["boundary_mismatch"] == ["think-1"]
    assert p == full_c[: len(p)] and p + c + [NEWLINE] == full_c
    assert p == template_ids(t, pair.prompt, generation_prompt=True)[: len(p)]
    assert tok.decode(p).endswith("<|im_start|>assistant\n") and tok.decode(c) == "4<|im_end|>"


def test_double_bos_is_repaired_and_counted(tok):
    t = with_template(tok, "{{ bos_token }}" + CHATML)  # bos_token is also the ChatML turn marker
    pair = PreferencePair([u("hi")], [a("hello")], [a("go away")], id="bos-1")
    assert template_ids(t, pair.prompt)[:2] == [BOS, BOS]
    out, report = tokenize_pairs([pair], t, max_length=None, policy="drop")
    assert report.counts == {"double_bos": 1} and report.examples["double_bos"] == ["bos-1"]
    assert out[0].prompt_ids[0] == BOS and out[0].prompt_ids[1] != BOS
    assert tok.decode(out[0].chosen_ids) == "hello<|im_end|>"
    assert tokenize_prompts([pair.prompt], t)[0][:2] != [BOS, BOS]


def test_missing_eos_is_appended_and_counted(tok):
    no_eos = (
        "{% for m in messages %}{{ m['role'] + ': ' + m['content'] + '\n' }}{% endfor %}"
        "{% if add_generation_prompt %}{{ 'assistant:' }}{% endif %}"
    )
    t = with_template(tok, no_eos)
    out, report = tokenize_pairs([PreferencePair([u("hi")], [a("hello")], [a("bye")], id="eos-1")], t, None, "drop")
    assert report.counts == {"missing_eos": 1} and report.examples["missing_eos"] == ["eos-1"]
    assert out[0].chosen_ids[-1] == EOS and out[0].rejected_ids[-1] == EOS
    assert tok.decode(out[0].chosen_ids) == " hello\n<|im_end|>"


def _long_pair(tok, n_words=60, id="long-1"):
    prompt = [s("You are terse."), u(" ".join(f"word{i}" for i in range(n_words)) + ". Summarise.")]
    return PreferencePair(prompt, [a("Words.")], [a("A list of many numbered words.")], source="unit-src", id=id)


def test_drop_policy_counts_too_long(tok):
    short = PreferencePair([u("hi")], [a("hello")], [a("bye")], id="short")
    long = _long_pair(tok)
    p, c, r = render_pair(tok, long)
    limit = len(p) + max(len(c), len(r)) - 1
    out, report = tokenize_pairs([short, long], tok, max_length=limit, policy="drop")
    assert [t.id for t in out] == ["short"]
    assert report.counts == {"too_long": 1} and report.examples["too_long"] == ["long-1"]
    assert (report.n_in, report.n_out, report.n_dropped) == (2, 1, 1)
    text = "\n".join(report.lines())
    assert "dropped: 1" in text and "too_long: 1 (ids long-1)" in text and "kept with changes: none" in text
    assert report.lengths["total"]["max"] == limit + 1  # lengths describe the renderings before the policy


def test_truncate_prompt_left_keeps_the_end_of_the_prompt(tok):
    long = _long_pair(tok)
    p, c, r = render_pair(tok, long)
    longest = max(len(c), len(r))
    limit = len(p) + longest - 25
    out, report = tokenize_pairs([long], tok, max_length=limit, policy="truncate_prompt_left")
    (t,) = out
    assert report.counts == {"prompt_truncated": 1} and report.examples["prompt_truncated"] == ["long-1"]
    assert t.total_length == limit
    assert t.prompt_ids == p[25:]  # the oldest 25 tokens are gone (left truncation)
    assert tok.decode(t.prompt_ids).endswith("Summarise.<|im_end|>\n<|im_start|>assistant\n")
    assert (t.chosen_ids, t.rejected_ids) == (c, r)  # responses untouched, still ending with EOS
    assert tok.decode(t.chosen_ids) == "Words.<|im_end|>"


def test_truncate_prompt_left_drops_when_response_alone_does_not_fit(tok):
    long = _long_pair(tok)
    _, c, r = render_pair(tok, long)
    longest = max(len(c), len(r))
    out, report = tokenize_pairs([long], tok, max_length=longest, policy="truncate_prompt_left")
    assert out == [] and report.counts == {"response_too_long": 1} and report.n_dropped == 1
    out, report = tokenize_pairs([long], tok, max_length=longest + 1, policy="truncate_prompt_left")
    assert len(out[0].prompt_ids) == 1 and report.counts == {"prompt_truncated": 1}


def test_raise_policy_names_the_record(tok):
    pairs = [PreferencePair([u("hi")], [a("hello")], [a("bye")]), _long_pair(tok, id="too-long-7")]
    with pytest.raises(UserError) as e:
        tokenize_pairs(pairs, tok, max_length=40, policy="raise")
    msg = str(e.value)
    for part in ("too-long-7", "unit-src", "row 1", "max_length 40", "'drop'", "'truncate_prompt_left'"):
        assert part in msg
    out, report = tokenize_pairs(pairs[:1], tok, max_length=400, policy="raise")
    assert len(out) == 1 and report.counts == {}


def test_unknown_policy_and_bad_max_length_are_user_errors(tok):
    pair = PreferencePair([u("hi")], [a("hello")], [a("bye")])
    with pytest.raises(UserError, match="did you mean 'truncate_prompt_left'"):
        tokenize_pairs([pair], tok, 64, policy="truncate_prompt")  # type: ignore[arg-type]
    with pytest.raises(UserError, match="max_length"):
        tokenize_pairs([pair], tok, 0, "drop")
    assert set(LENGTH_POLICIES) == {"drop", "truncate_prompt_left", "raise"}


def test_plain_fallback_without_chat_template(tok):
    t = with_template(tok, None)
    pair = PreferencePair([s("Be kind."), u("Hi"), a("Hello."), u("2+2?")], [a("4")], [a("5"), u("sure?"), a("yes")])
    p, c, r = render_pair(t, pair)
    assert tok.decode(p) == "System: Be kind.\n\nUser: Hi\n\nAssistant: Hello.\n\nUser: 2+2?\n\nAssistant:"
    assert tok.decode(c) == " 4<|im_end|>"
    assert tok.decode(r) == " 5\n\nUser: sure?\n\nAssistant: yes<|im_end|>"
    assert BOS not in p  # this tokenizer adds no BOS to plain text
    assert tokenize_prompts([pair.prompt], t) == [p]

    t.add_bos_token = True  # a tokenizer that does add BOS gets exactly one
    p2, c2, _ = render_pair(t, pair)
    assert p2 == [BOS] + p and c2 == c


def test_report_percentiles_and_json(tok):
    pairs = [PreferencePair([u("q")], [a(" ".join(["yes"] * (k + 1)))], [a("no")], id=f"p{k}") for k in range(10)]
    out, report = tokenize_pairs(pairs, tok, max_length=None, policy="raise")
    lens = sorted(len(t.chosen_ids) for t in out)
    # nearest rank on 10 values: p50 -> 5th smallest, p90 -> 9th, p99 -> 10th
    assert report.lengths["chosen"] == {"p50": lens[4], "p90": lens[8], "p99": lens[9], "max": lens[9]}
    assert report.lengths["rejected"]["p50"] == report.lengths["rejected"]["max"] == len(out[0].rejected_ids)
    assert report.lengths["prompt"]["max"] == len(out[0].prompt_ids)
    d = json.loads(json.dumps(report.to_dict()))
    assert d["n_in"] == d["n_out"] == 10 and d["counts"] == {} and d["lengths"]["chosen"]["max"] == lens[9]
    assert "tokenized 10/10 records" in report.summary()
    assert set(REASONS) >= {
        "too_long",
        "prompt_truncated",
        "response_too_long",
        "boundary_mismatch",
        "double_bos",
        "missing_eos",
    }


def test_tokenize_prompts_for_generation(tok):
    prompts = [PROMPTS["single_turn"], PROMPTS["multi_turn_system"]]
    ids = tokenize_prompts(prompts, tok)
    assert ids == [template_ids(tok, p, generation_prompt=True) for p in prompts]
    report = TokenizeReport()
    short = tokenize_prompts(prompts, tok, max_prompt_length=12, report=report)
    assert short == [x[-12:] for x in ids] and report.counts == {"prompt_truncated": 2}
    with pytest.raises(UserError, match="prompt row 0"):
        tokenize_prompts(prompts, tok, max_prompt_length=12, policy="raise")
    with pytest.raises(UserError, match="unknown length policy 'drop'"):
        tokenize_prompts(prompts, tok, 12, policy="drop")


def test_tokenize_single_reuses_the_pair_boundary(tok):
    prompt = PROMPTS["multi_turn"]
    pair = PreferencePair(prompt, [a("Seven.")], [a("Nine.")])
    p, c, _ = render_pair(tok, pair)
    assert tokenize_single(tok, prompt, "Seven.") == (p, c)
    assert tokenize_single(tok, prompt, [a("Seven.")]) == (p, c)
