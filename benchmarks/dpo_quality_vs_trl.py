"""DPO quality on human labels: TRL's DPOTrainer vs `align train`, the same pairs and settings, seeds.

    .venv/bin/python benchmarks/dpo_quality_vs_trl.py --rm RM_DIR                       # LoRA, 3 seeds
    .venv/bin/python benchmarks/dpo_quality_vs_trl.py --modes lora --seeds 0 --train-pairs 64 --eval-pairs 100
    .venv/bin/python benchmarks/dpo_quality_vs_trl.py --keep benchmarks/results/quality --seeds 0   # in parts

Data and settings as `benchmarks/rm_quality_vs_trl.py`: HH-RLHF helpful-base and harmless-base cut by a hash of the
prompt into train (80%) and held-out (20%), the first pairs of each that fit --max-length, one train file and one
held-out file both sides read. DPO sigmoid loss, β 0.1; one epoch of 8-pair steps; the same lr, schedule (linear
decay, no warm-up), max length, precision and seed on both sides; the reference is the base model on both (LoRA:
the adapters disabled; full: a frozen copy on TRL's side, log-probs computed once on ours); no activation
checkpointing on either side (TRL's default, turned off: its fastest). Each side trains in its own process.
Sized by default at 256 train pairs (32 steps) and 200 held-out pairs, half the RM comparison's: TRL's DPO step
(16 sequences padded to the batch's longest, a reference forward besides) takes about 2 minutes on a 2-core AVX2
CPU in fp32 (peak ~20 GB), so one seed of both sides with their judging fits in under 2 hours there.

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
    MODEL,
    lora_config,
    ours_rm_config,
    read_pairs,
    spawn,
    trl_model_dtype,
    trl_rows,
)
from benchmarks.quality import (  # noqa: E402
    accuracy_table,
    parser,
    plain_reward,
    run_child,
    run_sides,
    start,
    time_ratio,
    train_section,
    train_trl,
    trl_settings,
    write_results,
)
from prefalign.stats import bootstrap_ci, finite_mean  # noqa: E402

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
    config = DPOConfig(**trl_settings(args, out, len(rows)), beta=BETA, loss_type=["sigmoid"])
    peft_config = lora_config("CAUSAL_LM") if lora else None
    trainer = DPOTrainer(
        model=model, args=config, train_dataset=Dataset.from_list(rows), processing_class=tok, peft_config=peft_config
    )
    timing, policy = train_trl(trainer, lora, t)
    return {**timing, **judged(policy, args)}


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
            "train": train_section(args),
        },
    )
    rep = run(cfg)
    seconds = time.perf_counter() - t
    policy = load_model(rep["policy_dir"], "float32", merge=True)
    return {"seconds": seconds, "kept": rep["train_pairs"], **judged(policy, args)}


def side_rm(args: argparse.Namespace, out: str) -> dict:
    """Train the judging RM (ours, LoRA, lr 2e-4, one epoch, seed 0) and save it to args.rm_out."""
    from reward_models.rm_train import run

    train = {"method": "lora", "epochs": 1, "batch_size": 8, "max_length": args.max_length, "lr": 2e-4}
    return {"model_dir": run(ours_rm_config(args.rm_out, args.data, train))["model_dir"]}


SIDES = {"trl": side_trl, "ours": side_ours, "rm": side_rm}


# --- the parent ------------------------------------------------------------------------------------------------


def rm_scores(rm_dir: str, prompts: list[list[dict]], answers: list[str]) -> list[float]:
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model = AutoModelForSequenceClassification.from_pretrained(rm_dir, dtype="float32").eval()
    tok = AutoTokenizer.from_pretrained(rm_dir)
    with torch.no_grad():
        return [
            plain_reward(model, tok, [*prompt, {"role": "assistant", "content": answer}])
            for prompt, answer in zip(prompts, answers, strict=True)
        ]


def main() -> None:
    ap = parser(__doc__, "lora", lr_lora=5e-5, lr_full=1e-6, child_paths=("--rm-out",), train_pairs=256, eval_pairs=200)
    ap.add_argument("--answer-prompts", type=int, default=100, help="held-out prompts both policies answer")
    ap.add_argument("--new-tokens", type=int, default=96, help="longest greedy answer, in tokens")
    ap.add_argument("--rm", default=None, help="the judging RM directory (default: train one on the train pairs)")
    args = ap.parse_args()
    if args.child:
        run_child(args, SIDES)
        return
    with tempfile.TemporaryDirectory() as tmp:
        precision, train_file, held_file, subset_of, results = start(args, Path(tmp))
        common = ["--data", str(train_file), "--held", str(held_file), "--max-length", str(args.max_length)]
        common += ["--answer-prompts", str(args.answer_prompts), "--new-tokens", str(args.new_tokens)]
        rm_dir = args.rm or judging_rm(args, results, common, Path(tmp))
        prompts = distinct_prompts(str(held_file), args.answer_prompts)

        def finish(r: dict) -> None:
            r["rm"] = rm_scores(rm_dir, prompts, r["answers"])
            r["right"] = [1.0 if c > j else 0.0 for c, j in r["rewards"]]

        def line(r: dict) -> str:
            margin = finite_mean([c - j for c, j in r["rewards"]])
            return (
                f"implicit-reward accuracy {finite_mean(r['right']):.3f}  margin {margin:+.3f}  "
                f"RM score of answers {finite_mean(r['rm']):+.3f}"
            )

        for mode in args.modes.split(","):
            runs = run_sides(__file__, args, mode, ["--precision", precision, *common], line, results, finish)
            print()
            table = accuracy_table(runs, subset_of, "right", f"{mode}: held-out implicit-reward accuracy")
            results["modes"][mode] = {"runs": runs, **table, "win_rate": win_rate(runs), "seconds": time_ratio(runs)}
    write_results(args, results)


def judging_rm(args: argparse.Namespace, results: dict, common: list[str], tmp: Path) -> str:
    """Train the judging RM on the train pairs; with `--keep` it is kept there (named by the data digest, the max
    length and the precision) and a later invocation on the same data reuses it."""
    out = tmp / "rm"
    if args.keep:
        tag = f"{results['data_sha256'][:12]}-{args.max_length}-{results['precision']}"
        out = Path(args.keep) / f"dpo_quality_vs_trl-judge-rm-{tag}"
        report = out / "report.json"
        if report.exists():
            rm_dir = json.loads(report.read_text())["model_dir"]
            print(f"judging RM: kept from an earlier run: {rm_dir}")
            return rm_dir
    rm_dir = spawn(__file__, ["--child", "rm", "--rm-out", str(out), *common])["model_dir"]
    print(f"judging RM: trained on the train pairs (LoRA, lr 2e-4, one epoch) -> {rm_dir}")
    return rm_dir


def win_rate(runs: dict) -> dict:
    """The RM's preference for ours' greedy answer over TRL's, per prompt (a tie is half) averaged over the
    seeds, with a 95% bootstrap interval over prompts."""
    seeds = list(zip(runs["ours"], runs["trl"], strict=True))
    k = len(runs["ours"][0]["rm"])
    wins = [
        finite_mean([1.0 if o["rm"][i] > t["rm"][i] else 0.5 if o["rm"][i] == t["rm"][i] else 0.0 for o, t in seeds])
        for i in range(k)
    ]
    lo, hi = bootstrap_ci(wins)
    print(
        f"RM win rate of ours' greedy answers against TRL's: {finite_mean(wins):.3f} [{lo:.3f}, {hi:.3f}] "
        f"over {k} prompts"
    )
    return {"ours_vs_trl": finite_mean(wins), "ci": [lo, hi], "prompts": k}


if __name__ == "__main__":
    main()
