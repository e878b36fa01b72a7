"""DPO quality on human labels: TRL's DPOTrainer vs `align train`, the same pairs and settings, seeds.

    .venv/bin/python benchmarks/dpo_quality_vs_trl.py --rm RM_DIR                       # LoRA, 3 seeds
    .venv/bin/python benchmarks/dpo_quality_vs_trl.py --modes lora --seeds 0 --train-pairs 64 --eval-pairs 100

Data and settings as `benchmarks/rm_quality_vs_trl.py`: HH-RLHF helpful-base and harmless-base cut by a hash of the
prompt into train (80%) and held-out (20%), the first pairs of each that fit --max-length, one train file and one
held-out file both sides read. DPO sigmoid loss, β 0.1; one epoch of 8-pair steps; the same lr, schedule (linear
decay, no warm-up), max length, precision and seed on both sides; the reference is the base model on both (LoRA:
the adapters disabled; full: a frozen copy on TRL's side, log-probs computed once on ours). Each side trains in its
own process.

Judged alike for both, in plain transformers (fp32, one sequence per forward):
  implicit reward  on the held-out pairs, r = β (log π(y|x) − log π_ref(y|x)) summed over the response tokens of
                   the chat template's rendering: accuracy (r_chosen > r_rejected) and the mean margin
  RM win rate      greedy answers (at most --new-tokens tokens) of both policies to the first --answer-prompts
                   held-out prompts, scored by a reward model trained on the same train pairs (--rm: a saved RM
                   directory, e.g. `align rm train --config configs/rm_hh.yaml`; without it, the one
                   rm_quality_vs_trl.py's settings give, trained here with `align rm train`, seed 0): per prompt
                   and seed a win for ours when its answer scores higher (a tie is half), averaged over the seeds

Printed per mode: accuracy and margin per side and seed; the paired differences ours − TRL (accuracy per held-out
pair, win rate − 0.5 per prompt) with 95% bootstrap intervals over pairs / prompts; each side's whole training time
(reference log-probs and data preparation included) and the ratio.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import (  # noqa: E402
    BATCH,
    HH_SUBSETS,
    MODEL,
    hh_mixed_files,
    lora_config,
    machine_line,
    read_pairs,
    report,
    resolve_precision,
    spawn,
    trl_model_dtype,
    trl_rows,
)
from prefalign.stats import bootstrap_ci  # noqa: E402

BETA = 0.1


# --- the judges (plain transformers) ---------------------------------------------------------------------------


def response_logp(model, tok, prompt: list[dict], response: list[dict]) -> float:
    """Σ log π(response tokens | prompt) on the chat template's rendering (the prompt's own rendering is a prefix)."""
    import torch

    head = tok.apply_chat_template(prompt, add_generation_prompt=True, return_dict=True)["input_ids"]
    full = tok.apply_chat_template(prompt + response, return_dict=True)["input_ids"]
    if full[: len(head)] != head:
        raise SystemExit("the chat template's prompt rendering is not a prefix of the whole conversation's")
    ids = torch.tensor([full])
    logp = model(input_ids=ids).logits[0, :-1].float().log_softmax(-1)
    targets = ids[0, 1:]
    per_token = logp.gather(-1, targets[:, None])[:, 0]
    return float(per_token[len(head) - 1 :].sum())


def implicit_rewards(policy, reference, tok, held_file: str) -> list[tuple[float, float]]:
    """(r_chosen, r_rejected) per held-out pair: β (log π − log π_ref) of each response."""
    import torch

    out = []
    with torch.no_grad():
        for p in read_pairs(held_file):
            prompt = [m.to_dict() for m in p.prompt]
            rs = []
            for side in (p.chosen, p.rejected):
                resp = [m.to_dict() for m in side]
                rs.append(
                    BETA * (response_logp(policy, tok, prompt, resp) - response_logp(reference, tok, prompt, resp))
                )
            out.append((rs[0], rs[1]))
    return out


def greedy_answers(policy, tok, held_file: str, n: int, new_tokens: int) -> list[str]:
    """Greedy answers to the first n distinct held-out prompts."""
    import torch

    prompts = distinct_prompts(held_file, n)
    out = []
    with torch.no_grad():
        for prompt in prompts:
            ids = tok.apply_chat_template(prompt, add_generation_prompt=True, return_tensors="pt", return_dict=True)
            gen = policy.generate(
                **ids, max_new_tokens=new_tokens, do_sample=False, pad_token_id=tok.pad_token_id or tok.eos_token_id
            )
            out.append(tok.decode(gen[0, ids["input_ids"].shape[1] :], skip_special_tokens=True).strip())
    return out


def distinct_prompts(held_file: str, n: int) -> list[list[dict]]:
    seen, out = set(), []
    for p in read_pairs(held_file):
        prompt = [m.to_dict() for m in p.prompt]
        key = json.dumps(prompt)
        if key not in seen:
            seen.add(key)
            out.append(prompt)
    return out[:n]


# --- the two sides (each in its own process) -------------------------------------------------------------------


def judged(policy, args: argparse.Namespace) -> dict:
    from prefalign.models.hub import load_causal_lm, load_tokenizer

    tok = load_tokenizer(MODEL)
    policy = policy.float().eval()
    reference = load_causal_lm(MODEL, dtype="float32").eval()
    return {
        "rewards": implicit_rewards(policy, reference, tok, args.held),
        "answers": greedy_answers(policy, tok, args.held, args.answer_prompts, args.new_tokens),
    }


def side_trl(args: argparse.Namespace, out: str) -> dict:
    from datasets import Dataset
    from trl import DPOConfig, DPOTrainer

    from prefalign.models.hub import load_causal_lm, load_tokenizer

    lora = args.mode == "lora"
    t = time.perf_counter()
    tok = load_tokenizer(MODEL)
    model = load_causal_lm(MODEL, dtype=trl_model_dtype(args.precision, lora))
    rows = trl_rows(read_pairs(args.data))
    config = DPOConfig(
        output_dir=out,
        per_device_train_batch_size=BATCH,
        num_train_epochs=1,
        learning_rate=args.lr,
        lr_scheduler_type="linear",
        warmup_steps=0,
        beta=BETA,
        loss_type=["sigmoid"],
        bf16=args.precision == "bf16",
        use_cpu=True,
        max_length=args.max_length,
        report_to="none",
        save_strategy="no",
        logging_steps=max(1, len(rows) // BATCH),
        disable_tqdm=True,
        seed=args.seed,
        data_seed=args.seed,
    )
    peft_config = lora_config("CAUSAL_LM") if lora else None
    trainer = DPOTrainer(
        model=model, args=config, train_dataset=Dataset.from_list(rows), processing_class=tok, peft_config=peft_config
    )
    kept = len(trainer.train_dataset)
    trainer.train()
    seconds = time.perf_counter() - t
    policy = trainer.model.merge_and_unload() if lora else trainer.model
    return {"seconds": seconds, "kept": kept, **judged(policy, args)}


def side_ours(args: argparse.Namespace, out: str) -> dict:
    from align.train import TrainConfig, run
    from prefalign.config import build
    from prefalign.models.hub import load_model

    t = time.perf_counter()
    cfg = build(
        TrainConfig,
        {
            "model": MODEL,
            "output_dir": out,
            "data": {"source": args.data, "split": "all"},
            "eval": {"split": "none"},
            "loss": {"name": "sigmoid", "params": {"beta": BETA}},
            "train": {
                "method": args.mode,
                "epochs": 1,
                "batch_size": BATCH,
                "max_length": args.max_length,
                "lr": args.lr,
                "lr_scheduler": "linear",
                "warmup_ratio": 0.0,
                "precision": args.precision,
                "seed": args.seed,
            },
        },
    )
    rep = run(cfg)
    seconds = time.perf_counter() - t
    policy = load_model(rep["policy_dir"], "float32", merge=True)
    return {"seconds": seconds, "kept": rep["train_pairs"], **judged(policy, args)}


def side_rm(args: argparse.Namespace, out: str) -> dict:
    """Train the judging RM (ours, LoRA, rm_quality_vs_trl.py's settings, seed 0) and save it to args.rm_out."""
    from prefalign.config import build
    from reward_models.rm_train import RMTrainConfig, run

    cfg = build(
        RMTrainConfig,
        {
            "model": MODEL,
            "output_dir": args.rm_out,
            "data": {"source": args.data, "split": "all"},
            "eval": {"split": "none", "stats_pairs": 8},
            "train": {"method": "lora", "epochs": 1, "batch_size": BATCH, "max_length": args.max_length, "lr": 2e-4},
        },
    )
    return {"model_dir": run(cfg)["model_dir"]}


SIDES = {"trl": side_trl, "ours": side_ours, "rm": side_rm}


# --- the parent ------------------------------------------------------------------------------------------------


def mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def rm_scores(rm_dir: str, prompts: list[list[dict]], answers: list[str]) -> list[float]:
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model = AutoModelForSequenceClassification.from_pretrained(rm_dir, dtype="float32").eval()
    tok = AutoTokenizer.from_pretrained(rm_dir)
    out = []
    with torch.no_grad():
        for prompt, answer in zip(prompts, answers, strict=True):
            msgs = prompt + [{"role": "assistant", "content": answer}]
            enc = tok.apply_chat_template(msgs, return_tensors="pt", return_dict=True)
            out.append(model(input_ids=enc["input_ids"]).logits[0, 0].item())
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--modes", default="lora", help="comma list of lora, full")
    ap.add_argument("--seeds", default="0,1,2", help="comma list of seeds")
    ap.add_argument("--train-pairs", type=int, default=512, help="train pairs, half helpful, half harmless")
    ap.add_argument("--eval-pairs", type=int, default=400, help="held-out pairs, half helpful, half harmless")
    ap.add_argument("--answer-prompts", type=int, default=100, help="held-out prompts both policies answer")
    ap.add_argument("--new-tokens", type=int, default=96, help="longest greedy answer, in tokens")
    ap.add_argument("--max-length", type=int, default=512, help="token budget of prompt + response")
    ap.add_argument("--lr-lora", type=float, default=5e-5, help="learning rate with LoRA")
    ap.add_argument("--lr-full", type=float, default=1e-6, help="learning rate with full fine-tuning")
    ap.add_argument("--precision", default="auto", help="auto (bf16 where native, else fp32), bf16 or fp32")
    ap.add_argument("--rm", default=None, help="the judging RM directory (default: train one on the train pairs)")
    ap.add_argument("--out", default=None, help="write every number as JSON here")
    for name in ("--child", "--mode", "--data", "--held", "--rm-out"):
        ap.add_argument(name, default="", help=argparse.SUPPRESS)
    ap.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--lr", type=float, default=0.0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        from prefalign.cpu import tune_allocator

        tune_allocator()
        with tempfile.TemporaryDirectory() as tmp:
            report(SIDES[args.child](args, tmp))
        return

    precision, why = resolve_precision(args.precision)
    print(f"machine: {machine_line()}")
    print(f"precision: {precision} for both sides ({why})")
    results: dict = {"machine": machine_line(), "precision": precision, "modes": {}}
    with tempfile.TemporaryDirectory() as tmp:
        train_file, held_file, subset_of = hh_mixed_files(args.train_pairs, args.eval_pairs, args.max_length, Path(tmp))
        common = ["--data", str(train_file), "--held", str(held_file), "--max-length", str(args.max_length)]
        common += ["--answer-prompts", str(args.answer_prompts), "--new-tokens", str(args.new_tokens)]
        print(
            f"data: {args.train_pairs} train pairs and {len(subset_of)} held-out pairs (half helpful-base, half "
            f"harmless-base, prompt-hash split), all fitting {args.max_length} tokens; one epoch of "
            f"{args.train_pairs // BATCH} steps x {BATCH} pairs"
        )
        rm_dir = args.rm
        if rm_dir is None:
            rm_dir = spawn(__file__, ["--child", "rm", "--rm-out", str(Path(tmp) / "rm"), *common])["model_dir"]
            print(f"judging RM: trained on the train pairs (LoRA, lr 2e-4, one epoch) -> {rm_dir}")
        prompts = distinct_prompts(str(held_file), args.answer_prompts)
        for mode in args.modes.split(","):
            lr = args.lr_lora if mode == "lora" else args.lr_full
            runs: dict = {"trl": [], "ours": []}
            for seed in [int(s) for s in args.seeds.split(",")]:
                for side in ("trl", "ours"):
                    a = ["--child", side, "--mode", mode, "--seed", str(seed), "--lr", str(lr)]
                    r = spawn(__file__, [*a, "--precision", precision, *common])
                    r["rm"] = rm_scores(rm_dir, prompts, r["answers"])
                    r["right"] = [1.0 if c > j else 0.0 for c, j in r["rewards"]]
                    margin = mean([c - j for c, j in r["rewards"]])
                    runs[side].append({**r, "seed": seed})
                    print(
                        f"{mode:<4} seed {seed} {side:<4}  implicit-reward accuracy {mean(r['right']):.3f}  margin "
                        f"{margin:+.3f}  RM score of answers {mean(r['rm']):+.3f}  kept {r['kept']}  "
                        f"{r['seconds']:.0f} s  peak {r['peak_rss_gb']:.1f} GB",
                        flush=True,
                    )
            results["modes"][mode] = summarize(mode, runs, subset_of)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2))
        print(f"wrote {args.out}")


def summarize(mode: str, runs: dict, subset_of: list[str]) -> dict:
    n = len(subset_of)
    pairs = list(zip(runs["ours"], runs["trl"], strict=True))
    out: dict = {"runs": runs}
    print(f"\n{mode}: held-out implicit-reward accuracy (mean over seeds), ours − TRL, 95% bootstrap over pairs")
    print("| subset | pairs | TRL | ours | ours − TRL [95% CI] |")
    print("|---|---|---|---|---|")
    for name in ("all", *HH_SUBSETS):
        idx = [i for i in range(n) if name in ("all", subset_of[i])]
        trl = mean([mean([r["right"][i] for i in idx]) for r in runs["trl"]])
        ours = mean([mean([r["right"][i] for i in idx]) for r in runs["ours"]])
        d = [mean([o["right"][i] - t["right"][i] for o, t in pairs]) for i in idx]
        lo, hi = bootstrap_ci(d)
        out[name] = {"trl": trl, "ours": ours, "diff": mean(d), "ci": [lo, hi]}
        print(f"| {name} | {len(idx)} | {trl:.3f} | {ours:.3f} | {mean(d):+.3f} [{lo:+.3f}, {hi:+.3f}] |")
    k = len(runs["ours"][0]["rm"])
    wins = [
        mean([1.0 if o["rm"][i] > t["rm"][i] else 0.5 if o["rm"][i] == t["rm"][i] else 0.0 for o, t in pairs])
        for i in range(k)
    ]
    lo, hi = bootstrap_ci(wins)
    out["win_rate"] = {"ours_vs_trl": mean(wins), "ci": [lo, hi], "prompts": k}
    print(f"RM win rate of ours' greedy answers against TRL's: {mean(wins):.3f} [{lo:.3f}, {hi:.3f}] over {k} prompts")
    t_trl, t_ours = mean([r["seconds"] for r in runs["trl"]]), mean([r["seconds"] for r in runs["ours"]])
    out["seconds"] = {"trl": t_trl, "ours": t_ours, "ratio": t_trl / t_ours}
    print(f"whole training run: TRL {t_trl:.0f} s, ours {t_ours:.0f} s: ours {t_trl / t_ours:.2f}x faster\n")
    return out


if __name__ == "__main__":
    main()
