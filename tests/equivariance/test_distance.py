"""Tests for gaugelab.equivariance.distance: the one relative distance of every twin comparison."""

import pytest
import torch

from gaugelab.equivariance.distance import relative_distance

F64 = torch.float64


def test_relative_distance_is_the_difference_over_the_mean_norm():
    a = torch.tensor([3.0, 4.0], dtype=F64)  # ‖a‖ = 5
    b = torch.tensor([0.0, 0.0], dtype=F64)
    assert float(relative_distance(a, b)) == pytest.approx(2.0, rel=1e-12)  # 5 / (½·5 + 1e-12)
    c = torch.tensor([6.0, 8.0], dtype=F64)  # ‖c‖ = 10, ‖a − c‖ = 5
    assert float(relative_distance(a, c)) == pytest.approx(5 / 7.5, rel=1e-12)


def test_relative_distance_is_symmetric_and_zero_exactly_on_equal_tensors():
    gen = torch.Generator().manual_seed(0)
    a, b = (torch.randn(4, 5, generator=gen, dtype=F64) for _ in range(2))
    assert torch.equal(relative_distance(a, b), relative_distance(b, a))
    assert float(relative_distance(a, a.clone())) == 0.0


def test_two_zero_tensors_are_at_distance_zero_not_nan():
    zero = torch.zeros(3, dtype=F64)
    assert float(relative_distance(zero, zero)) == 0.0  # 0 / (0 + 1e-12)


def test_near_twins_agree_with_the_one_sided_relative_error_to_half_the_distance():
    gen = torch.Generator().manual_seed(1)
    b = torch.randn(6, 6, generator=gen, dtype=F64)
    a = b + 1e-4 * torch.randn(6, 6, generator=gen, dtype=F64)
    one_sided = float((a - b).norm() / b.norm())
    # ‖b‖ / (½(‖a‖ + ‖b‖)) = 1 / (1 ± δ/2) with δ = ‖a − b‖ / ‖b‖
    assert float(relative_distance(a, b)) == pytest.approx(one_sided, rel=one_sided)


def test_dims_give_one_distance_per_matrix():
    gen = torch.Generator().manual_seed(2)
    a, b = (torch.randn(2, 3, 4, 4, generator=gen, dtype=F64) for _ in range(2))
    per_matrix = relative_distance(a, b, dims=(-2, -1))
    assert per_matrix.shape == (2, 3)
    for i in range(2):
        for j in range(3):
            torch.testing.assert_close(per_matrix[i, j], relative_distance(a[i, j], b[i, j]),
                                       rtol=1e-14, atol=0)  # fmt: skip


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_relative_distance_keeps_the_dtype(dtype):
    a, b = torch.ones(3, dtype=dtype), torch.full((3,), 2.0, dtype=dtype)
    assert relative_distance(a, b).dtype == dtype
