"""Shared pieces of the quality comparisons with TRL on human labels (`rm_quality_vs_trl.py`,
`dpo_quality_vs_trl.py`): the HH-RLHF train / held-out files both sides read, the command line, the seed x side
loop (each side in its own process), one plain-transformers RM score, and the accuracy table with paired
bootstrap intervals."""

from __future__ import annotations

import argparse
import hashlib
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import (
    BATCH,
    MODEL,
    ROOT,
    fitting_pairs,
    machine_line,
    report,
    resolve_precision,
    spawn,
)
from prefalign.stats import bootstrap_ci, finite_mean

HH = ROOT.parent / "shared" / "data" / "hh-rlhf"
HH_SUBSETS = {
    "helpful": HH / "helpful-base" / "test.decontaminated.jsonl.gz",
    "harmless": HH / "harmless-base" / "test.decontaminated.jsonl.gz",
}


# --- data ------------------------------------------------------------------------------------------------------


def hh_split_pairs(subset: str, split: str, n: int, max_length: int, tok: Any) -> list:
    """The first n pairs (file order) of an HH subset's `split` under the prompt-hash cut train 80% / test 20%
    (`align rm train`'s `data.split_fractions: [0.8, 0, 0.2]`) whose renderings fit max_length tokens."""
    from preference_data.sources import DataConfig, load_pairs

    if not HH_SUBSETS[subset].exists():
        raise SystemExit(f"{HH_SUBSETS[subset]} not found: the benchmark needs ../shared/data beside the project")
    cfg = DataConfig(source=str(HH_SUBSETS[subset]), split=split, split_fractions=[0.8, 0.0, 0.2])
    pairs, _ = load_pairs(cfg, what=f"{subset} {split}")
    head = pairs[: 4 * n]
    out = fitting_pairs(head, tok, max_length)[:n]
    if len(out) < n:
        raise SystemExit(f"{subset} {split}: only {len(out)} of the first {len(head)} pairs fit {max_length} tokens")
    return out


def hh_mixed_files(train_pairs: int, eval_pairs: int, max_length: int, tmp: Path) -> tuple[Path, Path, list[str]]:
    """Write the train file (helpful and harmless pairs interleaved, half each) and the held-out file (helpful,
    then harmless); returns both paths and each held-out pair's subset."""
    from prefalign.models.hub import load_tokenizer
    from preference_data.records import write_jsonl

    tok = load_tokenizer(MODEL)
    parts = {s: hh_split_pairs(s, "train", train_pairs // 2, max_length, tok) for s in HH_SUBSETS}
    train = [p for group in zip(*parts.values(), strict=True) for p in group]
    held, subset_of = [], []
    for s in HH_SUBSETS:
        pairs = hh_split_pairs(s, "test", eval_pairs // 2, max_length, tok)
        held.extend(pairs)
        subset_of.extend([s] * len(pairs))
    train_file, held_file = tmp / "train.jsonl", tmp / "held_out.jsonl"
    write_jsonl(str(train_file), [p.to_dict() for p in train])
    write_jsonl(str(held_file), [p.to_dict() for p in held])
    return train_file, held_file, subset_of


# --- the one judge of a reward model ---------------------------------------------------------------------------


def plain_reward(model: Any, tok: Any, messages: list[dict]) -> float:
    """A sequence-classification RM's reward of one conversation in plain transformers: the chat template's
    rendering, one sequence a forward (no padding), read at its last token as both sides train it. Call under
    `torch.no_grad()` with the model in eval mode."""
    enc = tok.apply_chat_template(messages, return_tensors="pt", return_dict=True)
    return model(input_ids=enc["input_ids"]).logits[0, 0].item()


# --- command line and the runs ---------------------------------------------------------------------------------


def parser(
    doc: str,
    modes: str,
    lr_lora: float,
    lr_full: float,
    child_paths: tuple[str, ...] = (),
    train_pairs: int = 512,
    eval_pairs: int = 400,
) -> Any:
    """The options both comparisons take (and the hidden ones a side's process gets), with each one's defaults."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--modes", default=modes, help="comma list of lora, full")
    ap.add_argument("--seeds", default="0,1,2", help="comma list of seeds")
    ap.add_argument("--train-pairs", type=int, default=train_pairs, help="train pairs, half helpful, half harmless")
    ap.add_argument("--eval-pairs", type=int, default=eval_pairs, help="held-out pairs, half helpful, half harmless")
    ap.add_argument("--max-length", type=int, default=512, help="token budget of prompt + response")
    ap.add_argument("--lr-lora", type=float, default=lr_lora, help="learning rate with LoRA")
    ap.add_argument("--lr-full", type=float, default=lr_full, help="learning rate with full fine-tuning")
    ap.add_argument("--precision", default="auto", help="auto (bf16 where native, else fp32), bf16 or fp32")
    ap.add_argument("--out", default=None, help="write every number as JSON here")
    ap.add_argument(
        "--keep",
        default=None,
        metavar="DIR",
        help="keep each side's result per mode and seed in DIR and reuse it when a later invocation has the same "
        "data, settings and machine: run the seeds and modes in parts (or resume after an interruption), then "
        "rerun with all of them to print the tables over every kept run",
    )
    for name in ("--child", "--mode", "--data", "--held", *child_paths):
        ap.add_argument(name, default="", help=argparse.SUPPRESS)
    ap.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--lr", type=float, default=0.0, help=argparse.SUPPRESS)
    return ap


def trl_settings(args: argparse.Namespace, out: str, rows: int) -> dict:
    """TRL's side's TrainingArguments: one epoch of 8-pair steps, linear decay without warm-up, the side's lr,
    precision, max length and seed."""
    return {
        "output_dir": out,
        "per_device_train_batch_size": BATCH,
        "num_train_epochs": 1,
        "learning_rate": args.lr,
        "lr_scheduler_type": "linear",
        "warmup_steps": 0,
        "bf16": args.precision == "bf16",
        "use_cpu": True,
        "gradient_checkpointing": False,  # TRL's configs default to True; off is its fastest, and ours' setting
        "max_length": args.max_length,
        "report_to": "none",
        "save_strategy": "no",
        "logging_steps": max(1, rows // BATCH),
        "disable_tqdm": True,
        "seed": args.seed,
        "data_seed": args.seed,
    }


def train_section(args: argparse.Namespace) -> dict:
    """Our side's `train` section: the settings TRL's side gets (one epoch, linear decay without warm-up)."""
    return {
        "method": args.mode,
        "epochs": 1,
        "batch_size": BATCH,
        "max_length": args.max_length,
        "lr": args.lr,
        "lr_scheduler": "linear",
        "warmup_ratio": 0.0,
        "precision": args.precision,
        "seed": args.seed,
    }


def run_child(args: argparse.Namespace, sides: dict[str, Callable[[argparse.Namespace, str], dict]]) -> None:
    """In a side's process: run it in a scratch directory and print its result for `spawn`."""
    from prefalign.cpu import tune_allocator

    tune_allocator()
    with tempfile.TemporaryDirectory() as tmp:
        report(sides[args.child](args, tmp))


def start(args: argparse.Namespace, tmp: Path) -> tuple[str, Path, Path, list[str], dict]:
    """Print the machine, the precision and the data; write the data files. Returns (precision, train file,
    held-out file, each held-out pair's subset, the results dict to fill)."""
    precision, why = resolve_precision(args.precision)
    print(f"machine: {machine_line()}")
    print(f"precision: {precision} for both sides ({why})")
    train_file, held_file, subset_of = hh_mixed_files(args.train_pairs, args.eval_pairs, args.max_length, tmp)
    print(
        f"data: {args.train_pairs} train pairs and {len(subset_of)} held-out pairs (half helpful-base, half "
        f"harmless-base, prompt-hash split), all fitting {args.max_length} tokens; one epoch of "
        f"{args.train_pairs // BATCH} steps x {BATCH} pairs"
    )
    digest = hashlib.sha256(train_file.read_bytes() + b"\0" + held_file.read_bytes()).hexdigest()
    results = {"machine": machine_line(), "precision": precision, "data_sha256": digest, "modes": {}}
    return precision, train_file, held_file, subset_of, results


RUN_ONLY = {"modes", "seeds", "out", "keep", "child", "mode", "data", "held", "seed", "lr", "rm", "rm_out"}
"""Options that do not change one side's result (which runs, where things go, paths whose content the data
digest covers; a DPO side's judging RM is applied in the parent, after the kept result)."""


def kept_path(args: argparse.Namespace, script: str, results: dict, mode: str, seed: int, side: str) -> Path | None:
    """Where `--keep` keeps one side's result: named by the script, mode, seed and side, and a digest of
    everything else that decides it (the settings, the data files' bytes, the resolved precision, the machine)."""
    if not args.keep:
        return None
    settings = {k: v for k, v in vars(args).items() if k not in RUN_ONLY}  # lr_lora and lr_full among them
    key = {"mode": mode, "seed": seed, "side": side, **settings}
    key |= {k: results[k] for k in ("machine", "precision", "data_sha256")}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
    return Path(args.keep) / f"{Path(script).stem}-{mode}-seed{seed}-{side}-{digest}.json"


def run_sides(
    script: str,
    args: argparse.Namespace,
    mode: str,
    child_args: list[str],
    line: Callable[[dict], str],
    results: dict,
    finish: Callable[[dict], None] | None = None,
) -> dict[str, list[dict]]:
    """Every seed, TRL then ours, each in its own process (or read back from `--keep`); `finish(result)`
    completes a result in this process (judging what the side returned), then `line(result)` is printed."""
    lr = args.lr_lora if mode == "lora" else args.lr_full
    runs: dict[str, list[dict]] = {"trl": [], "ours": []}
    for seed in [int(s) for s in args.seeds.split(",")]:
        for side in ("trl", "ours"):
            kept = kept_path(args, script, results, mode, seed, side)
            if kept is not None and kept.exists():
                r = json.loads(kept.read_text())
                print(f"{mode:<4} seed {seed} {side:<4}  kept from an earlier run: {kept}")
            else:
                r = spawn(script, ["--child", side, "--mode", mode, "--seed", str(seed), "--lr", str(lr), *child_args])
                if kept is not None:  # written whole, then renamed: a kill leaves no half-written result
                    kept.parent.mkdir(parents=True, exist_ok=True)
                    part = kept.with_suffix(".part")
                    part.write_text(json.dumps(r))
                    part.replace(kept)
            r["seed"] = seed
            if finish is not None:
                finish(r)
            runs[side].append(r)
            print(
                f"{mode:<4} seed {seed} {side:<4}  {line(r)}  kept {r['kept']}  {r['seconds']:.0f} s  "
                f"peak {r['peak_rss_gb']:.1f} GB",
                flush=True,
            )
    return runs


def subset_means(right: list[float], subset_of: list[str]) -> dict[str, float]:
    """The mean of a per-pair 0/1 list overall and per subset."""
    return {
        "all": finite_mean(right),
        **{s: finite_mean([x for x, t in zip(right, subset_of, strict=True) if t == s]) for s in HH_SUBSETS},
    }


def accuracy_table(runs: dict[str, list[dict]], subset_of: list[str], key: str, what: str) -> dict:
    """Print and return the table of `key` (a per-held-out-pair 0/1 list in every run): the mean over seeds per
    side, overall and per subset, and ours − TRL with a 95% bootstrap interval (per pair, its difference averaged
    over the seeds; pairs resampled)."""
    seeds = list(zip(runs["ours"], runs["trl"], strict=True))
    out: dict = {}
    print(f"{what} (mean over seeds), ours − TRL with a 95% bootstrap interval over pairs")
    print("| subset | pairs | TRL | ours | ours − TRL [95% CI] |")
    print("|---|---|---|---|---|")
    for name in ("all", *HH_SUBSETS):
        idx = [i for i, s in enumerate(subset_of) if name in ("all", s)]
        trl = finite_mean([subset_means(r[key], subset_of)[name] for r in runs["trl"]])
        ours = finite_mean([subset_means(r[key], subset_of)[name] for r in runs["ours"]])
        d = [finite_mean([o[key][i] - t[key][i] for o, t in seeds]) for i in idx]
        lo, hi = bootstrap_ci(d)
        out[name] = {"trl": trl, "ours": ours, "diff": finite_mean(d), "ci": [lo, hi]}
        print(f"| {name} | {len(idx)} | {trl:.3f} | {ours:.3f} | {finite_mean(d):+.3f} [{lo:+.3f}, {hi:+.3f}] |")
    return out


def train_trl(trainer: Any, lora: bool, t0: float) -> tuple[dict, Any]:
    """Train a TRL trainer; ({seconds since t0, pairs it kept after its own length filter, whether it recomputed
    activations}, the trained model with a LoRA adapter merged)."""
    kept = len(trainer.train_dataset)
    trainer.train()
    seconds = time.perf_counter() - t0
    timing = {"seconds": seconds, "kept": kept, "checkpointing": bool(trainer.args.gradient_checkpointing)}
    return timing, trainer.model.merge_and_unload() if lora else trainer.model


def time_ratio(runs: dict[str, list[dict]]) -> dict:
    """Print and return each side's mean whole training time and the ratio, over the seeds whose TRL run kept its
    activations as ours does. A TRL result kept before its side set `gradient_checkpointing: False` (TRL's default
    is True: every backward recomputes the forward) counts for accuracy only; delete its file to time it again."""
    pairs = list(zip(runs["trl"], runs["ours"], strict=True))
    equal = [(t, o) for t, o in pairs if not t.get("checkpointing", True)]
    if len(equal) < len(pairs):
        left = ", ".join(str(t["seed"]) for t, _ in pairs if t.get("checkpointing", True))
        print(f"(seed {left}: TRL's kept run recomputed activations (TRL's default): not timed alike, left out)")
    if not equal:
        print("whole training run: no seed whose TRL run kept its activations as ours does\n")
        return {"trl": float("nan"), "ours": float("nan"), "ratio": float("nan"), "seeds": []}
    t_trl = finite_mean([t["seconds"] for t, _ in equal])
    t_ours = finite_mean([o["seconds"] for _, o in equal])
    seeds = [t["seed"] for t, _ in equal]
    print(
        f"whole training run (seed {', '.join(map(str, seeds))}): TRL {t_trl:.0f} s, ours {t_ours:.0f} s: "
        f"ours {t_trl / t_ours:.2f}x faster\n"
    )
    return {"trl": t_trl, "ours": t_ours, "ratio": t_trl / t_ours, "seeds": seeds}


def write_results(args: argparse.Namespace, results: dict) -> None:
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2))
        print(f"wrote {args.out}")
