"""One way to name a scorer everywhere: `scorer_spec` and the verbs that take it (bench run, serve, rm compare,
eval policy --judge, eval overopt --proxy)."""

from __future__ import annotations

import json

import pytest

from prefalign.errors import UserError
from reward_models.scorers import scorer_spec


@pytest.fixture
def rm_dir(tmp_path):
    d = tmp_path / "rm"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"architectures": ["LlamaForSequenceClassification"]}))
    (d / "reward_stats.json").write_text("{}")
    return str(d)


def test_every_form_gives_the_same_spec(rm_dir):
    want = {"type": "scalar", "model": rm_dir}
    assert scorer_spec(f"scalar:{rm_dir}") == want
    assert scorer_spec(rm_dir) == want  # the kind told from the model
    assert scorer_spec("scalar", model=rm_dir) == want
    assert scorer_spec(None, model=rm_dir) == want
    assert scorer_spec(f"{{type: scalar, model: {rm_dir}}}") == want
    assert scorer_spec(f"scalar:{rm_dir}", options={"normalize": True}) == {**want, "normalize": True}


def test_a_builtin_model_after_a_kind_keeps_its_colon():
    spec = scorer_spec("pair_pm:builtin:smollm2-135m-instruct")
    assert spec == {"type": "pair_pm", "model": "builtin:smollm2-135m-instruct"}
    assert scorer_spec("grader") == {"type": "grader"}


@pytest.mark.parametrize(
    ("text", "model", "message"),
    [
        ("scalr:runs/rm", None, "did you mean 'scalar'"),
        ("{type: scalr, model: x}", None, "unknown scorer kind 'scalr'"),
        ("{model: x}", None, "needs type: KIND"),
        ("{not yaml", None, "not a valid YAML mapping"),
        ("scalar:", None, "model after 'scalar:' is missing"),
        ("scalar:runs/a", "runs/b", "give it once"),
        ("", None, "empty"),
    ],
)
def test_a_wrong_spec_says_what_to_write(text, model, message):
    with pytest.raises(UserError, match=message):
        scorer_spec(text, model=model, flag="--judge")


def test_the_verbs_read_the_same_spec(rm_dir, tmp_path):
    from align.overopt.harness import proxy_spec
    from align.serve.run import reward_sections
    from align.serve.settings import ServeSettings
    from reward_models.compare import ScorerSpec

    want = {"type": "scalar", "model": rm_dir}
    assert ScorerSpec.parse(f"bt=scalar:{rm_dir}").spec == want
    assert ScorerSpec.parse(f"bt={rm_dir}").spec == want
    assert reward_sections(ServeSettings(scorer=f"scalar:{rm_dir}"))[0] == [want]
    assert reward_sections(ServeSettings(model=rm_dir))[0] == [want]
    assert proxy_spec(f"scalar:{rm_dir}") == want
    assert proxy_spec(rm_dir) == want
    with pytest.raises(UserError, match="no such reward model directory"):
        proxy_spec(f"scalar:{tmp_path}/missing")
    with pytest.raises(UserError, match="best-of-n needs a pointwise score"):
        proxy_spec("judge:builtin:smollm2-135m-instruct")


def test_bench_run_flags_join_the_spec(rm_dir):
    from align.cli.bench import BenchRunSettings, _scorer_spec

    s = BenchRunSettings(bench="suite", scorer=f"scalar:{rm_dir}", dtype="float32", options={"normalize": True})
    assert _scorer_spec(s) == {"type": "scalar", "model": rm_dir, "dtype": "float32", "normalize": True}
    with pytest.raises(UserError, match="--reference does not apply to --scorer scalar"):
        _scorer_spec(BenchRunSettings(bench="suite", model=rm_dir, reference="builtin:smollm2-135m-instruct"))


def test_a_served_rule_stays_a_served_reward():
    """`align serve --scorer '{type: length}'`: a rule of the reward: list is served as before, not refused as an
    unknown scorer kind."""
    from align.serve.run import reward_sections
    from align.serve.settings import ServeSettings

    assert reward_sections(ServeSettings(scorer="{type: length}"))[0] == [{"type": "length"}]
    with pytest.raises(UserError, match="unknown scorer kind 'lenght'"):
        reward_sections(ServeSettings(scorer="{type: lenght}"))
