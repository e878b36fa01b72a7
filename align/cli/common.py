"""What every `align` verb shares: one grammar for a config and its overrides, and help that shows what is required.

A verb that runs a config takes it the same way everywhere:

    align VERB CONFIG [k=v ...] [--set k=v ...]          the config positional, dotted overrides after it
    align VERB --config CONFIG [k=v ...] [--set k=v ...]  the same, with the config named

Overrides are `dotted.key=value` (YAML values: `train.lr=5e-6`, `train.compile=false`, `eval.limit=null`); given
positionally or with `--set`, in order, the later winning.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from prefalign.errors import UserError


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps descriptions and examples as written, and shows a flag the verb requires without the brackets of an
    optional one in the usage line (flags are marked `show_required` where a `--config` file may supply them
    instead, so argparse itself does not enforce them)."""

    def _format_usage(self, usage: Any, actions: Any, groups: Any, prefix: Any) -> str:
        marked = [a for a in actions if getattr(a, "show_required", False) and not a.required]
        for a in marked:
            a.required = True
        try:
            return super()._format_usage(usage, actions, groups, prefix)
        finally:
            for a in marked:
                a.required = False


def add_config_args(p: argparse.ArgumentParser, what: str, required: bool = True) -> None:
    """The config and its overrides, as the module's docstring says (`config_and_overrides` reads them back)."""
    p.add_argument(
        "args",
        nargs="*",
        metavar="CONFIG k=v",
        help=f"{what}, then dotted overrides such as train.lr=5e-6 (or name the config with --config)",
    )
    p.add_argument("--config", default=None, metavar="CONFIG", help=f"{what} (instead of giving it first)")
    p.add_argument(
        "--set", dest="set_overrides", action="append", default=[], metavar="k=v", help="a dotted override (repeatable)"
    )
    p.set_defaults(config_required=required)


def config_and_overrides(args: argparse.Namespace) -> tuple[str | None, list[str]]:
    """(the config path, the overrides in order) from what `add_config_args` parsed; a UserError for a missing
    config or a second one."""
    positional = list(getattr(args, "args", []) or [])
    config = getattr(args, "config", None)
    if config is None and positional and "=" not in positional[0]:
        config = positional.pop(0)
    stray = [a for a in positional if "=" not in a]
    if stray:
        raise UserError(
            f"expected dotted overrides like train.lr=5e-6 after the config, got {', '.join(map(repr, stray))}"
            + (" (one config per run; `align validate` takes several)" if config else "")
        )
    if config is None and getattr(args, "config_required", False):
        raise UserError("give a config: `align VERB CONFIG [k=v ...]` (or --config CONFIG); recipes: `align init`")
    return config, positional + list(getattr(args, "set_overrides", []) or [])


def guard_earlier_run(output_dir: str, resume: bool, overwrite: bool, command: str) -> None:
    """A run never starts over silently beside an earlier run's checkpoints: without --resume or --overwrite it stops
    and says both; --overwrite deletes the checkpoints and the earlier run's metrics first; --resume is the
    recipe's to act on (it says what it resumes from)."""
    import shutil

    from prefalign.training.trainer import last_checkpoint  # lazy: torch, only when a run starts

    ckpts = Path(output_dir) / "checkpoints"
    found = last_checkpoint(str(ckpts))
    if found is None or resume:
        return
    if not overwrite:
        raise UserError(
            f"{output_dir} holds an earlier run's checkpoints (last: {Path(found).name}); continue it with "
            f"`{command} --resume`, or start over with `{command} --overwrite` (its checkpoints and metrics are "
            "deleted)"
        )
    shutil.rmtree(ckpts)
    for name in ("metrics.jsonl", "alerts.jsonl"):
        (Path(output_dir) / name).unlink(missing_ok=True)
    print(f"--overwrite: deleted the earlier run's checkpoints and metrics in {output_dir}", flush=True)
