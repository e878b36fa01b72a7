"""`align serve`: any scorer, or a composed reward, behind HTTP for OpenRLHF, verl and TRL (align/serve); its flags
are the fields of `align.serve.settings.ServeSettings`."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from align.serve.settings import ServeSettings

EXAMPLE = (
    "align serve --model runs/quickstart/rm/model                       (a trained RM on 127.0.0.1:8000)\n"
    "  align serve --scorer '{type: grm, model: runs/judge_grm/model, k: 4}' --port 8001   (a generative judge)\n"
    "  align serve --reward-config configs/constrained_suite.yaml --state runs/serve_state.pt   (composed)\n"
    "  ALIGN_SERVE_API_KEY=$(cat key) align serve --model runs/rm/model --host 0.0.0.0   (beyond loopback: a key)\n"
    "endpoints: POST /openrlhf (OpenRLHF --reward.remote_url), POST /classify (vLLM pooling shape, verl),\n"
    "  POST /score (native, batched), GET /health, GET /info; docs/serving.md"
)


def cmd_serve(s: ServeSettings) -> int:
    from align.serve.run import run  # the models and the HTTP stack: imported when the verb runs

    return run(s)


def register(sub: argparse._SubParsersAction, add: Callable[..., argparse.ArgumentParser]) -> None:
    add(
        sub,
        "serve",
        cmd_serve,
        "serve any scorer or a composed reward over HTTP to OpenRLHF, verl and TRL: dynamic batching, a score "
        "cache, composition state, loopback by default and an API key anywhere else",
        EXAMPLE,
        settings=ServeSettings,
    )
