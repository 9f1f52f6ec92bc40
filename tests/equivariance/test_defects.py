"""gaugelab.equivariance.defects: the closed-form first-step Adam defect against simulation."""

import pytest
import torch

from gaugelab.equivariance import adam_defect_map, adam_direction, adam_first_step_defect
from gaugelab.gauge import represented
from gaugelab.linalg import haar_orthogonal
from gaugelab.optim import Adam
from gaugelab.tasks import factor_init, make_sensing

F64 = torch.float64
S = 2**-0.5
Q45 = torch.tensor([[S, S], [-S, S]], dtype=F64)
EPSILONS = [1e-8, 1e-3, 0.1]
LRS = [1e-3, 0.05, 0.7]


def adam_one_step(loss_fn, U0, V0, lr, eps):
    """(U₁, V₁, G_U, G_V) after one zero-state gaugelab Adam step from (U₀, V₀)."""
    U = U0.clone().requires_grad_(True)
    V = V0.clone().requires_grad_(True)
    opt = Adam([U, V], lr=lr, eps=eps)
    loss_fn(U, V).backward()
    grads = U.grad.clone(), V.grad.clone()
    opt.step()
    return U.detach(), V.detach(), *grads


def half_square(U, V):
    return 0.5 * represented(U, V).pow(2).sum()  # f(w) = w²/2 on the 1 × 1 product


@pytest.mark.parametrize("eps", [1e-8, 1e-3])
@pytest.mark.parametrize("lr", LRS)
def test_scalar_witness_products_after_one_adam_step_match_the_closed_form(lr, eps):
    U0 = V0 = torch.tensor([[1.0, 0.0]], dtype=F64)  # n = 1, k = 2
    U1, V1, *_ = adam_one_step(half_square, U0, V0, lr, eps)
    Ut, Vt, *_ = adam_one_step(half_square, U0 @ Q45, V0 @ Q45, lr, eps)
    w1 = represented(U1, V1).item()
    wt = represented(Ut, Vt).item()
    assert abs(w1 - (1 - lr / (1 + eps)) ** 2) < 1e-12  # gradient (1, 0): D = 1/(1 + ε)
    assert abs(wt - (1 - lr / (S + eps)) ** 2) < 1e-12  # gradient (s, s): D = s/(s + ε) each
    assert abs(wt - w1) > 1e-6  # the witness differs for 0 < η < 2^(−1/2) + ε


@pytest.mark.parametrize("eps", EPSILONS)
@pytest.mark.parametrize("lr", LRS)
def test_first_step_adam_defect_formula_equals_simulation_on_sensing(lr, eps):
    task = make_sensing(6, 2, 20, seed=0, dtype=F64)
    U0, V0 = factor_init(6, 3, seed=7, scale=0.3, dtype=F64)
    Q = haar_orthogonal(3, generator=torch.Generator().manual_seed(11), dtype=F64)

    def loss(U, V):
        return task.loss(represented(U, V))

    U1, V1, gU, gV = adam_one_step(loss, U0, V0, lr, eps)
    Ut, Vt, *_ = adam_one_step(loss, U0 @ Q, V0 @ Q, lr, eps)
    simulated = represented(Ut, Vt) - represented(U1, V1)
    formula = adam_first_step_defect(U0, V0, gU, gV, Q, lr, eps)
    torch.testing.assert_close(formula, simulated, rtol=0, atol=1e-12)
    assert simulated.abs().amax() > 1e-6 * lr  # a genuine defect, not two zeros


def test_adam_defect_map_vanishes_for_signed_permutations_and_not_for_rotations():
    G = torch.randn(5, 2, generator=torch.Generator().manual_seed(3), dtype=F64)
    P = torch.tensor([[0.0, -1.0], [1.0, 0.0]], dtype=F64)
    assert adam_defect_map(G, P, 1e-8).abs().amax() < 1e-15
    assert adam_defect_map(G, Q45, 1e-8).abs().amax() > 1e-3
    torch.testing.assert_close(adam_direction(G, 0.0), torch.sign(G), rtol=0, atol=1e-15)


def test_adam_first_step_defect_rejects_mismatched_shapes():
    U0 = torch.zeros(3, 2, dtype=F64)
    V0 = torch.zeros(4, 2, dtype=F64)
    with pytest.raises(ValueError, match="shapes"):
        adam_first_step_defect(U0, V0, U0, V0, torch.eye(3, dtype=F64), 0.1, 1e-8)
