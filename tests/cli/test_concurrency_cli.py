"""Two identical commands into one store at once (twins, zoo): no run is trained twice, no
attempt of one is closed by the other, and both print the full table — the one a single
command prints."""

import os
import subprocess
import time
from pathlib import Path

import pytest
from tests.support.forkserver import CLIENT

from gaugelab.study.store.db import RunStore

TWINS = ("twins", "--steps", "15", "--optimizers", "adam,scalar-adam")  # in this process
ZOO = (  # on a pool of two workers
    *("zoo", "--size", "8", "--rank", "2", "--steps", "200", "--seeds", "42"),
    *("--rules", "gd,adam", "--no-convex", "--max-workers", "2"),
    *("--lr", "gd=2e-2", "--lr", "adam=1e-2"),
)
ENV = {**os.environ, "COLUMNS": "250", "OMP_NUM_THREADS": "1"}


def _start(args: tuple[str, ...], store: Path, out: Path, server: dict) -> subprocess.Popen:
    """The ``gaugelab`` command in its own process (a child of the fork server)."""
    command = [*CLIENT, "gaugelab", *args, "--store", str(store), "--out", str(out)]
    return subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV | server
    )


def _table_lines(output: str) -> list[list[str]]:
    """The cells of the printed tables' rows (box-drawn lines), without the store- or
    time-dependent lines around them."""
    rows = [line.replace("┃", "│") for line in output.splitlines()]
    return [[c.strip() for c in row.split("│")] for row in rows if "│" in row]


@pytest.mark.slow
@pytest.mark.parametrize("args", [TWINS, ZOO], ids=["twins", "zoo"])
def test_two_identical_commands_train_each_run_once_and_print_the_same_table(
    tmp_path, args, forkserver
):
    shared, alone = tmp_path / "shared" / "store.sqlite", tmp_path / "alone" / "store.sqlite"
    racers = [_start(args, shared, tmp_path / f"report-{i}", forkserver) for i in range(2)]
    started = time.monotonic()
    outputs = [p.communicate(timeout=600) for p in racers]
    elapsed = time.monotonic() - started
    for proc, (stdout, stderr) in zip(racers, outputs, strict=True):
        assert proc.returncode == 0, stdout + stderr
    solo = _start(args, alone, tmp_path / "report-alone", forkserver)
    solo_out, solo_err = solo.communicate(timeout=600)
    assert solo.returncode == 0, solo_out + solo_err
    expected = _table_lines(solo_out)
    assert expected, solo_out
    for stdout, _ in outputs:
        assert _table_lines(stdout) == expected  # the full table, bit for bit the same numbers
    with RunStore(shared, create=False) as db, RunStore(alone, create=False) as single:
        runs = db.runs()
        assert len(runs) == len(single.runs())
        for run in runs:
            attempts = db.attempts(run.identity)
            # exactly one attempt, completed: trained once, nothing closed by the other command
            assert [(a.ordinal, a.termination) for a in attempts] == [(1, "completed")], attempts
    assert elapsed < 600
