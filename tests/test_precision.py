"""The precision decision: bf16 where the device runs it natively, fp32 otherwise, printed and saved."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

import prefalign.models.precision as precision
from prefalign.models.precision import decide_dtype, decide_precision


@pytest.fixture(params=[True, False], ids=["native_bf16", "avx2_only"])
def native(request, monkeypatch):
    """The capability check stubbed both ways (this machine may have either kind of CPU), with any GPU hidden: on
    a machine with one, `auto` follows the GPU, and runs go there."""
    import torch

    monkeypatch.setattr(precision, "cpu_bf16_features", lambda: ["AVX-512 BF16"] if request.param else [])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    return request.param


def test_a_process_held_below_avx512_has_no_native_bf16(monkeypatch):
    """ATEN_CPU_CAPABILITY=avx2 or ONEDNN_MAX_CPU_ISA=AVX2 makes torch emulate bf16 even on a bf16 CPU."""
    import torch

    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
    assert precision.cpu_bf16_features() == []
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert precision.cpu_bf16_features() == []


def test_auto_follows_the_capability(native):
    d = decide_precision("auto", "cpu")
    assert (d.value, d.bf16) == (("bf16", True) if native else ("fp32", False))
    assert ("native bf16: AVX-512 BF16" if native else "no native bf16") in d.line()
    assert decide_dtype("auto", "cpu").value == ("bfloat16" if native else "float32")
    for explicit in ("fp32", "bf16-pure"):
        assert decide_precision(explicit, "cpu").value == explicit  # explicit choices are kept


def test_explicit_bf16_without_native_support_warns_with_the_measured_slowdown(monkeypatch, capsys):
    monkeypatch.setattr(precision, "cpu_bf16_features", lambda: [])
    monkeypatch.setattr(precision, "measured_bf16_slowdown", lambda: 380.0)
    d = decide_precision("bf16", "cpu")
    assert d.value == "bf16"  # it still runs as asked
    out = capsys.readouterr().out
    assert "WARNING" in out and "runs 380x slower than fp32" in out and "train.precision to auto or fp32" in out
    decide_dtype("bfloat16", "cpu", knob="--dtype")
    assert "--dtype to auto or fp32" in capsys.readouterr().out


def test_no_warning_where_bf16_is_native(monkeypatch, capsys):
    monkeypatch.setattr(precision, "cpu_bf16_features", lambda: ["AMX"])
    decide_precision("bf16", "cpu")
    decide_dtype("bfloat16", "cpu")
    assert "WARNING" not in capsys.readouterr().out


def test_measured_slowdown_is_a_real_measurement():
    precision.measured_bf16_slowdown.cache_clear()
    slow = precision.measured_bf16_slowdown(n=64, repeats=1)
    assert slow > 0 and slow == slow  # a finite ratio of two timings


def test_hub_auto_dtype_follows_the_capability(native):
    import torch

    from prefalign.models.hub import torch_dtype

    assert torch_dtype("auto") == (torch.bfloat16 if native else torch.float32)


@pytest.mark.parametrize("method", ["lora", "full"])
def test_a_real_run_in_each_precision_saves_what_it_used(tmp_path, native, method, capsys):
    """`train.precision: auto` trains in bf16 or fp32 as the device allows; the run prints the choice and
    saves it in its config and report; weights come out finite and changed."""
    from safetensors.torch import load_file

    from prefalign.models.hub import load_seq_cls
    from reward_models.rm_train import run
    from tests.test_rm_train import suite_like_pairs, tiny_cfg, write_pairs

    data = write_pairs(tmp_path / "pairs.jsonl", suite_like_pairs(8))
    cfg = tiny_cfg(tmp_path, data, train={"precision": "auto", "method": method, "max_steps": 2})
    report = run(cfg)
    want = "bf16" if native else "fp32"
    assert f"rm train: precision {want} (auto:" in capsys.readouterr().out
    assert report["precision"].startswith(f"precision {want}")
    saved = yaml.safe_load((Path(cfg.output_dir) / "config.yaml").read_text())
    assert saved["train"]["precision"] == want
    weights = load_file(str(Path(report["model_dir"]) / "model.safetensors"))
    base = load_seq_cls("builtin:tiny-llama", dtype="float32").state_dict()
    assert all(v.isfinite().all() for v in weights.values())
    moved = [k for k in weights if k in base and not (weights[k].float() == base[k]).all()]
    assert moved  # training changed weights in this precision
    stats = json.loads((Path(report["model_dir"]) / "reward_stats.json").read_text())
    assert stats["std"] > 0


def test_quickstart_shortens_training_where_auto_means_fp32(native, tmp_path):
    from align.pipeline import Pipeline
    from align.quickstart import QuickstartConfig
    from prefalign.config import load

    cfg = load(QuickstartConfig)
    p = Pipeline(tmp_path, cfg.stages)
    rm, dpo = p.fit_to_device(cfg.rm, cfg.fp32_work, "rm"), p.fit_to_device(cfg.dpo, cfg.fp32_work, "dpo")
    assert (rm.train.epochs, dpo.train.max_steps) == ((1.5, 60) if native else (1.0, 40))
    explicit = load(QuickstartConfig, None, ["rm.train.precision=fp32"])
    assert p.fit_to_device(explicit.rm, explicit.fp32_work, "rm").train.epochs == 1.5  # only `auto` adapts


@pytest.mark.parametrize("task", ["CAUSAL_LM", "SEQ_CLS"])
def test_lora_under_bf16_autocast_skips_the_input_casts_for_the_same_numbers(task):
    """`train.precision: bf16` with LoRA: the adapters' inputs are no longer copied to fp32 (the adapter weights'
    dtype) and back, and the forward, the loss and every adapter gradient are the same bit for bit; such a model
    used outside autocast fails on the dtypes, never silently."""
    import copy

    import torch

    from prefalign.models.hub import load_causal_lm, load_seq_cls
    from prefalign.training.config import LoraSection, TrainSection
    from prefalign.training.trainer import prepare_model

    torch.manual_seed(0)
    load = load_causal_lm if task == "CAUSAL_LM" else load_seq_cls
    base = load("builtin:tiny-llama", dtype="bfloat16")  # a LoRA base is stored in bf16 under train.precision bf16
    saves = ["score"] if task == "SEQ_CLS" else None
    models = {}
    for kind in ("bf16-pure", "bf16"):  # bf16-pure: no autocast, peft's casts stay on
        torch.manual_seed(1)
        train = TrainSection(method="lora", precision=kind)
        models[kind] = prepare_model(copy.deepcopy(base), train, LoraSection(), task, modules_to_save=saves)
    with torch.no_grad():  # non-zero adapters, the same in both
        for (name, a), (_, b) in zip(
            models["bf16"].named_parameters(), models["bf16-pure"].named_parameters(), strict=True
        ):
            if "lora_B" in name:
                a.normal_(std=0.5)
                b.copy_(a)
    casts = {
        k: [m.cast_input_dtype_enabled for m in v.modules() if hasattr(m, "cast_input_dtype_enabled")]
        for k, v in models.items()
    }
    assert casts["bf16"] and not any(casts["bf16"]) and all(casts["bf16-pure"])
    ids = torch.randint(0, 500, (2, 12))
    outs, grads = [], []
    for model in models.values():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = model(input_ids=ids).logits
        out.float().square().mean().backward()
        outs.append(out)
        grads.append({n: p.grad for n, p in model.named_parameters() if p.requires_grad})
    assert torch.equal(outs[0], outs[1])
    assert grads[0].keys() == grads[1].keys() and all(torch.equal(grads[0][n], grads[1][n]) for n in grads[0])
    with pytest.raises(RuntimeError, match="dtype|type"):
        models["bf16"](input_ids=ids)  # outside autocast: bf16 inputs against fp32 adapter weights
