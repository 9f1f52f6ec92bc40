"""Tests for gaugelab.linalg.random: Haar orthogonal matrices, the QR factor as drawn, and
orthonormal bases."""

import pytest
import torch

from gaugelab.linalg import haar_orthogonal, orthonormal_basis
from gaugelab.linalg.random import qr_orthogonal

EXACT = 1e-11
F64 = torch.float64


def gen(seed):
    return torch.Generator().manual_seed(seed)


def close(actual, expected, atol=EXACT):
    torch.testing.assert_close(actual, expected, rtol=0, atol=atol)


@pytest.mark.parametrize("k", [1, 2, 5, 16])
def test_haar_sample_is_orthogonal(k):
    Q = haar_orthogonal(k, generator=gen(0), batch=(3,))
    assert Q.shape == (3, k, k) and Q.dtype == F64
    close(Q.mT @ Q, torch.eye(k, dtype=F64).expand(3, k, k))


def test_haar_is_deterministic_given_the_generator_seed():
    assert torch.equal(haar_orthogonal(5, generator=gen(3)), haar_orthogonal(5, generator=gen(3)))
    # None means a fresh generator seeded 0
    assert torch.equal(haar_orthogonal(5), haar_orthogonal(5, generator=gen(0)))


def test_haar_different_seeds_differ():
    first, second = haar_orthogonal(5, generator=gen(1)), haar_orthogonal(5, generator=gen(2))
    assert (first - second).abs().max() > 0.1


def test_haar_never_touches_the_global_rng():
    before = torch.get_rng_state()
    haar_orthogonal(4, generator=gen(0), batch=(10,))
    haar_orthogonal(4)
    assert torch.equal(torch.get_rng_state(), before)


def test_sign_fix_gives_the_qr_factor_with_positive_diagonal_r():
    Z = torch.randn(6, 6, generator=gen(9), dtype=F64)  # the same draw haar_orthogonal makes
    Q = haar_orthogonal(6, generator=gen(9))
    R = Q.mT @ Z  # Z = Q R with R upper triangular and diag(R) > 0
    close(torch.tril(R, diagonal=-1), torch.zeros(6, 6, dtype=F64))
    assert (torch.diagonal(R) > 0).all()
    close(Q @ R, Z)


def test_haar_entry_moments_and_determinants_over_4000_draws():
    k, n = 4, 4000
    Q = haar_orthogonal(k, generator=gen(2024), batch=(n,))
    q00 = Q[:, 0, 0]
    # Haar: Q[0,0] is symmetric with E = 0, Var = 1/k = 0.25 (SE 0.0079); Q[0,0]² ~ Beta(1/2, 3/2)
    # with mean 1/k and Var 1/16 (SE 0.0040). Tolerances are 5 standard errors.
    assert abs(q00.mean().item()) < 0.04
    assert abs((q00**2).mean().item() - 1 / k) < 0.02
    det = torch.linalg.det(Q)
    close(det.abs(), torch.ones(n, dtype=F64))
    frac_positive = (det > 0).double().mean().item()
    assert abs(frac_positive - 0.5) < 0.04  # both signs, each about half (SE 0.0079)


def test_haar_honours_dtype_and_int_batch():
    Q = haar_orthogonal(3, generator=gen(0), dtype=torch.float32, batch=7)
    assert Q.shape == (7, 3, 3) and Q.dtype == torch.float32


@pytest.mark.parametrize("k", [0, -2])
def test_haar_rejects_k_below_one(k):
    with pytest.raises(ValueError, match=rf"haar_orthogonal: k .*{k}"):
        haar_orthogonal(k)


def test_haar_rejects_integer_dtype():
    with pytest.raises(ValueError, match="int64"):
        haar_orthogonal(3, dtype=torch.int64)


def test_qr_orthogonal_is_the_qr_factor_of_the_same_draw_exactly_without_sign_fix():
    g = gen(777)
    expected = [torch.linalg.qr(torch.randn(16, 16, generator=g))[0] for _ in range(3)]
    drawn = qr_orthogonal(16, generator=gen(777), dtype=torch.float32, batch=3)
    assert drawn.dtype == torch.float32
    assert torch.equal(drawn, torch.stack(expected))  # the same stream, bit for bit
    eye = torch.eye(16).expand(3, 16, 16)
    assert float((drawn.mT @ drawn - eye).abs().max()) <= 1e-6
    Z = torch.randn(16, 16, generator=gen(777))
    R = drawn[0].mT @ Z
    assert (torch.diagonal(R) < 0).any()  # no sign fix: haar_orthogonal would flip these columns


def test_qr_orthogonal_draws_in_float32_and_factors_in_float64():
    Q = qr_orthogonal(16, generator=gen(777), dtype=F64, draw_dtype=torch.float32)
    Z = torch.randn(16, 16, generator=gen(777)).to(F64)  # the float32 stream, cast
    assert Q.dtype == F64 and torch.equal(Q, torch.linalg.qr(Z)[0])
    close(Q.mT @ Q, torch.eye(16, dtype=F64))  # orthogonal to float64 round-off
    single = qr_orthogonal(16, generator=gen(777), dtype=torch.float32)
    assert float((Q - single.double()).abs().max()) <= 1e-5  # the same matrix, other round-off


def test_qr_orthogonal_rejects_bad_arguments_naming_them():
    with pytest.raises(ValueError, match="qr_orthogonal: k"):
        qr_orthogonal(0)
    with pytest.raises(ValueError, match="qr_orthogonal: draw_dtype"):
        qr_orthogonal(3, draw_dtype=torch.int32)
    with pytest.raises(TypeError, match="qr_orthogonal: generator"):
        qr_orthogonal(3, generator=7)


def test_orthonormal_basis_reveals_rank_and_spans_the_column_space():
    g = gen(5)
    X = torch.randn(7, 2, generator=g, dtype=F64) @ torch.randn(2, 5, generator=g, dtype=F64)
    B = orthonormal_basis(X)
    assert B.shape == (7, 2)
    close(B.mT @ B, torch.eye(2, dtype=F64))
    close(B @ (B.mT @ X), X)  # projecting onto span(B) leaves X unchanged


def test_orthonormal_basis_full_rank_zero_and_rtol():
    X = torch.diag(torch.tensor([1.0, 1e-3, 1e-16], dtype=F64))
    assert orthonormal_basis(X).shape == (3, 2)  # 1e-16 < 3·eps ≈ 6.7e-16: numerically zero
    assert orthonormal_basis(X, rtol=1e-2).shape == (3, 1)
    assert orthonormal_basis(X, rtol=0.0).shape == (3, 3)
    assert orthonormal_basis(torch.zeros(4, 3, dtype=F64)).shape == (4, 0)


def test_orthonormal_basis_rejects_batched_input():
    with pytest.raises(ValueError, match=r"orthonormal_basis: X .*\(2, 3, 3\)"):
        orthonormal_basis(torch.zeros(2, 3, 3, dtype=F64))
