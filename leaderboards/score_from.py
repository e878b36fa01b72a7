"""`align bench score --from FILE`: a results file in a benchmark's own format, scored by this toolkit's rules.

Anyone can put the toolkit's number beside the reference code's on the same file: the judgments a benchmark's
own pipeline wrote (or that `align eval policy --bench ... --out DIR` wrote in the same layout) are read here and
scored by the functions every run uses, never by a second copy of them.

- arenahard: judgment files (`model_judgment/<judge>/<model>.jsonl`, rows with `model` and two `games` whose
  `score` is a verdict label), one per model, scored by `leaderboards.arena_hard` (show_result.py's rules);
- alpacaeval: an `annotations.json` (rows with `generator_2`, `preference` 1..2 or null, `output_1`, `output_2`):
  each evaluated generator's raw win rate (`winrate.win_rates`, alpaca_eval's `get_winrate`);
- ifeval: the `eval_results_strict.jsonl` / `eval_results_loose.jsonl` IFEval's `evaluation_main.py` writes (each
  row a prompt, its response, `instruction_id_list` and the reference's `follow_instruction_list`), with
  `--option data=input_data.jsonl` for the instructions' arguments: our verifiers' accuracy beside the file's, and the
  share of instruction verdicts that agree (strict or loose by the file's name, or `--option mode=`);
- judgebench: the JSONL `run_judge.py` writes (`outputs/*.jsonl`: the pairs with `label`, `source` and `judgments`,
  one per order; two is the double game, the second judged with B first; a failed judgement null): the accuracy
  overall and per category in percent (`compute_final_metrics`, the rules `judgebench` runs use);
- mtbench: FastChat judgment JSONL (`model_judgment/gpt-4_single.jsonl`: `model`, `turn`, `score`, -1 a failed
  rating) per model: the mean per turn and overall (`show_result.py --mode single`);
- rewardbench, rewardbench2: the JSON files RewardBench's scripts save (`results/eval-set-scores/<model>.json`, per
  item, or `results/eval-set/<model>.json`, per subset; `align bench run ... --native DIR` writes both): the
  sections and the score (`leaderboards.native`);
- rm-bench: the JSON list RM-Bench's `scripts/run_rm.py` writes (`total_dataset_<model>.json`: the items with
  `score_chosen` and `score_rejected`; `align bench run rm-bench ... --native DIR` writes it): hard, normal and easy
  per domain and overall, and the score (`compute_accuracy`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prefalign.errors import UserError, did_you_mean
from prefalign.registry import Table

from . import rules
from .arena_hard import ROUNDS, SEED, WEIGHT, arena_hard_scores, read_judgments
from .ifeval import DETECTORS, ifeval_scores, levels
from .native import NATIVE_FORMATS, score_native
from .policy_data import read_ifeval
from .winrate import win_rates


@dataclass(frozen=True)
class ModelScore:
    """One model's numbers from a results file."""

    model: str
    sections: dict[str, float | None]
    counts: dict[str, int]
    interval: tuple[float, float] | None = None
    """The headline's 95% interval where the reference code prints one."""
    line: str = ""
    """The number as the reference code prints it, where it prints one line per model."""


@dataclass(frozen=True)
class ResultsFormat:
    summary: str
    score: Callable[[Sequence[str], dict[str, Any]], list[ModelScore]]
    """(files, options) -> one score per model."""
    options: dict[str, Any] = field(default_factory=dict)
    """The options it takes, with their defaults (the reference code's)."""


def _arenahard(files: Sequence[str], opts: dict[str, Any]) -> list[ModelScore]:
    scored = arena_hard_scores(read_judgments(files, int(opts["weight"])), int(opts["rounds"]), int(opts["seed"]))
    return [
        ModelScore(
            s.model,
            {"score": s.score, "win_rate": s.win_rate, "elo": s.elo},
            {"battles": s.battles},
            (s.lower, s.upper),
            s.printed(),
        )
        for s in scored
    ]


def _rows(path: str) -> list[dict[str, Any]]:
    text = Path(path).read_text(encoding="utf-8")
    try:
        if text.lstrip().startswith("["):
            rows = json.loads(text)
        else:
            rows = [json.loads(x) for x in text.splitlines() if x.strip()]
    except json.JSONDecodeError as e:
        raise UserError(f"{path}: not JSON or JSONL ({e})") from e
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise UserError(f"{path}: expected a list of objects (JSON) or one object per line (JSONL)")
    return rows


def _need(row: dict[str, Any], keys: Sequence[str], path: str, i: int) -> None:
    missing = [k for k in keys if k not in row]
    if missing:
        raise UserError(f"{path} row {i}: missing field(s) {', '.join(missing)}")


def _alpacaeval(files: Sequence[str], opts: dict[str, Any]) -> list[ModelScore]:
    by_model: dict[str, list[dict[str, Any]]] = {}
    for path in files:
        for i, r in enumerate(_rows(path)):
            _need(r, ("generator_2", "preference", "output_1", "output_2"), path, i)
            p = r["preference"]
            if p is not None and not (isinstance(p, (int, float)) and (p == 0 or 1 <= p <= 2)):
                raise UserError(f"{path} row {i}: `preference` must be 1..2 (0 a draw) or null, got {p!r}")
            by_model.setdefault(str(r["generator_2"]), []).append(r)
    out = []
    for model, rows in by_model.items():
        prefs = [
            math.nan if r["preference"] is None else 0.5 if r["preference"] == 0 else r["preference"] - 1 for r in rows
        ]
        wr = win_rates(prefs, [len(r["output_2"]) for r in rows], [len(r["output_1"]) for r in rows], bootstrap=0)
        pct = None if wr.win_rate is None else 100 * wr.win_rate
        out.append(
            ModelScore(
                model,
                {"win_rate": pct},
                {"counted": wr.n, "null": wr.abstained, "wins": wr.wins, "draws": wr.ties, "losses": wr.losses},
            )
        )
    return out


def _ifeval(files: Sequence[str], opts: dict[str, Any]) -> list[ModelScore]:
    """Each file's responses checked by this toolkit's IFEval verifiers beside the verdicts the file holds: our
    prompt- and instruction-level accuracy, the file's, and the share of instruction verdicts that agree (the
    instructions' arguments come from the input file, matched by prompt)."""
    if not opts.get("data"):
        raise UserError(
            "ifeval results hold no instruction arguments: add --option data=input_data.jsonl (the benchmark's input "
            "file, google-research instruction_following_eval/data/input_data.jsonl)"
        )
    if opts["mode"] not in ("auto", "strict", "loose"):
        raise UserError(f"--option mode={opts['mode']}: one of auto (by the file's name), strict, loose")
    data = read_ifeval(str(opts["data"]))
    if data.problems:
        raise UserError(f"{opts['data']}: " + "; ".join(data.problems[:5]))
    items = {i.ifeval.prompt: i.ifeval for i in data.items if i.ifeval is not None}
    out = []
    for path in files:
        loose = opts["mode"] == "loose" or (opts["mode"] == "auto" and "loose" in Path(path).name)
        mode = "loose" if loose else "strict"
        checked, responses, theirs = [], [], []
        unmatched = 0
        for i, r in enumerate(_rows(path)):
            _need(r, ("prompt", "response", "instruction_id_list", "follow_instruction_list"), path, i)
            item = items.get(r["prompt"])
            if item is None:
                unmatched += 1
                continue
            if list(r["instruction_id_list"]) != item.instruction_ids:
                raise UserError(
                    f"{path} row {i}: instruction_id_list {r['instruction_id_list']} is not the input's "
                    f"{item.instruction_ids} for the same prompt (key {item.key})"
                )
            checked.append(item)
            responses.append(str(r["response"]))
            theirs.append([bool(x) for x in r["follow_instruction_list"]])
        if not checked:
            raise UserError(f"{path}: no row's prompt is in {opts['data']} ({unmatched} rows): another input file?")
        ours = ifeval_scores(checked, responses)
        disagree: dict[str, int] = {}
        for item, d, ref in zip(checked, ours["details"], theirs, strict=True):
            for iid, a, b in zip(item.instruction_ids, d[mode], ref, strict=True):
                if a != b:
                    disagree[iid] = disagree.get(iid, 0) + 1
        n_inst = sum(len(x) for x in theirs)
        file_prompt, file_instruction = levels(theirs)
        sections: dict[str, float | None] = {
            f"prompt_{mode}": ours[f"prompt_{mode}"],
            f"instruction_{mode}": ours[f"instruction_{mode}"],
            f"file_prompt_{mode}": file_prompt,
            f"file_instruction_{mode}": file_instruction,
            "agreement": (n_inst - sum(disagree.values())) / n_inst,
        }
        name = Path(path).parent.name if Path(path).name.startswith("eval_results") else Path(path).stem
        counts = {"prompts": len(checked), "instructions": n_inst, "disagreements": sum(disagree.values())}
        counts |= {"unmatched": unmatched} if unmatched else {}
        line = f"{name}: " + ", ".join(f"{k} {v:.4f}" for k, v in sections.items() if v is not None)
        if disagree:
            line += "; disagreeing: " + ", ".join(f"{k} {v}" for k, v in sorted(disagree.items()))
        out.append(ModelScore(name, sections, counts, line=line + f"; language by {DETECTORS['language']}"))
    return out


def _decision(judgement: Any, path: str, i: int) -> str | None:
    if judgement is None:
        return None  # a failed judgement: it decides nothing
    if not isinstance(judgement, dict) or "decision" not in judgement:
        raise UserError(f"{path} row {i}: each of `judgments` must be an object with a `decision` (or null)")
    d = judgement["decision"]
    if d is not None and not isinstance(d, str):
        raise UserError(f"{path} row {i}: `decision` must be a string like 'A>B' or null, got {d!r}")
    return d


def _judgebench(files: Sequence[str], opts: dict[str, Any]) -> list[ModelScore]:
    by_judge: dict[str, list[tuple[str, float]]] = {}
    for path in files:
        for i, r in enumerate(_rows(path)):
            _need(r, ("label", "source", "judgments"), path, i)
            category = rules.judgebench_category(str(r["source"]))
            if category is None or r["label"] not in rules.JUDGEBENCH_LABELS:
                raise UserError(
                    f"{path} row {i}: `source` must start with one of {', '.join(rules.JUDGEBENCH_CATEGORIES)} and "
                    f"`label` be one of {', '.join(rules.JUDGEBENCH_LABELS)} (got {r['source']!r}, {r['label']!r})"
                )
            games = r["judgments"]
            if not isinstance(games, list) or len(games) not in (1, 2):
                raise UserError(f"{path} row {i}: `judgments` must hold one judgement (single game) or two (double)")
            decisions = [_decision(g, path, i) for g in games]
            if len(decisions) == 1:
                correct = float(decisions[0] == r["label"])
            else:
                correct = float(rules.judgebench_double_correct(decisions[0] or "", decisions[1] or "", r["label"]))
            by_judge.setdefault(str(r.get("judge_name") or Path(path).stem), []).append((category, correct))
    out = []
    for judge, results in by_judge.items():
        per = {c: [x for k, x in results if k == c] for c in rules.JUDGEBENCH_CATEGORIES}
        sections: dict[str, float | None] = {"score": 100 * sum(x for _, x in results) / len(results)}
        sections |= {c: 100 * sum(xs) / len(xs) if xs else None for c, xs in per.items()}
        out.append(ModelScore(judge, sections, {"pairs": len(results)} | {c: len(xs) for c, xs in per.items()}))
    return out


def _mtbench(files: Sequence[str], opts: dict[str, Any]) -> list[ModelScore]:
    by_model: dict[str, dict[int, list[float]]] = {}
    failed: dict[str, int] = {}
    for path in files:
        for i, r in enumerate(_rows(path)):
            _need(r, ("model", "turn", "score"), path, i)
            if r["turn"] not in (1, 2):
                raise UserError(f"{path} row {i}: `turn` must be 1 or 2, got {r['turn']!r}")
            turns = by_model.setdefault(str(r["model"]), {1: [], 2: []})
            if r["score"] == -1:  # FastChat drops a failed rating
                failed[str(r["model"])] = failed.get(str(r["model"]), 0) + 1
                continue
            turns[r["turn"]].append(float(r["score"]))
    mean = lambda xs: sum(xs) / len(xs) if xs else None
    return [
        ModelScore(
            model,
            {"turn_1": mean(t[1]), "turn_2": mean(t[2]), "average": mean(t[1] + t[2])},
            {"ratings": len(t[1]) + len(t[2]), "failed": failed.get(model, 0)},
        )
        for model, t in by_model.items()
    ]


def _reward_bench(bench: str) -> Callable[[Sequence[str], dict[str, Any]], list[ModelScore]]:
    def score(files: Sequence[str], opts: dict[str, Any]) -> list[ModelScore]:
        out = []
        for path in files:
            try:
                obj = json.loads(Path(path).read_text(encoding="utf-8"))
            except json.JSONDecodeError as e:
                raise UserError(f"{path}: not JSON ({e})") from e
            scored = score_native(bench, obj, path)
            per_item = NATIVE_FORMATS[bench].per_item(obj)
            counts = {"examples": sum(int(v.get("n", 0)) for v in scored.subsets.values())} if per_item else {}
            counts["subsets"] = len(scored.subsets)
            sections = {"score": scored.headline, **scored.sections}
            if bench == "rewardbench":  # the leaderboard's columns, and the subsets beside them
                sections |= {k: v["score"] for k, v in scored.subsets.items()}
            name = obj.get("model") if isinstance(obj, dict) else None
            out.append(ModelScore(str(name or Path(path).stem), sections, counts))
        return out

    return score


RESULTS_FORMATS: Table[ResultsFormat] = Table(
    "results format",
    {
        "arenahard": ResultsFormat(
            "Arena-Hard judgment files, one per model (show_result.py's score and bootstrap interval)",
            _arenahard,
            {"weight": WEIGHT, "rounds": ROUNDS, "seed": SEED},
        ),
        "alpacaeval": ResultsFormat("AlpacaEval annotations.json (raw win rate per generator_2)", _alpacaeval),
        "ifeval": ResultsFormat(
            "IFEval eval_results_strict.jsonl / eval_results_loose.jsonl from evaluation_main.py (the responses and "
            "the reference's verdicts): our strict or loose accuracy, the file's, and their agreement",
            _ifeval,
            {"data": "", "mode": "auto"},
        ),
        "judgebench": ResultsFormat(
            "JudgeBench outputs JSONL from run_judge.py (accuracy per judge_name: single or double game)", _judgebench
        ),
        "mtbench": ResultsFormat("MT-Bench single-answer judgments (FastChat's means per turn)", _mtbench),
        "rewardbench": ResultsFormat(
            "RewardBench v1 results/eval-set-scores/<model>.json (per item) or eval-set/<model>.json (per subset): "
            "the sections and the score",
            _reward_bench("rewardbench"),
        ),
        "rewardbench2": ResultsFormat(
            "RewardBench 2 results/eval-set-scores/<model>.json (per item: best-of-n, the Ties composite) or "
            "eval-set/<model>.json: the subsets and the score",
            _reward_bench("rewardbench2"),
        ),
        "rm-bench": ResultsFormat(
            "RM-Bench's results file from scripts/run_rm.py (the items with score_chosen and score_rejected): "
            "hard, normal and easy per domain, and the score",
            _reward_bench("rm-bench"),
        ),
    },
)


def score_from(bench: str, files: Sequence[str], options: dict[str, Any] | None = None) -> list[ModelScore]:
    """Score `files` of `bench`'s results format; `options` override the format's defaults (unknown keys refused)."""
    fmt = RESULTS_FORMATS[bench]
    options = options or {}
    unknown = sorted(set(options) - set(fmt.options))
    if unknown:
        takes = ", ".join(fmt.options) or "none"
        hint = did_you_mean(unknown[0], list(fmt.options))
        raise UserError(f"--option {', '.join(unknown)}: not an option of {bench} results{hint} (it takes: {takes})")
    missing = [f for f in files if not Path(f).is_file()]
    if missing:
        raise UserError(f"--from: no such file: {', '.join(missing)}")
    return fmt.score(files, {**fmt.options, **options})
