"""`align init KIND DEST`: a commented config for your own model and data, to edit and run.

Each kind (`INIT_KINDS`) fills in a recipe's keys for a model (a hub id or a local model directory) and data (a local
file or directory, an https URL, or a hub dataset), writes them with every key's documentation above it (taken from
the config's own field docs, so the comments cannot drift from the code), and checks the result as `align validate`
does. The file ends with the command that runs it.
"""

from __future__ import annotations

import argparse
import dataclasses
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_type_hints

from prefalign.errors import UserError
from prefalign.models.hub import DEFAULT_MODEL

DEFAULT_DATA = "Anthropic/hh-rlhf"  # with hub_data_dir helpful-base: its train split trains, its test split holds out
DEFAULT_BENCH_DATA = "allenai/reward-bench"


@dataclass(frozen=True)
class InitKind:
    summary: str
    kind: str  # the recipe's config kind, or "settings:<module>:<class>" for a verb's settings file
    values: Callable[[argparse.Namespace], dict[str, Any]]
    run: str  # the command, with {path}


def _data(a: argparse.Namespace) -> dict[str, Any]:
    """The data and eval sections: a hub dataset reads its train split and holds out its test split; a local file
    (or URL) is cut by a hash of the prompt into train and dev unless --eval-data names held-out pairs."""
    if a.data == DEFAULT_DATA or (a.hub_data_dir and "/" in a.data and not Path(a.data).exists()):
        data = {
            "source": a.data,
            "hub_data_dir": a.hub_data_dir or "helpful-base",
            "hub_split": "train",
            "split": "all",
        }
        held = {"hub_split": "test", "split": "all", "limit": 400}
    elif a.eval_data:
        data = {"source": a.data, "split": "all"}
        held = {"source": a.eval_data, "split": "all"}
    else:
        data = {"source": a.data, "split": "train", "split_fractions": [0.9, 0.1, 0.0]}
        held = {"split": "dev"}
    return {"data": data, "eval": held}


def _train(a: argparse.Namespace, lr: float, **extra: Any) -> dict[str, Any]:
    return {
        "method": a.method,
        "lr": lr,
        "epochs": 1,
        "max_steps": -1,
        "batch_size": 8,
        "grad_accum": 1,
        "max_length": 1024,
        "precision": "auto",
        "attention": "auto",
        "compile": "auto",
        "save_every": 200,
        **extra,
    }


def _lora() -> dict[str, Any]:
    return {"r": 16, "alpha": 32}


def _rm(a: argparse.Namespace) -> dict[str, Any]:
    return {
        "kind": "rm_train",
        "model": a.model,
        "output_dir": a.output_dir or "runs/my_rm",
        **_data(a),
        "loss": {"name": "bradley_terry", "params": {"center_rewards_coefficient": 0.01}},
        "train": _train(a, 5e-5 if a.method == "full" else 2e-4, warmup_ratio=0.03),
        "lora": _lora(),
    }


def _pairs_policy(kind: str, name: str, params: dict[str, Any]) -> Callable[[argparse.Namespace], dict[str, Any]]:
    def values(a: argparse.Namespace) -> dict[str, Any]:
        return {
            "kind": "train",
            "model": a.model,
            "output_dir": a.output_dir or f"runs/my_{kind}",
            **_data(a),
            "loss": {"name": name, "params": params},
            "reference": {"kind": "auto"},
            "train": _train(a, 5e-7 if a.method == "full" else 5e-6, length_policy="truncate_prompt_left"),
            "lora": _lora(),
        }

    return values


def _against_rm(a: argparse.Namespace, kind: str, name: str) -> dict[str, Any]:
    """What an online or iterative run against a trained reward model starts with: the policy, the run directory,
    the prompts (of --prompts, else of --data) and the reward (--rm)."""
    return {
        "kind": kind,
        "model": a.model,
        "output_dir": a.output_dir or f"runs/my_{name}",
        "prompts": {"source": a.prompts or a.data},
        "reward": [{"type": "scalar", "model": a.rm or "runs/my_rm/model", "name": "rm"}],
    }


def _grpo(a: argparse.Namespace) -> dict[str, Any]:
    return {
        **_against_rm(a, "online", "grpo"),
        "rollout": {"group_size": 4, "prompts_per_step": 8, "max_new_tokens": 256, "temperature": 1.0},
        "algorithm": {"loss": "grpo", "params": {"loss_type": "dapo", "epsilon": 0.2}},
        "kl": {"beta": 0.04},
        "eval": {"limit": 0},
        "train": _train(a, 1e-6 if a.method == "full" else 1e-5, max_steps=200, batch_size=16, save_every=50),
        "lora": _lora(),
    }


def _iterative(a: argparse.Namespace) -> dict[str, Any]:
    return {
        **_against_rm(a, "iterative", "iterative_dpo"),
        "rounds": {
            "rounds": 3,
            "prompts_per_round": 256,
            "samples_per_prompt": 4,
            "max_new_tokens": 256,
            "pair_rule": "max_min",
            "reference": "previous",
        },
        "loss": {"name": "sigmoid", "params": {"beta": 0.1}},
        "eval": {"limit": 0},
        "train": _train(a, 5e-7 if a.method == "full" else 5e-6, max_steps=50),
        "lora": _lora(),
    }


def _bench(a: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"bench": a.bench, "model": a.rm or a.model, "scorer": "scalar"}
    if a.bench != "suite":
        out["data"] = a.bench_data or (DEFAULT_BENCH_DATA if a.bench == "rewardbench" else a.data)
    return out | {"dtype": "auto", "allow_partial": False, "cache": True}


def _serve(a: argparse.Namespace) -> dict[str, Any]:
    return {"model": a.rm or a.model, "scorer": "scalar", "host": "127.0.0.1", "port": 8000, "max_batch": 256}


INIT_KINDS: dict[str, InitKind] = {
    "rm": InitKind("a Bradley-Terry reward model on preference pairs", "rm_train", _rm, "align rm train {path}"),
    "dpo": InitKind(
        "DPO on preference pairs (LoRA; the reference is the base with adapters off)",
        "train",
        _pairs_policy("dpo", "sigmoid", {"beta": 0.1}),
        "align train {path}",
    ),
    "simpo": InitKind(
        "SimPO on preference pairs (reference-free, length-normalized)",
        "train",
        _pairs_policy("simpo", "simpo", {"beta": 2.0, "gamma_beta_ratio": 0.5}),
        "align train {path}",
    ),
    "grpo": InitKind(
        "GRPO against a trained reward model (--rm), on the prompts of your data (--prompts or --data)",
        "online",
        _grpo,
        "align train {path}",
    ),
    "iterative-dpo": InitKind(
        "iterative DPO rounds: sample, rank with a trained reward model (--rm), train on the best against the worst",
        "iterative",
        _iterative,
        "align train {path}",
    ),
    "bench": InitKind(
        "score a reward model (--rm or --model) on an RM benchmark (--bench, default RewardBench from the hub)",
        "settings:align.cli.bench:BenchRunSettings",
        _bench,
        "align bench run --config {path}",
    ),
    "serve": InitKind(
        "serve a reward model (--rm or --model) over HTTP to OpenRLHF, verl or TRL",
        "settings:align.serve.settings:ServeSettings",
        _serve,
        "align serve --config {path}",
    ),
}


def _class_of(kind: str) -> type:
    import importlib

    from .configs import config_class

    if kind.startswith("settings:"):
        _, module, name = kind.split(":")
        return getattr(importlib.import_module(module), name)
    return config_class(kind)


def _doc_lines(doc: str, indent: str) -> list[str]:
    return [f"{indent}# {line}" for line in textwrap.wrap(doc, 116 - len(indent))] if doc else []


def _scalar(value: Any) -> str:
    import yaml

    return yaml.safe_dump(value, default_flow_style=True, width=1 << 16).strip().removesuffix("\n...").strip()


def commented_yaml(cls: type, values: dict[str, Any], indent: str = "") -> list[str]:
    """`values` (keys of the dataclass `cls`, nested for its sections) as YAML lines, each key under its field's doc."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = get_type_hints(cls)
    lines: list[str] = []
    for key, value in values.items():
        f = fields[key]  # a KeyError here is a template naming a key its config lacks: the init test catches it
        lines += _doc_lines(f.metadata.get("doc", ""), indent)
        section = hints[key]
        if isinstance(value, dict) and isinstance(section, type) and dataclasses.is_dataclass(section):
            lines.append(f"{indent}{key}:")
            lines += commented_yaml(section, value, indent + "  ")
        else:
            lines.append(f"{indent}{key}: {_scalar(value)}")
    return lines


def write_init(name: str, dest: str, args: argparse.Namespace, force: bool = False) -> Path:
    """Write the config of kind `name` to `dest` (a .yaml file, or a directory to write `<name>.yaml` in), check it
    as `align validate` does (except that models and data named there may not exist yet), and return its path."""
    from prefalign.config import build

    if name not in INIT_KINDS:
        from prefalign.errors import did_you_mean

        raise UserError(
            f"unknown kind '{name}'{did_you_mean(name, list(INIT_KINDS))}; choose one of {list(INIT_KINDS)}"
        )
    spec = INIT_KINDS[name]
    path = Path(dest)
    if path.suffix not in (".yaml", ".yml"):
        path = path / f"{name}.yaml"
    if path.exists() and not force:
        raise UserError(f"{path} exists; pass --force to overwrite it")
    cls = _class_of(spec.kind)
    values = spec.values(args)
    build(cls, values, str(path))  # every key and value checked before anything is written
    header = [
        f"# {spec.summary}.",
        "# Written by `align init`; every key is documented above it. Change what you need, then check and run:",
        f"#   align validate {path}" if not spec.kind.startswith("settings:") else "#",
        f"#   {spec.run.format(path=path)}",
        "# Any key can be overridden on the command line, e.g. train.lr=1e-5 (`align VERB --help`).",
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(header + commented_yaml(cls, values)) + "\n", encoding="utf-8")
    return path


def cmd_init(args: argparse.Namespace) -> int:
    if args.kind is None:
        width = max(map(len, INIT_KINDS))
        print("kinds (align init KIND [DEST]):")
        for name, spec in INIT_KINDS.items():
            print(f"  {name:<{width}}  {spec.summary}")
        return 0
    path = write_init(args.kind, args.dest, args, force=args.force)
    spec = INIT_KINDS[args.kind]
    print(f"wrote {path}")
    if args.model == DEFAULT_MODEL:
        print(f"  model: {DEFAULT_MODEL}, the embedded default (no download); --model for your own")
    if args.data == DEFAULT_DATA:
        print(f"  data: {DEFAULT_DATA}, a hub dataset (a download on first use); --data for your own file")
    if not spec.kind.startswith("settings:"):
        from .configs import check_resources, validate_file

        _, cfg = validate_file(str(path))
        try:
            notes = check_resources(cfg, str(path))
        except Exception as e:  # what it names may not exist yet (a reward model still to train): say so
            print(f"not ready to run yet: {e}")
        else:
            print("\n".join(f"  {n}" for n in notes))
    print(f"run it with: {spec.run.format(path=path)}")
    return 0


INIT_EXAMPLE = (
    "align init                                            (the kinds)\n"
    "  align init rm configs/my_rm.yaml --model Qwen/Qwen2.5-0.5B-Instruct --data my_pairs.jsonl\n"
    "  align init dpo . --model ./my-sft-model --data trl-lib/ultrafeedback_binarized\n"
    "  align init grpo grpo.yaml --model Qwen/Qwen2.5-0.5B-Instruct --rm runs/my_rm/model --prompts prompts.jsonl\n"
    "  align init iterative-dpo . --rm runs/my_rm/model --data my_pairs.jsonl\n"
    "  align init bench bench.yaml --rm runs/my_rm/model --bench rewardbench\n"
    "  align init serve serve.yaml --rm runs/my_rm/model\n"
    "a data row (JSONL, TRL's conversational format; `align ls formats` lists the others):\n"
    '  {"prompt": [{"role": "user", "content": "2+2?"}], "chosen": [{"role": "assistant", "content": "4"}],\n'
    '   "rejected": [{"role": "assistant", "content": "5"}]}'
)


def register(sub: argparse._SubParsersAction, add) -> None:
    p = add(sub, "init", cmd_init, "write a commented config for your own model and data", INIT_EXAMPLE)
    p.add_argument("kind", nargs="?", default=None, metavar="KIND", help=f"one of: {', '.join(INIT_KINDS)}")
    p.add_argument("dest", nargs="?", default=".", metavar="DEST", help="a .yaml file, or a directory (default: .)")
    p.add_argument(
        "--model",
        default=DEFAULT_MODEL,
        help=f"a hub id or a local model directory (default {DEFAULT_MODEL}, embedded: runs with no download)",
    )
    p.add_argument(
        "--data",
        default=DEFAULT_DATA,
        help="preference pairs: a local file or directory, an https URL, or a hub dataset (default: Anthropic/hh-rlhf "
        "helpful-base, its train split for training and its test split held out)",
    )
    p.add_argument("--hub-data-dir", default=None, help="for a hub dataset: the folder of its repository to read")
    p.add_argument("--eval-data", default=None, help="held-out pairs (default: a hash-split tenth of --data)")
    p.add_argument("--method", default="lora", choices=["lora", "full"], help="LoRA adapters or full fine-tuning")
    p.add_argument("--rm", default=None, help="a trained reward model directory (grpo, iterative-dpo, bench, serve)")
    p.add_argument("--prompts", default=None, help="grpo, iterative-dpo: prompts (default: the prompts of --data)")
    p.add_argument("--bench", default="rewardbench", help="bench: the benchmark (`align ls benchmarks`)")
    p.add_argument("--bench-data", default=None, help="bench: its data (default: the benchmark's hub dataset)")
    p.add_argument("--output-dir", default=None, help="the run directory the config names (default: runs/my_KIND)")
    p.add_argument("--force", action="store_true", help="overwrite DEST")
