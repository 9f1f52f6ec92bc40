"""Gauge-invariant subspace similarity of low-rank updates (seed 003 §0x06).

* ``angles`` — Principal angles between two subspaces given by orthonormal bases, batched, accurate
  at every angle.
* ``compare`` — Gauge-invariant subspace similarity of low-rank updates: bases, principal angles,
  overlaps.
* ``null`` — Null models for subspace similarity: the exact Haar baseline and a seeded Monte-Carlo
  null.
* ``phi`` — The LoRA paper's normalised similarity φ over leading singular directions, and
  orthogonal Procrustes alignment of bases.

The public names of ``compare`` are re-exported here.
"""

from gaugelab.lowrank.subspaces.compare import (
    BASIS_POLICIES,
    SIDES,
    HaarBaseline,
    HaarNull,
    PhiMatrix,
    ProcrustesFit,
    SubspaceComparison,
    SubspaceReport,
    UpdateBases,
    compare_updates,
    haar_baseline,
    haar_null,
    lora_phi,
    phi_matrix,
    principal_angles,
    procrustes_align,
    update_bases,
)

__all__ = [
    "BASIS_POLICIES",
    "SIDES",
    "HaarBaseline",
    "HaarNull",
    "PhiMatrix",
    "ProcrustesFit",
    "SubspaceComparison",
    "SubspaceReport",
    "UpdateBases",
    "compare_updates",
    "haar_baseline",
    "haar_null",
    "lora_phi",
    "phi_matrix",
    "principal_angles",
    "procrustes_align",
    "update_bases",
]
