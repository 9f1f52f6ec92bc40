"""The atlas: every optimizer a module exports, certified under each gauge group on each problem.

* ``checks`` — One check of the atlas: ``check_equivariance`` under a time limit, whatever it
  ends in recorded as the run's result.
* ``figures`` — The gauge twin's step-1 distance beside the noise floor, per optimizer.
* ``results`` — The atlas read back from the store: one row per check.
* ``run`` — The experiment surface: ``atlas_spec``, ``plan``, ``run_atlas``, ``EXPERIMENT``.
* ``sources`` — Where the optimizers come from: every ``torch.optim.Optimizer`` class a module
  exports, with its code's version.
* ``spec`` — The atlas's configuration (:class:`AtlasSpec`, :class:`Candidate`).
* ``views`` — Tables, the Markdown of docs/atlas.md, the HTML report.

The public names of ``run`` are re-exported here (imported on first use).
"""

from gaugelab.lazy import lazy_face

__getattr__, __dir__ = lazy_face(__name__, "run")
