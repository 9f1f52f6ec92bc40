"""The run harness: specs and manifests, the run store, checkpoints, sweeps, comparisons, reports.

* ``spec`` — frozen, content-hashed experiment specs and their manifests;
* ``store`` — the append-only SQLite run store (studies, runs, attempts, metrics, artifacts),
  where each attempt names its owner process and a run is claimed before it trains;
* ``checkpoint`` — safetensors + JSON checkpoints for bit-identical resume;
* ``context`` — what a running experiment may do (log, progress, artifacts, checkpoints);
* ``runner`` / ``sweep`` — one attempt in a process; grids of runs on local processes or Ray,
  safe to run twice at once into one store, stopped by Ctrl-C with :class:`SweepInterrupted`;
* ``compare`` — paired differences, envelopes, iso-quality cost ratios, Pareto and feasible sets;
* ``figures`` — matplotlib figures saved as PNG + SVG; ``report`` — a self-contained HTML
  report per study; ``summary`` — the generic report of any study from the store.
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
from gaugelab.study.sweep import Sweep, SweepInterrupted, SweepResult, run_sweep

_CHECKPOINT = ("Checkpoint", "latest_checkpoint", "load_checkpoint", "save_checkpoint")


def __getattr__(name: str):
    # checkpoints need torch; loaded on first use so store-only worker processes stay light
    if name in _CHECKPOINT:
        from gaugelab.study import checkpoint

        return getattr(checkpoint, name)
    raise AttributeError(f"module 'gaugelab.study' has no attribute {name!r}")


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
