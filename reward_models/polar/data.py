"""POLAR training rows and their token ids.

A row is (prompt, reference, chosen, rejected): the reward model should score `chosen` above `rejected` when
both are read against `reference`. Two stages make rows:

- pre-training (`pool_triples`, reference `reward-models.md` §3.1): for a prompt, two different policies A != B
  are drawn (seeded); two of A's trajectories are the reference and the positive (chosen), one of B's is the
  negative (rejected). The target is "same policy as the reference", not quality.
- fine-tuning (§3.3): preference pairs that carry a reference answer, `{"prompt", "reference", "chosen",
  "rejected"}` (POLAR's fine-tuning line); the suite provides them from its tasks' reference answers
  (`suite_rows`).

`tokenize_rows` turns rows into `TokenizedPair`s that share the reference half (`format.encode`), so the packed
trainer of `reward_models.training` runs them unchanged: prompt_ids = ref_cat + <|reward|>, chosen_ids /
rejected_ids = cand_cat + <|reward_end|>, the reward read at the last token of each.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from prefalign.errors import UserError
from preference_data.records import Conversation, Message, conversation, stable_id
from preference_data.suite import build_suite
from preference_data.tokenize import TokenizedPair

from .format import InputSection, TooLong, encode

POOL_FILE = "pool.jsonl"
"""The policy pool a polar_pool run writes (`polar.pool`), one trajectory a line; pre-training reads it."""


@dataclass
class PolarRow:
    prompt: Conversation
    reference: Conversation
    chosen: Conversation
    rejected: Conversation
    id: str = ""
    source: str = ""
    attributes: dict[str, Any] = field(default_factory=dict)


# --- pre-training triples --------------------------------------------------------------------------------------


def read_pool(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a pool cache (a pool.jsonl, or the directory holding it)."""
    p = Path(path).expanduser()
    if p.is_dir():
        p = p / POOL_FILE
    if not p.exists():
        raise UserError(
            f"no policy pool at {p}; build one with `align rm train --config configs/polar_pool_suite.yaml`"
        )
    return [json.loads(line) for line in p.read_text(encoding="utf-8").splitlines() if line.strip()]


def pool_triples(pool: list[dict[str, Any]], per_prompt: int = 1, seed: int = 0) -> list[PolarRow]:
    """(reference from A, positive from A, negative from B) for each prompt, `per_prompt` times with A != B
    drawn afresh (seeded by prompt id). A policy with fewer than two trajectories of a prompt cannot be A there;
    a pool of one policy is an error, since POLAR needs a second policy to contrast with."""
    by_prompt: dict[str, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for r in pool:
        by_prompt[r["prompt_id"]][r["policy"]].append(r)
    policies = sorted({r["policy"] for r in pool})
    if len(policies) < 2:
        raise UserError(
            f"the policy pool has {len(policies)} polic{'y' if len(policies) == 1 else 'ies'} "
            f"({', '.join(policies) or 'none'}); POLAR pre-training contrasts trajectories of policy A with those "
            "of a different policy B, so list at least two policies in the polar_pool config"
        )
    out = []
    for pid in sorted(by_prompt):
        trajs = by_prompt[pid]
        rng = random.Random(f"polar-triples:{seed}:{pid}")
        as_a = sorted(p for p, rows in trajs.items() if len(rows) >= 2)
        for k in range(per_prompt):
            if not as_a or len(trajs) < 2:
                break
            a = rng.choice(as_a)
            b = rng.choice(sorted(p for p in trajs if p != a))
            ref, pos = rng.sample(trajs[a], 2)
            neg = rng.choice(trajs[b])
            prompt = conversation(ref["prompt"])
            out.append(
                PolarRow(
                    prompt,
                    [Message("assistant", ref["response"])],
                    [Message("assistant", pos["response"])],
                    [Message("assistant", neg["response"])],
                    id=stable_id("polar-triple", pid, k, a, b, ref["sample"], pos["sample"], neg["sample"]),
                    source="policy_pool",
                    attributes={"prompt_id": pid, "policy_a": a, "policy_b": b},
                )
            )
    return out


def split_by_prompt(rows: list[PolarRow], eval_fraction: float, seed: int = 0) -> tuple[list[PolarRow], list[PolarRow]]:
    """(train, held-out) by a hash of the prompt id, so no prompt is in both."""
    if eval_fraction <= 0:
        return rows, []
    train: list[PolarRow] = []
    held: list[PolarRow] = []
    for r in rows:
        h = int(stable_id("polar-split", seed, r.attributes.get("prompt_id", r.id))[:8], 16) / 16**8
        (held if h < eval_fraction else train).append(r)
    return train, held


# --- fine-tuning rows ------------------------------------------------------------------------------------------


def suite_rows(split: Literal["train", "test"], per_family: int = 200, seed: int = 0) -> list[PolarRow]:
    """The suite's pairs of one split with their task's reference answer (the canonical good phrasing)."""
    suite = build_suite(per_family, seed)
    refs = {t.id: t.reference for t in suite.tasks}
    pairs = suite.train_pairs if split == "train" else suite.test_pairs
    return [
        PolarRow(
            list(p.prompt),
            [Message("assistant", refs[p.attributes["task_id"]])],
            list(p.chosen),
            list(p.rejected),
            id=p.id,
            source=p.source,
            attributes=dict(p.attributes),
        )
        for p in pairs
    ]


def _conv(value: Any, role: str, where: str) -> Conversation:
    if isinstance(value, str):
        return [Message(role, value)]
    if isinstance(value, list) and value and all(isinstance(m, dict) and "content" in m for m in value):
        return [Message(str(m.get("role", role)), str(m["content"])) for m in value]
    raise UserError(f"{where}: expected a string or a list of {{role, content}} messages, got {value!r:.80}")


def file_rows(path: str) -> list[PolarRow]:
    """POLAR fine-tuning lines `{"prompt", "reference", "chosen", "rejected"}` (strings or message lists), or
    `PreferencePair.to_dict()` lines whose attributes carry `reference`."""
    p = Path(path).expanduser()
    if not p.exists():
        raise UserError(f"data.source: {p} does not exist; use 'suite' or a JSONL of prompt/reference/chosen/rejected")
    out, missing = [], 0
    for i, line in enumerate(p.read_text(encoding="utf-8").splitlines()):
        if not line.strip():
            continue
        row = json.loads(line)
        where = f"{p} line {i + 1}"
        ref = row.get("reference", (row.get("attributes") or {}).get("reference"))
        if ref is None:
            missing += 1
            continue
        missing_keys = [k for k in ("prompt", "chosen", "rejected") if k not in row]
        if missing_keys:
            raise UserError(
                f"{where}: no {', '.join(missing_keys)}; a POLAR row has prompt, reference, chosen, rejected"
            )
        out.append(
            PolarRow(
                _conv(row["prompt"], "user", f"{where} prompt"),
                _conv(ref, "assistant", f"{where} reference"),
                _conv(row["chosen"], "assistant", f"{where} chosen"),
                _conv(row["rejected"], "assistant", f"{where} rejected"),
                id=str(row.get("id") or f"{p.name}:{i}"),
                source=str(row.get("source") or p.name),
                attributes=dict(row.get("attributes") or {}),
            )
        )
    if not out:
        raise UserError(
            f"{p}: no row has a reference answer ({missing} rows without one); a POLAR fine-tuning row is "
            '{"prompt", "reference", "chosen", "rejected"}'
        )
    return out


# --- tokenization ----------------------------------------------------------------------------------------------


@dataclass
class RowReport:
    rows_in: int = 0
    pairs_out: int = 0
    too_long_reference: int = 0
    truncated: int = 0
    examples: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def tokenize_rows(rows: list[PolarRow], tokenizer: Any, cfg: InputSection) -> tuple[list[TokenizedPair], RowReport]:
    """Token ids of every row (`format.encode`); a reference over the budget is skipped and counted."""
    rep = RowReport(rows_in=len(rows))
    out = []
    for r in rows:
        try:
            c, j = encode(tokenizer, r.prompt, r.reference, [r.chosen, r.rejected], cfg)
        except TooLong as e:
            rep.too_long_reference += 1
            if len(rep.examples) < 5:
                rep.examples.append(f"{r.id}: reference of {e.args[0]} tokens > {cfg.max_response_length}")
            continue
        rep.truncated += c.truncated or j.truncated
        out.append(TokenizedPair(r.id, r.source, c.prefix_ids, c.candidate_ids, j.candidate_ids, None, r.attributes))
    rep.pairs_out = len(out)
    return out, rep
