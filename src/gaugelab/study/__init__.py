"""The run harness: specs and manifests, the run store, checkpoints, sweeps, comparisons, reports.

* ``spec`` — frozen, content-hashed experiment specs and their manifests;
* ``store`` — the append-only SQLite run store (studies, runs, attempts, metrics, artifacts);
* ``checkpoint`` — safetensors + JSON checkpoints for bit-identical resume;
* ``runner`` / ``sweep`` — one attempt in a process; grids of runs on local processes or Ray;
* ``compare`` — paired differences, envelopes, iso-quality cost ratios, Pareto and feasible sets;
* ``report`` — matplotlib figures and a self-contained HTML report per study.
"""

from gaugelab.study.checkpoint import (
    Checkpoint,
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
)
from gaugelab.study.runner import AdmissionError, RunContext, ValidationStop, execute_run
from gaugelab.study.spec import ExperimentSpec, Manifest
from gaugelab.study.store import DEFAULT_STORE_PATH, TERMINATION_CLASSES, RunStore, StoreError
from gaugelab.study.sweep import Sweep, SweepResult, run_sweep

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
    "SweepResult",
    "ValidationStop",
    "execute_run",
    "latest_checkpoint",
    "load_checkpoint",
    "run_sweep",
    "save_checkpoint",
]
