"""Intrinsic dimension: projections with exact adjoints, DID and SAID, the d90 estimate (seed 003
§0x02).

* ``estimate`` — The d90 grid estimate: thresholds, seed aggregation, crossing, bracket and
  censoring.
* ``fastfood`` — The Fastfood projection of seed 003 §0x02D: padding, blocks ``(1/p) H G Π H B``,
  stacking, trimming, and the adjoint in reverse order with the inverse permutation.
* ``hadamard`` — The fast Walsh–Hadamard transform in torch: batched, autograd-correct, ``O(n log
  n)``.
* ``projections`` — Fixed random projections ``P: ℝ^d → ℝ^D`` with exact adjoints: one interface,
  four families.
* ``protocol`` — Intrinsic dimension as a protocol: projections with exact adjoints, DID and SAID,
  the d90 rule.
* ``reparam`` — DID and SAID: any ``nn.Module`` trained in a fixed random subspace, without
  parameter surgery.
* ``thresholds`` — Thresholds of the d90 rule: the historical ``ratio · S_full``, the normalized
  gain, and the quality transform a lower-is-better metric needs before a ratio means anything.

The public names of ``protocol`` are re-exported here (imported on first use).
"""

from gaugelab.lazy import lazy_face

__getattr__, __dir__ = lazy_face(__name__, "protocol")
