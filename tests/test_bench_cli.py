"""`align bench run` / `align bench show` end to end through `align.cli.main.main`, on the tiny test model and
tiny fixtures written in each benchmark's official format."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from align.cli.main import main
from preference_data.records import Message, PreferencePair


@pytest.fixture(scope="module")
def rm_dir(tmp_path_factory, tiny_model_ref) -> str:
    """A tiny sequence-classification RM saved with its reward statistics."""
    import torch

    from prefalign.models.hub import load_seq_cls, load_tokenizer
    from reward_models.checkpoint import RewardStats, save_rm

    model = load_seq_cls(tiny_model_ref, dtype="float32")
    torch.manual_seed(0)
    torch.nn.init.normal_(model.score.weight, std=1.0)
    out = tmp_path_factory.mktemp("bench") / "tiny-rm"
    save_rm(model, load_tokenizer(tiny_model_ref), out, RewardStats(0.0, 1.0, 4, 1, "test"))
    return str(out)


def _rewardbench(path: Path) -> Path:
    """Official allenai/reward-bench rows: prompt, chosen, rejected (strings), subset, id (int)."""
    subsets = ["alpacaeval-easy", "mt-bench-easy", "llmbar-natural", "xstest-should-refuse", "math-prm", "hep-python"]
    rows = [
        {
            "prompt": f"Question {i}: what is {i} + {i}?",
            "chosen": f"It is {2 * i}.",
            "rejected": f"I think it might be {2 * i + 1}, but I am not sure.",
            "subset": s,
            "id": i,
        }
        for i, s in enumerate(subsets)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _rmbench(path: Path) -> Path:
    """Official THU-KEG/RM-Bench rows: id, prompt, chosen (3 styles), rejected (3 styles), domain."""
    rows = []
    for i, domain in enumerate(["chat", "math", "code", "safety-refuse"]):
        good, bad = f"answer {i} is right", f"answer {i} is wrong"
        styles = ["{}", "Here is a detailed answer: {}.", "## Answer\n\n- {}"]
        rows.append(
            {
                "id": i,
                "prompt": f"prompt {i}",
                "domain": domain,
                "chosen": [s.format(good) for s in styles],
                "rejected": [s.format(bad) for s in styles],
            }
        )
    path.write_text(json.dumps(rows), encoding="utf-8")
    return path


def _suite_pairs(path: Path) -> Path:
    """PreferencePair dumps with the suite's family / corruption attributes."""
    pairs = [
        PreferencePair(
            [Message("user", f"What is {i} times 3?")],
            [Message("assistant", f"{3 * i}")],
            [Message("assistant", f"{3 * i + 1}")],
            attributes={"family": fam, "corruption": cor},
            source="verifiable_suite",
        )
        for i, (fam, cor) in enumerate(
            [("arithmetic", "wrong_value"), ("arithmetic", "padding"), ("short_answer", "wrong_value")]
        )
    ]
    path.write_text("".join(json.dumps(p.to_dict()) + "\n" for p in pairs), encoding="utf-8")
    return path


def test_run_three_benchmarks_then_show(tmp_path: Path, rm_dir: str, capsys) -> None:
    records, site = tmp_path / "records", tmp_path / "site"
    runs = [
        ("rewardbench", _rewardbench(tmp_path / "rb.jsonl"), "Chat Hard"),
        ("rm-bench", _rmbench(tmp_path / "total_dataset.json"), "Hard"),
        ("suite", _suite_pairs(tmp_path / "suite.jsonl"), "arithmetic"),
    ]
    for bench, data, expect in runs:
        rc = main(
            [
                "bench",
                "run",
                bench,
                "--model",
                rm_dir,
                "--data",
                str(data),
                "--records",
                str(records),
                "--dtype",
                "float32",
                "--no-cache",
            ]
        )
        out = capsys.readouterr().out
        assert rc == 0, out
        assert f"{bench} v1.0  model: {rm_dir}" in out and expect in out and "record: " in out
    written = sorted(records.glob("*.json"))
    assert len(written) == 3
    rec = json.loads(written[0].read_text(encoding="utf-8"))
    assert rec["scorer"]["name"] == "scalar" and rec["scorer"]["settings"]["dtype"] == "float32"
    recs = {r["benchmark"]: r for r in (json.loads(f.read_text(encoding="utf-8")) for f in written)}

    # the numbers: each pair's win (chosen scored above rejected) from the scorer called directly
    from reward_models.scorers import load_scorer

    scorer = load_scorer("scalar", model=rm_dir, dtype="float32")

    def wins(prompts: list[str], chosen: list[str], rejected: list[str]) -> list[float]:
        conv = [[Message("user", p)] for p in prompts]
        sc = scorer.score(conv, [[Message("assistant", c)] for c in chosen])
        sr = scorer.score(conv, [[Message("assistant", r)] for r in rejected])
        return [float(a > b) for a, b in zip(sc, sr, strict=True)]

    rb = [json.loads(x) for x in (tmp_path / "rb.jsonl").read_text().splitlines()]
    rb_wins = wins([r["prompt"] for r in rb], [r["chosen"] for r in rb], [r["rejected"] for r in rb])
    for r, w in zip(rb, rb_wins, strict=True):
        assert recs["rewardbench"]["scores"]["subsets"][r["subset"]] == {"score": w, "n": 1}
    assert recs["rewardbench"]["scores"]["sections"]["Chat Hard"] == rb_wins[2]  # llmbar-natural alone
    from preference_data.records import pair_from_dict

    suite = [pair_from_dict(json.loads(x)) for x in (tmp_path / "suite.jsonl").read_text().splitlines()]
    s_wins = wins(
        [p.prompt[0].content for p in suite],
        [p.chosen[0].content for p in suite],
        [p.rejected[0].content for p in suite],
    )
    scores = recs["suite"]["scores"]
    assert scores["headline"] == pytest.approx(sum(s_wins) / 3)
    assert scores["subsets"]["arithmetic"]["score"] == pytest.approx(sum(s_wins[:2]) / 2)
    assert scores["subsets"]["short_answer"]["score"] == s_wins[2]
    assert len(set(s_wins)) == 2  # wins and losses both occur: the comparison is not vacuous

    assert main(["bench", "show", "--records", str(records), "--site", str(site)]) == 0
    out = capsys.readouterr().out
    md, html, png = site / "leaderboard.md", site / "index.html", site / "leaderboard.png"
    charts = [site / "charts" / f"{b}.png" for b in ("rewardbench", "rm-bench", "suite")]
    for f in (md, html, png, *charts):
        assert f.exists() and f.stat().st_size > 0 and str(f) in out  # where every file went
    assert f"(open {html.resolve().as_uri()})" in out
    assert rm_dir in md.read_text(encoding="utf-8") and rm_dir in html.read_text(encoding="utf-8")
    overview = md.read_text(encoding="utf-8").split("\n\n")[1]  # the headline table, after the title
    assert overview.startswith("| Model | rewardbench | rm-bench | suite |") and overview in out


def test_grader_on_real_suite_pairs_is_the_gold_ceiling(tmp_path: Path, capsys) -> None:
    """The gold grader prefers chosen exactly where the gold scores saved in the pairs say so."""
    from preference_data.suite import build_suite

    pairs = build_suite(n_per_family=2, seed=0).pairs
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps(p.to_dict()) + "\n" for p in pairs), encoding="utf-8")
    rc = main(
        [
            "bench",
            "run",
            "suite",
            "--scorer",
            "grader",
            "--data",
            str(data),
            "--records",
            str(tmp_path / "r"),
            "--no-cache",
        ]
    )
    assert rc == 0, capsys.readouterr().err
    (path,) = (tmp_path / "r").glob("*.json")
    rec = json.loads(path.read_text(encoding="utf-8"))
    wins = [p.attributes["gold_chosen"]["overall"] > p.attributes["gold_rejected"]["overall"] for p in pairs]
    assert rec["scores"]["headline"] == pytest.approx(sum(wins) / len(wins))
    assert rec["model"] == "suite gold grader"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["bench", "run", "rewardbnch", "--model", "x"], "did you mean 'rewardbench'"),
        (["bench", "run", "rewardbench", "--model", "x", "--data", "{tmp}/missing/rb.jsonl"], "{tmp}/missing/rb.jsonl"),
        (["bench", "run", "pairs", "--model", "builtin:tiny-llama"], "--scorer implicit --reference"),
        (
            ["bench", "run", "pairs", "--model", "{rm}", "--reference", "builtin:tiny-llama"],
            "--reference does not apply to --scorer scalar",
        ),
        (["bench", "run", "pairs", "--model", "{rm}", "--option", "normalise=true"], "did you mean 'normalize'"),
        (["bench", "run", "suite", "--scorer", "grader", "--model", "{rm}"], "--model does not apply"),
        (["bench", "show", "--records", "{tmp}/none"], "does not exist"),
    ],
)
def test_bad_input_exits_2_with_a_message(tmp_path: Path, rm_dir: str, capsys, argv: list[str], message: str) -> None:
    fill = {"tmp": str(tmp_path), "rm": rm_dir}
    rc = main([a.format(**fill) for a in argv])
    err = capsys.readouterr().err
    assert rc == 2 and message.format(**fill) in err
    assert "Traceback" not in err


def test_default_scorer_follows_the_model_files(tmp_path: Path, rm_dir: str, tiny_model_ref: str) -> None:
    from prefalign.errors import UserError
    from reward_models.scorers import default_scorer

    def adapter(name: str, task: str) -> str:
        d = tmp_path / name
        d.mkdir()
        (d / "adapter_config.json").write_text(json.dumps({"task_type": task, "base_model_name_or_path": "x"}))
        return str(d)

    assert default_scorer(rm_dir, None) == "scalar"  # reward_stats.json / ForSequenceClassification
    assert default_scorer(adapter("lora-rm", "SEQ_CLS"), None) == "scalar"
    assert default_scorer(adapter("lora-policy", "CAUSAL_LM"), None) == "implicit"
    assert default_scorer(tiny_model_ref, tiny_model_ref) == "implicit"
    with pytest.raises(UserError, match="--scorer judge"):
        default_scorer(tiny_model_ref, None)
