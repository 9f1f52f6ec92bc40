"""Exact small-scale kernel objects: dense Jacobians and kernels, LoRA factor Jacobians in
closed Kronecker form, restricted and sign kernels, and the NTK-problem rank counts.

Everything here forms ``J`` (``[N·C, P]``) or ``K`` (``[N·C, N·C]``) densely: it is the
reference the probe estimators of :mod:`gaugelab.lowrank.kernels.explanation` are checked against,
for
small models only (:func:`empirical_jacobian` refuses more than ``max_entries`` entries).

Source: seed 003 §0x09A, §0x09C, §0x09D, §0x09H, §0x0AK–0x0AM.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch.func import jacrev

from gaugelab.lowrank.kernels.outputs import StackedOutputs, column_major, flatten

MAX_ENTRIES = 2**25
"""The largest dense Jacobian :func:`empirical_jacobian` forms by default (32 Mi entries)."""


def empirical_jacobian(
    outputs: StackedOutputs,
    theta: Mapping[str, torch.Tensor] | None = None,
    *,
    max_entries: int = MAX_ENTRIES,
) -> torch.Tensor:
    """The dense empirical Jacobian ``J(θ) = ∂F/∂θ``.

    Args:
        outputs: the declared :class:`StackedOutputs` (rows: example then output).
        theta: the trained parameters (default: the model's current values).
        max_entries: refuse a Jacobian larger than this (use the estimators instead).

    Returns:
        ``[N·C, P]`` in the parameters' dtype; rows example then output; columns in
        :func:`flatten` order: the parameters of ``outputs.names`` in turn, each vectorized
        column-major (:func:`vec`). A LoRA layer declared as ``parameters=[B, A]`` gets the
        seed's ``[vec(B); vec(A)]``, the columns of :func:`lora_factor_jacobians`.

    Raises:
        ValueError: ``N·C·P > max_entries``.

    Source: seed 003 §0x09A; §0x09D–E (the parameter order).
    """
    entries = outputs.size * outputs.n_parameters
    if entries > max_entries:
        raise ValueError(
            f"empirical_jacobian: N·C·P = {outputs.size}·{outputs.n_parameters} = {entries} "
            f"entries; allowed: <= max_entries={max_entries} (use the probe estimators)"
        )
    theta = dict(outputs.theta() if theta is None else theta)
    blocks = jacrev(outputs)(theta)
    return torch.cat([column_major(blocks[n], lead=1) for n in outputs.names], dim=1)


def empirical_kernel(J: torch.Tensor, metric: torch.Tensor | None = None) -> torch.Tensor:
    """``K_M = J M Jᵀ``: the empirical tangent kernel under a parameter metric.

    Args:
        J: ``[N·C, P]``.
        metric: ``None`` (``M = I``: plain SGD, ``J Jᵀ``), a ``[P]`` diagonal, or a ``[P, P]``
            symmetric positive-semidefinite matrix.

    Returns:
        ``[N·C, N·C]`` in ``J``'s dtype.

    Raises:
        ValueError: a metric of the wrong shape, a matrix that is not symmetric, or a
            negative diagonal.

    Source: seed 003 §0x09A (``K_M = J M Jᵀ``; ``J Jᵀ`` is the plain-SGD metric only).
    """
    _matrix("empirical_kernel", "J", J)
    P = J.shape[1]
    if metric is None:
        return J @ J.T
    if metric.shape == (P,):
        if bool((metric < 0).any()):
            raise ValueError("empirical_kernel: metric has negative entries; allowed: PSD")
        return (J * metric) @ J.T
    if metric.shape == (P, P):
        if not torch.allclose(metric, metric.T, rtol=1e-10, atol=1e-12):
            raise ValueError("empirical_kernel: metric is not symmetric; allowed: PSD matrix")
        return J @ metric @ J.T
    raise ValueError(
        f"empirical_kernel: metric shape {tuple(metric.shape)}; allowed: None, [{P}] or [{P}, {P}]"
    )


def restricted_kernel(J0: torch.Tensor, P: torch.Tensor) -> torch.Tensor:
    """``K_P = J₀ P Pᵀ J₀ᵀ`` of restricted coordinates ``θ = θ₀ + P u``.

    ``P Pᵀ`` is the orthogonal projector onto the subspace only when ``Pᵀ P = I``; otherwise
    it also carries that coordinate metric (check with :func:`is_orthonormal`).

    Args:
        J0: ``[N·C, D]`` full Jacobian; P: ``[D, d]`` coordinates.

    Returns:
        ``[N·C, N·C]``: ``(K_P)_{ij} = ⟨Pᵀ j_i, Pᵀ j_j⟩`` for rows ``j_i`` of ``J₀``.

    Raises:
        ValueError: shapes that do not chain.

    Source: seed 003 §0x09C.
    """
    _matrix("restricted_kernel", "J0", J0)
    _matrix("restricted_kernel", "P", P)
    if P.shape[0] != J0.shape[1]:
        raise ValueError(
            f"restricted_kernel: P shape {tuple(P.shape)}; allowed: [{J0.shape[1]}, d]"
        )
    features = J0 @ P  # [N·C, d]: the rows Pᵀ j_i
    return features @ features.T


def is_orthonormal(P: torch.Tensor, *, tol: float = 1e-10) -> bool:
    """Whether ``Pᵀ P = I`` to ``tol`` (max abs entry), i.e. ``P Pᵀ`` is a projector."""
    eye = torch.eye(P.shape[1], dtype=P.dtype)
    return bool(((P.T @ P) - eye).abs().max() <= tol)


def vec(M: torch.Tensor) -> torch.Tensor:
    """Column-major vectorization ``vec(M)`` ``[m·n]`` of ``M`` ``[m, n]`` (the seed's
    §0x09D convention: ``vec(M)[i + m·j] = M[i, j]``; :func:`column_major`)."""
    return column_major(M)


def lora_factor_jacobians(
    X: torch.Tensor, B: torch.Tensor, A: torch.Tensor, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """The two LoRA factor Jacobians of ``Y = (W₀ + s B A) X`` in closed Kronecker form.

    With column-major vectorization (:func:`vec`; rows ``vec(Y)``, so example then output):
    ``J_B = s (Xᵀ Aᵀ ⊗ I_m)`` and ``J_A = s (Xᵀ ⊗ B)``. ``[J_B J_A]`` has the seed's
    parameter order ``[vec(B); vec(A)]``, the order :func:`empirical_jacobian` gives a LoRA
    layer whose parameters are declared ``[B, A]``.

    Args:
        X: ``[n, N]`` the layer's inputs, one example per column.
        B: ``[m, r]`` up factor; A: ``[r, n]`` down factor (PEFT layout); scale: ``s``.

    Returns:
        ``(J_B [m·N, m·r], J_A [m·N, r·n])``, columns ``vec(B)`` and ``vec(A)``.

    Raises:
        ValueError: shapes that do not chain.

    Source: seed 003 §0x09D.
    """
    _, m, _ = _lora_shapes("lora_factor_jacobians", X, B, A)
    eye = torch.eye(m, dtype=X.dtype)
    J_B = scale * _kron((A @ X).T.contiguous(), eye)
    J_A = scale * _kron(X.T.contiguous(), B.contiguous())
    return J_B, J_A


def lora_kernel(X: torch.Tensor, B: torch.Tensor, A: torch.Tensor, scale: float) -> torch.Tensor:
    """``K_LoRA = s²[(Xᵀ Aᵀ A X) ⊗ I_m + (Xᵀ X) ⊗ B Bᵀ]`` ``[m·N, m·N]`` (= ``J_B J_Bᵀ +
    J_A J_Aᵀ``), without forming the factor Jacobians. Shapes as
    :func:`lora_factor_jacobians`. Source: seed 003 §0x09D."""
    _, m, _ = _lora_shapes("lora_kernel", X, B, A)
    AX = A @ X
    eye = torch.eye(m, dtype=X.dtype)
    return scale**2 * (
        _kron((AX.T @ AX).contiguous(), eye) + _kron((X.T @ X).contiguous(), (B @ B.T).contiguous())
    )


def full_weight_jacobian(X: torch.Tensor, m: int) -> torch.Tensor:
    """``J_W = Xᵀ ⊗ I_m`` ``[m·N, m·n]`` of ``Y = W X`` in full-weight coordinates ``vec(W)``
    (column-major). Source: seed 003 §0x09D."""
    _matrix("full_weight_jacobian", "X", X)
    return _kron(X.T.contiguous(), torch.eye(m, dtype=X.dtype))


def full_weight_kernel(X: torch.Tensor, m: int) -> torch.Tensor:
    """``K_W = (Xᵀ X) ⊗ I_m`` ``[m·N, m·N]``. Source: seed 003 §0x09D."""
    _matrix("full_weight_kernel", "X", X)
    return _kron((X.T @ X).contiguous(), torch.eye(m, dtype=X.dtype))


def sign_kernel(J: torch.Tensor, *, symmetric: bool = False) -> torch.Tensor:
    """The SignGD kernel analogs of Malladi et al.

    Args:
        J: ``[N·C, P]`` Jacobian at ``θ₀`` (rows: per-output gradients).
        symmetric: ``False``: the asymmetric ``K_A-Sign = J sign(J)ᵀ``, entry ``(x, x')`` =
            ``⟨∇f(x), sign(∇f(x'))⟩``; ``True``: the sign-feature kernel ``sign(J) sign(J)ᵀ``.

    Returns:
        ``[N·C, N·C]`` (not symmetric in general when ``symmetric=False``).

    Source: seed 003 §0x09H; malladi2023kernel.
    """
    _matrix("sign_kernel", "J", J)
    S = torch.sign(J)
    return (S if symmetric else J) @ S.T


def existence_rank_bound(n_outputs: int, n_examples: int) -> int:
    """The largest ``s`` with ``s(s+1)/2 ≤ K N``: some global minimizer of the
    nuclear-norm-regularized linearized full-update problem has rank ``≤ s`` (when a minimizer
    exists). Not a statement about every minimizer, the nonlinear update, or what a factor
    optimizer reaches.

    Raises:
        ValueError: ``n_outputs`` or ``n_examples`` < 1.

    Source: seed 003 §0x0AL; jang2024lora.
    """
    kn = _count("existence_rank_bound", n_outputs, n_examples)
    s = 0
    while (s + 1) * (s + 2) // 2 <= kn:
        s += 1
    return s


def landscape_rank_bound(n_outputs: int, n_examples: int) -> int:
    """The smallest configured factor rank ``r`` with ``r(r+1)/2 > K N`` (strict): then, for
    almost every PSD perturbation, every second-order stationary point of the perturbed
    linearized factor objective is global. Not the deterministic ``P = 0`` objective, not every
    first-order point, not the nonlinear network.

    Raises:
        ValueError: ``n_outputs`` or ``n_examples`` < 1.

    Source: seed 003 §0x0AM; jang2024lora.
    """
    kn = _count("landscape_rank_bound", n_outputs, n_examples)
    r = 1
    while r * (r + 1) // 2 <= kn:
        r += 1
    return r


def balanced_factors(delta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(u, v)`` with ``u vᵀ = δ`` attaining ``½(‖u‖²_F + ‖v‖²_F) = ‖δ‖_*`` (the factor
    identity of factor weight decay): ``u = U √Σ``, ``v = V √Σ`` from the compact SVD.

    Args:
        delta: ``[m, n]``.

    Returns:
        ``(u [m, q], v [n, q])``, ``q = min(m, n)``.

    Source: seed 003 §0x0AK.
    """
    _matrix("balanced_factors", "delta", delta)
    U, S, Vh = torch.linalg.svd(delta, full_matrices=False)
    root = S.sqrt()
    return U * root, Vh.T * root


def _kron(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The Kronecker product ``a ⊗ b`` of two matrices (``[p·s, q·t]``)."""
    p, q = a.shape
    s, t = b.shape
    return (a[:, None, :, None] * b[None, :, None, :]).reshape(p * s, q * t)


def _count(where: str, n_outputs: int, n_examples: int) -> int:
    for name, value in (("n_outputs", n_outputs), ("n_examples", n_examples)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{where}: {name}={value!r}; allowed: an integer >= 1")
    return n_outputs * n_examples


def _matrix(where: str, name: str, M: torch.Tensor) -> None:
    if not isinstance(M, torch.Tensor) or M.dim() != 2:
        shape = tuple(M.shape) if isinstance(M, torch.Tensor) else type(M).__name__
        raise ValueError(f"{where}: {name} is {shape}; allowed: a 2-D tensor")


def _lora_shapes(where: str, X, B, A) -> tuple[int, int, int]:
    for name, M in (("X", X), ("B", B), ("A", A)):
        _matrix(where, name, M)
    n, m, r = X.shape[0], B.shape[0], B.shape[1]
    if A.shape != (r, n):
        raise ValueError(
            f"{where}: A shape {tuple(A.shape)} with B {tuple(B.shape)} and X {tuple(X.shape)}; "
            f"allowed: A [{r}, {n}]"
        )
    return n, m, r


__all__ = ["MAX_ENTRIES", "balanced_factors", "empirical_jacobian", "empirical_kernel",
           "existence_rank_bound", "flatten", "full_weight_jacobian", "full_weight_kernel",
           "is_orthonormal", "landscape_rank_bound", "lora_factor_jacobians", "lora_kernel",
           "restricted_kernel", "sign_kernel", "vec"]  # fmt: skip
