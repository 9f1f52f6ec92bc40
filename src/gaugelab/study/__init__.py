"""The run harness: specs, the run store, sweeps, the experiment record, statistics, reports.

* ``spec`` — frozen, content-hashed experiment specs and their manifests;
* ``store/`` — the append-only SQLite run store (studies, runs, attempts, metrics, artifacts),
  where each attempt names its owner process and a run is claimed before it trains, and its
  one verified read path of results (``store.results``);
* ``checkpoint`` — safetensors + JSON checkpoints for bit-identical resume;
* ``context`` — what a running experiment may do (log, progress, artifacts, checkpoints);
* ``runner`` / ``sweep`` / ``executors/`` — one attempt in a process; grids of runs on local
  processes or Ray, safe to run twice at once into one store, stopped by Ctrl-C with
  :class:`SweepInterrupted`;
* ``experiment`` — the :class:`~gaugelab.study.experiment.Experiment` record every experiment
  exports, and ``run_experiment``;
* ``stats/`` — paired differences, envelopes, iso-quality cost ratios, Pareto and feasible sets;
* ``report/`` — the one report builder (a self-contained HTML report per study), its figures
  (PNG + SVG) and the generic report of any study from the store;
* ``release/`` — release governance of a rank study: the declared design, candidate selection,
  and the sealed test (opened once, after the release is frozen, every access logged).
"""

from gaugelab.lazy import lazy_exports

_EXPORTS = {
    "Checkpoint": "checkpoint",
    "latest_checkpoint": "checkpoint",
    "load_checkpoint": "checkpoint",
    "save_checkpoint": "checkpoint",
    "AdmissionError": "runner",
    "RunContext": "runner",
    "ValidationStop": "runner",
    "execute_run": "runner",
    "ExperimentSpec": "spec",
    "Manifest": "spec",
    "DEFAULT_STORE_PATH": "store.db",
    "TERMINATION_CLASSES": "store.db",
    "RunStore": "store.db",
    "StoreError": "store.db",
    "Sweep": "sweep",
    "SweepInterrupted": "sweep",
    "SweepResult": "sweep",
    "run_sweep": "sweep",
}
"""Exported name → its submodule, imported on first use: the store alone needs neither torch
(checkpoints) nor the executors, so ``gaugelab runs`` and store-only worker processes stay
light."""


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)


__all__ = [
    "DEFAULT_STORE_PATH",
    "TERMINATION_CLASSES",
    "AdmissionError",
    "Checkpoint",
    "ExperimentSpec",
    "Manifest",
    "RunContext",
    "RunStore",
    "StoreError",
    "Sweep",
    "SweepInterrupted",
    "SweepResult",
    "ValidationStop",
    "execute_run",
    "latest_checkpoint",
    "load_checkpoint",
    "run_sweep",
    "save_checkpoint",
]
