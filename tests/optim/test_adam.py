"""gaugelab.optim.adam: Adam, AdamW and RMSprop in the torch conventions (PROTOCOLS §1 traps)."""

import math

import torch

from gaugelab.optim import Adam, AdamW, RMSprop

F64 = torch.float64


def one_step(opt_cls, g, **hyper):
    """Update ``p₀ − p₁`` of one zero-state step on a zero parameter with gradient ``g``."""
    p = torch.zeros_like(g, requires_grad=True)
    opt = opt_cls([p], **hyper)
    p.grad = g.clone()
    opt.step()
    return -p.detach()


def test_adam_eps_is_added_after_the_bias_corrected_root_so_a_tiny_gradient_steps_half():
    g = torch.tensor([1e-8], dtype=F64)
    step = one_step(Adam, g, lr=1.0)
    # torch convention: η g/(|g| + ε) = 1e-8/(1e-8 + 1e-8) = 0.5
    assert abs(step.item() - 0.5) < 1e-12

    # the "ε-hat" convention: η √(1−β2)/(1−β1) · m/(√v + ε) with m = 0.1 g, v = 0.001 g²
    b1, b2, eps, gg = 0.9, 0.999, 1e-8, 1e-8
    m, v = (1 - b1) * gg, (1 - b2) * gg * gg
    eps_hat = math.sqrt(1 - b2) / (1 - b1) * m / (math.sqrt(v) + eps)
    # = √0.001/(√0.001 + 1) ≈ 0.0307: the two conventions differ sixteen-fold on this step
    assert abs(eps_hat - math.sqrt(1e-3) / (math.sqrt(1e-3) + 1)) < 1e-15
    assert abs(eps_hat - 0.0307) < 1e-4
    assert step.item() / eps_hat > 16


def test_adam_first_step_is_g_over_abs_g_plus_eps_for_every_entry():
    g = torch.tensor([[3.0, -2e-8, 0.0], [1e-9, -0.5, 7.0]], dtype=F64)
    step = one_step(Adam, g, lr=0.1, eps=1e-8)
    torch.testing.assert_close(step, 0.1 * g / (g.abs() + 1e-8), rtol=1e-12, atol=1e-15)


def test_rmsprop_first_step_is_ten_times_sign_g_for_small_g():
    g = torch.tensor([1e-3, -2e-4, 5.0, 0.0], dtype=F64)
    step = one_step(RMSprop, g, lr=0.01)
    # v = 0.01 g², ε outside the root: η g/(0.1|g| + ε) ≈ 10 η sign(g)
    expected = 0.01 * g / (0.1 * g.abs() + 1e-8)
    torch.testing.assert_close(step, expected, rtol=1e-12, atol=0)
    torch.testing.assert_close(step, 0.1 * torch.sign(g), rtol=1e-3, atol=0)  # ε/(0.1|g|) ≤ 5e-4


def test_rmsprop_has_no_bias_correction_and_no_momentum():
    p = torch.zeros(2, dtype=F64, requires_grad=True)
    opt = RMSprop([p], lr=1.0, eps=0.0)
    g1, g2 = torch.tensor([1.0, 2.0], dtype=F64), torch.tensor([-3.0, 0.5], dtype=F64)
    p.grad = g1.clone()
    opt.step()
    before = p.detach().clone()
    p.grad = g2.clone()
    opt.step()
    v = 0.99 * 0.01 * g1**2 + 0.01 * g2**2  # second EMA value, no 1/(1 − αᵗ)
    torch.testing.assert_close(before - p.detach(), g2 / v.sqrt(), rtol=1e-12, atol=0)


def test_adamw_zero_gradient_update_is_exactly_the_decoupled_decay():
    p = torch.tensor([[1.0, -2.0], [0.5, 4.0]], dtype=F64, requires_grad=True)
    p0 = p.detach().clone()
    opt = AdamW([p], lr=0.1, weight_decay=0.01)
    p.grad = torch.zeros_like(p)
    opt.step()
    torch.testing.assert_close(p.detach(), p0 * (1 - 0.1 * 0.01), rtol=1e-15, atol=0)
