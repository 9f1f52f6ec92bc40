"""A text as token ids of a given encoder (a model's own tokenizer, or its bytes), split into
train and validation, with the seeded window stream of :class:`gaugelab.tasks.CharText`.

Source: karpathy2015char (contiguous windows, 90/10 split); singh2026lossbasis §6 (the
stochastic twin variant: both twins consume the same minibatch stream).
"""

from __future__ import annotations

import torch

from gaugelab.tasks._batches import WindowBatches

__all__ = ["TokenText"]


class TokenText(WindowBatches):
    """Token ids ``[N]`` split into train (the first ``int(split · N)``) and validation.

    Windows and streams are drawn exactly as :class:`gaugelab.tasks.CharText` draws them.

    Args:
        ids: ``[N]`` integer token ids, each in ``[0, d_vocab)``.
        block_size: window length, ``1 ≤ block_size <`` the length of either split.
        d_vocab: the vocabulary the ids index.
        name: what the ids are (error messages, ``repr``).
        split: fraction of the ids in the training split, in ``(0, 1)``.

    Raises:
        ValueError: ``ids`` not one-dimensional integers in ``[0, d_vocab)``, ``split`` outside
            ``(0, 1)``, or ``block_size`` not below the length of both splits.
    """

    def __init__(
        self, ids: torch.Tensor, block_size: int, d_vocab: int, name: str, split: float = 0.9
    ) -> None:
        if ids.dim() != 1 or ids.dtype.is_floating_point or ids.numel() == 0:
            raise ValueError(f"TokenText: ids of {name} have shape {tuple(ids.shape)} and "
                             f"dtype {ids.dtype}; allowed: [N] integer ids, N >= 1")  # fmt: skip
        if int(ids.min()) < 0 or int(ids.max()) >= d_vocab:
            raise ValueError(
                f"TokenText: {name} has token ids in [{int(ids.min())}, {int(ids.max())}]; "
                f"allowed: ids in [0, d_vocab={d_vocab})"
            )
        if isinstance(split, bool) or not 0 < split < 1:
            raise ValueError(f"TokenText: split={split!r}; allowed: a number in (0, 1)")
        data = ids.long()
        n_train = int(split * data.numel())
        self.train_data, self.val_data = data[:n_train], data[n_train:]
        shortest = min(n_train, data.numel() - n_train)
        if isinstance(block_size, bool) or not 1 <= block_size < shortest:
            raise ValueError(
                f"TokenText: block_size={block_size!r}; allowed: 1 <= block_size < {shortest} "
                f"(the shorter split of {name}'s {data.numel():,} tokens)"
            )
        self.block_size, self.d_vocab, self.name, self.split = block_size, d_vocab, name, split

    def data(self, split: str) -> torch.Tensor:
        """The ``[len]`` long ids of ``split`` (``"train"`` or ``"val"``).

        Raises:
            ValueError: unknown ``split``.
        """
        if split in ("train", "val"):
            return self.train_data if split == "train" else self.val_data
        raise ValueError(f"TokenText: split={split!r}; allowed: train, val")

    def __repr__(self) -> str:
        return (
            f"TokenText({self.name}, block_size={self.block_size}; {self.d_vocab} ids, "
            f"{self.train_data.numel()} train / {self.val_data.numel()} val)"
        )
