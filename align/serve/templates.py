"""Chat-templated text back into messages: the exact inverse of a chat template, for any model's template.

OpenRLHF sends `query = tokenizer.decode(prompt_ids + response_ids, skip_special_tokens=False)`, the whole rendered
conversation with its special tokens, and verl's discriminative-RM path sends `apply_chat_template(prompt +
[assistant response], tokenize=False)` with a leading BOS cut off. A reward model must see the conversation, not
that text (it re-renders with its own template and reads its reward where it was trained to), so the text is
parsed back into messages by the template itself, never by guessing at role markers:

1. Skeletons. The template renders a role sequence (`[user]`, `[system, user]`, `[user, assistant, user]`, ...) with
   a sentinel for each content (a private-use character pair no template alters). Everything around the sentinels
   is the template's own text: turn markers, special tokens, a default system prompt it adds, the generation
   prompt. The text is read against the skeleton in one left-to-right pass: each content runs to the first
   occurrence of the template text that follows it (the last one to the template text ending the text), and a
   content the template writes twice must repeat; linear in the text, so no crafted text can make it explode. Role
   sequences are tried with 1, 2, ... user turns, each without then with a leading system message, while the
   template's text for that many turns occurs, in order, in the text.
2. Verification. A parse counts only if rendering the parsed messages gives back the text, character for character.
   So a template that trims contents, injects a default system prompt or renders roles its own way parses exactly;
   one that drops or rewrites contents (nothing can recover them) is refused with a message, never guessed at.
   When several parses render the same text (a content holding turn markers as text), the one with the most turns
   wins: a tokenizer reads those markers as special tokens, so the policy saw turns; at equal turns, the one
   without a system message (the template's own default system prompt is not read as the caller's).
3. The query split (`split_query`). The prompt is `prompts[i]` when the query starts with it (OpenRLHF's normal
   case). When OpenRLHF cut the prompt's first tokens to fit `max_len`, the query starts with a suffix of
   `prompts[i]`: the cut is after the first generation prompt whose text so far ends `prompts[i]`. Without
   `prompts`, the cut is after the last generation prompt whose prefix parses as a prompt: the response is one
   generation, which stops at the first end-of-turn token, so it never holds a turn marker before its end.
4. The response's end. Generation stops at the end-of-turn token, so the response text ends with the text the
   template writes after an assistant's content (ChatML `<|im_end|>\\n`, Llama 3 `<|eot_id|>`), or its part up to
   trailing whitespace, or the EOS token; that one end marker is removed. A response cut off by the length limit
   ends with none and is kept whole. The reward model's template closes it again, as `align rm score` does.

A prompt ends with a user turn; roles are system, user and assistant (tool turns are not parsed).
"""

from __future__ import annotations

import re
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefalign.errors import UserError
from preference_data.records import Conversation, Message

_OPEN, _CLOSE = "\ue000", "\ue001"  # private-use code points: the sentinel around a content's index
_SENTINEL = re.compile(f"{_OPEN}(\\d+){_CLOSE}")
MAX_TURNS = 128  # user turns tried at most when parsing one text
_PARSE_CACHE = 4096  # parsed texts remembered (a GRPO group sends the same prompt G times)
_CUTS = 64  # generation prompts tried as the prompt's end in one query, at most


class TemplateMismatch(ValueError):
    """A text that is not a rendering of the template (the message says which text and what was tried)."""


@dataclass(frozen=True)
class _Skeleton:
    roles: tuple[str, ...]
    literals: tuple[str, ...]  # the template's own text around the contents, in order (one more than slots)
    slots: tuple[int, ...]  # the message whose content fills each gap between two literals


def _sentinel(i: int) -> str:
    return f"{_OPEN}{i}{_CLOSE}"


class ChatTemplate:
    """A chat template that renders messages to text and parses its renderings back (module docstring)."""

    def __init__(self, tokenizer: Any, template: str | None = None, source: str = "") -> None:
        self.tokenizer = tokenizer
        self.template = template or getattr(tokenizer, "chat_template", None)
        if not self.template:
            raise UserError(
                f"{source or 'the tokenizer'} has no chat template; give --template a model with one, a .jinja "
                "file, or 'plain' (the prompt text is one user message)"
            )
        self.source = source
        self.bos = getattr(tokenizer, "bos_token", None) or ""
        self.eos = getattr(tokenizer, "eos_token", None) or ""
        self._skeletons: dict[tuple[tuple[str, ...], bool], _Skeleton | None] = {}
        self._parsed: OrderedDict[tuple[str, bool], Conversation] = OrderedDict()
        self.generation_prompt = self._generation_prompt()
        self.footer = self._assistant_footer()

    # --- rendering -------------------------------------------------------------------------------------------

    def render(self, messages: list[dict[str, str]] | Conversation, generation_prompt: bool) -> str:
        from jinja2.exceptions import TemplateError  # lazy: jinja2, only when a template renders

        dicts = [m if isinstance(m, dict) else m.to_dict() for m in messages]
        try:
            out = self.tokenizer.apply_chat_template(
                dicts, tokenize=False, add_generation_prompt=generation_prompt, chat_template=self.template
            )
        except TemplateError as e:
            raise TemplateMismatch(f"the chat template rejects roles {[d['role'] for d in dicts]}: {e}") from e
        return str(out)

    def describe(self) -> dict[str, Any]:
        return {"source": self.source, "generation_prompt": self.generation_prompt, "end_of_turn": self.footer}

    def _skeleton(self, roles: tuple[str, ...], generation_prompt: bool) -> _Skeleton | None:
        key = (roles, generation_prompt)
        if key not in self._skeletons:
            self._skeletons[key] = self._build_skeleton(roles, generation_prompt)
        return self._skeletons[key]

    def _build_skeleton(self, roles: tuple[str, ...], generation_prompt: bool) -> _Skeleton | None:
        try:
            text = self.render([{"role": r, "content": _sentinel(i)} for i, r in enumerate(roles)], generation_prompt)
        except Exception:  # a template that refuses this role sequence (e.g. one without a system role)
            return None
        parts = _SENTINEL.split(text)  # [literal, index, literal, index, ..., literal]
        literals, slots = tuple(parts[0::2]), tuple(int(i) for i in parts[1::2])
        if set(slots) != set(range(len(roles))):
            return None  # the template drops a content: it cannot be read back
        return _Skeleton(roles, literals, slots)

    def _generation_prompt(self) -> str:
        """The text `add_generation_prompt` appends (ChatML: '<|im_start|>assistant\\n')."""
        msgs = [{"role": "user", "content": _sentinel(0)}]
        try:
            with_gp, without = self.render(msgs, True), self.render(msgs, False)
        except TemplateMismatch as e:
            raise UserError(f"{self.source}: the chat template cannot render a user turn ({e})") from e
        return with_gp[len(without) :] if with_gp.startswith(without) else ""

    def _assistant_footer(self) -> str:
        """The text the template writes after an assistant's content (ChatML: '<|im_end|>\\n')."""
        try:
            pair = [{"role": "user", "content": _sentinel(0)}, {"role": "assistant", "content": _sentinel(1)}]
            text = self.render(pair, False)
        except TemplateMismatch:
            return self.eos
        i = text.rfind(_sentinel(1))
        return text[i + len(_sentinel(1)) :] if i >= 0 else self.eos

    # --- parsing -----------------------------------------------------------------------------------------------

    @staticmethod
    def _role_sequences(turns: int, generation_prompt: bool) -> list[tuple[str, ...]]:
        """The role sequences with `turns` user turns: alternating, ending with a user turn (a prompt) or an
        assistant turn (a conversation), without and with a leading system message."""
        body = ["user", *(["assistant", "user"] * (turns - 1))] + ([] if generation_prompt else ["assistant"])
        return [(*body,), ("system", *body)]

    def _parse(self, text: str, generation_prompt: bool) -> Conversation:
        key = (text, generation_prompt)
        if key in self._parsed:
            self._parsed.move_to_end(key)
            return self._parsed[key]
        best: Conversation | None = None
        for turns in range(1, MAX_TURNS + 1):
            fits = False
            for roles in self._role_sequences(turns, generation_prompt):
                sk = self._skeleton(roles, generation_prompt)
                if sk is None or sum(map(len, sk.literals)) > len(text) or not _in_order(sk.literals, text):
                    continue
                fits = True
                conv = _read(sk, text)
                if conv is not None and self.render(conv, generation_prompt) == text:  # exact, or not a parse
                    best = conv
                    break  # at this many turns, no system message rather than one the template would add itself
            if not fits:
                break  # the template's text for this many turns is not in the text: more turns only add to it
        if best is not None:
            self._parsed[key] = best
            if len(self._parsed) > _PARSE_CACHE:
                self._parsed.popitem(last=False)
            return best
        what = "a prompt rendered with the generation prompt" if generation_prompt else "a rendered conversation"
        raise TemplateMismatch(
            f"not {what} of the chat template ({self.source}): {_clip(text)}; start the server with --template "
            "set to the model whose template rendered it, or with --template plain when the engine sends the raw "
            "prompt and response text (no chat template)"
        )

    def parse_prompt(self, text: str) -> Conversation:
        """Messages whose rendering with the generation prompt is exactly `text` (ends with a user turn)."""
        return self._parse(text, True)

    def parse_conversation(self, text: str) -> Conversation:
        """Messages whose rendering (no generation prompt) is exactly `text` (ends with an assistant turn); a text
        whose leading BOS was cut off (verl does so) is read with it put back."""
        try:
            return self._parse(text, False)
        except TemplateMismatch:
            if self.bos and not text.startswith(self.bos):
                return self._parse(self.bos + text, False)
            raise

    def strip_end(self, response: str) -> str:
        """The response without the one end-of-turn marker generation stopped at (module docstring, step 4)."""
        for end in dict.fromkeys((self.footer, self.footer.rstrip(), self.eos)):
            if end and response.endswith(end):
                return response[: -len(end)]
        return response

    def split_query(self, query: str, prompt_text: str | None = None) -> tuple[Conversation, str]:
        """(prompt messages, response text) of an OpenRLHF query (module docstring, step 3)."""
        if prompt_text:
            if query.startswith(prompt_text):
                return self.parse_prompt(prompt_text), self.strip_end(query[len(prompt_text) :])
            cut = self._cut_after_suffix(query, prompt_text)
            if cut is not None:
                return self.parse_prompt(prompt_text), self.strip_end(query[cut:])
        gp = self.generation_prompt
        cuts = [m.end() for m in re.finditer(re.escape(gp), query)] if gp else []
        for cut in reversed(cuts[-_CUTS:]):
            try:
                return self.parse_prompt(query[:cut]), self.strip_end(query[cut:])
            except TemplateMismatch:
                continue
        raise TemplateMismatch(
            f"no prompt of the chat template ({self.source}) starts this query: {_clip(query)}"
            + ("" if not prompt_text else "; its prompt is not a prefix either")
            + "; start the server with --template set to the model whose template rendered it, or with "
            "--template plain when the engine sends the raw prompt and response text (no chat template)"
        )

    def _cut_after_suffix(self, query: str, prompt_text: str) -> int | None:
        """Where the response starts in a query whose prompt lost its first tokens: after the first generation
        prompt at which the query so far is a suffix of `prompt_text`."""
        gp = self.generation_prompt
        if not gp or not prompt_text.endswith(gp):
            return None
        for k, m in enumerate(re.finditer(re.escape(gp), query)):
            if k == _CUTS:
                break
            if prompt_text.endswith(query[: m.end()]):
                return m.end()
        return None


class PlainTemplate:
    """`--template plain`: the prompt text is one user message as it is; the response is what follows it."""

    source = "plain"
    generation_prompt = ""

    def describe(self) -> dict[str, Any]:
        return {"source": "plain"}

    def parse_prompt(self, text: str) -> Conversation:
        return [Message("user", text)]

    def parse_conversation(self, text: str) -> Conversation:
        raise TemplateMismatch("--template plain cannot read a rendered conversation; give the RM's template")

    def split_query(self, query: str, prompt_text: str | None = None) -> tuple[Conversation, str]:
        if not prompt_text or not query.startswith(prompt_text):
            raise TemplateMismatch("--template plain needs `prompts` with the query starting with its prompt")
        return [Message("user", prompt_text)], query[len(prompt_text) :]


def load_template(ref: str, fallback_tokenizer: Any = None) -> ChatTemplate | PlainTemplate:
    """`--template`: 'plain', a .jinja file (rendered with `fallback_tokenizer`'s special tokens), or a model."""
    if ref == "plain":
        return PlainTemplate()
    if ref.endswith(".jinja"):
        path = Path(ref)
        if not path.is_file():
            raise UserError(f"--template {ref}: no such file")
        if fallback_tokenizer is None:
            raise UserError(f"--template {ref}: a .jinja file needs a served model's tokenizer for its special tokens")
        return ChatTemplate(fallback_tokenizer, path.read_text(encoding="utf-8"), source=ref)
    from prefalign.models.hub import load_tokenizer  # lazy: transformers

    return ChatTemplate(load_tokenizer(ref), source=ref)


def _read(sk: _Skeleton, text: str) -> Conversation | None:
    """The messages of `text` under one skeleton, in one left-to-right pass: each content runs to the first
    occurrence of the template text after it, the last one to the template text that ends `text`. Linear in the
    text, whatever it holds (no backtracking a crafted text could make explode); a content the template writes twice
    must repeat exactly. None when the text does not fit the skeleton."""
    first, last = sk.literals[0], sk.literals[-1]
    if not text.startswith(first) or not text.endswith(last):
        return None
    pos, stop = len(first), len(text) - len(last)
    contents: dict[int, str] = {}
    for k, slot in enumerate(sk.slots):
        nxt = sk.literals[k + 1]
        end = stop if k == len(sk.slots) - 1 else text.find(nxt, pos, stop)
        if end < pos:
            return None
        value = text[pos:end]
        if contents.setdefault(slot, value) != value:
            return None
        pos = end + len(nxt)
    if pos != len(text):
        return None
    return [Message(sk.roles[i], contents[i]) for i in range(len(sk.roles))]


def _in_order(literals: tuple[str, ...], text: str) -> bool:
    """Whether every literal occurs in `text` after the previous one (a cheap test before the regular expression)."""
    at = 0
    for lit in literals:
        if not lit:
            continue
        at = text.find(lit, at)
        if at < 0:
            return False
        at += len(lit)
    return True


def _clip(text: str, n: int = 120) -> str:
    return repr(text if len(text) <= n else text[: n // 2] + " ... " + text[-n // 2 :])


__all__ = ["MAX_TURNS", "ChatTemplate", "PlainTemplate", "TemplateMismatch", "load_template"]
