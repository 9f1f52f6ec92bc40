"""What ``check_equivariance`` reports: per step, the twins' distances to the base, the
verdict with its explanation, and the zoo's claim beside it (JSON for ``gaugelab check --json``).

Source: singh2026lossbasis, §6 (the twin triplet).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from gaugelab.equivariance.verdicts import (
    INCONCLUSIVE,
)


@dataclass
class EquivarianceReport:
    """The result of :func:`check_equivariance`.

    Attributes:
        optimizer: the rule's name (registry name or ``module:Class``).
        hyperparameters: keyword hyperparameters the rule ran with.
        group: ``repr`` of the group the gauge elements were drawn from.
        problem, dtype, steps, draws, seed, noise_scale: the declared setting.
        distances: twin → ``[draws][steps]`` relative Frobenius distance of represented
            matrices, ``‖a − b‖_F / (½(‖a‖_F + ‖b‖_F) + 1e-12)`` (step t = index t − 1).
        factor_distances: ``[draws][steps]`` relative distance between the gauge twin's
            parameters aligned back by ``A⁻¹`` and the base parameters.
        moved: relative distance (the same measure, so at most 2) between the base's
            represented objects after the last step and at the start: a check that the
            parameters genuinely moved.
        factors_moved: the largest relative distance, over steps, between the base's
            parameters (all flattened into one vector) and their starting values; ``None`` in
            a report built by hand.
        missing_gradients: indices of parameters whose gradient was still ``None`` after the
            check's own backward pass (the loss does not reach them), in any run.
        tolerance: the ``equivariant`` threshold used for this dtype.
        verdict: ``equivariant``, ``breaks``, ``precision-limited``, ``nondeterministic`` or
            ``inconclusive``.
        explanation: why, in words.
        claimed: the zoo's claim for this rule and group, if there is one.
    """

    optimizer: str
    hyperparameters: dict
    group: str
    problem: str
    dtype: str
    steps: int
    draws: int
    seed: int
    noise_scale: float
    distances: dict[str, list[list[float]]]
    factor_distances: list[list[float]]
    moved: float
    tolerance: float
    factors_moved: float | None = None
    missing_gradients: list[int] = field(default_factory=list)
    verdict: str = INCONCLUSIVE
    explanation: str = ""
    claimed: str | None = None
    notes: list[str] = field(default_factory=list)

    def worst(self, twin: str) -> list[float]:
        """Per step, the largest distance over draws for ``twin``."""
        rows = self.distances[twin]
        return [max(r[t] for r in rows) for t in range(self.steps)]

    def to_dict(self) -> dict:
        """A JSON-serialisable dict of every field."""
        return asdict(self)

    def to_json(self) -> str:
        """The report as JSON (``gaugelab check --json``)."""
        return json.dumps(self.to_dict(), indent=2, default=str)
