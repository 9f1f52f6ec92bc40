"""Experiments: the reference protocols, each as a declarative study on the harness.

Every experiment module has the same small surface:

* a frozen **spec** (an :class:`~gaugelab.study.spec.ExperimentSpec`: every default is the
  protocol of docs/protocols.md, every field described):
  :class:`~gaugelab.experiments.sensing.zoo.ZooSpec`,
  :class:`~gaugelab.experiments.sensing.dial.DialSpec`,
  :class:`~gaugelab.experiments.twins.run.TwinStudy`,
  :class:`~gaugelab.experiments.lora.run.FinetuneSpec`;
* ``plan(spec) -> Sweep``: the study's runs, executed by :func:`gaugelab.study.run_sweep` — the
  one executor (local processes or Ray), which skips completed runs, retries only
  infrastructure failures and resumes interrupted runs from their checkpoints;
* ``collect(store, study) -> Result``: the typed result, read back from the run store (stored
  metrics, artifacts and verdicts; nothing recomputed that a run already stored);
* ``tables(result) -> list[Table]``: renderable rows (no rich objects), shown by the CLI and by
  the report alike;
* ``report(result, out_dir) -> Path``: figures and the self-contained HTML report.

``run_zoo``, ``run_dial``, ``run_twins_study`` and ``run_lora_finetune`` do all of it at once
(:func:`~gaugelab.study.experiment.run_experiment`) and return a
:class:`~gaugelab.study.experiment.StudyOutcome` (result, the executor's account, report
path); the ``gaugelab`` commands are these calls plus rendering.

Modules:

* :mod:`~gaugelab.experiments.sensing.zoo` — the matrix-sensing optimizer zoo (docs/protocols.md
§3);
* :mod:`~gaugelab.experiments.sensing.dial` — the Adam-p dial (docs/protocols.md §4);
* :mod:`~gaugelab.experiments.twins.run` — the attention-head twin protocol (docs/protocols.md §5);
* :mod:`~gaugelab.experiments.lora.run` — LoRA on real text: a pretrain run, full and LoRA
  fine-tuning candidates, and ``inspect_lora`` (rank policies, truncation, the evidence
  ladder; docs/commands/lora.md);
* :mod:`~gaugelab.experiments.registry` — study kind → experiment module, and a study's
  report by its experiment (``gaugelab report``);
* private: ``_sensing`` (the batched sensing task), ``_training`` (the resumable training loop),
  ``_rule_results`` (a rule's result, recorded and read back verified), ``_rates`` (rate
  selection), ``_grids`` (the zoo's rate grids), ``_split`` (the zoo's split verdict),
  ``_convex`` (the convex reference row), ``sensing_report`` (the zoo's and the dial's tables
  and reports), ``_sensing_figures`` (their figures), ``_twins_spec`` / ``_twins_data`` /
  ``_twins_results`` / ``_twins_figures`` (the twin protocol's configuration, data, read-back,
  and figures), ``_study`` (what the experiments share).
"""

from gaugelab._lazy import lazy_exports

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
