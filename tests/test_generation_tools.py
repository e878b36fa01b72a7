"""Tools a model calls while it writes (`prefalign.generation.tools`): the calculator's arithmetic, and the loop
that stops where the model asks, writes the tool's answer and goes on, on a tiny random Llama with the real SmolLM2
tokenizer (fp32)."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

import pytest
import torch

from prefalign.generation import SamplingParams, make_engine, render_prompts
from prefalign.generation.tools import TOOLS, Tool, calculator, evaluate, generate_with_tools


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("Add 5: 30 + 5 ", " 35"),
        ("Add 4 x 3 ", " 12"),
        ("Add 4 x 3 = 12: 30 + 12 ", " 42"),  # only the expression right before the '=' is read
        ("Share among 4: 28 / 4 ", " 7"),
        ("7 / 2", " 3.5"),
        ("2 + 3 x 4 ", " 14"),  # x before +
        ("10 - 2 - 3", " 5"),  # left to right
        ("5 - 9", " -4"),
        ("3 - -2 ", " 5"),  # a minus where a number is due is its sign
        ("-4 x -2", " 8"),
        ("Start: 30. 30 - 5", " 25"),
        ("2 / 3", " 0.666667"),
        ("x ", None),  # no expression: nothing written, the model goes on
        ("Add 4 ", None),  # one number is not a computation
        ("1 / 0", None),
        ("v1.2 + 3 ", None),  # part of a word
        ("3 + + 4", None),
        ("1" * 31 + " + 1", None),  # longer than MAX_DIGITS
    ],
)
def test_calculator_answers_the_expression_before_the_equals_sign(text, answer):
    assert calculator(text) == answer


def test_evaluate_is_exact():
    assert evaluate("1 / 3 + 1 / 6") == Fraction(1, 2)
    assert evaluate("0.1 + 0.2") == Fraction(3, 10)
    assert evaluate("12 x 12 - 44 / 4") == 133


@pytest.fixture(scope="module")
def engine(tiny_model_ref):
    from transformers import AutoModelForCausalLM

    from prefalign.models.hub import load_tokenizer, tiny_llama_config

    tok = load_tokenizer(tiny_model_ref)
    cfg = tiny_llama_config(tok, max_position_embeddings=512, initializer_range=0.5)
    torch.manual_seed(0)
    return make_engine(AutoModelForCausalLM.from_config(cfg).eval(), tok)


CONV = [[{"role": "user", "content": "What is 2 + 2?"}], [{"role": "user", "content": "Name three rivers."}]]


def test_without_tools_it_is_one_plain_generation(engine):
    ids = render_prompts(engine.tokenizer, CONV)
    params = [SamplingParams(n=2, temperature=1.0, max_new_tokens=20, seed=4)] * 2
    texts, generated = generate_with_tools(engine, ids, params, [])
    plain = engine.generate(ids, params)
    assert texts == [[c.text for c in r.completions] for r in plain.outputs]
    assert generated == plain.timings.generated_tokens


def test_the_model_goes_on_after_each_answer_within_its_budget(engine):
    """A tool asked for by a piece of the model's own free text: the text keeps everything the model wrote up to
    the stop string, then the stop string and the tool's answer, then what the model writes next; every stop
    string it writes is followed by an answer; the text, answers included, fits `max_new_tokens`."""
    tok = engine.tokenizer
    ids = render_prompts(tok, CONV)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=40)
    free = engine.generate(ids, greedy).outputs[0].completions[0].text
    stop = free[len(free) // 3 : len(free) // 3 + 2]
    assert stop.strip() and len(free) > 20
    calls: list[str] = []

    def answer(text: str) -> str:
        calls.append(text)
        return "[ok]"

    texts, generated = generate_with_tools(engine, ids[:1], [greedy], [Tool("test", stop, answer)])
    text = texts[0][0]
    head = free[: free.find(stop)]
    assert calls[0] == head and text.startswith(head + stop + "[ok]")
    assert text.count(stop + "[ok]") == len(calls) == text.count(stop)
    assert len(tok.encode(text, add_special_tokens=False)) <= greedy.max_new_tokens
    assert 0 < generated <= greedy.max_new_tokens


def _whole_word_stop(tok, tokens: list[int]) -> str:
    """A word the model wrote as one token, after text that re-encodes to the model's own tokens: a stop string
    whose answer the engine can feed to the row."""
    for k in range(len(tokens) // 3, len(tokens) - 8):
        word = tok.decode(tokens[k : k + 1])
        head = tok.decode(tokens[: k + 1])
        if word[:1] == " " and word[1:].isalpha() and head.count(word) == 1:
            if tok.encode(head, add_special_tokens=False) == tokens[: k + 1]:
                return word
    raise AssertionError("no whole-word token in the free text")


def test_the_engine_feeds_the_answer_to_the_row_as_the_loop_would_write_it(engine):
    """Greedy: the engine continuing a tool call on the row (its answer's tokens fed, log-prob 0) writes the text the
    loop writes by re-encoding and generating again, counts the same generated tokens, and calls the tool once per
    call."""
    tok = engine.tokenizer
    ids = render_prompts(tok, CONV)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=40)
    free = engine.generate(ids[:1], greedy).outputs[0].completions[0]
    stop = _whole_word_stop(tok, free.token_ids)
    calls: list[str] = []

    def answer(text: str) -> str:
        calls.append(text)
        return " 42"

    tool = Tool("test", stop, answer)
    fed = engine.generate(ids[:1], replace(greedy, stop=(stop,)), tools=[tool]).outputs[0].completions[0]
    head = free.text[: free.text.find(stop)] + stop + " 42"
    n = len(tok.encode(head, add_special_tokens=False))
    assert fed.text.startswith(head) and len(fed.token_ids) > n  # it went on after the answer, in one call
    assert tok.decode(fed.token_ids[:n]) == head and fed.logprobs[:n] == [0.0] * n
    calls.clear()
    texts, generated = generate_with_tools(engine, ids, [greedy, greedy], [tool])
    in_engine = list(calls)
    calls.clear()
    engine.continues_tools = False  # the same engine, each call continued by the loop
    try:
        loop_texts, loop_generated = generate_with_tools(engine, ids, [greedy, greedy], [tool])
    finally:
        engine.continues_tools = True
    assert texts == loop_texts and generated == loop_generated
    assert in_engine == calls and len(set(calls)) == len(calls) >= 1


def test_samples_continue_with_their_own_seeds_and_rerun_the_same(engine):
    ids = render_prompts(engine.tokenizer, CONV[:1])
    params = [SamplingParams(n=3, temperature=1.0, max_new_tokens=30, seed=1)]
    tool = Tool("every space", " ", lambda text: "")  # the model stops at each space and goes on unchanged
    first, _ = generate_with_tools(engine, ids, params, [tool])
    again, _ = generate_with_tools(engine, ids, params, [tool])
    assert first == again and len(set(first[0])) == 3


def test_the_tools_table_names_a_stop_and_a_call():
    for name, tool in TOOLS.items():
        assert tool.stop and callable(tool.call) and tool.description, name
