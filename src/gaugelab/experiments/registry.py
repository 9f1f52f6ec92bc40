"""The experiments by study kind, and a study's report from the store by its experiment.

``gaugelab report STUDY`` writes an experiment's own report (its tables, figures and verdicts,
through the experiment's ``collect`` and ``report``) for a study of a known kind, and the
harness's generic study report (:func:`gaugelab.study.summary.write_study_report`) for any
other study.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType

from gaugelab.experiments import dial, lora, twins, zoo
from gaugelab.experiments._study import study_row
from gaugelab.study.store import RunStore
from gaugelab.study.summary import write_study_report

EXPERIMENTS: dict[str, ModuleType] = {
    "zoo": zoo,
    "dial": dial,
    "twins": twins,
    "lora-finetune": lora,
}
"""Study kind → the experiment module (``collect``, ``tables``, ``report``)."""


def report_study(store: RunStore, study: str, out_dir: str | os.PathLike[str]) -> Path:
    """Write the report of ``study`` into ``out_dir``; returns ``report.html``.

    Args:
        store: an open run store.
        study: the study's name.
        out_dir: the report folder (created; must not hold a report already).

    Raises:
        ValueError: unknown study.
        FileExistsError: ``out_dir`` already holds a report or figures; nothing is written.
    """
    kind = study_row(store, study).kind
    experiment = EXPERIMENTS.get(kind or "")
    if experiment is None:
        return write_study_report(store, study, out_dir)
    folder = Path(out_dir)
    if (folder / "report.html").exists():
        raise FileExistsError(
            f"{folder / 'report.html'} exists; reports are never overwritten (choose another --out)"
        )
    return experiment.report(experiment.collect(store, study), folder)
