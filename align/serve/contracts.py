"""What each engine sends and reads, checked field by field: the request bodies of the three contracts and the
responses written back. Pure Python (no HTTP stack, no torch), so the adapters build requests with the same code.

A malformed request is a `BadRequest` listing every problem, each naming its field (`query[2]: expected a string,
got 3`); too much is a `TooLarge` (413). NaN and abstentions go out as JSON null, never as 0 and never as a bare
`NaN` (not JSON).

Native (`POST /score`), batched, with components and abstentions:
    request   {"items": [{"prompt": str | [{"role", "content"}], "response": str | [{"role": "assistant", ...}],
                          "reference": str (optional), "meta": {...} (optional), "grader": str (optional)}]}
    response  {"rewards": [float | null], "components": {name: [float | null]}, "abstained": int,
               "names": [name], "cached": int}

OpenRLHF (`POST /openrlhf`, also `/get_reward` as its own server names it), one sample per request from its
single-turn executor, any number accepted:
    request   {"query": [str], "prompts": [str] (optional), "labels": [any] (optional)}
    response  {"rewards": [float | null], "scores": [float | null] in [0, 1], "extra_logs": {name: [float | null]}}
    A label that is a non-empty string (or a number) is the reference answer; a mapping may give "reference", "meta",
    "grader"; any other label carries none.

vLLM pooling `/classify` (the shape verl's discriminative-RM path posts):
    request   {"model": str, "input": str | [str], "use_activation": bool (optional)}
    response  {"id", "object": "list", "created", "model", "data": [{"index", "label", "probs": [float | null],
               "num_classes"}], "usage": {"prompt_tokens", "total_tokens", "completion_tokens": 0}}
    probs[-1] is the reward (verl reads data[-1].probs[-1]); a composed reward puts its components first.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from prefalign.errors import did_you_mean
from preference_data.records import ROLES, Conversation, Message


class BadRequest(Exception):
    """A request the server cannot read: 400 with every problem, each naming its field."""

    status = 400

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


class TooLarge(BadRequest):
    """A request over a limit (body bytes, items): 413."""

    status = 413


class Unprocessable(BadRequest):
    """A well-formed request the served reward cannot score as sent (a text that is not the template's): 422."""

    status = 422


@dataclass
class Item:
    """One (prompt, response) to score, with what a reference scorer or a rule reads."""

    prompt: Conversation
    response: str
    reference: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    grader: str | None = None

    def key(self) -> str:
        """The cache key: a hash of everything that can change a score."""
        blob = json.dumps(
            [[m.to_dict() for m in self.prompt], self.response, self.reference, self.meta, self.grader],
            sort_keys=True,
            ensure_ascii=False,
            default=str,
        )
        return hashlib.sha256(blob.encode("utf-8", "surrogatepass")).hexdigest()

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"prompt": [m.to_dict() for m in self.prompt], "response": self.response}
        if self.reference is not None:
            out["reference"] = self.reference
        if self.meta:
            out["meta"] = self.meta
        if self.grader is not None:
            out["grader"] = self.grader
        return out


def _type(v: Any) -> str:
    return "null" if v is None else type(v).__name__


def _show(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def number(x: float | None) -> float | None:
    """A score as JSON: None for NaN, infinities and abstentions."""
    return None if x is None or not math.isfinite(x) else float(x)


def read_json(body: bytes) -> Any:
    """The request body as JSON; `BadRequest` for an empty body, invalid UTF-8, invalid JSON, NaN or Infinity."""
    if not body.strip():
        raise BadRequest(["body: empty; send a JSON object"])
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        bad = f"byte {body[e.start]:#04x} at offset {e.start}"
        raise BadRequest([f"body: not UTF-8 ({bad}); send UTF-8 JSON"]) from None

    def constant(name: str) -> Any:
        raise ValueError(f"{name} is not JSON; send null for a missing number")

    try:
        return json.loads(text, parse_constant=constant)
    except json.JSONDecodeError as e:
        raise BadRequest([f"body: invalid JSON ({e.msg} at line {e.lineno} column {e.colno})"]) from None
    except (ValueError, RecursionError) as e:  # NaN/Infinity, an integer over Python's digit limit, deep nesting
        raise BadRequest([f"body: invalid JSON ({str(e)[:200] or type(e).__name__})"]) from None


def _object(body: Any, fields: str) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise BadRequest([f"body: expected a JSON object with {fields}, got {_type(body)}"])
    return body


def _string(v: Any, at: str, problems: list[str], empty_ok: bool = False) -> str | None:
    if not isinstance(v, str):
        problems.append(f"{at}: expected a string, got {_type(v)} {_show(v)}")
        return None
    if not empty_ok and not v:
        problems.append(f"{at}: empty string")
        return None
    try:
        v.encode("utf-8")
    except UnicodeEncodeError as e:  # a lone surrogate ("\\ud800" in JSON): no tokenizer can encode it
        problems.append(f"{at}: not valid Unicode (a lone surrogate at character {e.start})")
        return None
    return v


def _list(v: Any, at: str, problems: list[str], max_items: int) -> list[Any] | None:
    if not isinstance(v, list):
        problems.append(f"{at}: expected a list, got {_type(v)} {_show(v)}")
        return None
    if len(v) > max_items:
        raise TooLarge([f"{at}: {len(v)} items, the limit is {max_items} (align serve --max-items)"])
    return v


def _messages(v: Any, at: str, problems: list[str]) -> Conversation | None:
    if isinstance(v, str):
        return [Message("user", v)] if _string(v, at, problems) is not None else None
    if not isinstance(v, list):
        problems.append(f"{at}: expected a string or a list of {{role, content}} messages, got {_type(v)}")
        return None
    if not v:
        problems.append(f"{at}: empty list of messages")
        return None
    out: Conversation = []
    for i, m in enumerate(v):
        where = f"{at}[{i}]"
        if not isinstance(m, dict):
            problems.append(f"{where}: expected a {{role, content}} mapping, got {_type(m)}")
            continue
        extra = sorted(set(m) - {"role", "content"})
        if extra:
            problems.append(f"{where}: unknown keys {extra}; a message has role and content")
        role = _string(m.get("role"), f"{where}.role", problems)
        content = _string(m.get("content"), f"{where}.content", problems, empty_ok=True)
        if role is not None and role not in ROLES:
            problems.append(f"{where}.role: '{role}' is not a role{did_you_mean(role, ROLES)}; use {', '.join(ROLES)}")
            continue
        if role is not None and content is not None:
            out.append(Message(role, content))
    return out


def _response(v: Any, at: str, problems: list[str]) -> str | None:
    """A response: its text, or a TRL conversational completion (one assistant message)."""
    if isinstance(v, str):
        return _string(v, at, problems, empty_ok=True)
    if isinstance(v, list):
        msgs = _messages(v, at, problems) if v else None
        if msgs is None:
            if not v:
                problems.append(f"{at}: empty list; send the response text")
            return None
        if len(msgs) != 1 or msgs[0].role != "assistant":
            roles = [m.role for m in msgs]
            problems.append(f"{at}: a response is its text or one assistant message, got roles {roles}")
            return None
        return msgs[0].content
    problems.append(f"{at}: expected the response text (or one assistant message), got {_type(v)} {_show(v)}")
    return None


ITEM_KEYS = ("prompt", "response", "reference", "meta", "grader")


def parse_native(body: Any, max_items: int) -> list[Item]:
    """`POST /score`."""
    data = _object(body, "'items'")
    problems: list[str] = []
    extra = sorted(set(data) - {"items"})
    if extra:
        problems.append(f"{extra[0]}: unknown key{did_you_mean(extra[0], ['items'])}; the request is {{items: [...]}}")
    if "items" not in data:
        raise BadRequest([*problems, 'items: missing; send {"items": [{"prompt": ..., "response": ...}]}'])
    raw = _list(data["items"], "items", problems, max_items)
    items: list[Item] = []
    for i, it in enumerate(raw or []):
        at = f"items[{i}]"
        if not isinstance(it, dict):
            problems.append(f"{at}: expected a mapping with prompt and response, got {_type(it)}")
            continue
        for k in sorted(set(it) - set(ITEM_KEYS)):
            problems.append(f"{at}.{k}: unknown key{did_you_mean(k, ITEM_KEYS)}; an item has {', '.join(ITEM_KEYS)}")
        for k in ("prompt", "response"):
            if k not in it:
                problems.append(f"{at}.{k}: missing")
        prompt = _messages(it.get("prompt"), f"{at}.prompt", problems) if "prompt" in it else None
        response = _response(it.get("response"), f"{at}.response", problems) if "response" in it else None
        reference = it.get("reference")
        if reference is not None:
            reference = _string(reference, f"{at}.reference", problems)
        meta = it.get("meta", {})
        if not isinstance(meta, dict):
            problems.append(f"{at}.meta: expected a mapping, got {_type(meta)}")
            meta = {}
        grader = it.get("grader")
        if grader is not None:
            grader = _string(grader, f"{at}.grader", problems)
        if prompt is not None and response is not None:
            items.append(Item(prompt, response, reference, meta, grader))
    if problems:
        raise BadRequest(problems)
    if not items:
        raise BadRequest(["items: empty list; send at least one item"])
    return items


@dataclass
class OpenRLHFRequest:
    query: list[str]
    prompts: list[str | None]
    labels: list[Any]


def parse_openrlhf(body: Any, max_items: int) -> OpenRLHFRequest:
    """`POST /openrlhf`: checks types and lengths (splitting each query is the template's job)."""
    data = _object(body, "'query' (and 'prompts', 'labels')")
    problems: list[str] = []
    known = ("query", "prompts", "labels")
    for k in sorted(set(data) - set(known)):
        problems.append(f"{k}: unknown key{did_you_mean(k, known)}; OpenRLHF sends query, prompts and labels")
    if "query" not in data:
        raise BadRequest([*problems, 'query: missing; OpenRLHF sends {"query": [text], "prompts": [text], ...}'])
    query = _list(data["query"], "query", problems, max_items) or []
    texts = [_string(q, f"query[{i}]", problems) for i, q in enumerate(query)]
    if not query and not problems:
        problems.append("query: empty list; send one text per sample")
    prompts: list[str | None] = [None] * len(query)
    if data.get("prompts") is not None:
        raw = _list(data["prompts"], "prompts", problems, max_items)
        if raw is not None:
            if len(raw) != len(query):
                problems.append(f"prompts: {len(raw)} texts for {len(query)} queries; send one per query")
            else:
                prompts = [_string(p, f"prompts[{i}]", problems, empty_ok=True) or None for i, p in enumerate(raw)]
    labels: list[Any] = [None] * len(query)
    if data.get("labels") is not None:
        raw = _list(data["labels"], "labels", problems, max_items)
        if raw is not None:
            if len(raw) != len(query):
                problems.append(f"labels: {len(raw)} labels for {len(query)} queries; send one per query")
            else:
                labels = raw
    if problems:
        raise BadRequest(problems)
    return OpenRLHFRequest([t for t in texts if t is not None], prompts, labels)


def label_fields(label: Any, at: str) -> tuple[str | None, dict[str, Any], str | None]:
    """(reference, meta, grader) of an OpenRLHF label (its dataset's label column, any JSON): a non-empty string or a
    number is the reference answer; a mapping may give reference, meta and grader (other keys are an error); anything
    else (null, "", a list, a boolean) carries none, which is a 400 only when the served reward needs a reference."""
    if isinstance(label, str):
        return (label or None), {}, None
    if isinstance(label, int | float) and not isinstance(label, bool):
        return (str(label) if math.isfinite(label) else None), {}, None
    if not isinstance(label, dict):
        return None, {}, None
    problems: list[str] = []
    for k in sorted(set(label) - {"reference", "meta", "grader"}):
        problems.append(
            f"{at}.{k}: unknown key{did_you_mean(k, ['reference', 'meta', 'grader'])}; a label mapping "
            "has reference, meta and grader"
        )
    ref = label.get("reference")
    if ref is not None:
        ref = _string(ref, f"{at}.reference", problems)
    meta = label.get("meta", {})
    if not isinstance(meta, dict):
        problems.append(f"{at}.meta: expected a mapping, got {_type(meta)}")
    grader = label.get("grader")
    if grader is not None:
        grader = _string(grader, f"{at}.grader", problems)
    if problems:
        raise BadRequest(problems)
    return ref, meta if isinstance(meta, dict) else {}, grader


@dataclass
class ClassifyRequest:
    model: str | None
    inputs: list[str]
    use_activation: bool


def parse_classify(body: Any, max_items: int) -> ClassifyRequest:
    """`POST /classify` (vLLM's pooling request; fields vLLM has and the server does not read are ignored)."""
    data = _object(body, "'model' and 'input'")
    problems: list[str] = []
    model = data.get("model")
    if model is not None:
        model = _string(model, "model", problems)
    if "input" not in data:
        raise BadRequest([*problems, "input: missing; send the chat-templated text (or a list of them)"])
    raw = data["input"]
    if isinstance(raw, str):
        raw = [raw]
    texts = _list(raw, "input", problems, max_items) or []
    if not texts and not problems:
        problems.append("input: empty list")
    single = isinstance(data["input"], str)
    inputs = [_string(t, "input" if single else f"input[{i}]", problems) for i, t in enumerate(texts)]
    act = data.get("use_activation", False)
    if act is None:
        act = False
    if not isinstance(act, bool):
        problems.append(f"use_activation: expected true or false, got {_type(act)} {_show(act)}")
    if problems:
        raise BadRequest(problems)
    return ClassifyRequest(model, [t for t in inputs if t is not None], bool(act))


# --- responses ---------------------------------------------------------------------------------------------------


def native_response(rewards: list[float], components: list[list[float]], names: list[str], cached: int) -> dict:
    """rewards (S,), components (S, K) rows."""
    return {
        "rewards": [number(r) for r in rewards],
        "components": {n: [number(row[k]) for row in components] for k, n in enumerate(names)},
        "abstained": sum(number(r) is None for r in rewards),
        "names": list(names),
        "cached": cached,
    }


def sigmoid(x: float | None) -> float | None:
    if x is None:
        return None
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


def openrlhf_response(
    rewards: list[float], components: list[list[float]], names: list[str], scores: str
) -> dict[str, Any]:
    r = [number(x) for x in rewards]
    return {
        "rewards": r,
        "scores": [sigmoid(x) for x in r] if scores == "sigmoid" else r,
        "extra_logs": {n: [number(row[k]) for row in components] for k, n in enumerate(names)},
    }


def classify_response(
    model: str, rewards: list[float], components: list[list[float]], use_activation: bool
) -> dict[str, Any]:
    """`use_activation`: sigmoid on every prob (vLLM's activation for a one-label head); usage is not counted."""
    data = []
    for i, (r, row) in enumerate(zip(rewards, components, strict=True)):
        probs = [number(x) for x in row] if len(row) > 1 else []
        probs.append(number(r))
        if use_activation:
            probs = [sigmoid(p) for p in probs]
        data.append({"index": i, "label": "reward", "probs": probs, "num_classes": len(probs)})
    return {
        "id": f"classify-{uuid.uuid4().hex}",
        "object": "list",
        "created": int(time.time()),
        "model": model,
        "data": data,
        "usage": {"prompt_tokens": 0, "total_tokens": 0, "completion_tokens": 0},
    }


def error_body(status: int, problems: list[str], kind: str) -> dict[str, Any]:
    """Every error, on every endpoint: OpenAI/vLLM's error fields plus the list of problems."""
    message = problems[0] if problems else kind
    return {"object": "error", "message": message, "type": kind, "code": status, "problems": problems}


__all__ = [
    "BadRequest",
    "ClassifyRequest",
    "Item",
    "OpenRLHFRequest",
    "TooLarge",
    "Unprocessable",
    "classify_response",
    "error_body",
    "label_fields",
    "native_response",
    "number",
    "openrlhf_response",
    "parse_classify",
    "parse_native",
    "parse_openrlhf",
    "read_json",
    "sigmoid",
]
