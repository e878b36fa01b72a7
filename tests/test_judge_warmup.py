"""Format warm-up targets written from gold grades, multiclass rejection sampling, the meta-RM's data and its
BCE training, and a warm-up run that a rejective fine-tuning run starts from."""

from __future__ import annotations

import json
import re

import pytest

from prefalign.models.hub import load_tokenizer
from preference_data.records import Message, PreferencePair
from reward_models.generative.parse import parse_grm_scores, parse_think_answer
from reward_models.generative.warmup import grm_score, grm_targets, strength, think_target
from reward_models.judge_train import SCORER_OPTIONS, JudgeSection, template_examples, think_examples

TINY = "builtin:tiny-llama"


def _graded(i: int, chosen: float = 1.0, rejected: float = 0.0, reason: str = "gives 7 instead of 8") -> PreferencePair:
    g = {"correctness": 1.0, "instruction_following": 1.0, "conciseness": 1.0, "safety": 1.0, "refused": False}
    return PreferencePair(
        [Message("user", f"What is {i} + {i}?")],
        [Message("assistant", f"{2 * i}")],
        [Message("assistant", f"{2 * i + 1}")],
        attributes={
            "gold_chosen": g | {"overall": chosen},
            "gold_rejected": g | {"correctness": 0.0, "overall": rejected},
            "reason": reason,
        },
        id=f"g{i}",
    )


def _suite_pairs(n: int = 12):
    """A small suite's pairs with their tasks as checks read them."""
    from preference_data.sources import DataConfig, load_pairs, suite_tasks

    cfg = DataConfig(source="suite", split="train", suite_per_family=n)
    return load_pairs(cfg)[0], suite_tasks(cfg)


def test_grm_targets_parse_back_to_the_gold_scores():
    pairs, tasks = _suite_pairs()
    for p in pairs:
        c, r = grm_targets(tasks[p.attributes["task_id"]], p.chosen[0].content, p.rejected[0].content)  # type: ignore[misc]
        assert parse_grm_scores(c, 1).scores == (grm_score(p.attributes["gold_chosen"]),)
        assert parse_grm_scores(r, 1).scores == (grm_score(p.attributes["gold_rejected"]),)
        assert c.startswith("Specific Criteria: correctness (0.4)") and "\nAnalysis: " in c
    assert [grm_score({"overall": v}) for v in (0.0, 0.05, 0.5, 0.9735, 1.0, 1.7, -1.0)] == [1, 1, 6, 10, 10, 10, 1]
    # no target where the rejected response is not worse: the verdict would not follow from the check
    p = pairs[0]
    task = tasks[p.attributes["task_id"]]
    assert grm_targets(task, p.chosen[0].content, p.chosen[0].content) is None
    assert think_target(task, p.rejected[0].content, p.chosen[0].content, False, "binary") is None


@pytest.mark.parametrize(("gap", "want"), [(1.0, 3), (0.75, 3), (0.7499, 2), (0.15, 2), (0.1499, 1), (0.0, 1)])
def test_strength_cuts(gap, want):
    assert strength({"overall": 1.0}, {"overall": 1.0 - gap}) == want


@pytest.mark.parametrize("chosen_is_b", [False, True])
def test_think_targets_answer_for_the_chosen_position(chosen_is_b):
    pairs, tasks = _suite_pairs()
    for pair in pairs:
        task, c, r = tasks[pair.attributes["task_id"]], pair.chosen[0].content, pair.rejected[0].content
        binary = think_target(task, c, r, chosen_is_b, "binary")
        multi = think_target(task, c, r, chosen_is_b, "multiclass")
        assert binary is not None and multi is not None
        want = "B" if chosen_is_b else "A"
        assert parse_think_answer(binary, "binary").label == want
        v = parse_think_answer(multi, "multiclass")
        s = strength(pair.attributes["gold_chosen"], pair.attributes["gold_rejected"])
        assert v.label == want and v.strength == (s if chosen_is_b else -s)


def test_template_examples_skip_and_count_pairs_without_a_task():
    pairs, tasks = _suite_pairs()
    pairs = pairs[:4] + [
        PreferencePair([Message("user", "q")], [Message("assistant", "a")], [Message("assistant", "b")])
    ]
    grm, counts = template_examples(pairs, JudgeSection(kind="grm", examples="template"), tasks)
    assert counts == {"pairs": 5, "no_check": 1, "not_worse": 0, "pairs_kept": 4} and len(grm) == 8
    think, counts = template_examples(pairs, JudgeSection(kind="think", examples="template", seed=3), tasks)
    assert counts["no_check"] == 1 and len(think) == 8  # both orders of every pair with a task
    for e, (p, flip) in zip(think, [(p, f) for p in pairs[:4] for f in (False, True)], strict=True):
        a = e.message.split("[The Start of Assistant A's Response]\n")[1].split("\n[The End of Assistant A")[0]
        assert a == (p.rejected if flip else p.chosen)[0].content
        assert parse_think_answer(e.completion, "binary").label == ("B" if flip else "A")
    one, _ = template_examples(pairs, JudgeSection(kind="think", examples="template", orders="random", seed=3), tasks)
    assert len(one) == 4
    assert JudgeSection(kind="pair_pm", examples="template").check()


def test_grm_from_prompt_examples_work_from_the_query_then_read_each_response():
    """principles: from_prompt: one example of the query's criteria and work per distinct query, whose message
    holds no response; then one per response, its conversation holding that work before the response, its target
    the reading and the gold score."""
    from reward_models.generative.scorers import GRMScorer

    pairs, tasks = _suite_pairs()
    pairs = pairs[:6] + pairs[:1]  # a repeated query gets its work once
    judge = JudgeSection(kind="grm", examples="template", principles="from_prompt")
    examples, counts = template_examples(pairs, judge, tasks)
    firsts = [e for e in examples if isinstance(e.message, str)]
    readings = [e for e in examples if not isinstance(e.message, str)]
    assert counts["pairs_kept"] == 7 and len(firsts) == 6 and len(readings) == 14
    for e, p in zip(firsts, pairs[:6], strict=True):
        assert e.message == GRMScorer.principles_message(p.prompt) and "Work: " in e.completion
        assert p.chosen[0].content not in e.message and p.rejected[0].content not in e.message
    for i, p in enumerate(pairs):
        sides = ((p.chosen, "gold_chosen"), (p.rejected, "gold_rejected"))
        for e, (side, key) in zip(readings[2 * i : 2 * i + 2], sides, strict=True):
            first, work, shown = e.message
            assert first["content"] == GRMScorer.principles_message(p.prompt) and work["role"] == "assistant"
            assert work["content"] == firsts[i % 6].completion and side[0].content in shown["content"]
            assert parse_grm_scores(e.completion, 1).scores == (grm_score(p.attributes[key]),)
    # the layout is built for the grm warm-up only
    assert JudgeSection(kind="think", examples="template", principles="from_prompt").check()
    assert JudgeSection(kind="grm", examples="sampled", principles="from_prompt").check()


def test_a_grm_read_by_rule_warms_up_on_the_work_alone():
    """judge.read: rule: the warm-up writes the query's work once per distinct query and no reading (the rule reads
    the responses), and the held-out evaluation scores through the scorer with read: rule."""
    pairs, tasks = _suite_pairs()
    judge = JudgeSection(kind="grm", examples="template", principles="from_prompt", read="rule")
    examples, counts = template_examples(pairs[:6] + pairs[:1], judge, tasks)
    assert counts["pairs_kept"] == 7 and len(examples) == 6 and all(isinstance(e.message, str) for e in examples)
    assert SCORER_OPTIONS["grm"](judge)["read"] == "rule"
    assert any("read: rule" in p for p in JudgeSection(kind="grm", examples="template", read="rule").check())


def test_a_judge_evaluated_with_the_calculator_names_it_to_its_scorer():
    for kind in ("grm", "think"):
        judge = JudgeSection(kind=kind, examples="template", tools="calculator")
        assert not judge.check() and SCORER_OPTIONS[kind](judge)["tools"] == "calculator"
    assert "pair_pm writes one letter" in " ".join(JudgeSection(kind="pair_pm", tools="calculator").check())


def test_multiclass_sampling_keeps_only_the_gold_strength(monkeypatch):
    pairs = [_graded(i, chosen=1.0, rejected=0.0) for i in range(4)]  # gap 1: strength 3

    def sample(model, tokenizer, messages, judge, prefix):
        out = []
        for m in messages:
            a = m.split("[The Start of Assistant A's Response]\n")[1].split("\n")[0]
            sign = -1 if int(a) % 2 == 0 else 1  # chosen at A: negative
            out.append([f"</think><answer>{sign * 3}</answer>", f"</think><answer>{sign * 1}</answer>", "none"])
        return out

    monkeypatch.setattr("reward_models.judge_train.sample_outputs", sample)
    examples, counts = think_examples(pairs, JudgeSection(kind="think", form="multiclass", samples=3), None, None)
    assert counts["correct"] == 4 and counts["abstained"] == 4 and counts["ungraded"] == 0
    assert all(e.completion.endswith(("<answer>3</answer>", "<answer>-3</answer>")) for e in examples)


@pytest.mark.slow  # a whole run: its siblings in the slow tier (kill, resume, real models)
def test_a_warmup_run_is_a_start_for_rejective_fine_tuning(tmp_path, tiny_model_ref, capsys):
    """Warm-up on gold-written critiques (real SFT on the tiny model), then a sampled run loads its adapter."""
    from align.cli.main import main

    data = "{source: suite, suite_per_family: 6, split: train, limit: 12}"
    train = "{method: lora, lr: 2.0e-3, epochs: 1, batch_size: 8, precision: fp32, max_length: 1024, compile: false}"
    warm = tmp_path / "warm.yaml"
    warm.write_text(
        f"kind: judge_train\nmodel: {TINY}\noutput_dir: {tmp_path / 'warm'}\n"
        f"judge: {{kind: grm, examples: template}}\ndata: {data}\neval: {{split: none}}\ntrain: {train}\n"
    )
    assert main(["rm", "train", "--config", str(warm)]) == 0
    report = json.loads((tmp_path / "warm" / "report.json").read_text())
    assert report["examples"]["kept"] == 24 and report["examples"]["no_check"] == 0
    assert (tmp_path / "warm" / "model" / "adapter_config.json").exists()
    rft = tmp_path / "rft.yaml"
    rft.write_text(
        f"kind: judge_train\nmodel: {tmp_path / 'warm' / 'model'}\noutput_dir: {tmp_path / 'rft'}\n"
        "judge: {kind: grm, samples: 1, max_new_tokens: 4}\n"
        f"data: {data}\neval: {{split: none}}\ntrain: {train}\n"
    )
    # the tiny model cannot write a full critique in 4 tokens: the run loads the adapter, samples, and stops
    capsys.readouterr()
    assert main(["rm", "train", "--config", str(rft)]) != 0
    assert re.search(r"no grm training example left .*'draws': 12", capsys.readouterr().err)


@pytest.mark.slow  # a whole run: its siblings in the slow tier
def test_a_two_turn_grm_warmup_trains_and_is_evaluated_in_its_two_turns(tmp_path, tiny_model_ref, capsys):
    """judge.principles: from_prompt as a user runs it: the warm-up trains on the work and reading examples, and
    the held-out evaluation scores through the scorer with the same principles."""
    from align.cli.main import main

    data = "{source: suite, suite_per_family: 8, suite_dev_fraction: 0.25, split: train, limit: 6}"
    train = "{method: lora, lr: 2.0e-3, epochs: 1, batch_size: 8, precision: fp32, max_length: 1024, compile: false}"
    cfg = tmp_path / "warm.yaml"
    cfg.write_text(
        f"kind: judge_train\nmodel: {TINY}\noutput_dir: {tmp_path / 'warm'}\n"
        "judge: {kind: grm, examples: template, principles: from_prompt, max_new_tokens: 4}\n"
        f"data: {data}\neval: {{split: dev, limit: 3}}\ntrain: {train}\n"
    )
    assert main(["rm", "train", "--config", str(cfg)]) == 0
    report = json.loads((tmp_path / "warm" / "report.json").read_text())
    assert report["examples"]["kept"] == 6 + 2 * 6 and report["judge"]["principles"] == "from_prompt"
    ev = report["eval"]
    # both responses of each pair scored, each read after its query's work: more than one output of at most
    # max_new_tokens (4) per response generated (a one-turn critique would be at most 4)
    assert ev["pairs"] == 3 and ev["cost"]["items"] == 6 and ev["cost"]["generated_tokens_per_item"] > 4
    # an empty held-out split is refused before anything trains, saying how to get one
    cfg.write_text(cfg.read_text().replace("suite_dev_fraction: 0.25, ", ""))
    capsys.readouterr()
    assert main(["rm", "train", "--config", str(cfg)]) != 0
    assert "suite_dev_fraction" in capsys.readouterr().err


def test_meta_rm_trains_with_bce_and_rates_critiques(tmp_path, tiny_model_ref, monkeypatch):
    """`align rm train` with a meta_rm_train config: BCE on labelled critiques (the GRM's sampling is scripted:
    a random tiny model writes no critique), then the saved meta-RM is what a GRM scorer loads."""
    import torch

    from align.cli.main import main
    from preference_data.suite import build_suite, write_suite
    from reward_models.meta_rm import Critique
    from reward_models.model_scorers import ScalarOptions, ScalarScorer

    suite = build_suite(n_per_family=4, seed=0)
    write_suite(suite, tmp_path / "suite")

    def scripted(pairs, cfg, dtype):
        out = []
        for i, _ in enumerate(pairs):
            for j in range(cfg.samples):
                right = (i + j) % 2 == 0
                out.append(
                    Critique(f"judge message {i}", "Score: \\boxed{9}" if right else "Looks bad. \\boxed{2}", right)
                )
        return out

    monkeypatch.setattr("reward_models.meta_rm.sample_critiques", scripted)
    cfg = tmp_path / "meta.yaml"
    cfg.write_text(
        f"kind: meta_rm_train\nmodel: {TINY}\noutput_dir: {tmp_path / 'meta'}\n"
        "critiques: {judge: some/grm, samples: 2}\n"
        f"data: {{source: {tmp_path / 'suite' / 'train_pairs.jsonl'}, split: all, limit: 16}}\n"
        f"eval: {{source: {tmp_path / 'suite' / 'test_pairs.jsonl'}, split: all, limit: 8}}\n"
        "train: {method: full, lr: 3.0e-3, epochs: 4, batch_size: 8, precision: fp32, compile: false, "
        "warmup_ratio: 0.0}\n"
    )
    assert main(["rm", "train", "--config", str(cfg)]) == 0
    report = json.loads((tmp_path / "meta" / "report.json").read_text())
    assert report["examples"] == {"pairs": 16, "critiques": 32, "correct": 16, "too_long": 0, "training_items": 32}
    kept = [json.loads(x) for x in (tmp_path / "meta" / "critiques.jsonl").read_text().splitlines()]
    assert len(kept) == 32 and sum(c["correct"] for c in kept) == 16
    assert set(kept[0]) == {"message", "text", "correct", "pair"}
    ev = report["eval"]
    test_pairs = min(8, len((tmp_path / "suite" / "test_pairs.jsonl").read_text().splitlines()))
    assert ev["critiques"] == 2 * test_pairs and ev["correct_share"] == 0.5
    scorer = ScalarScorer(ScalarOptions(model=report["model_dir"], dtype="float32", normalize=False))
    msg = [[Message("user", "judge message 0")]]
    good = scorer.score(msg, [[Message("assistant", "Score: \\boxed{9}")]])[0]
    bad = scorer.score(msg, [[Message("assistant", "Looks bad. \\boxed{2}")]])[0]
    assert good > bad  # it learned the scripted signal
    assert ev["auc"] == 1.0 and ev["accuracy"] > 0.5
    assert ev["queries"] == test_pairs  # the intervals resample a query's critiques together
    assert ev["auc_ci95"] == [1.0, 1.0] and ev["accuracy_ci95"][0] <= ev["accuracy"] <= ev["accuracy_ci95"][1]
    assert torch.isfinite(torch.tensor([good, bad])).all()


def test_a_within_query_meta_rm_learns_to_rank_one_querys_critiques(tmp_path, tiny_model_ref, monkeypatch):
    """objective: within_query: Bradley-Terry on every (right, wrong) combination inside a group (one pair's
    critiques of one message); a group with one label teaches nothing. The scripted queries differ in how often
    their critiques are right (a pooled signal) and, inside each query, right critiques end with 9."""
    from align.cli.main import main
    from preference_data.suite import build_suite, write_suite
    from reward_models.meta_rm import Critique, within_query_items

    tok = load_tokenizer(TINY)
    group = [Critique("m", "a 9", True, "p0"), Critique("m", "b 2", False, "p0"), Critique("m", "c 9", True, "p0")]
    other = [Critique("m", "d 2", False, "p1"), Critique("n", "e 9", True, "p1")]  # two groups, one label each
    items, too_long = within_query_items(group + other, tok, 512)
    assert too_long == 0 and len(items) == 2  # (a, b) and (c, b): p1's groups hold one label each
    assert all(len(it) == 4 and it[0] == it[2] for it in items)  # the same message on both sides

    suite = build_suite(n_per_family=4, seed=0)
    write_suite(suite, tmp_path / "suite")

    def scripted(pairs, cfg, dtype):
        return [
            Critique(f"judge message {i % 3}", f"Score {j}: \\boxed{{{9 if right else 2}}}", right, p.id)
            for i, p in enumerate(pairs)
            for j in range(cfg.samples)
            for right in [j < 1 + i % 3]
        ]

    monkeypatch.setattr("reward_models.meta_rm.sample_critiques", scripted)
    cfg = tmp_path / "meta.yaml"
    cfg.write_text(
        f"kind: meta_rm_train\nmodel: {TINY}\noutput_dir: {tmp_path / 'meta'}\nobjective: within_query\n"
        "critiques: {judge: some/grm, samples: 4}\n"
        f"data: {{source: {tmp_path / 'suite' / 'train_pairs.jsonl'}, split: all, limit: 12}}\n"
        f"eval: {{source: {tmp_path / 'suite' / 'test_pairs.jsonl'}, split: all, limit: 6}}\n"
        "train: {method: full, lr: 3.0e-3, epochs: 4, batch_size: 8, precision: fp32, compile: false, "
        "warmup_ratio: 0.0}\n"
    )
    assert main(["rm", "train", "--config", str(cfg)]) == 0
    report = json.loads((tmp_path / "meta" / "report.json").read_text())
    assert report["objective"] == "within_query"
    # right critiques per pair cycle 1, 2, 3 of 4: 1*3, 2*2, 3*1 (right, wrong) combinations
    assert report["examples"]["training_items"] == 4 * (3 + 4 + 3)
    ev = report["eval"]
    assert ev["within_query_groups"] == 6 and ev["within_query_auc"] == 1.0  # it ranks inside every query
    bad = tmp_path / "bad.yaml"
    bad.write_text(cfg.read_text().replace("within_query", "inside_query"))
    assert main(["rm", "train", "--config", str(bad)]) == 2


def test_a_meta_rm_of_works_labels_each_work_by_the_rules_reading_of_the_pair(tiny_model_ref, monkeypatch):
    """critiques.read: rule: each pair's query gets `samples` works from the rule-read judge, and work j is correct
    where the rule scores the chosen response strictly above the rejected one against it (a work without a claim,
    or one that prefers the rejected response, is wrong); the message is the judge's first turn."""
    from reward_models.generative.scorers import GRMScorer
    from reward_models.meta_rm import CritiqueSection, sample_critiques

    works = [
        "Work: Start: 2. Add 2: 2 + 2 = 4. So the answer is 4.",  # the chosen answer's value: right
        "Work: I cannot tell.",  # no claim: wrong
        "Work: Start: 2. Add 3: 2 + 3 = 5. So the answer is 5.",  # the rejected answer's value: wrong
    ]
    seen: list = []

    def scripted(self, messages, n, prefix="", items=None):
        seen.append((len(messages), n, prefix))
        return [None if m is None else [works[j].removeprefix(prefix) for j in range(n)] for m in messages]

    monkeypatch.setattr(GRMScorer, "_sample", scripted)
    q = [Message("user", "What is 2 + 2?")]
    pairs = [PreferencePair(q, [Message("assistant", "4")], [Message("assistant", "5")], id="p0")]
    cfg = CritiqueSection(judge=TINY, samples=3, read="rule", tools="calculator", work_prefix="Work:")
    got = sample_critiques(pairs, cfg, "float32")
    assert [(c.text, c.correct) for c in got] == list(zip(works, [True, False, False], strict=True))
    assert {c.message for c in got} == {GRMScorer.principles_message(q)}
    assert seen == [(1, 3, "Work:")]  # the query's works sampled once for both responses, after the given prefix
    assert CritiqueSection(judge="j", work_prefix="Work:").check()  # work options without read: rule are refused


def test_the_meta_rm_learns_from_training_pairs_only(tmp_path, tiny_model_ref, monkeypatch):
    """On the quickstart's suite, every pair a meta-RM sampled critiques of is a training pair (checked by id against
    the suite's dev and test pairs), and a config that points its data at a held-out split is refused."""
    from align.cli.main import main
    from preference_data.suite import build_suite
    from reward_models.meta_rm import Critique

    def scripted(pairs, cfg, dtype):
        return [
            Critique(f"m{i}", "\\\\boxed{9}" if j % 2 else "\\\\boxed{2}", bool(j % 2))
            for i in range(len(pairs))
            for j in range(2)
        ]

    monkeypatch.setattr("reward_models.meta_rm.sample_critiques", scripted)
    suite = "suite_per_family: 12, suite_dev_fraction: 0.25"
    cfg = tmp_path / "meta.yaml"
    cfg.write_text(
        f"kind: meta_rm_train\nmodel: {TINY}\noutput_dir: {tmp_path / 'meta'}\n"
        "critiques: {judge: some/grm, samples: 2}\n"
        f"data: {{source: suite, split: train, {suite}}}\neval: {{split: none}}\n"
        "train: {method: full, lr: 1.0e-3, max_steps: 1, batch_size: 8, precision: fp32, compile: false}\n"
    )
    assert main(["rm", "train", "--config", str(cfg)]) == 0
    seen = set(json.loads((tmp_path / "meta" / "report.json").read_text())["train_pair_ids"])
    s = build_suite(12, seed=0, dev_fraction=0.25, test_fraction=0.2)
    assert seen == {p.id for p in s.train_pairs}
    assert not seen & {p.id for p in s.dev_pairs + s.test_pairs}
    bad = tmp_path / "bad.yaml"
    bad.write_text(cfg.read_text().replace("split: train", "split: dev"))
    assert main(["rm", "train", "--config", str(bad)]) == 2


@pytest.mark.slow  # three judge runs; the kill test (test_kill_resume.py) resumes one at ten random moments
def test_a_judge_run_saves_checkpoints_and_resumes_from_them(tmp_path, tiny_model_ref, capsys):
    """`train.save_every` on a judge run: its checkpoints hold the inner model's adapter (the wrapper's raw state
    dict, with the tied embeddings, cannot be written as safetensors), each marked complete, and `--resume` continues
    from the last one to the same number of steps."""
    from align.cli.main import main
    from prefalign.training.trainer import CHECKPOINT_COMPLETE

    data = "{source: suite, suite_per_family: 6, split: train, limit: 12}"
    train = (
        "{method: lora, lr: 2.0e-3, max_steps: 3, batch_size: 4, save_every: 1, precision: fp32, max_length: 1024, "
        "compile: false}"
    )
    cfg = tmp_path / "think.yaml"
    cfg.write_text(
        f"kind: judge_train\nmodel: {TINY}\noutput_dir: {tmp_path / 'think'}\n"
        f"judge: {{kind: think, examples: template}}\ndata: {data}\neval: {{split: none}}\ntrain: {train}\n"
    )
    assert main(["rm", "train", "--config", str(cfg)]) == 0
    ckpts = tmp_path / "think" / "checkpoints"
    last = max(ckpts.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    assert (last / "adapter_model.safetensors").exists() and (last / CHECKPOINT_COMPLETE).exists()
    import shutil

    shutil.rmtree(last)  # as if killed before the last step's save
    capsys.readouterr()
    assert main(["rm", "train", "--config", str(cfg), "--resume"]) == 0
    assert "continuing from" in capsys.readouterr().out
    assert (last / CHECKPOINT_COMPLETE).exists() and (tmp_path / "think" / "model" / "adapter_config.json").exists()
    # killed after its last step (while saving or evaluating): the resume trains nothing more; the Trainer alone
    # would train a step past the end, since the last step falls inside the epoch (24 examples, 4 per batch)
    assert main(["rm", "train", "--config", str(cfg), "--resume"]) == 0
    assert "checkpoint-3 is the last step (3 of 3): nothing left to train" in capsys.readouterr().out
    steps = [json.loads(x)["step"] for x in (tmp_path / "think" / "metrics.jsonl").read_text().splitlines()]
    assert max(steps) == 3
