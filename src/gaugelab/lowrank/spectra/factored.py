"""Updates given densely or as factors ``s·B A``, their SVD in factor space, and the record of
how an SVD was computed (private; the public names are re-exported by ``gaugelab.lowrank``)."""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import NamedTuple

import torch

from gaugelab.linalg.checks import all_finite

__all__ = [
    "FactoredSvd",
    "SvdRecord",
    "Update",
    "as_update",
    "check_dtype",
    "check_nonnegative",
    "check_rank",
    "default_rtol",
    "factor_roundoff",
    "factor_work_dtype",
    "factored_svd",
    "scaled",
    "unbatched",
    "update_singular_values",
    "update_svd",
    "work_dtype",
]

_LAPACK_DTYPES = (torch.float32, torch.float64)


@dataclass(frozen=True)
class SvdRecord:
    """How a singular value decomposition was computed (seed 003 §0x04K: "pin dtype,
    accumulation dtype, SVD backend, convergence status, singular-value ordering").

    Attributes:
        method: ``"dense"`` (SVD of the matrix itself) or ``"factored"`` (QR of ``B`` and
            ``Aᵀ``, SVD of the small core; the product ``B A`` is never formed).
        backend: the torch routines, e.g. ``"torch.linalg.qr + torch.linalg.svd"``.
        input_dtype: dtype of the tensors handed in, e.g. ``"torch.float32"``.
        dtype: dtype the decomposition ran in: the input's, except float16 / bfloat16, which
            LAPACK lacks and which run in float32.
        device: device of the computation, e.g. ``"cpu"``.
        torch_version: ``torch.__version__``.
        exact: always ``True``: a full deterministic decomposition, not a randomized or
            iterative approximation (which would be a different evidence class, §0x04K).
        converged: always ``True``: torch raises ``torch.linalg.LinAlgError`` when the
            decomposition does not converge, so no record exists for a failed one.
        ordering: singular values in non-increasing order, ties in the backend's order.
    """

    method: str
    backend: str
    input_dtype: str
    dtype: str
    device: str
    torch_version: str
    exact: bool = True
    converged: bool = True
    ordering: str = "descending"


class Update(NamedTuple):
    """An update ``[..., m, n]``: dense (``dense`` set) or ``scale·B A`` (``B``, ``A`` set)."""

    dense: torch.Tensor | None
    B: torch.Tensor | None
    A: torch.Tensor | None
    scale: float | torch.Tensor

    @property
    def shape(self) -> tuple[int, int]:
        if self.dense is not None:
            return tuple(self.dense.shape[-2:])  # type: ignore[return-value]
        return (self.B.shape[-2], self.A.shape[-1])  # type: ignore[union-attr]

    @property
    def batch(self) -> tuple[int, ...]:
        ref = self.dense if self.dense is not None else self.B
        return tuple(ref.shape[:-2])  # type: ignore[union-attr]

    @property
    def dtype(self) -> torch.dtype:
        return (self.dense if self.dense is not None else self.B).dtype  # type: ignore[union-attr]

    def to_dense(self) -> torch.Tensor:
        """The matrix itself, ``[..., m, n]`` (forms ``scale·B A`` for factors)."""
        if self.dense is not None:
            return self.dense
        return scaled(self.B @ self.A, self.scale)  # type: ignore[operator]

    def apply(self, X: torch.Tensor) -> torch.Tensor:
        """Layer outputs ``X ΔWᵀ`` ``[N, m]`` for inputs ``X [N, n]`` (factors: ``s (X Aᵀ) Bᵀ``)."""
        if self.dense is not None:
            return X @ self.dense.mT
        return scaled((X @ self.A.mT) @ self.B.mT, self.scale)  # type: ignore[union-attr]


class FactoredSvd(NamedTuple):
    """Compact SVD ``ΔW = U diag(S) Vᵀ`` with how it was computed."""

    U: torch.Tensor
    S: torch.Tensor
    V: torch.Tensor
    record: SvdRecord


def _check_tensor(X: object, func: str, arg: str, ndim: int = 2) -> torch.Tensor:
    if not isinstance(X, torch.Tensor):
        raise TypeError(f"{func}: {arg} must be a torch.Tensor, got {type(X).__name__}")
    if X.ndim < ndim or not X.is_floating_point():
        raise ValueError(
            f"{func}: {arg} must be a real floating tensor with at least {ndim} dimensions, "
            f"got shape {tuple(X.shape)} and dtype {X.dtype}"
        )
    if not all_finite(X):
        raise ValueError(f"{func}: {arg} contains NaN or infinite entries")
    return X


def as_update(x: object, func: str, arg: str = "delta") -> Update:
    """Read ``x``: a dense ``[..., m, n]`` tensor, or a tuple ``(B, A)`` / ``(B, A, scale)``."""
    if isinstance(x, torch.Tensor):
        return Update(_check_tensor(x, func, arg), None, None, 1.0)
    if not isinstance(x, tuple) or len(x) not in (2, 3):
        raise TypeError(
            f"{func}: {arg} must be a dense [..., m, n] tensor or a tuple (B, A) or "
            f"(B, A, scale) with B [..., d_out, r], A [..., r, d_in]; got {type(x).__name__}"
        )
    B = _check_tensor(x[0], func, f"{arg}'s B")
    A = _check_tensor(x[1], func, f"{arg}'s A")
    scale = x[2] if len(x) == 3 else 1.0
    if B.dtype != A.dtype:
        raise ValueError(
            f"{func}: {arg}'s B and A must share one dtype, got {B.dtype} and {A.dtype}"
        )
    if B.shape[:-2] != A.shape[:-2] or B.shape[-1] != A.shape[-2]:
        raise ValueError(
            f"{func}: {arg} needs B [..., d_out, r] and A [..., r, d_in] with one r and one "
            f"batch shape, got B {tuple(B.shape)} and A {tuple(A.shape)}"
        )
    if isinstance(scale, torch.Tensor):
        if scale.ndim > B.ndim - 2 or not bool(torch.isfinite(scale).all()):
            raise ValueError(
                f"{func}: {arg}'s scale tensor must be finite with at most the batch shape "
                f"{tuple(B.shape[:-2])}, got shape {tuple(scale.shape)}"
            )
    elif isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise TypeError(f"{func}: {arg}'s scale must be a real number, got {scale!r}")
    elif not torch.isfinite(torch.tensor(float(scale))):
        raise ValueError(f"{func}: {arg}'s scale must be finite, got {scale!r}")
    return Update(None, B, A, scale if isinstance(scale, torch.Tensor) else float(scale))


def work_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a decomposition of ``dtype`` tensors runs in: its own for float32 / float64,
    float32 for float16 / bfloat16 (LAPACK has no half precision)."""
    return dtype if dtype in _LAPACK_DTYPES else torch.float32


def factor_work_dtype(*factors: torch.Tensor) -> torch.dtype:
    """The dtype a composition of ``factors`` (one dtype) runs in: :func:`work_dtype`, or
    float64 when a factor's largest magnitude lies outside ``[2⁻³², 2³²]`` — its Gram matrix
    (``Bᵀ B``) could then leave float32's range (factors of ``1e38``), and float64 holds it.
    Factors within that range run as before."""
    work = work_dtype(factors[0].dtype)
    for X in factors:
        peak = float(X.abs().max()) if X.numel() else 0.0
        if peak and not 2.0**-32 <= peak <= 2.0**32:
            return torch.float64
    return work


def _record(method: str, backend: str, input_dtype: torch.dtype, X: torch.Tensor) -> SvdRecord:
    return SvdRecord(
        method=method,
        backend=backend,
        input_dtype=str(input_dtype),
        dtype=str(X.dtype),
        device=str(X.device),
        torch_version=str(torch.__version__),
    )


def factored_svd(
    B: torch.Tensor, A: torch.Tensor, scale: float | torch.Tensor = 1.0
) -> FactoredSvd:
    """Compact SVD of ``ΔW = scale·B A`` computed in factor space, never forming ``B A``.

    ``B = Q_B R_B`` and ``Aᵀ = Q_A R_A`` (reduced QR), so ``ΔW = Q_B (scale·R_B R_Aᵀ) Q_Aᵀ``;
    the core ``scale·R_B R_Aᵀ`` is at most ``r × r`` and its SVD ``U_c diag(S) V_cᵀ`` gives
    ``U = Q_B U_c``, ``V = Q_A V_c``. The cost is ``O((d_out + d_in) r²)``, not
    ``O(d_out d_in min(d_out, d_in))``. The result equals the dense SVD of ``scale·B A`` in its
    ``q = min(d_out, d_in, r)`` leading singular triplets; the dense SVD's remaining singular
    values are exactly zero and are not returned. ``r > min(d_out, d_in)`` and rank-deficient
    factors are fine (the QR of a rank-deficient factor is still orthonormal; the core then
    has zero singular values, whose singular vectors are an arbitrary orthonormal completion).

    Args:
        B: ``[..., d_out, r]`` real floating tensor, the up factor (PEFT ``lora_B``).
        A: ``[..., r, d_in]`` tensor of ``B``'s dtype and batch shape, the down factor.
        scale: the LoRA scale ``s`` (``α/r`` or ``α/√r``), a finite real number or a tensor of
            at most the batch shape (one scale per member); a negative scale is allowed.

    Returns:
        ``FactoredSvd(U, S, V, record)``: ``U [..., d_out, q]`` and ``V [..., d_in, q]`` with
        orthonormal columns, ``S [..., q]`` non-increasing and ``≥ 0``, so that
        ``U diag(S) Vᵀ = scale·B A``; all in ``B``'s dtype (float32 for float16 / bfloat16
        factors, which LAPACK lacks); ``record`` says how (``SvdRecord``, method
        ``"factored"``).

    Raises:
        TypeError: ``B`` or ``A`` is not a tensor, or ``scale`` is not a real number/tensor.
        ValueError: non-floating or non-finite factors, mismatched dtypes, batch shapes or
            inner dimension ``r``, a non-finite scale.

    Source:
        seed 003 §0x04K and §0x04A (compact SVD of the frozen update; pinned backend and
        dtype); the factor-space route (QR of each thin factor, SVD of the small core) is
        the standard one for a product of thin factors (golub2013matrix).
    """
    update = as_update((B, A, scale), "factored_svd", "(B, A, scale)")
    return _factored(update)


def _factored(update: Update) -> FactoredSvd:
    work = work_dtype(update.dtype)
    B, A = update.B.to(work), update.A.to(work)  # type: ignore[union-attr]
    Q_B, R_B = torch.linalg.qr(B)  # [..., d_out, k_B], [..., k_B, r]; k_B = min(d_out, r)
    Q_A, R_A = torch.linalg.qr(A.mT)  # [..., d_in, k_A], [..., k_A, r]; k_A = min(d_in, r)
    core = scaled(R_B @ R_A.mT, update.scale)  # [..., k_B, k_A]
    U_c, S, Vh_c = torch.linalg.svd(core, full_matrices=False)  # q = min(k_B, k_A)
    record = _record("factored", "torch.linalg.qr + torch.linalg.svd", update.dtype, core)
    return FactoredSvd(Q_B @ U_c, S, Q_A @ Vh_c.mT, record)


def update_svd(update: Update) -> FactoredSvd:
    """Compact SVD of an update: dense SVD of a dense one, ``factored_svd`` of factors."""
    if update.dense is None:
        return _factored(update)
    X = update.dense.to(work_dtype(update.dtype))
    U, S, Vh = torch.linalg.svd(X, full_matrices=False)  # [..., m, q], [..., q], [..., q, n]
    return FactoredSvd(U, S, Vh.mT, _record("dense", "torch.linalg.svd", update.dtype, X))


def factor_triangles(update: Update) -> tuple[torch.Tensor, torch.Tensor]:
    """``(R_B [..., k_B, r], R_A [..., k_A, r])``: the triangular factors of ``B = Q_B R_B`` and
    ``Aᵀ = Q_A R_A`` (``k_B = min(d_out, r)``, ``k_A = min(d_in, r)``), computed in the work
    dtype. ``R_B`` has ``B``'s singular values, ``R_A`` those of ``A``, and ``s·R_B R_Aᵀ``
    those of ``s·B A``: the two QRs are the whole cost of all three spectra.

    Raises:
        ValueError: a dense update (no factors).
    """
    if update.B is None or update.A is None:
        raise ValueError("factor_triangles: a dense update has no factors")
    work = work_dtype(update.dtype)
    R_B = torch.linalg.qr(update.B.to(work), mode="r")[1]
    R_A = torch.linalg.qr(update.A.to(work).mT, mode="r")[1]
    return R_B, R_A


def update_singular_values(
    update: Update, triangles: tuple[torch.Tensor, torch.Tensor] | None = None
) -> tuple[torch.Tensor, SvdRecord]:
    """Singular values ``[..., q]`` of an update, without singular vectors (of factors: from
    ``triangles``, :func:`factor_triangles`, computed here when not given)."""
    work = work_dtype(update.dtype)
    if update.dense is not None:
        X = update.dense.to(work)
        return torch.linalg.svdvals(X), _record("dense", "torch.linalg.svdvals", update.dtype, X)
    R_B, R_A = factor_triangles(update) if triangles is None else triangles
    core = scaled(R_B @ R_A.mT, update.scale)  # [..., k_B, k_A]
    backend = "torch.linalg.qr(mode='r') + torch.linalg.svdvals"
    return torch.linalg.svdvals(core), _record("factored", backend, update.dtype, core)


def factor_roundoff(update: Update, work: torch.dtype) -> torch.Tensor:
    """``[...]`` the absolute round-off scale of the factored SVD of ``s·B A`` computed in
    ``work``: ``max(m, n)·eps(work)·|s|·‖B‖₂‖A‖₂`` (spectral norms, from the ``r × r`` Gram
    matrices).

    The factors are exact as stored (a bfloat16 factor holds bfloat16 numbers, represented
    exactly in ``work``), so the only error in the singular values is that of the computation:
    the QR factorizations, the core product and its SVD are backward stable, each with an
    error bounded by a small multiple of ``eps(work)·‖B‖₂‖A‖₂`` (golub2013matrix, §5.2 and §8.6;
    higham2002accuracy, §3.5 for the product), and ``σ₁(s·B A) ≤ |s|·‖B‖₂‖A‖₂``. The scale is that
    of the factors, not of the product's largest singular value, so it stays small when the
    product cancels (``X − X``) and never grows with a half-precision storage dtype.
    """
    B, A = update.B.to(work), update.A.to(work)  # type: ignore[union-attr]
    gram_B, gram_A = B.mT @ B, A @ A.mT  # [..., r, r]
    norms = (torch.linalg.eigvalsh(gram_B)[..., -1] * torch.linalg.eigvalsh(gram_A)[..., -1])
    norms = norms.clamp(min=0).sqrt()  # ‖B‖₂‖A‖₂  [...]
    scale = torch.as_tensor(update.scale, dtype=work).abs()
    return max(update.shape) * torch.finfo(work).eps * scale * norms


def scaled(X: torch.Tensor, scale: float | torch.Tensor) -> torch.Tensor:
    """``scale·X``; a tensor scale is one per batch member (``[...]`` against ``X [..., a, b]``)."""
    if isinstance(scale, torch.Tensor):
        return X * scale.to(X.dtype)[..., None, None]
    return X if scale == 1 else X * scale


def unbatched(update: Update, func: str) -> Update:
    """Raise unless ``update`` is one matrix (no leading batch dimensions)."""
    if update.batch:
        raise ValueError(
            f"{func}: delta must be one matrix [m, n] (or factors B [m, r], A [r, n]), got a "
            f"batch of shape {update.batch}; call it per member"
        )
    return update


def check_rank(r: object, func: str) -> int:
    """Raise unless ``r`` is an int ``>= 0`` (bools are rejected)."""
    if isinstance(r, bool) or not isinstance(r, int) or r < 0:
        raise ValueError(f"{func}: a rank must be an int >= 0, got {r!r}")
    return r


def check_dtype(dtype: object, func: str, arg: str = "computed_in") -> torch.dtype:
    """Raise unless ``dtype`` is a real floating torch dtype."""
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(
            f"{func}: {arg} must be a real floating torch dtype (e.g. torch.float32), got {dtype!r}"
        )
    return dtype


def check_nonnegative(value: object, func: str, arg: str) -> float:
    """Raise unless ``value`` is a real number ``>= 0`` (``inf`` allowed, NaN not)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value >= 0:
        raise ValueError(f"{func}: {arg} must be a number >= 0 (inf allowed), got {value!r}")
    return float(value)


def default_rtol(
    value: float | None, shape: tuple[int, int], dtype: object, func: str, arg: str
) -> float:
    """``value`` checked ``>= 0``, or ``max(m, n)·eps(dtype)`` when it is ``None``."""
    if value is None:
        return max(shape) * torch.finfo(check_dtype(dtype, func)).eps
    return check_nonnegative(value, func, arg)
