"""gaugelab.optim.adam_p: the Adam-p dial and scalar-Adam."""

import pytest
import torch

from gaugelab.optim import Adam, AdamP, ScalarAdam
from gaugelab.tasks import factor_init, make_sensing

F64 = torch.float64


def run(opt_cls, steps=6, seed=0, **hyper):
    task = make_sensing(5, 2, 20, seed=seed, n2=4, dtype=F64)
    U, V = factor_init(5, 3, seed=seed + 7, scale=0.4, n2=4, dtype=F64)
    U.requires_grad_(True)
    V.requires_grad_(True)
    opt = opt_cls([U, V], **hyper)
    for _ in range(steps):
        opt.zero_grad()
        task.loss(U @ V.mT).backward()
        opt.step()
    return U.detach(), V.detach()


def test_scalar_adam_equals_adam_p_at_p_zero_bitwise():
    a = run(ScalarAdam, lr=3e-2)
    b = run(AdamP, lr=3e-2, p=0.0)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_adam_p_at_p_one_equals_adam():
    a = run(Adam, lr=3e-2)
    b = run(AdamP, lr=3e-2, p=1.0)
    for x, y in zip(a, b, strict=True):
        torch.testing.assert_close(y, x, rtol=1e-12, atol=0)


def test_adam_p_dial_interpolates_strictly_between_its_ends():
    ends = run(Adam, lr=3e-2), run(ScalarAdam, lr=3e-2)
    mid = run(AdamP, lr=3e-2, p=0.5)
    for end in ends:
        assert (mid[0] - end[0]).abs().amax() > 1e-3


def test_scalar_adam_pools_the_second_moment_over_every_tensor_of_the_group():
    gen = torch.Generator().manual_seed(2)
    A = torch.zeros(3, 2, dtype=F64, requires_grad=True)
    B = torch.zeros(4, dtype=F64, requires_grad=True)
    GA = torch.randn(3, 2, generator=gen, dtype=F64)
    GB = 5 * torch.randn(4, generator=gen, dtype=F64)
    opt = ScalarAdam([A, B], lr=0.1)
    A.grad, B.grad = GA.clone(), GB.clone()
    opt.step()
    # first step: m̂ = G, v̂ = G², s = √(mean over all 10 entries of G²) + ε; update = η G/s
    s = torch.cat([GA.reshape(-1), GB]).pow(2).mean().sqrt() + 1e-8
    torch.testing.assert_close(-A.detach(), 0.1 * GA / s, rtol=1e-12, atol=0)
    torch.testing.assert_close(-B.detach(), 0.1 * GB / s, rtol=1e-12, atol=0)


def test_adam_p_rejects_an_unknown_mean():
    with pytest.raises(ValueError, match="mean"):
        AdamP([torch.zeros(2, 2, requires_grad=True)], mean="bogus")


def test_adam_p_rejects_p_outside_zero_one():
    with pytest.raises(ValueError, match="p="):
        AdamP([torch.zeros(2, 2, requires_grad=True)], p=1.5)


def test_scalar_adam_rejects_a_group_with_mismatched_member_shapes():
    U = torch.zeros(3, 5, 4, requires_grad=True)
    V = torch.zeros(2, 6, 4, requires_grad=True)
    with pytest.raises(ValueError, match="member shape"):
        ScalarAdam([U, V], member_dims=1)
