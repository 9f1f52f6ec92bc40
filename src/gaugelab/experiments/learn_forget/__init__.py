"""Choosing a rank honestly: the learning–forgetting study with a sealed test.

* ``cells`` — The learning–forgetting study's cells read back from the store (nothing recomputed).
* ``decide`` — The learning–forgetting decision: validation-only records, gates, selection, the
  sealed test.
* ``design`` — The learning–forgetting study as a declared design and as candidate manifests.
* ``figures`` — The learning–forgetting study's figures: gain against forgetting, the full update's
  rank.
* ``manifest`` — The learning–forgetting study's own low-rank study manifest (seed 003
  §0x00F–0x00K).
* ``measure`` — What the learning–forgetting decision measures on the recorded states.
* ``notes`` — The learning–forgetting study's notes: the verdict lines and what the study does not
  show.
* ``results`` — The learning–forgetting study read back from the store: cells, measures, decision,
  test.
* ``run`` — Choosing a rank honestly: the learning–forgetting study (``gaugelab learn-forget``).
* ``spec`` — The learning–forgetting study's declaration: candidates, blocks, nuisance,
  checkpoints, gates.
* ``train`` — The learning–forgetting study's training cell and the evaluation of its recorded
  states.
* ``views`` — The learning–forgetting study's tables, figures, notes and report.

The public names of ``run`` are re-exported here (imported on first use).
"""

from gaugelab.lazy import lazy_face

__getattr__, __dir__ = lazy_face(__name__, "run")
