"""gaugelab.tasks.digits: scikit-learn's bundled digits, split offline and deterministically."""

import hashlib

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits

from gaugelab.tasks.digits import digits_splits, raw_digits


def test_splits_partition_every_image_once_stratified_by_class():
    s = digits_splits()
    sizes = [s.train[0].shape[0], s.selection[0].shape[0], s.eval[0].shape[0]]
    assert sum(sizes) == 1797 and s.n_classes == 10
    _, y, _ = raw_digits()
    for label in range(10):  # per class: round(0.6 n), round(0.2 n), the rest
        n = int((y == label).sum())
        counts = [int((part[1] == label).sum()) for part in (s.train, s.selection, s.eval)]
        assert counts == [round(0.6 * n), round(0.2 * n), n - round(0.6 * n) - round(0.2 * n)]
    rows = {tuple(r) for part in (s.train, s.selection, s.eval) for r in part[0].tolist()}
    assert len(rows) >= 1797 - 40  # only duplicate images can coincide (there are a few)
    assert s.train[0].dtype == torch.float32 and float(s.train[0].max()) == 1.0


def test_same_seed_same_split_other_seed_other_split():
    a, b, c = digits_splits(seed=3), digits_splits(seed=3), digits_splits(seed=4)
    assert torch.equal(a.train[0], b.train[0]) and torch.equal(a.eval[1], b.eval[1])
    assert not torch.equal(a.train[0], c.train[0])


def test_classes_are_kept_in_order_and_relabelled():
    s = digits_splits((5, 6, 7, 8, 9))
    assert s.classes == (5, 6, 7, 8, 9) and set(s.train[1].tolist()) == {0, 1, 2, 3, 4}
    x, y, _ = raw_digits()
    first = s.train[0][s.train[1] == 0][0].double() * 16  # label 0 is digit 5
    assert any(np.array_equal(first.numpy(), row) for row in x[y == 5])


def test_digest_is_of_the_bundled_copy():
    data = load_digits()
    expected = hashlib.sha256(
        np.ascontiguousarray(data.data, np.float64).tobytes()
        + np.ascontiguousarray(data.target, np.int64).tobytes()
    ).hexdigest()
    assert digits_splits().sha256 == expected


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="classes"):
        digits_splits((1, 1))
    with pytest.raises(ValueError, match="fractions"):
        digits_splits(fractions=(0.8, 0.3))
