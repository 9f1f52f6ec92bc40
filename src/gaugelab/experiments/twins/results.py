"""The twin study read back from the store: rows, verdicts, paired statistics, tables, report
(its figures: :mod:`gaugelab.experiments.twins.figures`).

Nothing here recomputes what a run stored: distances, drifts and accuracies are the logged
metrics, the verdict is the run's ``summary`` artifact, read only once its bytes match the
sha256 the store recorded (a changed or missing summary makes the run ``unverified``).

Source: singh2026lossbasis, §6; docs/protocols.md §5.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from gaugelab.experiments.twins.spec import TwinSpec
from gaugelab.study.stats.paired import PairedComparison, paired_differences
from gaugelab.study.store.db import RunStore
from gaugelab.study.store.results import ArtifactError, failed, verified_json
from gaugelab.study.store.seals import MetricsTampered

TABLE_STEPS = (1, 10, 100)


@dataclass
class TwinRow:
    """One optimizer × pair: the protocol's table row for every twin, and the stored verdict."""

    optimizer: str
    pair: int
    identity: str
    termination: str
    verdict: str
    explanation: str
    distances: dict[str, dict[int, float]] = field(default_factory=dict)  # twin → step → dist
    qk_drift: dict[str, float] = field(default_factory=dict)  # twin → final mean QK drift
    qk_series: dict[str, dict[int, float]] = field(default_factory=dict)  # twin → step → drift
    hyper: dict[str, Any] = field(default_factory=dict)  # the run's optimizer hyperparameters
    val_accuracy: dict[str, float] = field(default_factory=dict)  # member → final accuracy
    merge: dict[str, float] = field(default_factory=dict)

    @property
    def message(self) -> str:
        """Why the run did not complete ("" when it did)."""
        return "" if self.termination == "completed" else self.explanation

    @property
    def label(self) -> str:
        """``optimizer`` for pair 0, ``optimizer #i`` for pair ``i``."""
        return self.optimizer if self.pair == 0 else f"{self.optimizer} #{self.pair}"


@dataclass
class TwinsResult:
    """The twin study as read back from the store.

    Attributes:
        study: the study's name; spec: its base spec (JSON mode: ``{"twin": …, "merge": …}``).
        rows: one :class:`TwinRow` per run, in the sweep's order.
        paired: optimizer → ``{"step 1" | "final": PairedComparison}`` of ``log10(gauge /
            noise)`` over the pairs (only for optimizers with two or more completed pairs).
    """

    study: str
    spec: dict[str, Any]
    rows: list[TwinRow]
    paired: dict[str, dict[str, PairedComparison]] = field(default_factory=dict)

    @property
    def steps(self) -> int:
        """The runs' training steps."""
        return int(self.spec["twin"]["steps"])

    @property
    def optimizers(self) -> dict[str, dict[str, Any]]:
        """Every optimizer of the study, in the sweep's order → its runs' hyperparameters."""
        out: dict[str, dict[str, Any]] = {}
        for row in self.rows:
            out.setdefault(row.optimizer, row.hyper)
        return out

    def study_spec(self) -> dict[str, Any]:
        """The study's spec as a report shows it: the stored base spec names only the base
        optimizer, so its ``optimizer`` and ``hyper`` are replaced by ``optimizers``, every
        optimizer of the study in its order with its hyperparameters (``[{"optimizer": name,
        "hyper": {...}}, ...]``), and the number of (init seed, gauge draw) pairs is added (pair
        ``i`` uses ``init_seed + i`` and ``gauge_seed + i``)."""
        twin = {k: v for k, v in self.spec["twin"].items() if k not in ("optimizer", "hyper")}
        optimizers = [{"optimizer": o, "hyper": h} for o, h in self.optimizers.items()]
        pairs = len({r.pair for r in self.rows})
        return {**self.spec, "optimizers": optimizers, "pairs": pairs, "twin": twin}

    @property
    def completed(self) -> list[TwinRow]:
        """The runs that completed, their files verified: the rows the tables show."""
        return [r for r in self.rows if r.termination == "completed"]

    @property
    def failures(self) -> list[TwinRow]:
        """Runs that ended without completing (as rows: identity, termination, message);
        running ones are not failures."""
        return [r for r in self.rows if failed(r.termination)]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict of the result."""
        return {
            "study": self.study,
            "spec": self.spec,
            "rows": [vars(r) for r in self.rows],
            "paired": {o: {k: vars(c) for k, c in d.items()} for o, d in self.paired.items()},
        }


def _verdict(store: RunStore, identity: str) -> tuple[str, str]:
    """The verdict and explanation of a run's latest completed attempt, from its ``summary``
    artifact checked against the store's sha256 (``("", "")`` when it recorded none).

    Raises:
        ArtifactError: the summary is missing, changed since the run wrote it, or not a twin
            summary (the message names the file and the run).
    """
    for art in store.completed_files(identity, "summary"):
        summary = verified_json(art)
        verdict = summary.get("verdict") if isinstance(summary, dict) else None
        explanation = summary.get("explanation") if isinstance(summary, dict) else None
        if not isinstance(verdict, str) or not isinstance(explanation, str):
            raise ArtifactError(
                f"{art.path}: summary file of run {identity[:12]} is not a twin summary "
                "(no verdict and explanation strings)"
            )
        return verdict, explanation
    return "", ""


def collect(store: RunStore, study: str) -> TwinsResult:
    """The :class:`TwinsResult` of a twin study, from its stored metrics and verdicts.

    A completed run whose summary file is missing or no longer matches the sha256 the store
    recorded is not read: its row's termination and verdict become ``"unverified"`` and its
    explanation names the file and the run (so it shows as a failure, never as a verdict from
    a tampered file); its logged metrics, kept in the store itself, are still shown.

    Raises:
        ValueError: no such study, or it is not a twin study.
    """
    row = store.study_row(study)
    if row.kind != "twins":
        raise ValueError(f"collect: study {study!r} is a {row.kind!r} study, not a twin study")
    base_init = row.spec["twin"]["init_seed"]
    rows = []
    for run in store.run_states(study):
        try:
            metrics = store.metrics(run.identity)  # sealed rows: checked as they are read
        except MetricsTampered as exc:  # never shown: the rows changed after their attempt
            run, metrics = run.unverified(exc), []
        if run.completed:
            try:
                verdict = _verdict(store, run.identity)
            except ArtifactError as exc:  # the summary file: the store's own rows still show
                run = run.unverified(exc)
        twin = run.spec["twin"]
        out = TwinRow(twin["optimizer"], twin["init_seed"] - base_init, run.identity,
                      run.termination, run.termination, run.message)  # fmt: skip
        values: dict[str, dict[int, float]] = {}
        for m in metrics:
            values.setdefault(m.name, {})[m.step] = m.value
        out.hyper = _hyperparameters(twin)
        final = twin["steps"]
        for kind in twin["twins"]:
            out.distances[kind] = values.get(f"{kind}/logit_distance", {})
            out.qk_series[kind] = values.get(f"{kind}/qk_drift_mean", {})
            out.qk_drift[kind] = out.qk_series[kind].get(final, math.nan)
        for member in ("base", *twin["twins"]):
            out.val_accuracy[member] = values.get(f"{member}/val_accuracy", {}).get(final, math.nan)
        out.merge = {
            n.removeprefix("merge/"): v[final + 1]
            for n, v in values.items()
            if n.startswith("merge/") and final + 1 in v
        }
        if run.completed:
            out.verdict, out.explanation = verdict
        rows.append(out)
    return TwinsResult(study, row.spec, rows, _paired(rows, int(row.spec["twin"]["steps"])))


def _hyperparameters(twin: dict[str, Any]) -> dict[str, Any]:
    """The hyperparameters a stored run trained with (its ``hyper``, or the protocol's)."""
    try:
        return TwinSpec.model_validate(twin).hyperparameters()
    except ValidationError:  # a spec of another gaugelab version: show what it stored
        return dict(twin.get("hyper") or {})


def _paired(rows: Sequence[TwinRow], final: int) -> dict[str, dict[str, PairedComparison]]:
    """Seed-paired ``log10(gauge / noise)`` at step 1 and at the end, per optimizer."""
    out: dict[str, dict[str, PairedComparison]] = {}
    for optimizer in dict.fromkeys(r.optimizer for r in rows):
        done = [r for r in rows if r.optimizer == optimizer and r.termination == "completed"]
        comparisons = {}
        for label, step in (("step 1", 1), ("final", final)):
            gauge, noise = {}, {}
            for r in done:
                g = r.distances.get("gauge", {}).get(step)
                n = r.distances.get("noise", {}).get(step)
                if g is not None and n is not None and g > 0 and n > 0:
                    gauge[r.pair], noise[r.pair] = math.log10(g), math.log10(n)
            if len(gauge) >= 2:
                comparisons[label] = paired_differences(gauge, noise)
        if comparisons:
            out[optimizer] = comparisons
    return out
