"""One check of the atlas: :func:`gaugelab.equivariance.check_equivariance` under a time limit,
whatever it ends in recorded as the run's result.

Every way a check can end is a row, never a lost run:

* a verdict of the check (``equivariant``, ``breaks``, …) with the step-1 twin distances;
* ``error`` — the optimizer raised (:class:`gaugelab.errors.OptimizerFailure`: its phase,
  reason and hint) or its constructor refused the problem's parameters (a ``ValueError``);
* ``diverged`` — a run became non-finite (:class:`gaugelab.NonFiniteError`);
* ``timeout`` — the check ran past its time limit. The attempt then ends as
  ``validation_stopped`` (a rule the run declares) with the reason, and writes no result: a
  time limit says nothing about the optimizer, so the next atlas checks it again.

The first three complete the run with a ``result.json`` (kind ``result``); a rerun reuses them.

Source: singh2026lossbasis, §6 (the twin triplet); docs/commands/atlas.md.
"""

from __future__ import annotations

import contextlib
import functools
import json
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import torch

from gaugelab.equivariance.check import check_equivariance
from gaugelab.equivariance.report import EquivarianceReport
from gaugelab.equivariance.verdicts import DIVERGED, ERROR, TIMEOUT
from gaugelab.errors import NonFiniteError, OptimizerFailure
from gaugelab.experiments.atlas.spec import AtlasSpec
from gaugelab.study.runner import ValidationStop


class TimeLimitReached(BaseException):
    """The check's time is up. A ``BaseException``, so that the check's own handlers (which
    turn an optimizer's ``Exception`` into an :class:`OptimizerFailure`) let it through."""


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise :class:`TimeLimitReached` in the block once ``seconds`` of wall time have passed.

    In the main thread (a sweep's worker processes, or the command's own process) a real-time
    timer (``SIGALRM``) interrupts the block between two Python operations, so a native call
    (one long matrix product) finishes first. In another thread no signal can reach it: the
    block runs to its end and the limit is applied then.

    Raises:
        TimeLimitReached: the block ran past ``seconds``.
    """
    if threading.current_thread() is not threading.main_thread():
        start = time.monotonic()
        yield
        if time.monotonic() - start > seconds:
            raise TimeLimitReached
        return

    def expire(signum: int, frame: Any) -> None:
        raise TimeLimitReached

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@functools.cache
def warm_up() -> None:
    """Pay this process's one-time costs before a check is timed: torch imports its compiler
    stack (about 2 s) when the first optimizer of a process is built, which would otherwise be
    charged to the first check's seconds and time limit. Once per process."""
    p = torch.zeros(2, requires_grad=True)
    p.grad = torch.ones(2)
    torch.optim.SGD([p], lr=0.0).step()


def _first_step(report: EquivarianceReport) -> dict[str, float | None]:
    """The step-1 gauge and noise twins (max over draws) and their ratio."""
    gauge, noise = report.worst("gauge")[0], report.worst("noise")[0]
    ratio = gauge / noise if noise > 0 else None  # JSON has no inf; both twins at 0: no ratio
    return {"gauge": gauge, "noise": noise, "ratio": ratio}


def check_row(spec: AtlasSpec) -> dict[str, Any]:
    """Run the spec's one check and describe how it ended.

    Returns:
        ``{"verdict", "explanation", "phase", "reason", "hint", "gauge", "noise", "ratio",
        "seconds", "claimed"}``: ``gauge`` and ``noise`` are the step-1 relative Frobenius
        distances of the represented objects to the base (max over draws), ``ratio`` their
        quotient (``None`` when the noise twin is 0), ``seconds`` the check's wall time (after
        :func:`warm_up`: one-time costs are not a check's); ``phase``,
        ``reason`` and ``hint`` are set for ``error`` and ``diverged`` rows (empty otherwise).

    Raises:
        TimeLimitReached: the check ran past ``spec.timeout`` seconds.
    """
    candidate, group, problem = spec.check
    row: dict[str, Any] = dict.fromkeys(("explanation", "phase", "reason", "hint"), "")
    row.update(dict.fromkeys(("gauge", "noise", "ratio", "claimed")))
    warm_up()
    start = time.perf_counter()
    try:
        with time_limit(spec.timeout):
            report = check_equivariance(
                candidate.target, group=group, problem=problem, steps=spec.steps,
                draws=spec.draws, dtype=spec.dtype, seed=spec.seed,
            )  # fmt: skip
    except OptimizerFailure as exc:
        row.update(verdict=ERROR, phase=exc.phase, reason=exc.reason, hint=exc.hint)
    except ValueError as exc:  # the constructor refuses the parameters or a hyperparameter
        reason = " ".join(str(exc).split()).removeprefix("check_equivariance: ")
        row.update(verdict=ERROR, phase="construct", reason=reason)
    except NonFiniteError as exc:
        reason = " ".join(str(exc).split()).removeprefix("check_equivariance: ")
        row.update(verdict=DIVERGED, phase="run", reason=reason)
    else:
        row.update(verdict=report.verdict, explanation=report.explanation,
                   claimed=report.claimed, **_first_step(report))  # fmt: skip
    row["seconds"] = time.perf_counter() - start
    return row


def run_check(spec: AtlasSpec, run: Any = None) -> dict[str, Any]:
    """The trainer of an atlas run: :func:`check_row`, written to ``result.json`` (kind
    ``result``) when ``run`` is given.

    Raises:
        ValidationStop: the check ran past its time limit (the run ends ``validation_stopped``
            with ``"timeout: …"`` as its message, and no result).
    """
    try:
        row = check_row(spec)
    except TimeLimitReached:
        raise ValidationStop(
            f"{TIMEOUT}: the check ran past its time limit of {spec.timeout:g} s (--timeout)"
        ) from None
    if run is not None:
        out = run.directory / "result.json"
        out.write_text(json.dumps(row, indent=1), encoding="utf-8")
        run.artifact(out, "result")
    return row


__all__ = ["TimeLimitReached", "check_row", "run_check", "time_limit", "warm_up"]
