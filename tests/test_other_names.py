"""Other toolkits' config names (TRL, OpenRLHF) are read as ours with a note, or refused with the key to use: one
test per name in `align ls names`, each building a recipe config with that name and checking where it landed."""

from __future__ import annotations

from typing import Any

import pytest

from align.cli.configs import config_class, other_names
from prefalign.config import build, load
from prefalign.errors import ConfigError

NAMES = other_names()
KIND_OF = {"center_rewards_coefficient": "rm_train"}  # names only an RM recipe has
SAMPLES = {  # a value in the other toolkit's terms, and what it becomes here (where the type alone does not say)
    "bf16": (False, "fp32"),
    "use_peft": (False, "full"),
    "lr_scheduler_type": ("cosine", "cosine"),
    "loss_type": ("ipo", "ipo"),
    "beta": (0.3, 0.3),
    "rpo_alpha": (1.0, 1.0),
    "center_rewards_coefficient": (0.01, 0.01),
}


def _get(cfg: Any, dotted: str) -> Any:
    node = cfg
    for part in dotted.split("."):
        node = node[part] if isinstance(node, dict) else getattr(node, part)
    return node


def _sample(cfg: Any, dotted: str, name: str) -> tuple[Any, Any]:
    """(a value to write under `name`, what the field should then hold): unlike the default, of the field's type."""
    if name in SAMPLES:
        return SAMPLES[name]
    current = _get(cfg, dotted) if "params" not in dotted else None
    if isinstance(current, bool):
        return (not current), (not current)
    if isinstance(current, int):
        return current + 3, current + 3
    if isinstance(current, float):
        return current * 2 + 0.125, current * 2 + 0.125
    if isinstance(current, list):
        return ["q_proj"], ["q_proj"]
    text = {"model": "builtin:tiny-llama", "output_dir": "runs/x"}.get(dotted, "data/p.jsonl")
    return text, text


ACCEPTED = [n for n in NAMES if NAMES[n].ours != "(refused)" and NAMES[n].note != "value"]
REFUSED = [n for n in NAMES if NAMES[n].ours == "(refused)"]


@pytest.mark.parametrize("name", ACCEPTED)
@pytest.mark.parametrize("flat", [True, False], ids=["flat", "in-section"])
def test_other_toolkits_name_is_read_as_ours(name, flat, capsys):
    kind = KIND_OF.get(name, "train")
    cls = config_class(kind)
    ours = NAMES[name].ours
    section, _, field = ours.partition(".")
    if not field and not flat:
        pytest.skip("a top-level field has no section")
    base = build(cls, {"kind": kind})
    value, want = _sample(base, ours, name)
    if flat or not field:
        data = {"kind": kind, name: value}
    else:
        data = {"kind": kind, section: {name: value}}
    cfg = build(cls, data)
    assert _get(cfg, ours) == want
    assert "note:" in capsys.readouterr().err


@pytest.mark.parametrize("name", REFUSED)
def test_names_with_no_equivalent_are_refused_with_the_key_to_use(name):
    with pytest.raises(ConfigError) as e:
        build(config_class("train"), {"kind": "train", name: 1})
    assert name in str(e.value) and "not a key here" in str(e.value)


def test_trl_loss_name_dpo_is_sigmoid_and_train_learning_rate_is_lr(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("kind: train\nloss:\n  name: dpo\ntrain:\n  learning_rate: 5.0e-7\n")
    cfg = load(config_class("train"), path)
    assert cfg.loss.name == "sigmoid" and cfg.train.lr == 5e-7


def test_a_name_given_twice_is_an_error_not_a_silent_choice():
    with pytest.raises(ConfigError, match="given too"):
        build(config_class("train"), {"kind": "train", "train": {"lr": 1e-5, "learning_rate": 1e-6}})
    with pytest.raises(ConfigError, match="top level and in train"):
        build(config_class("train"), {"kind": "train", "learning_rate": 1e-5, "train": {"learning_rate": 1e-6}})


def test_semantics_are_stated_where_they_could_differ():
    """Batch sizes say whether they are per device and micro-batch; bf16 and use_peft map their values."""
    assert "per device" in NAMES["per_device_train_batch_size"].note
    assert "per GPU" in NAMES["micro_train_batch_size"].note
    assert "global batch" in NAMES["train_batch_size"].note
    cfg = build(config_class("train"), {"kind": "train", "bf16": True, "use_peft": False})
    assert (cfg.train.precision, cfg.train.method) == ("bf16", "full")
