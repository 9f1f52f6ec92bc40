"""Exceptions shared by every layer."""

from __future__ import annotations

__all__ = ["TERMINATION_CLASSES", "NonFiniteError"]

TERMINATION_CLASSES: tuple[str, ...] = (
    "completed",
    "validation_stopped",
    "numerical_failure",
    "infrastructure_failure",
    "admission_failure",
    "cancelled",
)
"""How an attempt ends: the run store's termination classes (every attempt ends in exactly one)
and the experimental design's attempt lineage (only ``infrastructure_failure`` is retried;
``numerical_failure`` is an outcome). Source: seed 003 §0x0CI."""


class NonFiniteError(FloatingPointError):
    """A loss, gradient or update became NaN or infinite.

    Raised before anything is modified, so the state that produced it can be inspected. The run
    harness records it as the attempt's termination class ``numerical_failure``.
    """
