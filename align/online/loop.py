"""`align train` with `kind: online`: the loop, top to bottom.

    setup     run directory, the learner (policy, reference, optimizer; DDP or FSDP), the sampler, the reward
              components, the composition, the resume point
    per step  draw (rollout -> reward -> frozen log-probs, cached) -> gather every rank's rewards -> advantage ->
              update -> sync the sampler -> composition after-step -> checkpoint -> held-out evaluation
    end       the final evaluation, the policy saved, the report

Each phase is its own module with typed values between them: `Rollout` (rollout.py), `Rewards` (reward.py),
`Frozen` and the update (update.py), `Advantages` (advantage.py), checkpoints and caches (state.py).
"""

from __future__ import annotations

import math
import time
from typing import Any

import torch

from prefalign.files import write_json
from prefalign.training.metrics import HACKING_KEY, append_alert
from prefalign.training.recipe import save_policy
from prefalign.training.trainer import saved_dtype

from ..composition import Composer, plot_composition
from ..losses.policy_gradient import PG_LOSSES
from .advantage import compute_advantages, estimator, kl_penalty
from .config import OnlineConfig
from .context import Online, setup
from .evaluation import component_point, eval_lines, gold_eval_report, hacking_check, log_row
from .logps import Seq
from .parallel import gather, ranks, share
from .reward import gather_rewards, score_rollout
from .rollout import build_sampler, dpa_directions, draw_step, prompts_for_step, reference_texts, with_references
from .search import threshold_search
from .state import Drawn, load_drawn, save_checkpoint, save_drawn, step_path
from .update import Frozen, probe, sequences, update

PLOT_KEYS = ["reward", "eval_gold/overall", "loss", "kl", "completion_length", "clip_ratio/high", "reward_std"]


def draw(o: Online, step: int) -> Drawn:
    """Rollout -> reward -> frozen log-probs of this rank's share of the step's prompts (read back when cached)."""
    path = step_path(o.run.dir, step)
    cached = load_drawn(path)
    if cached is not None:
        return cached
    cfg, c = o.cfg, o.composer
    prompts = share(prompts_for_step(o.prompts, step, cfg.rollout.prompts_per_step))
    directions = None
    if c is not None and c.needs("theta"):
        directions = dpa_directions(cfg.rollout.seed, step, ranks()[0], len(prompts), c.sec.dpa.angles)
    rollout = draw_step(o.sampler, prompts, cfg.rollout, step, directions, c.sec.dpa.components if c else None)
    if cfg.rollout.candidates == "policy_and_reference":
        rollout = with_references(rollout, o.learner.tokenizer, cfg.rollout.max_new_tokens)
    par_texts = None
    if c is not None and c.needs("par_ref"):
        if o.par_sampler is None:
            o.par_sampler = build_sampler(cfg.model, o.learner.tokenizer, cfg.rollout, o.learner.bf16, o.learner.device)
        par_texts = reference_texts(o.par_sampler, prompts, cfg.rollout, c.sec.par.references, step)
    rewards = score_rollout(o.rewards, rollout, par_texts)
    t0 = time.time()
    seqs = [
        Seq(p, ids, lp, None, 0.0)
        for p, ids, lp in zip(rollout.completion_prompt_ids(), rollout.token_ids, rollout.logprobs, strict=True)
    ]
    ref = o.learner.frozen(seqs, "ref") if cfg.kl.beta > 0 else None
    old = o.learner.frozen(seqs, "old") if cfg.algorithm.old_logps == "recompute" else None
    if old is None and rollout.reference:  # π_old of the rows nobody sampled: the current policy's, recomputed
        rows = rollout.reference_rows()
        for i, lp in zip(rows, o.learner.frozen([seqs[i] for i in rows], "old"), strict=True):
            rollout.logprobs[i] = lp
    drawn = Drawn(rollout, rewards, Frozen(old, ref), False, time.time() - t0)
    save_drawn(path, drawn)
    return drawn


def _per_completion(values: list[float] | None, G: int) -> torch.Tensor | None:
    """Every rank's per-prompt values (DPA directions) repeated for each completion of the prompt."""
    if values is None:
        return None
    return torch.tensor([v for v in gather(values) for _ in range(G)], dtype=torch.float32)


def train_step(o: Online) -> dict[str, Any]:
    """One step: draw -> advantage -> update -> sync (-> composition after-step, checkpoint, evaluation)."""
    cfg, learner, c = o.cfg, o.learner, o.composer
    t_step = time.time()
    d = draw(o, o.step)
    if not d.cached:
        o.timing["generate"] += d.rollout.seconds
        o.timing["score"] += d.rewards.seconds
        o.timing["frozen"] += d.frozen_seconds
    everyone = gather_rewards(d.rewards)
    penalty, stats = kl_penalty(cfg, d.rollout, d.frozen.old, d.frozen.ref)
    penalty_all = None if penalty is None else torch.tensor(gather(penalty.tolist()), dtype=torch.float32)
    n = d.rollout.size
    local = slice(ranks()[0] * n, ranks()[0] * n + n)
    if c is not None and everyone.components is not None:
        per = c.probe_advantages(everyone.components, estimator(cfg))
        if per is not None:
            s = probe(learner, cfg, d.rollout, d.frozen, per[local], c.sec.gradient)
            stats |= c.observe_influence(s, learner.lr())
    theta = _per_completion(d.rollout.directions, cfg.rollout.rows_per_prompt)
    adv = compute_advantages(cfg, everyone, penalty_all, c, theta, local)
    t0 = time.time()
    row = {"step": o.step + 1, **update(learner, cfg, sequences(d.rollout, d.frozen, adv.values, adv.valid))}
    o.timing["update"] += time.time() - t0
    o.step += 1
    o.prompts_done += cfg.rollout.prompts_per_step
    learner.sync(o.sampler)
    sampled = d.rollout.sampled_rows()
    lengths = [len(d.rollout.token_ids[i]) for i in sampled]
    row |= stats | adv.stats
    row["completion_length"] = sum(lengths) / max(len(lengths), 1)
    row["eos_fraction"] = sum(d.rollout.finish[i] == "eos" for i in sampled) / max(len(lengths), 1)
    if c is not None and everyone.components is not None:
        row |= c.after_step(everyone.components)
        row |= observe_point(o, row)
    row["step_seconds"] = time.time() - t_step
    if cfg.train.eval_every > 0 and o.step % cfg.train.eval_every == 0 and o.step < cfg.train.max_steps:
        ev = o.evaluate()
        if ev is not None:
            record_eval(o, ev, row)
    if o.main:
        log_row(o.run.metrics_path, row)
        write_json(o.run.dir / "evals.json", o.evals)
        if o.step % max(cfg.train.log_every, 1) == 0:
            print(
                f"step {o.step}/{cfg.train.max_steps}: reward {row.get('reward', math.nan):.4f} "
                f"loss {row['loss']:.4f} len {row['completion_length']:.1f}"
                + (f" eval {row['eval_gold/overall']:.4f}" if "eval_gold/overall" in row else ""),
                flush=True,
            )
    # after the step's row: a run killed between the two resumes from the checkpoint before, its row dropped and
    # logged again, where a checkpoint written first would leave the step's row unwritten for good
    if cfg.train.save_every > 0 and o.step % cfg.train.save_every == 0:
        save_checkpoint(learner, o.run.checkpoints, o.step, c, cfg.keep_checkpoints)
    return row


def record_eval(o: Online, ev: dict[str, Any], row: dict[str, Any]) -> None:
    """Keep an evaluation, put its gold and learned reward in the metrics row, and check for reward hacking."""
    o.evals[str(o.step)] = ev
    row["eval_gold/overall"] = ev["overall"]
    if ev.get("reward") is not None:
        row["eval_reward"] = ev["reward"]
    alert = hacking_check(o.evals)
    if alert is not None and HACKING_KEY not in o.raised and o.main:  # once per run
        o.raised.add(HACKING_KEY)
        print(f"ALERT: {alert}", flush=True)
        append_alert(o.run.metrics_path, o.step, HACKING_KEY, alert)


def observe_point(o: Online, row: dict[str, Any]) -> dict[str, float]:
    """The composition rule's evaluation point after a step: the components' means over greedy held-out answers
    (computed on rank 0, shared) or over the rollout."""
    c = o.composer
    if c is None or c.rule.point is None:
        return {}
    if c.rule.point == "rollout":
        return c.observe_point([row.get(f"reward/{n}", math.nan) for n in c.names])
    return c.observe_point(eval_point(o, c))


def eval_point(o: Online, c: Composer) -> list[float]:
    h = c.sec.hypervolume
    point = (
        component_point(o.sampler, o.rewards, o.cfg.eval.prompts, h.eval_prompts, h.eval_max_new_tokens)
        if o.main
        else []
    )
    return next(x for x in gather([point]) if x)


def run(cfg: OnlineConfig, resume: bool = False) -> dict[str, Any]:
    """Run the online loop as `cfg` says; return the report (also written to report.json)."""
    o = setup(cfg, resume)
    t_start = time.time()
    search: dict[str, Any] | None = None
    try:
        if "0" not in o.evals:
            ev = o.evaluate()
            if ev is not None:
                row0: dict[str, Any] = {"step": 0}
                record_eval(o, ev, row0)
                log_row(o.run.metrics_path, row0)
        c = o.composer
        if c is not None and c.rule.wants_initial_point():
            start = c.observe_point(eval_point(o, c))
            if o.main:
                log_row(o.run.metrics_path, {"step": 0, **start})
        if c is not None and c.sec.search.method == "nelder_mead":
            search = threshold_search(o, c, train_step)
        while o.step < cfg.train.max_steps:
            train_step(o)
    except BaseException as e:
        if o.main:
            o.run.stopped(o.step, e)
        raise
    train_seconds = time.time() - t_start
    done = o.evals.get(str(o.step)) if o.step > 0 else None  # a rerun after the final evaluation keeps it
    final = done if done is not None else o.evaluate()
    if final is not None and done is None:
        last: dict[str, Any] = {"step": o.step}
        record_eval(o, final, last)
        log_row(o.run.metrics_path, last)
        write_json(o.run.dir / "evals.json", o.evals)
    with o.learner.whole_policy() as policy:
        saved = (
            save_policy(
                policy, o.learner.tokenizer, o.run.dir, cfg.train.method, cfg.save_merged, dtype=saved_dtype(cfg.train)
            )
            if o.main
            else {}
        )
    if not o.main:
        return {}
    write_json(o.run.dir / "evals.json", o.evals)
    return o.run.finish(report(o, saved, final, train_seconds, search), PLOT_KEYS)


def report(
    o: Online, saved: dict[str, str], final: dict[str, Any] | None, seconds: float, search: dict[str, Any] | None
) -> dict[str, Any]:
    cfg = o.cfg
    out: dict[str, Any] = {
        **saved,
        "base_model": cfg.model,
        "method": cfg.train.method,
        "precision": o.run.precision,
        "algorithm": {
            "loss": cfg.algorithm.loss,
            "advantage": cfg.algorithm.advantage_kind(),
            "params": PG_LOSSES[cfg.algorithm.loss].defaults | dict(cfg.algorithm.params),
            "kl": {"beta": cfg.kl.beta, "placement": cfg.kl_placement(), "estimator": cfg.kl_estimator()},
        },
        "reward": o.rewards.describe(),
        "reward_failures": o.rewards.failures(),
        "steps": o.step,
        "processes": ranks()[1],
        "parallel": o.learner.mode,
        "train_seconds": round(seconds, 1),
        "prompts_per_second": round(o.prompts_done / max(seconds, 1e-9), 4),
        "seconds_by_phase": {k: round(v, 1) for k, v in o.timing.items()},
        "eval": gold_eval_report(o.evals, final),
    }
    if o.composer is not None:
        comp = o.composer.describe()
        if search is not None:
            comp["search"] = search
        png = plot_composition(o.run.metrics_path, o.run.dir / "composition.png", o.composer.names)
        if png is not None:
            comp["plot"] = str(png)
        out["composition"] = comp
    return out


def summary_lines(report: dict[str, Any]) -> list[str]:
    a = report["algorithm"]
    lines = [
        f"{a['loss']} ({a['advantage']} advantage, KL beta {a['kl']['beta']} in the {a['kl']['placement']}): "
        f"{report['steps']} steps in {report['train_seconds']}s ({report['prompts_per_second']} prompts/s; "
        + ", ".join(f"{k} {v}s" for k, v in report["seconds_by_phase"].items())
        + ")",
        f"saved to {report['policy_dir']}",
    ]
    lines += eval_lines(report.get("eval") or {})
    for name, f in report.get("reward_failures", {}).items():
        if f.get("nan"):
            lines.append(f"reward component {name}: {f['nan']} completions masked (NaN): {f}")
    return lines


__all__ = ["Online", "draw", "run", "setup", "summary_lines", "train_step"]
