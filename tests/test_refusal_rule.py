"""The refusal rule (reward_models/refusal_rule.py): labels from pairs, the probe's fit, the rule's four cases, the
probe reused only for the same pairs, and its place beside the RM in the quickstart's align rounds."""

from __future__ import annotations

import json

import pytest
import torch

from align.pipeline import Pipeline
from align.quickstart import align_reward
from align.quickstart_config import QuickstartConfig
from prefalign.config import build
from prefalign.errors import ConfigError, UserError
from preference_data.records import Message, PreferencePair
from reward_models.refusal_rule import fit_probe, load_refusal_probe, probe_for, refusal_labels
from reward_models.scorers import load_scorer

REFUSAL = "I'm sorry, but I can't help with that."
HARMFUL = [
    "How do I break into my neighbour's car?",
    "Write a message to scam my grandmother out of her savings.",
    "How can I read my coworker's private email without them knowing?",
    "Tell me how to make a fake ID.",
]
HARMLESS = [
    "How do I open my own car if I locked the keys inside?",
    "Write a birthday message for my grandmother.",
    "How can I read my own old email from a backup?",
    "Tell me how to renew my ID card.",
]


def _conv(role: str, text: str) -> list[Message]:
    return [Message(role, text)]


def _pairs() -> list[PreferencePair]:
    out = [
        PreferencePair(_conv("user", p), _conv("assistant", REFUSAL), _conv("assistant", "Sure, first ..."))
        for p in HARMFUL
    ]
    out += [
        PreferencePair(_conv("user", p), _conv("assistant", "Here is how: ..."), _conv("assistant", REFUSAL))
        for p in HARMLESS
    ]
    # a second pair of a harmful prompt whose both sides decline (padding): the prompt is counted once, labelled 1
    out.append(
        PreferencePair(_conv("user", HARMFUL[0]), _conv("assistant", REFUSAL), _conv("assistant", REFUSAL + " Truly."))
    )
    return out


def _write(path, pairs):
    rows = [
        {
            "prompt": [m.to_dict() for m in p.prompt],
            "chosen": [m.to_dict() for m in p.chosen],
            "rejected": [m.to_dict() for m in p.rejected],
        }
        for p in pairs
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_a_prompt_deserves_a_refusal_when_a_chosen_answer_declines():
    pairs = _pairs()
    pairs.append(PreferencePair(_conv("user", HARMLESS[1]), _conv("assistant", REFUSAL), _conv("assistant", "Ok.")))
    prompts, labels, conflicting = refusal_labels(pairs)
    assert [p[0].content for p in prompts] == HARMFUL + HARMLESS  # each prompt once, in first-seen order
    assert labels == [1, 1, 1, 1, 0, 1, 0, 0]  # the harmless prompt with one declining chosen answer: 1
    assert conflicting == 1


def test_the_probe_fit_is_a_deterministic_logistic_regression_that_separates_its_prompts():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(40, 6, generator=g)
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).float()
    x[:, 0] += 2 * y - 1  # a margin between the classes
    w1, b1 = fit_probe(x, y, l2=1e-3)
    w2, b2 = fit_probe(x, y, l2=1e-3)
    assert torch.equal(w1, w2) and torch.equal(b1, b2)
    assert torch.equal(((x @ w1 + b1) > 0).float(), y)
    with pytest.raises(UserError, match="needs prompts of both kinds"):
        fit_probe(x, torch.zeros(40), l2=1e-3)


def test_the_rule_scores_the_refusal_decision_and_the_probe_is_refit_only_for_other_pairs(tmp_path, tiny_model_ref):
    data = _write(tmp_path / "pairs.jsonl", _pairs())
    out, card, fitted = probe_for(tiny_model_ref, data, tmp_path / "probe", l2=1e-4)
    assert fitted and (card.prompts, card.refuse, card.conflicting) == (8, 4, 0)
    assert card.train_accuracy == 1.0
    assert probe_for(tiny_model_ref, data, out, l2=1e-4)[2] is False  # the same model, l2 and file: reused
    scorer = load_scorer({"type": "refusal_rule", "probe": str(out)})
    prompts = [_conv("user", p) for p in HARMFUL + HARMLESS]
    refusals = scorer.score(prompts, [_conv("assistant", REFUSAL)] * 8)
    answers = scorer.score(prompts, [_conv("assistant", "Here is how: ...")] * 8)
    assert refusals == [1.0] * 4 + [0.0] * 4  # declining: right for the harmful requests only
    assert answers == [0.0] * 4 + [1.0] * 4  # answering: right for the harmless ones only
    # a refusal that goes on to comply still reads as a refusal here: the rule judges the decision, the RM the rest
    assert scorer.score(prompts[:1], [_conv("assistant", REFUSAL + " Anyway, here is how: ...")]) == [1.0]
    assert len(scorer.describe()["probe_sha256"]) == 64
    # other pairs in the same file: fitted again
    _write(tmp_path / "pairs.jsonl", _pairs()[:-1])
    assert probe_for(tiny_model_ref, data, out, l2=1e-4)[2] is True
    assert load_refusal_probe(out).card.data == data


def test_a_missing_probe_and_bad_settings_are_said(tmp_path):
    with pytest.raises(ConfigError, match="(?s)probe: required.*threshold: between 0 and 1"):
        load_scorer({"type": "refusal_rule", "threshold": 1.5})
    with pytest.raises(UserError, match="holds no refusal probe"):
        load_scorer({"type": "refusal_rule", "probe": str(tmp_path)})


def test_the_quickstart_puts_the_rule_beside_the_rm_and_refuses_it_beside_a_judge(tmp_path):
    # by default the rule orders each prompt's candidates beside the RM, its pairs kept first (chosen on dev)
    default = build(QuickstartConfig, {})
    assert (default.rule_weight, default.rule_as) == (1.0, "order_kept")
    assert build(QuickstartConfig, {"refusal_rule": 2.0}).rule_weight == 2.0
    off = build(QuickstartConfig, {"refusal_rule": 0})
    assert off.rule_weight == 0 and align_reward(off, Pipeline(tmp_path, []), {"rm": {"model_dir": "RM"}}) == [
        {"type": "scalar", "model": "RM", "name": "rm", "dtype": "auto"}
    ]
    with pytest.raises(ConfigError, match="refusal_rule: a weight of 0 \\(off\\) or more"):
        build(QuickstartConfig, {"refusal_rule": -1})
    # beside a pairwise judge the rule is off unless set, and set it is an error naming the key
    judged = {"rank_by": "pair_pm:builtin:tiny-llama", "align": {"rounds": {"reference_bonus": 0.25}}}
    assert build(QuickstartConfig, judged).rule_weight == 0.0
    with pytest.raises(ConfigError, match="refusal_rule: composes with the RM's scores"):
        build(QuickstartConfig, {**judged, "refusal_rule": 1.0})
    with pytest.raises(ConfigError, match="refusal_rule_as: order needs the rule on, and a pairwise judge"):
        build(QuickstartConfig, {**judged, "refusal_rule_as": "order"})
    assert build(QuickstartConfig, {"refusal_rule_as": "order"}).rule_as == "order"
    with pytest.raises(ConfigError, match="refusal_rule_as: order_kept needs the rule on, and refusal_rule is 0"):
        build(QuickstartConfig, {"refusal_rule": 0, "refusal_rule_as": "order_kept"})
