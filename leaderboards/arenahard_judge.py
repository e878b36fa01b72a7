"""Arena-Hard's pairwise judging as its reference code runs it, with any chat model as the judge. The judge's
settings are the benchmark's own files, given by the user (`--judge-prompts FILE`, and for v2.0 `--judge-settings
FILE`); nothing of them is built in. Two versions of the reference, told apart by the layout of the config file
(`VERSIONS`: v0.1's has `regex_pattern`, v2.0's `regex_patterns`):

v0.1: lmarena/arena-hard-auto @ 0489bf38, `gen_judgment.py` (`judgment`, `get_score`). The config is its
`config/judge_config.yaml`: system_prompt, prompt_template, regex_pattern, number_of_judgment_attempts, temperature,
max_tokens.

- the games: every question judged twice against the baseline's answer (the set's reference answers, `--reference`):
  game 1 with the baseline's answer as A and the model's as B, game 2 with the model's as A. The template is filled
  with `question_1..` (the question's turns), `answer_1..` (A's turns) and then B's turns numbered on
  (`answer_2` for a one-turn question), by `str.format`; each template of `prompt_template` (a list in the file; a
  plain text is read as a list of one) becomes one user message after the system prompt. As the reference does, the
  swap of game 2 is made once per template (with two templates the second is filled unswapped again).
- the judgment: greedy decoding (the reference asks at `temperature: 0`; another temperature is refused here), at
  most `max_tokens` tokens (`--judge-max-new-tokens` overrides). Up to `number_of_judgment_attempts` replies: the
  judgment is the replies joined, each after a newline (so it starts with one); while no verdict is found, the
  reply is appended to the conversation with the user message "continue your judgment and finish by outputting a
  final verdict label", and the judge is asked again.
- the verdict (`get_score`): every match of `regex_pattern` in the whole judgment (empty matches dropped); none: no
  verdict, ask again; one distinct value: that value (newlines stripped from its ends); several distinct values:
  no verdict, and no further attempt. A verdict that is not one of the five labels drops its game when scored
  (`arena_hard.game_battles`).
- the rows written (`policy_bench.native_arenahard`): question_id, model, judge and the two games, each
  {user_prompt (the first user message), judgment, score}, as model_judgment/<judge>/<model>.jsonl holds them.

v2.0: lmarena/arena-hard-auto @ 196f6b82, `gen_judgment.py` (`pairwise_judgment`, `judgment`, `get_score`). The
config is its `config/arena-hard-v2.0.yaml`: prompt_template, regex_patterns, temperature, max_tokens, reference
(its judge_model, bench_name and model_list name the API judge and the files, which the command line names here).
The system prompts are per question category, in its `utils/judge_utils.py` (`JUDGE_SETTINGS`: each category's
baseline model and system prompt; `--judge-settings`), read without running it (`read_judge_settings`).

- the games: the same two (the baseline's answer as A, then the model's). The system prompt is the one of the
  question's `category`; a category JUDGE_SETTINGS lacks is an error naming the file. The one user message is
  `prompt_template.format(QUESTION=, ANSWER_A=, ANSWER_B=)`. The baseline is the category's: an answer in
  `--reference` by another model (its row's `model`) is an error. The reference fills `REFERENCE` only with
  `reference:` answers, which its own code cannot load (it indexes the answer folder's path by model name); a
  config that sets them is refused.
- the judgment: greedy, at most `max_tokens`; one reply per game (the reference asks once: its retries are for API
  errors, and it never asks to continue).
- the verdict (`get_score`): the patterns of `regex_patterns` in turn, each over the reply in upper case (empty
  matches dropped); the first with a match gives its last match (newlines stripped from its ends); none: no verdict.
  When scored, a verdict is read with v2.0's ten labels (`arena_hard.V2_LABELS`).
- the rows written: uid, category, judge, model, baseline and the two games, each {score, judgment: {answer},
  prompt: the messages asked}.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from prefalign.errors import UserError, did_you_mean

from .arena_hard import V2_LABELS, VERDICTS
from .policy_data import BenchItem

CONTINUE = "continue your judgment and finish by outputting a final verdict label"
"""The user message the v0.1 reference sends when a reply had no verdict."""
V01_FIELDS = ("system_prompt", "prompt_template", "regex_pattern", "number_of_judgment_attempts")
V2_FIELDS = ("prompt_template", "regex_patterns", "temperature", "max_tokens")
"""The keys v2.0's gen_judgment.py reads from its config (`reference` too, which may be null or absent)."""
V2_TEMPLATE_FIELDS = ("QUESTION", "ANSWER_A", "ANSWER_B")
SETTINGS_NAME = "JUDGE_SETTINGS"
"""The name utils/judge_utils.py binds v2.0's per-category settings to."""

Message = dict[str, str]
"""A chat message as the judge's chat template takes it: {role, content}."""


@dataclass(frozen=True)
class CategorySettings:
    """One category's entry of v2.0's JUDGE_SETTINGS."""

    baseline: str
    """The model whose answers the category's questions are judged against."""
    system_prompt: str


@dataclass(frozen=True)
class ArenaJudgeConfig:
    """The judge settings that decide a judgment, read from the benchmark's files."""

    version: str
    """The reference version whose rules judge: a key of `VERSIONS`."""
    templates: tuple[str, ...]
    """The user messages' templates (v2.0: one)."""
    patterns: tuple[re.Pattern[str], ...]
    """The verdict's regular expressions, tried in order (v0.1: one)."""
    attempts: int
    """Replies asked per game at most (v2.0: one)."""
    max_tokens: int | None
    system_prompt: str = ""
    """v0.1: every game's system prompt."""
    categories: Mapping[str, CategorySettings] = field(default_factory=dict)
    """v2.0: JUDGE_SETTINGS, by question category."""
    settings_file: str = ""
    """v2.0: the file `categories` was read from, for messages."""

    @property
    def rules(self) -> JudgeRules:
        return VERSIONS[self.version]


@dataclass(frozen=True)
class Game:
    """One game as the judge was asked it and answered."""

    prompt: tuple[Message, ...]
    """The opening conversation: the system prompt, then the user message(s)."""
    replies: tuple[str, ...]
    """The judge's replies, one per attempt."""
    score: str | None
    """The verdict read from them; None where none was found."""


# --- reading the files ------------------------------------------------------------------------------------


def read_judge_config(path: str | Path, settings: str | Path | None = None) -> ArenaJudgeConfig:
    """Arena-Hard's judge config (v0.1's judge_config.yaml, or v2.0's arena-hard-v2.0.yaml with its
    utils/judge_utils.py as `settings`) -> its judge settings; a missing or mistyped key is an error naming the file
    and every such key at once."""
    p = Path(path)
    if not p.is_file():
        raise UserError(
            f"--judge-prompts {p}: no such file (Arena-Hard's config/judge_config.yaml, or v2.0's "
            "config/arena-hard-v2.0.yaml)"
        )
    try:
        raw = yaml.safe_load(p.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        raise UserError(f"--judge-prompts {p}: not YAML ({e})") from None
    if not isinstance(raw, dict):
        raise UserError(f"--judge-prompts {p}: not a mapping of settings (Arena-Hard's judge config)")
    found = [v for v, rules in VERSIONS.items() if rules.marker in raw]
    if not found:  # no marker: the version most of whose keys the file has (its missing keys are then named)
        overlap = {v: sum(k in raw for k in rules.fields) for v, rules in VERSIONS.items()}
        found = [v for v, n in overlap.items() if n and n == max(overlap.values())]
    if len(found) != 1:
        layouts = "; ".join(f"`{r.marker}` in {v}'s {r.layout}" for v, r in VERSIONS.items())
        raise UserError(f"--judge-prompts {p}: cannot tell which version's judge config it is ({layouts})")
    return VERSIONS[found[0]].read(p, raw, None if settings is None else Path(settings))


def _decoding_problems(raw: dict[str, Any], problems: list[str]) -> int | None:
    """The config's max_tokens; a temperature other than 0 and a max_tokens that is not a count are problems."""
    temperature = raw.get("temperature", 0)
    if temperature not in (0, 0.0):
        problems.append(f"temperature: {temperature!r}; only 0 (greedy, the benchmark's setting) is supported")
    max_tokens = raw.get("max_tokens")
    if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
        problems.append(f"max_tokens: must be a whole number >= 1, got {max_tokens!r}")
    return max_tokens if isinstance(max_tokens, int) else None


def _compile(pattern: str, key: str, problems: list[str]) -> re.Pattern[str] | None:
    try:
        return re.compile(pattern)
    except re.error as e:
        problems.append(f"{key}: {pattern!r} is not a regular expression ({e})")
        return None


def _read_v01(p: Path, raw: dict[str, Any], settings: Path | None) -> ArenaJudgeConfig:
    problems = [f"{k}: missing" for k in V01_FIELDS if k not in raw]
    templates = raw.get("prompt_template")
    templates = [templates] if isinstance(templates, str) else templates
    if "prompt_template" in raw and (
        not isinstance(templates, list) or not templates or not all(isinstance(t, str) for t in templates)
    ):
        problems.append("prompt_template: must be a text or a list of texts")
    for key in ("system_prompt", "regex_pattern"):
        if key in raw and not isinstance(raw[key], str):
            problems.append(f"{key}: must be a text")
    pattern = None
    if isinstance(raw.get("regex_pattern"), str):
        pattern = _compile(raw["regex_pattern"], "regex_pattern", problems)
    attempts = raw.get("number_of_judgment_attempts")
    if "number_of_judgment_attempts" in raw and (not isinstance(attempts, int) or attempts < 1):
        problems.append(f"number_of_judgment_attempts: must be a whole number >= 1, got {attempts!r}")
    max_tokens = _decoding_problems(raw, problems)
    if settings is not None:
        problems.append(
            f"--judge-settings {settings}: per-category settings are v2.0's (config/arena-hard-v2.0.yaml); this is "
            "v0.1's judge_config.yaml, whose one system_prompt judges every question: drop --judge-settings"
        )
    if problems:
        raise UserError(f"--judge-prompts {p}: " + "; ".join(problems))
    assert pattern is not None and isinstance(attempts, int) and templates is not None
    system_prompt = raw["system_prompt"]
    return ArenaJudgeConfig("v0.1", tuple(templates), (pattern,), attempts, max_tokens, system_prompt=system_prompt)


def _read_v2(p: Path, raw: dict[str, Any], settings: Path | None) -> ArenaJudgeConfig:
    problems = [f"{k}: missing" for k in V2_FIELDS if k not in raw]
    template = raw.get("prompt_template")
    if "prompt_template" in raw and not isinstance(template, str):
        problems.append("prompt_template: must be a text (v2.0 formats it as one user message)")
    elif isinstance(template, str):
        try:
            template.format(**dict.fromkeys(V2_TEMPLATE_FIELDS, ""))
        except (KeyError, IndexError, ValueError, AttributeError) as e:
            problems.append(
                f"prompt_template: cannot be filled ({type(e).__name__}: {e}); v2.0 fills "
                + ", ".join(f"{{{f}}}" for f in V2_TEMPLATE_FIELDS)
                + " (and {REFERENCE} only with reference answers, not supported)"
            )
    raw_patterns = raw.get("regex_patterns")
    patterns: list[re.Pattern[str] | None] = []
    if "regex_patterns" in raw:
        if not isinstance(raw_patterns, list) or not raw_patterns or not all(isinstance(x, str) for x in raw_patterns):
            problems.append("regex_patterns: must be a list of regular expressions (texts)")
        else:
            patterns = [_compile(x, "regex_patterns", problems) for x in raw_patterns]
    max_tokens = _decoding_problems(raw, problems)
    if raw.get("reference") is not None:
        problems.append(
            f"reference: {raw['reference']!r}; must be null: v2.0's gen_judgment.py cannot load reference answers "
            "(it indexes the answer folder's path by model name), so there is no rule for them to follow"
        )
    categories: dict[str, CategorySettings] = {}
    if settings is None:
        problems.append(
            f"v2.0's system prompts are per question category, in arena-hard-auto's utils/judge_utils.py "
            f"({SETTINGS_NAME}): add --judge-settings utils/judge_utils.py"
        )
    else:
        categories = read_judge_settings(settings)
    if problems:
        raise UserError(f"--judge-prompts {p}: " + "; ".join(problems))
    assert isinstance(template, str) and all(x is not None for x in patterns)
    compiled = tuple(x for x in patterns if x is not None)
    return ArenaJudgeConfig(
        "v2.0", (template,), compiled, 1, max_tokens, categories=categories, settings_file=str(settings)
    )


def _module_value(p: Path, name: str) -> Any:
    """The value a Python file binds `name` to at module level, read without running the file: literals, texts
    joined with `+`, and names the file binds to such values (a name bound twice: its last binding)."""
    try:
        tree = ast.parse(p.read_text(encoding="utf-8"), filename=str(p))
    except SyntaxError as e:
        raise UserError(f"--judge-settings {p}: not Python ({e.msg}, line {e.lineno})") from None
    bound: dict[str, ast.expr] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            bound[node.targets[0].id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            bound[node.target.id] = node.value

    def value(node: ast.expr, seen: frozenset[str]) -> Any:
        if isinstance(node, ast.Name) and node.id in bound and node.id not in seen:
            return value(bound[node.id], seen | {node.id})
        if isinstance(node, ast.Dict) and all(k is not None for k in node.keys):  # no ** unpacking
            pairs = zip(node.keys, node.values, strict=True)
            return {value(k, seen): value(v, seen) for k, v in pairs if k is not None}
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = value(node.left, seen), value(node.right, seen)
            if isinstance(left, str) and isinstance(right, str):
                return left + right
        try:
            return ast.literal_eval(node)
        except (ValueError, TypeError, SyntaxError):
            raise UserError(
                f"--judge-settings {p} line {node.lineno}: `{ast.unparse(node)[:80]}` is code, not a value: "
                f"{name} is read without running the file, so it may hold only texts, names of texts set in the "
                "file, and texts joined with +"
            ) from None

    if name not in bound:
        raise UserError(f"--judge-settings {p}: no `{name} = {{...}}` (arena-hard-auto's utils/judge_utils.py)")
    return value(bound[name], frozenset())


def read_judge_settings(path: str | Path) -> dict[str, CategorySettings]:
    """v2.0's utils/judge_utils.py -> its JUDGE_SETTINGS by category: each a `baseline` model and a `system_prompt`;
    every missing or mistyped entry is named at once."""
    p = Path(path)
    if not p.is_file():
        raise UserError(f"--judge-settings {p}: no such file (arena-hard-auto's utils/judge_utils.py)")
    raw = _module_value(p, SETTINGS_NAME)
    if not isinstance(raw, dict) or not raw:
        raise UserError(f"--judge-settings {p}: {SETTINGS_NAME} must map each category to its settings")
    problems, out = [], {}
    for category, entry in raw.items():
        if not isinstance(category, str) or not isinstance(entry, dict):
            problems.append(f"{category!r}: must be a category name mapped to {{baseline, system_prompt}}")
            continue
        wrong = [k for k in ("baseline", "system_prompt") if not isinstance(entry.get(k), str)]
        problems += [f"{category}.{k}: missing or not a text" for k in wrong]
        if not wrong:
            out[category] = CategorySettings(entry["baseline"], entry["system_prompt"])
    if problems:
        raise UserError(f"--judge-settings {p}: {SETTINGS_NAME}: " + "; ".join(problems))
    return out


# --- v0.1 -------------------------------------------------------------------------------------------------


def get_score(judgment: str, pattern: re.Pattern[str]) -> tuple[str | None, bool]:
    """(verdict, ask again): v0.1's `get_score` for a pairwise judgment."""
    matches = [m for m in pattern.findall(judgment) if m != ""]
    if not matches:
        return None, True
    if len(set(matches)) == 1:
        return matches[0].strip("\n"), False
    return None, False


def _v01_judgment(replies: Sequence[str]) -> str:
    """The judgment v0.1 writes and reads its verdict from: the replies, each after a newline."""
    return "".join("\n" + r for r in replies)


def _v01_verdict(replies: Sequence[str], patterns: Sequence[re.Pattern[str]]) -> tuple[str | None, bool]:
    return get_score(_v01_judgment(replies), patterns[0])


def game_conversations(
    config: ArenaJudgeConfig, item: BenchItem, answer: Sequence[str], baseline: Sequence[str]
) -> list[list[Message]]:
    """v0.1: the two games' opening conversations (system prompt, then one user message per template)."""
    games = []
    for game in range(2):
        conv = [{"role": "system", "content": config.system_prompt}]
        model, base = list(answer), list(baseline)
        for template in config.templates:
            fields = {f"question_{i + 1}": turn for i, turn in enumerate(item.turns)}
            if game % 2 == 1:  # the reference swaps here, once per template
                model, base = base, model
            fields |= {f"answer_{i + 1}": turn for i, turn in enumerate(base)}
            fields |= {f"answer_{i + 1 + len(base)}": turn for i, turn in enumerate(model)}
            try:
                conv.append({"role": "user", "content": template.format(**fields)})
            except (KeyError, IndexError) as e:
                raise UserError(
                    f"--judge-prompts: the prompt_template names {{{e.args[0]}}}, which Arena-Hard does not fill for "
                    f"question {item.id} ({len(item.turns)} turn(s): question_1.., answer_1.. for A then B)"
                ) from None
        games.append(conv)
    return games


def _v01_conversations(config: ArenaJudgeConfig, item: BenchItem, answer: str, baseline: str) -> list[list[Message]]:
    return game_conversations(config, item, [answer], [baseline])


def _v01_check(config: ArenaJudgeConfig, items: Sequence[BenchItem]) -> None:
    for item in items:
        game_conversations(config, item, [""], [_baseline_answer(item)])


def _v01_game_row(game: Game) -> dict[str, Any]:
    return {"user_prompt": game.prompt[1]["content"], "judgment": _v01_judgment(game.replies), "score": game.score}


def _v01_question_row(config: ArenaJudgeConfig, item: BenchItem) -> dict[str, Any]:
    return {"question_id": item.id}


# --- v2.0 -------------------------------------------------------------------------------------------------


def get_score_v2(judgment: str, patterns: Sequence[re.Pattern[str]]) -> str | None:
    """v2.0's `get_score`: the patterns in turn over the judgment in upper case; the first with a (non-empty) match
    gives its last match, newlines stripped from its ends; None when no pattern matches."""
    for pattern in patterns:
        matches = [m for m in pattern.findall(judgment.upper()) if m != ""]
        if matches:
            return matches[-1].strip("\n")
    return None


def _v2_verdict(replies: Sequence[str], patterns: Sequence[re.Pattern[str]]) -> tuple[str | None, bool]:
    return get_score_v2(replies[-1], patterns), False  # asked once: never again


def _v2_conversations(config: ArenaJudgeConfig, item: BenchItem, answer: str, baseline: str) -> list[list[Message]]:
    """v2.0 `pairwise_judgment`: game 1 the baseline's answer as A, game 2 the model's; the category's system prompt
    (`_v2_check` makes sure there is one), the one template filled by name."""
    system = config.categories[item.category].system_prompt
    return [
        [
            {"role": "system", "content": system},
            {"role": "user", "content": config.templates[0].format(QUESTION=item.turns[0], ANSWER_A=a, ANSWER_B=b)},
        ]
        for a, b in ((baseline, answer), (answer, baseline))
    ]


def _some(ids: Sequence[str]) -> str:
    shown = ", ".join(ids[:3])
    return shown + (f" and {len(ids) - 3} more" if len(ids) > 3 else "")


def _v2_check(config: ArenaJudgeConfig, items: Sequence[BenchItem]) -> None:
    """Every question's category has settings, and its baseline answer is by that category's baseline model (where
    the answer file names its model); every problem at once."""
    unknown: dict[str, list[str]] = {}
    other: dict[tuple[str, str], list[str]] = {}
    for item in items:
        _baseline_answer(item)
        settings = config.categories.get(item.category)
        if settings is None:
            unknown.setdefault(item.category, []).append(item.id)
        elif item.reference_model is not None and item.reference_model != settings.baseline:
            other.setdefault((item.category, item.reference_model), []).append(item.id)
    known = list(config.categories)
    problems = [
        f"category {category!r} (question {_some(ids)}) is not in {SETTINGS_NAME} of {config.settings_file} (it has "
        f"{', '.join(known)}){did_you_mean(category, known)}"
        for category, ids in unknown.items()
    ]
    problems += [
        f"the {category} questions ({_some(ids)}) are judged against {config.categories[category].baseline}'s "
        f"answers ({config.settings_file}), but --reference holds {model}'s: give --reference one file with each "
        "category's baseline answers, or --data the questions of one category"
        for (category, model), ids in other.items()
    ]
    if problems:
        raise UserError("arenahard v2.0 judge: " + "; ".join(problems))


def _v2_game_row(game: Game) -> dict[str, Any]:
    return {"score": game.score, "judgment": {"answer": game.replies[-1]}, "prompt": list(game.prompt)}


def _v2_question_row(config: ArenaJudgeConfig, item: BenchItem) -> dict[str, Any]:
    return {"uid": item.id, "category": item.category, "baseline": config.categories[item.category].baseline}


# --- the versions -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class JudgeRules:
    """One version of the reference's judging: how its config is recognised and read, how a game is asked and its
    verdict read, the rows it writes and the labels its verdicts are scored by."""

    reference: str
    marker: str
    """The config key that says a file is this version's."""
    fields: tuple[str, ...]
    """The config keys it needs."""
    layout: str
    """The config file, for messages."""
    read: Callable[[Path, dict[str, Any], Path | None], ArenaJudgeConfig]
    """(config file, its mapping, --judge-settings) -> the settings; every problem at once."""
    check: Callable[[ArenaJudgeConfig, Sequence[BenchItem]], None]
    """Every question can be asked, before anything is generated."""
    conversations: Callable[[ArenaJudgeConfig, BenchItem, str, str], list[list[Message]]]
    """(config, question, the model's answer, the baseline's) -> the two games' opening conversations."""
    verdict: Callable[[Sequence[str], Sequence[re.Pattern[str]]], tuple[str | None, bool]]
    """(the replies so far, the patterns) -> (verdict, ask again)."""
    game_row: Callable[[Game], dict[str, Any]]
    question_row: Callable[[ArenaJudgeConfig, BenchItem], dict[str, Any]]
    """The question's fields of its judgment row, before `games` (`policy_bench.native_arenahard` adds model and
    judge)."""
    labels: Mapping[str, tuple[float, bool]]


VERSIONS: dict[str, JudgeRules] = {
    "v0.1": JudgeRules(
        "lmarena/arena-hard-auto@0489bf38 gen_judgment.py (judgment, get_score)",
        "regex_pattern",
        V01_FIELDS,
        "config/judge_config.yaml",
        read=_read_v01,
        check=_v01_check,
        conversations=_v01_conversations,
        verdict=_v01_verdict,
        game_row=_v01_game_row,
        question_row=_v01_question_row,
        labels=VERDICTS,
    ),
    "v2.0": JudgeRules(
        "lmarena/arena-hard-auto@196f6b82 gen_judgment.py (pairwise_judgment, judgment, get_score), "
        "utils/judge_utils.py (JUDGE_SETTINGS)",
        "regex_patterns",
        V2_FIELDS,
        "config/arena-hard-v2.0.yaml",
        read=_read_v2,
        check=_v2_check,
        conversations=_v2_conversations,
        verdict=_v2_verdict,
        game_row=_v2_game_row,
        question_row=_v2_question_row,
        labels=V2_LABELS,
    ),
}
"""The reference's versions, by the name its config and leaderboard use."""


# --- judging ----------------------------------------------------------------------------------------------


def _baseline_answer(item: BenchItem) -> str:
    if item.reference is None:
        raise UserError(f"question {item.id}: no baseline answer to judge against (--reference FILE)")
    return item.reference


Generate = Callable[[list[list[Message]]], list[str]]
"""(conversations) -> the judge's reply to each, greedy."""


def judge_games(
    config: ArenaJudgeConfig, items: Sequence[BenchItem], answers: Sequence[str], generate: Generate
) -> list[tuple[Game, Game]]:
    """Each item's two games, by the rules of the config's version; every game still asking again is decoded in
    one batch per attempt."""
    rules = config.rules
    rules.check(config, items)
    convs: list[list[Message]] = []
    for item, answer in zip(items, answers, strict=True):
        convs += rules.conversations(config, item, answer, _baseline_answer(item))
    prompts = [tuple(c) for c in convs]
    replies: list[list[str]] = [[] for _ in convs]
    scores: list[str | None] = [None] * len(convs)
    pending = list(range(len(convs)))
    for attempt in range(config.attempts):
        said = generate([convs[k] for k in pending])
        again = []
        for k, reply in zip(pending, said, strict=True):
            replies[k].append(reply)
            scores[k], try_again = rules.verdict(replies[k], config.patterns)
            convs[k] = [*convs[k], {"role": "assistant", "content": reply}]
            if try_again and attempt + 1 < config.attempts:
                convs[k] = [*convs[k], {"role": "user", "content": CONTINUE}]
                again.append(k)
        pending = again
        if not pending:
            break
    games = [Game(prompts[k], tuple(replies[k]), scores[k]) for k in range(len(convs))]
    return [(games[2 * i], games[2 * i + 1]) for i in range(len(items))]


@dataclass
class ArenaHardJudge:
    """A chat model judging Arena-Hard games with the benchmark's own judge settings (`--judge-prompts`): `model`
    names it in the judgment rows; `generate` decodes its replies greedily."""

    model: str
    config: ArenaJudgeConfig
    generate: Generate
    max_new_tokens: int
    files: dict[str, str] | None = None
    kind: str = "arenahard"

    @property
    def name(self) -> str:
        return self.model

    @property
    def labels(self) -> Mapping[str, tuple[float, bool]]:
        """The verdict labels its version's show_result scores."""
        return self.config.rules.labels

    def check(self, items: Sequence[BenchItem]) -> None:
        """Every game can be asked (a baseline answer, the template's fields, v2.0's categories), before any answer
        is generated."""
        self.config.rules.check(self.config, items)

    def games(self, items: Sequence[BenchItem], answers: Sequence[str]) -> list[tuple[Game, Game]]:
        return judge_games(self.config, items, answers, self.generate)

    def row(self, item: BenchItem, games: tuple[Game, Game]) -> dict[str, Any]:
        """The question's judgment row as its version writes it, without model and judge."""
        rules = self.config.rules
        return rules.question_row(self.config, item) | {"games": [rules.game_row(g) for g in games]}

    def describe(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "mode": "arenahard",
            "version": self.config.version,
            "files": self.files or {},
            "attempts": self.config.attempts,
            "decoding": "greedy",
            "max_new_tokens": self.max_new_tokens,
            "reference_code": self.config.rules.reference,
        }


__all__ = [
    "CONTINUE",
    "VERSIONS",
    "ArenaHardJudge",
    "ArenaJudgeConfig",
    "CategorySettings",
    "Game",
    "JudgeRules",
    "game_conversations",
    "get_score",
    "get_score_v2",
    "judge_games",
    "read_judge_config",
    "read_judge_settings",
]
