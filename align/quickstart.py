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
               reference and its rejected answer, `candidates: policy_and_data`; the reference's reward counted 1
               higher, `reference_bonus`, so a sample displaces it only by beating it by more), the round keeps
               the prompts where the RM's best beats its worst by most (`keep_pairs`, more in the last round), and
               DPO with the NLL term learns the RM's best against its worst, each pair weighted by its RM margin; the RM
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
from pathlib import Path
from typing import Any

from prefalign.config import build, dump_yaml
from prefalign.files import write_json, write_text
from prefalign.models.hub import resolve
from prefalign.models.precision import decide_precision
from prefalign.training.evaluation import group_lines
from preference_data.doctor import run_doctor
from preference_data.records import write_jsonl
from preference_data.sources import DataConfig
from preference_data.suite import REFUSAL_KINDS, build_suite, hard_negatives, write_suite
from reward_models.checkpoint import read_stats
from reward_models.refusal_rule import probe_for
from reward_models.rm_train import heldout_report as rm_heldout
from reward_models.rm_train import run as train_rm
from reward_models.rm_train import summary_lines as rm_lines
from reward_models.scorers import scorer_spec

from . import iterative, online
from .figures import draw, figure_data
from .pipeline import Pipeline
from .quickstart_config import STAGES, QuickstartConfig
from .quickstart_eval import eval_stage
from .train import run as train_policy
from .train import summary_lines as dpo_lines


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
    write_json(p.root / "summary.json", summary, indent=2)
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
    write_text(root / "report.html", page)
    return png


def suite_stage(cfg: QuickstartConfig, p: Pipeline, summary: dict[str, Any]) -> dict[str, Any]:
    q = cfg.suite
    suite = build_suite(q.per_family, q.seed, q.test_fraction, dev_fraction=q.dev_fraction)
    write_suite(suite, p.root / "suite")
    p.say(
        f"suite: {len(suite.train_pairs)} train / {len(suite.dev_pairs)} dev / {len(suite.test_pairs)} test pairs "
        f"-> {p.root / 'suite'}; every stage reports on {cfg.eval.split}"
    )
    hard = {}
    if q.hard_negatives or q.hard_refusals:
        content = hard_negatives(suite, q.hard_negatives)
        refusals = hard_negatives(suite, q.hard_refusals, kinds=REFUSAL_KINDS)
        extra = content + refusals
        write_jsonl(str(p.root / "suite" / RM_PAIRS), [r.to_dict() for r in suite.train_pairs + extra])
        hard = {"rm_pairs": len(suite.train_pairs) + len(extra), "hard_negatives": len(content)}
        hard["hard_refusals"] = len(refusals)
        p.say(
            f"suite: the RM trains on {hard['rm_pairs']} pairs, {len(content)} of them hard negatives and "
            f"{len(refusals)} refusal pairs -> {RM_PAIRS}"
        )
    return {"dir": str(p.root / "suite"), **suite.summary()["counts"], **hard, "reported_split": cfg.eval.split}


RM_PAIRS = "rm_pairs.jsonl"


def rm_pairs(cfg: QuickstartConfig) -> str:
    """The suite file the RM trains on: the training pairs, with `suite.hard_negatives` or `suite.hard_refusals` the
    file with those added."""
    return RM_PAIRS if cfg.suite.hard_negatives or cfg.suite.hard_refusals else "train_pairs.jsonl"


def doctor_stage(cfg: QuickstartConfig, p: Pipeline, summary: dict[str, Any]) -> dict[str, Any]:
    data = build(DataConfig, {"source": p.suite_file("doctor", "train_pairs.jsonl"), "split": "all"})
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
        data=dataclasses.replace(cfg.rm.data, source=p.suite_file("rm", rm_pairs(cfg)), split="all"),
        # trained without a held-out set, so the trained RM is the same whichever split is reported (a rerun with
        # another eval.split reuses it); its held-out numbers are measured below
        eval=dataclasses.replace(cfg.rm.eval, source=None, split="none"),
    )
    rm = p.fit_to_device(rm, cfg.fp32_work, "rm")
    what = f"training a {rm.train.method} Bradley-Terry RM on the suite's training pairs"
    report = p.train("rm", rm, train_rm, rm_lines, what)
    held = rm_heldout(rm, report["model_dir"], str(p.suite_file("rm", f"{cfg.eval.split}_pairs.jsonl")))
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
        data=dataclasses.replace(cfg.dpo.data, source=p.suite_file("dpo", "train_pairs.jsonl"), split="all"),
    )
    dpo = p.fit_to_device(dpo, cfg.fp32_work, "dpo")
    what = f"{dpo.train.method} {dpo.loss.name} on the suite's offline pairs (the comparison row and warm start)"
    report = p.train("dpo", dpo, train_policy, dpo_lines, what)
    return {"policy_dir": report["policy_dir"], "train_seconds": report["train_seconds"], "steps": report["steps"]}


def align_reward(cfg: QuickstartConfig, p: Pipeline, summary: dict[str, Any]) -> list[dict[str, Any]]:
    """What ranks the align rounds' candidates: the pairwise judge of `rank_by`, else the RM."""
    if cfg.rank_by is not None:
        return [scorer_spec(cfg.rank_by, flag="rank_by")]
    reward = rm_reward(p, summary, "align")
    if cfg.check_by is not None:
        reward = [checked_reward(cfg, reward[0])]
    if cfg.rule_weight:
        reward.append(refusal_rule(cfg, p))
    return reward


def checked_reward(cfg: QuickstartConfig, rm: dict[str, Any]) -> dict[str, Any]:
    """The RM and the checker (`cfg.check_by`) as one ensemble: the RM normalised by its saved statistics, the
    checker weighted `check_weight`, the RM alone where the checker abstains (`missing: skip`)."""
    member = {k: v for k, v in rm.items() if k != "name"}
    checker = scorer_spec(cfg.check_by, flag="check_by")
    return {
        "type": "ensemble",
        "name": "rm",
        "members": [member, checker],
        "weights": [1.0, cfg.check_weight],
        "k": 0.0,
        "normalize": True,
        "missing": "skip",
    }


def checked_bonus(cfg: QuickstartConfig, rm_dir: str, bonus: float) -> float:
    """`align.rounds.reference_bonus` in the checked ensemble's units: given in the RM's (raw) units, divided by the
    RM's std (its normalisation) and by 1 + check_weight (the ensemble's weighted mean), so the reference is
    displaced by the same RM margin as without the checker where the checker scores both alike."""
    return bonus / read_stats(rm_dir).std / (1.0 + cfg.check_weight)


def refusal_rule(cfg: QuickstartConfig, p: Pipeline) -> dict[str, Any]:
    """The refusal rule beside the RM: its probe fitted on the suite's training pairs with the base model's
    prompt states (reused when fitted on the same model and pairs)."""
    pairs = p.suite_file("align", "train_pairs.jsonl")
    probe, card, fitted = probe_for(cfg.model, pairs, p.root / "refusal_probe")
    p.say(
        f"align: refusal probe {'fitted' if fitted else 'reused'} ({probe}): {card.refuse} of {card.prompts} "
        f"training prompts deserve a refusal (their chosen answer declines), training accuracy "
        f"{card.train_accuracy:.3f}{refusal_text(cfg)}"
    )
    return {"type": "refusal_rule", "probe": str(probe), "weight": cfg.rule_weight, "name": "refusal_rule"}


def refusal_text(cfg: QuickstartConfig) -> str:
    if cfg.rule_as != "reward":
        kept = ", the pairs it separates kept first" if cfg.rule_as == "order_kept" else ""
        return f", the refusal rule ordering each prompt's candidates before the RM{kept}"
    return f", the refusal rule x{cfg.rule_weight:g} beside the RM"


def spec_text(spec: str | dict[str, Any]) -> str:
    """A scorer SPEC as the user writes it: the string as given, a mapping inline ({type: grm, model: DIR})."""
    if isinstance(spec, str):
        return spec
    return "{" + ", ".join(f"{k}: {v}" for k, v in spec.items()) + "}"


def rm_reward(p: Pipeline, summary: dict[str, Any], stage: str) -> list[dict[str, Any]]:
    """The reward the policy stages optimize: the RM this quickstart trained."""
    model_dir = p.made_by(summary, "rm", "model_dir")
    if model_dir is None:
        raise p.missing(stage, "rm", "a trained reward model")
    # dtype auto: the rounds score their candidates in bf16 where the device runs it natively, as the RM trained
    # (a scorer's own default is float32, its model card's precision: 4x the scoring time on such a device)
    return [{"type": "scalar", "model": model_dir, "name": "rm", "dtype": "auto"}]


def align_stage(cfg: QuickstartConfig, p: Pipeline, summary: dict[str, Any]) -> dict[str, Any]:
    start = cfg.model
    if cfg.align_from == "dpo":
        start = p.made_by(summary, "dpo", "policy_dir") or ""
        if not start:
            raise p.missing("align", "dpo", "the offline-DPO policy (the warm start; or set align_from: base)")
    a = dataclasses.replace(
        cfg.align,
        model=start,
        output_dir=str(p.root / "align"),
        prompts=dataclasses.replace(cfg.align.prompts, source=p.suite_file("align", "train_prompts.jsonl")),
        reward=align_reward(cfg, p, summary),
    )
    if cfg.rule_weight and cfg.rule_as != "reward":
        kept = cfg.rule_as == "order_kept"
        a = dataclasses.replace(a, rounds=dataclasses.replace(a.rounds, order_by=["refusal_rule"], keep_ordered=kept))
    if cfg.check_by is not None and a.rounds.reference_bonus:
        rm_dir = str(p.made_by(summary, "rm", "model_dir"))
        bonus = checked_bonus(cfg, rm_dir, a.rounds.reference_bonus)
        a = dataclasses.replace(a, rounds=dataclasses.replace(a.rounds, reference_bonus=bonus))
    a = p.fit_to_device(a, cfg.fp32_work, "align")
    r = a.rounds
    what = (
        f"{r.rounds} rounds of {a.loss.name} from the {cfg.align_from} policy: {r.samples_per_prompt} samples"
        + (" (one greedy)" if r.greedy_sample else "")
        + " of "
        f"{r.prompts_per_round} prompts a round, ranked by "
        + (
            f"the judge {spec_text(cfg.rank_by)} ({r.ranking})"
            if cfg.rank_by
            else f"the RM and the checker x{cfg.check_weight:g} ({spec_text(cfg.check_by)})"
            if cfg.check_by
            else "the RM"
        )
        + f" ({r.candidates}), {r.pair_rule} pairs"
        + (f", the reference's reward +{r.reference_bonus:.3g}" if r.reference_bonus else "")
        + (", rejected from the policy's own samples" if r.rejected_from == "policy" else "")
        + (refusal_text(cfg) if cfg.rule_weight else "")
    )
    report = p.train("align", a, iterative.run, iterative.summary_lines, what)
    return {
        "policy_dir": report["policy_dir"],
        "start": start,
        "rounds": report["rounds"],
        "steps": report["steps"],
        "seconds": report["seconds"],
    }


def online_stage(cfg: QuickstartConfig, p: Pipeline, summary: dict[str, Any]) -> dict[str, Any]:
    """GRPO against the RM (with a KL term) from the aligned policy, on the suite's training prompts."""
    policy = p.made_by(summary, "align", "policy_dir") or p.made_by(summary, "dpo", "policy_dir")
    if policy is None:
        p.say("online: no aligned policy (add the align stage); skipping")
        return {}
    ocfg = dataclasses.replace(
        cfg.online,
        model=policy,
        output_dir=str(p.root / "online"),
        prompts=dataclasses.replace(cfg.online.prompts, source=p.suite_file("online", "train_prompts.jsonl")),
        eval=dataclasses.replace(cfg.online.eval, prompts=p.suite_file("online", f"{cfg.eval.split}_prompts.jsonl")),
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
