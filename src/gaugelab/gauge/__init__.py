"""Symmetry: gauge groups (sample, contains) and their action on factor pairs."""

from gaugelab.gauge.actions import act, contragredient, inverse_transpose, represented
from gaugelab.gauge.direct_sum import DirectSum
from gaugelab.gauge.groups import (
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
from gaugelab.gauge.state import transform_state

__all__ = [
    "GROUPS",
    "DirectSum",
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
