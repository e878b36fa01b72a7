"""`align rm score`: one score per response of a data file, written as JSONL.

Input: any stage-1 source: preference pairs (chosen and rejected are scored), rated responses (every response), or
one response per row ({prompt, response}, {prompt, completion}, or {messages} ending with the assistant's turn).
Output rows: {"id", "response": "chosen" | "rejected" | <index>, "score", "prompt": [messages], "text": the
response's text}, in the input's order. (Pair accuracy and its breakdowns come from `align bench run pairs`.)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import cast

from prefalign.errors import UserError
from preference_data.records import PreferencePair, RatedResponses
from preference_data.sources import read_records

from .model_scorers import ScalarScorer
from .scorers import load_scorer


def score_file(
    model: str, data: str, out: str, normalize: bool, fmt: str, dtype: str, batch_tokens: int
) -> tuple[int, Path]:
    """Score every response in `data` with the reward model `model`; return (rows written, path)."""
    records, report = read_records(data, fmt)
    items: list[tuple[str, str, list, list]] = []  # (record id, which response, prompt, response)
    for r in records:
        if isinstance(r, PreferencePair):
            items.append((r.id, "chosen", r.prompt, r.chosen))
            items.append((r.id, "rejected", r.prompt, r.rejected))
        elif isinstance(r, RatedResponses):
            items.extend((r.id, str(i), r.prompt, resp) for i, resp in enumerate(r.responses))
    if not items:
        raise UserError(
            f"{data}: no responses to score ({report.rows_read} rows read, "
            f"{report.dropped_total} dropped: {dict(report.dropped)}); run `align data doctor {data}`"
        )
    scorer = cast(
        ScalarScorer,
        load_scorer("scalar", model=model, normalize=normalize, dtype=dtype, batch_tokens=batch_tokens),
    )
    scores = scorer.score([it[2] for it in items], [it[3] for it in items])
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for (rid, which, prompt, response), s in zip(items, scores, strict=True):
            row = {"id": rid, "response": which, "score": s, "prompt": [m.to_dict() for m in prompt]}
            f.write(json.dumps(row | {"text": "\n".join(m.content for m in response)}) + "\n")
    return len(items), path
