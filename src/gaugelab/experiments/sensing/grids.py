"""The zoo's learning-rate grids: four half-decade rates per rule (ours).

Source: docs/protocols.md §3 (the selection rule; the reference grids are not published).
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator


def positive_rates(rates: tuple[float, ...]) -> tuple[float, ...]:
    """``rates`` unchanged if every rate is finite and > 0, else ValueError (a field validator)."""
    if any(not (math.isfinite(x) and x > 0) for x in rates):
        raise ValueError(f"learning rates {rates}; allowed: finite numbers > 0")
    return rates


def _grid(default: tuple[float, ...], why: str) -> Any:
    return Field(default, min_length=1, description=why)


class LearningRateGrids(BaseModel):
    """Learning-rate grid per rule: four half-decade rates. **Ours** — the reference grids are
    not published (docs/protocols.md §3 gives only the selection rule).

    One principle: Adam's grid ``{1e-3, 3e-3, 1e-2, 3e-2}`` scaled by the rule's typical
    per-entry step relative to Adam's. Sign updates (signum, sign-sgd, lion) move every entry by
    the full η every step, and so do momentum-free normalised updates (rmsprop, adafactor, whose
    ``G/√v`` has RMS ≈ 1): 10× smaller (the Lion convention of a 3–10× smaller rate than
    Adam). msign steps have spectral norm ≈ 1, entries ≈ 1/√n: 3× larger. gd and shampoo
    (which is gd-like while its damping λ = 1 dominates) are not normalised: their grids end
    at the measured stability edge on the n = 40 testbed (1e-1 diverges within 10 steps).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    gd: tuple[float, ...] = _grid(
        (1e-3, 3e-3, 1e-2, 3e-2), "gd (ours): up to the stability edge (1e-1 diverges)."
    )
    heavy_ball: tuple[float, ...] = _grid(
        (1e-4, 3e-4, 1e-3, 3e-3), "heavy-ball (ours): gd's / 10, as the sum-form μ = 0.9 does."
    )
    nesterov: tuple[float, ...] = _grid(
        (1e-4, 3e-4, 1e-3, 3e-3), "nesterov (ours): gd's / 10, as the sum-form μ = 0.9 does."
    )
    adam: tuple[float, ...] = _grid((1e-3, 3e-3, 1e-2, 3e-2), "adam (ours): the base grid.")
    adamw: tuple[float, ...] = _grid((1e-3, 3e-3, 1e-2, 3e-2), "adamw (ours): adam's.")
    rmsprop: tuple[float, ...] = _grid(
        (1e-4, 3e-4, 1e-3, 3e-3), "rmsprop (ours): adam's / 10 (momentum-free, RMS step ≈ η)."
    )
    signum: tuple[float, ...] = _grid(
        (1e-4, 3e-4, 1e-3, 3e-3), "signum (ours): adam's / 10 (full-η sign steps)."
    )
    sign_sgd: tuple[float, ...] = _grid(
        (1e-4, 3e-4, 1e-3, 3e-3), "sign-sgd (ours): adam's / 10 (full-η sign steps)."
    )
    lion: tuple[float, ...] = _grid(
        (1e-4, 3e-4, 1e-3, 3e-3), "lion (ours): adam's / 10 (full-η sign steps)."
    )
    adafactor: tuple[float, ...] = _grid(
        (1e-4, 3e-4, 1e-3, 3e-3), "adafactor (ours): adam's / 10 (momentum-free, RMS step ≈ η)."
    )
    scalar_adam: tuple[float, ...] = _grid((1e-3, 3e-3, 1e-2, 3e-2), "scalar-adam (ours): adam's.")
    muon: tuple[float, ...] = _grid(
        (3e-3, 1e-2, 3e-2, 1e-1), "muon (ours): adam's × 3 (msign entries ≈ 1/√n)."
    )
    shampoo: tuple[float, ...] = _grid(
        (3e-3, 1e-2, 3e-2, 1e-1), "shampoo (ours): gd-like, up to the stability edge."
    )

    def grid(self, rule: str) -> tuple[float, ...]:
        """The grid of registry name ``rule``.

        Raises:
            ValueError: no grid for ``rule``.
        """
        key = rule.replace("-", "_")
        if key not in type(self).model_fields:
            known = ", ".join(f.replace("_", "-") for f in type(self).model_fields)
            raise ValueError(f"LearningRateGrids.grid: rule={rule!r}; rules with a grid: {known}")
        return getattr(self, key)

    _positive = field_validator("*")(positive_rates)
