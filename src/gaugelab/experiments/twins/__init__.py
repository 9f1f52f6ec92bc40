"""The attention-head twin protocol (docs/protocols.md §5).

* ``data`` — The twin protocol's data: full-batch modular addition, or a shared character stream.
* ``figures`` — The twin study's figures: one panel per optimizer, each twin's distance to its
  base.
* ``results`` — The twin study read back from the store: rows, verdicts, paired statistics, tables,
  report (its figures: :mod:`gaugelab.experiments.twins.figures`).
* ``run`` — The attention-head twin protocol: configuration, data, one run in the harness, the
  study.
* ``spec`` — The twin protocol's configuration: optimizers and their hyperparameters, the model
  configs, and :class:`TwinSpec` (one optimizer's twin run).

The public names of ``run`` are re-exported here (imported on first use).
"""

from gaugelab._lazy import lazy_exports

_EXPORTS = {
    "EXPERIMENT": "run",
    "DEFAULT_OPTIMIZERS": "run",
    "HYBRID": "run",
    "PROTOCOL_HYPER": "run",
    "QUICK_CHECKPOINTS": "run",
    "QUICK_STEPS": "run",
    "TEXT_HYPER": "run",
    "ModularData": "run",
    "TextData": "run",
    "TwinRow": "run",
    "TwinSpec": "run",
    "TwinStudy": "run",
    "TwinsResult": "run",
    "build_members": "run",
    "collect": "run",
    "distance_figure": "run",
    "plan": "run",
    "report": "run",
    "run_twins": "run",
    "run_twins_study": "run",
    "tables": "run",
    "text_model_config": "run",
    "text_twin": "run",
    "twin_data": "run",
    "twin_model_config": "run",
    "twin_optimizers": "run",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

__all__ = sorted(_EXPORTS)
