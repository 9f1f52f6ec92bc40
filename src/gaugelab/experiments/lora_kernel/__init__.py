"""Kernel diagnostics of LoRA fine-tuning: the three matched paths under SGD and Adam.

* ``results`` — The kernel study read back from the store: per optimizer, the paths' diagnostics by
  step; tables, the four-diagnostic figure, notes, and the HTML report.
* ``run`` — Kernel diagnostics of LoRA fine-tuning: the three matched paths under SGD and Adam.
* ``spec`` — The kernel-diagnostics protocol's configuration: the three matched LoRA paths.
* ``train`` — The kernel protocol's run: the matched LoRA paths trained side by side and diagnosed.

The public names of ``run`` are re-exported here (imported on first use).
"""

from gaugelab.lazy import lazy_face

__getattr__, __dir__ = lazy_face(__name__, "run")
