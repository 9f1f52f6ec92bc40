"""The experiments by study kind, and a study's report from the store by its experiment.

``gaugelab report STUDY`` writes an experiment's own report (its tables, figures and verdicts,
through the experiment's ``collect`` and ``report``) for a study of a known kind, and the
harness's generic study report (:func:`gaugelab.study.report.summary.write_study_report`) for any
other study. The experiments verify what they read back (:mod:`gaugelab.study.experiment`):
a run whose files changed after it wrote them is reported as ``unverified``, and
:class:`WrittenReport` says which.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from gaugelab.study.experiment import Experiment
from gaugelab.study.report.folders import refuse_overwrite
from gaugelab.study.report.summary import write_study_report
from gaugelab.study.store.db import RunStore
from gaugelab.study.store.results import UNVERIFIED

_PLACES: dict[str, str] = {
    "zoo": "gaugelab.experiments.sensing.zoo",
    "dial": "gaugelab.experiments.sensing.dial",
    "twins": "gaugelab.experiments.twins.run",
    "lora-finetune": "gaugelab.experiments.lora.run",
    "intrinsic-dim": "gaugelab.experiments.intrinsic.run",
    "lora-twins": "gaugelab.experiments.lora_twins.run",
    "lora-kernel": "gaugelab.experiments.lora_kernel.run",
    "learn-forget": "gaugelab.experiments.learn_forget.run",
    "atlas": "gaugelab.experiments.atlas.run",
}


class _Registry(Mapping[str, Experiment]):
    """Study kind → its :class:`Experiment`; a record's module is imported when it is first read
    (an experiment imports torch, and ``gaugelab report`` of one study needs only its own)."""

    def __getitem__(self, kind: str) -> Experiment:
        if kind not in _PLACES:
            raise KeyError(kind)
        return importlib.import_module(_PLACES[kind]).EXPERIMENT

    def __iter__(self) -> Iterator[str]:
        return iter(_PLACES)

    def __len__(self) -> int:
        return len(_PLACES)


REGISTRY: Mapping[str, Experiment] = _Registry()
"""Every experiment by study kind: ``REGISTRY["zoo"].run(spec)``,
``REGISTRY[kind].collect(store, study)``. The CLI, ``gaugelab report``, the docs tests and
``gaugelab bench`` find experiments here."""


@dataclass(frozen=True)
class WrittenReport:
    """A report :func:`report_study` wrote.

    Attributes:
        path: the ``report.html`` file.
        unverified: identity → message (naming the file and the run) of every run that
            completed but whose files failed verification when read back, so the report shows
            it as ``unverified``, not as a result (empty for the generic report, which reads
            only the store's rows).
    """

    path: Path
    unverified: dict[str, str] = field(default_factory=dict)


def report_study(store: RunStore, study: str, out_dir: str | os.PathLike[str]) -> WrittenReport:
    """Write the report of ``study`` into ``out_dir``.

    Args:
        store: an open run store.
        study: the study's name.
        out_dir: the report folder (created; must not hold a report already).

    Returns:
        The :class:`WrittenReport`: ``report.html`` and the runs it shows as unverified.

    Raises:
        ValueError: unknown study.
        FileExistsError: ``out_dir`` already holds a report or figures; nothing is written.
    """
    kind = store.study_row(study).kind
    experiment = REGISTRY.get(kind)
    if experiment is None:
        return WrittenReport(write_study_report(store, study, out_dir))
    folder = Path(out_dir)
    refuse_overwrite(folder)
    result = experiment.collect(store, study)
    unverified = {f.identity: f.message for f in result.failures if f.termination == UNVERIFIED}
    return WrittenReport(experiment.report(result, folder), unverified)
