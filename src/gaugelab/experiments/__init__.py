"""Experiments: the reference protocols, one package each, every one a declarative study.

Every experiment package has the same surface, named by its :class:`~gaugelab.study.experiment.
Experiment` record ``EXPERIMENT`` (all of them in :data:`gaugelab.experiments.registry.REGISTRY`,
by study kind):

* a frozen **spec** (an :class:`~gaugelab.study.spec.ExperimentSpec`: every default is the
  protocol of docs/protocols.md, every field described; it names its trainer);
* ``plan(spec) -> Sweep``: the study's runs, executed by :func:`gaugelab.study.run_sweep` — the
  one executor (local processes or Ray), which skips completed runs, retries only
  infrastructure failures and resumes interrupted runs from their checkpoints;
* ``collect(store, study) -> Result``: the typed result, read back from the run store through
  its verified reader (:mod:`gaugelab.study.store.results`; nothing recomputed that a run
  already stored), with a versioned JSON form (``EXPERIMENT.to_json`` / ``from_json``);
* ``tables(result) -> list[Table]``: renderable rows (no rich objects), shown by the CLI and by
  the report alike;
* ``report(result, out_dir) -> Path``: figures and the self-contained HTML report;
* ``run_…(spec, **options) -> StudyOutcome``: all of it at once
  (:func:`~gaugelab.study.experiment.run_experiment`); the ``gaugelab`` commands are these calls
  plus rendering.

Packages (files inside named by role: ``spec``, ``train``, ``results``, ``views``, ``figures``,
``run``):

* :mod:`~gaugelab.experiments.sensing` — the matrix-sensing zoo (``zoo``, docs/protocols.md §3)
  and the Adam-p dial (``dial``, §4);
* :mod:`~gaugelab.experiments.twins` — the attention-head twin protocol (§5);
* :mod:`~gaugelab.experiments.lora` — LoRA on real text: a pretrain run, full and LoRA
  fine-tuning candidates, and ``inspect_lora`` (docs/commands/lora.md);
* :mod:`~gaugelab.experiments.lora_compare` — comparing and composing adapters;
* :mod:`~gaugelab.experiments.lora_twins`, :mod:`~gaugelab.experiments.lora_kernel`,
  :mod:`~gaugelab.experiments.intrinsic`, :mod:`~gaugelab.experiments.learn_forget` — the
  LoRA gauge twins, kernel diagnostics, intrinsic dimension and the rank study;
* :mod:`~gaugelab.experiments.registry` — study kind → record, and a study's report by its
  experiment (``gaugelab report``).
"""

from gaugelab.lazy import lazy_exports

_EXPORTS = {
    "StudyOutcome": "gaugelab.study.experiment",
    "DialResult": "sensing.dial",
    "DialSpec": "sensing.dial",
    "run_dial": "sensing.dial",
    "LearningRateGrids": "sensing.zoo",
    "ZooResult": "sensing.zoo",
    "ZooSpec": "sensing.zoo",
    "run_zoo": "sensing.zoo",
}
"""Exported name → its module, imported on first use: an experiment imports torch, and a
command that needs one experiment (``gaugelab report`` of a twins study) imports only it."""


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)


__all__ = [
    "DialResult",
    "DialSpec",
    "LearningRateGrids",
    "StudyOutcome",
    "ZooResult",
    "ZooSpec",
    "run_dial",
    "run_zoo",
]
