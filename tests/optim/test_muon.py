"""gaugelab.optim.muon: sum-form momentum followed by msign."""

import pytest
import torch

from gaugelab.linalg import msign
from gaugelab.optim import Muon
from gaugelab.tasks import factor_init, make_sensing

F64 = torch.float64


def sensing_run(steps, lr=2e-2, **hyper):
    """Muon on a small sensing problem; returns per-step (update of U, gradient of U)."""
    task = make_sensing(6, 2, 20, seed=1, dtype=F64)
    U, V = factor_init(6, 3, seed=8, scale=0.3, dtype=F64)
    U.requires_grad_(True)
    V.requires_grad_(True)
    opt = Muon([U, V], lr=lr, **hyper)
    out = []
    for _ in range(steps):
        opt.zero_grad()
        task.loss(U @ V.mT).backward()
        before = U.detach().clone()
        grad = U.grad.clone()
        opt.step()
        out.append((before - U.detach(), grad))
    return out


def rel(a, b):
    return float(torch.linalg.norm(a - b) / torch.linalg.norm(b))


@pytest.mark.parametrize(
    "hyper",
    [{"msign": "svd"}, {"msign": "newton_schulz", "ns_eps": 0.0}],
    ids=["svd", "newton_schulz"],
)
def test_msign_removes_the_constant_factor_between_sum_and_ema_momentum(hyper):
    lr, mu = 2e-2, 0.9
    ema = None
    method = hyper["msign"]
    for update, grad in sensing_run(4, lr=lr, momentum=mu, **hyper):
        ema = (1 - mu) * grad if ema is None else mu * ema + (1 - mu) * grad  # EMA form
        direction = msign(ema, method=method, eps=0.0)
        torch.testing.assert_close(update, lr * direction, rtol=0, atol=1e-12)


def test_muon_momentum_buffer_is_the_sum_form():
    task = make_sensing(6, 2, 20, seed=1, dtype=F64)
    U, V = factor_init(6, 3, seed=8, scale=0.3, dtype=F64)
    U.requires_grad_(True)
    V.requires_grad_(True)
    opt = Muon([U, V], lr=2e-2, momentum=0.9)
    b = torch.zeros_like(U)
    for _ in range(3):
        opt.zero_grad()
        task.loss(U @ V.mT).backward()
        b = 0.9 * b + U.grad  # b ← μ b + G, no (1 − μ)
        opt.step()
    torch.testing.assert_close(opt.state[U]["momentum_buffer"], b, rtol=1e-14, atol=0)


def test_nesterov_agrees_on_the_first_step_and_changes_the_direction_after():
    # ns_eps = 0 makes the Newton–Schulz normalisation exactly scale-free
    plain = sensing_run(3, ns_eps=0.0)
    nesterov = sensing_run(3, nesterov=True, ns_eps=0.0)
    # step 1: G + μ(μ·0 + G) = (1 + μ) G, a positive multiple of G, so the same msign
    assert rel(nesterov[0][0], plain[0][0]) < 1e-9
    assert rel(nesterov[1][0], plain[1][0]) > 1e-3
    assert rel(nesterov[2][0], plain[2][0]) > 1e-3


def test_newton_schulz_and_svd_updates_differ():
    ns = sensing_run(1, msign="newton_schulz")
    svd = sensing_run(1, msign="svd")
    assert rel(ns[0][0], svd[0][0]) > 1e-3  # 5-step NS is not the polar factor
    s = torch.linalg.svdvals(svd[0][0] / 2e-2)
    torch.testing.assert_close(s, torch.ones_like(s), rtol=0, atol=1e-12)


def test_shape_scaling_original_multiplies_tall_updates_by_root_aspect_ratio():
    g = torch.randn(8, 2, generator=torch.Generator().manual_seed(3), dtype=F64)
    p1 = torch.zeros(8, 2, dtype=F64, requires_grad=True)
    p2 = torch.zeros(8, 2, dtype=F64, requires_grad=True)
    o1 = Muon([p1], lr=0.1, msign="svd")
    o2 = Muon([p2], lr=0.1, msign="svd", shape_scaling="original")
    p1.grad, p2.grad = g.clone(), g.clone()
    o1.step()
    o2.step()
    torch.testing.assert_close(p2.detach(), 2.0 * p1.detach(), rtol=1e-14, atol=0)  # √(8/2)


def test_muon_rejects_a_vector_parameter():
    with pytest.raises(ValueError, match="matrices"):
        Muon([torch.zeros(4, requires_grad=True)])
