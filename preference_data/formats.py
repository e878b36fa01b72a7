"""Adapters: every common preference-data format -> the records of `records.py`.

Each adapter takes the row stream from `io.iter_rows` and yields records; a row it cannot use is
counted in the `DataReport` under a named reason (with its row number), never silently lost.

| format         | rows look like                                                          | yields          |
|----------------|-------------------------------------------------------------------------|-----------------|
| trl            | {prompt?, chosen, rejected, margin?, score_chosen?, score_rejected?} (1) | PreferencePair  |
| hh             | {chosen, rejected}: "\\n\\nHuman: ...\\n\\nAssistant: ..." transcripts    | PreferencePair  |
| ultrafeedback  | {instruction, completions: [{response, annotations, overall_score}]}     | RatedResponses  |
| helpsteer      | {prompt, response, helpfulness, correctness, ...}, one response per row  | RatedResponses  |
| finegrained    | FineGrainedRLHF qa-feedback {question, passages, prediction 1..4, preference} | PreferencePair |
| finegrained_labels | the same rows' fine-grained feedback on prediction 1 (2)            | RatedResponses  |
| rated          | {prompt, responses, scores} (RatedResponses.to_dict)                     | RatedResponses  |
| prompts        | {prompt, meta?, grader?} (PromptOnly.to_dict, or a plain prompt string)  | PromptOnly      |

(1) each of prompt, chosen and rejected is a string or a list of {role, content} messages.
(2) never detected (the rows are `finegrained` rows): set `format: finegrained_labels`. Per question, the
    annotators' corrected prediction and prediction 1, scored on relevance, factuality and completeness
    (`finegrained_labels`); the labels a multi-objective RM regresses on.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeGuard

from prefalign.errors import UserError
from prefalign.registry import Table

from .comparisons import matching_presets
from .records import Message, PreferencePair, PromptOnly, RatedResponses
from .report import DataReport
from .rows import Rows, Skip, common_prefix, parse_messages

Record = PreferencePair | RatedResponses | PromptOnly


def _field(row: dict[str, Any], name: str) -> Any:
    if name not in row or row[name] is None:
        raise Skip("missing_field", f"field '{name}' is missing (present: {', '.join(map(str, row)) or 'none'})")
    return row[name]


def _check_pair(prompt: list[Message], chosen: list[Message], rejected: list[Message]) -> None:
    if not chosen or not "".join(m.content for m in chosen).strip():
        raise Skip("empty_field", "'chosen' is empty")
    if not rejected or not "".join(m.content for m in rejected).strip():
        raise Skip("empty_field", "'rejected' is empty")
    if [m.content.strip() for m in chosen] == [m.content.strip() for m in rejected]:
        raise Skip("identical_pair", "'chosen' and 'rejected' are identical; the pair carries no preference")
    if not prompt:
        raise Skip("missing_field", "no prompt: give a 'prompt' field or conversations that share a prefix")


def _margin(row: dict[str, Any]) -> float | None:
    m = row.get("margin")
    if m is None:
        return None
    if isinstance(m, bool) or not isinstance(m, (int, float)):
        raise Skip("wrong_type", f"field 'margin' must be a number, got {m!r}")
    return float(m)


def _trl_row(row: dict[str, Any]) -> PreferencePair:
    chosen = parse_messages(_field(row, "chosen"), "chosen")
    rejected = parse_messages(_field(row, "rejected"), "rejected")
    if "prompt" in row and row["prompt"] is not None:
        prompt = parse_messages(row["prompt"], "prompt")
        prompt = [Message(m.role or "user", m.content) for m in prompt]
        chosen = [Message(m.role or "assistant", m.content) for m in chosen]
        rejected = [Message(m.role or "assistant", m.content) for m in rejected]
    elif chosen[0].role == "" and rejected[0].role == "":
        # Standard text with an implicit prompt: the longest common prefix, cut back to a word boundary
        # (as TRL's extract_prompt does); it becomes one user turn.
        c, r = chosen[0].content, rejected[0].content
        i = 0
        while i < min(len(c), len(r)) and c[i] == r[i]:
            i += 1
        while i > 0 and not c[i - 1].isspace() and i < len(c):
            i -= 1
        prompt = [Message("user", c[:i].strip())]
        chosen, rejected = [Message("assistant", c[i:].strip())], [Message("assistant", r[i:].strip())]
    else:
        # Conversational with an implicit prompt: the shared message prefix is the prompt.
        n = common_prefix(chosen, rejected)
        while n > 0 and chosen[n - 1].role == "assistant" and n == min(len(chosen), len(rejected)):
            n -= 1
        prompt, chosen, rejected = chosen[:n], chosen[n:], rejected[n:]
    _check_pair(prompt, chosen, rejected)
    attributes: dict[str, Any] = {}
    gap = _rating_gap(row)
    if gap is not None:
        attributes["rating_gap"] = gap
    if row.get("reference") is not None:  # a reference answer, for reference-conditioned scorers (POLAR)
        attributes["reference"] = row["reference"]
    return PreferencePair(prompt, chosen, rejected, margin=_margin(row), attributes=attributes)


def _is_number(v: Any) -> TypeGuard[int | float]:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _rating_gap(row: dict[str, Any]) -> float | None:
    """score_chosen - score_rejected (UltraFeedback-binarized and similar TRL data), when both are numbers."""
    a, b = row.get("score_chosen"), row.get("score_rejected")
    if a is None and b is None:
        return None
    if not (_is_number(a) and _is_number(b)):
        raise Skip("wrong_type", f"fields 'score_chosen' / 'score_rejected' must both be numbers, got {a!r} / {b!r}")
    return float(a) - float(b)


_HH_TURN = re.compile(r"\n\n(Human|Assistant): ?")


def parse_hh(transcript: str, name: str) -> list[Message]:
    """'\\n\\nHuman: a\\n\\nAssistant: b' -> [user a, assistant b]. Text before the first marker is an error."""
    if not isinstance(transcript, str):
        raise Skip("wrong_type", f"field '{name}' must be an HH transcript string")
    parts = _HH_TURN.split(transcript)
    if parts[0].strip():
        raise Skip("not_hh_format", f"field '{name}' does not start with '\\n\\nHuman:'")
    msgs = []
    for role, text in zip(parts[1::2], parts[2::2], strict=True):
        msgs.append(Message("user" if role == "Human" else "assistant", text.strip()))
    if not msgs:
        raise Skip("not_hh_format", f"field '{name}' has no 'Human:'/'Assistant:' turns")
    return msgs


def _hh_row(row: dict[str, Any]) -> PreferencePair:
    chosen = parse_hh(_field(row, "chosen"), "chosen")
    rejected = parse_hh(_field(row, "rejected"), "rejected")
    if chosen[-1].role != "assistant" or rejected[-1].role != "assistant":
        raise Skip("no_final_assistant_turn", "a transcript does not end with an Assistant turn")
    prompt_c, prompt_r = chosen[:-1], rejected[:-1]
    if prompt_c != prompt_r:
        raise Skip("no_shared_prompt", "chosen and rejected differ before their final Assistant turn")
    _check_pair(prompt_c, chosen[-1:], rejected[-1:])
    return PreferencePair(prompt_c, chosen[-1:], rejected[-1:])


def _pairs(
    converter: Callable[[dict[str, Any]], PreferencePair], source: str
) -> Callable[[Rows, DataReport], Iterator[Record]]:
    def adapt(rows: Rows, report: DataReport) -> Iterator[Record]:
        for row_no, row in rows:
            try:
                pair = converter(row)
            except Skip as s:
                report.drop(s.reason, row_no, s.detail)
                continue
            pair.source = pair.source or source
            pair.attributes.setdefault("row", row_no)
            yield pair

    return adapt


def _rating(v: Any) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        try:
            return float(v.strip())
        except ValueError:
            return None  # "N/A"
    return None


def _ultrafeedback(rows: Rows, report: DataReport) -> Iterator[Record]:
    for row_no, row in rows:
        try:
            instruction = row.get("instruction", row.get("prompt"))
            if not isinstance(instruction, str) or not instruction.strip():
                raise Skip("missing_field", "field 'instruction' (or 'prompt') is missing or empty")
            comps = _field(row, "completions")
            if not isinstance(comps, list):
                raise Skip("wrong_type", "field 'completions' must be a list")
            responses, scores = [], []
            for j, c in enumerate(comps):
                text = c.get("response", c.get("text")) if isinstance(c, dict) else None
                if not isinstance(text, str) or not text.strip():
                    report.drop("empty_completion", f"{row_no}.completions[{j}]", "a completion has no text")
                    continue
                s: dict[str, float] = {}
                for key in ("overall_score", "fine-grained_score"):
                    if _rating(c.get(key)) is not None:
                        s[key] = _rating(c.get(key))  # type: ignore[assignment]
                for aspect, ann in (c.get("annotations") or {}).items():
                    val = ann.get("Rating") if isinstance(ann, dict) else ann
                    if _rating(val) is not None:
                        s[aspect] = _rating(val)  # type: ignore[assignment]
                responses.append([Message("assistant", text)])
                scores.append(s)
            if len(responses) < 2:
                raise Skip("fewer_than_two_responses", "needs at least two rated completions")
        except Skip as s:
            report.drop(s.reason, row_no, s.detail)
            continue
        yield RatedResponses(
            [Message("user", instruction)], responses, scores, {"row": row_no}, source=str(row.get("source", ""))
        )


HELPSTEER_ATTRIBUTES = ("helpfulness", "correctness", "coherence", "complexity", "verbosity")


def _helpsteer(rows: Rows, report: DataReport) -> Iterator[Record]:
    """One response per row; consecutive rows with the same prompt form one RatedResponses."""

    def keyed() -> Iterator[tuple[str, int, dict[str, Any]]]:
        for row_no, row in rows:
            p, r = row.get("prompt"), row.get("response")
            if not isinstance(p, str) or not p.strip() or not isinstance(r, str) or not r.strip():
                report.drop("missing_field", row_no, "fields 'prompt' and 'response' must be non-empty strings")
                continue
            yield p, row_no, row

    for prompt, group in itertools.groupby(keyed(), key=lambda t: t[0]):
        items = list(group)
        responses, scores = [], []
        for _, row_no, row in items:
            s = {a: _rating(row[a]) for a in HELPSTEER_ATTRIBUTES if _rating(row.get(a)) is not None}
            if not s:
                report.drop("missing_field", row_no, f"no attribute score ({', '.join(HELPSTEER_ATTRIBUTES)})")
                continue
            responses.append([Message("assistant", row["response"])])
            scores.append(s)
        if len(responses) < 2:
            report.drop("fewer_than_two_responses", items[0][1], "a prompt with a single rated response")
            continue
        yield RatedResponses([Message("user", prompt)], responses, scores, {"row": items[0][1]})  # type: ignore[arg-type]


FG_ORDER = ((1, 2), (1, 3), (1, 4), (2, 3), (2, 4), (3, 4))  # order of the 6 preference labels


def finegrained_prompt(question: str, passages: list[Any]) -> str:
    """The qa-feedback prompt: the question followed by its passages (title, then text)."""
    blocks = []
    for p in passages:
        if isinstance(p, list) and p:
            title, texts = str(p[0]), [str(t) for t in p[1:]]
            body = " ".join(t.split("\n\n", 1)[-1] if t.startswith(title) else t for t in texts)
            blocks.append(f"{title}: {body}")
        elif isinstance(p, str):
            blocks.append(p)
    return f"Answer the question using the passages.\n\nQuestion: {question}\n\nPassages:\n" + "\n".join(blocks)


def _finegrained(rows: Rows, report: DataReport) -> Iterator[Record]:
    for row_no, row in rows:
        try:
            question = _field(row, "question")
            prefs = _field(row, "preference")
            if not isinstance(prefs, list) or len(prefs) != 6:
                raise Skip("wrong_type", "field 'preference' must be a list of 6 labels (0 tie, 1 first, 2 second)")
            preds = [_field(row, f"prediction {i}") for i in range(1, 5)]
            prompt = [Message("user", finegrained_prompt(question, row.get("passages") or []))]
        except Skip as s:
            report.drop(s.reason, row_no, s.detail)
            continue
        for (a, b), label in zip(FG_ORDER, prefs, strict=True):
            where = f"{row_no}.preference[{a}v{b}]"
            if label == 0:
                report.drop("tie", where, "label 0 (tie) carries no preference")
                continue
            if label not in (1, 2):
                report.drop("wrong_type", where, f"preference label must be 0, 1 or 2, got {label!r}")
                continue
            win, lose = (a, b) if label == 1 else (b, a)
            try:
                chosen, rejected = [Message("assistant", preds[win - 1])], [Message("assistant", preds[lose - 1])]
                _check_pair(prompt, chosen, rejected)
            except Skip as s:
                report.drop(s.reason, where, s.detail)
                continue
            yield PreferencePair(
                prompt,
                chosen,
                rejected,
                attributes={"row": row_no, "compared": f"{win}>{lose}"},
                source="finegrained-qa",
            )


FG_RELEVANCE = ("Irrelevant", "Redundant", "Incoherent")  # the relevance errors (sub-sentence spans)
FG_FACTUALITY = ("Wrong-Grounding", "Unverifiable")  # the factual errors (sentence spans)


def _covered(spans: list[tuple[int, int]]) -> int:
    """Characters covered by the union of [start, end) spans."""
    total, end = 0, -1
    for a, b in sorted(spans):
        a = max(a, end)
        if b > a:
            total += b - a
            end = b
    return total


def finegrained_labels(text: str, errors: list[Any], missing: list[Any]) -> dict[str, float]:
    """One answer's fine-grained scores in [0, 1] from FineGrainedRLHF feedback: relevance and factuality are
    1 − the share of the answer's characters inside error spans of that kind (the union of spans); completeness
    is 1 / (1 + the number of missing-information items). An answer without feedback scores 1 on each.
    Raises Skip on an unknown error type or a span outside the text."""
    spans: dict[str, list[tuple[int, int]]] = {"relevance": [], "factuality": []}
    for i, e in enumerate(errors):
        kind = e.get("error type") if isinstance(e, dict) else None
        start, end = (e.get("start"), e.get("end")) if isinstance(e, dict) else (None, None)
        if kind not in FG_RELEVANCE + FG_FACTUALITY:
            raise Skip(
                "wrong_type",
                f"feedback.errors[{i}]: error type {kind!r} is none of {', '.join(FG_RELEVANCE + FG_FACTUALITY)}",
            )
        if not (_is_number(start) and _is_number(end) and 0 <= start < end <= len(text)):
            raise Skip(
                "bad_span",
                f"feedback.errors[{i}]: span {start!r}..{end!r} is not inside prediction 1 ({len(text)} characters)",
            )
        spans["relevance" if kind in FG_RELEVANCE else "factuality"].append((int(start), int(end)))
    n = max(len(text), 1)
    return {
        "relevance": 1.0 - _covered(spans["relevance"]) / n,
        "factuality": 1.0 - _covered(spans["factuality"]) / n,
        "completeness": 1.0 / (1.0 + len(missing)),
    }


def _finegrained_labels(rows: Rows, report: DataReport) -> Iterator[Record]:
    """Per question: the corrected prediction (the annotators' fix of prediction 1: errors removed, missing
    information added; 1 on every objective) and prediction 1 with the scores of its feedback."""
    for row_no, row in rows:
        try:
            question, first = _field(row, "question"), _field(row, "prediction 1")
            feedback = _field(row, "feedback")
            if not isinstance(feedback, dict):
                raise Skip(
                    "wrong_type", "field 'feedback' must be a mapping {errors, missing-info, corrected-prediction}"
                )
            corrected = feedback.get("corrected-prediction") or ""
            if not isinstance(corrected, str):
                raise Skip("wrong_type", "feedback.corrected-prediction must be a string")
            if corrected.strip() == str(first).strip():
                raise Skip("identical_pair", "the corrected prediction equals prediction 1: no contrast")
            labels = finegrained_labels(str(first), feedback.get("errors") or [], feedback.get("missing-info") or [])
        except Skip as s:
            report.drop(s.reason, row_no, s.detail)
            continue
        responses, scores, names = [[Message("assistant", str(first))]], [labels], ["prediction 1"]
        if corrected.strip():  # empty where the whole answer was irrelevant: prediction 1 alone keeps its labels
            responses.insert(0, [Message("assistant", corrected)])
            scores.insert(0, {"relevance": 1.0, "factuality": 1.0, "completeness": 1.0})
            names.insert(0, "corrected-prediction")
        yield RatedResponses(
            [Message("user", finegrained_prompt(question, row.get("passages") or []))],
            responses,
            scores,
            {"row": row_no, "responses": names},
            "finegrained-qa",
        )


def _rated(rows: Rows, report: DataReport) -> Iterator[Record]:
    for row_no, row in rows:
        try:
            prompt = parse_messages(_field(row, "prompt"), "prompt")
            responses = [parse_messages(r, f"responses[{i}]") for i, r in enumerate(_field(row, "responses"))]
            scores = _field(row, "scores")
            if not isinstance(scores, list) or len(scores) != len(responses):
                raise Skip("wrong_type", "field 'scores' must be a list with one mapping per response")
            for i, sc in enumerate(scores):
                if not isinstance(sc, dict) or not all(
                    isinstance(v, (int, float)) and not isinstance(v, bool) for v in sc.values()
                ):
                    raise Skip(
                        "wrong_type",
                        f'scores[{i}] must map objectives to numbers, e.g. {{"overall_score": 4}}; got {sc!r}',
                    )
        except Skip as s:
            report.drop(s.reason, row_no, s.detail)
            continue
        yield RatedResponses(
            [Message(m.role or "user", m.content) for m in prompt],
            [[Message(m.role or "assistant", m.content) for m in r] for r in responses],
            scores,
            dict(row.get("attributes") or {}),
            row.get("source", ""),
            row.get("id", ""),
        )


def _prompts(rows: Rows, report: DataReport) -> Iterator[Record]:
    for row_no, row in rows:
        try:
            prompt = parse_messages(_field(row, "prompt"), "prompt")
            if not "".join(m.content for m in prompt).strip():
                raise Skip("empty_field", "'prompt' is empty")
        except Skip as s:
            report.drop(s.reason, row_no, s.detail)
            continue
        yield PromptOnly(
            [Message(m.role or "user", m.content) for m in prompt],
            dict(row.get("meta") or {}),
            row.get("grader"),
            row.get("source", ""),
            row.get("id", ""),
        )


def _response_row(row: dict[str, Any]) -> tuple[list[Message], list[Message]]:
    """(prompt, response) of a responses row: {prompt, response | completion}, or {messages} whose last message is
    the assistant's response."""
    if "messages" in row and "prompt" not in row:
        conv = parse_messages(_field(row, "messages"), "messages")
        if len(conv) < 2 or conv[-1].role != "assistant":
            raise Skip("no_response", "'messages' must end with an assistant message (the response to score)")
        prompt, response = conv[:-1], conv[-1:]
    else:
        key = "response" if "response" in row else "completion"
        prompt = parse_messages(_field(row, "prompt"), "prompt")
        response = [Message(m.role or "assistant", m.content) for m in parse_messages(_field(row, key), key)]
    if not "".join(m.content for m in prompt).strip():
        raise Skip("empty_field", "the prompt is empty")
    if not "".join(m.content for m in response).strip():
        raise Skip("empty_response", "the response is empty")
    return [Message(m.role or "user", m.content) for m in prompt], response


def _responses(rows: Rows, report: DataReport) -> Iterator[Record]:
    """One response to one prompt per row, unrated (what `align rm score` scores; pair builders skip them)."""
    for row_no, row in rows:
        try:
            prompt, response = _response_row(row)
        except Skip as s:
            report.drop(s.reason, row_no, s.detail)
            continue
        yield RatedResponses(prompt, [response], [{}], {"row": row_no}, row.get("source", ""), str(row.get("id") or ""))


def _trl(rows: Rows, report: DataReport) -> Iterator[Record]:
    yield from _pairs(_trl_row, "")(rows, report)


def _suite_pairs(rows: Rows, report: DataReport) -> Iterator[Record]:
    """Our own dumps (PreferencePair.to_dict) keep their id, source and attributes."""
    for row_no, row in rows:
        try:
            pair = _trl_row(row)
        except Skip as s:
            report.drop(s.reason, row_no, s.detail)
            continue
        pair.attributes = dict(row.get("attributes") or {})
        pair.source = str(row.get("source") or "")
        pair.id = str(row.get("id") or pair.id)
        yield pair


@dataclass(frozen=True)
class Format:
    adapt: Callable[[Rows, DataReport], Iterator[Record]]
    summary: str
    yields: str
    detect: Callable[[dict[str, Any]], bool]
    why: str  # the detection rule in words, reported with the choice
    reads: tuple[str, ...]  # the fields the adapter reads (patterns like "prediction *" match a numbered family)


def _is_hh(row: dict[str, Any]) -> bool:
    c = row.get("chosen")
    return "prompt" not in row and isinstance(c, str) and c.lstrip(" ").startswith("\n\nHuman:")


FORMATS: Table[Format] = Table(
    "data format",
    {
        "hh": Format(
            _pairs(_hh_row, "hh-rlhf"),
            "Anthropic HH-RLHF transcripts {chosen, rejected}",
            "pairs",
            _is_hh,
            "'chosen' is a transcript starting with '\\n\\nHuman:' and there is no 'prompt'",
            ("chosen", "rejected"),
        ),
        "records": Format(
            _suite_pairs,
            "this toolkit's own pair dumps (PreferencePair.to_dict)",
            "pairs",
            lambda r: {"id", "prompt", "chosen", "rejected", "attributes"} <= set(r),
            "rows have id, prompt, chosen, rejected and attributes",
            ("id", "prompt", "chosen", "rejected", "attributes", "margin", "source"),
        ),
        "trl": Format(
            _trl,
            "TRL preference data, standard or conversational, implicit or explicit prompt",
            "pairs",
            lambda r: "chosen" in r and "rejected" in r,
            "rows have 'chosen' and 'rejected'",
            ("prompt", "chosen", "rejected", "margin", "score_chosen", "score_rejected"),
        ),
        "finegrained": Format(
            _finegrained,
            "FineGrainedRLHF qa-feedback (4 predictions, 6 pairwise labels)",
            "pairs",
            lambda r: "question" in r and "prediction 1" in r,
            "rows have 'question' and 'prediction 1'",
            ("question", "passages", "prediction *", "preference"),
        ),
        "finegrained_labels": Format(
            _finegrained_labels,
            "FineGrainedRLHF qa-feedback's fine-grained labels: the corrected prediction and prediction 1 scored "
            "on relevance, factuality and completeness",
            "rated",
            lambda r: False,
            "never detected (the rows are 'finegrained' rows): set format: finegrained_labels",
            ("question", "passages", "prediction 1", "feedback"),
        ),
        "ultrafeedback": Format(
            _ultrafeedback,
            "UltraFeedback multi-completion ratings",
            "rated",
            lambda r: "completions" in r,
            "rows have 'completions'",
            ("instruction", "prompt", "completions", "source"),
        ),
        "helpsteer": Format(
            _helpsteer,
            "HelpSteer-style attribute scores, one response per row",
            "rated",
            lambda r: "response" in r and "helpfulness" in r,
            "rows have 'response' and 'helpfulness'",
            ("prompt", "response", *HELPSTEER_ATTRIBUTES),
        ),
        "rated": Format(
            _rated,
            "rated responses {prompt, responses, scores}",
            "rated",
            lambda r: "responses" in r and "scores" in r,
            "rows have 'responses' and 'scores'",
            ("prompt", "responses", "scores", "attributes", "source", "id"),
        ),
        "responses": Format(
            _responses,
            "one response to score per row: {prompt, response} (or completion), or {messages} ending with the "
            "assistant's response",
            "rated",
            lambda r: (
                ("prompt" in r and ("response" in r or "completion" in r) and "chosen" not in r)
                or ("messages" in r and "prompt" not in r and "chosen" not in r)
            ),
            "rows have 'prompt' and 'response' (or 'completion'), or 'messages'",
            ("prompt", "response", "completion", "messages", "source", "id"),
        ),
        "prompts": Format(
            _prompts,
            "prompt-only rows {prompt, meta?, grader?} for online training",
            "prompts",
            lambda r: "prompt" in r and "chosen" not in r,
            "rows have 'prompt' and no 'chosen'",
            ("prompt", "meta", "grader", "source", "id"),
        ),
    },
    columns=("summary", "yields"),
)

# Field names that carry a response, a rating or a preference label. A detected format that would ignore
# one of these is refused: a file of comparisons read as prompt-only rows would silently lose every label.
_RESPONSE_LIKE = re.compile(
    r"response|completion|answer|output|chosen|rejected|prediction|label|preference|"
    r"winner|score|rating|generation",
    re.IGNORECASE,
)


def _reads(fmt: Format, key: str) -> bool:
    return any(key == f or (f.endswith(" *") and key.startswith(f[:-1])) for f in fmt.reads)


def unused_response_fields(name: str, row: dict[str, Any]) -> list[str]:
    """Fields of `row` that look like responses, ratings or labels but format `name` does not read."""
    fmt = FORMATS[name]
    return [k for k in row if isinstance(k, str) and not _reads(fmt, k) and _RESPONSE_LIKE.search(k)]


def detect_format(row: dict[str, Any], where: str) -> tuple[str, str]:
    """(format name, why it was chosen) for a data source whose first row is `row`.

    Refuses, naming the fields, when the detected format would ignore fields that look like responses,
    ratings or labels (e.g. Auto-J's {prompt, response 1, response 2, label} would otherwise be read as
    prompt-only rows and lose every comparison).
    """
    presets = matching_presets(row)
    labelled = (
        f" The fields match the labelled comparison preset(s) {', '.join(presets)}: set `preset: {presets[0]}` "
        f"(`--preset {presets[0]}`)."
        if presets
        else " A labelled comparison file (two responses and a label) reads through `preset` (`align ls presets`) "
        "or a `columns` map."
    )
    for name in FORMATS:
        fmt = FORMATS[name]
        if not fmt.detect(row):
            continue
        unused = unused_response_fields(name, row)
        if unused:
            raise UserError(
                f"{where}: the fields look like format '{name}' ({fmt.why}), but that format would ignore "
                f"{', '.join(repr(k) for k in unused)}, which look like responses or labels; nothing was read. "
                f"Rename the fields to a supported layout (e.g. TRL's prompt / chosen / rejected; see `align ls "
                f"formats`), or set `format: {name}` explicitly to read the file as {fmt.yields} and ignore them."
                + labelled
            )
        return name, f"detected: {fmt.why}"
    raise UserError(
        f"{where}: cannot tell the data format from the fields {sorted(row)}; set `format` to one of "
        f"{', '.join(FORMATS.names())} (see `align ls formats`)." + labelled
    )
