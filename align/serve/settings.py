"""The settings of `align serve`; its flags are these fields (`prefalign.flags`). Torch-free and server-free, so
building the command line loads neither a model library nor the HTTP stack."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any, Literal

from prefalign.config import option

API_KEY_ENV = "ALIGN_SERVE_API_KEY"
"""The environment variable the server (and every adapter) reads the API key from (or --api-key-file)."""


def is_loopback(host: str) -> bool:
    """Whether binding `host` keeps the server on this machine (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to any interface


@dataclass(kw_only=True)
class ServeSettings:
    """`align serve`: what reward to serve, where, and the limits every request is held to."""

    model: str | None = option(
        None, "a reward model directory or builtin/hub id, scored by --scorer (default: detected, as `bench run`)"
    )
    scorer: str | None = option(
        None,
        "what scores, as everywhere (`align bench run --help`): a scorer kind for --model, KIND:MODEL, or a YAML "
        "mapping '{type: grm, model: DIR, k: 4}' (default: the kind told from --model)",
        metavar="SPEC",
    )
    options: dict[str, Any] = option(
        factory=dict, doc="a scorer option for --model / --scorer (repeat), e.g. dtype=float32", flag="--option"
    )
    reward_config: str | None = option(
        None,
        "a YAML file whose reward: list (and composition: section) is served: an online config (kind: online) or a "
        "file with just those two keys",
    )
    host: str = option("127.0.0.1", "address to bind; anything but loopback needs an API key")
    port: int = option(8000, "port to bind (0: any free port, printed at start)")
    api_key_file: str | None = option(
        None, f"a file holding the API key clients send as 'Authorization: Bearer KEY' (or ${API_KEY_ENV})"
    )
    template: str | None = option(
        None,
        "the chat template request texts are rendered with (OpenRLHF's query: the policy's; verl's /classify input: "
        "the tokenizer at verl's reward_model.model_path): a model directory or id, a .jinja file, or 'plain' (the "
        "prompt text is one user message); default: the first served model's tokenizer",
    )
    batch_window_ms: float = option(5.0, "how long a batch waits for more requests after its first one arrives")
    max_batch: int = option(256, "items per scored batch at most (a larger request is scored alone)")
    cache_size: int = option(65536, "identical (prompt, response, reference) items remembered (0: no cache)")
    max_body_bytes: int = option(16 << 20, "request body size limit in bytes (larger: 413)")
    max_items: int = option(4096, "items per request at most (more: 413)")
    max_concurrency: int = option(1024, "open connections at most (more: 503)")
    body_timeout_s: float = option(60.0, "seconds a client may take to send its request body (slower: 408)")
    state: str | None = option(
        None, "composition state file: restored at start when it exists, written after every update and at exit"
    )
    update_every: int = option(
        256, "served items between two updates of the constraint multipliers / dynamic weights (composition)"
    )
    openrlhf_scores: Literal["sigmoid", "reward"] = option(
        "sigmoid",
        "what OpenRLHF's `scores` (its dynamic-filtering value, kept in [0, 1]) holds: sigmoid(reward), or the "
        "reward itself (a reward already in [0, 1])",
    )
    graceful_timeout_s: float = option(60.0, "on SIGTERM / Ctrl-C: seconds in-flight requests get to finish")
    log_level: Literal["warning", "info", "debug"] = option("info", "server log level")

    def check(self) -> list[str]:
        out = []
        given = [n for n in ("model", "reward_config") if getattr(self, n) is not None]
        if self.model is None and self.reward_config is None and self.scorer is None:
            out.append("model: say what to serve: --model DIR, --scorer KIND:MODEL or --reward-config FILE")
        if len(given) > 1:
            out.append("reward_config: serve one reward: --model (with --scorer) or --reward-config, not both")
        if self.reward_config is not None and (self.scorer is not None or self.options):
            out.append("scorer: --scorer and --option shape --model; a --reward-config file carries its own options")
        if not 0 <= self.port <= 65535:
            out.append(f"port: must lie in 0..65535, got {self.port}")
        for name in ("max_batch", "max_body_bytes", "max_items", "max_concurrency", "update_every"):
            if getattr(self, name) < 1:
                out.append(f"{name}: must be >= 1, got {getattr(self, name)}")
        for name in ("batch_window_ms", "body_timeout_s", "graceful_timeout_s"):
            if not getattr(self, name) >= 0:
                out.append(f"{name}: must be >= 0, got {getattr(self, name)}")
        if self.cache_size < 0:
            out.append(f"cache_size: must be >= 0, got {self.cache_size}")
        return out


__all__ = ["API_KEY_ENV", "ServeSettings", "is_loopback"]
