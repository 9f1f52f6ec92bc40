"""gaugelab.lowrank.dynamics.diagnostics: the §0x08L record and rebalancing with its state
policy."""

import math

import pytest
import torch

from gaugelab.gauge import GeneralLinear, Orthogonal, SignedPermutation
from gaugelab.lowrank.dynamics.diagnostics import (
    FactorDiagnostics,
    factor_diagnostics,
    rebalance_factors,
)
from gaugelab.lowrank.dynamics.motion import factor_gradients
from gaugelab.optim import make_optimizer

F64 = torch.float64


def t(rows):
    return torch.tensor(rows, dtype=F64)


A1 = t([[1, 0, 0], [0, 2, 0]])  # [r=2, d_in=3]
B1 = t([[3, 0], [0, 1]])  # [d_out=2, r=2]; 0.5·B A = [[1.5, 0, 0], [0, 1, 0]]


def test_record_of_a_hand_computed_step():
    A0, B0 = t([[1, 0, 0], [0, 1, 0]]), t([[3, 0], [0, 0]])  # before: 0.5·B A = [[1.5,0,0],0]
    record = factor_diagnostics(
        A=A0, B=B0, scale=0.5, step=3, tokens=3 * 4 * 8, loss=1.25, lr_A=0.1, lr_B=0.4,
        grad_A=t([[0, 0, 3], [4, 0, 0]]), grad_B=t([[1, 0], [0, 0]]), after=(A1, B1),
    )  # fmt: skip
    # the state the gradients were taken at, not the factors after the step (§0x07H)
    assert record.norm_A == math.sqrt(2) and record.norm_B == 3.0
    assert record.norm_update == 1.5
    assert record.grad_norm_A == 5.0 and record.grad_norm_B == 1.0
    assert record.update_change == 1.0  # Δ₁ − Δ₀ = [[0, 0, 0], [0, 1, 0]]
    assert record.step_norm_A == 1.0 and record.step_norm_B == 1.0
    assert record.right_gram == ((1, 0, 0), (0, 1, 0), (0, 0, 0))  # A₀ᵀA₀
    assert record.left_gram == ((9, 0), (0, 0))  # B₀B₀ᵀ
    assert record.latent_balance == ((9 / 0.4 - 1 / 0.1, 0), (0, -1 / 0.1))  # B₀ᵀB₀/η_B − A₀A₀ᵀ/η_A
    assert record.singular_values == pytest.approx((1.5, 0.0), abs=1e-15)
    assert record.numerical_rank == 1
    assert record.rank_rtol == 3 * torch.finfo(F64).eps  # max(d_out, d_in)·eps(float64)
    assert (record.lr_A, record.lr_B, record.tokens, record.step) == (0.1, 0.4, 96, 3)


def test_seed_0x07H_diagnostics_are_those_of_the_state_the_gradients_were_taken_at():
    # the seed's trace on its Loop 7 fixture (§0x07C): G = [[1,1],[0,1]], s = 1,
    # B = [[1,0],[0,2]], A = [[2,0],[0,1]], η_B = 1/10, η_A = 1/5
    G, B, A = t([[1, 1], [0, 1]]), t([[1, 0], [0, 2]]), t([[2, 0], [0, 1]])
    eta_B, eta_A = 1 / 10, 1 / 5
    grad_B, grad_A = factor_gradients(B, A, G, 1.0)  # both read the same old state
    # the two optimizer steps: torch's SGD, one group per factor, on L = ⟨G, s B A⟩
    B_p, A_p = B.clone().requires_grad_(True), A.clone().requires_grad_(True)
    opt = torch.optim.SGD([{"params": [B_p], "lr": eta_B}, {"params": [A_p], "lr": eta_A}])
    (G * (B_p @ A_p)).sum().backward()
    assert torch.equal(B_p.grad, grad_B) and torch.equal(A_p.grad, grad_A)
    opt.step()
    record = factor_diagnostics(
        A=A, B=B, scale=1.0, step=1, tokens=0, loss=0.0, lr_A=eta_A, lr_B=eta_B,
        grad_A=grad_A, grad_B=grad_B, after=(A_p.detach(), B_p.detach()),
    )  # fmt: skip
    seed = record.seed_diagnostics()
    names = "norm_A norm_B norm_grad_A norm_grad_B norm_product norm_product_step right_gram"
    assert list(seed) == [*names.split(), "left_gram", "latent_balance"]  # the seed's keys
    exact, close = dict(rel=0, abs=1e-11), dict(rtol=0, atol=1e-11)  # exact identities
    assert seed["norm_A"] == pytest.approx(math.sqrt(5), **exact)  # ‖diag(2, 1)‖_F
    assert seed["norm_B"] == pytest.approx(math.sqrt(5), **exact)  # ‖diag(1, 2)‖_F
    assert seed["norm_product"] == pytest.approx(math.sqrt(8), **exact)  # ‖B A = diag(2, 2)‖_F
    assert seed["norm_grad_B"] == pytest.approx(math.sqrt(6), **exact)  # ‖[[2,1],[0,1]]‖_F
    assert seed["norm_grad_A"] == pytest.approx(math.sqrt(6), **exact)  # ‖[[1,1],[0,2]]‖_F
    # Δ⁺ − Δ = [[−14/25, −11/50], [0, −43/50]] (§0x07D): ‖·‖_F² = 2754/2500
    assert seed["norm_product_step"] == pytest.approx(math.sqrt(2754) / 50, **exact)
    torch.testing.assert_close(t(seed["right_gram"]), t([[4, 0], [0, 1]]), **close)  # AᵀA
    torch.testing.assert_close(t(seed["left_gram"]), t([[1, 0], [0, 4]]), **close)  # B Bᵀ
    # BᵀB/η_B − A Aᵀ/η_A = diag(1, 4)/(1/10) − diag(4, 1)/(1/5) (§0x07E)
    torch.testing.assert_close(t(seed["latent_balance"]), t([[-10, 0], [0, 35]]), **close)
    assert record.step_norm_A == pytest.approx(eta_A * math.sqrt(6), **exact)
    assert record.step_norm_B == pytest.approx(eta_B * math.sqrt(6), **exact)
    # the state after the step has other norms: the record did not read it
    assert abs(record.norm_A - float(A_p.detach().norm())) > 0.1


def test_first_record_has_no_change_and_its_metrics_leave_missing_fields_out():
    record = factor_diagnostics(A=A1, B=B1, scale=0.5, step=0, tokens=0, loss=2.0, lr_A=1.0,
                                lr_B=1.0)  # fmt: skip
    assert record.update_change is None and record.step_norm_A is None
    assert record.latent_balance == ((9 - 1, 0), (0, 1 - 4))  # BᵀB − A Aᵀ at unit rates
    frozen_A = factor_diagnostics(A=A1, B=B1, scale=0.5, step=0, tokens=0, loss=2.0, lr_A=0.0,
                                  lr_B=1.0)  # fmt: skip
    assert frozen_A.latent_balance is None  # no flow at a zero rate
    metrics = record.metrics(prefix="diag/q_proj/")
    assert metrics["diag/q_proj/norm_A"] == math.sqrt(5)
    assert metrics["diag/q_proj/sigma/0"] == pytest.approx(1.5, abs=1e-15)
    assert "diag/q_proj/update_change" not in metrics and "diag/q_proj/grad_norm_A" not in metrics
    assert metrics["diag/q_proj/numerical_rank"] == 2.0 and metrics["diag/q_proj/skipped"] == 0.0
    assert FactorDiagnostics(**record.to_dict()) == record


def test_numerical_rank_of_a_collapsed_factor_and_a_given_tolerance():
    B = t([[1, 0], [1e-9, 0]])  # rank 1: the second column is zero
    assert factor_diagnostics(A=A1, B=B, scale=1.0, step=1, tokens=0, loss=0.0, lr_A=1,
                              lr_B=1).numerical_rank == 1  # fmt: skip
    B = t([[1, 0], [0, 1e-9]])  # σ = (1, 2e-9): rank 2 at eps tolerance, 1 at rtol 1e-6
    common = dict(A=A1, B=B, scale=1.0, step=1, tokens=0, loss=0.0, lr_A=1, lr_B=1)
    assert factor_diagnostics(**common).numerical_rank == 2
    assert factor_diagnostics(**common, rank_rtol=1e-6).numerical_rank == 1


def test_moments_summarise_the_optimizer_state_by_frobenius_norm():
    A = A1.clone().requires_grad_(True)
    B = B1.clone().requires_grad_(True)
    opt = make_optimizer("adam", [A, B], lr=0.1)
    A.grad, B.grad = torch.ones_like(A), 2 * torch.ones_like(B)
    opt.step()
    record = factor_diagnostics(A=A, B=B, scale=1.0, step=1, tokens=0, loss=0.0, lr_A=0.1,
                                lr_B=0.1, state_A=opt.state[A], state_B=opt.state[B])  # fmt: skip
    # m = (1 − β1)·g = 0.1·g, v = (1 − β2)·g² = 0.001·g²; the step counter is left out
    assert record.moments["A/exp_avg"] == pytest.approx(0.1 * math.sqrt(6), rel=1e-12)
    assert record.moments["B/exp_avg_sq"] == pytest.approx(0.001 * 4 * 2, rel=1e-12)
    assert not any(k.endswith("/step") for k in record.moments)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"A": torch.zeros(2, 3, dtype=F64), "B": torch.zeros(2, 3, dtype=F64)}, "PEFT"),
        ({"loss": float("nan")}, "loss"),
        ({"step": -1}, "step"),
        ({"grad_A": torch.zeros(3, 2, dtype=F64)}, "grad_A"),
        ({"A": torch.full((2, 3), float("inf"), dtype=F64)}, "finite"),
    ],
)
def test_bad_input_is_rejected_naming_the_argument(kwargs, match):
    base = dict(A=A1, B=B1, scale=1.0, step=1, tokens=0, loss=0.0, lr_A=1.0, lr_B=1.0)
    with pytest.raises(ValueError, match=match):
        factor_diagnostics(**{**base, **kwargs})


# --- rebalancing ---------------------------------------------------------------------------


def factors(seed):
    gen = torch.Generator().manual_seed(seed)
    B = torch.randn(5, 3, generator=gen, dtype=F64)
    A = torch.randn(3, 4, generator=gen, dtype=F64)
    X = torch.randn(5, 4, generator=gen, dtype=F64)
    return B.requires_grad_(True), A.requires_grad_(True), X


def train(opt, B, A, X, steps):
    for _ in range(steps):
        opt.zero_grad()
        (0.5 * ((B @ A - X) ** 2).sum()).backward()
        opt.step()


def twin_runs(rule, G, state, steps_before=3, steps_after=4, **hyper):
    """The product after training, with and without a rebalance by G half-way."""
    B, A, X = factors(0)
    B2, A2 = (p.detach().clone().requires_grad_(True) for p in (B, A))
    opt, opt2 = make_optimizer(rule, [B, A], **hyper), make_optimizer(rule, [B2, A2], **hyper)
    train(opt, B, A, X, steps_before)
    train(opt2, B2, A2, X, steps_before)
    record = rebalance_factors(B2, A2, G, opt2, state=state)
    train(opt, B, A, X, steps_after)
    train(opt2, B2, A2, X, steps_after)
    return (B @ A).detach(), (B2 @ A2).detach(), record


def test_transformed_momentum_continues_the_trajectory_under_an_orthogonal_rebalance():
    Q = Orthogonal(3).sample(torch.Generator().manual_seed(1), F64)
    base, twin, record = twin_runs("heavy-ball", Q, "auto", lr=0.02)
    assert record.state == "transformed" and "transform_state" in record.reason
    assert record.product_change < 1e-14
    torch.testing.assert_close(twin, base, rtol=0, atol=1e-12)  # m_B Q, Qᵀ m_A moved exactly
    _, reset, record = twin_runs("heavy-ball", Q, "reset", lr=0.02)
    assert record.state == "reset" and (reset - base).abs().amax() > 1e-4  # momentum was lost


def test_adam_state_is_reset_under_a_general_linear_rebalance_and_the_record_says_why():
    G = GeneralLinear(3).sample(torch.Generator().manual_seed(2), F64)
    _, _, record = twin_runs("adam", G, "auto", steps_after=0, lr=0.01)
    assert record.state == "reset" and "per-coordinate" in record.reason
    B, A, X = factors(0)
    opt = make_optimizer("adam", [B, A], lr=0.01)
    train(opt, B, A, X, 2)
    before = (B.detach().clone(), A.detach().clone(), opt.state[B]["exp_avg"].clone())
    with pytest.raises(ValueError, match="cannot move"):
        rebalance_factors(B, A, G, opt, state="transform")
    assert torch.equal(B.detach(), before[0]) and torch.equal(A.detach(), before[1])
    assert torch.equal(opt.state[B]["exp_avg"], before[2])  # nothing was modified
    rebalance_factors(B, A, G, opt)
    assert opt.state[B] == {} and opt.state[A] == {}
    train(opt, B, A, X, 1)  # the rule re-initialises its moments
    assert int(opt.state[B]["step"]) == 1


def test_adam_state_moves_with_a_signed_permutation_and_the_trajectory_follows():
    P = SignedPermutation(3).sample(torch.Generator().manual_seed(3), F64)
    base, twin, record = twin_runs("adam", P, "auto", lr=0.01)
    assert record.state == "transformed"
    torch.testing.assert_close(twin, base, rtol=0, atol=1e-12)


def test_rebalance_reports_the_product_change_it_made_in_float64_too():
    gen = torch.Generator().manual_seed(0)
    B = torch.randn(5, 2, generator=gen, dtype=F64, requires_grad=True)
    A = torch.randn(2, 4, generator=gen, dtype=F64, requires_grad=True)
    before = (B @ A).detach().clone()
    G = torch.tensor([[1.0, 1.0], [1.0, 1.0 + 1e-12]], dtype=F64)  # ill-conditioned: round-off
    record = rebalance_factors(B, A, G)
    measured = float(torch.linalg.matrix_norm((B @ A).detach() - before)
                     / torch.linalg.matrix_norm(before))  # fmt: skip
    assert measured > 1e-9  # the solve with G loses digits: a change to report
    assert record.product_change == pytest.approx(measured, rel=1e-6)


def test_rebalance_preserves_the_product_and_refuses_a_gauge_outside_the_dtype_range():
    B, A, _ = factors(4)
    product = (B @ A).detach()
    G = GeneralLinear(3).sample(torch.Generator().manual_seed(5), F64)
    record = rebalance_factors(B, A, G)
    assert record.state == "none" and record.product_change < 1e-14
    torch.testing.assert_close((B @ A).detach(), product, rtol=0, atol=1e-13)
    B16 = torch.ones(2, 1, dtype=torch.float16)
    A16 = torch.ones(1, 2, dtype=torch.float16)
    with pytest.raises(ValueError, match=r"not finite in torch\.float16"):
        rebalance_factors(B16, A16, torch.tensor([[2.0**16]]))  # 65536 > 65504 (§0x08I)
    assert torch.equal(B16, torch.ones(2, 1, dtype=torch.float16))


def test_rebalance_rejects_bad_shapes_a_singular_element_and_an_unknown_policy():
    B, A, _ = factors(6)
    with pytest.raises(ValueError, match="G"):
        rebalance_factors(B, A, torch.eye(2, dtype=F64))
    with pytest.raises(ValueError, match="singular"):
        rebalance_factors(B, A, torch.zeros(3, 3, dtype=F64))
    with pytest.raises(ValueError, match="state"):
        rebalance_factors(B, A, torch.eye(3, dtype=F64), state="keep")


def adam_trained(seed, steps=2):
    """Factors and a foreign optimizer (torch.optim.Adam) holding moments of them."""
    B, A, X = factors(seed)
    opt = torch.optim.Adam([B, A], lr=0.01)
    train(opt, B, A, X, steps)
    return B, A, X, opt


def test_seed_0x08J_a_foreign_optimizers_moments_are_reset_on_request():
    # §0x08J: "optimizer moments must also be transformed or reset"; torch's Adam declares no
    # state geometry, so its moments cannot be transformed: reset is the one choice left
    B, A, X, opt = adam_trained(7)
    product = (B @ A).detach().clone()
    G = GeneralLinear(3).sample(torch.Generator().manual_seed(8), F64)
    record = rebalance_factors(B, A, G, opt, foreign_state="reset")
    assert record.state == "reset" and "Adam declares no state geometry" in record.reason
    assert opt.state[B] == {} and opt.state[A] == {}  # no stale moment survives
    torch.testing.assert_close((B @ A).detach(), product, rtol=0, atol=1e-11)  # B G · G⁻¹ A
    assert record.product_change < 1e-11
    train(opt, B, A, X, 1)  # Adam restarts its moments from zero
    assert int(opt.state[B]["step"]) == 1 and int(opt.state[A]["step"]) == 1
    B, A, _, opt = adam_trained(7)  # state="reset" clears a foreign state as well
    assert rebalance_factors(B, A, G, opt, state="reset").state == "reset"
    assert opt.state[B] == {} and opt.state[A] == {}


def test_seed_0x08J_a_foreign_optimizer_is_refused_by_default_naming_it_and_the_choices():
    B, A, _, opt = adam_trained(9)
    before = (B.detach().clone(), A.detach().clone(), opt.state[B]["exp_avg"].clone())
    G = GeneralLinear(3).sample(torch.Generator().manual_seed(10), F64)
    for kwargs in ({}, {"state": "transform", "foreign_state": "reset"}):
        with pytest.raises(ValueError, match=r"Adam declares no state geometry") as info:
            rebalance_factors(B, A, G, opt, **kwargs)
        assert "foreign_state='reset'" in str(info.value) and "'raise'" in str(info.value)
        assert "state='reset'" in str(info.value)
    assert torch.equal(B.detach(), before[0]) and torch.equal(A.detach(), before[1])
    assert torch.equal(opt.state[B]["exp_avg"], before[2])  # nothing was modified
    with pytest.raises(ValueError, match="foreign_state='keep'; allowed: raise, reset"):
        rebalance_factors(B, A, G, opt, foreign_state="keep")
    fresh_B, fresh_A, _ = factors(11)  # no moments yet: nothing can be stale
    fresh = torch.optim.Adam([fresh_B, fresh_A], lr=0.01)
    assert rebalance_factors(fresh_B, fresh_A, G, fresh).state == "none"
