"""The engines' reward interfaces as thin shims over the one scorer call (`ServedReward.score`), in this process or
against `align serve` over HTTP. No HTTP server here and no third-party client: the standard library posts, so
the shims import wherever the engines run.

    TRL      reward_funcs=[TRLReward("http://127.0.0.1:8000")]           f(prompts, completions, completion_ids,
             reward_funcs=[AsyncTRLReward("http://...")]                   **columns) -> list[float | None]
             reward_funcs=[TRLReward(reward=[{"type": "scalar", "model": "runs/rm/model"}])]   (in process)
    verl     reward.custom_reward_function.path=pkg://align.serve.verl_reward  (`compute_score`, or
             `compute_score_async` with .name), the URL in reward_kwargs.url or $ALIGN_SERVE_URL
    OpenRLHF --reward.remote_url http://host:8000/openrlhf (the server speaks its contract), or
             --reward.remote_url <path of align/serve/openrlhf_reward_func.py> (`reward_func`, posting to
             $ALIGN_SERVE_URL)

Every shim builds the native request (`{"items": [{prompt, response, reference?}]}`) and reads the native answer
(`{"rewards": [float | null], "components": {...}}`), so in process and over HTTP give the same numbers. A None
reward is an abstention (TRL reads None as "no reward"; never 0).

The HTTP client (`RemoteReward`) sends `Authorization: Bearer KEY` when a key is given (or $ALIGN_SERVE_API_KEY),
waits `timeout` seconds, and retries a failed connection or a 5xx `retries` times with exponential backoff (1, 2,
4, ... s, at most 30), never a 4xx: a malformed request stays malformed, and its message is raised.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

from .contracts import native_response, parse_native
from .settings import API_KEY_ENV

URL_ENV = "ALIGN_SERVE_URL"
"""The server's address the verl and OpenRLHF shims read when none is given (e.g. http://127.0.0.1:8000)."""


class RewardRequestError(RuntimeError):
    """The server refused a request (4xx) or kept failing (5xx, unreachable) after every retry."""


def _endpoint(url: str, path: str) -> str:
    url = url.rstrip("/")
    for p in ("/score", "/openrlhf", "/get_reward", "/classify"):
        if url.endswith(p):
            url = url[: -len(p)]
    return url + path


class RemoteReward:
    """`POST /score` of an `align serve` server (module docstring: auth, timeout, retries)."""

    def __init__(self, url: str, api_key: str | None = None, timeout: float = 180.0, retries: int = 5) -> None:
        self.url = _endpoint(url, "/score")
        self.api_key = api_key if api_key is not None else (os.environ.get(API_KEY_ENV) or None)
        self.timeout, self.retries = timeout, retries

    def score(self, wire_items: list[dict[str, Any]]) -> dict[str, Any]:
        return post_json(self.url, {"items": wire_items}, self.api_key, self.timeout, self.retries)

    def describe(self) -> dict[str, Any]:
        return {"url": self.url}


class LocalReward:
    """The same call in this process: the served reward loaded here (`reward`: a `reward:` list of specs, or a
    loaded `ServedReward`), one caller at a time."""

    def __init__(self, reward: Any) -> None:
        from .scoring import ServedReward  # lazy: the scorers and torch

        self.reward = reward if isinstance(reward, ServedReward) else ServedReward(list(reward))

    def score(self, wire_items: list[dict[str, Any]]) -> dict[str, Any]:
        items = parse_native({"items": wire_items}, max_items=len(wire_items) or 1)
        problems = self.reward.missing_references(items, "items[{}].reference")
        if problems:
            raise RewardRequestError("; ".join(problems))
        with self.reward.lock:
            s = self.reward.score(items)
        return native_response(s.rewards.tolist(), s.components.tolist(), self.reward.names, 0)

    def describe(self) -> dict[str, Any]:
        return self.reward.describe()


def post_json(url: str, payload: Any, api_key: str | None, timeout: float, retries: int) -> Any:
    """POST `payload` as JSON and read the JSON answer (module docstring: retries and errors)."""
    data = json.dumps(payload, allow_nan=False, default=str).encode("utf-8")  # a label of any type: as text
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    last: Exception | None = None
    for attempt in range(retries + 1):
        try:
            req = urllib.request.Request(url, data=data, headers=headers, method="POST")
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return json.loads(resp.read().decode("utf-8"))
        except urllib.error.HTTPError as e:
            message = _message(e)
            if e.code < 500:
                raise RewardRequestError(f"{url}: HTTP {e.code}: {message}") from None
            last = RewardRequestError(f"{url}: HTTP {e.code}: {message}")
        except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as e:
            last = RewardRequestError(
                f"{url}: {e} (after {attempt + 1} attempt(s) of at most {timeout:g} s each: the client's timeout and "
                "retries settings)"
            )
        if attempt < retries:
            time.sleep(min(2.0**attempt, 30.0))
    assert last is not None
    raise last


def _message(e: urllib.error.HTTPError) -> str:
    try:
        body = json.loads(e.read().decode("utf-8"))
        return "; ".join(body.get("problems") or [body.get("message", "")])
    except Exception:
        return e.reason if isinstance(e.reason, str) else str(e)


def _backend(url: str | None, reward: Any, api_key: str | None, timeout: float, retries: int) -> Any:
    if (url is None) == (reward is None):
        raise ValueError("give the server's url, or reward= (a `reward:` list, or a ServedReward) to score in process")
    return RemoteReward(url, api_key, timeout, retries) if url is not None else LocalReward(reward)


def _wire(prompt: Any, response: Any, reference: Any = None) -> dict[str, Any]:
    out = {"prompt": prompt, "response": response}
    if reference is not None and reference != "":
        out["reference"] = reference
    return out


# --- TRL ------------------------------------------------------------------------------------------------------------


class TRLReward:
    """A TRL reward function: `f(prompts, completions, completion_ids, **columns) -> list[float | None]`.

    prompts / completions: TRL's standard (text: the prompt is one user message) or conversational (messages; the
    completion is one assistant message) form. A dataset column named `reference_column` (default "reference")
    gives each prompt's reference answer (POLAR, a pairwise judge). `component`: return that component instead of
    the served reward. Each call also logs the abstention rate through TRL's `log_metric`, and a composed reward's
    components through `log_extra` (its completions table), when TRL passes them."""

    def __init__(
        self,
        url: str | None = None,
        *,
        reward: Any = None,
        api_key: str | None = None,
        component: str | None = None,
        reference_column: str = "reference",
        name: str = "align_reward",
        timeout: float = 180.0,
        retries: int = 5,
    ) -> None:
        self.backend = _backend(url, reward, api_key, timeout, retries)
        self.component = component
        self.reference_column = reference_column
        self.__name__ = name  # TRL names the reward by it in its logs

    def _items(self, prompts: Sequence[Any], completions: Sequence[Any], columns: dict[str, Any]) -> list[dict]:
        refs = columns.get(self.reference_column)
        if refs is None:
            refs = [None] * len(prompts)
        return [_wire(p, c, r) for p, c, r in zip(prompts, completions, refs, strict=True)]

    def _read(self, answer: dict[str, Any], columns: dict[str, Any]) -> list[float | None]:
        values = answer["components"][self.component] if self.component else answer["rewards"]
        log_metric, log_extra = columns.get("log_metric"), columns.get("log_extra")
        if callable(log_metric) and values:
            log_metric(f"{self.__name__}/abstained", sum(v is None for v in values) / len(values))
        if callable(log_extra) and len(answer["components"]) > 1:  # each component in TRL's completions table
            for name, comp in answer["components"].items():
                log_extra(f"{self.__name__}/{name}", list(comp))
        return list(values)

    def __call__(
        self, prompts: Sequence[Any], completions: Sequence[Any], completion_ids: Any = None, **columns: Any
    ) -> list[float | None]:
        return self._read(self.backend.score(self._items(prompts, completions, columns)), columns)


class AsyncTRLReward(TRLReward):
    """`TRLReward` as `async def` (TRL gathers async reward functions with asyncio): the request runs in a thread,
    so several reward functions' requests overlap."""

    async def __call__(  # type: ignore[override]
        self, prompts: Sequence[Any], completions: Sequence[Any], completion_ids: Any = None, **columns: Any
    ) -> list[float | None]:
        items = self._items(prompts, completions, columns)
        return self._read(await asyncio.to_thread(self.backend.score, items), columns)


# --- verl -----------------------------------------------------------------------------------------------------------

VERL_PROMPT_KEYS = ("prompt", "raw_prompt", "question")
"""Where `verl_compute_score` finds the prompt in `extra_info` (verl passes none to a reward function): the chat
messages (`prompt` / `raw_prompt`, as verl's datasets hold them), or the question text."""


class RewardAbstained(RuntimeError):
    """The served reward gave no score for this sample, and verl has no "no reward": set abstain_score."""


_clients: dict[tuple[str, str | None], RemoteReward] = {}
_clients_lock = threading.Lock()


def _client(url: str | None, api_key: str | None) -> RemoteReward:
    url = url or os.environ.get(URL_ENV)
    if not url:
        raise ValueError(
            f"no align serve address: pass url in verl's reward_kwargs (+reward.custom_reward_function.reward_kwargs."
            f"url=http://HOST:PORT) or set ${URL_ENV}"
        )
    with _clients_lock:
        key = (url, api_key)
        if key not in _clients:
            _clients[key] = RemoteReward(url, api_key)
        return _clients[key]


def _verl_prompt(extra_info: Any) -> Any:
    info = extra_info if isinstance(extra_info, dict) else {}
    for k in VERL_PROMPT_KEYS:
        v = info.get(k)
        if v is not None:
            return [dict(m) for m in v] if not isinstance(v, str) else v  # numpy arrays of dicts from parquet
    raise ValueError(
        f"verl passes no prompt to compute_score: keep it in the dataset's extra_info under one of "
        f"{', '.join(VERL_PROMPT_KEYS)} (the chat messages, or the question text); got keys {sorted(info)}"
    )


def verl_items(solution_str: str, ground_truth: Any, extra_info: Any) -> list[dict[str, Any]]:
    ref = ground_truth if isinstance(ground_truth, str) else None
    return [_wire(_verl_prompt(extra_info), solution_str, ref)]


def verl_result(answer: dict[str, Any], abstain_score: float | None) -> dict[str, Any]:
    """verl's `{"score": float, **extra}`: the components go to its reward_extra_info."""
    r = answer["rewards"][0]
    comps = {f"component/{k}": (float("nan") if v[0] is None else v[0]) for k, v in answer["components"].items()}
    if r is None:
        if abstain_score is None:
            raise RewardAbstained(
                "the served reward abstained on this sample and verl has no 'no reward'; set abstain_score in "
                "reward_kwargs (+reward.custom_reward_function.reward_kwargs.abstain_score=VALUE) to score it so"
            )
        return {"score": float(abstain_score), "abstained": 1.0, **comps}
    return {"score": float(r), "abstained": 0.0, **comps}


def verl_compute_score(
    data_source: Any,
    solution_str: str,
    ground_truth: Any = None,
    extra_info: Any = None,
    *,
    url: str | None = None,
    api_key: str | None = None,
    abstain_score: float | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """verl's `compute_score(data_source, solution_str, ground_truth, extra_info, **kw)`: the served reward of
    (extra_info's prompt, solution_str), against ground_truth as the reference answer when it is a string."""
    answer = _client(url, api_key).score(verl_items(solution_str, ground_truth, extra_info))
    return verl_result(answer, abstain_score)


async def verl_compute_score_async(
    data_source: Any,
    solution_str: str,
    ground_truth: Any = None,
    extra_info: Any = None,
    *,
    url: str | None = None,
    api_key: str | None = None,
    abstain_score: float | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """`verl_compute_score` as `async def` (verl awaits it instead of giving it an executor thread)."""
    items = verl_items(solution_str, ground_truth, extra_info)
    answer = await asyncio.to_thread(_client(url, api_key).score, items)
    return verl_result(answer, abstain_score)


# --- OpenRLHF ------------------------------------------------------------------------------------------------------


def openrlhf_reward_func(
    queries: list[str],
    prompts: list[str],
    labels: list[Any],
    url: str | None = None,
    api_key: str | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """OpenRLHF's `reward_func(queries, prompts, labels, **kw)`: posts them to the server's /openrlhf (which splits
    each query with the policy's template) and returns its keys as tensors (an abstention is NaN in a tensor)."""
    import torch  # OpenRLHF's reward_func contract returns tensors

    client = _client(url, api_key)
    answer = post_json(
        _endpoint(client.url, "/openrlhf"),
        {"query": list(queries), "prompts": list(prompts), "labels": list(labels)},
        client.api_key,
        client.timeout,
        client.retries,
    )

    def t(values: list[float | None]) -> torch.Tensor:
        return torch.tensor([float("nan") if v is None else v for v in values], dtype=torch.float32)

    return {
        "rewards": t(answer["rewards"]),
        "scores": t(answer["scores"]),
        "extra_logs": {k: t(v) for k, v in answer["extra_logs"].items()},
    }


__all__ = [
    "URL_ENV",
    "VERL_PROMPT_KEYS",
    "AsyncTRLReward",
    "LocalReward",
    "RemoteReward",
    "RewardAbstained",
    "RewardRequestError",
    "TRLReward",
    "openrlhf_reward_func",
    "post_json",
    "verl_compute_score",
    "verl_compute_score_async",
]
