"""The minibatch stream every text task shares: checked arguments, a seeded generator, a loop.

:class:`gaugelab.tasks.CharText`, :class:`gaugelab.tasks.TokenText` and
:class:`gaugelab.tasks.domains.DomainText` draw their windows differently (one text, or runs of
chunks) but validate and stream them alike (:class:`WindowBatches`): a ``batch_size`` is an
integer ≥ 1, a draw takes a ``torch.Generator``, and a stream is a fresh generator seeded with
``seed`` handed to the task's ``get_batch`` ``steps`` times (or for ever). Private; the messages
name the public method that was called (``CharText.get_batch``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch

__all__ = ["WindowBatches", "check_batch_size", "check_generator", "stream", "windows"]

Batch = tuple[torch.Tensor, torch.Tensor]


def check_batch_size(where: str, batch_size: object) -> None:
    """Raise ``ValueError`` naming ``where`` unless ``batch_size`` is an integer ≥ 1."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"{where}: batch_size={batch_size!r}; allowed: an integer >= 1")


def check_generator(where: str, generator: object) -> None:
    """Raise ``TypeError`` naming ``where`` unless ``generator`` is a ``torch.Generator``."""
    if not isinstance(generator, torch.Generator):
        raise TypeError(f"{where}: generator={generator!r}; allowed: a torch.Generator")


def windows(
    data: torch.Tensor, block_size: int, batch_size: int, generator: torch.Generator
) -> Batch:
    """``batch_size`` windows of ``data`` ``[N]`` at offsets ``randint(N − block_size)`` drawn
    from ``generator`` (nothing else is drawn): ``x = data[o : o + block_size]`` and the next
    tokens ``y = data[o + 1 : o + block_size + 1]``, both ``[batch_size, block_size]``."""
    offsets = torch.randint(data.numel() - block_size, (batch_size,), generator=generator)
    index = offsets[:, None] + torch.arange(block_size)  # [B, block_size]
    return data[index], data[index + 1]


def stream(
    where: str,
    get_batch: Callable[[str, int, torch.Generator], Batch],
    split: str,
    batch_size: int,
    seed: int,
    steps: int | None,
) -> Iterator[Batch]:
    """``get_batch(split, batch_size, g)`` ``steps`` times (``None``: for ever) from a fresh
    ``g = torch.Generator().manual_seed(seed)``; the arguments are checked at the call, not at
    the first ``next``.

    Raises:
        ValueError: ``batch_size < 1``, ``seed`` not an integer or ``steps`` not ``None`` or
            an integer ≥ 0 (the message names ``where``).
    """
    check_batch_size(where, batch_size)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"{where}: seed={seed!r}; allowed: an integer")
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 0):
        raise ValueError(f"{where}: steps={steps!r}; allowed: None or an integer >= 0")
    return _loop(get_batch, split, batch_size, torch.Generator().manual_seed(seed), steps)


def _loop(get_batch, split, batch_size, generator, steps) -> Iterator[Batch]:
    count = 0
    while steps is None or count < steps:
        yield get_batch(split, batch_size, generator)
        count += 1


class WindowBatches:
    """``get_batch`` and ``batches`` of a task with ``data(split)`` and ``block_size``."""

    def _batch_data(self, split: str, batch_size: int, generator: torch.Generator) -> torch.Tensor:
        """``data(split)``, once ``batch_size`` and ``generator`` are checked for ``get_batch``."""
        data = self.data(split)  # type: ignore[attr-defined]
        where = f"{type(self).__name__}.get_batch"
        check_batch_size(where, batch_size)
        check_generator(where, generator)
        return data

    def get_batch(self, split: str, batch_size: int, generator: torch.Generator) -> Batch:
        """One minibatch of windows with offsets drawn from ``generator``.

        Draws ``torch.randint(len(data) − block_size, (batch_size,), generator=generator)``
        and nothing else, so the generator's state advances identically for every consumer.

        Args:
            split: ``"train"`` or ``"val"``.
            batch_size: ``B ≥ 1``.
            generator: a CPU ``torch.Generator``; advanced by the draw.

        Returns:
            ``(x, y)``, both ``[B, block_size]`` long; ``y[:, t]`` is the id (character) after
            ``x[:, t]``, so ``y[:, :-1] == x[:, 1:]``.

        Raises:
            ValueError: unknown ``split`` or ``batch_size < 1``.
            TypeError: ``generator`` is not a ``torch.Generator``.
        """
        data = self._batch_data(split, batch_size, generator)
        return windows(data, self.block_size, batch_size, generator)  # type: ignore[attr-defined]

    def batches(
        self, batch_size: int, seed: int, split: str = "train", *, steps: int | None = None
    ) -> Iterator[Batch]:
        """A deterministic stream of minibatches: two consumers with the same seed see the
        same batches.

        Args:
            batch_size: ``B ≥ 1``.
            seed: seeds a fresh ``torch.Generator`` that draws every offset.
            split: ``"train"`` (default), ``"val"`` (or ``"test"``, for a task that has it).
            steps: number of batches; ``None`` (default) streams forever.

        Yields:
            ``(x, y)``, both ``[B, block_size]`` long, as :meth:`get_batch`.

        Raises:
            ValueError: unknown ``split``, ``batch_size < 1``, ``seed`` not an integer or
                ``steps < 0`` (raised at the call, not at the first ``next``).
        """
        self.data(split)  # type: ignore[attr-defined]
        where = f"{type(self).__name__}.batches"
        return stream(where, self.get_batch, split, batch_size, seed, steps)
