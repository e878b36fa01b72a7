"""The toolkit from Python: run a recipe from a dict or a YAML file, train a reward model, load a scorer and score.

Everything the command line does goes through these (and the recipe modules they call), with the same typed configs:
a dict here is checked exactly as a YAML file is (unknown keys with did-you-mean, wrong types, impossible
combinations, every problem at once), and the same overrides apply.

Train a reward model on the built-in suite with a tiny test model, then score with it:

>>> import tempfile
>>> from align.api import load_scorer, run_recipe, score
>>> out = tempfile.mkdtemp()
>>> report = run_recipe(
...     {
...         "kind": "rm_train",
...         "model": "builtin:tiny-llama",
...         "output_dir": out,
...         "data": {"source": "suite", "limit": 16},
...         "eval": {"split": "none", "stats_pairs": 4},
...         "train": {"max_steps": 2, "batch_size": 4, "precision": "fp32", "compile": False},
...     },
...     quiet=True,
... )
>>> report["steps"], report["model_dir"] == f"{out}/model"
(2, True)
>>> rm = load_scorer(report["model_dir"], dtype="float32")  # doctest: +ELLIPSIS
scorer scalar: precision float32 ...
>>> rewards = score(rm, ["What is 2 + 2?", "What is 2 + 2?"], ["4", "I do not know."])
>>> len(rewards), all(isinstance(r, float) for r in rewards)
(2, True)

The same from a YAML file, with overrides (`train_reward_model` is `run_recipe` for RM configs):

>>> from align.api import train_reward_model
>>> path = f"{out}/rm.yaml"
>>> _ = open(path, "w").write("kind: rm_train\\nmodel: builtin:tiny-llama\\ndata: {source: suite, limit: 8}\\n")
>>> train_reward_model(path, [f"output_dir={out}/again", "eval.split=none", "eval.stats_pairs=4",
...     "train.max_steps=1", "train.batch_size=4", "train.precision=fp32", "train.compile=false"], quiet=True)["steps"]
1

A config problem is reported before anything loads:

>>> run_recipe({"kind": "rm_train", "train": {"lr": "fast", "batch_sise": 8}})  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
prefalign.errors.ConfigError: rm_train config: 2 problem(s):
  - train.lr: expected a number, got 'fast'
  - train.batch_sise: unknown key (did you mean 'batch_size'?); TrainSection has: method, lr, ...
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from align.cli.configs import KINDS, config_class
from prefalign.config import apply_overrides, build, read_yaml
from prefalign.errors import ConfigError, UserError, did_you_mean
from preference_data.records import Message
from reward_models.base import Scorer

RECIPES: dict[str, str] = {
    kind: module for kind, (module, _) in KINDS.items() if kind not in ("quickstart", "rm_strength")
}
"""Config kind -> the module whose `run(cfg)` runs it (the kinds of `align rm train` and `align train`; the module
that defines the kind's config)."""


def load_config(config: dict[str, Any] | str | Path, overrides: Sequence[str] = ()) -> Any:
    """The typed config of a recipe: `config` a dict or a YAML file with a `kind:`, dotted `overrides` applied."""
    data = dict(config) if isinstance(config, dict) else read_yaml(config)
    apply_overrides(data, list(overrides))
    kind = data.get("kind")
    where = str(config) if not isinstance(config, dict) else f"{kind} config"
    if kind not in RECIPES:
        raise ConfigError(
            [
                f"kind: {kind!r} is not a recipe kind{did_you_mean(str(kind), list(RECIPES))}; "
                f"use one of {list(RECIPES)}"
            ],
            where,
        )
    return build(config_class(kind), data, where)


def run_recipe(
    config: dict[str, Any] | str | Path, overrides: Sequence[str] = (), resume: bool = False, quiet: bool = False
) -> dict:
    """Run a recipe (any kind of `RECIPES`) and return its report (also written to output_dir/report.json).
    `quiet`: nothing printed to stdout (the run's progress lines) and no progress bars; warnings and errors still
    reach stderr, and the run directory holds its metrics and report."""
    cfg = load_config(config, overrides)
    run = importlib.import_module(RECIPES[cfg.kind]).run
    if not quiet:
        return run(cfg, resume=resume)
    with contextlib.redirect_stdout(io.StringIO()), no_progress_bars():
        return run(cfg, resume=resume)


@contextlib.contextmanager
def no_progress_bars() -> Iterator[None]:
    """Progress bars off while the block runs: tqdm's (every bar of this toolkit, transformers' Trainer and
    weight loading read `TQDM_DISABLE` when a bar starts), restored after."""
    before = os.environ.get("TQDM_DISABLE")
    os.environ["TQDM_DISABLE"] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("TQDM_DISABLE", None)
        else:
            os.environ["TQDM_DISABLE"] = before


def train_reward_model(config: dict[str, Any] | str | Path, overrides: Sequence[str] = (), quiet: bool = False) -> dict:
    """`run_recipe` for a reward-model config (kind rm_train when the config names none)."""
    if isinstance(config, dict):
        config = {"kind": "rm_train", **config}
    return run_recipe(config, overrides, quiet=quiet)


def load_scorer(model_or_spec: str | dict[str, Any], **options: Any) -> Scorer:
    """A scorer from a trained model directory (its kind told from what it is: a reward model is `scalar`, a policy
    adapter `implicit`), or from a spec: a kind name with `options`, or a mapping with `type` (`align ls scorers`)."""
    from reward_models.scorers import load_scorer as load
    from reward_models.scorers import scorer_spec

    if isinstance(model_or_spec, str):  # a kind, KIND:MODEL, a model directory, as every command takes it
        return load(scorer_spec(model_or_spec, options=options, flag="load_scorer"))
    return load(model_or_spec, **options)


def score(scorer: Scorer, prompts: Sequence[str | list[Message]], responses: Sequence[str | list[Message]]) -> list:
    """Pointwise scores of (prompt, response) pairs; a string is one user turn (prompt) or one assistant turn."""
    if scorer.kind != "pointwise":
        raise UserError(
            f"{scorer.name} is a {scorer.kind} scorer: call its compare(...) (pairwise) or score_with_reference(...)"
        )
    as_conv = lambda x, role: [Message(role, x)] if isinstance(x, str) else list(x)  # noqa: E731
    pointwise: Any = scorer  # a pointwise scorer has score(prompts, responses) (reward_models.base)
    return pointwise.score([as_conv(p, "user") for p in prompts], [as_conv(r, "assistant") for r in responses])


__all__ = ["RECIPES", "load_config", "load_scorer", "run_recipe", "score", "train_reward_model"]
