"""The learning–forgetting study read back from the store: cells, measures, decision, test.

:func:`collect` never opens the test: it reads the sealed store's recorded report (if the study
has opened it) and recomputes every validation measure from the verified states — the same
numbers the decision used, so the report and the decision cannot disagree.

Source: seed 003 §0x0BU, §0x0CL–0x0CM.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gaugelab.experiments.learn_forget.cells import Cell, read_cells
from gaugelab.experiments.learn_forget.decide import (
    Decision,
    Measured,
    decide,
    measure,
    open_test,
    recorded_design,
    recorded_test,
    sealed_store,
)
from gaugelab.experiments.learn_forget.design import design_manifest, nuisance_tuples
from gaugelab.experiments.learn_forget.spec import LearnForgetSpec
from gaugelab.study.release.design import PairedContrast, paired_contrast
from gaugelab.study.store.db import RunStore

__all__ = ["LearnForgetResult", "collect", "contrasts"]


@dataclass
class LearnForgetResult:
    """One learning–forgetting study as stored.

    Attributes:
        spec, study: the study's spec and name; design_digest: its design manifest's digest.
        cells: every (block, candidate) run; measured: block → :class:`Measured` (validation).
        decision: the primary block's :class:`Decision` (``None`` when nothing is measured).
        contrasts: paired contrasts of every candidate against full fine-tuning (gain,
            forgetting, stress gain), per block.
        test: the recorded test report, or ``None`` (sealed, or no release).
        access_log: the sealed store's events (freeze, opening, refusals, no release).
        incomplete: ``<block>/<candidate>`` of cells without a complete record.
        current_design_digest: the digest this version computes for the spec's design (differs
            from ``design_digest`` when the study was sealed under an earlier design).
    """

    spec: LearnForgetSpec
    study: str
    design_digest: str
    cells: list[Cell]
    measured: dict[str, Measured]
    decision: Decision | None
    contrasts: list[PairedContrast] = field(default_factory=list)
    test: dict[str, Any] | None = None
    access_log: list[dict[str, Any]] = field(default_factory=list)
    incomplete: list[str] = field(default_factory=list)
    current_design_digest: str | None = None

    @property
    def failures(self) -> list[Any]:
        """The runs that ended without completing (their states; running ones are not)."""
        return [c.state for c in self.cells if c.state.failed]


def contrasts(spec: LearnForgetSpec, measured: dict[str, Measured]) -> list[PairedContrast]:
    """Every candidate against full fine-tuning, per block, on the oriented gain, forgetting
    and stress gain of each seed at the candidate's validation-chosen checkpoint."""
    design = design_manifest(spec)
    tuples = nuisance_tuples(spec)
    out = []
    if "full" not in spec.candidate_ids():
        return []
    for block, m in measured.items():
        for metric, domain, sign in (
            ("target_gain", "target", -1.0),
            ("forgetting", "retention", 1.0),
            ("stress_gain", "stress", -1.0),
        ):
            outcomes = {}
            for cid, per in m.per_seed.items():
                for n, value in zip(tuples, per[domain], strict=True):
                    outcomes[(cid, block, n)] = sign * (value - m.base[domain])
            for cid in spec.candidate_ids():
                if cid != "full":
                    out.append(paired_contrast(design, outcomes, cid, "full", block, metric))
    return out


def collect(store: RunStore, study: str, *, release: bool = False) -> LearnForgetResult:
    """The :class:`LearnForgetResult` of a study.

    Args:
        store, study: the run store and the study's name.
        release: after measuring and deciding, freeze the choice and open the sealed test once
            (:func:`~gaugelab.experiments.learn_forget.decide.open_test`; or record "no
            release"). Default False: the test is never opened, the recorded report is read.

    Raises:
        ValueError: no such study, or not a ``learn-forget`` study.
        SelectionError: (``release``) a record fails closed.
        SealedTestError, DesignChanged: (``release``) the seal refuses the opening.
    """
    row = store.study_of_kind(study, LearnForgetSpec)
    spec = LearnForgetSpec.model_validate(row.spec)
    cells = read_cells(store, study, spec)
    measured = {b: measure(store, spec, cells, b) for b in spec.blocks()}
    decision = decide(spec, measured["a"]) if measured["a"].records else None
    if release and decision is not None:
        open_test(store, study, spec, cells, measured["a"], decision)
    current = design_manifest(spec).digest()
    design = recorded_design(store, study) or current
    sealed = sealed_store(store, study, spec, design)
    return LearnForgetResult(
        spec=spec,
        study=study,
        design_digest=design,
        current_design_digest=current,
        cells=cells,
        measured=measured,
        decision=decision,
        contrasts=contrasts(spec, measured),
        test=recorded_test(sealed),
        access_log=sealed.access_log(),
        incomplete=[f"{b}/{c}" for b, m in measured.items() for c in m.incomplete],
    )
