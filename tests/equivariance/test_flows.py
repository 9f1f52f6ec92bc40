"""gaugelab.equivariance.flows: balancedness and the common-scalar time change."""

import math

import numpy as np
import torch

from gaugelab.equivariance import effective_clock, preconditioned_flow
from gaugelab.tasks import factor_init, make_sensing

N, K = 6, 3
T = 1.0


def sensing_gradient():
    task = make_sensing(N, 2, 20, seed=0, dtype=torch.float64)
    A, y = task.A.numpy(), task.y.numpy()
    m = A.shape[0]

    def grad(theta):
        U, V = theta[:N], theta[N:]
        residual = A @ (U @ V.T).reshape(-1) - y
        G = (2.0 / m) * (A.T @ residual).reshape(N, N)  # ∇f(W) of mean squared residual
        return np.concatenate([G @ V, G.T @ U])

    return grad


def start():
    U, V = factor_init(N, K, seed=7, scale=0.3, dtype=torch.float64)
    return np.concatenate([U.numpy(), V.numpy()])


def balancedness(theta):
    U, V = theta[:N], theta[N:]
    return U.T @ U - V.T @ V


def a_of(t):
    return 1.0 + 0.5 * math.sin(t)


def test_gradient_flow_conserves_balancedness():
    grad, theta0 = sensing_gradient(), start()
    theta = preconditioned_flow(grad, theta0, T)
    assert np.abs(theta - theta0).max() > 1e-3  # the flow genuinely moves
    assert np.abs(balancedness(theta) - balancedness(theta0)).max() < 1e-9


def test_common_scalar_flow_conserves_balancedness():
    grad, theta0 = sensing_gradient(), start()
    theta = preconditioned_flow(grad, theta0, T, a=a_of)
    assert np.abs(theta - theta0).max() > 1e-3
    assert np.abs(balancedness(theta) - balancedness(theta0)).max() < 1e-9


def test_anisotropic_preconditioner_breaks_balancedness():
    grad, theta0 = sensing_gradient(), start()
    weights = np.random.default_rng(0).uniform(0.25, 4.0, size=theta0.shape)
    theta = preconditioned_flow(grad, theta0, T, preconditioner=lambda g: weights * g)
    assert np.abs(balancedness(theta) - balancedness(theta0)).max() > 1e-3


def test_common_scalar_flow_is_gradient_flow_on_the_effective_clock():
    grad, theta0 = sensing_gradient(), start()
    scaled = preconditioned_flow(grad, theta0, T, a=a_of)
    tau = effective_clock(a_of, T)
    assert abs(tau - T) > 1e-2  # the clock genuinely differs from physical time
    plain = preconditioned_flow(grad, theta0, tau)
    assert np.abs(scaled - plain).max() < 1e-9
    assert np.abs(preconditioned_flow(grad, theta0, T) - plain).max() > 1e-3


def test_effective_clock_integrates_the_reciprocal_schedule():
    assert abs(effective_clock(lambda u: 2.0, 3.0) - 1.5) < 1e-13  # 3/2
    assert abs(effective_clock(lambda u: 1.0 + u, 1.0) - math.log(2.0)) < 1e-13  # ∫ 1/(1+u)
