"""Tools a model calls while it writes: the engine stops where the model asks, the tool's answer is appended, and
the model goes on from there.

    texts, tokens = generate_with_tools(engine, prompt_ids, params, [TOOLS["calculator"]])

A tool is asked for by a stop string the model writes (`Tool.stop`, e.g. the calculator's `=`). Where a completion
writes one, the tool reads the text written so far (up to the stop string) and returns what to write after it, or
None (it has nothing to say: the stop string stays and the model goes on). The completion goes on from its prompt and
its text so far, the tool's answer included, re-encoded as one piece (how the model was trained on such text). A
completion's budget (`max_new_tokens`) counts its own tokens and the tools' answers. This is the loop of
tool-integrated judges (a judge that computes with a calculator instead of in its weights): a small judge's work is
right where it writes the operation right, not only where it also adds right.

Where the engine continues tool calls (`GenerationEngine.continues_tools`: the transformers engine), the answer's
tokens are fed to the completion's own row as it decodes, on its cache: nothing is read twice, and a sample goes on
with its own random stream. A completion whose re-encoded text does not begin with its own tokens (a token that
spelled the stop string and more), and every completion of an engine without it, ends at the stop string; each
further round continues those from their re-encoded text, sample j of a prompt with seed `params.seed + j`, so
samples stay distinct and every run is the same.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction

from .api import GenerationEngine, SamplingParams, Tool

_NUMBER = r"-?\d+(?:\.\d+)?"
_OPS: dict[str, Callable[[Fraction, Fraction], Fraction]] = {
    "+": operator.add,
    "-": operator.sub,
    "x": operator.mul,
    "*": operator.mul,
    "×": operator.mul,
    "/": operator.truediv,
    "÷": operator.truediv,
}
_EXPRESSION = re.compile(rf"(?<![\w.])({_NUMBER}(?:\s*[-+x*×/÷]\s*{_NUMBER})+)\s*$")
_TOKEN = re.compile(r"\d+(?:\.\d+)?|[-+x*×/÷]")
MAX_DIGITS = 30
"""operands longer than this are not computed (the calculator answers nothing)"""


def evaluate(expression: str) -> Fraction | None:
    """The exact value of `a op b op c ...` (+, -, x, *, ×, /, ÷; x and / before + and -, left to right), or None
    when it divides by zero or an operand is longer than `MAX_DIGITS` digits."""
    values: list[Fraction] = []
    ops: list[str] = []
    sign = ""
    for t in _TOKEN.findall(expression):
        if t in _OPS and len(values) > len(ops):
            ops.append(t)
        elif t == "-" and not sign:
            sign = "-"  # a minus where a number is due is that number's sign
        elif t in _OPS or len(t.replace(".", "")) > MAX_DIGITS:
            return None
        else:
            values.append(Fraction(sign + t))
            sign = ""
    if len(values) != len(ops) + 1:
        return None
    terms, signs = [values[0]], []
    try:
        for op, v in zip(ops, values[1:], strict=True):
            if op in "+-":
                terms.append(v)
                signs.append(op)
            else:
                terms[-1] = _OPS[op](terms[-1], v)
    except ZeroDivisionError:
        return None
    total = terms[0]
    for op, v in zip(signs, terms[1:], strict=True):
        total = _OPS[op](total, v)
    return total


def written(value: Fraction) -> str:
    """A value as the calculator writes it: an integer without a point, else a decimal of at most 6 significant
    digits."""
    return str(value.numerator) if value.denominator == 1 else f"{float(value):.6g}"


def calculator(text: str) -> str | None:
    """After `... 30 + 9 =`: ` 39`; nothing when the text does not end in an arithmetic expression."""
    m = _EXPRESSION.search(text)
    if m is None:
        return None
    value = evaluate(m.group(1))
    return None if value is None else " " + written(value)


TOOLS: dict[str, Tool] = {
    "calculator": Tool(
        "arithmetic: where the model writes `a op b =` (+, -, x, /), the exact value is written after the `=`",
        "=",
        calculator,
    ),
}


@dataclass
class _Open:
    prompt: int
    sample: int
    text: str
    """written so far, the tools' answers included"""


def _answering_once(tool: Tool) -> Tool:
    """`tool`, answering each text once (later asks of the same text get the first answer)."""
    answers: dict[str, str | None] = {}

    def call(text: str) -> str | None:
        if text not in answers:
            answers[text] = tool.call(text)
        return answers[text]

    return replace(tool, call=call)


def generate_with_tools(
    engine: GenerationEngine, prompts: list[list[int]], params: list[SamplingParams], tools: Sequence[Tool]
) -> tuple[list[list[str]], int]:
    """`params[i].n` texts for each prompt (token ids), the model calling `tools` as it writes; and the tokens the
    model generated. Without tools this is one `engine.generate` call."""
    tools = [_answering_once(t) for t in tools]  # a call the engine made is not made again where it stopped there
    stops = {t.stop: t for t in tools}
    texts: list[list[str]] = [[""] * p.n for p in params]
    generated = 0
    params = [replace(p, stop=(*p.stop, *stops)) for p in params]  # every round stops where a tool is asked
    result = engine.generate(prompts, params, tools=tools if engine.continues_tools else ())
    rows = [(_Open(i, j, ""), c) for i, req in enumerate(result.outputs) for j, c in enumerate(req.completions)]
    generated += result.timings.generated_tokens
    while rows:
        asked: list[_Open] = []
        ids: list[list[int]] = []
        again: list[SamplingParams] = []
        for row, c in rows:
            row.text += c.text
            if c.finish_reason == "stop" and c.stop in stops:  # asked: the stop string and the tool's answer
                row.text += c.stop + (stops[c.stop].call(row.text) or "")
            texts[row.prompt][row.sample] = row.text
            if c.finish_reason != "stop" or c.stop not in stops:
                continue
            p = params[row.prompt]
            so_far = engine.tokenizer.encode(row.text, add_special_tokens=False)
            if len(so_far) >= p.max_new_tokens:
                continue
            asked.append(row)
            ids.append(prompts[row.prompt] + so_far)
            again.append(replace(p, n=1, max_new_tokens=p.max_new_tokens - len(so_far), seed=p.seed + row.sample))
        if not asked:
            break
        result = engine.generate(ids, again)
        generated += result.timings.generated_tokens
        rows = [(row, req.completions[0]) for row, req in zip(asked, result.outputs, strict=True)]
    return texts, generated
