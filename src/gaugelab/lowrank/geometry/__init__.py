"""The geometry of one LoRA update: the factor map, its differential, gauge and projectors (seed
003 §0x03).

* ``factor_map`` — The geometry of one LoRA update: the factor map ``φ(B, A) = B A``, its
  differential and adjoint, the infinitesimal gauge, the fixed-rank dimension and the tangent /
  normal projectors.
* ``projectors`` — Tangent and normal projectors of :mod:`gaugelab.lowrank.geometry.factor_map`
  (seed 003 §0x03G–0x03I).

The public names of ``factor_map`` are re-exported here.
"""

from gaugelab.lowrank.geometry.factor_map import (
    EXACT_JACOBIAN_LIMIT,
    FixedRankDimension,
    JacobianRank,
    Matrix,
    exact_rank,
    factor_map_adjoint,
    factor_map_differential,
    factor_map_jacobian,
    fixed_rank_dimension,
    flatten_factors,
    gauge_directions,
    is_normal,
    jacobian_rank,
    normal_project,
    normal_projector_operator,
    orthogonal_projectors,
    svd_rank,
    tangent_project,
    tangent_projector_operator,
    unflatten_factors,
)

__all__ = [
    "EXACT_JACOBIAN_LIMIT",
    "FixedRankDimension",
    "JacobianRank",
    "Matrix",
    "exact_rank",
    "factor_map_adjoint",
    "factor_map_differential",
    "factor_map_jacobian",
    "fixed_rank_dimension",
    "flatten_factors",
    "gauge_directions",
    "is_normal",
    "jacobian_rank",
    "normal_project",
    "normal_projector_operator",
    "orthogonal_projectors",
    "svd_rank",
    "tangent_project",
    "tangent_projector_operator",
    "unflatten_factors",
]
