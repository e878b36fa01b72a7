"""User-facing errors: the CLI prints these without a traceback and exits with status 2."""

from __future__ import annotations

import difflib


class UserError(Exception):
    """A problem the user can fix; the message says what is wrong, where, and how to fix it."""


class ConfigError(UserError):
    """One or more problems in a config; `problems` lists them all."""

    def __init__(self, problems: list[str], source: str = "config") -> None:
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"{source}: {len(problems)} problem(s):\n{lines}")


def did_you_mean(name: str, options: list[str] | tuple[str, ...]) -> str:
    """' (did you mean 'x'?)' for the closest option, or '' when nothing is close."""
    close = difflib.get_close_matches(str(name), [str(o) for o in options], n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""
