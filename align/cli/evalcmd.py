"""`align eval policy`: gold-graded evaluation of a policy on held-out suite prompts.
`align eval overopt`: reward-model over-optimization, proxy against gold, for best-of-n and RL checkpoints."""

from __future__ import annotations

import argparse

EXAMPLE = (
    "align eval policy --model runs/dpo_suite/model --baseline builtin:smollm2-135m-instruct\n"
    "  align eval policy --model runs/dpo_suite/model --limit 60 --judge runs/rm_suite/model\n"
    "  align eval policy --model builtin:smollm2-135m-instruct --prompts runs/quickstart/suite/test_prompts.jsonl"
)


def cmd_policy(args: argparse.Namespace) -> int:
    from align.evaluate import PolicyEvalSettings, evaluate_policy, report_lines

    settings = PolicyEvalSettings(
        max_new_tokens=args.max_new_tokens,
        batch_size=args.batch_size,
        temperature=args.temperature,
        dtype=args.dtype,
        seed=args.seed,
    )
    report = evaluate_policy(args.model, args.baseline, args.prompts, args.limit, args.judge, args.out, settings)
    print("\n".join(report_lines(report)))
    if args.out:
        print(f"wrote {args.out}/report.json and {args.out}/generations.jsonl")
    return 0


OVEROPT_EXAMPLE = (
    "align eval overopt --proxy runs/rm_suite/model --out runs/overopt                      (best-of-n, n = 1..64)\n"
    "  align eval overopt --proxy runs/rm_suite/model --run runs/grpo_proxy_suite --out runs/overopt   (+ RL)\n"
    "  align eval overopt --proxy '{type: scalar, model: runs/rm_suite/model}' --n 256 --limit 32 --out runs/overopt"
)


def cmd_overopt(args: argparse.Namespace) -> int:
    from align.overopt import OveroptSettings, run_overopt

    settings = OveroptSettings(
        n=args.n,
        rl_samples=args.rl_samples,
        temperature=args.temperature,
        max_new_tokens=args.max_new_tokens,
        seed=args.seed,
        dtype=args.dtype,
        batch_size=args.batch_size,
    )
    report = run_overopt(args.proxy, args.run, args.model, args.prompts, args.limit, args.out, settings)
    print("\n".join(report["summary"]))
    print(f"wrote {args.out}/report.json, {args.out}/summary.txt and {args.out}/overopt.png")
    return 0


def register_overopt(esub: argparse._SubParsersAction, add) -> None:
    p = add(
        esub,
        "overopt",
        cmd_overopt,
        "reward-model over-optimization (Gao et al. 2022): best-of-n from the initial policy and the checkpoints "
        "of an online run trained against a proxy RM, proxy and gold score against d = sqrt(KL), fitted forms, "
        "the gold peak; samples and scores cached in --out",
        OVEROPT_EXAMPLE,
    )
    p.add_argument(
        "--proxy",
        default=None,
        help="the proxy: a reward-model directory or a scorer spec '{type: KIND, model: ..., ...}'; "
        "default with --run: the run's one non-gold reward component",
    )
    p.add_argument(
        "--run",
        default=None,
        help="an online run directory (kind online, keep_checkpoints: 0): evaluate each saved checkpoint",
    )
    p.add_argument("--model", default=None, help="initial policy without --run (default builtin:smollm2-135m-instruct)")
    p.add_argument("--prompts", default="suite", help="'suite' (its test prompts) or a prompts JSONL with graders")
    p.add_argument("--limit", type=int, default=64, help="number of prompts (family-balanced)")
    p.add_argument("--n", type=int, default=64, help="pool size N per prompt; best-of-n for n = 1, 2, 4, ..., N")
    p.add_argument("--rl-samples", type=int, default=4, help="samples per prompt at each checkpoint (with --run)")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--seed", type=int, default=0, help="sampling seed (per sample) and prompt subset")
    p.add_argument(
        "--dtype",
        default="auto",
        choices=["auto", "bfloat16", "float32"],
        help="the sampler's (auto: bfloat16 where native, else float32); KL log-probs run in float32",
    )
    p.add_argument("--batch-size", type=int, default=16, help="completions per log-prob forward (the KL)")
    p.add_argument("--out", default="runs/overopt", help="directory for report.json, summary.txt, overopt.png, cache/")


def register(sub: argparse._SubParsersAction, add) -> None:
    ev = sub.add_parser("eval", help="evaluate policies")
    esub = ev.add_subparsers(dest="eval_verb", metavar="VERB")
    p = add(
        esub,
        "policy",
        cmd_policy,
        "generate on held-out suite prompts; gold scores, safety rates (harmful requests complied with, "
        "harmless look-alikes refused) and win rate",
        EXAMPLE,
    )
    p.add_argument("--model", required=True, help="policy: builtin, directory, hub id, or a LoRA adapter directory")
    p.add_argument("--baseline", default=None, help="model to compare against (e.g. the starting model)")
    p.add_argument("--prompts", default="suite", help="'suite' (its test prompts) or a prompts JSONL with graders")
    p.add_argument("--limit", type=int, default=120, help="number of prompts (family-balanced)")
    p.add_argument(
        "--judge",
        default="gold",
        help="'gold' (the suite graders) or a reward-model directory; "
        "prompts the reward model scores NaN are left out of the win rate and counted",
    )
    p.add_argument("--max-new-tokens", type=int, default=96)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    p.add_argument(
        "--dtype",
        default="auto",
        choices=["auto", "bfloat16", "float32"],
        help="auto: bfloat16 where the device runs it natively, else float32",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="directory for report.json and generations.jsonl")
    register_overopt(esub, add)
