"""Prompts -> token ids, exactly as the rest of the toolkit renders a prompt for generation.

A conversation (a list of `{"role", "content"}` dicts, or of objects with `.role` / `.content`) is rendered
with the tokenizer's chat template and the generation prompt appended (`<|im_start|>assistant\\n` for
ChatML), then tokenized with `add_special_tokens=False`: the rendered text already holds every special
token the template wants, so no second BOS is added. A rendering that starts with two BOS tokens loses the
repeats. A tokenizer without a chat template gets the plain fallback

    [BOS]System: {system}\\n\\nUser: {question}\\n\\nAssistant:

with BOS written only when the tokenizer adds one to plain text by default. These are the ids stage 1 prompts
generation with (`preference_data.tokenize.tokenize_prompts` calls this function) and the prompt part of its
training pairs (a test holds the two equal), so a policy is prompted as it was trained. A prompt given as a list
of ints is taken as token ids as they are.

Prompts longer than `max_prompt_length` keep their last tokens (the latest turn and the generation prompt).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from jinja2.exceptions import TemplateError

from prefalign.errors import UserError

Message = Any  # a {"role", "content"} dict or an object with .role and .content
Prompt = Sequence[Message] | Sequence[int]

_PLAIN_GENERATION_PROMPT = "Assistant:"
_ENCODE_BATCH = 512


def _as_dicts(conv: Sequence[Message], row: int) -> list[dict[str, str]]:
    out = []
    for m in conv:
        if isinstance(m, dict):
            if "role" not in m or "content" not in m:
                raise UserError(f"prompt {row}: a message needs 'role' and 'content' keys, got keys {sorted(m)}")
            out.append({"role": str(m["role"]), "content": str(m["content"])})
        elif hasattr(m, "role") and hasattr(m, "content"):
            out.append({"role": str(m.role), "content": str(m.content)})
        else:
            raise UserError(
                f"prompt {row}: a message must be a {{'role', 'content'}} dict or have .role and "
                f".content, got {type(m).__name__}; pass a conversation or a list of token ids"
            )
    return out


def _is_ids(prompt: Any) -> bool:
    return (
        isinstance(prompt, Sequence)
        and not isinstance(prompt, str)
        and len(prompt) > 0
        and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt)
    )


def render_prompts(
    tokenizer: Any,
    prompts: Sequence[Prompt],
    max_prompt_length: int | None = None,
    on_repeated_bos: Callable[[int], None] | None = None,
) -> list[list[int]]:
    """B prompts -> B token id lists (each (P,), ending with the generation prompt), in input order.

    `on_repeated_bos(row)` is called for each row whose rendering started with repeated BOS tokens (dropped)."""
    if isinstance(prompts, str) or not isinstance(prompts, Sequence):
        raise UserError(f"prompts must be a list of conversations (or of token id lists), got {type(prompts).__name__}")
    if max_prompt_length is not None and (
        isinstance(max_prompt_length, bool) or not isinstance(max_prompt_length, int) or max_prompt_length < 1
    ):
        raise UserError(f"max_prompt_length must be a positive integer or None, got {max_prompt_length!r}")
    templated = bool(getattr(tokenizer, "chat_template", None))
    plain_bos = ""
    bos = tokenizer.bos_token_id
    if not templated and bos is not None:
        first = tokenizer("a")["input_ids"]
        if first and first[0] == bos and tokenizer.bos_token:
            plain_bos = tokenizer.bos_token
    texts: dict[int, str] = {}
    ids: list[list[int] | None] = []
    for row, p in enumerate(prompts):
        if _is_ids(p):
            ids.append([int(t) for t in p])
            continue
        if isinstance(p, str) or not isinstance(p, Sequence) or len(p) == 0:
            raise UserError(
                f"prompt {row} is {type(p).__name__} {str(p)[:40]!r}; a prompt is a non-empty list of "
                "messages ({'role': 'user', 'content': ...}) or of token ids"
            )
        conv = _as_dicts(p, row)
        if templated:
            try:
                texts[row] = tokenizer.apply_chat_template(conv, tokenize=False, add_generation_prompt=True)
            except TemplateError as e:
                raise UserError(
                    f"prompt {row}: the chat template rejected this conversation ({e}); roles: "
                    f"{[m['role'] for m in conv]}"
                ) from e
        else:
            head = "\n\n".join(f"{m['role'].capitalize()}: {m['content']}" for m in conv)
            texts[row] = plain_bos + (head + "\n\n" if head else "") + _PLAIN_GENERATION_PROMPT
        ids.append(None)
    rows = list(texts)
    unique = list(dict.fromkeys(texts[r] for r in rows))
    encoded: dict[str, list[int]] = {}
    for i in range(0, len(unique), _ENCODE_BATCH):
        chunk = unique[i : i + _ENCODE_BATCH]
        encoded.update(zip(chunk, tokenizer(chunk, add_special_tokens=False)["input_ids"], strict=True))
    for r in rows:
        p_ids = list(encoded[texts[r]])
        if bos is not None and len(p_ids) >= 2 and p_ids[0] == bos and p_ids[1] == bos:
            while len(p_ids) >= 2 and p_ids[1] == bos:
                del p_ids[1]
            if on_repeated_bos is not None:
                on_repeated_bos(r)
        ids[r] = p_ids
    out = [x for x in ids if x is not None]
    if max_prompt_length is not None:
        out = [x[len(x) - max_prompt_length :] if len(x) > max_prompt_length else x for x in out]
    return out
