"""The list tools of a judge's suite work (`preference_data.suite.work_tools`, the grm scorer's `tools: lists`)."""

from __future__ import annotations

import pytest

from preference_data.suite import build_suite
from preference_data.suite.checks import TaskView, work
from preference_data.suite.work_reading import read_work
from preference_data.suite.work_tools import KTH_STOP, list_tools
from reward_models.generative.scorers import judge_tools

TOOLS = list_tools()


@pytest.mark.parametrize("seed", [0, 1])
def test_each_list_tool_writes_what_the_warm_up_work_writes_after_its_call(seed):
    """Every list task's work cut right after each tool's call: the tool writes the rest of that sentence as the
    warm-up's work has it, so a judge trained on these works calls the tools without training for them; the work
    read back claims the task's answer."""
    called = 0
    for t in build_suite(120, seed=seed, dev_fraction=0.25).tasks:
        if t.family != "list_ops":
            continue
        text = " ".join(work(TaskView(t.family, t.params, t.prompt[-1].content)))
        for stop, call in TOOLS.items():
            at = text.find(stop)
            if at < 0:
                continue
            answer = call(text[:at])
            assert answer and text[at + len(stop) :].startswith(answer), (t.id, stop, answer)
            called += 1
        claims = read_work("Work: " + text)
        assert claims is not None and list(claims.expected or (claims.answer,)) == t.params["expected"]
    assert called > 100  # every task's work calls one tool


def test_the_tools_apply_the_operation_to_the_items_the_judge_copied():
    """The result is as right as the judge's own copy and the operation it names: nothing reads the task."""
    items = "Work: Items: lima, delhi, lima, rome (4 items). Repeated: lima. "
    assert TOOLS["Without repeats:"](items) == " lima, delhi, rome (3 items)."
    assert TOOLS["In reverse order:"](items) == " rome, lima, delhi, lima (4 items)."
    assert TOOLS["In alphabetical order:"](items) == " delhi, lima, lima, rome (4 items)."
    numbers = "Items: 57, 47, 3, 98 (5 items). "  # a miscount does not matter: the items do
    assert TOOLS["From smallest to largest:"](numbers) == " 3, 47, 57, 98 (4 items)."
    assert TOOLS["From largest to smallest:"](numbers) == " 98, 57, 47, 3 (4 items)."
    copied_wrong = "Items: 57, 74, 3 (3 items). "
    assert TOOLS["From smallest to largest:"](copied_wrong) == " 3, 57, 74 (3 items)."
    later = "Items: a, b (2 items). Items: c, d, e (3 items). "  # the last list the judge wrote
    assert TOOLS["In reverse order:"](later) == " e, d, c (3 items)."
    assert TOOLS[KTH_STOP]("Items: red, violet, purple (3 items). Item 2 (the second") == " violet."
    assert TOOLS[KTH_STOP]("Items: red, violet (2 items). Item 2 (the fifth") == " violet."  # k, not the word


@pytest.mark.parametrize(
    ("stop", "text"),
    [
        ("In reverse order:", "Work: In reverse order"),  # no items written before
        ("From smallest to largest:", "Items: 57, fig, 3 (3 items). "),  # a numeric sort of a word
        (KTH_STOP, "Items: red, violet (2 items). Item 5 (the fifth"),  # past the end
        (KTH_STOP, "Items: red, violet (2 items). So the answer (the first"),  # not the k-th sentence
        (KTH_STOP, "Item 1 (the first"),  # no items
    ],
)
def test_a_tool_with_nothing_to_compute_answers_nothing(stop, text):
    assert TOOLS[stop](text) is None


def test_the_judges_tool_kits():
    """`tools:` names kits ('+' joins them); each stop string calls one tool."""
    calc, lists, both = (judge_tools(n) for n in ("calculator", "lists", "calculator+lists"))
    assert judge_tools("none") == [] and [t.stop for t in calc] == ["="]
    assert sorted(t.stop for t in lists) == sorted(TOOLS) and len(TOOLS) == 6
    assert [t.stop for t in both] == ["=", *[t.stop for t in lists]]
    assert all(t.description for t in both)
