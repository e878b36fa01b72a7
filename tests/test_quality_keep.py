"""`--keep` of the quality comparisons with TRL: a side's result is kept under a digest of what decides it and read
back by a later invocation instead of training again; another setting, seed or data gets its own file."""

from __future__ import annotations

import argparse

import pytest

from benchmarks import quality


def _args(keep, **over) -> argparse.Namespace:
    base = dict(
        keep=str(keep),
        seeds="0",
        modes="lora",
        lr_lora=1e-4,
        lr_full=1e-5,
        out=None,
        max_length=64,
        train_pairs=8,
        eval_pairs=2,
        precision="auto",
        child="",
        mode="",
        data="",
        held="",
        seed=0,
        lr=0.0,
    )
    return argparse.Namespace(**(base | over))


RESULTS = {"machine": "cpu", "precision": "fp32", "data_sha256": "abc"}


def test_a_kept_side_is_read_back_and_not_trained_again(tmp_path, monkeypatch):
    trained = []

    def spawn(script, args):
        trained.append(args[1])  # the side
        return {"kept": 8, "seconds": 2.0, "peak_rss_gb": 1.0, "right": [1.0, 0.0], "side": args[1]}

    monkeypatch.setattr(quality, "spawn", spawn)
    first = quality.run_sides("rm_quality_vs_trl.py", _args(tmp_path), "lora", [], lambda r: "", RESULTS)
    assert trained == ["trl", "ours"]
    again = quality.run_sides("rm_quality_vs_trl.py", _args(tmp_path), "lora", [], lambda r: "", RESULTS)
    assert trained == ["trl", "ours"] and again == first
    assert not list(tmp_path.glob("*.part"))


@pytest.mark.parametrize(
    "change",
    [{"max_length": 128}, {"lr_lora": 2e-4}, {"train_pairs": 16}],
)
def test_another_setting_has_its_own_file(tmp_path, change):
    here = quality.kept_path(_args(tmp_path), "rm_quality_vs_trl.py", RESULTS, "lora", 0, "trl")
    assert quality.kept_path(_args(tmp_path, **change), "rm_quality_vs_trl.py", RESULTS, "lora", 0, "trl") != here
    assert (
        quality.kept_path(_args(tmp_path), "rm_quality_vs_trl.py", RESULTS | {"data_sha256": "x"}, "lora", 0, "trl")
        != here
    )
    assert quality.kept_path(_args(tmp_path), "rm_quality_vs_trl.py", RESULTS, "lora", 1, "trl") != here
    # where the output goes and which seeds this invocation runs do not change a side's result
    assert (
        quality.kept_path(
            _args(tmp_path, seeds="0,1,2", out="x.json"), "rm_quality_vs_trl.py", RESULTS, "lora", 0, "trl"
        )
        == here
    )


def _run(seed: int, seconds: float, **extra) -> dict:
    return {"seed": seed, "seconds": seconds, "kept": 8, "right": [1.0], **extra}


def test_time_ratio_leaves_out_trl_runs_that_recomputed_activations(capsys):
    runs = {
        # seed 0 kept from before TRL's side turned checkpointing off (no flag: TRL's default, on)
        "trl": [_run(0, 300.0), _run(1, 90.0, checkpointing=False), _run(2, 110.0, checkpointing=False)],
        "ours": [_run(0, 30.0), _run(1, 30.0), _run(2, 20.0)],
    }
    out = quality.time_ratio(runs)
    assert out["seeds"] == [1, 2]
    assert out["trl"] == pytest.approx(100.0) and out["ours"] == pytest.approx(25.0)
    assert out["ratio"] == pytest.approx(4.0)
    assert "seed 0: TRL's kept run recomputed activations" in capsys.readouterr().out


def test_time_ratio_without_an_alike_timed_seed_reports_none():
    runs = {"trl": [_run(0, 300.0, checkpointing=True)], "ours": [_run(0, 30.0)]}
    out = quality.time_ratio(runs)
    assert out["seeds"] == [] and out["ratio"] != out["ratio"]  # NaN: no ratio
