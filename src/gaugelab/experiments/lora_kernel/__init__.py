"""Kernel diagnostics of LoRA fine-tuning: the three matched paths under SGD and Adam.

* ``results`` — The kernel study read back from the store: per optimizer, the paths' diagnostics by
  step; tables, the four-diagnostic figure, notes, and the HTML report.
* ``run`` — Kernel diagnostics of LoRA fine-tuning: the three matched paths under SGD and Adam.
* ``spec`` — The kernel-diagnostics protocol's configuration: the three matched LoRA paths.
* ``train`` — The kernel protocol's run: the matched LoRA paths trained side by side and diagnosed.

The public names of ``run`` are re-exported here (imported on first use).
"""

from gaugelab._lazy import lazy_exports

_EXPORTS = {
    "EXPERIMENT": "run",
    "LIMITS": "run",
    "LR": "run",
    "OPTIMIZERS": "run",
    "PATHS": "run",
    "KernelResult": "run",
    "KernelSpec": "run",
    "OptimizerRun": "run",
    "collect": "run",
    "diagnostics_figure": "run",
    "limits_table": "run",
    "notes": "run",
    "plan": "run",
    "quick_spec": "run",
    "report": "run",
    "run_lora_kernel": "run",
    "tables": "run",
    "train_paths": "run",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

__all__ = sorted(_EXPORTS)
