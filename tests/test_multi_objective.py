"""The multi-objective RM: ridge and its penalty choice, Spearman, the verbosity penalties by hand, per-objective
accuracy and the linear BT head by hand, small training runs on the tiny model (the suite; a FineGrainedRLHF-shaped
file with a separate preference file), and its scorer as K named reward components."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from prefalign.config import build
from prefalign.errors import UserError
from reward_models import multi_objective as M


def test_ridge_by_hand_and_nan_labels_left_out():
    X = torch.eye(4)[:, :3] * 2.0  # orthogonal columns of norm 2: w = X^T y / (4 + α)
    y = torch.tensor([1.0, 2.0, 3.0, 4.0])
    w = M.ridge(X, y, 1.0)
    assert w.tolist() == pytest.approx([2.0 / 5, 4.0 / 5, 6.0 / 5])
    Xb = torch.randn(40, 3, generator=torch.Generator().manual_seed(0))
    yb = Xb @ torch.tensor([1.0, -2.0, 0.5])
    yb[5] = math.nan
    w, alpha, mse = M.fit_head(Xb, yb, seed=0)
    assert w.tolist() == pytest.approx([1.0, -2.0, 0.5], abs=1e-2) and alpha <= 1e-2 and mse < 1e-3


def test_spearman_and_verbosity_penalties_by_hand():
    a = torch.tensor([1.0, 2.0, 3.0, 4.0])
    assert M.spearman(a, a) == pytest.approx(1.0)
    assert M.spearman(a, -a) == pytest.approx(-1.0)
    assert M.spearman(torch.tensor([1.0, 1.0, 2.0]), torch.tensor([1.0, 2.0, 3.0])) == pytest.approx(math.sqrt(3) / 2)
    v = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0])
    R = torch.stack([v * 0.1 + torch.tensor([0.5, 0.1, 0.4, 0.0, 0.3]), -v], -1)
    lam = M.verbosity_penalties(R, v, 0.03)
    assert lam[1] == 0.0  # already anti-correlated with length: no penalty
    first = next(p for p in M.PENALTY_GRID if M.spearman(R[:, 0] - p * v, v) <= 0.03)
    assert lam[0] == first and lam[0] > 0
    assert M.spearman(R[:, 0] - lam[0] * v, v) <= 0.03


def test_train_on_the_tiny_model_and_score_as_k_components(tmp_path, tiny_model_ref):
    cfg = build(
        M.MORMTrainConfig,
        {
            "backbone": "builtin:tiny-llama",
            "output_dir": str(tmp_path / "mo"),
            "data": {"limit": 24},
            "gating": {"steps": 5, "hidden": 16},
            "dtype": "float32",
        },
    )
    report = M.run(cfg)
    assert set(report["per_objective"]) == {"correctness", "instruction_following", "conciseness", "safety"}
    assert all(0.0 <= v["accuracy"] <= 1.0 for v in report["per_objective"].values() if v["pairs"])
    meta = json.loads((Path(report["model_dir"]) / M.MO_FILE).read_text())
    assert meta["objectives"] == cfg.objectives and "verbosity" in meta["alphas"]

    from align.rewards import RewardSet, check_reward_specs, component_names
    from preference_data.suite import build_suite

    spec = [{"type": "multi_objective", "model": report["model_dir"], "objective": "all", "dtype": "float32"}]
    assert check_reward_specs(spec) == []
    names, _ = component_names(spec)
    assert names == [f"mo_{o}" for o in cfg.objectives]
    rs = RewardSet(spec)
    prompts = build_suite(seed=0, n_per_family=2).train_prompts[:3]
    R = rs.score(prompts, ["The answer is 4.", "", "Sure."])
    assert R.shape == (3, 4)
    assert torch.isnan(R[1]).all() and not torch.isnan(R[[0, 2]]).any()  # an empty answer: NaN, counted
    assert all(c.nan == 1 for c in rs.components)
    one = RewardSet([{**spec[0], "objective": "conciseness", "name": "c"}]).score(
        prompts, ["The answer is 4.", "", "x"]
    )
    assert float(one[0, 0]) == pytest.approx(float(R[0, 2]), abs=1e-5)  # the same head, scored alone
    not_mo = [{"type": "multi_objective", "model": str(tmp_path), "objective": "all"}]
    assert any("not a multi-objective RM" in p for p in check_reward_specs(not_mo))
    run_dir = [{**not_mo[0], "model": str(tmp_path / "mo")}]  # the run directory, not its model
    assert any(f"its model is {tmp_path / 'mo' / 'model'}" in p for p in check_reward_specs(run_dir))
    with pytest.raises(UserError, match="not a multi-objective RM"):
        component_names(not_mo)


def test_per_objective_accuracy_by_hand():
    from preference_data.records import Message, PreferencePair, RatedResponses

    conv = lambda t: [Message("user", t)]  # noqa: E731
    rated = [
        RatedResponses(
            conv("p"), [conv("a"), conv("b"), conv("c")], [{"x": 1.0, "y": 0.0}, {"x": 0.0, "y": 0.0}, {"x": 0.5}]
        ),
        RatedResponses(conv("q"), [conv("a"), conv("b")], [{"x": 0.0, "y": 1.0}, {"x": 1.0, "y": 0.0}]),
    ]
    scores = [torch.tensor([[2.0, 5.0], [1.0, 5.0], [3.0, 0.0]]), torch.tensor([[0.0, math.nan], [1.0, 0.0]])]
    acc = M.per_objective_accuracy(rated, ["x", "y"], scores)
    # x: p: a>b right, a>c wrong (3 > 2), b<c right; q: b>a right -> 3 of 4. y: p: none differ; q: a>b, score NaN
    assert acc["x"] == {"accuracy": 0.75, "pairs": 4, "unscored": 0}
    assert acc["y"]["pairs"] == 0 and acc["y"]["unscored"] == 1 and math.isnan(acc["y"]["accuracy"])
    one = M.per_objective_accuracy(rated[:1], ["x"], [torch.tensor([[1.0], [1.0], [0.0]])])
    assert one["x"]["accuracy"] == pytest.approx(1 / 3)  # the a/b tie is wrong
    pairs = [PreferencePair(conv(f"p{i}"), conv("a"), conv("b")) for i in range(4)]
    acc_c, n = M.pair_accuracy(pairs, torch.tensor([1.0, 0.0, math.nan, 2.0]), torch.tensor([0.0, 0.0, 1.0, 1.0]))
    assert (acc_c, n) == (pytest.approx(2 / 3), 3)  # the NaN pair left out, the tie wrong


def test_linear_bt_head_recovers_the_preferred_direction():
    g = torch.Generator().manual_seed(0)
    h_c, h_r = torch.randn(200, 6, generator=g), torch.randn(200, 6, generator=g)
    true = torch.tensor([2.0, -1.0, 0.0, 0.0, 0.0, 0.0])
    swap = (h_c @ true) < (h_r @ true)  # order every pair by the true direction
    h_c[swap], h_r[swap] = h_r[swap].clone(), h_c[swap].clone()
    w, alpha, val = M.fit_bt_head(h_c - h_r, seed=0)
    cos = float(w @ true / (w.norm() * true.norm()))
    assert cos > 0.95 and val < 0.3
    assert float(((h_c - h_r) @ w > 0).float().mean()) > 0.97
    with pytest.raises(UserError, match="at least 5"):
        M.fit_bt_head(torch.randn(3, 6), seed=0)


def _finegrained_file(path: Path, n: int = 24) -> None:
    rows = []
    for i in range(n):
        preds = [
            f"Answer {i}: the city of {'Paris' if k % 2 else 'Rome'} is large." + " More words." * k for k in range(4)
        ]
        rows.append(
            {
                "question": f"Where is item {i}?",
                "passages": [["Doc", f"Doc\n\nItem {i} is in Paris."]],
                **{f"prediction {k + 1}": p for k, p in enumerate(preds)},
                "feedback": {
                    "errors": [{"error type": "Irrelevant" if i % 2 else "Unverifiable", "start": 0, "end": 10}],
                    "missing-info": [{"passage_id": 1}] * (i % 3),
                    "corrected-prediction": f"Item {i} is in Paris.",
                },
                "preference": [1, 2, 1, 2, 1, 0],
            }
        )
    path.write_text(json.dumps(rows))


def test_train_on_finegrained_labels_with_a_preference_file(tmp_path, tiny_model_ref):
    fg = tmp_path / "fg.json"
    _finegrained_file(fg)
    raw = {
        "backbone": tiny_model_ref,
        "output_dir": str(tmp_path / "mo"),
        "data": {"source": str(fg), "format": "finegrained_labels"},
        "preference": {"source": str(fg), "format": "finegrained"},
        "objectives": ["relevance", "factuality", "completeness"],
        "gating": {"steps": 3, "hidden": 8},
        "dtype": "float32",
    }
    report = M.run(build(M.MORMTrainConfig, raw))
    data = report["data"]
    assert data["train_labelled_prompts"] + data["test_labelled_prompts"] == 24
    assert data["train_pairs"] == 5 * data["train_labelled_prompts"]  # 6 labels, one tie, per question
    assert data["dropped"] == {"preference.tie": 24}  # the whole file's ties, counted
    for o in ("relevance", "factuality", "completeness"):
        assert report["per_objective"][o]["pairs"] > 0
        assert 0 <= report["linear_bt"]["per_objective"][o]["accuracy"] <= 1
    assert report["test_pairs"] == 5 * data["test_labelled_prompts"]
    lines = "\n".join(M.summary_lines(report))
    assert "linear BT" in lines and "relevance" in lines
    with pytest.raises(UserError, match="helpfulness label no answer.*completeness, factuality, relevance"):
        M.run(build(M.MORMTrainConfig, raw | {"objectives": ["helpfulness"]}))
    with pytest.raises(UserError, match="no preference pairs"):
        M.run(build(M.MORMTrainConfig, {k: v for k, v in raw.items() if k != "preference"}))
    with pytest.raises(Exception, match="not a suite objective"):
        build(M.MORMTrainConfig, {"objectives": ["relevance"]})


def test_answers_packed_behind_a_shared_prompt_match_each_encoded_alone(tiny_model_ref):
    from preference_data.records import Message

    bb = M.Backbone(tiny_model_ref, "float32", max_length=64, batch_size=4)
    user = lambda t: [Message("user", t)]  # noqa: E731
    said = lambda t: [Message("assistant", t)]  # noqa: E731
    prompts = [user("What is two plus two?")] * 3 + [user("Name a colour.")] * 2 + [user("Hi")]
    answers = [said("Four."), said("It is 4, of course."), said("5"), said("Red."), said(""), said("Hello there!")]
    hp, hr, lengths, ok = bb.features(prompts, answers)
    assert ok.tolist() == [True, True, True, True, False, True] and bb.skipped == 1
    for i in (0, 1, 2, 3, 5):
        hp1, hr1, n1, _ = bb.features([prompts[i]], [answers[i]])  # alone: one prompt, one answer
        torch.testing.assert_close(hr[i], hr1[0], atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(hp[i], hp1[0], atol=1e-4, rtol=1e-4)
        assert lengths[i] == n1[0]
    assert not torch.allclose(hr[0], hr[1]) and torch.allclose(hp[0], hp[1])  # one prompt, two answers
    long = bb.features([user("word " * 200)], [said("short")])  # cut from the left to max_length
    assert long[3].all() and long[2][0] < 64
