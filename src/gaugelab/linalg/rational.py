"""A small exact rational matrix (``fractions.Fraction`` entries) for the seed's exact fixtures.

torch has no exact rational dtype, and the seed's oracles (seed 003 §0x03L, §0x07C–0x08I,
§0x0AB–0x0AT) are stated "exactly": a rank by fraction-free elimination, never by a floating
tolerance. :class:`Matrix` supports just what those oracles need — ``@``, ``+``, ``-``,
scalar ``*`` and ``/``, ``.T``, entrywise ``abs``, row-major flattening, Kronecker products,
inverse by Gauss–Jordan and rank by Bareiss' fraction-free elimination. It is immutable and
2-D only. The public functions of :mod:`gaugelab.lowrank.geometry.factor_map`, ``dynamics`` and
``expressivity`` accept it wherever they accept a float tensor, and compute in it exactly.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Sequence
from fractions import Fraction

import torch

__all__ = ["Matrix", "exact_sqrt", "is_exact", "to_fraction"]


def to_fraction(x: object, where: str = "Matrix") -> Fraction:
    """``x`` (an int, a Fraction, a finite float — taken at its exact binary value, a 0-d
    tensor) as a :class:`Fraction`; ``TypeError``/``ValueError`` otherwise."""
    if isinstance(x, torch.Tensor):
        if x.numel() != 1:
            raise ValueError(f"{where}: a tensor entry must be 0-d, got shape {tuple(x.shape)}")
        x = x.item()
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        raise TypeError(f"{where}: entry {x!r} is not a real number; allowed: int, Fraction, float")
    if isinstance(x, float) and not math.isfinite(x):
        raise ValueError(f"{where}: entry {x!r} is not finite; allowed: finite reals")
    return Fraction(x)


def exact_sqrt(x: object) -> Fraction:
    """The exact square root of a non-negative rational that is a perfect square (``4/9 → 2/3``).

    Raises:
        ValueError: ``x`` is negative or its root is irrational.
    """
    f = to_fraction(x, "exact_sqrt")
    if f < 0:
        raise ValueError(f"exact_sqrt: x={f} is negative; allowed: x >= 0")
    num, den = math.isqrt(f.numerator), math.isqrt(f.denominator)
    if num * num != f.numerator or den * den != f.denominator:
        raise ValueError(f"exact_sqrt: x={f} is not the square of a rational")
    return Fraction(num, den)


class Matrix:
    """An immutable ``[m, n]`` matrix of :class:`Fraction` entries (exact arithmetic).

    Args:
        rows: a sequence of ``m`` equal-length sequences of reals (ints, Fractions, finite
            floats at their exact binary value), or a 2-D tensor. ``m = 0`` or ``n = 0`` is
            allowed only through :meth:`zeros`.

    Raises:
        ValueError: ragged rows, an empty matrix, a non-2-D tensor, non-finite entries.
        TypeError: a non-real entry.
    """

    __slots__ = ("_rows", "shape")
    __array_priority__ = 1000  # a tensor on the left defers to Matrix.__rmatmul__

    def __init__(self, rows: Sequence[Sequence[object]] | torch.Tensor) -> None:
        if isinstance(rows, torch.Tensor):
            if rows.dim() != 2:
                raise ValueError(f"Matrix: a tensor must be 2-D, got shape {tuple(rows.shape)}")
            rows = rows.tolist()
        data = tuple(tuple(to_fraction(x) for x in row) for row in rows)
        if not data or not data[0]:
            raise ValueError("Matrix: rows must be a non-empty sequence of non-empty rows")
        if any(len(row) != len(data[0]) for row in data):
            raise ValueError(f"Matrix: ragged rows of lengths {[len(r) for r in data]}")
        self._rows = data
        self.shape = (len(data), len(data[0]))

    @classmethod
    def _raw(cls, rows: tuple[tuple[Fraction, ...], ...], shape: tuple[int, int]) -> Matrix:
        out = object.__new__(cls)
        out._rows, out.shape = rows, shape
        return out

    @classmethod
    def zeros(cls, m: int, n: int) -> Matrix:
        """The ``[m, n]`` zero matrix (``m, n ≥ 1``)."""
        if m < 1 or n < 1:
            raise ValueError(f"Matrix.zeros: shape ({m}, {n}); allowed: m, n >= 1")
        zero = Fraction(0)
        return cls._raw(tuple((zero,) * n for _ in range(m)), (m, n))

    @classmethod
    def identity(cls, n: int) -> Matrix:
        """The ``[n, n]`` identity."""
        return cls.diag([1] * n)

    @classmethod
    def diag(cls, values: Sequence[object]) -> Matrix:
        """The square diagonal matrix of ``values``."""
        n = len(values)
        return cls([[values[i] if i == j else 0 for j in range(n)] for i in range(n)])

    @classmethod
    def unit(cls, m: int, n: int, i: int, j: int) -> Matrix:
        """The ``[m, n]`` elementary matrix ``E_ij`` (one 1 at row ``i``, column ``j``)."""
        return cls([[1 if (a, b) == (i, j) else 0 for b in range(n)] for a in range(m)])

    @classmethod
    def from_columns(cls, columns: Sequence[Sequence[object]]) -> Matrix:
        """The matrix whose ``k``-th column is ``columns[k]`` (equal lengths)."""
        return cls(columns).T

    @classmethod
    def column(cls, values: Iterable[object]) -> Matrix:
        """The ``[len(values), 1]`` column vector."""
        return cls([[v] for v in values])

    # -- access ------------------------------------------------------------------------------
    def __getitem__(self, index: tuple[int, int]) -> Fraction:
        i, j = index
        return self._rows[i][j]

    def rows(self) -> tuple[tuple[Fraction, ...], ...]:
        """The entries as a tuple of row tuples."""
        return self._rows

    def tolist(self) -> list[list[Fraction]]:
        """The entries as nested lists."""
        return [list(r) for r in self._rows]

    def flatten(self) -> tuple[Fraction, ...]:
        """Row-major ``vec``: ``(x_00, x_01, …, x_0n, x_10, …)``."""
        return tuple(x for row in self._rows for x in row)

    def reshape(self, m: int, n: int) -> Matrix:
        """Row-major reshape to ``[m, n]`` (``m·n`` must equal the size)."""
        flat = self.flatten()
        if m * n != len(flat):
            raise ValueError(f"Matrix.reshape: {self.shape} has {len(flat)} entries, not {m}*{n}")
        return Matrix._raw(tuple(flat[i * n : (i + 1) * n] for i in range(m)), (m, n))

    def to_tensor(self, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        """A float tensor of the entries, each rounded once to ``dtype``."""
        return torch.tensor([[float(x) for x in r] for r in self._rows], dtype=dtype)

    @property
    def T(self) -> Matrix:
        """The transpose."""
        m, n = self.shape
        return Matrix._raw(tuple(zip(*self._rows, strict=True)), (n, m))

    mT = T

    # -- arithmetic --------------------------------------------------------------------------
    def _same(self, other: object, op: str) -> Matrix:
        if not isinstance(other, Matrix):
            raise TypeError(f"Matrix {op}: other operand is {type(other).__name__}, not Matrix")
        if other.shape != self.shape:
            raise ValueError(f"Matrix {op}: shapes {self.shape} and {other.shape} differ")
        return other

    def __add__(self, other: object) -> Matrix:
        o = self._same(other, "+")
        rows = tuple(
            tuple(a + b for a, b in zip(r, s, strict=True))
            for r, s in zip(self._rows, o._rows, strict=True)
        )
        return Matrix._raw(rows, self.shape)

    def __sub__(self, other: object) -> Matrix:
        return self + (-self._same(other, "-"))

    def __neg__(self) -> Matrix:
        return Matrix._raw(tuple(tuple(-a for a in r) for r in self._rows), self.shape)

    def __mul__(self, c: object) -> Matrix:
        if isinstance(c, Matrix):
            raise TypeError("Matrix *: entrywise products are not supported; use @ for products")
        f = to_fraction(c, "Matrix *")
        return Matrix._raw(tuple(tuple(a * f for a in r) for r in self._rows), self.shape)

    __rmul__ = __mul__

    def __truediv__(self, c: object) -> Matrix:
        f = to_fraction(c, "Matrix /")
        if f == 0:
            raise ZeroDivisionError("Matrix /: division by zero")
        return self * (1 / f)

    def __matmul__(self, other: object) -> Matrix:
        if not isinstance(other, Matrix):
            raise TypeError(f"Matrix @: other operand is {type(other).__name__}, not Matrix")
        if self.shape[1] != other.shape[0]:
            raise ValueError(f"Matrix @: shapes {self.shape} and {other.shape} do not chain")
        n, zero = other.shape[1], Fraction(0)
        orows = other._rows
        rows = []
        for r in self._rows:  # skip zero entries: the seed's fixtures are sparse
            acc = [zero] * n
            for k, a in enumerate(r):
                if a:
                    for j, b in enumerate(orows[k]):
                        if b:
                            acc[j] += a * b
            rows.append(tuple(acc))
        rows = tuple(rows)
        return Matrix._raw(rows, (self.shape[0], other.shape[1]))

    def __abs__(self) -> Matrix:
        return Matrix._raw(tuple(tuple(abs(a) for a in r) for r in self._rows), self.shape)

    def map(self, fn) -> Matrix:
        """Apply ``fn`` to every entry (its results taken as Fractions)."""
        return Matrix([[fn(a) for a in r] for r in self._rows])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Matrix) and other.shape == self.shape and other._rows == self._rows

    def __hash__(self) -> int:
        return hash(self._rows)

    def __repr__(self) -> str:
        body = "; ".join(", ".join(str(x) for x in r) for r in self._rows)
        return f"Matrix([{body}])"

    def is_zero(self) -> bool:
        """Every entry is exactly 0."""
        return all(a == 0 for r in self._rows for a in r)

    def inner(self, other: Matrix) -> Fraction:
        """The Frobenius inner product ``⟨self, other⟩ = Σ_ij x_ij y_ij``."""
        o = self._same(other, "inner")
        return sum((a * b for a, b in zip(self.flatten(), o.flatten(), strict=True)), Fraction(0))

    def frobenius_sq(self) -> Fraction:
        """``‖self‖_F²`` exactly."""
        return self.inner(self)

    def kron(self, other: Matrix) -> Matrix:
        """The Kronecker product ``self ⊗ other`` (``[m p, n q]``)."""
        (m, n), (p, q) = self.shape, other.shape
        return Matrix(
            [
                [self[i // p, j // q] * other[i % p, j % q] for j in range(n * q)]
                for i in range(m * p)
            ]
        )

    @staticmethod
    def hstack(blocks: Sequence[Matrix]) -> Matrix:
        """Blocks side by side (equal row counts)."""
        if len({b.shape[0] for b in blocks}) != 1:
            raise ValueError(f"Matrix.hstack: row counts {[b.shape[0] for b in blocks]} differ")
        return Matrix([sum((b._rows[i] for b in blocks), ()) for i in range(blocks[0].shape[0])])

    # -- elimination -------------------------------------------------------------------------
    def rank(self) -> int:
        """Exact rank by Bareiss' fraction-free elimination (no tolerance).

        Every row is first scaled by the lcm of its denominators, so the elimination runs on
        integers; each step divides exactly by the previous pivot (Bareiss 1968).
        """
        rows = []
        for r in self._rows:
            lcm = math.lcm(*(a.denominator for a in r))
            rows.append([int(a * lcm) for a in r])
        m, n = self.shape
        rank, prev, col = 0, 1, 0
        while rank < m and col < n:
            pivot = next((i for i in range(rank, m) if rows[i][col] != 0), None)
            if pivot is None:
                col += 1
                continue
            rows[rank], rows[pivot] = rows[pivot], rows[rank]
            p = rows[rank][col]
            for i in range(rank + 1, m):
                rows[i] = [
                    (p * rows[i][j] - rows[i][col] * rows[rank][j]) // prev for j in range(n)
                ]
                rows[i][col] = 0
            prev, rank, col = p, rank + 1, col + 1
        return rank

    def rref(self) -> tuple[Matrix, tuple[int, ...]]:
        """Reduced row-echelon form over the rationals and its pivot columns."""
        rows = [list(r) for r in self._rows]
        m, n = self.shape
        pivots: list[int] = []
        row = 0
        for col in range(n):
            pivot = next((i for i in range(row, m) if rows[i][col] != 0), None)
            if pivot is None:
                continue
            rows[row], rows[pivot] = rows[pivot], rows[row]
            p = rows[row][col]
            rows[row] = [a / p for a in rows[row]]
            for i in range(m):
                if i != row and rows[i][col] != 0:
                    f = rows[i][col]
                    rows[i] = [a - f * b for a, b in zip(rows[i], rows[row], strict=True)]
            pivots.append(col)
            row += 1
            if row == m:
                break
        return Matrix(rows), tuple(pivots)

    def inverse(self) -> Matrix:
        """The exact inverse of a square non-singular matrix (Gauss–Jordan).

        Raises:
            ValueError: not square, or singular.
        """
        m, n = self.shape
        if m != n:
            raise ValueError(f"Matrix.inverse: shape {self.shape} is not square")
        reduced, pivots = Matrix.hstack([self, Matrix.identity(n)]).rref()
        if pivots[:n] != tuple(range(n)):
            raise ValueError(f"Matrix.inverse: the matrix is singular (rank {self.rank()} < {n})")
        return Matrix([r[n:] for r in reduced.rows()])


def is_exact(*xs: object) -> bool:
    """Whether every argument is a :class:`Matrix` (exact mode); ``TypeError`` on a mix of
    Matrix and tensors (compute in one mode)."""
    flags = [isinstance(x, Matrix) for x in xs if isinstance(x, Matrix | torch.Tensor)]
    if flags and any(flags) and not all(flags):
        raise TypeError(
            "mixed Matrix and tensor operands; allowed: all exact Matrix or all tensors"
        )
    return bool(flags) and all(flags)
