"""Analysis of gauge equivariance: the twin check, closed forms, structure, flows."""

from gaugelab.equivariance.check import (
    BREAKS,
    EQUIVARIANT,
    INCONCLUSIVE,
    NONDETERMINISTIC,
    PRECISION_LIMITED,
    EquivarianceReport,
    check_equivariance,
    resolve_optimizer,
)
from gaugelab.equivariance.defects import adam_defect_map, adam_direction, adam_first_step_defect
from gaugelab.equivariance.flows import effective_clock, preconditioned_flow
from gaugelab.equivariance.structure import gram_representative

__all__ = [
    "BREAKS",
    "EQUIVARIANT",
    "INCONCLUSIVE",
    "NONDETERMINISTIC",
    "PRECISION_LIMITED",
    "EquivarianceReport",
    "adam_defect_map",
    "adam_direction",
    "adam_first_step_defect",
    "check_equivariance",
    "effective_clock",
    "gram_representative",
    "preconditioned_flow",
    "resolve_optimizer",
]
