"""Stage 1: readers, format adapters (fixtures and real files), pair builders, splits, data sources."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from prefalign.config import build
from prefalign.errors import UserError
from preference_data.pairing import build_pairs
from preference_data.records import Message, PreferencePair, RatedResponses
from preference_data.sources import DataConfig, load, load_pairs, read_records
from preference_data.splits import split_of


def write_jsonl(path: Path, rows: list) -> str:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return str(path)


def user(t: str) -> dict:
    return {"role": "user", "content": t}


def asst(t: str) -> dict:
    return {"role": "assistant", "content": t}


# --- TRL formats --------------------------------------------------------------------------------------


def test_trl_standard_explicit_prompt(tmp_path):
    src = write_jsonl(tmp_path / "a.jsonl", [{"prompt": "What is 2+2?", "chosen": "4", "rejected": "5", "margin": 1.5}])
    (pair,), rep = read_records(src)
    assert pair.prompt == [Message("user", "What is 2+2?")]
    assert pair.chosen == [Message("assistant", "4")] and pair.rejected == [Message("assistant", "5")]
    assert pair.margin == 1.5 and rep.details["format"] == "trl"


def test_trl_standard_implicit_prompt(tmp_path):
    src = write_jsonl(tmp_path / "a.jsonl", [{"chosen": "The sky is blue today.", "rejected": "The sky is green."}])
    (pair,), _ = read_records(src)
    assert pair.prompt[0].content == "The sky is"
    assert pair.chosen[0].content == "blue today." and pair.rejected[0].content == "green."


def test_trl_conversational_explicit_and_implicit(tmp_path):
    explicit = {"prompt": [user("hi")], "chosen": [asst("hello!")], "rejected": [asst("go away")]}
    implicit = {
        "chosen": [user("a"), asst("b"), user("c"), asst("good")],
        "rejected": [user("a"), asst("b"), user("c"), asst("bad")],
    }
    src = write_jsonl(tmp_path / "c.jsonl", [explicit, implicit])
    (p1, p2), rep = read_records(src)
    assert p1.prompt == [Message("user", "hi")] and p1.chosen == [Message("assistant", "hello!")]
    assert [m.content for m in p2.prompt] == ["a", "b", "c"]
    assert p2.chosen == [Message("assistant", "good")] and p2.rejected == [Message("assistant", "bad")]
    assert rep.dropped_total == 0


def test_bad_rows_are_counted_with_line_numbers(tmp_path):
    rows = [
        {"prompt": "q1", "chosen": "a", "rejected": "b"},  # line 1 ok
        '{"prompt": "q2", "chosen": "a", "rejected": ',  # line 2 malformed
        {"prompt": "q3", "chosen": "", "rejected": "b"},  # line 3 empty chosen
        {"prompt": "q4", "chosen": "same", "rejected": "same"},  # line 4 identical
        {"prompt": "q5", "chosen": 3, "rejected": "b"},  # line 5 wrong type
        {"prompt": "q6", "rejected": "b"},  # line 6 missing field
        "[1, 2]",  # line 7 not an object
    ]
    path = tmp_path / "bad.jsonl"
    write_jsonl(path, rows)
    with open(path, "ab") as f:
        f.write(b'{"prompt": "q8", "chosen": "\xff\xfe", "rejected": "x"}\n')  # line 8 undecodable
    records, rep = read_records(str(path), fmt="trl")
    assert len(records) == 1 and rep.rows_read == 8
    assert dict(rep.dropped) == {
        "malformed_json": 1,
        "empty_field": 1,
        "identical_pair": 1,
        "wrong_type": 1,
        "missing_field": 1,
        "not_an_object": 1,
        "undecodable_bytes": 1,
    }
    assert rep.examples["malformed_json"] == ["2"] and rep.examples["empty_field"] == ["3"]
    assert rep.examples["identical_pair"] == ["4"] and rep.examples["undecodable_bytes"] == ["8"]
    text = "\n".join(rep.lines())
    assert "malformed_json: 1 (lines 2)" in text


def test_unknown_format_and_missing_file(tmp_path):
    src = write_jsonl(tmp_path / "x.jsonl", [{"foo": 1}])
    with pytest.raises(UserError, match="cannot tell the data format"):
        read_records(src)
    with pytest.raises(UserError, match="does not exist"):
        read_records(str(tmp_path / "nope.jsonl"))


# --- HH, UltraFeedback, HelpSteer, FineGrained --------------------------------------------------------


def test_hh_transcripts(tmp_path):
    row = {
        "chosen": "\n\nHuman: hi\n\nAssistant: hello\n\nHuman: how are you?\n\nAssistant: fine, thanks",
        "rejected": "\n\nHuman: hi\n\nAssistant: hello\n\nHuman: how are you?\n\nAssistant: no",
    }
    bad = {"chosen": "\n\nHuman: x\n\nAssistant: y", "rejected": "\n\nHuman: z\n\nAssistant: w"}
    path = tmp_path / "hh.jsonl.gz"
    path.write_bytes(gzip.compress((json.dumps(row) + "\n" + json.dumps(bad) + "\n").encode()))
    (pair,), rep = read_records(str(path))
    assert [m.role for m in pair.prompt] == ["user", "assistant", "user"]
    assert pair.chosen == [Message("assistant", "fine, thanks")] and pair.rejected[0].content == "no"
    assert rep.dropped == {"no_shared_prompt": 1} and rep.examples["no_shared_prompt"] == ["2"]


def test_ultrafeedback_and_pair_builders(tmp_path):
    row = {
        "instruction": "Name a colour.",
        "source": "uf",
        "completions": [
            {"response": "Red.", "overall_score": 8, "annotations": {"helpfulness": {"Rating": "5"}}},
            {
                "response": "Blue, a calm and deep colour that many people like a lot.",
                "overall_score": 6,
                "annotations": {"helpfulness": {"Rating": "N/A"}},
            },
            {"response": "I don't know.", "overall_score": 2, "annotations": {"helpfulness": {"Rating": "1"}}},
            {"response": "", "overall_score": 9},
        ],
    }
    tie = {
        "instruction": "tie",
        "completions": [{"response": "a", "overall_score": 5}, {"response": "b", "overall_score": 5}],
    }
    src = write_jsonl(tmp_path / "uf.jsonl", [row, tie])
    records, rep = read_records(src)
    assert all(isinstance(r, RatedResponses) for r in records) and len(records[0].responses) == 3
    assert rep.dropped == {"empty_completion": 1}
    assert records[0].scores[1] == {"overall_score": 6.0}  # "N/A" ratings are not scores
    mm = build_pairs(records, "max_min", "overall_score", report=rep)
    assert len(mm) == 1 and mm[0].chosen[0].content == "Red." and mm[0].rejected[0].content == "I don't know."
    # the rating gap is kept as an attribute, never as the pair's margin (a BT margin of 6 would dominate the loss)
    assert mm[0].margin is None and mm[0].attributes["rating_gap"] == 6.0 and rep.dropped["tie"] == 1
    second = build_pairs(records[:1], "max_second")
    assert second[0].rejected[0].content.startswith("Blue")
    rnd = build_pairs(records[:1], "max_random", seed=3)
    assert rnd[0].chosen[0].content == "Red." and rnd[0].rejected[0].content != "Red."
    # a strong length penalty makes the short answer the winner and the long one the loser
    lp = build_pairs(records[:1], "length_penalized", length_alpha=100.0)
    assert lp[0].rejected[0].content.startswith("Blue")


def test_helpsteer_groups_rows_by_prompt(tmp_path):
    rows = [
        {
            "prompt": "p1",
            "response": "r1",
            "helpfulness": 4,
            "correctness": 4,
            "coherence": 4,
            "complexity": 1,
            "verbosity": 1,
        },
        {
            "prompt": "p1",
            "response": "r2",
            "helpfulness": 1,
            "correctness": 2,
            "coherence": 3,
            "complexity": 1,
            "verbosity": 1,
        },
        {"prompt": "p2", "response": "only one", "helpfulness": 3},
    ]
    src = write_jsonl(tmp_path / "hs.jsonl", rows)
    records, rep = read_records(src)
    assert len(records) == 1 and records[0].scores[0]["helpfulness"] == 4.0
    assert rep.dropped == {"fewer_than_two_responses": 1}
    pairs = build_pairs(records, objective="helpfulness")
    assert pairs[0].chosen[0].content == "r1"


def test_finegrained_fixture(tmp_path):
    row = {
        "question": "Q?",
        "passages": [["Title", "Title\n\nSome text."]],
        "gold": "g",
        "prediction 1": "p1",
        "prediction 2": "p2",
        "prediction 3": "p3",
        "prediction 4": "p4",
        "feedback": {},
        "preference": [1, 2, 0, 1, 1, 2],
    }
    path = tmp_path / "fg.json"
    path.write_text(json.dumps([row]))
    pairs, rep = read_records(str(path))
    assert [p.attributes["compared"] for p in pairs] == ["1>2", "3>1", "2>3", "2>4", "4>3"]
    assert rep.dropped == {"tie": 1} and "Some text." in pairs[0].prompt[0].content


def test_finegrained_labels_by_hand(tmp_path):
    from preference_data.formats import finegrained_labels

    text = "0123456789" * 10  # 100 characters
    errors = [
        {"error type": "Irrelevant", "start": 0, "end": 20},
        {"error type": "Redundant", "start": 10, "end": 30},  # overlaps: the union 0..30 counts once
        {"error type": "Unverifiable", "start": 50, "end": 60},
    ]
    labels = finegrained_labels(text, errors, [{"passage_id": 1}, {"passage_id": 2}])
    assert labels == pytest.approx({"relevance": 0.7, "factuality": 0.9, "completeness": 1 / 3})
    assert finegrained_labels(text, [], []) == {"relevance": 1.0, "factuality": 1.0, "completeness": 1.0}
    base = {"question": "Q?", "passages": [["T", "T\n\ntext"]], "preference": [1] * 6}
    base |= {f"prediction {i}": f"p{i} " + text for i in range(1, 5)}
    rows = [
        base | {"feedback": {"errors": errors, "missing-info": [], "corrected-prediction": "fixed"}},
        base | {"question": "Q2?", "feedback": {"errors": [], "missing-info": [], "corrected-prediction": ""}},
        base | {"question": "Q3?", "feedback": {"errors": [{"error type": "Typo", "start": 0, "end": 1}]}},
        base | {"question": "Q4?", "feedback": {"errors": [{"error type": "Irrelevant", "start": 5, "end": 500}]}},
        base | {"question": "Q5?", "feedback": {"corrected-prediction": "p1 " + text}},
    ]
    path = tmp_path / "fg.json"
    path.write_text(json.dumps(rows))
    records, rep = read_records(str(path), "finegrained_labels")
    assert [r.attributes["responses"] for r in records] == [["corrected-prediction", "prediction 1"], ["prediction 1"]]
    assert records[0].scores[0] == {"relevance": 1.0, "factuality": 1.0, "completeness": 1.0}
    assert records[0].scores[1]["relevance"] == pytest.approx(1 - 30 / 103)  # prediction 1 is "p1 " + text
    assert rep.dropped == {"wrong_type": 1, "bad_span": 1, "identical_pair": 1}
    assert "Typo" in str(rep.to_dict()) and "not inside prediction 1" in str(rep.to_dict())
    assert read_records(str(path))[1].details["format"] == "finegrained"  # never detected: the pairs stay the default


def test_parquet(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist([{"prompt": "p", "chosen": "a", "rejected": "b"}]), tmp_path / "x.parquet")
    (pair,), _ = read_records(str(tmp_path / "x.parquet"))
    assert pair.chosen[0].content == "a"


# --- real files in ../shared/data ---------------------------------------------------------------------

HH_FILES = {
    "hh-rlhf/helpful-base/test.decontaminated.jsonl.gz": 2219,
    "hh-rlhf/harmless-base/test.decontaminated.jsonl.gz": 2303,
    "hh-rlhf/helpful-online/test.jsonl.gz": 1137,
    "hh-rlhf/helpful-rejection-sampled/test.jsonl.gz": 2749,
}


@pytest.mark.parametrize("rel", sorted(HH_FILES))
def test_real_hh_files(shared_data, rel):
    records, rep = read_records(str(shared_data / rel))
    assert rep.rows_read == HH_FILES[rel]
    assert len(records) + rep.dropped_total == rep.rows_read  # every row is kept or counted
    assert len(records) > 0.98 * rep.rows_read
    assert all(p.prompt[-1].role == "user" and p.chosen[0].role == "assistant" for p in records)


def test_real_finegrained(shared_data):
    pairs, rep = read_records(str(shared_data / "finegrained-rlhf/qa_feedback/dev_feedback.json"))
    assert rep.rows_read == 500
    assert len(pairs) + rep.dropped["tie"] == 3000  # 6 labels per question: pairs or ties
    assert rep.dropped["tie"] == 384
    rated, rep = read_records(str(shared_data / "finegrained-rlhf/qa_feedback/dev_feedback.json"), "finegrained_labels")
    assert len(rated) == 494 and rep.dropped == {"identical_pair": 6}  # corrected == prediction 1
    assert sum(len(r.responses) == 1 for r in rated) == 13  # the whole answer irrelevant: no corrected text
    first = [r.scores[-1] for r in rated]
    assert [sum(s[k] < 1 for s in first) for k in ("relevance", "factuality", "completeness")] == [417, 198, 379]


# --- splits and sources -------------------------------------------------------------------------------


def test_hash_split_is_deterministic_and_keeps_prompts_together(tmp_path):
    from preference_data.splits import unit_hash

    # pinned values: the split of a key never changes across machines, runs or versions (sha256, not hash())
    keys = ["abc", "q1", "q2", "hello", "prompt 7", "x"]
    assert [round(unit_hash(k, 1), 6) for k in keys] == [0.20516, 0.751745, 0.647713, 0.116824, 0.471742, 0.888616]
    thirds = (1 / 3, 1 / 3, 1 / 3)
    assert [split_of(k, thirds, seed=1) for k in keys] == ["train", "test", "dev", "train", "dev", "test"]
    assert [split_of(k, thirds, seed=2) for k in keys] == ["train", "dev", "train", "train", "dev", "dev"]
    names = [split_of(str(i)) for i in range(4000)]
    assert 0.87 < names.count("train") / 4000 < 0.93
    rows = [{"prompt": f"q{i % 50}", "chosen": f"a{i}", "rejected": f"b{i}"} for i in range(400)]
    src = write_jsonl(tmp_path / "s.jsonl", rows)
    splits = {}
    for name in ("train", "dev", "test"):
        pairs = load(build(DataConfig, {"source": src, "split": name, "split_fractions": [0.6, 0.2, 0.2]})).pairs
        splits[name] = {p.prompt[0].content for p in pairs}
    assert not (splits["train"] & splits["test"]) and not (splits["train"] & splits["dev"])
    assert sum(len(v) for v in splits.values()) == 50


def test_no_usable_pairs_is_a_clear_error(tmp_path):
    src = write_jsonl(tmp_path / "e.jsonl", [{"prompt": "q", "chosen": "x", "rejected": "x"}])
    with pytest.raises(UserError, match=r"(?s)no usable preference pairs.*identical_pair: 1 \(lines 1\)"):
        load_pairs(build(DataConfig, {"source": src, "split": "all"}))


def test_pair_record_roundtrip(tmp_path):
    p = PreferencePair(
        [Message("user", "q")],
        [Message("assistant", "a")],
        [Message("assistant", "b")],
        attributes={"family": "f"},
        source="s",
    )
    src = write_jsonl(tmp_path / "r.jsonl", [p.to_dict()])
    (q,), _ = read_records(src)
    assert q.id == p.id and q.attributes == {"family": "f"} and q.source == "s"
    assert p.swapped().chosen == p.rejected


def test_format_detection_says_what_it_chose_and_why(tmp_path):
    src = write_jsonl(tmp_path / "p.jsonl", [{"prompt": "Say hi.", "meta": {"k": 1}}])
    _, rep = read_records(src)
    assert rep.details["format"] == "prompts" and "no 'chosen'" in rep.details["format_why"]
    assert "format: prompts (detected: rows have 'prompt' and no 'chosen')" in rep.lines()


def test_labelled_comparisons_are_never_read_as_prompt_only(tmp_path):
    """Auto-J-style rows {prompt, response 1, response 2, label} used to become prompt-only records with every
    label lost; detection now refuses and names the fields it would ignore."""
    from prefalign.errors import UserError

    rows = [{"prompt": "Which is better?", "response 1": "A good answer.", "response 2": "Bad.", "label": 0}]
    src = write_jsonl(tmp_path / "autoj.jsonl", rows)
    with pytest.raises(UserError) as e:
        read_records(src)
    msg = str(e.value)
    assert "'response 1', 'response 2', 'label'" in msg and "format: prompts" in msg and "line 1" in msg
    records, _ = read_records(src, "prompts")  # asked for explicitly: read as prompts
    assert len(records) == 1


def test_trl_score_columns_become_a_rating_gap_not_a_margin(tmp_path):
    src = write_jsonl(
        tmp_path / "ufb.jsonl",
        [{"prompt": "Q?", "chosen": "Yes.", "rejected": "No.", "score_chosen": 8.0, "score_rejected": 2.0}],
    )
    (pair,), rep = read_records(src)
    assert pair.margin is None and pair.attributes["rating_gap"] == 6.0 and rep.details["format"] == "trl"


def test_duplicate_rows_name_both_lines_in_every_format(tmp_path):
    from preference_data.records import PreferencePair

    p = PreferencePair(
        [Message("user", "Q?")],
        [Message("assistant", "A.")],
        [Message("assistant", "B.")],
        attributes={"family": "x"},
        source="s",
    )
    q = PreferencePair(
        [Message("user", "Other?")],
        [Message("assistant", "C.")],
        [Message("assistant", "D.")],
        attributes={"family": "x"},
        source="s",
    )
    src = write_jsonl(tmp_path / "dump.jsonl", [p.to_dict(), q.to_dict(), p.to_dict()])
    records, rep = read_records(src)
    assert rep.details["format"] == "records" and len(records) == 2
    assert rep.examples["duplicate"] == ["3 (same as line 1)"]
    prompts = write_jsonl(tmp_path / "prompts.jsonl", [{"prompt": "Hi."}, {"prompt": "Yo."}, {"prompt": "Hi."}])
    _, rep = read_records(prompts)
    assert rep.examples["duplicate"] == ["3 (same as line 1)"]


@pytest.mark.parametrize("dev_fraction", [0.0, 0.25])
def test_suite_hard_negatives_join_the_training_split_only(dev_fraction):
    base = {"source": "suite", "suite_per_family": 20, "suite_dev_fraction": dev_fraction}
    plain = {split: load_pairs(build(DataConfig, {**base, "split": split}))[0] for split in ("train", "test")}
    hard = {
        split: load_pairs(build(DataConfig, {**base, "split": split, "suite_hard_negatives": 1}))[0]
        for split in ("train", "test")
    }
    assert [p.to_dict() for p in hard["test"]] == [p.to_dict() for p in plain["test"]]
    n = len(plain["train"])
    assert [p.to_dict() for p in hard["train"][:n]] == [p.to_dict() for p in plain["train"]]
    extra = hard["train"][n:]
    assert extra and {p.attributes["corruption"] for p in extra} <= {"wrong_value", "violated_constraint"}
    train_prompts = {p.prompt[-1].content for p in plain["train"]}
    assert {p.prompt[-1].content for p in extra} <= train_prompts
    with pytest.raises(UserError, match="suite_hard_negatives: must be 0 or more"):
        build(DataConfig, {**base, "suite_hard_negatives": -1})
