"""A generic study report built from the run store: spec, runs, final metrics, curves, failures.

:func:`study_report` reads one study back from a :class:`~gaugelab.study.store.db.RunStore` and
turns it into a :class:`~gaugelab.study.report.builder.StudyReport` that needs no knowledge of the
experiment: the study's spec, one :class:`~gaugelab.study.report.builder.RunSummary` per run
(labelled
by the spec fields that vary across the study's runs), a table of final metrics, one figure per
metric family (value against step, one line per run), and every attempt that did not complete,
with its termination class (including attempts that a retry later completed; an attempt still
running, its process alive, is none of them). Experiments add
their own tables, figures and notes through the keyword arguments.
:func:`write_study_report` saves the figures and the self-contained HTML page, never
overwriting anything. Every string taken from the store is escaped when the page is rendered.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gaugelab.study.report.builder import (
    Failure,
    FigureArtifact,
    RunSummary,
    StudyReport,
    Table,
    plot_curves,
    save_figure,
    write_report,
)
from gaugelab.study.report.folders import path_slug, refuse_overwrite
from gaugelab.study.store.db import MetricRow, RunRow, RunStore
from gaugelab.study.store.results import UNVERIFIED
from gaugelab.study.store.seals import MetricsTampered

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "MAX_SERIES",
    "MAX_SUMMARY_METRICS",
    "metric_family",
    "path_slug",
    "study_report",
    "write_study_report",
]

MAX_SERIES = 24
"""Most lines drawn in one figure (the caption says when some were left out)."""
MAX_SUMMARY_METRICS = 12
"""Most metric columns in the runs section; the final-metrics table always lists every one."""


def metric_family(name: str) -> tuple[str, str]:
    """Split a metric name into ``(family, member)``: one figure per family, one line per member.

    The first ``/``-separated component is the member and the rest the family, so
    ``"gauge/logit_distance"`` and ``"noise/logit_distance"`` share the figure
    ``"logit_distance"`` (the twins' naming, ``"<twin>/<metric>"``) and ``"train/loss"`` and
    ``"val/loss"`` share ``"loss"``. A name without ``/`` is its own family with member ``""``.
    """
    member, sep, rest = name.partition("/")
    return (rest, member) if sep and rest else (name, "")


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, Mapping) and value:
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(_flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: value}


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _labels(runs: Sequence[RunRow]) -> dict[str, str]:
    """Run identity → ``"field=value, …"`` over the spec fields that vary across ``runs``."""
    flat = {run.identity: _flatten(run.spec) for run in runs}
    paths: dict[str, None] = {}
    for fields in flat.values():
        paths.update(dict.fromkeys(fields))
    varying = [p for p in paths if len({_text(fields.get(p)) for fields in flat.values()}) > 1]
    labels = {
        identity: ", ".join(f"{p}={_text(fields.get(p))}" for p in varying)
        for identity, fields in flat.items()
    }
    seen: dict[str, int] = {}
    for label in labels.values():
        seen[label] = seen.get(label, 0) + 1
    for identity, label in labels.items():  # same varying fields (e.g. another kind): disambiguate
        if seen[label] > 1 or not label:
            labels[identity] = f"{label} [{identity[:8]}]" if label else identity[:12]
    return labels


def _final(rows: Sequence[MetricRow]) -> dict[str, MetricRow]:
    """Metric name → its row at the largest step."""
    out: dict[str, MetricRow] = {}
    for row in rows:
        if row.name not in out or row.step > out[row.name].step:
            out[row.name] = row
    return out


def _log_scale(values: Sequence[float]) -> bool:
    """All values positive and spanning more than two decades."""
    return bool(values) and min(values) > 0 and max(values) / min(values) > 100


@dataclass(frozen=True)
class _Curves:
    family: str
    series: dict[str, tuple[list[int], list[float]]]
    total: int


def _curves(
    runs: Sequence[RunRow],
    labels: Mapping[str, str],
    metrics: Mapping[str, Sequence[MetricRow]],
    family: Callable[[str], tuple[str, str]],
) -> list[_Curves]:
    families: dict[str, dict[str, tuple[list[int], list[float]]]] = {}
    for run in runs:
        for row in metrics[run.identity]:  # sorted by name, then step
            fam, member = family(row.name)
            label = f"{labels[run.identity]} · {member}" if member else labels[run.identity]
            steps, values = families.setdefault(fam, {}).setdefault(label, ([], []))
            steps.append(row.step)
            values.append(row.value)
    out = []
    for fam in sorted(families):
        series = families[fam]
        shown = dict(list(series.items())[:MAX_SERIES])
        out.append(_Curves(fam, shown, len(series)))
    return out


def _plain(text: str) -> str:
    """Text matplotlib draws as it is (a ``$`` would start mathtext)."""
    return text.replace("$", r"\$")


def _draw(curves: _Curves, study: str) -> tuple[Figure, str]:
    values = [v for _, vs in curves.series.values() for v in vs]
    logy = _log_scale(values)
    fig = plot_curves(
        {_plain(label): pair for label, pair in curves.series.items()},
        title=_plain(f"{curves.family} ({study})"),
        xlabel="step",
        ylabel=_plain(curves.family),
        logy=logy,
    )
    caption = f"{curves.family} against step, one line per run"
    if logy:
        caption += "; log scale"
    if curves.total > len(curves.series):
        caption += f"; the first {len(curves.series)} of {curves.total} lines are shown"
    return fig, caption


def _failures(store: RunStore, runs: Sequence[RunRow]) -> list[Failure]:
    out = []
    for run in runs:
        attempts = store.attempts(run.identity)
        completed = [a.ordinal for a in attempts if a.termination == "completed"]
        holder = store.holder(run.identity)  # an open attempt whose process is alive
        for a in attempts:
            if a.termination == "completed" or (holder is not None and a.id == holder.id):
                continue  # a running attempt is no failure (the runs table lists it as open)
            termination = a.termination or "open"
            message = a.message or (
                "no termination recorded: its process is gone (killed); the next run of the "
                "same command records it and resumes"
                if a.termination is None
                else ""
            )
            later = [o for o in completed if o > a.ordinal]
            note = f" (attempt {later[0]} completed)" if later else ""
            out.append(Failure(run.identity, termination, f"attempt {a.ordinal}{note}: {message}"))
    return out


def _study_row(store: RunStore, study: str):
    for row in store.studies():
        if row.name == study:
            return row
    known = ", ".join(repr(s.name) for s in store.studies()) or "none"
    raise ValueError(f"study_report: unknown study {study!r} in {store.path}; known: {known}")


def _build(
    store: RunStore,
    study: str,
    family: Callable[[str], tuple[str, str]],
) -> tuple[StudyReport, list[_Curves]]:
    row = _study_row(store, study)
    runs = store.runs(study)
    labels = _labels(runs)
    metrics, tampered = {}, {}
    for run in runs:
        try:
            metrics[run.identity] = store.metrics(run.identity)
        except MetricsTampered as exc:  # rows changed after their attempt sealed them
            metrics[run.identity], tampered[run.identity] = [], str(exc)
    summaries, final_rows, attempt_rows = [], [], []
    names: dict[str, None] = {}
    for run in runs:
        attempts = store.attempts(run.identity)
        status = (attempts[-1].termination or "open") if attempts else "not started"
        status = UNVERIFIED if run.identity in tampered else status
        final = _final(metrics[run.identity])
        names.update(dict.fromkeys(sorted(final)))
        summaries.append(
            RunSummary(
                identity=run.identity,
                status=status,
                label=labels[run.identity],
                metrics={n: r.value for n, r in final.items()},
            )
        )
        for name in sorted(final):
            r = final[name]
            final_rows.append(
                [run.identity[:12], labels[run.identity], name, r.step, r.value, r.ordinal]
            )
        for a in attempts:
            attempt_rows.append(
                [run.identity[:12], a.ordinal, a.termination or "open", a.started_at, a.ended_at]
            )
    notes = [f"Read from the run store {store.path}."]
    notes += [f"Unverified, its metrics left out: {message}" for message in tampered.values()]
    if len(names) > MAX_SUMMARY_METRICS:
        shown = list(names)[:MAX_SUMMARY_METRICS]
        summaries = [
            RunSummary(s.identity, s.status, s.label, {n: s.metrics.get(n) for n in shown})
            for s in summaries
        ]
        notes.append(
            f"The runs section shows {MAX_SUMMARY_METRICS} of {len(names)} metrics; the "
            "final-metrics table lists all of them."
        )
    tables = [
        Table(
            "Final metrics",
            ["run", "label", "metric", "step", "value", "attempt"],
            final_rows,
            caption="The value at each metric's last step along the run's trajectory (per step, "
            "the latest attempt that logged it, up to the latest completed attempt).",
        ),
        Table(
            "Attempts",
            ["run", "attempt", "termination", "started (UTC)", "ended (UTC)"],
            attempt_rows,
        ),
    ]
    report = StudyReport(
        name=study,
        spec={"kind": row.kind, "spec": row.spec} if row.spec is not None else {},
        runs=summaries,
        tables=tables,
        failures=_failures(store, runs),
        notes=notes,
        created_at=row.created_at,
    )
    return report, _curves(runs, labels, metrics, family)


def _figure_names(curves: Sequence[_Curves]) -> list[str]:
    return [f"{i:02d}-{path_slug(c.family, limit=40)}" for i, c in enumerate(curves, 1)]


def study_report(
    store: RunStore,
    study: str,
    *,
    directory: str | Path,
    tables: Sequence[Table] = (),
    figures: Sequence[FigureArtifact] = (),
    notes: Sequence[str] = (),
    family: Callable[[str], tuple[str, str]] = metric_family,
) -> StudyReport:
    """Build the generic report of one study from the run store, saving its figures.

    Args:
        store: an open run store.
        study: the study's name (as given to the sweep).
        directory: folder the figures are saved into (PNG + SVG, one pair per metric
            family, named ``NN-<family>``); created if missing.
        tables, figures, notes: the experiment's own sections, appended after the generic
            ones (figures already written with :func:`~gaugelab.study.report.builder.save_figure`).
        family: splits a metric name into ``(family, member)``; default
            :func:`metric_family`.

    Returns:
        The :class:`~gaugelab.study.report.builder.StudyReport`: the study's spec, one run summary
        per
        run (status = the latest attempt's termination class, ``"open"`` while it runs, or
        ``"not started"``; final values of up to :data:`MAX_SUMMARY_METRICS` metrics), the
        final-metrics and attempts tables, the figures (log y axis when every value is positive
        and they span more than two decades), and every attempt that did not complete (an
        attempt still running is not one: the attempts table lists it as ``open``).

    Raises:
        ValueError: ``study`` is not in the store (the message lists the known studies).
        FileExistsError: a figure file already exists in ``directory``; nothing is written.
    """
    report, curves = _build(store, study, family)
    directory = Path(directory)
    names = _figure_names(curves)
    refuse_overwrite(directory, [f"{n}.{ext}" for n in names for ext in ("png", "svg")])
    saved = []
    for name, c in zip(names, curves, strict=True):
        fig, caption = _draw(c, study)
        saved.append(save_figure(fig, directory, name, caption=caption))
    return StudyReport(
        name=report.name,
        spec=report.spec,
        runs=report.runs,
        tables=[*report.tables, *tables],
        figures=[*saved, *figures],
        failures=report.failures,
        notes=[*report.notes, *notes],
        created_at=report.created_at,
    )


def write_study_report(
    store: RunStore,
    study: str,
    out_dir: str | Path,
    *,
    tables: Sequence[Table] = (),
    figures: Sequence[FigureArtifact] = (),
    notes: Sequence[str] = (),
) -> Path:
    """Write one study's self-contained HTML report and its figures into ``out_dir``.

    Args:
        store: an open run store.
        study: the study's name.
        out_dir: the output folder (created if missing); receives ``report.html`` and a PNG +
            SVG per figure.
        tables, figures, notes: passed to :func:`study_report`.

    Returns:
        The path of ``report.html``.

    Raises:
        ValueError: unknown study.
        FileExistsError: ``report.html`` or a figure file already exists there; nothing is
            written (the message suggests another ``--out``).
    """
    out_dir = Path(out_dir)
    refuse_overwrite(out_dir)
    report = study_report(
        store, study, directory=out_dir, tables=tables, figures=figures, notes=notes
    )
    try:
        return write_report(report, out_dir)
    except FileExistsError:  # created by someone else meanwhile
        refuse_overwrite(out_dir)
        raise
