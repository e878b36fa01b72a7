"""Training generative judges (`align rm train` with a judge_train config): the examples each kind learns from,
and a real SFT run of a pair-PM on the tiny model that raises the probability of the right letter."""

from __future__ import annotations

import json
import math

import pytest
import torch

from preference_data.records import Message, PreferencePair
from reward_models.judge_train import (
    JudgeSection,
    grm_examples,
    pair_pm_examples,
    symmetric_pair_pm_loss,
    think_examples,
)

TINY = "builtin:tiny-llama"


def _pair(i: int) -> PreferencePair:
    return PreferencePair(
        [Message("user", f"What is {i} + {i}?")],
        [Message("assistant", f"{2 * i}")],
        [Message("assistant", f"{2 * i + 1}, probably")],
        id=f"p{i}",
    )


def test_pair_pm_examples_put_the_chosen_response_at_the_answered_position():
    pairs = [_pair(i) for i in range(200)]
    examples = pair_pm_examples(pairs, seed=0, orders="random")
    assert [e.id for e in examples] == [p.id for p in pairs]
    for e, p in zip(examples, pairs, strict=True):
        a = e.message.split("[RESPONSE A] ")[1].split(" [RESPONSE B]")[0]
        assert (a == p.chosen[0].content) == (e.completion == "A")
    share_a = sum(e.completion == "A" for e in examples) / len(examples)
    assert 0.4 < share_a < 0.6  # uniformly at random, seeded
    again = pair_pm_examples(pairs, seed=0, orders="random")
    assert again == examples and pair_pm_examples(pairs, seed=1, orders="random") != examples
    # both orders (the default): every pair at A, then at B, the answers balanced exactly
    both = pair_pm_examples(pairs, seed=0)
    assert [e.id for e in both] == [p.id for p in pairs for _ in range(2)]
    assert [e.completion for e in both] == ["A", "B"] * len(pairs)


def test_the_symmetric_pair_pm_loss_by_hand_and_blind_to_a_position_bias():
    # two pairs: (logit A, logit B) read chosen-at-A, then chosen-at-B
    logits = torch.tensor([[2.0, 1.0], [0.0, 0.5], [1.0, 3.0], [0.2, 0.1]], requires_grad=True)
    loss, stats = symmetric_pair_pm_loss(logits)
    s = [(2.0 - 1.0) - (1.0 - 3.0), (0.0 - 0.5) - (0.2 - 0.1)]  # z_AB - z_BA: 3.0, -0.6
    assert float(loss.detach()) == pytest.approx(sum(math.log1p(math.exp(-v)) for v in s) / 2, abs=1e-6)
    assert stats["pair_accuracy"] == 0.5 and stats["both_orders_right"] == 0.5
    assert stats["position_bias"] == pytest.approx(
        ((1.0 - 2.0) / 2 + (-0.5 + 0.1) / 2) / 2
    )  # per pair (z_AB + z_BA) / 2
    # a preference for position A (the same amount on every A logit) changes neither the loss nor its gradient
    loss.backward()
    shifted = logits.detach() + torch.tensor([7.0, 0.0])
    shifted.requires_grad_(True)
    loss2, stats2 = symmetric_pair_pm_loss(shifted)
    loss2.backward()
    assert float(loss2.detach()) == pytest.approx(float(loss.detach()), abs=1e-6) and stats2["pair_accuracy"] == 0.5
    assert torch.allclose(shifted.grad, logits.grad, atol=1e-6)
    assert stats2["position_bias"] == pytest.approx(stats["position_bias"] + 7.0)


def test_the_symmetric_objective_is_refused_without_both_orders_of_a_pair_pm():
    assert any("objective: symmetric" in p for p in JudgeSection(objective="symmetric", orders="random").check())
    assert any("kind: think" in p for p in JudgeSection(kind="think", objective="symmetric").check())
    assert JudgeSection(objective="symmetric").check() == []


def _scripted(monkeypatch, reply):
    """Replace the sampling of the base model with `reply(message, j)` (the engine itself is tested elsewhere)."""

    def sample(model, tokenizer, messages, judge, prefix):
        return [[reply(m, j) for j in range(judge.samples)] for m in messages]

    monkeypatch.setattr("reward_models.judge_train.sample_outputs", sample)


def test_think_examples_keep_correct_traces_only(monkeypatch):
    pairs = [_pair(i) for i in range(6)]

    def reply(message, j):  # right on samples 0 and 1 (the longer one is sample 1), wrong on 2, no verdict on 3
        a = message.split("[The Start of Assistant A's Response]\n")[1].split("\n")[0]
        right = "A" if "probably" not in a else "B"
        wrong = "B" if right == "A" else "A"
        answers = [f"x</think><answer>{right}</answer>", f"longer x</think><answer>{right}</answer>"]
        answers += [f"</think><answer>{wrong}</answer>", "no answer"]
        return answers[j]

    _scripted(monkeypatch, reply)
    examples, counts = think_examples(pairs, JudgeSection(kind="think", samples=4), None, None)
    assert counts == {"pairs": 6, "samples": 24, "correct": 12, "abstained": 6, "pairs_kept": 6, "ungraded": 0}
    assert len(examples) == 12 and all(e.completion.startswith("<think>\n") for e in examples)
    longest, _ = think_examples(pairs, JudgeSection(kind="think", samples=4, keep="longest"), None, None)
    assert len(longest) == 6 and all("longer" in e.completion for e in longest)


def test_grm_examples_follow_spct_rejective_selection(monkeypatch):
    pairs = [_pair(i) for i in range(3)]

    def reply(message, j):
        chosen = "probably" not in message.split("[The Start of the Response]\n")[1]
        i = int(message.split("What is ")[1].split(" ")[0])
        if i == 0:  # too easy: every draw right -> dropped
            return f"Score: \\boxed{{{9 if chosen else 2}}}"
        if i == 1:  # draws 0 and 2 right, 1 wrong (a tie), 3 abstains
            draws = [f"Score: \\boxed{{{8 if chosen else 3}}}", "Score: \\boxed{5}"]
            return (draws + ["\\boxed{7}" if chosen else "\\boxed{6}", "?"])[j]
        return f"Score: \\boxed{{{2 if chosen else 9}}}"  # all wrong -> dropped

    _scripted(monkeypatch, reply)
    examples, counts = grm_examples(pairs, JudgeSection(kind="grm", samples=4), None, None)
    assert counts == {"pairs": 3, "draws": 12, "correct": 6, "abstained": 1, "too_easy": 1, "pairs_kept": 1}
    assert [e.completion for e in examples] == ["Score: \\boxed{8}", "Score: \\boxed{3}", "\\boxed{7}", "\\boxed{6}"]
    assert {e.id for e in examples} == {"p1"}


def _suite_files(tmp_path, n=8):
    from preference_data.suite import build_suite, write_suite

    suite = build_suite(n_per_family=n, seed=0)
    write_suite(suite, tmp_path / "suite")
    return tmp_path / "suite"


def _answer_nll(model, tok, examples) -> float:
    from preference_data.tokenize import tokenize_single

    total, n = 0.0, 0
    with torch.no_grad():
        for e in examples:
            p, r = tokenize_single(tok, [Message("user", e.message)], [Message("assistant", e.completion)])
            logp = model(input_ids=torch.tensor([p + r])).logits[0].float().log_softmax(-1)
            total -= sum(logp[len(p) - 1 + i, t].item() for i, t in enumerate(r))
            n += len(r)
    return total / n


@pytest.mark.slow  # a whole judge training run (19 s): make test-slow
def test_pair_pm_training_end_to_end_on_the_tiny_model(tmp_path, tiny_model_ref):
    from align.cli.main import main
    from prefalign.models.hub import load_causal_lm, load_model, load_tokenizer
    from preference_data.records import pair_from_dict
    from reward_models.scorers import load_scorer

    suite = _suite_files(tmp_path)
    cfg = tmp_path / "judge.yaml"
    cfg.write_text(
        "kind: judge_train\n"
        f"model: {TINY}\noutput_dir: {tmp_path / 'run'}\n"
        "judge: {kind: pair_pm}\n"
        f"data: {{source: {suite / 'train_pairs.jsonl'}, split: all, limit: 32}}\n"
        f"eval: {{source: {suite / 'test_pairs.jsonl'}, split: all, limit: 12}}\n"
        "train: {method: full, lr: 2.0e-3, epochs: 3, batch_size: 8, precision: fp32, max_length: 1024, "
        "compile: false, warmup_ratio: 0.0}\n"
    )
    assert main(["rm", "train", "--config", str(cfg)]) == 0
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["examples"]["kept"] == report["examples"]["examples"] == 64  # both orders of 32 pairs
    test_rows = (suite / "test_pairs.jsonl").read_text().splitlines()[:12]
    assert report["eval"]["pairs"] == len(test_rows) > 0 and report["eval"]["nan_pairs"] == 0
    # the fine-tuned judge gives the right letters of its training examples a higher probability than the base
    tok = load_tokenizer(TINY)
    rows = (suite / "train_pairs.jsonl").read_text().splitlines()[:32]
    examples = pair_pm_examples([pair_from_dict(json.loads(r)) for r in rows], seed=0, orders="random")
    base = _answer_nll(load_causal_lm(TINY, dtype="float32").eval(), tok, examples)
    tuned = _answer_nll(load_model(report["model_dir"], "float32", merge=True).eval(), tok, examples)
    assert tuned < base - 0.05
    scorer = load_scorer("pair_pm", model=report["model_dir"], dtype="float32")
    test = [pair_from_dict(json.loads(r)) for r in test_rows]
    pa = scorer.compare([p.prompt for p in test], [p.chosen for p in test], [p.rejected for p in test])
    assert report["eval"]["accuracy"] == pytest.approx(sum(v > 0.5 for v in pa) / len(test))


def test_a_symmetric_pair_pm_learns_its_training_pairs_in_both_orders(tmp_path, tiny_model_ref):
    """`judge.objective: symmetric` on the tiny model: each pair one item (its two orders), the answer token alone;
    the trained judge's averaged P(chosen) on its training pairs rises above the base model's."""
    from prefalign.config import build
    from preference_data.records import pair_from_dict
    from reward_models.judge_train import JudgeTrainConfig, run
    from reward_models.scorers import load_scorer

    suite = _suite_files(tmp_path, n=4)
    cfg = build(
        JudgeTrainConfig,
        {
            "model": TINY,
            "output_dir": str(tmp_path / "run"),
            "judge": {"kind": "pair_pm", "objective": "symmetric"},
            "data": {"source": str(suite / "train_pairs.jsonl"), "split": "all", "limit": 12},
            "eval": {"split": "none"},
            "train": {
                "method": "full",
                "lr": 2.0e-3,
                "epochs": 4,
                "batch_size": 4,
                "precision": "fp32",
                "max_length": 1024,
                "compile": False,
                "warmup_ratio": 0.0,
            },
        },
    )
    report = run(cfg)
    assert report["examples"]["examples"] == 24 and report["examples"]["kept"] == 12  # one item per pair
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert all("pair_accuracy" in r and "both_orders_right" in r for r in rows if "loss" in r)
    pairs = [pair_from_dict(json.loads(r)) for r in (suite / "train_pairs.jsonl").read_text().splitlines()[:12]]

    def mean_p(model: str) -> float:
        scorer = load_scorer("pair_pm", model=model, dtype="float32")
        p = scorer.compare([x.prompt for x in pairs], [x.chosen for x in pairs], [x.rejected for x in pairs])
        return sum(p) / len(p)

    assert mean_p(report["model_dir"]) > mean_p(TINY) + 0.05


def test_a_sampled_judge_with_no_correct_sample_stops_with_the_counts(tmp_path, tiny_model_ref):
    """The random tiny model never writes a verdict: the think recipe keeps nothing and says so."""
    from prefalign.config import build
    from prefalign.errors import UserError
    from reward_models.judge_train import JudgeTrainConfig, run

    suite = _suite_files(tmp_path, n=2)
    cfg = build(
        JudgeTrainConfig,
        {
            "model": TINY,
            "output_dir": str(tmp_path / "run"),
            "judge": {"kind": "think", "samples": 1, "max_new_tokens": 4},
            "data": {"source": str(suite / "train_pairs.jsonl"), "split": "all", "limit": 3},
            "eval": {"split": "none"},
            "train": {"precision": "fp32", "compile": False},
        },
    )
    with pytest.raises(UserError, match=r"no think training example left .*'correct': 0"):
        run(cfg)
