"""Paired differences over the seeds two matched arms share.

``paired_differences`` pairs per-seed scores of two arms, reports the seeds that have no partner
(never substituting one), their mean difference, a paired bootstrap interval whose resampling
unit is the seed, and the descriptive range — which is always reported, and never called a
confidence interval.

Source: "Low-Rank Theory", §0x0BK, §0x0CF–0x0CG; the chapter "Optimizer geometry and
representation dependence", ftip-00LB.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["PairedComparison", "paired_cells", "paired_columns", "paired_differences"]

_BOOT_CHUNK = 1 << 20  # resample indices drawn per block, bounds memory at ~8 MiB


@dataclass(frozen=True)
class PairedComparison:
    """Paired per-seed differences ``d_s = a_s − b_s`` over the seeds both arms share.

    Attributes:
        seeds: the shared seeds, sorted; ``n = len(seeds)``.
        differences: ``[n]`` float64 values ``a_s − b_s``, in the order of ``seeds``.
        mean: ``d̄ = (1/n) Σ_s d_s``.
        interval: ``(lo, hi)`` percentile paired-bootstrap interval for the mean difference
            at ``level``, resampling seeds with replacement; ``None`` when ``n < 2``.
        range: ``(min_s d_s, max_s d_s)`` — descriptive endpoints, always reported, never a
            confidence interval.
        unpaired_a: seeds present only in ``a`` (reported, never used).
        unpaired_b: seeds present only in ``b`` (reported, never used).
        level: the interval's nominal coverage.
        n_boot: bootstrap resamples drawn.
        note: why ``interval`` is ``None``; otherwise ``None``.
    """

    seeds: tuple[Hashable, ...]
    differences: tuple[float, ...]
    mean: float
    interval: tuple[float, float] | None
    range: tuple[float, float]
    unpaired_a: tuple[Hashable, ...]
    unpaired_b: tuple[Hashable, ...]
    level: float
    n_boot: int
    note: str | None


def _sorted_seeds(seeds: set[Hashable], what: str) -> tuple[Hashable, ...]:
    try:
        return tuple(sorted(seeds))
    except TypeError as err:
        raise TypeError(
            f"paired_differences: {what} seeds {seeds!r} are not mutually orderable; "
            "use seeds of one type (e.g. all int)"
        ) from err


def _finite_scores(name: str, scores: Mapping[Hashable, float]) -> dict[Hashable, float]:
    out = {}
    for seed, value in scores.items():
        v = float(value)
        if not math.isfinite(v):
            raise ValueError(
                f"paired_differences: {name}[{seed!r}] = {value!r} is not finite; "
                "a failed run is an attempt outcome, not a score"
            )
        out[seed] = v
    return out


def paired_differences(
    a: Mapping[Hashable, float],
    b: Mapping[Hashable, float],
    *,
    n_boot: int = 10_000,
    level: float = 0.95,
    rng_seed: int = 0,
) -> PairedComparison:
    """Paired differences ``a − b`` over shared seeds, with a paired bootstrap over seeds.

    Only seeds present in both ``a`` and ``b`` form pairs; a seed present on one side only is
    listed in ``unpaired_a`` / ``unpaired_b`` and never substituted or used. The interval is
    the percentile bootstrap: draw ``n_boot`` resamples of the ``n`` shared seeds with
    replacement (``numpy.random.default_rng(rng_seed)``), take each resample's mean difference,
    and report its ``(1 − level)/2`` and ``(1 + level)/2`` quantiles (numpy's default linear
    interpolation). The seed is the resampling unit, so each resampled seed carries both arms.

    With few seeds the bootstrap is coarse: ``n`` seeds admit at most ``C(2n − 1, n)``
    distinct resample means (10 for ``n = 3``), and the interval cannot be wider than the
    range. Three seeds with a narrow range are not proof of a narrow population interval; the
    range is then the honest summary, and it is always reported — as a range, not an interval.

    Args:
        a, b: seed → finite score (float64, the metric's own units), one score per seed and arm.
            Seeds must be mutually orderable (e.g. all ``int``).
        n_boot: number of bootstrap resamples, ≥ 1.
        level: nominal coverage in ``(0, 1)``.
        rng_seed: seed of the bootstrap generator; same inputs and seed ⇒ same interval.

    Returns:
        ``PairedComparison``; ``interval`` is ``None`` (with ``note``) when fewer than two seeds
        are shared.

    Raises:
        ValueError: no seed is shared; a score is NaN or ±inf; ``n_boot < 1``; ``level`` not in
            ``(0, 1)``.
        TypeError: the seeds cannot be sorted.

    Source: "Low-Rank Theory", §0x0BK (paired differences, resampling unit matches the
    dependence), §0x0CF (an incomplete pair is never re-paired with another seed), §0x0CG
    (a seed range is not a confidence interval); ftip-00LB (paired uncertainty estimates).
    """
    if isinstance(n_boot, bool) or not isinstance(n_boot, int | np.integer) or n_boot < 1:
        raise ValueError(f"paired_differences: n_boot={n_boot!r}; expected an integer ≥ 1")
    if not 0.0 < float(level) < 1.0:
        raise ValueError(f"paired_differences: level={level!r}; expected a number in (0, 1)")
    a_scores, b_scores = _finite_scores("a", a), _finite_scores("b", b)
    shared = set(a_scores) & set(b_scores)
    if not shared:
        raise ValueError(
            f"paired_differences: no shared seed between a (seeds {sorted(map(repr, a_scores))}) "
            f"and b (seeds {sorted(map(repr, b_scores))}); unpaired runs are never paired"
        )
    seeds = _sorted_seeds(shared, "shared")
    unpaired_a = _sorted_seeds(set(a_scores) - shared, "a-only")
    unpaired_b = _sorted_seeds(set(b_scores) - shared, "b-only")

    d = np.array([a_scores[s] - b_scores[s] for s in seeds], dtype=np.float64)  # [n]
    n = d.shape[0]
    mean = float(d.mean())
    interval: tuple[float, float] | None = None
    note: str | None = None
    if n < 2:
        note = (
            f"interval undefined: a bootstrap over seeds needs at least 2 shared seeds, got {n}; "
            "report the range"
        )
    else:
        rng = np.random.default_rng(rng_seed)
        boot = np.empty(n_boot, dtype=np.float64)  # [n_boot] resampled mean differences
        rows = max(1, _BOOT_CHUNK // n)
        for start in range(0, n_boot, rows):
            stop = min(n_boot, start + rows)
            idx = rng.integers(0, n, size=(stop - start, n))  # [rows, n] seed indices
            boot[start:stop] = d[idx].mean(axis=1)
        lo, hi = np.quantile(boot, [(1.0 - level) / 2.0, (1.0 + level) / 2.0])
        # Every resample mean lies in [min d, max d]; clip away floating-point rounding.
        lo, hi = np.clip([lo, hi], d.min(), d.max())
        interval = (float(lo), float(hi))
    return PairedComparison(
        seeds=seeds,
        differences=tuple(float(x) for x in d),
        mean=mean,
        interval=interval,
        range=(float(d.min()), float(d.max())),
        unpaired_a=unpaired_a,
        unpaired_b=unpaired_b,
        level=float(level),
        n_boot=int(n_boot),
        note=note,
    )


def paired_columns() -> list[str]:
    """The column headers of :func:`paired_cells`."""
    return ["pairs", "mean difference", "95% interval", "range"]


def paired_cells(comparison: PairedComparison) -> list[Any]:
    """A paired comparison as table cells: n, mean, the bootstrap interval (or why there is
    none: a single pair gives a range only), and the range of the per-seed differences."""
    lo, hi = comparison.range
    interval = (
        f"[{comparison.interval[0]:.3g}, {comparison.interval[1]:.3g}]"
        if comparison.interval is not None
        else "— (one pair: range only)"
    )
    return [len(comparison.seeds), comparison.mean, interval, f"[{lo:.3g}, {hi:.3g}]"]
