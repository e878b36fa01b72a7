"""`align train` with `kind: online`: GRPO, RLOO, REINFORCE and pairwise RLHF on one online engine, in phases.

    config.py      OnlineConfig and its sections (the YAML mirrors it)
    rollout.py     prompts and sampling -> `Rollout` (completions, token ids, sampling log-probs, finish reasons)
    reward.py      the reward components score it -> `Rewards` (components by name, NaN mask, abstentions)
    advantage.py   every rank's rewards -> `Advantages` (`ADVANTAGES`, or the composition)
    update.py      the frozen log-probs (`Frozen`) and the loss from `PG_LOSSES`: micro-batches, optimizer steps
    learner.py     the policy, reference, optimizer and schedule; DDP through accelerate, FSDP2 when launched so
    logps.py       per-token log-probs of packed completions
    parallel.py    rank shares and gathers, through accelerate
    state.py       checkpoints and the per-step caches that make --resume exact
    evaluation.py  held-out gold evaluation (greedy answers, the gold graders)
    context.py     the run's parts and their set-up
    search.py      Nelder–Mead over a constrained run's thresholds
    loop.py        the loop, top to bottom, and the report

Iterative DPO / INPO (`align.iterative`) and the over-optimization harness (`align.overopt`) use the same phases.
"""

from __future__ import annotations

from .config import OnlineConfig
from .loop import run, summary_lines

__all__ = ["OnlineConfig", "run", "summary_lines"]
