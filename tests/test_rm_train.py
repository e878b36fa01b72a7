"""Bradley-Terry reward models: reward position, TRL parity, save/reload, strength, resume, DDP, bad input."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from align.cli.main import main
from prefalign.config import build
from prefalign.models.forward import last_token_rewards
from preference_data.packing import pack_pairs, pack_single
from preference_data.records import Message, PreferencePair
from preference_data.tokenize import tokenize_pairs
from reward_models.rm_config import RMTrainConfig
from reward_models.rm_train import run
from reward_models.training import pair_rewards

ROOT = Path(__file__).resolve().parents[1]


def suite_like_pairs(n: int) -> list[PreferencePair]:
    out = []
    for i in range(n):
        a, b = i % 7 + 2, i % 5 + 3
        out.append(
            PreferencePair(
                [Message("user", f"What is {a} + {b}? Reply with the number only.")],
                [Message("assistant", f"{a + b}")],
                [Message("assistant", f"The sum of {a} and {b} is {a + b + 1}, I think, but I am not sure.")],
                source="toy",
                attributes={"family": "sum", "corruption": "wrong_value" if i % 2 else "padding"},
            )
        )
    return out


def write_pairs(path: Path, pairs: list[PreferencePair]) -> str:
    path.write_text("".join(json.dumps(p.to_dict()) + "\n" for p in pairs), encoding="utf-8")
    return str(path)


def tiny_cfg(tmp_path: Path, data: str, **over) -> RMTrainConfig:
    d = {
        "model": "builtin:tiny-llama",
        "output_dir": str(tmp_path / "run"),
        "data": {"source": data, "split": "all"},
        "eval": {"split": "none", "stats_pairs": 8},
        "train": {
            "max_steps": 3,
            "batch_size": 4,
            "lr": 1e-3,
            "max_length": 128,
            "row_tokens": 512,
            "precision": "fp32",
            "seed": 0,
        },
    }
    for k, v in over.items():
        d[k] = {**d.get(k, {}), **v} if isinstance(v, dict) else v
    return build(RMTrainConfig, d)


@pytest.fixture(scope="module")
def tiny_rm():
    from prefalign.models.hub import load_seq_cls

    torch.manual_seed(0)
    model = load_seq_cls("builtin:tiny-llama", dtype="float32")
    torch.nn.init.normal_(model.score.weight, std=0.5)
    return model


# --- where the reward is read ------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["segments", "mask"])
def test_reward_is_read_at_the_last_real_token_with_any_padding(tiny_rm, smollm2_tokenizer, layout):
    tok = smollm2_tokenizer
    assert tok.pad_token_id == tok.eos_token_id  # the pitfall: pad == EOS
    pairs, _ = tokenize_pairs(suite_like_pairs(3), tok, 128, "drop")
    seqs = [p.prompt_ids + p.chosen_ids for p in pairs] + [p.prompt_ids + p.rejected_ids for p in pairs]
    assert all(s[-1] == tok.eos_token_id for s in seqs)

    def expected(ids: list[int]) -> float:
        h = tiny_rm.model(input_ids=torch.tensor([ids])).last_hidden_state[0, -1]
        return tiny_rm.score(h).item()

    with torch.no_grad():
        want = torch.tensor([expected(s) for s in seqs])
        packed = last_token_rewards(tiny_rm, pack_pairs(pairs, tok.pad_token_id, 512, layout))[:, 0]
        assert torch.allclose(packed, want, atol=1e-4)
        L = max(map(len, seqs))
        # right padding: the last real token is found from the attention mask, not from the pad id
        ids = torch.tensor([s + [tok.pad_token_id] * (L - len(s)) for s in seqs])
        mask = torch.tensor([[1] * len(s) + [0] * (L - len(s)) for s in seqs])
        h = tiny_rm.model(input_ids=ids, attention_mask=mask).last_hidden_state
        right = tiny_rm.score(h[torch.arange(len(seqs)), mask.sum(1) - 1])[:, 0]
        assert torch.allclose(right, want, atol=1e-4)
        # left padding: the last real token is always the final position
        ids = torch.tensor([[tok.pad_token_id] * (L - len(s)) + s for s in seqs])
        mask = torch.tensor([[0] * (L - len(s)) + [1] * len(s) for s in seqs])
        pos = (mask.cumsum(1) - 1).clamp(min=0)
        h = tiny_rm.model(input_ids=ids, attention_mask=mask, position_ids=pos).last_hidden_state
        assert torch.allclose(tiny_rm.score(h[:, -1])[:, 0], want, atol=1e-4)
        # transformers' own pooling ("last token that is not pad") reads the token before EOS when pad == EOS
        hf = tiny_rm(input_ids=torch.tensor([seqs[0]])).logits[0, 0]
        assert not torch.isclose(hf, want[0], atol=1e-4)


@pytest.mark.parametrize("layout", ["segments", "mask"])
def test_single_sequence_packing_matches_pairs(tiny_rm, smollm2_tokenizer, layout):
    pairs, _ = tokenize_pairs(suite_like_pairs(2), smollm2_tokenizer, 128, "drop")
    with torch.no_grad():
        a = last_token_rewards(tiny_rm, pack_pairs(pairs, 2, 512, layout))[:, 0]
        b = last_token_rewards(
            tiny_rm,
            pack_single(
                [p.prompt_ids for p in pairs] * 2,
                [p.chosen_ids for p in pairs] + [p.rejected_ids for p in pairs],
                2,
                64,
                layout,
            ),
        )[:, 0]
    assert torch.allclose(a, b, atol=1e-4)


# --- TRL parity ---------------------------------------------------------------------------------------


def test_first_batch_loss_matches_trl_reward_trainer(tiny_rm, smollm2_tokenizer, tmp_path):
    """TRL's RewardTrainer on the same model and the same token sequences gives the same BT loss.

    TRL pools with transformers' "last non-pad token", which with pad == EOS reads the token before the
    final EOS. To compare the loss itself we feed both sides sequences without the final EOS token.
    """
    from datasets import Dataset
    from trl import RewardConfig, RewardTrainer

    from reward_models.losses import compute_rm_loss

    pairs, _ = tokenize_pairs(suite_like_pairs(4), smollm2_tokenizer, 128, "drop")
    for p in pairs:
        p.chosen_ids, p.rejected_ids = p.chosen_ids[:-1], p.rejected_ids[:-1]
    ds = Dataset.from_list(
        [{"chosen_ids": p.prompt_ids + p.chosen_ids, "rejected_ids": p.prompt_ids + p.rejected_ids} for p in pairs]
    )
    args = RewardConfig(
        output_dir=str(tmp_path / "trl"),
        per_device_train_batch_size=4,
        report_to="none",
        bf16=False,
        use_cpu=True,
        gradient_checkpointing=False,
        max_length=None,
        center_rewards_coefficient=0.01,
    )
    trainer = RewardTrainer(model=tiny_rm, args=args, train_dataset=ds, processing_class=smollm2_tokenizer)
    batch = next(iter(trainer.get_train_dataloader()))
    with torch.no_grad():
        trl_loss = trainer.compute_loss(tiny_rm, batch).item()
        r = last_token_rewards(tiny_rm, pack_pairs(pairs, 2, 512, "segments"))[:, 0]
        ours = compute_rm_loss("bradley_terry", {"center_rewards_coefficient": 0.01}, r[:4], r[4:]).losses.mean()
    assert abs(ours.item() - trl_loss) < 1e-4


# --- end to end: train, save, reload ------------------------------------------------------------------


@pytest.mark.parametrize("method", ["lora", "full"])
def test_train_save_reload_scores_identically(tmp_path, method):
    from reward_models.checkpoint import load_rm

    data = write_pairs(tmp_path / "pairs.jsonl", suite_like_pairs(16))
    cfg = tiny_cfg(tmp_path, data, train={"method": method})
    report = run(cfg)
    run_dir = Path(cfg.output_dir)
    for f in (
        "config.yaml",
        "metrics.jsonl",
        "report.json",
        "model/config.json",
        "model/reward_stats.json",
        "model/chat_template.jinja",
        "report.html",
        "dashboard.png",
    ):
        assert (run_dir / f).exists(), f
    assert report["steps"] == 3
    model, tok, stats = load_rm(report["model_dir"], dtype="float32")
    assert stats.n == 16 and stats.std > 0
    pairs, _ = tokenize_pairs(suite_like_pairs(16), tok, 128, "drop", response_end="template")
    byid = {p.id: p for p in pairs}
    sample = [byid[i] for i in report["sample_rewards"]["ids"]]
    rc, rr = pair_rewards(model, sample, tok.pad_token_id, 4, 512, autocast=False, layout="segments")
    assert torch.allclose(rc, torch.tensor(report["sample_rewards"]["chosen"]), atol=1e-5)
    assert torch.allclose(rr, torch.tensor(report["sample_rewards"]["rejected"]), atol=1e-5)
    # the saved directory is a plain transformers sequence-classification model
    from transformers import AutoModelForSequenceClassification

    hf = AutoModelForSequenceClassification.from_pretrained(report["model_dir"])
    assert hf.config.num_labels == 1


@pytest.mark.slow  # a whole run: its siblings in the slow tier (kill, resume, real models)
def test_resume_reaches_the_same_weights(tmp_path):
    from safetensors.torch import load_file

    data = write_pairs(tmp_path / "pairs.jsonl", suite_like_pairs(24))
    full = tiny_cfg(tmp_path / "a", data, train={"max_steps": 4, "save_every": 2, "method": "full"})
    run(full)
    part = tiny_cfg(tmp_path / "b", data, train={"max_steps": 4, "save_every": 2, "method": "full"})
    run(part)
    ckpts = Path(part.output_dir) / "checkpoints"

    shutil.rmtree(ckpts / "checkpoint-4")  # as if interrupted after step 2
    shutil.rmtree(Path(part.output_dir) / "model")
    run(part, resume=True)
    a = load_file(str(Path(full.output_dir) / "model" / "model.safetensors"))
    b = load_file(str(Path(part.output_dir) / "model" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)


@pytest.mark.slow  # a whole run: its siblings in the slow tier (kill, resume, real models)
def test_token_budget_micro_batches_give_the_one_batch_steps(tmp_path, monkeypatch):
    """train.token_budget: each batch of 8 pairs in forwards of at most 100 tokens, each loss weighted by its share
    of the pairs, trains the weights one forward of 8 does (the centering term included)."""
    from safetensors.torch import load_file

    from preference_data.packing import PackCollator

    data = write_pairs(tmp_path / "pairs.jsonl", suite_like_pairs(16))
    train = {"max_steps": 2, "batch_size": 8, "method": "full"}
    loss = {"name": "bradley_terry", "params": {"center_rewards_coefficient": 0.01}}
    whole = tiny_cfg(tmp_path / "a", data, train=train, loss=loss)
    a = run(whole)
    packed: list[int] = []
    real_pack = PackCollator.pack
    monkeypatch.setattr(PackCollator, "pack", lambda self, pairs: packed.append(len(pairs)) or real_pack(self, pairs))
    cut = tiny_cfg(tmp_path / "b", data, train={**train, "token_budget": 100}, loss=loss)
    b = run(cut)
    assert len(packed) > 2 and sum(packed) == 16  # 2 batches of 8 pairs, in more forwards than 2
    assert a["train_loss"] == pytest.approx(b["train_loss"], abs=1e-5)
    wa = load_file(str(Path(whole.output_dir) / "model" / "model.safetensors"))
    wb = load_file(str(Path(cut.output_dir) / "model" / "model.safetensors"))
    assert wa.keys() == wb.keys() and all(torch.allclose(wa[k], wb[k], atol=1e-5) for k in wa)


@pytest.mark.skipif(
    not any(shutil.which(c) for c in ("g++", "c++", "clang++")), reason="torch.compile on CPU needs a C++ compiler"
)
@pytest.mark.slow
@pytest.mark.parametrize("attention", ["segments", "varlen"])
def test_compiled_layers_train_like_eager_ones(tmp_path, monkeypatch, attention):
    """train.compile (the default) changes speed only: the same losses and final weights as eager layers, in the
    CPU's layout and the GPU's. The one test that compiles (the others run with TORCH_COMPILE_DISABLE=1, see
    conftest). On the CPU: a GPU, where there is one, is hidden. Batches of different lengths reuse the compiled
    graphs (the token dimension is dynamic): a handful of graphs in all, counted as a run counts them."""
    from safetensors.torch import load_file

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)

    method = "lora"
    data = write_pairs(tmp_path / "pairs.jsonl", suite_like_pairs(16))
    from torch._dynamo.utils import counters

    torch._dynamo.reset()  # graphs cached by earlier tests would otherwise be reused without tracing
    runs, graphs, unique = {}, {}, {}
    for compiled in (True, False):
        train = {"method": method, "compile": compiled, "log_every": 1, "attention": attention}
        cfg = tiny_cfg(tmp_path / str(compiled), data, train=train)
        before, before_unique = counters["stats"]["calls_captured"], counters["stats"]["unique_graphs"]
        with torch._dynamo.config.patch(disable=False):
            report = run(cfg)
        graphs[compiled] = counters["stats"]["calls_captured"] - before
        unique[compiled] = counters["stats"]["unique_graphs"] - before_unique
        assert report["compiled_graphs"] >= unique[compiled]
        rows = [json.loads(x) for x in (Path(cfg.output_dir) / "metrics.jsonl").read_text().splitlines()]
        runs[compiled] = (
            [r["loss"] for r in rows if "loss" in r],
            load_file(str(Path(cfg.output_dir) / "model" / "model.safetensors")),
        )
    (loss_c, w_c), (loss_e, w_e) = runs[True], runs[False]
    assert len(loss_c) == 3 and loss_c == pytest.approx(loss_e, abs=1e-4)
    assert w_c.keys() == w_e.keys() and all(torch.allclose(w_c[k], w_e[k], atol=1e-4) for k in w_c)
    assert len(set(loss_c)) > 1  # the weights moved between steps
    assert graphs[True] > 0 and graphs[False] == 0  # the compiled run really traced its layers
    # three batches of different lengths and two layers: the attention splits a layer into two graphs, the first
    # layer's input needs no gradient under LoRA (one more pair), the reward statistics' pass runs eager; never a
    # graph per batch length. At most 8 in all
    assert 0 < unique[True] <= 8, unique


@pytest.mark.slow
def test_strength_ensemble_and_strength_aware_training(tmp_path):
    from reward_models.rm_train import run_strength
    from reward_models.strength import StrengthConfig

    data = write_pairs(tmp_path / "pairs.jsonl", suite_like_pairs(12))
    base = tiny_cfg(tmp_path, data)
    from prefalign.config import to_dict

    cfg = build(StrengthConfig, {"members": 2, "output_dir": str(tmp_path / "strength"), "base": to_dict(base)})
    rep = run_strength(cfg)
    rows = [json.loads(x) for x in Path(rep["file"]).read_text().splitlines()]
    assert len(rows) == 12 and all(len(r["diffs"]) == 2 for r in rows)
    r0 = rows[0]
    assert abs(r0["mean"] - sum(r0["diffs"]) / 2) < 1e-5
    assert abs(r0["std"] - abs(r0["diffs"][0] - r0["diffs"][1]) / 2) < 1e-5
    flipped = tiny_cfg(
        tmp_path / "f",
        data,
        strength={"file": rep["file"], "flip_fraction": 0.25, "soften_fraction": 0.25, "adaptive_margin": True},
    )
    report = run(flipped)
    assert report["strength"] == {"with_strength": 12, "flipped": 3, "softened": 3, "without_strength": 0}


# --- bad input ------------------------------------------------------------------------------------------


def _cli(tmp_path: Path, yaml_text: str, capsys) -> tuple[int, str]:
    f = tmp_path / "c.yaml"
    f.write_text(yaml_text)
    code = main(["rm", "train", "--config", str(f)])
    return code, capsys.readouterr().err


def test_bad_input_gives_clear_errors(tmp_path, capsys):
    code, err = _cli(tmp_path, "kind: rm_train\nmodel: /no/such/model\ndata:\n  source: suite\n", capsys)
    assert code == 2 and "model directory /no/such/model does not exist" in err
    code, err = _cli(tmp_path, "kind: rm_train\nmodel: builtin:tiny-llama\ndata:\n  source: /no/such.jsonl\n", capsys)
    assert code == 2 and "/no/such.jsonl" in err
    empty = tmp_path / "empty.jsonl"
    empty.write_text('{"prompt": "q", "chosen": "same", "rejected": "same"}\n')
    code, err = _cli(
        tmp_path, f"kind: rm_train\nmodel: builtin:tiny-llama\ndata:\n  source: {empty}\n  split: all\n", capsys
    )
    assert code == 2 and "no usable preference pairs" in err and "identical_pair: 1" in err
    code, err = _cli(tmp_path, "kind: rm_train\nloss:\n  name: bradly_terry\n", capsys)
    assert code == 2 and "did you mean 'bradley_terry'" in err


def test_length_policies_never_lose_pairs_silently(tmp_path, smollm2_tokenizer, capsys):
    long = PreferencePair(
        [Message("user", "word " * 300)], [Message("assistant", "ok")], [Message("assistant", "no")], source="toy"
    )
    pairs = suite_like_pairs(4) + [long]
    kept, rep = tokenize_pairs(pairs, smollm2_tokenizer, 100, "drop")
    assert len(kept) == 4 and rep.counts["too_long"] == 1
    kept, rep = tokenize_pairs(pairs, smollm2_tokenizer, 100, "truncate_prompt_left")
    assert len(kept) == 5 and rep.counts["prompt_truncated"] == 1 and kept[-1].total_length <= 100
    data = write_pairs(tmp_path / "p.jsonl", pairs)
    code, err = _cli(
        tmp_path,
        f"kind: rm_train\nmodel: builtin:tiny-llama\ndata:\n  source: {data}\n  split: all\n"
        "train:\n  max_length: 100\n  length_policy: raise\n",
        capsys,
    )
    assert code == 2 and long.id in err and "truncate_prompt_left" in err


@pytest.mark.slow
def test_two_process_data_parallel_matches_one_process(tmp_path):
    """torchrun with 2 CPU processes (gloo) and batch 2 each equals one process with batch 4."""
    data = write_pairs(tmp_path / "pairs.jsonl", suite_like_pairs(16))
    common = (
        "kind: rm_train\nmodel: builtin:tiny-llama\n"
        f"data:\n  source: {data}\n  split: all\neval:\n  split: none\n  stats_pairs: 4\n"
        "train:\n  method: full\n  max_steps: 2\n  lr: 1.0e-3\n  max_length: 128\n  row_tokens: 512\n"
        "  precision: fp32\n  lr_scheduler: constant\n"
    )
    one = tmp_path / "one.yaml"
    one.write_text(common + f"  batch_size: 4\noutput_dir: {tmp_path / 'one'}\n")
    two = tmp_path / "two.yaml"
    two.write_text(common + f"  batch_size: 2\noutput_dir: {tmp_path / 'two'}\n")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run(
        [sys.executable, "-m", "align.cli.main", "rm", "train", "--config", str(one)],
        cwd=ROOT,
        check=True,
        env=env,
        capture_output=True,
    )
    subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node",
            "2",
            "-m",
            "align.cli.main",
            "rm",
            "train",
            "--config",
            str(two),
        ],
        cwd=ROOT,
        check=True,
        env=env,
        capture_output=True,
    )

    def losses(run_dir: Path) -> list[float]:
        rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
        return [r["loss"] for r in rows if "loss" in r]

    from safetensors.torch import load_file

    assert losses(tmp_path / "one") == pytest.approx(losses(tmp_path / "two"), abs=1e-4)
    a = load_file(str(tmp_path / "one" / "model" / "model.safetensors"))
    b = load_file(str(tmp_path / "two" / "model" / "model.safetensors"))
    assert all(torch.allclose(a[k], b[k], atol=1e-5) for k in a)


# --- plain transformers reads the same score ------------------------------------------------------------


@pytest.mark.slow
def test_plain_transformers_recipe_gives_align_rm_score(tmp_path):
    """An RM trained here on the builtin SmolLM2 scores the same (fp32, 1e-4) with the recipe RM model cards,
    TRL reward functions and reward-bench use: apply_chat_template(messages, return_tensors="pt",
    return_dict=True), AutoModelForSequenceClassification, logits[0][0]."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    pairs = suite_like_pairs(16)
    data = write_pairs(tmp_path / "pairs.jsonl", pairs)
    cfg = tiny_cfg(
        tmp_path,
        data,
        model="builtin:smollm2-135m-instruct",
        train={"max_steps": 2, "batch_size": 8, "lr": 1e-3, "compile": False},
    )
    model_dir = run(cfg)["model_dir"]
    out = tmp_path / "scores.jsonl"
    assert (
        main(["rm", "score", "--model", model_dir, "--data", data, "--out", str(out), "--raw", "--dtype", "float32"])
        == 0
    )
    ours = {(r["id"], r["response"]): r["score"] for r in map(json.loads, out.read_text().splitlines())}

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir, dtype=torch.float32).eval()
    assert tok.pad_token_id != tok.eos_token_id and model.config.pad_token_id == tok.pad_token_id
    diffs = []
    for p in pairs[:6]:
        for which, resp in (("chosen", p.chosen), ("rejected", p.rejected)):
            messages = [m.to_dict() for m in p.prompt + resp]
            inputs = tok.apply_chat_template(messages, return_tensors="pt", return_dict=True)
            with torch.no_grad():
                plain = model(**inputs).logits[0][0].item()
            diffs.append(abs(plain - ours[(p.id, which)]))
    assert max(diffs) < 1e-4, diffs
    assert len({round(v, 3) for v in ours.values()}) > 2  # real, varied scores
    card = (Path(model_dir) / "README.md").read_text()
    assert "apply_chat_template" in card and "AutoModelForSequenceClassification" in card
    stats = json.loads((Path(model_dir) / "reward_stats.json").read_text())
    assert stats["response_end"] == "template"


def test_warmup_ratio_is_validated_and_passed_as_a_fraction(tmp_path):
    """warmup_ratio must lie in [0, 1); transformers gets it as a fraction of the total steps."""
    from prefalign.errors import ConfigError
    from prefalign.training.config import TrainSection
    from prefalign.training.trainer import training_arguments

    with pytest.raises(ConfigError, match=r"warmup_ratio: must lie in \[0, 1\)"):
        tiny_cfg(tmp_path, "x.jsonl", train={"warmup_ratio": 1.5})
    train = build(TrainSection, {"warmup_ratio": 0.1, "precision": "fp32"})
    args = training_arguments(train, str(tmp_path / "ckpt"))
    assert args.get_warmup_steps(200) == 20 and args.get_warmup_steps(7) == 1
    assert (
        training_arguments(build(TrainSection, {"precision": "fp32"}), str(tmp_path / "c2")).get_warmup_steps(50) == 0
    )


def test_margins_are_used_only_when_asked():
    """Rated data keeps its rating gap as an attribute; RM training subtracts a margin only with loss.margin."""
    from prefalign.errors import ConfigError, UserError
    from preference_data.tokenize import TokenizedPair
    from reward_models.rm_config import RMLossSection
    from reward_models.rm_train import select_margins

    def pairs():
        return [
            TokenizedPair("a", "s", [1], [2], [3], margin=0.5, attributes={"rating_gap": 6.0}),
            TokenizedPair("b", "s", [1], [2], [3], margin=None, attributes={}),
        ]

    ps = pairs()
    assert select_margins(ps, RMLossSection())["pairs_with_margin"] == 0 and [p.margin for p in ps] == [None, None]
    ps = pairs()
    select_margins(ps, RMLossSection(margin="rating_gap", margin_scale=0.25))
    assert [p.margin for p in ps] == [1.5, None]
    ps = pairs()
    select_margins(ps, RMLossSection(margin="column"))
    assert [p.margin for p in ps] == [0.5, None]
    with pytest.raises(UserError, match="none of the 1 training pairs has a rating_gap"):
        select_margins([pairs()[1]], RMLossSection(margin="rating_gap"))
    with pytest.raises(ConfigError, match="adaptive_margin"):
        build(RMTrainConfig, {"loss": {"margin": "column"}, "strength": {"file": "s.jsonl", "adaptive_margin": True}})


def test_keep_whole_lets_a_recipe_run_an_fsdp2_sharded_model_after_training(tmp_path, tiny_rm):
    """Under FSDP2 (each layer and the trainer's wrapper sharded, as `accelerate launch` with an FSDP config
    does on GPUs) a recipe's own forwards after training call the inner model, skipping the sharded root's
    hooks: they fail on the sharded embedding. `keep_whole` (called by `RecipeRun.train`) gathers every shard and
    keeps it: the same rewards as before sharding. On the CPU with gloo, one process."""
    import copy

    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    from prefalign.models.forward import PackedForward, body
    from prefalign.models.hub import load_tokenizer
    from prefalign.training.trainer import keep_whole

    tok = load_tokenizer("builtin:tiny-llama")
    pairs, _ = tokenize_pairs(suite_like_pairs(4), tok, 128, "drop", response_end="template")
    model = copy.deepcopy(tiny_rm)
    want = pair_rewards(model, pairs, tok.pad_token_id, 4, 512, autocast=False, layout="segments")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        wrapper = PackedForward(model, "rewards")
        for layer in body(model).layers:
            fully_shard(layer)
        fully_shard(wrapper)
        batch = pack_pairs(pairs, tok.pad_token_id, 512, "segments")
        wrapper(**batch.as_inputs()).sum().backward()  # a training step's passes through the sharded root
        with pytest.raises(RuntimeError, match="DTensor"):
            pair_rewards(model, pairs, tok.pad_token_id, 4, 512, autocast=False, layout="segments")
        assert keep_whole(wrapper) == len(body(model).layers) + 1
        got = pair_rewards(model, pairs, tok.pad_token_id, 4, 512, autocast=False, layout="segments")
    finally:
        dist.destroy_process_group()
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, atol=1e-5, rtol=0)


@pytest.mark.parametrize("what", ["policy-lora", "policy-full", "rm-lora", "polar-lora"])
def test_a_save_under_fsdp2_writes_what_an_unsharded_save_writes(tmp_path, what):
    """Under FSDP2 (each layer and the trainer's wrapper sharded, as `accelerate launch` with an FSDP config does)
    `save_pretrained` of the model itself meets the shards' storage ("invalid python storage"). The recipes gather
    the weights first (`whole_state_dict`, every rank) and save those: the policy's adapter, its merged copy and a
    full model, and an RM written by `save_rm`, hold what the same saves of the unsharded model hold. On the CPU
    with gloo, one process; a forward and backward through the sharded root first, as in training."""
    import copy

    import torch.distributed as dist
    from safetensors.torch import load_file
    from torch.distributed.fsdp import fully_shard

    from prefalign.models.forward import PackedForward, body
    from prefalign.models.hub import load_causal_lm, load_seq_cls, load_tokenizer
    from prefalign.training.config import LoraSection, TrainSection
    from prefalign.training.recipe import save_policy
    from prefalign.training.trainer import keep_whole, prepare_model, whole_state_dict
    from reward_models.checkpoint import RewardStats, save_rm

    tok = load_tokenizer("builtin:tiny-llama")
    method = what.split("-")[1]
    torch.manual_seed(0)
    if what.startswith("rm"):
        model = load_seq_cls("builtin:tiny-llama", dtype="float32")
        model = prepare_model(model, TrainSection(method=method), LoraSection(), "SEQ_CLS", modules_to_save=["score"])
    elif what.startswith("polar"):  # tokens added and the embeddings resized before training, as POLAR does
        from reward_models.polar.format import add_polar_tokens, polar_token_ids

        tok = copy.deepcopy(tok)
        model = load_seq_cls("builtin:tiny-llama", dtype="float32")
        add_polar_tokens(tok, model)
        model = prepare_model(
            model,
            TrainSection(method=method),
            LoraSection(),
            "SEQ_CLS",
            modules_to_save=["score"],
            trainable_tokens=list(polar_token_ids(tok)),
        )
    else:
        model = load_causal_lm("builtin:tiny-llama", dtype="float32")
        model = prepare_model(model, TrainSection(method=method), LoraSection(), "CAUSAL_LM")
    with torch.no_grad():  # non-zero LoRA B and score, so every saved tensor tells
        for name, p in model.named_parameters():
            if "lora_B" in name or "score" in name:
                p.normal_(std=0.5)

    def save(m, out: Path, state) -> None:
        if not what.startswith("policy"):
            save_rm(m, tok, out, RewardStats(), state=state)
        else:
            save_policy(m, tok, out, method, merged_too=True, state=state, base="builtin:tiny-llama")

    save(copy.deepcopy(model), tmp_path / "plain", None)
    pairs, _ = tokenize_pairs(suite_like_pairs(2), tok, 128, "drop", response_end="template")
    batch = pack_pairs(pairs, tok.pad_token_id, 512, "segments")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        wrapper = PackedForward(model, "logps" if what.startswith("policy") else "rewards")
        for layer in body(model).layers:
            fully_shard(layer)
        fully_shard(wrapper)
        out = wrapper(**batch.as_inputs())
        (out if isinstance(out, torch.Tensor) else out[0]).float().sum().backward()
        keep_whole(wrapper)
        with pytest.raises(RuntimeError, match="storage"):
            model.save_pretrained(str(tmp_path / "direct"))
        state = whole_state_dict(model)
        assert state is not None and all(type(v) is torch.Tensor for v in state.values())
        save(model, tmp_path / "fsdp", state)
    finally:
        dist.destroy_process_group()
    files = sorted(p.relative_to(tmp_path / "plain") for p in (tmp_path / "plain").rglob("*.safetensors"))
    fsdp_files = sorted(p.relative_to(tmp_path / "fsdp") for p in (tmp_path / "fsdp").rglob("*.safetensors"))
    assert files and files == fsdp_files
    for f in files:
        want, got = load_file(tmp_path / "plain" / f), load_file(tmp_path / "fsdp" / f)
        assert got.keys() == want.keys()
        for k in want:
            torch.testing.assert_close(got[k], want[k], atol=0, rtol=0)
    assert not list(tmp_path.rglob("*.gathered"))  # the scratch copy of the gathered weights is gone


@pytest.mark.parametrize(("save", "saved"), [("auto", torch.bfloat16), ("fp32", torch.float32)])
def test_the_rm_is_saved_in_the_precision_it_trained_in(tmp_path, save, saved):
    """A LoRA RM trained under bf16 autocast is saved merged in bf16 by default (`train.save_precision: auto`), in
    fp32 when asked; either reloads in plain transformers and scores as `align rm score` loads it."""
    from safetensors.torch import load_file
    from transformers import AutoModelForSequenceClassification

    data = write_pairs(tmp_path / "pairs.jsonl", suite_like_pairs(8))
    report = run(tiny_cfg(tmp_path, data, train={"method": "lora", "precision": "bf16", "save_precision": save}))
    weights = load_file(str(Path(report["model_dir"]) / "model.safetensors"))
    assert {t.dtype for t in weights.values()} == {saved}
    hf = AutoModelForSequenceClassification.from_pretrained(report["model_dir"])
    assert next(hf.parameters()).dtype == saved
