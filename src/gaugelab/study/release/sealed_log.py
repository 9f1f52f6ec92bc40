"""The sealed test's records: the refusal type, the frozen release, the seal's run spec, and the
event log's parsing into a :class:`SealStatus`.

Re-exported by :mod:`gaugelab.study.release.sealed` (which holds :class:`SealedTestStore`).

Persistence uses the existing tables only (no schema change): the seal is one run of kind
``sealed-test`` (:class:`SealedTestSpec`: study, design digest, test splits) registered under
the study; each event is one attempt of that run, ended ``completed`` when accepted and
``admission_failure`` when refused, with the event's canonical JSON as the attempt's message
and as a ``test-access`` artifact file beside the store
(``<store folder>/<store name>.artifacts/<run id[:16]>/events/<ordinal>-<event>.json``,
beside the store's other run files, so two stores in one folder never share one). An event is
decided while the process holds an open attempt taken with :meth:`RunStore.claim`, so two
processes never both open the test.

Source: seed 003 §0x0BT–0x0BV (the held-out test access record).
"""

from __future__ import annotations

import getpass
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from types import MappingProxyType
from typing import Any, ClassVar

from pydantic import Field

from gaugelab.study.spec import ExperimentSpec

__all__ = [
    "ACCESS_KIND",
    "FrozenRelease",
    "SealStatus",
    "SealedTestError",
    "SealedTestSpec",
]

ACCESS_KIND = "test-access"
"""Artifact kind of the JSON file describing one event."""
_SCHEMA = "gaugelab.sealed-test/1"
_HEX64 = re.compile(r"[0-9a-f]{64}")


class SealedTestError(RuntimeError):
    """A refused access to the sealed test: the store's state forbids the call (opening before
    freezing, opening twice, reselection after opening, anything after no-release, a study
    sealed under another design). A ``RuntimeError``, not a ``ValueError``: the arguments may
    be fine; the protocol's history refuses them. Bad arguments raise ``ValueError``."""


def _digest(obj: Any) -> str:
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _text(fn: str, arg: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{fn}: {arg}={value!r}; allowed: a non-empty string")
    return value


def _hex64(fn: str, arg: str, value: object) -> str:
    if not (isinstance(value, str) and _HEX64.fullmatch(value)):
        raise ValueError(f"{fn}: {arg}={value!r}; allowed: 64 lowercase hex (a sha256 digest)")
    return value


@dataclass(frozen=True)
class FrozenRelease:
    """The selected candidate and checkpoint, frozen before the test is opened.

    Attributes:
        candidate_id, checkpoint_id: the release.
        manifest_digest: the candidate's manifest digest (64 hex).
        design_digest: the selection design's digest (the frozen policy, 64 hex).
    """

    candidate_id: str
    checkpoint_id: str
    manifest_digest: str
    design_digest: str

    def __post_init__(self) -> None:
        _text("FrozenRelease", "candidate_id", self.candidate_id)
        _text("FrozenRelease", "checkpoint_id", self.checkpoint_id)
        _hex64("FrozenRelease", "manifest_digest", self.manifest_digest)
        _hex64("FrozenRelease", "design_digest", self.design_digest)

    def digest(self) -> str:
        """sha256 hex of the canonical JSON of the four fields."""
        return _digest(asdict(self))


class SealedTestSpec(ExperimentSpec):
    """The run that holds one study's seal; never executed (each event is an attempt)."""

    kind: ClassVar[str] = "sealed-test"

    study: str = Field(description="the study whose held-out test this run seals")
    design_digest: str = Field(description="sha256 of the frozen selection design")
    test_splits: tuple[str, ...] = Field(description="the held-out split ids, sorted")

    def execute(self, run: Any) -> None:
        """Refuse: a seal is not a run to execute (its attempts are access events).

        Raises:
            SealedTestError: always.
        """
        raise SealedTestError(
            "SealedTestSpec.execute: a sealed-test run records access events; it is never "
            "executed by a sweep"
        )


@dataclass(frozen=True)
class SealStatus:
    """What the log says: the frozen release (first accepted freeze), whether the test was
    opened, the no-release reason, the reported test result (each ``None``/``False`` when
    absent)."""

    frozen: FrozenRelease | None
    opened: bool
    no_release: str | None
    report: Mapping[str, float] | None


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return ""


def _parse(text: str) -> dict[str, Any] | None:
    if not text.startswith("{"):
        return None
    try:
        body = json.loads(text)
    except ValueError:
        return None
    return body if isinstance(body, dict) and body.get("schema") == _SCHEMA else None


def _status(events: list[dict[str, Any]]) -> SealStatus:
    frozen = no_release = report = None
    opened = False
    for e in events:
        if not e["accepted"]:  # refused, interrupted or pending: nothing happened
            continue
        if e["event"] == "freeze" and frozen is None:
            frozen = FrozenRelease(**e["frozen"])
        elif e["event"] == "open":
            opened = True
        elif e["event"] == "no-release" and no_release is None:
            no_release = e["reason"]
        elif e["event"] == "report" and report is None:
            report = MappingProxyType(dict(e["results"]))
    return SealStatus(frozen, opened, no_release, report)


def opened_elsewhere(
    store: Any, identity: str, test_splits: tuple[str, ...]
) -> tuple[str, str] | None:
    """``(study, when)`` of another seal in ``store`` (not run ``identity``) whose accepted
    events include an opening of the same ``test_splits``, or ``None``."""
    for run in store.runs():
        if run.kind != SealedTestSpec.kind or run.identity == identity:
            continue
        if tuple(run.spec.get("test_splits", ())) != tuple(test_splits):
            continue
        for attempt in store.attempts(run.identity):
            event = _parse(attempt.message) or {}
            if event.get("event") == "open" and event.get("accepted"):
                return str(run.spec.get("study")), str(event.get("at"))
    return None
