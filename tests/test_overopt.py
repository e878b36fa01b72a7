"""`align eval overopt`: the best-of-n estimator against enumeration (ties included), KL_bon, the fitted forms,
and the command end to end on the tiny model: best-of-n, raising N draws only the new samples, RL checkpoints
with a k1 KL checked against plain forwards, NaN proxy scores counted, bad input."""

from __future__ import annotations

import itertools
import json
import math
import random
from dataclasses import replace
from pathlib import Path

import pytest

from align.cli.main import main
from align.overopt import OveroptSettings
from align.overopt.estimate import bon_estimate, bon_ns, bon_weights, fit_form, kl_bon, verdict
from align.overopt.harness import policy_key
from align.overopt.report import run_overopt
from prefalign.errors import UserError

TINY_PROXY = {"type": "implicit", "model": "builtin:tiny-llama", "reference_free": True, "normalization": "mean"}
TINY_PROXY_TEXT = "{type: implicit, model: builtin:tiny-llama, reference_free: true, normalization: mean}"


def brute_force(proxy: list[float], gold: list[float], n: int) -> tuple[float, float]:
    """E[proxy], E[gold] of best-of-n over every n-subset, a tie among the subset's maxima broken uniformly."""
    total_p = total_g = 0.0
    subsets = list(itertools.combinations(range(len(proxy)), n))
    for sub in subsets:
        top = max(proxy[i] for i in sub)
        tied = [i for i in sub if proxy[i] == top]
        total_p += top
        total_g += sum(gold[i] for i in tied) / len(tied)
    return total_p / len(subsets), total_g / len(subsets)


def test_bon_estimate_equals_enumeration_of_all_subsets_with_ties():
    rng = random.Random(0)
    pools = [
        ([1.0, 2.0, 2.0], [0.0, 1.0, 0.0]),  # the docstring's example: 0.5 at n = 2
        ([3.0, 1.0, 2.0, 5.0, 4.0], [0.1, 0.9, 0.3, 0.2, 0.7]),  # no ties
        ([1.0] * 5, [0.0, 0.2, 0.4, 0.6, 0.8]),  # all tied: every n gives the pool mean
    ]
    for _ in range(20):  # random pools with many ties (proxy from 3 values)
        N = rng.randint(2, 8)
        pools.append(([float(rng.randint(0, 2)) for _ in range(N)], [rng.random() for _ in range(N)]))
    for proxy, gold in pools:
        for n in range(1, len(proxy) + 1):
            got = bon_estimate(proxy, gold, n)
            want = brute_force(proxy, gold, n)
            assert got == pytest.approx(want, abs=1e-12), (proxy, gold, n)
    assert bon_estimate([1.0, 2.0, 2.0], [0.0, 1.0, 0.0], 2)[1] == pytest.approx(0.5)
    assert bon_estimate([1.0] * 5, [0.0, 0.2, 0.4, 0.6, 0.8], 3)[1] == pytest.approx(0.4)


def test_bon_weights_by_hand():
    # N = 4, n = 2: C(i-1, 1) / C(4, 2) = (0, 1, 2, 3) / 6
    assert bon_weights(4, 2) == pytest.approx([0, 1 / 6, 2 / 6, 3 / 6])
    assert bon_weights(4, 1) == pytest.approx([0.25] * 4)  # n = 1: the pool mean
    assert bon_weights(4, 4) == pytest.approx([0, 0, 0, 1])  # n = N: the pool's best
    assert sum(bon_weights(64, 16)) == pytest.approx(1.0)
    with pytest.raises(ValueError):
        bon_estimate([1.0, 2.0], [0.0, 1.0], 3)


def test_kl_bon_and_reported_n():
    assert kl_bon(1) == 0.0
    assert kl_bon(2) == pytest.approx(math.log(2) - 0.5)  # 0.1931
    assert kl_bon(64) == pytest.approx(4.158883 - 0.984375, abs=1e-6)  # log 64 - 63/64 = 3.1745
    assert bon_ns(64) == [1, 2, 4, 8, 16, 32, 64]
    assert bon_ns(48) == [1, 2, 4, 8, 16, 32, 48]
    assert bon_ns(1) == [1]


def test_fits_recover_alpha_beta_from_noiseless_points():
    d = [0.0, 0.3, 0.6, 1.0, 1.5, 2.0, 2.6]
    alpha, beta = 0.5, 0.2
    f = fit_form("bon", d, [x * (alpha - beta * x) for x in d])
    assert f is not None
    assert (f.alpha, f.beta) == pytest.approx((alpha, beta), abs=1e-10)
    assert f.r2 == pytest.approx(1.0)
    assert f.d_star == pytest.approx(alpha / (2 * beta))  # 1.25
    assert f.peak == pytest.approx(alpha**2 / (4 * beta))  # 0.3125
    alpha, beta = 0.3, 0.1
    f = fit_form("rl", d, [0.0 if x == 0 else x * (alpha - beta * math.log(x)) for x in d])
    assert f is not None
    assert (f.alpha, f.beta) == pytest.approx((alpha, beta), abs=1e-10)
    assert f.d_star == pytest.approx(math.exp(alpha / beta - 1))  # e^2
    assert f.peak == pytest.approx(beta * math.exp(alpha / beta - 1))  # R(d*) = beta d*
    assert f.predict(f.d_star) == pytest.approx(f.peak)
    rising = fit_form("bon", [0.5, 1.0, 2.0], [0.5, 1.0, 2.0])  # a straight line: beta 0, no peak
    assert rising is not None and rising.d_star is None
    assert fit_form("rl", [0.0, 1.0], [0.0, 0.1]) is None  # one point at d > 0 fixes nothing
    falling = fit_form("bon", d, [x * (-0.1 - 0.05 * x) for x in d])  # only falls on d >= 0: the peak is R(0)
    assert falling is not None and (falling.d_star, falling.peak) == (0.0, 0.0)


def test_verdict_says_whether_gold_peaks_while_proxy_rises():
    def pts(gold, proxy):
        return [
            {"n": 2**i, "d": 0.5 * i, "gold_gain": g, "proxy_gain": p}
            for i, (g, p) in enumerate(zip(gold, proxy, strict=True))
        ]

    rising = [0.0, 0.5, 1.0, 1.5]
    assert verdict(pts([0.0, 0.2, 0.3, 0.1], rising), "n").startswith("gold peaks at n 4 (d 1.00, +0.3000)")
    assert verdict(pts([0.0, 0.2, 0.3, 0.1], rising), "n").endswith("over-optimization")
    assert "never rises" in verdict(pts([0.0, -0.1, -0.2, -0.3], rising), "n")
    assert "no over-optimization" in verdict(pts([0.0, 0.1, 0.2, 0.3], rising), "n")
    assert "does not move" in verdict(pts([0.0] * 4, rising), "n")
    assert "proxy does not keep rising" in verdict(pts([0.0, 0.2, 0.3, 0.1], [0.0, 0.5, 1.5, 1.0]), "n")


def _overopt_cli(out: Path, *extra: str) -> int:
    return main(
        [
            "eval",
            "overopt",
            "--model",
            "builtin:tiny-llama",
            "--proxy",
            TINY_PROXY_TEXT,
            "--limit",
            "3",
            "--max-new-tokens",
            "6",
            "--dtype",
            "float32",
            "--out",
            str(out),
            *extra,
        ]
    )


def _pool(out: Path) -> list[dict]:
    (f,) = (out / "cache").glob("samples-*.jsonl")
    rows = [json.loads(x) for x in f.read_text().splitlines()]
    return sorted(rows, key=lambda r: (r["prompt"], r["k"]))


@pytest.mark.slow  # a whole run: its siblings in the slow tier (kill, resume, real models)
def test_overopt_cli_best_of_n_and_raising_n_draws_only_new_samples(tmp_path, tiny_model_ref, capsys, monkeypatch):
    from prefalign.generation import TransformersEngine

    drawn: list[int] = []
    real = TransformersEngine.generate

    def counting(self, prompts, params, *a, **k):
        drawn.append(len(prompts))
        return real(self, prompts, params, *a, **k)

    monkeypatch.setattr(TransformersEngine, "generate", counting)
    out = tmp_path / "ov"
    assert _overopt_cli(out, "--n", "2") == 0
    assert sum(drawn) == 3 * 2
    first = _pool(out)
    drawn.clear()
    assert _overopt_cli(out, "--n", "4") == 0
    assert sum(drawn) == 3 * 2  # samples 2 and 3 of each prompt only
    report = json.loads((out / "report.json").read_text())
    assert report["work"] == {"samples_drawn": 6, "proxy_scores_computed": 6}
    assert [p["n"] for p in report["bon"]["points"]] == [1, 2, 4]
    pts = report["bon"]["points"]
    assert pts[0]["proxy_gain"] == 0.0 and pts[0]["gold_gain"] == 0.0 and pts[0]["d"] == 0.0
    assert pts[2]["kl_bon_upper_bound"] == pytest.approx(math.log(4) - 0.75)
    assert all(p["proxy_gain"] >= -1e-12 for p in pts)  # picking by proxy never lowers the expected proxy
    assert (out / "overopt.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "best-of-n" in (out / "summary.txt").read_text()
    assert "upper bound" in capsys.readouterr().out
    extended = _pool(out)
    assert [r for r in extended if r["k"] < 2] == first  # the first samples are kept as they were
    # a fresh run at N = 4 draws the same samples the extended pool holds: sample k does not depend on N
    drawn.clear()
    assert _overopt_cli(tmp_path / "fresh", "--n", "4") == 0
    assert sum(drawn) == 3 * 4
    fresh = _pool(tmp_path / "fresh")
    assert [(r["prompt"], r["k"], r["ids"]) for r in fresh] == [(r["prompt"], r["k"], r["ids"]) for r in extended]


def test_nan_proxy_scores_are_left_out_and_counted(tmp_path, tiny_model_ref, monkeypatch):
    """A proxy failing on every other sample: the failures are counted, prompts without n valid samples leave
    that n's point (counted), and nothing is read as 0."""
    from align.overopt import harness

    class HalfFailing:
        failures = {"too_long": 0}

        def score(self, prompts, responses):
            self.failures["too_long"] += (len(responses) + 1) // 2
            return [math.nan if i % 2 == 0 else float(len(r[0].content)) for i, r in enumerate(responses)]

    monkeypatch.setattr(harness, "load_scorer", lambda spec, **kw: HalfFailing())
    s = OveroptSettings(
        proxy=TINY_PROXY_TEXT, model="builtin:tiny-llama", limit=3, out=str(tmp_path / "nan"), n=4, max_new_tokens=6
    )
    report = run_overopt(replace(s, dtype="float32"))
    assert report["failures"]["proxy_nan_in_pool"] == 6  # 2 of 4 samples of 3 prompts
    assert report["failures"]["proxy_failures"] == {"too_long": 6}
    by_n = {p["n"]: p for p in report["bon"]["points"]}
    assert by_n[2]["prompts"] == 3 and by_n[2]["prompts_left_out"] == 0
    assert by_n[4]["prompts"] == 0 and by_n[4]["prompts_left_out"] == 3
    assert by_n[4]["gold_gain"] is None and by_n[4]["proxy_gain"] is None  # no silent zero
    assert any("no prompt has 4 valid samples" in line for line in report["summary"])
    assert any("scored NaN" in line for line in report["summary"])


@pytest.mark.slow
def test_rl_checkpoints_kl_against_plain_forwards(tmp_path, tiny_model_ref):
    """An online run keeping every checkpoint; each is evaluated, step 0 is the initial policy (KL 0), and the
    k1 log-ratio of a final-checkpoint sample equals log pi - log pi_init from plain forwards of the saved adapter
    and the base model."""
    import torch

    from align import online
    from prefalign.config import build
    from prefalign.models.hub import load_causal_lm, load_model

    run_dir = tmp_path / "grpo"
    cfg = build(
        online.OnlineConfig,
        {
            "model": "builtin:tiny-llama",
            "output_dir": str(run_dir),
            "reward": [TINY_PROXY],
            "rollout": {"group_size": 4, "prompts_per_step": 2, "max_new_tokens": 6},
            "eval": {"limit": 0},
            "train": {"precision": "fp32", "max_steps": 3, "lr": 1e-2, "compile": False, "save_every": 1},
            "lora": {"r": 4, "alpha": 8},
            "save_merged": False,
            "keep_checkpoints": 0,
        },
    )
    online.run(cfg)
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == [f"checkpoint-{i}" for i in (1, 2, 3)]

    out = tmp_path / "ov"
    s = OveroptSettings(run=str(run_dir), limit=3, out=str(out), n=2, rl_samples=2, max_new_tokens=6, dtype="float32")
    report = run_overopt(s)  # the proxy: the run's reward
    assert report["proxy"]["spec"] == TINY_PROXY
    rl = report["rl"]
    assert [p["step"] for p in rl["points"]] == [0, 1, 2, 3]
    assert rl["points"][0]["kl"] == 0.0 and rl["points"][0]["gold_gain"] == 0.0
    assert all(math.isfinite(p["kl"]) and p["samples"] == 6 for p in rl["points"])
    assert "note" not in rl and set(rl["fit"]) == {"gold", "proxy"}

    key, _ = policy_key("builtin:tiny-llama", s, run_dir / "checkpoints" / "checkpoint-3")
    rows = [json.loads(x) for x in (out / "cache" / f"samples-{key}.jsonl").read_text().splitlines()]
    ratios = json.loads((out / "cache" / f"logratio-{key}.json").read_text())["values"]
    policy = load_model(str(run_dir / "adapter"), "float32", merge=True)
    init = load_causal_lm("builtin:tiny-llama", "float32")

    def logp(model, prompt_ids, ids):
        x = torch.tensor([prompt_ids + ids])
        with torch.no_grad():
            logits = model(x).logits[0, len(prompt_ids) - 1 : -1].float()
        return float(torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids)[:, None]).sum())

    for row in rows[:3]:
        want = logp(policy, row["prompt_ids"], row["ids"]) - logp(init, row["prompt_ids"], row["ids"])
        assert ratios[f"{row['prompt']}:{row['k']}"] == pytest.approx(want, abs=1e-4)
    mean = sum(ratios.values()) / len(ratios)
    assert rl["points"][3]["kl"] == pytest.approx(mean)

    again = run_overopt(s)  # everything cached
    assert again["work"] == {"samples_drawn": 0, "proxy_scores_computed": 0}
    assert again["rl"]["points"] == rl["points"]


def test_bad_input_says_what_to_do(tmp_path):
    from align.online import OnlineConfig
    from prefalign.config import build, dump_yaml

    def settings(**kw) -> OveroptSettings:
        return OveroptSettings(**{"model": "builtin:tiny-llama", "out": str(tmp_path / "a"), **kw})

    with pytest.raises(UserError, match="--proxy is missing"):
        run_overopt(settings())
    with pytest.raises(UserError, match="no such reward model directory"):
        run_overopt(settings(proxy=str(tmp_path / "nowhere")))
    with pytest.raises(UserError, match="pointwise"):
        run_overopt(settings(proxy="{type: judge, model: builtin:tiny-llama}"))
    with pytest.raises(UserError, match="no config.yaml"):
        run_overopt(settings(proxy=TINY_PROXY_TEXT, model=None, run=str(tmp_path / "empty")))
    run_dir = tmp_path / "run"
    dump_yaml(build(OnlineConfig, {"output_dir": str(run_dir), "reward": [TINY_PROXY]}), run_dir / "config.yaml")
    with pytest.raises(UserError, match="no checkpoints.*keep_checkpoints: 0"):
        run_overopt(settings(proxy=TINY_PROXY_TEXT, model=None, run=str(run_dir)))
    with pytest.raises(UserError, match="n: must be >= 1"):
        run_overopt(settings(proxy=TINY_PROXY_TEXT, n=0))
    assert main(["eval", "overopt", "--n", "0", "--proxy", TINY_PROXY_TEXT]) == 2  # the flag named, nothing run
