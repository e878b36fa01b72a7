"""The generative scorers (grm, think) on the tiny model: the generation engine runs for real, abstentions and
cost are counted; their voting is checked with a scripted judge (fixed outputs in place of the tiny model's
random text, which never follows the answer format), including the position-swap symmetry of `think`."""

from __future__ import annotations

import math
import re

import pytest
import torch

from preference_data.records import Message
from reward_models.scorers import load_scorer

TINY = "builtin:tiny-llama"


def _c(role: str, text: str) -> list[Message]:
    return [Message(role, text)]


PROMPTS = [_c("user", "What is 2 + 2?"), _c("user", "Name a colour.")]
GOOD = [_c("assistant", "4"), _c("assistant", "Blue, the colour of a clear sky.")]
BAD = [_c("assistant", "5, I think, or maybe 6."), _c("assistant", "Seven.")]


def _opts(**kw):
    return {"model": TINY, "dtype": "float32", "max_new_tokens": 6, **kw}


def test_grm_runs_the_engine_and_counts_abstentions_and_cost(tiny_model_ref):
    scorer = load_scorer("grm", **_opts(k=2))
    out = scorer.score(PROMPTS + [PROMPTS[0]], GOOD + [_c("assistant", "  ")])
    assert math.isnan(out[2]) and scorer.failures["empty_response"] == 1  # never sampled
    assert len(scorer.last_samples[0]) == 2 and len(scorer.last_samples[2]) == 0
    # a random tiny model does not write "\boxed{s}": its samples abstain, are counted, and the item is NaN
    n_abstained = sum(s is None for row in scorer.last_samples for s in row)
    assert sum(scorer.abstentions.values()) == n_abstained
    assert all(math.isnan(v) for v, row in zip(out, scorer.last_samples, strict=True) if all(s is None for s in row))
    cost = scorer.cost_per_item()
    assert cost["items"] == 3 and scorer.cost["samples"] == 4 and 0 < cost["generated_tokens_per_item"] <= 2 * 6
    d = scorer.describe()
    assert d["k"] == 2 and "\\boxed" in d["template"] and d["dtype"] == "float32"


def _script(scorer, reply):
    """Replace the judge's sampling with `reply(message, sample_index) -> text` (the engine is tested above)."""

    def sample(messages, n, prefix="", items=None):
        scorer.cost["items"] += len(messages) if items is None else items
        return [None if m is None else [reply(m, j) for j in range(n)] for m in messages]

    scorer._sample = sample


def test_grm_mean_of_valid_samples(tiny_model_ref):
    scorer = load_scorer("grm", **_opts(k=4))
    texts = ["Analysis: ok. Score: \\boxed{8}", "Score: \\boxed{6}", "no verdict here", "Score: \\boxed{42}"]
    _script(scorer, lambda m, j: texts[j])
    (s,) = scorer.score(PROMPTS[:1], GOOD[:1])
    assert s == pytest.approx(7.0)  # (8 + 6) / 2: the abstaining samples are left out, not read as 0
    assert scorer.abstentions == {"no_box": 1, "out_of_range": 1}
    _script(scorer, lambda m, j: "nothing")
    assert math.isnan(scorer.score(PROMPTS[:1], GOOD[:1])[0]) and scorer.failures["abstained"] == 1


def test_grm_meta_rm_votes_only_the_critiques_it_rates_highest(tmp_path, tiny_model_ref):
    from prefalign.models.hub import load_seq_cls, load_tokenizer
    from reward_models.checkpoint import RewardStats, save_rm
    from reward_models.generative.scorers import GRMScorer

    meta = load_seq_cls(TINY, dtype="float32")
    torch.manual_seed(3)
    torch.nn.init.normal_(meta.score.weight, std=1.0)
    save_rm(meta, load_tokenizer(TINY), tmp_path / "meta", RewardStats(mean=0.0, std=1.0, n=1, computed_on="test"))
    scorer = load_scorer("grm", **_opts(k=4, meta_model=str(tmp_path / "meta"), k_meta=2))
    texts = [f"Criteria {'x' * j}. Score: \\boxed{{{s}}}" for j, s in enumerate([2, 9, 5, 7])]
    _script(scorer, lambda m, j: texts[j])
    (s,) = scorer.score(PROMPTS[:1], GOOD[:1])
    msg = GRMScorer.message(PROMPTS[0], GOOD[0])
    rated = scorer.meta.score([_c("user", msg)] * 4, [_c("assistant", t) for t in texts])
    assert len(set(rated)) == 4
    top = sorted(range(4), key=lambda i: -rated[i])[:2]
    assert s == pytest.approx(sum([2, 9, 5, 7][i] for i in top) / 2)
    assert scorer.describe()["k_meta"] == 2


def _length_judge(message: str, j: int) -> str:
    """A scripted judge that prefers the longer response (reads the two responses back from its prompt)."""
    a = re.search(r"\[The Start of Assistant A's Response\]\n(.*?)\n\[The End", message, re.S).group(1)
    b = re.search(r"\[The Start of Assistant B's Response\]\n(.*?)\n\[The End", message, re.S).group(1)
    return f"reasoning...</think>\n<answer>{'A' if len(a) > len(b) else 'B'}</answer>"


def test_think_judge_is_symmetric_under_position_swap(tiny_model_ref):
    scorer = load_scorer("think", **_opts(m=3))
    _script(scorer, _length_judge)
    ab = scorer.compare(PROMPTS, GOOD, BAD)
    ba = scorer.compare(PROMPTS, BAD, GOOD)
    assert ab == [0.0, 1.0]  # "4" is shorter than "5, I think..."; the colour answer is longer than "Seven."
    assert ba == pytest.approx([1 - p for p in ab])
    # a judge that always says A: both orders cancel it (0.5); one order alone believes it (1.0)
    _script(scorer, lambda m, j: "<answer>A</answer>")
    assert scorer.compare(PROMPTS, GOOD, BAD) == [0.5, 0.5]
    one = load_scorer("think", **_opts(m=2, both_orders=False))
    _script(one, lambda m, j: "<answer>A</answer>")
    assert one.compare(PROMPTS, GOOD, BAD) == [1.0, 1.0]


def test_think_judge_multiclass_and_abstentions(tiny_model_ref):
    scorer = load_scorer("think", **_opts(m=2, form="multiclass", both_orders=False))
    replies = ["<answer>-2</answer>", "<answer>0</answer>"]
    _script(scorer, lambda m, j: replies[j])
    assert scorer.compare(PROMPTS[:1], GOOD[:1], BAD[:1]) == [1.0]  # one valid verdict, for A
    assert scorer.abstentions == {"ambiguous_answer": 1}
    assert "-3, -2, -1, 1, 2, 3" in scorer.describe()["instruction"]


def test_think_judge_runs_the_engine(tiny_model_ref):
    scorer = load_scorer("think", **_opts(m=1))
    out = scorer.compare(PROMPTS[:1], GOOD[:1], BAD[:1])
    assert len(out) == 1 and scorer.cost["samples"] == 2 and scorer.cost["items"] == 1
    assert math.isnan(out[0]) == (sum(scorer.abstentions.values()) == 2)


def test_benchmark_records_carry_the_cost():
    from leaderboards.runner import _cost

    class Counting:
        abstentions = {"no_box": 2}

        def cost_per_item(self):
            return {"items": 4, "generated_tokens_per_item": 10.0, "seconds_per_item": 0.5}

    assert _cost(Counting()) == {
        "cost": {"items": 4, "generated_tokens_per_item": 10.0, "seconds_per_item": 0.5},
        "abstentions": {"no_box": 2},
    }
    assert _cost(object()) == {}


def test_pair_pm_averages_both_orders_against_a_plain_forward(tiny_model_ref):
    from prefalign.models.hub import load_causal_lm, load_tokenizer
    from preference_data.tokenize import tokenize_prompts
    from reward_models.generative import pair_pm_probability
    from reward_models.model_scorers import pair_pm_message

    scorer = load_scorer("pair_pm", model=TINY, dtype="float32")
    assert scorer.symmetric
    got = scorer.compare(PROMPTS, GOOD, BAD)
    assert got == pytest.approx([1 - p for p in scorer.compare(PROMPTS, BAD, GOOD)], abs=1e-6)
    model, tok = load_causal_lm(TINY, dtype="float32").eval(), load_tokenizer(TINY)
    a_id, b_id = (tok.encode(x, add_special_tokens=False)[0] for x in ("A", "B"))

    def logits(p, a, b):
        (ids,) = tokenize_prompts([[Message("user", pair_pm_message(p, a, b))]], tok)
        with torch.no_grad():
            last = model(torch.tensor([ids])).logits[0, -1]
        return float(last[a_id]), float(last[b_id])

    want = [pair_pm_probability(logits(p, a, b), logits(p, b, a)) for p, a, b in zip(PROMPTS, GOOD, BAD, strict=True)]
    assert got == pytest.approx(want, abs=1e-4)
    msg = pair_pm_message(PROMPTS[0], GOOD[0], BAD[0])
    assert (
        msg == "[CONTEXT] \n\n<turn> user\n What is 2 + 2?\n\n\n [RESPONSE A] 4 [RESPONSE B] 5, I think, or maybe 6. \n"
    )


def test_box_expectation_weights_the_scores_by_their_probabilities():
    """G-Eval's rule: the expected score from the digits' probabilities where the box opens, a 1 read as 10 as
    often as a 0 follows it; a sure judge gives its integer score back."""
    from reward_models.generative.scorers import box_expectation

    digits, close = list(range(10)), 10  # token id = digit; the closing brace is id 10
    first, after_one = torch.full((11,), -1e9), torch.full((11,), -1e9)
    first[9] = 0.0
    assert box_expectation(first, after_one, digits, close) == pytest.approx(9.0)
    first[[1, 9]] = torch.tensor([0.0, 0.0]).log_softmax(-1)  # 1 or 9, even odds
    after_one[[0, close]] = torch.tensor([0.75, 0.25]).log()  # after a 1: "10" three times in four
    assert box_expectation(first, after_one, digits, close) == pytest.approx(0.5 * (0.25 * 1 + 0.75 * 10) + 0.5 * 9)
    first[0] = 5.0  # a 0 first is no score in 1..10: left out, the rest renormalised
    assert box_expectation(first, after_one, digits, close) == pytest.approx(0.5 * (0.25 * 1 + 0.75 * 10) + 0.5 * 9)


def test_grm_expected_score_reads_the_judge_at_its_box(tiny_model_ref):
    """With score: expected, a critique's score is the judge's expectation where it opened the box (one forward
    pass each): a real number in 1..10 that depends on the critique before the box, not the integer written."""
    scorer = load_scorer("grm", **_opts(k=1, score="expected"))
    texts = {"4": "Analysis: it says four. Score: \\boxed{9}", "Blue": "Analysis: blue is fine. Score: \\boxed{9}"}
    _script(scorer, lambda m, j: next(v for k, v in texts.items() if f"\n{k}" in m or m.endswith(k)))
    a, b = scorer.score(PROMPTS, GOOD[:1] + [_c("assistant", "Blue")])
    assert 1.0 <= a <= 10.0 and 1.0 <= b <= 10.0 and a != b and a != 9.0
    assert scorer.describe()["score"] == "expected"
    _script(scorer, lambda m, j: "no box")
    assert math.isnan(scorer.score(PROMPTS[:1], GOOD[:1])[0])  # nothing to read: abstains as before


def test_grm_principles_from_prompt_work_before_the_response_once_per_query(tiny_model_ref):
    """principles: from_prompt: the criteria and the work are sampled from the query alone (no response in that
    message), once per distinct query and shared by its responses; each response is read after them in a second
    turn, and the critique kept is the two joined."""
    scorer = load_scorer("grm", **_opts(k=2, principles="from_prompt"))
    seen: list = []

    def reply(m, j):
        seen.append(m)
        if isinstance(m, str):  # the first turn: the query alone
            return f"Work: the answer is 4 (draw {j})."
        work = m[1]["content"]
        score = 10 if "\n4\n" in m[2]["content"] and "answer is 4" in work else 2
        return f"Analysis: read against '{work}'. Score: \\boxed{{{score}}}"

    _script(scorer, reply)
    out = scorer.score([PROMPTS[0]] * 3, [GOOD[0], BAD[0], _c("assistant", " ")])
    firsts = [m for m in seen if isinstance(m, str)]
    assert len(firsts) == 2  # one query, k = 2 principles, shared by both responses (the empty one is not read)
    assert all("What is 2 + 2?" in m and "5, I think" not in m and "\n4\n" not in m for m in firsts)
    readings = [m for m in seen if not isinstance(m, str)]
    assert len(readings) == 4 and {r[1]["content"] for r in readings} == {
        "Work: the answer is 4 (draw 0).",
        "Work: the answer is 4 (draw 1).",
    }
    assert out[0] == 10.0 and out[1] == 2.0 and math.isnan(out[2])
    assert scorer.last_texts[0][1].startswith("Work: the answer is 4 (draw 1).\nAnalysis:")
    assert scorer.cost["items"] == 3 and scorer.describe()["principles"] == "from_prompt"


def test_grm_read_by_rule_checks_each_response_against_the_judges_own_work(tiny_model_ref):
    """read: rule: only the work is sampled (once per query, k of them), and each response is checked against each
    work's claims by preference_data.suite.work_reading; the score is the mean agreement of the works that make
    claims, NaN where none does, and no second turn is generated."""
    scorer = load_scorer("grm", **_opts(k=2, principles="from_prompt", read="rule"))
    seen: list = []
    works = ["Work: Start: 2. Add 2: 2 + 2 = 4. So the answer is 4.", "Work: I cannot tell."]

    def reply(m, j):
        seen.append(m)
        return works[j]

    _script(scorer, reply)
    out = scorer.score([PROMPTS[0]] * 3, [GOOD[0], BAD[0], _c("assistant", "The answer is 5.")])
    assert all(isinstance(m, str) for m in seen) and len(seen) == 2  # the query's two works, nothing read by it
    assert out == [1.0, -1.0, -1.0]  # a hedge and a wrong value meet no claim; only the work with a claim counts
    assert scorer.abstentions["no_claims"] == 3 and scorer.last_texts[0] == works and scorer.cost["items"] == 3
    _script(scorer, lambda m, j: "Work: I cannot tell.")
    assert math.isnan(scorer.score(PROMPTS[:1], GOOD[:1])[0]) and scorer.failures["abstained"] == 1
    assert scorer.describe()["read"] == "rule"
    for bad in ({"read": "rule"}, {"read": "rule", "principles": "from_prompt", "score": "expected"}):
        with pytest.raises(Exception, match="read: rule|score: expected"):
            load_scorer("grm", **_opts(**bad))


def test_a_meta_rm_keeps_the_works_it_rates_highest_for_the_rule_to_read(tmp_path, tiny_model_ref):
    """read: rule with meta_model: the meta-RM rates each of a query's k works once (message, work), and each response
    is scored by the rule over the k_meta works it rates highest only; a two-turn from_prompt judge is still refused."""
    from prefalign.models.hub import load_seq_cls, load_tokenizer
    from reward_models.checkpoint import RewardStats, save_rm
    from reward_models.generative.scorers import GRMScorer

    meta = load_seq_cls(TINY, dtype="float32")
    torch.manual_seed(5)
    torch.nn.init.normal_(meta.score.weight, std=1.0)
    save_rm(meta, load_tokenizer(TINY), tmp_path / "meta", RewardStats(mean=0.0, std=1.0, n=1, computed_on="test"))
    opts = _opts(k=4, principles="from_prompt", read="rule", meta_model=str(tmp_path / "meta"), k_meta=1)
    scorer = load_scorer("grm", **opts)
    works = [f"Work: Start: 2. Add {v - 2}: 2 + {v - 2} = {v}. So the answer is {v}." for v in (4, 5, 6, 7)]
    _script(scorer, lambda m, j: works[j])
    rated = scorer.meta.score(
        [_c("user", GRMScorer.principles_message(PROMPTS[0]))] * 4, [_c("assistant", w) for w in works]
    )
    assert len(set(rated)) == 4
    top = max(range(4), key=lambda i: rated[i])
    out = scorer.score([PROMPTS[0]] * 2, [GOOD[0], _c("assistant", "5")])
    want = [1.0 if top == 0 else -1.0, 1.0 if top == 1 else -1.0]
    assert out == want  # the one work kept decides both responses
    plain = load_scorer("grm", **{**opts, "meta_model": None, "k_meta": None})
    _script(plain, lambda m, j: works[j])
    assert plain.score([PROMPTS[0]] * 2, [GOOD[0], _c("assistant", "5")]) == [-0.5, -0.5]  # all four voted
    d = scorer.describe()
    assert d["k_meta"] == 1 and d["meta_model"] == str(tmp_path / "meta") and d["meta_weights"]
    with pytest.raises(Exception, match="meta_model"):
        load_scorer("grm", **{**opts, "read": "model"})


def test_a_given_work_prefix_is_prompted_not_generated_and_read_with_the_work(tiny_model_ref):
    """work_prefix: the judge's first turn starts with the given text (tokens after the generation prompt, none of
    them decoded); the work read and kept is the prefix and what follows it. `template` is the warm-up's line."""
    from reward_models.generative.scorers import WORK_PREFIXES, judge_prompts
    from reward_models.generative.warmup import WORK_HEADER

    assert WORK_PREFIXES["template"] == WORK_HEADER
    scorer = load_scorer("grm", **_opts(principles="from_prompt", read="rule", work_prefix="template"))
    given: list = []
    inner = scorer._sample

    def sample(messages, n, prefix="", items=None):
        given.append(prefix)
        return inner(messages, n, prefix=prefix, items=items)

    scorer._sample = sample
    scorer.score(PROMPTS[:1], GOOD[:1])
    assert given == [WORK_HEADER] and scorer.last_texts[0][0].startswith(WORK_HEADER)
    assert scorer.describe()["work_prefix"] == WORK_HEADER  # records name what the judge was given
    # the real sampler's prompt ends with the prefix's tokens: the engine decodes only what follows
    ids = judge_prompts(scorer.tokenizer, [scorer.principles_message(PROMPTS[0])], WORK_HEADER)[0]
    tail = scorer.tokenizer.encode(WORK_HEADER, add_special_tokens=False)
    assert ids[-len(tail) :] == tail
    _script(scorer, lambda m, j: " Start: 2. Add 2: 2 + 2 = 4. So the answer is 4.")
    assert scorer.score(PROMPTS[:1], [_c("assistant", "4")]) == [1.0]  # the work read after the prefix
    assert scorer.last_texts[0] == [WORK_HEADER + " Start: 2. Add 2: 2 + 2 = 4. So the answer is 4."]
    for bad, says in (({"work_prefix": "Work: "}, "ends in a space"), ({"work_prefix": "Work:"}, "from_prompt")):
        with pytest.raises(Exception, match=says):
            load_scorer("grm", **_opts(**bad, **({"principles": "from_prompt"} if "space" in says else {})))


def test_grm_with_the_calculator_writes_its_values(tiny_model_ref):
    """`tools: calculator`: the judge's samples go through the tool loop (tests/test_generation_tools.py); every
    '=' the judge writes after an expression is followed by its exact value, and the record names the tool."""
    from prefalign.generation.tools import calculator

    scorer = load_scorer("grm", **_opts(principles="from_prompt", tools="calculator", temperature=0.0))
    scorer.score(PROMPTS, GOOD)
    for text in (t for texts in scorer.last_texts for t in texts):
        for at in (i for i, ch in enumerate(text) if ch == "="):
            value = calculator(text[:at])
            assert value is None or text[at + 1 :].startswith(value)
    assert scorer.describe()["tools"] == "calculator" and scorer.cost["generated_tokens"] > 0
    with pytest.raises(Exception, match="tools"):
        load_scorer("grm", **_opts(tools="abacus"))


def test_grm_principles_from_prompt_runs_the_engine(tiny_model_ref):
    scorer = load_scorer("grm", **_opts(k=2, principles="from_prompt", score="expected"))
    out = scorer.score(PROMPTS, GOOD)
    assert len(out) == 2 and all(len(t) == 2 for t in scorer.last_texts)
    assert scorer.cost["items"] == 2 and scorer.cost["samples"] == 2 * 2 + 2 * 2  # 2 queries x k, then 2 x k reads
    with pytest.raises(Exception, match="meta_model"):
        load_scorer("grm", **_opts(principles="from_prompt", meta_model=TINY))
