"""The atlas read back from the store: one row per check, every way a check ended kept.

Nothing is recomputed: a completed check's row is its run's ``result`` artifact, read after its
sha256 check (a changed file makes the run ``unverified``, a failure, never a row). A check
stopped at its time limit (``validation_stopped``, ``"timeout: …"``) is a ``timeout`` row with
that reason. A run that neither completed nor timed out (an infrastructure failure, an
interrupted or unverified run) is one of :attr:`AtlasResult.failures`.

Source: docs/commands/atlas.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gaugelab.equivariance.verdicts import (
    BREAKS,
    DIVERGED,
    EQUIVARIANT,
    ERROR,
    INCONCLUSIVE,
    NONDETERMINISTIC,
    PRECISION_LIMITED,
    TIMEOUT,
)
from gaugelab.experiments.atlas.spec import AtlasSpec
from gaugelab.study.store.db import RunStore
from gaugelab.study.store.results import RunState

VERDICT_ORDER: tuple[str, ...] = (
    BREAKS, PRECISION_LIMITED, NONDETERMINISTIC, INCONCLUSIVE, EQUIVARIANT, ERROR, DIVERGED,
    TIMEOUT,
)  # fmt: skip
"""The order rows are grouped in: measured verdicts from the most basis-dependent, then the
checks without a verdict."""
STOPPED = "validation_stopped"
"""The termination of an attempt stopped at its time limit."""


@dataclass
class AtlasRow:
    """One check as stored.

    Attributes:
        optimizer: the class as ``module:Class`` (``torch.optim:Adam``).
        version: the version of its code (``torch 2.13.0``, or ``sha256:…`` of its file).
        group, problem: the gauge group and the check problem.
        verdict: a verdict of ``check`` (``equivariant``, ``breaks``, ``precision-limited``,
            ``nondeterministic``, ``inconclusive``) or ``error``, ``diverged``, ``timeout``
            (:data:`gaugelab.equivariance.verdicts.OUTCOMES`).
        explanation: the check's explanation of its verdict ("" without one).
        phase, reason, hint: where and why a check without a verdict ended
            (``construct`` / ``step k of <twin>`` / ``run`` / ``time limit``).
        gauge, noise: step-1 relative Frobenius distance of the gauge / noise twin's
            represented objects to the base, the largest over the draws (``None`` without one).
        ratio: ``gauge / noise`` (``None`` without one, or when the noise twin is 0).
        seconds: the check's wall time (``None`` for a timeout).
        claimed: the zoo's claim for the class and group, if it is a zoo rule.
        identity: the run's identity in the store.
    """

    optimizer: str
    version: str
    group: str
    problem: str
    verdict: str
    explanation: str = ""
    phase: str = ""
    reason: str = ""
    hint: str = ""
    gauge: float | None = None
    noise: float | None = None
    ratio: float | None = None
    seconds: float | None = None
    claimed: str | None = None
    identity: str = ""

    @property
    def cell(self) -> str:
        """``<group> / <problem>``: the column of the row in the atlas's matrix."""
        return f"{self.group} / {self.problem}"

    @property
    def label(self) -> str:
        """``<optimizer> <group> / <problem>``: the run's label (``AtlasSpec.run_label()``)."""
        return f"{self.optimizer} {self.cell}"

    @property
    def why(self) -> str:
        """One line: ``<phase>: <reason> (<hint>)`` (``""`` for a measured verdict)."""
        if not self.reason:
            return ""
        text = f"{self.phase}: {self.reason}" if self.phase else self.reason
        return text + (f" ({self.hint})" if self.hint else "")


@dataclass
class AtlasResult:
    """The atlas as read back.

    Attributes:
        spec: the study's spec (every candidate, group and problem).
        study: its name in the store.
        rows: one :class:`AtlasRow` per check that completed or timed out, in the spec's
            order (candidate, then group, then problem).
        failures: the runs without a row: not completed for another cause, or unverified.
    """

    spec: AtlasSpec
    study: str
    rows: list[AtlasRow] = field(default_factory=list)
    failures: list[RunState] = field(default_factory=list)

    def grouped(self) -> list[AtlasRow]:
        """The rows grouped by verdict (:data:`VERDICT_ORDER`), then by optimizer, group and
        problem in the spec's order."""
        place = {v: i for i, v in enumerate(VERDICT_ORDER)}
        return sorted(self.rows, key=lambda r: place.get(r.verdict, len(place)))

    def counts(self) -> dict[str, int]:
        """Verdict → how many rows, in :data:`VERDICT_ORDER` (verdicts with rows only)."""
        out = {v: sum(r.verdict == v for r in self.rows) for v in VERDICT_ORDER}
        return {v: n for v, n in out.items() if n}


def _row(run: RunState, data: dict | None) -> AtlasRow:
    spec = run.spec
    candidate = spec["optimizers"][0]
    head = dict(
        optimizer=candidate["target"], version=candidate["version"], group=spec["groups"][0],
        problem=spec["problems"][0], identity=run.identity,
    )  # fmt: skip
    if data is None:  # stopped at its time limit
        reason = run.message.removeprefix(f"{TIMEOUT}: ")
        return AtlasRow(**head, verdict=TIMEOUT, phase="time limit", reason=reason)
    fields = {k: data.get(k) for k in ("gauge", "noise", "ratio", "seconds", "claimed")}
    text = {k: data.get(k) or "" for k in ("explanation", "phase", "reason", "hint")}
    return AtlasRow(**head, verdict=data["verdict"], **text, **fields)


def collect(store: RunStore, study: str) -> AtlasResult:
    """The :class:`AtlasResult` of an atlas study, from the store.

    Raises:
        ValueError: no such study, or it is not an ``atlas`` study.
    """
    row = store.study_of_kind(study, AtlasSpec)
    spec = AtlasSpec.model_validate(row.spec)
    result = AtlasResult(spec, study)
    order = {
        (c.target, g, p): i
        for i, (c, g, p) in enumerate(
            (c, g, p) for c in spec.optimizers for g in spec.groups for p in spec.problems
        )
    }
    for run in store.run_states(study):
        state, data = store.completed_result(run)
        if state.completed:
            result.rows.append(_row(state, data))
        elif state.termination == STOPPED and state.message.startswith(f"{TIMEOUT}:"):
            result.rows.append(_row(state, None))
        else:
            result.failures.append(state)
    result.rows.sort(key=lambda r: order.get((r.optimizer, r.group, r.problem), len(order)))
    return result


__all__ = ["STOPPED", "VERDICT_ORDER", "AtlasResult", "AtlasRow", "collect"]
