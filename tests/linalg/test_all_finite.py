"""all_finite is exactly torch.isfinite(X).all(), including where the sum overflows."""

import pytest
import torch

from gaugelab.linalg.checks import all_finite

BIG = torch.finfo(torch.float64).max


@pytest.mark.parametrize(
    ("X", "expected"),
    [
        (torch.randn(50, 7, dtype=torch.float64), True),
        (torch.tensor([1.0, float("nan")]), False),
        (torch.tensor([1.0, float("inf")]), False),
        (torch.tensor([float("inf"), float("-inf")]), False),  # the sum is nan
        (torch.tensor([-float("inf"), 2.0]), False),
        (torch.full((4,), BIG, dtype=torch.float64), True),  # finite entries, the sum overflows
        (torch.tensor([BIG, BIG, float("nan")], dtype=torch.float64), False),
        (torch.empty(0, 3), True),
        (torch.tensor([3e38, 3e38], dtype=torch.bfloat16), True),
        (torch.tensor([1.0, float("inf")], dtype=torch.float16), False),
    ],
)
def test_all_finite_is_the_entrywise_check(X, expected):
    assert all_finite(X) is expected
    assert all_finite(X) == bool(torch.isfinite(X).all())
