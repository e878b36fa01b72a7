"""A reward the policy cannot win by surface: the RM ensemble's uncertainty penalty against a hand computation, and the
reward-hacking alarm that needs no answer key (the learned reward rises while a check of the same answers falls)."""

from __future__ import annotations

import json
import math

import pytest
import torch

from align.quickstart_eval import CHECK_ALARM_KEY, hacking_alarm, record_eval_in_run
from prefalign.training.metrics import ALERTS_FILE, read_alerts, reward_hacking
from preference_data.records import Message
from reward_models.composition import AGGREGATORS, AggregateInputs, ensemble_lcb


def test_ensemble_penalty_by_hand():
    """Members (1, 3): mean 2, population std 1; k = 0.5 -> 1.5. Members (2, 2): 2 whatever k. Three members
    (0, 3, 6): mean 3, std sqrt(6) = 2.449..., k = 1 -> 0.5505. A NaN member gives NaN."""
    R = torch.tensor([[1.0, 3.0, float("nan")], [2.0, 2.0, float("nan")]])
    assert ensemble_lcb(R[:, :2], 0.5).tolist() == [1.5, 2.0]
    assert ensemble_lcb(torch.tensor([[0.0, 3.0, 6.0]]), 1.0).item() == pytest.approx(3 - math.sqrt(6))
    assert math.isnan(ensemble_lcb(R, 0.5)[0].item())
    assert ensemble_lcb(R[:, :2], 0.0).tolist() == [2.0, 2.0]  # k = 0: the plain mean
    # weighted members (1, 4) with weights (2, 1): mean (2 + 4) / 3 = 2, std sqrt((2 x 1^2 + 1 x 2^2) / 3) = sqrt(2)
    two = torch.tensor([[1.0, 4.0]])
    assert ensemble_lcb(two, 1.0, torch.tensor([2.0, 1.0])).item() == pytest.approx(2 - math.sqrt(2))
    assert ensemble_lcb(two, 0.5, torch.tensor([1.0, 1.0])).item() == ensemble_lcb(two, 0.5).item()
    # a member that gave no score: NaN, or left out (the others decide; none scored: NaN)
    gap = torch.tensor([[1.0, math.nan], [math.nan, math.nan], [1.0, 4.0]])
    assert math.isnan(ensemble_lcb(gap, 0.5)[0].item())
    got = ensemble_lcb(gap, 0.5, torch.tensor([2.0, 1.0]), skip_missing=True)
    assert got[0].item() == 1.0 and math.isnan(got[1].item()) and got[2].item() == pytest.approx(2 - 0.5 * math.sqrt(2))
    out = AGGREGATORS["ensemble"].fn(R[:, :2], torch.ones(2), AggregateInputs(G=1, options={"k": 0.5}))
    assert out.values.tolist() == [1.5, 2.0] and out.stats["ensemble/std"] == pytest.approx(0.5)


@pytest.fixture(scope="module")
def two_rms(tmp_path_factory, tiny_model_ref):
    from prefalign.models.hub import load_seq_cls, load_tokenizer
    from reward_models.checkpoint import RewardStats, save_rm

    out = []
    for seed, (mean, std) in enumerate([(0.5, 2.0), (-1.0, 0.5)]):
        model = load_seq_cls(tiny_model_ref, dtype="float32")
        torch.manual_seed(seed)
        torch.nn.init.normal_(model.score.weight, std=1.0)
        d = tmp_path_factory.mktemp("ens") / f"rm{seed}"
        save_rm(model, load_tokenizer(tiny_model_ref), d, RewardStats(mean, std, 4, 1, "test"))
        out.append(str(d))
    return out


def test_ensemble_scorer_is_the_members_normalised_mean_minus_k_std(two_rms):
    from reward_models.scorers import load_scorer

    prompts = [[Message("user", "What is 2 + 2?")]] * 3
    responses = [[Message("assistant", t)] for t in ("4", "5", "It is four, I think.")]
    members = [load_scorer("scalar", model=m, normalize=True) for m in two_rms]
    want = torch.tensor([m.score(prompts, responses) for m in members]).T  # (S, M), each normalised by its stats
    ens = load_scorer({"type": "ensemble", "members": two_rms, "k": 0.7})
    got = ens.score(prompts, responses)
    assert got == pytest.approx(ensemble_lcb(want, 0.7).tolist(), abs=1e-5)
    assert ens.last_std == pytest.approx(want.std(-1, correction=0).tolist(), abs=1e-5)
    with pytest.raises(Exception, match="at least 2 reward models"):
        load_scorer({"type": "ensemble", "members": two_rms[:1]})
    # weighted: a member on another scale put on the others' by its weight
    weighted = load_scorer({"type": "ensemble", "members": two_rms, "k": 0.0, "weights": [1.0, 0.25]})
    by_hand = (want[:, 0] + 0.25 * want[:, 1]) / 1.25
    assert weighted.score(prompts, responses) == pytest.approx(by_hand.tolist(), abs=1e-5)
    assert weighted.describe()["weights"] == [1.0, 0.25]
    for bad in ([1.0], [1.0, -1.0], [0.0, 0.0]):
        with pytest.raises(Exception, match="weights"):
            load_scorer({"type": "ensemble", "members": two_rms, "weights": bad})


def test_the_alarm_fires_when_the_reward_rises_and_the_check_falls():
    rising_falling = {"reward_before": -1.0, "reward_after": 1.7, "check": {"baseline": 0.5, "policy": 0.38}}
    both_rise = {"reward_before": -1.0, "reward_after": 1.7, "check": {"baseline": 0.5, "policy": 0.64}}
    msg = hacking_alarm(rising_falling, "{type: think, model: j}")
    assert msg is not None and "the check ({type: think, model: j}) fell" in msg and "0.5000 -> 0.3800" in msg
    assert hacking_alarm(both_rise, "{type: think, model: j}") is None
    assert hacking_alarm(rising_falling, None) is None  # no check configured: nothing to compare with
    # the gold-free signal reads like the gold one over a run's evaluations
    assert reward_hacking([(0, 0.1, 0.5), (1, 0.3, 0.4)], run=1, signal="the judge") is not None
    assert reward_hacking([(0, 0.1, 0.5), (1, 0.3, 0.6)], run=1, signal="the judge") is None


def test_the_alarm_is_written_into_the_run_and_drawn(tmp_path):
    """The eval stage's numbers go into the align run's metrics (the check as eval_check) and its alarm into
    alerts.jsonl; the dashboard draws the learned reward against the check; a rerun replaces both."""
    from prefalign.training.report import HACKING, HACKING_CHECK, panels

    run = tmp_path / "align"
    run.mkdir()
    (run / "metrics.jsonl").write_text(json.dumps({"step": 48, "loss": 0.3}) + "\n")
    end = {
        "after": 0.28,
        "reward_after": 1.7,
        "check": {"baseline": 0.5, "policy": 0.38},
        "alarm": "step 1: the learned reward rose while the check fell",
    }
    start = {"after": 0.2, "reward_after": -1.0, "check": {"baseline": 0.5, "policy": 0.5}}
    for _ in range(2):
        record_eval_in_run(run, end, start, "dev")
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r.get("eval_check")) for r in rows if "eval_check" in r] == [(0, 0.5), (48, 0.38)]
    alerts = read_alerts(run / ALERTS_FILE)
    assert [a["key"] for a in alerts] == [CHECK_ALARM_KEY] and "the check fell" in alerts[0]["message"]
    names = {k for r in rows for k in r}
    assert [p.twin for p in panels(names)[:2]] == [HACKING, HACKING_CHECK]  # gold first where there is gold
    assert "the check fell" in (run / "report.html").read_text()


class _Judge:
    """A pairwise judge that prefers the answer holding the right number (P = 0.9), says 0.5 when both or neither do,
    and leans towards position A by `bias` (so both orders must be asked)."""

    kind = "pairwise"
    symmetric = False

    def __init__(self, bias: float = 0.05) -> None:
        self.bias, self.calls = bias, 0

    def compare(self, prompts, a, b):
        self.calls += 1
        out = []
        for x, y in zip(a, b, strict=True):
            rx, ry = "21" in x[0].content, "21" in y[0].content
            out.append((0.9 if rx and not ry else 0.1 if ry and not rx else 0.5) + self.bias)
        return out


def test_a_judge_flips_or_drops_the_pairs_it_disagrees_with():
    """The reward's pairs checked by a judge: agreed pairs kept, a pair the judge reverses flipped (its margin made
    positive, its origins swapped) or dropped, a pair without a verdict kept and counted; both orders asked of a
    judge that does not judge them itself, the position bias cancelling."""
    from align.verify import apply_verdicts, verify_probabilities
    from preference_data.records import PreferencePair

    def pair(c: str, r: str, margin: float) -> PreferencePair:
        return PreferencePair(
            [Message("user", "6 + 6 + 9?")],
            [Message("assistant", c)],
            [Message("assistant", r)],
            margin=margin,
            attributes={"origins": ["policy", "rejected"]},
        )

    pairs = [pair("It is 21.", "It is 19.", 2.0), pair("19.", "The answer is 21.", 1.5), pair("20", "22", 0.3)]
    judge = _Judge()
    probs = verify_probabilities(judge, pairs)
    assert judge.calls == 2 and probs == pytest.approx([0.9, 0.1, 0.5])  # the bias cancels over both orders
    flipped, counts = apply_verdicts(pairs, probs, "flip")
    assert counts == {"verify_agree": 1, "verify_unsure": 1, "verify_flipped": 1, "verify_dropped": 0}
    assert [(p.chosen[0].content, p.margin) for p in flipped] == [
        ("It is 21.", 2.0),
        ("The answer is 21.", 1.5),
        ("20", 0.3),
    ]
    assert flipped[1].attributes["origins"] == ["rejected", "policy"] and flipped[1].id != pairs[1].id
    dropped, counts = apply_verdicts(pairs, probs, "drop")
    assert counts["verify_dropped"] == 1 and [p.chosen[0].content for p in dropped] == ["It is 21.", "20"]
