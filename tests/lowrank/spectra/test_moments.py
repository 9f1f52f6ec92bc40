"""Streamed input moments (``InputMoments``): the covariance, the support, the output-weighted
truncation and the output residual from ``XᵀX`` summed batch by batch equal those of the rows
``X`` themselves (seed 003 §0x04E: everything depends on ``X`` through ``C = XᵀX/N``)."""

import pytest
import torch

from gaugelab.lowrank import (
    InputMoments,
    covariance_support,
    output_residual,
    output_weighted_rank_r,
)

pytestmark = pytest.mark.usefixtures("strict_dtypes")

F64 = torch.float64


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=F64)


def streamed(X, sizes):
    moments = InputMoments.zeros(X.shape[1])
    for chunk in torch.split(X, sizes):
        moments.add(chunk)
    return moments


def test_streamed_moments_give_the_rows_numbers():
    # 40 rows in a rank-5 subspace of R^8: a 3-dimensional blind spot
    X = randn(40, 5, seed=1) @ randn(5, 8, seed=2)
    moments = streamed(X, [7, 13, 20])
    assert moments.count == 40 and moments.shape == (40, 8)
    torch.testing.assert_close(moments.gram, X.mT @ X, rtol=0, atol=1e-11 * float((X**2).sum()))
    rows, summed = covariance_support(X), covariance_support(moments)
    assert rows.rank == summed.rank == 5
    factors = (randn(6, 3, seed=3), randn(3, 8, seed=4), 0.5)
    for r in (1, 2, 3):
        a = output_weighted_rank_r(factors, X, r)
        b = output_weighted_rank_r(factors, moments, r)
        torch.testing.assert_close(b.delta_r, a.delta_r, rtol=0, atol=1e-9)
        assert b.residual.direct == pytest.approx(a.residual.direct, rel=1e-9, abs=1e-12)
        assert b.invisible_update_energy == pytest.approx(a.invisible_update_energy, rel=1e-9)
        assert b.residual.n_samples == 40 and b.residual.agree


def test_the_streamed_residual_is_the_trace_and_the_direct_sum():
    X = randn(30, 6, seed=5)
    delta, delta_hat = randn(4, 6, seed=6), (randn(4, 2, seed=7), randn(2, 6, seed=8), 2.0)
    moments = streamed(X, [11, 19])
    direct = float(((X @ (delta - 2.0 * delta_hat[0] @ delta_hat[1]).mT) ** 2).sum()) / 30
    got = output_residual(delta, delta_hat, moments)
    assert got.direct == got.traced == pytest.approx(direct, rel=1e-11)
    assert got.raw == pytest.approx(30 * direct, rel=1e-11)


def test_bad_moments_are_refused():
    with pytest.raises(ValueError, match="width 3; allowed: 4"):
        InputMoments.zeros(4).add(torch.ones(2, 3, dtype=F64))
    with pytest.raises(ValueError, match="N >= 1"):
        covariance_support(InputMoments.zeros(4))
    moments = streamed(randn(5, 4), [5])
    with pytest.raises(ValueError, match=r"\[N, 6\]"):
        output_residual(randn(3, 6), randn(3, 6), moments)
