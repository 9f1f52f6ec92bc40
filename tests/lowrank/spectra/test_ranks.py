"""Tests for gaugelab.lowrank.spectra.ranks: the rank-policy family (seed 003 §0x00I, §0x04I,
§0x04J)."""

import math

import pytest
import torch

from gaugelab.lowrank import (
    POLICIES,
    RankReport,
    Spectrum,
    algebraic_rank,
    configured_rank,
    effective_rank_energy,
    effective_rank_roy_vetterli,
    energy_rank,
    numerical_rank,
    rank_policies,
    spectrum,
    stable_rank,
)

pytestmark = pytest.mark.usefixtures("strict_dtypes")

EXACT = 1e-11
LOOSE = 1e-9
F32, F64 = torch.float32, torch.float64


def diag_4x6(values):
    """The 4×6 fixture of seed 003 §0x04D with the given diagonal."""
    D = torch.zeros(4, 6, dtype=F64)
    for i, v in enumerate(values):
        D[i, i] = v
    return D


def randn(*shape, seed=0, dtype=F64):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def test_policy_table_on_4321_is_seed_0x04I():
    reports = rank_policies(diag_4x6([4, 3, 2, 1]), matrix_id="delta", configured=2, rtol=1e-6)
    values = {r.policy_id: r.value for r in reports}
    assert values["configured"] == 2
    assert values["algebraic"] == 4
    assert values["numerical(rtol=1e-06)"] == 4  # 1 > 1e-6·4
    assert values["stable"] == pytest.approx(15 / 8, abs=EXACT)  # (16+9+4+1)/16 = 30/16
    assert values["energy(rho=0.99)"] == 4  # prefixes 16/30, 25/30, 29/30 < 0.99 ≤ 30/30
    assert values["entropy-energy"] == pytest.approx(2.9401975563, abs=1e-10)
    assert values["entropy-roy-vetterli"] == pytest.approx(3.5961154666, abs=1e-10)
    assert [r.policy_id.split("(")[0] for r in reports] == list(POLICIES)
    assert {r.matrix_id for r in reports} == {"delta"}
    assert all(isinstance(r, RankReport) for r in reports)


def test_integer_policies_return_ints_and_continuous_ones_floats():
    reports = rank_policies(diag_4x6([4, 3, 2, 1]), matrix_id="delta", configured=2)
    kinds = {r.policy_id.split("(")[0]: type(r.value) for r in reports}
    assert kinds == {
        "configured": int,
        "algebraic": int,
        "numerical": int,
        "stable": float,
        "energy": int,
        "entropy-energy": float,
        "entropy-roy-vetterli": float,
    }


def test_numerical_rank_is_strict_at_the_threshold_probe():
    sigma = torch.tensor([4.0, 1.0, 1 / 250000, 0.0], dtype=F64)
    # τ = 1e-6·σ_1 = 4·fl(1e-6) = fl(4e-6) = fl(1/250000) = σ_3 exactly (×4 is exact in binary)
    assert 1e-6 * 4.0 == 1 / 250000
    assert numerical_rank(sigma, matrix_id="probe", rtol=1e-6).value == 2
    assert int((sigma >= 1e-6 * sigma[0]).sum()) == 3  # what a >= implementation would return
    # the same through a dense matrix (the SVD of a diagonal matrix returns its entries exactly)
    assert numerical_rank(diag_4x6([4, 1, 1 / 250000, 0]), matrix_id="p", rtol=1e-6).value == 2


def test_numerical_rank_at_rtol_zero_is_the_count_of_nonzero_singular_values():
    sigma = torch.tensor([3.0, 1e-300, 0.0], dtype=F64)
    assert numerical_rank(sigma, matrix_id="s", rtol=0.0).value == 2  # 1e-300 > 0
    assert algebraic_rank(sigma, matrix_id="s").value == 2


def test_numerical_rank_with_rtol_at_least_one_is_zero():
    sigma = torch.tensor([2.0, 2.0, 1.0], dtype=F64)
    assert numerical_rank(sigma, matrix_id="s", rtol=1.0).value == 0  # 2 > 1·2 is false
    assert numerical_rank(sigma, matrix_id="s", rtol=math.inf).value == 0
    assert numerical_rank(sigma, matrix_id="s", rtol=0.5).value == 2  # 2 > 1, 1 > 1 false


@pytest.mark.parametrize(
    "x",
    [
        torch.zeros(4, 6, dtype=F64),
        (torch.zeros(4, 2, dtype=F64), randn(2, 6)),  # B = 0: standard LoRA initialisation
        torch.zeros(3, dtype=F64),
        torch.zeros(0, 5, dtype=F64),
    ],
    ids=["dense", "factors-B-zero", "singular-values", "empty"],
)
def test_every_policy_gives_zero_on_the_zero_matrix(x):
    rtol = 1e-6 if isinstance(x, torch.Tensor) and x.ndim == 1 else None
    assert algebraic_rank(x, matrix_id="z").value == 0
    assert numerical_rank(x, matrix_id="z", rtol=rtol).value == 0
    assert numerical_rank(x, matrix_id="z", rtol=math.inf).value == 0  # inf·0 is no threshold
    assert stable_rank(x, matrix_id="z").value == 0.0
    assert energy_rank(x, matrix_id="z", rho=1.0).value == 0
    assert effective_rank_energy(x, matrix_id="z").value == 0.0
    assert effective_rank_roy_vetterli(x, matrix_id="z").value == 0.0


def test_the_two_entropy_conventions_are_different_statistics():
    sigma = torch.tensor([4.0, 3.0, 2.0, 1.0], dtype=F64)
    rv, en = [4 / 10, 3 / 10, 2 / 10, 1 / 10], [16 / 30, 9 / 30, 4 / 30, 1 / 30]
    expected_rv = math.exp(-sum(p * math.log(p) for p in rv))  # p_i = σ_i/Σσ_j
    expected_en = math.exp(-sum(p * math.log(p) for p in en))  # p_i = σ_i²/Σσ_j²
    got_rv = effective_rank_roy_vetterli(sigma, matrix_id="s")
    got_en = effective_rank_energy(sigma, matrix_id="s")
    assert got_rv.value == pytest.approx(expected_rv, abs=EXACT)
    assert got_en.value == pytest.approx(expected_en, abs=EXACT)
    assert got_rv.value == pytest.approx(3.59611546, abs=1e-8)  # seed 003 §0x04J: ≈ 3.5961
    assert got_en.value == pytest.approx(2.94019755, abs=1e-8)  # §0x04I: 2.9402
    assert got_rv.policy_id != got_en.policy_id


def test_effective_rank_of_a_flat_spectrum_is_its_length_in_both_conventions():
    sigma = torch.tensor([2.0, 2.0, 2.0, 0.0], dtype=F64)  # three equal nonzero values
    assert effective_rank_roy_vetterli(sigma, matrix_id="s").value == pytest.approx(3, abs=EXACT)
    assert effective_rank_energy(sigma, matrix_id="s").value == pytest.approx(3, abs=EXACT)


def test_energy_rank_includes_the_boundary():
    sigma = torch.tensor([4.0, 3.0, 2.0, 1.0], dtype=F64)
    # prefix 25/30 and ρ = 5/6 round to the same double (both correctly rounded 5/6), so ≥ holds
    assert energy_rank(sigma, matrix_id="s", rho=5 / 6).value == 2
    assert energy_rank(sigma, matrix_id="s", rho=5 / 6 + 1e-12).value == 3
    assert energy_rank(sigma, matrix_id="s", rho=1.0).value == 4  # the full prefix is exactly 1
    assert energy_rank(sigma, matrix_id="s", rho=0.5).value == 1  # 16/30 ≥ 0.5


def test_a_float32_product_cast_to_float64_is_not_full_rank_when_its_dtype_is_given():
    B, A = randn(50, 3, seed=1, dtype=F32), randn(3, 40, seed=2, dtype=F32)
    product = (B @ A).to(F64)  # float32 rounding (relative ~1e-7) now stored in float64
    trap = numerical_rank(product, matrix_id="ba")
    assert trap.value == 40  # float64's eps·max(m, n) ≈ 1e-14 counts the float32 noise as rank
    fixed = numerical_rank(product, matrix_id="ba", computed_in=F32)
    assert fixed.value == 3  # eps(float32)·50 ≈ 6e-6 lies above the noise and below σ_3
    assert "float32" in fixed.parameters["tolerance_rule"]
    assert fixed.parameters["rtol"] == pytest.approx(50 * torch.finfo(F32).eps, abs=0)
    # factors: singular values in factor space, in float32, with float32's tolerance
    in_factors = numerical_rank((B, A), matrix_id="ba")
    assert in_factors.value == 3
    assert in_factors.parameters["svd"].method == "factored"
    assert in_factors.parameters["svd"].dtype == "torch.float32"
    # factors cast to float64: the factor space has only r = 3 singular values to count
    assert numerical_rank((B.to(F64), A.to(F64)), matrix_id="ba").value == 3


def test_factor_space_spectrum_equals_the_dense_spectrum_of_s_b_a():
    B, A, s = randn(7, 3, seed=3), randn(3, 5, seed=4), -0.5
    dense = spectrum(s * (B @ A), matrix_id="d")
    factored = spectrum((B, A, s), matrix_id="f")
    torch.testing.assert_close(factored.sigma, dense.sigma[:3], rtol=0, atol=EXACT)
    torch.testing.assert_close(dense.sigma[3:], torch.zeros(2, dtype=F64), rtol=0, atol=EXACT)
    assert factored.shape == dense.shape == (7, 5)
    assert factored.svd.method == "factored" and dense.svd.method == "dense"
    for policy in (stable_rank, effective_rank_energy, effective_rank_roy_vetterli):
        assert policy(factored).value == pytest.approx(policy(dense).value, abs=EXACT)
    assert numerical_rank(factored).value == numerical_rank(dense).value == 3


def test_batched_input_gives_one_report_per_member_with_its_own_id():
    members = [diag_4x6([1.0] * (e + 1)) for e in range(3)]  # member e has rank e + 1
    batch = torch.stack(members)  # [3, 4, 6]
    reports = numerical_rank(batch, matrix_id="w")
    assert [r.matrix_id for r in reports] == ["w[0]", "w[1]", "w[2]"]
    assert [r.value for r in reports] == [1, 2, 3]
    for report, member in zip(stable_rank(batch, matrix_id="w"), members, strict=True):
        assert report.value == pytest.approx(stable_rank(member, matrix_id="m").value, abs=EXACT)
    nested = algebraic_rank(torch.stack([batch, batch]), matrix_id="w")
    assert nested[4].matrix_id == "w[1,1]" and nested[4].value == 2


def test_configured_rank_reads_the_bottleneck_and_is_only_an_upper_bound():
    B, A = randn(4, 8, seed=5), randn(8, 6, seed=6)  # r = 8 > min(d_out, d_in) = 4
    assert configured_rank((B, A), matrix_id="m").value == 8
    assert numerical_rank((B, A), matrix_id="m").value == 4  # rank(B A) ≤ min(4, 6)
    B_collapsed = torch.zeros(4, 8, dtype=F64)
    B_collapsed[:, 0] = 1.0
    reports = {r.policy_id: r.value for r in rank_policies((B_collapsed, A), matrix_id="m")}
    assert reports["configured"] == 8 and reports["algebraic"] == 1  # one nonzero column of B


def test_numerical_rank_records_its_threshold_and_tolerance_rule():
    report = numerical_rank(diag_4x6([4, 3, 2, 1]), matrix_id="delta")
    rtol = 6 * torch.finfo(F64).eps  # max(4, 6)·eps(float64)
    assert report.parameters["rtol"] == rtol
    assert report.parameters["tau_abs"] == pytest.approx(4 * rtol, abs=0)  # rtol·σ_1
    assert report.parameters["comparison"] == "σ_i > rtol·σ_1"
    assert report.parameters["svd"].backend == "torch.linalg.svdvals"
    assert report.policy_id == f"numerical(rtol={rtol!r})"


def test_spectrum_from_singular_values_sorts_and_supplies_the_shape_for_the_default():
    sp = Spectrum.from_singular_values(
        torch.tensor([1.0, 4.0, 2.0], dtype=F64), matrix_id="s", shape=(3, 5)
    )
    assert sp.sigma.tolist() == [4.0, 2.0, 1.0]
    assert numerical_rank(sp).value == 3 and sp.svd is None
    assert spectrum(sp) is sp


def test_errors_name_the_function_and_the_argument():
    sigma = torch.tensor([1.0], dtype=F64)
    with pytest.raises(ValueError, match="spectrum: matrix_id must be a non-empty string"):
        numerical_rank(diag_4x6([1]))
    with pytest.raises(ValueError, match="numerical_rank: rtol must be a number >= 0"):
        numerical_rank(sigma, matrix_id="s", rtol=-1e-3)
    with pytest.raises(ValueError, match="numerical_rank: rtol is required"):
        numerical_rank(sigma, matrix_id="s")
    with pytest.raises(ValueError, match="energy_rank: rho must be a number in \\(0, 1\\]"):
        energy_rank(sigma, matrix_id="s", rho=0.0)
    with pytest.raises(ValueError, match="finite and >= 0"):
        Spectrum.from_singular_values(torch.tensor([-1.0], dtype=F64), matrix_id="s")
    with pytest.raises(TypeError, match="spectrum: x must be a dense"):
        stable_rank([1.0, 2.0], matrix_id="s")
    with pytest.raises(ValueError, match="B and A must share one dtype"):
        stable_rank((randn(3, 2), randn(2, 3, dtype=F32)), matrix_id="s")
    with pytest.raises(ValueError, match="rank_policies: x must be one matrix"):
        rank_policies(torch.zeros(2, 3, 3, dtype=F64), matrix_id="s")
    with pytest.raises(TypeError, match="configured_rank: x must be factors"):
        configured_rank(torch.zeros(3, 3, dtype=F64), matrix_id="s")
    with pytest.raises(ValueError, match="computed_in must be a real floating torch dtype"):
        numerical_rank(sigma, matrix_id="s", rtol=0.1, computed_in=torch.int64)
    with pytest.raises(ValueError, match="NaN or infinite"):
        stable_rank(torch.full((2, 2), math.nan, dtype=F64), matrix_id="s")
    with pytest.raises(ValueError, match="differs from the Spectrum's"):
        stable_rank(Spectrum.from_singular_values(sigma, matrix_id="a"), matrix_id="b")


@pytest.mark.parametrize(("dtype", "d"), [(torch.bfloat16, 4096), (torch.float16, 1024)])
def test_half_precision_factors_keep_their_rank_under_the_factored_round_off_rule(dtype, d):
    # max(m, n)·eps(dtype) is 16 for bfloat16 at d = 4096 and 1 for float16 at d = 1024: a
    # storage-dtype tolerance would call every such adapter rank 0
    assert d * torch.finfo(dtype).eps >= 1
    r = 16
    B = (randn(d, r, seed=5) * 0.01).to(dtype)
    A = (randn(r, d, seed=6) / math.sqrt(d)).to(dtype)
    for factors in ((B, A, 2.0), (B.double(), A.double(), 2.0)):
        report = numerical_rank(factors, matrix_id="q_proj", computed_in=dtype)
        assert report.value == r
        assert report.policy_id == "numerical(factored round-off)"
        sigma = spectrum(factors, matrix_id="q_proj").sigma
        tau = report.parameters["tau_abs"]
        assert 0 < tau < 1e-2 * float(sigma[-1])  # two orders below the smallest signal
    # the rule in float64: max(m, n)·eps(float64)·|s|·‖B‖₂‖A‖₂
    B64, A64 = B.double(), A.double()
    spectral = torch.linalg.matrix_norm(B64, ord=2) * torch.linalg.matrix_norm(A64, ord=2)
    expected = d * torch.finfo(F64).eps * 2.0 * float(spectral)
    got = numerical_rank((B64, A64, 2.0), matrix_id="q").parameters["tau_abs"]
    assert got == pytest.approx(expected, rel=1e-12)


def test_a_product_that_cancels_has_numerical_rank_zero_not_its_round_offs():
    B, A = randn(64, 4, seed=7), randn(4, 48, seed=8)
    stacked_B, stacked_A = torch.cat([B, -B], dim=1), torch.cat([A, A], dim=0)  # X − X
    report = numerical_rank((stacked_B, stacked_A), matrix_id="x-x")
    assert report.value == 0
    perturbed = torch.cat([B, -B * (1 + 1e-3)], dim=1)  # a real, small difference
    assert numerical_rank((perturbed, stacked_A), matrix_id="x-x'").value == 4
