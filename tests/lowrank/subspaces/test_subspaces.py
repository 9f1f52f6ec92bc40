"""Tests for gaugelab.lowrank.subspaces.compare (seed 003 §0x06): principal angles, overlaps,
coverages,
distances, baselines, Procrustes, φ, and the gauge invariance of every comparison."""

import math
from fractions import Fraction as Fr

import numpy as np
import pytest
import scipy.linalg
import torch

from gaugelab.lowrank.subspaces.compare import (
    compare_updates,
    haar_baseline,
    haar_null,
    lora_phi,
    phi_matrix,
    principal_angles,
    procrustes_align,
    update_bases,
)

pytestmark = pytest.mark.usefixtures("strict_dtypes")

EXACT = 1e-11
F64 = torch.float64
E6 = torch.eye(6, dtype=F64)


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=F64)


def cols(*vectors):
    return torch.stack(list(vectors), dim=1)


def approx(value, expected, tol=EXACT):
    assert abs(float(value) - float(expected)) <= tol, (float(value), float(expected))


# §0x06E: base row space span(e1, e2) in R⁶ against four alternatives.
BASE = cols(E6[0], E6[1])
LEDGER = {
    # case: (Q_T, cosines, Ω_min, d_chord², ‖P_S − P_T‖_F²)
    "identical": (BASE, (1, 1), Fr(1), Fr(0), Fr(0)),
    "3-4-5": (cols(0.6 * E6[0] + 0.8 * E6[2], E6[1]), (1, Fr(3, 5)), Fr(17, 25), Fr(16, 25),
              Fr(32, 25)),
    "one shared": (cols(E6[0], E6[2]), (1, 0), Fr(1, 2), Fr(1), Fr(2)),
    "orthogonal": (cols(E6[2], E6[3]), (0, 0), Fr(0), Fr(2), Fr(4)),
}  # fmt: skip


@pytest.mark.parametrize("case", list(LEDGER))
def test_principal_angle_ledger_matches_the_exact_rationals(case):
    Q_T, cosines, overlap, chordal, projector = LEDGER[case]
    c = principal_angles(BASE, Q_T)
    for got, want in zip(c.cosines.tolist(), cosines, strict=True):
        approx(got, want)
    for got, want in zip(c.angles.tolist(), cosines, strict=True):
        approx(got, math.acos(want))
    approx(c.min_rank_overlap, overlap)
    approx(c.chordal_squared, chordal)
    approx(c.projector_squared, projector)
    approx(c.projection_mass, 2 * overlap)  # p = 2
    approx(c.chordal_squared, 2 - c.projection_mass)  # d_chord² = p − M
    assert float(c.cosine_excess) >= 0


def test_containment_gives_overlap_one_and_directed_coverages_one_and_half():
    c = principal_angles(cols(E6[0]), BASE)  # S = span(e1) ⊂ T = span(e1, e2)
    approx(c.projection_mass, 1)
    approx(c.min_rank_overlap, 1)
    approx(c.coverage_s_by_t, 1)  # C(S|T) = M / r_S
    approx(c.coverage_t_by_s, Fr(1, 2))  # C(T|S) = M / r_T
    approx(c.projector_squared, 1)  # r_S + r_T − 2M = 1 + 2 − 2


def test_haar_baseline_is_exact_for_d6_ranks_2_and_3():
    b = haar_baseline(6, 2, 3)
    assert b.projection_mass == Fr(1)  # r_S r_T / d = 6/6
    assert b.min_rank_overlap == Fr(1, 2)  # max(r_S, r_T)/d = 3/6
    assert (b.coverage_s_by_t, b.coverage_t_by_s) == (Fr(1, 2), Fr(1, 3))
    assert b.projector_squared == Fr(3)  # 2 + 3 − 2·1
    c = principal_angles(randn(6, 2), randn(6, 3, seed=1))  # the same baseline, in the result
    approx(c.haar_mass, 1)
    approx(c.haar_overlap, 0.5)


def test_monte_carlo_null_agrees_with_the_haar_baseline_within_its_error():
    null = haar_null(12, 2, 3, samples=2000, seed=3)
    assert abs(null.mass_mean - 0.5) < 5 * null.mass_stderr  # E[M] = 2·3/12
    assert null.overlap_quantiles[0] < null.overlap_mean < null.overlap_quantiles[2]
    again = haar_null(12, 2, 3, samples=2000, seed=3)
    assert again.mass_mean == null.mass_mean  # seeded: bitwise repeatable
    assert haar_null(12, 2, 3, samples=2000, seed=4).mass_mean != null.mass_mean


def test_ninety_degree_basis_rotation_raw_four_projector_and_aligned_zero():
    Q_S = BASE
    Q_T = cols(E6[1], -E6[0])  # the same span, basis rotated by 90°
    fit = procrustes_align(Q_S, Q_T)
    approx(fit.raw_squared, 4)  # ‖[e1 − e2, e2 + e1]‖_F² = 2 + 2
    approx(fit.aligned_squared, 0)
    approx(fit.closed_form, 0)  # 2r − 2Σcos θ
    approx((Q_S @ Q_S.T - Q_T @ Q_T.T).square().sum(), 0)  # projector difference
    approx(principal_angles(Q_S, Q_T).projector_squared, 0)


def test_procrustes_fit_equals_its_closed_form_on_random_bases():
    Q_S = torch.linalg.qr(randn(20, 4))[0]
    Q_T = torch.linalg.qr(randn(20, 4, seed=1))[0]
    fit = procrustes_align(Q_S, Q_T)
    angles = principal_angles(Q_S, Q_T).angles
    approx(fit.aligned_squared, fit.closed_form, 1e-9)
    approx(fit.closed_form, 8 - 2 * torch.cos(angles).sum(), 1e-9)
    torch.testing.assert_close(fit.rotation.T @ fit.rotation, torch.eye(4, dtype=F64))


def test_factor_gauge_changes_factor_norms_2_3_1_but_not_the_comparison():
    B = torch.tensor([[5.0, 0], [0, 2], [0, 0], [0, 0]], dtype=F64)
    A = E6[:2]
    G = torch.tensor([[1.0, 1], [0, 1]], dtype=F64)
    G_inv = torch.tensor([[1.0, -1], [0, 1]], dtype=F64)
    B2, A2 = B @ G, G_inv @ A
    torch.testing.assert_close(B2 @ A2, B @ A, rtol=0, atol=0)
    approx(A.square().sum(), 2)  # ‖A‖_F²
    approx(A2.square().sum(), 3)  # ‖A'‖_F²
    approx((A - A2).square().sum(), 1)  # ‖A − A'‖_F²
    rep = compare_updates((B, A), (B2, A2))
    for side in (rep.row, rep.column, rep.factor_row, rep.factor_column):
        approx(side.min_rank_overlap, 1)
        approx(side.projector_squared, 0)
        assert side.angles.abs().max() <= EXACT


def test_tiny_angle_is_exact_beside_a_large_one_where_arccos_returns_zero():
    t = 1e-9
    Q_T = cols(
        math.cos(t) * E6[0] + math.sin(t) * E6[2], math.cos(1.0) * E6[1] + math.sin(1.0) * E6[3]
    )
    c = principal_angles(BASE, Q_T)
    assert abs(c.angles[0].item() / t - 1) < 1e-6
    approx(c.angles[1], 1.0, 1e-14)
    assert math.acos(min(1.0, c.cosines[0].item())) == 0.0  # the cosine alone has lost it
    approx(c.chordal_squared, math.sin(t) ** 2 + math.sin(1.0) ** 2, 1e-15)


def test_tiny_angles_inside_a_cluster_of_equal_cosines_are_both_resolved():
    # cos θ = 1 − 5e-19 rounds to 1 for both, so the cross matrix is the identity: the sines
    # must come from the residual's singular values, not from one SVD's arbitrary vectors.
    t1, t2 = 2e-9, 1e-9
    Q_T = cols(
        math.cos(t1) * E6[0] + math.sin(t1) * E6[2], math.cos(t2) * E6[1] + math.sin(t2) * E6[3]
    )
    angles = principal_angles(BASE, Q_T).angles
    assert abs(angles[0].item() / t2 - 1) < 1e-6 and abs(angles[1].item() / t1 - 1) < 1e-6


def test_cosine_excess_is_recorded_before_clipping():
    Q = BASE * (1 + 1e-7)  # slightly non-orthonormal: raw cosines 1 + 2e-7
    c = principal_angles(Q, Q)
    approx(c.cosine_excess, 2e-7 + 1e-14, 1e-12)
    assert c.cosines.max() <= 1.0


def test_angles_agree_with_scipy_on_random_subspaces_of_unequal_rank():
    for seed, (d, r_s, r_t) in enumerate([(30, 5, 3), (30, 3, 5), (8, 4, 4)]):
        Q_S, Q_T = randn(d, r_s, seed=seed), randn(d, r_t, seed=seed + 10)
        c = principal_angles(torch.linalg.qr(Q_S)[0], torch.linalg.qr(Q_T)[0])
        ref = np.sort(scipy.linalg.subspace_angles(Q_S.numpy(), Q_T.numpy()))
        np.testing.assert_allclose(c.angles.numpy(), ref, rtol=0, atol=1e-12)


def test_batched_comparison_equals_member_by_member_with_different_ranks():
    Q_S = torch.linalg.qr(randn(4, 25, 6))[0]
    Q_T = torch.linalg.qr(randn(4, 25, 5, seed=1))[0]
    r_s, r_t = torch.tensor([6, 2, 0, 4]), torch.tensor([5, 5, 3, 1])
    batch = principal_angles(Q_S, Q_T, rank_s=r_s, rank_t=r_t)
    for i in range(4):
        one = principal_angles(Q_S[i, :, : r_s[i]], Q_T[i, :, : r_t[i]])
        member = batch.member(i)
        torch.testing.assert_close(member.angles, one.angles, rtol=0, atol=1e-12)
        for name in ("projection_mass", "projector_squared", "chordal_squared"):
            approx(getattr(member, name), getattr(one, name))


def test_rank_zero_update_has_the_documented_result():
    c = principal_angles(BASE, BASE, rank_s=0)
    assert c.angles.numel() == 2 and not c.valid.any()
    approx(c.projection_mass, 0)
    approx(c.chordal_squared, 0)
    approx(c.projector_squared, 2)  # r_S + r_T
    assert math.isnan(c.min_rank_overlap) and math.isnan(c.coverage_s_by_t)
    approx(c.coverage_t_by_s, 0)  # M / r_T = 0 / 2
    rep = compare_updates(torch.zeros(4, 6, dtype=F64), torch.ones(4, 6, dtype=F64))
    assert int(rep.row.rank_s) == 0 and int(rep.row.rank_t) == 1
    assert math.isnan(rep.row.min_rank_overlap)


def test_angles_are_invariant_under_factor_gauge_and_ambient_rotations_and_symmetric():
    B, A = randn(12, 3), randn(3, 9, seed=1)
    B2, A2 = randn(12, 4, seed=2), randn(4, 9, seed=3)
    G = randn(3, 3, seed=4) + 3 * torch.eye(3, dtype=F64)
    O_out = torch.linalg.qr(randn(12, 12, seed=5))[0]
    O_in = torch.linalg.qr(randn(9, 9, seed=6))[0]
    ref = compare_updates((B, A, 0.5), (B2, A2, 2.0))
    gauged = compare_updates((B @ G, torch.linalg.solve(G, A), 0.5), (B2, A2, 2.0))
    rotated = compare_updates((O_out @ B, A @ O_in.T, 0.5), (O_out @ B2, A2 @ O_in.T, 2.0))
    swapped = compare_updates((B2, A2, 2.0), (B, A, 0.5))
    for other in (gauged, rotated, swapped):
        for side in ("row", "column"):
            torch.testing.assert_close(
                getattr(other, side).angles, getattr(ref, side).angles, rtol=0, atol=1e-10
            )
    approx(swapped.row.coverage_s_by_t, ref.row.coverage_t_by_s)  # the directed pair swaps


def test_factor_span_and_update_span_differ_when_a_factor_collapses():
    A = E6[:2]  # row(A) = span(e1, e2)
    B = torch.tensor([[1.0, 0], [0, 0], [0, 0], [0, 0]], dtype=F64)  # B kills A's 2nd row
    bases = update_bases((B, A))
    assert int(bases.rank) == 1 and int(bases.factor_row_rank) == 2
    rep = compare_updates((B, A), (torch.ones(4, 2, dtype=F64), A))
    approx(rep.factor_row.min_rank_overlap, 1)  # both A's are span(e1, e2)
    approx(rep.row.coverage_t_by_s, Fr(1, 2))  # row(BA) = span(e1) vs row(1·1ᵀA) = e1 + e2


def test_update_bases_follow_the_declared_rank_policy():
    D = torch.zeros(4, 6, dtype=F64)
    for i, v in enumerate([4.0, 3.0, 2.0, 1e-20]):
        D[i, i] = v
    assert int(update_bases(D).rank) == 3  # numerical: 1e-20 < 6·eps·4
    assert int(update_bases(D, policy="algebraic").rank) == 4
    assert int(update_bases(D, policy="energy", rho=0.85).rank) == 2  # 16/29 < 0.85 ≤ 25/29
    assert int(update_bases(D, policy=1).rank) == 1
    assert update_bases(D).policy.policy_id.startswith("numerical")
    with pytest.raises(ValueError, match="policy='configured' needs factors"):
        update_bases(D, policy="configured")
    with pytest.raises(ValueError, match="allowed: numerical, algebraic"):
        update_bases(D, policy="spectral")


def test_factor_space_bases_span_the_dense_svd_bases():
    B, A = randn(2, 40, 3), randn(2, 3, 30, seed=1)
    fac = update_bases((B, A, 0.25))
    dense = update_bases(0.25 * (B @ A))
    c = principal_angles(fac.row, dense.row, rank_s=fac.rank, rank_t=dense.rank)
    assert fac.svd.method == "factored" and dense.svd.method == "dense"
    assert fac.rank.tolist() == [3, 3]
    assert c.angles.abs().max() < 1e-7


def test_lora_phi_of_nested_factors_and_its_baseline():
    A64 = (
        torch.linalg.qr(randn(32, 8))[0].T
        * torch.tensor([8.0, 7, 6, 5, 4, 3, 2, 1], dtype=F64)[:, None]
    )  # [8, 32]
    A4 = A64[:4] * 2  # the same leading directions
    phi = lora_phi(A4, A64)
    approx(phi.phi[0, 0], 1)  # the top direction is shared
    torch.testing.assert_close(phi.phi, torch.ones(4, 8, dtype=F64), rtol=0, atol=1e-12)
    approx(phi.baseline[1, 4], Fr(5, 32))  # max(i, j)/d at i = 2, j = 5
    other = lora_phi(randn(4, 32, seed=9), A64)
    assert 0 <= other.phi.min() and other.phi.max() <= 1
    Bs = lora_phi(randn(32, 4, seed=1), randn(32, 8, seed=2), side="column")
    assert tuple(Bs.phi.shape) == (4, 8) and Bs.side == "column"
    # φ(i, j) = ‖Q_iᵀ Q_j‖² / min(i, j), checked at one cell by hand
    Q1, Q2 = torch.linalg.qr(randn(10, 3, seed=3))[0], torch.linalg.qr(randn(10, 4, seed=4))[0]
    approx(phi_matrix(Q1, Q2).phi[1, 2], (Q1[:, :2].T @ Q2[:, :3]).square().sum() / 2)


def test_bad_inputs_name_the_argument():
    with pytest.raises(ValueError, match="rank_s"):
        principal_angles(BASE, BASE, rank_s=3)
    with pytest.raises(ValueError, match="one ambient dimension"):
        principal_angles(BASE, torch.zeros(5, 2, dtype=F64))
    with pytest.raises(ValueError, match="NaN"):
        principal_angles(BASE * math.nan, BASE)
    with pytest.raises(ValueError, match="exceed d=6"):
        haar_baseline(6, 7, 1)
    with pytest.raises(ValueError, match="side="):
        lora_phi(BASE.T, BASE.T, side="left")
