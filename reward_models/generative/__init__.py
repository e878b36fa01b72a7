"""Generative reward models: judges that write before they score, pairwise preference models, implicit process
rewards. `parse` reads judge text (never raises, abstains with a reason), `vote` turns samples and pairwise
verdicts into scores, `implicit_prm` gives per-step rewards from log-probs."""

from .implicit_prm import aggregate, split_steps, step_rewards
from .parse import (
    GRMParse,
    PairParse,
    parse_four_way,
    parse_grm_scores,
    parse_pair_pm,
    parse_rating,
    parse_think_answer,
)
from .vote import (
    Vote,
    best_index,
    draw_right,
    grm_sample_correct,
    group_advantage,
    majority,
    meta_vote,
    pair_pm_probability,
    preference_matrix,
    rft_select,
    vote_scores,
)

__all__ = [
    "GRMParse",
    "PairParse",
    "Vote",
    "aggregate",
    "best_index",
    "draw_right",
    "grm_sample_correct",
    "group_advantage",
    "majority",
    "meta_vote",
    "pair_pm_probability",
    "parse_four_way",
    "parse_grm_scores",
    "parse_pair_pm",
    "parse_rating",
    "parse_think_answer",
    "preference_matrix",
    "rft_select",
    "split_steps",
    "step_rewards",
    "vote_scores",
]
