"""The parts of one online run (`Online`) and their set-up: the run directory, the learner, the sampler, the
reward components, the composition and the resume point."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from prefalign.errors import UserError
from prefalign.generation import GenerationEngine
from prefalign.training.metrics import ALERTS_FILE, read_alerts
from prefalign.training.recipe import RecipeRun, start_run
from preference_data.records import PromptOnly

from ..composition import Composer
from ..rewards import RewardSet
from .config import OnlineConfig
from .evaluation import gold_eval
from .learner import Learner, build_learner
from .parallel import ranks
from .rollout import build_sampler, load_train_prompts
from .state import read_checkpoint


@dataclass
class Online:
    """One online run's parts and bookkeeping (the functions below are its phases)."""

    cfg: OnlineConfig
    run: RecipeRun
    learner: Learner
    sampler: GenerationEngine
    rewards: RewardSet
    composer: Composer | None
    prompts: list[PromptOnly]
    step: int = 0
    evals: dict[str, Any] = field(default_factory=dict)
    timing: dict[str, float] = field(
        default_factory=lambda: dict.fromkeys(("generate", "score", "frozen", "update"), 0.0)
    )
    prompts_done: int = 0
    par_sampler: GenerationEngine | None = None  # PAR: the initial policy's own sampler, built when first needed
    raised: set[str] = field(default_factory=set)  # alert keys raised (a resumed run keeps them, from alerts.jsonl)

    @property
    def main(self) -> bool:
        return ranks()[0] == 0

    def evaluate(self, limit: int | None = None) -> dict[str, Any] | None:
        """The held-out gold evaluation of the current policy (on rank 0; None elsewhere or with limit 0)."""
        return gold_eval(self.sampler, self.cfg.eval, limit, self.rewards) if self.main else None


def setup(cfg: OnlineConfig, resume: bool) -> Online:
    world = ranks()[1]
    if cfg.rollout.prompts_per_step % world:
        raise UserError(
            f"rollout.prompts_per_step={cfg.rollout.prompts_per_step} must be divisible by the number of processes "
            f"({world})"
        )
    run = start_run(cfg, cfg.train, "online", resume)
    checkpoint = read_checkpoint(run.resume_from)
    learner = build_learner(cfg, checkpoint)
    sampler = build_sampler(cfg.model, learner.tokenizer, cfg.rollout, learner.bf16, learner.device)
    rewards = RewardSet(cfg.reward)
    composer = None
    if cfg.composition is not None:
        composer = Composer(cfg.composition, rewards.names, rewards.weights.tolist(), cfg.rollout.seed)
    o = Online(cfg, run, learner, sampler, rewards, composer, load_train_prompts(cfg.prompts))
    if checkpoint is not None:
        o.step = int(checkpoint["step"])
        if composer is not None and checkpoint.get("composition"):
            composer.load_state_dict(checkpoint["composition"])
        print(f"resumed from {run.resume_from} (step {o.step})", flush=True)
    evals_path = run.dir / "evals.json"
    if resume and evals_path.exists():
        # an evaluation after the checkpoint's step is made again with its step
        o.evals = {k: v for k, v in json.loads(evals_path.read_text(encoding="utf-8")).items() if int(k) <= o.step}
        o.raised = {str(a.get("key")) for a in read_alerts(run.dir / ALERTS_FILE)}
    learner.sync(sampler)
    return o


__all__ = ["Online", "setup"]
