"""Your own model and data: one score per saved RM whatever the door (the model card's plain-transformers recipe,
`align rm score`, `align bench run`, the reward server), `rm score` on one response per row, a run directory
wherever a model is expected, and your own prompts judged by your own RM (`align eval policy --prompts FILE
--judge DIR`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from align.cli.main import main


@pytest.fixture(scope="module")
def rm_run(tmp_path_factory, tiny_model_ref) -> Path:
    """A run directory holding a tiny RM in `model/`, as `align rm train` leaves it."""
    import torch

    from prefalign.models.hub import load_seq_cls, load_tokenizer
    from reward_models.checkpoint import RewardStats, save_rm

    model = load_seq_cls(tiny_model_ref, dtype="float32")
    torch.manual_seed(0)
    torch.nn.init.normal_(model.score.weight, std=1.0)
    run = tmp_path_factory.mktemp("own") / "rm_run"
    save_rm(model, load_tokenizer(tiny_model_ref), run / "model", RewardStats(0.1, 2.0, 4, 1, "test"))
    return run


ROWS = [
    {"prompt": "What is 2 + 2?", "response": "4"},
    {"prompt": [{"role": "user", "content": "Capital of France?"}], "completion": "Paris."},
    {"messages": [{"role": "user", "content": "Say hi."}, {"role": "assistant", "content": "Hi there!"}]},
]


def _card_reward(model_dir: Path, prompt: list[dict], response: str) -> float:
    """The model card's recipe: plain transformers, float32, the chat template's rendering."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForSequenceClassification.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    messages = [*prompt, {"role": "assistant", "content": response}]
    inputs = tok.apply_chat_template(messages, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        return float(model(**inputs).logits[0][0])


def test_rm_score_reads_one_response_per_row_and_equals_the_model_card(tmp_path, rm_run, capsys):
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    out = tmp_path / "scores.jsonl"
    # a run directory is accepted where a model is expected: its model/ is used, and the command says so
    assert main(["rm", "score", "--model", str(rm_run), "--data", str(data), "--out", str(out), "--raw"]) == 0
    said = capsys.readouterr()
    assert f"{rm_run} is a run directory: using its model/" in said.err and "precision float32" in said.out
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["text"] for r in rows] == ["4", "Paris.", "Hi there!"]
    assert rows[1]["prompt"] == [{"role": "user", "content": "Capital of France?"}]
    prompts = [[{"role": "user", "content": "What is 2 + 2?"}], ROWS[1]["prompt"], ROWS[2]["messages"][:1]]
    for r, prompt in zip(rows, prompts, strict=True):  # the default precision is the card's: the same scores
        assert r["score"] == pytest.approx(_card_reward(rm_run / "model", prompt, r["text"]), abs=1e-3)
    # normalised with the statistics saved beside the RM
    assert main(["rm", "score", "--model", str(rm_run), "--data", str(data), "--out", str(tmp_path / "n.jsonl")]) == 0
    norm = [json.loads(x)["score"] for x in (tmp_path / "n.jsonl").read_text().splitlines()]
    assert norm == pytest.approx([(r["score"] - 0.1) / 2.0 for r in rows], abs=1e-5)


def test_bench_run_and_the_server_score_as_the_model_card(tmp_path, rm_run):
    """`align bench run pairs` and the reward server, both with a run directory and their default precision, give
    the card's scores (to 1e-3)."""
    import httpx

    from align.serve.app import BackgroundServer
    from align.serve.run import build_app
    from align.serve.settings import ServeSettings

    pair = {"prompt": "What is 2 + 2?", "chosen": "4", "rejected": "5, I think"}
    data = tmp_path / "pairs.jsonl"
    data.write_text(json.dumps(pair) + "\n")
    records = tmp_path / "records"
    assert main(["bench", "run", "pairs", "--model", str(rm_run), "--data", str(data), "--records", str(records)]) == 0
    (rec,) = [json.loads(p.read_text()) for p in records.glob("*.json")]
    assert rec["scorer"]["settings"]["dtype"] == "float32"
    user = [{"role": "user", "content": pair["prompt"]}]
    want = [_card_reward(rm_run / "model", user, pair[k]) for k in ("chosen", "rejected")]
    assert rec["scores"]["headline"] == (1.0 if want[0] > want[1] else 0.0)

    app, _ = build_app(ServeSettings(model=str(rm_run), port=0, log_level="warning"))
    items = [{"prompt": pair["prompt"], "response": pair[k]} for k in ("chosen", "rejected")]
    with BackgroundServer(app) as srv:
        r = httpx.post(srv.url + "/score", json={"items": items}, timeout=60)
        assert r.status_code == 200, r.text
        assert r.json()["rewards"] == pytest.approx(want, abs=1e-3)


def test_your_own_prompts_judged_by_your_own_rm(tmp_path, rm_run, capsys):
    prompts = tmp_path / "my_prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in ("Say hi.", "Name a fruit.", "Count to 3.")))
    out = tmp_path / "eval"
    policy = "builtin:smollm2-135m-instruct"  # a real chat model: answers with text (the random tiny one may not)
    args = ["eval", "policy", "--model", policy, "--baseline", policy, "--prompts", str(prompts)]
    args += ["--judge", str(rm_run), "--out", str(out), "--max-new-tokens", "8", "--dtype", "float32"]
    assert main(args) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["prompts"] == 3 and report["judge_kind"] == "pointwise" and report["judge_nan"] == 0
    # the same model on both sides, greedy: every prompt a tie, the gain exactly zero
    assert report["win_rate"] == 0.5 and report["win_rate_ci95"] == [0.5, 0.5]
    assert report["reward_gain"] == pytest.approx(0.0, abs=1e-6)
    rows = [json.loads(x) for x in (out / "generations.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and rows[0]["response"] == rows[0]["baseline_response"]
    assert rows[0]["score"] == pytest.approx(rows[0]["baseline_score"])
    # without a baseline there is nothing to judge against: said before anything is generated
    capsys.readouterr()
    assert main(["eval", "policy", "--model", policy, "--prompts", str(prompts), "--judge", str(rm_run)]) != 0
    assert "give --baseline" in capsys.readouterr().err


def test_bench_show_before_any_record_says_how_to_make_one(tmp_path, capsys):
    from prefalign.errors import UserError

    with pytest.raises(UserError, match=r"(?s)no benchmark records yet.*align bench run suite"):
        from leaderboards.records import load_records

        load_records(tmp_path / "none")
