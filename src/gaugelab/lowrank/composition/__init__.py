"""Static composition of low-rank updates: rank ledger, interference, PEFT output (seed 003 §0x05).

* ``adapters`` — Static composition of PEFT adapters, written as a PEFT adapter.
* ``interference`` — Novelty apart from interference for two updates.
* ``ledger`` — Static composition of low-rank updates: concatenated factors, rank ledger,
  interference.

The public names of ``ledger``, ``adapters`` are re-exported here (imported on first use).
"""

from gaugelab.lazy import lazy_face

__getattr__, __dir__ = lazy_face(__name__, "ledger", "adapters")
