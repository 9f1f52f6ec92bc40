"""Kernel diagnostics: a kernel explanation is a conditional trajectory model.

Whether fine-tuning "is in the kernel regime" is a measurable statement only with declared
outputs, parameter axes, optimizer metric and horizon (seed 003 §0x09). This module holds:

- the declared objects (§0x09A): :class:`StackedOutputs` (``F(θ) ∈ R^{N·C}`` on a frozen probe
  set, example then output, dropout off, the trained parameter set) and :class:`Metric`
  (``K_M = J M Jᵀ``; :func:`adam_metric` for Adam's preconditioner at step ``t``);
- exact small-scale objects: :func:`empirical_jacobian`, :func:`empirical_kernel`,
  :func:`restricted_kernel` (§0x09C), :func:`lora_factor_jacobians` and :func:`lora_kernel`
  (closed Kronecker form, column-major, §0x09D), :func:`full_weight_jacobian`,
  :func:`sign_kernel` (§0x09H), and the rank counts of the NTK full-update problem
  (:func:`existence_rank_bound`, :func:`landscape_rank_bound`, :func:`balanced_factors`;
  §0x0AJ–0x0AM);
- the diagnostics as the seed defines them (§0x09J): :func:`linearization_residual`,
  :func:`jacobian_drift`, :func:`kernel_drift`, :func:`kernel_alignment`;
- their estimators at scale (§0x09K), with ``torch.func`` JVPs and VJPs and seeded output
  probes, never an ``N·C × P`` or ``P × P`` matrix: :func:`kernel_matvec`,
  :func:`linearized_outputs`, :class:`KernelProbes`, :func:`kernel_drift_estimate`.

What the diagnostics detect and do not prove (§0x09J): ``R_lin`` detects failure of the
initialization Taylor model on the selected outputs, not that the kernel is stable; ``D_J``
coordinate-level feature drift (gauge and parameterization sensitive), not useful learned
representations; ``D_K`` drift of the chosen tangent metric on the probe split, not off the
split or under another metric; ``A_K`` directional agreement, not equal convergence rate or
magnitude. Parameter distance alone is insufficient (an exact factor gauge moves ``A, B``
arbitrarily while keeping ``B A``).

Source: seed 003 §0x09 (Loop 8), §0x0AJ–0x0AO; malladi2023kernel; jang2024lora.
"""

from __future__ import annotations

import torch

from gaugelab.lowrank.kernels.estimate import (
    DISTRIBUTIONS,
    Estimate,
    KernelEstimate,
    KernelProbes,
    kernel_drift_estimate,
    kernel_matvec,
    linearized_outputs,
)
from gaugelab.lowrank.kernels.exact import (
    MAX_ENTRIES,
    balanced_factors,
    empirical_jacobian,
    empirical_kernel,
    existence_rank_bound,
    full_weight_jacobian,
    full_weight_kernel,
    is_orthonormal,
    landscape_rank_bound,
    lora_factor_jacobians,
    lora_kernel,
    restricted_kernel,
    sign_kernel,
    vec,
)
from gaugelab.lowrank.kernels.outputs import (
    FORWARD_MODES,
    ORDER,
    Metric,
    StackedOutputs,
    adam_metric,
    flatten,
    last_position,
    unflatten,
)

__all__ = [
    "DISTRIBUTIONS",
    "EPS",
    "FORWARD_MODES",
    "MAX_ENTRIES",
    "ORDER",
    "Estimate",
    "KernelEstimate",
    "KernelProbes",
    "Metric",
    "StackedOutputs",
    "adam_metric",
    "balanced_factors",
    "empirical_jacobian",
    "empirical_kernel",
    "existence_rank_bound",
    "flatten",
    "full_weight_jacobian",
    "full_weight_kernel",
    "is_orthonormal",
    "jacobian_drift",
    "kernel_alignment",
    "kernel_drift",
    "kernel_drift_estimate",
    "kernel_matvec",
    "landscape_rank_bound",
    "last_position",
    "linearization_residual",
    "linearized_outputs",
    "lora_factor_jacobians",
    "lora_kernel",
    "restricted_kernel",
    "sign_kernel",
    "unflatten",
    "vec",
]

EPS = 1e-12
"""The default ``ε`` floor of the diagnostics' denominators."""


def _same(where: str, a: torch.Tensor, b: torch.Tensor, names: tuple[str, str]) -> None:
    if a.shape != b.shape:
        raise ValueError(
            f"{where}: {names[0]} shape {tuple(a.shape)} and {names[1]} shape "
            f"{tuple(b.shape)}; allowed: equal shapes"
        )
    for name, x in zip(names, (a, b), strict=True):
        if not bool(torch.isfinite(x).all()):
            raise ValueError(f"{where}: {name} has non-finite entries; allowed: finite values")


def linearization_residual(
    F_t: torch.Tensor, F_0: torch.Tensor, F_lin: torch.Tensor, *, eps: float = EPS
) -> float:
    """``R_lin = ‖F_t − F_0 − J_0(θ_t − θ_0)‖₂ / max(‖F_t − F_0‖₂, ε)``.

    Args:
        F_t: ``[N·C]`` outputs at the checkpoint; F_0: at the base point; F_lin: the
            linearized prediction ``F_0 + J_0(θ_t − θ_0)`` (:func:`linearized_outputs`).
        eps: the denominator's floor.

    Returns:
        The residual (0: the initialization Taylor model is exact on these outputs).

    Raises:
        ValueError: shapes differ or a value is not finite.

    Source: seed 003 §0x09J.
    """
    _same("linearization_residual", F_t, F_0, ("F_t", "F_0"))
    _same("linearization_residual", F_t, F_lin, ("F_t", "F_lin"))
    change = float(torch.linalg.vector_norm((F_t - F_0).double()))
    return float(torch.linalg.vector_norm((F_t - F_lin).double())) / max(change, eps)


def jacobian_drift(J_t: torch.Tensor, J_0: torch.Tensor, *, eps: float = EPS) -> float:
    """``D_J = ‖J_t − J_0‖_F / max(‖J_0‖_F, ε)`` (relative Jacobian drift; ``[N·C, P]`` each).

    Raises:
        ValueError: shapes differ or a value is not finite.

    Source: seed 003 §0x09J (fixture §0x09E: ``D_J² = 3/16``).
    """
    _same("jacobian_drift", J_t, J_0, ("J_t", "J_0"))
    return _relative_change(J_t, J_0, eps)


def kernel_drift(K_t: torch.Tensor, K_0: torch.Tensor, *, eps: float = EPS) -> float:
    """``D_K = ‖K_t − K_0‖_F / max(‖K_0‖_F, ε)`` (relative kernel drift; ``[N·C, N·C]``).

    Raises:
        ValueError: shapes differ or a value is not finite.

    Source: seed 003 §0x09J (fixture §0x09E: ``D_K² = 7/128``).
    """
    _same("kernel_drift", K_t, K_0, ("K_t", "K_0"))
    return _relative_change(K_t, K_0, eps)


def _relative_change(now: torch.Tensor, then: torch.Tensor, eps: float) -> float:
    """``‖now − then‖_F / max(‖then‖_F, ε)`` in float64."""
    return float(torch.linalg.norm((now - then).double())) / max(
        float(torch.linalg.norm(then.double())), eps
    )


def kernel_alignment(K_t: torch.Tensor, K_0: torch.Tensor, *, eps: float = EPS) -> float:
    """``A_K = ⟨K_t, K_0⟩_F / max(‖K_t‖_F ‖K_0‖_F, ε)`` (scale-insensitive; 1: same direction).

    Raises:
        ValueError: shapes differ or a value is not finite.

    Source: seed 003 §0x09J (fixture §0x09E: ``A_K² = 361/366``).
    """
    _same("kernel_alignment", K_t, K_0, ("K_t", "K_0"))
    a, b = K_t.double(), K_0.double()
    denominator = float(torch.linalg.norm(a)) * float(torch.linalg.norm(b))
    return float((a * b).sum()) / max(denominator, eps)
