"""Sampled input covariance, its support and blind spot, and the output residual (private;
the public names are re-exported by ``gaugelab.lowrank.spectra.reconstruction``).

The inputs are rows ``X [N, n]``, or their streamed second moment (:class:`InputMoments`:
``XᵀX`` and ``N``, summed batch by batch) when ``N`` rows are too many to hold: every quantity
here depends on ``X`` only through ``C = XᵀX/N``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from gaugelab.lowrank.spectra.factored import (
    Update,
    as_update,
    check_dtype,
    check_nonnegative,
    scaled,
    unbatched,
)

__all__ = [
    "CovarianceSupport",
    "InputMoments",
    "OutputResidual",
    "check_inputs",
    "covariance_support",
    "output_residual",
]


@dataclass
class InputMoments:
    """A layer's sampled inputs known through their second moment, accumulated batch by batch.

    Attributes:
        gram: ``[n, n]`` ``Σ_t x_t x_tᵀ = XᵀX`` over every row added so far (float32/float64).
        count: ``N``, the rows added.

    Source: seed 003 §0x04E (``C_X = XᵀX/N`` is all the output residual needs).
    """

    gram: torch.Tensor
    count: int = 0

    @classmethod
    def zeros(cls, n: int, dtype: torch.dtype = torch.float64) -> InputMoments:
        """No rows yet: an ``[n, n]`` zero Gram matrix in ``dtype``."""
        return cls(torch.zeros(n, n, dtype=dtype), 0)

    def add(self, X: torch.Tensor) -> None:
        """Add the rows of ``X [..., n]`` (cast to the Gram's dtype; every leading axis a row).

        Raises:
            ValueError: ``X``'s last axis is not ``n``.
        """
        rows = X.detach().reshape(-1, X.shape[-1]).to(self.gram.dtype)  # [N_batch, n]
        if rows.shape[1] != self.gram.shape[0]:
            raise ValueError(f"InputMoments.add: X has width {rows.shape[1]}; allowed: "
                             f"{self.gram.shape[0]}")  # fmt: skip
        self.gram.addmm_(rows.mT, rows)
        self.count += rows.shape[0]

    @property
    def covariance(self) -> torch.Tensor:
        """``[n, n]`` ``C = XᵀX/N``."""
        return self.gram / self.count

    @property
    def shape(self) -> tuple[int, int]:
        """``(N, n)``, the shape of the rows summarised."""
        return (self.count, self.gram.shape[0])

    @property
    def dtype(self) -> torch.dtype:
        """The Gram matrix's dtype."""
        return self.gram.dtype


Inputs = torch.Tensor | InputMoments
"""Sampled inputs: rows ``[N, n]`` or their :class:`InputMoments`."""


@dataclass(frozen=True)
class CovarianceSupport:
    """The input covariance ``C = XᵀX/N`` split into what the data sees and what it cannot.

    Attributes:
        covariance: ``[n, n]`` ``C``.
        eigenvalues: ``[n]`` ascending (``torch.linalg.eigh``), round-off negatives included.
        support_tol: the absolute eigenvalue cut-off used: kept iff ``λ > support_tol``.
        visible: ``[n, k]`` orthonormal eigenvectors with ``λ > support_tol`` (the support).
        invisible: ``[n, n − k]`` orthonormal eigenvectors with ``λ ≤ support_tol``: input
            directions the sampled loss cannot see (any ``N0`` with rows in their span has
            ``N0 C^{1/2} = 0`` and changes no sampled output).
        sqrt: ``[n, n]`` ``C^{1/2} = Q_+ Λ_+^{1/2} Q_+ᵀ`` on the support.
        pinv_sqrt: ``[n, n]`` ``C^{†/2} = Q_+ Λ_+^{−1/2} Q_+ᵀ`` (Moore–Penrose).
        backend: the eigendecomposition routine, ``"torch.linalg.eigh"``.
    """

    covariance: torch.Tensor
    eigenvalues: torch.Tensor
    support_tol: float
    visible: torch.Tensor
    invisible: torch.Tensor
    sqrt: torch.Tensor
    pinv_sqrt: torch.Tensor
    backend: str = "torch.linalg.eigh"

    @property
    def rank(self) -> int:
        """``k``, the number of kept directions (the covariance support rank)."""
        return self.visible.shape[1]


def covariance_support(
    X: Inputs,
    *,
    support_tol: float | None = None,
    computed_in: torch.dtype | None = None,
) -> CovarianceSupport:
    """Covariance of sampled inputs, its support, ``C^{1/2}`` and ``C^{†/2}``, by ``eigh``.

    Eigen-directions with ``λ ≤ support_tol`` are dropped — not floored, not damped, no
    Cholesky — so ``C^{1/2}`` and ``C^{†/2}`` live on the support and the rest is reported as
    ``invisible``.

    Args:
        X: ``[N, n]`` real floating tensor, ``N ≥ 1`` sampled inputs (rows) of the layer, or
            their :class:`InputMoments`.
        support_tol: absolute cut-off ``≥ 0`` on the eigenvalues of ``C`` (squared input
            units). Distinct from any rank tolerance on singular values of an update.
            Default ``max(λ_max, 0)·n·eps(computed_in)``; with it an all-zero ``X`` has an
            empty support.
        computed_in: dtype ``X`` was produced in (default ``X``'s dtype); sets the default.

    Returns:
        ``CovarianceSupport``, tensors in ``X``'s dtype.

    Raises:
        TypeError: ``X`` is not a tensor.
        ValueError: ``X`` not ``[N, n]`` with ``N ≥ 1``, non-floating or non-finite;
            ``support_tol < 0``; ``computed_in`` not a floating dtype.

    Source:
        seed 003 §0x04E (``C_X = XᵀX/N``), §0x04G (support ``Q_+ Λ_+ Q_+ᵀ``, pseudo-inverse,
        the invisible null space), §0x04K (``eigh``, ``keep = eigenvalues > covariance_tol``).
    """
    func = "covariance_support"
    X = check_inputs(X, func)
    N, n = X.shape
    C = X.covariance if isinstance(X, InputMoments) else X.mT @ X / N  # [n, n]
    C = 0.5 * (C + C.mT)
    lam, Q = torch.linalg.eigh(C)  # [n] ascending, [n, n]
    if support_tol is None:
        eps = torch.finfo(check_dtype(computed_in or X.dtype, func)).eps
        support_tol = max(float(lam[-1]) if n else 0.0, 0.0) * n * eps
    else:
        support_tol = check_nonnegative(support_tol, func, "support_tol")
    keep = lam > support_tol
    visible, root = Q[:, keep], lam[keep].sqrt()  # [n, k], [k]
    return CovarianceSupport(
        covariance=C,
        eigenvalues=lam,
        support_tol=support_tol,
        visible=visible,
        invisible=Q[:, ~keep],
        sqrt=(visible * root) @ visible.mT,
        pinv_sqrt=(visible / root) @ visible.mT,
    )


@dataclass(frozen=True)
class OutputResidual:
    """The sampled output residual of replacing ``ΔW`` by ``ΔŴ``, computed two ways.

    Attributes:
        raw: ``‖X Rᵀ‖_F²`` with ``R = ΔW − ΔŴ``, from the layer outputs directly.
        direct: ``raw / N``, the mean output residual.
        traced: ``tr(R C Rᵀ)``, the same quantity through the covariance (§0x04E).
        n_samples: ``N``.
        agree: ``|direct − traced| ≤ √eps·(‖XΔWᵀ‖_F² + ‖XΔŴᵀ‖_F²)/N`` in the inputs' dtype
            (``True`` for :class:`InputMoments`, where only the trace can be taken and
            ``direct = traced``).
    """

    raw: float
    direct: float
    traced: float
    n_samples: int
    agree: bool


def output_residual(delta: object, delta_hat: object, X: Inputs) -> OutputResidual:
    """Mean squared change of a linear layer's outputs, ``(1/N)‖X (ΔW − ΔŴ)ᵀ‖_F²``.

    Computed directly from the outputs and through ``tr(R C Rᵀ)``, both recorded. When both
    updates are factors nothing ``[m, n]`` is formed: the outputs are ``s (X Aᵀ) Bᵀ`` and the
    trace is ``⟨B_catᵀ B_cat, A_cat C A_catᵀ⟩`` with ``R = B_cat A_cat``.

    Args:
        delta, delta_hat: each a dense ``[m, n]`` tensor or factors ``(B, A[, scale])``,
            same ``(m, n)`` and dtype; not batched.
        X: ``[N, n]`` sampled inputs (rows), ``delta``'s dtype, ``N ≥ 1``; or their
            :class:`InputMoments` (then only the trace is taken: ``direct = traced``).

    Returns:
        ``OutputResidual``.

    Raises:
        TypeError, ValueError: bad or mismatched shapes or dtypes, non-finite entries.

    Source:
        seed 003 §0x04E (``L_X = (1/N)‖X Rᵀ‖_F² = tr(R C_X Rᵀ)``), §0x04K (``assert_close``).
    """
    func = "output_residual"
    first = unbatched(as_update(delta, func, "delta"), func)
    second = unbatched(as_update(delta_hat, func, "delta_hat"), func)
    if second.shape != first.shape or second.dtype != first.dtype:
        raise ValueError(
            f"{func}: delta_hat must match delta's shape {first.shape} and dtype "
            f"{first.dtype}, got {second.shape} and {second.dtype}"
        )
    X = check_inputs(X, func, first)
    N = X.shape[0]
    streamed = isinstance(X, InputMoments)
    C = X.covariance if streamed else X.mT @ X / N  # [n, n]
    if first.dense is None and second.dense is None:
        B_cat = torch.cat([scaled(first.B, first.scale), -scaled(second.B, second.scale)], 1)
        A_cat = torch.cat([first.A, second.A], 0)  # [r1 + r2, n]
        traced = ((B_cat.mT @ B_cat) * (A_cat @ C @ A_cat.mT)).sum()
    else:
        R = first.to_dense() - second.to_dense()  # [m, n]
        traced = ((R @ C) * R).sum()
    if streamed:
        return OutputResidual(float(traced) * N, float(traced), float(traced), N, True)
    Y, Y_hat = first.apply(X), second.apply(X)  # [N, m] each
    raw = ((Y - Y_hat) ** 2).sum()
    reference = float((Y**2).sum() + (Y_hat**2).sum()) / N
    direct, traced = float(raw) / N, float(traced)
    agree = abs(direct - traced) <= math.sqrt(torch.finfo(X.dtype).eps) * reference
    return OutputResidual(float(raw), direct, traced, N, agree)


def check_inputs(X: object, func: str, update: Update | None = None) -> Inputs:
    """Raise unless ``X`` is finite float32/float64 ``[N, n]``, ``N >= 1``, matching ``update``
    (or :class:`InputMoments` of such rows: an ``[n, n]`` Gram matrix of ``N >= 1`` rows)."""
    if isinstance(X, InputMoments):
        gram = X.gram
        if gram.ndim != 2 or gram.shape[0] != gram.shape[1] or X.count < 1:
            raise ValueError(f"{func}: X's Gram matrix must be [n, n] over N >= 1 rows, got "
                             f"shape {tuple(gram.shape)} and N = {X.count}")  # fmt: skip
        check_inputs(gram, func, update)  # dtype, finiteness and width as for rows
        return X
    if not isinstance(X, torch.Tensor):
        raise TypeError(f"{func}: X must be a torch.Tensor, got {type(X).__name__}")
    if X.ndim != 2 or X.shape[0] < 1 or not X.is_floating_point():
        raise ValueError(
            f"{func}: X must be a real floating [N, n] tensor with N >= 1, got shape "
            f"{tuple(X.shape)} and dtype {X.dtype}"
        )
    if X.dtype not in (torch.float32, torch.float64):
        raise ValueError(
            f"{func}: X must be float32 or float64 (eigh has no half-precision kernel), got "
            f"{X.dtype}; cast it explicitly"
        )
    if not bool(torch.isfinite(X).all()):
        raise ValueError(f"{func}: X contains NaN or infinite entries")
    if update is not None and (X.shape[1] != update.shape[1] or X.dtype != update.dtype):
        raise ValueError(
            f"{func}: X must be [N, {update.shape[1]}] in {update.dtype} to match delta "
            f"{update.shape}, got shape {tuple(X.shape)} and dtype {X.dtype}"
        )
    return X
