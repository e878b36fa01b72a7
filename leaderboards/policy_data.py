"""Standard prompt sets for policy evaluation, each read from its official file format.

A source is a local file or a hub id (read through `preference_data.io.iter_rows`, so a hub id goes through
`datasets.load_dataset` and a failed download says so and asks for the local file). Every row that cannot be used
is counted with its row number and reason (`BenchData.problems`); the caller turns problems into an error unless
partial runs are allowed, so a malformed row is never a silent zero.

- ifeval: google-research `instruction_following_eval/data/input_data.jsonl` (hub `google/IFEval`): key, prompt,
  instruction_id_list, kwargs.
- alpacaeval: a JSON list of reference outputs (e.g. `alpaca_eval_gpt4_baseline.json`, the gpt4_turbo outputs):
  instruction, output, generator, dataset.
- arenahard: `question.jsonl` and a reference model's answers (`model_answer/<model>.jsonl`, `--reference`).
  v0.1 questions: question_id, category, cluster, turns[0].content; answers: question_id, model_id,
  choices[0].turns[0].content. v2.0 questions: uid, category, subcategory, prompt; answers: uid, model,
  messages[-1].content (text, or {"answer": text}).
- mtbench: FastChat `mt_bench/question.jsonl`: question_id, category, turns (two user turns).

Each reader is the `read` of its set's entry in `policy_bench.POLICY_BENCHMARKS`; `policy_bench.read_bench` looks the
set up by name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from prefalign.errors import UserError
from preference_data.io import iter_rows
from preference_data.report import DataReport

from .ifeval import IFEvalItem, item_problems


@dataclass
class BenchItem:
    """One prompt of a set: its id, category, user turns, and (pairwise sets) the reference answer to beat."""

    id: str
    turns: list[str]
    category: str = ""
    reference: str | None = None
    reference_model: str | None = None
    """The model that wrote `reference`, where its file names it (Arena-Hard v2.0 judges by category's baseline)."""
    ifeval: IFEvalItem | None = None
    row: int = 0


@dataclass
class BenchData:
    name: str
    source: str
    items: list[BenchItem]
    rows_read: int = 0
    problems: list[str] = field(default_factory=list)
    """One line per unusable row: '<file> row N: reason'."""
    reference_model: str | None = None
    """The model that wrote the reference answers (the generator named by the file)."""
    unknown_instructions: dict[str, int] = field(default_factory=dict)
    """IFEval: unknown instruction id -> rows naming it."""


def _rows(source: str, hub_split: str) -> tuple[list[tuple[int, dict[str, Any]]], DataReport]:
    report = DataReport(source=source)
    rows = list(iter_rows(source, report, hub_split))
    return rows, report


def _read_problems(report: DataReport) -> list[str]:
    out = []
    for reason, n in report.dropped.items():
        rows = ", ".join(report.examples.get(reason, []))
        out.append(f"{report.source}: {n} unreadable {report.row_unit}(s) ({reason}; {report.row_unit} {rows})")
    return out


def _text(v: Any) -> str | None:
    return v if isinstance(v, str) and v.strip() else None


def read_ifeval(source: str, hub_split: str = "train") -> BenchData:
    rows, report = _rows(source, hub_split)
    data = BenchData("ifeval", source, [], len(rows), _read_problems(report))
    for n, row in rows:
        where = f"{source} {report.row_unit} {n}"
        missing = [k for k in ("prompt", "instruction_id_list", "kwargs") if k not in row or row[k] is None]
        if missing:
            data.problems.append(f"{where}: missing field(s) {', '.join(missing)}")
            continue
        prompt, ids, kwargs = row["prompt"], row["instruction_id_list"], row["kwargs"]
        if not _text(prompt) or not isinstance(ids, list) or not isinstance(kwargs, list):
            data.problems.append(f"{where}: prompt must be text, instruction_id_list and kwargs lists")
            continue
        kwargs = [k if isinstance(k, dict) else {} for k in kwargs]
        item = IFEvalItem(str(row.get("key", n)), prompt, [str(i) for i in ids], kwargs, n)
        problems = item_problems(item)
        for iid in item.instruction_ids:
            if any(f"unknown instruction id '{iid}'" in p for p in problems):
                data.unknown_instructions[iid] = data.unknown_instructions.get(iid, 0) + 1
        if problems:
            data.problems += [f"{where} (key {item.key}): {p}" for p in problems]
            continue
        data.items.append(BenchItem(item.key, [prompt], ifeval=item, row=n))
    return data


def read_alpacaeval(source: str, hub_split: str = "eval") -> BenchData:
    rows, report = _rows(source, hub_split)
    data = BenchData("alpacaeval", source, [], len(rows), _read_problems(report))
    generators: set[str] = set()
    for n, row in rows:
        where = f"{source} {report.row_unit} {n}"
        instruction, output = _text(row.get("instruction")), _text(row.get("output"))
        if instruction is None or output is None:
            missing = [k for k, v in (("instruction", instruction), ("output", output)) if v is None]
            data.problems.append(f"{where}: missing or empty field(s) {', '.join(missing)}")
            continue
        if isinstance(row.get("generator"), str):
            generators.add(row["generator"])
        data.items.append(BenchItem(str(n), [instruction], str(row.get("dataset") or ""), output, row=n))
    data.reference_model = ", ".join(sorted(generators)) or None
    return data


def _arena_question(row: dict[str, Any]) -> tuple[str | None, str | None]:
    """(id, prompt) of a v0.1 row (question_id, turns[0].content) or a v2.0 row (uid, prompt)."""
    qid = row.get("question_id", row.get("uid"))
    text = _text(row.get("prompt"))
    turns = row.get("turns")
    if text is None and isinstance(turns, list) and turns:
        first = turns[0]
        text = _text(first.get("content") if isinstance(first, dict) else first)
    return (None if qid is None else str(qid)), text


def _arena_answer(row: dict[str, Any]) -> tuple[str | None, str | None, str | None]:
    """(id, model, answer) of a v0.1 answer (question_id, model_id, choices[0].turns[0].content) or a v2.0 answer
    (uid, model, messages[-1].content, itself text or {"answer": text})."""
    qid = row.get("question_id", row.get("uid"))
    model = row.get("model_id", row.get("model"))
    answer = None
    choices = row.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        turns = choices[0].get("turns") or []
        if turns and isinstance(turns[0], dict):
            answer = _text(turns[0].get("content"))
    messages = row.get("messages")
    if answer is None and isinstance(messages, list) and messages and isinstance(messages[-1], dict):
        content = messages[-1].get("content")
        answer = _text(content.get("answer") if isinstance(content, dict) else content)
    return (None if qid is None else str(qid)), (None if model is None else str(model)), answer


def read_arenahard(source: str, answers: str | None, hub_split: str = "train") -> BenchData:
    if answers is None:
        raise UserError(
            "arenahard needs the reference model's answers: --reference model_answer/<model>.jsonl "
            "(arena-hard-auto's answer file for the baseline, v0.1 or v2.0 format)"
        )
    rows, report = _rows(source, hub_split)
    data = BenchData("arenahard", source, [], len(rows), _read_problems(report))
    ans_rows, ans_report = _rows(answers, hub_split)
    data.problems += _read_problems(ans_report)
    refs: dict[str, tuple[str, str | None]] = {}
    models: set[str] = set()
    for n, row in ans_rows:
        qid, model, answer = _arena_answer(row)
        if qid is None or answer is None:
            data.problems.append(f"{answers} {ans_report.row_unit} {n}: no question id or no answer text")
            continue
        if qid in refs:
            data.problems.append(f"{answers} {ans_report.row_unit} {n}: a second answer to question {qid}")
            continue
        refs[qid] = answer, model
        if model:
            models.add(model)
    for n, row in rows:
        where = f"{source} {report.row_unit} {n}"
        qid, text = _arena_question(row)
        if qid is None or text is None:
            data.problems.append(f"{where}: missing question id (question_id / uid) or prompt (turns / prompt)")
            continue
        if qid not in refs:
            data.problems.append(f"{where}: question {qid} has no reference answer in {answers}")
            continue
        category = str(row.get("category") or "")
        answer, model = refs[qid]
        data.items.append(BenchItem(qid, [text], category, answer, reference_model=model, row=n))
    data.reference_model = ", ".join(sorted(models)) or None
    return data


def read_mtbench(source: str, hub_split: str = "train") -> BenchData:
    rows, report = _rows(source, hub_split)
    data = BenchData("mtbench", source, [], len(rows), _read_problems(report))
    for n, row in rows:
        where = f"{source} {report.row_unit} {n}"
        turns = row.get("turns")
        if not isinstance(turns, list) or len(turns) != 2 or not all(_text(t) for t in turns):
            data.problems.append(f"{where}: turns must be two non-empty user turns")
            continue
        qid = row.get("question_id", n)
        data.items.append(BenchItem(str(qid), list(turns), str(row.get("category") or ""), row=n))
    return data
