"""Low-rank matrix sensing: recover a planted rank-r matrix from Gaussian linear measurements."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class MatrixSensing:
    """One sensing instance.

    Attributes:
        A: ``[m, n1·n2]`` Gaussian measurement matrix (dense, unscaled, row-major ``vec``).
        y: ``[m]`` measurements ``A vec(X*)``.
        target: ``[n1, n2]`` planted matrix ``X* = U* V*ᵀ``.
    """

    A: torch.Tensor
    y: torch.Tensor
    target: torch.Tensor

    def loss(self, W: torch.Tensor) -> torch.Tensor:
        """Mean squared residual ``mean_i (⟨A_i, W⟩ − y_i)²`` for ``W`` ``[..., n1, n2]``.

        Leading dims are ensemble members; returns ``[...]``.
        """
        residual = W.flatten(-2) @ self.A.mT - self.y
        return (residual * residual).mean(dim=-1)

    def recovery_error(self, W: torch.Tensor) -> torch.Tensor:
        """``‖W − X*‖_F / ‖X*‖_F`` for ``W`` ``[..., n1, n2]``; returns ``[...]``."""
        diff = torch.linalg.matrix_norm(W - self.target)
        return diff / torch.linalg.matrix_norm(self.target)


def make_sensing(
    n: int,
    rank: int,
    measurements: int,
    *,
    seed: int,
    n2: int | None = None,
    dtype: torch.dtype = torch.float32,
) -> MatrixSensing:
    """Draw a sensing instance exactly in the reference order.

    With one generator seeded ``seed``: ``U* = randn(n, r)/√r``, ``V* = randn(n2, r)/√r``,
    ``X* = U* V*ᵀ``, ``A = randn(m, n·n2)``, ``y = A vec(X*)`` (row-major). Draws are float32,
    as in the reference runs, and cast to ``dtype``; ``X*`` and ``y`` are then formed in
    ``dtype``.

    Args:
        n: rows of ``X*`` (and columns unless ``n2`` is given), ≥ 1.
        rank: planted rank r, 1 ≤ r ≤ min(n, n2).
        measurements: m ≥ 1.
        seed: generator seed.
        n2: columns of ``X*`` (default ``n``).
        dtype: float32 or float64.

    Raises:
        ValueError: a size out of range.

    Source: singh2026lossbasis, §5 (matrix-sensing testbed); PROTOCOLS §3.
    """
    n2 = n if n2 is None else n2
    for name, value in (("n", n), ("n2", n2), ("measurements", measurements), ("rank", rank)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"make_sensing: {name}={value!r}; allowed: an integer >= 1")
    if rank > min(n, n2):
        raise ValueError(f"make_sensing: rank={rank} exceeds min(n, n2)={min(n, n2)}")
    g = torch.Generator().manual_seed(seed)
    u_star = torch.randn(n, rank, generator=g).to(dtype) / rank**0.5
    v_star = torch.randn(n2, rank, generator=g).to(dtype) / rank**0.5
    target = u_star @ v_star.T
    A = torch.randn(measurements, n * n2, generator=g).to(dtype)
    y = A @ target.reshape(-1)
    return MatrixSensing(A=A, y=y, target=target)


def factor_init(
    n: int,
    k: int,
    *,
    seed: int,
    scale: float,
    n2: int | None = None,
    dtype: torch.dtype = torch.float32,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Small random factors ``U = scale·randn(n, k)``, ``V = scale·randn(n2, k)``.

    Drawn (float32, then cast) from a generator seeded ``seed``; the reference protocol uses
    ``seed + 7`` for the factors of sensing seed ``seed``. Returns ``([n, k], [n2, k])``.

    Source: PROTOCOLS §3.
    """
    n2 = n if n2 is None else n2
    g = torch.Generator().manual_seed(seed)
    U = scale * torch.randn(n, k, generator=g).to(dtype)
    V = scale * torch.randn(n2, k, generator=g).to(dtype)
    return U, V
