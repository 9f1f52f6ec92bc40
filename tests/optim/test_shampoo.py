"""gaugelab.optim.shampoo: full-matrix Shampoo with left and right accumulators."""

import pytest
import torch

from gaugelab.linalg import msign, psd_power
from gaugelab.optim import Shampoo

F64 = torch.float64


def grads(n, seed=0, shape=(5, 3)):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, generator=gen, dtype=F64) for _ in range(n)]


@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (4, 4)])
def test_undamped_one_step_shampoo_equals_lr_times_msign(shape):
    (G,) = grads(1, shape=shape)
    p = torch.zeros(*shape, dtype=F64, requires_grad=True)
    opt = Shampoo([p], lr=0.3, damping=0.0)
    p.grad = G.clone()
    opt.step()
    # (GGᵀ)^(−1/4) G (GᵀG)^(−1/4) = A Σ^(−1/2) Σ Σ^(−1/2) Bᵀ = msign(G)
    torch.testing.assert_close(-p.detach(), 0.3 * msign(G, method="svd"), rtol=0, atol=1e-9)


def test_shampoo_first_step_matches_damped_roots():
    (G,) = grads(1, seed=1)
    p = torch.zeros(5, 3, dtype=F64, requires_grad=True)
    opt = Shampoo([p], lr=0.1, damping=1.0)
    p.grad = G.clone()
    opt.step()
    eye5, eye3 = torch.eye(5, dtype=F64), torch.eye(3, dtype=F64)
    left = psd_power(G @ G.mT + eye5, -0.25)
    right = psd_power(G.mT @ G + eye3, -0.25)
    torch.testing.assert_close(-p.detach(), 0.1 * left @ G @ right, rtol=1e-12, atol=1e-14)


def test_shampoo_recomputes_roots_only_every_update_every_steps():
    every = 3
    p = torch.zeros(5, 3, dtype=F64, requires_grad=True)
    opt = Shampoo([p], lr=0.1, update_every=every)
    roots = []
    for G in grads(every + 1, seed=2):
        p.grad = G
        opt.step()
        roots.append(opt.state[p]["right_root"].clone())
    for t in range(1, every):  # steps 2 .. update_every reuse the step-1 root
        assert torch.equal(roots[t], roots[0])
    assert (roots[every] - roots[0]).abs().amax() > 1e-3  # step update_every + 1 recomputes
    # the accumulators are sums, updated every step
    total = sum(G.mT @ G for G in grads(every + 1, seed=2))
    torch.testing.assert_close(opt.state[p]["right"], total, rtol=1e-14, atol=1e-14)


def test_shampoo_rejects_a_vector_parameter():
    with pytest.raises(ValueError, match="matrices"):
        Shampoo([torch.zeros(4, requires_grad=True)])
