"""Core records of stage 1: what every adapter produces and every later stage consumes.

A conversation is a list of `Message`. A `PreferencePair` holds the shared prompt (the conversation
prefix, ending with a user turn) and two assistant continuations. `RatedResponses` holds several
responses to one prompt with one or more score dimensions; pair builders (`pairing.py`) turn it into
pairs. `PromptOnly` is for online training and carries the name of its gold grader, if any. A `LabelledComparison`
is a human-labelled comparison (two responses and one verdict per annotator, or a best-of-n item with one
winner), read from any labelled file through a column map (`comparisons.py`); it is what judges and reward
models are checked against, and it becomes pairs for training.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any

from prefalign import files

ROLES = ("system", "user", "assistant")


@dataclass(frozen=True)
class Message:
    role: str
    content: str

    def to_dict(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}


Conversation = list[Message]


def conversation(items: list[dict[str, Any]] | list[Message]) -> Conversation:
    """Build a conversation from `{"role", "content"}` dicts (or pass messages through)."""
    out = []
    for m in items:
        out.append(m if isinstance(m, Message) else Message(str(m["role"]), str(m["content"])))
    return out


def text_of(conv: Conversation) -> str:
    """Plain concatenation of the contents (used for hashing and length heuristics)."""
    return "\n".join(m.content for m in conv)


def stable_id(*parts: Any) -> str:
    """A short content hash: the same record always gets the same id, on every machine."""
    h = hashlib.sha1(json.dumps(parts, sort_keys=True, ensure_ascii=False, default=str).encode("utf-8"))
    return h.hexdigest()[:16]


def _conv_dicts(conv: Conversation) -> list[dict[str, str]]:
    return [m.to_dict() for m in conv]


@dataclass
class PreferencePair:
    """One comparison: `chosen` is preferred to `rejected` as a continuation of `prompt`.

    prompt: the shared conversation prefix (ends with a user turn, may start with a system turn).
    chosen / rejected: the assistant continuations (usually one assistant message each).
    margin: optional preference strength (e.g. rating difference); used by margin losses.
    attributes: free-form metadata (task family, corruption kind, per-objective scores, ...).
    """

    prompt: Conversation
    chosen: Conversation
    rejected: Conversation
    margin: float | None = None
    attributes: dict[str, Any] = field(default_factory=dict)
    source: str = ""
    id: str = ""

    def __post_init__(self) -> None:
        if not self.id:
            self.id = stable_id(_conv_dicts(self.prompt), _conv_dicts(self.chosen), _conv_dicts(self.rejected))

    def swapped(self) -> PreferencePair:
        return PreferencePair(
            self.prompt,
            self.rejected,
            self.chosen,
            None if self.margin is None else -self.margin,
            dict(self.attributes),
            self.source,
            self.id + "-swap",
        )

    def to_dict(self) -> dict[str, Any]:
        """TRL conversational format with explicit prompt, plus our extra fields."""
        return {
            "id": self.id,
            "source": self.source,
            "prompt": _conv_dicts(self.prompt),
            "chosen": _conv_dicts(self.chosen),
            "rejected": _conv_dicts(self.rejected),
            "margin": self.margin,
            "attributes": self.attributes,
        }


@dataclass
class RatedResponses:
    """Several responses to one prompt; `scores[i][k]` is response i's score on dimension k."""

    prompt: Conversation
    responses: list[Conversation]
    scores: list[dict[str, float]]
    attributes: dict[str, Any] = field(default_factory=dict)
    source: str = ""
    id: str = ""

    def __post_init__(self) -> None:
        if not self.id:
            self.id = stable_id(_conv_dicts(self.prompt), [_conv_dicts(r) for r in self.responses])

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "source": self.source,
            "prompt": _conv_dicts(self.prompt),
            "responses": [_conv_dicts(r) for r in self.responses],
            "scores": self.scores,
            "attributes": self.attributes,
        }


@dataclass
class PromptOnly:
    """A prompt for online training; `grader` names a gold grader (suite family) when one exists."""

    prompt: Conversation
    meta: dict[str, Any] = field(default_factory=dict)
    grader: str | None = None
    source: str = ""
    id: str = ""

    def __post_init__(self) -> None:
        if not self.id:
            self.id = stable_id(_conv_dicts(self.prompt), self.meta)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "source": self.source,
            "prompt": _conv_dicts(self.prompt),
            "meta": self.meta,
            "grader": self.grader,
        }


VERDICTS = ("first", "second", "tie")
"""What a human label says about a two-response comparison: the first response is better, the second, or neither."""


@dataclass
class LabelledComparison:
    """Candidate responses to one prompt with the human verdicts on them.

    kind "pair": responses = [first, second]; labels holds one verdict per annotator (`VERDICTS`), in the
    order of `annotators` (who gave each; a column name or an annotator id).
    kind "best_of_n": responses = [winner, *losers]; the winner is the label, so `labels` is empty.
    category: the file's category of the item ("" when it has none), for per-category breakdowns.
    reference: a reference answer, for reference-conditioned scorers (None when the file has none).
    """

    prompt: Conversation
    responses: list[Conversation]
    labels: list[str] = field(default_factory=list)
    annotators: list[str] = field(default_factory=list)
    kind: str = "pair"
    category: str = ""
    reference: Conversation | None = None
    attributes: dict[str, Any] = field(default_factory=dict)
    source: str = ""
    id: str = ""

    def __post_init__(self) -> None:
        if not self.id:
            self.id = stable_id(_conv_dicts(self.prompt), [_conv_dicts(r) for r in self.responses])

    def majority(self) -> str | None:
        """The verdict most annotators gave, when strictly more gave it than any other; else None.

        A best-of-n item's majority is "first" (the winner is listed first)."""
        if self.kind == "best_of_n":
            return "first"
        counts = sorted(((self.labels.count(v), v) for v in VERDICTS), reverse=True)
        return counts[0][1] if counts[0][0] > counts[1][0] else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "source": self.source,
            "kind": self.kind,
            "prompt": _conv_dicts(self.prompt),
            "responses": [_conv_dicts(r) for r in self.responses],
            "labels": self.labels,
            "annotators": self.annotators,
            "category": self.category,
            "reference": None if self.reference is None else _conv_dicts(self.reference),
            "attributes": self.attributes,
        }


def pair_from_dict(d: dict[str, Any]) -> PreferencePair:
    """Inverse of `PreferencePair.to_dict`."""
    return PreferencePair(
        conversation(d["prompt"]),
        conversation(d["chosen"]),
        conversation(d["rejected"]),
        d.get("margin"),
        dict(d.get("attributes") or {}),
        d.get("source", ""),
        d.get("id", ""),
    )


def write_jsonl(path: str, rows: list[dict[str, Any]]) -> None:
    files.write_jsonl(path, rows, ensure_ascii=False)


__all__ = [
    "ROLES",
    "Message",
    "Conversation",
    "conversation",
    "text_of",
    "stable_id",
    "PreferencePair",
    "RatedResponses",
    "PromptOnly",
    "VERDICTS",
    "LabelledComparison",
    "pair_from_dict",
    "write_jsonl",
    "asdict",
]
