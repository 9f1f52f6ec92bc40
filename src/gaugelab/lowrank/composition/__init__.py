"""Static composition of low-rank updates: rank ledger, interference, PEFT output (seed 003 §0x05).

* ``adapters`` — Static composition of PEFT adapters, written as a PEFT adapter.
* ``interference`` — Novelty apart from interference for two updates.
* ``ledger`` — Static composition of low-rank updates: concatenated factors, rank ledger,
  interference.

The public names of ``ledger`` and ``adapters`` are re-exported here.
"""

from gaugelab.lowrank.composition.adapters import ComposedAdapter, ModuleLedger, compose_adapters
from gaugelab.lowrank.composition.ledger import (
    Compressed,
    Interference,
    StageRow,
    StaticComposition,
    StaticMergeCheck,
    compose_static,
    compress,
    interference,
    staged_expansion_report,
    static_merge_exists,
)

__all__ = [
    "ComposedAdapter",
    "Compressed",
    "Interference",
    "ModuleLedger",
    "StageRow",
    "StaticComposition",
    "StaticMergeCheck",
    "compose_adapters",
    "compose_static",
    "compress",
    "interference",
    "staged_expansion_report",
    "static_merge_exists",
]
