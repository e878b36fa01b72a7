"""The HTTP server: a FastAPI app over the batcher, one endpoint per engine contract (`contracts.py`).

    GET  /health      {"status": "ok"}; needs no key (for load balancers), tells nothing else
    GET  /info        served components, their kinds and model versions (weights fingerprints), the template, the
                      composition state, counters (requests, items, cache hits, batches, abstentions, errors),
                      limits, peak memory
    POST /score       native, batched: components and abstentions
    POST /openrlhf    OpenRLHF's remote RM contract (also at /get_reward, the path of its own serve_rm)
    POST /classify    vLLM's pooling /classify shape, as verl's discriminative-RM path posts it

Safe by default: every endpoint but /health needs `Authorization: Bearer KEY` when a key is set (401 without it;
`align serve` refuses to bind anything but loopback without one); the body is read in chunks up to
`max_body_bytes` (413 past it, 408 when slower than `body_timeout_s`); JSON is checked field by field (400 naming
every bad field, 413 past `max_items`); a text the template cannot read is a 422; a scorer failure is a 500 with its
message, and the server keeps serving; NaN and abstentions are null, counted per component. Interactive docs and
the OpenAPI schema are off (less surface). Shutdown (SIGTERM, Ctrl-C) stops accepting, lets in-flight requests
finish (uvicorn's graceful timeout), scores what is queued, then writes the composition state.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import math
import resource
import socket
import sys
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.responses import Response

from .batching import Batcher, ScorerFailure
from .contracts import (
    BadRequest,
    Item,
    TooLarge,
    Unprocessable,
    classify_response,
    error_body,
    label_fields,
    native_response,
    openrlhf_response,
    parse_classify,
    parse_native,
    parse_openrlhf,
    read_json,
)
from .scoring import ServedReward
from .templates import ChatTemplate, PlainTemplate, TemplateMismatch

log = logging.getLogger("align.serve")


@dataclass(frozen=True)
class Limits:
    max_body_bytes: int = 16 << 20
    max_items: int = 4096
    body_timeout_s: float = 60.0


@dataclass
class ServeOptions:
    """What the app needs besides the reward: batching, limits, the key, the template, the state file."""

    limits: Limits
    batch_window_s: float = 0.005
    max_batch: int = 256
    cache_size: int = 65536
    api_key: str | None = None
    template: ChatTemplate | PlainTemplate | None = None
    state_path: str | None = None
    openrlhf_scores: str = "sigmoid"
    model_name: str = "align-serve"


def _json(status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(body, status_code=status, headers=headers)


def _error(status: int, problems: list[str], kind: str) -> JSONResponse:
    return _json(status, error_body(status, problems, kind))


def _peak_rss_mb() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1 << 20) if sys.platform == "darwin" else peak / 1024  # bytes on macOS, KiB on Linux


def _peak_gpu_mb() -> float | None:
    """The most GPU memory torch's allocator has held in this process (None when no GPU was used)."""
    torch = sys.modules.get("torch")  # the scorers imported it if they run on a GPU; never imported here for this
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return None
    return max(torch.cuda.max_memory_allocated(d) for d in range(torch.cuda.device_count())) / (1 << 20)


def create_app(reward: ServedReward, opts: ServeOptions) -> FastAPI:
    """The app serving `reward` (the batcher starts and stops with the app's lifespan)."""
    batcher = Batcher(reward, opts.batch_window_s, opts.max_batch, opts.cache_size)
    counters: dict[str, Any] = {
        "requests": Counter(),
        "items": 0,
        "bad_requests": Counter(),
        "unauthorized": 0,
        "scorer_failures": 0,
    }
    started = time.time()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await batcher.start()
        try:
            yield
        finally:
            await batcher.close()  # in-flight requests have finished (uvicorn waited); score what is queued
            if opts.state_path and reward.composition.stateful:
                reward.composition.save(opts.state_path)
                log.info("composition state written to %s", opts.state_path)

    app = FastAPI(title="align serve", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)
    app.state.batcher = batcher
    app.state.counters = counters

    async def bad_request(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, BadRequest)
        counters["bad_requests"][request.url.path] += 1
        return _error(exc.status, exc.problems, type(exc).__name__)

    async def scorer_failure(request: Request, exc: Exception) -> Response:
        counters["scorer_failures"] += 1
        return _error(500, [str(exc)], "ScorerFailure")

    async def unexpected(request: Request, exc: Exception) -> Response:
        log.exception("align serve: %s on %s", type(exc).__name__, request.url.path)
        return _error(500, [f"{type(exc).__name__}: {exc}"], "InternalError")

    app.add_exception_handler(BadRequest, bad_request)
    app.add_exception_handler(ScorerFailure, scorer_failure)
    app.add_exception_handler(Exception, unexpected)
    if opts.api_key is not None:
        app.add_middleware(BearerAuth, key=opts.api_key, counters=counters)

    async def body_of(request: Request) -> Any:
        length = request.headers.get("content-length")
        if length is not None:
            if not length.isdigit():
                raise BadRequest([f"content-length: not a number ({length[:40]!r})"])
            if int(length) > opts.limits.max_body_bytes:
                raise TooLarge([f"body: {length} bytes, the limit is {opts.limits.max_body_bytes} (--max-body-bytes)"])
        chunks = bytearray()

        async def read() -> None:
            async for chunk in request.stream():
                chunks.extend(chunk)
                if len(chunks) > opts.limits.max_body_bytes:
                    raise TooLarge([f"body: over {opts.limits.max_body_bytes} bytes (--max-body-bytes)"])

        try:
            await asyncio.wait_for(read(), opts.limits.body_timeout_s)
        except TimeoutError:
            e = BadRequest([f"body: not received within {opts.limits.body_timeout_s:g} s (--body-timeout-s)"])
            e.status = 408
            raise e from None
        return read_json(bytes(chunks))

    async def score(items: list[Item], endpoint: str) -> Any:
        counters["requests"][endpoint] += 1
        counters["items"] += len(items)
        return await batcher.submit(items)

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/info")
    async def info() -> dict[str, Any]:
        return {
            "reward": reward.describe(),
            "template": opts.template.describe() if opts.template is not None else None,
            "counters": {
                "requests": dict(counters["requests"]),
                "items": counters["items"],
                "bad_requests": dict(counters["bad_requests"]),
                "unauthorized": counters["unauthorized"],
                "scorer_failures": counters["scorer_failures"],
                **batcher.stats,
                **reward.counters(),
            },
            "batching": {
                "window_s": opts.batch_window_s,
                "max_batch": opts.max_batch,
                "cache_size": opts.cache_size,
                "cached_items": len(batcher.cache),
            },
            "limits": asdict(opts.limits),
            "auth": opts.api_key is not None,
            "state_file": opts.state_path,
            "uptime_s": time.time() - started,
            "peak_rss_mb": _peak_rss_mb(),
            "peak_gpu_mb": _peak_gpu_mb(),
            "versions": _versions(),
        }

    def _references(items: list[Item], field: str) -> None:
        problems = reward.missing_references(items, field)
        if problems:
            raise BadRequest(problems)

    @app.post("/score")
    async def native(request: Request) -> Response:
        items = parse_native(await body_of(request), opts.limits.max_items)
        _references(items, "items[{}].reference")
        out = await score(items, "/score")
        s = out.scored
        return _json(200, native_response(s.rewards.tolist(), s.components.tolist(), reward.names, out.cached))

    async def openrlhf(request: Request) -> Response:
        req = parse_openrlhf(await body_of(request), opts.limits.max_items)
        labels, bad = [], []
        for i, label in enumerate(req.labels):
            try:
                labels.append(label_fields(label, f"labels[{i}]"))
            except BadRequest as e:
                bad += e.problems
        if bad:
            raise BadRequest(bad)
        template = _template()
        items, problems = [], []
        for i, (q, p, (ref, meta, grader)) in enumerate(zip(req.query, req.prompts, labels, strict=True)):
            try:
                prompt, response = template.split_query(q, p)
            except TemplateMismatch as e:
                problems.append(f"query[{i}]: {e}")
                continue
            items.append(Item(prompt, response, ref, meta, grader))
        if problems:
            raise Unprocessable(problems)
        _references(items, "labels[{}]")
        out = await score(items, "/openrlhf")
        s = out.scored
        body = openrlhf_response(s.rewards.tolist(), s.components.tolist(), reward.names, opts.openrlhf_scores)
        return _json(200, body)

    app.post("/openrlhf")(openrlhf)
    app.post("/get_reward")(openrlhf)

    @app.post("/classify")
    async def classify(request: Request) -> Response:
        req = parse_classify(await body_of(request), opts.limits.max_items)
        template = _template()
        items, problems = [], []
        for i, text in enumerate(req.inputs):
            try:
                conv = template.parse_conversation(text)
            except TemplateMismatch as e:
                problems.append(f"input[{i}]: {e}")
                continue
            items.append(Item(conv[:-1], conv[-1].content))
        if problems:
            raise Unprocessable(problems)
        _references(items, "input[{}] (a reference answer, which /classify cannot carry; use /score)")
        out = await score(items, "/classify")
        s = out.scored
        model = req.model or opts.model_name
        return _json(200, classify_response(model, s.rewards.tolist(), s.components.tolist(), req.use_activation))

    def _template() -> ChatTemplate | PlainTemplate:
        if opts.template is None:
            raise Unprocessable(
                [
                    "template: this server reads no chat-templated text; start it with --template MODEL (the model "
                    "whose chat template rendered the text), or --template plain for raw prompt and response text"
                ]
            )
        return opts.template

    return app


class BearerAuth:
    """Every path but /health needs `Authorization: Bearer KEY` (compared in constant time); else 401. A pure ASGI
    middleware: it answers before the body is read."""

    def __init__(self, app: Any, key: str, counters: dict[str, Any]) -> None:
        self.app, self.key, self.counters = app, key.encode(), counters

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope.get("path") != "/health":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            scheme, _, token = given.partition(b" ")
            if scheme.lower() != b"bearer" or not hmac.compare_digest(token.strip(), self.key):
                self.counters["unauthorized"] += 1
                problems = ["authorization: send 'Authorization: Bearer KEY' with the server's API key"]
                response = _json(401, error_body(401, problems, "Unauthorized"), {"WWW-Authenticate": "Bearer"})
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("prefalign", "torch", "transformers", "fastapi", "uvicorn"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "not installed"
    return out


# --- running it ----------------------------------------------------------------------------------------------------


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on (host, port); port 0 picks a free one (`sock.getsockname()[1]`)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets that say they are TCP; without it, Nagle's
    # algorithm and the client's delayed ACK hold every response ~40 ms
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host.strip("[]"), port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def uvicorn_server(
    app: FastAPI, *, graceful_timeout_s: float = 60.0, max_concurrency: int = 1024, log_level: str = "info"
) -> Any:
    import uvicorn

    config = uvicorn.Config(
        app,
        log_level=log_level,
        timeout_graceful_shutdown=math.ceil(graceful_timeout_s),
        limit_concurrency=max_concurrency,
        access_log=log_level == "debug",
        server_header=False,
    )
    return uvicorn.Server(config)


class BackgroundServer:
    """The app on a loopback port in a thread of this process (tests, benchmarks, in-process use).

    with BackgroundServer(app) as srv:
        requests.post(srv.url + "/score", json=...)
    """

    def __init__(self, app: FastAPI, host: str = "127.0.0.1", port: int = 0, **kw: Any) -> None:
        self.sock = bind(host, port)
        self.host, self.port = host, self.sock.getsockname()[1]
        self.server = uvicorn_server(app, log_level=kw.pop("log_level", "warning"), **kw)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def __enter__(self) -> BackgroundServer:
        self.thread.start()
        deadline = time.time() + 60
        while not self.server.started:
            if not self.thread.is_alive() or time.time() > deadline:
                raise RuntimeError("align serve: the server did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=120)
        self.sock.close()


__all__ = ["BackgroundServer", "Limits", "ServeOptions", "bind", "create_app", "uvicorn_server"]
