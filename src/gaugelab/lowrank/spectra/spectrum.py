"""Spectra with provenance and rank reports: what every rank policy reads and returns
(private; the public names are re-exported by ``gaugelab.lowrank.spectra.ranks``)."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import torch

from gaugelab.lowrank.spectra.factored import (
    SvdRecord,
    as_update,
    check_dtype,
    factor_roundoff,
    update_singular_values,
)

__all__ = ["RankReport", "Spectrum", "check_id", "reports", "spectrum"]


@dataclass(frozen=True)
class RankReport:
    """One rank value with the identity of what produced it (seed 003 §0x00I).

    Attributes:
        matrix_id: the matrix object measured (``"<id>[e]"`` for member ``e`` of a batch).
        policy_id: the policy and its defining parameter, e.g. ``"numerical(rtol=1e-06)"``,
            ``"energy(rho=0.99)"``, ``"stable"``; starts with a name in ``POLICIES``.
        value: an ``int`` for configured, algebraic, numerical and energy rank; a ``float``
            for stable rank and the two entropy effective ranks.
        parameters: the policy's fields (tolerance rule, comparison, threshold, dtype,
            ``svd``: the ``SvdRecord`` of the singular values, or ``None`` when given).
    """

    matrix_id: str
    policy_id: str
    value: int | float
    parameters: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class Spectrum:
    """Singular values of one matrix object (or a batch of them) with their provenance.

    Attributes:
        matrix_id: the matrix object's id.
        sigma: ``[..., q]`` non-increasing, ``≥ 0``; for factors ``q = min(d_out, d_in, r)``
            (the remaining singular values are exactly zero).
        shape: ``(m, n)`` of the matrix, or ``None`` when only singular values were given.
        computed_in: dtype the matrix was produced in; it sets the default tolerances of a
            dense matrix.
        svd: how ``sigma`` was computed, or ``None`` when it was given.
        roundoff: ``[...]`` for factors: the absolute round-off scale of their factored SVD
            (:func:`gaugelab.lowrank.spectra.factored.factor_roundoff`), the default numerical
            tolerance; ``None`` for a dense matrix or given singular values.
    """

    matrix_id: str
    sigma: torch.Tensor
    shape: tuple[int, int] | None
    computed_in: torch.dtype
    svd: SvdRecord | None = None
    roundoff: torch.Tensor | None = None

    @classmethod
    def from_singular_values(
        cls,
        sigma: torch.Tensor,
        *,
        matrix_id: str,
        shape: tuple[int, int] | None = None,
        computed_in: torch.dtype | None = None,
    ) -> Spectrum:
        """A spectrum from given singular values ``[..., q]`` (sorted here, non-increasing).

        Args:
            sigma: ``[..., q]`` real floating tensor, finite and ``≥ 0``; leading dims a batch.
            matrix_id: the matrix object's id.
            shape: ``(m, n)`` of the matrix, needed by the default numerical tolerance
                ``max(m, n)·eps``; ``None`` if unknown (then ``rtol`` must be given).
            computed_in: dtype the matrix was produced in; default ``sigma``'s dtype.

        Returns:
            ``Spectrum`` with ``svd = None``.

        Raises:
            TypeError: ``sigma`` is not a tensor.
            ValueError: ``sigma`` is 0-dimensional, not floating, negative or non-finite;
                ``matrix_id`` is empty; ``shape`` is not two ints ``(m, n)``
                with ``min(m, n) ≥ q``; ``computed_in`` is not a floating dtype.
        """
        func = "Spectrum.from_singular_values"
        if not isinstance(sigma, torch.Tensor):
            raise TypeError(f"{func}: sigma must be a torch.Tensor, got {type(sigma).__name__}")
        if sigma.ndim < 1 or not sigma.is_floating_point():
            raise ValueError(
                f"{func}: sigma must be a real floating tensor [..., q], got shape "
                f"{tuple(sigma.shape)} and dtype {sigma.dtype}"
            )
        if not bool(torch.isfinite(sigma).all()) or bool((sigma < 0).any()):
            raise ValueError(f"{func}: singular values must be finite and >= 0, got {sigma}")
        if shape is not None:
            ok = len(tuple(shape)) == 2 and all(
                isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape
            )
            if not ok or min(shape) < sigma.shape[-1]:
                raise ValueError(
                    f"{func}: shape must be (m, n), ints with min(m, n) >= q = "
                    f"{sigma.shape[-1]}, got {shape!r}"
                )
            shape = (int(shape[0]), int(shape[1]))
        ordered = torch.sort(sigma, dim=-1, descending=True).values
        dtype = sigma.dtype if computed_in is None else check_dtype(computed_in, func)
        return cls(check_id(matrix_id, func), ordered, shape, dtype, None)

    @property
    def batch(self) -> tuple[int, ...]:
        return tuple(self.sigma.shape[:-1])


def spectrum(
    x: object,
    *,
    matrix_id: str | None = None,
    computed_in: torch.dtype | None = None,
    triangles: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> Spectrum:
    """The singular values of a matrix object, computed once for every policy.

    Args:
        x: a dense ``[..., m, n]`` real floating tensor (leading dimensions a batch); factors
            ``(B, A)`` or ``(B, A, scale)`` with ``B [..., d_out, r]``, ``A [..., r, d_in]``
            of ``ΔW = scale·B A`` (QR of ``B`` and ``Aᵀ``, singular values of the small core;
            ``B A`` is never formed); a ``[q]`` tensor of singular values (a dense matrix has
            two dimensions; give batched singular values through
            ``Spectrum.from_singular_values``); or a ``Spectrum``, returned as it is (with
            ``computed_in`` replaced when given).
        matrix_id: the matrix object's id; required unless ``x`` is a ``Spectrum``.
        computed_in: dtype the matrix (or its factors) was produced in; default ``x``'s
            dtype. A float32 ``B A`` cast to float64 should pass ``torch.float32`` here, so
            the default tolerances read its float32 rounding as noise, not as rank.
        triangles: for factors, their :func:`~gaugelab.lowrank.spectra.factored.factor_triangles`
            when the caller has them already (the QRs are then not repeated).

    Returns:
        ``Spectrum``: ``sigma [..., q]`` in ``x``'s dtype (float32 for float16 / bfloat16).

    Raises:
        TypeError: ``x`` is none of the above.
        ValueError: non-floating or non-finite entries, mismatched factors, a missing or empty
            ``matrix_id``, a ``matrix_id`` different from a given ``Spectrum``'s, or a
            ``computed_in`` that is not a floating dtype.

    Source:
        seed 003 §0x00I (numerical rank needs matrix, dtype, SVD backend, tolerance rule).
    """
    func = "spectrum"
    dtype = None if computed_in is None else check_dtype(computed_in, func)
    if isinstance(x, Spectrum):
        if matrix_id is not None and matrix_id != x.matrix_id:
            raise ValueError(
                f"{func}: matrix_id {matrix_id!r} differs from the Spectrum's {x.matrix_id!r}"
            )
        return x if dtype is None else replace(x, computed_in=dtype)
    mid = check_id(matrix_id, func)
    if isinstance(x, torch.Tensor) and x.ndim == 1:
        return Spectrum.from_singular_values(x, matrix_id=mid, computed_in=dtype)
    update = as_update(x, func, "x")
    sigma, record = update_singular_values(update, triangles)
    roundoff = None if update.dense is not None else factor_roundoff(update, sigma.dtype)
    return Spectrum(mid, sigma, update.shape, dtype or update.dtype, record, roundoff)


def reports(
    sp: Spectrum,
    policy_id: str,
    values: torch.Tensor,
    params: dict[str, object],
    per_member: dict[str, torch.Tensor] | None = None,
) -> RankReport | tuple[RankReport, ...]:
    """One report for one matrix, or one per member (``"<id>[i,j]"``, row-major) for a batch;
    ``values [...]`` and each ``per_member`` tensor have the batch shape."""
    base = {**params, "svd": sp.svd}
    integer = not values.is_floating_point()

    def one(mid: str, index: tuple[int, ...]) -> RankReport:
        value = values[index].item()
        extra = {k: float(v[index].item()) for k, v in (per_member or {}).items()}
        return RankReport(mid, policy_id, int(value) if integer else float(value), base | extra)

    if not sp.batch:
        return one(sp.matrix_id, ())
    return tuple(
        one(f"{sp.matrix_id}[{','.join(map(str, index))}]", index)
        for index in itertools.product(*(range(size) for size in sp.batch))
    )


def check_id(matrix_id: object, func: str) -> str:
    """Raise unless ``matrix_id`` is a non-empty string."""
    if not isinstance(matrix_id, str) or not matrix_id:
        raise ValueError(f"{func}: matrix_id must be a non-empty string, got {matrix_id!r}")
    return matrix_id
