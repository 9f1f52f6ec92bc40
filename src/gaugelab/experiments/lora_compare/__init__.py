"""Comparing and composing adapters: gauge-invariant subspace similarity and static composition.

* ``compose`` — ``compose_lora``: compose stored or folder adapters, write the PEFT result, and
  measure the rank ledger, the interference of every pair and — with base model and data — the
  validation losses of the composition against each adapter alone.
* ``results`` — What :func:`~gaugelab.experiments.lora_compare.run.compare_lora` finds: per module,
  the row and column subspace comparison of two updates, and the whole comparison.
* ``run`` — Comparing and composing adapters: gauge-invariant subspace similarity and static
  composition.
* ``sources`` — What ``lora compare`` / ``lora compose`` need beside a resolved source
  (:func:`gaugelab.experiments.lora.sources.find`), when its base model is known: its validation
  data, its base with the updates merged, and losses.
* ``views`` — Tables, φ heatmaps and the HTML reports of ``lora compare`` and ``lora compose``.

The public names of ``run`` are re-exported here (imported on first use).
"""

from gaugelab.lazy import lazy_face

__getattr__, __dir__ = lazy_face(__name__, "run")
