"""Gauge-invariant subspace similarity of low-rank updates (seed 003 §0x06).

* ``angles`` — Principal angles between two subspaces given by orthonormal bases, batched, accurate
  at every angle.
* ``compare`` — Gauge-invariant subspace similarity of low-rank updates: bases, principal angles,
  overlaps.
* ``null`` — Null models for subspace similarity: the exact Haar baseline and a seeded Monte-Carlo
  null.
* ``phi`` — The LoRA paper's normalised similarity φ over leading singular directions, and
  orthogonal Procrustes alignment of bases.

The public names of ``compare`` are re-exported here (imported on first use).
"""

from gaugelab.lazy import lazy_face

__getattr__, __dir__ = lazy_face(__name__, "compare")
