"""Who holds an open attempt, whether that process still lives, and the heartbeat that says so.

Every attempt row names its owner: the host name, the process id and the process's start time
(from ``/proc/<pid>/stat`` on Linux, so a reused pid is not mistaken for the owner; ``""``
elsewhere). While an attempt trains, a :class:`Heartbeat` thread of its owner refreshes the
row's ``heartbeat_at`` every :data:`HEARTBEAT_SECONDS`. Another process judges the owner:

* on the same host, by its pid: gone (or a zombie, or a different process under the same pid)
  means the attempt is abandoned — :func:`killed`: ``"killed: pid N ended before its run did"``;
* on another host, by its heartbeat: older than :data:`STALE_SECONDS` means abandoned —
  ``"heartbeat stale"`` (the hosts' clocks are assumed to agree to well within that).

In the owning process itself an attempt is alive exactly while this process holds it
(:func:`hold` … :func:`release`, done by the store when it opens and ends an attempt).

A command that is killed (``kill -9``, the out-of-memory killer, a closed session) leaves its
runs' attempts open. Whether a run executed in the command's own process (the next command
ends its attempt) or in a pool worker (the worker sees its driver gone and ends it), the attempt
is recorded alike: ``infrastructure_failure`` with :func:`killed`'s message, naming the process
that died. Stores written before kept ``owner pid N gone``, or ``cancelled`` with ``driver pid N
gone``; :func:`as_recorded` reads those in today's form.
"""

from __future__ import annotations

import _thread
import contextlib
import functools
import os
import re
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

__all__ = [
    "HEARTBEAT_SECONDS",
    "KILLED",
    "STALE_SECONDS",
    "Heartbeat",
    "Owner",
    "as_recorded",
    "gone",
    "hold",
    "holding",
    "killed",
    "now_iso",
    "release",
    "this_process",
]

HEARTBEAT_SECONDS = 5.0
"""How often an owner refreshes the heartbeat of the attempt it trains (seconds)."""

STALE_SECONDS = 60.0
"""How old the heartbeat of an owner on another host may be before its attempt is abandoned
(seconds; twelve missed heartbeats)."""


KILLED = "infrastructure_failure"
"""The termination class of an attempt whose process was killed (in-process or in a pool)."""


def killed(pid: int) -> str:
    """The one message of an attempt whose process ended without ending it: the command's
    process (runs executed in it, or a pool's driver) or a pool worker, named by ``pid``."""
    return f"killed: pid {pid} ended before its run did"


_OLD_OWNER = re.compile(r"owner pid (\d+) gone(.*)", re.DOTALL)
_OLD_DRIVER = re.compile(r"driver pid (\d+) gone(.*)", re.DOTALL)


def as_recorded(termination: str | None, message: str) -> tuple[str | None, str]:
    """An attempt's ``(termination, message)`` in today's form.

    Stores written before the one class for a killed command recorded the same event as
    ``infrastructure_failure`` / ``"owner pid N gone…"`` (runs in the command's process) or
    ``cancelled`` / ``"driver pid N gone"`` (a pool's worker whose driver was killed); both read
    as :data:`KILLED` with :func:`killed`'s message (what follows the pid kept). Other rows are
    returned unchanged.
    """
    driver = _OLD_DRIVER.fullmatch(message) if termination == "cancelled" else None
    if driver is not None:
        return KILLED, killed(int(driver.group(1))) + driver.group(2)
    owner = _OLD_OWNER.fullmatch(message) if termination is not None else None
    if owner is not None:  # the class is kept (a Ctrl-C'd worker stopped by force: cancelled)
        return termination, killed(int(owner.group(1))) + owner.group(2)
    return termination, message


def now_iso() -> str:
    """Now, as the store writes its timestamps: ISO 8601 in UTC, to the microsecond."""
    return datetime.now(UTC).isoformat(timespec="microseconds")


@dataclass(frozen=True)
class Owner:
    """A process that may hold an attempt: host name, pid and start time (``""`` if unknown)."""

    host: str
    pid: int
    started: str = ""

    def __str__(self) -> str:
        return f"pid {self.pid} on {self.host or 'an unknown host'}"


def process_start(pid: int) -> str:
    """The start time of process ``pid`` in clock ticks after boot (``/proc/<pid>/stat`` field
    22), or ``""`` where ``/proc`` does not say (not Linux, no such process)."""
    fields = _stat(pid)
    return fields[19] if fields is not None and len(fields) > 19 else ""


def _stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (state first), or ``None``."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    return text.rpartition(")")[2].split()


@functools.cache
def _this_process(pid: int) -> Owner:
    return Owner(socket.gethostname(), pid, process_start(pid))


def this_process() -> Owner:
    """The :class:`Owner` of this process (recomputed after a fork)."""
    return _this_process(os.getpid())


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        pass
    except OSError:
        return False
    fields = _stat(pid)
    return fields is None or fields[0] not in ("Z", "X")  # a zombie has finished


_HELD: set[tuple[str, int]] = set()
_HELD_LOCK = threading.Lock()


def hold(store: str, attempt_id: int) -> None:
    """Mark attempt ``attempt_id`` of the store at ``store`` as held by this process."""
    with _HELD_LOCK:
        _HELD.add((store, attempt_id))


def release(store: str, attempt_id: int) -> None:
    """Undo :func:`hold` (no error if it was not held)."""
    with _HELD_LOCK:
        _HELD.discard((store, attempt_id))


def holding(store: str, attempt_id: int) -> bool:
    """Whether this process holds attempt ``attempt_id`` of the store at ``store``."""
    with _HELD_LOCK:
        return (store, attempt_id) in _HELD


def _parse(stamp: str | None) -> datetime | None:
    try:
        return datetime.fromisoformat(stamp) if stamp else None
    except ValueError:
        return None


def gone(
    owner: Owner,
    heartbeat_at: str | None,
    *,
    store: str = "",
    attempt_id: int = 0,
    now: datetime | None = None,
) -> str | None:
    """Why the owner of an open attempt no longer runs it, or ``None`` while it may.

    Args:
        owner: the attempt's owner (an empty host: a store written before owners were kept).
        heartbeat_at: the attempt's latest heartbeat (or its start), ISO 8601 with time zone.
        store, attempt_id: the attempt, for an owner that is this process (alive exactly while
            it holds the attempt, see :func:`hold`).
        now: the time to judge a heartbeat against (default: now, UTC).

    Returns:
        ``None``, :func:`killed` (same host: no such process, a zombie, or another
        process under the same pid) or ``"heartbeat stale (…)"`` (another host, or an unknown
        one: no heartbeat within :data:`STALE_SECONDS`).
    """
    me = this_process()
    if owner.host and owner.host == me.host:
        if owner.pid == me.pid and owner.started == me.started:
            return None if holding(store, attempt_id) else killed(owner.pid)
        alive = _pid_alive(owner.pid)
        if alive and owner.started:
            started = process_start(owner.pid)
            alive = not started or started == owner.started
        return None if alive else killed(owner.pid)
    last = _parse(heartbeat_at)
    age = ((now or datetime.now(UTC)) - last).total_seconds() if last is not None else None
    if age is not None and age <= STALE_SECONDS:
        return None
    shown = "never" if age is None else f"{age:.0f} s ago"
    return f"heartbeat stale (last {shown}; owner {owner})"


class Heartbeat:
    """A daemon thread that refreshes an open attempt's heartbeat while its run trains.

    Args:
        connect: opens the store (called in the thread: an object with ``heartbeat(id) -> bool``
            and ``close()``, e.g. ``functools.partial(RunStore, path, create=False)``).
        attempt_id: the attempt this process trains.
        driver: the process that asked for the run (a sweep's driver), watched when it is on
            this host; ``None``: nobody to watch.
        interval: seconds between heartbeats (default :data:`HEARTBEAT_SECONDS`).

    When the driver is gone (:attr:`orphaned`; :attr:`stopped` is :func:`killed` of the driver,
    recorded as :data:`KILLED`), or the attempt was ended by another process, :attr:`stopped`
    says why and the main thread receives ``KeyboardInterrupt``.
    Store errors in the thread are ignored (the next beat tries again).
    """

    def __init__(
        self,
        connect: Callable[[], Any],
        attempt_id: int,
        *,
        driver: Owner | None = None,
        interval: float = HEARTBEAT_SECONDS,
    ) -> None:
        self._connect, self._attempt, self._driver = connect, attempt_id, driver
        self._interval = interval
        self._stop = threading.Event()
        self.stopped: str | None = None
        self.orphaned = False
        self._thread = threading.Thread(target=self._loop, name="gaugelab-heartbeat", daemon=True)

    def start(self) -> Heartbeat:
        self._thread.start()
        return self

    def stop(self) -> None:
        """End the thread (waits for a beat in progress)."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5 * self._interval + 60)

    def _orphaned(self) -> str | None:
        driver = self._driver
        if driver is None or driver.host != this_process().host:
            return None
        if driver.pid == os.getpid():
            return None
        reason = gone(driver, None)
        self.orphaned = reason is not None
        return reason

    def _loop(self) -> None:
        store = None
        try:
            while not self._stop.wait(self._interval):
                why = self._orphaned()
                if why is None:
                    try:
                        if store is None:
                            store = self._connect()
                        if not store.heartbeat(self._attempt):
                            why = "the attempt was ended by another process"
                    except Exception:  # a busy or vanished store: try again at the next beat
                        continue
                if why is not None and not self._stop.is_set():
                    self.stopped = why
                    _thread.interrupt_main()
                    return
        finally:
            if store is not None:
                with contextlib.suppress(Exception):
                    store.close()
