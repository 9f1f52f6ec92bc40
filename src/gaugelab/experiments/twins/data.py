"""The twin protocol's data: full-batch modular addition, or a shared character stream.

Both implement :class:`gaugelab.equivariance.twins.TwinData`. Source: docs/protocols.md §5, §6.
"""

from __future__ import annotations

import torch

from gaugelab.experiments.twins.spec import TwinSpec
from gaugelab.tasks import CharText, ModularArithmetic, TokenText


class ModularData:
    """Full-batch modular addition: every step trains on the whole training split."""

    def __init__(self, spec: TwinSpec) -> None:
        task = ModularArithmetic(
            spec.modulus, train_fraction=spec.train_fraction, seed=spec.split_seed
        )
        self.train = (task.train_inputs, task.train_labels)
        self.val = (task.val_inputs, task.val_labels)

    def batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The training split."""
        return self.train

    def skip(self, n: int) -> None:
        """Nothing to skip: every batch is the full split."""

    def logits(self, out: torch.Tensor) -> torch.Tensor:
        """``[E, B, T, V]`` → the last position ``[E, B, V]`` (the answer token)."""
        return out[:, :, -1]

    def labels(self, y: torch.Tensor) -> torch.Tensor:
        """The answers ``[B]``."""
        return y


class TextData:
    """Text windows: one minibatch stream shared by every member, fixed validation batches.

    The text is ``spec.text()`` (characters), or ``text`` when given (a Hugging Face model's
    tokens, :class:`gaugelab.tasks.TokenText`)."""

    def __init__(self, spec: TwinSpec, text: CharText | TokenText | None = None) -> None:
        text = spec.text() if text is None else text
        self.train = None
        self.stream = text.batches(spec.batch_size, seed=spec.data_seed)
        val = text.batches(spec.batch_size, seed=spec.data_seed + 1, split="val")
        xs, ys = zip(*(next(val) for _ in range(spec.val_batches)), strict=True)
        self.val = (torch.cat(xs), torch.cat(ys))

    def batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The next minibatch ``([B, T], [B, T])``."""
        return next(self.stream)

    def skip(self, n: int) -> None:
        """Consume ``n`` minibatches (a resumed run continues the stream)."""
        for _ in range(n):
            next(self.stream)

    def logits(self, out: torch.Tensor) -> torch.Tensor:
        """``[E, B, T, V]`` → every position ``[E, B·T, V]``."""
        return out.flatten(1, 2)

    def labels(self, y: torch.Tensor) -> torch.Tensor:
        """Every next character ``[B·T]``."""
        return y.flatten()


def twin_data(spec: TwinSpec) -> ModularData | TextData:
    """The task of ``spec`` (:class:`ModularData` or :class:`TextData`)."""
    return ModularData(spec) if spec.task == "modular" else TextData(spec)
