"""Every online and iterative recipe in configs/ rewards with a learned model unless it is named an oracle ceiling,
and runs one step on the tiny model (each model reference replaced by a tiny model of the same kind)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from prefalign.config import build, read_yaml

ROOT = Path(__file__).resolve().parents[1]
POLICY_KINDS = ("online", "iterative")
RECIPES = sorted(
    p.name for p in (ROOT / "configs").glob("*.yaml") if (read_yaml(str(p)) or {}).get("kind") in POLICY_KINDS
)
GOLD = {"grader"}  # the suite's answer key: an oracle, never the default reward of a policy recipe


def test_policy_recipes_reward_with_learned_models_and_oracles_say_so():
    assert RECIPES, "configs/ has no online or iterative recipe"
    for name in RECIPES:
        data = read_yaml(str(ROOT / "configs" / name))
        types = {c["type"] for c in data["reward"]}
        first = (ROOT / "configs" / name).read_text().splitlines()[0]
        if name.endswith("_oracle.yaml"):
            assert types & GOLD and first.startswith("# ORACLE CEILING"), name
            assert (ROOT / "configs" / name.replace("_oracle", "")).exists(), f"{name}: no learned-reward twin"
        elif (data.get("prompts") or {}).get("judge", "none") == "none":  # judges trained by RL grade verdicts
            assert not types & GOLD, f"{name} rewards a policy with the gold graders; name it *_oracle.yaml"


def test_reward_models_named_by_recipes_are_what_a_recipe_writes():
    """A reward component's `model: runs/...` is the model a config in configs/ saves (an RM run writes its model
    under output_dir/model), so the shipped recipes chain without edits."""
    outputs = {}
    for p in (ROOT / "configs").glob("*.yaml"):
        data = read_yaml(str(p)) or {}
        if data.get("kind") in ("rm_train", "mo_rm_train") and "output_dir" in data:
            outputs[f"{data['output_dir']}/model"] = p.name
    for name in RECIPES:
        for c in read_yaml(str(ROOT / "configs" / name))["reward"]:
            model = str(c.get("model", ""))
            if model.startswith("runs/") and c["type"] in ("scalar", "multi_objective"):
                assert model in outputs, f"{name}: {model} is not written by any RM recipe ({sorted(outputs)})"


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory, tiny_model_ref) -> dict[str, str]:
    """A tiny scalar RM and a tiny multi-objective RM (trained on a few suite pairs), by scorer type."""
    import reward_models.multi_objective as M
    from prefalign.models.hub import load_seq_cls, load_tokenizer
    from reward_models.checkpoint import RewardStats, save_rm

    root = tmp_path_factory.mktemp("tiny")
    rm = load_seq_cls(tiny_model_ref, dtype="float32")
    torch.manual_seed(0)
    torch.nn.init.normal_(rm.score.weight, std=1.0)
    save_rm(rm, load_tokenizer(tiny_model_ref), root / "rm", RewardStats(mean=0.0, std=1.0, n=1, computed_on="t"))
    mo = M.run(
        build(
            M.MORMTrainConfig,
            {
                "backbone": tiny_model_ref,
                "output_dir": str(root / "mo"),
                "data": {"limit": 24},
                "gating": {"steps": 2, "hidden": 8},
                "dtype": "float32",
                "compare_with": str(root / "rm"),  # the scalar RM scored on the same held-out data
            },
        )
    )
    assert set(mo["bt"]["per_objective"]) == set(mo["per_objective"])
    return {"scalar": str(root / "rm"), "multi_objective": mo["model_dir"]}


def _tiny(data: dict[str, Any], models: dict[str, str], out: Path) -> dict[str, Any]:
    """The recipe shrunk to one step on the tiny model, its reward models swapped for tiny ones of the same kind."""
    data = {**data, "model": "builtin:tiny-llama", "output_dir": str(out)}
    data["reward"] = [
        {**c, "model": models.get(c["type"], "builtin:tiny-llama"), "dtype": "float32"} if "model" in c else c
        for c in data["reward"]
    ]
    train = {**data.get("train", {}), "max_steps": 1, "batch_size": 8, "precision": "fp32", "compile": False}
    data["train"] = {**train, "eval_every": 0, "save_every": 0}
    data["eval"] = {**data.get("eval", {}), "limit": 0}
    if data["kind"] == "online":
        data["rollout"] = {**data.get("rollout", {}), "group_size": 2, "prompts_per_step": 2, "max_new_tokens": 4}
        comp = data.get("composition")
        if comp and "hypervolume" in comp:
            comp["hypervolume"] = {**comp["hypervolume"], "eval_prompts": 2, "eval_max_new_tokens": 4}
    else:
        data["rounds"] = {**data["rounds"], "rounds": 1, "prompts_per_round": 2, "samples_per_prompt": 2}
        data["rounds"]["max_new_tokens"] = 4
    return data


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in RECIPES if not n.endswith("_oracle.yaml") and "judge" not in n])
def test_recipe_runs_one_step_on_the_tiny_model(name, tmp_path, tiny_models):
    from align.cli.configs import config_class

    data = _tiny(read_yaml(str(ROOT / "configs" / name)), tiny_models, tmp_path / "run")
    cfg = build(config_class(data["kind"]), data)
    module = __import__(f"align.{data['kind']}", fromlist=["run"])
    report = module.run(cfg)
    assert report["steps"] >= 1
    assert all(c["type"] not in GOLD for c in report["reward"])  # learned: the gold graders only evaluate
