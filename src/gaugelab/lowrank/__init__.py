"""Low-rank adaptation diagnostics (seed 003): math only, one subpackage per concept.

Re-exported here: the rank policies of :mod:`~gaugelab.lowrank.spectra.ranks` (configured,
algebraic, numerical, stable, energy, and entropy effective rank in the Roy–Vetterli and energy
conventions — each value a ``RankReport`` with its matrix id and policy id), the factor-space
SVD of :mod:`~gaugelab.lowrank.spectra.factored` and the reconstruction of
:mod:`~gaugelab.lowrank.spectra.reconstruction` (weight-space truncated-SVD rank sweeps and
output-weighted truncation on sampled inputs). Updates are dense ``[m, n]`` tensors or factors
``(B, A[, scale])`` of ``ΔW = scale·B A`` (PEFT layout: ``B [d_out, r]``, ``A [r, d_in]``),
decomposed in factor space (``factored_svd``) without forming ``B A``.

Subpackages, each a seed-003 section: ``spectra`` (§0x04: ranks, spectra, reconstruction,
truncation, sampled covariance), ``subspaces`` (§0x06: gauge-invariant row/column bases,
principal angles, overlaps, Haar baselines, Procrustes, the LoRA paper's φ), ``composition``
(§0x05: static composition, rank ledger, compression, interference, PEFT output),
``geometry`` (§0x03: the factor map's differential, adjoint and Jacobian, gauge directions,
tangent/normal projectors, exact rank), ``dynamics`` (§0x07–0x08: factor gradients, product
motion, the scalar gauge and compensated rates, rank scaling, dtype range, the per-step factor
record, rebalancing), ``expressivity`` (§0x0A: scoped rank ledgers), ``kernels`` (§0x09:
Jacobians and kernels, drift diagnostics and their probe estimators), ``intrinsic`` (§0x02:
projections with exact adjoints, DID/SAID, the d90 estimate). Candidate selection (§0x0B) and
the experimental design (§0x0C) are release governance: :mod:`gaugelab.study.release`.
"""

from gaugelab.lowrank.spectra.factored import FactoredSvd, SvdRecord, factored_svd
from gaugelab.lowrank.spectra.ranks import (
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
from gaugelab.lowrank.spectra.reconstruction import (
    BALANCES,
    CovarianceSupport,
    InputMoments,
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
    "InputMoments",
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
