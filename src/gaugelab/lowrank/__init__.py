"""Low-rank adaptation diagnostics (seed 003): rank policies and reconstruction.

``ranks``: every rank policy of a matrix object — configured, algebraic, numerical, stable,
energy, and entropy effective rank in the Roy–Vetterli and energy conventions — each value a
``RankReport`` with its matrix id and policy id. ``reconstruction``: weight-space truncated-SVD
rank sweeps and output-weighted truncation on sampled inputs. Updates are dense ``[m, n]``
tensors or factors ``(B, A[, scale])`` of ``ΔW = scale·B A`` (PEFT layout: ``B [d_out, r]``,
``A [r, d_in]``), decomposed in factor space (``factored_svd``) without forming ``B A``.
"""

from ._factored import FactoredSvd, SvdRecord, factored_svd
from .ranks import (
    POLICIES,
    RankReport,
    Spectrum,
    algebraic_rank,
    configured_rank,
    effective_rank_energy,
    effective_rank_roy_vetterli,
    energy_rank,
    numerical_rank,
    rank_policies,
    spectrum,
    stable_rank,
)
from .reconstruction import (
    BALANCES,
    CovarianceSupport,
    OutputResidual,
    OutputWeightedTruncation,
    RankSweep,
    TruncationRow,
    covariance_support,
    output_residual,
    output_weighted_rank_r,
    reconstruct_by_rank,
)

__all__ = [
    "BALANCES",
    "POLICIES",
    "CovarianceSupport",
    "FactoredSvd",
    "OutputResidual",
    "OutputWeightedTruncation",
    "RankReport",
    "RankSweep",
    "Spectrum",
    "SvdRecord",
    "TruncationRow",
    "algebraic_rank",
    "configured_rank",
    "covariance_support",
    "effective_rank_energy",
    "effective_rank_roy_vetterli",
    "energy_rank",
    "factored_svd",
    "numerical_rank",
    "output_residual",
    "output_weighted_rank_r",
    "rank_policies",
    "reconstruct_by_rank",
    "spectrum",
    "stable_rank",
]
