"""Paired candidate contrasts across nuisance tuples and the missing-cell policy (seed 003
§0x0CF–0x0CG). Re-exported by :mod:`gaugelab.study.release.design`."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gaugelab.study.release.units import NuisanceTuple

if TYPE_CHECKING:
    from gaugelab.study.release.manifest import DesignManifest

__all__ = [
    "Cell",
    "IncompleteDesign",
    "PairedContrast",
    "check_complete",
    "missing_cells",
    "paired_contrast",
]

Cell = tuple[str, str, NuisanceTuple]
"""An outcome cell ``(candidate_id, block name, nuisance tuple)``."""


class IncompleteDesign(ValueError):
    """A design declared ``missing_cell_policy="fail-closed"`` has missing cells: no selection."""


@dataclass(frozen=True)
class PairedContrast:
    """The paired contrast ``D_s = Y_{c,b,s} − Y_{c',b,s}`` of two candidates in one block.

    Attributes:
        candidate, reference: candidate ids ``c`` and ``c'``.
        block: the block's name.
        metric: the metric's name; ``direction`` says whether a larger ``Y`` is better
            (``"max"``) or a smaller one (``"min"``); ``D`` is never re-oriented.
        pairs: ``(s, D_s)`` for every complete nuisance tuple, in the design's order.
        incomplete: tuples where one side (or both) has no outcome: reported, never
            substituted by another tuple.
        mean: ``D̄ = (1/S) Σ_s D_s`` over the ``S`` complete pairs; ``None`` when ``S = 0``.
        run_variance: ``V̂_run = (1/(S−1)) Σ_s (D_s − D̄)²``; ``None`` when ``S < 2``. A
            dispersion over the declared nuisance tuples, not over evaluation items.
        range: ``(min_s D_s, max_s D_s)``: descriptive endpoints, **not a confidence
            interval**; ``None`` when ``S = 0``.

    Source: seed 003 §0x0CF (paired contrast, incomplete pairs), §0x0CG (run-level variance;
    "a seed range is not a confidence interval").
    """

    candidate: str
    reference: str
    block: str
    metric: str
    direction: str
    pairs: tuple[tuple[NuisanceTuple, float], ...]
    incomplete: tuple[NuisanceTuple, ...]
    mean: float | None
    run_variance: float | None
    range: tuple[float, float] | None

    @property
    def n_pairs(self) -> int:
        """``S``, the number of complete pairs."""
        return len(self.pairs)

    def describe(self) -> str:
        """One line: mean, run variance and ``range [a, b] over S nuisance tuples (a range, not
        an interval)``, then the incomplete tuples by label."""
        head = (
            f"{self.candidate} − {self.reference} on {self.block}, {self.metric} "
            f"({'higher' if self.direction == 'max' else 'lower'} is better)"
        )
        S = self.n_pairs
        if S == 0:
            body = "no complete pair"
        else:
            a, b = self.range  # type: ignore[misc]
            variance = (
                f"run variance {self.run_variance:.6g} (n − 1)"
                if self.run_variance is not None
                else "run variance undefined (one pair)"
            )
            tuples = "nuisance tuple" if S == 1 else "nuisance tuples"
            body = (
                f"mean {self.mean:.6g}; {variance}; range [{a:.6g}, {b:.6g}] over {S} "
                f"{tuples} (a range, not an interval)"
            )
        tail = ""
        if self.incomplete:
            tail = "; incomplete (not substituted): " + "; ".join(s.label for s in self.incomplete)
        return f"{head}: {body}{tail}"


def _outcome(fn: str, cell: Cell, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(
            f"{fn}: outcome {cell[0]}/{cell[1]}/{cell[2].label}={value!r}; allowed: a finite number"
        )
    if not math.isfinite(value):
        raise ValueError(
            f"{fn}: outcome {cell[0]}/{cell[1]}/{cell[2].label}={value!r}; allowed: a finite "
            "number (a failed run is a missing cell, never a NaN row)"
        )
    return float(value)


def _check_keys(fn: str, design: DesignManifest, outcomes: Mapping[Cell, float]) -> None:
    candidates = {c.candidate_id for c in design.candidates}
    blocks = {b.name for b in design.blocks}
    nuisance = set(design.nuisance)
    for key in outcomes:
        if not (isinstance(key, tuple) and len(key) == 3):
            raise ValueError(f"{fn}: outcome key {key!r}; allowed: (candidate, block, nuisance)")
        c, b, s = key
        if c not in candidates or b not in blocks:
            raise ValueError(f"{fn}: outcome key ({c!r}, {b!r}, …) is not a cell of the design")
        if s not in nuisance:
            raise ValueError(
                f"{fn}: outcome for undeclared nuisance tuple {s!r} ({c}/{b}); allowed: the "
                "design's tuples (substituting another seed breaks the pairing)"
            )


def paired_contrast(
    design: DesignManifest,
    outcomes: Mapping[Cell, float],
    candidate: str,
    reference: str,
    block: str,
    metric: str,
) -> PairedContrast:
    """Pair ``candidate`` against ``reference`` over the design's nuisance tuples in ``block``.

    Args:
        design: the frozen design.
        outcomes: ``(candidate_id, block, NuisanceTuple) → Y`` for one metric (finite floats);
            a unit without an outcome (a failed or missing run) has no key.
        candidate, reference: two different candidate ids of the design.
        block: a block name of the design.
        metric: a metric name declared in ``design.metrics`` (it labels ``outcomes``).

    Returns:
        :class:`PairedContrast`. A tuple missing either side is listed in ``incomplete`` and
        takes no part in the mean, variance or range; nothing is substituted.

    Raises:
        ValueError: unknown candidate, reference, block or metric; ``candidate == reference``;
            an outcome key that is not a cell of the design (including an undeclared nuisance
            tuple); a non-finite or non-numeric outcome.

    Source: seed 003 §0x0CF (``D_{c,c',b,s}``, ``Δ̂ = (1/|S_b|) Σ D``), §0x0CG (``V̂_run``).
    """
    fn = "paired_contrast"
    ids = [c.candidate_id for c in design.candidates]
    for name, value in (("candidate", candidate), ("reference", reference)):
        if value not in ids:
            raise ValueError(f"{fn}: {name}={value!r}; allowed: {', '.join(ids)}")
    if candidate == reference:
        raise ValueError(f"{fn}: reference={reference!r} is the candidate; allowed: another one")
    names = [b.name for b in design.blocks]
    if block not in names:
        raise ValueError(f"{fn}: block={block!r}; allowed: {', '.join(names)}")
    if metric not in design.metrics:
        raise ValueError(f"{fn}: metric={metric!r}; allowed: {', '.join(design.metrics)}")
    _check_keys(fn, design, outcomes)
    pairs: list[tuple[NuisanceTuple, float]] = []
    incomplete: list[NuisanceTuple] = []
    for s in design.nuisance:
        cells = ((candidate, block, s), (reference, block, s))
        values = [_outcome(fn, cell, outcomes[cell]) for cell in cells if cell in outcomes]
        if len(values) == 2:
            pairs.append((s, values[0] - values[1]))
        else:
            incomplete.append(s)
    D = [d for _, d in pairs]
    mean = math.fsum(D) / len(D) if D else None
    variance = (
        math.fsum((d - mean) ** 2 for d in D) / (len(D) - 1)  # type: ignore[operator]
        if len(D) >= 2
        else None
    )
    return PairedContrast(
        candidate=candidate,
        reference=reference,
        block=block,
        metric=metric,
        direction=design.metrics[metric],
        pairs=tuple(pairs),
        incomplete=tuple(incomplete),
        mean=mean,
        run_variance=variance,
        range=(min(D), max(D)) if D else None,
    )


def missing_cells(design: DesignManifest, outcomes: Mapping[Cell, float]) -> tuple[Cell, ...]:
    """Every unit cell of the design without an outcome, in :meth:`DesignManifest.units` order.

    Raises:
        ValueError: an outcome key that is not a cell of the design.

    Source: seed 003 §0x0CL (``complete_or_apply_predeclared_missing_cell_policy``).
    """
    _check_keys("missing_cells", design, outcomes)
    return tuple(
        (u.candidate_id, u.block, u.nuisance)
        for u in design.units()
        if (u.candidate_id, u.block, u.nuisance) not in outcomes
    )


def check_complete(design: DesignManifest, outcomes: Mapping[Cell, float]) -> tuple[Cell, ...]:
    """Apply the design's frozen missing-cell policy before any aggregation.

    Returns:
        The missing cells (empty when complete). Under ``"keep-incomplete"`` they are returned
        for the report; the affected pairs stay incomplete.

    Raises:
        IncompleteDesign: ``missing_cell_policy == "fail-closed"`` and a cell is missing (no
            selection).
        ValueError: an outcome key that is not a cell of the design.

    Source: seed 003 §0x0CF (the missing-cell policy is frozen before outcomes are visible).
    """
    missing = missing_cells(design, outcomes)
    if missing and design.missing_cell_policy == "fail-closed":
        shown = ", ".join(f"{c}/{b}/{s.label}" for c, b, s in missing[:3])
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        raise IncompleteDesign(
            f"check_complete: {len(missing)} missing cell(s) ({shown}{more}); the design's "
            "missing_cell_policy='fail-closed' blocks selection"
        )
    return missing
