"""Attempt lineage of a training unit: attempt identities, the retry rule and the attempt that
counts (seed 003 §0x0CI). Re-exported by :mod:`gaugelab.study.release.design`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gaugelab.errors import TERMINATION_CLASSES
from gaugelab.study.release.units import sha256_hex

__all__ = [
    "COMPLETE_TERMINATIONS",
    "RETRYABLE_TERMINATIONS",
    "Attempt",
    "is_complete",
    "may_retry",
    "run_outcome",
]

RETRYABLE_TERMINATIONS: tuple[str, ...] = ("infrastructure_failure",)
"""The only termination class that may be retried under the same run identity (§0x0CI)."""

COMPLETE_TERMINATIONS: tuple[str, ...] = ("completed", "validation_stopped")
"""Terminations after which the unit's predeclared validation checkpoints are evaluated."""


@dataclass(frozen=True)
class Attempt:
    """One attempt of a training unit; every attempt is kept, failed ones included.

    Attributes:
        run_id: the unit's :attr:`TrainingUnit.run_id`.
        ordinal: retry ordinal, 1 for the first attempt.
        environment_digest: digest of the environment the attempt ran in (code, dependencies,
            kernels, hardware).
        termination: one of :data:`gaugelab.errors.TERMINATION_CLASSES`.

    Raises:
        ValueError: empty ``run_id`` or ``environment_digest``, ``ordinal < 1``, or an unknown
            termination class.

    Source: seed 003 §0x0CI (``attempt_id = run_id + retry ordinal + environment digest``).
    """

    run_id: str
    ordinal: int
    environment_digest: str
    termination: str

    def __post_init__(self) -> None:
        for name in ("run_id", "environment_digest"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ValueError(f"Attempt: {name}={value!r}; allowed: a non-empty string")
        n = self.ordinal
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"Attempt: ordinal={n!r}; allowed: an integer >= 1 (1-based)")
        if self.termination not in TERMINATION_CLASSES:
            raise ValueError(
                f"Attempt: termination={self.termination!r}; allowed: "
                + ", ".join(TERMINATION_CLASSES)
            )

    @property
    def attempt_id(self) -> str:
        """``sha256`` hex of the canonical JSON of ``[run_id, ordinal, environment_digest]``."""
        return sha256_hex([self.run_id, self.ordinal, self.environment_digest])


def is_complete(attempt: Attempt) -> bool:
    """Whether the attempt ended semantically complete (``completed`` or ``validation_stopped``):
    only then are its validation checkpoints evaluated (§0x0CL)."""
    return attempt.termination in COMPLETE_TERMINATIONS


def _lineage(fn: str, attempts: Sequence[Attempt]) -> tuple[Attempt, ...]:
    chain = tuple(attempts)
    if not chain:
        raise ValueError(f"{fn}: attempts is empty; allowed: the unit's attempts, ordinal 1 first")
    for a in chain:
        if not isinstance(a, Attempt):
            raise ValueError(f"{fn}: attempts holds {type(a).__name__}; allowed: Attempt")
    runs = sorted({a.run_id for a in chain})
    if len(runs) != 1:
        raise ValueError(f"{fn}: attempts span run_ids {runs}; allowed: one run_id")
    ordinals = [a.ordinal for a in chain]
    if ordinals != list(range(1, len(chain) + 1)):
        raise ValueError(
            f"{fn}: ordinals={ordinals}; allowed: 1..{len(chain)} in order, none dropped"
        )
    for a in chain[:-1]:
        if a.termination not in RETRYABLE_TERMINATIONS:
            raise ValueError(
                f"{fn}: attempt {a.ordinal} ended {a.termination!r} and was retried; a retry "
                "after a non-infrastructure ending is not allowed (only "
                "infrastructure_failure is retried; numerical_failure is an outcome)"
            )
    return chain


def may_retry(attempts: Sequence[Attempt]) -> bool:
    """Whether the unit may start another attempt under the same run identity.

    Args:
        attempts: every attempt of one unit, ordinal 1 first (failed attempts included).

    Returns:
        ``True`` only when the last attempt ended in ``infrastructure_failure``; a
        ``numerical_failure`` (divergence) is an outcome of the pipeline and is never retried.

    Raises:
        ValueError: the lineage is invalid (see :func:`run_outcome`).

    Source: seed 003 §0x0CI (retry infrastructure-only, keep the failed attempt).
    """
    return _lineage("may_retry", attempts)[-1].termination in RETRYABLE_TERMINATIONS


def run_outcome(attempts: Sequence[Attempt]) -> Attempt:
    """The attempt that counts for the unit: the last one of a valid lineage.

    It takes no scores, so a retry can never be chosen by its score. When the last attempt
    itself ended in ``infrastructure_failure`` the unit has no outcome yet: its cell is missing
    (the caller reads ``termination``; :func:`may_retry` is then ``True``).

    Args:
        attempts: every attempt of one unit, ordinal 1 first.

    Returns:
        The last :class:`Attempt`.

    Raises:
        ValueError: no attempts; attempts of several run ids; ordinals not ``1..n`` in order (an
            attempt dropped or reordered); an attempt before the last that did not end in
            ``infrastructure_failure`` (a retry after a non-infrastructure ending).

    Source: seed 003 §0x0CI (never choose the better retry by score), §0x0CD (two successful
    reruns, one of which silently dropped an earlier failed attempt).
    """
    return _lineage("run_outcome", attempts)[-1]
