"""How ``gaugelab runs`` reaches the store: opening it for reading, and finding a study or a
run by an identity prefix, each refusal one line naming what is known."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from gaugelab.cli._errors import fail
from gaugelab.lazy import LazyModule

if TYPE_CHECKING:
    from gaugelab.study.store.db import RunRow, RunStore

_db = LazyModule("gaugelab.study.store.db")  # the store (and pydantic) only when a command reads it


@contextlib.contextmanager
def open_store(path: Path) -> Iterator[RunStore]:
    """Open an existing store for reading; a missing or refused store, or a refusal while
    reading it, becomes a one-line error (a failure of the machine is the command guard's,
    cli/_errors.py)."""
    try:
        store = _db.RunStore(path, create=False)
    except FileNotFoundError:
        raise fail(f"no run store at {path}; run a sweep first or pass --store PATH") from None
    except _db.StoreError as exc:
        raise fail(str(exc)) from None
    try:
        yield store
    except ValueError as exc:  # StoreError, an unknown study
        raise fail(str(exc)) from None
    finally:
        store.close()


def check_study(db: RunStore, study: str | None, what: str = "--study") -> None:
    """Refuse a study name the store does not hold, naming the option and the known ones."""
    if study is None:
        return
    known = [row.name for row in db.studies()]
    if study not in known:
        raise fail(
            f"{what} {study!r}: no such study in {db.path}; known: "
            f"{', '.join(map(repr, known)) or 'none'}"
        )


PREFIX = re.compile(r"[0-9a-f]{4,64}")


MIN_PREFIX = 4
"""The shortest identity prefix ``runs show`` accepts."""


def find_run(db: RunStore, prefix: str) -> RunRow:
    """The run whose identity starts with ``prefix`` (4 to 64 lowercase hex characters).

    The store looks the prefix up; a prefix shorter than the store's own minimum is matched
    against the listing of its runs."""
    if not PREFIX.fullmatch(prefix):
        raise fail(
            f"RUN {prefix!r}; allowed: {MIN_PREFIX} to 64 lowercase hex characters of a run "
            "identity (see `gaugelab runs list`)"
        )
    try:
        return db.run(prefix)
    except ValueError as exc:
        if "allowed:" not in str(exc):  # no such run, or ambiguous: the store's message
            raise fail(f"RUN {prefix}: {str(exc).removeprefix('run: ')}") from None
    matches = [row.identity for row in db.runs() if row.identity.startswith(prefix)]
    if len(matches) != 1:
        found = ", ".join(m[:12] for m in matches[:5]) + (", …" if len(matches) > 5 else "")
        raise fail(
            f"RUN {prefix}: no run in {db.path} has an identity starting with it"
            if not matches
            else f"RUN {prefix} is ambiguous ({found}); give more characters"
        )
    return db.run(matches[0])
