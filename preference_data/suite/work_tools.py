"""The list operations a judge's work asks for, done by rule as the judge writes (its `lists` tool).

A judge warmed up on `checks.work` copies a list task's items right ("Items: lima, delhi, lima, rome (4 items).") and
names the right operation ("Without repeats:"), but a 135M model does not sort, reverse or drop repeats in its
weights: of the first 25 list tasks of suite seed 0's dev split its greedy work got 3 right (docs/reward-models.md).
As the calculator writes the value after `a op b =`, these tools write the operation's result after the judge names
it, applied to the items the judge itself copied:

    Items: lima, delhi, lima, rome (4 items). Without repeats:| lima, delhi, rome (3 items).
    Items: red, violet, purple (3 items). Item 2 (the second) is| violet.

(the judge wrote up to `|`, the tool what follows). Each tool is called by the sentence's own head (`CLAIMS["op"]`
up to its colon for each operation of `OP_WORDS`; `CLAIMS["kth"]` up to its item), so a judge that writes its work
as it learnt it calls them without training for them. Nothing here reads the task: the result is as right as the
items and the operation the judge wrote (a wrong operation named, a list copied wrong, gives a wrong result). A
tool answers nothing (the judge goes on writing) where no `Items:` sentence comes before its call, where k is past
the list's end, or where a numeric sort meets an item that is not an integer.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from .checks import CLAIMS, OP_WORDS, claim
from .lists import apply_op

_ITEMS_HEAD, _, _ITEMS_TAIL = CLAIMS["items"].partition("{items}")
_ITEMS_RE = re.compile(re.escape(_ITEMS_HEAD) + r"(.+?)" + re.escape(_ITEMS_TAIL[:2]))
"""the items of the last "Items: a, b, c (" the judge wrote"""
_KTH_HEAD = CLAIMS["kth"].split("{ordinal}")[0] + "{ordinal}"
KTH_STOP = CLAIMS["kth"].split("{ordinal}")[1].split("{item}")[0].rstrip()
"""the text that calls the k-th item tool: ") is" of "Item {k} (the {ordinal}) is {item}." """
_KTH_ANSWER = CLAIMS["kth"].split("{ordinal}")[1][len(KTH_STOP) :]
"""what it writes: " {item}." """
_KTH_RE = re.compile(re.escape(_KTH_HEAD).replace(r"\{k\}", r"(\d+)").replace(r"\{ordinal\}", r"\w+") + r"$")


def _items(text: str) -> list[str] | None:
    found = _ITEMS_RE.findall(text)
    items = [x.strip() for x in found[-1].split(",") if x.strip()] if found else []
    return items or None


def _op_call(op: str, stop: str) -> Callable[[str], str | None]:
    def call(text: str) -> str | None:
        items = _items(text)
        if items is None:
            return None
        try:
            result = apply_op(op, items)
        except ValueError:  # a numeric sort of an item that is not an integer
            return None
        return claim("op", op=OP_WORDS[op].capitalize(), items=", ".join(result), n=len(result))[len(stop) :]

    return call


def _kth_call(text: str) -> str | None:
    m = _KTH_RE.search(text)
    items = _items(text)
    if m is None or items is None:
        return None
    k = int(m[1])
    if not 1 <= k <= len(items):
        return None
    return _KTH_ANSWER.format(item=items[k - 1])


def list_tools() -> dict[str, Callable[[str], str | None]]:
    """Stop string -> call, one per operation and one for the k-th item: what `Tool(description, stop, call)` takes
    (the text written so far, up to the stop string -> what to write after it)."""
    tools: dict[str, Callable[[str], str | None]] = {}
    for op, words in OP_WORDS.items():
        stop = claim("op", op=words.capitalize(), items="", n=0).split(":")[0] + ":"
        tools[stop] = _op_call(op, stop)
    tools[KTH_STOP] = _kth_call
    return tools
