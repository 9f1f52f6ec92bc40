"""Symmetry: gauge groups (sample, contains) and their action on factor pairs."""

from .actions import act, contragredient, inverse_transpose, represented
from .groups import (
    GROUPS,
    GeneralLinear,
    Group,
    Orthogonal,
    Permutation,
    PositiveMonomial,
    SignedPermutation,
    SpecialOrthogonal,
    Torus,
    Trivial,
    make_group,
)
from .state import transform_state

__all__ = [
    "GROUPS",
    "GeneralLinear",
    "Group",
    "Orthogonal",
    "Permutation",
    "PositiveMonomial",
    "SignedPermutation",
    "SpecialOrthogonal",
    "Torus",
    "Trivial",
    "act",
    "contragredient",
    "inverse_transpose",
    "make_group",
    "represented",
    "transform_state",
]
