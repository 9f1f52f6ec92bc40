"""gaugelab.optim.adafactor: the protocol's factored second moment."""

import math

import torch

from gaugelab.optim import Adafactor

F64 = torch.float64
S = 2**-0.5
Q45 = torch.tensor([[S, S], [-S, S]], dtype=F64)


def first_update(G, **hyper):
    p = torch.zeros_like(G, requires_grad=True)
    opt = Adafactor([p], **hyper)
    p.grad = G.clone()
    opt.step()
    return -p.detach()


def test_adafactor_first_step_matches_the_factored_formula():
    G = torch.tensor([[1.0, -2.0, 0.5], [3.0, 0.25, -1.0]], dtype=F64)
    b2, eps, lr = 0.999, 1e-8, 0.1
    R = (1 - b2) * (G * G).mean(dim=1)  # [2] row means
    C = (1 - b2) * (G * G).mean(dim=0)  # [3] column means
    v_hat = R[:, None] * C[None, :] / (R.mean() + 1e-30)
    expected = lr * G / (v_hat.sqrt() + eps)
    torch.testing.assert_close(first_update(G, lr=lr), expected, rtol=1e-12, atol=0)


def test_adafactor_update_of_rotated_gradient_is_not_the_rotated_update():
    G = torch.diag(torch.tensor([1.0, math.e], dtype=F64))  # the witness diag(1, e)
    rotated_first = first_update(G @ Q45, lr=1.0)
    rotated_after = first_update(G, lr=1.0) @ Q45
    assert (rotated_first - rotated_after).abs().amax() > 1e-3


def test_adafactor_update_commutes_with_transpose_over_several_steps():
    gen = torch.Generator().manual_seed(5)
    P = torch.zeros(4, 3, dtype=F64, requires_grad=True)
    PT = torch.zeros(3, 4, dtype=F64, requires_grad=True)
    opt, opt_t = Adafactor([P], lr=0.1), Adafactor([PT], lr=0.1)
    for _ in range(5):
        G = torch.randn(4, 3, generator=gen, dtype=F64)
        P.grad, PT.grad = G.clone(), G.mT.clone()
        opt.step()
        opt_t.step()
    torch.testing.assert_close(PT.detach(), P.detach().mT, rtol=0, atol=1e-12)
    assert P.detach().abs().amax() > 0.1


def test_adafactor_keeps_an_unfactored_second_moment_for_vectors():
    g = torch.tensor([2.0, -0.5, 0.0], dtype=F64)
    # v = 0.001 g², no bias correction: η g/(√0.001 |g| + ε)
    expected = 0.1 * g / ((1e-3 * g * g).sqrt() + 1e-8)
    torch.testing.assert_close(first_update(g, lr=0.1), expected, rtol=1e-12, atol=0)
