"""scikit-learn's bundled handwritten digits (``load_digits``): 1,797 images of 8 × 8 pixels,
10 classes, read offline from the installed package, split deterministically.

:func:`digits_splits` keeps the requested classes (relabelled ``0 … k−1`` in the order given),
scales pixels to ``[0, 1]`` (``/16``) and splits each class separately (stratified) into
train / selection / evaluation parts by a seeded permutation. The data's sha256 is part of the
result, so a changed scikit-learn copy is visible in every run that uses it.

Source: the UCI optical-recognition digits as bundled by scikit-learn (``sklearn.datasets.
load_digits``); seed 003 §0x02F (the selection split is declared apart from the evaluation one).
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from gaugelab.lazy import LazyModule

_sklearn_datasets = LazyModule("sklearn.datasets")

__all__ = ["DigitsSplits", "digits_splits", "raw_digits"]

SPLITS = ("train", "selection", "eval")


@functools.lru_cache(maxsize=1)
def raw_digits() -> tuple[np.ndarray, np.ndarray, str]:
    """``(images [1797, 64] float64 in 0..16, labels [1797] int64, sha256 of both)``, read once
    per process from scikit-learn's bundled copy (no download)."""
    data = _sklearn_datasets.load_digits()
    x = np.ascontiguousarray(data.data, dtype=np.float64)
    y = np.ascontiguousarray(data.target, dtype=np.int64)
    digest = hashlib.sha256(x.tobytes() + y.tobytes()).hexdigest()
    x.setflags(write=False)
    y.setflags(write=False)
    return x, y, digest


@dataclass(frozen=True)
class DigitsSplits:
    """Three disjoint parts of the digits.

    Attributes:
        train, selection, eval: ``(x [N, 64], y [N])`` each; ``x`` in ``[0, 1]`` of the
            requested dtype, ``y`` int64 in ``0 … n_classes−1``.
        classes: the original digit of each label; sha256: of the full bundled data.
    """

    train: tuple[torch.Tensor, torch.Tensor]
    selection: tuple[torch.Tensor, torch.Tensor]
    eval: tuple[torch.Tensor, torch.Tensor]
    classes: tuple[int, ...]
    sha256: str

    @property
    def n_classes(self) -> int:
        """``k``, the classes kept."""
        return len(self.classes)


def digits_splits(
    classes: Sequence[int] = tuple(range(10)),
    *,
    seed: int = 0,
    fractions: tuple[float, float] = (0.6, 0.2),
    dtype: torch.dtype = torch.float32,
) -> DigitsSplits:
    """The digits of ``classes``, split per class into train / selection / eval.

    Args:
        classes: original digits to keep (distinct, in ``0..9``); label ``i`` is ``classes[i]``.
        seed: seed of the per-class permutations (``numpy.random.default_rng``).
        fractions: the train and selection fractions of each class (the rest is eval); both
            positive with a sum below one.
        dtype: dtype of the images.

    Returns:
        The :class:`DigitsSplits`, each part in ascending original index order within a class.

    Raises:
        ValueError: repeated or out-of-range classes, bad fractions.
    """
    classes = tuple(int(c) for c in classes)
    if not classes or len(set(classes)) != len(classes) or not all(0 <= c <= 9 for c in classes):
        raise ValueError(f"digits_splits: classes={list(classes)}; allowed: distinct digits 0..9")
    a, b = fractions
    if not (0 < a and 0 < b and a + b < 1):
        raise ValueError(
            f"digits_splits: fractions={fractions}; allowed: two positive fractions (train, "
            "selection) with a sum below 1"
        )
    x, y, digest = raw_digits()
    rng = np.random.default_rng(seed)
    parts: dict[str, list[np.ndarray]] = {s: [] for s in SPLITS}
    for c in classes:
        index = np.flatnonzero(y == c)
        order = index[rng.permutation(index.size)]
        n_train, n_sel = round(a * index.size), round(b * index.size)
        parts["train"].append(np.sort(order[:n_train]))
        parts["selection"].append(np.sort(order[n_train : n_train + n_sel]))
        parts["eval"].append(np.sort(order[n_train + n_sel :]))
    relabel = np.full(10, -1, dtype=np.int64)
    relabel[list(classes)] = np.arange(len(classes))
    out = {}
    for split in SPLITS:
        idx = np.concatenate(parts[split])
        images = torch.tensor(x[idx] / 16.0, dtype=dtype)
        out[split] = (images, torch.tensor(relabel[y[idx]], dtype=torch.int64))
    return DigitsSplits(out["train"], out["selection"], out["eval"], classes, digest)
