"""The executable geometry oracle of seed 003 §0x03I/§0x03L and its single-field mutations.

An implementation of the factor-map geometry is a :class:`GeometryImplementation`: its
flattening orders, its differential, adjoint, gauge directions and projectors. The oracle's
checks (:func:`geometry_checks`) run an implementation on the exact 4×6, r = 2 fixture, on the
lower-rank point ``B = 0`` and on a square non-symmetric point, in exact rational arithmetic.
:data:`REFERENCE` is built from :mod:`gaugelab.lowrank.geometry.factor_map` and passes every check;
each entry of :data:`MUTATIONS` changes one field (the seed's "one-field counterexamples":
transposed flattening, factors swapped, adjoint without transpose, ``B`` in place of ``Bᵀ``,
…) and must fail at least one check. The seed mentions 58 such counterexamples without
listing them; this list is ours.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from gaugelab.linalg.rational import Matrix
from gaugelab.lowrank.geometry import factor_map as geo

__all__ = [
    "CHECKS",
    "MUTATIONS",
    "PROBE_NORMAL",
    "PROBE_TANGENT",
    "REFERENCE",
    "GeometryImplementation",
    "fixture",
    "geometry_checks",
    "rejected_by",
]


def _row_major(X: Matrix) -> tuple:
    return X.flatten()


def _column_major(X: Matrix) -> tuple:
    return X.T.flatten()


@dataclass(frozen=True)
class GeometryImplementation:
    """One implementation of the factor-map geometry, field by field.

    Attributes:
        vec_ambient: ``[m, n]`` matrix → its ambient vector (declared: row-major).
        vec_B, vec_A: a factor perturbation → its entries (declared: row-major each).
        b_first: the factor vector holds ``Ḃ`` before ``Ȧ`` (declared: True).
        differential: ``(B, A, Ḃ, Ȧ) ↦ Dφ``; adjoint: ``(B, A, G) ↦ (G_B, G_A)``.
        gauge: ``(B, A, K) ↦ (Ḃ, Ȧ)``; tangent, normal: ``(Z, U, V) ↦ P(Z)``.
    """

    vec_ambient: Callable[[Matrix], tuple]
    vec_B: Callable[[Matrix], tuple]
    vec_A: Callable[[Matrix], tuple]
    b_first: bool
    differential: Callable[[Matrix, Matrix, Matrix, Matrix], Matrix]
    adjoint: Callable[[Matrix, Matrix, Matrix], tuple[Matrix, Matrix]]
    gauge: Callable[[Matrix, Matrix, Matrix], tuple[Matrix, Matrix]]
    tangent: Callable[[Matrix, Matrix, Matrix], Matrix]
    normal: Callable[[Matrix, Matrix, Matrix], Matrix]

    def factor_vector(self, dB: Matrix, dA: Matrix) -> tuple:
        """The factor vector of ``(Ḃ, Ȧ)`` in this implementation's order."""
        b, a = self.vec_B(dB), self.vec_A(dA)
        return b + a if self.b_first else a + b

    def jacobian(self, B: Matrix, A: Matrix) -> Matrix:
        """``J`` in this implementation's flattening: the column of factor coordinate ``k``
        is ``vec_ambient(Dφ(e_k))``."""
        (m, r), n = B.shape, A.shape[1]
        size = m * r + r * n
        columns: list[tuple | None] = [None] * size
        basis = [(Matrix.unit(m, r, i, j), Matrix.zeros(r, n)) for i in range(m) for j in range(r)]
        basis += [(Matrix.zeros(m, r), Matrix.unit(r, n, i, j)) for i in range(r) for j in range(n)]
        for dB, dA in basis:
            fv = self.factor_vector(dB, dA)
            k = next(i for i, x in enumerate(fv) if x != 0)
            columns[k] = self.vec_ambient(self.differential(B, A, dB, dA))
        return Matrix.from_columns(columns)  # type: ignore[arg-type]

    def gauge_matrix(self, B: Matrix, A: Matrix) -> Matrix:
        """The ``r²`` gauge directions for elementary ``K``, as factor-vector columns."""
        r = B.shape[1]
        cols = [
            self.factor_vector(*self.gauge(B, A, Matrix.unit(r, r, i, j)))
            for i in range(r)
            for j in range(r)
        ]
        return Matrix.from_columns(cols)

    def operator(self, project: Callable[[Matrix], Matrix], m: int, n: int) -> Matrix:
        """A projector as an ``[m n, m n]`` operator in this implementation's flattening."""
        basis = [Matrix.unit(m, n, i, j) for i in range(m) for j in range(n)]
        order = [next(k for k, x in enumerate(self.vec_ambient(E)) if x != 0) for E in basis]
        columns: list[tuple | None] = [None] * (m * n)
        for k, E in zip(order, basis, strict=True):
            columns[k] = self.vec_ambient(project(E))
        return Matrix.from_columns(columns)  # type: ignore[arg-type]


REFERENCE = GeometryImplementation(
    vec_ambient=_row_major,
    vec_B=_row_major,
    vec_A=_row_major,
    b_first=True,
    differential=geo.factor_map_differential,
    adjoint=geo.factor_map_adjoint,
    gauge=lambda B, A, K: (B @ K, -(K @ A)),
    tangent=geo.tangent_project,
    normal=geo.normal_project,
)
"""The declared contract, built from :mod:`gaugelab.lowrank.geometry.factor_map`."""


def _tangent_no_cross(Z: Matrix, U: Matrix, V: Matrix) -> Matrix:
    return U @ U.T @ Z + Z @ V @ V.T


def _tangent_plus_cross(Z: Matrix, U: Matrix, V: Matrix) -> Matrix:
    PU, PV = U @ U.T, V @ V.T
    return PU @ Z + Z @ PV + PU @ Z @ PV


def _normal_one_sided(Z: Matrix, U: Matrix, V: Matrix) -> Matrix:
    return (Matrix.identity(Z.shape[0]) - U @ U.T) @ Z


def _normal_inside(Z: Matrix, U: Matrix, V: Matrix) -> Matrix:
    return U @ U.T @ Z @ V @ V.T


_replace = dataclasses.replace
MUTATIONS: dict[str, tuple[str, GeometryImplementation]] = {
    "ambient-column-major": ("vec(Ẇ) column-major", _replace(REFERENCE, vec_ambient=_column_major)),
    "B-column-major": ("vec(Ḃ) column-major", _replace(REFERENCE, vec_B=_column_major)),
    "A-column-major": ("vec(Ȧ) column-major", _replace(REFERENCE, vec_A=_column_major)),
    "factors-swapped": ("Ȧ coordinates before Ḃ", _replace(REFERENCE, b_first=False)),
    "adjoint-without-transpose": (
        "Dφ*(G) = (G A, Bᵀ G)",
        _replace(REFERENCE, adjoint=lambda B, A, G: (G @ A, B.T @ G)),
    ),
    "B-in-place-of-Bt": (
        "Dφ*(G) = (G Aᵀ, B G)",
        _replace(REFERENCE, adjoint=lambda B, A, G: (G @ A.T, B @ G)),
    ),
    "adjoint-parts-swapped": (
        "Dφ*(G) = (Bᵀ G, G Aᵀ)",
        _replace(REFERENCE, adjoint=lambda B, A, G: (B.T @ G, G @ A.T)),
    ),
    "differential-drops-B-dA": (
        "Dφ = Ḃ A",
        _replace(REFERENCE, differential=lambda B, A, dB, dA: dB @ A),
    ),
    "differential-sign": (
        "Dφ = Ḃ A − B Ȧ",
        _replace(REFERENCE, differential=lambda B, A, dB, dA: dB @ A - B @ dA),
    ),
    "differential-with-remainder": (
        "Dφ = Ḃ A + B Ȧ + Ḃ Ȧ",
        _replace(REFERENCE, differential=lambda B, A, dB, dA: dB @ A + B @ dA + dB @ dA),
    ),
    "gauge-sign": ("gauge (B K, K A)", _replace(REFERENCE, gauge=lambda B, A, K: (B @ K, K @ A))),
    "gauge-transposed-K": (
        "gauge (B K, −Kᵀ A)",
        _replace(REFERENCE, gauge=lambda B, A, K: (B @ K, -(K.T @ A))),
    ),
    "tangent-without-cross-term": (
        "P_T = P_U Z + Z P_V",
        _replace(REFERENCE, tangent=_tangent_no_cross),
    ),
    "tangent-cross-term-added": (
        "P_T = P_U Z + Z P_V + P_U Z P_V",
        _replace(REFERENCE, tangent=_tangent_plus_cross),
    ),
    "normal-one-sided": ("P_N = (I − P_U) Z", _replace(REFERENCE, normal=_normal_one_sided)),
    "normal-inside": ("P_N = P_U Z P_V", _replace(REFERENCE, normal=_normal_inside)),
}
"""Name → (what changed, the mutated implementation); each changes exactly one field."""

PROBE_TANGENT = Matrix(
    [[1, 2, 3, 4, 5, 6], [7, 8, 9, 10, 11, 12], [13, 14, 0, 0, 0, 0], [19, 20, 0, 0, 0, 0]]
)
"""``P_T`` of the probe 1…24: the first two rows and the first two columns of the last two."""
PROBE_NORMAL = Matrix([[0] * 6, [0] * 6, [0, 0, 15, 16, 17, 18], [0, 0, 21, 22, 23, 24]])
"""``P_N`` of the probe: only the lower-right 2×4 block."""


def fixture() -> tuple[Matrix, Matrix, Matrix]:
    """The 4×6, r = 2 fixture of §0x03I: ``B = [I₂; 0]``, ``A = [I₂ 0]``, probe ``1…24``."""
    B = Matrix([[1, 0], [0, 1], [0, 0], [0, 0]])
    A = Matrix([[1, 0, 0, 0, 0, 0], [0, 1, 0, 0, 0, 0]])
    return B, A, Matrix([[6 * i + j + 1 for j in range(6)] for i in range(4)])


_SQUARE = (Matrix([[1, 2], [3, 5]]), Matrix([[2, 1], [-1, 3]]))  # ours: non-symmetric, m = n = r


def _parity(impl: GeometryImplementation, B: Matrix, A: Matrix, G: Matrix) -> bool:
    # ⟨G, Dφ(Ḃ, Ȧ)⟩ = ⟨Dφ*(G), (Ḃ, Ȧ)⟩ for two perturbations, and Jᵀ vec(G) = vec(Dφ*(G))
    (m, r), n = B.shape, A.shape[1]
    perturbations = [
        (
            Matrix([[i + 2 * j + 1 for j in range(r)] for i in range(m)]),
            Matrix([[3 * i - j for j in range(n)] for i in range(r)]),
        ),
        (Matrix.unit(m, r, m - 1, 0), Matrix.unit(r, n, 0, n - 1)),
    ]
    gB, gA = impl.adjoint(B, A, G)
    for dB, dA in perturbations:
        if G.inner(impl.differential(B, A, dB, dA)) != gB.inner(dB) + gA.inner(dA):
            return False
    J = impl.jacobian(B, A)
    return J.T @ Matrix.column(impl.vec_ambient(G)) == Matrix.column(impl.factor_vector(gB, gA))


def _checks() -> dict[str, Callable[[GeometryImplementation], bool]]:
    B, A, Z = fixture()
    U, V = B, A.T  # orthonormal already
    m, n, r = 4, 6, 2
    kron = Matrix.hstack([Matrix.identity(m).kron(A.T), B.kron(Matrix.identity(n))])

    def nonzero_ranks(impl: GeometryImplementation) -> bool:
        J = impl.jacobian(B, A)
        return J.rank() == 16 and J.shape[1] - J.rank() == 4

    def gauge_kernel(impl: GeometryImplementation) -> bool:
        K = impl.gauge_matrix(B, A)
        return (impl.jacobian(B, A) @ K).is_zero() and K.rank() == r * r

    def image_is_tangent(impl: GeometryImplementation) -> bool:
        J = impl.jacobian(B, A)
        images = [Matrix.column(c).reshape(m, n) for c in J.T.rows()]
        return all(impl.tangent(W, U, V) == W for W in images)

    def linear_and_consistent(impl: GeometryImplementation) -> bool:
        dB, dA = (
            Matrix([[1, -1], [2, 0], [0, 3], [1, 1]]),
            Matrix([[1, 0, 2, 0, -1, 1], [0, 1, 0, 3, 1, 0]]),
        )
        direct = impl.differential(B * 2 + Matrix.unit(m, r, 2, 1), A, dB, dA)
        J = impl.jacobian(B * 2 + Matrix.unit(m, r, 2, 1), A)
        return J @ Matrix.column(impl.factor_vector(dB, dA)) == Matrix.column(
            impl.vec_ambient(direct)
        )

    def operators(impl: GeometryImplementation) -> bool:
        PT = impl.operator(lambda X: impl.tangent(X, U, V), m, n)
        PN = impl.operator(lambda X: impl.normal(X, U, V), m, n)
        return PT == PT.T and PT @ PT == PT and PT.rank() == 16 and PN.rank() == 8 and PN @ PN == PN

    def lower_rank(impl: GeometryImplementation) -> bool:
        J = impl.jacobian(Matrix.zeros(m, r), A)
        return J.rank() == m * r and J.shape[1] - J.rank() == 12

    return {
        "jacobian-shape-24x20": lambda impl: impl.jacobian(B, A).shape == (24, 20),
        "jacobian-is-declared-kronecker-form": lambda impl: impl.jacobian(B, A) == kron,
        "jacobian-rank-16-nullity-4": nonzero_ranks,
        "gauge-directions-span-kernel": gauge_kernel,
        "differential-agrees-with-jacobian": linear_and_consistent,
        "image-lies-in-tangent-space": image_is_tangent,
        "adjoint-parity-4x6": lambda impl: _parity(impl, B, A, Z),
        "adjoint-parity-square": lambda impl: _parity(impl, *_SQUARE, Matrix([[1, 4], [-2, 3]])),
        "tangent-probe-as-printed": lambda impl: impl.tangent(Z, U, V) == PROBE_TANGENT,
        "normal-probe-as-printed": lambda impl: impl.normal(Z, U, V) == PROBE_NORMAL,
        "decomposition-sums-to-probe": lambda impl: (
            impl.tangent(Z, U, V) + impl.normal(Z, U, V) == Z
        ),
        "decomposition-orthogonal": lambda impl: (
            impl.tangent(Z, U, V).inner(impl.normal(Z, U, V)) == 0
        ),
        "projector-operators-symmetric-idempotent-ranks": operators,
        "normal-probe-satisfies-BtN-NAt": lambda impl: geo.is_normal(B, A, impl.normal(Z, U, V)),
        "lower-rank-point-rank-8-nullity-12": lower_rank,
    }


CHECKS: tuple[str, ...] = tuple(_checks())
"""The oracle's check names, in the order they run."""


def geometry_checks(impl: GeometryImplementation = REFERENCE) -> dict[str, bool]:
    """Run every oracle check on ``impl``; a check that raises (a shape that no longer fits)
    counts as failed.

    Returns:
        Check name → passed.

    Source: seed 003 §0x03I, §0x03J, §0x03L.
    """
    out = {}
    for name, check in _checks().items():
        try:
            out[name] = bool(check(impl))
        except (ValueError, TypeError, IndexError, StopIteration):
            out[name] = False
    return out


def rejected_by(impl: GeometryImplementation) -> list[str]:
    """The checks ``impl`` fails (empty for a correct implementation)."""
    return [name for name, ok in geometry_checks(impl).items() if not ok]
