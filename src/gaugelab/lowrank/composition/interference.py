"""Novelty apart from interference for two updates (private; re-exported by
``gaugelab.lowrank.composition.ledger``)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from gaugelab.linalg.checks import all_finite
from gaugelab.lowrank.spectra.factored import Update, as_update, scaled
from gaugelab.lowrank.subspaces.compare import SubspaceComparison, compare_updates

__all__ = ["Interference", "frobenius_cosine", "frobenius_inner", "interference"]


def frobenius_inner(u: Update, v: Update) -> torch.Tensor:
    """``⟨ΔW_u, ΔW_v⟩_F``; for factors ``s_u s_v tr((B_uᵀ B_v)(A_v A_uᵀ))`` (``B A`` unformed)."""
    if u.dense is not None and v.dense is not None:
        return (u.dense * v.dense).sum()
    if u.dense is not None or v.dense is not None:
        dense, fac = (u, v) if u.dense is not None else (v, u)
        return (fac.B.mT @ dense.dense @ fac.A.mT).diagonal().sum() * fac.scale  # type: ignore[union-attr, operator]
    core = (u.B.mT @ v.B) * (u.A @ v.A.mT)  # type: ignore[union-attr]  # [r_u, r_v], elementwise
    return scaled(core, u.scale).sum() * v.scale  # type: ignore[operator]


@dataclass(frozen=True)
class Interference:
    """Two updates ``ΔW_1``, ``ΔW_2`` of one module: novelty and interference, separately.

    Attributes:
        row, column: :class:`SubspaceComparison` of the row and column spaces (novelty: do the
            spans differ?).
        norm1_squared, norm2_squared: ``‖ΔW_1‖_F²``, ``‖ΔW_2‖_F²``.
        cross_term: ``2⟨ΔW_1, ΔW_2⟩_F`` (positive: amplification; negative: cancellation).
            These three and ``cosine`` are computed once, in float64 from the factors
            scaled to unit peak, whatever the updates' dtype.
        sum_squared: ``‖ΔW_1 + ΔW_2‖_F²``, computed from the sum itself (concatenated
            factors), so ``sum_squared = norm1² + norm2² + cross_term`` is a check.
        cosine: ``⟨ΔW_1, ΔW_2⟩_F / (‖ΔW_1‖_F ‖ΔW_2‖_F)`` (NaN when one is zero;
            :func:`frobenius_cosine`).
        output_cross_term: ``(2/N) Σ_x ⟨ΔW_1 x, ΔW_2 x⟩`` on the given activations, or ``None``.
        output_cosine: ``⟨X ΔW_1ᵀ, X ΔW_2ᵀ⟩_F / (‖X ΔW_1ᵀ‖_F ‖X ΔW_2ᵀ‖_F)``, or ``None``.
        output_sum_squared: ``(1/N)‖X (ΔW_1 + ΔW_2)ᵀ‖_F²``, or ``None``.
        n_samples: ``N`` (0 without activations).
    """

    row: SubspaceComparison
    column: SubspaceComparison
    norm1_squared: float
    norm2_squared: float
    cross_term: float
    sum_squared: float
    cosine: float
    output_cross_term: float | None
    output_cosine: float | None
    output_sum_squared: float | None
    n_samples: int


def _cos(inner: float, a: float, b: float) -> float:
    return inner / math.sqrt(a * b) if a > 0 and b > 0 else math.nan


def _unit(w: Update) -> tuple[Update, float]:
    """``w`` in float64 with each factor divided by its largest magnitude and the scale by its
    own, and the magnitude divided out (``w = magnitude · unit``): every product of the unit
    update's factors is at most ``r`` in size, so nothing overflows."""
    magnitude = 1.0

    def unit(X: torch.Tensor) -> torch.Tensor:
        nonlocal magnitude
        X = X.double()
        peak = float(X.abs().max())
        magnitude *= peak
        return X / peak if peak > 0 else X

    if w.dense is not None:
        return Update(unit(w.dense), None, None, 1.0), magnitude
    scale = float(w.scale)
    B, A = unit(w.B), unit(w.A)  # type: ignore[arg-type]
    return Update(None, B, A, math.copysign(1.0, scale) if scale else 0.0), magnitude * abs(scale)


_SAFE = 2.0**32  # factors whose peaks lie within [1/_SAFE, _SAFE] are compared unchanged


def _in_range(w: Update) -> object:
    """``w`` as :func:`as_update` reads it, for the span comparison: unchanged when its factors'
    peak magnitudes lie within ``[2⁻³², 2³²]``; otherwise each factor (or the dense update)
    multiplied by a power of two that brings its peak into ``[½, 1)`` and the scale reduced to
    its sign and mantissa — the same spans (a positive multiple of the update), exactly scaled,
    with no product overflowing (factors of ``1e38`` in float32)."""

    def down(X: torch.Tensor) -> torch.Tensor:
        peak = float(X.abs().max()) if X.numel() else 0.0
        return X if peak == 0 or not math.isfinite(peak) else X * 2.0 ** -math.frexp(peak)[1]

    parts = [w.dense] if w.dense is not None else [w.B, w.A]
    peaks = [float(X.abs().max()) for X in parts if X is not None and X.numel()]
    if all(1 / _SAFE <= p <= _SAFE for p in peaks if p > 0):
        return w.dense if w.dense is not None else (w.B, w.A, w.scale)
    if w.dense is not None:
        return down(w.dense)
    return down(w.B), down(w.A), math.frexp(float(w.scale))[0]  # type: ignore[arg-type]


def _inner_products(u: Update, v: Update) -> tuple[float, float, float, float]:
    """``‖ΔW_u‖²``, ``‖ΔW_v‖²``, ``⟨ΔW_u, ΔW_v⟩_F`` and their cosine, in float64 from the
    unit-peak factors (:func:`_unit`); the cosine from the unit products, so it is exact
    whatever the magnitudes (a norm beyond float64's range reads ``inf``, the cosine not)."""
    (u1, mu), (v1, mv) = _unit(u), _unit(v)
    uu, vv, uv = (float(frobenius_inner(a, b)) for a, b in ((u1, u1), (v1, v1), (u1, v1)))
    return uu * mu * mu, vv * mv * mv, uv * mu * mv, _cos(uv, uu, vv)


def frobenius_cosine(u: Update, v: Update) -> float:
    """``⟨ΔW_u, ΔW_v⟩_F / (‖ΔW_u‖_F ‖ΔW_v‖_F)`` from the factors (``B A`` unformed), in
    float64 on factors scaled to unit peak, so factors of any magnitude a float32 holds
    (``1e38``) give the cosine, not ``0`` or NaN from an overflowed inner product; NaN when
    one update is zero."""
    return _inner_products(u, v)[3]


def interference(
    delta_1: object,
    delta_2: object,
    X: torch.Tensor | None = None,
    *,
    policy: str | int = "numerical",
    rtol: float | None = None,
    rho: float = 0.99,
) -> Interference:
    """Row overlap, column overlap, Frobenius cross term and sampled-output interference.

    Four separate measurements (§0x05D): the spans (novelty), the matrix inner product, and
    the layer outputs on real activations; end-to-end task interference is a fifth, measured
    by running the model.

    Args:
        delta_1, delta_2: dense ``[m, n]`` updates or factors ``(B, A[, s])`` (not batched).
        X: optional ``[N, n]`` inputs of the layer (real activations).
        policy, rtol, rho: the rank policy of the span comparison
            (:func:`gaugelab.lowrank.subspaces.compare.update_bases`).

    Returns:
        :class:`Interference` (norms, cross term and cosine in float64; the sum and the
        sampled outputs in the updates' dtype's precision).

    Raises:
        TypeError, ValueError: bad updates, different shapes, ``X`` not ``[N, n]`` or not
            finite.

    Source:
        seed 003 §0x05D.
    """
    func = "interference"
    u, v = as_update(delta_1, func, "delta_1"), as_update(delta_2, func, "delta_2")
    if u.batch or v.batch or u.shape != v.shape:
        raise ValueError(f"{func}: updates of shapes {u.shape} and {v.shape}; allowed: one [m, n]")
    spans = compare_updates(_in_range(u), _in_range(v), policy=policy, rtol=rtol, rho=rho,
                            factor_spans=False)  # only the update spans are reported
    n1, n2, inner, cosine = _inner_products(u, v)
    if u.dense is None and v.dense is None:  # the sum as concatenated factors, B A unformed
        B_cat = torch.cat([u.B, v.B], dim=1)  # type: ignore[list-item]
        A_cat = torch.cat([u.scale * u.A, v.scale * v.A])  # type: ignore[operator]
        w = Update(None, B_cat, A_cat, 1.0)
    else:
        w = Update(u.to_dense() + v.to_dense(), None, None, 1.0)
    total = float(frobenius_inner(w, w))
    out_cross = out_cos = out_sum = None
    n_samples = 0
    if X is not None:
        if not isinstance(X, torch.Tensor) or X.ndim != 2 or X.shape[1] != u.shape[1]:
            raise ValueError(f"{func}: X must be [N, {u.shape[1]}], got {getattr(X, 'shape', X)}")
        if not all_finite(X):
            raise ValueError(f"{func}: X contains NaN or infinite entries")
        Y1, Y2 = u.apply(X.to(u.dtype)), v.apply(X.to(v.dtype))  # [N, m]
        n_samples = X.shape[0]
        o12, o11, o22 = float((Y1 * Y2).sum()), float(Y1.square().sum()), float(Y2.square().sum())
        out_cross, out_cos = 2 * o12 / n_samples, _cos(o12, o11, o22)
        out_sum = float((Y1 + Y2).square().sum()) / n_samples
    return Interference(
        row=spans.row, column=spans.column, norm1_squared=n1, norm2_squared=n2,
        cross_term=2 * inner, sum_squared=total, cosine=cosine,
        output_cross_term=out_cross, output_cosine=out_cos, output_sum_squared=out_sum,
        n_samples=n_samples,
    )  # fmt: skip
