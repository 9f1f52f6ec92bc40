"""Ctrl-C and exit: SIGINT stops `gaugelab twins` within seconds, keeps the completed runs,
records the running ones as cancelled, says how to resume and exits 130; and after any command
(done, failed, interrupted) no process it started is left alive. By subprocess, each command in
a session of its own (as a terminal's foreground job), signalled as a terminal does: the whole
process group."""

import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.support.terminal import as_foreground_job

from gaugelab.study.store.db import RunStore

GAUGELAB = "from gaugelab.cli import main; main()"  # the `gaugelab` command, this interpreter
ENV = {**os.environ, "COLUMNS": "250", "OMP_NUM_THREADS": "1"}
MARK = "GAUGELAB_TEST_COMMAND"
RESUME = "rerun the same command to resume from the last checkpoints"


def _start(*args: str) -> subprocess.Popen:
    """The command in a session of its own; every process it starts inherits ``$MARK``."""
    mark = secrets.token_hex(8)
    proc = subprocess.Popen(
        [sys.executable, "-c", GAUGELAB, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**ENV, MARK: mark},
        start_new_session=True,
        preexec_fn=as_foreground_job,
    )
    proc.mark = mark
    return proc


def _started_by(proc: subprocess.Popen) -> list[str]:
    """``"<pid> <command>"`` of every live process in the command's session, or carrying its
    mark in its environment (a process that left the session, e.g. Ray's), from /proc."""
    found, mark = [], f"{MARK}={proc.mark}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        fields = stat.rpartition(")")[2].split()  # state, ppid, pgrp, session, …
        if fields[0] != "Z" and (int(fields[3]) == proc.pid or mark in environ):
            found.append(f"{entry.name} {cmdline[:120]}")
    return found


def _assert_nothing_left(proc: subprocess.Popen, seconds: float = 10.0) -> None:
    """No process the command started is alive (a resource tracker may need a moment to see
    its parent gone)."""
    deadline = time.monotonic() + seconds
    while (left := _started_by(proc)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert left == [], left


def _attempts(store: Path) -> dict[str, tuple[str, ...]]:
    """Each run's attempts' terminations (``"open"`` while open)."""
    if not store.exists():
        return {}
    with RunStore(store, create=False) as db:
        return {
            r.identity: tuple(a.termination or "open" for a in db.attempts(r.identity))
            for r in db.runs()
        }


def _terminations(store: Path) -> list[tuple[str, ...]]:
    return sorted(_attempts(store).values())


def _wait_for(store: Path, proc: subprocess.Popen, ready, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"the command ended first: {proc.communicate()}")
        try:
            attempts = _attempts(store)
        except Exception:  # the store is being created
            attempts = {}
        if ready(attempts):
            return
        time.sleep(0.1)
    pytest.fail("the runs did not get there in time")


def _interrupt(proc: subprocess.Popen) -> tuple[str, str, float]:
    """Ctrl-C as a terminal sends it (to the process group); output and seconds to exit."""
    sent = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    return stdout, stderr, time.monotonic() - sent


@pytest.mark.slow
def test_ctrl_c_keeps_the_completed_run_cancels_the_running_one_and_exits_130(tmp_path):
    store = tmp_path / "store.sqlite"
    args = ("twins", "--steps", "40", "--optimizers", "adam,scalar-adam", "--store", str(store))
    proc = _start(*args)

    def second_running(attempts):
        return sorted(attempts.values()) == [("completed",), ("open",)]

    _wait_for(store, proc, second_running)
    time.sleep(0.5)
    stdout, stderr, seconds = _interrupt(proc)
    assert proc.returncode == 130, stdout + stderr
    assert seconds < 10, seconds  # today's failure: it trained on for 30-60 s
    assert f"interrupted: 1 of 2 runs complete; {RESUME}" in stderr
    assert "Traceback" not in stderr
    assert _terminations(store) == [("cancelled",), ("completed",)]
    _assert_nothing_left(proc)
    again = _start(*args)  # the same command resumes: only the cancelled run trains
    stdout, stderr = again.communicate(timeout=600)
    assert again.returncode == 0, stdout + stderr
    assert "1 run(s) were already completed in the store: reused" in stdout
    assert _terminations(store) == [("cancelled", "completed"), ("completed",)]


@pytest.mark.slow
def test_ctrl_c_stops_pool_workers_and_records_their_runs_cancelled(tmp_path):
    store = tmp_path / "store.sqlite"
    proc = _start(
        *("twins", "--steps", "200", "--optimizers", "adam,scalar-adam"),
        *("--max-workers", "2", "--store", str(store)),
    )

    def both_running(attempts):
        return sorted(attempts.values()) == [("open",), ("open",)]

    _wait_for(store, proc, both_running)
    time.sleep(0.5)
    stdout, stderr, seconds = _interrupt(proc)
    assert proc.returncode == 130, stdout + stderr
    assert seconds < 15, seconds
    assert f"interrupted: 0 of 2 runs complete; {RESUME}" in stderr
    assert "Traceback" not in stderr
    assert _terminations(store) == [("cancelled",), ("cancelled",)]
    _assert_nothing_left(proc)


@pytest.mark.slow
@pytest.mark.xdist_group("ray")  # one Ray cluster at a time (tests/conftest.py)
@pytest.mark.parametrize(
    ("args", "code"),
    [
        (("twins", "--steps", "2", "--optimizers", "adam,scalar-adam", "--max-workers", "2"), 0),
        (("twins", "--steps", "2", "--optimizers", "adam", "--executor", "ray"), 0),
        (("twins", "--steps", "0"), 2),  # an error
    ],
    ids=["pool-done", "ray-done", "error"],
)
def test_no_process_of_a_command_outlives_it(tmp_path, args, code):
    proc = _start(*args, "--store", str(tmp_path / "store.sqlite"))
    stdout, stderr = proc.communicate(timeout=600)
    assert proc.returncode == code, stdout + stderr
    _assert_nothing_left(proc)
