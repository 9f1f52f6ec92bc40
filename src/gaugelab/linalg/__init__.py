"""Numerics: the polar factor (msign), PSD matrix powers, Haar-random orthogonal matrices,
the entropy effective rank of a spectrum.

Every function is batched over leading dimensions where that makes sense, computes in its
input's dtype and takes an explicit ``torch.Generator`` when it draws random numbers.
"""

from gaugelab.linalg.entropy import ENTROPY_CONVENTIONS, entropy_effective_rank
from gaugelab.linalg.polar import MUON_COEFFICIENTS, msign
from gaugelab.linalg.psd import psd_power
from gaugelab.linalg.random import haar_orthogonal, orthonormal_basis

__all__ = [
    "ENTROPY_CONVENTIONS",
    "MUON_COEFFICIENTS",
    "entropy_effective_rank",
    "haar_orthogonal",
    "msign",
    "orthonormal_basis",
    "psd_power",
]
