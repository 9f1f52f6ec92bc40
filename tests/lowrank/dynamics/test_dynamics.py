"""Factor dynamics: every fixture of seed 003 §0x07C–0x08I as an exact rational test."""

from __future__ import annotations

import json
import subprocess
import sys
from fractions import Fraction as F
from pathlib import Path

import pytest
import torch

from gaugelab.equivariance.defects import adam_direction
from gaugelab.linalg.rational import Matrix as M
from gaugelab.lowrank.dynamics import motion as dyn

# The Loop 7 fixture (seed 003 §0x07C): d_in = d_out = r = 2, s = 1.
G = M([[1, 1], [0, 1]])
B = M([[1, 0], [0, 2]])
A = M([[2, 0], [0, 1]])
ETA_B, ETA_A = F(1, 10), F(1, 5)

pytestmark = pytest.mark.usefixtures("strict_dtypes")  # float tests fail on silent promotion


def test_factor_gradients_exact_trace():
    grad_B, grad_A = dyn.factor_gradients(B, A, G, 1)
    assert B @ A == M([[2, 0], [0, 2]])
    assert grad_B == M([[2, 1], [0, 1]])  # s G Aᵀ
    assert grad_A == M([[1, 1], [0, 2]])  # s Bᵀ G


def test_product_velocity_exact_trace():
    right, left = dyn.product_velocity_terms(B, A, G, 1, ETA_B, ETA_A)
    assert right == M([[F(-2, 5), F(-1, 10)], [0, F(-1, 10)]])  # −η_B G AᵀA
    assert left == M([[F(-1, 5), F(-1, 5)], [0, F(-4, 5)]])  # −η_A B Bᵀ G
    assert dyn.product_velocity(B, A, G, 1, ETA_B, ETA_A) == M(
        [[F(-3, 5), F(-3, 10)], [0, F(-9, 10)]]
    )


def test_product_velocity_is_the_derivative_of_the_product_under_the_flow():
    # Δ̇ = s(Ḃ A + B Ȧ) with Ḃ = −η_B ∇_B, Ȧ = −η_A ∇_A, at s = 3 (s² enters, not s)
    gB, gA = dyn.factor_gradients(B, A, G, 3)
    direct = (gB * (-ETA_B) @ A + B @ (gA * (-ETA_A))) * 3
    assert dyn.product_velocity(B, A, G, 3, ETA_B, ETA_A) == direct


def test_simultaneous_step_has_the_cross_term():
    cross = dyn.finite_step_cross_term(B, A, G, 1, ETA_B, ETA_A)
    assert cross == M([[F(1, 25), F(2, 25)], [0, F(1, 25)]])
    step = dyn.sgd_step(B, A, G, 1, ETA_B, ETA_A)
    assert step.product_step == M([[F(-14, 25), F(-11, 50)], [0, F(-43, 50)]])
    assert step.product_step == dyn.product_velocity(B, A, G, 1, ETA_B, ETA_A) + cross
    assert step.B @ step.A == M([[F(36, 25), F(-11, 50)], [0, F(57, 50)]])


def test_cross_term_identity_holds_at_a_non_unit_scale():
    s = F(3, 2)
    step = dyn.sgd_step(B, A, G, s, ETA_B, ETA_A)
    expected = dyn.product_velocity(B, A, G, s, ETA_B, ETA_A) + dyn.finite_step_cross_term(
        B, A, G, s, ETA_B, ETA_A
    )
    assert step.product_step == expected


def test_cross_term_identity_on_rectangular_factors():
    # d_out = 3, r = 2, d_in = 4: (G Aᵀ)(Bᵀ G) chains for any shapes
    Br, Ar = M([[1, 2], [0, 1], [F(1, 2), -1]]), M([[1, 0, 2, -1], [0, 3, 1, 1]])
    Gr = M([[1, -1, 0, 2], [0, 1, 1, 0], [3, 0, -2, 1]])
    step = dyn.sgd_step(Br, Ar, Gr, F(2, 3), F(1, 7), F(1, 3))
    expected = dyn.product_velocity(
        Br, Ar, Gr, F(2, 3), F(1, 7), F(1, 3)
    ) + dyn.finite_step_cross_term(Br, Ar, Gr, F(2, 3), F(1, 7), F(1, 3))
    assert step.product_step == expected and step.product_step.shape == (3, 4)


def test_sequential_step_is_a_different_algorithm():
    sim = dyn.sgd_step(B, A, G, 1, ETA_B, ETA_A)
    seq = dyn.sgd_step(B, A, G, 1, ETA_B, ETA_A, order="sequential")
    assert seq.B == sim.B
    # A⁺ reads ∇_A at the new B: A − η_A B⁺ᵀ G
    assert seq.A == A - (sim.B.T @ G) * ETA_A
    assert seq.product_step != sim.product_step


def test_weighted_gram_exact_value_and_flow_invariance():
    assert dyn.latent_balance(B, A, ETA_B, ETA_A) == M([[-10, 0], [0, 35]])
    # d/dt: BᵀḂ + ḂᵀB over η_B minus (Ȧ Aᵀ + A Ȧᵀ) over η_A vanishes exactly
    gB, gA = dyn.factor_gradients(B, A, G, 1)
    dB, dA = gB * (-ETA_B), gA * (-ETA_A)
    rate = (B.T @ dB + dB.T @ B) / ETA_B - (dA @ A.T + A @ dA.T) / ETA_A
    assert rate.is_zero()


def test_weighted_gram_is_not_conserved_by_a_finite_step():
    step = dyn.sgd_step(B, A, G, 1, ETA_B, ETA_A)
    assert dyn.latent_balance(step.B, step.A, ETA_B, ETA_A) != M([[-10, 0], [0, 35]])


@pytest.mark.parametrize(
    ("B0", "A0", "mechanism", "moves_B", "moves_A"),
    [
        (M([[0, 0], [0, 0]]), M([[1, 2], [3, 4]]), "standard", True, False),
        (M([[1, 2], [3, 4]]), M([[0, 0], [0, 0]]), "reversed", False, True),
        (M([[0, 0], [0, 0]]), M([[0, 0], [0, 0]]), "both-zero", False, False),
        (M([[1, 0], [0, 0]]), M([[0, 0], [0, 1]]), "cancelling", True, True),
    ],
)
def test_four_zero_product_mechanisms(B0, A0, mechanism, moves_B, moves_A):
    start = dyn.classify_zero_product(B0, A0, G)
    assert start.mechanism == mechanism
    assert (start.moves_B, start.moves_A) == (moves_B, moves_A)
    if mechanism == "standard":  # only the right-preconditioned path: Δ̇₀ = −G A₀ᵀA₀
        assert start.velocity == -(G @ A0.T @ A0)
    if mechanism == "reversed":  # only the left path: Δ̇₀ = −B₀B₀ᵀG
        assert start.velocity == -(B0 @ B0.T @ G)


def test_cancelling_fixture_gradients():
    start = dyn.classify_zero_product(M([[1, 0], [0, 0]]), M([[0, 0], [0, 1]]), G)
    assert start.grad_B == M([[0, 1], [0, 1]])
    assert start.grad_A == M([[1, 1], [0, 0]])


def test_classify_rejects_a_nonzero_product():
    with pytest.raises(ValueError, match="not exactly zero"):
        dyn.classify_zero_product(B, A, G)


def test_scalar_gauge_keeps_the_product_and_changes_the_velocity():
    Bc, Ac = dyn.scalar_gauge(B, A, 2)
    assert Bc @ Ac == M([[2, 0], [0, 2]])
    assert dyn.product_velocity(Bc, Ac, G, 1, ETA_B, ETA_A) == M(
        [[F(-9, 10), F(-33, 40)], [0, F(-129, 40)]]
    )


def test_compensated_rates_restore_velocity_and_finite_step():
    eb, ea = dyn.compensated_rates(ETA_B, ETA_A, 2)
    assert (eb, ea) == (F(2, 5), F(1, 20))
    Bc, Ac = dyn.scalar_gauge(B, A, 2)
    assert dyn.product_velocity(Bc, Ac, G, 1, eb, ea) == dyn.product_velocity(
        B, A, G, 1, ETA_B, ETA_A
    )
    base, gauged = dyn.sgd_step(B, A, G, 1, ETA_B, ETA_A), dyn.sgd_step(Bc, Ac, G, 1, eb, ea)
    assert gauged.B == base.B * 2 and gauged.A == base.A / 2  # again gauge-equivalent
    assert gauged.B @ gauged.A == base.B @ base.A == M([[F(36, 25), F(-11, 50)], [0, F(57, 50)]])


def test_compensated_sgd_matches_at_every_step_of_a_product_loss():
    # L = ½‖B A − T‖²: G depends on the product only, so the match repeats every step
    T = M([[1, 2], [3, 4]])

    def grad(delta):
        return delta - T

    c = F(3)
    eb, ea = dyn.compensated_rates(ETA_B, ETA_A, c)
    b, a = B, A
    bc, ac = dyn.scalar_gauge(B, A, c)
    for _ in range(4):
        s1, s2 = dyn.sgd_step(b, a, grad, 1, ETA_B, ETA_A), dyn.sgd_step(bc, ac, grad, 1, eb, ea)
        b, a, bc, ac = s1.B, s1.A, s2.B, s2.A
        assert bc @ ac == b @ a
        assert bc == b * c and ac == a / c
    # unchanged rates under the same gauge break it after one step
    wrong = dyn.sgd_step(*dyn.scalar_gauge(B, A, c), grad, 1, ETA_B, ETA_A)
    assert (
        wrong.B @ wrong.A
        != dyn.sgd_step(B, A, grad, 1, ETA_B, ETA_A).B @ dyn.sgd_step(B, A, grad, 1, ETA_B, ETA_A).A
    )


def test_adam_breaks_the_compensation_eps_one_tenth():
    eps = F(1, 10)
    base = dyn.adam_first_step(B, A, G, 1, ETA_B, ETA_A, eps)
    Bc, Ac = dyn.scalar_gauge(B, A, 2)
    eb, ea = dyn.compensated_rates(ETA_B, ETA_A, 2)
    gauged = dyn.adam_first_step(Bc, Ac, G, 1, eb, ea, eps)
    assert base.product == M([[F(380, 231), F(-5, 21)], [0, F(17, 11)]])
    assert gauged.product == M([[F(120, 77), F(-4325, 18942)], [0, F(407, 246)]])
    assert base.product != gauged.product


def test_adam_direction_matches_the_equivariance_module_in_float64():
    g = torch.tensor([[2.0, 1.0], [0.0, 1.0]], dtype=torch.float64)
    Bt, At, Gt = B.to_tensor(), A.to_tensor(), G.to_tensor()
    step = dyn.adam_first_step(Bt, At, Gt, 1, 0.1, 0.2, 0.1)
    torch.testing.assert_close(step.direction_B, adam_direction(g, 0.1), rtol=0, atol=1e-15)
    exact = M([[F(380, 231), F(-5, 21)], [0, F(17, 11)]]).to_tensor()
    torch.testing.assert_close(step.product, exact, rtol=0, atol=1e-11)


def test_factor_decay_is_not_product_decay():
    assert dyn.factor_penalty(B, A) == 10
    Bc, Ac = dyn.scalar_gauge(B, A, 2)
    assert dyn.factor_penalty(Bc, Ac) == F(85, 4)
    assert dyn.product_penalty(B, A) == dyn.product_penalty(Bc, Ac) == 8
    c4, c = dyn.balancing_gauge(B, A)
    assert c4 == 1 and c == 1.0  # ‖A‖² / ‖B‖² = 5/5
    c4, _ = dyn.balancing_gauge(Bc, Ac)
    assert c4 == F(5, 4) / 20  # (c⁻²‖A‖²)/(c²‖B‖²) = c⁻⁴


def test_balancing_gauge_minimises_the_factor_penalty_in_float64():
    gen = torch.Generator().manual_seed(0)
    Bt = torch.randn(5, 3, generator=gen, dtype=torch.float64)
    At = torch.randn(3, 4, generator=gen, dtype=torch.float64) * 3
    _, c = dyn.balancing_gauge(Bt, At)
    best = dyn.factor_penalty(*dyn.scalar_gauge(Bt, At, float(c)))
    torch.testing.assert_close(best, 2 * Bt.norm() * At.norm(), rtol=1e-12, atol=0)
    for k in (0.9, 1.1):
        assert dyn.factor_penalty(*dyn.scalar_gauge(Bt, At, float(c) * k)) > best


@pytest.mark.parametrize(
    ("p", "q", "exponent"), [(1, 0, -1), (F(1, 2), 0, 0), (F(1, 2), 1, -1), (0, 1, 0)]
)
def test_rank_scaling_exponent(p, q, exponent):
    assert dyn.rank_scaling_exponent(p, q) == exponent  # 1 − 2p − q
    assert dyn.initial_velocity_coefficient(1, 16, p, q, F(1, 2)) == F(1, 2) * F(16) ** exponent


def test_rank_stable_scale_exponent():
    assert dyn.rank_stable_scale_exponent(0) == F(1, 2)  # α/√r (rsLoRA's regime)
    assert dyn.rank_stable_scale_exponent(1) == 0  # constant α


def test_rank_ledger_table_exact():
    rows = dyn.rank_ledger((4, 16))
    table = [
        (r.normalization, r.scale, r.coefficients[4], r.coefficients[16], r.trend) for r in rows
    ]
    assert table == [
        ("rank-independent rows", "α/r", F(1, 8), F(1, 32), "shrinks"),
        ("rank-independent rows", "α/√r", F(1, 2), F(1, 2), "stable"),
        ("rows divided by √r", "α/√r", F(1, 8), F(1, 32), "shrinks"),
        ("rows divided by √r", "α", F(1, 2), F(1, 2), "stable"),
    ]
    for row in rows:  # the ledger agrees with the closed form α² κ r^{1−2p−q}, κ = 1/2
        for r, value in row.coefficients.items():
            assert value == dyn.initial_velocity_coefficient(1, r, row.p, row.q, F(1, 2))


def test_rank_ledger_rejects_irrational_roots():
    with pytest.raises(ValueError, match="perfect squares"):
        dyn.rank_ledger((4, 8))


def test_expected_gram_is_r_sigma2_in_float64_monte_carlo():
    # E[A₀ᵀA₀] = r σ² I: a seeded Monte-Carlo check within 5 standard errors
    gen = torch.Generator().manual_seed(3)
    r, d, sigma2, n = 8, 3, 0.25, 4000
    A0 = torch.randn(n, r, d, generator=gen, dtype=torch.float64) * sigma2**0.5
    mean = (A0.mT @ A0).mean(0)
    torch.testing.assert_close(
        mean, r * sigma2 * torch.eye(d, dtype=torch.float64), rtol=0, atol=0.05
    )


def test_binary16_gauge_representability():
    one = M([[1]])
    up = dyn.gauge_is_representable(one, one, 2**16, torch.float16)
    assert up.largest_finite == 65504 and up.smallest_subnormal == F(1, 2**24)
    assert up.overflow == {"B": True, "A": False} and up.underflow == {"B": False, "A": False}
    assert up.cast_nonfinite["B"] and not up.representable
    down = dyn.gauge_is_representable(one, one, F(1, 2**25), torch.float16)
    assert down.underflow["B"] and down.overflow["A"] and not down.representable
    assert down.cast_flushed["B"] and down.cast_nonfinite["A"]
    assert dyn.gauge_is_representable(one, one, 2**8, torch.float16).representable  # 256, 1/256
    assert dyn.gauge_is_representable(one, one, 2**16, torch.float32).representable
    # the exact product is the same in every case: 1·1 = 2¹⁶·2⁻¹⁶ = 2⁻²⁵·2²⁵ = 1
    for c in (1, 2**16, F(1, 2**25)):
        Bc, Ac = dyn.scalar_gauge(one, one, c)
        assert Bc @ Ac == one


def test_tensor_mode_agrees_with_exact_mode_batched():
    Bt = torch.stack([B.to_tensor(), (B * 2).to_tensor()])
    At = torch.stack([A.to_tensor(), (A / 2).to_tensor()])
    v = dyn.product_velocity(Bt, At, G.to_tensor(), 1, 0.1, 0.2)
    torch.testing.assert_close(
        v[0], M([[F(-3, 5), F(-3, 10)], [0, F(-9, 10)]]).to_tensor(), rtol=0, atol=1e-12
    )
    torch.testing.assert_close(
        v[1], M([[F(-9, 10), F(-33, 40)], [0, F(-129, 40)]]).to_tensor(), rtol=0, atol=1e-12
    )


def test_bad_inputs_name_the_argument():
    with pytest.raises(ValueError, match="eta_B"):
        dyn.product_velocity(B, A, G, 1, 0, 1)
    with pytest.raises(ValueError, match="do not chain"):
        dyn.factor_gradients(M([[1, 2, 3]]), A, G)
    with pytest.raises(ValueError, match="G has shape"):
        dyn.factor_gradients(B, A, M([[1, 2, 3]]))
    with pytest.raises(TypeError, match="mixed"):
        dyn.factor_gradients(B, A.to_tensor(), G)
    with pytest.raises(ValueError, match="c=0"):
        dyn.scalar_gauge(B, A, 0)
    with pytest.raises(ValueError, match="NaN"):
        dyn.factor_gradients(
            B.to_tensor(), A.to_tensor(), torch.full((2, 2), float("nan"), dtype=torch.float64)
        )
    with pytest.raises(ValueError, match="order"):
        dyn.sgd_step(B, A, G, order="alternating")
    with pytest.raises(ValueError, match="dtype"):
        dyn.gauge_is_representable(B, A, 2, torch.int32)


def test_example_script_quick_run_shows_the_four_first_steps(tmp_path):
    # examples/lora_dynamics.py --quick: a tiny character model; the first-step pattern of the
    # four zero-product starts is exact (a zero factor gradient is exactly 0), whatever the data
    script = Path(__file__).resolve().parents[3] / "examples" / "lora_dynamics.py"
    out = tmp_path / "result.json"
    subprocess.run(
        [sys.executable, str(script), "--quick", "--out", str(out)],
        check=True,
        capture_output=True,
        timeout=240,
    )
    result = json.loads(out.read_text())
    first = {k: (v["grad_A_norm"], v["grad_B_norm"]) for k, v in result["zero_product"].items()}
    assert first["standard"][0] == 0 < first["standard"][1]
    assert first["reversed"][1] == 0 < first["reversed"][0]
    assert first["both-zero"] == (0, 0)
    assert min(first["cancelling"]) > 0
    curve = [loss for _, loss in result["zero_product"]["both-zero"]["curve"]]
    assert max(curve) == min(curve)  # a dead first-order point never moves
    assert [row["predicted_exponent"] for row in result["rank_scaling"]] == [-1, 0, -2, -1]
