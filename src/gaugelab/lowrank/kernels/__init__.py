"""Kernel diagnostics of fine-tuning: exact small-scale objects and probe estimators at scale (seed
003 §0x09).

* ``estimate`` — The kernel diagnostics at scale: JVPs, VJPs and seeded output probes, never a
  dense J or K.
* ``exact`` — Exact small-scale kernel objects: dense Jacobians and kernels, LoRA factor Jacobians
  in closed Kronecker form, restricted and sign kernels, and the NTK-problem rank counts.
* ``explanation`` — Kernel diagnostics: a kernel explanation is a conditional trajectory model.
* ``outputs`` — The declared objects of a kernel diagnostic: stacked outputs, trained parameters,
  metric.

The public names of ``explanation`` are re-exported here (imported on first use).
"""

from gaugelab.lazy import lazy_face

__getattr__, __dir__ = lazy_face(__name__, "explanation")
