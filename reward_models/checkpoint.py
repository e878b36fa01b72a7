"""Saving and loading trained reward models: a directory `AutoModelForSequenceClassification` loads.

Layout of a saved RM directory:
  config.json, model.safetensors       merged weights (full fine-tuning, or LoRA merged into the base), or
  adapter_config.json, adapter_model.safetensors   a peft adapter whose `modules_to_save` holds the score head
                                       (`align rm train` with `save: adapter`), and adapter_base.json: the
                                       precision its base trained in; loading merges it in fp32 onto that base,
                                       bit for bit the weights the same run saves whole
  tokenizer files, chat_template.jinja the tokenizer and chat template the RM was trained with
  reward_stats.json                    normalisation statistics of the rewards on the training data:
                                       {"mean", "std", "n", "num_labels", "computed_on", "response_end"}
  README.md                            a model card: how to score with plain transformers, the statistics

Scores are reported raw or normalised as (r - mean) / std, so a reward model's scale travels with it.

The reward is read where plain transformers reads it: `AutoModelForSequenceClassification` pools the last
token that is not the pad token, so an RM trained here reads the last token of the chat template's
rendering of the whole conversation (`response_end: template` in reward_stats.json; see
`preference_data.tokenize`), and the saved tokenizer's pad token is never the EOS token (with pad == EOS,
text that ends in EOS would be read one token early). The standard recipe

    inputs = tokenizer.apply_chat_template(messages, return_tensors="pt", return_dict=True)
    reward = model(**inputs).logits[0][0]

then gives exactly `align rm score --raw`. RMs saved before this convention say `response_end: eos`
(or nothing) and are scored at the EOS token by this toolkit's scorers.
"""

from __future__ import annotations

import copy
import json
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prefalign.errors import UserError
from prefalign.files import write_json, write_text
from prefalign.models.hub import ADAPTER_BASE_FILE, adapter_base_dtype, is_adapter, load_model, load_tokenizer, resolve

if TYPE_CHECKING:
    import torch

    from preference_data.tokenize import ResponseEnd

STATS_FILE = "reward_stats.json"


@dataclass
class RewardStats:
    mean: float = 0.0
    std: float = 1.0
    n: int = 0
    num_labels: int = 1
    computed_on: str = ""
    response_end: ResponseEnd = "template"  # where the reward is read: "template" (last template token) or "eos"

    def normalise(self, r: float) -> float:
        return (r - self.mean) / (self.std if self.std > 1e-8 else 1.0)


def save_rm(
    model: Any,
    tokenizer: Any,
    out_dir: str | Path,
    stats: RewardStats,
    merge: bool = True,
    card: dict[str, Any] | None = None,
    state: dict | None = None,
    dtype: torch.dtype | None = None,
) -> Path:
    """Write `model` (plain or peft) so that it reloads and scores identically, here and in plain transformers.

    The saved tokenizer and config get a pad token distinct from EOS (`distinct_pad`); `card` (base model,
    data, accuracy, ...) goes into the README.md model card. Under FSDP, `state` holds the weights gathered whole
    (`whole_state_dict`): they are saved as trained and read back into a plain model, which is then written as
    any other. A whole model (merged, or fully fine-tuned) is saved in `dtype` (`saved_dtype(train)`: the precision
    the run trained in, unless `train.save_precision` says otherwise; None: as it is), a LoRA merge computed in fp32
    first.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    # the precision the adapter's base trained in, recorded beside a saved adapter so that loading merges it as the
    # merge below would have (`load_model`: bit for bit the whole model this function would otherwise write)
    base_dtype = _base_dtype(model) if hasattr(model, "peft_config") else None
    gathered = out.with_name(out.name + ".gathered")
    if state is not None:
        try:
            model.save_pretrained(str(gathered), state_dict=state)
            # read back into a plain model (fp32); an adapter's base first gets the trained vocabulary (POLAR adds
            # its tokens before training)
            model = load_model(str(gathered), "float32", merge=False, head="seq_cls", vocab=model.config.vocab_size)
        finally:
            shutil.rmtree(gathered, ignore_errors=True)
    if hasattr(model, "merge_and_unload") and merge:
        # merge in fp32: a small LoRA delta added to bf16 weights would be partly rounded away
        model = copy.deepcopy(model).float().merge_and_unload()
    if not hasattr(model, "peft_config"):  # a whole model (an adapter is saved as trained)
        if dtype is not None and next(model.parameters()).dtype != dtype:
            model = copy.deepcopy(model).to(dtype)
        model.config.dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    tokenizer = copy.deepcopy(tokenizer)
    distinct_pad(tokenizer, model)
    model.save_pretrained(str(out), safe_serialization=True)
    if hasattr(model, "peft_config") and base_dtype is not None:
        write_json(out / ADAPTER_BASE_FILE, {"dtype": base_dtype})
    tokenizer.save_pretrained(str(out))
    write_stats(out, stats, card or {})
    return out


def _base_dtype(model: Any) -> str:
    """The dtype a peft model's frozen base weights are stored in (bfloat16 for a LoRA base loaded in bf16)."""
    frozen = (p.dtype for p in model.parameters() if not p.requires_grad)  # LoRA leaves the base's weights frozen
    return str(next(frozen, next(model.parameters()).dtype)).removeprefix("torch.")


def write_stats(out: str | Path, stats: RewardStats, card: dict[str, Any]) -> None:
    """(Re)write a saved RM's statistics and its model card, e.g. once the statistics have been measured on the saved
    weights (`training.saved_reward_statistics`)."""
    out = Path(out)
    write_json(out / STATS_FILE, asdict(stats), indent=2)
    pad = load_tokenizer(str(out)).pad_token
    write_text(out / "README.md", model_card(out, stats, card, pad))


def distinct_pad(tokenizer: Any, model: Any) -> None:
    """Give `tokenizer` (and `model.config`) a pad token that is not EOS, in place.

    transformers' sequence-classification heads read the last token that is not the pad token; with
    pad == EOS a text ending in EOS is read one token early. The unknown token serves when it is distinct
    (SmolLM2: `<|endoftext|>`); otherwise a `<|pad|>` token is added and the embeddings resized.
    """
    eos = tokenizer.eos_token_id
    if tokenizer.pad_token_id is None or tokenizer.pad_token_id == eos:
        unk = tokenizer.unk_token
        if unk is not None and tokenizer.unk_token_id not in (eos, None):
            tokenizer.pad_token = unk
        else:
            tokenizer.add_special_tokens({"pad_token": "<|pad|>"})
            model.resize_token_embeddings(len(tokenizer))
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    for m in {id(model): model, id(inner): inner}.values():
        m.config.pad_token_id = tokenizer.pad_token_id


def _plain_load(out: Path) -> str:
    """The lines of the model card's recipe that load the RM in `out` (whole, or a LoRA adapter merged as
    `load_model` merges it) in fp32 with plain transformers (and peft)."""
    head = "import torch\nfrom transformers import AutoModelForSequenceClassification, AutoTokenizer\n"
    if not is_adapter(out):
        return (
            f'{head}\npath = "{out}"\ntokenizer = AutoTokenizer.from_pretrained(path)\n'
            "model = AutoModelForSequenceClassification.from_pretrained(path, dtype=torch.float32)"
        )
    base = json.loads((out / "adapter_config.json").read_text(encoding="utf-8"))["base_model_name_or_path"]
    trained_on = adapter_base_dtype(out) or "float32"
    return (
        f"{head}from peft import PeftModel\n\n"
        f'path = "{out}"  # a LoRA adapter with the score head; merged onto its base as it trained ({trained_on})\n'
        "tokenizer = AutoTokenizer.from_pretrained(path)\n"
        f'base = AutoModelForSequenceClassification.from_pretrained("{base}", num_labels=1, '
        f"dtype=torch.{trained_on}).float()\n"
        "model = PeftModel.from_pretrained(base, path).merge_and_unload()\n"
        "model.config.pad_token_id = tokenizer.pad_token_id"
    )


def model_card(out: Path, stats: RewardStats, card: dict[str, Any], pad_token: str) -> str:
    """README.md for a saved RM: what it is and how to score with plain transformers (the numbers match
    `align rm score --raw`)."""
    facts = "\n".join(f"- {k}: {v}" for k, v in card.items())
    load = _plain_load(out)
    return f"""---
library_name: transformers
pipeline_tag: text-classification
tags: [reward-model, prefalign]
---
# Reward model

A Bradley-Terry reward model (one scalar per conversation) trained with prefalign.

{facts}

## Score with plain transformers

```python
{load}
messages = [{{"role": "user", "content": "What is 2 + 2?"}}, {{"role": "assistant", "content": "4"}}]
inputs = tokenizer.apply_chat_template(messages, return_tensors="pt", return_dict=True)
with torch.no_grad():
    reward = model(**inputs).logits[0][0].item()
normalised = (reward - {stats.mean!r}) / {stats.std!r}  # optional: mean 0, std 1 on the training data
```

The reward is read at the last token of the chat template's rendering (the template's own ending, as
`apply_chat_template` writes it); the pad token is `{pad_token}`, distinct from EOS. This is
the recipe TRL reward functions, OpenRLHF and reward-bench use, and it gives what
`align rm score --model {out} --raw` reports (float32 is every scoring command's default). Batches: pad on the
right or the left; the head reads the last non-pad token of each row.

In bfloat16 (`dtype=torch.bfloat16` here, `--dtype bfloat16` there) scoring is faster on a device with native
bf16, but the scores are not these: they move by a few hundredths to tenths and a close pair can change order.
Compare bf16 scores only with bf16 scores of the same RM.

## Normalisation

`reward_stats.json`: mean {stats.mean:.6g}, std {stats.std:.6g} over {stats.n} rewards ({stats.computed_on}), of
the float32 scores above.
"""


def read_stats(path: str | Path) -> RewardStats:
    """The statistics saved beside an RM; an RM from elsewhere is read at the template's last token, as
    transformers reads it, and one saved here before `response_end` was recorded at its EOS token."""
    f = Path(path) / STATS_FILE
    if not f.exists():
        return RewardStats(computed_on="none (no reward_stats.json; scores are raw)")
    return RewardStats(**{"response_end": "eos", **json.loads(f.read_text(encoding="utf-8"))})


def head_of(path: str | Path) -> str | None:
    """Where a model directory's reward head comes from: the config's `*ForSequenceClassification` architecture, or
    an adapter's `modules_to_save` holding a score head; None where it has none (a causal LM, whose score head
    transformers would initialise at random)."""
    p = Path(path)
    if is_adapter(p):
        saved = json.loads((p / "adapter_config.json").read_text(encoding="utf-8")).get("modules_to_save") or []
        heads = [m for m in saved if m in ("score", "classifier", "v_head")]
        return f"adapter {p.name}: modules_to_save {heads}" if heads else None
    config = p / "config.json"
    if not config.exists():
        return "unknown"  # not a model directory: load_rm says so
    arch = [a for a in json.loads(config.read_text(encoding="utf-8")).get("architectures") or [] if a]
    heads = [a for a in arch if a.endswith("ForSequenceClassification")]
    return heads[0] if heads else None


def load_rm(ref: str, dtype: str = "bfloat16") -> tuple[Any, Any, RewardStats]:
    """(model in eval mode, tokenizer, stats) for a saved RM directory, a builtin, or a hub id. A model without a
    trained reward head (a chat model, not an RM) is refused, since its head would be drawn at random and every
    score with it."""
    path = resolve(ref)
    p = Path(path)
    if p.is_dir() and head_of(p) is None:
        raise UserError(
            f"{ref}: not a reward model: it has no trained reward head (its config.json names no "
            "*ForSequenceClassification architecture and no adapter saves a score head), so its rewards would be "
            "drawn at random. Train one first (`align rm train`, or the quickstart's rm stage) and give that "
            "directory, or a hub RM; for a rule reward use `type: grader`, for a policy's own implicit reward "
            "`type: implicit`"
        )
    # an adapter is merged into its base (in fp32, then cast to dtype): it scores as the same RM saved whole does
    model = load_model(ref, dtype, merge=True, head="seq_cls")
    if p.exists() and not (p / STATS_FILE).exists() and not (p / "config.json").exists():
        raise UserError(f"{p} is not a reward model directory (no config.json or adapter_config.json)")
    tokenizer = load_tokenizer(ref if not (p / "tokenizer_config.json").exists() else path)
    if is_adapter(path):  # the base's config does not know the pad token the RM was saved with
        model.config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer, read_stats(p)
