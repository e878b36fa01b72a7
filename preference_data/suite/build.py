"""Building the suite: tasks, offline pairs, online prompts, the train/test (and dev) split, files on disk.

    suite = build_suite(n_per_family=200, seed=0)     # train/test pairs and prompts
    build_suite(275, dev_fraction=0.25, test_fraction=0.2)   # and a dev split: settings chosen on it, test reported
    write_suite(suite, "data/suite")                  # four JSONL files + summary.json
    grade_prompt_only(suite.test_prompts[0], text)    # gold grade of a policy's answer

A task's id is a hash of its family and user message, so the same prompt always has the same id;
the split is a hash of the id, so it does not depend on the seed and a prompt never lands in both
splits (or in train under one seed and test under another). With `dev_fraction` the lowest `dev_fraction` of the
hash goes to dev and the next `test_fraction` to test: dev is then exactly the test split of a suite built without
dev at `test_fraction = dev_fraction`, so settings chosen on that earlier held-out set were chosen on dev.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import random
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from prefalign.errors import UserError
from prefalign.files import write_json

from ..records import Conversation, Message, PreferencePair, PromptOnly, conversation, stable_id, write_jsonl
from .base import Corrupted
from .families import FAMILIES, grade
from .scoring import Grade
from .text import word_count

SOURCE = "verifiable_suite"
SUITE_VERSION = 2
FILES = ("train_pairs.jsonl", "test_pairs.jsonl", "train_prompts.jsonl", "test_prompts.jsonl", "summary.json")


@dataclass
class Task:
    """One generated prompt with everything needed to grade answers to it.

    id: hash of family and user message. prompt: optional system turn + one user turn.
    reference: the canonical good answer. params: what the family's grader reads (JSON-ready).
    split: 'train', 'dev' or 'test'.
    """

    id: str
    family: str
    prompt: Conversation
    reference: str
    params: dict[str, Any]
    split: str = "train"

    def grade(self, response: str) -> Grade:
        """Gold grade of `response` to this task (see `families.grade`)."""
        return grade(self.family, self.params, response)

    def to_prompt_only(self, rejected: str | None = None) -> PromptOnly:
        """The online-training record: `grader` is the family, `meta` carries the params, the reference answer and
        (`rejected`) the rejected answer of the task's pair, which iterative rounds with `candidates:
        policy_and_data` rank beside the policy's samples."""
        meta = {
            "family": self.family,
            "task_id": self.id,
            "split": self.split,
            "params": self.params,
            "reference": self.reference,
        }
        if rejected is not None:
            meta["rejected"] = rejected
        return PromptOnly(list(self.prompt), meta, grader=self.family, source=SOURCE, id=self.id)


@dataclass
class Suite:
    """A built suite: tasks plus train/test pairs and prompts, and how it was made."""

    seed: int
    n_per_family: int
    test_fraction: float
    dev_fraction: float = 0.0
    tasks: list[Task] = field(default_factory=list)
    train_pairs: list[PreferencePair] = field(default_factory=list)
    test_pairs: list[PreferencePair] = field(default_factory=list)
    train_prompts: list[PromptOnly] = field(default_factory=list)
    test_prompts: list[PromptOnly] = field(default_factory=list)
    dev_pairs: list[PreferencePair] = field(default_factory=list)
    dev_prompts: list[PromptOnly] = field(default_factory=list)

    @property
    def pairs(self) -> list[PreferencePair]:
        """Train pairs, test pairs, then dev pairs."""
        return self.train_pairs + self.test_pairs + self.dev_pairs

    @property
    def splits(self) -> tuple[str, ...]:
        """The splits this suite has: train and test, and dev with a `dev_fraction`."""
        return ("train", "test", "dev") if self.dev_fraction else ("train", "test")

    def split_lists(self, split: str) -> tuple[list[PreferencePair], list[PromptOnly]]:
        """The pairs and prompts of one split."""
        return {
            "train": (self.train_pairs, self.train_prompts),
            "dev": (self.dev_pairs, self.dev_prompts),
            "test": (self.test_pairs, self.test_prompts),
        }[split]

    def summary(self) -> dict[str, Any]:
        """Counts per family, split and corruption kind, and mean words of chosen vs rejected."""
        fams: dict[str, Any] = {}
        for name in FAMILIES:
            tasks = [t for t in self.tasks if t.family == name]
            pairs = [p for p in self.pairs if p.attributes["family"] == name]
            fams[name] = {
                "tasks": len(tasks),
                **{f"{split}_prompts": sum(t.split == split for t in tasks) for split in self.splits},
                **{f"{split}_pairs": sum(p.attributes["split"] == split for p in pairs) for split in self.splits},
                "corruptions": dict(sorted(Counter(p.attributes["corruption"] for p in pairs).items())),
            }
        kinds: dict[str, Any] = {}
        for kind in sorted({p.attributes["corruption"] for p in self.pairs}):
            ps = [p for p in self.pairs if p.attributes["corruption"] == kind]
            kinds[kind] = {
                "pairs": len(ps),
                "mean_words_chosen": round(sum(word_count(p.chosen[0].content) for p in ps) / len(ps), 2),
                "mean_words_rejected": round(sum(word_count(p.rejected[0].content) for p in ps) / len(ps), 2),
            }
        longer = sum(word_count(p.chosen[0].content) > word_count(p.rejected[0].content) for p in self.pairs)
        counts = {}
        for split in self.splits:
            split_pairs, split_prompts = self.split_lists(split)
            counts[f"{split}_pairs"], counts[f"{split}_prompts"] = len(split_pairs), len(split_prompts)
        return {
            "source": SOURCE,
            "version": SUITE_VERSION,
            "seed": self.seed,
            "n_per_family": self.n_per_family,
            "test_fraction": self.test_fraction,
            **({"dev_fraction": self.dev_fraction} if self.dev_fraction else {}),
            "counts": counts,
            "families": fams,
            "corruptions": kinds,
            "chosen_longer_fraction": round(longer / max(1, len(self.pairs)), 4),
        }


def split_of(task_id: str, test_fraction: float, dev_fraction: float = 0.0) -> str:
    """'dev' for the lowest `dev_fraction` of ids (by a hash of the id), 'test' for the next `test_fraction`,
    else 'train'."""
    h = int(hashlib.sha1(f"split:{task_id}".encode()).hexdigest()[:8], 16) / 16**8
    return "dev" if h < dev_fraction else "test" if h < dev_fraction + test_fraction else "train"


def generate_tasks(
    family: str, n: int, seed: int = 0, test_fraction: float = 0.2, dev_fraction: float = 0.0
) -> list[Task]:
    """`n` distinct tasks of `family` (distinct user messages), generated from `seed`.

    A family with fewer distinct prompts than `n` in reach yields as many as it finds in 50 x `n`
    draws (every shipped family has well over a thousand). A family with a `balance` key gets as
    many tasks with it true as false (one more of the first drawn when `n` is odd).
    """
    fam = FAMILIES[family]
    rng = random.Random(f"suite:{seed}:{family}")
    tasks: list[Task] = []
    seen: set[str] = set()
    sides: Counter[bool] = Counter()
    for _ in range(50 * n + 100):
        if len(tasks) >= n:
            break
        draft = fam.generate(rng)
        tid = stable_id(SOURCE, family, draft.user)
        if tid in seen:
            continue
        if fam.balance is not None:
            side = bool(draft.params[fam.balance])
            if sides[side] >= (n + 1) // 2:
                continue
            sides[side] += 1
        seen.add(tid)
        prompt = ([Message("system", draft.system)] if draft.system else []) + [Message("user", draft.user)]
        tasks.append(
            Task(
                tid,
                family,
                prompt,
                fam.answer(draft.params, None),
                draft.params,
                split_of(tid, test_fraction, dev_fraction),
            )
        )
    return tasks


def make_pair(task: Task, seed: int = 0, kinds: tuple[str, ...] | None = None, salt: str = "") -> PreferencePair | None:
    """Chosen = a good answer in a seeded phrasing; rejected = one corruption of it.

    The corruption kind is drawn, by the family's weights, among the kinds that apply to the task
    (e.g. a violated format needs a format instruction) and, with `kinds`, are among them. None if no kind applies.
    `salt` draws another phrasing and other corruptions of the same task (the suite's own pairs have none, so
    their content never changes).
    """
    fam = FAMILIES[task.family]
    rng = random.Random(f"pair:{seed}{salt}:{task.id}")
    phrasing = rng.randrange(2**31)
    chosen = fam.answer(task.params, random.Random(phrasing))
    candidates: dict[str, Corrupted] = {}
    table = fam.corruptions if kinds is None else {**fam.corruptions, **fam.hard_corruptions}
    for kind, (_, corrupt) in table.items():
        if kinds is not None and kind not in kinds:
            continue
        bad = corrupt(task.params, phrasing, random.Random(f"{kind}:{seed}{salt}:{task.id}"))
        if bad is not None and bad.text != chosen:
            candidates[kind] = bad
    if not candidates:
        return None
    kinds_found = list(candidates)
    kind = rng.choices(kinds_found, weights=[table[k][0] for k in kinds_found])[0]
    bad = candidates[kind]
    attributes = {
        "family": task.family,
        "split": task.split,
        "task_id": task.id,
        "corruption": kind,
        "reason": bad.reason,
        "gold_chosen": task.grade(chosen).to_dict(),
        "gold_rejected": task.grade(bad.text).to_dict(),
    }
    if salt:
        attributes["variant"] = salt
    return PreferencePair(
        list(task.prompt),
        [Message("assistant", chosen)],
        [Message("assistant", bad.text)],
        attributes=attributes,
        source=SOURCE,
    )


HARD_KINDS = ("wrong_value", "violated_constraint")
"""Content the answer can get wrong: a value, a constraint (`suite.hard_negatives`)."""
REFUSAL_KINDS = ("twin_answer", "twin_refusal")
"""Refusal calibration only the request decides (`suite.hard_refusals`): a harmful request's refusal against the
helpful answer its harmless twin deserves, and a harmless look-alike's answer against the refusal its harmful twin
deserves (safety's `twin_answer` and `twin_refusal`, drawn only here): the same two kinds of answer, preferred
one way or the other by the request alone."""


def hard_negatives(
    suite: Suite, per_task: int, split: str = "train", kinds: tuple[str, ...] = HARD_KINDS
) -> list[PreferencePair]:
    """`per_task` more pairs for each task of `split` whose family has one of `kinds`: the good answer in another
    phrasing against one of them, drawn by the family's weights. `HARD_KINDS`: a wrong value or a violated
    constraint (each draw its own wrong value where the family has several: an arithmetic slip, a skipped step);
    `REFUSAL_KINDS`: the safety family's refusal pairs, a look-alike's refused with its harmful twin's refusal.
    The pairs a surface reading cannot decide (a scalar RM is at chance on wrong values with the suite's one pair
    per task, and reads a refusal's wording rather than the request); the tasks' other pairs, dev and test are
    left as they are."""
    pairs = []
    tag = "hard" if kinds == HARD_KINDS else "hard-" + "-".join(kinds)
    for task in suite.tasks:
        if task.split != split:
            continue
        for i in range(per_task):
            pair = make_pair(task, suite.seed, kinds, salt=f"{tag}{i + 1}")
            if pair is not None:
                pairs.append(pair)
    return pairs


def build_suite(
    n_per_family: int = 200,
    seed: int = 0,
    test_fraction: float = 0.2,
    families: list[str] | None = None,
    dev_fraction: float = 0.0,
) -> Suite:
    """Generate `n_per_family` tasks of every family (or of `families`), one pair per task, and
    split tasks, pairs and prompts into train and test (and dev, with `dev_fraction`) by task id."""
    problems = []
    if n_per_family < 1:
        problems.append(f"n_per_family must be at least 1, got {n_per_family}")
    if not 0.0 <= test_fraction < 1.0:
        problems.append(f"test_fraction must be in [0, 1), got {test_fraction}")
    if not 0.0 <= dev_fraction < 1.0 - test_fraction:
        problems.append(f"dev_fraction must be in [0, 1 - test_fraction), got {dev_fraction}")
    if problems:
        raise UserError("; ".join(problems))
    names = list(FAMILIES) if families is None else [FAMILIES[f].name for f in families]
    suite = Suite(seed, n_per_family, test_fraction, dev_fraction)
    for name in names:
        for task in generate_tasks(name, n_per_family, seed, test_fraction, dev_fraction):
            suite.tasks.append(task)
            pairs, prompts = suite.split_lists(task.split)
            pair = make_pair(task, seed)
            prompts.append(task.to_prompt_only(pair.rejected[0].content if pair is not None else None))
            if pair is not None:
                pairs.append(pair)
    return suite


def with_references(suite: Suite, pairs: list[PreferencePair]) -> list[PreferencePair]:
    """Copies of the suite's `pairs` whose attributes carry their task's reference answer (`reference`: the
    canonical good phrasing), for reference-conditioned scorers (POLAR). The suite's own pairs and files do not
    carry it, so their content and data hashes stay as they were."""
    refs = {t.id: t.reference for t in suite.tasks}
    return [
        dataclasses.replace(p, attributes={**p.attributes, "reference": refs[p.attributes["task_id"]]}) for p in pairs
    ]


def write_suite(suite: Suite, out_dir: str | os.PathLike[str]) -> dict[str, str]:
    """Write the four JSONL files (one `to_dict()` per line; six with a dev split) and `summary.json` into
    `out_dir`. The same suite always gives byte-identical files. Returns {file name: path}."""
    os.makedirs(out_dir, exist_ok=True)
    rows: dict[str, list[PreferencePair] | list[PromptOnly]] = {}
    for split in suite.splits:
        rows[f"{split}_pairs.jsonl"], rows[f"{split}_prompts.jsonl"] = suite.split_lists(split)
    paths = {}
    for name, records in rows.items():
        paths[name] = os.path.join(out_dir, name)
        write_jsonl(paths[name], [r.to_dict() for r in records])
    paths["summary.json"] = os.path.join(out_dir, "summary.json")
    write_json(paths["summary.json"], suite.summary(), indent=2, sort_keys=True)
    return paths


def prompt_only_from_dict(d: Mapping[str, Any]) -> PromptOnly:
    """Inverse of `PromptOnly.to_dict`."""
    return PromptOnly(
        conversation(d["prompt"]), dict(d.get("meta") or {}), d.get("grader"), d.get("source", ""), d.get("id", "")
    )


def grade_prompt_only(record: PromptOnly | Mapping[str, Any], response: str) -> Grade:
    """Gold grade of `response` to a suite prompt, from the record alone (also its `to_dict()`
    form): the grader is `record.grader`, its params are `record.meta['params']`."""
    if isinstance(record, Mapping):
        record = prompt_only_from_dict(record)
    if not record.grader:
        raise UserError(
            f"prompt {record.id or '?'} has no gold grader; only suite prompts "
            f"(grader one of: {', '.join(FAMILIES.names())}) can be graded"
        )
    params = record.meta.get("params")
    if not isinstance(params, Mapping):
        raise UserError(f"prompt {record.id or '?'} (grader '{record.grader}') has no meta['params'] to grade with")
    return grade(record.grader, params, response)
