"""Where a report is written: a new folder per report, named safely, and the refusal of a folder
that already holds one. Nothing is ever overwritten."""

from __future__ import annotations

import hashlib
import itertools
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

__all__ = ["new_report_dir", "path_slug", "refuse_overwrite"]

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def path_slug(text: str, *, limit: int = 60) -> str:
    """A file-system-safe stem for ``text``: letters, digits, ``.``, ``_``, ``-`` only.

    Anything else becomes ``_``; the result starts with a letter or digit (so it is never
    ``.``, ``..``, absolute or hidden). When the slug differs from ``text`` (or is cut at
    ``limit`` characters), 8 hex characters of its sha256 are appended, so distinct names never
    share a slug: ``"zoo-1"`` stays ``"zoo-1"``, ``"../../x"`` becomes ``"x-<digest>"``.
    """
    slug = _UNSAFE.sub("_", text).lstrip("._-")[:limit]
    if slug != text or not slug:
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:8]
        slug = f"{slug}-{digest}" if slug else digest
    return slug


def refuse_overwrite(folder: str | Path, names: Sequence[str] = ("report.html",)) -> None:
    """Refuse a report folder that already holds one of ``names`` (default: a report), before
    anything runs or is written: reports are never overwritten.

    Raises:
        FileExistsError: the first of ``names`` that exists in ``folder``, named in the message.
    """
    for name in names:
        if (Path(folder) / name).exists():
            raise FileExistsError(
                f"{folder} already holds {name}; reports are never overwritten (choose another "
                "folder: --out DIR)"
            )


def new_report_dir(parent: str | Path, *, study: str | None = None) -> Path:
    """Create and return a new, empty folder ``parent/<UTC time>`` (e.g. ``20261130T011500Z``),
    or ``parent/<path_slug(study)>/<UTC time>`` when ``study`` is given.

    The study name (user-supplied) only ever becomes one path component through
    :func:`path_slug`, so ``study="../../x"`` or ``study="/abs/path"`` stays inside ``parent``.
    Two reports within the same second get ``…Z-2``, ``…Z-3``: a folder is never reused, so
    nothing already written is overwritten.
    """
    parent = Path(parent)
    if study is not None:
        parent = parent / path_slug(study)
    parent.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    for n in itertools.count(1):
        folder = parent / (stamp if n == 1 else f"{stamp}-{n}")
        try:
            folder.mkdir()
        except FileExistsError:
            continue
        return folder
    raise AssertionError("unreachable")
