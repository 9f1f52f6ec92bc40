"""The protocol's learning-rate selection: one rate per rule from its (seed × rate) grid.

Source: docs/protocols.md §3 (selection rule); the fallback is ours.
"""

from __future__ import annotations

from dataclasses import dataclass

from gaugelab.experiments.sensing.records import DIVERGED, INTERPOLATED, RuleResult


@dataclass(frozen=True)
class RateChoice:
    """The learning rate chosen for one rule.

    Attributes:
        index: position in the grid, or ``None`` when every rate diverged on some seed.
        lr: the rate, or ``None``.
        interpolated: whether the chosen rate interpolated on every seed (the protocol's rule
            applied); False means the fallback was used and the row is flagged.
        reason: one line saying how it was chosen.
    """

    index: int | None
    lr: float | None
    interpolated: bool
    reason: str


def select_rate(result: RuleResult) -> RateChoice:
    """The protocol's selection rule, applied to one rule's grid.

    Among rates whose *worst* seed interpolates (every seed interpolated), the one with the
    lowest mean recovery error. If no rate interpolates on every seed, **ours**: the lowest
    mean recovery among rates with no diverged seed, flagged. Ties go to the smaller rate
    (grid order).

    Returns:
        The :class:`RateChoice`.

    Source: docs/protocols.md §3 (selection rule); the fallback is ours.
    """
    L = len(result.lrs)

    def mean_rec(j: int) -> float:
        return sum(row[j] for row in result.recovery) / len(result.recovery)

    def column(j: int) -> list[str]:
        return [row[j] for row in result.status]

    full = [j for j in range(L) if all(s == INTERPOLATED for s in column(j))]
    if full:
        j = min(full, key=lambda i: (mean_rec(i), i))
        return RateChoice(
            j, result.lrs[j], True, "lowest mean recovery among rates whose worst seed interpolates"
        )
    finite = [j for j in range(L) if DIVERGED not in column(j)]
    if finite:
        j = min(finite, key=lambda i: (mean_rec(i), i))
        return RateChoice(
            j,
            result.lrs[j],
            False,
            "no rate interpolates on every seed: lowest mean recovery among non-diverged rates",
        )
    return RateChoice(None, None, False, "every rate diverged on at least one seed")
