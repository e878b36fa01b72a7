"""The judge of an `align eval policy --bench` run: a scorer from the scorer table, or a chat model judging with the
benchmark's own prompts (`--judge-prompts`): FastChat's for MT-Bench (`mtbench_judge`), Arena-Hard's judge config
(`arenahard_judge`, v0.1 or v2.0), AlpacaEval's annotator prompt (`alpacaeval_judge`)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prefalign.errors import UserError
from prefalign.models.hub import load_tokenizer
from reward_models.scorers import load_scorer, scorer_spec

from .alpacaeval_judge import TOP_LOGPROBS, AlpacaEvalJudge, read_annotator
from .arenahard_judge import ArenaHardJudge, read_judge_config
from .mtbench_judge import MAX_NEW_TOKENS, FastChatJudge, read_answers, read_judge_prompts

if TYPE_CHECKING:
    from .policy_bench import PolicyBenchSettings


def load_judge(s: PolicyBenchSettings) -> Any | None:
    """The judge scorer of a run: --judge SPEC with --option KEY=VALUE, built through the scorer table (a reward
    model is scalar); None for 'gold' (no judge model)."""
    if s.judge == "gold":
        return None
    spec = scorer_spec(s.judge, options=s.options, flag="--judge")
    if s.judge_prompts is not None:
        return CHAT_JUDGES[s.bench or "mtbench"](s, spec)
    return load_scorer(spec)


def judge_replies(s: PolicyBenchSettings, model: str, max_new_tokens: int) -> Callable[[list[Any]], list[str]]:
    """--judge's chat model replying greedily to conversations, at most `max_new_tokens` tokens each; a prompt that
    does not fit its context beside them is an error (the benchmarks' reference code never cuts a judge's prompt)."""
    # the generation engine imports torch: loaded when a judge is, not when the CLI builds its parser
    from prefalign.generation.policy import generate, load_policy

    tok = load_tokenizer(model)
    chat = load_policy(model, s.dtype)
    context = int(getattr(chat.config, "max_position_embeddings", 0) or 8192)

    def replies(convs: list[Any]) -> list[str]:
        room = context - max_new_tokens
        lengths = [len(tok.apply_chat_template(c, tokenize=True, add_generation_prompt=True)) for c in convs]
        over = [k for k, length in enumerate(lengths) if length > room]
        if over:
            raise UserError(
                f"{len(over)} of {len(convs)} judge prompts are longer than the {room} tokens {model}'s context "
                f"({context}) leaves beside --judge-max-new-tokens {max_new_tokens} (the longest {max(lengths)}); "
                "lower --judge-max-new-tokens or --max-new-tokens, or judge with a model of a longer context"
            )
        return generate(chat, tok, convs, max_new_tokens, s.batch_size, 0.0, context, progress=True)

    return replies


def judge_model(s: PolicyBenchSettings, spec: dict[str, Any]) -> str:
    """The chat model --judge names where it writes judgments with a benchmark's own prompts."""
    model = spec.get("model")
    if spec.get("type") != "judge" or not isinstance(model, str):
        raise UserError(
            f"--judge {s.judge!r}: with --judge-prompts, --judge names the judge's chat model (judge:MODEL), which "
            "writes each judgment"
        )
    return model


def given_files(given: dict[str, str | None]) -> dict[str, str]:
    """The files a judge was given -> their path and the first 16 hex digits of their SHA-256."""
    return {k: f"{v} sha256:{hashlib.sha256(Path(v).read_bytes()).hexdigest()[:16]}" for k, v in given.items() if v}


def fastchat_judge(s: PolicyBenchSettings, spec: dict[str, Any]) -> FastChatJudge:
    """--judge's chat model grading with FastChat's prompts (--judge-prompts), its replies decoded greedily."""
    model = judge_model(s, spec)
    prompts = read_judge_prompts(str(s.judge_prompts), s.judge_mode)
    references = read_answers(s.judge_reference) if s.judge_reference is not None else None
    baseline = read_answers(s.judge_baseline, "--judge-baseline") if s.judge_baseline is not None else None
    n = s.judge_max_new_tokens or MAX_NEW_TOKENS
    files = given_files({"prompts": s.judge_prompts, "reference": s.judge_reference, "baseline": s.judge_baseline})
    name = Path(s.judge_baseline).stem if s.judge_baseline is not None else None  # FastChat: the file's name
    replies = judge_replies(s, model, n)
    return FastChatJudge(model, prompts, references, replies, n, s.judge_mode, name, baseline, files)


def alpaca_judge(s: PolicyBenchSettings, spec: dict[str, Any]) -> AlpacaEvalJudge:
    """--judge's chat model judging AlpacaEval's pairs as the annotator of --judge-prompts does: its written reply
    (greedy, the config's max_tokens unless --judge-max-new-tokens) for a parser that reads text, its first token's
    five most likely tokens (fp32) for `logprob_parser`."""
    model = judge_model(s, spec)
    read = read_annotator(str(s.judge_prompts))
    # the files with their SHA-256; the tokens a reply may take, --judge-max-new-tokens over the config's
    annotator = replace(read, files=given_files(dict(read.files)), max_tokens=s.judge_max_new_tokens or read.max_tokens)
    if annotator.reads == "text":
        return AlpacaEvalJudge(model, annotator, judge_replies(s, model, annotator.max_tokens))
    # torch and the model: loaded when a judge is, not when the CLI builds its parser
    import torch

    from prefalign.generation.policy import load_policy

    tok = load_tokenizer(model)
    chat = load_policy(model, s.dtype)
    device = next(chat.parameters()).device

    def top_logprobs(convs: list[list[dict[str, str]]]) -> list[list[tuple[str, float]]]:
        out = []
        for conv in convs:
            inputs = tok.apply_chat_template(conv, add_generation_prompt=True, return_tensors="pt", return_dict=True)
            with torch.no_grad():
                logits = chat(**{k: v.to(device) for k, v in inputs.items()}).logits[0, -1].float()
            values, ids = torch.log_softmax(logits, dim=-1).topk(TOP_LOGPROBS)
            out.append([(tok.decode([int(i)]), float(v)) for v, i in zip(values, ids, strict=True)])
        return out

    return AlpacaEvalJudge(model, annotator, top_logprobs)


def arena_judge(s: PolicyBenchSettings, spec: dict[str, Any]) -> ArenaHardJudge:
    """--judge's chat model judging Arena-Hard's games with its judge config (--judge-prompts; v2.0's with its
    per-category settings, --judge-settings), greedily."""
    model = judge_model(s, spec)
    config = read_judge_config(str(s.judge_prompts), s.judge_settings)
    n = s.judge_max_new_tokens or config.max_tokens or MAX_NEW_TOKENS
    files = given_files({"prompts": s.judge_prompts, "settings": s.judge_settings})
    return ArenaHardJudge(model, config, judge_replies(s, model, n), n, files)


CHAT_JUDGES: dict[str, Callable[[PolicyBenchSettings, dict[str, Any]], Any]] = {
    "mtbench": fastchat_judge,
    "arenahard": arena_judge,
    "alpacaeval": alpaca_judge,
}
"""--bench -> the chat-model judge its own prompts (`--judge-prompts`) build."""


__all__ = ["CHAT_JUDGES", "judge_replies", "load_judge"]
