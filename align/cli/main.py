"""The `align` command. Verbs import their heavy dependencies only when they run, so `align --help` is fast.

    align quickstart                         the main job on the embedded default model and data
    align rm train --config FILE [k=v ...]   train a reward model: Bradley-Terry, generative judge, meta-RM, POLAR
    align rm score | strength | scaling | compare
                                             score responses; RM-ensemble strength; GRM scaling; scorers side by side
    align train --config FILE [k=v ...]      align a policy (DPO, cDPO, robust, IPO, hinge, SimPO, INPO)
    align eval policy --model M              gold-graded evaluation on held-out suite prompts
    align bench run BENCH --model M          score a reward model on an RM benchmark; `bench show` renders
    align report RUN_DIR                     the run report (report.html, dashboard.png) of a training run
    align data doctor SOURCE                 what a data source contains (counts, drops, lengths, boundaries)
    align data suite --out DIR               write the verifiable preference suite as JSONL
    align validate FILE                      check a config without running it
    align ls [TABLE]                         component tables (losses, rm-losses, scorers, benchmarks, ...)

Run `align VERB --help` for a verb's options and examples.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

EXAMPLES = {
    "quickstart": "align quickstart\n  align quickstart --full   (adds a short GRPO stage after DPO)\n"
    "  align quickstart --out runs/qs doctor.max_length=512 stages=[suite,doctor]",
    "doctor": (
        "align data doctor ../shared/data/hh-rlhf/helpful-base/test.decontaminated.jsonl.gz\n"
        "  align data doctor suite --out runs/doctor-suite\n"
        "  align data doctor my_pairs.jsonl --format trl --max-length 512 --policy drop\n"
        "  align data doctor testdata_pairwise.jsonl --preset autoj          (a labelled comparison file)\n"
        "  align data doctor my_labels.json --columns my_columns.yaml       (any one, through a column map)"
    ),
    "suite": "align data suite --out data/suite --per-family 200 --seed 0",
    "validate": "align validate configs/quickstart.yaml",
    "ls": "align ls\n  align ls losses",
    "report": (
        "align report runs/rm                  (a finished, running or interrupted run)\n"
        "  align report runs/quickstart/dpo"
    ),
}


def _examples(verb: str) -> str:
    return "examples:\n  " + EXAMPLES[verb]


# modules with `register(subparsers, add)` adding more verbs (kept light: heavy imports inside commands)
VERB_GROUPS: list[str] = ["align.cli.rm", "align.cli.train", "align.cli.evalcmd", "align.cli.bench"]


# --- verbs -------------------------------------------------------------------------------------------


def cmd_ls(args: argparse.Namespace) -> int:
    from .tables import TABLES, print_table

    names = [args.table] if args.table else list(TABLES)
    if args.table and args.table not in TABLES:
        from prefalign.errors import UserError, did_you_mean

        raise UserError(
            f"unknown table '{args.table}'{did_you_mean(args.table, list(TABLES))}; choose one of {', '.join(TABLES)}"
        )
    for name in names:
        print_table(name, TABLES[name]())
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    from .configs import validate_file

    for path in args.files:
        kind, _ = validate_file(path, args.overrides)
        print(f"{path}: ok ({kind})")
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from prefalign.config import build
    from preference_data.comparisons import read_columns
    from preference_data.doctor import run_doctor
    from preference_data.sources import DataConfig

    fields: dict[str, Any] = {"source": args.source, "format": args.format, "split": args.split}
    if args.preset is not None:
        fields["preset"] = args.preset
    if args.columns is not None:
        fields["columns"] = read_columns(args.columns)
    data = build(DataConfig, fields, "align data doctor")
    out = args.out or os.path.join("runs", "doctor")
    report = run_doctor(data, args.model, args.max_length, args.policy, out)
    print("\n".join(report["text"]))
    for p in report.get("written", []):
        print(f"wrote {p}")
    return 0


def cmd_suite(args: argparse.Namespace) -> int:
    from preference_data.suite import build_suite, write_suite

    suite = build_suite(n_per_family=args.per_family, seed=args.seed)
    write_suite(suite, args.out)
    print(
        f"wrote the suite ({len(suite.train_pairs)} train / {len(suite.test_pairs)} test pairs, "
        f"{len(suite.train_prompts)} / {len(suite.test_prompts)} prompts) to {args.out}"
    )
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from prefalign.training.report import write_report

    files = write_report(args.run_dir)
    print(files.status)
    print(f"report    {files.html}")
    print(f"figure    {files.figure if files.figure else 'none (no steps logged yet)'}")
    print(f"open      {files.html.resolve().as_uri()}")
    return 0


def cmd_quickstart(args: argparse.Namespace) -> int:
    from .quickstart import run_quickstart

    return run_quickstart(args.config, args.out, args.overrides, full=args.full)


# --- parser ------------------------------------------------------------------------------------------


def _add(
    sub: argparse._SubParsersAction, name: str, fn: Callable[[argparse.Namespace], int], help_: str, example: str
) -> argparse.ArgumentParser:
    """Add a verb whose help ends with examples (`example` is a key of EXAMPLES or the example text itself)."""
    p = sub.add_parser(
        name,
        help=help_,
        description=help_,
        epilog=_examples(example) if example in EXAMPLES else "examples:\n  " + example,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.set_defaults(fn=fn)
    return p


def build_parser() -> argparse.ArgumentParser:
    from typing import get_args

    from prefalign.training.config import LengthPolicy  # torch-free, like every import while parsing

    parser = argparse.ArgumentParser(
        prog="align", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="verb", metavar="VERB")

    p = _add(sub, "quickstart", cmd_quickstart, "run the main job on the embedded default model and data", "quickstart")
    p.add_argument("--config", default=None, help="a quickstart YAML (default: the built-in settings)")
    p.add_argument("--out", default=None, help="output directory (default: runs/quickstart)")
    p.add_argument(
        "--full",
        action="store_true",
        help="add the online stage: a short GRPO run from the DPO policy against the gold graders",
    )
    p.add_argument("overrides", nargs="*", help="dotted overrides, e.g. doctor_max_length=512")

    p = _add(sub, "validate", cmd_validate, "check config files without running them", "validate")
    p.add_argument("files", nargs="+", help="YAML config files")
    p.add_argument("--set", dest="overrides", action="append", default=[], help="dotted override to check too")

    p = _add(
        sub,
        "report",
        cmd_report,
        "write the run report of a training run (config, data report, curves, alerts, final numbers)",
        "report",
    )
    p.add_argument("run_dir", metavar="RUN_DIR", help="the output_dir of an rm train / train run")

    p = _add(sub, "ls", cmd_ls, "print the component tables", "ls")
    p.add_argument("table", nargs="?", default=None, help="one table (default: all)")

    data = sub.add_parser("data", help="inspect and generate data")
    dsub = data.add_subparsers(dest="data_verb", metavar="VERB")
    p = _add(dsub, "doctor", cmd_doctor, "report what a data source contains and what would be dropped", "doctor")
    p.add_argument("source", help="'suite', a file or directory, or a hub id")
    p.add_argument("--format", default="auto", help="row format (default: detect; see `align ls formats`)")
    p.add_argument(
        "--preset", default=None, help="a labelled comparison file in a public set's format (`align ls presets`)"
    )
    p.add_argument(
        "--columns", default=None, help="a YAML column map for any labelled comparison file (see README: columns)"
    )
    p.add_argument("--split", default="all", choices=["train", "dev", "test", "all"])
    p.add_argument("--model", default="builtin:smollm2-135m-instruct", help="tokenizer to check against")
    p.add_argument("--max-length", type=int, default=1024, help="token budget per sequence")
    p.add_argument(
        "--policy",
        default="drop",
        choices=get_args(LengthPolicy),
        help="what to do with pairs longer than --max-length",
    )
    p.add_argument("--out", default=None, help="where to write doctor.json/doctor.txt (default: runs/doctor)")
    p = _add(dsub, "suite", cmd_suite, "generate the verifiable preference suite as JSONL files", "suite")
    p.add_argument("--out", required=True)
    p.add_argument("--per-family", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)

    # verb groups of later stages register themselves; their modules import only argparse at load time
    import importlib

    for module in VERB_GROUPS:
        importlib.import_module(module).register(sub, _add)
    return parser


def main(argv: list[str] | None = None) -> int:
    from prefalign.cpu import tune_allocator
    from prefalign.errors import UserError

    tune_allocator()
    parser = build_parser()
    args = parser.parse_args(argv)
    fn = getattr(args, "fn", None)
    if fn is None:
        # `align` or `align data` alone: show the relevant help
        if args.verb is None:
            parser.print_help()
            return 0
        assert parser._subparsers is not None  # the verbs
        verbs = parser._subparsers._group_actions[0].choices
        assert isinstance(verbs, dict)  # verb -> its parser
        verbs[args.verb].print_help()
        return 2
    try:
        return int(fn(args) or 0)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
