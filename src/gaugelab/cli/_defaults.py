"""The library values the commands' ``--help`` shows, written out so that building the help
imports no torch, no pydantic model and no experiment.

``gaugelab --help`` (and ``runs``, ``report``) must start in a fraction of a second, and the
modules these values live in import torch (the experiments, the gauge groups) or build pydantic
models (the run store's specs). Each value names its source; tests/cli/test_startup.py checks
that every one equals it, so the two cannot drift apart.
"""

from __future__ import annotations

from pathlib import Path

DEFAULT_STORE_PATH = Path("gaugelab-runs") / "store.sqlite"
""":data:`gaugelab.study.store.db.DEFAULT_STORE_PATH`."""
EXECUTORS = ("local", "ray")
""":data:`gaugelab.study.sweep.EXECUTORS`."""
GROUP_NAMES = (
    "general-linear", "orthogonal", "permutation", "positive-monomial", "signed-permutation",
    "special-orthogonal", "torus", "trivial",
)  # fmt: skip
"""``sorted(gaugelab.gauge.GROUPS)``."""
PROBLEM_NAMES = ("sensing", "quadratic", "attention")
""":data:`gaugelab.equivariance.problems.PROBLEMS`."""
TWIN_OPTIMIZERS = ("adam", "heavy-ball", "scalar-adam", "muon-hybrid")
""":data:`gaugelab.experiments.twins.run.DEFAULT_OPTIMIZERS`."""
TWIN_QUICK_STEPS = 100
""":data:`gaugelab.experiments.twins.run.QUICK_STEPS`."""
LORA_LR = 5e-3
""":data:`gaugelab.experiments.lora.run.LORA_LR`."""
FULL_LR = 1e-3
""":data:`gaugelab.experiments.lora.run.FULL_LR`."""
