"""The multi-objective RM: ridge and its penalty choice, Spearman, the verbosity penalties by hand, a small training
run on the tiny model, and its scorer as K named reward components."""

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
            "limit": 24,
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
    with pytest.raises(UserError, match="not a multi-objective RM"):
        component_names(not_mo)
