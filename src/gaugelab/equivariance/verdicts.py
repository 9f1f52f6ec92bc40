"""Every verdict a twin comparison gives, what it means, who gives it, and how the two match.

Two procedures read a gauge / identity / noise twin triplet:

* ``check`` — :func:`gaugelab.equivariance.check_equivariance` (``gaugelab check``): a few steps
  of a small problem in float64, the gauge twin held to an absolute tolerance;
* ``twins`` — the attention-head twin protocol (``gaugelab twins``): a long training run,
  usually in float32, the gauge twin read against its noise twin at every checkpoint.

They ask the same question at different precision, so their vocabularies differ by name where
the test differs. The strings are stored in run stores and printed in the README: never change
one. The correspondence (``check`` ≙ ``twins``):

==================  =========================  ===============================================
check               twins                      relation
==================  =========================  ===============================================
equivariant         equivariant                same claim (the gauge twin is round-off); check
                                               tests ≤ 1e-9 (float64) / 1e-5 (float32)
                                               absolutely, twins ≤ 10 × the noise twin
breaks              basis-sensitive            same test: gauge twin ≥ 100 × its noise twin
                                               after one step (check: also ≥ 1e-6, every draw)
precision-limited   equivariant-then-chaotic   related, not equal: both see gauge and noise
                                               twins together far above round-off; check from
                                               step 1 on (the update itself rounds), twins only
                                               later (the dynamics amplify round-off)
nondeterministic    nondeterministic           same test: the identity twin is not exactly 0
inconclusive        inconclusive               none of the others
==================  =========================  ===============================================

Source: singh2026lossbasis, §6 (reading the twin triplet); docs/protocols.md §5.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Procedure = Literal["check", "twins"]

EQUIVARIANT = "equivariant"
BREAKS = "breaks"
PRECISION_LIMITED = "precision-limited"
NONDETERMINISTIC = "nondeterministic"
INCONCLUSIVE = "inconclusive"
BASIS_SENSITIVE = "basis-sensitive"
CHAOTIC = "equivariant-then-chaotic"
ERROR = "error"
"""Not a measurement: the optimizer under test raised (:class:`gaugelab.errors.OptimizerFailure`),
so no twin could be compared; ``gaugelab check --json`` reports it with the phase and reason.
``gaugelab atlas`` also gives it to a constructor that refuses the problem's parameters."""
DIVERGED = "diverged"
"""Not a measurement: a run of the triplet became non-finite (:class:`gaugelab.NonFiniteError`);
``gaugelab atlas`` records it with the message (``gaugelab check`` refuses in one line)."""
TIMEOUT = "timeout"
"""Not a measurement: ``gaugelab atlas`` stopped the check at its time limit (``--timeout``);
the next atlas tries it again."""
OUTCOMES: tuple[str, ...] = (ERROR, DIVERGED, TIMEOUT)
"""What ``gaugelab atlas`` records where a check gave no verdict of :data:`CHECK_VERDICTS`."""


@dataclass(frozen=True)
class Verdict:
    """One verdict name.

    Attributes:
        name: the string stored and printed (kebab-case).
        emitted_by: the procedures whose vocabulary holds it (``"check"``, ``"twins"``).
        meaning: one line: the test that gives it.
    """

    name: str
    emitted_by: tuple[Procedure, ...]
    meaning: str


VERDICTS: dict[str, Verdict] = {
    v.name: v
    for v in (
        Verdict(EQUIVARIANT, ("check", "twins"),
                "the gauge twin stays at round-off: check, ≤ 1e-9 (float64) or 1e-5 (float32) "
                "at every step; twins, ≤ 10 × its noise twin at every checkpoint"),
        Verdict(BREAKS, ("check",),
                "after one step every draw's gauge twin is ≥ 1e-6 and ≥ 100 × its noise twin"),
        Verdict(BASIS_SENSITIVE, ("twins",),
                "after one step the gauge twin is ≥ 100 × its noise twin"),
        Verdict(PRECISION_LIMITED, ("check",),
                "gauge and noise twins within 10× of each other at every step, both above "
                "1000 × machine epsilon: the update's own rounding hides any basis dependence"),
        Verdict(CHAOTIC, ("twins",),
                "gauge ≤ 10 × noise twin after one step, both ending ≥ 1000 × the noise twin's "
                "step-1 distance: round-off amplified in every basis alike"),
        Verdict(NONDETERMINISTIC, ("check", "twins"),
                "the identity twin (same basis, same state) is not exactly 0 at some step: "
                "no gauge claim can be made"),
        Verdict(INCONCLUSIVE, ("check", "twins"),
                "none of the procedure's other verdicts applies"),
    )
}  # fmt: skip

CHECK_VERDICTS: tuple[str, ...] = (
    EQUIVARIANT, BREAKS, PRECISION_LIMITED, NONDETERMINISTIC, INCONCLUSIVE,
)  # fmt: skip
"""The vocabulary of :func:`gaugelab.equivariance.check_equivariance`."""

TWIN_VERDICTS: tuple[str, ...] = (
    BASIS_SENSITIVE, EQUIVARIANT, CHAOTIC, NONDETERMINISTIC, INCONCLUSIVE,
)  # fmt: skip
"""The vocabulary of the attention-head twin protocol."""

CHECK_TO_TWINS: dict[str, str] = {
    EQUIVARIANT: EQUIVARIANT,
    BREAKS: BASIS_SENSITIVE,
    PRECISION_LIMITED: CHAOTIC,  # related, not equal: see the module docstring
    NONDETERMINISTIC: NONDETERMINISTIC,
    INCONCLUSIVE: INCONCLUSIVE,
}
"""Each ``check`` verdict → its ``twins`` counterpart (a bijection between the vocabularies)."""


__all__ = [
    "BASIS_SENSITIVE",
    "BREAKS",
    "CHAOTIC",
    "CHECK_TO_TWINS",
    "CHECK_VERDICTS",
    "DIVERGED",
    "EQUIVARIANT",
    "ERROR",
    "INCONCLUSIVE",
    "NONDETERMINISTIC",
    "OUTCOMES",
    "PRECISION_LIMITED",
    "TIMEOUT",
    "TWIN_VERDICTS",
    "VERDICTS",
    "Verdict",
    "triplet_verdict",
    "twin_verdict",
]


def twin_verdict(gauge: list[float], noise: list[float]) -> tuple[str, str]:
    """Classify from the gauge and noise twins' logit distances at steps ≥ 1 (step 1 first).

    ``basis-sensitive``: gauge ≥ 100 × noise at step 1. ``equivariant-then-chaotic``: gauge
    ≤ 10 × noise at step 1, and both end far above the step-1 floor (≥ 1000 × the noise twin's
    step-1 distance): round-off is amplified, in every basis alike. ``equivariant``: gauge
    ≤ 10 × noise at every step (in float64 an equivariant gauge twin sits far below its noise
    twin, at round-off). Otherwise ``inconclusive``. (An identity twin that moved is read by
    :func:`triplet_verdict` first.)

    Raises:
        ValueError: empty or unequal series.

    Source: singh2026lossbasis, §6 (reading the triplet).
    """
    if not gauge or len(gauge) != len(noise):
        raise ValueError("twin_verdict: need equally long, non-empty gauge and noise series")
    g1, n1 = gauge[0], max(noise[0], 1e-300)
    if g1 >= 100 * n1:
        return BASIS_SENSITIVE, f"gauge twin {g1:.1e} at step 1, {g1 / n1:.0f}× its noise twin"
    below = [g <= 10 * max(n, 1e-300) for g, n in zip(gauge, noise, strict=True)]
    floor = 1000 * n1
    if below[0] and gauge[-1] >= floor and noise[-1] >= floor:
        return CHAOTIC, (
            f"gauge and noise twins agree at step 1 ({g1:.1e} vs {n1:.1e}) and both end far "
            f"above that floor ({gauge[-1]:.1e} vs {noise[-1]:.1e}): chaotic amplification of "
            f"round-off, not basis dependence"
        )
    if all(below):
        return EQUIVARIANT, f"gauge twin ≤ 10× its noise twin throughout (step 1: {g1:.1e})"
    return INCONCLUSIVE, f"gauge twin {gauge[-1]:.1e} vs noise twin {noise[-1]:.1e} at the end"


def triplet_verdict(records: dict[int, dict[str, float]]) -> tuple[str, str]:
    """The verdict of a run's records (steps ≥ 1): ``nondeterministic`` when an identity twin
    is not exactly 0 at some step, else :func:`twin_verdict` of the gauge and noise twins, or
    ``inconclusive`` when either is missing."""
    steps = sorted(s for s in records if s >= 1)
    moved = [s for s in steps if records[s].get("identity/logit_distance", 0.0) != 0.0]
    if moved:
        value = records[moved[0]]["identity/logit_distance"]
        return NONDETERMINISTIC, f"identity twin at {value:.1e} (step {moved[0]}), not exactly 0"
    names = ("gauge/logit_distance", "noise/logit_distance")
    measured = [s for s in steps if all(n in records[s] for n in names)]
    if not measured:
        return INCONCLUSIVE, "needs both a gauge and a noise twin, measured after step 0"
    return twin_verdict(
        [records[s][names[0]] for s in measured], [records[s][names[1]] for s in measured]
    )
