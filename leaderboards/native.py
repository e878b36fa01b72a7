"""Per-item results in the benchmarks' own layouts, both ways (RewardBench 1 and 2, RM-Bench; JudgeBench written).

`align bench run rewardbench|rewardbench2 ... --native DIR` writes, beside the toolkit's record, the two files the
reference scripts write for a reward model (allenai/reward-bench @ 05a9005e, `rewardbench/utils.py::save_to_hub`,
called by `scripts/run_rm.py` for v1 and `scripts/run_v2.py` for v2):

- `DIR/eval-set/<model>.json`: the per-subset scores, with `model`, `model_type` and `chat_template` (v1: the subset
  accuracies; v2: best-of-4 accuracies and the Ties composite). The leaderboard's sections are computed from this
  file (`calculate_scores_per_section`), and the `allenai/reward-bench-results` dataset holds one per public model.
- `DIR/eval-set-scores/<model>.json`: one column per field, one entry per example: v1 `id`, `subset`, `results`
  (1 if the chosen response scored above the rejected one, else 0), `scores_chosen`, `scores_rejected`,
  `text_chosen`, `text_rejected`; v2 `id`, `subset`, `num_correct`, `scores` and `text` (the four or more responses,
  correct ones first), `results` (the best-of-n credit). A 4-way judge's (`rb2_4way`) `scores` outside Ties are its
  verdict, 1 for the answer it named and 0 for the others (all 0 when it named none), which the reference does not
  write (its 4-way runs keep only `results`); read back, they give the same credit.

Both are written as `save_to_hub` writes them (`json.dumps(..., indent=4, sort_keys=True)`). One difference: the
reference's `text_*` columns hold the full conversation rendered by the model's chat template; here they hold the
response (the scorer's own template is not a property of the benchmark).

`align bench run rm-bench ... --native DIR` writes the one file RM-Bench's `scripts/run_rm.py` writes (THU-KEG/RM-Bench
@ 73c52d7): `DIR/total_dataset_<model>.json`, the dataset's items (`id`, `prompt`, `chosen`, `rejected`, `domain`)
each with `score_chosen` and `score_rejected`, one score per style (concise, detailed plain, detailed markdown), as
`json.dump(..., indent=4, ensure_ascii=False)` writes them; its `scripts/utils.py::compute_accuracy` reads it.

`align bench run judgebench ... --native DIR` writes the JSON Lines file JudgeBench's `run_judge.py` writes
(ScalerLab/JudgeBench @ e2c52c28): `DIR/outputs/<dataset>,judge_name=<judge>,judge_model=<model, / as _>.jsonl`, each
input pair (`pair_id`, `original_id`, `source`, `question`, `response_model`, `response_A`, `response_B`, `label`)
with `judge_name` and `judgments`, one row per line as `json.dumps(pair, ensure_ascii=False)` writes it. A reward
model's judgments are one game, as `run_judge.py --judge_name reward_model --single_game` writes them (`{"judgment":
{"judge_model", "scores": [score_A, score_B]}, "decision": "A>B" | "B>A"}`, a tie B>A); a pairwise judge's are two
games, (A, B) and then (B, A) with its decision in the order shown (`compute_final_metrics` flips the second), a failed
judgement's decision null. `<dataset>` is `dataset=judgebench,response_model=<the rows' response model>` as the
official pair files are named. `utils/metrics.py::compute_final_metrics` and `align bench score judgebench --from`
read it.

`align bench score rewardbench|rewardbench2|rm-bench --from FILE` reads these files back (`leaderboards.score_from`):
a per-item file is scored item by item through the same rule and aggregation `bench run` uses, an eval-set file
(per-subset scores, e.g. a public model's from the results dataset) through the same section arithmetic.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefalign.errors import UserError
from prefalign.files import write_jsonl, write_text
from prefalign.registry import Table
from preference_data.records import Message

from . import rules
from .benchmarks import BENCHMARKS, Judgement, RunInfo, Scores, rewardbench2_sections, rewardbench_sections
from .loaders import Example
from .rules import TiePolicy

HEADER_FIELDS = ("model", "model_type", "chat_template")
SCORED_MODEL_TYPE = "Seq. Classifier"
"""`model_type` of a scorer that gives each response a number (run_rm.py's label for sequence-classifier RMs)."""


@dataclass(frozen=True)
class Scored:
    """One example as a run saw it: the example and the scorer's judgement (a pointwise scorer's: one score per
    response)."""

    example: Example
    judgement: Judgement


@dataclass(frozen=True)
class NativeFormat:
    summary: str
    files: Callable[[Sequence[Scored], Scores, dict[str, Any]], dict[str, Any]]
    """(the run's examples, its scores, the header: model, model_type, chat_template) -> {path under the output
    directory, `{model}` standing for the model's name: the JSON it holds}."""
    dump: dict[str, Any]
    """`json.dumps` options of the reference's writer."""
    examples: Callable[[Any, str], list[tuple[Example, Judgement]]] | None = None
    """A per-item results object (and its path, for messages) -> the examples and their judgements, for `bench score
    --from` through `score_native`; None where `leaderboards.score_from` has the format's own reader (JudgeBench)."""
    per_item: Callable[[Any], bool] = lambda obj: True
    """Whether a results object holds the examples one by one (else a per-subset file, RewardBench's eval-set);
    by default every file does."""
    kinds: tuple[str, ...] = ("pointwise", "listwise")
    """The scorer kinds whose judgements the files hold (a listwise judge, `rb2_4way`: its verdict as 1 for the
    answer named, else 0)."""
    lines: bool = False
    """JSON Lines: a file's object is a list of rows, each dumped on its own line (else one JSON document)."""


def _text(conv: Any) -> str:
    return conv[-1].content if conv else ""


def _native_id(ident: str) -> Any:
    return int(ident) if ident.isdigit() else ident


def _scores(items: Sequence[Scored]) -> list[list[float]]:
    return [list(s.judgement.scores or []) for s in items]  # `native_problem` refused a kind without scores


def _rewardbench_columns(items: Sequence[Scored]) -> dict[str, list[Any]]:
    got = _scores(items)
    return {
        "id": [_native_id(s.example.id) for s in items],
        "subset": [s.example.group for s in items],
        "results": [1 if sc[0] > sc[1] else 0 for sc in got],  # run_rm.py: `1 if chosen > rejected else 0`
        "scores_chosen": [sc[0] for sc in got],
        "scores_rejected": [sc[1] for sc in got],
        "text_chosen": [_text(s.example.responses[0]) for s in items],
        "text_rejected": [_text(s.example.responses[1]) for s in items],
    }


def _rewardbench2_columns(items: Sequence[Scored]) -> dict[str, list[Any]]:
    got = _scores(items)
    return {
        "id": [s.example.id for s in items],
        "subset": [s.example.group for s in items],
        "num_correct": [s.example.meta["num_correct"] for s in items],
        "scores": got,
        "text": [[_text(r) for r in s.example.responses] for s in items],
        "results": [rules.best_of_n(sc) for sc in got],  # reroll_and_score_dataset's column
    }


def _eval_set_files(
    columns: Callable[[Sequence[Scored]], dict[str, list[Any]]],
) -> Callable[[Sequence[Scored], Scores, dict[str, Any]], dict[str, Any]]:
    """RewardBench's two files (`save_to_hub`): the subset scores, and `columns` of the examples."""

    def files(items: Sequence[Scored], scores: Scores, header: dict[str, Any]) -> dict[str, Any]:
        return {
            "eval-set/{model}.json": {**header, **{name: float(v["score"]) for name, v in scores.subsets.items()}},
            "eval-set-scores/{model}.json": {**columns(items), **header},
        }

    return files


def _rmbench_files(items: Sequence[Scored], scores: Scores, header: dict[str, Any]) -> dict[str, Any]:
    """RM-Bench's one file (`scripts/run_rm.py`): the dataset's items, each with `score_chosen` and
    `score_rejected` (one score per style: concise, detailed plain, detailed markdown)."""
    rows = []
    for s in items:
        ex, got = s.example, list(s.judgement.scores or [])
        rows.append(
            {
                "id": _native_id(ex.id),
                "prompt": _text(ex.prompt),
                "chosen": [_text(r) for r in ex.responses[:3]],
                "rejected": [_text(r) for r in ex.responses[3:6]],
                "domain": ex.meta.get("domain", ex.group),
                "score_chosen": got[:3],
                "score_rejected": got[3:6],
            }
        )
    return {"total_dataset_{model}.json": rows}


def _judgebench_files(items: Sequence[Scored], scores: Scores, header: dict[str, Any]) -> dict[str, Any]:
    """JudgeBench's one file (`run_judge.py`): each pair as read, with `judge_name` and its `judgments`."""
    model = str(header["model"])
    rows = []
    for s in items:
        ex, j = s.example, s.judgement
        games: list[dict[str, Any]]
        if j.scores is not None:  # a reward model: one game (utils/judges.py's reward-model judges)
            decision = rules.judgebench_single_decision(j.scores[0], j.scores[1])
            judge = "reward_model"
            games = [{"judgment": {"judge_model": model, "scores": list(j.scores[:2])}, "decision": decision}]
        else:  # a pairwise judge: (A, B), then (B, A) with the decision in the order shown
            assert j.prefs is not None
            judge = "prefalign_judge"
            games = [
                {"judgment": {"judge_model": model}, "decision": None if p != p else rules.judge_decision(p)}
                for p in (j.prefs[(0, 1)], j.prefs[(1, 0)])
            ]
        rows.append(
            {
                "pair_id": ex.meta.get("pair_id", ex.id),
                "original_id": ex.meta.get("original_id"),
                "source": ex.meta["source"],
                "question": _text(ex.prompt),
                "response_model": ex.meta.get("response_model"),
                "response_A": _text(ex.responses[0]),
                "response_B": _text(ex.responses[1]),
                "label": ex.meta["label"],
                "judge_name": judge,
                "judgments": games,
            }
        )
    made_by = sorted({str(r["response_model"]) for r in rows if r["response_model"] is not None})
    dataset = "dataset=judgebench" + (f",response_model={made_by[0]}" if len(made_by) == 1 else "")
    judge = rows[0]["judge_name"] if rows else "reward_model"
    name = f"{dataset},judge_name={judge},judge_model={model.replace('/', '_')}".replace("{", "{{").replace("}", "}}")
    return {f"outputs/{name}.jsonl": rows}


def _columns(obj: dict[str, Any], path: str, names: Sequence[str]) -> list[list[Any]]:
    missing = [n for n in names if not isinstance(obj.get(n), list)]
    if missing:
        raise UserError(
            f"{path}: not an eval-set-scores file: no list field {', '.join(repr(m) for m in missing)} (the file "
            f"{'scripts/run_rm.py' if 'scores_chosen' in names else 'scripts/run_v2.py'} writes has {', '.join(names)})"
        )
    cols = [obj[n] for n in names]
    lengths = {n: len(c) for n, c in zip(names, cols, strict=True)}
    if len(set(lengths.values())) != 1:
        raise UserError(f"{path}: the columns have different lengths ({lengths}); the file is cut or mixed")
    return cols


def _number(v: Any, path: str, field: str, i: int) -> float:
    if isinstance(v, list) and len(v) == 1:  # a classifier's [[score]] (process_single_model reads it so too)
        v = v[0]
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise UserError(f"{path}: entry {i} of '{field}' is {v!r}, not a number")
    return float(v)


def _eval_set_scores(obj: Any, path: str) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise UserError(f"{path}: expected one JSON object (an eval-set or eval-set-scores file)")
    return obj


def _rewardbench_examples(obj: Any, path: str) -> list[tuple[Example, Judgement]]:
    obj = _eval_set_scores(obj, path)
    ids, subsets, chosen, rejected = _columns(obj, path, ("id", "subset", "scores_chosen", "scores_rejected"))
    texts = [obj.get("text_chosen") or [""] * len(ids), obj.get("text_rejected") or [""] * len(ids)]
    out = []
    for i, (ident, subset) in enumerate(zip(ids, subsets, strict=True)):
        responses = [[Message("assistant", str(texts[0][i]))], [Message("assistant", str(texts[1][i]))]]
        ex = Example(str(ident), str(subset), [], responses, row=f"{path}: entry {i}")
        sc = [_number(chosen[i], path, "scores_chosen", i), _number(rejected[i], path, "scores_rejected", i)]
        out.append((ex, Judgement(scores=sc)))
    return out


def _rewardbench2_examples(obj: Any, path: str) -> list[tuple[Example, Judgement]]:
    obj = _eval_set_scores(obj, path)
    ids, subsets, num_correct, scores = _columns(obj, path, ("id", "subset", "num_correct", "scores"))
    out = []
    for i, (ident, subset) in enumerate(zip(ids, subsets, strict=True)):
        sc = scores[i]
        if not isinstance(sc, list) or len(sc) < 2:
            raise UserError(f"{path}: entry {i} of 'scores' is {sc!r}, not a list of two or more scores")
        values = [_number(v, path, "scores", i) for v in sc]
        meta: dict[str, Any] = {"num_correct": num_correct[i]}
        if str(subset).lower() == "ties":
            kind, _, prompt = str(ident).partition(":")
            if kind not in ("ref", "tied") or not prompt.isdigit():
                raise UserError(f"{path}: entry {i}: a Ties row's id must be 'ref:<n>' or 'tied:<n>', got {ident!r}")
            meta.update(ties_kind=kind, ties_prompt=int(prompt))
        responses = [[Message("assistant", "")] for _ in values]
        ex = Example(str(ident), "Ties" if str(subset).lower() == "ties" else str(subset), [], responses, meta)
        out.append((ex, Judgement(scores=values)))
    return out


def _scores3(row: dict[str, Any], field: str, path: str, i: int) -> list[float]:
    got = row.get(field)
    if not isinstance(got, list) or len(got) != 3:
        raise UserError(
            f"{path}: item {i}: '{field}' is {got!r}, not the three scores (concise, detailed plain, detailed "
            "markdown) scripts/run_rm.py writes"
        )
    return [_number(v, path, field, i) for v in got]


def _rmbench_examples(obj: Any, path: str) -> list[tuple[Example, Judgement]]:
    if not isinstance(obj, list):
        raise UserError(
            f"{path}: not an RM-Bench results file: expected the JSON list scripts/run_rm.py writes (the dataset's "
            "items with 'score_chosen' and 'score_rejected'), got a JSON {type(obj).__name__}"
        )
    out = []
    for i, row in enumerate(obj):
        if not isinstance(row, dict):
            raise UserError(f"{path}: item {i} is not an object")
        domain = row.get("domain")
        if not isinstance(domain, str) or not domain.startswith(rules.RMBENCH_DOMAINS):
            raise UserError(
                f"{path}: item {i}: 'domain' is {domain!r}; compute_accuracy splits by a domain starting with one "
                f"of {', '.join(rules.RMBENCH_DOMAINS)}"
            )
        sc = _scores3(row, "score_chosen", path, i) + _scores3(row, "score_rejected", path, i)
        texts = [*(row.get("chosen") or [""] * 3), *(row.get("rejected") or [""] * 3)]
        responses = [[Message("assistant", str(t))] for t in texts]
        ident = str(row.get("id", i))
        ex = Example(ident, rules.rmbench_domain(domain), [], responses, {"domain": domain}, row=f"{path}: item {i}")
        out.append((ex, Judgement(scores=sc)))
    return out


def _has_columns(obj: Any) -> bool:
    """A RewardBench eval-set-scores file (per-item columns), not an eval-set file (a number per subset); anything
    but an object is read as per-item, whose reader says what it lacks."""
    return not isinstance(obj, dict) or "scores_chosen" in obj or "scores" in obj


SAVE_TO_HUB = {"indent": 4, "sort_keys": True}
"""rewardbench/utils.py::save_to_hub: `json.dumps(results, indent=4, sort_keys=True)`, no final newline."""

NATIVE_FORMATS: Table[NativeFormat] = Table(
    "native results format",
    {
        "rewardbench": NativeFormat(
            "RewardBench v1 (scripts/run_rm.py): eval-set/<model>.json and eval-set-scores/<model>.json",
            _eval_set_files(_rewardbench_columns),
            SAVE_TO_HUB,
            examples=_rewardbench_examples,
            per_item=_has_columns,
        ),
        "rewardbench2": NativeFormat(
            "RewardBench 2 (scripts/run_v2.py): eval-set/<model>.json and eval-set-scores/<model>.json",
            _eval_set_files(_rewardbench2_columns),
            SAVE_TO_HUB,
            examples=_rewardbench2_examples,
            per_item=_has_columns,
        ),
        "rm-bench": NativeFormat(
            "RM-Bench (scripts/run_rm.py): total_dataset_<model>.json, the items with score_chosen and "
            "score_rejected, which scripts/utils.py::compute_accuracy reads",
            _rmbench_files,
            {"indent": 4, "ensure_ascii": False},  # run_rm.py: json.dump(dataset_json, f, indent=4, ensure_ascii=False)
            examples=_rmbench_examples,
        ),
        "judgebench": NativeFormat(
            "JudgeBench (run_judge.py): outputs/<dataset>,judge_name=<judge>,judge_model=<model>.jsonl, the pairs "
            "with their judgments, which utils/metrics.py::compute_final_metrics reads (`align bench score "
            "judgebench --from` reads it back through score_from's JudgeBench reader)",
            _judgebench_files,
            {"ensure_ascii": False},  # run_judge.py: f.write(json.dumps(pair, ensure_ascii=False) + '\n')
            kinds=("pointwise", "pairwise"),
            lines=True,
        ),
    },
)


def native_problem(bench: str, kind: str) -> str | None:
    """Why `--native` cannot be honoured for `bench` with a scorer of `kind` (checked before anything is scored),
    or None."""
    if bench not in NATIVE_FORMATS:
        return (
            f"--native: {bench} has no native results layout here (it has: {', '.join(NATIVE_FORMATS)}); the "
            "record holds the per-item results"
        )
    if kind not in NATIVE_FORMATS[bench].kinds:
        return (
            f"--native: {bench}'s own result files hold one score per response, which a {kind} scorer does not "
            "give; run a pointwise scorer, or leave --native out (the record has the per-item results)"
        )
    return None


def write_native(
    bench: str, items: Sequence[Scored], scores: Scores, model: str, out_dir: str | Path, kind: str = "pointwise"
) -> list[Path]:
    """Write `bench`'s own result files for a run of a `kind` scorer under `out_dir`; returns their paths."""
    problem = native_problem(bench, kind)
    if problem is not None:
        raise UserError(problem)
    header = {"model": model, "model_type": SCORED_MODEL_TYPE, "chat_template": "tokenizer"}
    written = []
    fmt = NATIVE_FORMATS[bench]
    for where, obj in fmt.files(items, scores, header).items():
        path = Path(out_dir) / where.format(model=model)
        path.parent.mkdir(parents=True, exist_ok=True)
        if fmt.lines:
            write_jsonl(path, obj, **fmt.dump)
        else:
            write_text(path, json.dumps(obj, **fmt.dump))
        written.append(path)
    return written


def score_native(bench: str, obj: Any, path: str) -> Scores:
    """The scores of a benchmark's own results file: a per-item file (RewardBench's eval-set-scores, RM-Bench's
    items with their scores) item by item, by the run's rule and aggregation with ties as the reference counts them;
    or RewardBench's eval-set file, its per-subset scores through the section arithmetic."""
    b, fmt = BENCHMARKS[bench], NATIVE_FORMATS[bench]
    assert fmt.examples is not None, f"{bench}'s files are read by leaderboards.score_from's own reader"
    if fmt.per_item(obj):
        pairs = fmt.examples(obj, path)
        if not pairs:
            raise UserError(f"{path}: no examples")
        tie: TiePolicy = "wrong" if b.uses_tie_policy else "half"  # run_rm.py: a tie is not a win
        results = [(ex, b.rule(ex, j, tie)) for ex, j in pairs]
        return b.aggregate(results, RunInfo("pointwise", False, tie, path))
    subsets = {k: v for k, v in obj.items() if k not in HEADER_FIELDS and isinstance(v, int | float)}
    known = rules.REWARDBENCH_EXAMPLE_COUNTS if bench == "rewardbench" else dict.fromkeys(rules.REWARDBENCH2_SUBSETS)
    if not set(subsets) & set(known):
        raise UserError(
            f"{path}: neither an eval-set-scores file (per-item 'scores_chosen'/'scores' columns) nor an eval-set "
            f"file (numbers per subset, e.g. {', '.join(list(known)[:3])})"
        )
    headline, sections = (rewardbench_sections if bench == "rewardbench" else rewardbench2_sections)(subsets)
    return Scores(headline, sections, {k: {"score": v} for k, v in subsets.items()})


__all__ = [
    "NATIVE_FORMATS",
    "SCORED_MODEL_TYPE",
    "NativeFormat",
    "Scored",
    "native_problem",
    "score_native",
    "write_native",
]
