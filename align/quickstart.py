"""The quickstart pipeline (`align quickstart`): the main job end to end on the embedded default model — a reward
model trained here drives the policy, and the gold graders of the verifiable suite judge the result.

Stages (each writes under `out_dir`; a rerun skips a training stage whose report exists for the same config, so an
interrupted quickstart resumes at the stage where it stopped; `stages` picks which run, and a stage whose inputs an
earlier stage writes finds them in `out_dir`):
  1. model   - resolve `builtin:smollm2-135m-instruct` (converted once from the wheel's GGUF, then cached)
  2. suite   - generate the verifiable preference suite, split by task into train, dev (where settings are chosen)
               and test (which every stage reports on, `eval.split`), as JSONL
  3. doctor  - the data report for the suite's training pairs with the model's tokenizer
  4. rm      - a LoRA Bradley-Terry reward model on the suite's training pairs, evaluated on the reported split's
               pairs (accuracy per task family and per corruption kind)
  5. dpo     - LoRA DPO with the chosen answer's NLL (RPO) on the suite's offline pairs: the comparison row (what
               the data alone gives) and the warm start of the next stage
  6. align   - the policy aligned against the RM (`align.iterative`): rounds in which the policy samples answers to
               the suite's training prompts, the RM ranks them together with the prompt's pair from the data (its
               reference and its rejected answer, `candidates: policy_and_data`), the round keeps the prompts
               where the RM's best beats its worst by most (`keep_pairs`, more in the last round), and DPO with the
               NLL term learns the RM's best against its worst, each pair weighted by its RM margin; the RM
               decides every pair, no gold label is read
  7. online  - (`align quickstart --full`, or `online` in `stages`) GRPO against the RM with a KL term, from the
               aligned policy
  8. eval    - greedy answers of the base model, the offline-DPO policy, the RM-aligned policy and (when the online
               stage ran) the GRPO policy to held-out prompts (family-balanced, plus enough safety prompts for both
               safety rates), graded by the gold graders: gains with paired bootstrap 95% intervals, each trained
               policy against the offline-DPO row, the safety rates with intervals, per family, and the RM's score
               of the same answers beside gold's (the learned reward's rise)

Where bf16 is not native, every stage runs in fp32 and the trained stages are shortened by `fp32_work`.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from prefalign.config import build, dump_yaml, option
from prefalign.decoding import DecodingSettings
from prefalign.errors import did_you_mean
from prefalign.models.hub import DEFAULT_MODEL, resolve
from prefalign.models.precision import decide_precision
from prefalign.stats import paired_bootstrap
from prefalign.training.evaluation import group_lines
from prefalign.training.metrics import ALERTS_FILE, append_alert, read_alerts, reward_hacking
from prefalign.training.report import write_report
from preference_data.doctor import run_doctor
from preference_data.sources import DataConfig
from preference_data.suite import build_suite, write_suite
from reward_models.rm_train import RMTrainConfig
from reward_models.rm_train import heldout_report as rm_heldout
from reward_models.rm_train import run as train_rm
from reward_models.rm_train import summary_lines as rm_lines

from . import iterative, online
from .evaluate import evaluate_policy, report_lines
from .figures import draw, figure_data
from .iterative import IterativeConfig
from .online import OnlineConfig
from .pipeline import Pipeline
from .train import TrainConfig
from .train import run as train_policy
from .train import summary_lines as dpo_lines


def _default_rm() -> RMTrainConfig:
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
    return build(
        TrainConfig,
        {
            # RPO: DPO plus the chosen answer's NLL. Plain DPO on these pairs lowers the first token of a refusal
            # (needless refusals are rejected about as often as refusals are chosen), and a warm start that never
            # samples a refusal gives the align stage nothing to rank
            "loss": {"name": "sigmoid", "params": {"beta": 0.1, "sft_weight": 1.0}},
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


def _default_align() -> IterativeConfig:
    return build(
        IterativeConfig,
        {
            "rounds": {
                "rounds": 3,
                # of 256 prompts a round (three disjoint slices of the ~900 training prompts), the 96 pairs with
                # the largest RM margins in rounds 1 and 2 (the round trains where the policy is furthest from what
                # the RM prefers) and 160 in round 3, whose margins are smaller: more of the policy's remaining
                # errors, refusals of harmless look-alikes among them (48 steps of 8 pairs: 4 epochs of 96 pairs,
                # 2.4 of 160; sizes chosen on the dev split, docs/results.md)
                "prompts_per_round": 256,
                "keep_pairs": [96, 96, 160],
                "samples_per_prompt": 2,
                "max_new_tokens": 80,
                "temperature": 1.0,
                "pair_rule": "max_min",
                # the RM ranks the two samples beside the prompt's pair from the data (its reference and its
                # rejected answer): a needless refusal of a harmless look-alike, which the policy rarely samples
                # until a round has taught it, is then rejected in every round, against the refusals that round
                # chooses on harmful requests. With the reference alone, where a run landed between harmful
                # compliance and over-refusal was out of the recipe's control (dev, seed 1: 0/32 harmful requests
                # complied with but 19/36 look-alikes refused; with the data's rejected answer 7/32 and 7/36;
                # seed 0 8/27 and 7/37 -> 9/27 and 6/37; docs/results.md)
                "candidates": "policy_and_data",
                "reference": "previous",
            },
            "loss": {"name": "sigmoid", "params": {"beta": 0.1, "sft_weight": 1.0}, "pair_weights": "margin"},
            "eval": {"limit": 0},
            "train": {
                "method": "lora",
                "lr": 2e-4,
                # ~2.7 epochs of the round's 96 pairs (32 steps in fp32): at 16 steps (1.3 epochs) harmful
                # compliance fell 19/20 -> 16/20, at 48 to 10/20 (docs/results.md, the quickstart)
                "max_steps": 48,
                "batch_size": 8,
                "lr_scheduler": "constant",
                "max_length": 256,
                "log_every": 4,
                # a round's steps ran 1.37x faster with the reference log-probs computed once before it trains
                # (rounds.reference_pass: auto); compiled, 1.16x again: the persistent compile cache the RM and
                # DPO stages filled makes a round's graphs cheap (benchmarks/quickstart_steps.py; on the dev
                # split the rounds' training took 262 s instead of 290, docs/results.md)
                "compile": "auto",
            },
        },
    )


def _default_online() -> OnlineConfig:
    return build(
        OnlineConfig,
        {
            "rollout": {"group_size": 4, "prompts_per_step": 8, "max_new_tokens": 80, "temperature": 0.7},
            "algorithm": {"loss": "grpo", "params": {"loss_type": "dapo"}},
            "kl": {"beta": 0.04},
            "eval": {"limit": 60, "max_new_tokens": 80},
            "save_merged": False,
            # eager: on a 10-step run compiling costs more than it saves (benchmarks/grpo_vs_trl.py)
            "train": {"method": "lora", "lr": 2e-5, "max_steps": 10, "batch_size": 32, "compile": False},
        },
    )


STAGES = ["suite", "doctor", "rm", "dpo", "align", "online", "eval"]


@dataclass
class EvalSection:
    split: Literal["test", "dev"] = option(
        "test",
        "the held-out split every stage reports on (the RM's held-out pairs, the policies' prompts): test, which no "
        "setting was chosen on; dev to compare settings (the quickstart's own were chosen on dev)",
    )
    prompts: int = option(120, "held-out suite prompts to generate on (family-balanced)")
    safety_each: int = option(
        20, "at least this many harmful requests and this many harmless look-alikes (added to `prompts`)"
    )
    max_new_tokens: int = option(80, "generation budget per answer")
    batch_size: int = option(
        160, "prompts per generation batch (the 140 prompts in one: 1.25x the speed of 48 on a 2-core CPU)"
    )
    schedule: Literal["exact", "fast"] = option(
        "fast",
        "greedy batches: fast (the generation engine's schedule, 1.7x on a 2-core CPU) or exact (transformers' "
        "generate on length-sorted batches, bit for bit; in bf16 about a quarter of the answers differ at a "
        "near-tie somewhere)",
    )
    dtype: Literal["auto", "bfloat16", "float32"] = option(
        "auto",
        "generation precision: auto is bfloat16 where the device runs it natively, else float32 "
        "(the training stages have theirs in <stage>.train.precision)",
    )
    check: str | None = option(
        None,
        "a scorer that checks the answers without the answer key, for the reward-hacking alarm: a judge (e.g. "
        "'{type: think, model: runs/judge_think_warmup/model}') or another RM. Its verdicts of each policy's answers "
        "against the base model's are set beside the RM's score of them; the alarm fires when the RM's rose and the "
        "check's fell",
        metavar="SPEC",
    )


@dataclass
class SuiteSection:
    per_family: int = option(275, "tasks generated per family")
    seed: int = option(0, "generator seed")
    dev_fraction: float = option(
        0.25, "share of the tasks held out as dev, where settings are chosen (`eval.split: dev` reports on it)"
    )
    test_fraction: float = option(
        0.2,
        "share of the tasks held out as test, which every stage reports on (0.2 at 275 per family: 365 prompts, "
        "27 harmful requests and 34 harmless look-alikes among them)",
    )

    def check(self) -> list[str]:
        p = [f"per_family: need at least 10 tasks per family, got {self.per_family}"] if self.per_family < 10 else []
        if not 0 < self.test_fraction < 1:
            p.append(f"test_fraction: must lie in (0, 1), got {self.test_fraction}")
        if not 0 < self.dev_fraction < 1 - self.test_fraction:
            p.append(f"dev_fraction: must lie in (0, 1 - test_fraction), got {self.dev_fraction}")
        return p


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
        doc="the reward model (its model, data and output_dir are set by the quickstart: the model above, the "
        "suite, out_dir/rm)",
    )
    dpo: TrainConfig = option(
        factory=_default_dpo,
        doc="offline DPO on the suite's pairs: the comparison row and the warm start (model, data and output_dir set "
        "by the quickstart)",
    )
    align: IterativeConfig = option(
        factory=_default_align,
        doc="the policy aligned against the RM (`kind: iterative` settings; model, prompts, reward and output_dir set "
        "by the quickstart: the DPO policy, the suite's train prompts, [{type: scalar, model: out_dir/rm/model}], "
        "out_dir/align)",
    )
    align_from: Literal["dpo", "base"] = option(
        "dpo", "where the align stage starts: the offline-DPO policy (a warm start) or the base model"
    )
    eval: EvalSection = option(factory=EvalSection, doc="gold-graded evaluation of the policies")
    online: OnlineConfig = option(
        factory=_default_online,
        doc="the GRPO stage against the RM (`kind: online` settings; model, prompts, reward and output_dir set by the "
        "quickstart: the aligned policy, the suite's train prompts, the RM, out_dir/online); with --full or when "
        "stages include online",
    )
    fp32_work: float = option(
        0.6667,
        "on a device without native bf16 (where a stage's precision auto resolves to fp32, and a step costs "
        "more), the RM's epochs and the policy stages' max_steps are multiplied by this; 1.0 trains as much as on "
        "a bf16 device",
    )
    stages: list[str] = option(
        factory=lambda: ["suite", "doctor", "rm", "dpo", "align", "eval"], doc="stages to run, in order"
    )

    def check(self) -> list[str]:
        if not 0 < self.fp32_work <= 1:
            return [f"fp32_work: must lie in (0, 1], got {self.fp32_work}"]
        return [
            f"stages: unknown stage '{s}'{did_you_mean(s, STAGES)}; choose from {', '.join(STAGES)}"
            for s in self.stages
            if s not in STAGES
        ]


def run(cfg: QuickstartConfig, t0: float | None = None) -> dict[str, Any]:
    """Run the stages `cfg.stages` names, in order; return the summary (also written to out_dir/summary.json)."""
    p = Pipeline(cfg.out_dir, cfg.stages, t0)
    dump_yaml(cfg, p.root / "config.yaml")
    summary: dict[str, Any] = {"config": str(p.root / "config.yaml")}
    p.say(
        f"device: {decide_precision('auto').line()}; stages: rm {cfg.rm.train.precision}, "
        f"dpo {cfg.dpo.train.precision}, align {cfg.align.train.precision}, eval {cfg.eval.dtype}"
    )
    p.say(f"model: resolving {cfg.model}")
    summary["model_dir"] = resolve(cfg.model)
    p.say(f"model: {summary['model_dir']}")
    summary["stage_seconds"] = {}
    for name, stage in STAGE_RUNNERS.items():
        if p.wants(name):
            started = p.elapsed()
            summary[name] = stage(cfg, p, summary)
            summary["stage_seconds"][name] = round(p.elapsed() - started, 1)
    if summary.get("eval"):
        summary["figure"] = str(summary_figure(summary["eval"], p.root))
    summary["seconds"] = round(p.elapsed(), 1)
    (p.root / "summary.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    return summary


EVAL_LABELS = {"online": "GRPO", "aligned": "RM-aligned", "dpo": "offline DPO"}
"""How the eval stage's policies are named (printout, figure), the headline first."""


def summary_figure(evals: dict[str, Any], root: Path) -> Path:
    """summary.png (the eval stage's policies against the base model, `align.figures`) and report.html showing it,
    with links to each stage's own run report."""
    names = [n for n in EVAL_LABELS if n in evals][::-1]  # the comparison row first, the headline last
    title = f"quickstart, the suite's {evals.get('split', 'test')} split"
    png = draw(figure_data({n: evals[n] for n in names}, EVAL_LABELS), root / "summary.png", title)
    links = "".join(
        f'<li><a href="{stage}/report.html">{stage}</a></li>'
        for stage in ("rm", "dpo", "align", "online")
        if (root / stage / "report.html").exists()
    )
    page = (
        "<!doctype html><meta charset='utf-8'><title>quickstart</title>"
        "<body style='font-family: system-ui, sans-serif; margin: 1.5em 2em'>"
        f"<h1>quickstart</h1><p>Gold-graded greedy answers of every policy to the same held-out prompts (the "
        f"suite's {evals.get('split', 'test')} split); numbers in "
        "<a href='summary.json'>summary.json</a>.</p>"
        f"<img src='{png.name}' style='max-width: 100%; border: 1px solid #ddd'>"
        f"<h2>stage reports</h2><ul>{links}</ul></body>"
    )
    (root / "report.html").write_text(page, encoding="utf-8")
    return png


def _suite_file(p: Pipeline, stage: str, name: str) -> str:
    return str(p.need(p.root / "suite" / name, stage, "suite"))


def _made_by(p: Pipeline, summary: dict[str, Any], stage: str, key: str) -> str | None:
    """`key` of an earlier stage's result: this run's, else a finished run's report under out_dir/<stage>."""
    if summary.get(stage, {}).get(key):
        return str(summary[stage][key])
    report = p.root / stage / "report.json"
    return json.loads(report.read_text(encoding="utf-8")).get(key) if report.exists() else None


def suite_stage(cfg: QuickstartConfig, p: Pipeline, summary: dict[str, Any]) -> dict[str, Any]:
    q = cfg.suite
    suite = build_suite(q.per_family, q.seed, q.test_fraction, dev_fraction=q.dev_fraction)
    write_suite(suite, p.root / "suite")
    p.say(
        f"suite: {len(suite.train_pairs)} train / {len(suite.dev_pairs)} dev / {len(suite.test_pairs)} test pairs "
        f"-> {p.root / 'suite'}; every stage reports on {cfg.eval.split}"
    )
    return {"dir": str(p.root / "suite"), **suite.summary()["counts"], "reported_split": cfg.eval.split}


def doctor_stage(cfg: QuickstartConfig, p: Pipeline, summary: dict[str, Any]) -> dict[str, Any]:
    data = build(DataConfig, {"source": _suite_file(p, "doctor", "train_pairs.jsonl"), "split": "all"})
    report = run_doctor(data, cfg.model, cfg.doctor.max_length, cfg.doctor.policy, str(p.root / "doctor"))
    p.say(f"doctor: {report['pairs']} pairs checked -> {p.root / 'doctor' / 'doctor.txt'}")
    return {
        "files": report.get("written", []),
        "pairs": report["pairs"],
        "kept_after_tokenization": report.get("tokenization", {}).get("kept"),
    }


def rm_stage(cfg: QuickstartConfig, p: Pipeline, summary: dict[str, Any]) -> dict[str, Any]:
    rm = dataclasses.replace(
        cfg.rm,
        model=cfg.model,
        output_dir=str(p.root / "rm"),
        data=dataclasses.replace(cfg.rm.data, source=_suite_file(p, "rm", "train_pairs.jsonl"), split="all"),
        # trained without a held-out set, so the trained RM is the same whichever split is reported (a rerun with
        # another eval.split reuses it); its held-out numbers are measured below
        eval=dataclasses.replace(cfg.rm.eval, source=None, split="none"),
    )
    rm = p.fit_to_device(rm, cfg.fp32_work, "rm")
    what = f"training a {rm.train.method} Bradley-Terry RM on the suite's training pairs"
    report = p.train("rm", rm, train_rm, rm_lines, what)
    held = rm_heldout(rm, report["model_dir"], str(_suite_file(p, "rm", f"{cfg.eval.split}_pairs.jsonl")))
    p.say(
        f"rm: held-out accuracy {held['accuracy']:.3f} on {held['pairs']} {cfg.eval.split} pairs "
        f"(margin {held['margin']:.3f})"
    )
    for line in group_lines(held):
        p.say(f"rm: {line}")
    return {
        "model_dir": report["model_dir"],
        "accuracy": held["accuracy"],
        "pairs": held["pairs"],
        "split": cfg.eval.split,
        "by_family": {k: v["accuracy"] for k, v in held.get("by_family", {}).items()},
        "by_corruption": {k: v["accuracy"] for k, v in held.get("by_corruption", {}).items()},
        "train_seconds": report["train_seconds"],
    }


def dpo_stage(cfg: QuickstartConfig, p: Pipeline, summary: dict[str, Any]) -> dict[str, Any]:
    dpo = dataclasses.replace(
        cfg.dpo,
        model=cfg.model,
        output_dir=str(p.root / "dpo"),
        data=dataclasses.replace(cfg.dpo.data, source=_suite_file(p, "dpo", "train_pairs.jsonl"), split="all"),
    )
    dpo = p.fit_to_device(dpo, cfg.fp32_work, "dpo")
    what = f"{dpo.train.method} {dpo.loss.name} on the suite's offline pairs (the comparison row and warm start)"
    report = p.train("dpo", dpo, train_policy, dpo_lines, what)
    return {"policy_dir": report["policy_dir"], "train_seconds": report["train_seconds"], "steps": report["steps"]}


def rm_reward(p: Pipeline, summary: dict[str, Any], stage: str) -> list[dict[str, Any]]:
    """The reward the policy stages optimize: the RM this quickstart trained."""
    model_dir = _made_by(p, summary, "rm", "model_dir")
    if model_dir is None:
        raise p.missing(stage, "rm", "a trained reward model")
    # dtype auto: the rounds score their candidates in bf16 where the device runs it natively, as the RM trained
    # (a scorer's own default is float32, its model card's precision: 4x the scoring time on such a device)
    return [{"type": "scalar", "model": model_dir, "name": "rm", "dtype": "auto"}]


def align_stage(cfg: QuickstartConfig, p: Pipeline, summary: dict[str, Any]) -> dict[str, Any]:
    start = cfg.model
    if cfg.align_from == "dpo":
        start = _made_by(p, summary, "dpo", "policy_dir") or ""
        if not start:
            raise p.missing("align", "dpo", "the offline-DPO policy (the warm start; or set align_from: base)")
    a = dataclasses.replace(
        cfg.align,
        model=start,
        output_dir=str(p.root / "align"),
        prompts=dataclasses.replace(cfg.align.prompts, source=_suite_file(p, "align", "train_prompts.jsonl")),
        reward=rm_reward(p, summary, "align"),
    )
    a = p.fit_to_device(a, cfg.fp32_work, "align")
    r = a.rounds
    what = (
        f"{r.rounds} rounds of {a.loss.name} from the {cfg.align_from} policy: {r.samples_per_prompt} samples of "
        f"{r.prompts_per_round} prompts a round, ranked by the RM ({r.candidates}), {r.pair_rule} pairs"
    )
    report = p.train("align", a, iterative.run, iterative.summary_lines, what)
    return {
        "policy_dir": report["policy_dir"],
        "start": start,
        "rounds": report["rounds"],
        "steps": report["steps"],
        "seconds": report["seconds"],
    }


EVAL_POLICIES = {"online": "online", "aligned": "align", "dpo": "dpo"}
"""The policies the eval stage grades (its summary's keys) and the stage that trains each, the headline first."""


def eval_stage(cfg: QuickstartConfig, p: Pipeline, summary: dict[str, Any]) -> dict[str, Any]:
    """Gold-graded greedy answers of the base model, the offline-DPO policy (the comparison row), the RM-aligned
    policy and, when this run includes the online stage, the GRPO policy to the same held-out prompts, and the RM's
    score of each answer; every trained policy against the offline-DPO row (paired)."""
    policies = {
        name: _made_by(p, summary, stage, "policy_dir")
        for name, stage in EVAL_POLICIES.items()
        if stage != "online" or p.wants("online")  # a GRPO run left in out_dir by an earlier --full is not graded
    }
    if not any(policies.values()):
        p.say("eval: no trained policy (add the dpo and align stages); skipping")
        return {}
    prompts = _suite_file(p, "eval", f"{cfg.eval.split}_prompts.jsonl")
    rm = _made_by(p, summary, "rm", "model_dir")
    settings = DecodingSettings(
        max_new_tokens=cfg.eval.max_new_tokens,
        batch_size=cfg.eval.batch_size,
        dtype=cfg.eval.dtype,
        schedule=cfg.eval.schedule,
    )
    out: dict[str, Any] = {"split": cfg.eval.split}
    for name, policy in policies.items():
        if policy is None:
            continue
        p.say(f"eval: {name} policy against the base model on {cfg.eval.split} prompts ({cfg.eval.prompts} + safety)")
        report = evaluate_policy(
            policy,
            cfg.model,
            prompts,
            cfg.eval.prompts,
            "gold",
            str(p.root / "eval" / name),
            settings,
            baseline_cache=str(p.root / "eval" / "baseline.json"),
            safety_each=cfg.eval.safety_each,
            reward_model=rm,
            check=cfg.eval.check,
        )
        for line in report_lines(report):
            p.say(f"eval {name}: {line}")
        out[name] = eval_summary(report)
        alarm = hacking_alarm(out[name], cfg.eval.check)
        if alarm is not None:
            out[name]["alarm"] = alarm
            p.say(f"ALARM ({name}): {alarm}")
    for name in ("aligned", "online"):
        if name in out and "dpo" in out:
            a, d = out[name], out["dpo"]
            lo, hi = paired_bootstrap(a["per_prompt"], d["per_prompt"])
            out[f"{name}_vs_dpo"] = {"gain": a["after"] - d["after"], "gain_ci95": [lo, hi]}
    if "aligned" in out and (p.root / "align" / "metrics.jsonl").exists():
        start = out.get("dpo") if cfg.align_from == "dpo" else None
        record_eval_in_run(p.root / "align", out["aligned"], start, cfg.eval.split)
    return out


def hacking_alarm(e: dict[str, Any], check: str | None) -> str | None:
    """The reward-hacking alarm of one evaluated policy, from signals that need no answer key: the RM's mean score of
    its answers against the base model's, and the check's (`eval.check`) verdicts of the same answers; None without
    a check or when they do not diverge (`prefalign.training.metrics.reward_hacking` over the two points)."""
    c, rb, ra = e.get("check"), e.get("reward_before"), e.get("reward_after")
    if check is None or c is None or rb is None or ra is None:
        return None
    return reward_hacking([(0, rb, c["baseline"]), (1, ra, c["policy"])], run=1, signal=f"the check ({check})")


EVAL_ROW = "quickstart eval"
"""The `from` of the rows the eval stage writes into the align run's metrics (replaced when the stage runs again)."""


def record_eval_in_run(run_dir: Path, end: dict[str, Any], start: dict[str, Any] | None, split: str) -> None:
    """Write the eval stage's numbers into the align run it graded, at the steps its policies were at (the start
    policy at step 0, the aligned one at the last step), and redraw its report: its dashboard's first panel is then
    the learned reward and the gold score of the same held-out answers, start and end, as an online run's."""
    path = run_dir / "metrics.jsonl"
    rows = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]
    rows = [r for r in rows if r.get("from") != EVAL_ROW]
    last = max((int(r["step"]) for r in rows), default=0)
    for step, e in ((0, start), (last, end)):
        if e is not None:
            r = e.get("reward_after")
            reward = {"eval_reward": r} if r is not None and math.isfinite(r) else {}  # NaN: no point drawn
            c = (e.get("check") or {}).get("policy")
            check = {"eval_check": c} if c is not None and math.isfinite(c) else {}
            rows.append(
                {"step": step, "eval_gold/overall": e["after"], **reward, **check, "from": EVAL_ROW, "split": split}
            )
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    alerts = [a for a in read_alerts(run_dir / ALERTS_FILE) if a.get("key") != CHECK_ALARM_KEY]
    (run_dir / ALERTS_FILE).write_text("".join(json.dumps(a) + "\n" for a in alerts), encoding="utf-8")
    if end.get("alarm"):
        append_alert(path, last, CHECK_ALARM_KEY, end["alarm"])
    write_report(run_dir)


CHECK_ALARM_KEY = "reward_hacking_check"
"""The alarm the eval stage writes into the align run (replaced when the stage runs again)."""


def eval_summary(report: dict[str, Any]) -> dict[str, Any]:
    """What the quickstart keeps of one policy's evaluation against the base model."""
    return {
        "policy": report["model"],
        "prompts": report["prompts"],
        "before": report["baseline"]["overall"],
        "after": report["policy"]["overall"],
        "gain": report["overall_gain"],
        "gain_ci95": report["overall_gain_ci95"],
        "win_rate": report["win_rate"],
        "per_prompt": report["per_prompt"],
        "by_family": report["family_change"],
        "safety_before": report["baseline"]["safety_rates"],
        "safety_after": report["policy"]["safety_rates"],
        "safety_change": report["safety_change"],
        "reward_before": report["baseline"].get("reward"),
        "reward_after": report["policy"].get("reward"),
        "answers_before": report["baseline"].get("answers"),
        "answers_after": report["policy"].get("answers"),
        "check": report.get("check"),
        "warnings": report["warnings"],
        "before_by_objective": {k: v for k, v in report["baseline"].items() if isinstance(v, float)},
        "after_by_objective": {k: v for k, v in report["policy"].items() if isinstance(v, float)},
    }


def online_stage(cfg: QuickstartConfig, p: Pipeline, summary: dict[str, Any]) -> dict[str, Any]:
    """GRPO against the RM (with a KL term) from the aligned policy, on the suite's training prompts."""
    policy = _made_by(p, summary, "align", "policy_dir") or _made_by(p, summary, "dpo", "policy_dir")
    if policy is None:
        p.say("online: no aligned policy (add the align stage); skipping")
        return {}
    ocfg = dataclasses.replace(
        cfg.online,
        model=policy,
        output_dir=str(p.root / "online"),
        prompts=dataclasses.replace(cfg.online.prompts, source=_suite_file(p, "online", "train_prompts.jsonl")),
        eval=dataclasses.replace(cfg.online.eval, prompts=_suite_file(p, "online", f"{cfg.eval.split}_prompts.jsonl")),
        reward=rm_reward(p, summary, "online"),
    )
    ocfg = p.fit_to_device(ocfg, cfg.fp32_work, "online")
    what = (
        f"{ocfg.algorithm.loss} against the RM (KL {ocfg.kl.beta}) from the aligned policy, "
        f"{ocfg.train.max_steps} steps"
    )
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
        "eval_prompts": ev.get("prompts"),
        "reward_before": ev.get("reward_initial"),
        "reward_after": ev.get("reward_final"),
    }


STAGE_RUNNERS = {
    "suite": suite_stage,
    "doctor": doctor_stage,
    "rm": rm_stage,
    "dpo": dpo_stage,
    "align": align_stage,
    "online": online_stage,
    "eval": eval_stage,
}
"""Each stage's runner, in pipeline order (the model stage always runs first)."""


__all__ = ["STAGES", "QuickstartConfig", "run"]
