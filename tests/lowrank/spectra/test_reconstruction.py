"""Tests for gaugelab.lowrank.spectra.reconstruction and the factor-space SVD (seed 003 §0x04)."""

from fractions import Fraction as Fr

import pytest
import torch

from gaugelab.lowrank import (
    covariance_support,
    factored_svd,
    output_residual,
    output_weighted_rank_r,
    reconstruct_by_rank,
)

pytestmark = pytest.mark.usefixtures("strict_dtypes")

EXACT = 1e-11
LOOSE = 1e-9
F32, F64 = torch.float32, torch.float64


def close(actual, expected, atol=EXACT):
    torch.testing.assert_close(actual, expected, rtol=0, atol=atol)


def randn(*shape, seed=0, dtype=F64):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def diag(rows, cols, values):
    D = torch.zeros(rows, cols, dtype=F64)
    for i, v in enumerate(values):
        D[i, i] = v
    return D


DELTA = diag(4, 6, [4, 3, 2, 1])  # seed 003 §0x04D: ΔW*, σ = (4, 3, 2, 1), ‖ΔW*‖_F² = 30
X_SKEW = diag(4, 6, [1, 4, 2])  # §0x04H: the sensitivity probe, N = 4 rows (the last is zero)


def test_rank_sweep_of_the_4x6_fixture_is_seed_0x04D_exactly():
    sweep = reconstruct_by_rank(DELTA, range(5), matrix_id="matrix_delta:v1")
    # (r, Σ_{i≤r}σ²/30, Σ_{i≤r}σ/10, Σ_{i>r}σ², σ_{r+1}) in exact rationals
    table = [
        (0, Fr(0), Fr(0), 30, 4),
        (1, Fr(8, 15), Fr(2, 5), 14, 3),
        (2, Fr(5, 6), Fr(7, 10), 5, 2),
        (3, Fr(29, 30), Fr(9, 10), 1, 1),
        (4, Fr(1), Fr(1), 0, 0),
    ]
    assert [row.rank for row in sweep.rows] == [0, 1, 2, 3, 4]
    for row, (r, energy, mass, tail, spectral) in zip(sweep.rows, table, strict=True):
        assert row.retained_energy == pytest.approx(float(energy), abs=EXACT)
        assert row.retained_mass == pytest.approx(float(mass), abs=EXACT)
        assert row.frobenius_squared == pytest.approx(tail, abs=EXACT)
        assert row.frobenius_squared_direct == pytest.approx(tail, abs=EXACT)
        assert row.spectral == pytest.approx(spectral, abs=EXACT)
        assert not row.non_unique
        close(row.B @ row.A, diag(4, 6, [4, 3, 2, 1][:r]))  # the first r diagonal entries
    assert sweep.matrix_id == "matrix_delta:v1" and sweep.shape == (4, 6)
    assert sweep.svd.method == "dense" and sweep.svd.dtype == "torch.float64"


def test_ranks_past_the_end_have_zero_tail_zero_spectral_error_and_zero_padded_factors():
    (row,) = reconstruct_by_rank(DELTA, [6]).rows  # 6 > min(4, 6) = 4
    assert (row.spectral, row.frobenius_squared, row.retained_energy) == (0.0, 0.0, 1.0)
    assert row.B.shape == (4, 6) and row.A.shape == (6, 6)
    close(row.B[:, 4:], torch.zeros(4, 2, dtype=F64))
    close(row.B @ row.A, DELTA)


def test_balanced_and_unbalanced_factors_give_the_same_truncation():
    delta = randn(5, 7, seed=1)
    unbalanced = reconstruct_by_rank(delta, [3]).rows[0]
    balanced = reconstruct_by_rank(delta, [3], balance="balanced").rows[0]
    close(balanced.B @ balanced.A, unbalanced.B @ unbalanced.A)
    close(unbalanced.A @ unbalanced.A.mT, torch.eye(3, dtype=F64))  # A_r = V_rᵀ
    sigma = torch.linalg.svdvals(delta)[:3]
    # balanced: B_r = U_r Σ^{1/2}, A_r = Σ^{1/2} V_rᵀ, so both Gram matrices are Σ_r
    close(balanced.B.mT @ balanced.B, torch.diag(sigma))
    close(balanced.A @ balanced.A.mT, torch.diag(sigma))


def test_a_tie_at_the_boundary_flags_the_truncation_as_non_unique():
    sweep = reconstruct_by_rank(diag(4, 4, [3, 2, 2, 1]), range(5))
    assert [row.non_unique for row in sweep.rows] == [False, False, True, False, False]
    # a tie between two zero singular values leaves the truncated matrix unique (it is ΔW)
    zeros = reconstruct_by_rank(diag(3, 3, [2]), [1, 2])
    assert [row.non_unique for row in zeros.rows] == [False, False]


def test_identity_probe_mean_output_residuals_are_seed_0x0BM():
    X = torch.eye(6, dtype=F64)  # train_v1: C_X = I_6/6, so mean residual = Frobenius tail/6
    expected = [Fr(5), Fr(7, 3), Fr(5, 6), Fr(1, 6), Fr(0)]  # (30, 14, 5, 1, 0)/6
    for row, mean in zip(reconstruct_by_rank(DELTA, range(5)).rows, expected, strict=True):
        res = output_residual(DELTA, (row.B, row.A), X)
        assert res.raw == pytest.approx(row.frobenius_squared, abs=EXACT)
        assert res.direct == pytest.approx(float(mean), abs=EXACT)
        assert res.traced == pytest.approx(float(mean), abs=EXACT)
        assert res.agree and res.n_samples == 6
        # C = I/6: the whitened problem has the same truncation, so the same residual
        weighted = output_weighted_rank_r(DELTA, X, row.rank)
        assert weighted.residual.direct == pytest.approx(float(mean), abs=EXACT)


def test_x_skew_counterexample_is_seed_0x04H():
    weight = reconstruct_by_rank(DELTA, [1, 2]).rows
    weight_1 = output_residual(DELTA, (weight[0].B, weight[0].A), X_SKEW)
    weight_2 = output_residual(DELTA, (weight[1].B, weight[1].A), X_SKEW)
    optimal_1 = output_weighted_rank_r(DELTA, X_SKEW, 1, matrix_id="matrix_delta:v1")
    assert optimal_1.matrix_id == "matrix_delta:v1" and optimal_1.rank == 1
    # weight-SVD rank one keeps axis 1 (4 > 3): residual diag(0, 3, 2, 1) → rows 4·3, 2·2
    assert (weight_1.raw, weight_1.direct, weight_1.traced) == pytest.approx((160, 40, 40))
    # output-optimal keeps axis 2 with value 3: residual diag(4, 0, 2, 1) → rows 1·4, 2·2
    assert optimal_1.residual.raw == pytest.approx(32, abs=EXACT)  # 4² + 4²
    assert optimal_1.residual.direct == pytest.approx(8, abs=EXACT)
    assert optimal_1.residual.traced == pytest.approx(8, abs=EXACT)
    close(optimal_1.delta_r, diag(4, 6, [0, 3]))
    # weight-SVD rank two keeps axes 1 and 2: residual diag(0, 0, 2, 1) → row 2·2
    assert (weight_2.raw, weight_2.direct, weight_2.traced) == pytest.approx((16, 4, 4))
    assert weight_1.raw / optimal_1.residual.raw == pytest.approx(5, abs=EXACT)  # five times
    # C_skew = diag(1/4, 4, 1, 0, 0, 0); ΔW C^{1/2} = diag(2, 6, 2, 0)
    close(optimal_1.support.covariance, torch.diag(torch.tensor([0.25, 4, 1, 0, 0, 0], dtype=F64)))
    close(optimal_1.sigma, torch.tensor([6.0, 2.0, 2.0, 0.0], dtype=F64))
    assert optimal_1.support.rank == 3
    # axes 4–6 are invisible; ΔW's entry 1 on axis 4 is the part of the update no input sees
    close(
        optimal_1.support.invisible.abs().sum(dim=1), torch.tensor([0, 0, 0, 1, 1, 1.0], dtype=F64)
    )
    assert optimal_1.invisible_update_energy == pytest.approx(1, abs=EXACT)


def test_output_weighted_rank_two_on_x_skew_is_a_tie():
    result = output_weighted_rank_r(DELTA, X_SKEW, 2)
    # σ(M) = (6, 2, 2, 0): axes 1 and 3 tie at 2, so either completes axis 2; both leave 16
    assert result.non_unique
    assert result.residual.raw == pytest.approx(16, abs=EXACT)


def test_the_invisible_null_space_does_not_change_the_sampled_loss():
    X, delta = randn(5, 8, seed=2), randn(4, 8, seed=3)  # N = 5 < n = 8: three blind directions
    result = output_weighted_rank_r(delta, X, 2)
    Q0 = result.support.invisible
    assert Q0.shape == (8, 3)
    N0 = randn(4, 8, seed=4) @ Q0 @ Q0.mT  # rows in the invisible span
    close(N0 @ result.support.sqrt, torch.zeros(4, 8, dtype=F64))  # N0 C^{1/2} = 0
    shifted = output_residual(delta, result.delta_r + N0, X)
    assert shifted.direct == pytest.approx(result.residual.direct, abs=EXACT)
    # the returned representative is the minimum-norm one: nothing on the invisible span
    close(result.delta_r @ Q0, torch.zeros(4, 3, dtype=F64))
    assert torch.linalg.matrix_norm(result.delta_r + N0) > torch.linalg.matrix_norm(result.delta_r)


def test_output_weighted_truncation_is_eckart_young_on_the_whitened_update():
    X, delta = randn(40, 6, seed=5), randn(5, 6, seed=6)  # full-rank covariance
    for r in range(5):
        result = output_weighted_rank_r(delta, X, r)
        tail = float((result.sigma[r:] ** 2).sum())  # Σ_{i>r} σ_i(ΔW C^{1/2})²
        assert result.residual.direct == pytest.approx(tail, abs=EXACT)
        assert result.residual.traced == pytest.approx(tail, abs=EXACT)
        row = reconstruct_by_rank(delta, [r]).rows[0]
        assert output_residual(delta, (row.B, row.A), X).direct >= tail - EXACT
        for seed in range(5):  # no nearby rank-r candidate does better
            B = result.B + 1e-3 * randn(5, r, seed=10 + seed)
            A = result.A + 1e-3 * randn(r, 6, seed=20 + seed)
            assert output_residual(delta, (B, A), X).direct >= tail - EXACT


def test_covariance_support_drops_directions_at_or_below_the_tolerance_without_a_floor():
    X = diag(3, 4, [1, 2, 3])  # C = diag(1, 4, 9, 0)/3, eigenvalues exact
    support = covariance_support(X, support_tol=4 / 3)  # λ = 4/3 sits on the cut-off: dropped
    assert support.rank == 1 and support.invisible.shape == (4, 3)
    close(support.sqrt, torch.diag(torch.tensor([0, 0, 3**0.5, 0], dtype=F64)))  # √(9/3)
    close(support.pinv_sqrt, torch.diag(torch.tensor([0, 0, 3**-0.5, 0], dtype=F64)))
    default = covariance_support(X)
    assert default.rank == 3  # the zero column is dropped, never floored to a tiny eigenvalue
    close(default.sqrt @ default.sqrt, default.covariance)
    close(default.sqrt @ default.pinv_sqrt, torch.diag(torch.tensor([1, 1, 1, 0], dtype=F64)))
    assert default.support_tol == pytest.approx(3 * 4 * torch.finfo(F64).eps, abs=0)  # λ_max·n·eps


def test_zero_inputs_see_nothing_and_the_zero_update_retains_everything():
    result = output_weighted_rank_r(DELTA, torch.zeros(3, 6, dtype=F64), 2)
    assert result.support.rank == 0 and result.residual.raw == 0.0
    close(result.delta_r, torch.zeros(4, 6, dtype=F64))
    assert result.invisible_update_energy == pytest.approx(30, abs=EXACT)  # all of ‖ΔW‖_F²
    rows = reconstruct_by_rank(torch.zeros(3, 5, dtype=F64), [0, 2]).rows
    assert [(r.retained_energy, r.retained_mass, r.frobenius_squared) for r in rows] == [
        (1.0, 1.0, 0.0),
        (1.0, 1.0, 0.0),
    ]


@pytest.mark.parametrize(
    ("d_out", "d_in", "r", "deficient", "scale"),
    [(7, 5, 3, False, 0.5), (4, 6, 9, False, 2.0), (6, 5, 4, True, -1.5)],
    ids=["thin", "r-beyond-min", "rank-deficient-B"],
)
def test_factored_svd_equals_the_dense_svd_of_s_b_a(d_out, d_in, r, deficient, scale):
    B, A = randn(d_out, r, seed=7), randn(r, d_in, seed=8)
    if deficient:
        B[:, 2] = B[:, 0] + B[:, 1]  # rank(B) = 3 < r = 4
    dense = scale * (B @ A)
    U, S, V, record = factored_svd(B, A, scale)
    q = min(d_out, d_in, r)
    assert U.shape == (d_out, q) and S.shape == (q,) and V.shape == (d_in, q)
    close((U * S) @ V.mT, dense)
    close(U.mT @ U, torch.eye(q, dtype=F64))
    close(V.mT @ V, torch.eye(q, dtype=F64))
    U_d, S_d, Vh_d = torch.linalg.svd(dense, full_matrices=False)
    close(S, S_d[:q])
    close(S_d[q:], torch.zeros(S_d.shape[0] - q, dtype=F64))
    rank = 3 if deficient else q
    for i in range(rank):  # distinct nonzero σ_i: the same singular pair up to sign
        close(torch.outer(U[:, i], V[:, i]) * S[i], torch.outer(U_d[:, i], Vh_d[i]) * S_d[i])
    assert record.method == "factored" and record.dtype == "torch.float64" and record.exact


def test_factored_svd_is_batched_over_members_with_one_scale_each():
    B, A = randn(3, 6, 2, seed=9), randn(3, 2, 5, seed=10)
    scale = torch.tensor([1.0, -2.0, 0.5], dtype=F64)
    U, S, V, _ = factored_svd(B, A, scale)
    for e in range(3):
        close((U[e] * S[e]) @ V[e].mT, scale[e] * (B[e] @ A[e]))


def test_factors_and_dense_input_give_the_same_reconstruction():
    B, A, s = randn(6, 3, seed=11), randn(3, 8, seed=12), 0.25
    dense = s * (B @ A)
    from_factors = reconstruct_by_rank((B, A, s), [0, 1, 2, 3, 5], balance="balanced")
    from_dense = reconstruct_by_rank(dense, [0, 1, 2, 3, 5], balance="balanced")
    assert from_factors.svd.method == "factored"
    for f, d in zip(from_factors.rows, from_dense.rows, strict=True):
        assert f.frobenius_squared_direct is None
        for name in ("retained_energy", "retained_mass", "frobenius_squared", "spectral"):
            assert getattr(f, name) == pytest.approx(getattr(d, name), abs=EXACT)
        close(f.B @ f.A, d.B @ d.A)
    X = randn(5, 8, seed=13)  # N = 5 < 8: three invisible input directions
    weighted_f = output_weighted_rank_r((B, A, s), X, 2)
    weighted_d = output_weighted_rank_r(dense, X, 2)
    close(weighted_f.delta_r, weighted_d.delta_r)
    assert weighted_f.invisible_update_energy > 0.01  # a generic ΔW has some mass off the support
    assert weighted_f.invisible_update_energy == pytest.approx(
        weighted_d.invisible_update_energy, abs=EXACT
    )
    assert weighted_f.residual.direct == pytest.approx(weighted_d.residual.direct, abs=EXACT)
    assert weighted_f.residual.traced == pytest.approx(weighted_d.residual.traced, abs=EXACT)
    assert weighted_f.residual.agree


def test_float32_stays_float32():
    delta = randn(5, 4, seed=14, dtype=F32)
    row = reconstruct_by_rank(delta, [2]).rows[0]
    assert row.B.dtype == row.A.dtype == F32
    result = output_weighted_rank_r(delta, randn(9, 4, seed=15, dtype=F32), 2)
    assert result.delta_r.dtype == F32 and result.residual.agree
    assert result.svd.dtype == "torch.float32"


def test_errors_name_the_function_and_the_argument():
    with pytest.raises(ValueError, match="reconstruct_by_rank: unknown balance 'up'"):
        reconstruct_by_rank(DELTA, [1], balance="up")
    with pytest.raises(ValueError, match="reconstruct_by_rank: a rank must be an int >= 0"):
        reconstruct_by_rank(DELTA, [-1])
    with pytest.raises(ValueError, match="reconstruct_by_rank: delta must be one matrix"):
        reconstruct_by_rank(torch.zeros(2, 4, 6, dtype=F64), [1])
    with pytest.raises(ValueError, match=r"output_weighted_rank_r: X must be \[N, 6\]"):
        output_weighted_rank_r(DELTA, torch.zeros(3, 5, dtype=F64), 1)
    with pytest.raises(ValueError, match=r"in torch\.float64 to match delta"):
        output_weighted_rank_r(DELTA, torch.zeros(3, 6, dtype=F32), 1)
    with pytest.raises(ValueError, match="covariance_support: support_tol must be a number >= 0"):
        covariance_support(X_SKEW, support_tol=-1.0)
    with pytest.raises(ValueError, match="N >= 1"):
        covariance_support(torch.zeros(0, 6, dtype=F64))
    with pytest.raises(ValueError, match="output_residual: delta_hat must match"):
        output_residual(DELTA, torch.zeros(4, 5, dtype=F64), X_SKEW)
    with pytest.raises(ValueError, match=r"factored_svd: .* one r and one batch shape"):
        factored_svd(randn(4, 2), randn(3, 6))
    with pytest.raises(TypeError, match=r"factored_svd: .*scale must be a real number"):
        factored_svd(randn(4, 2), randn(2, 6), "2")
