"""Run a benchmark with any scorer and write its record.

    record = run_benchmark("rewardbench", scorer)                                    # the hub dataset
    record = run_benchmark("rm-bench", scorer, BenchSettings(data="total_dataset.json"))  # a local copy
    record = run_benchmark("suite", scorer, pairs=build_pairs)                       # pairs built in memory

The scorer is called by its kind (reward_models/base.py): pointwise `score(prompts, responses)`, pairwise
`compare(prompts, a, b)` in both orders for every response pair the benchmark asks about, reference
`score_with_reference(...)` where the data has reference answers, listwise `rank(prompts, candidate_lists)` with
each example's responses in the order the scorer asks for (`order`), its scores mapped back.

Each distinct input is scored once: RM-Bench and RewardBench 2 repeat responses, and a pairwise pair asked
in both orders is two inputs. Inputs are keyed by a hash of their conversations, scored in batches sorted by
length (scorers receive lists), and mapped back to examples. Finite scores are cached on disk per (scorer
description, benchmark, data hash), so a rerun (another tie policy, a fixed aggregation, after a crash) only
scores what is missing. NaN scores are counted; a run with NaN scores or invalid rows writes no record
unless `allow_partial=True`, and then the record says `partial: true` with the counts. The record's scores carry
95% bootstrap intervals of the headline, the sections and every subset (`intervals.py`), seeded, so a rerun on the
same examples writes the same record.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from tqdm.auto import tqdm

from prefalign.config import build, to_dict
from prefalign.errors import UserError
from prefalign.files import write_json
from prefalign.models.hub import cache_dir
from preference_data.io import is_hub_id
from preference_data.records import Conversation, PreferencePair
from reward_models.base import Scorer

from .benchmarks import BENCHMARKS, Benchmark, Judgement, RunInfo
from .compare_records import item_value
from .intervals import DEFAULT_REPS, bootstrap_intervals
from .loaders import Example, Parsed, Parser, examples_from_pairs, parse_pairs, read
from .native import Scored, native_problem, write_native
from .records import Record, git_commit, now, package_versions
from .rules import TIE_CREDIT, TiePolicy

# Default tie policy per scorer kind (reference §9.1): a scalar score tie is wrong (strict `>`, RewardBench
# classifier/DPO, RM-Bench, TRL); a pairwise judge's "no preference" earns half (RewardBench generative).
# A listwise scorer gives each response a score, as a pointwise one does.
DEFAULT_TIE_POLICY: dict[str, TiePolicy] = {
    "pointwise": "wrong",
    "reference": "wrong",
    "pairwise": "half",
    "listwise": "wrong",
}
METHOD = {"pointwise": "score", "pairwise": "compare", "reference": "score_with_reference", "listwise": "rank"}
MAX_LISTED = 20  # problem lines shown in an error or kept in a record


def default_cache_dir() -> Path:
    """`<prefalign cache>/bench-scores` (PREFALIGN_CACHE, default ~/.cache/prefalign)."""
    return cache_dir() / "bench-scores"


@dataclass
class BenchSettings:
    """How `run_benchmark` runs a benchmark (which benchmark, and the scorer, are its arguments)."""

    data: str | Path | None = None
    """A local file in the official format (JSON, JSONL, parquet) or a hub id; default: the benchmark's hub
    dataset."""
    split: str | None = None
    """The hub split (default: the benchmark's); files have none."""
    limit: int | None = None
    """Score only the first `limit` valid examples (recorded in the record's settings)."""
    allow_partial: bool = False
    """Skip invalid rows and examples with NaN scores and write a record marked partial; without it either
    raises `UserError` and writes no record."""
    tie_policy: TiePolicy | None = None
    """"wrong" or "half" for a chosen/rejected tie; default by scorer kind (`DEFAULT_TIE_POLICY`). RewardBench 2
    and JudgeBench fix their own tie handling and ignore it."""
    batch_size: int = 32
    """Inputs per scorer call."""
    bootstrap: int = DEFAULT_REPS
    """Resamples of the record's 95% intervals of the headline, sections and subsets (`intervals.py`); 0: none."""
    bootstrap_seed: int = 0
    """Seed of those resamples: a rerun on the same examples writes the same intervals."""
    use_cache: bool = True
    """Reuse (and store) per-input scores cached under `cache_dir`."""
    cache_dir: str | Path | None = None
    """Where per-input scores are cached (default `default_cache_dir()`)."""
    save: bool = True
    """Write the record to `records_dir`."""
    records_dir: str | Path | None = None
    """Where the record is written (default `leaderboards/records/`)."""
    model_name: str | None = None
    """The leaderboard row; default `scorer.describe()["model"]`, else `scorer.name`."""
    progress: bool = True
    """Show a progress bar."""
    native_dir: str | Path | None = None
    """Also write the benchmark's own per-item result files under this directory (`native.NATIVE_FORMATS`:
    RewardBench's eval-set/ and eval-set-scores/ JSON), which its reference code and leaderboard read."""
    options: dict[str, Any] | None = None
    """The benchmark's own settings, for a benchmark that has them (`Benchmark.options`; the agreement benchmark's
    preset or columns, tie_threshold, heldout_fraction, bootstrap, seed), checked like a config."""

    def check(self) -> list[str]:
        problems = []
        if self.tie_policy is not None and self.tie_policy not in TIE_CREDIT:
            problems.append(f"tie_policy '{self.tie_policy}' is unknown; use one of {', '.join(TIE_CREDIT)}")
        if self.limit is not None and self.limit < 1:
            problems.append(f"limit must be a positive number of examples, got {self.limit}")
        if self.batch_size < 1:
            problems.append(f"batch_size must be at least 1, got {self.batch_size}")
        if self.bootstrap < 0:
            problems.append(f"bootstrap must be a number of resamples (0: no intervals), got {self.bootstrap}")
        return problems


def run_benchmark(
    bench_name: str,
    scorer: Scorer,
    settings: BenchSettings | None = None,
    *,
    pairs: list[PreferencePair] | Callable[[], list[PreferencePair]] | None = None,
) -> Record:
    """Score `scorer` on a benchmark and return (and, unless `settings.save` is off, save) its record.

    bench_name: a `BENCHMARKS` entry (rewardbench, rewardbench2, rm-bench, judgebench, pairs, suite).
    settings: the data, selection, tie policy, batching, cache and record settings (`BenchSettings`).
    pairs: for `pairs` / `suite`, preference pairs (or a callable returning them) instead of a file.
    """
    s = settings or BenchSettings()
    bench = BENCHMARKS[bench_name]
    kind = _check_scorer(bench, scorer)
    problems = s.check()
    if s.native_dir is not None:
        problems += [p for p in [native_problem(bench.name, kind)] if p]
    if problems:
        raise UserError("; ".join(problems))
    tie = s.tie_policy or DEFAULT_TIE_POLICY[kind]
    opts = _options(bench, s.options)

    parsed, source, split = _load(bench, s.data, s.split, pairs, opts)
    examples, problems = parsed.examples, list(parsed.problems)
    if kind == "reference":
        missing = [ex for ex in examples if ex.reference is None]
        problems += [
            f"{ex.row}: no reference answer (attributes.reference); a reference scorer needs one, so add "
            "it to the data or use a pointwise scorer"
            for ex in missing
        ]
        examples = [ex for ex in examples if ex.reference is not None]
    if problems and not s.allow_partial:
        raise UserError(
            _problem_message(
                f"{source}: {len(problems)} problem(s) in the data; nothing was scored",
                problems,
                "correct those rows, or set allow_partial=True to skip them (the record is then marked partial)",
            )
        )
    data_hash = _hash([_example_key(ex) for ex in examples])
    invalid_rows = parsed.rows_read - len(examples)
    if s.limit is not None:
        examples = examples[: s.limit]
    if not examples:
        raise UserError(f"{source}: no valid examples to score")

    # Every input each example needs, keyed by content; the scorer sees each distinct key once.
    symmetric = kind == "pairwise" and bool(getattr(scorer, "symmetric", False))
    known_variants: tuple[str, ...] = tuple(getattr(scorer, "variants", ()))
    order = getattr(scorer, "order", None) if kind == "listwise" else None
    variant_of: dict[str, str] = {}  # key -> the variant the scorer judges it with (`Benchmark.variant`)
    needs: list[dict[Slot, tuple[str, tuple[Conversation, ...]]]] = []
    unique: dict[str, tuple[Conversation, ...]] = {}
    for ex in examples:
        v = bench.variant(ex)
        variant = v if v in known_variants else None
        ex_needs = _inputs(bench, kind, ex, symmetric, variant, order)
        needs.append(ex_needs)
        for slot_key, item in ex_needs.values():
            if not slot_key.startswith(FLIP):
                key = slot_key.partition(AT)[0]  # a listwise slot's key is its list's key @ the shown position
                unique.setdefault(key, item)
                if variant is not None:
                    variant_of[key] = variant

    cache_path = None
    if s.use_cache:
        ident = {"kind": kind, "name": getattr(scorer, "name", ""), "settings": _describe(scorer)}
        cache_path = (Path(s.cache_dir) if s.cache_dir is not None else default_cache_dir()) / (
            f"{bench.name}-{_hash(ident)[:16]}-{data_hash[:16]}.json"
        )
    cache = _read_cache(cache_path)
    stored = {k: _stored_keys(kind, k, item) for k, item in unique.items()}
    values = {s: cache[s] for k in unique for s in stored[k] if s in cache}
    todo = [k for k in unique if any(s not in values for s in stored[k])]
    try:
        _score(
            scorer,
            kind,
            todo,
            unique,
            values,
            s.batch_size,
            s.progress,
            f"{bench.name}: {type(scorer).__name__}",
            variant_of if known_variants else None,
        )
    finally:
        if cache_path is not None and todo:
            cache.update({k: v for k, v in values.items() if math.isfinite(v)})
            _write_cache(cache_path, cache)

    results, failed, scored = [], [], []
    for ex, ex_needs in zip(examples, needs, strict=True):
        got = {slot: _value(values, key) for slot, (key, _) in ex_needs.items()}
        if any(math.isnan(v) for v in got.values()) and not bench.counts_failures:
            failed.append(ex)
            continue
        judgement = _judgement(kind, got)
        results.append((ex, bench.rule(ex, judgement, tie)))
        scored.append(Scored(ex, judgement))
    nan_items = sum(1 for k in unique if any(math.isnan(values[s]) for s in stored[k]))
    if failed:
        problems += [f"{ex.row}: NaN score for example {ex.id}" for ex in failed]
        if not s.allow_partial:
            raise UserError(
                _problem_message(
                    f"{len(failed)} of {len(examples)} examples got NaN scores ({nan_items} distinct inputs); "
                    "no record was written",
                    [f"{ex.row}: example {ex.id}" for ex in failed],
                    "set allow_partial=True to write a partial record without them"
                    + ("; finite scores are cached, so a rerun only scores the failed inputs" if cache_path else ""),
                )
            )
    if not results:
        raise UserError(f"{source}: every example failed to score; no record was written")

    run = RunInfo(cast("Any", kind), symmetric, tie, source, opts)
    aggregated = bench.aggregate(results, run)
    scores = aggregated.to_dict()
    scores["headline_name"] = bench.headline
    if bench.resampling is not None and s.bootstrap > 0:
        scores["intervals"] = bootstrap_intervals(
            results,
            lambda sample: bench.aggregate(sample, run),
            aggregated,
            bench.resampling,
            s.bootstrap,
            s.bootstrap_seed,
        )
    more: dict[str, Any] = {}
    if opts is not None:
        more["options"] = to_dict(opts)
    if aggregated.section is not None:
        more["section"] = aggregated.section
    model = s.model_name or _model_name(scorer)
    if s.native_dir is not None:  # the benchmark's own result files, beside the record
        written = write_native(bench.name, scored, aggregated, model, s.native_dir, kind)
        more["native_files"] = [str(p) for p in written]
    record = Record(
        benchmark=bench.name,
        version=bench.version,
        model=model,
        scores=scores,
        counts={
            "examples": len(results),
            "rows_read": parsed.rows_read,
            "invalid_rows": invalid_rows,
            "failed_examples": len(failed),
            "items": len(needs) if kind == "listwise" else sum(len(n) for n in needs),  # listwise: a list each
            "unique_items": len(unique),
            "scored_now": len(todo),
            "nan_items": nan_items,
        },
        scorer={"kind": kind, "name": getattr(scorer, "name", ""), "settings": _describe(scorer), **_cost(scorer)},
        settings={
            "data": source,
            "split": split,
            "data_hash": data_hash,
            "limit": s.limit,
            "tie_policy": tie if bench.uses_tie_policy else None,
            "batch_size": s.batch_size,
            **more,
        },
        versions=package_versions(),
        git=git_commit(),
        date=now(),
        partial=bool(problems),
        problems=problems[:MAX_LISTED],
        items=_item_results(results),
    )
    if s.save:
        record.save(s.records_dir)
    return record


# ---------------------------------------------------------------------------------------------------------


def _item_results(results: list[tuple[Example, dict[str, Any]]]) -> dict[str, list[Any]]:
    """Each example's [subset, result] by its id; an id the file repeats (two pairs of one prompt) is numbered in
    file order (`id#2`, `id#3`), so two records of the same file pair the same examples."""
    out: dict[str, list[Any]] = {}
    seen: dict[str, int] = {}
    for ex, r in results:
        v = item_value(r)
        if v is None:
            continue
        seen[ex.id] = seen.get(ex.id, 0) + 1
        out[ex.id if seen[ex.id] == 1 else f"{ex.id}#{seen[ex.id]}"] = [ex.group, v]
    return out


def _check_scorer(bench: Benchmark, scorer: Scorer) -> str:
    kind = getattr(scorer, "kind", None)
    if kind not in METHOD:
        raise UserError(
            f"{type(scorer).__name__} has no valid `kind` ({kind!r}); a scorer states one of "
            f"{', '.join(METHOD)} (see reward_models/base.py)"
        )
    if kind not in bench.scorer_kinds:
        raise UserError(
            f"benchmark '{bench.name}' cannot use a {kind} scorer; it accepts "
            f"{', '.join(bench.scorer_kinds)} scorers (a reference scorer needs reference answers, "
            "which only the pairs/suite data carry)"
        )
    if not callable(getattr(scorer, METHOD[kind], None)):
        raise UserError(f"{type(scorer).__name__} says kind='{kind}' but has no `{METHOD[kind]}` method")
    return kind


def _options(bench: Benchmark, given: dict[str, Any] | None) -> Any:
    """The benchmark's own settings built from `given` (unknown keys and bad values: one ConfigError), or None."""
    if bench.options is None:
        if given:
            raise UserError(
                f"benchmark '{bench.name}' takes no options ({', '.join(given)}); only the agreement benchmark "
                "reads a column map and a tie rule"
            )
        return None
    return build(bench.options, dict(given or {}), f"benchmark '{bench.name}' options")


def _load(
    bench: Benchmark,
    data_path: str | Path | None,
    split: str | None,
    pairs: list[PreferencePair] | Callable[[], list[PreferencePair]] | None,
    options: Any = None,
) -> tuple[Parsed, str, str | None]:
    """Examples, a label of where they came from, and the hub split used (None for files and pairs)."""
    if pairs is not None:
        if bench.loader is not parse_pairs:
            raise UserError(
                f"benchmark '{bench.name}' reads its official data; `pairs` only works with the "
                "pairs and suite benchmarks"
            )
        if data_path is not None:
            raise UserError("give either settings.data or pairs, not both")
        items = pairs() if callable(pairs) else pairs
        return examples_from_pairs(list(items), "pairs"), "pairs (in memory)", None
    source = str(data_path) if data_path is not None else bench.hub
    if source is None:
        what = (
            "a labelled comparison file (--data FILE with --preset NAME or --columns FILE)"
            if bench.options is not None
            else "a JSONL of PreferencePair.to_dict() rows, or TRL/HH-RLHF pairs) or pairs=<list or callable"
        )
        raise UserError(f"benchmark '{bench.name}' has no default data: set settings.data ({what})")

    split = (split or bench.split) if is_hub_id(source) else None
    parser: Parser = bench.loader
    if options is not None:  # the loader takes the benchmark's settings (its column map) as `options=`
        parser = cast(Parser, functools.partial(cast(Any, bench.loader), options=options))
    return read(parser, source, split), source, split


def _problem_message(head: str, lines: list[str], fix: str) -> str:
    shown = "\n".join(f"  - {p}" for p in lines[:MAX_LISTED])
    more = f"\n  ... and {len(lines) - MAX_LISTED} more" if len(lines) > MAX_LISTED else ""
    return f"{head}:\n{shown}{more}\nHow to fix: {fix}."


def _conv(conv: Conversation | None) -> list[list[str]] | None:
    return None if conv is None else [[m.role, m.content] for m in conv]


def _hash(obj: Any) -> str:
    return hashlib.sha1(json.dumps(obj, sort_keys=True, ensure_ascii=False, default=str).encode("utf-8")).hexdigest()


def _example_key(ex: Example) -> Any:
    return [ex.id, ex.group, _conv(ex.prompt), [_conv(r) for r in ex.responses], ex.meta, _conv(ex.reference)]


Slot = int | tuple[int, int]


FLIP = "1-"  # a key prefix: the slot's value is 1 minus the value of the key after it
AT = "@"  # listwise: "<list key>@<j>" is the score of the list's candidate shown at position j


def _stored_keys(kind: str, key: str, item: tuple[Conversation, ...]) -> list[str]:
    """The value keys one scored input fills: itself, or a listwise list's one per shown candidate."""
    return [f"{key}{AT}{j}" for j in range(len(item) - 1)] if kind == "listwise" else [key]


def _value(values: dict[str, float], key: str) -> float:
    return 1.0 - values[key[len(FLIP) :]] if key.startswith(FLIP) else values[key]


def _inputs(
    bench: Benchmark,
    kind: str,
    ex: Example,
    symmetric: bool = False,
    variant: str | None = None,
    order: Callable[[str, int, str | None], list[int]] | None = None,
) -> dict[Slot, tuple[str, tuple[Conversation, ...]]]:
    """What the scorer must say about one example: slot -> (content key, input tuple).

    pointwise: slot i -> (prompt, response i); reference: (prompt, response i, reference);
    pairwise: slot (i, j) -> (prompt, response i as A, response j as B), for both orders of each comparison;
    for a scorer that judges both orders itself (`symmetric = True`: pair_pm, think with both_orders) only the
    first order is scored and the second is its complement;
    listwise: one input, (prompt, *the responses in the order the scorer shows them: `order(id, n, variant)`, as
    they are without one), keyed by that order, so a shuffle with another seed is another input; slot i ->
    "<its key>@<j>", j where response i is shown.
    A `variant` the scorer is given (`Benchmark.variant`) is part of each key; without one the keys are what they
    always were, so earlier caches stay valid.
    """
    out: dict[Slot, tuple[str, tuple[Conversation, ...]]] = {}
    item: tuple[Conversation, ...]
    tail = [] if variant is None else [{"variant": variant}]
    if kind == "listwise":
        n = len(ex.responses)
        shown = list(order(ex.id, n, variant)) if order is not None else list(range(n))
        if sorted(shown) != list(range(n)):
            raise UserError(f"the scorer's order for example {ex.id} is {shown}, not an order of its {n} responses")
        item = (ex.prompt, *(ex.responses[i] for i in shown))
        key = _hash(["listwise", *map(_conv, item), *tail])
        return {i: (f"{key}{AT}{j}", item) for j, i in enumerate(shown)}
    if kind == "pairwise":
        for i, j in bench.comparisons(ex):
            for a, b in ((i, j), (j, i)):
                item = (ex.prompt, ex.responses[a], ex.responses[b])
                out[(a, b)] = (_hash(["pairwise", *map(_conv, item), *tail]), item)
            if symmetric:  # the scorer already judges both orders: (j, i) is read as 1 - P(i over j)
                out[(j, i)] = (FLIP + out[(i, j)][0], out[(i, j)][1])
    else:
        for i, resp in enumerate(ex.responses):
            if kind == "pointwise":
                item = (ex.prompt, resp)
            else:
                assert ex.reference is not None  # examples without one are left out for reference scorers
                item = (ex.prompt, resp, ex.reference)
            out[i] = (_hash([kind, *map(_conv, item), *tail]), item)
    return out


def _judgement(kind: str, got: dict[Slot, float]) -> Judgement:
    if kind == "pairwise":
        return Judgement(prefs=cast("dict[tuple[int, int], float]", got))  # pairwise slots are (i, j)
    return Judgement(scores=[got[i] for i in range(len(got))])


def _length(item: tuple[Conversation, ...]) -> int:
    return sum(len(m.content) for conv in item for m in conv)


def _score(
    scorer: Scorer,
    kind: str,
    todo: list[str],
    unique: dict[str, tuple[Conversation, ...]],
    values: dict[str, float],
    batch_size: int,
    progress: bool,
    desc: str,
    variant_of: dict[str, str] | None = None,
) -> None:
    """Score the `todo` keys in batches, longest first, filling `values` (None or non-numbers -> NaN). A scorer
    that takes variants (`variant_of` not None) also gets `variants=`, each key's variant or None."""
    if not todo:
        return

    method = getattr(scorer, METHOD[kind])
    order = sorted(todo, key=lambda k: _length(unique[k]), reverse=True)  # similar lengths share a batch
    unit = {"pairwise": "pair", "listwise": "list"}.get(kind, "resp")
    with tqdm(total=len(order), desc=desc, unit=unit, disable=not progress, dynamic_ncols=True) as bar:
        for start in range(0, len(order), batch_size):
            keys = order[start : start + batch_size]
            columns: list[list[Any]]
            if kind == "listwise":  # prompts, candidate lists (of any length)
                columns = [[unique[k][0] for k in keys], [list(unique[k][1:]) for k in keys]]
            else:  # prompts, responses[, refs or bs]
                columns = [list(c) for c in zip(*(unique[k] for k in keys), strict=True)]
            extra = {} if variant_of is None else {"variants": [variant_of.get(k) for k in keys]}
            out = list(method(*columns, **extra))
            if len(out) != len(keys):
                raise UserError(
                    f"{type(scorer).__name__}.{METHOD[kind]} returned {len(out)} scores for a batch "
                    f"of {len(keys)}; a scorer must return one score per input"
                )
            for k, v in zip(keys, out, strict=True):
                if kind == "listwise":  # one score per shown candidate; None or a non-list: the list failed
                    slots = _stored_keys(kind, k, unique[k])
                    got = list(v) if isinstance(v, list | tuple) else [math.nan] * len(slots)
                    if len(got) != len(slots):
                        raise UserError(
                            f"{type(scorer).__name__}.rank returned {len(got)} scores for a list of {len(slots)} "
                            "candidates; a listwise scorer returns one score per candidate"
                        )
                    values.update({s: _as_float(x) for s, x in zip(slots, got, strict=True)})
                else:
                    values[k] = _as_float(v)
            bar.update(len(keys))


def _as_float(v: Any) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def _describe(scorer: Scorer) -> dict[str, Any]:
    describe = getattr(scorer, "describe", None)
    d = describe() if callable(describe) else {}
    return json.loads(json.dumps(d if isinstance(d, dict) else {"describe": d}, default=str))


def _cost(scorer: Scorer) -> dict[str, Any]:
    """What a generative scorer spent on the items it scored in this run (generated tokens and seconds per item)
    and how often its samples abstained, when it keeps count."""
    out: dict[str, Any] = {}
    cost = getattr(scorer, "cost_per_item", None)
    if callable(cost):
        out["cost"] = cost()
    abstentions = getattr(scorer, "abstentions", None)
    if abstentions is not None:
        out["abstentions"] = dict(abstentions)
    return out


def _model_name(scorer: Scorer) -> str:
    d = _describe(scorer)
    return str(d.get("model") or getattr(scorer, "name", "") or type(scorer).__name__)


def _read_cache(path: Path | None) -> dict[str, float]:
    if path is None or not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return {str(k): float(v) for k, v in data.get("scores", {}).items()}
    except (OSError, ValueError, AttributeError, TypeError):
        return {}  # a damaged cache is only a lost speed-up; it is rewritten after scoring


def _write_cache(path: Path, cache: dict[str, float]) -> None:
    write_json(path, {"scores": cache})
