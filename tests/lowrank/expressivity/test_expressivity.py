"""Expressivity ledgers: the seed 003 §0x0AB–0x0AT fixtures exactly, and the scope of each."""

from __future__ import annotations

import inspect
from fractions import Fraction as F

import pytest
import torch

from gaugelab.linalg.rational import Matrix as M
from gaugelab.lowrank.expressivity import ledgers as ex

E3 = M.diag([5, 3, 1]) - M.identity(3)  # W* − W0 = diag(4, 2, 0)

pytestmark = pytest.mark.usefixtures("strict_dtypes")  # float tests fail on silent promotion


def test_exact_adapter_rank_of_the_3x3_gap():
    assert E3 == M.diag([4, 2, 0])
    assert ex.exact_adapter_rank(E3) == 2


def test_padded_factorization_is_the_seeds_and_pads():
    B, A = ex.padded_factorization(E3, 2)
    assert B == M([[4, 0], [0, 2], [0, 0]]) and A == M([[1, 0, 0], [0, 1, 0]])
    B4, A4 = ex.padded_factorization(E3, 4)
    assert B4.shape == (3, 4) and A4.shape == (4, 3) and B4 @ A4 == E3
    with pytest.raises(ValueError, match="rank\\(E\\)=2"):
        ex.padded_factorization(E3, 1)


def test_padded_factorization_exact_on_a_dense_rational_gap():
    E = M([[1, 2, 3], [2, 4, 6], [F(1, 2), 0, 1]])  # rank 2
    B, A = ex.padded_factorization(E, 3)
    assert B @ A == E and ex.exact_adapter_rank(E) == 2


def test_padded_factorization_float64_uses_the_svd_construction():
    gen = torch.Generator().manual_seed(0)
    E = torch.randn(5, 2, generator=gen, dtype=torch.float64) @ torch.randn(
        2, 4, generator=gen, dtype=torch.float64
    )
    B, A = ex.padded_factorization(E, 3)
    torch.testing.assert_close(B @ A, E, rtol=0, atol=1e-12)
    assert float(B[:, 2].abs().max()) == 0 and float(A[2].abs().max()) == 0
    torch.testing.assert_close(
        B.T @ B, A @ A.T, rtol=0, atol=1e-12
    )  # balanced: Σ^{1/2} on both sides


def test_truncation_residual_ledger():
    assert ex.truncation_residuals(E3) == [20, 4, 0, 0]  # 4² + 2², 2², 0
    gen = torch.Generator().manual_seed(1)
    E = torch.randn(4, 3, generator=gen, dtype=torch.float64)
    res = ex.truncation_residuals(E)
    for r in range(4):  # Eckart–Young against the truncated SVD
        U, S, Vh = torch.linalg.svd(E, full_matrices=False)
        X = U[:, :r] @ torch.diag(S[:r]) @ Vh[:r]
        assert abs(res[r] - float(((E - X) ** 2).sum())) < 1e-12
    with pytest.raises(ValueError, match="float64"):
        ex.truncation_residuals(M([[1, 1], [0, 1]]))


# §0x04D's exact 4×6 matrix ΔW* (σ = 4, 3, 2, 1), the one §0x0BM's gate consumes
DW_4x6 = [[4, 0, 0, 0, 0, 0], [0, 3, 0, 0, 0, 0], [0, 0, 2, 0, 0, 0], [0, 0, 0, 1, 0, 0]]


def test_seed_0x0BM_truncation_residuals_of_the_4x6_matrix_exact_and_float_agree():
    exact = ex.truncation_residuals(M(DW_4x6))
    assert exact == [30, 14, 5, 1, 0]  # min(4, 6) + 1 = 5 ranks; Σ_{i>r} σ_i² of (16, 9, 4, 1)
    assert all(isinstance(x, F) for x in exact)
    # train_v1 is the identity basis of R^6 (C_X = I_6/6): mean output residual = ‖R‖_F²/6
    assert [x / 6 for x in exact] == [5, F(7, 3), F(5, 6), F(1, 6), 0]
    floats = ex.truncation_residuals(torch.tensor(DW_4x6, dtype=torch.float64))
    assert len(floats) == 5
    for r, (got, want) in enumerate(zip(floats, exact, strict=True)):
        assert abs(got - float(want)) <= 1e-11, r
    # the transpose is the same matrix problem: same ledger on both paths
    assert ex.truncation_residuals(M(DW_4x6).T) == exact
    assert len(ex.truncation_residuals(torch.tensor(DW_4x6, dtype=torch.float64).T)) == 5


def test_telescoping_allocation_fixture():
    I3 = M.identity(3)
    Ws = [I3, I3]
    one = [M.diag([2, 3, 1]) - I3, M.diag([0, 0, 0])]  # allocation [2, 0]
    two = [M.diag([2, 1, 1]) - I3, M.diag([1, 3, 1]) - I3]  # allocation [1, 1]
    for dWs in (one, two):
        gap = ex.product_gap(Ws, dWs)
        assert gap == M.diag([1, 2, 0]) and gap.rank() == 2  # F* − F0
        terms = ex.telescoping_terms(Ws, dWs)
        assert terms[0] + terms[1] == gap
    assert [d.rank() for d in one] == [2, 0] and [d.rank() for d in two] == [1, 1]
    terms = ex.telescoping_terms(Ws, two)
    assert terms[0] == M.diag([1, 0, 0])  # W₂ ΔW₁
    assert terms[1] == M.diag([0, 2, 0])  # ΔW₂ (W₁ + ΔW₁)


def test_telescoping_identity_and_rank_bound_float64():
    gen = torch.Generator().manual_seed(2)
    d, L, R = 6, 3, 1
    Ws = [torch.randn(d, d, generator=gen, dtype=torch.float64) for _ in range(L)]
    dWs = [
        torch.randn(d, R, generator=gen, dtype=torch.float64)
        @ torch.randn(R, d, generator=gen, dtype=torch.float64)
        for _ in range(L)
    ]
    terms, gap = ex.telescoping_terms(Ws, dWs), ex.product_gap(Ws, dWs)
    torch.testing.assert_close(sum(terms), gap, rtol=0, atol=1e-10)
    assert all(int(torch.linalg.matrix_rank(t)) <= R for t in terms)
    assert int(torch.linalg.matrix_rank(gap)) <= L * R


def test_partition_rank_conditions():
    assert ex.uniform_partition_rank([3, 5], L_frozen=4, L_target=2) == 3  # M = 2, ⌈5/2⌉
    assert ex.uniform_partition_rank([3, 5], L_frozen=5, L_target=2) == 3  # M = ⌊5/2⌋ = 2
    assert ex.generic_uniform_rank(16, 3) == 6
    blocks = ((0, 1), (2,))
    assert ex.partition_covers([2, 1, 4], blocks, [3, 4])
    assert not ex.partition_covers([2, 0, 4], blocks, [3, 4])
    assert ex.partition_covers([0, 0, 4], blocks, [0, 4])  # a matched block needs no rank
    with pytest.raises(ValueError, match="consecutive"):
        ex.partition_covers([1, 1, 1], ((0, 2), (1,)), [1, 1])


def test_first_omitted_singular_value():
    assert ex.first_omitted_singular_value(E3, 0) == 4
    assert ex.first_omitted_singular_value(E3, 1) == 2
    assert ex.first_omitted_singular_value(E3, 2) == 0
    assert ex.first_omitted_singular_value(E3, 5) == 0


def test_transformer_product_gap_bound():
    assert ex.transformer_rank_threshold([3, 4, 1]) == 2  # max ⌈G/2⌉
    assert ex.transformer_rank_threshold([5]) == 3
    # the /2: a K/Q product gap with rank-R updates on both factors has rank ≤ 2R
    gen = torch.Generator().manual_seed(3)
    D, R = 8, 2
    WK, WQ = (torch.randn(D, D, generator=gen, dtype=torch.float64) for _ in range(2))
    dK, dQ = (
        torch.randn(D, R, generator=gen, dtype=torch.float64)
        @ torch.randn(R, D, generator=gen, dtype=torch.float64)
        for _ in range(2)
    )
    gap = (WK + dK).T @ (WQ + dQ) - WK.T @ WQ
    torch.testing.assert_close(gap, WK.T @ dQ + dK.T @ (WQ + dQ), rtol=0, atol=1e-10)
    assert int(torch.linalg.matrix_rank(gap)) == 2 * R


@pytest.mark.parametrize(
    ("K", "N", "s", "r"), [(2, 3, 3, 4), (2, 32, 10, 11), (1, 1, 1, 2), (1, 10, 4, 5)]
)
def test_ntk_existence_and_landscape_thresholds(K, N, s, r):
    assert ex.ntk_existence_rank(K, N) == s and s * (s + 1) // 2 <= K * N < (s + 1) * (s + 2) // 2
    assert ex.ntk_landscape_rank(K, N) == r and r * (r + 1) // 2 > K * N >= (r - 1) * r // 2


def test_complement_recurrence_matches_gradient_descent_on_the_factors():
    # d = 4, r = 1, L = 2: GD on ½‖W₂W₁ − Φ‖² with Φ in the active block; the complement of
    # each factor stays ρ_ℓ I₂ and follows the recurrence exactly (float64 to 1e-14).
    eta, lam = 0.1, 0.05
    W1 = torch.diag(torch.tensor([2.0, 1.0, 0.5, 0.5], dtype=torch.float64))
    W2 = torch.diag(torch.tensor([3.0, 1.0, 1 / 3, 1 / 3], dtype=torch.float64))
    W1[0, 1], W2[1, 0] = 0.3, -0.2
    Phi = torch.zeros(4, 4, dtype=torch.float64)
    Phi[:2, :2] = torch.tensor([[1.0, 2.0], [0.0, 1.0]], dtype=torch.float64)
    trace = ex.complement_recurrence([0.5, 1 / 3], eta, lam, 5)
    for t in range(1, 6):
        R = W2 @ W1 - Phi
        g1, g2 = W2.T @ R, R @ W1.T
        W1, W2 = (1 - eta * lam) * W1 - eta * g1, (1 - eta * lam) * W2 - eta * g2
        for W, rho in ((W1, trace[t][0]), (W2, trace[t][1])):
            torch.testing.assert_close(
                W[2:, 2:], rho * torch.eye(2, dtype=torch.float64), rtol=0, atol=1e-14
            )
            assert float(W[:2, 2:].abs().max()) == 0 and float(W[2:, :2].abs().max()) == 0


def test_complement_recurrence_exact_first_step():
    trace = ex.complement_recurrence([F(1, 2), F(1, 3)], F(1, 10), 0, 1)
    # ρ₁ = ½ (1 − (1/10)(1/9)), ρ₂ = ⅓ (1 − (1/10)(1/4))
    assert trace[1] == (F(1, 2) * (1 - F(1, 90)), F(1, 3) * (1 - F(1, 40)))


def test_compression_fixture_one_eighteenth():
    W1, W2 = M.diag([2, 1, F(1, 2), F(1, 2)]), M.diag([3, 1, F(1, 3), F(1, 3)])
    assert W2 @ W1 == M.diag([6, 1, F(1, 6), F(1, 6)])
    assert ex.compression_residual([W1, W2], 1) == F(1, 18)  # 2 (1/6)²
    assert ex.compression_error_bound(2, [F(1, 2), F(1, 3)]) == F(1, 18)  # m ε₁² ε₂²
    with pytest.raises(ValueError, match="block-diagonal"):
        ex.compression_residual([M.diag([2, 1, F(1, 2), 1]), W2], 1)


def test_deep_lora_parameter_ledger():
    p = ex.deep_lora_parameters(8, 8, 2, 3)
    assert (p.vanilla, p.outer, p.inner, p.total) == (32, 32, 12, 44)
    assert (p.active_compressed, p.dense_deep) == (48, 192)  # 4Lr² vs Ld²


def test_every_ledger_declares_its_six_coordinates_and_scope():
    functions = [n for n in ex.__all__ if inspect.isfunction(getattr(ex, n))]
    assert set(functions) == set(ex.CLAIMS)
    for name in functions:
        doc = getattr(ex, name).__doc__
        assert "Scope" in doc and "not prove" in doc, name
        claim = ex.CLAIMS[name]
        assert all(
            getattr(claim, f)
            for f in (
                "object",
                "quantifier",
                "architecture",
                "optimization",
                "rank_statement",
                "exclusion",
                "source",
            )
        )


def test_bad_inputs_name_the_argument():
    with pytest.raises(ValueError, match="L_frozen"):
        ex.uniform_partition_rank([1], L_frozen=1, L_target=2)
    with pytest.raises(ValueError, match="K="):
        ex.ntk_existence_rank(0, 3)
    with pytest.raises(ValueError, match="d - 2r"):
        ex.compression_residual([M.identity(2)], 1)
    with pytest.raises(ValueError, match="equal"):
        ex.telescoping_terms([M.identity(2)], [])
