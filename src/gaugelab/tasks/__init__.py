"""Tasks: deterministic problem instances given a seed.

* :class:`MatrixSensing` — the matrix-sensing testbed (docs/protocols.md §3), on the functional core
  :func:`make_sensing` / :class:`SensingInstance` / :func:`factor_init`, with the metrics
  :func:`effective_rank` and :func:`balancedness`;
* :class:`ModularArithmetic` — ``(a op b) mod p`` tables (docs/protocols.md §5);
* :class:`CharText` — character-level text windows with a seeded minibatch stream; the
  packaged tiny-shakespeare by :meth:`CharText.tiny_shakespeare` (digest
  :data:`TINY_SHAKESPEARE_SHA256`, checked on every load; raw text :func:`tiny_shakespeare_bytes`);
* :class:`TokenText` — a text as a model's token ids (its tokenizer, or bytes), windowed and
  streamed as :class:`CharText`;
* :class:`TwoDomainText` — the retention and target domains with one vocabulary and seeded
  train / val / test splits (:mod:`gaugelab.tasks.domains`), defined by a :class:`TwoDomainSpec`
  from :func:`two_domain_spec`, whose :class:`TextSource` records (tiny-shakespeare, the pinned
  stdlib list :data:`STDLIB_FILES`, user paths) pin every file's sha256
  (:mod:`gaugelab.tasks.sources`);
* :func:`token_windows` — a user's text or JSONL file (:func:`read_documents`) as next-token
  windows under a token budget (:mod:`gaugelab.tasks.token_windows`).
"""

from gaugelab.tasks.domains import (
    DomainText,
    TwoDomainSpec,
    TwoDomainText,
    UnknownReport,
    two_domain_spec,
)
from gaugelab.tasks.measures import balancedness, effective_rank
from gaugelab.tasks.modular import ModularArithmetic
from gaugelab.tasks.sensing import (
    MatrixSensing,
    SensingInstance,
    factor_init,
    make_sensing,
)
from gaugelab.tasks.sources import (
    STDLIB_FILES,
    TextSource,
    path_source,
    read_source,
    stdlib_source,
    tiny_shakespeare_source,
)
from gaugelab.tasks.text import TINY_SHAKESPEARE_SHA256, CharText, tiny_shakespeare_bytes
from gaugelab.tasks.token_windows import read_documents, token_windows
from gaugelab.tasks.tokens import TokenText

__all__ = [
    "STDLIB_FILES",
    "TINY_SHAKESPEARE_SHA256",
    "CharText",
    "DomainText",
    "MatrixSensing",
    "ModularArithmetic",
    "SensingInstance",
    "TextSource",
    "TokenText",
    "TwoDomainSpec",
    "TwoDomainText",
    "UnknownReport",
    "balancedness",
    "effective_rank",
    "factor_init",
    "make_sensing",
    "path_source",
    "read_documents",
    "read_source",
    "stdlib_source",
    "tiny_shakespeare_bytes",
    "tiny_shakespeare_source",
    "token_windows",
    "two_domain_spec",
]
