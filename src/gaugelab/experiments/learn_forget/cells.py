"""The learning–forgetting study's cells read back from the store (nothing recomputed).

A :class:`Cell` is one (block, candidate) run: its state, seeds, learning curves, the stress
domain's validation loss and the recorded trainable state at each declared checkpoint. Every
file is read only after its sha256 check (a changed file makes the run ``unverified``).

Source: seed 003 §0x0BH (run → artifact lineage), §0x0CM (the reproducibility chain).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import safetensors.torch
import torch

from gaugelab.experiments.learn_forget.spec import LearnForgetSpec
from gaugelab.experiments.learn_forget.train import state_name
from gaugelab.experiments.lora.train import Curves
from gaugelab.study.store.db import ArtifactRow, RunStore
from gaugelab.study.store.results import ArtifactError, RunState, verified_bytes

__all__ = ["Cell", "read_cells", "read_state"]


@dataclass
class Cell:
    """One (block, candidate) run as stored.

    Attributes:
        block, candidate: the cell's block and candidate id; method ``full``/``lora``/
            ``rslora``; rank ``r`` or ``None``.
        spec: the run's :class:`LearnForgetSpec`; state: its :class:`RunState`.
        curves: the validation curves (``None`` until completed); stress: declared step →
            ``[E]`` stress validation loss; states: declared step → the ``state`` artifact.
        trainable_parameters: per seed; seconds: the attempt's wall time.
    """

    block: str
    candidate: str
    method: str
    rank: int | None
    spec: LearnForgetSpec
    state: RunState
    curves: Curves | None = None
    stress: dict[int, list[float]] = field(default_factory=dict)
    states: dict[int, ArtifactRow] = field(default_factory=dict)
    trainable_parameters: int | None = None
    seconds: float | None = None

    @property
    def complete(self) -> bool:
        """Completed, verified, and every declared checkpoint recorded."""
        steps = self.spec.checkpoint_steps()
        return (
            self.state.completed
            and self.curves is not None
            and all(s in self.states and s in self.stress for s in steps)
        )

    def validation(self, domain: str, step: int) -> list[float]:
        """``[E]`` validation loss of ``domain`` (target, retention, stress) at ``step``.

        Raises:
            KeyError: ``step`` was not evaluated.
        """
        if domain == "stress":
            return list(self.stress[step])
        assert self.curves is not None
        return list(getattr(self.curves, domain)[self.curves.steps.index(step)])


def read_state(artifact: ArtifactRow) -> dict[str, torch.Tensor]:
    """A recorded state, after its sha256 check (safetensors; never unpickled).

    Raises:
        ArtifactError: the file is missing or changed.
    """
    return safetensors.torch.load(verified_bytes(artifact))


def read_cells(store: RunStore, study: str, spec: LearnForgetSpec) -> list[Cell]:
    """Every cell of ``study`` in declaration order (block, then candidate)."""
    order = {
        (b, c): i
        for i, (b, c) in enumerate((b, c) for b in spec.blocks() for c in spec.candidate_ids())
    }
    cells = []
    kinds = {r.identity: r.kind for r in store.runs(study)}
    for run in store.run_states(study):
        if kinds.get(run.identity) != LearnForgetSpec.kind:  # e.g. the sealed test's run
            continue
        run_spec = LearnForgetSpec.model_validate(run.spec)
        method, rank = run_spec.candidate_method()
        state, data = store.completed_result(run)
        cell = Cell(run_spec.block, run_spec.candidate, method, rank, run_spec, state)
        if data is not None:
            cell.curves = Curves(**data["curves"])
            cell.trainable_parameters = data["trainable_parameters"]
            cell.seconds = data["seconds"]
            try:
                _states(store, cell)
            except ArtifactError as exc:
                cell.state, cell.curves = state.unverified(exc), None
        cells.append(cell)
    return sorted(cells, key=lambda c: order.get((c.block, c.candidate), len(order)))


def _states(store: RunStore, cell: Cell) -> None:
    done = [a.ordinal for a in store.attempts(cell.state.identity) if a.termination == "completed"]
    names = {state_name(s): s for s in cell.spec.checkpoint_steps()}
    for artifact in store.artifacts(cell.state.identity):
        if (
            artifact.kind == "state"
            and artifact.ordinal <= done[-1]
            and (artifact.path.name in names)
        ):
            cell.states[names[artifact.path.name]] = artifact  # the latest attempt's wins
    seeds = cell.spec.finetune.seeds
    for row in store.metrics(cell.state.identity):
        if row.name.startswith("stress/val_loss/seed="):
            seed = int(row.name.rsplit("=", 1)[1])
            values = cell.stress.setdefault(row.step, [float("nan")] * len(seeds))
            values[seeds.index(seed)] = row.value
    missing = [s for s in cell.spec.checkpoint_steps() if s not in cell.states]
    if missing:
        raise ArtifactError(
            f"run {cell.state.identity[:12]} ({cell.candidate}) recorded no state at the "
            f"declared checkpoints {missing}"
        )
