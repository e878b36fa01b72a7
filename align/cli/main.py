"""The `align` command. Verbs import their heavy dependencies only when they run, so `align --help` is fast.

    align quickstart                      the main job on the embedded default model and data
    align init KIND DEST                  a commented config for your own model and data (`align init` lists kinds)
    align rm train CONFIG [k=v ...]       train a reward model: Bradley-Terry, generative judge, meta-RM, POLAR,
                                          multi-objective
    align rm score | strength | scaling | compare | refusal-probe
                                          score responses; RM-ensemble strength; GRM scaling; scorers side by
                                          side; the refusal rule's request probe
    align train CONFIG [k=v ...]          train a policy: offline pairs (DPO family, SimPO, IPO, INPO), online RL
                                          (GRPO, RLOO, REINFORCE), iterative rounds (DPO, INPO)
    align eval policy --model M           a policy on held-out suite prompts (gold-graded) or a standard prompt
                                          set (IFEval, AlpacaEval, Arena-Hard, MT-Bench)
    align eval overopt --proxy RM         reward over-optimization: proxy against gold, best-of-n and RL
    align eval compare --policy A --baseline B   two saved evaluations of the same prompts, paired
    align bench run BENCH --model M       score a reward model on an RM benchmark; `bench show` renders
    align serve --model M                 serve a reward over HTTP to OpenRLHF, verl and TRL
    align report RUN_DIR                  the run report (report.html, dashboard.png) of a training run
    align data doctor SOURCE              what a data source contains (counts, drops, lengths, boundaries)
    align data suite --out DIR            write the verifiable preference suite as JSONL
    align validate CONFIG [k=v ...]       check a config (keys, types, files, models, data columns) without running
    align ls [TABLE]                      component tables (losses, rm-losses, scorers, benchmarks, ...)

A config is given the same way to every verb that runs one: `align VERB CONFIG [k=v ...]` (or `--config CONFIG`,
and `--set k=v`). Run `align VERB --help` for a verb's options and examples.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from prefalign.config import build, option
from prefalign.cpu import tune_allocator
from prefalign.errors import UserError, did_you_mean
from prefalign.flags import add_flags, from_args, settings_class
from prefalign.training.config import LengthPolicy  # torch-free, like every import while parsing

from .common import HelpFormatter, add_config_args, config_and_overrides
from .configs import validate_file
from .tables import TABLES, print_table

EXAMPLES = {
    "quickstart": (
        "align quickstart\n"
        "  align quickstart suite.seed=1          (another suite, the same recipe)\n"
        "  align quickstart eval.split=dev        (report on dev, where settings are chosen; trained stages reused)\n"
        "  align quickstart --full                (adds a short GRPO stage against the RM)\n"
        "  align quickstart --out runs/qs align.rounds.rounds=2 rm.train.epochs=1\n"
        "  align quickstart --out runs/qs doctor.max_length=512 stages=[suite,doctor]\n"
        "\nkeys: model, out_dir, stages, align_from, rank_by, check_by, check_weight, refusal_rule, refusal_rule_as,\n"
        "  fp32_work, suite.{per_family,seed,dev_fraction,test_fraction,hard_negatives,hard_refusals},\n"
        "  doctor.{max_length,policy}, eval.{split,schedule,prompts,safety_each,max_new_tokens,batch_size,dtype};\n"
        "  rm.*, dpo.*, align.*, online.*: whole configs of kind rm_train, train, iterative and online\n"
        "  (docs/config-reference.md); the built-in values of every stage: align/quickstart_config.py"
    ),
    "doctor": (
        "align data doctor my_pairs.jsonl\n"
        "  align data doctor Anthropic/hh-rlhf --hub-data-dir helpful-base --hub-split test\n"
        "  align data doctor suite --out runs/doctor-suite\n"
        "  align data doctor my_pairs.jsonl --format trl --max-length 512 --policy drop\n"
        "  align data doctor testdata_pairwise.jsonl --preset autoj          (a labelled comparison file)\n"
        "  align data doctor my_labels.json --columns my_columns.yaml       (any one, through a column map)"
    ),
    "suite": "align data suite --out data/suite --per-family 200 --seed 0",
    "validate": (
        "align validate configs/rm_suite.yaml\n"
        "  align validate configs/dpo_suite.yaml train.lr=5e-6 train.max_steps=20\n"
        "  align validate configs/rm_suite.yaml configs/dpo_suite.yaml --set train.seed=1"
    ),
    "ls": "align ls\n  align ls losses\n  align ls models",
    "report": (
        "align report runs/rm                  (a finished, running or interrupted run)\n"
        "  align report runs/quickstart/dpo\n"
        "  align report runs/quickstart/align      (an iterative run: also each round's policy samples that the gold "
        "graders call right, per family)"
    ),
}


def _examples(verb: str) -> str:
    return "examples:\n  " + EXAMPLES[verb]


# modules with `register(subparsers, add)` adding more verbs (kept light: heavy imports inside commands)
VERB_GROUPS: list[str] = [
    "align.cli.init",
    "align.cli.rm",
    "align.cli.train",
    "align.cli.evalcmd",
    "align.cli.bench",
    "align.cli.serve",
]


# --- verbs -------------------------------------------------------------------------------------------


def cmd_ls(args: argparse.Namespace) -> int:
    names = [args.table] if args.table else list(TABLES)
    if args.table and args.table not in TABLES:
        raise UserError(
            f"unknown table '{args.table}'{did_you_mean(args.table, list(TABLES))}; choose one of {', '.join(TABLES)}"
        )
    for name in names:
        print_table(name, TABLES[name]())
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    from .configs import check_resources  # lazy: reads the first rows of data files

    files = [a for a in args.files if "=" not in a]
    overrides = [a for a in args.files if "=" in a] + list(args.set_overrides)
    if not files:
        raise UserError("give a config to check: align validate CONFIG [k=v ...]")
    for path in files:
        kind, cfg = validate_file(path, overrides)
        notes = check_resources(cfg, path)
        print(f"{path}: ok ({kind})")
        for note in notes:
            print(f"  {note}")
    return 0


@dataclass(kw_only=True)
class DoctorSettings:
    """`align data doctor`. Its consumer, `preference_data.doctor.run_doctor`, is the better home for this class
    (moved there when that module is next changed); source, format, preset, columns and split become its
    `DataConfig`."""

    source: str = option(doc="'suite', a file or directory, or a hub id", positional=True, metavar="SOURCE")
    format: str = option("auto", "row format (default: detect; see `align ls formats`)")
    preset: str | None = option(None, "a labelled comparison file in a public set's format (`align ls presets`)")
    columns: str | None = option(None, "a YAML column map for any labelled comparison file (docs/data.md, column maps)")
    split: Literal["train", "dev", "test", "all"] = option("all", "which deterministic split to report on")
    hub_split: str = option("train", "for a hub dataset: the split to read")
    hub_data_dir: str | None = option(None, "for a hub dataset: the folder of its repository to read")
    pairing: str = option("max_min", "rated data: the pair builder (`align ls pairing`), as the recipe's data.pairing")
    objective: str = option("overall_score", "rated data: the score dimension the pair builder ranks by")
    model: str = option("builtin:smollm2-135m-instruct", "tokenizer to check against")
    max_length: int = option(1024, "token budget per sequence")
    policy: LengthPolicy = option("drop", "what to do with pairs longer than --max-length")
    out: str | None = option(None, "where to write doctor.json/doctor.txt (default: runs/doctor)")


def cmd_doctor(s: DoctorSettings) -> int:
    # the data readers and the doctor add ~30 ms to every `align` start: imported when the verb runs
    from preference_data.comparisons import read_columns
    from preference_data.doctor import run_doctor
    from preference_data.sources import DataConfig

    fields: dict[str, Any] = {
        "source": s.source,
        "format": s.format,
        "split": s.split,
        "hub_split": s.hub_split,
        "hub_data_dir": s.hub_data_dir,
        "pairing": s.pairing,
        "objective": s.objective,
    }
    if s.preset is not None:
        fields["preset"] = s.preset
    if s.columns is not None:
        fields["columns"] = read_columns(s.columns)
    data = build(DataConfig, fields, "align data doctor")
    out = s.out or os.path.join("runs", "doctor")
    report = run_doctor(data, s.model, s.max_length, s.policy, out)
    print("\n".join(report["text"]))
    for p in report.get("written", []):
        print(f"wrote {p}")
    return 0


@dataclass(kw_only=True)
class SuiteSettings:
    """`align data suite`: the arguments of `preference_data.suite.build_suite` and where to write it."""

    out: str = option(doc="directory for the JSONL files and summary.json")
    per_family: int = option(200, "tasks generated per family (a pair and a prompt each)")
    seed: int = option(0, "generator seed")


def cmd_suite(s: SuiteSettings) -> int:
    from preference_data.suite import build_suite, write_suite  # the generators: ~60 ms at start, only when run

    suite = build_suite(n_per_family=s.per_family, seed=s.seed)
    write_suite(suite, s.out)
    print(
        f"wrote the suite ({len(suite.train_pairs)} train / {len(suite.test_pairs)} test pairs, "
        f"{len(suite.train_prompts)} / {len(suite.test_prompts)} prompts) to {s.out}"
    )
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from prefalign.training.report import write_report  # ~20 ms at start (matplotlib on use): only when run

    from ..rounds.reach import reach_lines, run_reach  # the suite's graders and the rollout type: only for this verb

    files = write_report(args.run_dir)
    print(files.status)
    for line in reach_lines(run_reach(args.run_dir)):
        print(line)
    print(f"report    {files.html}")
    print(f"figure    {files.figure if files.figure else 'none (no steps logged yet)'}")
    print(f"open      {files.html.resolve().as_uri()}")
    return 0


def cmd_quickstart(args: argparse.Namespace) -> int:
    from .quickstart import run_quickstart  # the whole pipeline (torch): only for this verb

    config, overrides = config_and_overrides(args)
    return run_quickstart(config, args.out, overrides, full=args.full)


# --- parser ------------------------------------------------------------------------------------------


def _add(
    sub: argparse._SubParsersAction,
    name: str,
    fn: Callable[[Any], int],
    help_: str,
    example: str,
    settings: type | None = None,
) -> argparse.ArgumentParser:
    """Add a verb whose help ends with examples (`example` is a key of EXAMPLES or the example text itself).

    With `settings` (a dataclass of `option(...)` fields), the verb's flags are that dataclass's fields plus
    `--config FILE` (`prefalign.flags`), and `fn` receives the built dataclass instead of the argparse namespace."""
    p = sub.add_parser(
        name,
        help=help_.replace("%", "%%"),  # argparse %-formats the verb list's help (a literal "95%" would crash it)
        description=help_,
        epilog=_examples(example) if example in EXAMPLES else "examples:\n  " + example,
        formatter_class=HelpFormatter,
    )
    p.set_defaults(fn=fn)
    if settings is not None:
        add_flags(p, settings)
    return p


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="align", description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--version", action=_Version, nargs=0, help="show the installed version and exit")
    sub = parser.add_subparsers(dest="verb", metavar="VERB")

    p = _add(sub, "quickstart", cmd_quickstart, "run the main job on the embedded default model and data", "quickstart")
    p.add_argument("--out", default=None, help="output directory (default: runs/quickstart)")
    p.add_argument(
        "--full",
        action="store_true",
        help="add the online stage: a short GRPO run from the aligned policy against the RM, with a KL term, "
        "graded by the evaluation beside the other policies",
    )
    add_config_args(p, "a quickstart YAML (default: the built-in settings)", required=False)

    p = _add(
        sub,
        "validate",
        cmd_validate,
        "check configs without running them: keys, types and values, every local file and model they name, the "
        "first rows of their data",
        "validate",
    )
    p.add_argument("files", nargs="+", metavar="CONFIG [k=v ...]", help="YAML configs, then dotted overrides")
    p.add_argument(
        "--set", dest="set_overrides", action="append", default=[], metavar="k=v", help="a dotted override to check too"
    )

    p = _add(
        sub,
        "report",
        cmd_report,
        "write the run report of a training run (config, data report, curves, alerts, final numbers; for iterative "
        "rounds on suite prompts, each round's policy samples the gold graders call right, per family)",
        "report",
    )
    p.add_argument("run_dir", metavar="RUN_DIR", help="the output_dir of an rm train / train run")

    p = _add(sub, "ls", cmd_ls, "print the component tables", "ls")
    p.add_argument("table", nargs="?", default=None, help=f"one table (default: all): {', '.join(TABLES)}")

    data = sub.add_parser("data", help="inspect and generate data", formatter_class=HelpFormatter)
    dsub = data.add_subparsers(dest="data_verb", metavar="VERB")
    _add(
        dsub,
        "doctor",
        cmd_doctor,
        "report what a data source contains and what would be dropped",
        "doctor",
        settings=DoctorSettings,
    )
    _add(
        dsub,
        "suite",
        cmd_suite,
        "generate the verifiable preference suite as JSONL files",
        "suite",
        settings=SuiteSettings,
    )

    # verb groups of later stages register themselves; their modules import nothing heavy at load time
    for module in VERB_GROUPS:
        importlib.import_module(module).register(sub, _add)
    return parser


class _Version(argparse.Action):
    """`align --version`: the installed version, looked up only when asked for (not at every start)."""

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"align (prefalign) {_version()}")  # on stdout, as argparse's own version action
        parser.exit()


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version  # lazy: only for --version

    try:
        return version("prefalign")
    except PackageNotFoundError:
        return "unknown (not installed)"


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:  # `align ls | head`: the reader left; say nothing more
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


def end_process_group() -> None:
    """Under torchrun, every rank waits at a barrier for the others (rank 0 still saving its model), then the process
    group is destroyed: a rank that left early tore gloo's threads down at exit and died of SIGABRT ("terminate
    called without an active exception"), and torchrun then killed the rank still saving. torch is looked up, not
    imported: a command that never imported it has no process group."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def _main(argv: list[str] | None = None) -> int:
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
        cls = settings_class(args)
        code = int(fn(args if cls is None else from_args(cls, args)) or 0)
        end_process_group()
        return code
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:  # a run's own message says what it saved and how to resume
        print(str(e) or "interrupted (the last complete checkpoint is kept; rerun with --resume)", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
