"""The `composition:` section of an online run: how the K named reward components become one advantage.

    config.py    the section (aggregator, weights, normalisation, update rule, constraints, ...) and its checks
    sections.py  its leaf sections (constraints, multipliers, dynamic weights, search, PAR, DPA)
    rules.py     `UPDATE_RULES`: fixed | lagrangian | hypervolume | gradient, each a class with the rule's state
    composer.py  `Composer`: one step's advantage from all ranks' components; its state for the checkpoint
    plot.py      composition.png

The math is in `reward_models.composition`. Without a `composition:` section a run is unchanged: Σ w_k r_k into the
loss's estimator.
"""

from __future__ import annotations

from .composer import Composer, StepInputs, skip_groups
from .config import CompositionSection, check_composition
from .plot import plot_composition
from .rules import UPDATE_RULES
from .sections import (
    ConstraintSpec,
    DpaSection,
    GradientSection,
    HypervolumeSection,
    LagrangianSection,
    ParSection,
    SearchSection,
)

__all__ = [
    "UPDATE_RULES",
    "Composer",
    "CompositionSection",
    "ConstraintSpec",
    "DpaSection",
    "GradientSection",
    "HypervolumeSection",
    "LagrangianSection",
    "ParSection",
    "SearchSection",
    "StepInputs",
    "check_composition",
    "plot_composition",
    "skip_groups",
]
