"""Low-rank matrix sensing: recover a planted rank-r matrix from Gaussian linear measurements.

The functional core is :func:`make_sensing` (one :class:`SensingInstance`: ``A``, ``y`` and
the target, drawn in the reference order) and :func:`factor_init` (small random factors);
:class:`MatrixSensing` is the full task of docs/protocols.md §3 built on them, with the metrics
(recovery error, effective rank, balancedness).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from gaugelab.tasks.measures import balancedness, effective_rank

DTYPES = (torch.float32, torch.float64)


def _check_int(value: object, func: str, arg: str, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{func}: {arg}={value!r}; allowed: an integer >= {low}")
    return value


def _check_dtype(dtype: object, func: str) -> torch.dtype:
    if dtype not in DTYPES:
        raise ValueError(f"{func}: dtype={dtype!r}; allowed: torch.float32, torch.float64")
    return dtype  # type: ignore[return-value]


def _check_tail(tail: object, func: str) -> float:
    if (
        isinstance(tail, bool)
        or not isinstance(tail, int | float)
        or not math.isfinite(tail)
        or not 0 <= tail < 1
    ):
        raise ValueError(f"{func}: tail={tail!r}; allowed: a number in [0, 1)")
    return float(tail)


@dataclass(frozen=True, eq=False)
class SensingInstance:
    """One sensing instance: measurements of a target matrix, and how the target was built.

    Attributes:
        A: ``[m, n1·n2]`` Gaussian measurement matrix (dense, unscaled, row-major ``vec``).
        y: ``[m]`` measurements ``A vec(target)``.
        target: ``[n1, n2]`` the measured matrix: ``X*`` when ``tail = 0``, else
            ``√(1−τ²) X* + τ E``.
        planted: ``[n1, n2]`` the planted low-rank matrix ``X* = U* V*ᵀ``.
        u_star: ``[n1, r]`` planted left factor ``U*``; ``v_star``: ``[n2, r]`` ``V*``.
        residual: ``[n1, n2]`` the spectral tail ``E`` (orthogonal to the column spaces of
            ``U*`` and ``V*``, ``‖E‖_F = ‖X*‖_F``), or ``None`` when ``tail = 0``.
        tail: τ ∈ [0, 1).

    All tensors share one dtype (float32 or float64).
    """

    A: torch.Tensor
    y: torch.Tensor
    target: torch.Tensor
    planted: torch.Tensor | None = None
    u_star: torch.Tensor | None = None
    v_star: torch.Tensor | None = None
    residual: torch.Tensor | None = None
    tail: float = 0.0

    def loss(self, W: torch.Tensor) -> torch.Tensor:
        """Mean squared residual ``mean_i (⟨A_i, W⟩ − y_i)²``.

        Args:
            W: ``[..., n1, n2]`` in the instance's dtype; leading dims are ensemble members.

        Returns:
            ``[...]`` loss per member.

        Source: docs/protocols.md §3 (the sensing loss).
        """
        residual = W.flatten(-2) @ self.A.mT - self.y  # [..., m]
        return (residual * residual).mean(dim=-1)

    def recovery_error(self, W: torch.Tensor) -> torch.Tensor:
        """Relative Frobenius distance ``‖W − target‖_F / ‖target‖_F``.

        Args:
            W: ``[..., n1, n2]``; leading dims are ensemble members.

        Returns:
            ``[...]`` recovery error per member (relative Frobenius distance).

        Source: docs/protocols.md §3 (recovery error).
        """
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
    tail: float = 0.0,
) -> SensingInstance:
    """Draw a sensing instance exactly in the reference order.

    With one generator seeded ``seed``: ``U* = randn(n, r)/√r``, ``V* = randn(n2, r)/√r``,
    ``X* = U* V*ᵀ``, ``A = randn(m, n·n2)``, then — only when ``tail > 0`` — a Gaussian
    ``N = randn(n, n2)``. Draws are float32, as in the reference runs, and cast to ``dtype``;
    everything after is formed in ``dtype``. With ``tail = τ > 0`` the residual
    ``E = (I − P_U) N (I − P_V)`` (``P_U``, ``P_V`` the orthogonal projectors onto the column
    spaces of ``U*``, ``V*``) is scaled to ``‖E‖_F = ‖X*‖_F`` and the target is
    ``√(1−τ²) X* + τ E``, so ``‖target‖_F = ‖X*‖_F``. Finally ``y = A vec(target)``
    (row-major). ``tail = 0`` gives the plain instance bit for bit.

    Args:
        n: rows of ``X*`` (and columns unless ``n2`` is given), ≥ 1.
        rank: planted rank r, 1 ≤ r ≤ min(n, n2) (r < min(n, n2) when ``tail > 0``).
        measurements: m ≥ 1.
        seed: generator seed.
        n2: columns of ``X*`` (default ``n``).
        dtype: ``torch.float32`` or ``torch.float64``.
        tail: spectral-tail weight τ ∈ [0, 1).

    Returns:
        A :class:`SensingInstance` (``A`` ``[m, n·n2]``, ``y`` ``[m]``, ``target``
        ``[n, n2]``) in ``dtype``.

    Raises:
        ValueError: a size out of range, ``dtype`` not float32/float64, ``tail`` outside
            ``[0, 1)``, or ``tail > 0`` with ``rank = min(n, n2)`` (no room for a tail).

    Source: singh2026lossbasis, §5 (matrix-sensing testbed); docs/protocols.md §3.
    """
    n2 = n if n2 is None else n2
    for name, value in (("n", n), ("n2", n2), ("measurements", measurements), ("rank", rank)):
        _check_int(value, "make_sensing", name)
    if rank > min(n, n2):
        raise ValueError(f"make_sensing: rank={rank} exceeds min(n, n2)={min(n, n2)}")
    _check_dtype(dtype, "make_sensing")
    tail = _check_tail(tail, "make_sensing")
    if tail > 0 and rank == min(n, n2):
        raise ValueError(
            f"make_sensing: tail={tail} needs rank < min(n, n2); got rank={rank}, "
            f"min(n, n2)={min(n, n2)}"
        )
    g = torch.Generator().manual_seed(seed)
    u_star = torch.randn(n, rank, generator=g).to(dtype) / rank**0.5
    v_star = torch.randn(n2, rank, generator=g).to(dtype) / rank**0.5
    planted = u_star @ v_star.T
    A = torch.randn(measurements, n * n2, generator=g).to(dtype)
    target, residual = planted, None
    if tail > 0:
        noise = torch.randn(n, n2, generator=g).to(dtype)
        residual = _orthogonal_residual(noise, u_star, v_star)
        residual = residual * (
            torch.linalg.matrix_norm(planted) / torch.linalg.matrix_norm(residual)
        )
        target = math.sqrt(1 - tail * tail) * planted + tail * residual
    y = A @ target.reshape(-1)
    return SensingInstance(
        A=A,
        y=y,
        target=target,
        planted=planted,
        u_star=u_star,
        v_star=v_star,
        residual=residual,
        tail=tail,
    )


def _orthogonal_residual(N: torch.Tensor, U: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
    """``(I − P_U) N (I − P_V)`` for ``N`` ``[n1, n2]``, ``U`` ``[n1, r]``, ``V`` ``[n2, r]``."""
    Qu = torch.linalg.qr(U).Q  # [n1, r]
    Qv = torch.linalg.qr(V).Q  # [n2, r]
    E = N - Qu @ (Qu.T @ N)
    return E - (E @ Qv) @ Qv.T


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

    Drawn (float32, then cast) from a generator seeded ``seed``, ``U`` first; the reference
    protocol uses ``seed + 7`` for the factors of sensing seed ``seed``.

    Args:
        n: rows of ``U``; k: factor width; n2: rows of ``V`` (default ``n``).
        seed: generator seed.
        scale: multiplies the standard normal draws.
        dtype: dtype of the returned factors.

    Returns:
        ``(U, V)``: ``[n, k]`` and ``[n2, k]`` in ``dtype``.

    Source: docs/protocols.md §3.
    """
    n2 = n if n2 is None else n2
    g = torch.Generator().manual_seed(seed)
    U = scale * torch.randn(n, k, generator=g).to(dtype)
    V = scale * torch.randn(n2, k, generator=g).to(dtype)
    return U, V


class MatrixSensing:
    """The matrix-sensing testbed: a planted rank-r ``n × n`` matrix, Gaussian measurements,
    and small factors ``U, V ∈ ℝ^{n×k}`` to fit ``U Vᵀ`` to it.

    The instance is :func:`make_sensing` with ``(n, rank, m, seed, tail)``; the factors are
    :func:`factor_init` with seed ``seed + 7`` and scale ``init_scale``. Defaults are the
    reference zoo setting (n = 40, r = 3, k = 40, m = 462, seeds 42 / 123 / 456).

    Args:
        n: matrix size, ≥ 1.
        rank: planted rank r, ``1 ≤ r ≤ n``.
        k: factor width (default ``n``), ≥ 1.
        m: measurements (default ``2·r(2n − r)``: 462 for n = 40, r = 3; 1150 for n = 60,
            r = 5), ≥ 1.
        init_scale: factor scale, a finite number > 0.
        seed: instance seed (factors use ``seed + 7``).
        tail: spectral-tail weight τ ∈ [0, 1); τ > 0 needs ``rank < n``.
        dtype: ``torch.float32`` (default, as the reference runs) or ``torch.float64``.

    Attributes:
        n, rank, k, m, init_scale, seed, tail, dtype: the arguments (defaults resolved).
        instance: the :class:`SensingInstance`.
        A: ``[m, n²]``; y: ``[m]``; target: ``[n, n]`` (the measured matrix); planted:
            ``[n, n]`` ``X*``; u_star, v_star: ``[n, r]``; residual: ``[n, n]`` or ``None``.

    Raises:
        ValueError: ``n``, ``rank``, ``k``, ``m`` out of range; ``init_scale`` not > 0;
            ``seed`` not an integer; ``tail`` outside ``[0, 1)`` (or > 0 with ``rank = n``);
            ``dtype`` not float32/float64.

    Source: singh2026lossbasis, §5 (matrix-sensing testbed); docs/protocols.md §3.
    """

    def __init__(
        self,
        n: int = 40,
        rank: int = 3,
        k: int | None = None,
        m: int | None = None,
        init_scale: float = 1e-3,
        seed: int = 42,
        tail: float = 0.0,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        name = "MatrixSensing"
        _check_int(n, name, "n")
        _check_int(rank, name, "rank")
        if rank > n:
            raise ValueError(f"{name}: rank={rank}; allowed: 1 <= rank <= n={n}")
        k = n if k is None else _check_int(k, name, "k")
        m = 2 * rank * (2 * n - rank) if m is None else _check_int(m, name, "m")
        if (
            isinstance(init_scale, bool)
            or not isinstance(init_scale, int | float)
            or not math.isfinite(init_scale)
            or init_scale <= 0
        ):
            raise ValueError(f"{name}: init_scale={init_scale!r}; allowed: a finite number > 0")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"{name}: seed={seed!r}; allowed: an integer")
        tail = _check_tail(tail, name)
        if tail > 0 and rank == n:
            raise ValueError(f"{name}: tail={tail} needs rank < n; got rank={rank}, n={n}")
        _check_dtype(dtype, name)
        self.n, self.rank, self.k, self.m = n, rank, k, m
        self.init_scale, self.seed, self.tail, self.dtype = float(init_scale), seed, tail, dtype
        self.instance = make_sensing(n, rank, m, seed=seed, dtype=dtype, tail=tail)

    @property
    def A(self) -> torch.Tensor:
        """``[m, n²]`` measurement matrix."""
        return self.instance.A

    @property
    def y(self) -> torch.Tensor:
        """``[m]`` measurements ``A vec(target)``."""
        return self.instance.y

    @property
    def target(self) -> torch.Tensor:
        """``[n, n]`` the measured matrix (``X*`` when ``tail = 0``)."""
        return self.instance.target

    @property
    def planted(self) -> torch.Tensor:
        """``[n, n]`` the planted rank-r matrix ``X* = U* V*ᵀ``."""
        return self.instance.planted

    @property
    def u_star(self) -> torch.Tensor:
        """``[n, r]`` planted left factor."""
        return self.instance.u_star

    @property
    def v_star(self) -> torch.Tensor:
        """``[n, r]`` planted right factor."""
        return self.instance.v_star

    @property
    def residual(self) -> torch.Tensor | None:
        """``[n, n]`` spectral tail ``E`` (``‖E‖_F = ‖X*‖_F``), ``None`` when ``tail = 0``."""
        return self.instance.residual

    def init_factors(self, dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The reference initial factors ``U, V = init_scale · randn(n, k)`` (seed ``seed + 7``).

        Args:
            dtype: dtype of the factors (default: the task's).

        Returns:
            ``(U, V)``, both ``[n, k]``, fresh tensors without ``requires_grad``.

        Raises:
            ValueError: ``dtype`` not float32/float64.

        Source: docs/protocols.md §3.
        """
        dtype = self.dtype if dtype is None else _check_dtype(dtype, "MatrixSensing.init_factors")
        return factor_init(self.n, self.k, seed=self.seed + 7, scale=self.init_scale, dtype=dtype)

    def loss(self, W: torch.Tensor) -> torch.Tensor:
        """Mean over measurements of ``(⟨A_i, W⟩ − y_i)²``; ``W`` ``[..., n, n]`` → ``[...]``.

        Source: docs/protocols.md §3.
        """
        return self.instance.loss(W)

    def recovery_error(self, W: torch.Tensor) -> torch.Tensor:
        """``‖W − target‖_F / ‖target‖_F``; ``W`` ``[..., n, n]`` → ``[...]``.

        Source: docs/protocols.md §3 (recovery error).
        """
        return self.instance.recovery_error(W)

    def effective_rank(self, W: torch.Tensor, *, convention: str = "energy") -> torch.Tensor:
        """Effective rank of ``W`` ``[..., n, n]`` → ``[...]`` in the named ``convention``
        (``"energy"`` or ``"roy_vetterli"``, the sensing experiments' metric; see
        :func:`effective_rank`).

        Source: seed 003 §0x04J; roy2007effective; docs/protocols.md §3.
        """
        return effective_rank(W, convention=convention)

    def balancedness(self, U: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
        """``‖UᵀU − VᵀV‖_F`` for ``U``, ``V`` ``[..., n, k]`` → ``[...]`` (see
        :func:`balancedness`).

        Source: docs/protocols.md §3.
        """
        return balancedness(U, V)

    def __repr__(self) -> str:
        return (
            f"MatrixSensing(n={self.n}, rank={self.rank}, k={self.k}, m={self.m}, "
            f"init_scale={self.init_scale}, seed={self.seed}, tail={self.tail}, "
            f"dtype={self.dtype})"
        )
