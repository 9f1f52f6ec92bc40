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
* ``views`` — The twin study's tables, verdict lines and HTML report (its figures:
  :mod:`gaugelab.experiments.twins.figures`).

The public names of ``run``, ``views`` are re-exported here (imported on first use).
"""

from gaugelab.lazy import lazy_face

__getattr__, __dir__ = lazy_face(__name__, "run", "views")
