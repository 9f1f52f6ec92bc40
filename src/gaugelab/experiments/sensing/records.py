"""A rule's result: what one (seed × rate) ensemble did, recorded in the store and read back.

:class:`RuleResult` is what :func:`gaugelab.experiments.sensing.train.train_rule` returns (JSON
round-trip, non-finite floats as strings); :func:`record_result` logs its curves and final
metrics and saves it as the run's ``result-{label}.json`` artifact; :func:`read_study` and
:func:`read_results` read a sensing study back, each result file checked against the sha256
the store recorded before it is parsed (a changed file makes its run ``unverified``).

Source: docs/protocols.md §3 (the metrics and the stopping statuses).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

from gaugelab.experiments.sensing.problem import SensingExperiment
from gaugelab.study.store.results import ArtifactError, RunState, verified_json

__all__ = [
    "BUDGET",
    "DIVERGED",
    "INTERPOLATED",
    "STATUSES",
    "RuleResult",
    "read_results",
    "read_study",
    "record_result",
]

S = TypeVar("S", bound=SensingExperiment)
INTERPOLATED, DIVERGED, BUDGET = "interpolated", "diverged", "budget"
STATUSES = (INTERPOLATED, DIVERGED, BUDGET)
"""How a member's training ended: it interpolated, diverged, or ran to the step budget."""


@dataclass
class RuleResult:
    """What one rule's ensemble did. Lists are JSON-able; indices are ``[seed][rate]``.

    Attributes:
        rule: registry name (or a label such as ``adam-p@0.5``).
        hyper: extra hyperparameters of the rule.
        decayed: whether the cosine schedule applied.
        lrs: ``[L]`` learning rates; seeds: ``[S]``.
        recovery, loss, effective_rank, balancedness: ``[S][L]`` final metrics (the
            effective rank is Roy–Vetterli's, docs/protocols.md §3).
        steps: ``[S][L]`` updates applied to the final parameters.
        status: ``[S][L]`` ``"interpolated"``, ``"diverged"`` or ``"budget"``.
        spectra: ``[S][L][n]`` singular values of the final ``U Vᵀ``.
        curve_steps: ``[C]``; curve_loss, curve_recovery: ``[C][S][L]`` at every check.
        seconds: wall time of the ensemble.
    """

    rule: str
    hyper: dict[str, Any]
    decayed: bool
    lrs: list[float]
    seeds: list[int]
    recovery: list[list[float]]
    loss: list[list[float]]
    effective_rank: list[list[float]]
    balancedness: list[list[float]]
    steps: list[list[int]]
    status: list[list[str]]
    spectra: list[list[list[float]]]
    curve_steps: list[int]
    curve_loss: list[list[list[float]]]
    curve_recovery: list[list[list[float]]]
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict (non-finite floats as strings ``"nan"``/``"inf"``)."""
        return _jsonable(asdict(self))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RuleResult:
        """Inverse of :meth:`to_dict`."""
        return cls(**_unjson(data))


def _jsonable(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_jsonable(v) for v in x]
    return x


def _unjson(x: Any) -> Any:
    if isinstance(x, str) and x in ("nan", "inf", "-inf"):
        return float(x)
    if isinstance(x, dict):
        return {k: _unjson(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_unjson(v) for v in x]
    return x


def record_result(run: Any, result: RuleResult, final_step: int) -> None:
    """Log a rule's curves and final metrics to the store and save its result artifact.

    Metric names are ``{label}/{metric}/lr={lr}/seed={seed}``: ``loss`` and ``recovery`` at
    every check step; ``final_recovery``, ``final_loss``, ``effective_rank``,
    ``balancedness``, ``stop_step`` at ``final_step``. Non-finite values are not logged (the
    artifact keeps them). The full :class:`RuleResult` is written as
    ``result-{label}.json`` (artifact kind ``"result"``).
    """

    def name(metric: str, s: int, j: int) -> str:
        return f"{result.rule}/{metric}/lr={result.lrs[j]:g}/seed={result.seeds[s]}"

    def finite(values: dict[str, float]) -> dict[str, float]:
        return {k: v for k, v in values.items() if math.isfinite(v)}

    S, L = len(result.seeds), len(result.lrs)
    members = [(s, j) for s in range(S) for j in range(L)]
    for c, step in enumerate(result.curve_steps):
        values = {}
        for s, j in members:
            values[name("loss", s, j)] = result.curve_loss[c][s][j]
            values[name("recovery", s, j)] = result.curve_recovery[c][s][j]
        run.log(step, finite(values))
    final = {}
    for s, j in members:
        final[name("final_recovery", s, j)] = result.recovery[s][j]
        final[name("final_loss", s, j)] = result.loss[s][j]
        final[name("effective_rank", s, j)] = result.effective_rank[s][j]
        final[name("balancedness", s, j)] = result.balancedness[s][j]
        final[name("stop_step", s, j)] = float(result.steps[s][j])
    run.log(final_step, finite(final))
    safe = "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in result.rule)
    path = run.directory / f"result-{safe}.json"
    path.write_text(json.dumps(result.to_dict(), allow_nan=False), encoding="utf-8")
    run.artifact(path, "result")


def read_study(store: Any, study: str, spec_class: type[S]) -> tuple[S, list[RunState], dict]:
    """A sensing study from the store: its spec, every run's state, and label → the
    :class:`RuleResult` of every completed run whose result files verify.

    A completed run whose result file is missing or no longer matches the sha256 the store
    recorded is not read: its state becomes ``"unverified"`` with a message naming the file and
    the run (so it shows as a failure, never as a row from a tampered file).

    Raises:
        ValueError: no such study, or one of another kind than ``spec_class``.
    """
    row = store.study_of_kind(study, spec_class)
    runs = store.run_states(study)
    results: dict[str, RuleResult] = {}
    for i, run in enumerate(runs):
        if run.completed:
            try:
                results.update(read_results(store, run.identity))
            except ArtifactError as exc:
                runs[i] = run.unverified(exc)
    return spec_class.model_validate(row.spec), runs, results


def read_results(store: Any, identity: str) -> dict[str, RuleResult]:
    """The ``result`` artifacts of a run's latest completed attempt, label → :class:`RuleResult`
    (empty when the run has not completed). Each file is checked against the sha256 the store
    recorded before it is parsed.

    Raises:
        ArtifactError: a result file is missing, changed since the run wrote it, or not a
            rule result (the message names the file and the run).
    """
    results = {}
    for art in store.completed_files(identity, "result"):
        try:
            result = RuleResult.from_dict(verified_json(art))
        except TypeError as exc:
            raise ArtifactError(
                f"{art.path}: result file of run {identity[:12]} is not a rule result ({exc})"
            ) from None
        results[result.rule] = result
    return results
