"""The geometry of one LoRA update: the factor map, its differential, gauge and projectors (seed
003 §0x03).

* ``factor_map`` — The geometry of one LoRA update: the factor map ``φ(B, A) = B A``, its
  differential and adjoint, the infinitesimal gauge, the fixed-rank dimension and the tangent /
  normal projectors.
* ``projectors`` — Tangent and normal projectors of :mod:`gaugelab.lowrank.geometry.factor_map`
  (seed 003 §0x03G–0x03I).

The public names of ``factor_map`` are re-exported here (imported on first use).
"""

from gaugelab.lazy import lazy_face

__getattr__, __dir__ = lazy_face(__name__, "factor_map")
