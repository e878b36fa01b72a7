"""`align serve`: build the served reward from the settings, refuse what is unsafe, and run the server."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from prefalign.config import build, read_yaml
from prefalign.errors import ConfigError, UserError, did_you_mean

from ..composition import CompositionSection
from .settings import API_KEY_ENV, ServeSettings, is_loopback


def reward_sections(s: ServeSettings) -> tuple[list[dict[str, Any]], CompositionSection | None]:
    """The `reward:` list and `composition:` section the settings ask to serve."""
    if s.reward_config is not None:
        return read_reward_config(s.reward_config)
    from reward_models.scorers import scorer_spec

    from ..rewards import RULES  # a served reward may be a rule ({type: length}), as in a reward: list

    return [scorer_spec(s.scorer, model=s.model, options=s.options, other_kinds=tuple(RULES.names()))], None


def read_reward_config(path: str) -> tuple[list[dict[str, Any]], CompositionSection | None]:
    """An online config (kind: online, checked whole) or a file with just `reward:` and `composition:`."""
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError([f"expected a mapping with reward: (and composition:), got {type(data).__name__}"], path)
    if data.get("kind") == "online":
        from prefalign.config import load

        from ..online import OnlineConfig  # lazy: the online stage's config (checked whole, as `align train` would)

        cfg = load(OnlineConfig, path)
        return list(cfg.reward), cfg.composition
    unknown = sorted(set(data) - {"reward", "composition"})
    problems = [
        f"{k}: unknown key{did_you_mean(k, ['reward', 'composition'])}; a served reward file has reward: and "
        "composition: (or is an online config with kind: online)"
        for k in unknown
    ]
    if "reward" not in data:
        problems.append("reward: missing; list the components, e.g. [{type: scalar, model: runs/rm/model}]")
    composition = None
    if data.get("composition") is not None:
        try:
            composition = build(CompositionSection, data["composition"], "composition")
        except ConfigError as e:
            problems += [f"composition.{p}" for p in e.problems]
    if problems:
        raise ConfigError(problems, path)
    return list(data["reward"]), composition


def api_key(s: ServeSettings) -> str | None:
    """The key from --api-key-file, else $ALIGN_SERVE_API_KEY; None when neither is set."""
    key: str | None
    if s.api_key_file is not None:
        p = Path(s.api_key_file)
        if not p.is_file():
            raise UserError(f"--api-key-file {p}: no such file")
        key = p.read_text(encoding="utf-8").strip()
        if not key:
            raise UserError(f"--api-key-file {p}: empty")
    else:
        key = os.environ.get(API_KEY_ENV, "").strip() or None
    if key is not None and len(key) < 16:
        raise UserError(
            "the API key is shorter than 16 characters; use e.g. `python -c 'import secrets; "
            "print(secrets.token_urlsafe(32))'`"
        )
    return key


def check_exposure(host: str, key: str | None) -> None:
    """Binding anything but loopback needs an API key."""
    if not is_loopback(host) and key is None:
        raise UserError(
            f"--host {host} exposes the server beyond this machine, and it has no API key: set ${API_KEY_ENV} or "
            "--api-key-file FILE (clients send 'Authorization: Bearer KEY'), or bind --host 127.0.0.1"
        )


def build_app(s: ServeSettings) -> tuple[Any, Any]:
    """(the FastAPI app, the served reward) for the settings: the models are loaded here."""
    try:
        from .app import Limits, ServeOptions, create_app  # the HTTP stack: the `serve` extra
    except ImportError as e:
        raise UserError(
            f"align serve needs the serve extra ({e.name} is missing): pip install 'prefalign[serve]'"
        ) from None
    from .scoring import ServedReward, check_served_reward
    from .templates import ChatTemplate, load_template

    key = api_key(s)
    check_exposure(s.host, key)
    specs, composition = reward_sections(s)
    problems = check_served_reward(specs, composition)
    if s.state is not None and composition is None:
        problems.append("state: the served reward has no composition: section, so there is no state to keep")
    if problems:
        raise ConfigError(problems, "align serve")
    reward = ServedReward(specs, composition, update_every=s.update_every)
    if s.state is not None:
        if Path(s.state).exists():
            reward.composition.load(s.state)
            print(f"align serve: composition state restored from {s.state} ({reward.composition.served} items served)")
        reward.composition.path = s.state
    tok = reward.tokenizer()
    template = None
    if s.template is not None:
        template = load_template(s.template, tok)
    elif tok is not None:
        template = ChatTemplate(tok, source="the served model's tokenizer")
    name = s.model or str(specs[0].get("model") or specs[0].get("type"))
    opts = ServeOptions(
        Limits(s.max_body_bytes, s.max_items, s.body_timeout_s),
        batch_window_s=s.batch_window_ms / 1000.0,
        max_batch=s.max_batch,
        cache_size=s.cache_size,
        api_key=key,
        template=template,
        state_path=s.state,
        openrlhf_scores=s.openrlhf_scores,
        model_name=name,
    )
    return create_app(reward, opts), reward


def run(s: ServeSettings) -> int:
    from .app import bind, uvicorn_server

    app, reward = build_app(s)
    sock = bind(s.host, s.port)
    host = f"[{s.host}]" if ":" in s.host else s.host
    url = f"http://{host}:{sock.getsockname()[1]}"
    print(f"align serve: {', '.join(reward.names)} on {url}  (GET /info for what is served)")
    print(f"  OpenRLHF  --reward.remote_url {url}/openrlhf")
    print(
        f"  verl      reward.custom_reward_function.path=pkg://align.serve.verl_reward "
        f"+reward.custom_reward_function.reward_kwargs.url={url}"
    )
    print(f"  TRL       reward_funcs=[align.serve.adapters.TRLReward('{url}')]")
    sys.stdout.flush()
    server = uvicorn_server(
        app, graceful_timeout_s=s.graceful_timeout_s, max_concurrency=s.max_concurrency, log_level=s.log_level
    )
    server.run(sockets=[sock])
    return 0


__all__ = ["api_key", "build_app", "check_exposure", "read_reward_config", "reward_sections", "run"]
