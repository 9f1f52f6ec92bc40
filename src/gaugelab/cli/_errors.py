"""How every command reports what went wrong: one unwrapped line on stderr, never a traceback.

- bad input: ``error: --option VALUE; allowed: …`` and exit code 2 (:func:`fail`; spec and
  library errors are rewritten to name the command's options, :func:`option_message`);
- the environment (a full disk, a read-only folder, ``--store`` under a regular file, an
  SQLite refusal): ``error: <path>: <what happened>; <what to do>`` and exit code 2
  (:func:`environment_message`);
- Ctrl-C: ``interrupted…`` and exit code 130 (:func:`interrupted`);
- a study whose runs did not all complete: its tables, each failed run's line, and exit code 3
  (:data:`RUNS_FAILED`); ``gaugelab check`` of an optimizer that raised: exit code 4
  (:data:`OPTIMIZER_FAILED`). Every code: docs/errors.md.

:func:`guarded` applies the last two to a whole command; ``gaugelab`` guards every command
(cli/app.py).
"""

from __future__ import annotations

import errno
import functools
import os
import re
import sqlite3
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import typer

F = TypeVar("F", bound=Callable[..., Any])

USAGE = 2
"""Exit code of a refusal: bad input, or a failure of the machine (docs/errors.md)."""
RUNS_FAILED = 3
"""Exit code of a study some of whose runs did not complete (their failures are printed)."""
OPTIMIZER_FAILED = 4
"""Exit code of ``gaugelab check`` when the optimizer under test raised (verdict ``error``)."""
INTERRUPTED = 130
"""Exit code after Ctrl-C (128 + SIGINT), as a shell reports it."""
RESUME = "rerun the same command to resume from the last checkpoints"


def fail(error: str | Exception, options: Mapping[str, str] | None = None) -> typer.Exit:
    """Print ``error: …`` and return the exit (code 2) to raise.

    Args:
        error: a message, or an exception whose text is the message; a pydantic
            ``ValidationError`` is folded to one line, one clause per field.
        options: spec field or library argument → the command's option (``{"n": "--size"}``):
            clauses about those fields name the option and the value given
            (see :func:`option_message`).
    """
    if is_validation_error(error):
        message = "; ".join(_field_clause(e, options or {}) for e in error.errors())
    else:
        message = option_message(str(error), options or {})
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code=USAGE)


def is_validation_error(error: object) -> bool:
    """Whether ``error`` is a pydantic ``ValidationError``. Only a module that imported pydantic
    can raise one, so pydantic is not imported for the check (``gaugelab --help`` stays fast)."""
    pydantic = sys.modules.get("pydantic")
    return pydantic is not None and isinstance(error, pydantic.ValidationError)


def option_message(message: str, options: Mapping[str, str]) -> str:
    """A library or spec message in the command's terms.

    A leading ``function: `` or ``SomeSpec: `` is dropped when the message names one of
    ``options``' fields as ``field=value``, and every ``field=value`` becomes ``--option value``
    (``convex=False`` becomes ``--no-convex``): ``check_equivariance: steps=-1; allowed: an
    integer >= 1`` reads ``--steps -1; allowed: an integer >= 1``. Other messages are returned
    unchanged.
    """
    if not options:
        return message
    pattern = re.compile(rf"\b({'|'.join(map(re.escape, options))})=(\S+?)(?=[;,:)\s]|$)")
    if not pattern.search(message):
        return message
    message = re.sub(r"^[A-Za-z_][\w.]*: ", "", message)

    def option(match: re.Match[str]) -> str:
        name, value = options[match[1]], match[2]
        if value in ("True", "False"):
            return name if value == "True" else f"--no-{name.removeprefix('--')}"
        return f"{name} {value}"

    return pattern.sub(option, message)


def _show(value: Any) -> str:
    """A value as the user typed it: sequences comma-joined, floats in %g."""
    if isinstance(value, list | tuple):
        return ",".join(_show(v) for v in value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


_BOUNDS = {"greater_than_equal": ">=", "greater_than": ">", "less_than_equal": "<=",
           "less_than": "<"}  # fmt: skip


def _field_clause(error: Mapping[str, Any], options: Mapping[str, str]) -> str:
    """One pydantic error as ``--option VALUE; allowed: …`` (or ``field: message`` for a
    field without an option)."""
    loc, msg = error["loc"], error["msg"].removeprefix("Value error, ")
    if not loc or loc[0] not in options:
        where = ".".join(map(str, loc))
        return f"{where}: {msg}" if where else option_message(msg, options)
    value = _show(error.get("input"))
    if len(loc) > 1:  # a nested field, e.g. lr_grids.adam → --lr adam=…
        value = f"{'.'.join(str(x).replace('_', '-') for x in loc[1:])}={value}"
    kind, ctx = error["type"], error.get("ctx") or {}
    unknown = ""
    if kind in _BOUNDS:
        bound = next(iter(ctx.values()))
        number = "an integer" if isinstance(error.get("input"), int) else "a number"
        allowed = f"allowed: {number} {_BOUNDS[kind]} {_show(bound)}"
    elif kind == "literal_error":
        allowed = f"allowed: {ctx['expected'].replace(chr(39), '')}"
    elif "; allowed: " in msg:
        head, rest = msg.split("; allowed: ", 1)
        # which items of a list are unknown ("unknown rule(s) ['foo']") is worth keeping
        unknown = f"{head}; " if head.startswith("unknown ") else ""
        allowed = f"{unknown}allowed: {rest}"
    else:
        return f"{options[loc[0]]} {value}: {msg}"
    return f"{options[loc[0]]} {value}{': ' if unknown else '; '}{allowed}"


def interrupted(error: BaseException | None = None, *, resumable: bool = False) -> typer.Exit:
    """Print what Ctrl-C left behind and return the exit (code 130) to raise.

    Args:
        error: the ``KeyboardInterrupt``; a :class:`gaugelab.study.sweep.SweepInterrupted`
            carries ``done`` and ``total`` (runs complete / runs of the sweep).
        resumable: the command runs a study, so rerunning it resumes.
    """
    done, total = getattr(error, "done", None), getattr(error, "total", None)
    if done is not None and total is not None:
        message = f"interrupted: {done} of {total} runs complete; {RESUME}"
    else:
        message = f"interrupted; {RESUME}" if resumable else "interrupted"
    typer.echo(message, err=True)
    return typer.Exit(code=INTERRUPTED)


def _regular_file_above(path: Path) -> Path | None:
    """The nearest existing ancestor of ``path`` (or ``path``'s parent chain) that is not a
    folder, or None."""
    for parent in path.absolute().parents:
        if parent.exists():
            return None if parent.is_dir() else parent
    return None


def check_location(
    option: str, path: str | os.PathLike[str] | None, *, folder: bool = False
) -> None:
    """Refuse a ``--store`` / ``--out`` path that cannot be created, before anything is printed.

    Args:
        option: the option's name, for the message.
        path: its value (None: nothing to check).
        folder: ``path`` names a folder (a report folder), so it must not be a regular file;
            otherwise it names a file (a store, an export), so it must not be a folder.

    Raises:
        ValueError: a regular file stands where a folder of ``path`` must be, a folder where
            the file must be, or ``path`` would be created in a folder this process cannot
            write (the message names the option, the path and what to do).
    """
    if path is None:
        return
    path = Path(path)
    if folder and path.exists() and not path.is_dir():
        raise ValueError(
            f"{option} {path} is a regular file, not a folder; choose another {option}"
        )
    if not folder and path.is_dir():
        raise ValueError(
            f"{option} {path} is a folder; {option} names a file, e.g. {path / 'store.sqlite'}"
            if option == "--store"
            else f"{option} {path} is a folder; {option} names a file"
        )
    if (blocking := _regular_file_above(path)) is not None:
        raise ValueError(
            f"{option} {path}: {blocking} is a regular file, not a folder; choose another {option}"
        )
    existing = next(p for p in (path, *path.absolute().parents) if p.exists())
    if existing != path and not os.access(existing, os.W_OK):
        raise ValueError(
            f"{option} {path}: the folder {existing} is not writable; choose another {option} "
            "or make the folder writable"
        )


def _option_for(path: Path | None, paths: Mapping[str, Path | None]) -> str | None:
    """The option whose path ``path`` belongs to (a file inside it, or beside the store)."""
    if path is None:
        return None
    path = path.absolute()
    for option, given in paths.items():
        if given is None:
            continue
        given = Path(given).absolute()
        roots = (given, given.parent) if option == "--store" else (given,)
        if path in given.parents or any(path == r or r in path.parents for r in roots):
            return option
    return None


def environment_message(error: OSError | sqlite3.Error, paths: Mapping[str, Any]) -> str:
    """One line for a failure of the machine rather than of the input.

    Args:
        error: the ``OSError`` (its ``filename`` names the path) or SQLite's error (about the
            store at ``paths["--store"]``).
        paths: option → the path it was given (``{"--store": …, "--out": …}``), so the line
            can say which option to change.

    Returns:
        ``<path>: <what happened>; <what to do>``.
    """
    paths = {k: (Path(v) if v is not None else None) for k, v in paths.items()}
    store = paths.get("--store")
    if isinstance(error, sqlite3.Error):
        text = str(error)
        where = f"the run store {store}" if store is not None else "the run store"
        if "full" in text:
            return f"{where}: no space left on the device ({text}); free space and rerun"
        if "readonly" in text or "read-only" in text:
            return (
                f"{where} is read-only ({text}); make the file and its folder writable or "
                "choose another --store"
            )
        return (
            f"{where}: SQLite failed ({text}); check the file and its folder, or choose "
            "another --store"
        )
    filename = error.filename if error.filename is not None else None
    path = Path(os.fsdecode(filename)) if filename is not None else None
    option = _option_for(path, paths)
    change = f"choose another {option}" if option else "choose another path"
    shown = path if path is not None else (option or "a file")
    if isinstance(error, FileExistsError) and path is None:
        return str(error)  # a library refusal such as "… exists; reports are never overwritten"
    if error.errno == errno.ENOSPC:
        return f"{shown}: no space left on the device; free space (or {change}) and rerun"
    if error.errno in (errno.EACCES, errno.EPERM, errno.EROFS) or isinstance(
        error, PermissionError
    ):
        what = "read-only file system" if error.errno == errno.EROFS else "permission denied"
        return f"{shown}: {what}; make it writable or {change}"
    if isinstance(error, NotADirectoryError | FileExistsError) and path is not None:
        blocking = path if path.exists() and not path.is_dir() else _regular_file_above(path)
        if blocking is not None:
            return f"{blocking} is a regular file, not a folder; {change}"
    if isinstance(error, IsADirectoryError):
        return f"{shown} is a folder, not a file; {change}"
    return f"{shown}: {error.strerror or error}; {change}"


def guarded(command: F) -> F:
    """``command`` with Ctrl-C and environment failures reported in one line.

    ``KeyboardInterrupt`` prints ``interrupted`` (exit 130); an ``OSError`` or an SQLite error
    prints :func:`environment_message`, naming the command's ``--store`` / ``--out`` when the
    path is theirs (exit 2). Everything else passes through. Applying it twice is a no-op.
    """
    if getattr(command, "__gaugelab_guarded__", False):
        return command

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except KeyboardInterrupt as exc:
            raise interrupted(exc) from None
        except (OSError, sqlite3.Error) as exc:
            paths = {"--out": kwargs.get("out"), "--store": kwargs.get("store")}
            raise fail(environment_message(exc, paths)) from None

    run.__gaugelab_guarded__ = True  # type: ignore[attr-defined]
    return run  # type: ignore[return-value]
