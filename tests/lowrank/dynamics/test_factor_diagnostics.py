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
from gaugelab.optim import make_optimizer

F64 = torch.float64


def t(rows):
    return torch.tensor(rows, dtype=F64)


A1 = t([[1, 0, 0], [0, 2, 0]])  # [r=2, d_in=3]
B1 = t([[3, 0], [0, 1]])  # [d_out=2, r=2]; 0.5·B A = [[1.5, 0, 0], [0, 1, 0]]


def test_record_of_a_hand_computed_step():
    A0, B0 = t([[1, 0, 0], [0, 1, 0]]), t([[3, 0], [0, 0]])  # before: 0.5·B A = [[1.5,0,0],0]
    record = factor_diagnostics(
        A=A1, B=B1, scale=0.5, step=3, tokens=3 * 4 * 8, loss=1.25, lr_A=0.1, lr_B=0.4,
        grad_A=t([[0, 0, 3], [4, 0, 0]]), grad_B=t([[1, 0], [0, 0]]), previous=(A0, B0),
    )  # fmt: skip
    assert record.norm_A == math.sqrt(5) and record.norm_B == math.sqrt(10)
    assert record.norm_update == math.sqrt(1.5**2 + 1)
    assert record.grad_norm_A == 5.0 and record.grad_norm_B == 1.0
    assert record.update_change == 1.0  # Δ₁ − Δ₀ = [[0, 0, 0], [0, 1, 0]]
    assert record.step_norm_A == 1.0 and record.step_norm_B == 1.0
    assert record.singular_values == pytest.approx((1.5, 1.0), abs=1e-15)
    assert record.numerical_rank == 2
    assert record.rank_rtol == 3 * torch.finfo(F64).eps  # max(d_out, d_in)·eps(float64)
    assert (record.lr_A, record.lr_B, record.tokens, record.step) == (0.1, 0.4, 96, 3)


def test_first_record_has_no_change_and_its_metrics_leave_missing_fields_out():
    record = factor_diagnostics(A=A1, B=B1, scale=0.5, step=0, tokens=0, loss=2.0, lr_A=1.0,
                                lr_B=1.0)  # fmt: skip
    assert record.update_change is None and record.step_norm_A is None
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
