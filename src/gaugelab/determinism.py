"""Deterministic execution: the one switch every training loop and benchmark runs under."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


@contextlib.contextmanager
def deterministic() -> Iterator[None]:
    """``torch.use_deterministic_algorithms(True)`` for the duration (the previous setting is
    restored after). Ensemble members that start equal stay bitwise equal under it, compiled
    or not (see :class:`gaugelab.models.Ensemble`)."""
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before)
