"""Rank policies: configured, algebraic, numerical, stable, energy and entropy effective rank.

"Rank" is a family of named policies, not one stored integer (seed 003 §0x00I): each answers a
different question and they disagree without any bug. Every value is a ``RankReport`` carrying
the matrix id and the policy id that produced it, and the policy's parameters (tolerance rule,
threshold, dtype, SVD record). Every policy accepts a dense matrix ``[..., m, n]``, factors
``(B, A)`` or ``(B, A, scale)`` of ``ΔW = scale·B A`` (singular values computed in factor space,
``B A`` never formed), a singular-value vector ``[q]``, or a ``Spectrum``.
"""

from __future__ import annotations

import numbers

import torch

from gaugelab.linalg.entropy import entropy_effective_rank
from gaugelab.lowrank.spectra.factored import as_update, check_nonnegative
from gaugelab.lowrank.spectra.spectrum import RankReport, Spectrum, check_id, reports, spectrum

__all__ = [
    "POLICIES",
    "RankReport",
    "Spectrum",
    "algebraic_rank",
    "configured_rank",
    "effective_rank_energy",
    "effective_rank_roy_vetterli",
    "energy_rank",
    "numerical_rank",
    "rank_policies",
    "spectrum",
    "stable_rank",
]

POLICIES: tuple[str, ...] = (
    "configured",
    "algebraic",
    "numerical",
    "stable",
    "energy",
    "entropy-energy",
    "entropy-roy-vetterli",
)
"""Policy names, in the order of seed 003 §0x04I's table (``policy_id`` starts with one)."""


def configured_rank(x: object, *, matrix_id: str) -> RankReport:
    """The configured rank ``r_cfg``: the factor bottleneck chosen before training.

    It is only an upper bound on ``rank(B A)`` (seed 003 §0x01D); a batch of factors shares
    one configuration and gets one report.

    Args:
        x: factors ``(B, A)`` / ``(B, A, scale)`` with ``B [..., d_out, r]``, ``A [..., r, d_in]``,
            or the configured rank itself, an int ``≥ 0``.
        matrix_id: the target matrix's id.

    Returns:
        ``RankReport`` with policy ``"configured"`` and value ``r``.

    Raises:
        TypeError / ValueError: ``x`` is neither factors nor an int ``≥ 0``; bad factors.

    Source:
        seed 003 §0x00I, §0x04I (configured LoRA rank 2 beside algebraic rank 4).
    """
    mid = check_id(matrix_id, "configured_rank")
    if isinstance(x, int) and not isinstance(x, bool):
        if x < 0:
            raise ValueError(f"configured_rank: a rank must be an int >= 0, got {x!r}")
        return RankReport(mid, "configured", x, {"source": "given"})
    update = as_update(x, "configured_rank", "x")
    if update.dense is not None:
        raise TypeError(
            "configured_rank: x must be factors (B, A[, scale]) or an int; a dense matrix "
            "has no configured rank"
        )
    r = update.B.shape[-1]  # type: ignore[union-attr]
    orientation = "ΔW = scale·B A, B [d_out, r], A [r, d_in]"
    shapes = {"B": tuple(update.B.shape), "A": tuple(update.A.shape)}  # type: ignore[union-attr]
    return RankReport(mid, "configured", r, {"orientation": orientation, **shapes})


def algebraic_rank(
    x: object, *, matrix_id: str | None = None
) -> RankReport | tuple[RankReport, ...]:
    """Algebraic rank: the number of nonzero singular values, ``#{i : σ_i > 0}``.

    Exact for exact inputs (diagonal matrices, given singular values); for a computed
    floating-point spectrum it is ``numerical_rank(x, rtol=0)`` and unstable as a diagnostic
    (round-off makes almost every computed matrix full rank).

    Args:
        x, matrix_id: as for ``spectrum``.

    Returns:
        One ``RankReport`` (policy ``"algebraic"``, an int) for one matrix; a tuple of them,
        members ``"<id>[i]"`` in row-major order, for a batch. The zero matrix gives 0.

    Raises:
        As ``spectrum``.

    Source:
        seed 003 §0x00I, §0x04I.
    """
    sp = spectrum(x, matrix_id=matrix_id)
    return reports(sp, "algebraic", (sp.sigma > 0).sum(-1), {"comparison": "σ_i > 0"})


def numerical_rank(
    x: object,
    *,
    matrix_id: str | None = None,
    rtol: float | None = None,
    computed_in: torch.dtype | None = None,
) -> RankReport | tuple[RankReport, ...]:
    """Numerical rank ``#{i : σ_i > rtol·σ_1}`` — strictly greater.

    A singular value exactly at the threshold is excluded: ``σ = (4, 1, 1/250000, 0)`` with
    ``rtol = 10⁻⁶`` (``τ = 1/250000``) gives 2, where ``≥`` would give 3. ``rtol = 0`` counts
    the nonzero singular values (the algebraic rank of the computed spectrum); ``rtol ≥ 1``
    gives 0 (no ``σ_i`` exceeds ``σ_1``); the zero matrix (and an empty one) gives 0.

    Args:
        x, matrix_id, computed_in: as for ``spectrum``.
        rtol: relative threshold ``≥ 0`` (``inf`` allowed). Default for a dense matrix, as
            numpy's ``matrix_rank``: ``max(m, n)·eps(computed_in)`` — the dtype the matrix
            was produced in, not the dtype it is stored in now (a float32 product cast to
            float64 keeps float32 noise of relative size ~1e-7, which float64's eps would
            count as rank). The default needs the matrix shape, which bare singular values
            lack. Default for factors ``(B, A[, s])``: the absolute threshold
            ``τ = max(m, n)·eps(work)·|s|·‖B‖₂‖A‖₂``, the round-off of the factored SVD in
            the dtype it ran in (:func:`gaugelab.lowrank.spectra.factored.factor_roundoff`):
            the stored factors are exact, so their storage dtype (bfloat16, float16) adds no
            noise, and a product that cancels (``X − X``) has rank 0, not its round-off's.

    Returns:
        ``RankReport`` (policy ``"numerical(rtol=…)"``, an int; parameters: ``rtol``,
        ``tolerance_rule``, ``tau_abs = rtol·σ_1``, ``computed_in``, ``svd``), or a tuple
        of them for a batch.

    Raises:
        ValueError: ``rtol`` negative, NaN or not a number; ``rtol`` omitted for singular
            values without a shape; as ``spectrum``.

    Source:
        seed 003 §0x00I (``r_num(τ_rel)``), §0x04I (the threshold probe); numpy's
        ``matrix_rank`` default tolerance.
    """
    sp = spectrum(x, matrix_id=matrix_id, computed_in=computed_in)
    if rtol is None and sp.roundoff is not None:
        return _factored_numerical_rank(sp)
    if rtol is None:
        if sp.shape is None:
            raise ValueError(
                "numerical_rank: rtol is required for singular values without a matrix shape "
                "(the default max(m, n)·eps needs (m, n)); pass rtol= or "
                "Spectrum.from_singular_values(..., shape=(m, n))"
            )
        rtol = max(sp.shape) * torch.finfo(sp.computed_in).eps
        rule = f"max(m, n)·eps({sp.computed_in}), (m, n) = {sp.shape}"
    else:
        rtol = check_nonnegative(rtol, "numerical_rank", "rtol")
        rule = "given"
    first = sp.sigma[..., :1] if sp.sigma.shape[-1] else sp.sigma.new_zeros((*sp.batch, 1))
    tau = rtol * first  # [..., 1]
    tau = torch.where(torch.isnan(tau), float("inf"), tau)  # rtol = inf on the zero matrix
    count = (sp.sigma > tau).sum(-1)
    params = {
        "rtol": rtol,
        "tolerance_rule": rule,
        "comparison": "σ_i > rtol·σ_1",
        "computed_in": str(sp.computed_in),
    }
    return reports(sp, f"numerical(rtol={rtol!r})", count, params, {"tau_abs": tau[..., 0]})


def _factored_numerical_rank(sp: Spectrum) -> RankReport | tuple[RankReport, ...]:
    """``#{σ_i > τ}`` with ``τ`` the factored SVD's round-off (see :func:`numerical_rank`)."""
    tau = sp.roundoff.to(sp.sigma.dtype).unsqueeze(-1)  # type: ignore[union-attr]  # [..., 1]
    work = sp.svd.dtype if sp.svd is not None else str(sp.sigma.dtype)
    params = {
        "rtol": None,
        "tolerance_rule": f"max(m, n)·eps({work})·|s|·‖B‖₂‖A‖₂ (the factored SVD's "
        f"round-off), (m, n) = {sp.shape}",
        "comparison": "σ_i > τ_abs",
        "computed_in": str(sp.computed_in),
    }
    count = (sp.sigma > tau).sum(-1)
    return reports(sp, "numerical(factored round-off)", count, params, {"tau_abs": tau[..., 0]})


def stable_rank(x: object, *, matrix_id: str | None = None) -> RankReport | tuple[RankReport, ...]:
    """Stable rank ``‖ΔW‖_F² / ‖ΔW‖_2² = Σσ_i² / σ_1²`` (a float in ``[1, rank]``).

    The zero matrix gives 0.0 (defined here, instead of 0/0).

    Args:
        x, matrix_id: as for ``spectrum``.

    Returns:
        ``RankReport`` (policy ``"stable"``, a float), or a tuple for a batch.

    Raises:
        As ``spectrum``.

    Source:
        seed 003 §0x00I (``r_stable``), §0x04I (``30/16 = 15/8`` for ``(4, 3, 2, 1)``).
    """
    sp = spectrum(x, matrix_id=matrix_id)
    energy = (sp.sigma**2).sum(-1)
    top = sp.sigma[..., 0] ** 2 if sp.sigma.shape[-1] else torch.zeros_like(energy)
    value = torch.where(top > 0, energy / torch.where(top > 0, top, 1.0), 0.0)
    params = {"definition": "‖ΔW‖_F²/‖ΔW‖_2²", "zero_matrix": 0.0}
    return reports(sp, "stable", value, params)


def energy_rank(
    x: object, *, matrix_id: str | None = None, rho: float = 0.99
) -> RankReport | tuple[RankReport, ...]:
    """Energy rank: the smallest ``k`` with ``Σ_{i≤k} σ_i² / Σ_j σ_j² ≥ rho`` (boundary included).

    Squared singular values ("energy"), not singular values ("mass"): the two are different
    policies (seed 003 §0x04D). Prefix fractions are computed as ``cumsum(σ²) / sum(σ²)``, so
    the full prefix is exactly 1 and ``rho = 1`` gives the index of the last singular value
    that changes the floating-point sum. The zero matrix gives 0.

    Args:
        x, matrix_id: as for ``spectrum``.
        rho: energy fraction, ``0 < rho ≤ 1``.

    Returns:
        ``RankReport`` (policy ``"energy(rho=…)"``, an int), or a tuple for a batch.

    Raises:
        ValueError: ``rho`` outside ``(0, 1]``; as ``spectrum``.

    Source:
        seed 003 §0x00I (``r_ρ``), §0x04I (99% energy rank 4 for ``(4, 3, 2, 1)``).
    """
    if isinstance(rho, bool) or not isinstance(rho, numbers.Real) or not 0 < rho <= 1:
        raise ValueError(f"energy_rank: rho must be a number in (0, 1], got {rho!r}")
    sp = spectrum(x, matrix_id=matrix_id)
    prefix = torch.cumsum(sp.sigma**2, dim=-1)  # [..., q]
    total = prefix[..., -1:] if prefix.shape[-1] else prefix.new_zeros((*sp.batch, 1))
    fraction = prefix / torch.where(total > 0, total, 1.0)
    value = torch.where(total[..., 0] > 0, (fraction < rho).sum(-1) + 1, 0)
    params = {"rho": float(rho), "comparison": "prefix ≥ rho", "order": "descending σ"}
    return reports(sp, f"energy(rho={float(rho)!r})", value, params)


def effective_rank_roy_vetterli(
    x: object, *, matrix_id: str | None = None
) -> RankReport | tuple[RankReport, ...]:
    """Roy–Vetterli effective rank ``exp(−Σ p_i ln p_i)`` with ``p_i = σ_i / Σ_j σ_j``.

    Normalises singular values, not their squares: ≈ 3.5961 for ``(4, 3, 2, 1)``, where the
    energy convention (``effective_rank_energy``) gives ≈ 2.9402. Terms with ``p_i = 0``
    contribute 0; the zero matrix gives 0.0 (no distribution is invented).

    Args:
        x, matrix_id: as for ``spectrum``.

    Returns:
        ``RankReport`` (policy ``"entropy-roy-vetterli"``, a float in ``[1, rank]``, 0.0 for
        the zero matrix), or a tuple for a batch.

    Raises:
        As ``spectrum``.

    Source:
        roy2007effective; seed 003 §0x04J.
    """
    sp = spectrum(x, matrix_id=matrix_id)
    params = _entropy_params("p_i = σ_i / Σ_j σ_j")
    value = entropy_effective_rank(sp.sigma, convention="roy_vetterli")
    return reports(sp, "entropy-roy-vetterli", value, params)


def effective_rank_energy(
    x: object, *, matrix_id: str | None = None
) -> RankReport | tuple[RankReport, ...]:
    """Entropy-energy effective rank ``exp(−Σ p_i ln p_i)`` with ``p_i = σ_i² / Σ_j σ_j²``.

    The manifest's entropy-energy diagnostic (≈ 2.9402 for ``(4, 3, 2, 1)``); not the same
    statistic as Roy–Vetterli's (``effective_rank_roy_vetterli``). Terms with ``p_i = 0``
    contribute 0; the zero matrix gives 0.0.

    Args:
        x, matrix_id: as for ``spectrum``.

    Returns:
        ``RankReport`` (policy ``"entropy-energy"``, a float), or a tuple for a batch.

    Raises:
        As ``spectrum``.

    Source:
        seed 003 §0x00I (``r_ent``), §0x04I, §0x04J.
    """
    sp = spectrum(x, matrix_id=matrix_id)
    params = _entropy_params("p_i = σ_i² / Σ_j σ_j²")
    value = entropy_effective_rank(sp.sigma, convention="energy")
    return reports(sp, "entropy-energy", value, params)


def rank_policies(
    x: object,
    *,
    matrix_id: str | None = None,
    configured: int | None = None,
    rtol: float | None = None,
    rho: float = 0.99,
    computed_in: torch.dtype | None = None,
) -> tuple[RankReport, ...]:
    """Every rank policy of one matrix, from one SVD, in seed 003 §0x04I's order.

    Configured (when ``x`` is factors or ``configured`` is given), algebraic, numerical
    (``rtol``), stable, energy (``rho``), entropy-energy, entropy-Roy–Vetterli.

    Args:
        x, matrix_id, computed_in: as for ``spectrum``; one matrix, not a batch.
        configured: the configured rank when ``x`` is not factors (for factors it is read
            from them unless given).
        rtol, rho: as for ``numerical_rank`` and ``energy_rank``.

    Returns:
        A tuple of ``RankReport``, all with ``x``'s matrix id.

    Raises:
        ValueError: ``x`` is batched; as the policies.

    Source:
        seed 003 §0x04I (the policy table).
    """
    sp = spectrum(x, matrix_id=matrix_id, computed_in=computed_in)
    if sp.batch:
        raise ValueError(
            f"rank_policies: x must be one matrix, got a batch of shape {sp.batch}; "
            "call it per member or call each policy on the batch"
        )
    reports: list[RankReport] = []
    if configured is not None:
        reports.append(configured_rank(configured, matrix_id=sp.matrix_id))
    elif isinstance(x, tuple):
        reports.append(configured_rank(x, matrix_id=sp.matrix_id))
    reports += [
        algebraic_rank(sp),
        numerical_rank(sp, rtol=rtol),
        stable_rank(sp),
        energy_rank(sp, rho=rho),
        effective_rank_energy(sp),
        effective_rank_roy_vetterli(sp),
    ]  # type: ignore[list-item]
    return tuple(reports)


def _entropy_params(normalisation: str) -> dict[str, object]:
    return {"normalisation": normalisation, "log_base": "e", "zero_spectrum": 0.0}
