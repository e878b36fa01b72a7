"""`align bench score --from FILE`: a results file in a benchmark's own format, scored by this toolkit's rules.

Anyone can put the toolkit's number beside the reference code's on the same file: the judgments a benchmark's
own pipeline wrote (or that `align eval policy --bench ... --out DIR` wrote in the same layout) are read here and
scored by the functions every run uses, never by a second copy of them.

- arenahard: judgment files (`model_judgment/<judge>/<model>.jsonl`, rows with `model` and two `games` whose
  `score` is a verdict label), one per model, scored by `leaderboards.arena_hard` (show_result.py's rules); with
  `--option version=v2.0` v2.0's score without style control (`arena_hard_style.v2_plain_scores`), with
  `--option style_control=true --option answers=model_answer/` the style-controlled score of
  `leaderboards.arena_hard_style` (`version=v0.1`, show_result.py --style-control, or `version=v2.0`, its
  `--control-features markdown length`), the answers' style metadata read from their rows;
- alpacaeval: an `annotations.json` (rows with `generator_2`, `preference` 1..2 or null, `output_1`, `output_2`):
  each evaluated generator's raw win rate (`winrate.win_rates`, alpaca_eval's `get_winrate`) and length-controlled
  win rate: with `--option lc_table=FILE` (an instruction-difficulty CSV, `winrate.read_lc_table`) as alpaca_eval's
  `length_controlled_v1` computes it (`winrate.alpaca_lc_win_rate`; `--option lc_glm=` another of its GLMs), without
  one by the toolkit's own simpler GLM (`winrate.fit_length_glm`); the result names which. Numbers are read as
  `pd.read_json` reads them (`pandas_json_float`), since the reference reads the file so;
- ifeval: the `eval_results_strict.jsonl` / `eval_results_loose.jsonl` IFEval's `evaluation_main.py` writes (each
  row a prompt, its response, `instruction_id_list` and the reference's `follow_instruction_list`), with
  `--option data=input_data.jsonl` for the instructions' arguments: our verifiers' accuracy beside the file's, and the
  share of instruction verdicts that agree (strict or loose by the file's name, or `--option mode=`);
- judgebench: the JSONL `run_judge.py` writes (`outputs/*.jsonl`: the pairs with `label`, `source` and `judgments`,
  one per order; two is the double game, the second judged with B first; a failed judgement null): the accuracy
  overall and per category in percent (`compute_final_metrics`, the rules `judgebench` runs use);
- mtbench: FastChat judgment JSONL, single-answer grading (`model_judgment/gpt-4_single.jsonl`: `model`, `turn`,
  `score`, -1 a failed rating) per model: the mean per turn and overall (`show_result.py --mode single`); or
  pairwise (`model_judgment/gpt-4_pair.jsonl`: `model_1`, `model_2`, `g1_winner`, `g2_winner`): wins, losses, ties
  and the win rates per model against `--option baseline=` (`--mode pairwise-baseline`) or over every pair
  (`pairwise-all`), `mtbench_pairwise`;
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
from .arena_hard import ROUNDS, SEED, WEIGHT, arena_hard_scores, read_judgment_rows, read_judgments
from .ifeval import DETECTORS, ifeval_scores, levels
from .native import NATIVE_FORMATS, score_native
from .policy_data import read_ifeval
from .winrate import RIDGE, alpaca_lc_win_rate, discrete_win_rate, pandas_sem, resolve_lc, win_rates


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
    method: dict[str, Any] = field(default_factory=dict)
    """How a number was computed where a format offers more than one way (AlpacaEval's length control)."""


@dataclass(frozen=True)
class ResultsFormat:
    summary: str
    score: Callable[[Sequence[str], dict[str, Any]], list[ModelScore]]
    """(files, options) -> one score per model."""
    options: dict[str, Any] = field(default_factory=dict)
    """The options it takes, with their defaults (the reference code's)."""


STYLE_ONLY = ("version", "answers", "control", "baseline", "category")
"""arenahard options that only style control reads (v0.1)."""
V2_PLAIN = ("version", "baseline", "category")
"""Of those, the ones v2.0's score without style control reads too."""


def _switch(value: Any, name: str) -> bool:
    if isinstance(value, bool):
        return value
    if str(value).lower() in ("true", "false"):
        return str(value).lower() == "true"
    raise UserError(f"--option {name}={value}: true or false")


def _version(opts: dict[str, Any]) -> str:
    return "v" + str(opts["version"]).removeprefix("v")  # `version=2.0` reads as a number


def _arenahard(files: Sequence[str], opts: dict[str, Any]) -> list[ModelScore]:
    if _switch(opts["style_control"], "style_control"):
        return _arenahard_style(files, opts)
    defaults = RESULTS_FORMATS["arenahard"].options
    v2 = _version(opts) == "v2.0"
    stray = [k for k in STYLE_ONLY if opts[k] != defaults[k] and not (v2 and k in V2_PLAIN)]
    if stray:
        raise UserError(f"--option {stray[0]}=: only style control reads it; add --option style_control=true")
    if v2:
        return _arenahard_v2(files, opts)
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


def _arenahard_v2(files: Sequence[str], opts: dict[str, Any]) -> list[ModelScore]:
    # the v2.0 module loads torch and scikit-learn (a second or two): only a v2.0 or style-controlled score loads it
    from .arena_hard_style import v2_plain_scores

    fit = v2_plain_scores(
        read_judgment_rows(files),
        baseline=str(opts["baseline"]) or None,
        category=str(opts["category"]),
        weight=int(opts["weight"]),
        rounds=int(opts["rounds"]),
        seed=int(opts["seed"]),
    )
    method = {"version": fit.version, "printed": fit.line} | fit.method
    return [
        ModelScore(
            s.model,
            {"score": s.score, "win_rate": s.win_rate},
            {"battles": s.battles},
            (s.lower, s.upper),
            s.line,
            method,
        )
        for s in fit.scores
    ]


def _arenahard_style(files: Sequence[str], opts: dict[str, Any]) -> list[ModelScore]:
    # torch and scikit-learn (a second or two to import): only a style-controlled score loads them
    from .arena_hard_style import style_scores

    if not opts["answers"]:
        raise UserError(
            "style control needs each answer's style metadata: add --option answers=DIR, the benchmark's "
            "model_answer/ folder (rows with `conv_metadata` in v0.1, `metadata` in v2.0; arena-hard-auto's "
            "add_markdown_info.py adds them)"
        )
    version = _version(opts)
    fit = style_scores(
        read_judgment_rows(files),
        str(opts["answers"]),
        version,
        control=opts["control"],
        baseline=str(opts["baseline"]) or None,
        category=str(opts["category"]),
        weight=int(opts["weight"]),
        rounds=int(opts["rounds"]),
        seed=int(opts["seed"]),
    )
    method = {"style_control": fit.version, "style_coefficients": fit.coefficients, "printed": fit.line} | fit.method
    return [
        ModelScore(
            s.model,
            {"score": s.score, "win_rate": s.win_rate, "full_fit": s.full_fit},
            {"battles": s.battles},
            (s.lower, s.upper),
            s.line,
            method,
        )
        for s in fit.scores
    ]


def _rows(path: str, parse_float: Callable[[str], float] = float) -> list[dict[str, Any]]:
    text = Path(path).read_text(encoding="utf-8")
    try:
        if text.lstrip().startswith("["):
            rows = json.loads(text, parse_float=parse_float)
        else:
            rows = [json.loads(x, parse_float=parse_float) for x in text.splitlines() if x.strip()]
    except json.JSONDecodeError as e:
        raise UserError(f"{path}: not JSON or JSONL ({e})") from e
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise UserError(f"{path}: expected a list of objects (JSON) or one object per line (JSONL)")
    return rows


def _need(row: dict[str, Any], keys: Sequence[str], path: str, i: int) -> None:
    missing = [k for k in keys if k not in row]
    if missing:
        raise UserError(f"{path} row {i}: missing field(s) {', '.join(missing)}")


_NEG_POW10 = tuple(float(f"1e-{k}") for k in range(16))
"""ultrajson's g_pow10 table of negative powers of ten (pandas' vendored `ultrajsondec.c`)."""


def pandas_json_float(token: str) -> float:
    """A JSON number as `pd.read_json` decodes it by default (`precise_float=False`): pandas' vendored ultrajson
    (`ultrajsondec.c::decode_numeric`, `createDouble`) sums the integer part and the first 15 fraction digits,
    scaled by a table entry, then multiplies by pow(10, exponent). This is not the correctly rounded value that
    `float` gives (it differs in the last bit for about half of random 17-digit decimals); alpaca_eval reads
    annotations.json with `pd.read_json`, so its preferences are these values. Checked against pandas 3.1.1 on 43,005
    numbers: every one the same."""
    sign = -1.0 if token.startswith("-") else 1.0
    mantissa, _, exponent = token.lstrip("-").lower().partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = fraction[:15]  # JSON_DOUBLE_MAX_DECIMALS: later digits are skipped
    frac = 0.0
    for ch in digits:
        frac = frac * 10.0 + float(ord(ch) - 48)
    value = (float(int(whole or "0")) + frac * _NEG_POW10[len(digits)]) * sign
    if exponent:
        value *= math.pow(10.0, float(int(exponent)))
    return value


def _instruction_indices(rows: list[dict[str, Any]], path: str) -> list[int]:
    """Each row's instruction index as alpaca_eval's GLM takes it: `reset_index()` on the file as read gives the row
    position, unless the rows carry an `index` field of their own (then pandas names the position `level_0` and the
    field is the index)."""
    has = [("index" in r) for r in rows]
    if not any(has):
        return list(range(len(rows)))
    if not all(has) or not all(isinstance(r["index"], int) and not isinstance(r["index"], bool) for r in rows):
        raise UserError(f"{path}: `index`, where rows have it, must be an integer on every row (the instruction's)")
    return [int(r["index"]) for r in rows]


def _alpacaeval(files: Sequence[str], opts: dict[str, Any]) -> list[ModelScore]:
    glm, table = resolve_lc(
        str(opts["lc_glm"]), str(opts["lc_table"]) or None, "--option lc_glm=", "--option lc_table="
    )
    by_model: dict[str, list[tuple[dict[str, Any], int]]] = {}
    for path in files:
        rows = _rows(path, parse_float=pandas_json_float)
        for i, r in enumerate(rows):
            _need(r, ("generator_2", "preference", "output_1", "output_2"), path, i)
            p = r["preference"]
            if p is not None and not (isinstance(p, (int, float)) and (p == 0 or 1 <= p <= 2)):
                raise UserError(f"{path} row {i}: `preference` must be 1..2 (0 a draw) or null, got {p!r}")
        indices = _instruction_indices(rows, path)
        models = {str(r["generator_2"]) for r in rows}
        if glm != "toolkit" and len(models) > 1 and not any("index" in r for r in rows):
            raise UserError(
                f"{path}: {len(models)} generators in one file without `index` fields; alpaca_eval's GLM scores one "
                "annotations.json per model and takes a row's position as its instruction: split the file per "
                "generator_2, or give each row its instruction's `index`"
            )
        for r, ix in zip(rows, indices, strict=True):
            by_model.setdefault(str(r["generator_2"]), []).append((r, ix))
    out = []
    for model, pairs in by_model.items():
        rows = [r for r, _ in pairs]
        prefs = [
            math.nan if r["preference"] is None else 0.5 if r["preference"] == 0 else r["preference"] - 1 for r in rows
        ]
        lens_1, lens_2 = [len(r["output_1"]) for r in rows], [len(r["output_2"]) for r in rows]
        wr = win_rates(prefs, lens_2, lens_1, bootstrap=0)
        pct = None if wr.win_rate is None else 100 * wr.win_rate
        kept = [p for p in prefs if math.isfinite(p)]
        sections: dict[str, float | None] = {
            "win_rate": pct,
            "standard_error": pandas_sem(kept) * 100 if len(kept) > 1 else None,
            "discrete_win_rate": discrete_win_rate(kept) * 100 if kept else None,
        }
        if glm == "toolkit":
            sections["lc_win_rate"] = None if wr.lc_win_rate is None else 100 * wr.lc_win_rate
            method = {"glm": "toolkit", "formula": "theta + phi * tanh(delta_len / std)", "ridge": RIDGE}
            how = "the toolkit's GLM, not alpaca_eval's: give --option lc_table=FILE for its length_controlled_v1"
        else:
            # the reference compares generator_2 with the first generator_1 it meets
            itself = str(rows[0].get("generator_1")) == model
            lc = alpaca_lc_win_rate(prefs, lens_1, lens_2, [ix for _, ix in pairs], glm, table, itself)
            sections |= {"lc_win_rate": lc.lc_win_rate * 100, "lc_standard_error": lc.lc_standard_error * 100}
            method = lc.describe(table.path if table else None)
            how = f"alpaca_eval's {glm}" + (f", table {table.path}" if table else "")
        line = f"{model}: " + ", ".join(f"{k} {v:.4f}" if v is not None else f"{k} n/a" for k, v in sections.items())
        out.append(
            ModelScore(
                model,
                sections,
                {"counted": wr.n, "null": wr.abstained, "wins": wr.wins, "draws": wr.ties, "losses": wr.losses},
                line=f"{line} (LC: {how})",
                method=method,
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


FASTCHAT_BASELINE = "gpt-3.5-turbo"
"""show_result.py's --baseline-model default (pairwise-baseline)."""
MTBENCH_MODES = ("auto", "single", "pairwise-baseline", "pairwise-all")
"""show_result.py's --mode choices, and auto: single for rows with `score`, pairwise-baseline for `g1_winner` rows."""
PAIR_WINNERS = ("model_1", "model_2", "tie", "error")
"""The values FastChat's play_a_match_pair writes as g1_winner / g2_winner (a judge's [[A]], [[B]], [[C]] mapped to
the models, or error where its verdict could not be parsed)."""


@dataclass(frozen=True)
class PairwiseTally:
    """One model's pairwise record as show_result.py's display_result_pairwise counts it."""

    model: str
    win: int
    loss: int
    tie: int

    @property
    def rates(self) -> dict[str, float | None]:
        n = self.win + self.loss + self.tie
        return {
            "win_rate": self.win / n,
            "loss_rate": self.loss / n,
            "win_rate_adjusted": (self.win + 0.5 * self.tie) / n,  # a tie counts half a win, half a loss
        }


def pair_outcome(g1: str, g2: str) -> float | None:
    """show_result.py's reading of one pairwise row for model_1: None (dropped) when either game is an error; 1/2
    when game 1 is a tie or the games disagree (position bias; a tie in game 2 alone after a game-1 verdict is a
    disagreement too); else 1 when both chose model_1, 0 when both chose model_2 (anything but model_1 is model_2)."""
    if g1 == "error" or g2 == "error":
        return None
    if g1 == "tie" or g1 != g2:
        return 0.5
    return 1.0 if g1 == "model_1" else 0.0


def mtbench_pairwise(
    rows: Sequence[dict[str, Any]], baseline: str | None, model_list: Sequence[str] = ()
) -> list[PairwiseTally]:
    """lm-sys/FastChat @ 0e6d3e4b, fastchat/llm_judge/show_result.py `display_result_pairwise`, the rules:

    - a row whose g1_winner or g2_winner is "error" is dropped;
    - with `model_list`, only rows whose model_1 is in it count (model_2 is not checked);
    - pairwise-baseline (`baseline` a model): only rows with the baseline as model_1 or model_2; pairwise-all
      (`baseline` None): every row;
    - game 1 judged model_1 as A, game 2 model_2 as A (`g*_winner` already names the model): the row is a win for
      the model both games chose; a tie in game 1, or games that disagree (position bias), is a tie for both models
      (a tie in game 2 alone after a game-1 verdict is also a disagreement, so a tie);
    - turns are pooled (each turn's judgment a row), and so are judges;
    - per model win, loss, tie over its rows; the baseline's own line removed; win_rate = win / n, loss_rate =
      loss / n, win_rate_adjusted = (win + tie / 2) / n.

    Returns the tallies sorted by win_rate_adjusted, highest first (ties by name)."""
    tally: dict[str, list[int]] = {}
    for r in rows:
        outcome = pair_outcome(r["g1_winner"], r["g2_winner"])
        if outcome is None:
            continue
        if model_list and r["model_1"] not in model_list:
            continue
        if baseline is not None and baseline not in (r["model_1"], r["model_2"]):
            continue
        m1, m2 = tally.setdefault(r["model_1"], [0, 0, 0]), tally.setdefault(r["model_2"], [0, 0, 0])
        if outcome == 0.5:
            m1[2] += 1
            m2[2] += 1
        else:
            winner, loser = (m1, m2) if outcome == 1.0 else (m2, m1)
            winner[0] += 1
            loser[1] += 1
    out = [PairwiseTally(m, *t) for m, t in sorted(tally.items()) if m != baseline]
    return sorted(out, key=lambda t: -(t.rates["win_rate_adjusted"] or 0.0))


def _mtbench(files: Sequence[str], opts: dict[str, Any]) -> list[ModelScore]:
    mode = str(opts["mode"])
    if mode not in MTBENCH_MODES:
        raise UserError(f"--option mode={mode}: one of {', '.join(MTBENCH_MODES)}{did_you_mean(mode, MTBENCH_MODES)}")
    rows = [(path, i, r) for path in files for i, r in enumerate(_rows(path))]
    if not rows:
        raise UserError(f"--from {', '.join(files)}: no judgment rows")
    pairwise = "g1_winner" in rows[0][2] and "score" not in rows[0][2]
    if mode == "auto":
        mode = "pairwise-baseline" if pairwise else "single"
    elif pairwise != (mode != "single"):
        kind = "pairwise (g1_winner, g2_winner)" if pairwise else "single-answer (score)"
        raise UserError(f"--option mode={mode}: {rows[0][0]} holds {kind} judgments; leave mode at auto")
    model_list = [m.strip() for m in str(opts["model_list"] or "").split(",") if m.strip()]
    if mode == "single":
        return _mtbench_single(rows, model_list)
    for path, i, r in rows:
        _need(r, ("model_1", "model_2", "g1_winner", "g2_winner"), path, i)
        bad = [k for k in ("g1_winner", "g2_winner") if r[k] not in PAIR_WINNERS]
        if bad:
            raise UserError(f"{path} row {i}: {', '.join(bad)} must be one of {', '.join(PAIR_WINNERS)}")
    baseline = None if mode == "pairwise-all" else str(opts["baseline"])
    tallies = mtbench_pairwise([r for _, _, r in rows], baseline, model_list)
    if not tallies:
        raise UserError(
            f"--from {', '.join(files)}: no counted row names --option baseline={baseline} as model_1 or model_2 "
            "(or every verdict is an error); name the baseline the judgments were made against, or "
            "--option mode=pairwise-all"
        )
    return [
        ModelScore(
            t.model,
            t.rates,
            {"win": t.win, "loss": t.loss, "tie": t.tie},
            line=f"{t.model}: " + ", ".join(f"{k} {v:.6f}" for k, v in t.rates.items() if v is not None),
            method={"mode": mode, "baseline": baseline, "reference": "lm-sys/FastChat@0e6d3e4b show_result.py"},
        )
        for t in tallies
    ]


def _mtbench_single(rows: Sequence[tuple[str, int, dict[str, Any]]], model_list: Sequence[str]) -> list[ModelScore]:
    by_model: dict[str, dict[int, list[float]]] = {}
    failed: dict[str, int] = {}
    for path, i, r in rows:
        _need(r, ("model", "turn", "score"), path, i)
        if r["turn"] not in (1, 2):
            raise UserError(f"{path} row {i}: `turn` must be 1 or 2, got {r['turn']!r}")
        if model_list and str(r["model"]) not in model_list:
            continue
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
            "Arena-Hard judgment files, one per model (show_result.py's score and bootstrap interval, v0.1, or "
            "version=v2.0's bootstrap of each model's mean; with style_control=true and answers=DIR its "
            "style-controlled score, v0.1 or v2.0)",
            _arenahard,
            {
                "weight": WEIGHT,
                "rounds": ROUNDS,
                "seed": SEED,
                "style_control": False,
                "version": "v0.1",
                "answers": "",
                "control": "markdown,length",
                "baseline": "",
                "category": "hard_prompt",
            },
        ),
        "alpacaeval": ResultsFormat(
            "AlpacaEval annotations.json (raw and length-controlled win rate per generator_2)",
            _alpacaeval,
            {"lc_table": "", "lc_glm": "auto"},
        ),
        "ifeval": ResultsFormat(
            "IFEval eval_results_strict.jsonl / eval_results_loose.jsonl from evaluation_main.py (the responses and "
            "the reference's verdicts): our strict or loose accuracy, the file's, and their agreement",
            _ifeval,
            {"data": "", "mode": "auto"},
        ),
        "judgebench": ResultsFormat(
            "JudgeBench outputs JSONL from run_judge.py (accuracy per judge_name: single or double game)", _judgebench
        ),
        "mtbench": ResultsFormat(
            "MT-Bench judgments: single-answer (FastChat's means per turn) or pairwise (its win rates)",
            _mtbench,
            {"mode": "auto", "baseline": FASTCHAT_BASELINE, "model_list": ""},
        ),
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
