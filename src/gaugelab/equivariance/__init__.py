"""Analysis of gauge equivariance: the twin check, closed forms, structure, flows."""

from gaugelab.equivariance.check import EquivarianceReport, check_equivariance
from gaugelab.equivariance.defects import adam_defect_map, adam_direction, adam_first_step_defect
from gaugelab.equivariance.distance import relative_distance
from gaugelab.equivariance.flows import effective_clock, preconditioned_flow
from gaugelab.equivariance.structure import gram_representative
from gaugelab.equivariance.targets import resolve_optimizer
from gaugelab.equivariance.verdicts import (
    BASIS_SENSITIVE,
    BREAKS,
    CHAOTIC,
    CHECK_TO_TWINS,
    CHECK_VERDICTS,
    EQUIVARIANT,
    INCONCLUSIVE,
    NONDETERMINISTIC,
    PRECISION_LIMITED,
    TWIN_VERDICTS,
    VERDICTS,
)

__all__ = [
    "BASIS_SENSITIVE",
    "BREAKS",
    "CHAOTIC",
    "CHECK_TO_TWINS",
    "CHECK_VERDICTS",
    "EQUIVARIANT",
    "INCONCLUSIVE",
    "NONDETERMINISTIC",
    "PRECISION_LIMITED",
    "TWIN_VERDICTS",
    "VERDICTS",
    "EquivarianceReport",
    "adam_defect_map",
    "adam_direction",
    "adam_first_step_defect",
    "check_equivariance",
    "effective_clock",
    "gram_representative",
    "preconditioned_flow",
    "relative_distance",
    "resolve_optimizer",
]
