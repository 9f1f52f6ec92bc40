"""Fixed random projections ``P: ℝ^d → ℝ^D`` with exact adjoints: one interface, four families.

Every projection has ``forward(u)`` (``P u``), ``adjoint(g)`` (``Pᵀ g``), ``apply(u)`` (``P u``
differentiable in ``u``, its backward the adjoint) and an :class:`ProjectionIdentity` (family,
``D``, ``d``, seed, normalization, dtype). The families here: dense Gaussian with unit-norm
columns (Li et al.), exactly orthonormal columns (QR), Gaussian without normalization, very sparse
random, and a given matrix; Fastfood lives in :mod:`gaugelab.lowrank.intrinsic.fastfood`.

Source: seed 003 §0x02A (the reparameterization and the adjoint identity), §0x02B (projectors),
§0x02C (the families); li2018intrinsic; li2006verysparse.
"""

from __future__ import annotations

import abc
import math
from dataclasses import asdict, dataclass
from typing import Any

import torch

__all__ = [
    "DenseProjection",
    "MatrixProjection",
    "Projection",
    "ProjectionIdentity",
    "SparseProjection",
    "check_dims",
]


@dataclass(frozen=True)
class ProjectionIdentity:
    """What fixes a projection: two with equal identities are the same map, bit for bit.

    Attributes:
        family: ``dense``, ``orthonormal``, ``sparse``, ``fastfood`` or ``given``.
        ambient_dim: ``D``, the parameters the map writes.
        subspace_dim: ``d``, the coordinates it reads.
        seed: the seed of its random state (``None`` for a given matrix or state).
        normalization: how its columns are scaled (family-specific, e.g. ``unit-columns``,
            ``qr``, ``1/p``).
        dtype: the dtype it computes in.
    """

    family: str
    ambient_dim: int
    subspace_dim: int
    seed: int | None
    normalization: str
    dtype: str

    def as_dict(self) -> dict[str, Any]:
        """The fields as a JSON-able mapping."""
        return asdict(self)


def check_dims(where: str, ambient_dim: Any, subspace_dim: Any) -> tuple[int, int]:
    """``(D, d)`` checked: integers with ``1 <= d <= D``.

    Raises:
        ValueError: otherwise, naming the argument and the value.
    """
    for name, value in (("ambient_dim", ambient_dim), ("subspace_dim", subspace_dim)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{where}: {name}={value!r}; allowed: an integer >= 1")
    if subspace_dim > ambient_dim:
        raise ValueError(
            f"{where}: subspace_dim={subspace_dim} > ambient_dim={ambient_dim}; allowed: "
            "1 <= subspace_dim <= ambient_dim"
        )
    return ambient_dim, subspace_dim


class _Apply(torch.autograd.Function):
    @staticmethod
    def forward(ctx, u: torch.Tensor, projection: Projection) -> torch.Tensor:  # type: ignore[override]
        ctx.projection = projection
        with torch.no_grad():
            return projection.forward(u)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        return ctx.projection.adjoint(grad), None


class Projection(abc.ABC):
    """A fixed linear map ``P: ℝ^d → ℝ^D`` (``D = ambient_dim``, ``d = subspace_dim``).

    Subclasses implement :meth:`forward` and :meth:`adjoint`; both accept leading batch
    dimensions and compute in :attr:`dtype` (inputs of another dtype raise, nothing is cast
    silently).
    """

    identity: ProjectionIdentity

    @property
    def ambient_dim(self) -> int:
        """``D``."""
        return self.identity.ambient_dim

    @property
    def subspace_dim(self) -> int:
        """``d``."""
        return self.identity.subspace_dim

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the map's state and arithmetic."""
        return getattr(torch, self.identity.dtype)

    def _check(self, x: torch.Tensor, size: int, what: str, where: str) -> None:
        if x.dim() == 0 or x.shape[-1] != size:
            raise ValueError(
                f"{type(self).__name__}.{where}: {what} has shape {tuple(x.shape)}; allowed: "
                f"[..., {size}]"
            )
        if x.dtype != self.dtype:
            raise ValueError(
                f"{type(self).__name__}.{where}: {what} has dtype {x.dtype}; allowed: "
                f"{self.dtype} (the projection's dtype)"
            )

    @abc.abstractmethod
    def forward(self, u: torch.Tensor) -> torch.Tensor:
        """``P u``: ``[..., d]`` → ``[..., D]``."""

    @abc.abstractmethod
    def adjoint(self, g: torch.Tensor) -> torch.Tensor:
        """``Pᵀ g``: ``[..., D]`` → ``[..., d]``."""

    def apply(self, u: torch.Tensor) -> torch.Tensor:
        """``P u``, differentiable in ``u``: the backward is :meth:`adjoint` (never autograd
        through the forward's internals), so training uses exactly the adjoint tested."""
        return _Apply.apply(u, self)

    def matrix(self) -> torch.Tensor:
        """``[D, d]`` the map materialized column by column (``P e_j``); small maps only."""
        eye = torch.eye(self.subspace_dim, dtype=self.dtype)
        return self.forward(eye).T.contiguous()

    def state_bytes(self) -> int:
        """Bytes of the tensors that define the map (what a checkpoint would hold)."""
        return sum(t.numel() * t.element_size() for t in self._state())

    @abc.abstractmethod
    def _state(self) -> list[torch.Tensor]:
        """The tensors that define the map."""


def _random_map(
    where: str, D: Any, d: Any, seed: Any, dtype: Any
) -> tuple[int, int, torch.Generator]:
    """``(D, d, generator)`` of a random projection, its dims, seed and dtype checked in order."""
    D, d = check_dims(where, D, d)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"{where}: seed={seed!r}; allowed: an integer >= 0")
    _float_dtype(dtype, where)
    return D, d, torch.Generator().manual_seed(seed)


def _float_dtype(dtype: Any, where: str) -> torch.dtype:
    if dtype not in (torch.float32, torch.float64):
        raise ValueError(f"{where}: dtype={dtype!r}; allowed: torch.float32, torch.float64")
    return dtype


class MatrixProjection(Projection):
    """A given ``[D, d]`` matrix ``M`` as a projection (family ``given`` unless stated).

    Args:
        matrix: ``[D, d]`` float32/float64 tensor with ``d <= D`` (copied).
        family, seed, normalization: the identity's fields (for the dense families).
        copy: copy ``matrix`` (default); ``False`` takes it over (it must not change later).

    Raises:
        ValueError: not a floating-point matrix with ``1 <= d <= D``, or non-finite entries.
    """

    def __init__(
        self,
        matrix: torch.Tensor,
        *,
        family: str = "given",
        seed: int | None = None,
        normalization: str = "none",
        copy: bool = True,
    ) -> None:
        if matrix.dim() != 2:
            raise ValueError(
                f"MatrixProjection: matrix has shape {tuple(matrix.shape)}; allowed: [D, d]"
            )
        _float_dtype(matrix.dtype, "MatrixProjection")
        D, d = check_dims("MatrixProjection", int(matrix.shape[0]), int(matrix.shape[1]))
        if not bool(torch.isfinite(matrix).all()):
            raise ValueError("MatrixProjection: matrix has non-finite entries")
        self.M = matrix.detach().clone() if copy else matrix.detach()
        dtype = str(matrix.dtype).removeprefix("torch.")
        self.identity = ProjectionIdentity(family, D, d, seed, normalization, dtype)

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        self._check(u, self.subspace_dim, "u", "forward")
        return u @ self.M.T

    def adjoint(self, g: torch.Tensor) -> torch.Tensor:
        self._check(g, self.ambient_dim, "g", "adjoint")
        return g @ self.M

    def matrix(self) -> torch.Tensor:
        return self.M.clone()

    def _state(self) -> list[torch.Tensor]:
        return [self.M]


DENSE_NORMALIZATIONS = ("unit-columns", "qr", "none")
"""``unit-columns``: Gaussian columns scaled to norm one (li2018intrinsic); ``qr``: the
orthonormal ``Q`` of the Gaussian matrix, signs fixed so ``diag(R) > 0`` (``MᵀM = I``);
``none``: entries ``N(0, 1/D)`` (columns of norm one in expectation only)."""


class DenseProjection(MatrixProjection):
    """A dense random ``[D, d]`` matrix, drawn once from ``seed``.

    Args:
        ambient_dim, subspace_dim: ``D`` and ``d`` (``1 <= d <= D``).
        seed: seed of the Gaussian draw (its own ``torch.Generator``; global RNG untouched).
        normalization: one of :data:`DENSE_NORMALIZATIONS`; ``qr`` is the exactly orthonormal
            family (identity family ``orthonormal``), the others family ``dense``.
        dtype: ``torch.float32`` or ``torch.float64`` (the draw is made in this dtype).

    Raises:
        ValueError: bad dimensions, seed, normalization or dtype.

    Source: li2018intrinsic (dense Gaussian, normalized columns); seed 003 §0x02B–C.
    """

    def __init__(
        self,
        ambient_dim: int,
        subspace_dim: int,
        seed: int,
        *,
        normalization: str = "unit-columns",
        dtype: torch.dtype = torch.float32,
    ) -> None:
        D, d, gen = _random_map("DenseProjection", ambient_dim, subspace_dim, seed, dtype)
        if normalization not in DENSE_NORMALIZATIONS:
            raise ValueError(
                f"DenseProjection: normalization={normalization!r}; allowed: "
                f"{', '.join(DENSE_NORMALIZATIONS)}"
            )
        M = torch.randn(D, d, generator=gen, dtype=dtype)
        if normalization == "unit-columns":
            M /= torch.linalg.vector_norm(M, dim=0)
        elif normalization == "qr":
            Q, R = torch.linalg.qr(M)
            M = Q * torch.where(torch.diagonal(R) < 0, -1.0, 1.0).to(dtype)
        else:
            M /= math.sqrt(D)
        family = "orthonormal" if normalization == "qr" else "dense"
        super().__init__(M, family=family, seed=seed, normalization=normalization, copy=False)


SPARSE_NORMALIZATIONS = ("unit-columns", "expected-unit")
"""``unit-columns``: each column scaled to norm one exactly; ``expected-unit``: entries
``±√(s/D)`` (columns of norm one in expectation)."""


class SparseProjection(Projection):
    """A very sparse random ``[D, d]`` matrix: each entry is nonzero with probability ``1/s``
    (default ``s = √D``), with a random sign.

    Stored as its nonzeros (row, column, value); applied with ``index_add`` in both
    directions. Per column the count of nonzeros is drawn ``Binomial(D, 1/s)`` (at least one),
    its rows uniformly with replacement and repeats dropped.

    Args:
        ambient_dim, subspace_dim: ``D`` and ``d``.
        seed: seed of the draw.
        density: ``1/s`` (default ``1/√D``), in ``(0, 1]``.
        normalization: one of :data:`SPARSE_NORMALIZATIONS`.
        dtype: ``torch.float32`` or ``torch.float64``.

    Raises:
        ValueError: bad dimensions, seed, density, normalization or dtype.

    Source: li2006verysparse; li2018intrinsic (the sparse family); seed 003 §0x02C.
    """

    def __init__(
        self,
        ambient_dim: int,
        subspace_dim: int,
        seed: int,
        *,
        density: float | None = None,
        normalization: str = "unit-columns",
        dtype: torch.dtype = torch.float32,
    ) -> None:
        D, d, gen = _random_map("SparseProjection", ambient_dim, subspace_dim, seed, dtype)
        density = 1.0 / math.sqrt(D) if density is None else density
        if not (isinstance(density, float | int) and 0 < density <= 1):
            raise ValueError(f"SparseProjection: density={density!r}; allowed: 0 < density <= 1")
        if normalization not in SPARSE_NORMALIZATIONS:
            raise ValueError(
                f"SparseProjection: normalization={normalization!r}; allowed: "
                f"{', '.join(SPARSE_NORMALIZATIONS)}"
            )
        counts = (
            torch.binomial(
                torch.full((d,), float(D)), torch.full((d,), float(density)), generator=gen
            )
            .long()
            .clamp_(min=1)
        )
        rows, cols = [], []
        for j, k in enumerate(counts.tolist()):
            r = torch.unique(torch.randint(0, D, (k,), generator=gen))
            rows.append(r)
            cols.append(torch.full_like(r, j))
        self.rows, self.cols = torch.cat(rows), torch.cat(cols)
        signs = torch.randint(0, 2, (self.rows.numel(),), generator=gen).to(dtype) * 2 - 1
        if normalization == "unit-columns":
            per_column = torch.zeros(d, dtype=dtype).index_add_(0, self.cols, signs**2)
            self.values = signs / per_column.sqrt()[self.cols]
        else:
            self.values = signs * math.sqrt(1.0 / (density * D))
        name = f"{normalization}, density {density:.6g}"
        self.identity = ProjectionIdentity(
            "sparse", D, d, seed, name, str(dtype).removeprefix("torch.")
        )

    @property
    def nnz(self) -> int:
        """Stored nonzeros."""
        return int(self.values.numel())

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        self._check(u, self.subspace_dim, "u", "forward")
        out = u.new_zeros(*u.shape[:-1], self.ambient_dim)
        return out.index_add_(-1, self.rows, u[..., self.cols] * self.values)

    def adjoint(self, g: torch.Tensor) -> torch.Tensor:
        self._check(g, self.ambient_dim, "g", "adjoint")
        out = g.new_zeros(*g.shape[:-1], self.subspace_dim)
        return out.index_add_(-1, self.cols, g[..., self.rows] * self.values)

    def _state(self) -> list[torch.Tensor]:
        return [self.rows, self.cols, self.values]
