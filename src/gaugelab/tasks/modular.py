"""Modular arithmetic: every pair ``(a, b)`` mod p, the table split at random into train and
validation — the algorithmic data of the attention-head twins."""

from __future__ import annotations

import torch

OPS = ("add", "subtract", "multiply")


class ModularArithmetic:
    """All ``p²`` equations ``a op b = c (mod p)`` as three-token inputs and a class label.

    Pair ``i`` (``0 ≤ i < p²``) is ``(a, b) = (i // p, i % p)`` (row-major). Its input tokens
    are ``[a, b, =]`` with the ``=`` token equal to ``p`` (vocabulary ``p + 1``); its label is
    ``(a op b) mod p`` (``p`` classes). With ``g = torch.Generator().manual_seed(seed)`` and
    ``perm = torch.randperm(p², generator=g)``, the first ``int(train_fraction · p²)`` indices
    of ``perm`` are the training set (in that order) and the rest the validation set. For the
    reference setting (``p = 47``, ``train_fraction = 0.4``, ``seed = 42``) that is
    883 train / 1326 validation equations, used full batch.

    Args:
        p: the modulus, an integer ≥ 2.
        op: ``"add"`` (``a + b``), ``"subtract"`` (``a − b``) or ``"multiply"`` (``a · b``).
        train_fraction: fraction of the table used for training, in ``(0, 1)``; both splits
            must be non-empty.
        seed: seed of the split's generator.

    Attributes:
        p, op, train_fraction, seed: the arguments.
        d_vocab: ``p + 1`` input tokens (``0..p−1`` and ``=``).
        n_classes: ``p`` output classes.
        n_ctx: 3, the input length.
        equals_token: ``p``.
        inputs: ``[p², 3]`` long, every equation in row-major pair order.
        labels: ``[p²]`` long, ``(a op b) mod p``.
        train_indices: ``[n_train]`` long, pair indices of the training set.
        val_indices: ``[n_val]`` long, pair indices of the validation set.
        train_inputs: ``[n_train, 3]`` long; ``train_labels``: ``[n_train]`` long.
        val_inputs: ``[n_val, 3]`` long; ``val_labels``: ``[n_val]`` long.

    Raises:
        ValueError: ``p`` not an integer ≥ 2, ``op`` unknown, ``train_fraction`` outside
            ``(0, 1)`` or leaving a split empty, ``seed`` not an integer.

    Source:
        power2022grokking (modular arithmetic tables); singh2026lossbasis §6 and
        docs/protocols.md §5 (p = 47, addition, train fraction 0.4, split seed 42).
    """

    def __init__(
        self, p: int = 47, op: str = "add", train_fraction: float = 0.4, seed: int = 42
    ) -> None:
        if isinstance(p, bool) or not isinstance(p, int) or p < 2:
            raise ValueError(f"ModularArithmetic: p={p!r}; allowed: an integer >= 2")
        if op not in OPS:
            raise ValueError(f"ModularArithmetic: op={op!r}; allowed: {', '.join(OPS)}")
        if (
            isinstance(train_fraction, bool)
            or not isinstance(train_fraction, int | float)
            or not 0 < train_fraction < 1
        ):
            raise ValueError(
                f"ModularArithmetic: train_fraction={train_fraction!r}; allowed: a number in (0, 1)"
            )
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"ModularArithmetic: seed={seed!r}; allowed: an integer")
        total = p * p
        n_train = int(train_fraction * total)
        if not 0 < n_train < total:
            raise ValueError(
                f"ModularArithmetic: train_fraction={train_fraction!r} gives {n_train} of "
                f"{total} pairs for training; allowed: a fraction leaving both splits non-empty"
            )
        self.p, self.op, self.train_fraction, self.seed = p, op, float(train_fraction), seed
        self.d_vocab = p + 1
        self.n_classes = p
        self.n_ctx = 3
        self.equals_token = p

        index = torch.arange(total)
        a, b = index // p, index % p
        self.inputs = torch.stack([a, b, torch.full_like(a, p)], dim=1)  # [p², 3]
        if op == "add":
            labels = a + b
        elif op == "subtract":
            labels = a - b
        else:
            labels = a * b
        self.labels = torch.remainder(labels, p)  # [p²], in 0..p−1 (remainder keeps sign of p)

        g = torch.Generator().manual_seed(seed)
        perm = torch.randperm(total, generator=g)
        self.train_indices, self.val_indices = perm[:n_train], perm[n_train:]
        self.train_inputs = self.inputs[self.train_indices]  # [n_train, 3]
        self.train_labels = self.labels[self.train_indices]  # [n_train]
        self.val_inputs = self.inputs[self.val_indices]  # [n_val, 3]
        self.val_labels = self.labels[self.val_indices]  # [n_val]

    @property
    def n_train(self) -> int:
        """Number of training equations, ``int(train_fraction · p²)``."""
        return int(self.train_indices.numel())

    @property
    def n_val(self) -> int:
        """Number of validation equations, ``p² − n_train``."""
        return int(self.val_indices.numel())

    def __repr__(self) -> str:
        return (
            f"ModularArithmetic(p={self.p}, op={self.op!r}, train_fraction={self.train_fraction}, "
            f"seed={self.seed}; {self.n_train} train / {self.n_val} validation)"
        )
