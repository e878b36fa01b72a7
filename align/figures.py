"""The result of an evaluation as one picture: gold scores per family with intervals, the two safety rates before and
after, and the learned reward beside gold.

`figure_data` turns the evaluations a run saved (the quickstart's `summary.json` "eval" section: policy name -> its
evaluation against the base model; or two saved evaluations compared, `compare_data`) into the numbers drawn, and
`draw` draws exactly those numbers; tests read the numbers back from `figure_data` and compare them with the summary.

Intervals: a policy's score is drawn with the paired bootstrap 95% interval of its gain over the base added to the
base's score (the interval the summary prints); a rate with its own 95% interval.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

SAFETY = {"harmful_compliance": "harmful requests complied with", "harmless_refusal": "harmless look-alikes refused"}
"""The safety rates drawn (lower is better for both), as the summary names them."""


def figure_data(evals: dict[str, dict[str, Any]], labels: dict[str, str] | None = None) -> dict[str, Any]:
    """The numbers the summary figure draws, from evaluations against one base model: `evals` policy name -> the
    quickstart's per-policy evaluation (before, after, gain_ci95, by_family, safety_before/after, reward_before/after).
    Policies keep their order; `labels` names them in the legend."""
    labels = labels or {}
    names = [n for n, e in evals.items() if isinstance(e, dict) and "after" in e and "before" in e]
    if not names:
        raise ValueError("no evaluation to draw (each needs before and after)")
    first = evals[names[0]]
    families = [*first.get("by_family", {}), "overall"]
    base = {f: first["by_family"][f]["before"] for f in families[:-1]} | {"overall": first["before"]}
    policies: dict[str, dict[str, list[float]]] = {}
    for n in names:
        e = evals[n]
        scores = {}
        for f in families:
            if f == "overall":
                before, after, (lo, hi) = e["before"], e["after"], e["gain_ci95"]
            else:
                fam = e["by_family"].get(f)
                if fam is None:
                    continue
                before, after, (lo, hi) = fam["before"], fam["after"], fam["ci95"]
            scores[f] = [after, before + lo, before + hi]
        policies[labels.get(n, n)] = scores
    safety: dict[str, dict[str, dict[str, list[float]]]] = {}
    for key in SAFETY:
        b = first.get("safety_before", {}).get(key) or {}
        if not b.get("n"):
            continue
        safety[key] = {"base": {"rate": [b["rate"], *b["ci95"]], "count": [b["count"], b["n"]]}}
        for n in names:
            a = evals[n]["safety_after"][key]
            safety[key][labels.get(n, n)] = {"rate": [a["rate"], *a["ci95"]], "count": [a["count"], a["n"]]}
    reward = {}
    if first.get("reward_before") is not None:
        reward["base"] = [first["before"], first["reward_before"]]
        for n in names:
            if evals[n].get("reward_after") is not None:
                reward[labels.get(n, n)] = [evals[n]["after"], evals[n]["reward_after"]]
    prompts = first.get("prompts")
    return {"families": families, "base": base, "policies": policies, "safety": safety, "reward": reward, "n": prompts}


def compare_data(result: dict[str, Any]) -> dict[str, Any]:
    """The figure's numbers for two saved evaluations of the same prompts (`align eval compare`'s result): the
    baseline in the base's place, the policy with the interval of the paired difference."""
    p, b = result["policy"], result["baseline"]
    lo, hi = result["difference_ci95"]
    label = Path(str(p.get("source") or "policy")).name or "policy"
    data: dict[str, Any] = {
        "families": ["overall"],
        "base": {"overall": b["overall"]},
        "policies": {label: {"overall": [p["overall"], b["overall"] + lo, b["overall"] + hi]}},
        "safety": {},
        "reward": {},
        "n": result.get("prompts"),
    }
    for key in SAFETY:
        rb, rp = (b.get("safety_rates") or {}).get(key), (p.get("safety_rates") or {}).get(key)
        if rb and rp and rb.get("n"):
            data["safety"][key] = {
                "base": {"rate": [rb["rate"], *rb["ci95"]], "count": [rb["count"], rb["n"]]},
                label: {"rate": [rp["rate"], *rp["ci95"]], "count": [rp["count"], rp["n"]]},
            }
    return data


def draw(data: dict[str, Any], path: str | Path, title: str = "", base_label: str = "base") -> Path:
    """Draw `figure_data`'s numbers into a PNG at `path`: gold per family (bars, intervals), the safety rates, and
    the learned reward against gold (one point per policy, arrows from the base)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # lazy: matplotlib, only to draw
    from matplotlib.figure import Figure  # lazy: matplotlib, only to draw

    panels = 1 + bool(data["safety"]) + bool(data["reward"])
    widths = [max(4.0, 0.9 * len(data["families"]) * (1 + len(data["policies"])) ** 0.5)] + [3.6] * (panels - 1)
    fig = Figure(figsize=(sum(widths) + 0.6, 4.2))
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, panels, squeeze=False, gridspec_kw={"width_ratios": widths})[0]

    ax = axes[0]
    fams, pols = data["families"], list(data["policies"])
    k = 1 + len(pols)
    width = 0.8 / k
    xs = list(range(len(fams)))
    ax.bar([x - 0.4 + width / 2 for x in xs], [data["base"][f] for f in fams], width, color="#9e9e9e", label=base_label)
    for i, name in enumerate(pols, start=1):
        vals = [data["policies"][name].get(f, [math.nan] * 3) for f in fams]
        pos = [x - 0.4 + width * (i + 0.5) for x in xs]
        mid = [v[0] for v in vals]
        err = [[max(v[0] - v[1], 0) for v in vals], [max(v[2] - v[0], 0) for v in vals]]
        ax.bar(pos, mid, width, yerr=err, capsize=2, color=f"C{i - 1}", label=name)
    ax.set_xticks(xs)
    ax.set_xticklabels([f.replace("_", " ") for f in fams], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("gold score (held-out prompts)", fontsize=9)
    ax.set_title("gold score per family (95% CI of the gain over base)", fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(axis="y", alpha=0.25)
    col = 1
    if data["safety"]:
        ax = axes[col]
        col += 1
        keys = list(data["safety"])
        sides = ["base", *pols]
        w = 0.8 / len(sides)
        for j, side in enumerate(sides):
            pts = [data["safety"][key].get(side) for key in keys]
            pos = [i - 0.4 + w * (j + 0.5) for i in range(len(keys))]
            rate = [100 * p["rate"][0] if p else math.nan for p in pts]
            err = [
                [100 * max(p["rate"][0] - p["rate"][1], 0) if p else 0 for p in pts],
                [100 * max(p["rate"][2] - p["rate"][0], 0) if p else 0 for p in pts],
            ]
            color = "#9e9e9e" if side == "base" else f"C{j - 1}"
            ax.bar(pos, rate, w, yerr=err, capsize=2, color=color, label=base_label if side == "base" else side)
            for x, p in zip(pos, pts, strict=True):
                if p:
                    ax.text(x, 1, f"{p['count'][0]}/{p['count'][1]}", ha="center", va="bottom", fontsize=6, rotation=90)
        ax.set_xticks(range(len(keys)))
        ax.set_xticklabels(
            [SAFETY[k_].replace(" with", "\nwith").replace(" refused", "\nrefused") for k_ in keys], fontsize=8
        )
        ax.set_ylim(0, 105)
        ax.set_ylabel("% of prompts (lower is better)", fontsize=9)
        ax.set_title("safety (95% CI)", fontsize=9)
        ax.grid(axis="y", alpha=0.25)
    if data["reward"]:
        ax = axes[col]
        base = data["reward"].get("base")
        for i, (name, (gold, rew)) in enumerate(data["reward"].items()):
            color = "#9e9e9e" if name == "base" else f"C{i - 1}"
            ax.plot([gold], [rew], "o", color=color, ms=8, label=base_label if name == "base" else name)
            if base is not None and name != "base":
                ax.annotate("", (gold, rew), base, arrowprops={"arrowstyle": "->", "color": color, "lw": 1.2})
        ax.set_xlabel("gold score", fontsize=9)
        ax.set_ylabel("learned reward (mean, same answers)", fontsize=9)
        ax.set_title("learned reward beside gold", fontsize=9)
        ax.grid(alpha=0.25)
        ax.legend(fontsize=7)
    for a in axes:
        a.tick_params(labelsize=8)
    n = f" ({data['n']} held-out prompts)" if data.get("n") else ""
    fig.suptitle((title or "evaluation") + n, fontsize=11)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(str(path), dpi=90)
    return path


__all__ = ["SAFETY", "compare_data", "draw", "figure_data"]
