"""Checkpoint selection, nested inside candidate selection and on validation only.

Re-exported by :mod:`gaugelab.study.release.selection`.

Source: seed 003 §0x0BI (``c_i* = SelectCheckpoint(C_i; S^val, R^val, U^val)`` before any
candidate comparison; test performance never chooses a checkpoint).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gaugelab.study.release.records import Direction, _direction, _fail, _frozen_map, oriented

__all__ = ["CheckpointScores", "select_checkpoint"]


@dataclass(frozen=True)
class CheckpointScores:
    """Validation scores of one checkpoint of one candidate.

    Attributes:
        step: the optimizer step of the checkpoint (≥ 0).
        checkpoint_id: its identity (e.g. the checkpoint file's digest).
        split: must be ``"validation"``; anything else is refused by :func:`select_checkpoint`.
        scores: metric name → value (raw, in the metric's declared direction).
    """

    step: int
    checkpoint_id: str
    split: str
    scores: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _frozen_map(self, "scores", self.scores)


def select_checkpoint(
    checkpoints: Sequence[CheckpointScores], monitor: str, direction: Direction
) -> CheckpointScores:
    """The predeclared validation rule ``c_i* = argbest_c monitor(c)``, ties to the earliest step.

    Runs before any candidate comparison and never sees a test split: using test performance
    to choose a checkpoint leaks the final evaluation into model selection (seed 003 §0x0BI).

    Args:
        checkpoints: one candidate's checkpoints, any order.
        monitor: the metric the rule ranks by, e.g. ``"target"``.
        direction: ``"max"`` or ``"min"`` for ``monitor``.

    Returns:
        The chosen :class:`CheckpointScores`.

    Raises:
        SelectionError: no checkpoints; a record whose split is not ``"validation"`` (test
            leakage); repeated steps or ids; ``monitor`` missing or non-finite anywhere;
            unknown direction.
    """
    fn = "select_checkpoint"
    _direction(fn, direction)
    if not checkpoints:
        raise _fail(fn, "checkpoints", [], "at least one validation checkpoint")
    for c in checkpoints:
        if not isinstance(c, CheckpointScores):
            raise TypeError(f"{fn}: checkpoint {c!r}; allowed: a CheckpointScores")
        if c.split != "validation":
            raise _fail(
                fn,
                f"checkpoint {c.checkpoint_id!r} split",
                c.split,
                "'validation' only: selecting on another split leaks it into selection",
            )
        value = c.scores.get(monitor)
        if value is None or not math.isfinite(float(value)):
            raise _fail(
                fn,
                f"checkpoint {c.checkpoint_id!r} {monitor}",
                value,
                "a finite value on every checkpoint (missing metrics fail closed)",
            )
    for key in ("step", "checkpoint_id"):
        values = [getattr(c, key) for c in checkpoints]
        if len(set(values)) != len(values):
            raise _fail(fn, f"checkpoint {key}s", values, "distinct values")
    return min(checkpoints, key=lambda c: (-oriented(c.scores[monitor], direction), c.step))
