"""LoRA gauge twins: the twin triplet on LoRA fine-tuning of the character model.

* ``results`` — The LoRA twin study read back from the store: one row per optimizer, tables,
  figure, report.
* ``run`` — LoRA gauge twins: the twin triplet on LoRA fine-tuning of the character model.
* ``spec`` — The LoRA twin protocol's configuration: one optimizer's twin run on the character
  model.
* ``train`` — One LoRA twin run: warm up an adapter, build its twins, train them as one ensemble,
  measure.

The public names of ``run`` are re-exported here (imported on first use).
"""

from gaugelab.lazy import lazy_face

__getattr__, __dir__ = lazy_face(__name__, "run")
