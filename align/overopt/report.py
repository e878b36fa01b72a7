"""`align eval overopt`: the run (best-of-n from the initial policy, then each checkpoint of an online run), its
summary lines and its plot."""

from __future__ import annotations

import math
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from prefalign.errors import UserError
from prefalign.files import write_json, write_text
from prefalign.models.hub import DEFAULT_MODEL
from prefalign.models.precision import decide_dtype
from preference_data.suite.heldout import load_prompts

from .estimate import FORMS, bon_ns, bon_points, first, fit_curve, fits, rl_point, verdict
from .harness import Cache, Models, Overopt, OveroptSettings, Policy, find_checkpoints, policy_key, proxy_spec


def run_overopt(s: OveroptSettings) -> dict[str, Any]:
    """Best-of-n from the initial policy and (with `s.run`) the online run's checkpoints, proxy against gold;
    writes report.json, summary.txt and overopt.png under `s.out` (`align/overopt/__init__.py`)."""
    problems = s.check()
    if problems:
        raise UserError("align eval overopt: " + "; ".join(problems))
    proxy, run_dir, model, prompts_source, limit, out_dir = s.proxy, s.run, s.model, s.prompts, s.limit, s.out
    t0 = time.time()
    run_cfg, ckpts = find_checkpoints(run_dir) if run_dir else (None, [])
    if run_cfg is not None and model is not None and model != run_cfg.model:
        raise UserError(
            f"--model {model}: the run {run_dir} started from {run_cfg.model}; best-of-n and step 0 use the run's "
            "initial policy, so leave --model out"
        )
    model = run_cfg.model if run_cfg is not None else (model or DEFAULT_MODEL)
    spec = proxy_spec(proxy, run_cfg)
    s = replace(s, dtype=decide_dtype(s.dtype, knob="--dtype").value)
    prompts = load_prompts(prompts_source, limit, s.seed)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    models = Models(model, run_cfg, s)
    job = Overopt(prompts, spec, models, Cache(out / "cache"), s)
    ids = [p.id for p in prompts]

    # best-of-n: one pool of N samples per prompt from the initial policy
    pool_size = max(s.n, s.rl_samples if ckpts else 1)
    key, key_data = policy_key(model, s, None)
    init = Policy("initial policy", 0, None, key)
    pool = job.score(init, job.draw(init, pool_size, key_data), kl=False)
    bon = bon_points(first(pool, s.n), ids, bon_ns(s.n), s.seed)
    report: dict[str, Any] = {
        "model": model,
        "proxy": job.proxy_desc,
        "gold": "suite gold graders (overall)",
        "prompts": len(prompts),
        "source": prompts_source,
        "settings": asdict(s),
        "bon": {
            "pool": s.n,
            "kl": "analytic KL_bon = log n - (n-1)/n, an upper bound on the true KL (Beirami et al. 2024)",
            "ties": "ties in proxy broken uniformly at random (the estimator averaged over the tied orders)",
            "points": bon,
            "fit": fits(bon, "bon"),
            "verdict": verdict(bon, "n"),
        },
    }

    # RL: each checkpoint, against step 0 = the initial policy's first rl_samples samples
    if run_cfg is not None:
        m = s.rl_samples
        base = first(pool, m)
        points = [rl_point(0, base, None)]
        for ck in ckpts:
            step = int(ck.name.split("-")[1])
            k, k_data = policy_key(model, s, ck)
            pol = Policy(f"checkpoint {step}", step, ck, k)
            scored = job.score(pol, job.draw(pol, m, k_data), kl=True)
            points.append(rl_point(step, scored, base))
        report["rl"] = {
            "run": str(run_dir),
            "reward": run_cfg.reward,
            "kl_beta": run_cfg.kl.beta,
            "samples_per_prompt": m,
            "kl": "Monte Carlo k1 on each checkpoint's samples: mean of sum_t log pi(y_t) - log pi_init(y_t)",
            "points": points,
            "fit": fits(points, "rl"),
            "verdict": verdict(points, "step"),
        }
        trained_on = [{k: v for k, v in c.items() if k not in ("weight", "name")} for c in run_cfg.reward]
        if trained_on != [spec]:
            report["rl"]["note"] = f"the run was trained on the reward {run_cfg.reward}, not on this proxy alone"
    proxy_nan = sum(1 for row in pool.proxy.values() for v in row if not math.isfinite(v))
    report["failures"] = {
        "proxy_nan_in_pool": proxy_nan,
        "proxy_failures": dict(getattr(job._scorer, "failures", {}) or {}),
        "gold_errors": job.gold_errors,
    }
    report["work"] = {"samples_drawn": job.drawn, "proxy_scores_computed": job.scored}
    report["seconds"] = round(time.time() - t0, 1)
    report["summary"] = summary_lines(report)
    report["plot"] = str(out / "overopt.png") if plot(report, out / "overopt.png") else None
    write_json(out / "report.json", report, indent=2, default=str)
    write_text(out / "summary.txt", "\n".join(report["summary"]) + "\n")
    return report


# --- report and plot ------------------------------------------------------------------------------------


def _fit_line(f: dict[str, Any] | None, what: str) -> str:
    if f is None:
        return f"  fit {what}: too few points at d > 0"
    r2 = "n/a" if f["r2"] is None else f"{f['r2']:.3f}"
    peak = (
        f"d* {f['d_star']:.3f}, predicted peak {f['peak']:+.4f}"
        if f["d_star"] is not None
        else "no peak on d > 0 (beta <= 0)"
    )
    return f"  fit {what}: {FORMS[f['form']]}, alpha {f['alpha']:.4f}, beta {f['beta']:.4f}, R^2 {r2}; {peak}"


def summary_lines(report: dict[str, Any]) -> list[str]:
    s = report["settings"]
    b = report["bon"]
    lines = [
        f"over-optimization of {report['proxy']['spec']} on {report['prompts']} held-out prompts, "
        f"gold = {report['gold']}, initial policy {report['model']} (temperature {s['temperature']}, "
        f"{s['max_new_tokens']} new tokens)",
        f"best-of-n from one pool of {b['pool']} samples per prompt; d = sqrt(KL_bon), KL_bon = log n - (n-1)/n "
        "(an upper bound on the true KL)",
    ]
    for p in b["points"]:
        if p["gold_gain"] is None:
            lines.append(f"  n {p['n']:>4}: no prompt has {p['n']} valid samples")
            continue
        lo, hi = p["gold_gain_ci95"]
        lines.append(
            f"  n {p['n']:>4}  d {p['d']:.3f}  proxy {p['proxy_gain']:+.4f}  gold {p['gold_gain']:+.4f} "
            f"[{lo:+.4f}, {hi:+.4f}]"
            + (f"  ({p['prompts_left_out']} prompts left out)" if p["prompts_left_out"] else "")
        )
    lines.append("  " + b["verdict"])
    lines.append(_fit_line(b["fit"]["gold"], "gold"))
    lines.append(_fit_line(b["fit"]["proxy"], "proxy"))
    rl = report.get("rl")
    if rl:
        lines.append(
            f"RL checkpoints of {rl['run']} (KL beta {rl['kl_beta']}), {rl['samples_per_prompt']} samples per prompt; "
            "d = sqrt(KL), KL by Monte Carlo k1"
        )
        for p in rl["points"]:
            pg = "n/a" if p["proxy_gain"] is None else f"{p['proxy_gain']:+.4f}"
            gg = "n/a" if p["gold_gain"] is None else f"{p['gold_gain']:+.4f}"
            lines.append(
                f"  step {p['step']:>4}  KL {p['kl']:.4f} (se {p['kl_se']:.4f})  d {p['d']:.3f}  proxy {pg}  gold {gg}"
                f"  len {p['mean_length']:.1f}" + (f"  proxy NaN {p['proxy_nan']}" if p["proxy_nan"] else "")
            )
        lines.append("  " + rl["verdict"])
        lines.append(_fit_line(rl["fit"]["gold"], "gold"))
        lines.append(_fit_line(rl["fit"]["proxy"], "proxy"))
        if rl.get("note"):
            lines.append("  note: " + rl["note"])
    f = report["failures"]
    if f["proxy_nan_in_pool"] or f["gold_errors"]:
        lines.append(
            f"left out: {f['proxy_nan_in_pool']} pool samples the proxy scored NaN {f['proxy_failures'] or ''}; "
            f"gold grader errors {f['gold_errors'] or 0}"
        )
    w = report["work"]
    lines.append(
        f"{w['samples_drawn']} samples drawn, {w['proxy_scores_computed']} proxy scores computed (the rest cached)"
    )
    return lines


def plot(report: dict[str, Any], path: Path) -> bool:
    """Gold and proxy gains against d with the fitted curves: a column per method, a row per score."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # lazy: matplotlib, only when a report is drawn
    from matplotlib.figure import Figure

    methods = [("bon", "best-of-n (d = sqrt(KL_bon), upper bound)", "n")]
    if report.get("rl"):
        methods.append(("rl", "RL checkpoints (d = sqrt(KL), k1)", "step"))
    fig = Figure(figsize=(5.2 * len(methods), 7.0))
    FigureCanvasAgg(fig)
    axes = fig.subplots(2, len(methods), squeeze=False)
    for col, (name, title, label) in enumerate(methods):
        sec = report[name]
        for row, which in enumerate(("gold", "proxy")):
            ax = axes[row][col]
            pts = [(p["d"], p[f"{which}_gain"], p[label]) for p in sec["points"] if p[f"{which}_gain"] is not None]
            if pts:
                ax.plot(
                    [d for d, _, _ in pts], [g for _, g, _ in pts], "o", color=f"C{row}", label=f"{which} (measured)"
                )
                for d, g, lab in pts:
                    ax.annotate(str(lab), (d, g), textcoords="offset points", xytext=(3, 3), fontsize=7)
            f = sec["fit"][which]
            if f is not None and pts:
                hi = max(max(d for d, _, _ in pts), min(f["d_star"] or 0.0, 2 * max(d for d, _, _ in pts)))
                xs = [hi * i / 100 for i in range(101)]
                ax.plot(
                    xs,
                    [fit_curve(f["form"], f["alpha"], f["beta"], x) for x in xs],
                    "-",
                    color=f"C{row}",
                    alpha=0.7,
                    label=f"fit {FORMS[f['form']]}",
                )
                if f["d_star"] is not None and f["d_star"] <= hi:
                    ax.axvline(f["d_star"], color=f"C{row}", ls=":", lw=1)
            ax.axhline(0.0, color="0.6", lw=0.8)
            ax.set_title(f"{title}: {which}", fontsize=9)
            ax.set_xlabel("d")
            ax.set_ylabel(f"{which} gain over the initial policy")
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(str(path), dpi=110)
    return True


__all__ = ["plot", "run_overopt", "summary_lines"]
