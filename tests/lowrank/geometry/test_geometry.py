"""Factor-map geometry: the 4×6, r = 2 reconciliation and the B = 0 point exactly (seed 003
§0x03I–L), the one-field mutations rejected, and float64 agreement with the exact forms."""

from __future__ import annotations

import pytest
import torch
from tests.support import geometry_oracle as oracle

from gaugelab.linalg.rational import Matrix as M
from gaugelab.lowrank.geometry import factor_map as geo

B, A, PROBE = oracle.fixture()

pytestmark = pytest.mark.usefixtures("strict_dtypes")  # float tests fail on silent promotion


def test_fixture_is_the_seeds():
    assert B @ A == M([[1, 0, 0, 0, 0, 0], [0, 1, 0, 0, 0, 0], [0] * 6, [0] * 6])
    assert PROBE.flatten() == tuple(range(1, 25))


def test_dimension_ledger_three_ways():
    d = geo.fixed_rank_dimension(4, 6, 2)
    assert (d.ambient, d.factor, d.gauge, d.normal) == (24, 20, 4, 8)
    assert d.via_subspaces == d.via_fibre == d.via_jacobian == 16  # 2(4+6−2)
    assert d.via_subspaces + d.normal == d.ambient  # tangent + normal = 24
    assert d.factor - d.gauge == 16


@pytest.mark.parametrize(("m", "n", "r"), [(3, 5, 1), (5, 3, 3), (4, 4, 2), (2, 7, 2)])
def test_fixed_rank_dimension_agrees_across_shapes(m, n, r):
    d = geo.fixed_rank_dimension(m, n, r)
    assert d.via_subspaces == d.via_fibre == d.via_jacobian == r * (m + n - r)
    assert m * n == r * (m + n - r) + (m - r) * (n - r)
    assert d.jacobian_method == "exact"


def test_fixed_rank_dimension_large_shape_uses_the_svd():
    d = geo.fixed_rank_dimension(12, 16, 4)
    assert d.jacobian_method == "svd" and d.via_jacobian == d.via_fibre == 4 * (12 + 16 - 4)


def test_jacobian_rank_16_nullity_4():
    J = geo.factor_map_jacobian(B, A)
    assert J.shape == (24, 20)
    result = geo.jacobian_rank(B, A)
    assert (result.rank, result.nullity, result.method, result.tol) == (16, 4, "exact", None)


def test_jacobian_columns_follow_the_declared_flattening():
    J = geo.factor_map_jacobian(B, A)
    # B coordinate (0, 0) is column 0: Ḃ = E_00 gives Ḃ A = row 0 of A in row 0 of W
    assert [J[k, 0] for k in range(24)] == [1, 0, 0, 0, 0, 0] + [0] * 18
    # A coordinate (1, 3) is column 8 + 1·6 + 3 = 17: B Ȧ puts B[:, 1] in column 3 → W[1, 3]
    assert [k for k in range(24) if J[k, 17] != 0] == [1 * 6 + 3]
    kron = M.hstack([M.identity(4).kron(A.T), B.kron(M.identity(6))])
    assert kron == J


def test_gauge_directions_span_the_kernel():
    K = geo.gauge_directions(B, A)
    assert K.shape == (20, 4)
    assert (geo.factor_map_jacobian(B, A) @ K).is_zero()
    assert geo.exact_rank(K) == 4  # nullity 4, so they span ker Dφ


def test_shear_gauge_changes_factors_not_product():
    Q, Q_inv = M([[1, 1], [0, 1]]), M([[1, -1], [0, 1]])
    assert Q @ Q_inv == M.identity(2)
    assert (B @ Q) @ (Q_inv @ A) == B @ A and B @ Q != B


def test_tangent_and_normal_of_the_probe_exactly_as_printed():
    U, V = B, A.T
    PT, PN = geo.tangent_project(PROBE, U, V), geo.normal_project(PROBE, U, V)
    assert PT == M(
        [[1, 2, 3, 4, 5, 6], [7, 8, 9, 10, 11, 12], [13, 14, 0, 0, 0, 0], [19, 20, 0, 0, 0, 0]]
    )
    assert PN == M([[0] * 6, [0] * 6, [0, 0, 15, 16, 17, 18], [0, 0, 21, 22, 23, 24]])
    assert PT + PN == PROBE and PT.inner(PN) == 0
    assert geo.is_normal(B, A, PN) and not geo.is_normal(B, A, PT)


def test_projector_operators_symmetric_idempotent_with_ranks_16_and_8():
    PT = geo.tangent_projector_operator(B, A.T)
    PN = geo.normal_projector_operator(B, A.T)
    assert PT == PT.T and PT @ PT == PT and geo.exact_rank(PT) == 16
    assert PN == PN.T and PN @ PN == PN and geo.exact_rank(PN) == 8
    assert PT + PN == M.identity(24)


def test_adjoint_exact_dot_product_parity():
    gB, gA = geo.factor_map_adjoint(B, A, PROBE)
    J = geo.factor_map_jacobian(B, A)
    assert J.T @ M.column(PROBE.flatten()) == geo.flatten_factors(gB, gA)
    dB, dA = M([[1, 2], [0, -1], [3, 1], [2, 2]]), M([[1, 0, -2, 0, 1, 1], [0, 5, 0, 1, 0, 2]])
    lhs = PROBE.inner(geo.factor_map_differential(B, A, dB, dA))
    assert lhs == gB.inner(dB) + gA.inner(dA)


def test_lower_rank_point_rank_8_nullity_12():
    result = geo.jacobian_rank(M.zeros(4, 2), A)
    assert (result.rank, result.nullity) == (8, 12)  # mr: every Ȧ direction vanishes


def test_flatten_round_trip():
    dB, dA = (
        M([[1, 2], [3, 4], [5, 6], [7, 8]]),
        M([[9, 10, 11, 12, 13, 14], [15, 16, 17, 18, 19, 20]]),
    )
    vec = geo.flatten_factors(dB, dA)
    assert vec.flatten() == tuple(range(1, 21))
    assert geo.unflatten_factors(vec, 4, 2, 6) == (dB, dA)


def test_orthogonal_projectors_from_non_orthonormal_factors():
    Bn, An = M([[1, 1], [0, 2], [0, 0], [0, 0]]), M([[1, 0, 1, 0, 0, 0], [0, 1, 0, 0, 0, 3]])
    PU, PV = geo.orthogonal_projectors(Bn, An)
    assert PU @ PU == PU and PU == PU.T and PU @ Bn == Bn
    assert PV @ PV == PV and PV == PV.T and An @ PV == An
    with pytest.raises(ValueError, match="full-rank"):
        geo.orthogonal_projectors(M([[1, 2], [2, 4]]), M.identity(2))


def test_reference_implementation_passes_every_oracle_check():
    assert oracle.rejected_by(oracle.REFERENCE) == []


@pytest.mark.parametrize("name", sorted(oracle.MUTATIONS))
def test_every_single_mutation_is_rejected(name):
    _, impl = oracle.MUTATIONS[name]
    assert oracle.rejected_by(impl), f"mutation {name} passed every check"


@pytest.mark.parametrize(
    ("name", "check"),
    [
        ("ambient-column-major", "jacobian-is-declared-kronecker-form"),
        ("factors-swapped", "jacobian-is-declared-kronecker-form"),
        ("adjoint-without-transpose", "adjoint-parity-square"),
        ("B-in-place-of-Bt", "adjoint-parity-square"),
        ("gauge-sign", "gauge-directions-span-kernel"),
        ("differential-with-remainder", "differential-agrees-with-jacobian"),
    ],
)
def test_named_mutations_fail_the_check_that_targets_them(name, check):
    assert check in oracle.rejected_by(oracle.MUTATIONS[name][1])


def _random(shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_float64_jacobian_equals_the_exact_construction():
    Bt, At = M([[1, 2], [0, 1], [3, -1], [2, 2]]), M([[1, 0, 2, -1, 0, 1], [0, 3, 1, 0, 1, 0]])
    J_exact = geo.factor_map_jacobian(Bt, At).to_tensor()
    torch.testing.assert_close(
        geo.factor_map_jacobian(Bt.to_tensor(), At.to_tensor()), J_exact, rtol=0, atol=0
    )


def test_float64_jacobian_against_autograd():
    Bt, At = _random((4, 2), 0), _random((2, 6), 1)
    J_auto = torch.autograd.functional.jacobian(
        lambda v: (v[:8].reshape(4, 2) @ v[8:].reshape(2, 6)).reshape(-1),
        torch.cat([Bt.reshape(-1), At.reshape(-1)]),
    )
    torch.testing.assert_close(geo.factor_map_jacobian(Bt, At), J_auto, rtol=0, atol=1e-12)


def test_float64_generic_point_rank_with_stated_tolerance():
    Bt, At = _random((5, 3), 2), _random((3, 7), 3)
    result = geo.jacobian_rank(Bt, At)
    assert (result.rank, result.nullity, result.method) == (3 * (5 + 7 - 3), 9, "svd")
    assert result.tol is not None and result.tol > 0
    K = geo.gauge_directions(Bt, At)
    assert float((geo.factor_map_jacobian(Bt, At) @ K).abs().max()) < 1e-12


def test_float64_projectors_on_a_random_rank_r_point():
    Bt, At = _random((5, 2), 4), _random((2, 6), 5)
    U, _, Vh = torch.linalg.svd(Bt @ At, full_matrices=False)
    U, V = U[:, :2], Vh[:2].T
    Z = _random((5, 6), 6)
    PT, PN = geo.tangent_project(Z, U, V), geo.normal_project(Z, U, V)
    torch.testing.assert_close(PT + PN, Z, rtol=0, atol=1e-12)
    assert abs(float((PT * PN).sum())) < 1e-11
    assert geo.is_normal(Bt, At, PN)
    PU, PV = geo.orthogonal_projectors(Bt, At)
    torch.testing.assert_close(PU, U @ U.T, rtol=0, atol=1e-11)
    torch.testing.assert_close(PV, V @ V.T, rtol=0, atol=1e-11)
    # the image of Dφ is the tangent space: P_T fixes Ḃ A + B Ȧ
    W = geo.factor_map_differential(Bt, At, _random((5, 2), 7), _random((2, 6), 8))
    torch.testing.assert_close(geo.tangent_project(W, U, V), W, rtol=0, atol=1e-11)


def test_bad_inputs_name_the_argument():
    with pytest.raises(TypeError, match="exact_rank"):
        geo.exact_rank(torch.eye(2))
    with pytest.raises(ValueError, match="not orthonormal"):
        geo.tangent_project(PROBE, B * 2, A.T)
    with pytest.raises(ValueError, match="r=5"):
        geo.fixed_rank_dimension(4, 6, 5)
    with pytest.raises(ValueError, match="dB"):
        geo.factor_map_differential(B, A, A, A)
    with pytest.raises(ValueError, match="tol"):
        geo.svd_rank(torch.eye(3, dtype=torch.float64), tol=-1.0)
    with pytest.raises(ValueError, match="2-D"):
        geo.factor_map_jacobian(
            torch.zeros(2, 4, 2, dtype=torch.float64), torch.zeros(2, 2, 6, dtype=torch.float64)
        )


@pytest.mark.parametrize("seed", range(4))
def test_fraction_free_rank_agrees_with_float64_svd_on_integer_matrices(seed):
    gen = torch.Generator().manual_seed(seed)
    low = torch.randint(-3, 4, (6, 2), generator=gen) @ torch.randint(-3, 4, (2, 5), generator=gen)
    X = low + seed * torch.eye(6, 5, dtype=torch.long)  # rank 2 at seed 0, higher after
    exact = M(X.tolist())
    assert geo.exact_rank(exact) == geo.svd_rank(X.double())[0]
    assert geo.exact_rank(exact) == exact.rref()[0].rank() == len(exact.rref()[1])


def test_exact_inverse_and_singular_error():
    X = M([[2, 1, 0], [1, 3, 1], [0, 1, 4]])
    assert X @ X.inverse() == M.identity(3)
    with pytest.raises(ValueError, match="singular"):
        M([[1, 2], [2, 4]]).inverse()
