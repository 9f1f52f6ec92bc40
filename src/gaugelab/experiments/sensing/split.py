"""The zoo's split: worst orthogonally equivariant rule against best coordinatewise rule.

Source: singh2026lossbasis, §5 (the 9/9 classification); docs/protocols.md §3.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from gaugelab.experiments.sensing.problem import COORDINATEWISE_CLASS, EQUIVARIANT_CLASS


@dataclass(frozen=True)
class SplitVerdict:
    """Worst orthogonally equivariant rule against the best coordinatewise rule.

    Attributes:
        worst_equivariant, worst_equivariant_recovery: the equivariant rule with the highest
            mean recovery error, and that error.
        best_coordinatewise, best_coordinatewise_recovery: the coordinatewise rule with the
            lowest mean recovery error, and that error.
        gap: ``best_coordinatewise_recovery − worst_equivariant_recovery``.
        clean: ``gap > 0`` — every equivariant rule recovers better than every coordinatewise
            rule.
        classified, total: rules on the correct side of the best single threshold on mean
            recovery error, out of all compared rules (the reference: 9/9).
    """

    worst_equivariant: str
    worst_equivariant_recovery: float
    best_coordinatewise: str
    best_coordinatewise_recovery: float
    gap: float
    clean: bool
    classified: int
    total: int

    def sentence(self) -> str:
        """The verdict in one line."""
        word = "clean split" if self.clean else "no clean split"
        return (
            f"{word}: worst equivariant {self.worst_equivariant} "
            f"{self.worst_equivariant_recovery:.3f} vs best coordinatewise "
            f"{self.best_coordinatewise} {self.best_coordinatewise_recovery:.3f} "
            f"(gap {self.gap:+.3f}); {self.classified}/{self.total} classified by one threshold"
        )


def split_verdict(recoveries: dict[str, float], classes: dict[str, str]) -> SplitVerdict | None:
    """The split of mean recovery errors by class.

    Args:
        recoveries: rule → mean recovery error (NaN entries are ignored).
        classes: rule → ``"equivariant"`` or ``"coordinatewise"``.

    Returns:
        The :class:`SplitVerdict`, or ``None`` when either class has no finite entry.

    Source: singh2026lossbasis, §5 (the 9/9 classification); docs/protocols.md §3.
    """
    finite = {r: x for r, x in recoveries.items() if math.isfinite(x)}
    eq = {r: x for r, x in finite.items() if classes[r] == EQUIVARIANT_CLASS}
    co = {r: x for r, x in finite.items() if classes[r] == COORDINATEWISE_CLASS}
    if not eq or not co:
        return None
    worst = max(eq, key=lambda r: (eq[r], r))
    best = min(co, key=lambda r: (co[r], r))
    values = sorted(finite.values())
    cuts = [values[0] - 1.0] + [(a + b) / 2 for a, b in itertools.pairwise(values)]
    cuts.append(values[-1] + 1.0)
    classified = max(
        sum(x < c for x in eq.values()) + sum(x > c for x in co.values()) for c in cuts
    )
    gap = co[best] - eq[worst]
    return SplitVerdict(worst, eq[worst], best, co[best], gap, gap > 0, classified, len(finite))
