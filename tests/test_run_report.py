"""The run report (prefalign/training/report.py): smoothing and panels worked by hand, and report.html with its
dashboard for a finished, an interrupted (then resumed) and an empty run, checked in headless Chromium."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from align.cli.main import main
from prefalign.config import build, dump_yaml
from prefalign.training.metrics import ALERTS_FILE, MetricsMixin
from prefalign.training.report import Panel, panels, read_run, smooth, write_report
from preference_data.records import Message, PreferencePair
from tests.test_scorers import rm_dir  # noqa: F401, F811 (a fixture: the tiny RM with a random head, saved as an RM)


def _pairs(n: int) -> list[PreferencePair]:
    return [
        PreferencePair(
            [Message("user", f"What is {i % 7} + {i % 5}? Reply with the number only.")],
            [Message("assistant", str(i % 7 + i % 5))],
            [Message("assistant", f"I think it is {i % 7 + i % 5 + 1}, but I am not sure at all.")],
            source="toy",
            attributes={"family": "sum", "corruption": "wrong_value"},
        )
        for i in range(n)
    ]


def _rm_config(tmp_path: Path, **train: Any):
    from reward_models.rm_config import RMTrainConfig

    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps(p.to_dict()) + "\n" for p in _pairs(16)), encoding="utf-8")
    return build(
        RMTrainConfig,
        {
            "model": "builtin:tiny-llama",
            "output_dir": str(tmp_path / "run"),
            "data": {"source": str(data), "split": "all"},
            "eval": {"split": "all", "limit": 8, "stats_pairs": 8},
            "train": {"max_steps": 3, "batch_size": 4, "lr": 1e-3, "max_length": 128, "precision": "fp32"} | train,
        },
    )


def _text(dom: str) -> str:
    """The visible words of a DOM dump, whitespace collapsed."""
    import re

    body = re.sub(r"<(script|style)\b.*?</\1>", " ", dom, flags=re.S)
    return " ".join(re.sub(r"<[^>]+>", " ", body).replace("&amp;", "&").split())


# --- smoothing and panels -----------------------------------------------------------------------------------


def test_smoothing_is_a_debiased_ema_that_skips_nan() -> None:
    """w = 0.5: s1 = 0.5*2 = 1 -> 1/(1-0.5) = 2; NaN repeats 2; s2 = 0.5*1 + 0.5*0 = 0.5 -> 0.5/(1-0.25) = 2/3.
    Before the first finite value there is nothing to show (NaN)."""
    out = smooth([math.nan, 2.0, math.nan, 0.0], 0.5)
    assert math.isnan(out[0]) and out[1:] == pytest.approx([2.0, 2.0, 2 / 3])
    assert smooth([3.0, 3.0, 3.0]) == pytest.approx([3.0, 3.0, 3.0])  # debiased: a constant stays constant
    assert smooth([]) == []


def test_panels_group_any_metric_names() -> None:
    """chosen/rejected share a panel, eval_<m> joins <m>, an eval-only metric gets its own panel, unknown names
    (an online run's reward components) sit alphabetically between the leading and trailing panels, bookkeeping
    keys are left out, and the recipe's `first` leads."""
    names = [
        "grad_norm",
        "learning_rate",
        "reward/format",
        "reward/correctness",
        "logps/rejected",
        "logps/chosen",
        "eval_logps/chosen",
        "loss",
        "eval_loss",
        "eval_nll",
        "epoch",
        "train_runtime",
        "log_ratio/per_token",
    ]
    got = panels(names)
    assert got == [
        Panel("loss", ["loss"], ["eval_loss"]),
        Panel("logps", ["logps/chosen", "logps/rejected"], ["eval_logps/chosen"]),
        Panel("log_ratio/per_token", ["log_ratio/per_token"], []),
        Panel("nll", [], ["eval_nll"]),
        Panel("reward/correctness", ["reward/correctness"], []),
        Panel("reward/format", ["reward/format"], []),
        Panel("learning_rate", ["learning_rate"], []),
        Panel("grad_norm", ["grad_norm"], []),
    ]
    assert [p.title for p in panels(names, first=["reward/format", "log_ratio/per_token"])][:3] == [
        "reward/format",
        "log_ratio/per_token",
        "loss",
    ]


# --- alerts -------------------------------------------------------------------------------------------------


class _Logger:
    """What MetricsMixin needs of transformers.Trainer: log(), the process rank and the step."""

    def __init__(self) -> None:
        self.state = SimpleNamespace(global_step=0)
        self.logged: list[dict[str, float]] = []

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        self.logged.append(dict(logs))

    def is_world_process_zero(self) -> bool:
        return True


class _Trainer(MetricsMixin, _Logger):
    pass


def test_nan_metrics_raise_one_alert_each_and_persist(tmp_path: Path, capsys) -> None:
    """A NaN in a batch metric is left out of the mean and alerts once; a NaN grad_norm alerts once; both are in
    alerts.jsonl, and a resumed trainer keeps them without raising them again."""
    t = _Trainer()
    t._init_metrics(tmp_path / "metrics.jsonl")
    for step, margin in enumerate([1.0, math.nan, 3.0, math.nan], 1):
        t.state.global_step = step
        t.stash({"margin": margin})
        t.stash({"margin": 2.0})
        t.log({"loss": 0.5, "grad_norm": math.nan if step >= 3 else 1.0})
    assert [r["margin"] for r in t.logged] == [1.5, 2.0, 2.5, 2.0]  # the NaN batches are left out of the mean
    assert len(t.alerts) == 2 and "step 2: 1 batch(es)" in t.alerts[0] and "step 3: grad_norm is nan" in t.alerts[1]
    assert capsys.readouterr().out.count("ALERT") == 2
    rows = [json.loads(x) for x in (tmp_path / ALERTS_FILE).read_text().splitlines()]
    assert [(r["step"], r["key"]) for r in rows] == [(2, "nonfinite:margin"), (3, "nonfinite:grad_norm")]
    resumed = _Trainer()
    resumed._init_metrics(tmp_path / "metrics.jsonl")
    resumed.state.global_step = 5
    resumed.log({"loss": 0.5, "grad_norm": math.nan})
    assert resumed.alerts == t.alerts and len((tmp_path / ALERTS_FILE).read_text().splitlines()) == 2


# --- report.html for finished, interrupted and empty runs -----------------------------------------------------


@pytest.mark.slow  # a browser: ~30 s each (make test-slow)
def test_report_of_a_finished_run(tmp_path: Path, chromium, capsys) -> None:
    """`align rm train` ends with report.html and dashboard.png; the page, in Chromium, shows the status, the
    held-out numbers, the data report, the model directory and the config. Evaluating every step keeps every
    step's training log (evaluate() used to swallow the log of the steps it ran at)."""
    cfg = _rm_config(tmp_path, eval_every=1)
    dump_yaml(cfg, tmp_path / "rm.yaml")
    assert main(["rm", "train", "--config", str(tmp_path / "rm.yaml")]) == 0
    run_dir = Path(cfg.output_dir)
    assert f"report: {run_dir / 'report.html'}" in capsys.readouterr().out
    assert (run_dir / "dashboard.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "loss" in r] == [1, 2, 3]
    assert [r["step"] for r in rows if "eval_accuracy" in r] == [1, 2, 3]
    report = json.loads((run_dir / "report.json").read_text())
    assert report["run_report"] == str(run_dir / "report.html")

    text = _text(chromium.dump_dom(run_dir / "report.html"))
    assert "Finished: 3 steps" in text and "No alerts raised" in text
    ev = report["eval"]
    assert f"accuracy {ev['accuracy']:.4g}" in text and f"pairs {ev['pairs']}" in text
    d = report["data"]
    assert f"Source {d['source']} : {d['rows_read']} {d['row_unit']}s read, {d['records_kept']} kept, 0 dropped" in text
    assert report["model_dir"] in text and "kind: rm_train" in text
    for name in ("loss", "accuracy", "margin", "learning_rate", "grad_norm"):  # the metrics table: every curve
        assert f" {name} " in text
    shot = chromium.screenshot(run_dir / "report.html", tmp_path / "report.png", (1280, 1600))
    from matplotlib.image import imread

    assert imread(str(shot)).std() > 0.05


@pytest.mark.slow  # a whole run: its siblings in the slow tier (kill, resume, real models)
@pytest.mark.slow  # a browser: ~30 s each (make test-slow)
def test_report_of_an_interrupted_run_then_resumed(tmp_path: Path, chromium, monkeypatch, capsys) -> None:
    """Ctrl-C during step 3 of 4: stopped.json and the report so far (stopped at step 2, where --resume goes on);
    without stopped.json (killed) it reads "in progress or interrupted"; `--resume` finishes the run and its
    report says so."""
    from transformers import Trainer

    from reward_models.rm_train import run
    from reward_models.training import RMTrainer

    def interrupted(self, *args: Any, **kwargs: Any):
        if self.state.global_step == 2:
            raise KeyboardInterrupt
        return Trainer.training_step(self, *args, **kwargs)

    cfg = _rm_config(tmp_path, max_steps=4, save_every=1)
    run_dir = Path(cfg.output_dir)
    monkeypatch.setattr(RMTrainer, "training_step", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run(cfg)
    monkeypatch.undo()
    assert f"run report so far: {run_dir / 'report.html'}" in capsys.readouterr().out
    assert json.loads((run_dir / "stopped.json").read_text())["step"] == 2 and not (run_dir / "report.json").exists()
    text = _text(chromium.dump_dom(run_dir / "report.html"))
    assert "Stopped at step 2 of 4 by KeyboardInterrupt. `--resume` continues from checkpoint-2." in text
    assert "No saved model yet" in text and "checkpoint-2" in text and "kind: rm_train" in text
    loss = [json.loads(x)["loss"] for x in (run_dir / "metrics.jsonl").read_text().splitlines() if '"loss"' in x]
    assert len(loss) == 2 and f"{loss[-1]:.4g} (step 2)" in text  # the metrics table's last training loss
    chromium.screenshot(run_dir / "report.html", tmp_path / "stopped.png")

    (run_dir / "stopped.json").unlink()  # as if the process had been killed
    assert main(["report", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert (
        "In progress or interrupted: last logged step 2 of 4" in out and f"report    {run_dir / 'report.html'}" in out
    )

    run(cfg, resume=True)
    view = read_run(run_dir)
    assert view.status[0] == "finished" and not (run_dir / "stopped.json").exists()
    assert "Finished: 4 steps" in _text(chromium.dump_dom(run_dir / "report.html"))


@pytest.mark.slow  # a browser: ~30 s each (make test-slow)
def test_report_of_an_empty_run(tmp_path: Path, chromium, capsys) -> None:
    """A run directory with only its config (stopped before the first step): the page says no steps were logged,
    shows the config, and a dashboard left from an earlier run is removed."""
    cfg = _rm_config(tmp_path)
    run_dir = Path(cfg.output_dir)
    dump_yaml(cfg, run_dir / "config.yaml")
    (run_dir / "dashboard.png").write_bytes(b"stale")
    assert main(["report", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "No steps logged yet." in out and "figure    none (no steps logged yet)" in out
    assert not (run_dir / "dashboard.png").exists()
    text = _text(chromium.dump_dom(run_dir / "report.html"))
    assert "No steps logged yet." in text and "output_dir: " + str(run_dir) in text and "<img" not in text
    chromium.screenshot(run_dir / "report.html", tmp_path / "empty.png")


def test_report_names_unreadable_files_and_draws_any_metric(tmp_path: Path) -> None:
    """A cut-off metrics line and a broken report.json are named (file and line) and left out; reward components
    of any name get panels; NaN values are counted; alerts come from alerts.jsonl."""
    rows = [
        {"step": 1, "loss": 0.7, "reward/correctness": 0.2, "reward/format": 0.9},
        {"step": 2, "loss": float("nan"), "reward/correctness": 0.4, "reward/format": 0.8},
        {"step": 2, "eval_reward/correctness": 0.35},
    ]
    lines = [json.dumps(r) for r in rows] + ['{"step": 3, "loss": 0.']
    (tmp_path / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    (tmp_path / "report.json").write_text("{not json")
    (tmp_path / ALERTS_FILE).write_text(
        json.dumps({"step": 2, "key": "nonfinite:loss", "message": "step 2: loss is nan"})
    )
    files = write_report(tmp_path)
    assert files.figure is not None and files.status.startswith("In progress or interrupted: last logged step 2")
    page = files.html.read_text()
    assert "metrics.jsonl line 4: not JSON" in page and "report.json: not readable as JSON" in page
    assert "step 2: loss is nan" in page and "reward/correctness" in page and "reward/format" in page
    loss_row = page[page.index("<td>loss</td>") :].split("</tr>")[0]
    assert loss_row.endswith("<td class=n>2</td><td class=n>1</td>")  # 2 points logged, 1 of them NaN


def test_report_shows_the_examples_a_judge_built_while_it_trains(tmp_path: Path) -> None:
    """A judge or meta-RM run writes how many examples it kept (and why others went) before training starts."""
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 1, "loss": 1.5, "nll_per_token": 1.5}) + "\n")
    (tmp_path / "data_report.json").write_text(
        json.dumps({"examples": {"pairs": 150, "draws": 600, "correct": 212, "abstained": 31, "too_easy": 9}})
    )
    page = write_report(tmp_path).html.read_text()
    assert "Training examples built from the pairs" in page
    for key, value in (("draws", 600), ("correct", 212), ("abstained", 31), ("too_easy", 9)):
        assert f"<td>{key}</td><td class=n>{value}</td>" in page


def test_report_of_what_is_no_run_is_an_error(tmp_path: Path, capsys) -> None:
    assert main(["report", str(tmp_path / "missing")]) == 2
    assert f"{tmp_path / 'missing'}: no such directory" in capsys.readouterr().err
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "not a run directory (none of config.yaml, metrics.jsonl, report.json is there)" in err


def test_the_learned_reward_and_held_out_gold_share_the_first_panel():
    from prefalign.training.report import HACKING, panels

    shown = panels(["loss", "reward", "eval_reward", "eval_gold/overall"])
    assert shown[0].twin == HACKING and "learned reward" in shown[0].title
    assert all(p.twin is None for p in panels(["loss", "eval_gold/overall"]))  # a run without a learned reward


def _dashboard_of(tmp_path: Path, rows: list[dict], monkeypatch) -> tuple[list[int], list[str], str]:
    """Draw the dashboard of a run with these metrics rows; (lengths of every series smoothed, the titles of the panels
    drawn, the figure's caption)."""
    from matplotlib.figure import Figure

    import prefalign.training.report as R

    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    smoothed: list[int] = []
    monkeypatch.setattr(R, "smooth", lambda values, *a: smoothed.append(len(values)) or smooth(values, *a))
    drawn: dict[str, Any] = {}
    original = Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda fig, *a, **k: drawn.setdefault("fig", fig) and original(fig, *a, **k))
    assert R.draw_dashboard(R.read_run(run), run / "dashboard.png")
    fig = drawn["fig"]
    titles = [ax.get_title() for ax in fig.axes if ax.get_visible() and ax.get_title()]
    caption = " ".join(t.get_text() for t in fig.texts)
    return smoothed, titles, caption


def test_a_dashboard_never_smooths_a_few_points_and_leaves_out_constant_panels(tmp_path, monkeypatch):
    rows = [{"step": s, "loss": 1.0 / (1 + s) + 0.1 * (s % 3)} for s in range(1, 21)]  # 20 points: smoothed
    rows += [{"step": 20 * r, "round": r, "pairs/pairs": 96 + 32 * (r == 3), "dropped_nan": 0} for r in (1, 2, 3)]
    rows += [{"step": 60, "prompts": 320}, {"step": 40, "prompts": 320}]
    smoothed, titles, caption = _dashboard_of(tmp_path, rows, monkeypatch)
    assert smoothed and all(n >= 10 for n in smoothed), smoothed  # the 3-point series were drawn as logged
    assert "loss" in titles and "pairs/pairs" in titles and "round" not in titles  # a counter, not a curve
    assert "dropped_nan" not in titles and "prompts" not in titles
    assert "dropped_nan = 0" in caption and "prompts = 320" in caption


@pytest.mark.slow  # iterative rounds with evaluations between them (~17 s): make test-slow
def test_an_iterative_run_that_evaluates_between_rounds_draws_reward_against_gold_first(
    tmp_path,
    monkeypatch,
    rm_dir,  # noqa: F811 (the fixture)
):
    """eval.limit > 0: each round's held-out answers scored by the learned reward and by gold, on the first panel."""
    from align.cli.configs import config_class
    from align.iterative import run

    cfg = build(
        config_class("iterative"),
        {
            "kind": "iterative",
            "model": "builtin:tiny-llama",
            "output_dir": str(tmp_path / "it"),
            "prompts": {"source": "suite", "limit": 8},
            "reward": [{"type": "scalar", "model": str(rm_dir), "dtype": "float32", "name": "rm"}],
            "rounds": {"rounds": 2, "prompts_per_round": 2, "samples_per_prompt": 2, "max_new_tokens": 4},
            "eval": {"prompts": "suite", "limit": 2, "max_new_tokens": 4},
            "train": {"max_steps": 1, "batch_size": 2, "precision": "fp32", "compile": False},
        },
    )
    run(cfg)
    view = read_run(tmp_path / "it")
    first = panels(view.series, (view.report or {}).get("dashboard_first") or ())[0]
    assert first.twin is not None and "learned reward" in first.title
    assert len(view.series["eval_reward"]) == 3 and len(view.series["eval_gold/overall"]) == 3  # rounds 0, 1, 2
    assert (tmp_path / "it" / "dashboard.png").exists()
