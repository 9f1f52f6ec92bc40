"""Kernel diagnostics of fine-tuning: exact small-scale objects and probe estimators at scale (seed
003 §0x09).

* ``estimate`` — The kernel diagnostics at scale: JVPs, VJPs and seeded output probes, never a
  dense J or K.
* ``exact`` — Exact small-scale kernel objects: dense Jacobians and kernels, LoRA factor Jacobians
  in closed Kronecker form, restricted and sign kernels, and the NTK-problem rank counts.
* ``explanation`` — Kernel diagnostics: a kernel explanation is a conditional trajectory model.
* ``outputs`` — The declared objects of a kernel diagnostic: stacked outputs, trained parameters,
  metric.

The public names of ``explanation`` are re-exported here.
"""

from gaugelab.lowrank.kernels.explanation import (
    DISTRIBUTIONS,
    EPS,
    FORWARD_MODES,
    MAX_ENTRIES,
    ORDER,
    Estimate,
    KernelEstimate,
    KernelProbes,
    Metric,
    StackedOutputs,
    adam_metric,
    balanced_factors,
    empirical_jacobian,
    empirical_kernel,
    existence_rank_bound,
    flatten,
    full_weight_jacobian,
    full_weight_kernel,
    is_orthonormal,
    jacobian_drift,
    kernel_alignment,
    kernel_drift,
    kernel_drift_estimate,
    kernel_matvec,
    landscape_rank_bound,
    last_position,
    linearization_residual,
    linearized_outputs,
    lora_factor_jacobians,
    lora_kernel,
    restricted_kernel,
    sign_kernel,
    unflatten,
    vec,
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
