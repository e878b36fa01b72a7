"""`align data doctor`: what a data source really contains, before any training.

Reads the source with the same adapters training uses, tokenizes with the same code, and reports rows
read and kept, every dropped or repaired row by reason (with the first row numbers), token-length
percentiles for prompt / chosen / rejected, the chat-template boundary and BOS/EOS checks, and one
rendered example with the prompt/response boundary marked. A labelled comparison file (a preset or a column map)
also gets the map that read it, its label counts (ties, items whose annotators disagree) and one comparison as read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefalign.files import write_json, write_text
from prefalign.models.hub import load_tokenizer

from .comparisons import mapping_for, mapping_lines, render_comparison
from .records import VERDICTS, LabelledComparison
from .sources import DataConfig, load
from .tokenize import LengthPolicy, tokenize_pairs


def margin_summary(pairs: list[Any]) -> dict[str, Any]:
    """Which per-pair margins the pairs carry, and which one reward-model training will use (by default none)."""
    column = sum(p.margin is not None for p in pairs)
    gap = sum(p.attributes.get("rating_gap") is not None for p in pairs)
    text = (
        f"margins: {column} pairs carry a `margin` field, {gap} a rating gap; RM training uses none of them "
        "unless asked (loss.margin: column uses the field, loss.margin: rating_gap the gap, each times "
        "loss.margin_scale)"
    )
    return {"margin_field": column, "rating_gap": gap, "rm_default": "none", "text": text}


def comparison_summary(comparisons: list[LabelledComparison]) -> dict[str, Any]:
    """Counts of a labelled comparison file: items by kind, majority labels, split annotators."""
    pairs = [c for c in comparisons if c.kind == "pair"]
    majority = {v: sum(c.majority() == v for c in pairs) for v in VERDICTS}
    out = {
        "comparisons": len(comparisons),
        "pair_items": len(pairs),
        "best_of_n_items": len(comparisons) - len(pairs),
        "majority_labels": majority,
        "no_majority": sum(c.majority() is None for c in pairs),
        "annotators_disagree": sum(len(set(c.labels)) > 1 for c in pairs),
        "labels_per_item": max((len(c.labels) for c in pairs), default=0),
    }
    out["text"] = (
        f"comparisons: {out['comparisons']} ({out['pair_items']} two-response, {out['best_of_n_items']} best-of-n); "
        f"majority label first {majority['first']}, second {majority['second']}, tie {majority['tie']}, "
        f"none {out['no_majority']}; items whose annotators disagree: {out['annotators_disagree']} "
        "(kept: their agreement is the ceiling)"
    )
    return out


def run_doctor(
    data: DataConfig, model: str, max_length: int, policy: LengthPolicy, out_dir: str | None
) -> dict[str, Any]:
    """Build the report (a dict), write it as JSON and text under `out_dir`, and return it."""
    loaded = load(data)
    report: dict[str, Any] = {
        "data": loaded.report.to_dict(),
        "pairs": len(loaded.pairs),
        "rated_prompts": len(loaded.rated),
        "prompt_only": len(loaded.prompts),
    }
    lines = loaded.report.lines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith("records kept")) + 1
    lines.insert(
        at, f"pairs: {len(loaded.pairs)} (from rated prompts: {len(loaded.rated)}), prompt-only: {len(loaded.prompts)}"
    )
    report["margins"] = margin_summary(loaded.pairs)
    lines.insert(at + 1, report["margins"]["text"])
    if data.preset is not None or data.columns is not None:
        mapping, name = mapping_for(data.preset, data.columns)
        report["mapping"] = mapping_lines(mapping, name)
        report["comparisons"] = comparison_summary(loaded.comparisons)
        lines[at + 2 : at + 2] = [report["comparisons"]["text"], *report["mapping"]]
        if loaded.comparisons:
            report["comparison_example"] = render_comparison(loaded.comparisons[0])
            lines += ["first comparison as read:", *report["comparison_example"]]
    if loaded.pairs:
        tok = load_tokenizer(model)
        tokenized, treport = tokenize_pairs(loaded.pairs, tok, max_length, policy)
        report["tokenization"] = treport.to_dict()
        lines.append(f"tokenization ({model}, max_length={max_length}, policy={policy}):")
        lines.extend("  " + ln for ln in treport.lines())
        if tokenized:
            ex = tokenized[0]
            rendered = {
                "id": ex.id,
                "prompt": tok.decode(ex.prompt_ids),
                "chosen": tok.decode(ex.chosen_ids),
                "rejected": tok.decode(ex.rejected_ids),
            }
            report["example"] = rendered
            lines.append(f"example (id {ex.id}); the response starts after '⟦':")
            lines.append(rendered["prompt"] + "⟦" + rendered["chosen"])
    report["text"] = lines
    if out_dir:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        write_json(out / "doctor.json", report, indent=2, ensure_ascii=False)
        write_text(out / "doctor.txt", "\n".join(lines) + "\n")
        report["written"] = [str(out / "doctor.json"), str(out / "doctor.txt")]
    return report
