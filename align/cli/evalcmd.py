"""`align eval policy`: gold-graded evaluation of a policy on held-out suite prompts."""

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
