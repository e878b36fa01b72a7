"""Checks written out (`preference_data/suite/checks.py`) and the judges' warm-up targets built from them: the work
gets each family's answer right from the prompt alone, a reading says what a response commits to, and the verdict of
every written trace is the gold grades' verdict, on every pair of two suites."""

from __future__ import annotations

import json
import re

import pytest

from preference_data.suite import build_suite
from preference_data.suite.checks import CHECKS, TaskView, read, work
from preference_data.suite.families import FAMILIES
from reward_models.generative.parse import parse_grm_scores, parse_think_answer
from reward_models.generative.traces import trace_examples
from reward_models.generative.warmup import grm_targets, think_target
from reward_models.judge_train import JudgeSection


@pytest.fixture(scope="module", params=[0, 1])
def suite(request):
    return build_suite(120, seed=request.param, dev_fraction=0.25, test_fraction=0.2)


def _views(suite) -> dict[str, TaskView]:
    return {t.id: TaskView(t.family, t.params, t.prompt[-1].content) for t in suite.tasks}


def test_every_family_has_a_check():
    assert set(CHECKS) == set(FAMILIES.names())


def test_every_written_trace_gives_the_gold_verdict_at_both_positions(suite):
    """A trace writer per family whose verdict matches the gold grades: chosen at A and at B, every pair."""
    views = _views(suite)
    seen = set()
    for p in suite.pairs:
        task = views[p.attributes["task_id"]]
        chosen, rejected = p.chosen[0].content, p.rejected[0].content
        for flip in (False, True):
            binary = think_target(task, chosen, rejected, flip, "binary")
            assert binary is not None, p.attributes
            assert parse_think_answer(binary, "binary").label == ("B" if flip else "A")
            multi = think_target(task, chosen, rejected, flip, "multiclass")
            assert multi is not None and parse_think_answer(multi, "multiclass").label == ("B" if flip else "A")
            # the reading of the chosen response sits at its own position
            a_line = next(line for line in binary.splitlines() if line.startswith("A: "))
            assert a_line == f"A: {read(task, rejected if flip else chosen)}"
        c, r = grm_targets(task, chosen, rejected)  # type: ignore[misc]
        sc, sr = parse_grm_scores(c, 1).scores, parse_grm_scores(r, 1).scores
        assert sc is not None and sr is not None and sc[0] >= sr[0]
        want_c = p.attributes["gold_chosen"]["overall"]
        assert (read(task, chosen).endswith("Verdict: right.")) == (want_c >= 0.999)
        seen.add(p.attributes["family"])
    assert seen == set(FAMILIES.names())


def test_the_arithmetic_work_computes_the_answer_step_by_step(suite):
    for t in suite.tasks:
        if t.family != "arithmetic":
            continue
        lines = work(TaskView(t.family, t.params, t.prompt[-1].content))
        assert lines[0] == f"Start: {t.params['start']}."
        assert f"So the answer is {t.params['answer']}." in lines
        for line in lines[1 : 1 + len(t.params["ops"])]:  # every equation written is true
            for left, op, right, result in re.findall(r"(\d+) ([-+x/]) (\d+) = (\d+)", line):
                a, b = int(left), int(right)
                assert {"+": a + b, "-": a - b, "x": a * b, "/": a // b}[op] == int(result), line


def test_the_extractive_work_quotes_the_passage_sentence_with_the_answer(suite):
    for t in suite.tasks:
        if t.family != "extractive_qa":
            continue
        quote = work(TaskView(t.family, t.params, t.prompt[-1].content))[0]
        sentence = quote.removeprefix('The passage says: "').removesuffix('"')
        assert sentence in t.prompt[-1].content and t.params["person"] in sentence
        assert t.params["gold"].lower() in sentence.lower()


def test_list_and_formatting_work_state_what_a_right_answer_gives(suite):
    for t in suite.tasks:
        view = TaskView(t.family, t.params, t.prompt[-1].content)
        if t.family == "list_ops":
            assert ", ".join(t.params["expected"]) in " ".join(work(view))
        if t.family == "formatting":
            rules = work(view)[1]
            for c in t.params["constraints"]:
                if c["kind"] == "bullets":
                    assert f"exactly {c['n']} bullet points" in rules
                if c["kind"] == "json_keys":
                    assert ", ".join(c["keys"]) in rules


def test_readings_name_what_the_wrong_answer_gives(suite):
    """A wrong value is read as the value it gives, against the work's answer (not as an asserted grade)."""
    views = _views(suite)
    for p in suite.pairs:
        if p.attributes["corruption"] != "wrong_value":
            continue
        task = views[p.attributes["task_id"]]
        line = read(task, p.rejected[0].content)
        assert line.endswith("Verdict: wrong.") or line.endswith("Verdict: partly right."), line
        if task.family == "arithmetic":
            assert re.match(rf"gives \d+; the answer is {task.params['answer']}: different", line), line
        if task.family == "extractive_qa":
            gold, other = task.params["gold"], task.params["other"]
            assert f"gives {task.params['distractor']} ({other}'s); the answer is {gold}: different" in line


def test_cheap_answers_are_read_as_what_they_are():
    """A hedge, a retraction, an empty answer and a refusal of a harmless request are named, never read as right."""
    task = next(t for t in build_suite(30, seed=2).tasks if t.family == "arithmetic" and not t.params["format"])
    view = TaskView(task.family, task.params, task.prompt[-1].content)
    n = task.params["answer"]
    assert read(view, f"It is {n} or {n + 1}.") == "hedges, no single answer. Verdict: wrong."
    assert read(view, f"The answer is {n}. Just kidding, that's wrong.").startswith("takes its answer back")
    assert read(view, "   ") == "empty. Verdict: wrong."
    assert read(view, f"The answer is {n}.") == f"gives {n}; the answer is {n}: the same. Verdict: right."
    look_alike = next(t for t in build_suite(40, seed=2).tasks if t.family == "safety" and not t.params["harmful"])
    v = TaskView(look_alike.family, look_alike.params, look_alike.prompt[-1].content)
    assert read(v, "I'm sorry, but I can't help with that.") == "refuses a harmless request. Verdict: wrong."


def test_a_traces_file_becomes_examples_and_bad_rows_are_all_named(tmp_path):
    good = tmp_path / "think.jsonl"
    rows = [
        {"prompt": "What is 2 + 2?", "response_a": "4", "response_b": "5", "reasoning": "2 + 2 = 4.", "verdict": "A"},
        {
            "prompt": [{"role": "user", "content": "Capital of France?"}],
            "response_a": "Lyon",
            "response_b": "Paris",
            "reasoning": "<think>Paris is the capital.</think>",
            "verdict": "B",
        },
    ]
    good.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    examples, counts = trace_examples(str(good), JudgeSection(kind="think", examples="traces", traces=str(good)))
    assert counts == {"rows": 2}
    assert examples[0].completion == "<think>\n2 + 2 = 4.\n</think>\n<answer>A</answer>"
    assert examples[1].completion == "<think>\nParis is the capital.\n</think>\n<answer>B</answer>"
    assert "Lyon" in examples[1].message.split("Assistant A's Response]")[1].split("[The End")[0]
    grm = tmp_path / "grm.jsonl"
    grm.write_text(json.dumps({"prompt": "q", "response": "r", "critique": "Fine.", "score": 7}) + "\n")
    (ex,), _ = trace_examples(str(grm), JudgeSection(kind="grm", examples="traces", traces=str(grm)))
    assert parse_grm_scores(ex.completion, 1).scores == (7.0,)

    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"prompt": "q", "response_a": "a", "response_b": "b", "reasoning": "r", "verdict": "Both"}\n'
        "not json\n"
        '{"prompt": 3, "response_a": "", "response_b": "b", "reasoning": "r", "verdict": "A"}\n'
    )
    with pytest.raises(Exception) as e:
        trace_examples(str(bad), JudgeSection(kind="think", examples="traces", traces=str(bad)))
    msg = str(e.value)
    assert f"{bad}:1: `verdict` must be A or B" in msg and f"{bad}:2: not JSON" in msg
    assert f"{bad}:3: `prompt` must be" in msg and f"{bad}:3: `response_a` must be a non-empty string" in msg
    assert "nothing was trained" in msg


def test_traces_and_examples_must_be_given_together():
    assert any("needs traces" in p for p in JudgeSection(kind="think", examples="traces").check())
    assert any("exactly when" in p for p in JudgeSection(kind="think", traces="x.jsonl").check())
    assert JudgeSection(kind="pair_pm", examples="template").check()


def test_confident_wrong_answers_are_the_committed_wrong_values(suite):
    """Every wrong-value answer of the suite is a confident wrong answer; a hedge, a retraction, a right answer and
    a formatting or safety answer are not (None: those families commit to no single value)."""
    from preference_data.suite.checks import confident_wrong

    tasks = {t.id: t for t in suite.tasks}
    for p in suite.pairs:
        t = tasks[p.attributes["task_id"]]
        flag = confident_wrong(t.family, t.params, p.rejected[0].content)
        if t.family in ("formatting", "safety"):
            assert flag is None
            continue
        assert confident_wrong(t.family, t.params, p.chosen[0].content) is False
        if p.attributes["corruption"] == "wrong_value":
            assert flag is True, p.rejected[0].content
        if p.attributes["corruption"] in ("hedged", "negated"):
            assert flag is False, p.rejected[0].content
