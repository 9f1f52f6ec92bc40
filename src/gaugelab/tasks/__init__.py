"""Tasks: deterministic problem instances given a seed.

* :class:`MatrixSensing` — the matrix-sensing testbed (docs/protocols.md §3), on the functional core
  :func:`make_sensing` / :class:`SensingInstance` / :func:`factor_init`, with the metrics
  :func:`effective_rank` and :func:`balancedness`;
* :class:`ModularArithmetic` — ``(a op b) mod p`` tables (docs/protocols.md §5);
* :class:`CharText` — character-level text windows with a seeded minibatch stream; the
  packaged tiny-shakespeare by :meth:`CharText.tiny_shakespeare` (digest
  :data:`TINY_SHAKESPEARE_SHA256`, checked on every load; raw text :func:`tiny_shakespeare_bytes`).
"""

from gaugelab.tasks.modular import ModularArithmetic
from gaugelab.tasks.sensing import (
    MatrixSensing,
    SensingInstance,
    balancedness,
    effective_rank,
    factor_init,
    make_sensing,
)
from gaugelab.tasks.text import TINY_SHAKESPEARE_SHA256, CharText, tiny_shakespeare_bytes

__all__ = [
    "TINY_SHAKESPEARE_SHA256",
    "CharText",
    "MatrixSensing",
    "ModularArithmetic",
    "SensingInstance",
    "balancedness",
    "effective_rank",
    "factor_init",
    "make_sensing",
    "tiny_shakespeare_bytes",
]
