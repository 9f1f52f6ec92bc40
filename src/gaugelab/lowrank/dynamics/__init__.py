"""Factor dynamics of LoRA training: gradients, product motion, the scalar gauge, diagnostics (seed
003 §0x07–0x08).

* ``diagnostics`` — Per-step factor diagnostics of LoRA training, and factor rebalancing with its
  state policy.
* ``gauge`` — The scalar factor gauge, Adam's first step, factor decay, rank scaling and dtype
  range.
* ``motion`` — Factor dynamics of one LoRA update ``Δ = s·B A``: gradients, product motion, the
  scalar gauge.
* ``rank_scaling`` — Rank scaling of the initial product velocity (seed 003 §0x08F–0x08G): the
  exponent ``1 − 2p − q``, the coefficient ``s² r σ_A²`` and the exact rank ledger.
* ``rebalance`` — Rebalancing LoRA factors, ``(B, A) ↦ (B G, G⁻¹ A)``, with the optimizer state
  moved or reset.

The public names of ``motion``, ``diagnostics`` are re-exported here (imported on first use).
"""

from gaugelab.lazy import lazy_face

__getattr__, __dir__ = lazy_face(__name__, "motion", "diagnostics")
