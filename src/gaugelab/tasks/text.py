"""Character-level text: a UTF-8 file as a stream of next-character prediction windows."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import torch

SPLITS = ("train", "val")


class CharText:
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
        path: the file, as a ``Path``.
        sha256: hex SHA-256 of the file's bytes.
        chars: ``tuple[str, ...]``, the vocabulary in id order.
        d_vocab: ``len(chars)``.
        block_size, n_ctx: the window length.
        n_chars: ``N``, characters in the file.
        train_data: ``[int(split · N)]`` long ids; ``val_data``: ``[N − int(split · N)]`` long.

    Raises:
        FileNotFoundError: ``path`` does not exist (the message names it).
        ValueError: ``path`` is not a file, is empty or is not UTF-8; ``block_size`` not an
            integer in ``[1, len(split))`` for both splits; ``split`` outside ``(0, 1)``.

    Source:
        karpathy2015char (char-rnn: character vocabulary, contiguous windows, 90/10 split of
        tiny-shakespeare); singh2026lossbasis §6 (the stochastic twin variant: both twins
        consume the same minibatch stream).
    """

    def __init__(self, path: str | os.PathLike, block_size: int, split: float = 0.9) -> None:
        if isinstance(split, bool) or not isinstance(split, int | float) or not 0 < split < 1:
            raise ValueError(f"CharText: split={split!r}; allowed: a number in (0, 1)")
        if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
            raise ValueError(f"CharText: block_size={block_size!r}; allowed: an integer >= 1")
        self.path = Path(path)
        if not self.path.exists():
            raise FileNotFoundError(f"CharText: path={str(self.path)!r} does not exist")
        if not self.path.is_file():
            raise ValueError(f"CharText: path={str(self.path)!r} is not a file")
        raw = self.path.read_bytes()  # the only read of the file
        if not raw:
            raise ValueError(f"CharText: path={str(self.path)!r} is empty; allowed: a text file")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"CharText: path={str(self.path)!r} is not UTF-8: {exc}") from None
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
            raise ValueError(
                f"CharText: block_size={block_size}; allowed: 1 <= block_size < {shortest} "
                f"(the shorter split: {n_train} train / {self.n_chars - n_train} val characters)"
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

    def get_batch(
        self, split: str, batch_size: int, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One minibatch of windows with offsets drawn from ``generator``.

        Draws ``torch.randint(len(data) − block_size, (batch_size,), generator=generator)``
        and nothing else, so the generator's state advances identically for every consumer.

        Args:
            split: ``"train"`` or ``"val"``.
            batch_size: ``B ≥ 1``.
            generator: a CPU ``torch.Generator``; advanced by the draw.

        Returns:
            ``(x, y)``, both ``[B, block_size]`` long; ``y[:, t]`` is the character after
            ``x[:, t]``, so ``y[:, :-1] == x[:, 1:]``.

        Raises:
            ValueError: unknown ``split`` or ``batch_size < 1``.
            TypeError: ``generator`` is not a ``torch.Generator``.
        """
        data = self.data(split)
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(
                f"CharText.get_batch: batch_size={batch_size!r}; allowed: an integer >= 1"
            )
        if not isinstance(generator, torch.Generator):
            raise TypeError(
                f"CharText.get_batch: generator={generator!r}; allowed: a torch.Generator"
            )
        offsets = torch.randint(
            data.numel() - self.block_size, (batch_size,), generator=generator
        )  # [B]
        index = offsets[:, None] + torch.arange(self.block_size)  # [B, block_size]
        return data[index], data[index + 1]

    def batches(
        self, batch_size: int, seed: int, split: str = "train", *, steps: int | None = None
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """A deterministic stream of minibatches: two consumers with the same seed see the
        same batches.

        Args:
            batch_size: ``B ≥ 1``.
            seed: seeds a fresh ``torch.Generator`` that draws every offset.
            split: ``"train"`` (default) or ``"val"``.
            steps: number of batches; ``None`` (default) streams forever.

        Yields:
            ``(x, y)``, both ``[B, block_size]`` long, as :meth:`get_batch`.

        Raises:
            ValueError: unknown ``split``, ``batch_size < 1``, ``seed`` not an integer or
                ``steps < 0`` (raised at the call, not at the first ``next``).
        """
        self.data(split)
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(
                f"CharText.batches: batch_size={batch_size!r}; allowed: an integer >= 1"
            )
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"CharText.batches: seed={seed!r}; allowed: an integer")
        if steps is not None and (
            isinstance(steps, bool) or not isinstance(steps, int) or steps < 0
        ):
            raise ValueError(f"CharText.batches: steps={steps!r}; allowed: None or an integer >= 0")
        return self._stream(batch_size, torch.Generator().manual_seed(seed), split, steps)

    def _stream(self, batch_size, generator, split, steps):
        count = 0
        while steps is None or count < steps:
            yield self.get_batch(split, batch_size, generator)
            count += 1

    def __repr__(self) -> str:
        return (
            f"CharText({str(self.path)!r}, block_size={self.block_size}, split={self.split}; "
            f"{self.d_vocab} characters, {self.train_data.numel()} train / "
            f"{self.val_data.numel()} val)"
        )
