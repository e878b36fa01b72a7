"""Arena-Hard's pairwise judging as its reference code runs it (v0.1), with any chat model as the judge.

Reference: lmarena/arena-hard-auto @ 0489bf38, `gen_judgment.py` (`judgment`, `get_score`). The judge's settings are
the benchmark's own file (`config/judge_config.yaml`: system_prompt, prompt_template, regex_pattern,
number_of_judgment_attempts, temperature, max_tokens), given by the user as `--judge-prompts FILE`; nothing of it is
built in.

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
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from prefalign.errors import UserError

from .policy_data import BenchItem

CONTINUE = "continue your judgment and finish by outputting a final verdict label"
"""The user message the reference sends when a reply had no verdict."""
FIELDS = ("system_prompt", "prompt_template", "regex_pattern", "number_of_judgment_attempts")
REFERENCE_CODE = "lmarena/arena-hard-auto@0489bf38 gen_judgment.py (judgment, get_score)"


@dataclass(frozen=True)
class ArenaJudgeConfig:
    """The judge settings of Arena-Hard's judge_config.yaml that decide a judgment."""

    system_prompt: str
    templates: tuple[str, ...]
    pattern: re.Pattern[str]
    attempts: int
    max_tokens: int | None


def read_judge_config(path: str | Path) -> ArenaJudgeConfig:
    """Arena-Hard's judge_config.yaml -> its judge settings; a missing or mistyped key is an error naming the file
    and every such key at once."""
    p = Path(path)
    if not p.is_file():
        raise UserError(f"--judge-prompts {p}: no such file (Arena-Hard's config/judge_config.yaml)")
    try:
        raw = yaml.safe_load(p.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        raise UserError(f"--judge-prompts {p}: not YAML ({e})") from None
    if not isinstance(raw, dict):
        raise UserError(f"--judge-prompts {p}: not a mapping of settings (Arena-Hard's judge_config.yaml)")
    problems = [f"{k}: missing" for k in FIELDS if k not in raw]
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
        try:
            pattern = re.compile(raw["regex_pattern"])
        except re.error as e:
            problems.append(f"regex_pattern: not a regular expression ({e})")
    attempts = raw.get("number_of_judgment_attempts")
    if "number_of_judgment_attempts" in raw and (not isinstance(attempts, int) or attempts < 1):
        problems.append(f"number_of_judgment_attempts: must be a whole number >= 1, got {attempts!r}")
    temperature = raw.get("temperature", 0)
    if temperature not in (0, 0.0):
        problems.append(f"temperature: {temperature!r}; only 0 (greedy, the benchmark's setting) is supported")
    max_tokens = raw.get("max_tokens")
    if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
        problems.append(f"max_tokens: must be a whole number >= 1, got {max_tokens!r}")
    if problems:
        raise UserError(f"--judge-prompts {p}: " + "; ".join(problems))
    assert pattern is not None and isinstance(attempts, int) and templates is not None
    return ArenaJudgeConfig(raw["system_prompt"], tuple(templates), pattern, attempts, max_tokens)


def get_score(judgment: str, pattern: re.Pattern[str]) -> tuple[str | None, bool]:
    """(verdict, ask again): the reference's `get_score` for a pairwise judgment."""
    matches = [m for m in pattern.findall(judgment) if m != ""]
    if not matches:
        return None, True
    if len(set(matches)) == 1:
        return matches[0].strip("\n"), False
    return None, False


def game_conversations(
    config: ArenaJudgeConfig, item: BenchItem, answer: Sequence[str], baseline: Sequence[str]
) -> list[list[dict[str, str]]]:
    """The two games' opening conversations (system prompt, then one user message per template)."""
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


Generate = Callable[[list[list[dict[str, str]]]], list[str]]
"""(conversations) -> the judge's reply to each, greedy."""


def judge_games(
    config: ArenaJudgeConfig, items: Sequence[BenchItem], answers: Sequence[str], generate: Generate
) -> list[list[dict[str, Any]]]:
    """Each item's two games as the reference writes them: {user_prompt, judgment, score}; every game still asking
    again is decoded in one batch per attempt."""
    convs = []
    for item, answer in zip(items, answers, strict=True):
        if item.reference is None:
            raise UserError(f"question {item.id}: no baseline answer to judge against (--reference FILE)")
        convs += game_conversations(config, item, [answer], [item.reference])
    judgments = [""] * len(convs)
    scores: list[str | None] = [None] * len(convs)
    pending = list(range(len(convs)))
    for attempt in range(config.attempts):
        replies = generate([convs[k] for k in pending])
        again = []
        for k, reply in zip(pending, replies, strict=True):
            judgments[k] += "\n" + reply
            scores[k], try_again = get_score(judgments[k], config.pattern)
            convs[k] = [*convs[k], {"role": "assistant", "content": reply}]
            if try_again and attempt + 1 < config.attempts:
                convs[k] = [*convs[k], {"role": "user", "content": CONTINUE}]
                again.append(k)
        pending = again
        if not pending:
            break
    games = [
        {"user_prompt": convs[k][1]["content"], "judgment": judgments[k], "score": scores[k]} for k in range(len(convs))
    ]
    return [games[2 * i : 2 * i + 2] for i in range(len(items))]


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

    def check(self, items: Sequence[BenchItem]) -> None:
        """Every game can be asked (a baseline answer, the template's fields), before any answer is generated."""
        for item in items:
            if item.reference is None:
                raise UserError(f"question {item.id}: no baseline answer to judge against (--reference FILE)")
            game_conversations(self.config, item, [""], [item.reference])

    def games(self, items: Sequence[BenchItem], answers: Sequence[str]) -> list[list[dict[str, Any]]]:
        return judge_games(self.config, items, answers, self.generate)

    def describe(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "mode": "arenahard",
            "files": self.files or {},
            "attempts": self.config.attempts,
            "decoding": "greedy",
            "max_new_tokens": self.max_new_tokens,
            "reference_code": REFERENCE_CODE,
        }


__all__ = [
    "CONTINUE",
    "ArenaHardJudge",
    "ArenaJudgeConfig",
    "game_conversations",
    "get_score",
    "judge_games",
    "read_judge_config",
]
