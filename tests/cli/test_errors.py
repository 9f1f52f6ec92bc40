"""How commands report errors (gaugelab.cli._errors): options named with their values, and
the machine's failures in one line naming the path and what to do."""

import errno
import sqlite3
from pathlib import Path

import pytest
import typer
from pydantic import ValidationError

from gaugelab.cli._errors import (
    check_location,
    environment_message,
    fail,
    guarded,
    option_message,
)
from gaugelab.cli.zoo import DIAL_OPTIONS, ZOO_OPTIONS
from gaugelab.errors import ADVICE, TERMINATION_CLASSES, advice
from gaugelab.experiments.sensing.dial import DialSpec
from gaugelab.experiments.sensing.zoo import ZooSpec


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("check_equivariance: steps=-1; allowed: an integer >= 1",
         "--steps -1; allowed: an integer >= 1"),
        ("rank=50; allowed: 1 <= rank <= n=40", "--rank 50; allowed: 1 <= rank <= --size 40"),
        ("ZooSpec: no rules and convex=False: nothing to run", "no rules and --no-convex: "
                                                              "nothing to run"),
        ("adam: lr=-1 must be > 0", "adam: lr=-1 must be > 0"),  # not an option: unchanged
    ],
)  # fmt: skip
def test_library_messages_name_the_option(message, expected):
    options = {"steps": "--steps", "rank": "--rank", "n": "--size", "convex": "--convex"}
    assert option_message(message, options) == expected


@pytest.mark.parametrize(
    ("spec", "fields", "options", "expected"),
    [
        (ZooSpec, {"n": 0}, ZOO_OPTIONS, "--size 0; allowed: an integer >= 1"),
        (ZooSpec, {"init_scale": -1.0}, ZOO_OPTIONS, "--init-scale -1; allowed: a number > 0"),
        (ZooSpec, {"seeds": (1, 1)}, ZOO_OPTIONS, "--seeds 1,1; allowed: distinct integers"),
        (ZooSpec, {"schedule": "warmup"}, ZOO_OPTIONS,
         "--schedule warmup; allowed: reference, constant or cosine"),
        (ZooSpec, {"lr_grids": {"adam": (-1.0,)}}, ZOO_OPTIONS,
         "--lr adam=-1; allowed: finite numbers > 0"),
        (DialSpec, {"ps": (2.0,)}, DIAL_OPTIONS, "--ps 2; allowed: distinct numbers in [0, 1]"),
        (DialSpec, {"steps": 0}, DIAL_OPTIONS, "--steps 0; allowed: an integer >= 1"),
    ],
)  # fmt: skip
def test_spec_errors_name_the_option_and_the_value(capsys, spec, fields, options, expected):
    with pytest.raises(ValidationError) as error:
        spec(**fields)
    assert fail(error.value, options).exit_code == 2
    assert capsys.readouterr().err == f"error: {expected}\n"


def test_a_path_under_a_regular_file_is_refused_naming_the_option(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ValueError, match=f"^--store {blocker}/s.sqlite: {blocker} is a regular"):
        check_location("--store", blocker / "s.sqlite")
    with pytest.raises(ValueError, match=f"^--out {blocker} is a regular file, not a folder"):
        check_location("--out", blocker, folder=True)
    with pytest.raises(ValueError, match=f"^--store {tmp_path} is a folder; --store names a"):
        check_location("--store", tmp_path)
    check_location("--store", tmp_path / "new" / "s.sqlite")  # a folder to be created: fine
    check_location("--out", None)


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (lambda p: OSError(errno.ENOSPC, "No space left on device", str(p / "r" / "f.png")),
         "{p}/r/f.png: no space left on the device; free space (or choose another --out) and "
         "rerun"),
        (lambda p: PermissionError(errno.EACCES, "Permission denied", str(p / "s.sqlite")),
         "{p}/s.sqlite: permission denied; make it writable or choose another --store"),
        (lambda p: OSError(errno.EROFS, "Read-only file system", str(p / "s.sqlite-wal")),
         "{p}/s.sqlite-wal: read-only file system; make it writable or choose another --store"),
        (lambda p: sqlite3.OperationalError("attempt to write a readonly database"),
         "the run store {p}/s.sqlite is read-only (attempt to write a readonly database); make "
         "the file and its folder writable or choose another --store"),
        (lambda p: sqlite3.OperationalError("database or disk is full"),
         "the run store {p}/s.sqlite: no space left on the device (database or disk is full); "
         "free space and rerun"),
        (lambda p: FileExistsError("x/report.html exists; reports are never overwritten"),
         "x/report.html exists; reports are never overwritten"),
    ],
    ids=["disk-full", "permission", "read-only-fs", "read-only-store", "store-full", "refusal"],
)  # fmt: skip
def test_failures_of_the_machine_name_the_path_and_the_option_to_change(tmp_path, error, expected):
    paths = {"--out": tmp_path / "r", "--store": tmp_path / "s.sqlite"}
    assert environment_message(error(tmp_path), paths) == expected.format(p=tmp_path)


def test_not_a_directory_names_the_regular_file(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    error = NotADirectoryError(errno.ENOTDIR, "Not a directory", str(blocker / "x"))
    message = environment_message(error, {"--store": blocker / "x" / "s.sqlite"})
    assert message == f"{blocker} is a regular file, not a folder; choose another --store"


def test_a_guarded_command_turns_ctrl_c_and_os_errors_into_one_line(tmp_path, capsys):
    def command(store=None, out=None, error=None):
        raise error

    run = guarded(command)
    assert guarded(run) is run
    with pytest.raises(typer.Exit) as exit_:
        run(error=KeyboardInterrupt())
    assert exit_.value.exit_code == 130 and capsys.readouterr().err == "interrupted\n"
    denied = PermissionError(errno.EACCES, "Permission denied", str(tmp_path / "s.sqlite"))
    with pytest.raises(typer.Exit) as exit_:
        run(store=tmp_path / "s.sqlite", error=denied)
    assert exit_.value.exit_code == 2
    assert capsys.readouterr().err == (
        f"error: {tmp_path}/s.sqlite: permission denied; make it writable or choose another "
        "--store\n"
    )
    with pytest.raises(RuntimeError):  # anything else passes through
        run(error=RuntimeError("bug"))


def test_each_failed_classs_advice_is_the_one_docs_errors_md_gives_and_a_message_keeps_its_own():
    page = (Path(__file__).parents[2] / "docs" / "errors.md").read_text()
    rows = {line.split("|")[1].strip(" `"): line.split("|")[3].strip()
            for line in page.splitlines() if line.startswith("| `")}  # fmt: skip
    assert {c: rows[c] for c in ADVICE} == ADVICE
    assert set(ADVICE) | {"validation_stopped", "completed"} == set(TERMINATION_CLASSES) | {
        "unverified"
    }
    assert advice("numerical_failure", "NonFiniteError: loss nan") == ADVICE["numerical_failure"]
    disk = "disk full while writing c.pt — free space and rerun the same command"
    assert advice("infrastructure_failure", disk) == ""  # the cause says what to do
    assert advice("completed") == ""
