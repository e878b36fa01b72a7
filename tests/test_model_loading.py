"""Model loading on the ground floor (prefalign/models/hub.py): one loader for plain models and peft adapters,
merged or not, and the fingerprint caches key on."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from prefalign.models.hub import (
    BUILD_FILE,
    is_adapter,
    load_causal_lm,
    load_model,
    pad_token_id,
    resolve,
    weights_fingerprint,
)


@pytest.fixture(scope="module")
def adapter_dir(tmp_path_factory, tiny_model_ref):
    """A LoRA adapter of the tiny model with non-zero B, so the adapter changes the logits."""
    from peft import LoraConfig, get_peft_model

    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    model = get_peft_model(load_causal_lm(tiny_model_ref, dtype="float32"), lora)
    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(std=0.5)
    out = tmp_path_factory.mktemp("adapter")
    model.save_pretrained(str(out))
    return out


IDS = torch.tensor([[1, 20, 300, 4000, 50]])


def _logits(model) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=IDS).logits.float()


def test_adapter_loads_with_or_without_merging(adapter_dir, tiny_model_ref):
    from peft import PeftModel

    assert is_adapter(adapter_dir) and not is_adapter(resolve(tiny_model_ref))
    kept = load_model(str(adapter_dir), "float32", merge=False)
    merged = load_model(str(adapter_dir), "float32", merge=True)
    assert isinstance(kept, PeftModel) and not isinstance(merged, PeftModel) and not merged.training
    torch.testing.assert_close(_logits(merged), _logits(kept), atol=1e-4, rtol=0)
    base = load_causal_lm(tiny_model_ref, dtype="float32")
    with kept.disable_adapter():
        torch.testing.assert_close(_logits(kept), _logits(base), atol=1e-5, rtol=0)
    assert (_logits(kept) - _logits(base)).abs().max() > 1e-3  # the adapter does change the model
    plain = load_model(tiny_model_ref, "float32", merge=True)
    assert not isinstance(plain, PeftModel)
    torch.testing.assert_close(_logits(plain), _logits(base), atol=0, rtol=0)


def test_a_merged_adapter_in_bf16_decodes_as_its_weights_saved_and_loaded(adapter_dir, tmp_path):
    """Merged and cast to bf16, an adapter is the model its merged weights give when saved and loaded in bf16:
    the same weights, the same fp32 buffers (the rotary inverse frequencies, which `from_pretrained` keeps in fp32),
    the same logits bit for bit."""
    merged = load_model(str(adapter_dir), "bfloat16", merge=True)
    merged.save_pretrained(str(tmp_path / "saved"))
    loaded = load_causal_lm(str(tmp_path / "saved"), dtype="bfloat16")
    assert {p.dtype for p in merged.parameters()} == {torch.bfloat16} and merged.dtype == torch.bfloat16
    for (name, a), b in zip(merged.named_buffers(), loaded.buffers(), strict=True):
        assert a.dtype == b.dtype and torch.equal(a, b), name
    assert torch.equal(_logits(merged), _logits(loaded))


def test_an_adapter_goes_onto_another_model_and_a_resized_vocabulary(adapter_dir, tiny_model_ref, tmp_path):
    """`onto` puts the adapter on a model other than the base it records (here: the base with its embeddings
    changed), the same delta added; `vocab` resizes that base first (the rows an RM's tokens were added to)."""
    base = load_causal_lm(tiny_model_ref, dtype="float32")
    delta = {
        n: w - base.state_dict()[n] for n, w in load_model(str(adapter_dir), "float32", merge=True).state_dict().items()
    }
    assert any(d.abs().max() > 0 for d in delta.values())
    with torch.no_grad():
        base.get_input_embeddings().weight.mul_(2.0)
    other = tmp_path / "other"
    base.save_pretrained(str(other))
    moved = load_model(str(adapter_dir), "float32", merge=True, onto=str(other))
    for n, w in moved.state_dict().items():
        torch.testing.assert_close(w, base.state_dict()[n] + delta[n], atol=1e-6, rtol=0)  # other's weights + delta
    rows = base.get_input_embeddings().num_embeddings + 3
    grown = load_model(str(adapter_dir), "float32", merge=False, vocab=rows)
    assert grown.get_input_embeddings().num_embeddings == rows


def test_fingerprint_of_an_adapter_covers_its_base(adapter_dir, tiny_model_ref):
    assert weights_fingerprint(None) is None
    fp = weights_fingerprint(str(adapter_dir))
    assert fp is not None and len(fp) == 12 and fp == weights_fingerprint(str(adapter_dir))
    assert fp != weights_fingerprint(tiny_model_ref)


def test_pad_token_id_falls_back_to_eos():
    class Tok:
        pad_token_id, eos_token_id = None, 7

    assert pad_token_id(Tok()) == 7
    Tok.pad_token_id = 0
    assert pad_token_id(Tok()) == 0


@pytest.mark.slow  # a whole run: its siblings in the slow tier (kill, resume, real models)
def test_builtin_tokenizer_takes_its_special_tokens_from_the_gguf_whatever_transformers_reads(monkeypatch):
    """transformers 5.17 reads the SmolLM2 GGUF's EOS as token 1 (`<|im_start|>`) and no padding token, so generation
    would not stop at `<|im_end|>` and `generate` would mask real prompt tokens; the builtin's tokenizer is set from
    the file's own `tokenizer.ggml.*` fields (BOS 1, EOS 2, UNK 0, PAD 2) whatever the loader made of them."""
    import transformers

    from prefalign.models import hub

    real = transformers.AutoTokenizer.from_pretrained

    def as_transformers_5_17(*args, **kwargs):
        tok = real(*args, **kwargs)
        tok.eos_token = tok.convert_ids_to_tokens(1)
        tok.pad_token = None
        return tok

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", as_transformers_5_17)
    tok = hub._gguf_tokenizer()
    assert (tok.bos_token_id, tok.eos_token_id, tok.unk_token_id, tok.pad_token_id) == (1, 2, 0, 2)
    assert tok.eos_token == "<|im_end|>"


@pytest.mark.slow  # a whole run: its siblings in the slow tier (kill, resume, real models)
def test_a_builtin_cached_by_other_builders_is_built_again(tmp_path, monkeypatch):
    """A builtin's cache written before the builders changed (no build stamp, or another one) is rebuilt once,
    not used as is: a cache converted under an older release keeps whatever that release wrote."""
    monkeypatch.setenv("PREFALIGN_CACHE", str(tmp_path))
    dest = Path(resolve("builtin:tiny-llama"))
    assert (dest / BUILD_FILE).exists()
    (dest / "config.json").write_text(
        (dest / "config.json").read_text().replace('"eos_token_id": 2', '"eos_token_id": 1')
    )
    assert resolve("builtin:tiny-llama") == str(dest) and '"eos_token_id": 1' in (dest / "config.json").read_text()
    (dest / BUILD_FILE).unlink()  # as a cache built before the stamp existed
    assert resolve("builtin:tiny-llama") == str(dest)
    assert '"eos_token_id": 2' in (dest / "config.json").read_text() and (dest / BUILD_FILE).exists()
