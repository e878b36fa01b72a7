"""`align eval policy`: gold-graded evaluation of a policy on held-out suite prompts, or on a standard prompt set
(`--bench ifeval | alpacaeval | arenahard | mtbench --data FILE`, leaderboards/policy_bench.py).
`align eval overopt`: reward-model over-optimization, proxy against gold, for best-of-n and RL checkpoints."""

from __future__ import annotations

import argparse

EXAMPLE = (
    "align eval policy --model runs/dpo_suite/model --baseline builtin:smollm2-135m-instruct\n"
    "  align eval policy --model runs/dpo_suite/model --limit 60 --judge runs/rm_suite/model\n"
    "  align eval policy --model builtin:smollm2-135m-instruct --prompts runs/quickstart/suite/test_prompts.jsonl\n"
    "standard prompt sets (--bench), each from its official file format or a hub id:\n"
    "  align eval policy --bench ifeval --data input_data.jsonl --model builtin:smollm2-135m-instruct \\\n"
    "      --out runs/ifeval\n"
    "  align eval policy --bench alpacaeval --data alpaca_eval_gpt4_baseline.json --model runs/dpo/adapter \\\n"
    "      --judge runs/rm/model --out runs/alpacaeval\n"
    "  align eval policy --bench arenahard --data question.jsonl --reference model_answer/gpt-4-0314.jsonl \\\n"
    "      --model runs/dpo/model --judge builtin:smollm2-135m-instruct --judge-kind pair_pm\n"
    "  align eval policy --bench mtbench --data mt_bench/question.jsonl --model runs/dpo/model --judge runs/rm/model\n"
    "  align eval policy --bench alpacaeval --data suite --model builtin:smollm2-135m-instruct \\\n"
    "      --write-reference runs/base_reference.json   (reference answers from a base model)"
)


def cmd_policy(args: argparse.Namespace) -> int:
    if args.bench is not None or args.write_reference is not None:
        return _cmd_bench(args)
    from align.evaluate import PolicyEvalSettings, evaluate_policy, report_lines

    settings = PolicyEvalSettings(
        max_new_tokens=args.max_new_tokens or 96,
        batch_size=args.batch_size,
        temperature=args.temperature,
        dtype=args.dtype,
        seed=args.seed,
    )
    report = evaluate_policy(
        args.model,
        args.baseline,
        args.prompts,
        120 if args.limit is None else args.limit,
        args.judge,
        args.out,
        settings,
    )
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


def _judge(args: argparse.Namespace) -> object | None:
    """The judge scorer of a --bench run: --judge MODEL with --judge-kind (default: scalar for a reward model) and
    --judge-option KEY=VALUE, built through the scorer table."""
    from prefalign.config import parse_override
    from reward_models.scorers import default_scorer, load_scorer

    if args.judge in (None, "gold"):
        return None
    kind = args.judge_kind or default_scorer(args.judge, None)
    options: dict[str, object] = {"model": args.judge}
    for text in args.judge_options:
        keys, value = parse_override(text)
        options[".".join(keys)] = value
    return load_scorer(kind, **options)


def _cmd_bench(args: argparse.Namespace) -> int:
    from leaderboards.policy_bench import PolicyBenchSettings, report_lines, run_policy_bench, write_reference
    from prefalign.errors import UserError

    settings = PolicyBenchSettings(
        max_new_tokens=args.max_new_tokens or 256,
        batch_size=args.batch_size,
        temperature=args.temperature,
        dtype=args.dtype,
        seed=args.seed,
        limit=args.limit,
        allow_partial=args.allow_partial,
        bootstrap=args.bootstrap,
    )
    if args.write_reference is not None:
        if args.bench not in (None, "alpacaeval"):
            raise UserError("--write-reference writes an AlpacaEval-format file; use it with --bench alpacaeval")
        if args.data is None:
            raise UserError("--write-reference needs --data: an AlpacaEval file whose instructions to answer, or suite")
        n = write_reference(args.model, args.data, args.write_reference, settings)
        print(f"wrote {n} reference answers by {args.model} to {args.write_reference}")
        return 0
    if args.data is None:
        raise UserError(f"--bench {args.bench} needs --data: the set's file in its official format, or a hub id")
    if args.baseline is not None:
        raise UserError(
            f"--bench {args.bench} compares with the set's reference answers, not a --baseline model; to compare "
            "with a model, write its answers with --write-reference and pass that file as --data"
        )
    judge = _judge(args)
    report, record = run_policy_bench(
        args.model, args.bench, args.data, judge, args.reference, settings, args.out, args.records
    )
    print("\n".join(report_lines(record)))
    if report["generations_reused"]:
        print(f"generations reused from {args.out}/generations.jsonl")
    if args.out:
        print(f"wrote {args.out}/report.json and {args.out}/generations.jsonl")
    if record.path:
        print(f"record: {record.path}")
    return 0


def register(sub: argparse._SubParsersAction, add) -> None:
    ev = sub.add_parser("eval", help="evaluate policies")
    esub = ev.add_subparsers(dest="eval_verb", metavar="VERB")
    p = add(
        esub,
        "policy",
        cmd_policy,
        "generate on held-out suite prompts; gold scores, safety rates (harmful requests complied with, "
        "harmless look-alikes refused) and win rate; or on a standard prompt set (--bench): IFEval accuracy, "
        "AlpacaEval / Arena-Hard win rate and length-controlled win rate, MT-Bench scores",
        EXAMPLE,
    )
    p.add_argument("--model", required=True, help="policy: builtin, directory, hub id, or a LoRA adapter directory")
    p.add_argument("--baseline", default=None, help="model to compare against (e.g. the starting model)")
    p.add_argument("--prompts", default="suite", help="'suite' (its test prompts) or a prompts JSONL with graders")
    p.add_argument(
        "--limit",
        type=int,
        default=None,
        help="number of prompts: suite, family-balanced (default 120); --bench, the first N usable (default all)",
    )
    p.add_argument(
        "--judge",
        default="gold",
        help="'gold' (the suite graders) or a reward-model directory; "
        "prompts the reward model scores NaN are left out of the win rate and counted. "
        "--bench: the judge model (alpacaeval, arenahard, mtbench), built with --judge-kind",
    )
    p.add_argument(
        "--bench",
        default=None,
        choices=["ifeval", "alpacaeval", "arenahard", "mtbench"],
        help="a standard prompt set instead of the suite (read from --data in its official format)",
    )
    p.add_argument("--data", default=None, help="--bench: the set's file (official format) or a hub id")
    p.add_argument(
        "--reference", default=None, help="arenahard: the reference model's answer file (model_answer/<model>.jsonl)"
    )
    p.add_argument(
        "--judge-kind",
        default=None,
        help="--bench: scorer kind of --judge (`align ls scorers`): scalar (default for a reward model), judge, "
        "pair_pm, think (pairwise, asked in both orders), grm (1-10, mtbench) ...",
    )
    p.add_argument(
        "--judge-option",
        dest="judge_options",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="--bench: an option of the judge scorer, e.g. normalize=true, dtype=float32 (repeatable)",
    )
    p.add_argument(
        "--allow-partial",
        action="store_true",
        help="--bench: score the usable rows when some are not (unknown instruction ids, missing fields); they are "
        "listed with their row numbers and the record is marked partial. Without it such rows are an error",
    )
    p.add_argument("--bootstrap", type=int, default=1000, help="--bench: bootstrap resamples of the 95%% intervals")
    p.add_argument(
        "--records",
        default=None,
        help="--bench: leaderboard records directory to add the run's record to (policy tab); default: none",
    )
    p.add_argument(
        "--write-reference",
        default=None,
        metavar="FILE",
        help="alpacaeval: write --model's answers to the instructions of --data (an AlpacaEval file, or suite) as an "
        "AlpacaEval reference file naming --model as generator, then stop",
    )
    p.add_argument(
        "--max-new-tokens",
        type=int,
        default=None,
        help="tokens per answer (default: 96 on the suite, 256 with --bench)",
    )
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    p.add_argument(
        "--dtype",
        default="auto",
        choices=["auto", "bfloat16", "float32"],
        help="auto: bfloat16 where the device runs it natively, else float32",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--out",
        default=None,
        help="directory for report.json and generations.jsonl (--bench: generations are reused from here when the "
        "model, data and decoding settings match, so judging again does not regenerate)",
    )
    register_overopt(esub, add)
