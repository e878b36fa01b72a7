"""Policy evaluation on standard prompt sets (`align eval policy --bench NAME --data FILE`).

    generate (cached) -> score (IFEval verifiers, or a judge through the one scorer interface) -> report + record

The sets are the entries of `POLICY_BENCHMARKS` (`align ls policy-benchmarks`): each says how its file is read,
what judges it (no judge, a pointwise or a pairwise scorer), where its reference answers come from, how many
turns it has, and which function scores it. `PolicyBenchSettings` holds the flags of `align eval policy`.

- ifeval: one answer per prompt, checked by the IFEval verifiers (`ifeval.py`); prompt- and instruction-level
  accuracy, strict and loose, with bootstrap intervals over prompts.
- alpacaeval / arenahard: one answer per prompt, compared with the set's reference answer by a judge: a pointwise
  scorer (a reward model: the higher score wins, equal scores tie) or a pairwise one (asked in both orders and
  averaged; one order for a symmetric scorer such as pair_pm). Win rate and length-controlled win rate with
  bootstrap intervals (`winrate.py`); abstentions (NaN) counted and left out.
- mtbench: two turns, the second conditioned on the policy's own first answer; each turn scored by a pointwise
  judge (a reward model's scalar, or a generative RM's 1-10); means per turn and per category with intervals.

Generations go to `<out>/generations.jsonl` with the settings that made them (`generations.key.json`); a re-run with
the same model, data and generation settings reuses them, so judging again with another judge does not regenerate.
The record (`records.Record`, section "policy") names the policy, the set, the judge and the reference answers'
generator; the leaderboard shows it in its policy tab.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from prefalign.config import option
from prefalign.decoding import DecodingSettings
from prefalign.errors import UserError
from prefalign.files import write_json, write_text
from prefalign.models.hub import load_tokenizer, weights_fingerprint
from prefalign.models.precision import decide_dtype
from prefalign.registry import Table
from prefalign.stats import bootstrap_ci
from preference_data.records import Message

from .alpacaeval_judge import AlpacaEvalJudge
from .arena_hard import ROUNDS, SEED, VERDICTS, WEIGHT, arena_hard_scores, game_battles
from .arenahard_judge import ArenaHardJudge
from .ifeval import DETECTORS, ifeval_scores
from .mtbench_judge import (
    MODES,
    FastChatJudge,
    grade,
    grade_pairs,
    pair_matches,
    single_matches,
)
from .policy_data import BenchData, BenchItem, read_alpacaeval, read_arenahard, read_ifeval, read_mtbench
from .score_from import PairwiseTally, pair_outcome
from .winrate import LC_GLM_CHOICES, RIDGE, alpaca_lc_win_rate, both_orders, pointwise_preference, resolve_lc, win_rates

if TYPE_CHECKING:
    from .records import Record

POLICY_SECTION = "policy"
"""`Record.settings['section']` of every policy record: the leaderboard's policy tab."""
VERSION = "1"
BENCH_MAX_NEW_TOKENS = 256
"""Tokens per answer on a standard prompt set without --max-new-tokens (the suite's default is 96: shorter tasks)."""


# ---------------------------------------------------------------------------------------------------------
# Generation (cached)
# ---------------------------------------------------------------------------------------------------------


def _conversations(items: list[BenchItem], turn: int, answers: list[list[str]] | None = None) -> list[Any]:
    """The conversation each item's `turn`-th answer continues (turn 0: the first user turn)."""
    out = []
    for k, item in enumerate(items):
        conv = []
        for t in range(turn + 1):
            conv.append(Message("user", item.turns[t]))
            if t < turn:
                assert answers is not None
                conv.append(Message("assistant", answers[k][t]))
        out.append(conv)
    return out


def generation_key(model: str, data: BenchData, s: DecodingSettings) -> dict[str, Any]:
    """What decides the generations: the model (and its weights' fingerprint), the prompts, the decoding."""
    prompts = hashlib.sha256(json.dumps([it.turns for it in data.items]).encode()).hexdigest()[:16]
    return {
        "model": model,
        "weights": weights_fingerprint(model),
        "bench": data.name,
        "prompts": prompts,
        "max_new_tokens": s.max_new_tokens,
        "temperature": s.temperature,
        "dtype": s.dtype,
        "seed": s.seed,
    }


def generate_answers(model: str, items: list[BenchItem], s: DecodingSettings) -> list[list[str]]:
    """Per item, one answer per user turn (the second turn sees the policy's own first answer)."""
    # the generation engine imports torch: loaded when answers are generated, not when the CLI builds its parser
    from prefalign.generation.policy import generate, load_policy

    tok = load_tokenizer(model)
    policy = load_policy(model, s.dtype)
    answers: list[list[str]] = [[] for _ in items]
    for turn in range(max(len(it.turns) for it in items)):
        todo = [k for k, it in enumerate(items) if len(it.turns) > turn]
        convs = _conversations([items[k] for k in todo], turn, [answers[k] for k in todo])
        out = generate(policy, tok, convs, s.max_new_tokens, s.batch_size, s.temperature, seed=s.seed, progress=True)
        for k, text in zip(todo, out, strict=True):
            answers[k].append(text)
    return answers


def cached_answers(
    model: str, data: BenchData, s: DecodingSettings, out_dir: str | None
) -> tuple[list[list[str]], bool]:
    """(answers, reused): read from `out_dir` when its key matches, else generated (and written there)."""
    key = generation_key(model, data, s)
    if out_dir:
        key_file, gen_file = Path(out_dir) / "generations.key.json", Path(out_dir) / "generations.jsonl"
        if key_file.exists() and gen_file.exists() and json.loads(key_file.read_text()) == key:
            rows = [json.loads(line) for line in gen_file.read_text(encoding="utf-8").splitlines() if line.strip()]
            if [r["id"] for r in rows] == [it.id for it in data.items]:
                return [r["answers"] for r in rows], True
    answers = generate_answers(model, data.items, s)
    if out_dir:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        write_json(out / "generations.key.json", key, indent=2)
    return answers, False


def write_generations(out_dir: str, data: BenchData, answers: list[list[str]], scored: list[dict[str, Any]]) -> None:
    with open(Path(out_dir) / "generations.jsonl", "w", encoding="utf-8") as f:
        for item, ans, sc in zip(data.items, answers, scored, strict=True):
            row = {"id": item.id, "category": item.category, "turns": item.turns, "answers": ans, **sc}
            if item.reference is not None:
                row["reference"] = item.reference
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


# ---------------------------------------------------------------------------------------------------------
# Judging through the scorer interface
# ---------------------------------------------------------------------------------------------------------


def _assistant(text: str) -> list[Any]:
    return [Message("assistant", text)]


def judge_preferences(scorer: Any, items: list[BenchItem], answers: list[str]) -> list[float]:
    """P(policy answer better than the reference answer) per item; NaN where the judge abstained."""
    prompts = _conversations(items, 0)
    pol = [_assistant(a) for a in answers]
    ref = [_assistant(it.reference or "") for it in items]
    if scorer.kind == "pointwise":
        sp, sr = scorer.score(prompts, pol), scorer.score(prompts, ref)
        return [pointwise_preference(float(a), float(b)) for a, b in zip(sp, sr, strict=True)]
    if scorer.kind == "pairwise":
        first = [float(x) for x in scorer.compare(prompts, pol, ref)]
        if getattr(scorer, "symmetric", False):
            return [x if math.isfinite(x) else math.nan for x in first]
        second = [float(x) for x in scorer.compare(prompts, ref, pol)]
        return [both_orders(a, b) for a, b in zip(first, second, strict=True)]
    raise UserError(
        f"the {scorer.kind} scorer '{scorer.name}' cannot judge answers against the reference answers; "
        "use a pointwise scorer (a reward model: scalar) or a pairwise one (judge, pair_pm, think)"
    )


def _verdict(p_a: float) -> str | None:
    """A game's Arena-Hard label from P(A better): A>B above 1/2, A=B at 1/2, B>A below; None where it abstained.
    A probability or a score difference has no "much better" degree, so these judges give no strong (>>) label."""
    if not math.isfinite(p_a):
        return None
    return "A>B" if p_a > 0.5 else "A=B" if p_a == 0.5 else "B>A"


def judge_games(scorer: Any, items: list[BenchItem], answers: list[str]) -> list[tuple[str | None, str | None]]:
    """Arena-Hard's two games per item as verdict labels: game 1 with the reference answer as A and the policy's as
    B, game 2 with the policy's as A. A pointwise judge scores each answer once; a pairwise one is asked in both
    orders (a symmetric one once, its game 2 being the complement)."""
    prompts = _conversations(items, 0)
    pol = [_assistant(a) for a in answers]
    ref = [_assistant(it.reference or "") for it in items]
    if scorer.kind == "pointwise":
        sp = [float(x) for x in scorer.score(prompts, pol)]
        sr = [float(x) for x in scorer.score(prompts, ref)]
        return [
            (_verdict(pointwise_preference(b, a)), _verdict(pointwise_preference(a, b)))
            for a, b in zip(sp, sr, strict=True)
        ]
    if scorer.kind == "pairwise":
        game1 = [float(x) for x in scorer.compare(prompts, ref, pol)]
        if getattr(scorer, "symmetric", False):
            game2 = [1.0 - x for x in game1]
        else:
            game2 = [float(x) for x in scorer.compare(prompts, pol, ref)]
        return [(_verdict(a), _verdict(b)) for a, b in zip(game1, game2, strict=True)]
    raise UserError(
        f"the {scorer.kind} scorer '{scorer.name}' cannot judge answers against the reference answers; "
        "use a pointwise scorer (a reward model: scalar) or a pairwise one (judge, pair_pm, think)"
    )


def judge_turn_scores(scorer: Any, items: list[BenchItem], answers: list[list[str]]) -> list[list[float]]:
    """MT-Bench: per item, the judge's score of each turn's answer in its conversation."""
    if scorer.kind != "pointwise":
        raise UserError(
            f"mtbench scores each answer on its own; the {scorer.kind} scorer '{scorer.name}' compares two. Use a "
            "pointwise scorer: a reward model (scalar) or a generative RM giving 1-10 (grm); or grade with "
            "FastChat's judge prompts: --judge judge:MODEL --judge-prompts judge_prompts.jsonl"
        )
    out: list[list[float]] = [[] for _ in items]
    for turn in range(2):
        convs = _conversations(items, turn, answers)
        scores = scorer.score(convs, [_assistant(a[turn]) for a in answers])
        for k, v in enumerate(scores):
            out[k].append(float(v))
    return out


# ---------------------------------------------------------------------------------------------------------
# Scoring, one function per kind of set: (items, answers, judge, settings) -> (scores without the headline,
# one row per item for generations.jsonl). The headline is the set's table entry's.
# ---------------------------------------------------------------------------------------------------------

Scores = tuple[dict[str, Any], list[dict[str, Any]]]


def _ci(values: list[float], reps: int, seed: int) -> list[float] | None:
    if not values or reps <= 0:
        return None
    lo, hi = bootstrap_ci(values, reps, seed)
    return None if math.isnan(lo) else [lo, hi]


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def score_ifeval(data: BenchData, answers: list[list[str]], judge: Any, s: PolicyBenchSettings) -> Scores:
    """Prompt- and instruction-level accuracy, strict and loose, by the IFEval verifiers (no judge)."""
    items = [it.ifeval for it in data.items]
    assert all(i is not None for i in items)
    res = ifeval_scores([i for i in items if i is not None], [a[0] for a in answers])
    names = ["prompt_strict", "prompt_loose", "instruction_strict", "instruction_loose"]
    scores = {
        "sections": {k: res[k] for k in names},
        "intervals": {k: _ci(res["values"][k], s.bootstrap, s.seed) for k in names},
        "subsets": {
            k: {"score": v["strict"], "loose": v["loose"], "n": v["n"]} for k, v in res["by_instruction"].items()
        },
        "extra": {"detectors": DETECTORS},
    }
    per_item = [
        {"instructions": it.ifeval.instruction_ids if it.ifeval else [], **d}
        for it, d in zip(data.items, res["details"], strict=True)
    ]
    return scores, per_item


def score_pairwise(data: BenchData, answers: list[list[str]], judge: Any, s: PolicyBenchSettings) -> Scores:
    """Win rate and length-controlled win rate of the first answers against the reference answers."""
    first = [a[0] for a in answers]
    annotated = judge.annotations(data.items, first) if isinstance(judge, AlpacaEvalJudge) else None
    if annotated is None:
        prefs = judge_preferences(judge, data.items, first)
    else:
        prefs = [a["preference"] - 1 for a in annotated]
    wr = win_rates(
        prefs,
        [len(a) for a in first],
        [len(it.reference or "") for it in data.items],
        bootstrap=s.bootstrap,
        seed=s.seed,
    )
    cats: dict[str, list[float]] = {}
    for it, p in zip(data.items, prefs, strict=True):
        if it.category and math.isfinite(p):
            cats.setdefault(it.category, []).append(p)
    # the length control: alpaca_eval's own GLM with an instruction-difficulty table (--lc-table), else ours
    glm, table = resolve_lc(s.lc_glm, s.lc_table, "--lc-glm ", "--lc-table ")
    lc_win_rate, lc_ci = wr.lc_win_rate, list(wr.lc_ci95) if wr.lc_ci95 else None
    length_control: dict[str, Any] = {
        "glm": "toolkit",
        "formula": "theta + phi * tanh(delta_len / std)",
        "ridge": RIDGE,
    }
    if glm != "toolkit" and wr.n:
        # an item's instruction index is its row in --data (AlpacaEval's 805, in order, when --data is its file)
        indices = [int(it.id) for it in data.items]
        lc = alpaca_lc_win_rate(
            prefs, [len(it.reference or "") for it in data.items], [len(a) for a in first], indices, glm, table
        )
        lc_win_rate, lc_ci = lc.lc_win_rate, None  # the reference reports a standard error, not a bootstrap interval
        length_control = lc.describe(table.path if table else None) | {"lc_standard_error": lc.lc_standard_error}
    scores = {
        "sections": {"win_rate": wr.win_rate, "lc_win_rate": lc_win_rate},
        "intervals": {"win_rate": list(wr.ci95) if wr.ci95 else None, "lc_win_rate": lc_ci},
        "subsets": {c: {"score": sum(v) / len(v), "n": len(v)} for c, v in sorted(cats.items())},
        "extra": {
            "judged": {
                "items": wr.n,
                "abstained": wr.abstained,
                "wins": wr.wins,
                "ties": wr.ties,
                "losses": wr.losses,
                "length_coef": wr.length_coef,
                "mean_len_diff_chars": wr.mean_len_diff,
            },
            "length_control": length_control,
        },
    }
    rows = [{"preference": None if not math.isfinite(p) else p} for p in prefs]
    if annotated is not None:  # the reference's own order of the outputs and the judge's reply, beside each preference
        kept = ("is_switched_outputs", "raw_completion")
        rows = [r | {k: a[k] for k in kept if k in a} for r, a in zip(rows, annotated, strict=True)]
    return scores, rows


def score_arenahard(data: BenchData, answers: list[list[str]], judge: Any, s: PolicyBenchSettings) -> Scores:
    """Arena-Hard's score as its show_result.py computes it (`leaderboards.arena_hard`): battles from both games,
    the Bradley-Terry win rate against the reference model, its bootstrap interval (100 rounds, seed 42); beside it
    the per-prompt win rate with the usual bootstrap over prompts. Each row keeps its two games in the judgment
    file's layout (`games[i].score`)."""
    first = [a[0] for a in answers]
    judged = judge.games(data.items, first) if isinstance(judge, ArenaHardJudge) else None
    if judged is None:
        games = judge_games(judge, data.items, first)
    else:
        games = [(g1.score, g2.score) for g1, g2 in judged]
    labels = judge.labels if isinstance(judge, ArenaHardJudge) else VERDICTS  # v2.0's judge: its ten labels
    battles = [b for g1, g2 in games for b in game_battles(g1, g2, labels=labels)]
    if not battles:
        raise UserError("arenahard: the judge gave no verdict on any game; nothing to score")
    ah = arena_hard_scores([("policy", battles)])[0]
    prefs = [
        math.nan if not b else sum(b) / len(b) for b in (game_battles(g1, g2, labels=labels) for g1, g2 in games)
    ]  # per prompt: its games' mean outcome
    wr = win_rates(prefs, [len(a) for a in first], [len(it.reference or "") for it in data.items], s.bootstrap, s.seed)
    scores = {
        "sections": {"score": ah.score / 100, "win_rate": wr.win_rate},
        "intervals": {"score": [ah.lower / 100, ah.upper / 100], "win_rate": list(wr.ci95) if wr.ci95 else None},
        "subsets": {},
        "extra": {
            "arena_hard": {
                "elo": ah.elo,
                "battles": ah.battles,
                "printed": ah.printed(),
                "rounds": ROUNDS,
                "seed": SEED,
                "strong_weight": WEIGHT,
                "labels": list(labels),
                "reference": "lmarena/arena-hard-auto@0489bf38 show_result.py",
            },
            "judged": {
                "items": wr.n,
                "abstained": wr.abstained,
                "games_without_verdict": sum((g1 is None) + (g2 is None) for g1, g2 in games),
                "wins": wr.wins,
                "ties": wr.ties,
                "losses": wr.losses,
            },
        },
    }
    if judged is None:
        rows = [
            {"question_id": it.id, "games": [{"score": g1}, {"score": g2}]}
            for it, (g1, g2) in zip(data.items, games, strict=True)
        ]
    else:  # the judgment rows of the judge's version (v0.1 keyed by question_id, v2.0 by uid)
        rows = [judge.row(it, pair) for it, pair in zip(data.items, judged, strict=True)]
    return scores, rows


def score_mtbench(data: BenchData, answers: list[list[str]], judge: Any, s: PolicyBenchSettings) -> Scores:
    """The judge's score of every turn's answer: the mean, per turn and per category. A FastChat judge
    (`--judge-prompts`) grades each answer with MT-Bench's own prompts; its failed ratings (-1) are left out, as
    FastChat's show_result drops them, and counted."""
    if isinstance(judge, FastChatJudge) and judge.mode == "pairwise-baseline":
        return score_mtbench_pairwise(data, answers, judge, s)
    judgments: list[list[dict[str, Any]]] = [[] for _ in data.items]
    if isinstance(judge, FastChatJudge):
        matches = single_matches(data.items, answers, judge.prompts, judge.references)
        graded = grade(matches, judge.generate)
        at = {it.id: k for k, it in enumerate(data.items)}
        turn_scores = [[math.nan] * len(it.turns) for it in data.items]
        for m, (score, text) in zip(matches, graded, strict=True):
            k = at[m.item.id]
            turn_scores[k][m.turn - 1] = math.nan if score == -1 else float(score)
            judgments[k].append(
                {"turn": m.turn, "prompt": m.prompt.name, "user_prompt": m.user_prompt, "judgment": text}
            )
    else:
        turn_scores = judge_turn_scores(judge, data.items, answers)
    finite = lambda xs: [x for x in xs if math.isfinite(x)]
    turns = {f"turn_{t + 1}": finite([ts[t] for ts in turn_scores]) for t in range(2)}
    both = finite([x for ts in turn_scores for x in ts])
    cats: dict[str, list[float]] = {}
    for it, ts in zip(data.items, turn_scores, strict=True):
        cats.setdefault(it.category or "(none)", []).extend(finite(ts))
    abstained = sum(1 for ts in turn_scores for x in ts if not math.isfinite(x))
    scores = {
        "sections": {"mean": _mean(both), **{k: _mean(v) for k, v in turns.items()}},
        "intervals": {
            "mean": _ci(both, s.bootstrap, s.seed),
            **{k: _ci(v, s.bootstrap, s.seed) for k, v in turns.items()},
        },
        "subsets": {
            c: {"score": _mean(v), "n": len(v), "ci95": _ci(v, s.bootstrap, s.seed)} for c, v in sorted(cats.items())
        },
        "extra": {"judged": {"answers": 2 * len(data.items), "abstained": abstained}},
    }
    rows = [
        {"scores": [None if not math.isfinite(x) else x for x in ts], **({"judgments": j} if j else {})}
        for ts, j in zip(turn_scores, judgments, strict=True)
    ]
    return scores, rows


def score_mtbench_pairwise(
    data: BenchData, answers: list[list[str]], judge: FastChatJudge, s: PolicyBenchSettings
) -> Scores:
    """FastChat's pairwise-baseline grading: each (question, turn) judged in both orders against the baseline's
    answer; win, loss and tie as show_result counts them (a row with an error in either game dropped, a tie in game 1
    or two games that disagree a tie), the rates with bootstrap intervals over the kept rows."""
    assert judge.baseline is not None and judge.baseline_answers is not None
    matches = pair_matches(data.items, answers, judge.baseline_answers, judge.prompts, judge.references)
    graded = grade_pairs(matches, judge.generate)
    at = {it.id: k for k, it in enumerate(data.items)}
    games: list[list[dict[str, Any]]] = [[] for _ in data.items]
    for m, (w1, w2, j1, j2) in zip(matches, graded, strict=True):
        games[at[m.item.id]].append(
            {
                "turn": m.turn,
                "prompt": m.prompt.name,
                "g1_winner": w1,
                "g2_winner": w2,
                "g1_user_prompt": m.user_prompts[0],
                "g1_judgment": j1,
                "g2_user_prompt": m.user_prompts[1],
                "g2_judgment": j2,
            }
        )
    # each kept match's outcome for the policy by show_result's rule: win 1, tie 1/2, loss 0 (None: dropped)
    kept = [pair_outcome(w1, w2) for w1, w2, _, _ in graded]
    outcome = [x for x in kept if x is not None]
    won, lost = [float(x == 1.0) for x in outcome], [float(x == 0.0) for x in outcome]
    tally = PairwiseTally("policy", int(sum(won)), int(sum(lost)), len(outcome) - int(sum(won)) - int(sum(lost)))
    rates = tally.rates if outcome else {"win_rate": None, "loss_rate": None, "win_rate_adjusted": None}
    scores = {
        "headline_section": "win_rate_adjusted",
        "headline_name": f"Adjusted win rate against {judge.baseline} (ties half)",
        "units": "fraction",
        "sections": rates,
        "intervals": {
            "win_rate": _ci(won, s.bootstrap, s.seed),
            "loss_rate": _ci(lost, s.bootstrap, s.seed),
            "win_rate_adjusted": _ci(outcome, s.bootstrap, s.seed),
        },
        "subsets": {},
        "extra": {
            # matches (question and turn), their games, and the matches dropped for a game without a verdict
            "judged": {"answers": len(kept), "games": 2 * len(kept), "abstained": len(kept) - len(outcome)},
            "tally": {"win": tally.win, "loss": tally.loss, "tie": tally.tie} if outcome else {},
        },
    }
    return scores, [{"baseline": judge.baseline, "games": g} for g in games]


# ---------------------------------------------------------------------------------------------------------
# The benchmark's own results format, written beside generations.jsonl so its reference code (and `align bench score
# --from`) reads the same judgments: (items, answers, per-item rows, model, judge name) -> (file name, text).
# ---------------------------------------------------------------------------------------------------------

Native = Callable[[BenchData, list[list[str]], list[dict[str, Any]], str, str], tuple[str, str]]


def native_ifeval(
    data: BenchData, answers: list[list[str]], rows: list[dict[str, Any]], model: str, judge: str
) -> tuple[str, str]:
    """google-research/google-research instruction_following_eval's `--input_response_data`: one `{"prompt",
    "response"}` per line, the prompt as input_data.jsonl holds it (`evaluation_lib.read_prompt_to_response_dict`
    looks each response up by its prompt), so `python -m instruction_following_eval.evaluation_main --input_data
    input_data.jsonl --input_response_data input_response_data.jsonl` checks the same answers."""
    lines = [
        json.dumps({"prompt": it.turns[0], "response": a[0]}, ensure_ascii=False)
        for it, a in zip(data.items, answers, strict=True)
    ]
    return "input_response_data.jsonl", "".join(x + "\n" for x in lines)


def native_alpacaeval(
    data: BenchData, answers: list[list[str]], rows: list[dict[str, Any]], model: str, judge: str
) -> tuple[str, str]:
    """alpaca_eval's annotations.json: the reference answer as output_1, the policy's as output_2, `preference` 1 +
    P(policy better) (1..2; null where the judge abstained), as its `get_winrate` reads it (with an annotator's own
    judge, its output switch and written reply beside it: `is_switched_outputs`, `raw_completion`); `index` the
    item's row in --data, which alpaca_eval's length-controlled GLM takes as the instruction (a file's own `index`
    column wins over the row position there), so a run with --limit or skipped rows still looks up the right
    difficulty."""
    out = [
        {
            **({"index": int(it.id)} if it.id.isdigit() else {}),  # the instruction, for alpaca_eval's LC GLM
            "instruction": it.turns[0],
            "output_1": it.reference or "",
            "generator_1": data.reference_model or "reference",
            "dataset": it.category,
            "output_2": a[0],
            "generator_2": model,
            "annotator": judge,
            "preference": None if r["preference"] is None else 1.0 + r["preference"],
            **{k: r[k] for k in ("is_switched_outputs", "raw_completion") if k in r},
        }
        for it, a, r in zip(data.items, answers, rows, strict=True)
    ]
    return "annotations.json", json.dumps(out, indent=2, ensure_ascii=False)


def native_arenahard(
    data: BenchData, answers: list[list[str]], rows: list[dict[str, Any]], model: str, judge: str
) -> tuple[str, str]:
    """Arena-Hard's model_judgment/<judge>/<model>.jsonl rows, in the layout of the version that judged them: v0.1
    question_id, model, judge and the two games; v2.0 (rows keyed by `uid`) uid, category, judge, model, baseline
    and the two games."""
    lines = []
    for it, r in zip(data.items, rows, strict=True):
        if "uid" in r:  # v2.0's `judgment` row
            row = {k: r[k] for k in ("uid", "category")} | {"judge": judge, "model": model, "baseline": r["baseline"]}
        else:
            row = {"question_id": it.id, "model": model, "judge": judge}
        lines.append(json.dumps(row | {"games": r["games"]}, ensure_ascii=False))
    return "model_judgment.jsonl", "".join(x + "\n" for x in lines)


def native_mtbench(
    data: BenchData, answers: list[list[str]], rows: list[dict[str, Any]], model: str, judge: str
) -> tuple[str, str]:
    """FastChat's model_judgment/<judge>_single.jsonl: one row per question and turn, `score` -1 where the judge
    gave none (FastChat's failed rating). The format has no other way to say it: a reward model's score of exactly
    -1 reads as a failure there (MT-Bench's own judge rates 1-10). A FastChat judge's rows carry the prompt it was
    asked with, its user prompt and its judgment, as `play_a_match_single` writes them; graded pairwise against a
    baseline, model_judgment/<judge>_pair.jsonl's rows as `play_a_match_pair` writes them."""
    if rows and "games" in rows[0]:  # FastChat's pairwise-baseline rows (model_judgment/<judge>_pair.jsonl)
        pair = []
        for it, r in zip(data.items, rows, strict=True):
            for g in r["games"]:
                row = {
                    "question_id": int(it.id) if it.id.isdigit() else it.id,
                    "model_1": model,
                    "model_2": r["baseline"],
                    "g1_winner": g["g1_winner"],
                    "g2_winner": g["g2_winner"],
                    "judge": [judge, g["prompt"]],
                    **{k: g[k] for k in ("g1_user_prompt", "g1_judgment", "g2_user_prompt", "g2_judgment")},
                    "turn": g["turn"],
                }
                pair.append(json.dumps(row, ensure_ascii=False))
        return "model_judgment_pair.jsonl", "".join(x + "\n" for x in pair)
    lines = []
    for it, r in zip(data.items, rows, strict=True):
        asked = {j["turn"]: j for j in r.get("judgments", [])}
        for t, v in enumerate(r["scores"]):
            j = asked.get(t + 1)
            prompt = j["prompt"] if j else ("single-v1" if t == 0 else "single-v1-multi-turn")
            row = {
                "question_id": int(it.id) if it.id.isdigit() else it.id,
                "model": model,
                "judge": [judge, prompt],
                **({"user_prompt": j["user_prompt"], "judgment": j["judgment"]} if j else {}),
                "score": -1 if v is None else v,
                "turn": t + 1,
            }
            lines.append(json.dumps(row, ensure_ascii=False))
    return "model_judgment_single.jsonl", "".join(x + "\n" for x in lines)


# ---------------------------------------------------------------------------------------------------------
# The table of sets
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PolicyBenchmark:
    """A standard prompt set: how its official file is read, what judges it, how its answers are scored."""

    summary: str
    read: Callable[..., BenchData]
    """(source) -> the set's items, or (source, reference answers file) where `reference_answers` is "file"."""
    score: Callable[[BenchData, list[list[str]], Any, PolicyBenchSettings], Scores]
    """(items, answers per item, the judge scorer or None, settings) -> scores without the headline, rows."""
    judge: tuple[str, ...]
    """Scorer kinds that can judge it (`align ls scorers`); () when rules score it (`rule`) and a judge is an error."""
    reference_answers: Literal["none", "data", "file"]
    """The answers the policy's are compared with: none, in the --data file, or a separate --reference FILE."""
    turns: int
    """User turns per prompt (a later turn continues the policy's own earlier answers)."""
    headline: str
    """The section the leaderboard shows."""
    headline_name: str
    units: Literal["fraction", "judge score"] = "fraction"
    rule: str | None = None
    """What scores the answers when no judge does (named in the record as its scorer)."""
    native: Native | None = None
    """Writes the per-item judgments in the benchmark's own results format (read by `align bench score --from`)."""


POLICY_BENCHMARKS: Table[PolicyBenchmark] = Table(
    "policy benchmark",
    {
        "ifeval": PolicyBenchmark(
            "IFEval: verifiable instructions (formats, counts, keywords), strict and loose",
            read=read_ifeval,
            score=score_ifeval,
            judge=(),
            reference_answers="none",
            turns=1,
            headline="prompt_strict",
            headline_name="Prompt-level strict accuracy",
            rule="ifeval verifiers",
            native=native_ifeval,
        ),
        "alpacaeval": PolicyBenchmark(
            "AlpacaEval: win rate against reference outputs, length-controlled",
            read=read_alpacaeval,
            score=score_pairwise,
            judge=("pointwise", "pairwise", "alpacaeval"),
            reference_answers="data",
            turns=1,
            headline="lc_win_rate",
            headline_name="LC win rate",
            native=native_alpacaeval,
        ),
        "arenahard": PolicyBenchmark(
            "Arena-Hard: win rate against a reference model's answers",
            read=read_arenahard,
            score=score_arenahard,
            judge=("pointwise", "pairwise", "arenahard"),
            reference_answers="file",
            turns=1,
            headline="score",
            headline_name="Score (Bradley-Terry win rate against the reference model)",
            native=native_arenahard,
        ),
        "mtbench": PolicyBenchmark(
            "MT-Bench: two turns, each answer scored by a pointwise judge, or graded by a chat model with FastChat's "
            "judge prompts (--judge-prompts)",
            read=read_mtbench,
            score=score_mtbench,
            judge=("pointwise", "fastchat"),
            reference_answers="none",
            turns=2,
            headline="mean",
            headline_name="Mean score",
            units="judge score",
            native=native_mtbench,
        ),
    },
    columns=("summary", "judge", "reference_answers", "turns", "headline_name"),
)


# ---------------------------------------------------------------------------------------------------------
# The flags of `align eval policy`
# ---------------------------------------------------------------------------------------------------------


@dataclass(kw_only=True)
class PolicyBenchSettings(DecodingSettings):
    """`align eval policy`, one field per flag (`prefalign.flags`). Without `bench` the command evaluates `model` on
    the suite's held-out prompts (`align.evaluate.evaluate_policy` reads model, baseline, prompts, limit, judge, out
    and the decoding settings); with `bench`, `run_policy_bench` runs a standard prompt set and `write_reference`
    writes reference answers."""

    model: str = option(doc="policy: builtin, directory, hub id, or a LoRA adapter directory")
    baseline: str | None = option(None, "model to compare against (e.g. the starting model)")
    prompts: str = option(
        "suite",
        "'suite' (its test prompts), a prompts JSONL with graders, or your own prompts ({prompt} rows) judged by "
        "--judge against --baseline's answers",
    )
    limit: int | None = option(
        None, "number of prompts: suite, family-balanced (default 120); --bench, the first N usable (default all)"
    )
    judge: str = option(
        "gold",
        "'gold' (the suite graders), or a scorer SPEC as everywhere (`align bench run --help`): a reward-model "
        "directory, KIND:MODEL (pair_pm:builtin:smollm2-135m-instruct), or '{type: KIND, model: ...}'; on the "
        "suite a pointwise scorer, whose NaN prompts are left out of the win rate and counted; --bench: the judge "
        "of alpacaeval, arenahard (pointwise or pairwise) and mtbench (pointwise)",
        metavar="SPEC",
    )
    bench: str | None = option(
        None,
        "a standard prompt set instead of the suite (read from --data in its official format; "
        "`align ls policy-benchmarks`)",
        choices=POLICY_BENCHMARKS,
    )
    data: str | None = option(None, "--bench: the set's file (official format) or a hub id")
    reference: str | None = option(None, "arenahard: the reference model's answer file (model_answer/<model>.jsonl)")
    options: dict[str, Any] = option(
        factory=dict,
        doc="an option of the --judge scorer, e.g. normalize=true, dtype=float32 (repeatable)",
        flag="--option",
    )
    lc_table: str | None = option(
        None,
        "alpacaeval: compute the length-controlled win rate as alpaca_eval's length_controlled_v1 does, with this "
        "instruction-difficulty table (CSV: index, instruction_difficulty, and for v1 the gamed baselines' "
        "preference, std_delta_len, not_gamed_baseline rows, as AlpacaEval's df_gamed.csv); without it the "
        "toolkit's simpler GLM (no difficulty term). The record's extra.length_control says which",
        metavar="FILE",
    )
    lc_glm: str = option(
        "auto",
        "alpacaeval: the length-controlled GLM: auto (length_controlled_v1 with --lc-table, else toolkit), toolkit "
        "(the toolkit's own), or another of alpaca_eval's GLM_INFO",
        choices=LC_GLM_CHOICES,
    )
    judge_prompts: str | None = option(
        None,
        "the benchmark's own judge prompts, --judge's chat model writing each judgment (greedy). mtbench: FastChat's "
        "data/judge_prompts.jsonl, each answer graded as its llm_judge does, the rating read from [[x]] (else [x]; "
        "-1 when none, left out and counted), the judgments in model_judgment_single.jsonl. arenahard: its judge "
        "config, both games of every question judged as that version's gen_judgment.py does, the judgments in "
        "model_judgment.jsonl: v0.1's config/judge_config.yaml (asked again while no verdict, up to "
        "number_of_judgment_attempts), or v2.0's config/arena-hard-v2.0.yaml with --judge-settings (asked once, "
        "the system prompt of the question's category, the verdict by regex_patterns in turn). "
        "alpacaeval: an annotator's evaluators_configs/NAME/configs.yaml (its prompt, parser and decoding: "
        "regex_parser or ranking_parser on the judge's greedy reply, logprob_parser on its first token's top-5 "
        "log-probabilities), or a prompt file alone (alpaca_eval_clf.txt, judged by the first-token "
        "log-probabilities of m and M as weighted_alpaca_eval_gpt4_turbo does), in annotations.json",
        metavar="FILE",
    )
    judge_reference: str | None = option(
        None,
        "mtbench with --judge-prompts: the reference answers of the math, reasoning and coding questions (FastChat's "
        "reference_answer/<judge>.jsonl)",
        metavar="FILE",
    )
    judge_settings: str | None = option(
        None,
        "arenahard with v2.0's config as --judge-prompts: its utils/judge_utils.py, whose JUDGE_SETTINGS give each "
        "question category its baseline model and judge system prompt (read, not run: texts, names of texts and "
        "texts joined with +); a question of a category it lacks, or whose --reference answer is by another model "
        "than its category's baseline, stops the run before anything is generated",
        metavar="FILE",
    )
    judge_max_new_tokens: int = option(
        0,
        "with --judge-prompts: tokens per judgment (default 0: the benchmark's own: MT-Bench 2048, Arena-Hard its "
        "judge config's max_tokens, an AlpacaEval annotator its max_tokens)",
    )
    judge_mode: str = option(
        "single",
        "mtbench with --judge-prompts: single (each answer rated 1-10) or pairwise-baseline (each answer against "
        "--judge-baseline's, judged in both orders; FastChat's gen_judgment --mode)",
        choices=tuple(MODES),
    )
    judge_baseline: str | None = option(
        None,
        "mtbench --judge-mode pairwise-baseline: the baseline's answers (FastChat's model_answer/<model>.jsonl; the "
        "file's name is the baseline's, e.g. gpt-3.5-turbo)",
        metavar="FILE",
    )
    allow_partial: bool = option(
        False,
        "--bench: score the usable rows when some are not (unknown instruction ids, missing fields); they are "
        "listed with their row numbers and the record is marked partial. Without it such rows are an error",
    )
    bootstrap: int = option(1000, "--bench: bootstrap resamples of the 95% intervals")
    records: str | None = option(
        None, "--bench: leaderboard records directory to add the run's record to (policy tab); default: none"
    )
    write_reference: str | None = option(
        None,
        "alpacaeval: write --model's answers to the instructions of --data (an AlpacaEval file, or suite) as an "
        "AlpacaEval reference file naming --model as generator, then stop",
        metavar="FILE",
    )
    max_new_tokens: int = option(0, "tokens per answer (default: 96 on the suite, 256 with --bench)")
    out: str | None = option(
        None,
        "directory for report.json and generations.jsonl (--bench: generations are reused from here when the "
        "model, data and decoding settings match, so judging again does not regenerate)",
    )

    def __post_init__(self) -> None:
        if not self.max_new_tokens:  # 0: the default of the mode (as `--max-new-tokens 0` always was)
            standard = self.bench is not None or self.write_reference is not None
            self.max_new_tokens = BENCH_MAX_NEW_TOKENS if standard else DecodingSettings.max_new_tokens

    def check(self) -> list[str]:
        problems = []
        if self.write_reference is not None:
            if self.bench not in (None, "alpacaeval"):
                problems.append("write_reference: writes an AlpacaEval-format file; use it with --bench alpacaeval")
            if self.data is None:
                problems.append(
                    "write_reference: needs --data: an AlpacaEval file whose instructions to answer, or suite"
                )
        elif self.bench is not None:
            if self.data is None:
                problems.append(
                    f"data: --bench {self.bench} needs --data: the set's file in its official format, or a hub id"
                )
            if self.baseline is not None:
                problems.append(
                    f"baseline: --bench {self.bench} compares with the set's reference answers, not a --baseline "
                    "model; to compare with a model, write its answers with --write-reference and pass that file "
                    "as --data"
                )
        if self.judge_prompts is not None and self.bench not in ("mtbench", "arenahard", "alpacaeval"):
            problems.append(
                "judge_prompts: a benchmark's own judge prompts (FastChat's judge_prompts.jsonl for --bench mtbench, "
                "Arena-Hard's judge config for --bench arenahard, AlpacaEval's alpaca_eval_clf.txt for --bench "
                "alpacaeval)"
            )
        if self.judge_settings is not None and (self.bench != "arenahard" or self.judge_prompts is None):
            problems.append(
                "judge_settings: Arena-Hard v2.0's per-category judge settings (utils/judge_utils.py); use it with "
                "--bench arenahard --judge-prompts config/arena-hard-v2.0.yaml"
            )
        if self.judge_reference is not None and self.judge_prompts is None:
            problems.append("judge_reference: the reference answers of FastChat's judge prompts; add --judge-prompts")
        if (self.judge_mode == "pairwise-baseline") != (self.judge_baseline is not None):
            problems.append(
                "judge_baseline: --judge-mode pairwise-baseline needs --judge-baseline FILE (the baseline's answers), "
                "and --judge-baseline needs that mode"
            )
        if self.bench in ("arenahard", "alpacaeval") and (
            self.judge_reference is not None or self.judge_baseline is not None or self.judge_mode != "single"
        ):
            problems.append(
                "judge_mode: --judge-mode, --judge-reference and --judge-baseline are FastChat's MT-Bench settings; "
                "Arena-Hard's and AlpacaEval's judges take their baseline answers from the set (--reference, --data) "
                "and their settings from --judge-prompts"
            )
        if self.judge_mode != "single" and self.judge_prompts is None:
            problems.append("judge_mode: grades with FastChat's prompts; add --judge-prompts")
        if self.judge_max_new_tokens < 0:
            problems.append(
                f"judge_max_new_tokens: must be >= 1 (or 0: the benchmark's own), got {self.judge_max_new_tokens}"
            )
        for key, given in (("lc_table", self.lc_table is not None), ("lc_glm", self.lc_glm != "auto")):
            if given and self.bench != "alpacaeval":
                problems.append(f"{key}: AlpacaEval's length control; use it with --bench alpacaeval")
        if self.bench == "alpacaeval":
            try:  # the GLM and its table (read and checked) before anything is generated
                resolve_lc(self.lc_glm, self.lc_table, "--lc-glm ", "--lc-table ")
            except UserError as e:
                problems.append(str(e))  # it names the flags
        return problems


# ---------------------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------------------


def read_bench(name: str, source: str, reference: str | None = None) -> BenchData:
    """The items of set `name` from `source` (and, where the set keeps its reference answers in a file of their own,
    the answers in `reference`)."""
    bench = POLICY_BENCHMARKS[name]
    if bench.reference_answers == "file":
        data = bench.read(source, reference)
    elif reference is not None:
        files = [k for k, b in POLICY_BENCHMARKS.entries.items() if b.reference_answers == "file"]
        keeps = "keeps its references in --data" if bench.reference_answers == "data" else "has no reference answers"
        raise UserError(f"--reference is the answer file of {', '.join(files)}; {name} {keeps}")
    else:
        data = bench.read(source)
    if not data.items:
        lines = "\n  ".join(data.problems[:10]) or "(the file has no rows)"
        raise UserError(f"{source}: no usable {name} rows out of {data.rows_read}:\n  {lines}")
    return data


def check_problems(data: BenchData, allow_partial: bool) -> None:
    """Unusable rows stop the run (every problem listed) unless partial runs are allowed."""
    if not data.problems or allow_partial:
        return
    unknown = "".join(
        f"\n  unknown instruction id '{k}' in {n} row(s)" for k, n in sorted(data.unknown_instructions.items())
    )
    shown = "\n  ".join(data.problems[:20])
    more = f"\n  ... and {len(data.problems) - 20} more" if len(data.problems) > 20 else ""
    raise UserError(
        f"{data.source}: {len(data.problems)} problem(s) in {data.rows_read} rows:{unknown}\n  {shown}{more}\n"
        "Fix the file, or pass --allow-partial to score the other rows (the record is then marked partial)"
    )


def run_policy_bench(settings: PolicyBenchSettings, judge: Any = None) -> tuple[dict[str, Any], Record]:
    """Evaluate `settings.model` on the prompt set `settings.bench` read from `settings.data`; `judge` is a loaded
    scorer (`bench_judges.load_judge`; none for a set scored by rules). Returns the report and the record (saved to
    `settings.records` when given)."""
    # records (git, package versions) add ~15 ms to every `align` start, which reads this module for its flags
    from .records import Record, git_commit, now, package_versions

    s = replace(settings, dtype=decide_dtype(settings.dtype, knob="--dtype").value)
    if s.bench is None or s.data is None:
        raise UserError("run_policy_bench needs a prompt set: --bench NAME --data FILE")
    bench = POLICY_BENCHMARKS[s.bench]
    data = read_bench(s.bench, s.data, s.reference)
    check_problems(data, s.allow_partial)
    if s.limit is not None:
        data.items = data.items[: s.limit]
    if not bench.judge and judge is not None:
        raise UserError(f"{s.bench} is scored by its rules ({bench.rule}), not a judge; drop --judge")
    if bench.judge and judge is None:
        raise UserError(f"{s.bench} needs a judge: --judge SPEC (a reward model directory, or judge:MODEL ...)")
    if isinstance(judge, FastChatJudge | ArenaHardJudge | AlpacaEvalJudge):
        judge.check(data.items)  # references, baseline answers, the prompts' fields: before anything is generated
    t0 = time.time()
    answers, reused = cached_answers(s.model, data, s, s.out)
    t_gen = time.time() - t0
    rest, per_item = bench.score(data, answers, judge, s)
    section = rest.pop("headline_section", bench.headline)  # a set graded another way may name its own
    scores = {
        "headline": rest["sections"][section],
        "headline_name": rest.pop("headline_name", bench.headline_name),
        "units": rest.pop("units", bench.units),
        **rest,
    }
    judge_desc: dict[str, Any] = (
        {"name": bench.rule, "kind": "rule", "settings": {}}
        if judge is None
        else {"name": judge.name, "kind": judge.kind, "settings": judge.describe()}
    )
    record = Record(
        benchmark=s.bench,
        version=VERSION,
        model=s.model,
        scores=scores,
        counts={
            "examples": len(data.items),
            "rows_read": data.rows_read,
            "invalid_rows": len(data.problems),
            "abstained": int((scores.get("extra", {}).get("judged") or {}).get("abstained", 0)),
        },
        scorer=judge_desc,
        settings={
            "section": POLICY_SECTION,
            "data": s.data,
            "reference_answers": s.reference or (s.data if data.reference_model else None),
            "reference_model": data.reference_model,
            "limit": s.limit,
            "generation": {k: getattr(s, k) for k in ("max_new_tokens", "temperature", "dtype", "seed")},
            "bootstrap": s.bootstrap,
        },
        versions=package_versions(),
        git=git_commit(),
        date=now(),
        partial=bool(data.problems),
        problems=data.problems[:20],
    )
    report = {
        "model": s.model,
        "bench": s.bench,
        "data": s.data,
        "items": len(data.items),
        "reference_model": data.reference_model,
        "judge": judge_desc["settings"].get("model") if judge is not None else judge_desc["name"],
        "generations_reused": reused,
        "generation_seconds": round(t_gen, 1),
        "problems": data.problems,
        "unknown_instructions": data.unknown_instructions,
        "record": record.to_dict(),
    }
    if s.out:
        out = Path(s.out)
        out.mkdir(parents=True, exist_ok=True)
        write_generations(s.out, data, answers, per_item)
        if bench.native is not None and (judge is not None or not bench.judge):  # a rule needs no judge
            name, text = bench.native(data, answers, per_item, s.model, judge.name if judge else bench.rule or "")
            write_text(out / name, text)
            report["native"] = str(out / name)
        write_json(out / "report.json", report, indent=2, ensure_ascii=False)
    if s.records is not None:
        record.save(s.records)
    return report, record


def _fmt(v: Any, units: str) -> str:
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
        return "n/a"
    return f"{100 * v:.1f}%" if units == "fraction" else f"{v:.3f}"


def report_lines(record: Record) -> list[str]:
    """What the CLI prints: the headline, every section with its interval, the judge and the reference."""
    s = record.scores
    units = s.get("units", "fraction")
    partial = "  [PARTIAL: rows skipped, see problems]" if record.partial else ""
    lines = [
        f"{record.model} on {record.benchmark} ({record.counts['examples']} prompts): "
        f"{s['headline_name']} {_fmt(s['headline'], units)}{partial}"
    ]
    for name, v in s["sections"].items():
        ci = (s.get("intervals") or {}).get(name)
        ci_text = f"  (95% CI {_fmt(ci[0], units)} .. {_fmt(ci[1], units)})" if ci else ""
        lines.append(f"  {name:<20} {_fmt(v, units)}{ci_text}")
    judged = (s.get("extra") or {}).get("judged")
    if judged:
        lines.append(
            "  judged: " + ", ".join(f"{k} {_fmt(v, '') if isinstance(v, float) else v}" for k, v in judged.items())
        )
    for name, row in (s.get("subsets") or {}).items():
        extra = f" loose {_fmt(row['loose'], units)}" if "loose" in row else ""
        lines.append(f"    {name:<44} {_fmt(row.get('score'), units)}{extra} (n={row.get('n')})")
    lines.append(
        f"  judge: {record.scorer.get('name')} ({record.scorer.get('kind')})"
        + (f" {record.scorer['settings'].get('model')}" if record.scorer.get("settings", {}).get("model") else "")
    )
    if record.settings.get("reference_model"):
        lines.append(f"  reference answers by: {record.settings['reference_model']}")
    control = (s.get("extra") or {}).get("length_control")
    if control:  # which GLM gave lc_win_rate: alpaca_eval's (with its table and standard error) or the toolkit's
        how = "the toolkit's GLM (--lc-table FILE for alpaca_eval's)" if control["glm"] == "toolkit" else control["glm"]
        extra = f", table {control['table']}" if control.get("table") else ""
        se = control.get("lc_standard_error")
        lines.append(
            f"  length control: {how}{extra}" + (f", standard error {_fmt(se, units)}" if se is not None else "")
        )
    detectors = (s.get("extra") or {}).get("detectors")
    if detectors:  # the checks a rule-scored set ran with (IFEval's language detector)
        lines.append("  checks: " + "; ".join(f"{k}: {v}" for k, v in detectors.items()))
    for p in record.problems[:5]:
        lines.append(f"  skipped: {p}")
    return lines


def write_reference(settings: PolicyBenchSettings) -> int:
    """Write an AlpacaEval-format reference file (`settings.write_reference`): `settings.model`'s answers to the
    instructions of `settings.data` (an AlpacaEval file, or 'suite' for the verifiable suite's test prompts), each
    row naming the model as its generator. Returns the number of answers written."""
    s = settings
    if s.write_reference is None or s.data is None:
        raise UserError("write_reference needs --write-reference FILE and --data (an AlpacaEval file, or suite)")
    if s.data == "suite":
        # the suite's generators add ~60 ms to every `align` start (the CLI reads this module to build its parser):
        # imported only when references are written from the suite
        from preference_data.suite.heldout import load_prompts

        prompts = load_prompts("suite", s.limit, s.seed)  # family-balanced when limited, like the suite evaluation
        items = [BenchItem(p.id, [p.prompt[-1].content], f"suite:{p.grader}") for p in prompts]
    else:
        items = read_bench("alpacaeval", s.data).items
        if s.limit is not None:
            items = items[: s.limit]
    answers = generate_answers(s.model, items, s)
    rows = [
        {"instruction": it.turns[0], "output": a[0], "generator": s.model, "dataset": it.category}
        for it, a in zip(items, answers, strict=True)
    ]
    path = Path(s.write_reference)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, rows, indent=1, ensure_ascii=False)
    return len(rows)
