"""A user's text file as next-token windows: plain text or JSONL, tokenised on the way in and read
only as far as the token budget needs.

A ``.jsonl`` file holds one JSON object per line, whose ``field`` (default ``"text"``) is a
document; any other file is one UTF-8 document. Documents are tokenised one block of lines at
a time by the caller's ``encode`` (a model's tokenizer, or UTF-8 bytes), joined by ``eos`` when
given, and cut into consecutive, non-overlapping windows of ``window + 1`` tokens: the inputs
are a window's first ``window`` tokens and the targets its last ``window`` (the next token at
every position).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import torch

__all__ = ["JSONL_FIELD", "read_documents", "token_windows", "utf8_bytes"]

JSONL_FIELD = "text"
"""The field of a JSONL line read as its document, unless another is named."""

_BLOCK_CHARS = 1 << 16  # a plain-text file is tokenised this many characters (whole lines) at once


def utf8_bytes(text: str) -> list[int]:
    """The UTF-8 bytes of ``text`` as token ids 0–255 (the encoding of a model without a
    tokenizer)."""
    return list(text.encode("utf-8"))


def read_documents(path: str | os.PathLike[str], *, field: str = JSONL_FIELD) -> Iterator[str]:
    """The documents of ``path``, lazily: a JSONL file's ``field`` of every line (blank lines
    skipped), or a plain file in blocks of whole lines (about 64 KiB each; one document).

    Raises:
        FileNotFoundError: ``path`` is not a file.
        ValueError: not UTF-8; a JSONL line that is not an object with a string ``field``
            (named with its line number).
    """
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"data: {str(path)!r} is not a file; allowed: a UTF-8 text "
                                "file or a .jsonl file")  # fmt: skip
    jsonl = file.suffix == ".jsonl"
    block: list[str] = []
    size = 0
    try:
        with open(file, encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                if jsonl:
                    if line.strip():
                        yield _field(line, field, file, number)
                    continue
                block.append(line)
                size += len(line)
                if size >= _BLOCK_CHARS:
                    yield "".join(block)
                    block, size = [], 0
    except UnicodeDecodeError as exc:
        raise ValueError(f"data: {str(file)!r} is not UTF-8 ({exc.reason})") from None
    if block:
        yield "".join(block)


def _field(line: str, field: str, file: Path, number: int) -> str:
    try:
        value = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"data: {str(file)!r} line {number} is not JSON ({exc.msg})") from None
    text = value.get(field) if isinstance(value, dict) else None
    if not isinstance(text, str):
        raise ValueError(f"data: {str(file)!r} line {number} has no string field {field!r}; "
                         "allowed: one JSON object per line with that field (--field)")  # fmt: skip
    return text


def token_windows(
    documents: Iterator[str] | Sequence[str],
    encode: Callable[[str], Sequence[int]],
    *,
    tokens: int,
    window: int,
    eos: int | None = None,
) -> torch.Tensor:
    """Consecutive windows of ``window + 1`` tokens, as many as ``tokens`` input positions allow.

    Args:
        documents: the texts, in order (read only until enough tokens are in).
        encode: text → token ids.
        tokens: the budget of input positions, ``≥ window``: ``tokens // window`` windows at most.
        window: the positions per window, ``≥ 1``.
        eos: a token put between documents (``None``: none).

    Returns:
        ``[n_windows, window + 1]`` int64, ``n_windows ≥ 1``: fewer than the budget when the
        documents run out.

    Raises:
        ValueError: ``window < 1`` or ``tokens < window``; fewer than ``window + 1`` tokens in
            all the documents (the data is too short for one window).
    """
    if window < 1 or tokens < window:
        raise ValueError(f"tokens={tokens}, window={window}; allowed: window >= 1 and "
                         "tokens >= window")  # fmt: skip
    wanted = (tokens // window) * (window + 1)
    ids: list[int] = []
    for i, text in enumerate(documents):
        if i and eos is not None:
            ids.append(eos)
        ids.extend(encode(text))
        if len(ids) >= wanted:
            break
    n = min(len(ids), wanted) // (window + 1)
    if n < 1:
        raise ValueError(f"too short: {len(ids)} token(s); allowed: at least window + 1 = "
                         f"{window + 1} (one window of {window} positions and its next token)")
    return torch.tensor(ids[: n * (window + 1)], dtype=torch.int64).view(n, window + 1)
