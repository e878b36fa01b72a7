"""Policy-optimization losses: pure functions listed in tables that say what each one needs.

    pairwise.py   preference-pair losses over per-sequence log-probs (DPO family, IPO, SimPO, INPO): `LOSSES`,
                  `compute_loss`, `check_loss_config`

A table of policy-gradient losses (GRPO, RLOO, REINFORCE over sampled completions and their rewards) for the
online loop belongs beside it, as its own module with its own table. `from align.losses import ...` reads the
pairwise names from here.
"""

from __future__ import annotations

from .pairwise import (
    COMMON_PARAMS,
    FLIP_RATE,
    INPO_ETA,
    LOSSES,
    LossOutput,
    LossSpec,
    PairLogps,
    cdpo_loss,
    check_loss_config,
    combine,
    compute_loss,
    hinge_loss,
    inpo_loss,
    ipo_loss,
    robust_loss,
    sft_nll,
    sigmoid_loss,
    simpo_hinge_loss,
    simpo_loss,
)

__all__ = [
    "COMMON_PARAMS",
    "FLIP_RATE",
    "INPO_ETA",
    "LOSSES",
    "LossOutput",
    "LossSpec",
    "PairLogps",
    "cdpo_loss",
    "check_loss_config",
    "combine",
    "compute_loss",
    "hinge_loss",
    "inpo_loss",
    "ipo_loss",
    "robust_loss",
    "sft_nll",
    "sigmoid_loss",
    "simpo_hinge_loss",
    "simpo_loss",
]
