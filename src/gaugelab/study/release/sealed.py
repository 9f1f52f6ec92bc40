"""A sealed held-out test set: opened once, after the release is frozen, every access logged.

The held-out test is a report, not another selection round (seed 003 §0x0BT). A
:class:`SealedTestStore` keeps the test splits behind a loader that it calls at most once per
study and design, and only after the selected candidate and its checkpoint are frozen (their
digests recorded, :meth:`SealedTestStore.freeze`). Every event — freeze, opening, report,
no-release, and every refused attempt at one — is logged in the run store, so the seal holds
across processes and across new :class:`SealedTestStore` objects on the same store. An empty
feasible set records "no release" and leaves the test sealed (§0x0BU); after a test result,
freezing another candidate is refused: a failed release gate means no release or a new
versioned study, never "pick the runner-up using test".

How the events are kept in the run store: :mod:`gaugelab.study.release.sealed_log`.

Source: seed 003 §0x0BI (no test leakage into selection), §0x0BT (held-out test is a report),
§0x0BU (the executable trace: ``freeze`` → ``assert not test_store.was_opened()`` →
``open_once()``; fail closed on a test-store access event), §0x0BV (held-out test access
record).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import socket
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict
from typing import Any, Generic, TypeVar

from gaugelab.study.release.sealed_log import (
    _SCHEMA,
    ACCESS_KIND,
    FrozenRelease,
    SealedTestError,
    SealedTestSpec,
    SealStatus,
    _hex64,
    _parse,
    _status,
    _text,
    _user,
    opened_elsewhere,
)
from gaugelab.study.spec import Manifest
from gaugelab.study.store.db import RunStore
from gaugelab.study.store.owner import now_iso

__all__ = [
    "ACCESS_KIND",
    "FrozenRelease",
    "SealStatus",
    "SealedTestError",
    "SealedTestSpec",
    "SealedTestStore",
]

_NEVER_COMPLETED = 2**62  # claim(distrust_through=…): past events never block a new one
T = TypeVar("T")


class SealedTestStore(Generic[T]):
    """The held-out test splits behind a loader called at most once, after a freeze.

    Args:
        store: an open :class:`RunStore`, or the path of one (opened, and closed by
            :meth:`close`).
        study: the study name (created, without a spec, when missing).
        design_digest: sha256 hex of the frozen selection design (e.g. ``GatePolicy.digest()``).
        test_splits: the held-out split ids (non-empty, distinct).
        loader: returns the test data; called by :meth:`open_once` only.

    Raises:
        ValueError: an empty study, a malformed digest, empty or repeated split ids.
        SealedTestError: the study is already sealed under another design or other test
            splits (a changed design is a new versioned study).
        StoreError: the store cannot be opened.
    """

    def __init__(
        self,
        store: RunStore | str | os.PathLike[str],
        *,
        study: str,
        design_digest: str,
        test_splits: Sequence[str],
        loader: Callable[[], T],
    ) -> None:
        fn = "SealedTestStore"
        self.study = _text(fn, "study", study)
        self.design_digest = _hex64(fn, "design_digest", design_digest)
        splits = tuple(test_splits)
        if not splits or len(set(splits)) != len(splits):
            raise ValueError(f"{fn}: test_splits={splits!r}; allowed: distinct split ids")
        for s in splits:
            _text(fn, "test split", s)
        self.test_splits = tuple(sorted(splits))
        if not callable(loader):
            raise TypeError(f"{fn}: loader={loader!r}; allowed: a callable with no arguments")
        self._loader = loader
        self._owned = not isinstance(store, RunStore)
        self.store = RunStore(store) if self._owned else store
        self.identity = self._seal_run()

    # --- the seal's run ----------------------------------------------------------------------

    def _seal_run(self) -> str:
        if self.study not in {s.name for s in self.store.studies()}:
            with contextlib.suppress(ValueError):  # another process added it meanwhile
                self.store.add_study(self.study)
        spec = SealedTestSpec(
            study=self.study, design_digest=self.design_digest, test_splits=self.test_splits
        )
        for run in self.store.runs(self.study):
            if run.kind != SealedTestSpec.kind:
                continue
            if run.spec.get("design_digest") != self.design_digest:
                raise SealedTestError(
                    f"SealedTestStore: study {self.study!r} is sealed under design "
                    f"{run.spec.get('design_digest')!r}, not {self.design_digest!r}; a changed "
                    "design is a new versioned study (choose another study name)"
                )
            if tuple(run.spec.get("test_splits", ())) != self.test_splits:
                raise SealedTestError(
                    f"SealedTestStore: study {self.study!r} seals test splits "
                    f"{tuple(run.spec.get('test_splits', ()))}, not {self.test_splits}"
                )
            return run.identity  # the first one: a later gaugelab version keeps this seal
        return self.store.register_run(Manifest.for_spec(spec), self.study).identity

    def close(self) -> None:
        """Close the store if this object opened it."""
        if self._owned:
            self.store.close()

    def __enter__(self) -> SealedTestStore[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- reading the log ---------------------------------------------------------------------

    def access_log(self) -> list[dict[str, Any]]:
        """Every event, accepted or refused, in order (by attempt ordinal).

        Each entry: ``ordinal``, ``termination``, ``event`` (``freeze``, ``open``, ``report``,
        ``no-release``, or ``interrupted`` for an attempt that recorded nothing), ``accepted``,
        ``reason``, ``frozen`` (the :class:`FrozenRelease` fields or ``None``),
        ``frozen_digest``, ``at`` (ISO 8601 UTC), ``host``, ``pid``, ``user``, and
        ``results`` for a report.

        Raises:
            SealedTestError: an event file differs from the sha256 the store recorded.
        """
        return [e for e in self._events() if e["event"] != "pending"]

    def _events(self, skip: int | None = None) -> list[dict[str, Any]]:
        files = {a.ordinal: a for a in self.store.artifacts(self.identity) if a.kind == ACCESS_KIND}
        out = []
        for attempt in self.store.attempts(self.identity):
            if attempt.id == skip:
                continue
            event = _parse(attempt.message)
            if event is None and attempt.ordinal in files:
                art = files[attempt.ordinal]
                data = art.path.read_bytes() if art.path.is_file() else b""
                if hashlib.sha256(data).hexdigest() != art.sha256:
                    raise SealedTestError(
                        f"SealedTestStore: event file {art.path} is missing or differs from "
                        f"the sha256 {art.sha256[:12]}… recorded in the store; the log is "
                        "not trusted (fail closed)"
                    )
                event = _parse(data.decode("utf-8"))
            if event is None:
                pending = attempt.termination is None
                event = {"event": "pending" if pending else "interrupted", "accepted": False}
                event["reason"] = attempt.message
            out.append({"ordinal": attempt.ordinal, "termination": attempt.termination, **event})
        return out

    def status(self) -> SealStatus:
        """The seal's state from the log (see :class:`SealStatus`)."""
        return _status(self._events())

    def was_opened(self) -> bool:
        """Whether the test was opened (read from the store; persistent across processes)."""
        return self.status().opened

    # --- events ------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _hold(self, event: str) -> Iterator[tuple[int, SealStatus]]:
        """An open attempt of this process on the seal, and the state of every other event."""
        claim = self.store.claim(self.identity, distrust_through=_NEVER_COMPLETED)
        if not claim.claimed:
            holder = claim.holder
            attempt_id = self.store.start_attempt(self.identity)
            who = f"pid {holder.owner_pid} on {holder.owner_host}" if holder else "another process"
            self._end(attempt_id, event, False, f"{who} holds the seal; try again", None)
            raise SealedTestError(f"SealedTestStore: {who} holds the seal; {event} refused")
        try:
            yield claim.attempt_id, _status(self._events(skip=claim.attempt_id))
        except BaseException as e:
            if self.store.attempt(claim.attempt_id).termination is None:
                self.store.end_attempt(claim.attempt_id, "infrastructure_failure", repr(e))
            raise
        if self.store.attempt(claim.attempt_id).termination is None:  # a path that logged nothing
            self.store.end_attempt(claim.attempt_id, "infrastructure_failure", "no event recorded")

    def _end(
        self,
        attempt_id: int,
        event: str,
        accepted: bool,
        reason: str,
        frozen: FrozenRelease | None,
        **extra: Any,
    ) -> dict[str, Any]:
        body = {
            "schema": _SCHEMA,
            "event": event,
            "accepted": accepted,
            "reason": reason,
            "study": self.study,
            "design_digest": self.design_digest,
            "test_splits": list(self.test_splits),
            "frozen": None if frozen is None else asdict(frozen),
            "frozen_digest": None if frozen is None else frozen.digest(),
            "at": now_iso(),
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "user": _user(),
            **extra,
        }
        text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        ordinal = self.store.attempt(attempt_id).ordinal
        store_path = self.store.path
        folder = store_path.parent / f"{store_path.name}.artifacts" / self.identity[:16] / "events"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{ordinal:06d}-{event}.json"
        with open(path, "x", encoding="utf-8") as f:  # never overwrite an event
            f.write(text)
        self.store.add_artifact(attempt_id, path, ACCESS_KIND)
        self.store.end_attempt(attempt_id, "completed" if accepted else "admission_failure", text)
        return body

    def _refuse(self, attempt_id: int, event: str, reason: str, frozen=None) -> SealedTestError:
        self._end(attempt_id, event, False, reason, frozen)
        return SealedTestError(f"SealedTestStore.{event.replace('-', '_')}: {reason}")

    def freeze(self, candidate_id: str, checkpoint_id: str, manifest_digest: str) -> FrozenRelease:
        """Freeze the selected candidate and its checkpoint (recorded; digests kept).

        The same freeze again returns the same :class:`FrozenRelease` (idempotent; logged only
        when it was not already on record).

        Raises:
            ValueError: empty ids or a malformed digest.
            SealedTestError: a different release is frozen (reselection; after the test was
                opened: "a test result never triggers reselection"), or no release was
                recorded. The refusal is logged.
        """
        release = FrozenRelease(candidate_id, checkpoint_id, manifest_digest, self.design_digest)
        known = self.status()
        if known.frozen == release and known.no_release is None:
            return release
        with self._hold("freeze") as (attempt_id, state):
            if state.no_release is not None:
                raise self._refuse(
                    attempt_id,
                    "freeze",
                    f"no release was recorded ({state.no_release}); the test stays sealed",
                    release,
                )
            if state.frozen is not None and state.frozen != release:
                why = (
                    "the test was opened; a test result never triggers reselection (the "
                    "outcome is no release or a new versioned study)"
                    if state.opened
                    else "the selection is frozen; reselection is refused"
                )
                raise self._refuse(
                    attempt_id,
                    "freeze",
                    f"{state.frozen.candidate_id!r} at {state.frozen.checkpoint_id!r} is frozen "
                    f"and {candidate_id!r} at {checkpoint_id!r} was asked: {why}",
                    release,
                )
            self._end(attempt_id, "freeze", True, "frozen before the test is opened", release)
        return release

    def open_once(self) -> T:
        """Open the test: log the access, then return ``loader()`` — once per seal, ever.

        The opening is recorded before the loader runs, so a loader that raises still counts
        as the opening.

        Raises:
            SealedTestError: nothing is frozen ("opening before freezing"), the test was
                opened already ("opening twice"), or no release was recorded; the refused
                attempt is logged and the loader is not called.
        """
        with self._hold("open") as (attempt_id, state):
            if state.opened:
                raise self._refuse(
                    attempt_id,
                    "open",
                    "opening twice: the test was opened already; it opens once",
                    state.frozen,
                )
            if state.no_release is not None:
                raise self._refuse(
                    attempt_id,
                    "open",
                    f"no release was recorded ({state.no_release}); the test stays sealed",
                )
            if state.frozen is None:
                raise self._refuse(
                    attempt_id,
                    "open",
                    "opening before freezing: freeze the "
                    "selected candidate and its checkpoint first",
                )
            elsewhere = opened_elsewhere(self.store, self.identity, self.test_splits)
            if elsewhere is not None:
                raise self._refuse(
                    attempt_id,
                    "open",
                    f"these test splits were opened by study {elsewhere[0]!r} at {elsewhere[1]}; "
                    "held-out data opens once: a new versioned study needs new held-out data",
                    state.frozen,
                )
            self._end(attempt_id, "open", True, "opened after the freeze", state.frozen)
        return self._loader()

    def record_no_release(self, reason: str) -> None:
        """Record "no release" (e.g. the feasible set is empty, §0x0BU; or a failed test
        release gate, §0x0BT); afterwards freezing and opening are refused and an unopened
        test stays sealed.

        Raises:
            ValueError: empty reason.
            SealedTestError: no release is already recorded (the refusal is logged).
        """
        _text("SealedTestStore.record_no_release", "reason", reason)
        with self._hold("no-release") as (attempt_id, state):
            if state.no_release is not None:
                raise self._refuse(
                    attempt_id,
                    "no-release",
                    f"no release is already recorded ({state.no_release})",
                    state.frozen,
                )
            self._end(attempt_id, "no-release", True, reason, state.frozen)

    def report(self, frozen: FrozenRelease, results: Mapping[str, float]) -> dict[str, Any]:
        """Record the frozen release's test result, once; it never feeds back into selection.

        Args:
            frozen: the release returned by :meth:`freeze`.
            results: metric name → finite test value.

        Returns:
            The recorded event.

        Raises:
            ValueError: a non-finite or non-numeric result, or an empty name.
            SealedTestError: the test is not opened, ``frozen`` is not the frozen release, or a
                result was already reported (each refusal logged).
        """
        if not isinstance(frozen, FrozenRelease):
            raise TypeError(f"SealedTestStore.report: frozen={frozen!r}; allowed: a FrozenRelease")
        values = {}
        for name, value in results.items():
            _text("SealedTestStore.report", "result name", name)
            values[name] = float(value)
            if not math.isfinite(values[name]):
                raise ValueError(f"SealedTestStore.report: {name}={value!r}; allowed: finite")
        with self._hold("report") as (attempt_id, state):
            if not state.opened:
                raise self._refuse(attempt_id, "report", "the test was not opened", frozen)
            if frozen != state.frozen:
                raise self._refuse(
                    attempt_id,
                    "report",
                    f"{frozen.candidate_id!r} is not the frozen release; only it is reported",
                    frozen,
                )
            if state.report is not None:
                raise self._refuse(
                    attempt_id,
                    "report",
                    "a test result was already reported; "
                    "a test is a report, not another selection round",
                    frozen,
                )
            return self._end(attempt_id, "report", True, "test report", frozen, results=values)
