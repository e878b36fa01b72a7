"""The online engine on the tiny model: NaN rewards masked and counted, micro-batching and data parallelism give the
single-batch update, a killed run resumes to the same weights, the iterative loop's rounds, and config errors."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from prefalign.config import build, dump_yaml
from prefalign.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
VARIED = {"type": "implicit", "model": "builtin:tiny-llama", "reference_free": True, "normalization": "mean"}


def online_config(tmp_path: Path, out: str, **over):
    from align.online import OnlineConfig

    data = {
        "model": "builtin:tiny-llama",
        "output_dir": str(tmp_path / out),
        "reward": [VARIED],
        "rollout": {"group_size": 4, "prompts_per_step": 2, "max_new_tokens": 8},
        "eval": {"limit": 0},
        "train": {
            "precision": "fp32",
            "max_steps": 3,
            "batch_size": 16,
            "lr": 1e-3,
            "compile": False,
            "save_every": 1,
            "num_threads": 1,
            "lr_scheduler": "linear",
        },
        "lora": {"r": 4, "alpha": 8},
        "save_merged": False,
    }
    for k, v in over.items():
        section, _, key = k.partition("__")
        if key:
            data.setdefault(section, {})[key] = v
        else:
            data[section] = v
    return build(OnlineConfig, data)


def adapter(run_dir: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(run_dir / "adapter" / "adapter_model.safetensors"))


def same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], atol: float = 0.0) -> None:
    assert a.keys() == b.keys()
    moved = 0
    for k in a:
        assert torch.allclose(a[k], b[k], atol=atol, rtol=0), k
        moved += int(a[k].abs().sum() > 0)
    assert moved > 0  # the adapters trained (LoRA B starts at zero)


@pytest.mark.slow
def test_resume_after_a_kill_reaches_the_same_weights(tmp_path, tiny_model_ref, monkeypatch):
    from align import online
    from align.online import loop

    full = online.run(online_config(tmp_path, "full"))
    assert full["steps"] == 3
    calls = {"n": 0}
    real = loop.update

    def dying(*a, **k):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt  # killed during the third update
        return real(*a, **k)

    monkeypatch.setattr(loop, "update", dying)
    cfg = online_config(tmp_path, "killed")
    with pytest.raises(KeyboardInterrupt):
        online.run(cfg)
    assert (Path(cfg.output_dir) / "stopped.json").exists()
    assert (Path(cfg.output_dir) / "rollouts" / "step_00002-rank0.json").exists()  # drawn before the kill
    monkeypatch.setattr(loop, "update", real)
    resumed = online.run(cfg, resume=True)
    assert resumed["steps"] == 3
    same(adapter(Path(full["adapter_dir"]).parent), adapter(Path(cfg.output_dir)))
    rows = [json.loads(x) for x in (Path(cfg.output_dir) / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "loss" in r] == [1, 2, 3]


@pytest.mark.slow
def test_a_kill_just_after_a_checkpoint_or_the_final_evaluation_loses_no_row_and_repeats_none(
    tmp_path, tiny_model_ref, monkeypatch
):
    """Killed right after the last step's checkpoint was written, and (another run) right after the final evaluation:
    the resumed runs' metrics.jsonl hold every step's row once and the final evaluation's row once."""
    from align import online
    from align.online import loop

    def rows(cfg) -> list[dict[str, Any]]:
        return [json.loads(x) for x in (Path(cfg.output_dir) / "metrics.jsonl").read_text().splitlines()]

    real_save, real_policy = loop.save_checkpoint, loop.save_policy

    def dies_after_last_checkpoint(learner, checkpoints, step, *a):
        real_save(learner, checkpoints, step, *a)
        if step == 3:
            raise KeyboardInterrupt

    def dies_saving_the_policy(*a, **k):
        raise KeyboardInterrupt

    for name, where, patched in [
        ("ckpt", "save_checkpoint", dies_after_last_checkpoint),
        ("final", "save_policy", dies_saving_the_policy),
    ]:
        cfg = online_config(tmp_path, name, eval={"limit": 2, "max_new_tokens": 4})
        monkeypatch.setattr(loop, where, patched)
        with pytest.raises(KeyboardInterrupt):
            online.run(cfg)
        monkeypatch.setattr(loop, "save_checkpoint", real_save)
        monkeypatch.setattr(loop, "save_policy", real_policy)
        assert online.run(cfg, resume=True)["steps"] == 3
        got = rows(cfg)
        assert [r["step"] for r in got if "loss" in r] == [1, 2, 3], name
        assert [r["step"] for r in got if "eval_gold/overall" in r] == [0, 3], name


def test_micro_batches_give_the_single_batch_update(tmp_path, tiny_model_ref):
    from align import online

    # On a GPU the two splits sum in another order, and a sampled token may then flip at the next step's rollout:
    # one step there, and the difference held to 1% of the update instead of 1e-6.
    gpu = torch.cuda.is_available()
    steps = {"train__max_steps": 1} if gpu else {}
    for loss_type in ("grpo",):  # per-sequence token means inside, sequences outside: the harder split
        params = {"params": {"loss_type": loss_type}}
        one = online.run(online_config(tmp_path, f"one_{loss_type}", algorithm=params, **steps))
        many = online.run(online_config(tmp_path, f"many_{loss_type}", algorithm=params, train__batch_size=2, **steps))
        # a token budget below any pair's tokens: every pair of completions its own forward
        cut = online.run(online_config(tmp_path, f"cut_{loss_type}", algorithm=params, train__token_budget=1, **steps))
        a, b = adapter(Path(one["adapter_dir"]).parent), adapter(Path(many["adapter_dir"]).parent)
        if not gpu:
            same(a, b, atol=1e-6)
            same(a, adapter(Path(cut["adapter_dir"]).parent), atol=1e-6)
            continue
        update = sum(float(v.pow(2).sum()) for k, v in b.items() if "lora_B" in k) ** 0.5  # B starts at zero
        diff = sum(float((a[k] - b[k]).pow(2).sum()) for k in a if "lora_B" in k) ** 0.5
        assert update > 0 and diff <= 0.01 * update, (diff, update)


def test_nan_rewards_are_masked_and_counted(tmp_path, tiny_model_ref):
    """Prompts without a gold grader make the grader component NaN: counted, masked, never a zero reward."""
    from align import online
    from preference_data.records import Message, PromptOnly
    from preference_data.suite import build_suite

    suite = build_suite(seed=0, n_per_family=4)
    graded = suite.train_prompts[:2]
    ungraded = [PromptOnly([Message("user", f"Say something about {w}.")], {}, None, "mine") for w in ("tea", "ink")]
    f = tmp_path / "prompts.jsonl"
    f.write_text("".join(json.dumps(p.to_dict()) + "\n" for p in graded + ungraded))
    cfg = online_config(
        tmp_path,
        "nan",
        prompts={"source": str(f), "seed": 1},
        reward=[{"type": "grader"}, {**VARIED, "weight": 0.5}],
        rollout={"group_size": 2, "prompts_per_step": 4, "max_new_tokens": 6},
        train__max_steps=1,
    )
    report = online.run(cfg)
    row = next(json.loads(x) for x in (Path(cfg.output_dir) / "metrics.jsonl").read_text().splitlines())
    assert row["reward_nan/gold_overall"] == 4.0  # 2 ungraded prompts x 2 samples
    assert row["masked_completions"] == 4.0
    assert report["reward_failures"]["gold_overall"]["nan"] == 4
    assert report["reward_failures"]["gold_overall"]["no_gold_grader"] == 4


def test_config_errors_name_the_field(tmp_path):
    from align.online import OnlineConfig

    with pytest.raises(ConfigError) as e:
        build(
            OnlineConfig,
            {
                "reward": [{"type": "scalr", "model": "x"}, {"type": "grader", "weight": "heavy"}],
                "algorithm": {"loss": "rloo", "params": {"beta": 0.1}},
                "kl": {"placement": "loss", "beta": 0.1},
            },
        )
    text = str(e.value)
    assert "reward[0].type" in text and "did you mean 'scalar'" in text
    assert "reward[1].weight" in text
    assert "algorithm.params.beta" in text
    assert "kl.placement" in text
    with pytest.raises(ConfigError, match="pairwise"):
        build(OnlineConfig, {"reward": [{"type": "pair_pm", "model": "x"}]})


@pytest.mark.slow
def test_iterative_rounds_cache_and_resume(tmp_path, tiny_model_ref):
    from align.iterative import IterativeConfig, run

    data = {
        "model": "builtin:tiny-llama",
        "output_dir": str(tmp_path / "iter"),
        "reward": [VARIED],
        "rounds": {"rounds": 2, "prompts_per_round": 4, "samples_per_prompt": 3, "max_new_tokens": 6},
        "loss": {"name": "inpo"},
        "eval": {"limit": 0},
        "train": {"precision": "fp32", "max_steps": 1, "batch_size": 4, "compile": False, "num_threads": 1},
        "lora": {"r": 4, "alpha": 8},
    }
    cfg = build(IterativeConfig, data)
    first = run(cfg)
    assert [r["round"] for r in first["rounds"]] == [1, 2]
    assert all(r["pairs"] + r["dropped_tie"] + r["dropped_nan"] == 4 for r in first["rounds"])
    pairs = [json.loads(x) for x in (tmp_path / "iter" / "round_2" / "pairs.jsonl").read_text().splitlines()]
    assert all(p["source"] == "round_2" for p in pairs)
    # round 2 started from round 1's policy, with the initial model as INPO's reference
    saved = (tmp_path / "iter" / "round_2" / "train" / "config.yaml").read_text()
    assert str(tmp_path / "iter" / "round_1" / "train") in saved and "tiny-llama" in saved
    # a rerun reads every finished round back: same final policy, nothing retrained
    mtime = (tmp_path / "iter" / "round_2" / "train" / "report.json").stat().st_mtime
    again = run(cfg)
    assert again["policy_dir"] == first["policy_dir"]
    assert (tmp_path / "iter" / "round_2" / "train" / "report.json").stat().st_mtime == mtime


@pytest.mark.parametrize("static", ["off", "eager"])
def test_one_engine_serves_every_round_with_that_rounds_weights(tmp_path, tiny_model_ref, static):
    """The rounds share one generation engine (`RoundEngine`): round 2's policy is copied into it, and it samples
    what an engine built on that policy samples."""
    from transformers import AutoModelForCausalLM

    from align.iterative import IterativeConfig, RoundEngine
    from prefalign.generation import SamplingParams
    from prefalign.models.hub import load_tokenizer, resolve

    moved = AutoModelForCausalLM.from_pretrained(resolve(tiny_model_ref), dtype=torch.float32)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in moved.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g))
    moved.save_pretrained(str(tmp_path / "moved"))
    load_tokenizer(tiny_model_ref).save_pretrained(str(tmp_path / "moved"))
    cfg = build(
        IterativeConfig,
        {"model": "builtin:tiny-llama", "train": {"precision": "fp32"}, "rounds": {"static": static, "max_rows": 16}},
    )
    params = SamplingParams(n=3, temperature=1.0, max_new_tokens=8, seed=4)
    convs = [[{"role": "user", "content": "Name a colour."}], [{"role": "user", "content": "What is 3 + 4?"}]]

    def samples(engine):
        return [c.token_ids for o in engine.generate(convs, params).outputs for c in o.completions]

    shared = RoundEngine(cfg)
    first = shared.on("builtin:tiny-llama")
    before = samples(first)
    second = shared.on(str(tmp_path / "moved"))
    assert second is first
    after = samples(second)
    assert after != before and after == samples(RoundEngine(cfg).on(str(tmp_path / "moved")))


def test_iterative_samples_are_redrawn_when_a_round_is_retrained_into_the_same_directory(tmp_path):
    """Round t's samples (and their scores) are cached by a key that holds the policy's weights' fingerprint, so a
    round 1 retrained with other settings into the same directory gives round 2 fresh samples, not stale ones."""
    from align.iterative import IterativeConfig, sample_key
    from preference_data.records import Message, PromptOnly

    cfg = build(IterativeConfig, {"model": "builtin:tiny-llama", "output_dir": str(tmp_path / "iter")})
    policy = tmp_path / "round_1" / "train" / "merged"
    policy.mkdir(parents=True)
    (policy / "config.json").write_text("{}")
    (policy / "model.safetensors").write_bytes(b"first weights")
    prompts = [PromptOnly([Message("user", "What is 2 + 2?")])]
    key = sample_key(cfg, str(policy), prompts, 2)
    assert sample_key(cfg, str(policy), prompts, 2) == key  # nothing changed: the cache is reused
    (policy / "model.safetensors").write_bytes(b"retrained weights, other settings")
    assert sample_key(cfg, str(policy), prompts, 2) != key
    assert sample_key(cfg, str(policy), prompts, 3)["sampling"] != key["sampling"]


def test_keep_pairs_keeps_the_largest_margins_in_prompt_order_and_counts_the_rest():
    from align.iterative import IterativeConfig, Pool, build_pairs, dropped_text
    from preference_data.records import Message, PromptOnly

    prompts = [PromptOnly([Message("user", f"question {i}")]) for i in range(5)]
    # per prompt: two samples, then the reference; margins (best - worst) 1, 5, tie, 3, 5
    scores = [[0.0, 1.0, 0.5], [-3.0, 0.0, 2.0], [1.0, 1.0, 1.0], [0.0, -1.0, 2.0], [2.0, -3.0, 0.0]]
    pool = Pool(
        prompts,
        [["a", "b", "ref"] for _ in prompts],
        [[1, 1, 1] for _ in prompts],
        [["policy", "policy", "reference"] for _ in prompts],
    )
    # the reference wins on prompts 1 and 3, a sample on prompts 0 and 4
    for keep, kept, refs in ((0, [1.0, 5.0, 3.0, 5.0], 2), (3, [5.0, 3.0, 5.0], 2), (2, [5.0, 5.0], 1)):
        cfg = build(IterativeConfig, {"rounds": {"prompts_per_round": 5, "keep_pairs": keep}})
        pairs, counts = build_pairs(cfg, pool, scores, 1)
        assert [p.margin for p in pairs] == kept
        assert counts["dropped_tie"] == 1 and counts["dropped_margin"] == 4 - len(kept)
        assert counts["pairs"] == len(kept) and counts["chosen_reference"] == refs  # counted on the kept pairs
    assert "2 below the kept margins" in dropped_text(counts)
    with pytest.raises(ConfigError, match="keep_pairs: 9 is more than the 5 prompts_per_round"):
        build(IterativeConfig, {"rounds": {"prompts_per_round": 5, "keep_pairs": 9}})
    # a list gives each round its own N: round 1 keeps 2, round 2 every pair, round 3 three
    cfg = build(IterativeConfig, {"rounds": {"rounds": 3, "prompts_per_round": 5, "keep_pairs": [2, 0, 3]}})
    assert [[p.margin for p in build_pairs(cfg, pool, scores, t)[0]] for t in (1, 2, 3)] == [
        [5.0, 5.0],
        [1.0, 5.0, 3.0, 5.0],
        [5.0, 3.0, 5.0],
    ]
    with pytest.raises(ConfigError) as bad:  # every problem at once: the length and each bad entry
        build(IterativeConfig, {"rounds": {"rounds": 3, "prompts_per_round": 5, "keep_pairs": [9, -1]}})
    assert "one entry per round (3 rounds), got 2" in str(bad.value) and "9 is more than the 5" in str(bad.value)
    assert "must be >= 0 (0 keeps every pair), got -1" in str(bad.value)


def test_policy_and_data_ranks_the_datas_pair_beside_the_samples(tmp_path, smollm2_tokenizer):
    """candidates: policy_and_data adds each prompt's reference and the data's rejected answer after its samples
    (a prompt without them ranks what it has); the reward may pair the data's two answers (a mistake the policy
    never sampled is still rejected), and the counts say which side came from the data. Prompts read from a
    preference file carry their first pair's answers; the prompt's id stays the prompt's alone."""
    from align.iterative import IterativeConfig, build_pairs, candidate_pool, data_text
    from align.online.config import PromptsSection
    from align.online.rollout import Rollout, load_train_prompts

    rows = [
        {"prompt": "Fix my bike?", "chosen": "Pump the tire.", "rejected": "I can't help with that request."},
        {"prompt": "Fix my bike?", "chosen": "Ask a shop.", "rejected": "No."},  # the same prompt again
        {"prompt": "Pick my neighbour's lock?", "chosen": "I won't help with that.", "rejected": "Sure! First..."},
    ]
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    prompts = sorted(load_train_prompts(PromptsSection(source=str(data))), key=lambda p: p.prompt[-1].content)
    assert [p.meta for p in prompts] == [
        {"reference": "Pump the tire.", "rejected": "I can't help with that request."},
        {"reference": "I won't help with that.", "rejected": "Sure! First..."},
    ]
    bare = load_train_prompts(PromptsSection(source=str(data)))
    assert {p.id for p in prompts} == {type(p)(p.prompt, source=p.source).id for p in bare}

    prompts[1].meta.pop("rejected")  # a prompt with a reference only
    rollout = Rollout(0, prompts, 2, [[1], [1]], ["a", "b", "c", "d"], [[5], [6], [7], [8]], [[0.0]] * 4, ["eos"] * 4)
    cfg = build(IterativeConfig, {"rounds": {"candidates": "policy_and_data", "samples_per_prompt": 2}})
    pool = candidate_pool(cfg, rollout, smollm2_tokenizer)
    assert pool.texts == [
        ["a", "b", "Pump the tire.", "I can't help with that request."],
        ["c", "d", "I won't help with that."],
    ]
    assert pool.origins == [["policy", "policy", "reference", "rejected"], ["policy", "policy", "reference"]]
    assert pool.on_policy == [[True, True, False, False], [True, True, False]]
    assert pool.lengths[0][:2] == [1, 1] and pool.lengths[0][3] == len(
        smollm2_tokenizer("I can't help with that request.", add_special_tokens=False)["input_ids"]
    )
    # the reward puts the data's reference first and its rejected answer last on prompt 0, a sample first on 1
    pairs, counts = build_pairs(cfg, pool, [[0.0, 1.0, 3.0, -2.0], [2.0, 0.0, 1.0]], 1)
    assert [(p.chosen[0].content, p.rejected[0].content, p.margin) for p in pairs] == [
        ("Pump the tire.", "I can't help with that request.", 5.0),
        ("c", "d", 2.0),
    ]
    assert counts["chosen_reference"] == 1 and counts["rejected_data"] == 1
    assert data_text(cfg, counts) == "; the data's reference chosen in 1, its rejected answer rejected in 1"
    only_ref = build(IterativeConfig, {"rounds": {"candidates": "policy_and_reference", "samples_per_prompt": 2}})
    assert candidate_pool(only_ref, rollout, smollm2_tokenizer).texts[0] == ["a", "b", "Pump the tire."]
    assert data_text(build(IterativeConfig, {}), counts) == ""

    # rounds.reference_bonus: a sample must beat the reference by more than the bonus to be chosen over it; the
    # margin counts the bonus. Prompt 1's sample "c" (2.0) beats its reference (1.0) by 1.0: not by more than 1.5
    anchored = build(
        IterativeConfig,
        {"rounds": {"candidates": "policy_and_data", "samples_per_prompt": 2, "reference_bonus": 1.5}},
    )
    pairs, counts = build_pairs(anchored, pool, [[0.0, 1.0, 3.0, -2.0], [2.0, 0.0, 1.0]], 1)
    assert [(p.chosen[0].content, p.rejected[0].content, p.margin) for p in pairs] == [
        ("Pump the tire.", "I can't help with that request.", 6.5),
        ("I won't help with that.", "d", 2.5),
    ]
    assert counts["chosen_reference"] == 2
    pairs, _ = build_pairs(anchored, pool, [[0.0, 1.0, 3.0, -2.0], [2.6, 0.0, 1.0]], 1)  # 2.6 > 1.0 + 1.5
    assert pairs[1].chosen[0].content == "c"
    # rounds.rejected_from: policy: the rejected side is the policy's own worst sample, not the data's rejected answer
    spin = build(
        IterativeConfig,
        {
            "rounds": {
                "candidates": "policy_and_data",
                "samples_per_prompt": 2,
                "reference_bonus": 1.5,
                "rejected_from": "policy",
            }
        },
    )
    pairs, counts = build_pairs(spin, pool, [[0.0, 1.0, 3.0, -2.0], [2.0, 0.0, 1.0]], 1)
    assert [(p.chosen[0].content, p.rejected[0].content, p.margin) for p in pairs] == [
        ("Pump the tire.", "a", 4.5),
        ("I won't help with that.", "d", 2.5),
    ]
    assert counts["chosen_reference"] == 2 and counts["rejected_data"] == 0
    assert [p.attributes["origins"] for p in pairs] == [["reference", "policy"], ["reference", "policy"]]
    with pytest.raises(ConfigError, match="rejected_from"):
        build(IterativeConfig, {"rounds": {"rejected_from": "data"}})
    with pytest.raises(ConfigError, match="reference_bonus: 1.0 needs the reference among the candidates"):
        build(IterativeConfig, {"rounds": {"reference_bonus": 1.0}})
    with pytest.raises(ConfigError, match="reference_bonus: a finite number >= 0"):
        build(IterativeConfig, {"rounds": {"candidates": "policy_and_data", "reference_bonus": -1}})


def test_one_sample_against_the_reference_makes_a_pair_and_a_prompt_without_one_is_counted():
    """K = 1 with candidates policy_and_reference: the sample and the reference are the pair (either side may
    win); a prompt without a reference has one candidate and is dropped and counted, not paired with itself."""
    from align.iterative import IterativeConfig, Pool, build_pairs, dropped_text
    from preference_data.records import Message, PromptOnly

    prompts = [PromptOnly([Message("user", f"question {i}")]) for i in range(3)]
    pool = Pool(
        prompts,
        [["a", "ref"], ["b"], ["c", "ref"]],
        [[1, 1], [1], [1, 1]],
        [["policy", "reference"], ["policy"], ["policy", "reference"]],
    )
    cfg = build(IterativeConfig, {"rounds": {"samples_per_prompt": 1, "candidates": "policy_and_reference"}})
    pairs, counts = build_pairs(cfg, pool, [[0.0, 2.0], [1.0], [3.0, 1.0]], 1)
    assert [(p.chosen[0].content, p.rejected[0].content, p.margin) for p in pairs] == [
        ("ref", "a", 2.0),
        ("c", "ref", 2.0),
    ]
    assert counts["dropped_single"] == 1 and counts["chosen_reference"] == 1 and counts["pairs"] == 2
    assert "1 with one sample and no reference" in dropped_text(counts)
    with pytest.raises(ConfigError, match="K >= 1 with candidates: policy_and_reference"):
        build(IterativeConfig, {"rounds": {"samples_per_prompt": 1}})


def test_greedy_sample_is_the_groups_last_answer_beside_the_same_sampled_ones(tmp_path, tiny_model_ref):
    """`rounds.greedy_sample`: each prompt's group is its K - 1 sampled answers, the same ones a run without it
    samples first, then the answer greedy decoding gives alone; the cache key tells the two apart."""
    from align.iterative import IterativeConfig
    from align.rounds.sample import sample_key, sample_round
    from prefalign.generation import SamplingParams, make_engine
    from prefalign.models.hub import load_model, load_tokenizer
    from preference_data.records import Message, PromptOnly

    prompts = [PromptOnly([Message("user", q)], id=f"p{i}") for i, q in enumerate(["Name a colour.", "What is 3 + 4?"])]

    def cfg(greedy: bool, k: int) -> Any:
        rounds = {"samples_per_prompt": k, "greedy_sample": greedy, "max_new_tokens": 8, "seed": 3}
        rounds["candidates"] = "policy_and_data"  # K = 1 ranks the sample against the data's answers
        return build(IterativeConfig, {"model": tiny_model_ref, "train": {"precision": "fp32"}, "rounds": rounds})

    with_greedy, _ = sample_round(cfg(True, 3), tiny_model_ref, prompts, 1, tmp_path / "g.json")
    plain, _ = sample_round(cfg(False, 2), tiny_model_ref, prompts, 1, tmp_path / "p.json")
    assert with_greedy.group_size == 3 and plain.group_size == 2
    engine = make_engine(load_model(tiny_model_ref, dtype="float32", merge=True), load_tokenizer(tiny_model_ref))
    alone = engine.generate([p.prompt for p in prompts], SamplingParams(n=1, temperature=0.0, max_new_tokens=8))
    for i, group in enumerate(with_greedy.groups()):
        assert group[:2] == plain.groups()[i]
        assert group[2] == alone.outputs[i].completions[0].text
    assert sample_key(cfg(True, 2), tiny_model_ref, prompts, 1) != sample_key(cfg(False, 2), tiny_model_ref, prompts, 1)
    only, _ = sample_round(cfg(True, 1), tiny_model_ref, prompts, 1, tmp_path / "o.json")
    assert [g[0] for g in only.groups()] == [o.completions[0].text for o in alone.outputs]


FSDP_ON_CPU = """compute_environment: LOCAL_MACHINE
distributed_type: FSDP
num_processes: 2
num_machines: 1
machine_rank: 0
mixed_precision: 'no'
use_cpu: true
fsdp_config:
  fsdp_version: 2
  fsdp_auto_wrap_policy: NO_WRAP
  fsdp_state_dict_type: FULL_STATE_DICT
  fsdp_reshard_after_forward: true
"""


def _launch(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", *args, "-m", "align.cli.main", "train", "--config", str(tmp_path / "cfg.yaml")]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.mark.slow
def test_two_processes_ddp_and_fsdp_equal_one(tmp_path, tiny_model_ref):
    """torchrun (DDP through accelerate) and `accelerate launch` with an FSDP config (FSDP2 on CPU, gloo) make the
    update one process makes on the whole batch."""
    from align import online

    one = online.run(online_config(tmp_path, "one", train__max_steps=2))
    for name, launcher in {
        "ddp": ["torch.distributed.run", "--standalone", "--nproc_per_node", "2"],
        "fsdp": ["accelerate.commands.launch", "--config_file", str(tmp_path / "fsdp.yaml")],
    }.items():
        (tmp_path / "fsdp.yaml").write_text(FSDP_ON_CPU)
        dump_yaml(online_config(tmp_path, name, train__max_steps=2), tmp_path / "cfg.yaml")
        _launch(launcher, tmp_path)
        report = json.loads((tmp_path / name / "report.json").read_text())
        assert report["processes"] == 2 and report["parallel"] == name
        assert (tmp_path / name / "rollouts" / "step_00000-rank1.json").exists()  # each rank drew its own prompt
        same(adapter(Path(one["adapter_dir"]).parent), adapter(tmp_path / name), atol=1e-6)


# --- judges trained by RL: the rule reward against cheap answers ---------------------------------------


def _judge_record(kind: str, **gold):
    from preference_data.records import Message, PromptOnly

    return PromptOnly([Message("user", "judge this")], {"judge": {"kind": kind, **gold}}, None, "t")


def test_judge_correctness_rule_and_cheap_answers():
    from align.rewards import Component, judge_correctness

    c = Component("judge", 1.0, {"type": "judge_correctness", "tolerance": 1}, "rule")
    think = _judge_record("think", form="binary", label="B", strength=2)
    assert judge_correctness(think, "<think>B is right</think>\n<answer>B</answer>", c) == 1.0
    assert judge_correctness(think, "<answer>A</answer>", c) == 0.0
    # cheap answers: no verdict, both letters, a verdict hidden in prose, an earlier B overridden by a final A
    assert judge_correctness(think, "B", c) == 0.0
    assert judge_correctness(think, "<answer>A or B</answer>", c) == 0.0
    assert judge_correctness(think, "<answer>B</answer> ... <answer>A</answer>", c) == 0.0
    assert c.failures["unparsed"] == 2
    multi = _judge_record("think", form="multiclass", label="A", strength=-3)
    assert judge_correctness(multi, "<answer>-3</answer>", c) == 1.0
    assert judge_correctness(multi, "<answer>-1</answer>", c) == 0.5  # the right side, the wrong strength
    assert judge_correctness(multi, "<answer>2</answer>", c) == 0.0
    grm = _judge_record("grm", score=7)
    assert judge_correctness(grm, "Fine. Score: \\boxed{8}", c) == 1.0
    assert judge_correctness(grm, "Score: \\boxed{4}", c) == 0.0
    assert judge_correctness(grm, "Score: \\boxed{7, 7}", c) == 0.0  # two scores for one response
    assert judge_correctness(grm, "Score: \\boxed{70}", c) == 0.0  # outside 1..10
    no_label = _judge_record("think")
    no_label.meta.clear()
    assert judge_correctness(no_label, "<answer>A</answer>", c) is None  # NaN, counted, never a zero
    assert c.failures["no_gold_label"] == 1


def test_judge_prompts_carry_gold_labels():
    from align.judge_rl import judge_prompts

    think = judge_prompts("suite", "think", "multiclass", seed=0)
    labels = {p.meta["judge"]["label"] for p in think}
    assert labels == {"A", "B"}  # the chosen response is put at both positions
    for p in think[:50]:
        j = p.meta["judge"]
        assert (j["strength"] < 0) == (j["label"] == "A") and abs(j["strength"]) in (1, 2, 3)
    grm = judge_prompts("suite", "grm", "binary", seed=0)
    assert len(grm) == 2 * len(think)  # one prompt per response of every graded pair
    assert all(1 <= p.meta["judge"]["score"] <= 10 for p in grm)


def test_pairwise_rlhf_step_runs_with_a_pairwise_judge(tmp_path, tiny_model_ref):
    from align import online

    cfg = online_config(
        tmp_path,
        "pairwise",
        reward=[{"type": "judge", "model": "builtin:tiny-llama"}],
        algorithm={"loss": "grpo", "advantage": "pairwise"},
        rollout={"group_size": 3, "prompts_per_step": 2, "max_new_tokens": 6},
        train__max_steps=1,
    )
    report = online.run(cfg)
    data = json.loads((Path(cfg.output_dir) / "rollouts" / "step_00000-rank0.json").read_text())
    prefs = torch.tensor(data["rewards"]["prefs"])  # (prompts, G, G), antisymmetric, diagonal 0
    assert prefs.shape == (2, 3, 3)
    assert torch.allclose(prefs, -prefs.transpose(1, 2)) and torch.all(prefs.diagonal(dim1=1, dim2=2) == 0)
    assert report["algorithm"]["advantage"] == "pairwise"


# --- reward hacking is visible ------------------------------------------------------------------------------


def test_reward_hacking_rule_by_hand():
    from prefalign.training.metrics import reward_hacking

    rising_falling = [(0, 0.1, 0.5), (5, 0.2, 0.4), (10, 0.3, 0.3)]
    assert "steps 0 -> 10" in reward_hacking(rising_falling)
    assert reward_hacking(rising_falling[:2]) is None  # one evaluation of divergence is not yet a trend
    assert reward_hacking([(0, 0.1, 0.5), (5, 0.2, 0.4), (10, 0.2, 0.3)]) is None  # the reward stalled
    assert reward_hacking([(0, 0.1, 0.5), (5, 0.2, 0.4), (10, 0.3, 0.45)]) is None  # gold recovered
    assert reward_hacking([(0, 0.1, 0.5), (5, 0.2, 0.6), (10, 0.3, 0.5), (15, 0.4, 0.4)]) is not None  # the last two
    assert reward_hacking([(0, float("nan"), 0.5), (5, 0.2, 0.4), (10, 0.3, 0.3)]) is None  # NaN is no evidence


@pytest.mark.slow  # a whole run: its siblings in the slow tier (kill, resume, real models)
def test_hacking_alert_fires_in_a_run(tmp_path, tiny_model_ref, monkeypatch):
    """A run whose held-out evaluations (real: the learned reward and gold of the same greedy answers) are rewritten
    so that the learned reward rises while gold falls: the alert fires once, in alerts.jsonl and the run report."""
    from align import online
    from align.online.context import Online

    real = Online.evaluate

    def diverging(self, limit=None):
        ev = real(self, limit)
        assert ev is not None and "reward" in ev and "reward_components" in ev  # scored by the learned reward
        ev["reward"], ev["overall"] = 0.1 * self.step, 1.0 - 0.1 * self.step
        return ev

    monkeypatch.setattr(Online, "evaluate", diverging)
    cfg = online_config(tmp_path, "hack", eval={"limit": 2, "max_new_tokens": 4}, train__eval_every=1)
    online.run(cfg)
    rows = [json.loads(x) for x in (Path(cfg.output_dir) / "metrics.jsonl").read_text().splitlines()]
    assert [r["eval_reward"] for r in rows if "eval_reward" in r] == pytest.approx([0.0, 0.1, 0.2, 0.3])
    from preference_data.suite.heldout import load_prompts

    evals = json.loads((Path(cfg.output_dir) / "evals.json").read_text())  # ids for `align eval compare`
    assert all(e["prompt_ids"] == [p.id for p in load_prompts("suite", 2)] for e in evals.values())
    alerts = [json.loads(x) for x in (Path(cfg.output_dir) / "alerts.jsonl").read_text().splitlines()]
    assert [a["key"] for a in alerts] == ["reward_hacking"] and alerts[0]["step"] == 2
    assert "reward hacking" in (Path(cfg.output_dir) / "report.html").read_text()


# --- the prompt's reference response as a member of its group ----------------------------------------------------


def test_reference_joins_each_group_ranked_by_the_reward(tmp_path, tiny_model_ref):
    """`rollout.candidates: policy_and_reference`: each group gets the prompt's reference response after its samples,
    its π_old is the current policy's log-prob of its tokens (checked against a plain transformers forward), the
    reward scores it like a sample, and the step's reward statistics stay those of the samples."""
    from transformers import AutoModelForCausalLM

    from align import online
    from prefalign.models.hub import resolve

    cfg = online_config(
        tmp_path,
        "ref",
        reward=[{"type": "grader"}],
        rollout={"group_size": 2, "prompts_per_step": 3, "max_new_tokens": 48, "candidates": "policy_and_reference"},
        train__max_steps=1,
    )
    online.run(cfg)
    data = json.loads((Path(cfg.output_dir) / "rollouts" / "step_00000-rank0.json").read_text())
    r = data["rollout"]
    assert r["group_size"] == 3 and r["reference"] and len(r["texts"]) == 9
    model = AutoModelForCausalLM.from_pretrained(resolve("builtin:tiny-llama"), torch_dtype=torch.float32)
    comps = torch.tensor(data["rewards"]["components"]).view(3, 3)
    for i, p in enumerate(r["prompts"]):
        row = 3 * i + 2
        assert r["texts"][row] == p["meta"]["reference"] and r["finish"][row] == "eos"
        ids = r["prompt_ids"][i] + r["token_ids"][row]
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0, len(r["prompt_ids"][i]) - 1 : -1]
        want = logits.log_softmax(-1).gather(1, torch.tensor(r["token_ids"][row])[:, None])[:, 0]
        assert r["logprobs"][row] == pytest.approx(want.tolist(), abs=1e-4)
        assert comps[i, 2] > comps[i, :2].max()  # the gold graders prefer the reference to the tiny model's noise
    row = next(json.loads(x) for x in (Path(cfg.output_dir) / "metrics.jsonl").read_text().splitlines())
    assert row["reference_best"] == 1.0 and row["reward/reference"] == pytest.approx(comps[:, 2].mean().item())
    assert row["reward"] == pytest.approx(comps[:, :2].mean().item())  # the samples' reward, the reference apart


def test_a_prompt_without_a_reference_is_named():
    from align.online.rollout import Rollout, with_references
    from prefalign.errors import UserError
    from prefalign.models.hub import load_tokenizer
    from preference_data.records import Message, PromptOnly

    tok = load_tokenizer("builtin:tiny-llama")
    p = PromptOnly([Message("user", "Say something.")], {}, None, "mine")
    r = Rollout(0, [p], 2, [[1]], ["a", "b"], [[5], [6]], [[-1.0], [-1.0]], ["eos", "eos"])
    with pytest.raises(UserError, match=rf"prompt {p.id}: no reference response \(meta.reference\)"):
        with_references(r, tok, 8)


def test_a_round_computes_its_reference_log_probs_once_when_its_steps_revisit_its_pairs(tmp_path):
    """`rounds.reference_pass: auto`: precomputed (one pass before the round trains) when max_steps x batch_size
    draws the round's pairs more than once, else in every step (the LoRA base with adapters disabled)."""
    from pathlib import Path

    from align.iterative import IterativeConfig, reference_pass, round_train_config

    cfg = build(IterativeConfig, {"train": {"max_steps": 48, "batch_size": 8}, "loss": {"name": "sigmoid"}})
    assert reference_pass(cfg, 96) == "once" and reference_pass(cfg, 384) == "every_step"
    assert reference_pass(cfg, 384, processes=2) == "once"  # two processes draw 2 x 8 pairs a step
    assert round_train_config(cfg, 1, "builtin:tiny-llama", Path("p.jsonl"), 96).reference.kind == "precomputed"
    assert round_train_config(cfg, 1, "builtin:tiny-llama", Path("p.jsonl"), 500).reference.kind == "auto"
    fixed = build(IterativeConfig, {"rounds": {"reference_pass": "every_step"}, "train": {"max_steps": 48}})
    assert round_train_config(fixed, 1, "builtin:tiny-llama", Path("p.jsonl"), 8).reference.kind == "auto"
    inpo = build(IterativeConfig, {"loss": {"name": "inpo"}, "train": {"max_steps": 48}})
    assert round_train_config(inpo, 2, "r1", Path("p.jsonl"), 8).previous.model == "r1"  # INPO keeps its own roles


def test_order_by_decides_a_prompts_sides_and_the_rewards_margins_decide_what_is_kept():
    """rounds.order_by: the named components rank a prompt's candidates first (the reward within a tie of them) and
    stay out of the reward's sum and the margins: a pair they reverse keeps the size of the reward's margin and is
    counted; keep_pairs then keeps by those margins, as without them. The scores come from the rules' own sum."""
    from align.iterative import IterativeConfig, Pool, build_pairs, dropped_text, score_round
    from align.rewards import RewardSet
    from preference_data.records import Message, PromptOnly

    prompts = [PromptOnly([Message("user", f"question {i}")]) for i in range(3)]
    pool = Pool(
        prompts,
        [["comply", "refuse", "ref"] for _ in prompts],
        [[1, 1, 1] for _ in prompts],
        [["policy", "policy", "reference"] for _ in prompts],
    )
    # prompt 0: the reward prefers the refusal the order puts last; 1: the order agrees with the reward; 2: the
    # order ties every candidate, so the reward alone decides
    scores = [[0.0, 3.0, 1.0], [0.0, -2.0, 0.5], [0.0, 4.0, 1.0]]
    order = [[1.0, 0.0, 1.0], [1.0, 0.0, 1.0], [1.0, 1.0, 1.0]]
    cfg = build(IterativeConfig, {"rounds": {"prompts_per_round": 3, "candidates": "policy_and_reference"}})
    plain, _ = build_pairs(cfg, pool, scores, 1)
    assert [(p.chosen[0].content, p.rejected[0].content, p.margin) for p in plain] == [
        ("refuse", "comply", 3.0),
        ("ref", "refuse", 2.5),
        ("refuse", "comply", 4.0),
    ]
    pairs, counts = build_pairs(cfg, pool, scores, 1, order)
    assert [(p.chosen[0].content, p.rejected[0].content, p.margin) for p in pairs] == [
        ("ref", "refuse", 2.0),  # reversed: the reward's margin 1.0 - 3.0, its size kept
        ("ref", "refuse", 2.5),
        ("refuse", "comply", 4.0),
    ]
    assert counts["reordered"] == 1 and "order_by reversed the reward's order in 1" in dropped_text(counts)
    kept = build(
        IterativeConfig, {"rounds": {"prompts_per_round": 3, "candidates": "policy_and_reference", "keep_pairs": 2}}
    )
    assert [p.margin for p in build_pairs(kept, pool, scores, 1, order)[0]] == [2.5, 4.0]
    # keep_ordered: the pairs the order separates (prompts 0 and 1) are kept before a wider margin (prompt 2)
    assert [p.attributes["ordered"] for p in pairs] == [True, True, False]
    first = build(
        IterativeConfig,
        {
            "rounds": {
                "prompts_per_round": 3,
                "candidates": "policy_and_reference",
                "keep_pairs": 2,
                "order_by": ["x"],
                "keep_ordered": True,
            },
            "reward": [{"type": "length", "name": "x"}, {"type": "grader"}],
        },
    )
    kept_pairs, counts = build_pairs(first, pool, scores, 1, order)
    assert [p.margin for p in kept_pairs] == [2.0, 2.5] and counts["kept_ordered"] == 2
    assert "2 kept pairs separated by order_by" in dropped_text(counts)
    with pytest.raises(ConfigError, match="keep_ordered: keeps the pairs order_by separates first"):
        build(IterativeConfig, {"rounds": {"keep_ordered": True}})
    # a NaN in the order drops the prompt as a NaN reward does
    _, counts = build_pairs(cfg, pool, scores, 1, [[1.0, math.nan, 1.0], *order[1:]])
    assert counts["dropped_nan"] == 1 and counts["pairs"] == 2

    # score_round: the order_by components' weighted sum apart, the rest summed (rules: no model needed)
    reward = [{"type": "length", "max_words": 1, "weight": 2.0}, {"type": "length", "max_words": 2, "name": "gate"}]
    texts = Pool(prompts[:1], [["one", "one two", "one two three four"]], [[1, 2, 4]], [["policy"] * 3])
    summed, none = score_round(RewardSet(reward), texts, "round_robin")
    assert none is None and summed == [[3.0, 2.0, 1.0]]  # 2 x min(1, 1/n) + min(1, 2/n)
    rest, gate = score_round(RewardSet(reward), texts, "round_robin", ["gate"])
    assert rest == [[2.0, 1.0, 0.5]] and gate == [[1.0, 1.0, 0.5]]

    with pytest.raises(ConfigError) as bad:
        build(IterativeConfig, {"reward": reward, "rounds": {"order_by": ["gat", "gate", "gate"]}})
    assert "'gat' is not a reward component (did you mean 'gate'?)" in str(bad.value)
    assert "each component once" in str(bad.value)
    with pytest.raises(ConfigError, match="leave at least one for the reward's sum"):
        build(IterativeConfig, {"reward": reward, "rounds": {"order_by": ["gate", "length"]}})
    with pytest.raises(ConfigError, match="a pairwise oracle ranks the candidates alone"):
        build(IterativeConfig, {"reward": [{"type": "pair_pm", "model": "x"}], "rounds": {"order_by": ["pair_pm"]}})


def test_keep_per_family_keeps_each_familys_share_by_its_own_margins():
    """rounds.keep_per_family: keep_pairs N split over the prompt families in proportion to their pairs (largest
    remainders), the largest margins within each; without it one family with wide margins takes every place."""
    from align.iterative import IterativeConfig, Pool, build_pairs
    from align.rounds.pairs import family_quotas
    from preference_data.records import Message, PromptOnly

    assert family_quotas(["a"] * 5 + ["b"] * 3 + ["c"] * 2, 5) == {"a": 3, "b": 1, "c": 1}  # 2.5, 1.5, 1.0
    assert sum(family_quotas(["s"] * 38 + ["o"] * 218, 96).values()) == 96
    fams = ["safety"] * 4 + ["arithmetic"] * 4
    prompts = [PromptOnly([Message("user", f"q{i}")], grader=f) for i, f in enumerate(fams)]
    pool = Pool(prompts, [["a", "b"]] * 8, [[1, 1]] * 8, [["policy", "policy"]] * 8)
    scores = [[9.0, 0.0], [8.0, 0.0], [7.0, 0.0], [6.0, 0.0], [1.0, 0.0], [4.0, 0.0], [2.0, 0.0], [3.0, 0.0]]
    plain = build(IterativeConfig, {"rounds": {"prompts_per_round": 8, "keep_pairs": 4}})
    assert [p.margin for p in build_pairs(plain, pool, scores, 1)[0]] == [9.0, 8.0, 7.0, 6.0]
    split = build(IterativeConfig, {"rounds": {"prompts_per_round": 8, "keep_pairs": 4, "keep_per_family": True}})
    pairs, counts = build_pairs(split, pool, scores, 1)
    assert [p.margin for p in pairs] == [9.0, 8.0, 4.0, 3.0]  # two a family, in prompt order
    assert counts["pairs"] == 4 and counts["dropped_margin"] == 4


def test_order_by_leaves_a_length_penalized_margin_alone_and_a_flipped_pair_is_no_longer_ordered():
    """A pair whose chosen side has the lower reward because of the length penalty (not the order) keeps its signed
    margin and is not counted as reordered; a pair the verifying judge flips loses its `ordered` mark."""
    from align.iterative import IterativeConfig, Pool, build_pairs
    from align.verify import apply_verdicts
    from preference_data.records import Message, PromptOnly

    pool = Pool([PromptOnly([Message("user", "q")])], [["long", "short"]], [[100, 1]], [["policy", "policy"]])
    cfg = build(IterativeConfig, {"rounds": {"pair_rule": "length_penalized", "length_penalty": 0.01}})
    plain, _ = build_pairs(cfg, pool, [[1.0, 0.9]], 1)
    ordered, counts = build_pairs(cfg, pool, [[1.0, 0.9]], 1, [[1.0, 1.0]])
    assert plain[0].margin == ordered[0].margin == pytest.approx(-0.1)
    assert counts["reordered"] == 0 and ordered[0].attributes["ordered"] is False
    sep, _ = build_pairs(cfg, pool, [[1.0, 0.9]], 1, [[0.0, 1.0]])  # the order puts "short" first as well
    assert sep[0].attributes["ordered"] is True
    flipped, _ = apply_verdicts(sep, [0.1], "flip")
    assert flipped[0].chosen[0].content == "long" and flipped[0].attributes["ordered"] is False
