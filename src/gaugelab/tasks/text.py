"""Character-level text: a UTF-8 file as a stream of next-character prediction windows.

tiny-shakespeare ships inside the package (``gaugelab/tasks/data/tinyshakespeare.txt.gz``,
written by ``gzip -9 -n``); :meth:`CharText.tiny_shakespeare` loads it and checks its digest,
:data:`TINY_SHAKESPEARE_SHA256`, on every load. Nothing is downloaded.
"""

from __future__ import annotations

import gzip
import hashlib
import os
from collections.abc import Sequence
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

import torch

from gaugelab.tasks._batches import WindowBatches

SPLITS = ("train", "val")

TINY_SHAKESPEARE_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
"""Hex SHA-256 of the decompressed tiny-shakespeare text (1,115,394 characters, 65 distinct)."""
_TINY_SHAKESPEARE = "tinyshakespeare.txt.gz"  # in gaugelab/tasks/data/


def _resource(name: str) -> Traversable:
    """The packaged data file ``name`` (under ``gaugelab/tasks/data/``)."""
    return resources.files("gaugelab.tasks") / "data" / name


def _read_resource(name: str) -> bytes:
    """The decompressed bytes of the packaged gzip file ``name`` (the only read of it)."""
    return gzip.decompress(_resource(name).read_bytes())


def tiny_shakespeare_bytes() -> bytes:
    """The packaged tiny-shakespeare text, as UTF-8 bytes, after checking its digest.

    Returns:
        The 1,115,394 bytes of the text (ASCII, so as many characters), exactly as published
        with char-rnn.

    Raises:
        ValueError: the decompressed resource's SHA-256 is not
            :data:`TINY_SHAKESPEARE_SHA256` (the message names the file and both digests).

    Source:
        karpathy2015char (the tiny-shakespeare corpus).
    """
    raw = _read_resource(_TINY_SHAKESPEARE)
    digest = hashlib.sha256(raw).hexdigest()
    if digest != TINY_SHAKESPEARE_SHA256:
        raise ValueError(
            f"tiny_shakespeare_bytes: the packaged {_resource(_TINY_SHAKESPEARE)} decompresses "
            f"to sha256 {digest}; expected {TINY_SHAKESPEARE_SHA256}: the package data is "
            f"damaged, reinstall gaugelab"
        )
    return raw


class TextTooShort(ValueError):
    """A text too short for one window of ``block_size`` in both splits.

    Attributes:
        n_chars: characters in the text.
        needed: the fewest characters it would need (:func:`characters_needed`).
        block_size: the window length asked for.
    """

    def __init__(self, n_chars: int, needed: int, block_size: int, message: str) -> None:
        super().__init__(message)
        self.n_chars, self.needed, self.block_size = n_chars, needed, block_size


def characters_needed(block_size: int, split: float = 0.9) -> int:
    """The fewest characters a text needs for windows of ``block_size`` in both splits.

    Args:
        block_size: window length, ``>= 1``.
        split: fraction of the characters in the training split, in ``(0, 1)``.

    Returns:
        The smallest ``N`` with ``int(split · N) > block_size`` and
        ``N − int(split · N) > block_size`` (each split holds a window and its next-character
        target), e.g. 641 for ``block_size=64`` at ``split=0.9``.

    Raises:
        ValueError: ``block_size`` or ``split`` out of range.
    """
    _check_arguments("characters_needed", block_size, split)
    # int(s·N) > b needs N ≥ (b + 1)/s; N − int(s·N) > b needs N > b/(1 − s): start just below
    n = max(block_size + 1, int(max((block_size + 1) / split, block_size / (1 - split))) - 2)
    while min(int(split * n), n - int(split * n)) <= block_size:
        n += 1
    return n


def _check_arguments(where: str, block_size: object, split: object) -> None:
    if isinstance(split, bool) or not isinstance(split, int | float) or not 0 < split < 1:
        raise ValueError(f"{where}: split={split!r}; allowed: a number in (0, 1)")
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"{where}: block_size={block_size!r}; allowed: an integer >= 1")


class CharText(WindowBatches):
    """A text file as integer character ids, split into train and validation, with windows.

    The file is read once (bytes), hashed (``sha256``) and decoded as UTF-8. The vocabulary is
    the sorted set of its characters; id ``i`` is the ``i``-th character. The training split
    is the first ``int(split · N)`` characters of the ``N``-character text and the validation
    split the rest. A window starting at offset ``o`` is ``x = data[o : o + block_size]`` with
    next-character targets ``y = data[o + 1 : o + block_size + 1]``; offsets are uniform on
    ``0 .. len(data) − block_size − 1``.

    Args:
        path: a UTF-8 text file (``str`` or ``os.PathLike``).
        block_size: window length (the model's context), ``1 ≤ block_size < `` the length of
            either split.
        split: fraction of the characters in the training split, in ``(0, 1)``.

    Attributes:
        path: the file, as a ``Path`` (for :meth:`tiny_shakespeare`, the packaged resource).
        sha256: hex SHA-256 of the file's bytes (decompressed, for the packaged text).
        chars: ``tuple[str, ...]``, the vocabulary in id order.
        d_vocab: ``len(chars)``.
        block_size, n_ctx: the window length.
        n_chars: ``N``, characters in the file.
        train_data: ``[int(split · N)]`` long ids; ``val_data``: ``[N − int(split · N)]`` long.

    Raises:
        FileNotFoundError: ``path`` does not exist (the message names it).
        ValueError: ``path`` is not a file, is empty or is not UTF-8; ``block_size`` not an
            integer ``>= 1``; ``split`` outside ``(0, 1)``.
        TextTooShort: (a ``ValueError``) ``block_size`` is not below the length of both
            splits; the message says how many characters one block needs
            (:func:`characters_needed`).

    Source:
        karpathy2015char (char-rnn: character vocabulary, contiguous windows, 90/10 split of
        tiny-shakespeare); singh2026lossbasis §6 (the stochastic twin variant: both twins
        consume the same minibatch stream).
    """

    def __init__(self, path: str | os.PathLike, block_size: int, split: float = 0.9) -> None:
        _check_arguments("CharText", block_size, split)
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"CharText: path={str(path)!r} does not exist")
        if not path.is_file():
            raise ValueError(f"CharText: path={str(path)!r} is not a file")
        self._from_bytes(path.read_bytes(), path, block_size, split)  # the only read of the file

    @classmethod
    def tiny_shakespeare(cls, block_size: int, split: float = 0.9) -> CharText:
        """The packaged tiny-shakespeare text, its digest checked on every load.

        The same as ``CharText(path, block_size, split)`` on a plain copy of the file (same
        vocabulary, ids, splits and batches), without a file on disk.

        Args:
            block_size: window length, ``1 ≤ block_size < 111,540`` (the validation split's
                length at ``split = 0.9``).
            split: fraction of the characters in the training split, in ``(0, 1)``.

        Returns:
            A :class:`CharText` with ``sha256 == TINY_SHAKESPEARE_SHA256``, ``d_vocab == 65``,
            ``n_chars == 1,115,394``; ``path`` is the packaged resource
            (``…/gaugelab/tasks/data/tinyshakespeare.txt.gz``, an ``importlib.resources``
            ``Traversable``: a ``Path`` for an installed package). It is gzip-compressed:
            pass it to ``CharText`` only after decompressing (see
            :func:`tiny_shakespeare_bytes`).

        Raises:
            ValueError: ``block_size`` or ``split`` out of range (as ``CharText``); the
                packaged data does not match :data:`TINY_SHAKESPEARE_SHA256`.

        Source:
            karpathy2015char (the corpus, 90/10 split); singh2026lossbasis §6 (the stochastic
            twin variant).
        """
        _check_arguments("CharText.tiny_shakespeare", block_size, split)
        text = cls.__new__(cls)
        text._from_bytes(tiny_shakespeare_bytes(), _resource(_TINY_SHAKESPEARE), block_size, split)
        return text

    def _from_bytes(
        self, raw: bytes, path: Path | Traversable, block_size: int, split: float
    ) -> None:
        """Set every attribute from the text's bytes ``raw``; ``path`` names where they came
        from (error messages, ``repr``). Arguments are already checked by the caller."""
        self.path = path
        if not raw:
            raise ValueError(f"CharText: path={str(path)!r} is empty; allowed: a text file")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"CharText: path={str(path)!r} is not UTF-8: {exc}") from None
        self.sha256 = hashlib.sha256(raw).hexdigest()
        self.chars: tuple[str, ...] = tuple(sorted(set(text)))
        self._ids = {c: i for i, c in enumerate(self.chars)}
        self.d_vocab = len(self.chars)
        self.n_chars = len(text)
        self.split = float(split)
        data = self.encode(text)  # [N]
        n_train = int(split * self.n_chars)
        self.train_data, self.val_data = data[:n_train], data[n_train:]
        shortest = min(self.train_data.numel(), self.val_data.numel())
        if block_size >= shortest:
            raise TextTooShort(
                self.n_chars,
                characters_needed(block_size, split),
                block_size,
                f"CharText: block_size={block_size}; allowed: 1 <= block_size < {shortest} "
                f"(the shorter split: {n_train} train / {self.n_chars - n_train} val characters)"
                f"; one block of {block_size} needs a text of at least "
                f"{characters_needed(block_size, split):,} characters, {str(path)!r} has "
                f"{self.n_chars:,}",
            )
        self.block_size = block_size

    @property
    def n_ctx(self) -> int:
        """The window length, ``block_size``."""
        return self.block_size

    def encode(self, s: str) -> torch.Tensor:
        """Character ids of ``s``.

        Args:
            s: a string over the vocabulary.

        Returns:
            ``[len(s)]`` long tensor.

        Raises:
            ValueError: ``s`` contains a character outside the vocabulary.
        """
        try:
            return torch.tensor([self._ids[c] for c in s], dtype=torch.long)
        except KeyError as exc:
            raise ValueError(
                f"CharText.encode: character {exc.args[0]!r} is not in the vocabulary of "
                f"{self.d_vocab} characters from {str(self.path)!r}"
            ) from None

    def decode(self, ids: torch.Tensor | Sequence[int]) -> str:
        """The string of character ids.

        Args:
            ids: ``[L]`` integer tensor or a sequence of ints, each in ``[0, d_vocab)``.

        Returns:
            A string of length ``L``.

        Raises:
            ValueError: ``ids`` is not one-dimensional or holds an id outside ``[0, d_vocab)``.
        """
        if isinstance(ids, torch.Tensor):
            if ids.dim() != 1:
                raise ValueError(f"CharText.decode: ids has shape {tuple(ids.shape)}; allowed: [L]")
            ids = ids.tolist()
        out = []
        for i in ids:
            if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < self.d_vocab:
                raise ValueError(f"CharText.decode: id {i!r}; allowed: 0 <= id < {self.d_vocab}")
            out.append(self.chars[i])
        return "".join(out)

    def data(self, split: str) -> torch.Tensor:
        """The ``[len]`` long ids of ``split`` (``"train"`` or ``"val"``).

        Raises:
            ValueError: unknown ``split``.
        """
        if split == "train":
            return self.train_data
        if split == "val":
            return self.val_data
        raise ValueError(f"CharText: split={split!r}; allowed: {', '.join(SPLITS)}")

    def __repr__(self) -> str:
        return (
            f"CharText({str(self.path)!r}, block_size={self.block_size}, split={self.split}; "
            f"{self.d_vocab} characters, {self.train_data.numel()} train / "
            f"{self.val_data.numel()} val)"
        )
