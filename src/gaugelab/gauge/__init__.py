"""Symmetry: gauge groups (sample, contains) and their action on factor pairs."""

from .actions import act, inverse_transpose, represented
from .groups import (
    GROUPS,
    GeneralLinear,
    Group,
    Orthogonal,
    SignedPermutation,
    SpecialOrthogonal,
    Torus,
    Trivial,
    make_group,
)

__all__ = [
    "GROUPS",
    "GeneralLinear",
    "Group",
    "Orthogonal",
    "SignedPermutation",
    "SpecialOrthogonal",
    "Torus",
    "Trivial",
    "act",
    "inverse_transpose",
    "make_group",
    "represented",
]
