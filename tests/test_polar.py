"""POLAR reward models: the input format token for token, the policy pool and its triples, pre-training and
fine-tuning through `align rm train` on the tiny model, save/reload, the reference-conditioned scorer, bad input."""

from __future__ import annotations

import dataclasses
import json
import math
import random
from pathlib import Path
from typing import Any

import pytest
import torch

from align.cli.main import main
from prefalign.config import build
from prefalign.errors import ConfigError, UserError
from preference_data.records import Message
from reward_models.polar.data import PolarRow, pool_triples, tokenize_rows
from reward_models.polar.format import (
    END_TOKEN,
    REWARD_TOKEN,
    InputSection,
    TooLong,
    add_polar_tokens,
    encode,
    polar_text,
    polar_token_ids,
)
from reward_models.polar.pool import (
    WRONG_SYSTEM_PROMPT,
    PolarPoolConfig,
    PolicySpec,
    degrade,
    policy_prompt,
    shuffle_text,
    truncate_text,
)


@pytest.fixture(scope="module")
def polar_tokenizer(smollm2_tokenizer):
    import copy

    tok = copy.deepcopy(smollm2_tokenizer)
    assert add_polar_tokens(tok) == 2
    return tok


def U(text: str) -> list[Message]:
    return [Message("user", text)]


def A(text: str) -> list[Message]:
    return [Message("assistant", text)]


# --- the input format ------------------------------------------------------------------------------------------


def test_input_matches_the_documented_format_token_for_token(polar_tokenizer):
    tok = polar_tokenizer
    prompt = [Message("system", "Be brief."), Message("user", "What is 12 + 30?\nReply with the number only.")]
    reference, candidate = A("42"), A("The answer is  42.\n\nDone")
    cfg = InputSection(max_length=512, max_response_length=64)
    (enc,) = encode(tok, prompt, reference, [candidate], cfg)

    # reference §3.2, written out by hand: contents joined by "\n" (roles dropped), "\n" between prompt and response
    p = "Be brief.\nWhat is 12 + 30?\nReply with the number only."
    text = p + "\n" + "42" + "<|reward|>" + p + "\n" + "The answer is  42.\n\nDone" + "<|reward_end|>"
    assert polar_text(p, "42", "The answer is  42.\n\nDone") == text
    expected = tok(text, add_special_tokens=False)["input_ids"]
    assert enc.prefix_ids + enc.candidate_ids == expected
    reward_id, end_id = polar_token_ids(tok)
    assert enc.prefix_ids[-1] == reward_id and enc.candidate_ids[-1] == end_id  # the reward is read at the end token
    assert expected.count(reward_id) == 1 and expected.count(end_id) == 1
    assert tok.decode(expected) == text and not enc.truncated

    (pre,) = encode(tok, prompt, reference, [candidate], InputSection(512, 64, wrapper="pretrain"))
    text = p + "42" + REWARD_TOKEN + p + "The answer is  42.\n\nDone" + END_TOKEN
    assert pre.prefix_ids + pre.candidate_ids == tok(text, add_special_tokens=False)["input_ids"]


def test_truncation_keeps_the_prompts_end_and_cuts_a_long_candidate(polar_tokenizer):
    tok = polar_tokenizer
    cfg = InputSection(max_length=60, max_response_length=20)
    prompt = U(" ".join(f"word{i}" for i in range(200)) + " final question?")
    long_candidate = A(" ".join(["yes"] * 50))
    (enc,) = encode(tok, prompt, A("short answer"), [long_candidate], cfg)
    assert enc.truncated
    assert len(enc.prefix_ids) + len(enc.candidate_ids) <= cfg.max_length
    assert "final question?" in tok.decode(enc.prefix_ids)  # the prompt keeps its last tokens
    assert "word0 " not in tok.decode(enc.prefix_ids)
    assert tok.decode(enc.candidate_ids).count("yes") <= 20


def test_a_reference_over_the_budget_is_a_counted_skip(polar_tokenizer):
    cfg = InputSection(max_length=60, max_response_length=20)
    long_ref = A(" ".join(["reference"] * 40))
    with pytest.raises(TooLong):
        encode(polar_tokenizer, U("q?"), long_ref, [A("a")], cfg)
    rows = [PolarRow(U("q?"), long_ref, A("a"), A("b"), id="long"), PolarRow(U("q?"), A("a"), A("a"), A("b"), id="ok")]
    pairs, rep = tokenize_rows(rows, polar_tokenizer, cfg)
    assert [p.id for p in pairs] == ["ok"]
    assert rep.too_long_reference == 1 and rep.pairs_out == 1 and "long" in rep.examples[0]


def test_input_budget_must_leave_room_for_the_prompt():
    with pytest.raises(ConfigError, match="max_length"):
        build(InputSection, {"max_length": 100, "max_response_length": 64})


# --- the pool and its triples ----------------------------------------------------------------------------------


def fake_pool(policies: list[str], prompts: int = 6, samples: int = 2) -> list[dict]:
    return [
        {
            "prompt_id": f"p{i}",
            "prompt": [{"role": "user", "content": f"question {i}?"}],
            "policy": pol,
            "sample": j,
            "response": f"{pol} answer {i}.{j}",
            "finish_reason": "eos",
        }
        for i in range(prompts)
        for pol in policies
        for j in range(samples)
    ]


def test_triples_take_reference_and_positive_from_a_and_the_negative_from_b():
    pool = fake_pool(["a", "b", "c"])
    triples = pool_triples(pool, per_prompt=3, seed=1)
    assert len(triples) == 18
    for t in triples:
        a, b = t.attributes["policy_a"], t.attributes["policy_b"]
        assert a != b
        ref, pos, neg = t.reference[0].content, t.chosen[0].content, t.rejected[0].content
        assert ref.startswith(f"{a} answer") and pos.startswith(f"{a} answer") and neg.startswith(f"{b} answer")
        assert ref != pos  # two different trajectories of A
        assert ref.split()[-1].split(".")[0] == t.prompt[0].content.split()[1].rstrip("?")  # same prompt
    again = pool_triples(pool, per_prompt=3, seed=1)
    assert [t.id for t in again] == [t.id for t in triples]  # seeded
    assert {t.attributes["policy_b"] for t in triples} == {"a", "b", "c"}


def test_a_pool_of_one_policy_is_a_clear_error():
    with pytest.raises(UserError, match="at least two policies"):
        pool_triples(fake_pool(["only"]))
    with pytest.raises(ConfigError, match="at least two policies"):
        build(PolarPoolConfig, {"policies": [{"name": "only"}]})
    with pytest.raises(ConfigError, match="samples_per_prompt"):
        build(PolarPoolConfig, {"policies": [{"name": "a"}, {"name": "b"}], "samples_per_prompt": 1})


def test_degradations_transform_the_generated_text():
    text = "The capital of France is Paris and it is lovely"
    assert truncate_text(text, 0.5) == "The capital of France is"
    shuffled = shuffle_text(text, random.Random(0))
    assert sorted(shuffled.split()) == sorted(text.split()) and shuffled != text
    assert degrade(PolicySpec("s", degradation="shuffle"), text, random.Random(0)) == shuffled
    assert degrade(PolicySpec("w", degradation="wrong"), text, random.Random(0)) == text
    asked = policy_prompt(PolicySpec("w", degradation="wrong"), [Message("system", "Be brief."), *U("2+2?")])
    assert asked[0].role == "system" and asked[0].content.startswith(WRONG_SYSTEM_PROMPT)
    assert asked[0].content.endswith("Be brief.") and asked[1:] == U("2+2?")
    assert policy_prompt(PolicySpec("n"), U("2+2?")) == U("2+2?")


# --- pool -> pretrain -> finetune through `align rm train`, on the tiny model -----------------------------------

TRAIN = {"precision": "fp32", "seed": 0, "compile": False, "row_tokens": 512}


COLORS = "red green blue yellow black white orange purple pink brown gray gold".split()


def toy_rows(n: int, seed: int) -> list[dict]:
    """Rows whose chosen answer IS the reference and whose rejected answer is another color."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        right, wrong = rng.sample(COLORS, 2)
        prompt = f"Which color is item {rng.randrange(1000)}?"
        out.append({"prompt": prompt, "reference": right, "chosen": right, "rejected": wrong})
    return out


def identical_wins(model_dir: Path, trials: int = 20) -> int:
    """On how many unseen prompts the candidate equal to the reference outscores four other candidates."""
    from reward_models.scorers import load_scorer

    scorer: Any = load_scorer("polar", model=str(model_dir), dtype="float32")  # a PolarScorer (kind "reference")
    rng = random.Random(7)
    wins = 0
    for _ in range(trials):
        candidates = rng.sample(COLORS, 5)
        prompt = U(f"Which color is item {rng.randrange(1000, 2000)}?")
        scores = scorer.score_with_reference([prompt] * 5, [A(c) for c in candidates], [candidates[0]] * 5)
        wins += scores.index(max(scores)) == 0
    return wins


def write_yaml(path: Path, data: dict) -> str:
    import yaml

    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def polar_runs(tmp_path_factory, tiny_model_ref):
    tmp = tmp_path_factory.mktemp("polar")
    prompts = tmp / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"Name a color number {i}."}) + "\n" for i in range(6)))
    pool_cfg = write_yaml(
        tmp / "pool.yaml",
        {
            "kind": "polar_pool",
            "output_dir": str(tmp / "pool"),
            "prompts": {"source": str(prompts)},
            "samples_per_prompt": 2,
            "max_new_tokens": 6,
            "dtype": "float32",
            "policies": [
                {"name": "warm", "model": tiny_model_ref, "temperature": 1.0},
                {"name": "shuffled", "model": tiny_model_ref, "temperature": 1.0, "degradation": "shuffle"},
                {"name": "wrong", "model": tiny_model_ref, "temperature": 1.0, "degradation": "wrong"},
            ],
        },
    )
    assert main(["rm", "train", "--config", pool_cfg]) == 0
    pretrain_cfg = write_yaml(
        tmp / "pretrain.yaml",
        {
            "kind": "polar_train",
            "stage": "pretrain",
            "model": tiny_model_ref,
            "output_dir": str(tmp / "pretrain"),
            "data": {"pool": str(tmp / "pool"), "triples_per_prompt": 2, "heldout_fraction": 0.3},
            "input": {"max_length": 256, "max_response_length": 64},
            "train": {**TRAIN, "method": "lora", "max_steps": 3, "batch_size": 4, "lr": 1e-3, "eval_every": 2},
            "eval": {"stats_pairs": 8},
        },
    )
    assert main(["rm", "train", "--config", pretrain_cfg]) == 0
    train_file, test_file = tmp / "ft_train.jsonl", tmp / "ft_test.jsonl"
    train_file.write_text("".join(json.dumps(r) + "\n" for r in toy_rows(512, 0)))
    test_file.write_text("".join(json.dumps(r) + "\n" for r in toy_rows(32, 1)))
    finetune_cfg = write_yaml(
        tmp / "finetune.yaml",
        {
            "kind": "polar_train",
            "stage": "finetune",
            "model": str(tmp / "pretrain" / "model"),
            "output_dir": str(tmp / "finetune"),
            "data": {"source": str(train_file)},
            "eval": {"source": str(test_file), "stats_pairs": 8},
            "input": {"max_length": 256, "max_response_length": 64},
            "train": {**TRAIN, "method": "full", "epochs": 10, "batch_size": 8, "lr": 3e-4},
        },
    )
    assert main(["rm", "train", "--config", finetune_cfg]) == 0
    return tmp


@pytest.mark.slow  # the pool -> pretrain -> finetune pipeline it reads (36 s): make test-slow
def test_pool_caches_every_trajectory_with_its_policy(polar_runs):
    rows = [json.loads(x) for x in (polar_runs / "pool" / "pool.jsonl").read_text().splitlines()]
    assert len(rows) == 3 * 6 * 2
    assert {r["policy"] for r in rows} == {"warm", "shuffled", "wrong"}
    assert all(r["prompt"][0]["role"] == "user" for r in rows)  # the task's prompt, not the policy's system prompt
    report = json.loads((polar_runs / "pool" / "report.json").read_text())
    assert report["trajectories"] == 36 and report["per_policy"]["wrong"]["degradation"] == "wrong"


@pytest.mark.slow  # the pool -> pretrain -> finetune pipeline it reads (36 s): make test-slow
def test_pool_resume_keeps_complete_policies(polar_runs):
    before = (polar_runs / "pool" / "pool.jsonl").read_text()
    assert main(["rm", "train", "--config", str(polar_runs / "pool.yaml"), "--resume"]) == 0
    report = json.loads((polar_runs / "pool" / "report.json").read_text())
    assert {p["seconds"] for p in report["per_policy"].values()} == {"cached"}
    assert (polar_runs / "pool" / "pool.jsonl").read_text() == before


@pytest.mark.slow  # the pool -> pretrain -> finetune pipeline it reads (36 s): make test-slow
def test_pretrain_and_finetune_save_a_polar_model_with_its_tokens(polar_runs):
    from prefalign.models.hub import load_tokenizer

    for stage in ("pretrain", "finetune"):
        report = json.loads((polar_runs / stage / "report.json").read_text())
        assert report["stage"] == stage and report["steps"] > 0 and report["eval"]["pairs"] > 0
        lo, hi = report["eval"]["interval"]
        assert lo <= report["eval"]["accuracy"] <= hi
        model_dir = Path(report["model_dir"])
        meta = json.loads((model_dir / "polar.json").read_text())
        assert meta["reward_token"] == REWARD_TOKEN and meta["end_token"] == END_TOKEN
        tok = load_tokenizer(str(model_dir))
        assert polar_token_ids(tok) == (49152, 49153)
        assert tok.pad_token_id not in polar_token_ids(tok) and tok.pad_token_id != tok.eos_token_id
    pre = json.loads((polar_runs / "pretrain" / "report.json").read_text())
    assert pre["tokens_added"] == 2 and "by_negative_policy" in pre["eval"]
    logged = [json.loads(x) for x in (polar_runs / "pretrain" / "metrics.jsonl").read_text().splitlines()]
    assert any("eval_accuracy" in m for m in logged)  # train.eval_every: 2
    ft = json.loads((polar_runs / "finetune" / "report.json").read_text())
    assert ft["tokens_added"] == 0  # continued from the pretrained model, which has them


@pytest.mark.parametrize("stage", ["pretrain", "finetune"])  # LoRA (reward/end embeddings trained) and full
@pytest.mark.slow  # the pool -> pretrain -> finetune pipeline it reads (36 s): make test-slow
def test_saved_model_reloads_and_scores_identically(polar_runs, stage):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from reward_models.scorers import load_scorer

    report = json.loads((polar_runs / stage / "report.json").read_text())
    sample = report["sample_rewards"]
    rows = {r["id"]: r for r in sample["rows"]}
    scorer = load_scorer("polar", model=report["model_dir"], dtype="float32")
    ids = sample["ids"]
    prompts = [U(rows[i]["prompt"]) for i in ids]
    refs = [rows[i]["reference"] for i in ids]
    got_c = scorer.score_with_reference(prompts, [A(rows[i]["chosen"]) for i in ids], refs)
    got_r = scorer.score_with_reference(prompts, [A(rows[i]["rejected"]) for i in ids], refs)
    assert got_c == pytest.approx(sample["chosen"], abs=1e-4)
    assert got_r == pytest.approx(sample["rejected"], abs=1e-4)
    assert len(set(got_c + got_r)) > 1  # the head is not constant

    # plain transformers on the documented text reads the same score (the pad token is not the end token)
    tok = AutoTokenizer.from_pretrained(report["model_dir"])
    model = AutoModelForSequenceClassification.from_pretrained(report["model_dir"], dtype=torch.float32).eval()
    r0 = rows[ids[0]]
    text = polar_text(r0["prompt"], r0["reference"], r0["chosen"])
    with torch.no_grad():
        plain = model(**tok(text, return_tensors="pt", add_special_tokens=False)).logits[0, 0].item()
    assert plain == pytest.approx(got_c[0], abs=1e-4)


@pytest.mark.slow  # the pool -> pretrain -> finetune pipeline it reads (36 s): make test-slow
def test_lora_trains_the_added_token_embeddings(polar_runs, tiny_model_ref):
    from prefalign.models.hub import load_seq_cls

    base = load_seq_cls(tiny_model_ref, dtype="float32").get_input_embeddings().weight
    trained = load_seq_cls(str(polar_runs / "pretrain" / "model"), dtype="float32").get_input_embeddings().weight
    assert trained.shape[0] == base.shape[0] + 2
    assert torch.equal(trained[: base.shape[0]], base)  # the old vocabulary is untouched by LoRA
    assert trained[-2:].norm() > 0


@pytest.mark.slow  # the pool -> pretrain -> finetune pipeline it reads (36 s): make test-slow
def test_identical_to_reference_scores_highest_after_fine_tuning(polar_runs):
    """Unseen prompts: the candidate equal to the reference must outscore every other candidate. The pretrained
    model (3 steps on a random-policy pool) is the control that shows the check can fail."""
    assert identical_wins(polar_runs / "finetune" / "model") >= 18
    assert identical_wins(polar_runs / "pretrain" / "model") < 18


@pytest.mark.slow  # the pool -> pretrain -> finetune pipeline it reads (36 s): make test-slow
def test_scorer_needs_a_reference(polar_runs):
    from reward_models.scorers import load_scorer

    scorer = load_scorer("polar", model=str(polar_runs / "finetune" / "model"), dtype="float32")
    with pytest.raises(UserError, match="score_with_reference"):
        scorer.score([U("What is 2 + 2?")], [A("4")])
    with pytest.raises(UserError, match="reference 0 is missing"):
        scorer.score_with_reference([U("What is 2 + 2?")], [A("4")], [None])
    long_ref = " ".join(["four"] * 200)
    scores = scorer.score_with_reference([U("What is 2 + 2?")] * 2, [A("4"), A("5")], [long_ref, "4"])
    assert math.isnan(scores[0]) and math.isfinite(scores[1])
    assert scorer.failures["too_long_reference"] == 1


def test_a_model_without_polar_tokens_is_refused(tiny_model_ref, tmp_path):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from prefalign.models.hub import resolve
    from reward_models.scorers import load_scorer

    with pytest.raises(UserError, match="not a reward model"):  # a chat model: no head, no POLAR tokens
        load_scorer("polar", model=tiny_model_ref, dtype="float32")
    rm = tmp_path / "rm"  # a reward model, but not a POLAR one
    AutoModelForSequenceClassification.from_pretrained(resolve(tiny_model_ref), num_labels=1).save_pretrained(rm)
    AutoTokenizer.from_pretrained(resolve(tiny_model_ref)).save_pretrained(rm)
    with pytest.raises(UserError, match="not a POLAR reward model"):
        load_scorer("polar", model=str(rm), dtype="float32")


@pytest.mark.slow  # the pool -> pretrain -> finetune pipeline it reads (36 s): make test-slow
def test_bench_scores_suite_pairs_against_their_references(polar_runs, tmp_path):
    from leaderboards.runner import BenchSettings, run_benchmark
    from preference_data.suite import build_suite, with_references
    from reward_models.scorers import load_scorer

    scorer = load_scorer("polar", model=str(polar_runs / "finetune" / "model"), dtype="float32")
    suite = build_suite(n_per_family=3)
    settings = BenchSettings(save=False, use_cache=False, progress=False)
    record = run_benchmark("suite", scorer, settings, pairs=with_references(suite, suite.train_pairs[:6]))
    assert record.scorer["kind"] == "reference" and record.counts["examples"] == 6
    with pytest.raises(UserError, match="no reference answer"):
        run_benchmark("suite", scorer, settings, pairs=suite.train_pairs[:2])
    # suite references: score() finds the task's reference by prompt (online training with the gold answer)
    by_suite = load_scorer(
        "polar", model=str(polar_runs / "finetune" / "model"), dtype="float32", references="suite", suite_per_family=3
    )
    p = suite.train_pairs[0]
    ref = with_references(suite, [p])[0].attributes["reference"]
    assert by_suite.score([p.prompt], [p.chosen]) == scorer.score_with_reference([p.prompt], [p.chosen], [ref])


@pytest.mark.slow  # the pool -> pretrain -> finetune pipeline it reads (36 s): make test-slow
def test_compare_reports_intervals_paired_differences_and_cost(polar_runs, tmp_path, capsys):
    out = tmp_path / "compare.json"
    ft, pre = polar_runs / "finetune" / "model", polar_runs / "pretrain" / "model"
    argv = ["rm", "compare", "--scorer", f"ft=polar:{ft}", "--scorer", f"pre=polar:{pre}", "--suite-per-family", "3"]
    assert main([*argv, "--bootstrap", "200", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    ft_r, pre_r = result["scorers"]["ft"], result["scorers"]["pre"]
    assert result["pairs"] > 0 and ft_r["kind"] == "reference" and ft_r["seconds_per_pair"] > 0
    assert ft_r["interval"][0] <= ft_r["accuracy"] <= ft_r["interval"][1]
    d = pre_r["minus_ft"]
    assert d["difference"] == pytest.approx(pre_r["accuracy"] - ft_r["accuracy"])
    assert d["interval"][0] <= d["difference"] <= d["interval"][1]
    assert set(ft_r["by_family"]) <= {"arithmetic", "list_ops", "formatting", "extractive_qa", "safety", "short_answer"}
    match = ft_r["by_reference_match"]
    assert set(match) <= {"chosen_is_reference", "chosen_differs"}
    assert sum(v["pairs"] for v in match.values()) == result["pairs"]
    assert "paired 95% interval" in capsys.readouterr().out
    from reward_models.compare import ScorerSpec

    with pytest.raises(UserError, match="LABEL=SPEC"):
        ScorerSpec.parse(str(ft))


@pytest.mark.slow  # the pool -> pretrain -> finetune pipeline it reads (36 s): make test-slow
def test_bench_reads_a_reference_column_in_trl_and_rm_bench_files(polar_runs, tmp_path):
    from leaderboards.runner import BenchSettings, run_benchmark
    from reward_models.scorers import load_scorer

    scorer = load_scorer("polar", model=str(polar_runs / "finetune" / "model"), dtype="float32")
    settings = BenchSettings(save=False, use_cache=False, progress=False)
    trl = tmp_path / "pairs.jsonl"
    trl.write_text(
        "".join(
            json.dumps(
                {"prompt": r["prompt"], "chosen": r["chosen"], "rejected": r["rejected"], "reference": r["reference"]}
            )
            + "\n"
            for r in toy_rows(4, 3)
        )
    )
    record = run_benchmark("pairs", scorer, dataclasses.replace(settings, data=str(trl)))
    assert record.counts["examples"] == 4 and record.scorer["kind"] == "reference"
    rmb = tmp_path / "chat_filtered.json"
    rows = [
        {
            "id": i,
            "prompt": r["prompt"],
            "chosen": [r["chosen"]] * 3,
            "rejected": [r["rejected"]] * 3,
            "reference": r["reference"],
        }
        for i, r in enumerate(toy_rows(3, 4))
    ]
    rmb.write_text(json.dumps(rows))
    record = run_benchmark("rm-bench", scorer, dataclasses.replace(settings, data=str(rmb)))
    assert record.counts["examples"] == 3
    for r in rows:
        del r["reference"]
    rmb.write_text(json.dumps(rows))
    with pytest.raises(UserError, match="no reference answer"):
        run_benchmark("rm-bench", scorer, dataclasses.replace(settings, data=str(rmb)))
