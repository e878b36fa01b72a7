"""Reward composition: every aggregator, multiplier update and weight update against hand-computed values, the
hypervolume of small point sets by hand, the Nelder–Mead search and its cache, config errors, and the online loop
with a composition (NaN components masked and counted, resume restores multipliers and weights exactly)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from prefalign.config import build
from prefalign.errors import ConfigError
from reward_models import composition as C

nan = math.nan


def close(a, b, tol=1e-6):
    a = torch.as_tensor(a, dtype=torch.float64)
    b = torch.as_tensor(b, dtype=torch.float64)
    assert a.shape == b.shape, (a.shape, b.shape)
    both_nan = torch.isnan(a) & torch.isnan(b)
    assert bool((both_nan | ((a - b).abs() <= tol)).all()), (a, b)


# --- aggregators ---------------------------------------------------------------------------------------------


def test_weighted_sum_masks_nan_of_used_components_only():
    R = torch.tensor([[1.0, 2.0, nan], [nan, 1.0, 3.0], [0.5, 0.5, 0.5]])
    w = torch.tensor([0.5, 0.25, 0.0])
    close(C.weighted_sum(R, w), [1.0, nan, 0.375])  # a NaN under weight 0 does not count


def test_gdpo_by_hand():
    # two groups of two, two components: in-group normalisation with the unbiased std (n-1), + 1e-4
    R = torch.tensor([[1.0, 0.0], [0.0, 0.0], [1.0, 2.0], [1.0, 0.0]])
    w = torch.tensor([1.0, 1.0])
    s = math.sqrt(0.5)  # std of {1, 0} with n-1
    a1 = [0.5 / (s + 1e-4), -0.5 / (s + 1e-4), 0.0, 0.0]  # component 0 per group; group 2 has std 0 -> 0
    a2 = [0.0, 0.0, 1.0 / (math.sqrt(2) + 1e-4), -1.0 / (math.sqrt(2) + 1e-4)]
    A = [x + y for x, y in zip(a1, a2, strict=True)]
    m = sum(A) / 4
    sd = math.sqrt(sum((x - m) ** 2 for x in A) / 3)
    close(C.gdpo_advantages(R, w, 2), [(x - m) / (sd + 1e-4) for x in A], 1e-5)
    # GRPO's sum-then-normalise maps "one of two rewards" and "both rewards" to the same advantage; GDPO does not
    from align.losses.policy_gradient import group_advantages

    R2 = torch.tensor([[1.0, 0.0], [0.0, 0.0], [1.0, 1.0], [0.0, 0.0]])
    grpo = group_advantages(C.weighted_sum(R2, w), 2, "group")
    assert abs(float(grpo[0] - grpo[2])) < 1e-4
    adv = C.gdpo_advantages(R2, w, 2)
    assert float(adv[2]) > float(adv[0]) + 0.3 > 0.3


def test_gdpo_nan_row_is_masked_and_left_out_of_statistics():
    R = torch.tensor([[1.0, 0.0], [nan, 0.0], [0.0, 0.0], [1.0, 1.0]])
    adv = C.gdpo_advantages(R, torch.tensor([1.0, 1.0]), 2)
    assert math.isnan(float(adv[1])) and not torch.isnan(adv[[0, 2, 3]]).any()


def test_dvao_by_hand():
    R = torch.tensor([[1.0, 10.0], [0.0, 0.0], [2.0, 5.0], [2.0, 5.0]])
    b = torch.tensor([1.0, 0.5])
    # group 1: μ = (0.5, 5), σ (population) = (0.5, 5); v = (1*0.5, 0.5*5) / (0.5 + 2.5) = (1/6, 5/6)
    # A_1 = 1/6 * (0.5/0.5) + 5/6 * (5/5) = 1; A_2 = -1 (up to eps); group 2 has σ = 0 -> 0
    close(C.dvao_advantages(R, b, 2), [1.0, -1.0, 0.0, 0.0], 1e-5)
    # equals Σ b (r − μ) / Σ b σ
    close(C.dvao_advantages(R, b, 2)[0], (1 * 0.5 + 0.5 * 5) / (1 * 0.5 + 0.5 * 5), 1e-5)


def test_maxmin_per_sample_and_group_argmin():
    R = torch.tensor([[0.2, 0.9], [0.8, 0.1], [0.6, 0.7]])
    w = torch.tensor([1.0, 1.0])
    close(C.maxmin_per_sample(R, w), [0.2, 0.1, 0.6])
    r, k = C.maxmin_group_argmin(R, w)
    assert k == 0  # means 0.533 vs 0.567
    close(r, [0.2, 0.8, 0.6])
    r, k = C.maxmin_group_argmin(R, torch.tensor([1.0, 0.5]))  # weighted means 0.533 vs 0.283
    assert k == 1
    close(r, [0.45, 0.05, 0.35])


def test_par_by_hand():
    r = torch.tensor([1.0, 0.0, nan])
    ref = torch.tensor([[0.0, 2.0], [nan, 0.0], [0.0, 0.0]])
    sig = lambda x: 1 / (1 + math.exp(-x))  # noqa: E731
    close(C.par_reward(r, ref, 2.0), [(sig(2.0) + sig(-2.0)) / 2, 0.5, nan])
    assert math.isnan(float(C.par_reward(torch.tensor([1.0]), torch.tensor([[nan, nan]]))[0]))


def test_dpa_direction():
    R = torch.tensor([[0.3, 0.9], [0.3, 0.9], [0.3, 0.9]])
    theta = torch.tensor([0.0, math.pi / 2, math.pi / 4])
    close(C.dpa_reward(R, theta), [0.3, 0.9, (0.3 + 0.9) / math.sqrt(2)], 1e-6)
    text = C.dpa_system_prompt(["helpfulness", "verbosity"], math.radians(-45))
    assert "helpfulness*71 + verbosity*-71" in text


def test_running_norm_equals_statistics_of_everything_seen():
    a = torch.tensor([[1.0, 2.0], [3.0, nan], [5.0, 4.0]])
    b = torch.tensor([[7.0, 8.0], [nan, 10.0]])
    n = C.RunningNorm(2)
    n.update(a)
    n.update(b)
    col0 = [1.0, 3.0, 5.0, 7.0]
    col1 = [2.0, 4.0, 8.0, 10.0]
    for k, col in enumerate((col0, col1)):
        m = sum(col) / len(col)
        sd = math.sqrt(sum((x - m) ** 2 for x in col) / (len(col) - 1))
        assert abs(float(n.mean[k]) - m) < 1e-9 and abs(float(n.std[k]) - sd) < 1e-9
    out = n.normalize(torch.tensor([[4.0, 6.0]]))
    close(out, [[(4 - 4) / (math.sqrt(20 / 3) + 1e-6), (6 - 6) / (math.sqrt(40 / 3) + 1e-6)]])
    m = C.RunningNorm(2)
    m.load_state_dict(n.state_dict())
    assert torch.equal(m.mean, n.mean) and torch.equal(m.m2, n.m2)


# --- hypervolume -------------------------------------------------------------------------------------------


def test_hypervolume_by_hand():
    assert C.hypervolume([[1.0, 2.0], [2.0, 1.0]], [0.0, 0.0]) == pytest.approx(3.0)  # 2 + 2 − 1
    assert C.hypervolume([[1.0, 2.0], [2.0, 1.0], [1.0, 1.0]], [0.0, 0.0]) == pytest.approx(3.0)  # dominated
    assert C.hypervolume([[3.0, 3.0]], [1.0, 2.0]) == pytest.approx(2.0)
    assert C.hypervolume([[3.0, 1.0]], [1.0, 2.0]) == 0.0  # not above the reference in every objective
    assert C.hypervolume([[2.0, 1.0, 1.0], [1.0, 2.0, 1.0]], [0.0, 0.0, 0.0]) == pytest.approx(3.0)
    # three boxes: 2x1x1, 1x2x1, 1x1x2 overlap in the unit cube pairwise and triply: 3*2 − 3*1 + 1 = 4
    pts = [[2.0, 1.0, 1.0], [1.0, 2.0, 1.0], [1.0, 1.0, 2.0]]
    assert C.hypervolume(pts, [0.0, 0.0, 0.0]) == pytest.approx(4.0)
    assert C.hypervolume([[0.5, 0.5, 0.5]], [0.25, 0.0, 0.5]) == 0.0
    assert C.hypervolume_contribution([[1.0, 2.0]], [2.0, 1.0], [0.0, 0.0]) == pytest.approx(1.0)
    assert C.hypervolume_contribution([[2.0, 2.0]], [1.0, 1.0], [0.0, 0.0]) == 0.0


def test_hypervolume_weighting_meta_and_buffer():
    assert C.hv_meta(0.0) == 0.5 and C.hv_meta(100.0) == pytest.approx(2.0)
    h = C.HypervolumeWeighting([True, False])  # the second objective is minimised
    assert h.observe([0.2, 0.5]) == 0.0 and h.meta == 1.0  # the first point is the reference
    hvc = h.observe([0.4, 0.3])  # oriented (0.4, -0.3) against (0.2, -0.5): 0.2 x 0.2
    assert hvc == pytest.approx(0.04) and h.meta == pytest.approx(0.5 + 1.5 * math.tanh(0.04))
    assert len(h.buffer) == 2
    assert h.observe([0.3, 0.4]) == 0.0 and h.meta == 0.5 and len(h.buffer) == 2  # dominated: not kept
    g = C.HypervolumeWeighting([True, False])
    g.load_state_dict(h.state_dict())
    assert g.buffer == h.buffer and g.meta == h.meta


# --- multipliers ---------------------------------------------------------------------------------------------


def test_lagrangian_sigmoid_update_by_hand():
    lag = C.Lagrangian([C.Constraint("a", 0.5, "ge")], squash="auto", lr=0.1, momentum=0.1, init=0.0)
    sig = lambda x: 1 / (1 + math.exp(-x))  # noqa: E731
    dsig = lambda x: sig(x) * (1 - sig(x))  # noqa: E731
    c = lag.step({"a": 0.3})  # violated by 0.2
    assert float(c[0]) == pytest.approx(-0.2)
    g1 = dsig(0.0) * -0.2
    x1 = 0.0 - 0.1 * g1
    assert float(lag.xi.detach()[0]) == pytest.approx(x1)
    assert float(lag.lambdas()[0]) > 0.5  # violated -> λ rises
    lag.step({"a": 0.3})
    buf = 0.1 * g1 + dsig(x1) * -0.2  # SGD momentum: buf = μ buf + g
    assert float(lag.xi.detach()[0]) == pytest.approx(x1 - 0.1 * buf)


def test_lagrangian_tanh_equality_goes_negative_and_le_flips():
    lag = C.Lagrangian([C.Constraint("a", 0.5, "eq")], lr=1.0, momentum=0.0, max_grad_norm=0.0, init=0.0)
    for _ in range(3):
        lag.step({"a": 0.9})  # over the equality: λ is pushed below 0, pulling the component back down
    assert float(lag.lambdas()[0]) < 0
    le = C.Lagrangian([C.Constraint("a", 0.5, "le")], lr=1.0, momentum=0.0, max_grad_norm=0.0, init=0.0)
    c = le.step({"a": 0.9})  # above an upper bound: violated
    assert float(c[0]) == pytest.approx(-0.4) and float(le.lambdas()[0]) > 0.5


def test_lagrangian_unsquashed_is_clamped_and_the_gradient_is_clipped():
    lag = C.Lagrangian([C.Constraint("a", 0.5), C.Constraint("b", 0.1)], squash="none", lr=2.0, momentum=0.0)
    assert lag.xi.tolist() == [0.5, 0.5]
    lag.step({"a": 0.9, "b": 0.1 + 3.0})  # both satisfied; grad (0.4, 3.0) clipped to norm 0.5
    scale = 0.5 / (math.hypot(0.4, 3.0) + 1e-6)  # torch's clip_grad_norm_ coefficient
    assert lag.xi.tolist() == pytest.approx([0.5 - 2.0 * 0.4 * scale, 0.0])  # b: 0.5 − 0.99 clamped at 0


def test_mixed_advantage_by_hand():
    lag = C.Lagrangian([C.Constraint("a", 0.5, "ge"), C.Constraint("b", 0.5, "le")], init=0.0)
    a_obj = torch.tensor([1.0, -1.0])
    a_cons = torch.tensor([[0.5, -0.5], [2.0, -2.0]]).T  # columns: a, b
    # λ = (0.5, 0.5) squashed: (2 − 1)·A_obj + 0.5·A_a − 0.5·A_b (le enters negated)
    close(lag.mix(a_obj, a_cons), [1.0 + 0.25 - 1.0, -1.0 - 0.25 + 1.0])
    un = C.Lagrangian([C.Constraint("a", 0.5), C.Constraint("b", 0.5)], squash="none", init=2.0)
    # unsquashed: A_obj + Σ λ_i A_i, each multiplier with its own component (no offset)
    close(un.mix(a_obj, torch.tensor([[1.0, 0.0], [0.0, 1.0]])), [1.0 + 2.0, -1.0 + 2.0])


def test_lagrangian_state_round_trip():
    a = C.Lagrangian([C.Constraint("a", 0.5)], seed=3)
    for v in (0.1, 0.2, 0.9):
        a.step({"a": v})
    b = C.Lagrangian([C.Constraint("a", 0.0)], seed=9)
    b.load_state_dict(a.state_dict())
    assert torch.equal(a.xi, b.xi) and b.constraints[0].threshold == 0.5
    a.step({"a": 0.3})
    b.step({"a": 0.3})  # the momentum buffer came along
    assert torch.equal(a.xi, b.xi)


# --- gradient-based weights --------------------------------------------------------------------------------


def test_influence_and_exponentiated_gradient_by_hand():
    g = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    close(C.influence(g), [1.0 + 1.0, 1.0 + 2.0])  # Gram [[1, 1], [1, 2]] row sums
    w = C.exponentiated_gradient(torch.tensor([0.5, 0.5]), torch.tensor([1.0, 0.0]), 1.0)
    e = math.e
    close(w, [e / (e + 1), 1 / (e + 1)])
    gw = C.GradientWeighting(torch.tensor([0.25, 0.75]), accumulate=2)
    assert not gw.observe(torch.tensor([2.0, 0.0]), 0.5)
    assert gw.observe(torch.tensor([0.0, 0.0]), 0.5)  # mean influence (1, 0)
    x = [0.25 * math.exp(0.5), 0.75]
    close(gw.w, [x[0] / sum(x), x[1] / sum(x)], 1e-6)


# --- Nelder–Mead ---------------------------------------------------------------------------------------------


def test_nelder_mead_finds_a_minimum_and_the_cache_reuses_close_thresholds():
    calls = []

    def f(t):
        calls.append(t)
        return (t["a"] - 0.3) ** 2 + (t["b"] - 0.7) ** 2

    best, fb, hist = C.nelder_mead(
        f, [{"a": 0.0, "b": 0.0}, {"a": 1.0, "b": 0.0}, {"a": 0.0, "b": 1.0}], C.NelderMeadSettings(max_iters=60, tol=0)
    )
    assert abs(best["a"] - 0.3) < 0.02 and abs(best["b"] - 0.7) < 0.02 and fb < 1e-3
    assert len(hist) == len(calls)
    cache = C.ThresholdCache(["a", "b"], 5e-3)
    cache.put({"b": 0.7, "a": 0.3}, 1.5)  # keyed by name, whatever the order
    assert cache.get({"a": 0.304, "b": 0.696}) == 1.5
    assert cache.get({"a": 0.306, "b": 0.7}) is None
    simplex = C.initial_simplex({"a": (0.1, 0.2), "b": (0.5, 0.9)}, seed=1)
    assert len(simplex) == 3 and all(0.1 <= v["a"] <= 0.2 and 0.5 <= v["b"] <= 0.9 for v in simplex)
    assert C.within({"a": 0.52}, {"a": 0.5}, 0.05) and not C.within({"a": 0.53}, {"a": 0.5}, 0.05)


# --- config --------------------------------------------------------------------------------------------------

TWO = [{"type": "grader", "objective": "correctness"}, {"type": "grader", "objective": "conciseness"}]


def test_composition_config_errors_name_the_field():
    from align.online import OnlineConfig

    with pytest.raises(ConfigError) as e:
        build(
            OnlineConfig,
            {
                "reward": TWO,
                "composition": {
                    "update": "lagrangian",
                    "weights": {"gold_corectness": 1.0},
                    "constraints": [{"component": "gold_safety", "threshold": 0.5}],
                    "search": {"method": "nelder_mead", "ranges": {"gold_conciseness": [0.9, 0.1]}},
                },
            },
        )
    text = str(e.value)
    assert "composition.weights.gold_corectness" in text and "did you mean 'gold_correctness'" in text
    assert "composition.constraints[0].component: 'gold_safety' is not a reward component" in text
    assert "composition.search.ranges.gold_conciseness" in text
    with pytest.raises(ConfigError, match="sum to 1"):
        build(OnlineConfig, {"reward": TWO, "composition": {"update": "hypervolume"}})  # weights 1 + 1
    with pytest.raises(ConfigError, match="did you mean 'gdpo'"):
        build(OnlineConfig, {"reward": TWO, "composition": {"aggregate": "gdp"}})
    with pytest.raises(ConfigError, match="kl.placement: loss"):
        build(
            OnlineConfig,
            {
                "reward": TWO,
                "algorithm": {"loss": "rloo"},
                "kl": {"beta": 0.1},
                "composition": {"aggregate": "dvao"},
            },
        )
    ok = build(
        OnlineConfig,
        {
            "reward": TWO,
            "composition": {"update": "gradient", "weights": {"gold_correctness": 0.5, "gold_conciseness": 0.5}},
        },
    )
    assert ok.composition.update == "gradient"


# --- the online loop -----------------------------------------------------------------------------------------

VARIED = {"type": "implicit", "model": "builtin:tiny-llama", "reference_free": True, "normalization": "mean"}
COMPONENTS = [
    {**VARIED, "name": "implicit_mean"},
    {**VARIED, "normalization": "sum", "name": "implicit_sum"},
    {"type": "grader", "objective": "conciseness"},
]


def online_config(tmp_path: Path, out: str, composition: dict, **over):
    from align.online import OnlineConfig

    data = {
        "model": "builtin:tiny-llama",
        "output_dir": str(tmp_path / out),
        "reward": COMPONENTS,
        "rollout": {"group_size": 2, "prompts_per_step": 2, "max_new_tokens": 6},
        "eval": {"limit": 0},
        "train": {
            "precision": "fp32",
            "max_steps": 3,
            "batch_size": 8,
            "lr": 1e-3,
            "compile": False,
            "save_every": 1,
            "num_threads": 1,
        },
        "lora": {"r": 4, "alpha": 8},
        "save_merged": False,
        "composition": composition,
        **over,
    }
    return build(OnlineConfig, data)


def rows(run_dir: str) -> list[dict]:
    return [json.loads(x) for x in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]


def killed_then_resumed(monkeypatch, cfg, at_update: int) -> dict:
    """Run `cfg`, killed during its `at_update`-th update, then resume it to the end; the resumed report."""
    from align import online
    from align.online import loop

    real = loop.update
    calls = {"n": 0}

    def dying(*a, **k):
        calls["n"] += 1
        if calls["n"] == at_update:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(loop, "update", dying)
    with pytest.raises(KeyboardInterrupt):
        online.run(cfg)
    monkeypatch.setattr(loop, "update", real)
    return online.run(cfg, resume=True)


LAGRANGE = {
    "update": "lagrangian",
    "normalize": "running",
    "constraints": [{"component": "gold_conciseness", "threshold": 0.9, "type": "ge"}],
    "lagrangian": {"lr": 0.5},
}


@pytest.mark.slow
def test_constrained_run_logs_multipliers_and_resume_restores_them_exactly(tmp_path, tiny_model_ref, monkeypatch):
    from align import online

    full = online.run(online_config(tmp_path, "full", LAGRANGE))
    assert (tmp_path / "full" / "composition.png").exists() and full["composition"]["plot"].endswith("composition.png")
    lam_full = full["composition"]["multipliers"]["gold_conciseness"]
    steps = [r for r in rows(online_config(tmp_path, "full", LAGRANGE).output_dir) if "loss" in r]
    assert all("multiplier/gold_conciseness" in r and "violation/gold_conciseness" in r for r in steps)
    assert len({r["multiplier/gold_conciseness"] for r in steps}) == 3  # it moved every step
    cfg = online_config(tmp_path, "killed", LAGRANGE)
    resumed = killed_then_resumed(monkeypatch, cfg, at_update=3)
    assert resumed["composition"]["multipliers"]["gold_conciseness"] == lam_full  # exact
    state = torch.load(Path(cfg.output_dir) / "checkpoints" / "checkpoint-3" / "online_state.pt", weights_only=False)
    ref = torch.load(Path(tmp_path / "full") / "checkpoints" / "checkpoint-3" / "online_state.pt", weights_only=False)
    assert torch.equal(state["composition"]["lagrangian"]["xi"], ref["composition"]["lagrangian"]["xi"])
    assert torch.equal(state["composition"]["norm"]["m2"], ref["composition"]["norm"]["m2"])


GRADIENT = {
    "update": "gradient",
    "weights": {"implicit_mean": 0.2, "implicit_sum": 0.3, "gold_conciseness": 0.5},
    "gradient": {"eta": 50.0, "layers": "layers\\.1\\."},
}


@pytest.mark.slow
def test_gradient_weights_move_on_the_simplex_and_resume_exactly(tmp_path, tiny_model_ref, monkeypatch):
    from align import online

    full = online.run(online_config(tmp_path, "full", GRADIENT))
    w = full["composition"]["weights"]
    assert sum(w.values()) == pytest.approx(1.0)
    assert w != GRADIENT["weights"]
    steps = [r for r in rows(str(tmp_path / "full")) if "loss" in r]
    assert all(f"influence/{n}" in r for r in steps for n in w)
    resumed = killed_then_resumed(monkeypatch, online_config(tmp_path, "killed", GRADIENT), at_update=2)
    assert resumed["composition"]["weights"] == w


@pytest.mark.parametrize(
    "composition",
    [
        {"aggregate": "gdpo"},
        {"aggregate": "dvao"},
        {"aggregate": "maxmin", "maxmin": "group_argmin"},
        {"aggregate": "par", "par": {"references": 2}},
        {"aggregate": "dpa", "dpa": {"components": ["implicit_mean", "gold_conciseness"]}},
        {
            "update": "hypervolume",
            "weights": {"implicit_mean": 0.25, "implicit_sum": 0.25, "gold_conciseness": 0.5},
            "hypervolume": {"point": "rollout", "minimize": ["implicit_sum"]},
        },
    ],
    ids=["gdpo", "dvao", "maxmin", "par", "dpa", "hypervolume"],
)
def test_every_aggregator_runs_in_the_online_loop(tmp_path, tiny_model_ref, composition):
    from align import online

    rep = online.run(
        online_config(
            tmp_path,
            "agg",
            composition,
            train={
                "precision": "fp32",
                "max_steps": 2,
                "batch_size": 8,
                "lr": 1e-3,
                "compile": False,
                "num_threads": 1,
            },
        )
    )
    assert rep["steps"] == 2
    steps = [r for r in rows(str(tmp_path / "agg")) if "loss" in r]
    assert all(math.isfinite(r["loss"]) for r in steps)
    if composition.get("update") == "hypervolume":
        assert "hv/meta" in steps[1] and steps[0]["hv/contribution"] == 0.0  # the first point is the reference
    if composition.get("aggregate") == "dpa":
        data = json.loads((tmp_path / "agg" / "rollouts" / "step_00000-rank0.json").read_text())
        theta = data["rollout"]["directions"]  # one per prompt
        assert len(theta) == 2 and all(abs(t) <= math.pi / 4 + 1e-9 for t in theta)
    if composition.get("aggregate") == "par":
        data = json.loads((tmp_path / "agg" / "rollouts" / "step_00000-rank0.json").read_text())
        par = data["rewards"]["par_ref"]  # (prompts, M, K)
        assert len(par) == 2 and len(par[0]) == 2 and len(par[0][0]) == 3


def test_nan_component_is_masked_and_counted_under_a_composition(tmp_path, tiny_model_ref):
    from align import online
    from preference_data.records import Message, PromptOnly
    from preference_data.suite import build_suite

    suite = build_suite(seed=0, n_per_family=4)
    ungraded = [PromptOnly([Message("user", f"Say something about {w}.")], {}, None, "mine") for w in ("tea", "ink")]
    f = tmp_path / "prompts.jsonl"
    f.write_text("".join(json.dumps(p.to_dict()) + "\n" for p in suite.train_prompts[:2] + ungraded))
    cfg = online_config(
        tmp_path,
        "nan",
        {"aggregate": "gdpo"},
        prompts={"source": str(f), "seed": 1},
        rollout={"group_size": 2, "prompts_per_step": 4, "max_new_tokens": 6},
        train={"precision": "fp32", "max_steps": 1, "batch_size": 8, "lr": 1e-3, "compile": False, "num_threads": 1},
    )
    report = online.run(cfg)
    row = next(r for r in rows(cfg.output_dir) if "loss" in r)
    assert row["reward_nan/gold_conciseness"] == 4.0
    assert row["masked_completions"] == 4.0  # masked, not a zero reward
    assert report["reward_failures"]["gold_conciseness"]["no_gold_grader"] == 4


@pytest.mark.slow  # a threshold search over several runs (~17 s): make test-slow
def test_threshold_search_continues_one_policy_and_caches(tmp_path, tiny_model_ref):
    from align import online

    comp = {
        **LAGRANGE,
        "search": {
            "method": "nelder_mead",
            "ranges": {"gold_conciseness": [0.5, 0.9]},
            "steps_per_eval": 1,
            "max_iters": 2,
            "eval_limit": 2,
        },
    }
    cfg = online_config(tmp_path, "nm", comp, eval={"limit": 2, "max_new_tokens": 4})
    rep = online.run(cfg)
    s = rep["composition"]["search"]
    assert rep["steps"] == 3  # the search stops when train.max_steps is spent
    assert s["evaluations"] == 3 and all(math.isfinite(h["f"]) for h in s["history"][:3])
    lines = (Path(cfg.output_dir) / "search.jsonl").read_text().splitlines()
    assert len(lines) == 3 and [json.loads(x)["step"] for x in lines] == [1, 2, 3]


def test_skip_group_leaves_a_component_out_of_groups_it_does_not_apply_to():
    from align.composition import Composer, CompositionSection, StepInputs, skip_groups
    from align.losses.policy_gradient import group_advantages

    R = torch.tensor([[1.0, nan], [0.0, nan], [1.0, 1.0], [0.0, nan]])  # group 2: a partial NaN still masks
    filled, applies = skip_groups(R, 2)
    close(filled, [[1.0, 0.0], [0.0, 0.0], [1.0, 1.0], [0.0, nan]])
    assert applies[:, 1].tolist() == [False, False, True, True]
    sec = build(CompositionSection, {"aggregate": "gdpo", "missing": "skip_group"})
    comp = Composer(sec, ["a", "b"], [1.0, 1.0])
    adv, stats = comp.advantages(StepInputs(R, 2, lambda r: group_advantages(r, 2, "group")))
    assert stats["na_groups/b"] == 1.0 and stats["na_groups/a"] == 0.0
    assert not math.isnan(float(adv[0])) and not math.isnan(float(adv[1])) and float(adv[0]) > float(adv[1])
    assert math.isnan(float(adv[3]))  # scored for its group-mate, NaN for it: masked, not zero
    masked = Composer(build(CompositionSection, {"aggregate": "gdpo"}), ["a", "b"], [1.0, 1.0])
    adv2, _ = masked.advantages(StepInputs(R, 2, lambda r: group_advantages(r, 2, "group")))
    assert torch.isnan(adv2[[0, 1, 3]]).all()  # the default masks every completion with a NaN component
