"""Expressivity ledgers: what rank is enough for, with the quantifiers carried along (seed 003
§0x0A).

* ``claims`` — The six coordinates every expressivity claim declares (seed 003 §0x0AA), one record
  per ledger of :mod:`gaugelab.lowrank.expressivity.ledgers`.
* ``deep`` — Deep-factorization ledgers of :mod:`gaugelab.lowrank.expressivity.ledgers` (seed 003
  §0x0AQ–0x0AT): the complement recurrence, the compression residual and bound, the Deep LoRA
  parameter count.
* ``deep_init`` — Compressed Deep LoRA initialization (seed 003 §0x0AU): full-width
  scaled-orthogonal factors, one first-batch gradient, the active bases it determines, ``ε_ℓ I_r``
  inner factors, and the two optimizer groups of the compact adapter.
* ``ledgers`` — Expressivity ledgers: what rank is enough for, with the quantifiers carried along.

The public names of ``ledgers`` and ``deep_init`` are re-exported here (imported on first use).
"""

from gaugelab.lazy import lazy_face

__getattr__, __dir__ = lazy_face(__name__, "ledgers", "deep_init")
