"""`align serve` (align/serve): a live server on loopback, started in this process (uvicorn in a thread) or as the real
CLI in a subprocess, with tiny models.

- Every endpoint (/score, /openrlhf, /classify) and every adapter (TRL sync and async, in process and over HTTP,
  verl's compute_score, OpenRLHF's reward_func file) gives `align rm score --raw` on the same items, and each
  served scorer kind (polar against a reference, a pairwise judge against a reference, a generative judge, an
  implicit reward) its own score, within 1e-4 in fp32.
- OpenRLHF's query split is exact on three templates: the builtin model's (SmolLM2, ChatML with a default system
  prompt), a Qwen2.5-style ChatML and a Llama 3-style template written here, on a tokenizer whose special tokens
  they are, with the query built as OpenRLHF builds it (decode(prompt_ids + response_ids), special tokens kept).
- The engines' own client code: TRL's real GRPOTrainer two steps; OpenRLHF's SingleTurnAgentExecutor (openrlhf
  0.11.0, installed --no-deps by `make setup-dev`) over HTTP and with the reward_func file; verl's reward-loop client
  written from its source (v0.9.0: verl cannot import without ray and tensordict), file and commit named there.
- Batching and the cache, composition state worked out by hand (updates, save, restore), abstentions as null,
  a scorer failure as a 500 the server survives, the API key, a fuzzed set of bad requests, graceful shutdown.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import importlib
import inspect
import json
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

httpx = pytest.importorskip("httpx", reason="the serve extra's test client (pip install -e '.[dev]')")
pytest.importorskip("fastapi", reason="align serve needs the serve extra (pip install -e '.[dev]')")

from align.serve.adapters import (  # noqa: E402
    AsyncTRLReward,
    RewardRequestError,
    TRLReward,
    verl_compute_score,
)
from align.serve.app import BackgroundServer  # noqa: E402
from align.serve.run import build_app, check_exposure  # noqa: E402
from align.serve.settings import API_KEY_ENV, ServeSettings  # noqa: E402
from align.serve.templates import ChatTemplate, TemplateMismatch  # noqa: E402
from prefalign.errors import UserError  # noqa: E402
from preference_data.records import Message  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TOL = 1e-4

PROMPTS = [
    [{"role": "user", "content": "What is 2 + 2?"}],
    [{"role": "system", "content": "You answer briefly."}, {"role": "user", "content": "Name a colour."}],
    [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "Tell me a fact about the moon,\nplease."},
    ],
    [{"role": "user", "content": "Traduis : « où est la bibliothèque ? » 🚀 数学"}],
]
RESPONSES = [
    ("4", "5, I think."),
    ("Blue.", "Green, like grass in spring. "),
    ("The Moon has no atmosphere to speak of, so its sky is black.", "No."),
    ("Où est la bibliothèque ?", "Je ne sais pas.\n\nDésolé."),
]


def _items() -> list[tuple[list[dict], str]]:
    return [(p, r) for p, pair in zip(PROMPTS, RESPONSES, strict=True) for r in pair]


def _conv(msgs: list[dict]) -> list[Message]:
    return [Message(m["role"], m["content"]) for m in msgs]


def rm_score_raw(tmp: Path, model: str, items: list[tuple[list[dict], str]]) -> list[float]:
    """`align rm score --raw` (the CLI, in this process) on (prompt, response) items: each the chosen response of a
    pair (the rejected one a filler), read back in order."""
    from align.cli.main import main

    data, out = tmp / "pairs.jsonl", tmp / "scores.jsonl"
    with open(data, "w", encoding="utf-8") as f:
        for p, r in items:
            row = {"prompt": p, "chosen": [{"role": "assistant", "content": r}]}
            row["rejected"] = [{"role": "assistant", "content": r + " (filler)"}]
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    args = ["rm", "score", "--model", model, "--data", str(data), "--out", str(out), "--raw", "--dtype", "float32"]
    assert main(args) == 0
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    scores = [r["score"] for r in rows if r["response"] == "chosen"]
    assert len(scores) == len(items)
    return scores


def openrlhf_query(tok, prompt: list[dict], response: str, eos: bool = True, cut: int = 0) -> tuple[str, str]:
    """(query, prompt text) as OpenRLHF's single-turn executor builds them: the prompt rendered with the generation
    prompt and tokenized, the response's token ids (ending with EOS when generation stopped there), decoded together
    with special tokens kept; `cut` drops the prompt's first tokens (its max_len truncation)."""
    prompt_text = tok.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
    prompt_ids = tok(prompt_text, add_special_tokens=False)["input_ids"][cut:]
    response_ids = tok(response, add_special_tokens=False)["input_ids"] + ([tok.eos_token_id] if eos else [])
    return tok.decode(prompt_ids + response_ids, skip_special_tokens=False), prompt_text


# --- verl v0.9.0, written from its source ----------------------------------------------------------------------
# verl/experimental/reward_loop/reward_loop.py at commit 483b8a009ba3a97563edee3a19887e4862b8094a (tag v0.9.0):
# RewardLoopWorker._preprocess_reward_inputs, ._post_request and .compute_score_disrm, without the DataProto
# and ray around them (verl imports neither without ray and tensordict). The logic is verl's, line for line.


def verl_rm_prompt(rm_tokenizer, input_tokenizer, raw_prompt: list[dict], response_ids: list[int]) -> str:
    rollout_response = input_tokenizer.decode(response_ids)
    rollout_response = rollout_response.replace(input_tokenizer.eos_token, "")
    chat = list(raw_prompt)
    chat.append({"role": "assistant", "content": rollout_response})
    rm_prompt = rm_tokenizer.apply_chat_template(chat, add_generation_prompt=False, tokenize=False)
    if rm_tokenizer.bos_token is not None and rm_prompt.startswith(rm_tokenizer.bos_token):
        rm_prompt = rm_prompt[len(rm_tokenizer.bos_token) :]
    return rm_prompt


async def verl_post_request(reward_router_address: str, payload: dict, endpoint: str, max_retries: int = 16):
    import aiohttp

    url = f"http://{reward_router_address}/{endpoint}"
    last_exception = None
    for attempt in range(max_retries):
        try:
            timeout = aiohttp.ClientTimeout(total=None)
            async with aiohttp.ClientSession(timeout=timeout) as session:
                async with session.post(url, json=payload) as resp:
                    resp.raise_for_status()
                    return await resp.json()
        except aiohttp.ClientResponseError as e:
            if 400 <= e.status < 500:
                raise
            last_exception = e
        except (TimeoutError, aiohttp.ClientConnectorError) as e:
            last_exception = e
        if attempt < max_retries - 1:
            await asyncio.sleep(min(2**attempt, 30))
    if last_exception:
        raise last_exception


async def verl_compute_score_disrm(reward_router_address: str, model_name: str, disrm_prompt: str) -> dict:
    payloads = {"model": model_name, "input": disrm_prompt, "use_activation": False}
    output = await verl_post_request(reward_router_address, payloads, "classify")
    rm_score = output["data"][-1]["probs"][-1]
    return {"reward_score": rm_score}


# verl/trainer/ppo/reward.py (get_custom_reward_fn, _call_with_kwargs[_async]), verl/utils/import_utils.py
# (load_module with a pkg:// path) and verl/experimental/reward_loop/reward_manager/naive.py
# (NaiveRewardManager.run_single: how it calls the function and reads its result), same commit.


def verl_custom_reward_fn(path: str, name: str, reward_kwargs: dict):
    module = importlib.import_module(path[len("pkg://") :].replace("/", "."))
    raw_fn = getattr(module, name)

    def _call_with_kwargs(raw_fn, extra_kwargs, *args, **kwargs):
        return raw_fn(*args, **{**kwargs, **extra_kwargs})

    async def _call_with_kwargs_async(raw_fn, extra_kwargs, *args, **kwargs):
        return await raw_fn(*args, **{**kwargs, **extra_kwargs})

    if not inspect.iscoroutinefunction(raw_fn):
        return functools.partial(_call_with_kwargs, raw_fn, reward_kwargs)
    return functools.partial(_call_with_kwargs_async, raw_fn, reward_kwargs)


async def verl_naive_run_single(compute_score, tokenizer, response_ids, data_source, ground_truth, extra_info):
    loop = asyncio.get_running_loop()
    response_str = await loop.run_in_executor(None, lambda: tokenizer.decode(response_ids, skip_special_tokens=True))
    if inspect.iscoroutinefunction(getattr(compute_score, "func", compute_score)) or inspect.iscoroutinefunction(
        compute_score
    ):
        result = await compute_score(
            data_source=data_source, solution_str=response_str, ground_truth=ground_truth, extra_info=extra_info
        )
    else:
        result = await loop.run_in_executor(
            None,
            lambda: compute_score(
                data_source=data_source, solution_str=response_str, ground_truth=ground_truth, extra_info=extra_info
            ),
        )
    reward_extra_info = {}
    if isinstance(result, dict):
        score = result["score"]
        for key, value in result.items():
            reward_extra_info[key] = value
    else:
        score = result
        reward_extra_info["acc"] = score
    return {"reward_score": score, "reward_extra_info": reward_extra_info}


# --- fixtures ------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tok(tiny_model_ref):
    from prefalign.models.hub import load_tokenizer

    return load_tokenizer(tiny_model_ref)


@pytest.fixture(scope="module")
def rm_dir(tmp_path_factory, tiny_model_ref) -> Path:
    """A tiny seq-cls RM with a large random head (distinct rewards), saved with its statistics."""
    from prefalign.models.hub import load_seq_cls, load_tokenizer
    from reward_models.checkpoint import RewardStats, save_rm

    model = load_seq_cls(tiny_model_ref, dtype="float32")
    torch.manual_seed(1)
    torch.nn.init.normal_(model.score.weight, std=1.0)
    out = tmp_path_factory.mktemp("serve_rm") / "rm"
    save_rm(model, load_tokenizer(tiny_model_ref), out, RewardStats(mean=0.25, std=2.0, n=10, computed_on="test"))
    return out


def settings(**kw) -> ServeSettings:
    return ServeSettings(**{"port": 0, "log_level": "warning", **kw})


@pytest.fixture(scope="module")
def rm_server(rm_dir):
    app, reward = build_app(settings(model=str(rm_dir), options={"dtype": "float32"}, batch_window_ms=20))
    with BackgroundServer(app) as srv:
        yield srv, reward


def post(url: str, body, headers: dict | None = None, timeout: float = 60):
    if isinstance(body, bytes | bytearray):
        return httpx.post(url, content=bytes(body), headers=headers, timeout=timeout)
    return httpx.post(url, json=body, headers=headers, timeout=timeout)


def info(url: str, headers: dict | None = None) -> dict:
    return httpx.get(url + "/info", headers=headers, timeout=30).json()


def close(a, b) -> bool:
    return all(
        (x is None and y is None) or (x is not None and y is not None and abs(x - y) <= TOL)
        for x, y in zip(a, b, strict=True)
    )


# --- equality with `align rm score --raw` ----------------------------------------------------------------------


def test_every_endpoint_and_adapter_equals_rm_score_raw(tmp_path, rm_server, rm_dir, tok):
    srv, _ = rm_server
    items = _items()
    expected = rm_score_raw(tmp_path, str(rm_dir), items)
    assert len({round(x, 3) for x in expected}) == len(expected)  # distinct: the check is not vacuous

    native = post(srv.url + "/score", {"items": [{"prompt": p, "response": r} for p, r in items]}).json()
    assert native["names"] == ["scalar"] and native["abstained"] == 0
    assert close(native["rewards"], expected) and close(native["components"]["scalar"], expected)

    for with_prompts in (True, False):  # OpenRLHF, one sample per request as its executor sends them
        got = []
        for p, r in items:
            query, prompt_text = openrlhf_query(tok, p, r)
            body = {"query": [query], "prompts": [prompt_text] if with_prompts else None, "labels": [""]}
            out = post(srv.url + "/openrlhf", body).json()
            assert out["scores"][0] == pytest.approx(1 / (1 + math.exp(-out["rewards"][0])))
            assert out["extra_logs"]["scalar"] == out["rewards"]
            got.append(out["rewards"][0])
        assert close(got, expected)

    got = []  # verl's discriminative-RM request (/classify), the text as its worker renders it
    for p, r in items:
        text = verl_rm_prompt(tok, tok, p, tok(r, add_special_tokens=False)["input_ids"] + [tok.eos_token_id])
        out = post(srv.url + "/classify", {"model": "rm", "input": text, "use_activation": False}).json()
        assert out["object"] == "list" and out["data"][0]["num_classes"] == 1
        got.append(out["data"][-1]["probs"][-1])
    assert close(got, expected)

    prompts, completions = [p for p, _ in items], [[{"role": "assistant", "content": r}] for _, r in items]
    assert close(TRLReward(srv.url)(prompts, completions), expected)
    assert close(asyncio.run(AsyncTRLReward(srv.url)(prompts, completions)), expected)
    spec = [{"type": "scalar", "model": str(rm_dir), "dtype": "float32"}]
    assert close(TRLReward(reward=spec)(prompts, completions), expected)  # in process, the same call
    verl = [verl_compute_score("src", r, None, {"prompt": p}, url=srv.url)["score"] for p, r in items]
    assert close(verl, expected)


# --- the query split --------------------------------------------------------------------------------------------

QWEN = (
    "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant."
    "<|im_end|>\\n' }}{%- endif %}{%- for message in messages %}{%- if not (message.role == 'system' and loop.first) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
"""A Qwen2.5-style ChatML template (its default system prompt when the conversation has none)."""

LLAMA3 = (
    "{{- bos_token }}{%- if messages[0]['role'] == 'system' %}{%- set system_message = messages[0]['content']|trim %}"
    "{%- set messages = messages[1:] %}{%- else %}{%- set system_message = 'Cutting Knowledge Date: December 2023\\n"
    "Today Date: 26 Jul 2024' %}{%- endif %}{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' }}"
    "{{- system_message }}{{- '<|eot_id|>' }}{%- for message in messages %}{{- '<|start_header_id|>' + message['role']"
    " + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}{%- endfor %}{%- if "
    "add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"
)
"""A Llama 3-style template: BOS, a dated default system prompt, header tokens, trimmed contents, <|eot_id|>."""


def _family_tokenizer(tok, family: str):
    if family == "smollm2":
        return tok
    t = copy.deepcopy(tok)
    if family == "qwen":
        t.chat_template = QWEN
        return t
    t.add_special_tokens(
        {
            "bos_token": "<|begin_of_text|>",
            "eos_token": "<|eot_id|>",
            "additional_special_tokens": ["<|start_header_id|>", "<|end_header_id|>"],
        }
    )
    t.chat_template = LLAMA3
    return t


SPLIT_CASES = [
    *PROMPTS,
    [{"role": "user", "content": "Use <b>bold</b>, {{ braces }}, `\\n` and the word assistant:\nnow."}],
    [
        {"role": "system", "content": "Rules:\n1. be kind\n2. be brief"},
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b"},
        {"role": "user", "content": "c"},
        {"role": "assistant", "content": "d"},
        {"role": "user", "content": "e"},
    ],
]
SPLIT_RESPONSES = ["The answer is 4.", "Blue. ", "Line one\nLine two\n", "🚀", "Sure: assistant", "x"]


@pytest.mark.parametrize("family", ["smollm2", "qwen", "llama3"])
def test_openrlhf_query_split_is_exact(tok, family):
    t = _family_tokenizer(tok, family)
    template = ChatTemplate(t, source=family)
    for prompt, response in zip(SPLIT_CASES, SPLIT_RESPONSES, strict=True):
        want = _conv(prompt)
        query, prompt_text = openrlhf_query(t, prompt, response)
        assert query.endswith(t.eos_token) and query.startswith(prompt_text)
        assert template.split_query(query, prompt_text) == (want, response)  # OpenRLHF's normal case
        assert template.split_query(query) == (want, response)  # without `prompts`
        cut_query, _ = openrlhf_query(t, prompt, response, cut=3)  # the prompt's first tokens dropped (max_len)
        assert template.split_query(cut_query, prompt_text) == (want, response)
        truncated, _ = openrlhf_query(t, prompt, response, eos=False)  # cut off by the length limit: no EOS
        assert template.split_query(truncated, prompt_text) == (want, response)
        # verl's /classify text: the whole conversation in the RM's template, its leading BOS cut off
        text = verl_rm_prompt(t, t, prompt, t(response, add_special_tokens=False)["input_ids"] + [t.eos_token_id])
        said = response.strip() if family == "llama3" else response  # Llama 3's template trims every content
        assert template.parse_conversation(text) == [*want, Message("assistant", said)]


def test_split_refuses_text_the_template_did_not_render(tok):
    template = ChatTemplate(tok, source="smollm2")
    with pytest.raises(TemplateMismatch, match="--template"):
        template.split_query("User: hi\nAssistant: hello")
    with pytest.raises(TemplateMismatch):
        template.parse_prompt("<|im_start|>user\nhi<|im_end|>\n")  # no generation prompt
    llama = ChatTemplate(_family_tokenizer(tok, "llama3"), source="llama3")
    query, _ = openrlhf_query(tok, PROMPTS[0], "4")  # a SmolLM2 query sent to a server set for Llama 3
    with pytest.raises(TemplateMismatch):
        llama.split_query(query)


# --- each scorer kind served as it scores ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def polar_dir(tmp_path_factory, tiny_model_ref) -> Path:
    """A tiny POLAR-format RM: the tiny model with the POLAR tokens and a random head (untrained)."""
    from prefalign.models.hub import load_seq_cls, load_tokenizer
    from reward_models.checkpoint import RewardStats, save_rm
    from reward_models.polar.format import add_polar_tokens

    model = load_seq_cls(tiny_model_ref, dtype="float32")
    t = copy.deepcopy(load_tokenizer(tiny_model_ref))
    add_polar_tokens(t, model)
    torch.manual_seed(3)
    torch.nn.init.normal_(model.score.weight, std=1.0)
    out = tmp_path_factory.mktemp("serve_polar") / "polar"
    save_rm(model, t, out, RewardStats(mean=0.0, std=1.0, n=10, computed_on="test"))
    return out


@pytest.mark.parametrize("kind", ["polar", "judge"])
def test_reference_and_pairwise_scorers_give_their_own_score(kind, polar_dir, tiny_model_ref, tok):
    from reward_models.scorers import load_scorer

    model = str(polar_dir) if kind == "polar" else tiny_model_ref
    spec = {"type": kind, "model": model, "dtype": "float32"}
    items = _items()
    refs = [f"A reference answer, number {i}." for i in range(len(items))]
    direct = load_scorer(dict(spec))
    prompts, responses = [_conv(p) for p, _ in items], [[Message("assistant", r)] for _, r in items]
    ref_convs = [[Message("assistant", x)] for x in refs]
    if kind == "polar":
        expected = direct.score_with_reference(prompts, responses, refs)
    else:  # P(response better than the reference), asked once as the online loop asks
        expected = direct.compare(prompts, responses, ref_convs)
    assert all(math.isfinite(x) for x in expected)
    app, _ = build_app(settings(scorer=json.dumps(spec)))
    with BackgroundServer(app) as srv:
        body = {"items": [{"prompt": p, "response": r, "reference": x} for (p, r), x in zip(items, refs, strict=True)]}
        assert close(post(srv.url + "/score", body).json()["rewards"], expected)
        got = []
        for (p, r), x in zip(items, refs, strict=True):  # OpenRLHF: the label is the reference answer
            query, prompt_text = openrlhf_query(tok, p, r)
            got.append(post(srv.url + "/openrlhf", {"query": [query], "prompts": [prompt_text], "labels": [x]}).json())
        assert close([g["rewards"][0] for g in got], expected)
        missing = post(srv.url + "/openrlhf", {"query": [openrlhf_query(tok, PROMPTS[0], "4")[0]], "labels": [""]})
        assert missing.status_code == 400 and "labels[0]" in missing.json()["message"]
        assert "reference answer" in missing.json()["message"]


def test_generative_judge_samples_one_batch_as_each_item_alone(tiny_model_ref):
    """A GRM's requests arriving together are sampled in one call of its engine, and every item's sampled critiques
    are the ones it draws scored alone (samples are seeded by prompt, whatever shares the batch)."""
    spec = {"type": "grm", "model": tiny_model_ref, "k": 2, "max_new_tokens": 8, "temperature": 1.0, "dtype": "float32"}
    app, reward = build_app(settings(scorer=json.dumps(spec), batch_window_ms=800))
    items = _items()[:5]
    with BackgroundServer(app) as srv:
        with_threads = [None] * len(items)

        def one(i: int) -> None:
            p, r = items[i]
            with_threads[i] = post(srv.url + "/score", {"items": [{"prompt": p, "response": r}]}).json()

        threads = [threading.Thread(target=one, args=(i,)) for i in range(len(items))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        counters = info(srv.url)["counters"]
    assert counters["batches"] == 1 and counters["largest_batch"] == len(items)  # one engine call for all
    judge = reward.set.components[0].scorer
    assert len(judge.last_messages) == len(items)
    served = dict(zip(judge.last_messages, judge.last_texts, strict=True))
    for (p, r), out in zip(items, with_threads, strict=True):
        alone = judge.score([_conv(p)], [[Message("assistant", r)]])
        assert served[judge.last_messages[0]] == judge.last_texts[0]  # the same critiques, batched or alone
        assert close(out["rewards"], [None if math.isnan(alone[0]) else alone[0]])  # a random judge abstains: null


# --- batching, cache, abstentions, failures ---------------------------------------------------------------------


def test_concurrent_requests_are_batched_and_cached(rm_dir):
    app, _ = build_app(settings(model=str(rm_dir), options={"dtype": "float32"}, batch_window_ms=500))
    items = _items()
    with BackgroundServer(app) as srv:
        sequential = post(srv.url + "/score", {"items": [{"prompt": p, "response": r} for p, r in items]}).json()
        before = info(srv.url)["counters"]
        out = [None] * (2 * len(items))

        def one(i: int) -> None:  # every item twice, each in its own request, all at once
            p, r = items[i % len(items)]
            out[i] = post(srv.url + "/score", {"items": [{"prompt": p, "response": r + " (again)"}]}).json()

        threads = [threading.Thread(target=one, args=(i,)) for i in range(len(out))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        after = info(srv.url)["counters"]
    assert after["batches"] - before["batches"] <= 2  # 16 requests scored in one or two batches
    assert after["scored_items"] - before["scored_items"] == len(items)  # duplicates scored once
    assert after["cache_hits"] - before["cache_hits"] == len(items)
    assert [o["rewards"] for o in out[: len(items)]] == [o["rewards"] for o in out[len(items) :]]
    assert sequential["cached"] == 0 and sequential["abstained"] == 0


def test_abstentions_are_null_and_counted(rm_server, tok):
    srv, _ = rm_server
    before = info(srv.url)["counters"]
    out = post(srv.url + "/score", {"items": [{"prompt": "Hi", "response": ""}, {"prompt": "Hi", "response": "Yo"}]})
    body = out.json()
    assert out.status_code == 200 and body["rewards"][0] is None and body["components"]["scalar"][0] is None
    assert body["rewards"][1] is not None and body["abstained"] == 1
    query, prompt_text = openrlhf_query(tok, [{"role": "user", "content": "Hi there"}], "")  # an empty generation
    o = post(srv.url + "/openrlhf", {"query": [query], "prompts": [prompt_text]}).json()
    assert o["rewards"] == [None] and o["scores"] == [None] and o["extra_logs"]["scalar"] == [None]
    assert TRLReward(srv.url)(["Hi"], [""]) == [None]  # TRL's None: no reward
    after = info(srv.url)["counters"]
    assert after["null_rewards"] - before["null_rewards"] == 3  # every null served
    assert after["components"]["scalar"]["nan"] - before["components"]["scalar"]["nan"] == 2  # the TRL item: cached


def test_scorer_failure_is_a_500_and_the_server_keeps_serving(tmp_path):
    """A rule that raises on one request's malformed gold label: that request gets a 500 with the message, the
    request scored in the same batch its score, and the server answers afterwards."""
    cfg = tmp_path / "reward.yaml"
    cfg.write_text("reward:\n  - {type: judge_correctness}\n")
    app, _ = build_app(settings(reward_config=str(cfg), batch_window_ms=300))

    def item(score: object) -> dict:
        return {
            "prompt": "Rate it.",
            "response": "Score: \\boxed{7}",
            "meta": {"judge": {"kind": "grm", "score": score}},
        }

    with BackgroundServer(app) as srv:
        res = {}

        def send(name: str, score: object) -> None:
            res[name] = post(srv.url + "/score", {"items": [item(score)]})

        threads = [threading.Thread(target=send, args=a) for a in (("bad", "not a number"), ("good", 7))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert res["bad"].status_code == 500
        assert "ValueError" in res["bad"].json()["message"] and "not a number" in res["bad"].json()["message"]
        assert res["good"].status_code == 200 and res["good"].json()["rewards"] == [1.0]
        assert httpx.get(srv.url + "/health").json() == {"status": "ok"}
        assert post(srv.url + "/score", {"items": [item(3)]}).json()["rewards"] == [0.0]
        counters = info(srv.url)["counters"]
        assert counters["scorer_failures"] == 1 and counters["scorer_errors"] == 1


# --- safety ---------------------------------------------------------------------------------------------------------


def test_api_key_required_beyond_loopback_and_checked(rm_dir, monkeypatch):
    for host in ("0.0.0.0", "::", "192.168.1.5", "example.org"):
        with pytest.raises(UserError, match=API_KEY_ENV):
            check_exposure(host, None)
    check_exposure("127.0.0.1", None)
    check_exposure("localhost", None)
    check_exposure("::1", None)
    check_exposure("0.0.0.0", "k" * 32)
    monkeypatch.setenv(API_KEY_ENV, "short")
    with pytest.raises(UserError, match="shorter than 16"):
        build_app(settings(model=str(rm_dir)))
    key = "s3cret-key-for-the-test-0123456789"
    monkeypatch.setenv(API_KEY_ENV, key)
    app, _ = build_app(settings(model=str(rm_dir), options={"dtype": "float32"}))
    body = {"items": [{"prompt": "Hi", "response": "Yo"}]}
    with BackgroundServer(app) as srv:
        assert httpx.get(srv.url + "/health").status_code == 200  # open: tells nothing
        for headers in (None, {"Authorization": "Bearer wrong"}, {"Authorization": key}, {"Authorization": "Basic x"}):
            r = post(srv.url + "/score", body, headers)
            assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
            assert "Bearer" in r.json()["message"]
        assert httpx.get(srv.url + "/info").status_code == 401
        ok = post(srv.url + "/score", body, {"Authorization": f"Bearer {key}"})
        assert ok.status_code == 200 and ok.json()["rewards"][0] is not None
        assert TRLReward(srv.url)(["Hi"], ["Yo"]) == ok.json()["rewards"]  # the adapter reads the key from the env
        monkeypatch.delenv(API_KEY_ENV)
        with pytest.raises(RewardRequestError, match="401"):
            TRLReward(srv.url)(["Hi"], ["Yo"])


@pytest.fixture(scope="module")
def fuzz_server(rm_dir):
    s = settings(
        model=str(rm_dir),
        options={"dtype": "float32"},
        max_body_bytes=1 << 20,
        max_items=64,
        body_timeout_s=1.0,
        batch_window_ms=0,
    )
    app, _ = build_app(s)
    with BackgroundServer(app) as srv:
        yield srv


ITEM = {"prompt": "a", "response": "b"}
BAD_REQUESTS = [  # (path, body: bytes or JSON, the status it must get)
    ("/score", b"", 400),
    ("/score", b"  \n ", 400),
    ("/score", b"\xff\xfe\xfd{}", 400),  # invalid UTF-8
    ("/score", b'{"items": [{"prompt": "\\ud800", "response": "x"}]}', 400),  # a lone surrogate
    ("/score", b'{"items": [{"prompt": "a", "response": "\\udfff"}]}', 400),
    ("/score", b"not json", 400),
    ("/score", b'{"items": [', 400),
    ("/score", b"null", 400),
    ("/score", b"[]", 400),
    ("/score", b'"items"', 400),
    ("/score", b'{"items": NaN}', 400),
    ("/score", b'{"items": [{"prompt": "a", "response": Infinity}]}', 400),
    ("/score", b"[" * 50_000 + b"]" * 50_000, 400),  # nesting deeper than the parser's recursion
    ("/score", b'{"items": [' + b"9" * 5000 + b"]}", 400),  # an integer past Python's digit limit
    ("/score", b'{"items": [1e99999]}', 400),
    ("/score", {"items": "x"}, 400),
    ("/score", {"items": []}, 400),
    ("/score", {"items": None}, 400),
    ("/score", {"itemz": [ITEM]}, 400),
    ("/score", {"items": [{}]}, 400),
    ("/score", {"items": [{"prompt": ""}]}, 400),
    ("/score", {"items": [{"prompt": "", "response": "x"}]}, 400),
    ("/score", {"items": [{"prompt": [], "response": "x"}]}, 400),
    ("/score", {"items": [{"prompt": [{"role": "usr", "content": "x"}], "response": "x"}]}, 400),
    ("/score", {"items": [{"prompt": [{"role": "user"}], "response": "x"}]}, 400),
    ("/score", {"items": [{"prompt": [{"role": "user", "content": 5}], "response": "x"}]}, 400),
    ("/score", {"items": [{"prompt": ["user", "x"], "response": "x"}]}, 400),
    ("/score", {"items": [{"prompt": "a", "response": {"x": 1}}]}, 400),
    ("/score", {"items": [{"prompt": "a", "response": [{"role": "user", "content": "x"}]}]}, 400),
    ("/score", {"items": [{"prompt": "a", "response": []}]}, 400),
    ("/score", {"items": [{**ITEM, "meta": []}]}, 400),
    ("/score", {"items": [{**ITEM, "reference": 3}]}, 400),
    ("/score", {"items": [{**ITEM, "grader": ""}]}, 400),
    ("/score", {"items": [{**ITEM, "promt": "a"}]}, 400),
    ("/score", {"items": [ITEM] * 10_000}, 413),  # 10k items
    ("/score", b"x" * (2 << 20), 413),  # a huge body
    ("/openrlhf", {"query": "x"}, 400),
    ("/openrlhf", {"query": [""]}, 400),
    ("/openrlhf", {"query": []}, 400),
    ("/openrlhf", {"query": [None]}, 400),
    ("/openrlhf", {"query": [["x"]]}, 400),
    ("/openrlhf", {"prompts": ["x"]}, 400),
    ("/openrlhf", {"query": ["a"], "prompts": ["a", "b"]}, 400),
    ("/openrlhf", {"query": ["a"], "labels": "x"}, 400),
    ("/openrlhf", {"query": ["a"], "qurey": ["a"]}, 400),
    ("/openrlhf", {"query": ["just text, no chat template"]}, 422),
    (
        "/openrlhf",
        {"query": ["<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nyo"], "labels": [{"ref": 1}]},
        400,
    ),
    ("/openrlhf", {"query": ["x"], "labels": [{"reference": 5}]}, 400),
    ("/openrlhf", {"query": ["x"] * 10_000}, 413),
    ("/get_reward", {"query": 5}, 400),
    ("/classify", {"model": "m"}, 400),
    ("/classify", {"input": 3}, 400),
    ("/classify", {"input": ""}, 400),
    ("/classify", {"input": []}, 400),
    ("/classify", {"input": [None, "x"]}, 400),
    ("/classify", {"input": "plain text, not a rendered conversation"}, 422),
    ("/classify", {"input": "x", "use_activation": "yes"}, 400),
    ("/classify", {"input": "x", "model": 7}, 400),
]


def test_fuzzed_requests_get_a_4xx_with_a_message(fuzz_server):
    srv = fuzz_server
    for path, body, status in BAD_REQUESTS:
        r = post(srv.url + path, body)
        shown = body if isinstance(body, dict) else body[:60]
        assert r.status_code == status, (path, shown, r.status_code, r.text[:300])
        e = r.json()
        assert e["code"] == status and e["message"] and e["problems"], (path, shown, e)
    # a query crafted for backtracking: thousands of turn markers (read in one pass per role sequence, so answered)
    head = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    unit = "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<|im_end|>\n"
    crafted = head + unit * 5000 + "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\nresponse<|im_end|>"
    r = post(srv.url + "/openrlhf", {"query": [crafted]})
    assert r.status_code == 200 and r.json()["rewards"][0] is not None
    assert httpx.get(srv.url + "/score").status_code == 405
    assert httpx.post(srv.url + "/nowhere", json={}).status_code == 404

    def chunks():  # a chunked body (no content-length) past the limit
        for _ in range(40):
            yield b"x" * (64 << 10)

    r = httpx.post(srv.url + "/score", content=chunks(), timeout=60)
    assert r.status_code == 413 and "body" in r.json()["message"]

    def raw(data: bytes) -> str:
        """What the server answers to bytes sent on a socket (until it closes, or 3 s pass)."""
        out = b""
        with socket.create_connection((srv.host, srv.port), timeout=10) as s:
            s.sendall(data)
            s.settimeout(3)
            try:
                while chunk := s.recv(65536):
                    out += chunk
                    head, _, body = out.partition(b"\r\n\r\n")
                    length = [
                        int(x.split(b":")[1]) for x in head.split(b"\r\n") if x.lower().startswith(b"content-length")
                    ]
                    if length and len(body) >= length[0]:
                        break
            except TimeoutError:
                pass
        return out.decode("latin-1")

    assert raw(b"POST /score HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n{}").startswith("HTTP/1.1 400")
    assert raw(b"POST /score HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n{}").startswith("HTTP/1.1 400")
    # too slow a body: 408
    reply = raw(b"POST /score HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
    assert reply.startswith("HTTP/1.1 408") and "body-timeout-s" in reply
    reply = raw(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03GARBAGE\r\n\r\n")  # not HTTP at all (a TLS hello)
    assert reply == "" or reply.startswith("HTTP/1.1 400")

    assert httpx.get(srv.url + "/health").json() == {"status": "ok"}
    assert info(srv.url)["counters"]["bad_requests"]["/score"] >= 30


def test_random_requests_never_crash_the_server(fuzz_server, tok):
    """Random requests shaped like each contract (hypothesis): well-formed ones with random contents (OpenRLHF
    queries and /classify texts rendered from random conversations, so the template parse meets random text),
    malformed ones, and arbitrary JSON: a 200 or a 4xx with a message, never a 5xx."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    srv = fuzz_server
    text = st.text(max_size=30) | st.sampled_from(["", "<|im_start|>", "<|im_end|>\n", "assistant\n", "🚀" * 5])
    some = st.text(min_size=1, max_size=30) | st.sampled_from(["<|im_start|>user\n", "<|im_end|>", " \n "])
    leaf = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | text
    anything = st.recursive(
        leaf, lambda c: st.lists(c, max_size=4) | st.dictionaries(text, c, max_size=4), max_leaves=10
    )
    role = st.sampled_from(["user", "system", "assistant"])
    message = st.fixed_dictionaries({"role": role, "content": text})
    chat = st.builds(lambda head, rest: [*head, {"role": "user", "content": rest}], st.lists(message, max_size=3), some)
    good_item = st.fixed_dictionaries({"prompt": some | chat, "response": text}, optional={"reference": some})
    bad_item = st.fixed_dictionaries(
        {"prompt": text | st.lists(message | anything, max_size=3) | anything, "response": text | anything},
        optional={"reference": text | anything, "meta": anything, "grader": text | anything},
    )

    def rendered(conv: list[dict], response: str, cut: int) -> dict:
        try:
            query, prompt_text = openrlhf_query(tok, conv, response, cut=cut)
        except Exception:  # the template refuses this conversation (e.g. a system turn after the first)
            return {"query": [response or "x"]}
        return {"query": [query], "prompts": [prompt_text], "labels": [""]}

    def classify_text(conv: list[dict], response: str) -> dict:
        try:
            return {"model": "m", "input": verl_rm_prompt(tok, tok, conv, tok(response)["input_ids"])}
        except Exception:
            return {"input": response or "x"}

    bodies = st.one_of(
        st.tuples(st.just("/score"), st.fixed_dictionaries({"items": st.lists(good_item, min_size=1, max_size=4)})),
        st.tuples(st.just("/score"), st.fixed_dictionaries({"items": st.lists(good_item | bad_item, max_size=4)})),
        st.tuples(st.just("/openrlhf"), st.builds(rendered, chat, text, st.integers(0, 3))),
        st.tuples(
            st.just("/openrlhf"),
            st.fixed_dictionaries(
                {"query": st.lists(text, max_size=3) | anything},
                optional={"prompts": st.lists(text, max_size=3) | anything, "labels": anything},
            ),
        ),
        st.tuples(st.just("/classify"), st.builds(classify_text, chat, text)),
        st.tuples(
            st.just("/classify"),
            st.fixed_dictionaries(
                {"input": text | st.lists(text, max_size=3) | anything},
                optional={"model": anything, "use_activation": anything},
            ),
        ),
        st.tuples(st.sampled_from(["/score", "/openrlhf", "/classify"]), anything),
    )
    seen: dict[int, int] = {}
    client = httpx.Client(timeout=60)

    @settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(bodies)
    def check(case):
        path, body = case
        r = client.post(srv.url + path, content=json.dumps(body).encode())
        seen[r.status_code] = seen.get(r.status_code, 0) + 1
        assert r.status_code in (200, 400, 413, 422), (path, body, r.status_code, r.text[:300])
        if r.status_code != 200:
            assert r.json()["message"], (path, body)

    check()
    client.close()
    assert seen.get(200, 0) > 30 and seen.get(400, 0) > 30, seen  # both paths really taken
    assert httpx.get(srv.url + "/health").status_code == 200


def test_graceful_shutdown_finishes_the_request_in_flight(rm_dir):
    """Shutdown (uvicorn's should_exit, what SIGTERM sets) while a request waits in the batch window: it is
    scored and answered, then the server stops."""
    app, _ = build_app(settings(model=str(rm_dir), options={"dtype": "float32"}, batch_window_ms=1500))
    srv = BackgroundServer(app).__enter__()
    res = {}
    t = threading.Thread(target=lambda: res.update(r=post(srv.url + "/score", {"items": [ITEM]})))
    t.start()
    deadline = time.monotonic() + 20  # the request must be in the batch window before shutdown (a loaded CPU is slow)
    while app.state.batcher.stats["queued_requests"] < 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    srv.server.should_exit = True
    t.join(timeout=30)
    srv.thread.join(timeout=30)
    assert res["r"].status_code == 200 and res["r"].json()["rewards"][0] is not None
    assert not srv.thread.is_alive()
    with pytest.raises(httpx.ConnectError):
        httpx.get(srv.url + "/health", timeout=2)
    srv.sock.close()


# --- composition state ------------------------------------------------------------------------------------------


def test_composition_state_by_hand_updates_saves_and_restores(tmp_path, rm_dir, tiny_model_ref):
    """normalize: running + update: lagrangian (one constraint, multiplier init 0 so lambda = sigmoid(0) = 0.5),
    update_every 4: the first batch's rewards and the one multiplier step after it, worked out here; the state is
    written, a new server restores it and rewards the next batch with it."""
    from reward_models.scorers import load_scorer

    cfg = tmp_path / "reward.yaml"
    cfg.write_text(
        f"reward:\n  - {{type: scalar, model: {rm_dir}, name: rm, dtype: float32}}\n"
        f"  - {{type: implicit, model: '{tiny_model_ref}', reference_free: true, normalization: mean, name: lp, "
        "dtype: float32}\n"
        "composition:\n  normalize: running\n  update: lagrangian\n"
        "  constraints: [{component: lp, threshold: -1.0, type: ge}]\n"
        "  lagrangian: {init: 0.0, lr: 0.1, momentum: 0.1, max_grad_norm: 0.5}\n"
    )
    state = tmp_path / "state.pt"
    s = settings(reward_config=str(cfg), state=str(state), update_every=4)
    items = _items()
    first, second = items[:4], items[4:6]

    app, reward = build_app(s)
    with BackgroundServer(app) as srv:
        out = post(srv.url + "/score", {"items": [{"prompt": p, "response": r} for p, r in first]}).json()
        R1 = torch.tensor([out["components"]["rm"], out["components"]["lp"]]).T  # (4, 2)
        state_info = info(srv.url)["reward"]["composition"]
    lp = load_scorer(
        {
            "type": "implicit",
            "model": tiny_model_ref,
            "reference_free": True,
            "normalization": "mean",
            "dtype": "float32",
        }
    )
    assert close(
        R1[:, 1].tolist(), lp.score([_conv(p) for p, _ in first], [[Message("assistant", r)] for _, r in first])
    )
    mean, std = R1.double().mean(0), R1.double().std(0)
    X = (R1.double() - mean) / (std + 1e-6)
    assert close(out["rewards"], (0.5 * X[:, 0] + 0.5 * X[:, 1]).tolist())  # (N - λ) x_obj + λ x_lp, N = 1
    c = float(R1[:, 1].mean()) - (-1.0)  # the violation, in lp's own units
    grad = 0.25 * c  # d sigmoid(ξ)/dξ at 0, times c
    grad = grad * min(1.0, 0.5 / (abs(grad) + 1e-6))  # clip_grad_norm 0.5
    lam1 = 1 / (1 + math.exp(0.1 * grad))  # ξ1 = 0 - lr * grad (momentum's first step is the gradient)
    assert state_info["updates"] == 1 and state_info["window_items"] == 0 and state_info["served_items"] == 4
    assert state_info["multipliers"]["lp"] == pytest.approx(lam1, abs=1e-6)
    assert state_info["running"]["rm"]["count"] == 4
    assert state_info["last_update"]["violation/lp"] == pytest.approx(c, abs=1e-5)
    assert state.exists()

    app2, _ = build_app(s)  # a new server from the state file
    with BackgroundServer(app2) as srv:
        restored = info(srv.url)["reward"]["composition"]
        assert restored["multipliers"] == state_info["multipliers"] and restored["running"] == state_info["running"]
        out2 = post(srv.url + "/score", {"items": [{"prompt": p, "response": r} for p, r in second]}).json()
        R2 = torch.tensor([out2["components"]["rm"], out2["components"]["lp"]]).T
        after = info(srv.url)["reward"]["composition"]
    R = torch.cat([R1, R2]).double()
    X2 = (R2.double() - R.mean(0)) / (R.std(0) + 1e-6)
    assert close(out2["rewards"], ((1 - lam1) * X2[:, 0] + lam1 * X2[:, 1]).tolist())
    assert after["updates"] == 1 and after["window_items"] == 2 and after["served_items"] == 6


def test_served_hypervolume_and_maxmin_by_hand():
    """The reward per item and when the state moves, on tensors: hypervolume (point: rollout, apply: reward) observes
    each window's component means, its meta factor 0.5 + 1.5 tanh(HVC) scales the rewards after it; maxmin
    (per_sample) is min_k w_k r_k, null where a component it uses abstained."""
    from align.composition import CompositionSection
    from align.serve.state import ServedComposition, check_served_composition
    from prefalign.config import build
    from reward_models.composition import hv_meta

    sec = build(
        CompositionSection,
        {
            "update": "hypervolume",
            "weights": {"a": 0.5, "b": 0.5},
            "hypervolume": {"point": "rollout", "apply": "reward"},
        },
    )
    assert check_served_composition(sec) == []
    c = ServedComposition(sec, ["a", "b"], [1.0, 1.0], update_every=2)
    assert c.rewards(torch.tensor([[1.0, 1.0], [3.0, 3.0]])).tolist() == [1.0, 3.0]  # then the first point: (2, 2)
    assert c.updates == 1 and c.describe()["hypervolume"]["buffer"] == [[2.0, 2.0]]
    assert c.rewards(torch.tensor([[4.0, 4.0], [6.0, 6.0]])).tolist() == [4.0, 6.0]  # meta still 1; point (5, 5)
    meta = hv_meta(3.0 * 3.0)  # the box between the reference (2, 2) and (5, 5)
    assert c.rewards(torch.tensor([[1.0, 0.0]])).tolist() == pytest.approx([0.5 * meta])
    assert c.updates == 2 and c.describe()["window_items"] == 1

    sec = build(CompositionSection, {"aggregate": "maxmin", "weights": {"a": 1.0, "b": 2.0}})
    c = ServedComposition(sec, ["a", "b"], [1.0, 1.0])
    r = c.rewards(torch.tensor([[1.0, 3.0], [5.0, 1.0], [math.nan, 1.0]]))
    assert r[:2].tolist() == [1.0, 2.0] and math.isnan(r[2])

    bad = build(CompositionSection, {"update": "hypervolume", "weights": {"a": 0.5, "b": 0.5}})
    assert any("point: rollout" in p for p in check_served_composition(bad))
    assert any(
        "group_argmin" in p
        for p in check_served_composition(build(CompositionSection, {"aggregate": "maxmin", "maxmin": "group_argmin"}))
    )


def test_served_composition_refuses_what_needs_groups(tmp_path, capsys):
    from align.cli.main import main

    cfg = tmp_path / "reward.yaml"
    cfg.write_text(
        "reward:\n  - {type: grader, objective: correctness}\n  - {type: grader, objective: conciseness}\n"
        "composition:\n  aggregate: gdpo\n  update: gradient\n"
        "  weights: {gold_correctness: 0.5, gold_conciseness: 0.5}\n"
        "rewrd: 1\n"
    )
    assert main(["serve", "--reward-config", str(cfg), "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert "rewrd: unknown key (did you mean 'reward'?)" in err
    cfg.write_text(cfg.read_text().replace("rewrd: 1\n", ""))
    assert main(["serve", "--reward-config", str(cfg), "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert "composition.aggregate: gdpo needs a rollout's groups" in err
    assert "composition.update: gradient needs the policy's gradients" in err
    assert main(["serve", "--model", "x", "--host", "0.0.0.0", "--port", "0"]) == 2
    assert API_KEY_ENV in capsys.readouterr().err
    assert main(["serve", "--port", "0"]) == 2
    assert "say what to serve" in capsys.readouterr().err


# --- the engines' own client code ---------------------------------------------------------------------------------


def test_trl_grpo_trainer_runs_two_steps_against_a_live_server(tmp_path, rm_server, tiny_model_ref, tok):
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from prefalign.models.hub import load_causal_lm

    srv, _ = rm_server
    before = info(srv.url)["counters"]
    rows = [{"prompt": [{"role": "user", "content": f"Name a colour, number {i}."}]} for i in range(8)]
    trainer = GRPOTrainer(
        model=load_causal_lm(tiny_model_ref, dtype="float32"),
        reward_funcs=[TRLReward(srv.url), AsyncTRLReward(srv.url, name="align_reward_async")],
        args=GRPOConfig(
            output_dir=str(tmp_path / "grpo"),
            per_device_train_batch_size=4,
            num_generations=2,
            max_completion_length=8,
            learning_rate=1e-3,
            max_steps=2,
            beta=0.0,
            use_cpu=True,
            report_to="none",
            logging_steps=1,
            save_strategy="no",
            dataloader_num_workers=0,
            disable_tqdm=True,
            seed=0,
        ),
        train_dataset=Dataset.from_list(rows),
        processing_class=tok,
    )
    trainer.train()
    assert trainer.state.global_step == 2
    logs = [h for h in trainer.state.log_history if "rewards/align_reward/mean" in h]
    assert len(logs) == 2 and all(math.isfinite(h["rewards/align_reward/mean"]) for h in logs)
    assert all(h["rewards/align_reward/mean"] == h["rewards/align_reward_async/mean"] for h in logs)
    assert all(h["align_reward/abstained"] == 0 for h in logs)
    after = info(srv.url)["counters"]
    assert after["requests"]["/score"] - before["requests"].get("/score", 0) == 4  # 2 functions x 2 steps
    assert after["items"] - before["items"] == 16


class TinyEngine:
    """What OpenRLHF's executor calls on its vLLM engine (`generate(prompt_token_ids, sampling_params)`), run by the
    tiny policy with transformers (vLLM needs a GPU): sampled with a fixed seed, EOS forced as the last token so the
    response ends the way a generation stopped by EOS does."""

    def __init__(self, model, tok) -> None:
        self.model, self.tok = model, tok

    async def generate(self, prompt_token_ids, sampling_params, multi_modal_data=None):
        ids = torch.tensor([prompt_token_ids])
        torch.manual_seed(len(prompt_token_ids))
        with torch.no_grad():
            out = self.model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=sampling_params.max_tokens,
                do_sample=True,
                top_k=0,
                forced_eos_token_id=self.tok.eos_token_id,
                eos_token_id=self.tok.eos_token_id,
                pad_token_id=self.tok.eos_token_id,
            )
        new = out[0, len(prompt_token_ids) :].tolist()
        text = self.tok.decode(new, skip_special_tokens=True)
        done = SimpleNamespace(token_ids=new, text=text, finish_reason="stop", logprobs=None)
        return SimpleNamespace(outputs=[done])


def test_openrlhf_single_turn_executor_over_http_and_with_the_reward_func_file(
    tmp_path, rm_server, rm_dir, tok, tiny_model_ref, monkeypatch
):
    agent = pytest.importorskip(
        "openrlhf.utils.agent", reason="OpenRLHF's client: `make setup-dev` installs openrlhf==0.11.0 --no-deps"
    )
    import align.serve.openrlhf_reward_func as reward_file
    from prefalign.models.hub import load_causal_lm

    srv, _ = rm_server
    engine = TinyEngine(load_causal_lm(tiny_model_ref, dtype="float32").eval(), tok)
    params = SimpleNamespace(max_tokens=6, logprobs=None)
    prompts = PROMPTS[:3]
    monkeypatch.setenv("ALIGN_SERVE_URL", srv.url)
    outputs = {}
    for how, url in (("http", srv.url + "/openrlhf"), ("file", reward_file.__file__)):
        executor = agent.SingleTurnAgentExecutor(remote_rm_url=url)
        outputs[how] = [
            asyncio.run(
                executor.execute(
                    tok.apply_chat_template(p, tokenize=False, add_generation_prompt=True), "", params, 64, tok, engine
                )
            )
            for p in prompts
        ]
    items = []
    for p, o in zip(prompts, outputs["http"], strict=True):
        (a, b), ids = o["action_ranges"][0], o["observation_tokens"]
        assert ids[b - 1] == tok.eos_token_id  # the generation ended with EOS, as the query sent
        items.append((p, tok.decode(ids[a : b - 1], skip_special_tokens=False)))
    expected = rm_score_raw(tmp_path, str(rm_dir), items)
    assert close([o["reward"][0] for o in outputs["http"]], expected)
    assert close([float(o["reward"][0]) for o in outputs["file"]], expected)  # tensors from the file
    assert all(0 < o["scores"][0] < 1 for o in outputs["http"])
    assert set(outputs["http"][0]["extra_logs"]) == {"scalar"}


def test_verl_reward_loop_client_from_source(tmp_path, rm_server, rm_dir, tok):
    """verl's discriminative-RM request (POST /classify, data[-1].probs[-1]) and its custom-function path
    (pkg://align.serve.verl_reward, sync and async) as verl v0.9.0 runs them (see the functions at the top)."""
    srv, _ = rm_server
    address = f"{srv.host}:{srv.port}"
    items = _items()[:4]
    expected = rm_score_raw(tmp_path, str(rm_dir), items)

    async def run_all(name: str) -> list[float]:
        fn = (
            None
            if name == "classify"
            else verl_custom_reward_fn("pkg://align.serve.verl_reward", name, {"url": srv.url})
        )
        out = []
        for p, r in items:
            response_ids = tok(r, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
            if name == "classify":
                res = await verl_compute_score_disrm(address, str(rm_dir), verl_rm_prompt(tok, tok, p, response_ids))
            else:
                res = await verl_naive_run_single(fn, tok, response_ids, "suite", None, {"prompt": p})
                assert res["reward_extra_info"]["abstained"] == 0.0
                assert res["reward_extra_info"]["component/scalar"] == res["reward_score"]
            out.append(res["reward_score"])
        return out

    assert close(asyncio.run(run_all("classify")), expected)
    for name in ("compute_score", "compute_score_async"):
        assert close(asyncio.run(run_all(name)), expected), name
    with pytest.raises(ValueError, match="extra_info"):
        verl_compute_score("suite", "4", None, {}, url=srv.url)


def test_adapters_and_settings_import_without_torch_or_the_server():
    code = (
        "import sys\nimport align.serve.adapters, align.serve.settings, align.serve.verl_reward, align.cli.serve\n"
        "print(','.join(sorted(m for m in ('torch', 'transformers', 'fastapi', 'uvicorn') if m in sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""


@pytest.mark.slow
def test_align_serve_cli_finishes_in_flight_requests_on_sigterm(tmp_path, rm_dir, tiny_model_ref):
    """The real command in its own process: SIGTERM while a request waits in the batch window; the request is
    answered, then the process ends, writing the composition state."""
    cfg = tmp_path / "reward.yaml"
    cfg.write_text(
        f"reward:\n  - {{type: scalar, model: {rm_dir}, dtype: float32}}\ncomposition:\n  normalize: running\n"
    )
    state = tmp_path / "state.pt"
    cmd = [
        sys.executable,
        "-m",
        "align.cli.main",
        "serve",
        "--reward-config",
        str(cfg),
        "--port",
        "0",
        "--batch-window-ms",
        "2000",
        "--state",
        str(state),
        "--log-level",
        "warning",
    ]
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        url = None
        deadline = time.time() + 120
        while url is None and time.time() < deadline:
            line = proc.stdout.readline()
            assert line, "align serve exited before serving"
            if " on http://" in line:
                url = line.split(" on ", 1)[1].split()[0]
        assert url is not None
        for _ in range(100):
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        res = {}
        t = threading.Thread(target=lambda: res.update(r=post(url + "/score", {"items": [ITEM]})))
        t.start()
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        t.join(timeout=60)
        # uvicorn re-raises the signal once its graceful shutdown is done, so the exit is SIGTERM's
        assert proc.wait(timeout=60) in (0, -signal.SIGTERM)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert res["r"].status_code == 200 and res["r"].json()["rewards"] == [0.0]  # one item normalised: (r - r) / std
    assert state.exists()


def test_a_client_of_a_server_that_never_answers_fails_within_its_timeout():
    """A reward server that accepts the connection and never answers: the client raises within its timeout and
    retries (not forever), naming the endpoint and the settings."""
    import socket
    import threading
    import time

    from align.serve.adapters import RemoteReward, RewardRequestError

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    accepted: list = []
    threading.Thread(target=lambda: [accepted.append(server.accept()) for _ in range(4)], daemon=True).start()
    url = f"http://127.0.0.1:{server.getsockname()[1]}/score"
    t0 = time.monotonic()
    with pytest.raises(RewardRequestError) as e:
        RemoteReward(url, timeout=0.5, retries=1).score([{"prompt": "q", "response": "a"}])
    assert time.monotonic() - t0 < 10  # two attempts of 0.5 s and a 1 s back-off
    assert url in str(e.value) and "0.5 s each" in str(e.value) and "timeout" in str(e.value)
    server.close()
