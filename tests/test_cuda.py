"""The CUDA paths: the same results on a GPU as on the CPU, where the code differs by device.

Every test here is marked `cuda` (`pytest -m cuda`) and skips, with the reason, where no CUDA GPU is visible.
What differs on a GPU: the device the trainers, scorers and engine put tensors on; the packing layout the
scorers pick there (rows under one block mask instead of the segment loop); bf16 chosen by `precision: auto`;
the segment attention's batched matmuls and SDPA running as CUDA kernels; the generation engine's KV cache and
sampling on the GPU; `accelerate launch` with FSDP on a GPU. Each CUDA result is checked against the CPU's, in
fp32, the CPU side computed in this process or in a child process that sees no GPU (`on_cpu`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from prefalign.config import build, dump_yaml
from prefalign.models.hub import load_causal_lm, load_tokenizer
from preference_data.records import Message
from reward_models.refusal_rule import prompt_states
from tests.test_dpo_train import config as dpo_base_config
from tests.test_rm_train import tiny_cfg
from tests.test_scorers import rm_dir  # noqa: F401, F811 (a fixture: the tiny RM with a large random head)

ROOT = Path(__file__).resolve().parents[1]
GPU = torch.cuda.is_available()

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not GPU, reason="no CUDA GPU visible: these tests run the CUDA paths where one is"),
]

ROWS = [
    {
        "prompt": [{"role": "user", "content": f"What is {a} plus {b}?"}],
        "chosen": [{"role": "assistant", "content": f"{a} + {b} = {a + b}."}],
        "rejected": [{"role": "assistant", "content": f"I think it is {a + b + 1}, but I am not sure at all."}],
    }
    for a, b in [(2, 3), (7, 5), (10, 4), (6, 6), (9, 1), (3, 8), (12, 7), (4, 4)]
]


@pytest.fixture
def data(tmp_path) -> str:
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS), encoding="utf-8")
    return str(path)


def on_cpu(*args: str, timeout: int = 600) -> None:
    """Run `align ARGS` in a child process that sees no GPU (the CPU side of a comparison)."""
    env = {
        **os.environ,
        "CUDA_VISIBLE_DEVICES": "",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "align.cli.main", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


def safetensors_in(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    out: dict[str, torch.Tensor] = {}
    for f in sorted(path.glob("*.safetensors")):
        out |= load_file(str(f))
    assert out, f"no weights in {path}"
    return out


def assert_same_update(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], start: dict[str, torch.Tensor]) -> None:
    """Two runs moved the weights alike: the difference between their weights is under 2% of how far `b` moved
    from the `start` weights (a weight missing there started at zero). A fixed tolerance could not tell: Adam moves
    a weight whose gradient is at rounding level by up to lr per step, in either direction."""
    assert a.keys() == b.keys()

    def update(k: str, x: torch.Tensor) -> torch.Tensor:
        return x.float() - start[k].float() if k in start and start[k].shape == x.shape else x.float()

    moved = sum(float(update(k, b[k]).pow(2).sum()) for k in b) ** 0.5
    diff = sum(float((a[k].float() - b[k].float()).pow(2).sum()) for k in b) ** 0.5
    assert moved > 0, "the weights did not move: nothing to compare"
    assert diff <= 0.02 * moved, f"the runs differ by {diff:.3g}, {diff / moved:.1%} of the update ({moved:.3g})"


def base_weights() -> dict[str, torch.Tensor]:
    from prefalign.models.hub import resolve

    return safetensors_in(Path(resolve("builtin:tiny-llama")))


def lora_b(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The LoRA B matrices (they start at zero, so their values are the update)."""
    return {k: v for k, v in weights.items() if "lora_B" in k}


# --- the device and precision a run picks ------------------------------------------------------------------


def test_auto_picks_the_gpu_and_bf16_where_it_is_native():
    from prefalign.models.precision import decide_precision, default_device, native_bf16

    assert default_device() == "cuda"
    native, reason = native_bf16("cuda")
    assert torch.cuda.get_device_name() in reason
    decision = decide_precision("auto")
    assert decision.bf16 == native and decision.value == ("bf16" if native else "fp32")


# --- packed log-probs and their gradients: segment attention and the block mask on the GPU -----------------


@pytest.mark.parametrize("layout,math_max", [("segments", 1024), ("segments", 8), ("mask", 1024)])
def test_packed_logps_and_gradients_on_cuda_equal_the_cpu(data, tiny_model_ref, layout, math_max, monkeypatch):
    """Both packing layouts (the segment attention's batched-matmul path, and with `MATH_MAX_TOKENS` 8 its
    SDPA path) give on the GPU the log-probs and gradients the CPU gives, in fp32."""
    from prefalign.models import attention
    from prefalign.models.forward import sequence_logps
    from prefalign.models.hub import load_causal_lm, load_tokenizer
    from preference_data.packing import pack_pairs
    from preference_data.sources import read_records
    from preference_data.tokenize import tokenize_pairs

    monkeypatch.setattr(attention, "MATH_MAX_TOKENS", math_max)
    tok = load_tokenizer(tiny_model_ref)
    tp, _ = tokenize_pairs(read_records(data)[0][:5], tok, None, "drop")

    def run(device: str) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        model = load_causal_lm(tiny_model_ref, dtype="float32").to(device)
        batch = pack_pairs(tp, tok.pad_token_id, row_tokens=150, layout=layout).to(device)
        logps = sequence_logps(model, batch)
        (logps * torch.linspace(-1, 1, logps.numel(), device=device)).sum().backward()
        return logps.detach().cpu(), {n: p.grad.cpu() for n, p in model.named_parameters() if p.grad is not None}

    cpu_logps, cpu_grads = run("cpu")
    gpu_logps, gpu_grads = run("cuda")
    torch.testing.assert_close(gpu_logps, cpu_logps, atol=1e-4, rtol=0)
    assert gpu_grads.keys() == cpu_grads.keys()
    for n in cpu_grads:
        torch.testing.assert_close(gpu_grads[n], cpu_grads[n], atol=1e-4, rtol=1e-3, msg=n)


# --- the generation engine: KV cache and sampling on the GPU ----------------------------------------------

CONVS = [
    [{"role": "user", "content": "What is 2 + 2?"}],
    [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Name three rivers in Europe."}],
    [{"role": "user", "content": "Hi"}],
]


@pytest.fixture(scope="module")
def sharp_model(tiny_model_ref):
    """The tiny Llama with a large initialisation (peaked next-token distributions), fp32, and its tokenizer."""
    from transformers import AutoModelForCausalLM

    from prefalign.models.hub import load_tokenizer, tiny_llama_config

    tok = load_tokenizer(tiny_model_ref)
    torch.manual_seed(0)
    cfg = tiny_llama_config(tok, max_position_embeddings=256, initializer_range=0.5)
    return AutoModelForCausalLM.from_config(cfg).eval(), tok


@pytest.mark.parametrize("shared_prefix", [True, False], ids=["decode-attention", "model-attention"])
def test_engine_greedy_on_cuda_equals_generate_and_the_cpu(sharp_model, shared_prefix):
    """Greedy completions from the engine on the GPU (its shared-prefix KV cache, or the model's attention over
    per-row slabs) equal `model.generate` on the GPU and the engine on the CPU, token for token."""
    import copy

    from prefalign.generation import SamplingParams, make_engine

    cpu_model, tok = sharp_model
    gpu_model = copy.deepcopy(cpu_model).to("cuda")
    params = [SamplingParams(temperature=0, max_new_tokens=m) for m in (16, 5, 12)]  # rows finish apart
    on_gpu = make_engine(gpu_model, tok, decode_attention=shared_prefix).generate(CONVS, params)
    on_cpu_ = make_engine(cpu_model, tok, decode_attention=shared_prefix).generate(CONVS, params)
    for out, cpu_out, sp in zip(on_gpu.outputs, on_cpu_.outputs, params, strict=True):
        ids = torch.tensor([out.prompt_ids], device="cuda")
        ref = gpu_model.generate(
            ids,
            max_new_tokens=sp.max_new_tokens,
            do_sample=False,
            eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id,
        )[0, len(out.prompt_ids) :]
        c = out.completions[0]
        assert c.token_ids == ref.tolist()[: len(c.token_ids)]
        assert c.token_ids == cpu_out.completions[0].token_ids


@pytest.mark.parametrize("shared_prefix", [True, False], ids=["decode-attention", "model-attention"])
def test_engine_samples_on_cuda_follow_the_processed_distribution_and_not_the_batch(sharp_model, shared_prefix):
    """Sampled tokens on the GPU: each one's log-prob equals the processed distribution of a teacher-forced
    forward, and a request's samples are the same alone and in a mixed batch."""
    import copy

    from prefalign.generation import SamplingParams, make_engine, processed_logprobs
    from prefalign.generation.sampling import RowSettings

    model, tok = sharp_model
    model = copy.deepcopy(model).to("cuda")
    engine = make_engine(model, tok, decode_attention=shared_prefix)
    target = SamplingParams(n=3, temperature=0.9, top_k=50, top_p=0.95, max_new_tokens=10, seed=11)
    alone = engine.generate([CONVS[1]], target).outputs[0]
    mixed = engine.generate(
        CONVS, [SamplingParams(n=2, temperature=0.5, max_new_tokens=6, seed=5), target, SamplingParams(temperature=0)]
    ).outputs[1]
    assert [c.token_ids for c in mixed.completions] == [c.token_ids for c in alone.completions]
    assert len({tuple(c.token_ids) for c in alone.completions}) > 1  # the samples differ from each other
    for c in alone.completions:
        ids = torch.tensor([alone.prompt_ids + c.token_ids], device="cuda")
        with torch.no_grad():
            logits = model(ids).logits[0, len(alone.prompt_ids) - 1 : -1]
        T = len(c.token_ids)
        s = RowSettings(
            torch.full((T,), target.temperature, device="cuda"),
            torch.full((T,), target.top_k, dtype=torch.long, device="cuda"),
            torch.full((T,), target.top_p, device="cuda"),
            torch.full((T,), target.min_p, device="cuda"),
        )
        ref = processed_logprobs(logits, s).gather(1, torch.tensor(c.token_ids, device="cuda")[:, None])[:, 0]
        assert ref.isfinite().all(), "a sampled token lies outside the processed distribution"
        torch.testing.assert_close(torch.tensor(c.logprobs), ref.cpu(), atol=1e-4, rtol=0)


# --- scorers on the GPU: rows under one block mask --------------------------------------------------------


def test_scalar_scorer_on_cuda_equals_the_cpu_and_bf16_stays_close(rm_dir):  # noqa: F811
    """The BT scorer on the GPU (layout mask) gives the CPU's scores (layout segments) in fp32, one item per
    forward or all at once; in bf16 (auto on a recent GPU) within bf16's rounding."""
    from preference_data.records import Message
    from reward_models.scorers import load_scorer

    prompts = [[Message("user", f"Question {i}: what is {i} + {i}?")] for i in range(6)]
    responses = [[Message("assistant", f"It is {2 * i}." + " Really." * i)] for i in range(6)]
    cpu = load_scorer("scalar", model=str(rm_dir), dtype="float32", device="cpu")
    gpu = load_scorer("scalar", model=str(rm_dir), dtype="float32", device="cuda")
    assert cpu.layout == "segments" and gpu.layout == "mask"
    want = cpu.score(prompts, responses)
    assert len({round(x, 3) for x in want}) == len(want)  # distinct: the comparison is not vacuous
    assert gpu.score(prompts, responses) == pytest.approx(want, abs=1e-4)
    one_by_one = load_scorer("scalar", model=str(rm_dir), dtype="float32", device="cuda", batch_tokens=1)
    assert one_by_one.score(prompts, responses) == pytest.approx(want, abs=1e-4)
    bf16 = load_scorer("scalar", model=str(rm_dir), dtype="bfloat16", device="cuda")
    assert bf16.score(prompts, responses) == pytest.approx(want, abs=0.05 * max(abs(x) for x in want))


# --- training on the GPU equals training on the CPU (fp32) -------------------------------------------------


def rm_config(tmp_path: Path, data: str, out: str, **train):
    """test_rm_train's tiny RM config (3 steps, fp32), written to `tmp_path / out`, eager, with `train` changes."""
    return tiny_cfg(tmp_path, data, output_dir=str(tmp_path / out), train={"compile": False, **train})


@pytest.mark.parametrize("method", ["full", "lora"])
@pytest.mark.parametrize("attention", ["segments", "mask"])
def test_rm_training_on_cuda_equals_the_cpu(tmp_path, data, tiny_model_ref, method, attention):
    """`align rm train` for 3 steps on the GPU and on the CPU (a child process that sees no GPU): the same
    losses step by step, the same rewards of the saved model on the first pairs, close weights."""
    from reward_models.rm_train import run

    gpu = run(rm_config(tmp_path, data, "gpu", method=method, attention=attention))
    dump_yaml(rm_config(tmp_path, data, "cpu", method=method, attention=attention), tmp_path / "cpu.yaml")
    on_cpu("rm", "train", "--config", str(tmp_path / "cpu.yaml"))
    cpu = json.loads((tmp_path / "cpu" / "report.json").read_text())
    assert gpu["precision"].startswith("precision fp32") and cpu["precision"].startswith("precision fp32")
    assert gpu["sample_rewards"]["ids"] == cpu["sample_rewards"]["ids"]
    for side in ("chosen", "rejected"):
        assert gpu["sample_rewards"][side] == pytest.approx(cpu["sample_rewards"][side], rel=1e-2, abs=1e-3)
    gpu_losses, cpu_losses = (
        [
            r["loss"]
            for r in map(json.loads, (tmp_path / side / "metrics.jsonl").read_text().splitlines())
            if "loss" in r
        ]
        for side in ("gpu", "cpu")
    )
    assert len(cpu_losses) == 3 and gpu_losses == pytest.approx(cpu_losses, rel=1e-3)
    gpu_weights = safetensors_in(Path(gpu["model_dir"]))
    assert_same_update(gpu_weights, safetensors_in(tmp_path / "cpu" / "model"), base_weights())


def test_rm_training_in_auto_precision_is_bf16_on_the_gpu_and_learns(tmp_path, data, tiny_model_ref):
    from reward_models.rm_train import run

    report = run(rm_config(tmp_path, data, "auto", precision="auto", max_steps=8, lr=3e-3))
    assert report["precision"].startswith("precision bf16")
    rewards = report["sample_rewards"]
    margins = [c - r for c, r in zip(rewards["chosen"], rewards["rejected"], strict=True)]
    assert all(abs(m) < 1e6 for m in margins) and sum(margins) > 0  # finite, and the chosen answers gained


def dpo_config(tmp_path: Path, data: str, out: str, *overrides: str):
    """test_dpo_train's tiny DPO config (LoRA, 2 steps, fp32) with 4 pairs a step, eager, no merged copy."""
    fixed = ("train.batch_size=4", "train.num_threads=0", "train.compile=false", "save_merged=false")
    return dpo_base_config(tmp_path, data, *fixed, *overrides, out=out)


@pytest.mark.parametrize(
    "overrides",
    [("train.method=lora",), ("train.method=full", "reference.kind=precomputed", "train.lr=1e-3")],
    ids=["lora-base-as-reference", "full-precomputed-reference"],
)
def test_dpo_on_cuda_equals_the_cpu(tmp_path, data, tiny_model_ref, overrides, monkeypatch):
    """`align train` (DPO) for 2 steps on the GPU and on the CPU: the same trained weights (LoRA adapters with the
    base as reference; full fine-tuning with reference log-probs precomputed on the device)."""
    from align.train import run
    from prefalign.models.hub import cache_dir

    for side in ("gpu", "cpu"):  # a log-prob cache of each side's own, so each computes its reference
        root = tmp_path / f"cache-{side}"
        root.mkdir()
        (root / "models").symlink_to(cache_dir() / "models")
    monkeypatch.setenv("PREFALIGN_CACHE", str(tmp_path / "cache-gpu"))
    gpu = run(dpo_config(tmp_path, data, "gpu", *overrides))
    monkeypatch.setenv("PREFALIGN_CACHE", str(tmp_path / "cache-cpu"))
    dump_yaml(dpo_config(tmp_path, data, "cpu", *overrides), tmp_path / "cpu.yaml")
    on_cpu("train", "--config", str(tmp_path / "cpu.yaml"))
    cpu = json.loads((tmp_path / "cpu" / "report.json").read_text())
    assert cpu["steps"] == gpu["steps"] == 2
    if "train.method=lora" in overrides:
        got, want = (lora_b(safetensors_in(Path(r["adapter_dir"]))) for r in (gpu, cpu))
        assert_same_update(got, want, {})
    else:
        assert_same_update(
            safetensors_in(Path(gpu["policy_dir"])), safetensors_in(Path(cpu["policy_dir"])), base_weights()
        )


# --- the online loop on the GPU ----------------------------------------------------------------------------


def online_config(tmp_path: Path, out: str, **train):
    from align.online import OnlineConfig

    return build(
        OnlineConfig,
        {
            "model": "builtin:tiny-llama",
            "output_dir": str(tmp_path / out),
            # a reward that varies within a group on the tiny model's answers (the graders give them all zero)
            "reward": [
                {"type": "implicit", "model": "builtin:tiny-llama", "reference_free": True, "normalization": "mean"}
            ],
            "rollout": {"group_size": 4, "prompts_per_step": 2, "max_new_tokens": 8},
            "eval": {"limit": 0},
            "train": {"max_steps": 2, "batch_size": 8, "lr": 1e-3, "compile": False, "lr_scheduler": "linear"} | train,
            "lora": {"r": 4, "alpha": 8},
            "save_merged": False,
        },
    )


@pytest.mark.parametrize("precision", ["fp32", "auto"])
def test_online_grpo_steps_run_on_the_gpu(tmp_path, tiny_model_ref, precision):
    """Two GRPO steps (rollouts by the engine on the GPU, a model's reward scored on the GPU, LoRA updates): the
    losses are finite and the adapters move."""
    from align import online

    report = online.run(online_config(tmp_path, precision, precision=precision))
    bf16 = precision == "auto" and torch.cuda.is_bf16_supported(including_emulation=False)
    assert report["precision"].startswith(f"precision {'bf16' if bf16 else 'fp32'}")
    rows = [json.loads(x) for x in (tmp_path / precision / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in rows if "loss" in r]
    assert len(losses) == 2 and all(abs(x) < 1e6 for x in losses)
    weights = safetensors_in(Path(report["adapter_dir"]))
    assert any(v.abs().sum() > 0 for k, v in weights.items() if "lora_B" in k)  # LoRA B starts at zero


# --- accelerate launch with FSDP on the one GPU -------------------------------------------------------------

FSDP_ON_GPU = """compute_environment: LOCAL_MACHINE
distributed_type: FSDP
num_processes: 1
num_machines: 1
machine_rank: 0
mixed_precision: 'no'
use_cpu: false
fsdp_config:
  fsdp_version: 2
  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP
  fsdp_transformer_layer_cls_to_wrap: LlamaDecoderLayer
  fsdp_state_dict_type: FULL_STATE_DICT
  fsdp_reshard_after_forward: true
"""


@pytest.mark.slow
@pytest.mark.parametrize("verb", ["rm", "dpo", "online"])
def test_accelerate_launch_with_fsdp_on_one_gpu_equals_a_plain_run(tmp_path, data, tiny_model_ref, verb):
    """`accelerate launch --config_file fsdp.yaml -m align.cli.main ...` (FSDP2, layers wrapped) on the GPU trains
    what a plain run on the GPU trains."""
    from align import online
    from align.train import run as dpo_run
    from reward_models.rm_train import run as rm_run

    make, cli, plain = {
        "rm": (lambda out: rm_config(tmp_path, data, out, method="full"), ["rm", "train"], rm_run),
        "dpo": (lambda out: dpo_config(tmp_path, data, out), ["train"], dpo_run),
        "online": (lambda out: online_config(tmp_path, out, precision="fp32"), ["train"], online.run),
    }[verb]
    one = plain(make("plain"))
    (tmp_path / "fsdp.yaml").write_text(FSDP_ON_GPU)
    dump_yaml(make("fsdp"), tmp_path / "fsdp-run.yaml")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(tmp_path / "fsdp.yaml")]
    cmd += ["-m", "align.cli.main", *cli, "--config", str(tmp_path / "fsdp-run.yaml")]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    fsdp = json.loads((tmp_path / "fsdp" / "report.json").read_text())
    if verb == "rm":
        assert_same_update(
            safetensors_in(Path(fsdp["model_dir"])), safetensors_in(Path(one["model_dir"])), base_weights()
        )
    else:
        got, want = (lora_b(safetensors_in(Path(r["adapter_dir"]))) for r in (fsdp, one))
        assert_same_update(got, want, {})


def test_varlen_flash_kernel_equals_the_reference_forward_and_backward():
    """The GPU layout's attention (flash attention's varlen kernel, grouped-query heads, a pair's later response
    over its prompt's keys) against SDPA sequence by sequence in fp64, on the plan of real packed pairs."""
    from prefalign.models import varlen
    from preference_data.packing import pack

    gen = torch.Generator().manual_seed(0)
    lens = [tuple(int(x) for x in row) for row in torch.randint(5, 200, (12, 3), generator=gen)]
    b = pack([[1] * p for p, _, _ in lens], [([2] * c, [3] * r) for _, c, r in lens], 0, 512, "varlen")
    T, H, Hkv, d = b.input_ids.shape[1], 14, 2, 64
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, h, T, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for h in (H, Hkv, Hkv))
    plan = varlen.make_plan(b.kv_index.cuda(), b.cu_seqlens.cuda(), b.max_seqlens)
    assert varlen.uses_kernel(q[0].transpose(0, 1))
    g = torch.randn(1, T, H, d, device="cuda", dtype=torch.bfloat16)
    out = varlen.attend(q, k, v, plan, d**-0.5)
    (out * g).sum().backward()
    q64, k64, v64 = (x.detach().double().requires_grad_() for x in (q, k, v))
    ref = varlen.reference_attention(
        q64[0].transpose(0, 1),
        k64[0].transpose(0, 1)[plan.kv_index],
        v64[0].transpose(0, 1)[plan.kv_index],
        plan.cu_q.tolist(),
        plan.cu_k.tolist(),
        d**-0.5,
    )[None]
    (ref * g.double()).sum().backward()
    for got, want in ((out, ref), (q.grad, q64.grad), (k.grad, k64.grad), (v.grad, v64.grad)):
        err = (got.double() - want).norm() / want.norm()
        assert err < 1e-2, err


def test_chunked_head_on_the_gpu_equals_the_plain_head_in_less_memory():
    from prefalign.models import heads

    torch.manual_seed(0)
    N, H, V = 4096, 896, 151936
    h = (torch.randn(N, H, device="cuda") * 0.5).requires_grad_()
    w = (torch.randn(V, H, device="cuda") * 0.02).requires_grad_()
    t = torch.randint(0, V, (N,), device="cuda")
    res = {}
    for name in ("plain", "chunked"):
        h.grad = w.grad = None
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            if name == "plain":
                logits = (h @ w.T).float()
                lp = heads.plain_token_logps(logits, t)
                del logits
            else:
                lp = heads.token_logps_from_hidden(h, w, t)
        lp.sum().backward()
        res[name] = (lp.detach(), h.grad.clone(), w.grad.clone(), torch.cuda.max_memory_allocated() - base)
    for i in range(3):
        err = (res["chunked"][i] - res["plain"][i]).norm() / res["plain"][i].norm()
        assert err < 1e-2, (i, err)
    assert res["chunked"][3] < res["plain"][3] / 3


def test_the_refusal_probe_reads_prompts_on_the_gpu_as_on_the_cpu(tiny_model_ref):
    """The probe's prompt states (mean of the final layer over the prompt's tokens) come from the model on the GPU
    where one is visible (`device: auto`), and equal the CPU's in fp32."""
    prompts = [[Message("user", r["prompt"][0]["content"])] for r in ROWS]
    tok = load_tokenizer(tiny_model_ref)
    model = load_causal_lm(tiny_model_ref, "float32")
    on_cpu = prompt_states(model, tok, prompts)
    on_gpu = prompt_states(model.to("cuda"), tok, prompts)
    assert torch.allclose(on_gpu, on_cpu, rtol=1e-4, atol=1e-5)
