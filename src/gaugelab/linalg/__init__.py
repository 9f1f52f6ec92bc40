"""Numerics: the polar factor (msign), PSD matrix powers, Haar-random orthogonal matrices.

Every function is batched over leading dimensions where that makes sense, computes in its
input's dtype and takes an explicit ``torch.Generator`` when it draws random numbers.
"""

from gaugelab.linalg.polar import MUON_COEFFICIENTS, msign
from gaugelab.linalg.psd import psd_power
from gaugelab.linalg.random import haar_orthogonal, orthonormal_basis

__all__ = [
    "MUON_COEFFICIENTS",
    "haar_orthogonal",
    "msign",
    "orthonormal_basis",
    "psd_power",
]
