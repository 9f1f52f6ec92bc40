"""Exceptions shared by every layer."""

from __future__ import annotations

__all__ = ["NonFiniteError"]


class NonFiniteError(FloatingPointError):
    """A loss, gradient or update became NaN or infinite.

    Raised before anything is modified, so the state that produced it can be inspected. The run
    harness records it as the attempt's termination class ``numerical_failure``.
    """
