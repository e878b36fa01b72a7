"""`align eval policy`: gold-graded evaluation of a policy on held-out suite prompts, or on a standard prompt set
(`--bench NAME --data FILE`, a set of `align ls policy-benchmarks`, leaderboards/policy_bench.py); its flags are the
fields of `leaderboards.policy_bench.PolicyBenchSettings`.
`align eval overopt`: reward-model over-optimization, proxy against gold, for best-of-n and RL checkpoints.
`align eval compare`: two saved gold evaluations of the same prompts, paired, without generating again."""

from __future__ import annotations

import argparse

from align.cli.common import HelpFormatter
from align.compare import CompareSettings
from align.overopt import OveroptSettings
from leaderboards.bench_judges import load_judge
from leaderboards.policy_bench import PolicyBenchSettings, run_policy_bench, write_reference
from leaderboards.policy_bench import report_lines as bench_report_lines
from prefalign.files import write_json

EXAMPLE = (
    "align eval policy --model runs/dpo_suite/merged --baseline builtin:smollm2-135m-instruct\n"
    "  align eval policy --model runs/dpo_suite/merged --limit 60 --judge runs/rm_suite/model\n"
    "  align eval policy --model builtin:smollm2-135m-instruct --prompts runs/quickstart/suite/test_prompts.jsonl\n"
    "  align eval policy --config eval.yaml --limit 30   (eval.yaml: model: ..., baseline: ..., the flags' names)\n"
    "standard prompt sets (--bench), each from its official file format or a hub id:\n"
    "  align eval policy --bench ifeval --data input_data.jsonl --model builtin:smollm2-135m-instruct \\\n"
    "      --out runs/ifeval\n"
    "  align eval policy --bench alpacaeval --data alpaca_eval_gpt4_baseline.json --model runs/dpo/adapter \\\n"
    "      --judge runs/rm/model --out runs/alpacaeval\n"
    "  align eval policy --bench arenahard --data question.jsonl --reference model_answer/gpt-4-0314.jsonl \\\n"
    "      --model runs/dpo/merged --judge pair_pm:builtin:smollm2-135m-instruct\n"
    "  align eval policy --bench mtbench --data mt_bench/question.jsonl --model runs/dpo/merged --judge runs/rm/model\n"
    "  align eval policy --bench alpacaeval --data suite --model builtin:smollm2-135m-instruct \\\n"
    "      --write-reference runs/base_reference.json   (reference answers from a base model)"
)


def cmd_policy(s: PolicyBenchSettings) -> int:
    if s.bench is not None or s.write_reference is not None:
        return _cmd_bench(s)
    # align.evaluate (with the suite's generators) adds ~120 ms to every `align` start: imported when this runs
    from align.evaluate import SUITE_LIMIT, evaluate_policy, report_lines

    limit = SUITE_LIMIT if s.limit is None else s.limit
    report = evaluate_policy(s.model, s.baseline, s.prompts, limit, s.judge, s.out, s, judge_options=s.options)
    print("\n".join(report_lines(report)))
    if s.out:
        print(f"wrote {s.out}/report.json and {s.out}/generations.jsonl")
    return 0


OVEROPT_EXAMPLE = (
    "align eval overopt --proxy runs/rm_suite/model --out runs/overopt                      (best-of-n, n = 1..64)\n"
    "  align eval overopt --proxy runs/rm_suite/model --run runs/grpo_proxy_suite --out runs/overopt   (+ RL)\n"
    "  align eval overopt --proxy '{type: scalar, model: runs/rm_suite/model}' --n 256 --limit 32 --out runs/overopt"
)


def cmd_overopt(s: OveroptSettings) -> int:
    from align.overopt.report import run_overopt  # lazy: loads torch and the models (a second of start-up)

    report = run_overopt(s)
    print("\n".join(report["summary"]))
    print(f"wrote {s.out}/report.json, {s.out}/summary.txt and {s.out}/overopt.png")
    return 0


COMPARE_EXAMPLE = (
    "align eval compare --policy runs/grpo_suite --baseline runs/dpo_suite_eval   (the run's last evaluation)\n"
    "  align eval compare --policy runs/grpo_suite@30 --baseline runs/grpo_suite@0   (steps of one run)\n"
    "  align eval compare --policy runs/quickstart/eval/aligned --baseline runs/quickstart/eval/dpo --figure cmp.png\n"
    "  align eval compare --policy runs/iterative_dpo_suite --baseline runs/iterative_dpo_suite@0   (rounds)"
)


def cmd_compare(s: CompareSettings) -> int:
    from align.compare import compare, compare_lines, load_saved

    result = compare(load_saved(s.policy), load_saved(s.baseline), s.seed)
    print("\n".join(compare_lines(result)))
    if s.out:
        write_json(s.out, result, indent=2)
        print(f"wrote {s.out}")
    if s.figure:
        from align.figures import compare_data, draw  # lazy: matplotlib, only to draw

        draw(compare_data(result), s.figure, "comparison", base_label="baseline")
        print(f"wrote {s.figure}")
    return 0


def register_overopt(esub: argparse._SubParsersAction, add) -> None:
    add(
        esub,
        "overopt",
        cmd_overopt,
        "reward-model over-optimization (Gao et al. 2022): best-of-n from the initial policy and the checkpoints "
        "of an online run trained against a proxy RM, proxy and gold score against d = sqrt(KL), fitted forms, "
        "the gold peak; samples and scores cached in --out",
        OVEROPT_EXAMPLE,
        settings=OveroptSettings,
    )


def _cmd_bench(s: PolicyBenchSettings) -> int:
    if s.write_reference is not None:
        n = write_reference(s)
        print(f"wrote {n} reference answers by {s.model} to {s.write_reference}")
        return 0
    report, record = run_policy_bench(s, load_judge(s))
    print("\n".join(bench_report_lines(record)))
    if report["generations_reused"]:
        print(f"generations reused from {s.out}/generations.jsonl")
    if s.out:
        print(f"wrote {s.out}/report.json and {s.out}/generations.jsonl")
    if record.path:
        print(f"record: {record.path}")
    return 0


def register(sub: argparse._SubParsersAction, add) -> None:
    ev = sub.add_parser("eval", help="evaluate policies", formatter_class=HelpFormatter)
    esub = ev.add_subparsers(dest="eval_verb", metavar="VERB")
    add(
        esub,
        "policy",
        cmd_policy,
        "generate on held-out suite prompts; gold scores, safety rates (harmful requests complied with, "
        "harmless look-alikes refused) and win rate; or on a standard prompt set (--bench): IFEval accuracy, "
        "AlpacaEval / Arena-Hard win rate and length-controlled win rate, MT-Bench scores",
        EXAMPLE,
        settings=PolicyBenchSettings,
    )
    register_overopt(esub, add)
    add(
        esub,
        "compare",
        cmd_compare,
        "two saved gold evaluations of the same held-out prompts (align eval policy --out, an online run's "
        "evals.json at its last or any step, an iterative run's rounds): each side's gold and safety rates, the "
        "paired difference with a bootstrap 95% interval and the win rate (per task family too where a side saved its "
        "answers: eval policy --out), without generating again",
        COMPARE_EXAMPLE,
        settings=CompareSettings,
    )
