"""gaugelab.optim.sign: sign-sgd, signum and lion."""

import torch

from gaugelab.optim import Lion, SignSGD, Signum

F64 = torch.float64
S = 2**-0.5
Q45 = torch.tensor([[S, S], [-S, S]], dtype=F64)  # the 45° rotation of the witnesses


def sign_sgd_update(g):
    p = torch.zeros_like(g, requires_grad=True)
    opt = SignSGD([p], lr=1.0)
    p.grad = g.clone()
    opt.step()
    return -p.detach()


def test_sign_update_of_rotated_gradient_is_not_the_rotated_sign_update():
    G = torch.tensor([[1.0, 1.0]], dtype=F64)
    assert torch.equal(G @ Q45, torch.tensor([[0.0, 2**0.5]], dtype=F64))  # GQ = [0, √2]
    rotated_first = sign_sgd_update(G @ Q45)  # sign(GQ) = [0, 1]
    rotated_after = sign_sgd_update(G) @ Q45  # sign(G)Q = [1, 1]Q = [0, √2]
    assert torch.equal(rotated_first, torch.tensor([[0.0, 1.0]], dtype=F64))
    torch.testing.assert_close(rotated_after, torch.tensor([[0.0, 2**0.5]], dtype=F64))
    assert (rotated_first - rotated_after).abs().amax() > 0.4  # √2 − 1


def test_lion_update_entries_are_minus_lr_zero_or_lr():
    lr = 0.125
    gen = torch.Generator().manual_seed(0)
    p = torch.zeros(4, 5, dtype=F64, requires_grad=True)
    opt = Lion([p], lr=lr)
    seen = set()
    for t in range(4):
        g = torch.randn(4, 5, generator=gen, dtype=F64)
        g[0] = 0.0 if t == 0 else g[0]  # a zero row at zero state gives sign(0) = 0
        with torch.no_grad():
            p.zero_()  # p₁ = 0 − η c exactly, so the update is read off without round-off
        p.grad = g
        opt.step()
        values = set((-p.detach()).unique().tolist())
        assert values <= {-lr, 0.0, lr}
        seen |= values
    assert seen == {-lr, 0.0, lr}


def test_lion_interpolates_before_the_sign_and_updates_momentum_with_beta2():
    p = torch.zeros(3, dtype=F64, requires_grad=True)
    opt = Lion([p], lr=1.0, betas=(0.9, 0.99))
    g1 = torch.tensor([1.0, -1.0, 1.0], dtype=F64)
    g2 = torch.tensor([-5.0, -1.0, -20.0], dtype=F64)
    p.grad = g1.clone()
    opt.step()
    with torch.no_grad():
        p.zero_()
    p.grad = g2.clone()
    opt.step()
    m = 0.01 * g1  # m after step 1: 0.99·0 + 0.01 g1
    c = torch.sign(0.9 * m + 0.1 * g2)  # [−1, −1, −1]: sign(0.009 − 0.5), …
    assert torch.equal(-p.detach(), c)
    torch.testing.assert_close(opt.state[p]["exp_avg"], 0.99 * m + 0.01 * g2, rtol=1e-15, atol=0)


def test_signum_first_step_equals_sign_sgd_first_step():
    gen = torch.Generator().manual_seed(1)
    g = torch.randn(3, 4, generator=gen, dtype=F64)
    g[1, 2] = 0.0
    p1 = torch.ones(3, 4, dtype=F64, requires_grad=True)
    p2 = torch.ones(3, 4, dtype=F64, requires_grad=True)
    o1, o2 = Signum([p1], lr=0.05), SignSGD([p2], lr=0.05)
    p1.grad, p2.grad = g.clone(), g.clone()
    o1.step()
    o2.step()
    assert torch.equal(p1, p2)


def test_signum_momentum_is_the_ema_form():
    p = torch.zeros(2, dtype=F64, requires_grad=True)
    opt = Signum([p], lr=1.0, momentum=0.9)
    g1 = torch.tensor([1.0, 1.0], dtype=F64)
    g2 = torch.tensor([-0.05, -0.2], dtype=F64)
    for g in (g1, g2):
        with torch.no_grad():
            p.zero_()
        p.grad = g.clone()
        opt.step()
    m = 0.9 * (0.1 * g1) + 0.1 * g2  # [0.085, 0.07]: EMA keeps the sign of g1
    torch.testing.assert_close(opt.state[p]["momentum_buffer"], m, rtol=1e-15, atol=0)
    assert torch.equal(-p.detach(), torch.sign(m))
