"""kill -9 at random moments, then `--resume`, until the run ends: it ends where an uninterrupted run ends.

For each trainer (reward model, offline DPO, online GRPO, a thinking judge, POLAR's pre-training, and GRPO on a
Lagrangian composition of rewards, its multipliers part of the state) a tiny run is made twice from the
command line: once straight through, once killed with SIGKILL at ten seeded random moments (half drawn over the time
the uninterrupted run took after its first line, scaled to the steps left, so they fall in data loading, steps,
checkpoint writes and the final save alike; half just after a randomly chosen later step's checkpoint, mid-training)
and rerun with `--resume` after each kill. The two must end with the same final weights, and `metrics.jsonl` must
hold every step exactly once with the uninterrupted run's loss (and, for the composition, its weights and
multipliers); at least two reruns must have continued from a
checkpoint (counted from their own output).

The quickstart as a whole is killed the same way, each kill in the first stage not finished yet (now and then a
later one; in a training stage every other kill just after a checkpoint short of its last step, so that reruns
continue interrupted training whatever the machine's speed), and rerun with the same command: it must end with every
stage's weights and the evaluation's numbers of an uninterrupted run.

Bit for bit: the reward model, POLAR, the online runs (a composition's multipliers included) and the judge restore
their weights, optimizer, scheduler, RNG streams and data position exactly, and a CPU repeats the same arithmetic,
so their final weights are identical. Offline DPO too: its reference log-probs are computed once and cached, and the
resumed run reads the same cache.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from prefalign.training.trainer import last_checkpoint

pytestmark = pytest.mark.slow

TINY = "builtin:tiny-llama"
STEPS = 6
TRAIN = f"method: lora, lr: 2.0e-3, max_steps: {STEPS}, save_every: 1, precision: fp32, seed: 0, compile: false"
CONFIGS = {
    "rm": (
        ["rm", "train", "--config"],
        f"kind: rm_train\nmodel: {TINY}\ndata: {{source: suite, suite_per_family: 6, split: train, limit: 24}}\n"
        f"eval: {{split: none, stats_pairs: 8}}\ntrain: {{{TRAIN}, batch_size: 4, max_length: 256}}\n",
    ),
    "dpo": (
        ["train"],
        f"kind: train\nmodel: {TINY}\ndata: {{source: suite, suite_per_family: 6, split: train, limit: 24}}\n"
        f"eval: {{split: none}}\nloss: {{name: sigmoid}}\ntrain: {{{TRAIN}, batch_size: 4, max_length: 256}}\n",
    ),
    "grpo": (
        ["train"],
        f"kind: online\nmodel: {TINY}\nreward: [{{type: implicit, model: {TINY}, reference_free: true, "
        "normalization: mean}]\nrollout: {group_size: 4, prompts_per_step: 2, max_new_tokens: 8}\neval: {limit: 0}\n"
        f"train: {{{TRAIN}, batch_size: 8, lr_scheduler: linear}}\nlora: {{r: 4, alpha: 8}}\nsave_merged: false\n",
    ),
    "think": (
        ["rm", "train", "--config"],
        f"kind: judge_train\nmodel: {TINY}\njudge: {{kind: think, examples: template}}\n"
        "data: {source: suite, suite_per_family: 6, split: train, limit: 24}\neval: {split: none}\n"
        f"train: {{{TRAIN}, batch_size: 4, max_length: 1024}}\n",
    ),
    "polar": (  # pre-training on a pool of trajectories (made first, `make_pool`)
        ["rm", "train", "--config"],
        f"kind: polar_train\nstage: pretrain\nmodel: {TINY}\n"
        "data: {pool: POOL, triples_per_prompt: 4, heldout_fraction: 0.2}\n"
        "input: {max_length: 256, max_response_length: 64}\neval: {stats_pairs: 8}\n"
        f"train: {{{TRAIN}, batch_size: 4}}\n",
    ),
    "lagrangian": (  # a constraint on the gold grader's score: its multiplier moves every step
        ["train"],
        f"kind: online\nmodel: {TINY}\nreward:\n"
        f"  - {{type: implicit, model: {TINY}, reference_free: true, normalization: mean, name: lp}}\n"
        "  - {type: grader, name: gold}\n"
        "composition: {aggregate: weighted_sum, update: lagrangian, constraints: [{component: gold, threshold: 0.5, "
        "type: ge}]}\nrollout: {group_size: 4, prompts_per_step: 2, max_new_tokens: 8}\neval: {limit: 0}\n"
        f"train: {{{TRAIN}, batch_size: 8, lr_scheduler: linear}}\nlora: {{r: 4, alpha: 8}}\nsave_merged: false\n",
    ),
}
KILLS = 10


def make_pool(tmp_path: Path) -> Path:
    """A POLAR pool: 12 prompts, two samples each from three policies (the tiny model, as is and degraded)."""
    import yaml

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"Name a color number {i}."}) + "\n" for i in range(12)))
    policies = [
        {"name": "warm", "model": TINY, "temperature": 1.0},
        {"name": "shuffled", "model": TINY, "temperature": 1.0, "degradation": "shuffle"},
        {"name": "wrong", "model": TINY, "temperature": 1.0, "degradation": "wrong"},
    ]
    cfg = {"kind": "polar_pool", "output_dir": str(tmp_path / "pool"), "prompts": {"source": str(prompts)}}
    cfg |= {"samples_per_prompt": 2, "max_new_tokens": 6, "dtype": "float32", "policies": policies}
    (tmp_path / "pool.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
    proc = launch(["rm", "train", "--config", str(tmp_path / "pool.yaml")], tmp_path / "pool.log")
    finish(proc)
    return tmp_path / "pool"


def launch(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1"}
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "align.cli.main", *args],
            stdout=out,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,  # its own process group: the kill takes any children with it
        )


def started(log: Path, proc: subprocess.Popen[bytes]) -> float:
    """Wait until the run printed its first line (its precision, at the start of the run, after the imports); the
    time it did."""
    while log.stat().st_size == 0 and proc.poll() is None:
        time.sleep(0.02)
    return time.monotonic()


def last_step(out: Path) -> int:
    """The step of the newest complete checkpoint (0: none), as `--resume` finds it."""
    found = last_checkpoint(str(out / "checkpoints"))
    return int(found.rsplit("-", 1)[1]) if found else 0


def straight_and_killed(tmp_path: Path, text: str) -> dict[str, tuple[Path, Path]]:
    """The config file and run directory of the uninterrupted run and of the killed one: `text` with its own
    output_dir each."""
    runs = {}
    for which in ("straight", "killed"):
        cfg = tmp_path / f"{which}.yaml"
        cfg.write_text(f"output_dir: {tmp_path / which}\n" + text, encoding="utf-8")
        runs[which] = (cfg, tmp_path / which)
    return runs


def finish(proc: subprocess.Popen[bytes]) -> None:
    _, err = proc.communicate()
    assert proc.returncode == 0, err.decode()[-3000:]


def weights(out: Path) -> dict[str, torch.Tensor]:
    """Every tensor the run saved outside its checkpoints, keyed by file and name."""
    found = {}
    for f in sorted(out.rglob("*.safetensors")):
        rel = f.relative_to(out)
        if rel.parts[0] != "checkpoints":
            found |= {f"{rel}:{k}": v for k, v in load_file(str(f)).items()}
    assert found, f"no weights saved under {out}"
    return found


STATE_KEYS = ("loss", "weight/", "multiplier/")
"""What metrics.jsonl must repeat exactly: the loss, and a composition's weights and multipliers."""


def losses(out: Path) -> dict[int, dict[str, float]]:
    """step -> its loss (and a composition's weights and multipliers) from metrics.jsonl, asserting that no step was
    logged twice."""
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text(encoding="utf-8").splitlines() if x.strip()]
    steps = [r["step"] for r in rows if "loss" in r]
    assert len(steps) == len(set(steps)), f"a step logged twice: {steps}"
    return {r["step"]: {k: v for k, v in r.items() if k.startswith(STATE_KEYS)} for r in rows if "loss" in r}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_killed_at_random_moments_and_resumed_ends_as_an_uninterrupted_run(tmp_path, tiny_model_ref, name):
    verb, text = CONFIGS[name]
    if "POOL" in text:
        text = text.replace("POOL", str(make_pool(tmp_path)))
    runs = straight_and_killed(tmp_path, text)
    cfg, out = runs["straight"]
    proc = launch([*verb, str(cfg)], tmp_path / "straight.log")
    t0 = started(tmp_path / "straight.log", proc)
    finish(proc)
    span = time.monotonic() - t0

    cfg, out = runs["killed"]
    rng = random.Random(f"kill-{name}")
    kills, moments = 0, list[float | str]()
    while True:
        log = tmp_path / f"killed-{kills}.log"
        proc = launch([*verb, str(cfg), *(["--resume"] if kills else [])], log)
        t = started(log, proc)
        if kills < KILLS:
            done = last_step(out)
            if kills % 2 == 0 and done < STEPS - 1:  # every other kill, the first too: after a random later checkpoint
                target = rng.randint(done + 1, STEPS - 1)
                while proc.poll() is None and last_step(out) < target:
                    time.sleep(0.005)
                time.sleep(rng.uniform(0.0, 0.2))
                at: float | str = f"step {target}"
            else:  # else at a random time within what is left
                at = rng.uniform(0.0, span * max(1.0 - done / STEPS, 0.3))
                while proc.poll() is None and time.monotonic() - t < at:
                    time.sleep(0.01)
                at = round(at, 2)
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                kills, moments = kills + 1, [*moments, at]
                continue
        finish(proc)
        break
    logs = [(tmp_path / f"killed-{i}.log").read_text(encoding="utf-8") for i in range(1, kills + 1)]
    resumed = [
        m.group(1) for m in (re.search(r"(?:continuing|resumed) from \S*checkpoint-(\d+)", x) for x in logs) if m
    ]
    print(
        f"{name}: {kills} kills at {moments} s after the start (an uninterrupted run: {span:.1f} s); {len(resumed)} "
        f"reruns continued from a checkpoint (steps {resumed})"
    )
    assert kills >= 3, f"only {kills} kills landed before the run ended (moments {moments}, span {span:.1f}s)"
    assert len(resumed) >= 2, f"only {len(resumed)} of the reruns found a checkpoint to continue from: {moments}"

    a, b = weights(runs["straight"][1]), weights(out)
    assert a.keys() == b.keys()
    differ = {k: float((a[k] - b[k]).abs().max()) for k in a if not torch.equal(a[k], b[k])}
    assert not differ, f"after {kills} kills at {moments}: {differ}"
    la, lb = losses(runs["straight"][1]), losses(out)
    assert la == lb, f"after {kills} kills at {moments}"


QUICKSTART = [
    "model=builtin:tiny-llama",
    "suite.per_family=30",
    "rm.train.max_steps=4",
    "rm.train.save_every=1",
    "rm.train.precision=fp32",
    "rm.eval.stats_pairs=8",
    "dpo.train.max_steps=4",
    "dpo.train.save_every=1",
    "align.rounds.rounds=2",
    "align.rounds.prompts_per_round=6",
    "align.rounds.keep_pairs=4",
    "align.rounds.max_new_tokens=6",
    "align.train.max_steps=3",
    "align.train.save_every=1",
    "align.train.precision=fp32",
    "align.train.compile=false",
    "eval.prompts=6",
    "eval.safety_each=2",
    "eval.max_new_tokens=4",
]


# the last step of each training stage's run (a round's, for align): a kill after an earlier step's checkpoint lands
# mid-training
FINAL_STEP = {"rm": 4, "dpo": 4, "align": 3}


def stage_checkpoints(stage_dir: Path) -> dict[str, int]:
    """The newest complete checkpoint of every checkpoints directory under a quickstart stage's directory (a round's,
    for align) and its step."""
    found = (last_checkpoint(str(d)) for d in sorted(stage_dir.rglob("checkpoints")) if d.is_dir())
    return {c: int(c.rsplit("-", 1)[1]) for c in found if c}


def mid_training_ahead(stage_dir: Path, stage: str) -> bool:
    """Whether a training stage continued from what `stage_dir` holds still has a checkpoint short of its last step
    to write (align: a round not yet started, or the newest round's)."""
    steps = [step for c, step in sorted(stage_checkpoints(stage_dir).items())]
    if stage == "align" and len(steps) < 2:
        return True
    return (steps[-1] if steps else 0) < FINAL_STEP[stage] - 1


def saved_weights(out: Path) -> dict[str, torch.Tensor]:
    """Every tensor a pipeline saved outside any checkpoints directory, keyed by file and name."""
    found = {}
    for f in sorted(out.rglob("*.safetensors")):
        rel = f.relative_to(out)
        if "checkpoints" not in rel.parts:
            found |= {f"{rel}:{k}": v for k, v in load_file(str(f)).items()}
    assert found, f"no weights saved under {out}"
    return found


def test_the_quickstart_killed_at_random_moments_ends_as_an_uninterrupted_run(tmp_path, tiny_model_ref):
    """The quickstart as a whole, killed with SIGKILL at seeded random moments and rerun with the same command
    (no flag: the pipeline reuses finished stages and continues an interrupted one from its last checkpoint), ends
    with the uninterrupted run's weights in every stage (the RM, offline DPO, both align rounds) bit for bit and its
    numbers: the RM's held-out accuracy, each policy's gold score per prompt and the RM's score of its answers."""
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    proc = launch(["quickstart", "--out", str(straight), *QUICKSTART], tmp_path / "straight.log")
    t0 = started(tmp_path / "straight.log", proc)
    finish(proc)
    span = time.monotonic() - t0

    # each stage's span in the uninterrupted run, from its log's elapsed-time prefixes
    spans: dict[str, list[float]] = {}
    for m in re.finditer(r"^\[\s*([\d.]+)s\] (\w+)", (tmp_path / "straight.log").read_text(), re.M):
        spans.setdefault(m.group(2), []).append(float(m.group(1)))
    stages = [s for s in ("rm", "dpo", "align", "eval") if s in spans]
    rng = random.Random("kill-quickstart")
    kills, moments = 0, list[str]()
    while True:
        log = tmp_path / f"killed-{kills}.log"
        proc = launch(["quickstart", "--out", str(killed), *QUICKSTART], log)
        started(log, proc)
        left = [s for s in stages if not (killed / s / "report.json").exists()]
        if kills < 8 and left:
            # the first stage not finished yet (now and then a later one); in a training stage every other kill, the
            # first too, lands just after a new checkpoint short of the stage's last step (mid-training, whatever this
            # machine's speed), the others at a random moment within the time the stage took uninterrupted
            stage = left[0] if rng.random() < 0.75 else rng.choice(left)
            before = stage_checkpoints(killed / stage)
            while proc.poll() is None and not re.search(rf"^\[\s*[\d.]+s\] {stage}:", log.read_text(), re.M):
                time.sleep(0.01)
            if stage in FINAL_STEP and kills % 2 == 0 and mid_training_ahead(killed / stage, stage):
                while proc.poll() is None and not any(
                    step < FINAL_STEP[stage] for c, step in stage_checkpoints(killed / stage).items() if c not in before
                ):
                    time.sleep(0.005)
                at = "after a checkpoint"
            else:
                at = f"+{rng.uniform(0.0, max(spans[stage]) - min(spans[stage]) + 1.0):.1f}s"
                t = time.monotonic()
                while proc.poll() is None and time.monotonic() - t < float(at[1:-1]):
                    time.sleep(0.01)
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                landed = re.findall(r"^\[\s*[\d.]+s\] (\w+)", log.read_text(), re.M)[-1]  # the stage it was in
                kills, moments = kills + 1, [*moments, f"{stage} {at} (in {landed})"]
                continue
        finish(proc)
        break
    logs = [(tmp_path / f"killed-{i}.log").read_text(encoding="utf-8") for i in range(1, kills + 1)]
    continued = [m for x in logs for m in re.findall(r"(\w+): continuing the interrupted run", x)]
    print(f"quickstart: {kills} kills at {moments} s (an uninterrupted run: {span:.1f} s); continued: {continued}")
    assert kills >= 4, f"only {kills} kills landed before the run ended (moments {moments}, span {span:.1f}s)"
    assert len(set(continued)) >= 2, f"reruns continued interrupted stages only in {continued}: {moments}"

    a, b = saved_weights(straight), saved_weights(killed)
    assert a.keys() == b.keys()
    differ = {k: float((a[k] - b[k]).abs().max()) for k in a if not torch.equal(a[k], b[k])}
    assert not differ, f"after {kills} kills at {moments}: {differ}"
    # rounds.keep_merged: last (the quickstart's): round 1's merged policy deleted at the end, its adapter kept
    for d in (straight, killed):
        r1, r2 = d / "align" / "round_1" / "train", d / "align" / "round_2" / "train"
        assert not (r1 / "merged").exists() and (r1 / "adapter").is_dir() and (r2 / "merged").is_dir()
    sa, sb = (json.loads((d / "summary.json").read_text()) for d in (straight, killed))
    assert sa["rm"]["accuracy"] == sb["rm"]["accuracy"]
    for name in ("aligned", "dpo"):
        for key in ("per_prompt", "reward_after", "after"):
            assert json.dumps(sa["eval"][name][key]) == json.dumps(sb["eval"][name][key]), (name, key)  # NaN too


ROUNDS_CONFIG = (
    "kind: iterative\nmodel: builtin:tiny-llama\nprompts: {source: suite, limit: 16}\n"
    # a reward that depends on nothing drawn at load time (a scalar head newly initialised on an untrained model
    # would be drawn from wherever the process's random stream stands, which a rerun that skips cached work moves)
    "reward: [{type: implicit, model: builtin:tiny-llama, reference_free: true, normalization: mean}]\n"
    "rounds: {rounds: 2, prompts_per_round: 6, samples_per_prompt: 2, max_new_tokens: 6}\neval: {limit: 0}\n"
    "train: {method: lora, lr: 2.0e-3, max_steps: 3, save_every: 1, precision: fp32, seed: 0, compile: false, "
    "batch_size: 2}\nlora: {r: 4, alpha: 8}\n"
)
ROUND_PHASES = ("sampling", "scoring", "training", "saving")


def phase_reached(log: Path, out: Path, t: int, phase: str) -> bool:
    """Whether the run logging to `log` into `out` is in (or past) `phase` of round t: its sampling line printed; its
    scoring line after that; a checkpoint of round t's training at step 1 (training) or 3, the last (saving)."""
    text = log.read_text(encoding="utf-8")
    at = text.find(f"round {t}/2: sampling")
    if phase == "sampling":
        return at >= 0
    if phase == "scoring":
        return at >= 0 and text.find("scoring ", at) >= 0
    return last_step(out / f"round_{t}" / "train") >= (1 if phase == "training" else 3)


def test_iterative_rounds_killed_in_every_phase_end_as_an_uninterrupted_run(tmp_path, tiny_model_ref):
    """Iterative DPO (two rounds) killed with SIGKILL once at each phase of each round — within 20 ms of sampling's
    and of scoring's first line, just after a training checkpoint short of the last step, and just after the last
    step's checkpoint (while the adapter and the merged policy are written) — and rerun with `--resume` after each
    kill, ends with the uninterrupted run's weights bit for bit, each round's pairs file byte for byte (no prompt or
    pair seen twice or never) and its report's numbers."""
    runs = straight_and_killed(tmp_path, ROUNDS_CONFIG)
    cfg, straight = runs["straight"]
    finish(launch(["train", str(cfg)], tmp_path / "straight.log"))
    cfg, out = runs["killed"]
    rng = random.Random("kill-rounds")
    plan = [(t, phase) for t in (1, 2) for phase in ROUND_PHASES]
    kills, landed = 0, list[str]()
    while True:
        log = tmp_path / f"killed-{kills}.log"
        proc = launch(["train", str(cfg), *(["--resume"] if kills else [])], log)
        started(log, proc)
        if kills < len(plan):
            t, phase = plan[kills]

            while proc.poll() is None and not phase_reached(log, out, t, phase):
                time.sleep(0.002)
            time.sleep(rng.uniform(0.0, 0.02))
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                kills, landed = kills + 1, [*landed, f"round {t} {phase}"]
                continue
            raise AssertionError(f"the run ended before round {t}'s {phase} (kills so far: {landed})")
        finish(proc)
        break
    logs = "".join((tmp_path / f"killed-{i}.log").read_text(encoding="utf-8") for i in range(1, kills + 1))
    resumed = re.findall(r"checkpoint-(\d+)", logs)
    print(f"rounds: killed in {landed}; reruns continued from checkpoints {resumed}")
    assert kills == len(plan)
    a, b = saved_weights(straight), saved_weights(out)
    assert a.keys() == b.keys()
    differ = {k: float((a[k] - b[k]).abs().max()) for k in a if not torch.equal(a[k], b[k])}
    assert not differ, f"after kills in {landed}: {differ}"
    for t in (1, 2):
        assert (out / f"round_{t}" / "pairs.jsonl").read_bytes() == (
            straight / f"round_{t}" / "pairs.jsonl"
        ).read_bytes()
    ra, rb = (json.loads((d / "report.json").read_text()) for d in (straight, out))
    keys = ("pairs", "train_pairs", "steps", "sample_reward")
    assert [{k: r[k] for k in keys} for r in ra["rounds"]] == [{k: r[k] for k in keys} for r in rb["rounds"]]
