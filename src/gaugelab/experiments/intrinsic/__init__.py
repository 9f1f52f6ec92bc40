"""Intrinsic dimension (d90) on the digits and the character model: DID and SAID as a protocol.

* ``budget`` — Which coordinate budgets ``d`` a study's problem admits, checked before any run
  exists.
* ``results`` — The d90 study read back from the store: trial records, the estimate, tables,
  figure, report.
* ``run`` — Intrinsic dimension (d90) on the digits: DID and SAID as a measured protocol.
* ``spec`` — The intrinsic-dimension protocol's configuration: the digits pretrain run and the d90
  study.
* ``train`` — The intrinsic-dimension protocol's training: the digits pretrain and one trial.

The public names of ``run`` are re-exported here (imported on first use).
"""

from gaugelab.lazy import lazy_face

__getattr__, __dir__ = lazy_face(__name__, "run")
