"""Composition state in the server: K component scores -> one reward per served item, with the running
normalisation and the constraint multipliers / dynamic weights living here, updated from the scores served.

A server sees items, not a rollout's groups, so it returns a *reward* per item and the engine's own estimator makes
the advantage (GRPO's group normalisation, RLOO's leave-one-out, ...). Exactly, for the S items of one scored batch
(all requests the batcher scored together, cached items included, in arrival order), R (S, K) the raw components:

1. `normalize: running`: the per-component running mean and std (`RunningNorm`, Welford) are updated with this
   batch's finite values, then X = (R - mean) / (std + 1e-6); else X = R. (As the online loop: the statistics
   include the batch they rescale.)
2. The reward per item:
   - `update: fixed` / `hypervolume`: the aggregator on X, per item: `weighted_sum` r = sum_k w_k x_k, or `maxmin`
     (per_sample) r = min_k w_k x_k; times the hypervolume meta factor (`hypervolume.apply: reward`).
   - `update: lagrangian`: r_obj = sum over the unconstrained components of w_k x_k, and the constrained components
     mixed in with the current multipliers, on rewards as the online loop mixes advantages
     (`reward_models.composition.mix_advantages`): r = (N - sum_i lambda_i) r_obj + sum_i lambda_i s_i x_i with
     squashed multipliers (sigmoid / tanh), r = r_obj + sum_i lambda_i s_i x_i unsquashed; s_i = -1 for `le`.
     With group mean-centering (GRPO, RLOO) mixing rewards then centering equals centering then mixing.
   NaN (JSON null) where a component with a nonzero weight (or a constrained one) abstained.
3. Updates: the batch's raw R is added to a window; once the window holds at least `update_every` items (checked
   after each batch, so an update uses whole batches), one update from the window's per-component means of the
   raw scores (thresholds are in the components' own units): the Lagrange multipliers take one SGD step
   (`Lagrangian.step`), and the hypervolume rule observes the means as its point (`point: rollout`). The window
   then empties. The batch that completes a window was rewarded with the state before the update.

The state (running statistics, multipliers and their optimizer, the hypervolume buffer, the open window, counts)
is `state_dict()`; `--state FILE` restores it at start and writes it after every update and at shutdown (atomically:
a temporary file renamed over the old one). Update rules and aggregators that need what a server never sees (a
rollout's groups, reference-policy responses, probe gradients, held-out evaluations) are refused at start.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import torch

from prefalign.errors import UserError
from prefalign.files import replacing
from reward_models.composition import AGGREGATORS, AggregateInputs, mix_advantages, nan_rows, weighted_sum

from ..composition import Composer, CompositionSection
from ..composition.rules import component_means

SERVED_AGGREGATES: dict[str, str] = {
    "weighted_sum": "sum_k w_k x_k per item",
    "maxmin": "min_k w_k x_k per item (maxmin: per_sample)",
}
"""Aggregators a server can apply to one item alone (the others need a group, a direction or reference responses)."""

SERVED_UPDATES: dict[str, str] = {
    "fixed": "the weights as configured",
    "lagrangian": "multipliers: one SGD step every update_every served items, from the window's raw component means",
    "hypervolume": "meta factor from the window's component means as the point (point: rollout, apply: reward)",
}
"""Weight updates a server can make from the scores it serves (`gradient` needs the policy's gradients)."""

STATE_FORMAT = "align-serve-composition"


def check_served_composition(sec: CompositionSection) -> list[str]:
    """What a served composition cannot do, with what to use instead."""
    p = []
    if sec.aggregate not in SERVED_AGGREGATES:
        p.append(
            f"composition.aggregate: {sec.aggregate} needs a rollout's groups (or directions, or reference "
            f"responses) a server never sees; serve one of {', '.join(SERVED_AGGREGATES)} and let the engine's "
            "estimator make advantages"
        )
    if sec.aggregate == "maxmin" and sec.maxmin != "per_sample":
        p.append("composition.maxmin: group_argmin reads a batch's means; a served reward is per item: per_sample")
    if sec.update not in SERVED_UPDATES:
        p.append(
            f"composition.update: {sec.update} needs the policy's gradients; a server can serve "
            f"{', '.join(SERVED_UPDATES)}"
        )
    if sec.update == "hypervolume":
        if sec.hypervolume.point != "rollout":
            p.append("composition.hypervolume.point: a server has no held-out evaluation; use point: rollout")
        if sec.hypervolume.apply != "reward":
            p.append("composition.hypervolume.apply: a server returns rewards, not advantages; use apply: reward")
    if sec.missing != "mask":
        p.append("composition.missing: skip_group needs a rollout's groups; a served item abstains (null) instead")
    if sec.search.method != "none":
        p.append("composition.search: the threshold search evaluates policies; it runs in `align train`, not a server")
    return p


class ServedComposition:
    """The reward per item and the state behind it (module docstring). Without a `composition:` section the reward
    is sum_k w_k r_k of the components' own weights, and there is no state."""

    def __init__(
        self,
        sec: CompositionSection | None,
        names: list[str],
        weights: list[float],
        update_every: int = 256,
        seed: int = 0,
    ) -> None:
        self.sec = sec
        self.names = list(names)
        self.base = torch.tensor(weights, dtype=torch.float32)
        self.update_every = update_every
        self.composer = Composer(sec, names, weights, seed) if sec is not None else None
        self.path: str | None = None  # --state: written after every update
        self.window: list[torch.Tensor] = []  # raw (S, K) batches since the last update
        self.served = 0
        self.updates = 0
        self.last_update: dict[str, Any] = {}

    @property
    def stateful(self) -> bool:
        return self.composer is not None

    def rewards(self, R: torch.Tensor) -> torch.Tensor:
        """(S, K) raw components of one scored batch -> (S,) rewards; updates the state (module docstring)."""
        if self.composer is None:
            return weighted_sum(R, self.base)
        c, sec = self.composer, self.sec
        assert sec is not None  # a composer exists only with a section
        if c.norm is not None:
            c.norm.update(R)
        X = c.transform(R)
        if c.rule.mixes:  # lagrangian
            lagr = c.rule.multipliers()
            cons = [self.names.index(con.component) for con in lagr.constraints]
            obj_w = c.weights.clone()
            obj_w[cons] = 0.0
            r_obj = weighted_sum(X, obj_w) if bool((obj_w != 0).any()) else torch.zeros(X.shape[0])
            r = mix_advantages(r_obj, X[:, cons], lagr.lambdas().detach(), lagr.signs(), lagr.squashed)
            used = obj_w.clone()
            used[cons] = 1.0
            r = r.masked_fill(nan_rows(X, used), math.nan)
        else:
            agg = AGGREGATORS[sec.aggregate].fn(X, c.weights, AggregateInputs(1, options=c.options))
            r = agg.values * c.rule.reward_scale()
        self.served += R.shape[0]
        self.window.append(R.detach().clone())
        if sum(w.shape[0] for w in self.window) >= self.update_every:
            self._update()
        return r.detach().float()

    def _update(self) -> None:
        assert self.composer is not None
        R = torch.cat(self.window)
        means = component_means(R, self.names)
        stats = self.composer.after_step(R)
        if getattr(self.composer.rule, "point", None) == "rollout":
            point = [means[n] for n in self.names]
            if all(math.isfinite(v) for v in point):
                stats |= self.composer.observe_point(point)
        self.window = []
        self.updates += 1
        self.last_update = {"items": R.shape[0], "means": means, **stats}
        if self.path is not None:
            self.save(self.path)

    # --- state --------------------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        assert self.composer is not None and self.sec is not None
        return {
            "format": STATE_FORMAT,
            "names": self.names,
            "composition": dataclasses.asdict(self.sec),
            "composer": self.composer.state_dict(),
            "window": torch.cat(self.window) if self.window else None,
            "served": self.served,
            "updates": self.updates,
            "last_update": self.last_update,
        }

    def load_state_dict(self, s: dict[str, Any], source: str = "state") -> None:
        assert self.composer is not None and self.sec is not None
        if s.get("format") != STATE_FORMAT:
            raise UserError(f"{source}: not an align serve composition state (format {s.get('format')!r})")
        if list(s["names"]) != self.names:
            raise UserError(
                f"{source}: saved for the components {list(s['names'])}, but this server has {self.names}; "
                "give another --state file (or remove this one to start afresh)"
            )
        saved = s.get("composition") or {}
        for key in ("aggregate", "update", "normalize"):
            if saved.get(key) != getattr(self.sec, key):
                raise UserError(
                    f"{source}: saved with composition.{key} {saved.get(key)!r}, this server has "
                    f"{getattr(self.sec, key)!r}; give another --state file (or remove this one to start afresh)"
                )
        self.composer.load_state_dict(s["composer"])
        self.window = [s["window"]] if s.get("window") is not None else []
        self.served, self.updates = int(s["served"]), int(s["updates"])
        self.last_update = dict(s.get("last_update") or {})

    def save(self, path: str | Path) -> None:
        """Write the state atomically (a temporary file renamed over the old one)."""
        with replacing(path) as tmp:
            torch.save(self.state_dict(), tmp)

    def load(self, path: str | Path) -> None:
        try:
            s = torch.load(path, map_location="cpu", weights_only=True)  # no pickled code from a state file
        except Exception as e:
            raise UserError(f"--state {path}: cannot read it ({type(e).__name__}: {e})") from e
        self.load_state_dict(s, f"--state {path}")

    def describe(self) -> dict[str, Any]:
        if self.composer is None:
            return {"reward": "sum_k w_k r_k", "weights": dict(zip(self.names, self.base.tolist(), strict=True))}
        c = self.composer
        out: dict[str, Any] = {
            **c.describe(),
            "update_every": self.update_every,
            "served_items": self.served,
            "updates": self.updates,
            "window_items": sum(w.shape[0] for w in self.window),
            "last_update": self.last_update,
        }
        if c.norm is not None:
            out["running"] = {
                n: {"mean": float(c.norm.mean[k]), "std": float(c.norm.std[k]), "count": int(c.norm.count[k])}
                for k, n in enumerate(self.names)
            }
        return out


__all__ = ["SERVED_AGGREGATES", "SERVED_UPDATES", "ServedComposition", "check_served_composition"]
