"""Frozen log-probs do no work twice: only the training pairs a run draws get precomputed columns, and a model
that is both the reference and the previous iterate (INPO's first iteration) is run once.

Tiny model (`builtin:tiny-llama`, fp32), 20 short pairs, LoRA unless said otherwise.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.test_dpo_train import assert_same_weights, config, weights, write_rows

ROWS = [
    {
        "prompt": [{"role": "user", "content": f"What is {a} times {b}?"}],
        "chosen": [{"role": "assistant", "content": f"{a} x {b} = {a * b}."}],
        "rejected": [{"role": "assistant", "content": f"Maybe {a * b + a}."}],
    }
    for a, b in [(a, b) for a in range(2, 7) for b in range(3, 7)]
]  # 20 pairs, each prompt its own


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch, tiny_model_ref):
    """A fresh log-prob cache per test; the converted models are shared through a link."""
    from prefalign.models.hub import cache_dir

    root = tmp_path / "cache"
    root.mkdir()
    (root / "models").symlink_to(cache_dir() / "models")
    monkeypatch.setenv("PREFALIGN_CACHE", str(root))
    return root


@pytest.fixture
def data(tmp_path) -> str:
    return write_rows(tmp_path / "pairs20.jsonl", ROWS)


@pytest.fixture
def frozen_passes(monkeypatch) -> list[list[tuple[int, ...]]]:
    """Each frozen-model pass (`align.reference.pair_logps` call), in order: the prompt ids of its pairs."""
    import align.reference as reference

    calls: list[list[tuple[int, ...]]] = []
    real = reference.pair_logps

    def counted(model, pairs, *args, **kwargs):
        calls.append([tuple(p.prompt_ids) for p in pairs])
        return real(model, pairs, *args, **kwargs)

    monkeypatch.setattr(reference, "pair_logps", counted)
    return calls


@pytest.fixture
def trained_prompts(monkeypatch) -> list[tuple[int, ...]]:
    """The prompt ids of every pair collated into a batch, in order: the training batches (and the one the
    dataloader collates ahead of the last step, never used), then at the end of the run the held-out ones."""
    from preference_data.packing import PackCollator

    seen: list[tuple[int, ...]] = []
    real = PackCollator.__call__

    def recording(self, pairs):
        seen.extend(tuple(p.prompt_ids) for p in pairs)
        return real(self, pairs)

    monkeypatch.setattr(PackCollator, "__call__", recording)
    return seen


def sizes(passes: list[list[tuple[int, ...]]]) -> list[int]:
    return [len(p) for p in passes]


def losses(run_dir: Path, key: str = "loss") -> list[float]:
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r[key] for r in rows if key in r]


def every_pair(monkeypatch) -> None:
    """Columns on every training pair, as before runs drew only what they use."""
    import align.train

    monkeypatch.setattr(align.train, "drawn_indices", lambda args, n: None)


# --- only the drawn pairs -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides,expect",
    [
        (["train.max_steps=2", "train.batch_size=2"], 4),
        (["train.max_steps=2", "train.batch_size=2", "train.grad_accum=2"], 8),
        (["train.max_steps=-1", "train.epochs=0.3", "train.batch_size=2"], 6),  # ceil(0.3 x 10 steps) = 3 steps
    ],
)
def test_frozen_pass_covers_exactly_the_drawn_pairs(
    tmp_path, data, monkeypatch, frozen_passes, trained_prompts, overrides, expect
):
    """With a precomputed reference, a run shorter than an epoch precomputes the pairs it trains on and no
    other (the pairs the dataloader really collated are those), and trains exactly as with columns on
    every pair: the same losses at every step and the same held-out numbers."""
    from align.train import run

    common = ("reference.kind=precomputed", "eval.split=all", "eval.limit=4", "save_merged=false", *overrides)
    report = run(config(tmp_path, data, *common, out="drawn"))
    assert report["train_pairs"] == 20 and report["frozen_train_pairs"] == expect
    assert report["reference"]["pairs"] == {"train": expect, "eval": 4}
    assert sizes(frozen_passes) == [expect, 4]  # the drawn training pairs, then the held-out ones
    drawn = trained_prompts[:expect]  # the pairs the steps trained on, in order
    assert drawn == frozen_passes[0] and len(set(drawn)) == expect

    every_pair(monkeypatch)
    trained_prompts.clear()
    before = run(config(tmp_path, data, *common, out="every"))
    assert before["frozen_train_pairs"] == 20 and sizes(frozen_passes[2:]) == [20]  # held-out pairs: cache hit
    assert trained_prompts[:expect] == drawn  # the same pairs in the same order
    assert losses(tmp_path / "drawn") == losses(tmp_path / "every")
    assert losses(tmp_path / "drawn")[0] == pytest.approx(0.6931, abs=1e-4)  # LoRA starts at the reference
    assert report["eval"]["loss"] == before["eval"]["loss"]
    assert_same_weights(
        weights(tmp_path / "drawn" / "adapter" / "adapter_model.safetensors"),
        weights(tmp_path / "every" / "adapter" / "adapter_model.safetensors"),
        atol=0.0,
    )


def test_drawn_indices_are_the_trainer_dataloader_order(tmp_path, data):
    """`drawn_indices` equals the order of the Trainer's own train dataloader for this run's arguments."""
    from align.train import setup
    from prefalign.training.trainer import drawn_indices

    s = setup(config(tmp_path, data, "reference.kind=precomputed", "train.max_steps=3", "train.batch_size=3"))
    predicted = drawn_indices(s.trainer.args, len(s.train_pairs))
    assert predicted is not None and len(predicted) == 9
    batches = iter(s.trainer.get_train_dataloader().batch_sampler)
    actual = [i for _ in range(3) for i in next(batches)]
    assert actual == predicted
    assert predicted != sorted(predicted)  # shuffled, so the check is not vacuous
    # an epoch or more draws every pair
    s.trainer.args.max_steps = 7
    assert drawn_indices(s.trainer.args, len(s.train_pairs)) is None


def test_resume_reuses_the_drawn_pairs_cache(tmp_path, data):
    import shutil

    from align.train import run

    cfg = config(
        tmp_path,
        data,
        "reference.kind=precomputed",
        "train.max_steps=4",
        "train.save_every=2",
        "train.batch_size=2",
        "save_merged=false",
    )
    full = run(cfg)
    assert full["frozen_train_pairs"] == 8 and full["reference"]["cache"] == {"train": "miss"}
    adapter = Path(full["adapter_dir"]) / "adapter_model.safetensors"
    uninterrupted = weights(adapter)
    shutil.rmtree(full["adapter_dir"])
    shutil.rmtree(Path(cfg.output_dir) / "checkpoints" / "checkpoint-4")
    resumed = run(cfg, resume=True)
    assert resumed["steps"] == 4 and resumed["frozen_train_pairs"] == 8
    assert resumed["reference"]["cache"] == {"train": "hit"}
    assert resumed["reference"]["files"] == full["reference"]["files"]
    assert_same_weights(uninterrupted, weights(adapter), atol=1e-6)


def test_a_pair_drawn_without_its_columns_stops_the_step(tmp_path, data):
    from align.train import setup

    s = setup(config(tmp_path, data, "reference.kind=precomputed", "train.max_steps=1", "train.batch_size=2"))
    bare = [p for p in s.train_pairs if "ref_chosen_logps" not in p.attributes]
    assert len(bare) == 18
    batch = s.trainer.data_collator(bare[:2])
    batch = {k: v.to(s.trainer.args.device) if torch.is_tensor(v) else v for k, v in batch.items()}  # as the trainer
    assert torch.isnan(batch["ref_chosen_logps"]).all()
    with pytest.raises(RuntimeError, match="precomputed reference log-probs are NaN"), torch.no_grad():
        s.trainer.compute_loss(s.trainer.model, batch)


# --- one model, two roles -----------------------------------------------------------------------------

INPO = (
    "loss.name=inpo",
    "loss.params.target_margin=3.0",
    "previous.model=builtin:tiny-llama",
    "reference.model=builtin:tiny-llama",
    "train.max_steps=3",
    "train.batch_size=4",
    "train.lr=5e-2",
    "eval.split=all",
    "eval.limit=4",
    "save_merged=false",
)


def test_inpo_first_iteration_precomputes_once_for_both_roles(tmp_path, data, monkeypatch, frozen_passes):
    """Full fine-tuning, precomputed reference: π_ref = π_t = the initial policy is run once (one pass over the
    drawn and the held-out pairs) and fills both roles' columns; the losses equal those of two separate
    passes, each computing its own numbers."""
    import align.reference as reference
    import align.train
    from align.train import run

    common = (*INPO, "train.method=full")
    once = run(config(tmp_path, data, *common, out="once"))
    assert sizes(frozen_passes) == [12, 4]
    assert once["reference"]["mode"] == "precomputed"
    assert once["reference"]["roles"] == once["previous"]["roles"] == ["reference", "previous"]
    assert once["frozen_train_pairs"] == 12

    monkeypatch.setattr(align.train, "same_model", lambda a, b: False)  # each role its own pass ...
    monkeypatch.setattr(reference, "_read", lambda path, n: None)  # ... computing its numbers (no cache)
    frozen_passes.clear()
    twice = run(config(tmp_path, data, *common, out="twice"))
    assert sizes(frozen_passes) == [12, 4, 12, 4]
    assert len(losses(tmp_path / "once")) == 3
    assert losses(tmp_path / "once") == losses(tmp_path / "twice")
    assert losses(tmp_path / "once")[-1] != pytest.approx(9.0, abs=1e-3)  # the policy moved away from π_ref = π_t
    assert once["eval"]["loss"] == twice["eval"]["loss"]


def test_inpo_first_iteration_under_lora_reuses_the_adapters_disabled_reference(
    tmp_path, data, monkeypatch, frozen_passes
):
    """LoRA, reference = the adapters-disabled base = the initial policy = π_t: no precomputed pass at all;
    π_t's numbers are the reference forward's, and the losses equal those with π_t precomputed separately."""
    import align.train
    from align.train import run

    shared = run(config(tmp_path, data, *INPO, out="shared"))
    assert frozen_passes == []
    assert shared["reference"]["mode"] == "adapters_disabled"
    assert shared["previous"] == {"model": "builtin:tiny-llama", "from": "reference (adapters disabled)"}
    assert shared["frozen_train_pairs"] is None

    monkeypatch.setattr(align.train, "same_model", lambda a, b: False)
    separate = run(config(tmp_path, data, *INPO, out="separate"))
    assert sizes(frozen_passes) == [12, 4] and separate["previous"]["cache"] == {"train": "miss", "eval": "miss"}
    got, want = losses(tmp_path / "shared"), losses(tmp_path / "separate")
    assert len(got) == 3 and got[0] == pytest.approx(9.0, rel=1e-5)  # step 1: every log-ratio is 0, loss = c²
    assert got == pytest.approx(want, rel=1e-5)
    assert got[-1] != pytest.approx(9.0, abs=1e-3)
    assert shared["eval"]["loss"] == pytest.approx(separate["eval"]["loss"], rel=1e-5)


def test_same_model(tmp_path, tiny_model_ref):
    from align.reference import same_model
    from prefalign.models.hub import resolve

    path = resolve(tiny_model_ref)
    assert same_model(tiny_model_ref, tiny_model_ref)
    assert same_model(tiny_model_ref, path) and same_model(path + "/", tiny_model_ref)
    assert not same_model(tiny_model_ref, "builtin:smollm2-135m-instruct")
    assert not same_model(tiny_model_ref, str(tmp_path / "nowhere"))


def test_summary_says_how_many_pairs_got_frozen_logps(tmp_path, data):
    from align.train import run, summary_lines

    report = run(config(tmp_path, data, "reference.kind=precomputed", "train.max_steps=1", "train.batch_size=2"))
    lines = summary_lines(report)
    assert "frozen log-probs precomputed for 2 of 20 training pairs (those the run draws)" in lines
    page = (Path(report["run_report"])).read_text()
    assert "<td>frozen_train_pairs</td><td class=n>2</td>" in page
    assert torch.isfinite(torch.tensor(report["train_loss"]))
