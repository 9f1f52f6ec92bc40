"""Pareto front, constraint-feasible selection, and select-then-report.

* ``pareto_front`` and ``feasible_selection`` — the non-dominated set and the constraint-feasible
  lexicographic choice, kept apart (neither calls the other);
* ``select_then_report`` — select on the validation split, then open the held-out report for the
  chosen candidate only.

Source: "Low-Rank Theory", §0x0BI, §0x0BP–0x0BT.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

import numpy as np

__all__ = [
    "Direction",
    "Selection",
    "SelectionReport",
    "feasible_selection",
    "pareto_front",
    "select_then_report",
]

Direction = Literal["max", "min"]
"""Whether a metric is better high (``"max"``) or low (``"min"``)."""
DIRECTIONS: tuple[str, ...] = ("max", "min")


# --------------------------------------------------------------------------------------------
# Pareto front and constraint-feasible selection (two separate results)
# --------------------------------------------------------------------------------------------


def _metric(fn: str, points: Sequence[Mapping[str, float]], i: int, key: str) -> float:
    try:
        v = float(points[i][key])
    except KeyError:
        raise ValueError(
            f"{fn}: point {i} lacks metric {key!r}; missing metrics fail closed"
        ) from None
    if math.isnan(v):
        raise ValueError(f"{fn}: point {i} has {key}=nan; missing metrics fail closed")
    return v


def _check_direction(fn: str, key: str, direction: str) -> None:
    if direction not in DIRECTIONS:
        raise ValueError(f"{fn}: unknown direction {direction!r} for {key!r}; known: max, min")


def pareto_front(
    points: Sequence[Mapping[str, float]], objectives: Mapping[str, Direction]
) -> list[int]:
    """Indices of the non-dominated points (the Pareto set), ascending.

    Point ``j`` dominates ``i`` when it is at least as good on every objective and strictly
    better on at least one. Identical points do not dominate each other, so duplicates are kept
    together (or removed together, when something else dominates them). Keys of a point that are
    not objectives are ignored.

    Args:
        points: ``n`` records metric name → value (float; ``±inf`` allowed, NaN not).
        objectives: metric name → ``"max"`` (higher is better) or ``"min"``; non-empty.

    Returns:
        ``list[int]`` of indices into ``points``, sorted.

    Raises:
        ValueError: ``objectives`` empty or has an unknown direction; a point lacks an objective
            or holds NaN.

    Source: "Low-Rank Theory", §0x0BP (Pareto dominance), §0x0BS (the frontier and the feasible
    set are different).
    """
    if not objectives:
        raise ValueError("pareto_front: objectives is empty; name at least one metric")
    for key, direction in objectives.items():
        _check_direction("pareto_front", key, direction)
    n = len(points)
    if n == 0:
        return []
    sign = {"max": 1.0, "min": -1.0}
    m = np.array(  # [n, k], oriented so larger is better
        [
            [sign[d] * _metric("pareto_front", points, i, key) for key, d in objectives.items()]
            for i in range(n)
        ],
        dtype=np.float64,
    )
    at_least = (m[:, None, :] >= m[None, :, :]).all(axis=-1)  # [n, n]: j ⪰ i on every objective
    better = (m[:, None, :] > m[None, :, :]).any(axis=-1)  # [n, n]: j ≻ i on some objective
    dominated = (at_least & better).any(axis=0)  # [n]
    return [int(i) for i in np.flatnonzero(~dominated)]


@dataclass(frozen=True)
class Selection:
    """Constraint-feasible set and the lexicographic choice within it.

    Attributes:
        feasible: indices of points satisfying every constraint, ascending.
        chosen: the selected index, or ``None`` when ``feasible`` is empty.
        reason: why nothing was chosen, else ``None``.
        violations: per point (aligned with the input), the names of the constraints it
            violates, in the constraints' order — the audit trail.
    """

    feasible: tuple[int, ...]
    chosen: int | None
    reason: str | None
    violations: tuple[tuple[str, ...], ...]


def feasible_selection(
    points: Sequence[Mapping[str, float]],
    constraints: Mapping[str, tuple[float | None, float | None]],
    order: Sequence[tuple[str, Direction]],
) -> Selection:
    """Points meeting every constraint, then the lexicographically best of them.

    A point is feasible when ``lo ≤ value ≤ hi`` for every constraint (both bounds inclusive;
    ``None`` leaves a side open). Exceeding one floor never compensates for violating another.
    Among the feasible points the chosen one is best by ``order``'s first key, ties broken by
    the next key, and finally by the smallest index (the deterministic identifier). The Pareto
    front is a different object: use ``pareto_front``.

    Args:
        points: ``n`` records metric name → value (float; ``±inf`` allowed, e.g. "no configured
            rank" as ``inf``; NaN not).
        constraints: metric name → ``(lo, hi)``; may be empty (every point feasible).
        order: ``(metric, "max" | "min")`` pairs, most significant first; may be empty (the
            smallest feasible index wins).

    Returns:
        ``Selection``; with an empty feasible set, ``chosen`` is ``None`` and ``reason`` says so
        (fail closed: no release).

    Raises:
        ValueError: a point lacks a constrained or ordering metric or holds NaN there; a bound
            is NaN or ``lo > hi``; an unknown direction.

    Source: "Low-Rank Theory", §0x0BQ (feasible set and lexicographic rule
    ``argmin (C_i, r_i, id_i)``), §0x0BR (exact validation oracle), §0x0BS, §0x0BU.
    """
    for key, (lo, hi) in constraints.items():
        lo_f = -math.inf if lo is None else float(lo)
        hi_f = math.inf if hi is None else float(hi)
        if math.isnan(lo_f) or math.isnan(hi_f) or lo_f > hi_f:
            raise ValueError(
                f"feasible_selection: constraint {key!r} has bounds ({lo!r}, {hi!r}); "
                "expected lo ≤ hi, None for an open side"
            )
    for key, direction in order:
        _check_direction("feasible_selection", key, direction)

    violations = []
    for i in range(len(points)):
        broken = []
        for key, (lo, hi) in constraints.items():
            v = _metric("feasible_selection", points, i, key)
            if (lo is not None and v < float(lo)) or (hi is not None and v > float(hi)):
                broken.append(key)
        violations.append(tuple(broken))
    feasible = tuple(i for i, broken in enumerate(violations) if not broken)

    def rank_key(i: int) -> tuple[float | int, ...]:
        metric = "feasible_selection"
        ranks = [(-1.0 if d == "max" else 1.0) * _metric(metric, points, i, k) for k, d in order]
        return (*ranks, i)

    keys = {i: rank_key(i) for i in range(len(points))}  # fail closed on every point's metrics
    if not feasible:
        return Selection(feasible, None, "no release: the feasible set is empty", tuple(violations))
    chosen = min(feasible, key=keys.__getitem__)
    return Selection(feasible, chosen, None, tuple(violations))


# --------------------------------------------------------------------------------------------
# Selection nested inside validation; the held-out split is a report
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SelectionReport:
    """A validation-only selection and the held-out report of the chosen candidate.

    Attributes:
        selection: the ``Selection`` computed on the ``select_on`` records alone.
        chosen: index of the frozen candidate, or ``None`` (no release).
        report: the chosen candidate's ``report_on`` record (read-only), or ``None`` — the
            held-out split was not opened.
        reason: why nothing was reported, else ``None``.
    """

    selection: Selection
    chosen: int | None
    report: Mapping[str, float] | None
    reason: str | None


def select_then_report(
    candidates: Sequence[Mapping[str, Mapping[str, float]]],
    constraints: Mapping[str, tuple[float | None, float | None]],
    order: Sequence[tuple[str, Direction]],
    *,
    select_on: str = "validation",
    report_on: str = "test",
) -> SelectionReport:
    """Select on validation with ``feasible_selection``, then report the chosen one on test.

    Only each candidate's ``select_on`` record enters the selection; the ``report_on`` record
    is read for the chosen candidate alone, after the choice is fixed, and never feeds back
    (no runner-up on test failure: a failed release gate means no release or a new study). With
    an empty feasible set the held-out split stays closed. Checkpoint selection is nested
    inside: each candidate's ``select_on`` record must already be its validation-chosen
    checkpoint.

    Args:
        candidates: ``n`` records split name → (metric name → value); every candidate needs a
            ``select_on`` record; ``report_on`` is read only for the chosen one.
        constraints, order: as in ``feasible_selection``.
        select_on, report_on: split names; they must differ.

    Returns:
        ``SelectionReport``.

    Raises:
        ValueError: ``select_on == report_on``; a candidate lacks its ``select_on`` record; the
            chosen candidate lacks its ``report_on`` record; anything ``feasible_selection``
            raises.

    Source: "Low-Rank Theory", §0x0BI (checkpoint selection nested inside candidate selection),
    §0x0BT (held-out test is a report, not another selection round), §0x0CH, §0x0CL.
    """
    if select_on == report_on:
        raise ValueError(
            f"select_then_report: select_on and report_on are both {select_on!r}; "
            "selecting and reporting on one split leaks the evaluation into the selection"
        )
    validation: list[Mapping[str, float]] = []
    for i, candidate in enumerate(candidates):
        if select_on not in candidate:
            raise ValueError(f"select_then_report: candidate {i} lacks its {select_on!r} record")
        validation.append(candidate[select_on])
    selection = feasible_selection(validation, constraints, order)
    if selection.chosen is None:
        return SelectionReport(selection, None, None, selection.reason)
    chosen: Any = candidates[selection.chosen]
    if report_on not in chosen:
        raise ValueError(
            f"select_then_report: chosen candidate {selection.chosen} lacks its "
            f"{report_on!r} record"
        )
    report = MappingProxyType(dict(chosen[report_on]))
    return SelectionReport(selection, selection.chosen, report, None)
