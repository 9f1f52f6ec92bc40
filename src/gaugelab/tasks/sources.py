"""Text sources of the two-domain corpus: what text, from where, pinned by sha256 digests.

A :class:`TextSource` is the identity record of one domain's text: its kind, the files it is
made of (relative path, byte count and sha256 of each, in the order they are joined), the
separator placed between files, and the sha256 and length of the joined text. It is a frozen
pydantic model, so a spec that embeds it makes the digests part of the run identity. Three
constructors read the text once to fill the record, and :func:`read_source` reads it again for
use, refusing any file whose digest changed:

* :func:`tiny_shakespeare_source` — the packaged tiny-shakespeare (the retention domain);
* :func:`stdlib_source` — the pinned list :data:`STDLIB_FILES` of the running interpreter's
  standard-library source, ``sysconfig.get_paths()["stdlib"]`` (the default target domain);
* :func:`path_source` — any UTF-8 file, or a folder's files matching glob patterns, sorted.

Nothing is downloaded.
"""

from __future__ import annotations

import hashlib
import os
import platform
import sysconfig
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from gaugelab.tasks.text import TINY_SHAKESPEARE_SHA256, tiny_shakespeare_bytes

__all__ = [
    "DEFAULT_PATTERNS",
    "FILE_SEPARATOR",
    "STDLIB_FILES",
    "SourceFile",
    "TextSource",
    "path_source",
    "read_source",
    "stdlib_source",
    "tiny_shakespeare_source",
]

STDLIB_FILES: tuple[str, ...] = (
    "argparse.py", "ast.py", "base64.py", "bisect.py", "calendar.py", "collections/__init__.py",
    "configparser.py", "contextlib.py", "copy.py", "dataclasses.py", "enum.py", "fnmatch.py",
    "fractions.py", "functools.py", "gettext.py", "heapq.py", "inspect.py", "ipaddress.py",
    "json/decoder.py", "json/encoder.py", "logging/__init__.py", "operator.py", "optparse.py",
    "pprint.py", "queue.py", "random.py", "shlex.py", "statistics.py", "textwrap.py",
    "threading.py", "tokenize.py", "typing.py", "uuid.py",
)  # fmt: skip
"""The default target domain: 33 plain-Python standard-library modules, sorted, as paths
relative to ``sysconfig.get_paths()["stdlib"]``. The rule: pure-Python modules that are one file
(not a package, nor turned into one: ``string``, ``pathlib``, ``zipfile`` were) in every CPython
from 3.11 on. On CPython 3.11.7: 1,369,156 characters (161 distinct), 1.37 MB."""

FILE_SEPARATOR = "\n\n"
"""Placed between consecutive files when a source has several."""

DEFAULT_PATTERNS: tuple[str, ...] = ("**/*.py", "**/*.txt")
"""Glob patterns (``Path.glob``, relative to the folder) that :func:`path_source` matches."""

_HEX64 = r"^[0-9a-f]{64}$"


class SourceFile(BaseModel):
    """One file of a :class:`TextSource`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: str = Field(description="Path relative to the source's root, '/'-separated.")
    n_bytes: int = Field(ge=0, description="Size of the file in bytes.")
    sha256: str = Field(pattern=_HEX64, description="Hex sha256 of the file's bytes.")


class TextSource(BaseModel):
    """The identity record of one domain's text (see the module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["tiny-shakespeare", "stdlib", "path"] = Field(
        description="tiny-shakespeare: the packaged text; stdlib: the running interpreter's "
        "standard library; path: a user file or folder."
    )
    root: str | None = Field(
        description="kind='path': the resolved folder the files are relative to (a single "
        "file's parent); otherwise None (the packaged resource, or sysconfig's stdlib folder of "
        "whichever interpreter runs)."
    )
    python: str | None = Field(
        description="kind='stdlib': implementation and version that read it, e.g. "
        "'CPython 3.11.7'; otherwise None."
    )
    patterns: tuple[str, ...] = Field(
        (), description="kind='path' on a folder: the glob patterns that selected the files."
    )
    files: tuple[SourceFile, ...] = Field(
        min_length=1, description="The files, in the order they are joined."
    )
    separator: str = Field(description="Text placed between consecutive files.")
    sha256: str = Field(pattern=_HEX64, description="Hex sha256 of the joined text (UTF-8).")
    n_chars: int = Field(ge=1, description="Characters in the joined text.")

    def describe(self) -> str:
        """One line for tables and errors: kind, file count, characters, digest prefix."""
        where = f" {self.root}" if self.root else f" ({self.python})" if self.python else ""
        return (
            f"{self.kind}{where}: {len(self.files)} file(s), {self.n_chars:,} characters, "
            f"sha256 {self.sha256[:12]}…"
        )


def _decode(raw: bytes, name: object, where: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"{where}: {str(name)!r} is not UTF-8 (byte {exc.start}: {exc.reason}); "
            f"allowed: UTF-8 text files"
        ) from None


def _read_file(path: Path, where: str) -> bytes:
    if not path.exists():
        raise FileNotFoundError(f"{where}: {str(path)!r} does not exist")
    if not path.is_file():
        raise ValueError(f"{where}: {str(path)!r} is not a file")
    return path.read_bytes()


def _source(
    kind: str,
    root: Path,
    names: Sequence[str],
    where: str,
    *,
    record_root: str | None,
    python: str | None = None,
    patterns: tuple[str, ...] = (),
) -> TextSource:
    """Read ``root / name`` for every name (in order), check UTF-8, and build the record."""
    files, texts = [], []
    for name in names:
        raw = _read_file(root / name, where)
        texts.append(_decode(raw, root / name, where))
        files.append(SourceFile(path=name, n_bytes=len(raw), sha256=_sha256(raw)))
    text = FILE_SEPARATOR.join(texts)
    if not text:
        raise ValueError(f"{where}: the files under {str(root)!r} are all empty")
    return TextSource(
        kind=kind, root=record_root, python=python, patterns=patterns, files=tuple(files),
        separator=FILE_SEPARATOR, sha256=_sha256(text.encode("utf-8")), n_chars=len(text),
    )  # fmt: skip


def _sha256(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


def _python() -> str:
    return f"{platform.python_implementation()} {platform.python_version()}"


def _stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def tiny_shakespeare_source() -> TextSource:
    """The record of the packaged tiny-shakespeare (the retention domain).

    Returns:
        ``kind='tiny-shakespeare'``, one file ``tinyshakespeare.txt`` of 1,115,394 bytes whose
        sha256 (and the text's) is :data:`gaugelab.tasks.TINY_SHAKESPEARE_SHA256`.

    Raises:
        ValueError: the packaged data is damaged (see
            :func:`gaugelab.tasks.tiny_shakespeare_bytes`).

    Source:
        karpathy2015char (the tiny-shakespeare corpus).
    """
    raw = tiny_shakespeare_bytes()  # digest checked there
    file = SourceFile(path="tinyshakespeare.txt", n_bytes=len(raw), sha256=TINY_SHAKESPEARE_SHA256)
    return TextSource(
        kind="tiny-shakespeare", root=None, python=None, files=(file,), separator=FILE_SEPARATOR,
        sha256=TINY_SHAKESPEARE_SHA256, n_chars=len(raw.decode("utf-8")),
    )  # fmt: skip


def stdlib_source(files: Sequence[str] = STDLIB_FILES) -> TextSource:
    """The record of the running interpreter's standard-library files ``files``, joined in order.

    Args:
        files: paths relative to ``sysconfig.get_paths()["stdlib"]``, '/'-separated; default
            the pinned :data:`STDLIB_FILES`. Joined in the order given, separated by
            :data:`FILE_SEPARATOR`.

    Returns:
        ``kind='stdlib'``, ``root=None``, ``python`` naming this interpreter, and each file's
        relative path, size and sha256.

    Raises:
        ValueError: ``files`` is empty, repeats a path, or a path is absolute or leaves the
            stdlib folder; a file is not UTF-8 (named).
        FileNotFoundError: a file is not in this interpreter's standard library (named, with
            the folder and the interpreter).
    """
    where = "stdlib_source"
    files = tuple(files)
    if not files:
        raise ValueError(f"{where}: files is empty; allowed: stdlib-relative paths")
    if len(set(files)) != len(files):
        raise ValueError(f"{where}: files={files!r} repeats a path")
    root = _stdlib_root()
    for name in files:
        if Path(name).is_absolute() or ".." in Path(name).parts:
            raise ValueError(f"{where}: file {name!r}; allowed: a path inside {str(root)!r}")
        if not (root / name).is_file():
            raise FileNotFoundError(
                f"{where}: {name!r} is not in the standard library of {_python()} at "
                f"{str(root)!r}; pass files= without it"
            )
    return _source("stdlib", root, files, where, record_root=None, python=_python())


def path_source(
    path: str | os.PathLike[str], patterns: Sequence[str] = DEFAULT_PATTERNS
) -> TextSource:
    """The record of a user file, or of a folder's files matching ``patterns``, sorted.

    Args:
        path: a UTF-8 text file, or a folder.
        patterns: for a folder, glob patterns relative to it (``Path.glob``; default
            :data:`DEFAULT_PATTERNS`, every ``*.py`` and ``*.txt`` at any depth). The matched
            files (not folders) are joined in sorted order of their '/'-separated relative
            paths, separated by :data:`FILE_SEPARATOR`. Ignored for a file.

    Returns:
        ``kind='path'``, ``root`` the resolved folder (a file's parent); for a file, one
        entry named by its file name and ``patterns == ()``.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: a folder with no matching file, ``patterns`` empty; a file that is not
            UTF-8 (named, with the byte offset); every file empty.
    """
    where = "path_source"
    root = Path(path).resolve()
    if not root.exists():
        raise FileNotFoundError(f"{where}: path={str(path)!r} does not exist")
    if root.is_file():
        return _source("path", root.parent, [root.name], where, record_root=str(root.parent))
    patterns = tuple(patterns)
    if not patterns:
        raise ValueError(f"{where}: patterns is empty; allowed: glob patterns such as '**/*.py'")
    names = sorted(
        {p.relative_to(root).as_posix() for pattern in patterns for p in root.glob(pattern)
         if p.is_file()}
    )  # fmt: skip
    if not names:
        raise ValueError(
            f"{where}: no file under {str(root)!r} matches patterns={patterns!r}; allowed: a "
            f"folder with at least one matching file"
        )
    return _source("path", root, names, where, record_root=str(root), patterns=patterns)


def read_source(source: TextSource) -> str:
    """The text of ``source``, after checking every file's sha256 against the record.

    Args:
        source: a record from :func:`tiny_shakespeare_source`, :func:`stdlib_source` or
            :func:`path_source` (possibly read back from a stored spec).

    Returns:
        The joined text, ``source.n_chars`` characters, UTF-8 sha256 ``source.sha256``.

    Raises:
        FileNotFoundError: a file of the record is gone (named).
        ValueError: a file's bytes no longer match its recorded sha256 (named, with both
            digests and, for the stdlib, both interpreters); the joined text's digest differs.
    """
    where = "read_source"
    if source.kind == "tiny-shakespeare":
        raw_files = [tiny_shakespeare_bytes()]
        root = None
    else:
        root = _stdlib_root() if source.kind == "stdlib" else Path(source.root or "")
        raw_files = [_read_file(root / f.path, where) for f in source.files]
    texts = []
    for f, raw in zip(source.files, raw_files, strict=True):
        digest = _sha256(raw)
        if digest != f.sha256:
            built = f" (recorded by {source.python}; running {_python()})" if source.python else ""
            raise ValueError(
                f"{where}: {str(root / f.path) if root else f.path!r} has sha256 {digest[:12]}…, "
                f"the record expects {f.sha256[:12]}…{built}: the file changed"
            )
        texts.append(_decode(raw, f.path, where))
    text = source.separator.join(texts)
    digest = _sha256(text.encode("utf-8"))
    if digest != source.sha256:
        raise ValueError(
            f"{where}: the joined text of {source.describe()} has sha256 {digest[:12]}…; the "
            f"record is inconsistent"
        )
    return text
