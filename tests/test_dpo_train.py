"""The offline preference trainer (`align train`) on the tiny model: TRL parity, packing, invariances, resume, CLI.

Every run uses `builtin:tiny-llama` (2 layers, hidden 64, random weights, the SmolLM2 tokenizer and chat
template) and a handful of short conversational pairs, in fp32 where numbers are compared.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from align.train import PLOT_KEYS

ROOT = Path(__file__).resolve().parents[1]

ROWS = [
    {
        "prompt": [{"role": "user", "content": f"What is {a} plus {b}?"}],
        "chosen": [{"role": "assistant", "content": f"{a} + {b} = {a + b}."}],
        "rejected": [{"role": "assistant", "content": f"I think it is {a + b + 1}, but I am not sure."}],
    }
    for a, b in [(2, 3), (7, 5), (10, 4), (6, 6), (9, 1), (3, 8), (12, 7), (4, 4)]
]


def write_rows(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return str(path)


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch, tiny_model_ref):
    """A fresh log-prob cache per test; the converted models are shared through a link."""
    from prefalign.models.hub import cache_dir

    models = cache_dir() / "models"
    root = tmp_path / "cache"
    root.mkdir()
    (root / "models").symlink_to(models)
    monkeypatch.setenv("PREFALIGN_CACHE", str(root))
    return root


@pytest.fixture
def data(tmp_path) -> str:
    return write_rows(tmp_path / "pairs.jsonl", ROWS)


def config(tmp_path: Path, data: str, *overrides: str, out: str = "run"):
    """A tiny-model `kind: train` config (LoRA, fp32, all 8 pairs, no eval) with dotted overrides."""
    from align.train import TrainConfig
    from prefalign.config import apply_overrides, build

    base = {
        "kind": "train",
        "model": "builtin:tiny-llama",
        "output_dir": str(tmp_path / out),
        "data": {"source": data, "split": "all"},
        "eval": {"split": "none"},
        "loss": {"name": "sigmoid"},
        "train": {
            "method": "lora",
            "lr": 1e-2,
            "max_steps": 2,
            "batch_size": 8,
            "precision": "fp32",
            "max_length": 128,
            "row_tokens": 256,
            "seed": 0,
            "num_threads": 2,
        },
        "lora": {"r": 4, "alpha": 8},
    }
    return build(TrainConfig, apply_overrides(base, list(overrides)), "test config")


def weights(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(path))


def assert_same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], atol: float) -> None:
    assert a.keys() == b.keys()
    worst = max((a[k].float() - b[k].float()).abs().max().item() for k in a)
    assert worst <= atol, f"largest weight difference {worst:.3g} > {atol:g}"


# --- (a) parity with TRL 1.16's DPOTrainer --------------------------------------------------------------


@pytest.fixture(scope="module")
def perturbed_policy(tmp_path_factory, tiny_model_ref) -> str:
    """The tiny model with its weights moved a little, so the policy differs from the reference."""
    from transformers import AutoModelForCausalLM

    from prefalign.models.hub import load_tokenizer, resolve

    model = AutoModelForCausalLM.from_pretrained(resolve(tiny_model_ref), dtype=torch.float32)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g))
    out = tmp_path_factory.mktemp("policy")
    model.save_pretrained(str(out))
    load_tokenizer(tiny_model_ref).save_pretrained(str(out))
    return str(out)


@pytest.mark.parametrize(
    "loss_type,params",
    [
        ("sigmoid", {"beta": 0.1}),
        ("ipo", {"beta": 0.1}),
        ("robust", {"beta": 0.1, "label_smoothing": 0.2}),
        ("hinge", {"beta": 0.5}),
    ],
)
def test_first_batch_loss_matches_trl_dpo_trainer(tmp_path, perturbed_policy, loss_type, params):
    """Our first-batch loss equals TRL's `DPOTrainer.compute_loss` on the same weights and token sequences.

    Tokenization: TRL renders the same conversations with the same chat template, but keeps the "\\n" the
    SmolLM2 template writes after <|im_end|> as a completion token; we end each response at <|im_end|>
    (the token generation stops at). The test checks that this is the only difference, then feeds TRL
    our token ids so both sides score identical sequences. The policy is a perturbed copy of the
    reference (the tiny model), so the log-ratios are not zero.
    """
    from datasets import Dataset
    from transformers import AutoModelForCausalLM
    from trl import DPOConfig, DPOTrainer

    from align.train import setup
    from prefalign.models.hub import load_tokenizer, resolve

    rows = ROWS[:4]
    cfg = config(
        tmp_path,
        write_rows(tmp_path / "four.jsonl", rows),
        f"model={perturbed_policy}",
        "reference.model=builtin:tiny-llama",
        "reference.kind=precomputed",
        "train.method=full",
        "train.batch_size=4",
        f"loss.name={loss_type}",
        *(f"loss.params.{k}={v}" for k, v in params.items()),
    )
    ours = setup(cfg)
    batch = ours.trainer._prepare_inputs(next(iter(ours.trainer.get_train_dataloader())))
    with torch.no_grad():
        our_loss = ours.trainer.compute_loss(ours.trainer.model, batch).item()

    tok = load_tokenizer("builtin:tiny-llama")
    policy = AutoModelForCausalLM.from_pretrained(perturbed_policy, dtype=torch.float32)
    reference = AutoModelForCausalLM.from_pretrained(resolve("builtin:tiny-llama"), dtype=torch.float32)
    args = DPOConfig(
        output_dir=str(tmp_path / "trl"),
        loss_type=[loss_type],
        beta=params["beta"],
        label_smoothing=params.get("label_smoothing", 0.0),
        bf16=False,
        use_cpu=True,
        per_device_train_batch_size=4,
        report_to="none",
        gradient_checkpointing=False,
        disable_tqdm=True,
        seed=0,
    )
    trl = DPOTrainer(
        model=policy, ref_model=reference, args=args, train_dataset=Dataset.from_list(rows), processing_class=tok
    )
    newline = tok("\n", add_special_tokens=False)["input_ids"]
    by_prompt = {tuple(p.prompt_ids): p for p in ours.train_pairs}
    for ex in trl.train_dataset:
        mine = by_prompt[tuple(ex["prompt_ids"])]
        assert ex["chosen_ids"] == mine.chosen_ids + newline
        assert ex["rejected_ids"] == mine.rejected_ids + newline
    trl.train_dataset = Dataset.from_list(
        [
            {"prompt_ids": p.prompt_ids, "chosen_ids": p.chosen_ids, "rejected_ids": p.rejected_ids}
            for p in ours.train_pairs
        ]
    )
    trl_batch = trl._prepare_inputs(next(iter(trl.get_train_dataloader())))
    with torch.no_grad():
        trl_loss = trl.compute_loss(trl.model, trl_batch).item()
    print(f"{loss_type}: ours {our_loss:.6f}  TRL {trl_loss:.6f}")
    assert abs(our_loss - trl_loss) <= 1e-4 * max(1.0, abs(trl_loss))
    assert abs(our_loss - {"sigmoid": 0.6931, "ipo": 25.0, "robust": 0.6931, "hinge": 1.0}[loss_type]) > 1e-3


# --- (b) packed prefix-shared log-probs equal separate encoding ----------------------------------------


@pytest.mark.parametrize("layout", ["segments", "mask", "segments-sdpa"])
def test_packed_logps_equal_separate_encoding(data, tiny_model_ref, layout, monkeypatch):
    """Both packing layouts (and the segment attention's long-segment SDPA path) give each sequence's own log-probs."""
    from prefalign.models import attention

    if layout == "segments-sdpa":
        monkeypatch.setattr(attention, "MATH_MAX_TOKENS", 8)
    from prefalign.models.forward import sequence_logps
    from prefalign.models.hub import load_causal_lm, load_tokenizer
    from preference_data.packing import pack_pairs
    from preference_data.sources import read_records
    from preference_data.tokenize import tokenize_pairs

    tok = load_tokenizer(tiny_model_ref)
    model = load_causal_lm(tiny_model_ref, dtype="float32")
    tp, _ = tokenize_pairs(read_records(data)[0][:5], tok, None, "drop")
    with torch.no_grad():
        packed = sequence_logps(
            model,
            pack_pairs(
                tp,
                tok.pad_token_id,
                row_tokens=150,  # (2B,) several rows
                layout=layout.split("-")[0],
            ),
        )
        separate = []
        for k in ("chosen_ids", "rejected_ids"):
            for p in tp:
                ids = torch.tensor([p.prompt_ids + getattr(p, k)])
                logits = model(input_ids=ids).logits[0, :-1].float()  # (T-1, V) predicts tokens 1..T-1
                lp = torch.log_softmax(logits, -1).gather(-1, ids[0, 1:, None])[:, 0]
                separate.append(lp[len(p.prompt_ids) - 1 :].sum())
    torch.testing.assert_close(packed, torch.stack(separate), atol=1e-4, rtol=0)


def test_segment_attention_gradients_equal_mask_layout(data, tiny_model_ref, monkeypatch):
    """Backward through the segment attention (matmul and SDPA paths, and both in one row) gives the dense-mask
    gradients, and a model switched to it still runs plain (unpacked) calls exactly as SDPA does."""
    from prefalign.models import attention
    from prefalign.models.forward import sequence_logps
    from prefalign.models.hub import load_causal_lm, load_tokenizer
    from preference_data.packing import pack_pairs
    from preference_data.sources import read_records
    from preference_data.tokenize import tokenize_pairs

    tok = load_tokenizer(tiny_model_ref)
    model = load_causal_lm(tiny_model_ref, dtype="float32")
    tp, _ = tokenize_pairs(read_records(data)[0][:4], tok, None, "drop")
    ids = torch.tensor([tp[0].prompt_ids + tp[0].chosen_ids])
    with torch.no_grad():
        plain_before = model(input_ids=ids).logits

    def grads(layout: str) -> dict[str, torch.Tensor]:
        model.zero_grad()
        logps = sequence_logps(model, pack_pairs(tp, tok.pad_token_id, 150, layout))
        (logps * torch.linspace(-1, 1, logps.numel())).sum().backward()
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    want = grads("mask")
    assert model.config._attn_implementation != attention.NAME
    sizes = sorted(len(p.prompt_ids) + len(p.chosen_ids) + len(p.rejected_ids) for p in tp)
    assert sizes[0] < sizes[-1]  # a threshold between them sends segments of one row down both paths
    for math_max in (attention.MATH_MAX_TOKENS, 8, sizes[len(sizes) // 2 - 1]):
        monkeypatch.setattr(attention, "MATH_MAX_TOKENS", math_max)
        got = grads("segments")
        assert got.keys() == want.keys()
        for n in want:
            torch.testing.assert_close(got[n], want[n], atol=1e-5, rtol=1e-4, msg=n)
    assert model.config._attn_implementation == attention.NAME
    with torch.no_grad():
        torch.testing.assert_close(model(input_ids=ids).logits, plain_before, atol=1e-5, rtol=0)


def test_segment_attention_under_bf16_autocast_follows_the_mask_layout(data, tiny_model_ref, monkeypatch):
    """Under bf16 autocast (the toolkit's bf16 training) the segment attention's paths give the log-probs and
    gradients of the dense-mask layout to bf16 precision, and a segment's tokens never see another's: changing one
    pair's response leaves every other pair's log-probs exactly as they were."""
    from prefalign.models import attention
    from prefalign.models.forward import sequence_logps
    from prefalign.models.hub import load_causal_lm, load_tokenizer
    from preference_data.packing import pack_pairs
    from preference_data.sources import read_records
    from preference_data.tokenize import tokenize_pairs

    tok = load_tokenizer(tiny_model_ref)
    model = load_causal_lm(tiny_model_ref, dtype="float32")
    tp, _ = tokenize_pairs(read_records(data)[0][:4], tok, None, "drop")
    weights = torch.linspace(-1, 1, 2 * len(tp))

    def run(pairs, layout: str) -> tuple[torch.Tensor, torch.Tensor]:
        model.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logps = sequence_logps(model, pack_pairs(pairs, tok.pad_token_id, 150, layout))
        (logps * weights).sum().backward()
        grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
        return logps.detach(), grads

    want, want_grads = run(tp, "mask")
    for math_max in (attention.MATH_MAX_TOKENS, 8):
        monkeypatch.setattr(attention, "MATH_MAX_TOKENS", math_max)
        got, got_grads = run(tp, "segments")
        torch.testing.assert_close(got, want, atol=0.05 * want.abs().max().item(), rtol=0)
        cos = torch.nn.functional.cosine_similarity(got_grads, want_grads, dim=0)
        assert cos > 0.99, (math_max, cos)
        changed = list(tp)
        changed[1] = dataclasses.replace(tp[1], chosen_ids=tp[1].chosen_ids[:-1] + [tp[2].chosen_ids[0]])
        other, _ = run(changed, "segments")
        keep = [i for i in range(2 * len(tp)) if i != 1]  # chosen sequences first, then rejected
        assert torch.equal(other[keep], got[keep])
        assert not torch.equal(other[1], got[1])


# --- (c) gradient accumulation: 1 x 8 equals 8 x 1 ----------------------------------------------------


def one_full_step_from(policy: str) -> tuple[str, ...]:
    """Overrides for one full fine-tuning step from `policy` against the tiny model as a precomputed reference (the
    policy starts away from the reference, so the first loss is not log 2)."""
    return (
        f"model={policy}",
        "reference.model=builtin:tiny-llama",
        "train.method=full",
        "reference.kind=precomputed",
        "train.max_steps=1",
        "train.lr=1e-3",
    )


def test_grad_accumulation_invariance(tmp_path, data, perturbed_policy):
    """One optimizer step on 8 pairs: one micro-batch of 8 equals 8 accumulated micro-batches of 1.

    Full fine-tuning with a precomputed reference; the policy starts away from the reference, so the
    first loss is not log 2.
    """
    from align.train import run

    common = one_full_step_from(perturbed_policy)
    r1 = run(config(tmp_path, data, *common, "train.batch_size=8", "train.grad_accum=1", out="b8"))
    r8 = run(config(tmp_path, data, *common, "train.batch_size=1", "train.grad_accum=8", out="b1"))
    assert r1["steps"] == r8["steps"] == 1
    assert abs(r1["train_loss"] - 0.6931) > 1e-3
    assert r1["train_loss"] == pytest.approx(r8["train_loss"], abs=1e-5)
    w1 = weights(Path(r1["policy_dir"]) / "model.safetensors")
    start = weights(Path(perturbed_policy) / "model.safetensors")
    assert max((w1[k] - start[k]).abs().max().item() for k in w1) > 5e-4  # the step moved the weights (~lr)
    # Adam's first step moves each weight by about lr * sign(grad): compare at a small fraction of lr
    assert_same_weights(w1, weights(Path(r8["policy_dir"]) / "model.safetensors"), atol=1e-5)


def test_token_budget_micro_batches_give_the_one_batch_step(tmp_path, data, perturbed_policy, monkeypatch):
    """train.token_budget cuts a batch of 8 pairs into forwards of at most that many tokens, each backpropagated with
    its share of the loss: the loss and the step equal one forward of the whole batch."""
    from align.train import run
    from preference_data.packing import PackCollator

    packed: list[int] = []
    real_pack = PackCollator.pack

    def counting_pack(self, pairs):
        packed.append(len(pairs))
        return real_pack(self, pairs)

    common = one_full_step_from(perturbed_policy)
    r1 = run(config(tmp_path, data, *common, "train.batch_size=8", out="whole"))
    monkeypatch.setattr(PackCollator, "pack", counting_pack)
    r2 = run(config(tmp_path, data, *common, "train.batch_size=8", "train.token_budget=200", out="cut"))
    assert len(packed) >= 3 and sum(packed) == 8  # the one batch of 8 pairs went through in several forwards
    assert r1["train_loss"] == pytest.approx(r2["train_loss"], abs=1e-5)
    assert_same_weights(
        weights(Path(r1["policy_dir"]) / "model.safetensors"),
        weights(Path(r2["policy_dir"]) / "model.safetensors"),
        atol=1e-5,
    )


# --- (d) data parallel: 2 processes x 4 pairs equals 1 process x 8 pairs -------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("budget", [0, 150])
def test_two_process_data_parallel_matches_one_process(tmp_path, data, private_cache, budget):
    """2 processes x 4 pairs = 1 process x 8; with train.token_budget each rank's 4 pairs go in several forwards
    (the ranks may need different numbers of them: they run in lock step)."""
    from align.train import run
    from prefalign.config import dump_yaml

    if budget:  # pairs of unlike lengths, so the ranks' batches need different numbers of forwards
        longer = " Let me check that again."
        data = write_rows(
            tmp_path / "varied.jsonl",
            [
                {
                    **r,
                    "rejected": [
                        {"role": "assistant", "content": r["rejected"][0]["content"] + longer * (3 * (i % 4))}
                    ],
                }
                for i, r in enumerate(ROWS)
            ],
        )
    one = run(config(tmp_path, data, out="one"))
    cfg = config(tmp_path, data, "train.batch_size=4", f"train.token_budget={budget}", out="two")
    dump_yaml(cfg, tmp_path / "ddp.yaml")
    env = {
        **os.environ,
        "PREFALIGN_CACHE": str(private_cache),
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": str(ROOT),
    }
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node",
            "2",
            "-m",
            "align.cli.main",
            "train",
            "--config",
            str(tmp_path / "ddp.yaml"),
            "train.num_threads=1",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]

    def losses(run: str) -> list[float]:
        rows = [json.loads(x) for x in (tmp_path / run / "metrics.jsonl").read_text().splitlines()]
        return [r["loss"] for r in rows if "loss" in r]

    assert one["steps"] == 2 and len(losses("two")) == 2
    assert losses("two") == pytest.approx(losses("one"), abs=1e-5)  # step 2 sees the first update
    assert_same_weights(
        weights(tmp_path / "one" / "adapter" / "adapter_model.safetensors"),
        weights(tmp_path / "two" / "adapter" / "adapter_model.safetensors"),
        atol=1e-5,
    )


# --- (e) interrupt and --resume reaches the same weights ----------------------------------------------


@pytest.mark.slow  # a whole run: its siblings in the slow tier (kill, resume, real models)
def test_resume_reaches_the_same_weights(tmp_path, data):
    import shutil

    from align.train import run

    cfg = config(tmp_path, data, "train.max_steps=4", "train.save_every=2", "train.batch_size=2", "save_merged=false")
    full = run(cfg)
    adapter = Path(full["adapter_dir"]) / "adapter_model.safetensors"
    uninterrupted = weights(adapter)
    # as if killed between step 2 and step 4: the final outputs and the last checkpoint are gone
    shutil.rmtree(full["adapter_dir"])
    shutil.rmtree(Path(cfg.output_dir) / "checkpoints" / "checkpoint-4")
    resumed = run(cfg, resume=True)
    assert resumed["steps"] == 4
    assert_same_weights(uninterrupted, weights(adapter), atol=1e-6)


def test_a_full_disk_during_a_checkpoint_leaves_the_last_complete_one(tmp_path, data, monkeypatch, capsys):
    """ENOSPC while checkpoint-4 is written (after its weights, during the optimizer state): the error names the
    path and the checkpoint to resume from; checkpoint-2 stays whole and is the one --resume continues from, the cut
    checkpoint-4 passed over and said so."""
    import errno

    import torch

    from align.train import run
    from prefalign.errors import UserError
    from prefalign.training.trainer import CHECKPOINT_COMPLETE, last_checkpoint

    cfg = config(tmp_path, data, "train.max_steps=4", "train.save_every=2", "train.batch_size=2", "save_merged=false")
    real_save = torch.save

    def full_disk(obj, f, *a, **k):
        if "checkpoint-4" in str(f):
            raise OSError(errno.ENOSPC, "No space left on device", str(f))
        return real_save(obj, f, *a, **k)

    monkeypatch.setattr(torch, "save", full_disk)
    with pytest.raises(UserError, match="the disk is full: writing .*checkpoint-4.*checkpoint-2.*--resume") as e:
        run(cfg)
    assert "MiB free" in str(e.value)
    ckpts = Path(cfg.output_dir) / "checkpoints"
    assert (ckpts / "checkpoint-2" / CHECKPOINT_COMPLETE).exists()
    assert (ckpts / "checkpoint-4").is_dir() and not (ckpts / "checkpoint-4" / CHECKPOINT_COMPLETE).exists()
    assert last_checkpoint(str(ckpts)) == str(ckpts / "checkpoint-2")
    monkeypatch.setattr(torch, "save", real_save)
    capsys.readouterr()
    assert run(cfg, resume=True)["steps"] == 4
    out = capsys.readouterr().out
    assert "passing over" in out and "checkpoint-4" in out and "continuing from" in out
    assert (ckpts / "checkpoint-4" / CHECKPOINT_COMPLETE).exists()


# --- (f) end to end through the CLI -------------------------------------------------------------------


def test_cli_end_to_end_writes_the_run_directory(tmp_path, data, capsys):
    from transformers import AutoModelForCausalLM

    from align.cli.main import main
    from prefalign.config import dump_yaml

    cfg = config(tmp_path, data, "train.batch_size=4", "eval.split=all", "eval.limit=4")
    dump_yaml(cfg, tmp_path / "cfg.yaml")
    assert main(["train", "--config", str(tmp_path / "cfg.yaml"), "train.max_steps=2"]) == 0
    out = capsys.readouterr().out
    assert "held-out implicit-reward accuracy" in out
    run_dir = Path(cfg.output_dir)
    for name in (
        "config.yaml",
        "metrics.jsonl",
        "report.json",
        "adapter/adapter_model.safetensors",
        "adapter/adapter_config.json",
        "adapter/tokenizer_config.json",
        "merged/model.safetensors",
    ):
        assert (run_dir / name).exists(), name
    page = (run_dir / "report.html").read_text()  # the run report, with every logged metric in its table
    assert (run_dir / "dashboard.png").exists() and "Finished: 2 steps" in page
    for name in ("rewards/margins", "log_ratio/per_token", "logps/chosen", "logps/rejected", "rewards/accuracies"):
        assert f"<td>{name}</td>" in page or f"<td>{name}<br>" in page, name
    assert "not a KL" in page  # the log-ratio on the data's tokens is said to be what it is
    assert json.loads((run_dir / "data_report.json").read_text())["tokenization"]["n_out"] > 0
    lora_b = [v for k, v in weights(run_dir / "adapter" / "adapter_model.safetensors").items() if "lora_B" in k]
    assert lora_b and any(v.abs().max() > 0 for v in lora_b)  # LoRA B starts at zero: it moved
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    for key in PLOT_KEYS:  # every curve of the dashboard is logged, TRL's names where TRL has them
        assert key in rows[0], key
    assert rows[0]["log_ratio/per_token"] == pytest.approx(0.0, abs=1e-6)  # adapters start at zero: policy == reference
    report = json.loads((run_dir / "report.json").read_text())
    assert report["reference"]["mode"] == "adapters_disabled" and report["steps"] == 2
    # held-out accuracy and margin: the implicit rewards β(log π - log π_ref) of the saved adapter (reference:
    # its base, adapters disabled) on the same 4 pairs, from the implicit scorer rather than the trainer
    from preference_data.records import conversation
    from reward_models.scorers import load_scorer

    implicit = load_scorer("implicit", model=str(run_dir / "adapter"), beta=0.1, dtype="float32")
    prompts = [conversation(r["prompt"]) for r in ROWS[:4]]
    rc = torch.tensor(implicit.score(prompts, [conversation(r["chosen"]) for r in ROWS[:4]]))
    rr = torch.tensor(implicit.score(prompts, [conversation(r["rejected"]) for r in ROWS[:4]]))
    assert report["eval"]["pairs"] == 4
    assert report["eval"]["accuracy"] == pytest.approx((rc > rr).float().mean().item())
    assert report["eval"]["margin"] == pytest.approx((rc - rr).mean().item(), abs=1e-4)
    assert (rc - rr).abs().max() > 1e-4  # the adapter moved: the rewards are not all zero
    # the merged copy computes what base + adapter compute
    from peft import PeftModel

    from prefalign.models.hub import resolve

    merged = AutoModelForCausalLM.from_pretrained(str(run_dir / "merged"), dtype=torch.float32)
    base = AutoModelForCausalLM.from_pretrained(resolve("builtin:tiny-llama"), dtype=torch.float32)
    adapted = PeftModel.from_pretrained(base, str(run_dir / "adapter"))
    ids = torch.tensor([[1, 9690, 198, 2683, 359, 253, 5356, 30]])
    with torch.no_grad():
        torch.testing.assert_close(merged(input_ids=ids).logits, adapted(input_ids=ids).logits, atol=1e-4, rtol=0)


# --- (g) bad configs fail before any model loads ------------------------------------------------------


@pytest.mark.parametrize(
    "overrides,expect",
    [
        (["loss.name=sigmod"], "did you mean 'sigmoid'"),
        (["reference.kind=none"], "reference.kind: loss 'sigmoid' needs a reference"),
        (["loss.name=simpo", "reference.kind=precomputed"], "reference-free"),
        (["loss.name=simpo", "reference.model=builtin:tiny-llama"], "reference-free"),
        (["loss.name=inpo"], "previous.model: loss 'inpo' needs the previous iterate"),
    ],
)
def test_bad_loss_configs_fail_before_loading(tmp_path, data, capsys, monkeypatch, overrides, expect):
    import align.train
    from align.cli.main import main
    from prefalign.config import dump_yaml

    def no_loading(*a, **k):
        raise AssertionError("a model was loaded before the config was checked")

    monkeypatch.setattr(align.train, "load_model", no_loading)
    monkeypatch.setattr(align.train, "load_tokenizer", no_loading)
    dump_yaml(config(tmp_path, data), tmp_path / "cfg.yaml")
    assert main(["train", "--config", str(tmp_path / "cfg.yaml"), *overrides]) == 2
    err = capsys.readouterr().err
    assert expect in err, err


# --- (h) the frozen log-prob cache --------------------------------------------------------------------


def test_reference_logps_are_cached_and_reused(tmp_path, data, private_cache):
    from align.train import run

    common = ("train.method=full", "reference.kind=precomputed", "train.max_steps=1", "train.batch_size=4")
    first = run(config(tmp_path, data, *common, out="a"))
    second = run(config(tmp_path, data, *common, out="b"))
    assert first["reference"]["cache"] == {"train": "miss"}
    assert second["reference"]["cache"] == {"train": "hit"}
    assert first["reference"]["files"] == second["reference"]["files"]
    assert Path(first["reference"]["files"]["train"]).parent == private_cache / "logps"
    # a different max_length is another key
    third = run(config(tmp_path, data, *common, "train.max_length=100", out="c"))
    assert third["reference"]["cache"] == {"train": "miss"}


# --- the other recipes: SimPO (no reference), IPO, an INPO step with a precomputed previous iterate ----


def _plain_average_logps(rows: list[dict]) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean log-prob per response token of chosen and rejected (B,), each sequence encoded on its own."""
    from prefalign.models.hub import load_causal_lm, load_tokenizer
    from preference_data.records import Message, PreferencePair
    from preference_data.tokenize import tokenize_pairs

    tok = load_tokenizer("builtin:tiny-llama")
    model = load_causal_lm("builtin:tiny-llama", dtype="float32")
    conv = lambda xs: [Message(x["role"], x["content"]) for x in xs]  # noqa: E731
    pairs, _ = tokenize_pairs(
        [PreferencePair(conv(r["prompt"]), conv(r["chosen"]), conv(r["rejected"])) for r in rows], tok, 128, "drop"
    )
    out: dict[str, list[float]] = {"c": [], "r": []}
    with torch.no_grad():
        for p in pairs:
            for key, resp in (("c", p.chosen_ids), ("r", p.rejected_ids)):
                logp = model(input_ids=torch.tensor([p.prompt_ids + resp])).logits[0].log_softmax(-1)  # (T, V)
                P = len(p.prompt_ids)
                out[key].append(sum(logp[P - 1 + i, t].item() for i, t in enumerate(resp)) / len(resp))
    return torch.tensor(out["c"]), torch.tensor(out["r"])


@pytest.mark.parametrize(
    "overrides,first_loss",
    [
        # LoRA starts at the base, so every log-ratio is 0 at step 1: IPO gives (1/(2β))², INPO gives c²
        (["loss.name=ipo", "loss.params.beta=0.25"], 4.0),
        (
            [
                "loss.name=inpo",
                "loss.params.target_margin=3.0",
                "previous.model=builtin:tiny-llama",
                "reference.model=builtin:tiny-llama",
            ],
            9.0,
        ),
        (["loss.name=simpo", "reference.kind=none"], "simpo"),
    ],
)
def test_other_losses_train(tmp_path, data, overrides, first_loss):
    from align.train import run

    report = run(config(tmp_path, data, "train.max_steps=1", *overrides))
    rows = [json.loads(x) for x in (Path(report["adapter_dir"]).parent / "metrics.jsonl").read_text().splitlines()]
    if first_loss == "simpo":
        # step 1 (LoRA starts at the base): mean over pairs of -log σ(β(avg logπ_c - avg logπ_r) - γ), β = 2,
        # γ = β * 0.25 (the defaults), the average log-probs from plain unpacked forwards of the base model
        import torch.nn.functional as F

        avg_c, avg_r = _plain_average_logps(ROWS)
        first_loss = F.softplus(-(2.0 * (avg_c - avg_r) - 0.5)).mean().item()
    if first_loss is not None:
        assert rows[0]["loss"] == pytest.approx(first_loss, rel=1e-5)
    if "loss.name=inpo" in overrides:
        # π_t is the initial policy, the adapters-disabled reference: its forward serves both
        assert report["reference"]["mode"] == "adapters_disabled"
        assert report["previous"] == {"model": "builtin:tiny-llama", "from": "reference (adapters disabled)"}
    if "loss.name=simpo" in overrides:
        assert report["reference"]["mode"] == "none" and "log_ratio/per_token" not in rows[0]


def test_chosen_logp_drop_alert_fires_once(tmp_path, data, capsys):
    from align.train import setup

    trainer = setup(config(tmp_path, data, "alerts.chosen_logp_drop=0.5")).trainer
    # the per-token log-prob of a batch moves with the batch (-1.0 then -2.0 here) and raises nothing; the policy's
    # log-prob of the chosen responses against the reference's on the same batch does, once past 0.5 nats
    for logp, ratio in ((-1.0, -0.1), (-2.0, -0.3), (-1.6, -0.6), (-1.2, -0.8)):
        trainer.stash({"logps/chosen_per_token": logp, "log_ratio/chosen_per_token": ratio})
        trainer.log({"loss": 1.0})
    assert len(trainer.alerts) == 1 and "0.600 nats per token" in trainer.alerts[0]
    assert capsys.readouterr().out.count("ALERT") == 1
    saved = [json.loads(x) for x in (Path(trainer.metrics_path).parent / "alerts.jsonl").read_text().splitlines()]
    assert [a["message"] for a in saved] == trainer.alerts  # written as raised, for the report of a running run


# --- dropout ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("disable", [True, False])
def test_dropout_is_off_for_the_policy_and_its_reference_forward(tmp_path, data, tiny_model_ref, disable):
    """A model with attention dropout 0.5: with train.disable_dropout (the default, as TRL) two train-mode
    forwards of the policy, and of its adapters-disabled reference, give the same log-probs; without it
    they differ (so the check is not vacuous)."""
    from align.train import setup
    from prefalign.models.hub import load_causal_lm, load_tokenizer

    m = load_causal_lm(tiny_model_ref, dtype="float32")
    m.config.attention_dropout = 0.5
    src = tmp_path / "dropout_model"
    m.save_pretrained(str(src))
    load_tokenizer(tiny_model_ref).save_pretrained(str(src))
    s = setup(
        config(
            tmp_path,
            data,
            f"model={src}",
            f"train.disable_dropout={str(disable).lower()}",
            "reference.kind=adapters_disabled",
            "train.compile=false",
        )
    )
    net = s.trainer.model  # PackedForward(policy, "logps") in train mode
    net.train()
    batch = s.trainer.data_collator(s.train_pairs[:4])
    batch = {k: v.to(s.trainer.args.device) if torch.is_tensor(v) else v for k, v in batch.items()}  # as the trainer
    with torch.no_grad():
        a, b = net(**batch), net(**batch)
        with s.model.disable_adapter():
            ra, rb = net(**batch), net(**batch)
    same = torch.equal(a, b) and torch.equal(ra, rb)
    assert same == disable


# --- pair weights ---------------------------------------------------------------------------------------


def test_margin_weights_equal_training_on_the_weighted_pairs_alone(tmp_path, perturbed_policy):
    """pair_weights: margin with margins 0 on half the pairs and 1 on the other half (weights 0 and 2): one full
    fine-tuning step on all 8 pairs is one unweighted step on the 4 weighted pairs (the same first loss and weights).
    """
    from align.train import run

    weighted = [{**r, "margin": float(i % 2)} for i, r in enumerate(ROWS)]
    alone = [r for i, r in enumerate(ROWS) if i % 2]
    common = one_full_step_from(perturbed_policy)
    rw = run(config(tmp_path, write_rows(tmp_path / "w.jsonl", weighted), *common, "loss.pair_weights=margin", out="w"))
    ra = run(config(tmp_path, write_rows(tmp_path / "a.jsonl", alone), *common, "train.batch_size=4", out="a"))
    assert rw["pair_weights"] == {"kind": "margin", "mean_margin": 0.5, "max_weight": 2.0}
    assert abs(ra["train_loss"] - 0.6931) > 1e-3  # the pairs' losses differ from log 2: the weights matter
    assert rw["train_loss"] == pytest.approx(ra["train_loss"], abs=1e-5)
    assert_same_weights(
        weights(Path(rw["policy_dir"]) / "model.safetensors"),
        weights(Path(ra["policy_dir"]) / "model.safetensors"),
        atol=1e-5,
    )
    unweighted = run(config(tmp_path, write_rows(tmp_path / "u.jsonl", weighted), *common, out="u"))
    assert abs(unweighted["train_loss"] - rw["train_loss"]) > 1e-4  # uniform weights differ


def test_margin_weights_name_the_pairs_without_a_margin(tmp_path, data):
    from align.train import run
    from prefalign.errors import UserError

    with pytest.raises(UserError, match=r"pairs\.jsonl: loss\.pair_weights: margin needs .* 8 of 8 lack one"):
        run(config(tmp_path, data, "loss.pair_weights=margin"))


# --- interruption and reruns -------------------------------------------------------------------------------------


def test_ctrl_c_saves_the_step_and_a_rerun_neither_starts_over_nor_repeats_a_row(tmp_path, data, capsys, monkeypatch):
    """The first Ctrl-C (a SIGINT sent during step 2 of 4) lets the step finish, saves checkpoint-2 and exits naming
    --resume; the same command without --resume refuses to start over beside the checkpoint; with --resume it
    says what it continues from and writes each step's metrics row once."""
    import os
    import signal

    from transformers import TrainerCallback

    from align.cli.main import main
    from prefalign.training import recipe

    class CtrlC(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            if state.global_step == 1:  # step 2 is running
                os.kill(os.getpid(), signal.SIGINT)

    cfg = tmp_path / "dpo.yaml"
    cfg.write_text(
        f"kind: train\nmodel: builtin:tiny-llama\noutput_dir: {tmp_path / 'run'}\n"
        f"data: {{source: {data}, split: all}}\neval: {{split: none}}\n"
        "train: {method: lora, lr: 1.0e-2, max_steps: 4, batch_size: 4, precision: fp32, max_length: 128, "
        "log_every: 1, save_every: 1, compile: false, seed: 0}\nlora: {r: 4, alpha: 8}\n"
    )
    original_train = recipe.RecipeRun.train

    def train_with_ctrl_c(self, trainer, train, evaluates):
        trainer.add_callback(CtrlC())
        return original_train(self, trainer, train, evaluates)

    monkeypatch.setattr(recipe.RecipeRun, "train", train_with_ctrl_c)
    assert main(["train", str(cfg)]) == 130
    err = capsys.readouterr().err
    assert "interrupted at step 2" in err and "--resume" in err and "checkpoint-2" in err
    assert (tmp_path / "run" / "checkpoints" / "checkpoint-2").is_dir()
    monkeypatch.setattr(recipe.RecipeRun, "train", original_train)

    assert main(["train", str(cfg)]) == 2  # beside the checkpoint, without --resume: refused, both ways named
    err = capsys.readouterr().err
    assert (
        "holds an earlier run's checkpoints (last: checkpoint-2)" in err and "--resume" in err and "--overwrite" in err
    )

    assert main(["train", str(cfg), "--resume"]) == 0
    out = capsys.readouterr().out
    assert "--resume: continuing from" in out and "checkpoint-2" in out
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines() if x.strip()]
    steps = [r["step"] for r in rows if "loss" in r]
    assert steps == sorted(set(steps)) and steps[-1] == 4  # each step once


@pytest.mark.parametrize(("precision", "save", "saved"), [("bf16", "auto", "bfloat16"), ("bf16", "fp32", "float32")])
def test_the_merged_policy_is_saved_in_the_precision_it_trained_in(tmp_path, data, precision, save, saved):
    """`train.save_precision: auto` saves a bf16 run's merged copy in bf16 (half the disk): the fp32 merge cast once,
    so it loads in bf16 as the fp32 merged copy would; fp32 keeps it in fp32. The adapter is saved as trained."""
    from safetensors.torch import load_file

    from align.train import run

    cfg = config(tmp_path, data, f"train.precision={precision}", f"train.save_precision={save}", "save_merged=true")
    report = run(cfg)
    merged = load_file(str(Path(report["merged_dir"]) / "model.safetensors"))
    assert {str(t.dtype).removeprefix("torch.") for t in merged.values()} == {saved}
    assert json.loads((Path(report["merged_dir"]) / "config.json").read_text())["dtype"] == saved
    adapter = load_file(str(Path(report["adapter_dir"]) / "adapter_model.safetensors"))
    assert {t.dtype for t in adapter.values()} == {torch.float32}
    if saved == "bfloat16":  # the bf16 copy is the fp32 merge rounded once: the fp32 run's copy, cast
        fp32 = run(config(tmp_path, data, f"train.precision={precision}", "train.save_precision=fp32", out="fp32"))
        other = load_file(str(Path(fp32["merged_dir"]) / "model.safetensors"))
        assert all(torch.equal(other[k].to(torch.bfloat16), merged[k]) for k in merged)
