"""Labelled comparison files, read through a declarative column map.

Human-labelled comparison sets come in many shapes: two responses and a label with its own encoding
(`output_1` / `output_2` / `label` in {1, 2}; `response 1` / `response 2` / `label` in {0, 1, 2} with 2 a tie),
three annotators per row, `chosen` / `reject` objects holding an `answer`, a best-of-n item with one winner and
a list of losers, conversations as message lists. A `ColumnMap` (the `columns:` block of a data config) says
which field is which, and how each label value maps to a verdict (`first`, `second` or `tie`); `PRESETS` holds
the maps of the public sets' official files (reference/reward-models.md §7.6-7.7), so a preset name is all a
user gives.

Every row becomes a `LabelledComparison` or is counted in the `DataReport` under a named reason with its row
number, never guessed and never silently lost:

| reason             | the row                                                                  |
|--------------------|--------------------------------------------------------------------------|
| missing_field      | lacks a field the map names (or holds null there)                        |
| wrong_type         | holds a value of the wrong type (a number where text belongs, ...)       |
| label_outside_map  | has a label (or an annotator's label) that is not a key of `label_map`   |
| one_response       | has fewer than two non-empty responses                                   |
| no_losers          | is a best-of-n item whose loser list is empty                            |
| empty_prompt       | has an empty prompt                                                      |
| turn_out_of_range  | names a turn its conversations do not have                               |

A map that names a field the file's first row lacks is an error that lists every such field with a did-you-mean
over the fields the row has. Rows that compare the same two responses to the same prompt (MT-Bench has one row
per judge) are merged into one comparison with one label per annotator, so labels that disagree are kept.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from prefalign.config import option, read_yaml
from prefalign.errors import UserError, did_you_mean
from prefalign.registry import Table

from .records import VERDICTS, Conversation, LabelledComparison, Message, PreferencePair, stable_id
from .report import DataReport
from .rows import Rows, Skip, common_prefix, parse_messages


@dataclass
class ColumnMap:
    """Which field of a labelled comparison file holds what (see the module docstring)."""

    prompt: list[str] = option(
        factory=list,
        doc="field(s) holding the prompt: one field with a string or a list of {role, content} messages, or "
        "several string fields joined by a blank line, empty ones skipped (PandaLM: [instruction, input]); leave "
        "empty when the responses are whole conversations (their shared beginning is the prompt)",
    )
    responses: list[str] = option(
        factory=list,
        doc="the two fields holding the candidate responses, first then second; each a string, an object "
        "holding the text under `response_key`, or a conversation (a list of {role, content} messages)",
    )
    winner: str | None = option(None, "best-of-n items: the field holding the one preferred response")
    losers: str | None = option(None, "best-of-n items: the field holding the list of dispreferred responses")
    response_key: str | None = option(
        None, "when a response is an object, the key holding its text (RMB: answer); strings are read as they are"
    )
    label: str | None = option(
        None,
        "the field holding the verdict; with neither label nor annotators the first response is the preferred "
        "one (chosen / rejected files)",
    )
    annotators: list[str] = option(
        factory=list,
        doc="fields holding one annotator's verdict each (PandaLM: annotator1..3); the item's label is their "
        "majority, and their agreement with each other is reported",
    )
    label_map: dict[str, str] = option(
        factory=dict,
        doc="label value -> first | second | tie, e.g. {1: first, 2: second}; a value outside it is counted "
        "with its row number, never guessed",
    )
    annotator: str | None = option(
        None, "the field naming who labelled the row (MT-Bench: judge); it names that label in the agreement tables"
    )
    turn: str | None = option(
        None,
        "the field giving how many user turns of the conversations the verdict covers (MT-Bench: turn); "
        "the conversations are cut after that turn's answer",
    )
    category: str | None = option(
        None, "the field holding a category, for per-category breakdowns (Auto-J: scenario; RMB: category_path)"
    )
    reference: str | None = option(None, "the field holding a reference answer, for reference-conditioned scorers")
    id: str | None = option(None, "the field holding the item id (default: a hash of prompt and responses)")

    @property
    def best_of_n(self) -> bool:
        return self.winner is not None or self.losers is not None

    def fields(self) -> list[tuple[str, str]]:
        """(setting, field) for every field the map names, in reading order."""
        out = [(f"prompt[{i}]", f) for i, f in enumerate(self.prompt)]
        out += [(f"responses[{i}]", f) for i, f in enumerate(self.responses)]
        out += [(k, getattr(self, k)) for k in ("winner", "losers", "label") if getattr(self, k) is not None]
        out += [(f"annotators[{i}]", f) for i, f in enumerate(self.annotators)]
        return out + [
            (k, getattr(self, k))
            for k in ("annotator", "turn", "category", "reference", "id")
            if getattr(self, k) is not None
        ]

    def verdicts(self) -> dict[str, str]:
        """The label map with its keys normalised as row values are (`label_key`)."""
        return {label_key(k): v for k, v in self.label_map.items()}

    def check(self) -> list[str]:
        problems = []
        if self.best_of_n:
            if self.responses:
                problems.append("responses: give either two responses or winner + losers (best-of-n), not both")
            if self.winner is None or self.losers is None:
                problems.append("winner / losers: a best-of-n map needs both the winner field and the losers field")
            if self.label is not None or self.annotators:
                problems.append("label: a best-of-n item's winner is its label; leave label and annotators out")
        elif len(self.responses) != 2:
            problems.append(
                f"responses: name exactly two fields (first, second), got {len(self.responses)}; or give "
                "winner + losers for best-of-n items"
            )
        if self.label is not None and self.annotators:
            problems.append("label / annotators: give one label field or several annotator fields, not both")
        has_labels = self.label is not None or bool(self.annotators)
        if has_labels and not self.label_map:
            problems.append(
                "label_map: say what each label value means, e.g. {1: first, 2: second, 0: tie}; values are "
                "never guessed"
            )
        if not has_labels and self.label_map:
            problems.append("label_map: given, but no label or annotators field to read it from")
        for key, verdict in self.label_map.items():
            if verdict not in VERDICTS:
                problems.append(
                    f"label_map.{key}: {verdict!r} is not a verdict{did_you_mean(str(verdict), VERDICTS)}; "
                    f"use one of {', '.join(VERDICTS)}"
                )
        keys = [label_key(k) for k in self.label_map]
        if len(set(keys)) != len(keys):
            problems.append(f"label_map: two keys mean the same value ({', '.join(map(repr, self.label_map))})")
        if self.annotator is not None and self.annotators:
            problems.append("annotator: the annotator fields already name who gave each label; leave annotator out")
        named = [f for s, f in self.fields() if s != "category"]  # a field may also serve as the category
        if len(set(named)) != len(named):
            dup = sorted({f for f in named if named.count(f) > 1})
            problems.append(f"columns: the field(s) {', '.join(map(repr, dup))} are named for two roles")
        return problems


def label_key(value: Any) -> str:
    """A label value as a label-map key: 1, 1.0 and "1" are the same label; strings are stripped."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).strip()


# ---------------------------------------------------------------------------------------------------------
# Presets: the official file formats of the public sets (reference/reward-models.md §7.6-7.7)
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Preset:
    summary: str
    source: str
    """Where the official files are."""
    ties: str
    """How the file encodes ties (and what the preset does with them)."""
    columns: ColumnMap = field(compare=False)


_LLMBAR_LABELS = {"1": "first", "2": "second"}
_HELPSTEER2_LABELS = {str(v): "first" if v < 0 else "second" if v > 0 else "tie" for v in range(-3, 4)}

PRESETS: Table[Preset] = Table(
    "preset",
    {
        "llmbar": Preset(
            "LLMBar {input, output_1, output_2, label}, label 1 or 2 names the better output. The same map reads "
            "Natural, every Adversarial subset (Neighbor, GPTInst, GPTOut, Manual) and the processed FairEval, "
            "LLMEval^2 and MT-Bench sets",
            "princeton-nlp/LLMBar: Dataset/LLMBar/{Natural,Adversarial/*}/dataset.json and "
            "Dataset/Processed/{FairEval,LLMEval^2,MT-Bench}/dataset.json (JSON lists)",
            "none: every label is 1 or 2",
            ColumnMap(prompt=["input"], responses=["output_1", "output_2"], label="label", label_map=_LLMBAR_LABELS),
        ),
        "autoj": Preset(
            "Auto-J pairwise test {scenario, prompt, 'response 1', 'response 2', label} (keys with a space); "
            "label 0: response 1 better, 1: response 2 better, 2: tie; per-scenario breakdowns",
            "GAIR-NLP/auto-j: data/test/testdata_pairwise.jsonl",
            "label 2",
            ColumnMap(
                prompt=["prompt"],
                responses=["response 1", "response 2"],
                label="label",
                label_map={"0": "first", "1": "second", "2": "tie"},
                category="scenario",
            ),
        ),
        "pandalm": Preset(
            "PandaLM test set {instruction, input, response1, response2, annotator1..3}; the prompt is the "
            "instruction then the input (a blank line between, the input left out when empty); each annotator says "
            "0: tie, 1: response1, 2: response2; the majority of the three is the label (no majority: no label, "
            "kept for annotator agreement)",
            "WeOpenML/PandaLM: data/testset-v1.json (JSON list)",
            "annotator value 0",
            ColumnMap(
                prompt=["instruction", "input"],
                responses=["response1", "response2"],
                annotators=["annotator1", "annotator2", "annotator3"],
                label_map={"0": "tie", "1": "first", "2": "second"},
            ),
        ),
        "mt-bench-human": Preset(
            "MT-Bench human judgments {question_id, model_a, model_b, winner, judge, conversation_a, conversation_b, "
            "turn}: two conversations (message lists, two user turns); turn 1 compares the first answers, turn 2 "
            "the whole conversations (cut after that turn); winner model_a / model_b / tie. Rows of several judges "
            "on the same comparison are merged (one label per judge); per-turn breakdowns",
            "HF lmsys/mt_bench_human_judgments, split human (the reference marks its fields as read from the card)",
            "winner 'tie'; any other winner value (e.g. 'tie (inconsistent)') is outside the map and counted",
            ColumnMap(
                responses=["conversation_a", "conversation_b"],
                label="winner",
                label_map={"model_a": "first", "model_b": "second", "tie": "tie"},
                annotator="judge",
                turn="turn",
                category="turn",
            ),
        ),
        "rmb-pairwise": Preset(
            "RMB pairwise {pair_uid, conversation_input, chosen: {llm_name, answer}, reject: {llm_name, answer}, "
            "category_path}; chosen is the preferred response; per-category breakdowns (category_path)",
            "Zhou-Zoey/RMB-Reward-Model-Benchmark: RMB_dataset/Pairwise_set/{Helpfulness,Harmlessness}/*.json",
            "none: chosen is always preferred",
            ColumnMap(
                prompt=["conversation_input"],
                responses=["chosen", "reject"],
                response_key="answer",
                category="category_path",
                id="pair_uid",
            ),
        ),
        "rmb-bon": Preset(
            "RMB best-of-n {bon_uid, conversation_input, bon_best: {llm_name, answer}, loser_list: [{llm_name, "
            "answer}, ...], category_path}; correct when the winner outscores every loser (the paper's rule; the "
            "released code has no best-of-n scoring)",
            "Zhou-Zoey/RMB-Reward-Model-Benchmark: RMB_dataset/BoN_set/{Helpfulness,Harmlessness}/*.json",
            "none: one winner per item",
            ColumnMap(
                prompt=["conversation_input"],
                winner="bon_best",
                losers="loser_list",
                response_key="answer",
                category="category_path",
                id="bon_uid",
            ),
        ),
        "helpsteer2": Preset(
            "HelpSteer2 preferences {prompt, response_1, response_2, preference_strength}; strength -3..-1: "
            "response 1 better, 0: tie, 1..3: response 2 better. The prompt is read as one user turn (multi-turn "
            "prompts keep their <extra_id_1> separators)",
            "HF nvidia/HelpSteer2, preference/preference.jsonl.gz (the reference marks its fields as read from the "
            "card)",
            "preference_strength 0",
            ColumnMap(
                prompt=["prompt"],
                responses=["response_1", "response_2"],
                label="preference_strength",
                label_map=_HELPSTEER2_LABELS,
            ),
        ),
    },
    columns=("summary", "ties", "source"),
)


def mapping_for(preset: str | None, columns: ColumnMap | None) -> tuple[ColumnMap, str]:
    """The column map a data config asks for and its name (the preset's, or 'columns' for an explicit map)."""
    if preset is not None:
        return PRESETS[preset].columns, preset
    if columns is None:
        raise UserError("no column map: set data.preset (see `align ls presets`) or data.columns")
    return columns, "columns"


def read_columns(path: str) -> dict[str, Any]:
    """A column map from a YAML file: the map itself, or a data config holding it under `columns:`. The dict is
    validated where it is used (as `DataConfig.columns`), so a wrong key gets a did-you-mean."""
    data = read_yaml(path)
    if isinstance(data, dict) and isinstance(data.get("columns"), dict):
        data = data["columns"]
    if not isinstance(data, dict):
        raise UserError(f"{path}: a column map is a mapping of ColumnMap fields (prompt, responses, label, ...)")
    return data


def mapping_lines(mapping: ColumnMap, name: str) -> list[str]:
    """The map in words, one line per field, for `align data doctor` and records."""
    out = [f"column map: {name}" + (f" ({PRESETS[name].source})" if name in PRESETS else "")]
    for setting, col in mapping.fields():
        out.append(f"  {setting:<14} <- {col!r}")
    if mapping.response_key:
        out.append(f"  {'response_key':<14} <- {mapping.response_key!r} (the text inside each response object)")
    if mapping.label_map:
        out.append("  label_map      " + ", ".join(f"{k!r} -> {v}" for k, v in mapping.label_map.items()))
    elif not mapping.best_of_n:
        out.append("  label          none: the first response is the preferred one")
    if name in PRESETS:
        out.append(f"  ties           {PRESETS[name].ties}")
    return out


def render_comparison(c: LabelledComparison, width: int = 300) -> list[str]:
    """One comparison as text: prompt, each response, and the labels (for `align data doctor`)."""

    def text(conv: Conversation) -> str:
        s = "\n".join(f"[{m.role}] {m.content}" for m in conv)
        return s if len(s) <= width else s[: width - 3] + "..."

    names = ["first", "second"] if c.kind == "pair" else ["winner"] + [f"loser {i}" for i in range(1, len(c.responses))]
    lines = [f"comparison {c.id} ({c.kind}{', category ' + repr(c.category) if c.category else ''}):", "prompt:"]
    lines.append("  " + text(c.prompt).replace("\n", "\n  "))
    for n, r in zip(names, c.responses, strict=True):
        lines += [f"{n}:", "  " + text(r).replace("\n", "\n  ")]
    if c.kind == "pair":
        given = ", ".join(f"{a}: {v}" for a, v in zip(c.annotators, c.labels, strict=True)) or "none"
        lines.append(f"labels: {given}; majority: {c.majority() or 'none (annotators split)'}")
    return lines


# ---------------------------------------------------------------------------------------------------------
# Reading rows
# ---------------------------------------------------------------------------------------------------------


def check_fields(mapping: ColumnMap, row: dict[str, Any], where: str) -> None:
    """Every field the map names must be in the file's first row; all missing ones are reported at once."""
    present = [str(k) for k in row]
    missing = [(s, f) for s, f in mapping.fields() if f not in row]
    if missing:
        lines = "\n".join(
            f"  - columns.{s}: field {f!r} is not in the file{did_you_mean(f, present)}" for s, f in missing
        )
        presets = matching_presets(row)
        hint = f"the rows match preset {' / '.join(presets)}" if presets else "see `align ls presets`"
        raise UserError(
            f"{where}: the column map names {len(missing)} field(s) the rows do not have:\n{lines}\n"
            f"The rows have: {', '.join(map(repr, present))}. Fix the map (data.columns) or choose the preset "
            f"that matches the file ({hint})"
        )


def _required(row: dict[str, Any], name: str) -> Any:
    if name not in row or row[name] is None:
        raise Skip("missing_field", f"field {name!r} is missing or null")
    return row[name]


def _text_orparse_messages(value: Any, name: str, key: str | None) -> Any:
    """A response value as a string or a message list: objects give their `key` field."""
    if isinstance(value, dict) and not ("role" in value and "content" in value):
        if key is None:
            raise Skip(
                "wrong_type",
                f"field {name!r} is an object ({', '.join(map(str, value))}); set columns.response_key to the key "
                "holding its text",
            )
        if value.get(key) is None:
            raise Skip("missing_field", f"field '{name}.{key}' is missing or null")
        return value[key]
    return value


def _response(value: Any, name: str, key: str | None) -> Conversation:
    """A response as an assistant continuation (a string is one assistant message)."""
    value = _text_orparse_messages(value, name, key)
    if not isinstance(value, (str, list, dict)):
        raise Skip("wrong_type", f"field {name!r} must be a string or messages, got {type(value).__name__}")
    conv = parse_messages(value, name)
    return [Message(m.role or "assistant", m.content) for m in conv]


def _is_empty(conv: Conversation) -> bool:
    return not any(m.content.strip() for m in conv)


def _prompt(row: dict[str, Any], fields: list[str]) -> Conversation:
    if len(fields) == 1 and isinstance(row.get(fields[0]), list):
        conv = parse_messages(row[fields[0]], fields[0])
        return [Message(m.role or "user", m.content) for m in conv]
    parts = []
    for i, f in enumerate(fields):
        v = _required(row, f) if i == 0 else row.get(f)
        if v is None:
            continue
        if not isinstance(v, str):
            raise Skip("wrong_type", f"field {f!r} must be a string (or, alone, messages), got {type(v).__name__}")
        if v.strip():
            parts.append(v)
    return [Message("user", "\n\n".join(parts))] if parts else []


def _cut_after_turn(conv: Conversation, turn: int, name: str) -> Conversation:
    """The conversation up to (not including) its user turn number `turn + 1`."""
    users = [i for i, m in enumerate(conv) if m.role == "user"]
    if turn > len(users):
        raise Skip("turn_out_of_range", f"field {name!r} has {len(users)} user turn(s); the row names turn {turn}")
    return conv[: users[turn]] if turn < len(users) else conv


def _verdict(value: Any, name: str, verdicts: dict[str, str]) -> str:
    if value is None:
        raise Skip("missing_field", f"field {name!r} is missing or null")
    key = label_key(value)
    if key not in verdicts:
        raise Skip(
            "label_outside_map",
            f"field {name!r} is {value!r}, which the label map does not name ({', '.join(verdicts)}); add it to "
            "columns.label_map if it has a meaning, or fix the row",
        )
    return verdicts[key]


def _pair_responses(row: dict[str, Any], m: ColumnMap) -> tuple[Conversation, list[Conversation]]:
    raw = []
    for f in m.responses:
        v = row.get(f)
        v = None if v is None else _text_orparse_messages(v, f, m.response_key)
        if v is None or (isinstance(v, (str, list)) and not v) or (isinstance(v, str) and not v.strip()):
            raise Skip("one_response", f"field {f!r} is missing or empty; a comparison needs two responses")
        raw.append(v)
    prompt = _prompt(row, m.prompt) if m.prompt else []
    if all(isinstance(v, list) for v in raw) and not m.prompt:
        convs = [parse_messages(v, f) for v, f in zip(raw, m.responses, strict=True)]
        if m.turn is not None:
            t = _required(row, m.turn)
            if isinstance(t, bool) or not isinstance(t, int) or t < 1:
                raise Skip("wrong_type", f"field {m.turn!r} must be a turn number (1, 2, ...), got {t!r}")
            convs = [_cut_after_turn(c, t, f) for c, f in zip(convs, m.responses, strict=True)]
        n = common_prefix(convs[0], convs[1])
        while n > 0 and convs[0][n - 1].role != "user":  # the prompt ends with the user turn both answer
            n -= 1
        prompt, responses = convs[0][:n], [c[n:] for c in convs]
    else:
        responses = [_response(v, f, None) for v, f in zip(raw, m.responses, strict=True)]
    for r, f in zip(responses, m.responses, strict=True):
        if _is_empty(r):
            raise Skip("one_response", f"field {f!r} has no response text; a comparison needs two responses")
    return prompt, responses


def _best_of_n(row: dict[str, Any], m: ColumnMap, report: DataReport, row_no: int) -> list[Conversation]:
    assert m.winner is not None and m.losers is not None  # ColumnMap.check
    winner = _response(_required(row, m.winner), m.winner, m.response_key)
    if _is_empty(winner):
        raise Skip("one_response", f"field {m.winner!r} has no response text")
    losers_raw = _required(row, m.losers)
    if not isinstance(losers_raw, list):
        raise Skip("wrong_type", f"field {m.losers!r} must be a list of responses, got {type(losers_raw).__name__}")
    if not losers_raw:
        raise Skip("no_losers", f"field {m.losers!r} is an empty list; a best-of-n item needs at least one loser")
    losers = []
    for i, v in enumerate(losers_raw):
        conv = _response(v, f"{m.losers}[{i}]", m.response_key)
        if _is_empty(conv):
            report.repair("empty_loser_left_out", f"{row_no}.{m.losers}[{i}]", "a loser with no text is left out")
            continue
        losers.append(conv)
    if not losers:
        raise Skip("no_losers", f"field {m.losers!r} holds no loser with text")
    return [winner, *losers]


def _comparison(row: dict[str, Any], m: ColumnMap, report: DataReport, row_no: int) -> LabelledComparison:
    category = "" if m.category is None or row.get(m.category) is None else str(row[m.category])
    if m.turn is not None and m.category == m.turn:
        category = f"turn {category}"
    reference = None
    if m.reference is not None and row.get(m.reference) is not None:
        reference = _response(row[m.reference], m.reference, m.response_key)
    ident = "" if m.id is None or row.get(m.id) is None else str(row[m.id])
    if m.best_of_n:
        prompt = _prompt(row, m.prompt)
        responses = _best_of_n(row, m, report, row_no)
        labels: list[str] = []
        annotators: list[str] = []
        kind = "best_of_n"
    else:
        prompt, responses = _pair_responses(row, m)
        verdicts = m.verdicts()
        if m.annotators:
            labels = [_verdict(row.get(f), f, verdicts) for f in m.annotators]
            annotators = list(m.annotators)
        elif m.label is not None:
            labels = [_verdict(row.get(m.label), m.label, verdicts)]
            who = row.get(m.annotator) if m.annotator is not None else None
            annotators = [m.label if who is None else str(who)]
        else:
            labels, annotators = ["first"], ["file order"]  # chosen / rejected files: the first is preferred
        kind = "pair"
    if _is_empty(prompt):
        named = ", ".join(map(repr, m.prompt)) or "(the shared beginning of the conversations)"
        raise Skip("empty_prompt", f"the prompt {named} is empty")
    return LabelledComparison(
        prompt, responses, labels, annotators, kind, category, reference, {"row": row_no}, id=ident
    )


_FLIP = {"first": "second", "second": "first", "tie": "tie"}


def adapt(mapping: ColumnMap, where: str = "") -> Callable[[Rows, DataReport], Iterator[LabelledComparison]]:
    """An adapter (rows, report) -> comparisons for `mapping`, like the ones in `formats.FORMATS`.

    The first row's fields are checked against the map (`check_fields`). Rows with the same prompt and the
    same two responses (in either order) become one comparison with one label per annotator.
    """

    def run(rows: Rows, report: DataReport) -> Iterator[LabelledComparison]:
        merged: dict[str, LabelledComparison] = {}
        order: list[LabelledComparison] = []
        checked = False
        for row_no, row in rows:
            if not checked:
                check_fields(mapping, row, f"{where or report.source} ({report.row_unit} {row_no})")
                checked = True
            try:
                c = _comparison(row, mapping, report, row_no)
            except Skip as s:
                report.drop(s.reason, row_no, s.detail)
                continue
            if c.kind != "pair":
                order.append(c)
                continue
            convs = [[(m.role, m.content) for m in r] for r in c.responses]
            key = stable_id([(m.role, m.content) for m in c.prompt], sorted(convs), c.category)
            first = merged.get(key)
            if first is None:
                merged[key] = c
                order.append(c)
                continue
            swapped = [(m.role, m.content) for m in first.responses[0]] != convs[0]
            first.labels += [_FLIP[v] for v in c.labels] if swapped else c.labels
            first.annotators += c.annotators
            first.attributes.setdefault("merged_rows", []).append(row_no)
            report.repair("merged_same_comparison", row_no, "labels of the same comparison, kept as more annotators")
        for c in order:
            c.source = c.source or report.source
            c.id = c.id or stable_id(c.to_dict()["prompt"], c.to_dict()["responses"])
            yield c

    return run


def to_pairs(comparisons: list[LabelledComparison], report: DataReport) -> list[PreferencePair]:
    """Training pairs from comparisons: the majority's preferred response as chosen; a best-of-n winner against
    each loser. Ties, items without a majority and identical responses are dropped and counted."""
    pairs = []
    for c in comparisons:
        row = c.attributes.get("row", c.id)
        majority = c.majority()
        if majority == "tie":
            report.drop("tie", row, "the human label is a tie: no preference to train on")
            continue
        if majority is None:
            report.drop("no_majority", row, "the annotators split evenly: no preference to train on")
            continue
        win = 0 if majority == "first" else 1
        others = [i for i in range(len(c.responses)) if i != win]
        for j in others:
            if [m.content.strip() for m in c.responses[win]] == [m.content.strip() for m in c.responses[j]]:
                report.drop("identical_pair", row, "the two responses are identical")
                continue
            attrs = {"row": row, "category": c.category, "labels": list(c.labels)}
            pairs.append(PreferencePair(c.prompt, c.responses[win], c.responses[j], attributes=attrs, source=c.source))
    return pairs


def matching_presets(row: dict[str, Any]) -> list[str]:
    """Presets whose every field the row has (to suggest one when a file's format cannot be told)."""
    return [n for n in PRESETS if all(f in row for _, f in PRESETS[n].columns.fields())]
