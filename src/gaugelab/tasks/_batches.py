"""The minibatch stream every text task shares: checked arguments, a seeded generator, a loop.

:class:`gaugelab.tasks.CharText` and :class:`gaugelab.tasks.domains.DomainText` draw their
windows differently (one text, or runs of chunks) but validate and stream them alike: a
``batch_size`` is an integer ≥ 1, a draw takes a ``torch.Generator``, and a stream is a fresh
generator seeded with ``seed`` handed to the task's ``get_batch`` ``steps`` times (or for ever).
Private; the messages name the public method that was called.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch

__all__ = ["check_batch_size", "check_generator", "stream", "windows"]

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
