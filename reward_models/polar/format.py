"""POLAR's reward-model input: reference and candidate in one sequence, the reward read at a closing token.

The layout follows InternLM/POLAR `src/polar/reward_func.py::RewardModelClient._encode` and xtuner
`preference_dataset.py::tokenize_ref` (reference `reward-models.md` §3.2):

    p        = "\\n".join(m.content for m in prompt)        # role tags dropped, contents joined
    r1, r2   = the same for the reference and the candidate
    ref_cat  = p + "\\n" + r1      (wrapper "sft")    or  p + r1   (wrapper "pretrain")
    cand_cat = p + "\\n" + r2      (wrapper "sft")    or  p + r2   (wrapper "pretrain")
    text     = ref_cat + REWARD_TOKEN + cand_cat + END_TOKEN

The scalar is the score head's output at END_TOKEN, the last token of the sequence.

Truncation, as POLAR does it: r1 and r2 are tokenized on their own; a candidate longer than
`max_response_length` tokens is cut on `response_cut_side` ("right": its first tokens are kept, POLAR's
client default); the prompt keeps its LAST (max_length - 4 - len(r1) - len(r2)) // 2 tokens (4 = the two
special tokens and two newlines). The pieces are decoded and the text above is built and tokenized again, so
the ids are exactly `tokenizer(text)`. A reference longer than `max_response_length` is NOT cut: scoring
against part of a reference would silently change what "same policy" means, so such an item is skipped
and counted (`too_long_reference`), by the trainer and by the scorer (which scores it NaN).

Special tokens. POLAR's InternLM2 vocabulary has `<|reward|>` and uses a spare token `[UNUSED_TOKEN_130]` as the
end token. SmolLM2's tokenizer has neither, so two tokens are added (`add_polar_tokens`) and the embeddings
resized: REWARD_TOKEN `<|reward|>` separates reference and candidate, END_TOKEN `<|reward_end|>` closes the
candidate and carries the reward. The end token is its own token rather than `<|reward|>` again or EOS
`<|im_end|>`: SmolLM2's pad token is its EOS, and transformers' sequence-classification pooling reads the
last token that is not pad, so a sequence ending in EOS would be read one token early; a dedicated token that
appears nowhere else is what plain `AutoModelForSequenceClassification` reads too (the saved tokenizer pads
with `<|endoftext|>`), and using `<|reward|>` twice would make the separator and the read-out position share
one embedding. Both tokens are saved with the tokenizer and reload with the model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from prefalign.config import option
from prefalign.errors import UserError
from preference_data.records import Conversation

REWARD_TOKEN = "<|reward|>"
END_TOKEN = "<|reward_end|>"
POLAR_FILE = "polar.json"
"""Saved beside a POLAR model: the tokens and the `InputSection` it was trained with (the scorer reads it back)."""
SPECIAL_OVERHEAD = 4  # the reward token, the end token and the two "\n" of the sft wrapper (POLAR's `max_length - 4`)

Wrapper = Literal["sft", "pretrain"]
CutSide = Literal["right", "left"]


@dataclass
class InputSection:
    """How a (prompt, reference, candidate) becomes one sequence (`reward_models/polar/format.py`)."""

    max_length: int = option(1024, "longest whole sequence in tokens (both prompt copies, reference, candidate)")
    max_response_length: int = option(
        256,
        "longest reference or candidate in tokens: a longer candidate is cut on response_cut_side, a longer "
        "reference is skipped and counted (too_long_reference)",
    )
    response_cut_side: CutSide = option(
        "right", "where a long candidate is cut: right keeps its first tokens (POLAR's client default), left its last"
    )
    wrapper: Wrapper = option(
        "sft",
        "sft: a newline between prompt and response (chat data); pretrain: no newline (POLAR's wrapper for "
        "pre-training corpora)",
    )

    def check(self) -> list[str]:
        problems = []
        if self.max_response_length < 1:
            problems.append(f"max_response_length: must be positive, got {self.max_response_length}")
        need = 2 * self.max_response_length + SPECIAL_OVERHEAD + 2
        if self.max_length < need:
            problems.append(
                f"max_length: {self.max_length} leaves no room for the prompt next to two responses of "
                f"max_response_length {self.max_response_length}; use max_length >= {need} or a smaller "
                "max_response_length"
            )
        return problems


def flatten(conv: Conversation) -> str:
    """A conversation as POLAR writes it: message contents joined by "\\n", role tags dropped."""
    return "\n".join(m.content for m in conv)


def polar_text(prompt: str, reference: str, candidate: str, wrapper: Wrapper = "sft") -> str:
    """The documented input text for already-flattened pieces (no truncation)."""
    sep = "" if wrapper == "pretrain" else "\n"
    return f"{prompt}{sep}{reference}{REWARD_TOKEN}{prompt}{sep}{candidate}{END_TOKEN}"


def add_polar_tokens(tokenizer: Any, model: Any | None = None) -> int:
    """Add REWARD_TOKEN and END_TOKEN to `tokenizer` as special tokens (a no-op when present) and resize
    `model`'s embeddings to the tokenizer; returns how many tokens were added."""
    missing = [t for t in (REWARD_TOKEN, END_TOKEN) if t not in tokenizer.get_vocab()]
    added = tokenizer.add_special_tokens({"additional_special_tokens": missing}) if missing else 0
    if model is not None and model.get_input_embeddings().weight.shape[0] < len(tokenizer):
        model.resize_token_embeddings(len(tokenizer))
    return added


def polar_token_ids(tokenizer: Any) -> tuple[int, int]:
    """(reward token id, end token id); a tokenizer without them is a model that was not trained as POLAR."""
    vocab = tokenizer.get_vocab()
    missing = [t for t in (REWARD_TOKEN, END_TOKEN) if t not in vocab]
    if missing:
        raise UserError(
            f"the tokenizer has no {' or '.join(missing)} token: this is not a POLAR reward model; train one "
            "with `align rm train --config configs/polar_pretrain_suite.yaml` (kind polar_train)"
        )
    return vocab[REWARD_TOKEN], vocab[END_TOKEN]


@dataclass
class Encoded:
    """One POLAR sequence split where pairs share it: `prefix_ids` = ref_cat + REWARD_TOKEN, `candidate_ids` =
    cand_cat + END_TOKEN; the whole sequence is prefix_ids + candidate_ids."""

    prefix_ids: list[int]
    candidate_ids: list[int]
    truncated: bool  # the prompt or the candidate was cut to fit


class TooLong(Exception):
    """The reference alone exceeds `max_response_length` (carries its token count)."""


def _ids(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def fit(
    tokenizer: Any, prompt: str, reference: str, candidates: list[str], cfg: InputSection
) -> tuple[str, str, list[str], bool]:
    """The pieces cut as POLAR cuts them (module docstring), for candidates that share one prompt and reference;
    the prompt budget is set by the longest candidate. Raises TooLong for a reference over the budget."""
    r1 = _ids(tokenizer, reference)
    if len(r1) > cfg.max_response_length:
        raise TooLong(len(r1))
    cut = False
    outs = []
    for c in candidates:
        r2 = _ids(tokenizer, c)
        if len(r2) > cfg.max_response_length:
            keep = cfg.max_response_length
            r2 = r2[:keep] if cfg.response_cut_side == "right" else r2[-keep:]
            c = tokenizer.decode(r2, skip_special_tokens=True)
            cut = True
        outs.append((c, len(r2)))
    p_ids = _ids(tokenizer, prompt)
    longest = max(n for _, n in outs)
    budget = (cfg.max_length - SPECIAL_OVERHEAD - len(r1) - longest) // 2
    if len(p_ids) > budget:
        prompt = tokenizer.decode(p_ids[-budget:] if budget > 0 else [], skip_special_tokens=True)
        cut = True
    return prompt, reference, [c for c, _ in outs], cut


def encode(
    tokenizer: Any, prompt: Conversation, reference: Conversation, candidates: list[Conversation], cfg: InputSection
) -> list[Encoded]:
    """Token ids of (prompt, reference, candidate) for each candidate, exactly `tokenizer(polar_text(...))` of
    the fitted pieces, split after the reward token. Raises TooLong (a counted skip for callers)."""
    p, r1, r2s, cut = fit(tokenizer, flatten(prompt), flatten(reference), [flatten(c) for c in candidates], cfg)
    sep = "" if cfg.wrapper == "pretrain" else "\n"
    # Added special tokens split the text before the BPE runs, so tokenizing the two halves on their own gives
    # the same ids as the whole text (a test checks it): the reference half is shared by every candidate.
    prefix = _ids(tokenizer, f"{p}{sep}{r1}{REWARD_TOKEN}")
    return [Encoded(prefix, _ids(tokenizer, f"{p}{sep}{r2}{END_TOKEN}"), cut) for r2 in r2s]
