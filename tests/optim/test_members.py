"""gaugelab.optim.members: per-member learning rates and the active mask over any zoo rule."""

import math

import pytest
import torch

from gaugelab import NonFiniteError
from gaugelab.optim import OPTIMIZERS, MemberLearningRates, cosine_factor, make_optimizer
from gaugelab.tasks import factor_init, make_sensing

F64 = torch.float64
RULES = sorted(OPTIMIZERS)
N1, N2, K = 5, 6, 4  # matrices, so Muon and Shampoo take them too
LRS = (3e-3, 1e-2, 3e-2)


def task():
    return make_sensing(N1, 2, 24, seed=3, n2=N2, dtype=F64)


def members(seeds=(11, 12, 13)):
    pairs = [factor_init(N1, K, seed=s, scale=0.5, n2=N2, dtype=F64) for s in seeds]
    U = torch.stack([u for u, _ in pairs]).requires_grad_(True)  # [E, 5, 4]
    V = torch.stack([v for _, v in pairs]).requires_grad_(True)  # [E, 6, 4]
    return U, V


def step_all(opt, problem, U, V, steps, **kw):
    for _ in range(steps):
        problem.loss(U @ V.mT).sum().backward()
        opt.step(**kw)
        U.grad = V.grad = None


def rel(a, b):
    return float(torch.linalg.vector_norm(a - b) / torch.linalg.vector_norm(b))


@pytest.mark.parametrize("rule", RULES)
def test_member_rates_equal_separate_runs_with_native_rates(rule):
    problem = task()
    U, V = members()
    U0 = U.detach().clone()
    inner = make_optimizer(rule, [U, V], lr=1.0, member_dims=1)
    opt = MemberLearningRates(inner, torch.tensor(LRS, dtype=F64))
    step_all(opt, problem, U, V, 6)
    assert float((U.detach() - U0).abs().amax()) > 1e-3  # it genuinely trained
    for e, lr in enumerate(LRS):
        u, v = (x[e].detach().clone().requires_grad_(True) for x in members())
        single = make_optimizer(rule, [u, v], lr=lr)
        for _ in range(6):
            single.zero_grad()
            problem.loss(u @ v.mT).backward()
            single.step()
        assert rel(U[e].detach(), u.detach()) < 1e-12
        assert rel(V[e].detach(), v.detach()) < 1e-12


@pytest.mark.parametrize("rule", ["adam", "scalar-adam", "muon", "shampoo"])
def test_two_member_dims_and_schedule_scale_match_native_rates(rule):
    problem = task()
    U, V = members((1, 2, 3, 4, 5, 6))
    U = U.detach().reshape(2, 3, N1, K).clone().requires_grad_(True)
    V = V.detach().reshape(2, 3, N2, K).clone().requires_grad_(True)
    lrs = torch.tensor([LRS, LRS[::-1]], dtype=F64)  # [2, 3]
    opt = MemberLearningRates(make_optimizer(rule, [U, V], lr=1.0, member_dims=2), lrs)
    step_all(opt, problem, U, V, 4, scale=0.5)
    flat_u, flat_v = members((1, 2, 3, 4, 5, 6))
    for e in range(6):
        i, j = divmod(e, 3)
        u = flat_u[e].detach().clone().requires_grad_(True)
        v = flat_v[e].detach().clone().requires_grad_(True)
        single = make_optimizer(rule, [u, v], lr=0.5 * float(lrs[i, j]))
        for _ in range(4):
            single.zero_grad()
            problem.loss(u @ v.mT).backward()
            single.step()
        assert rel(U[i, j].detach(), u.detach()) < 1e-12


@pytest.mark.parametrize("rule", RULES)
def test_frozen_members_stay_bitwise_fixed_while_others_move(rule):
    problem = task()
    U, V = members()
    opt = MemberLearningRates(
        make_optimizer(rule, [U, V], lr=1.0, member_dims=1), torch.tensor(LRS, dtype=F64)
    )
    step_all(opt, problem, U, V, 2)
    opt.deactivate(torch.tensor([False, True, False]))
    frozen_u, frozen_v = U[1].detach().clone(), V[1].detach().clone()
    moving = U[0].detach().clone()
    step_all(opt, problem, U, V, 3)
    assert torch.equal(U[1], frozen_u) and torch.equal(V[1], frozen_v)
    assert not torch.equal(U[0], moving)
    assert opt.active.tolist() == [True, False, True]


def test_a_non_finite_gradient_of_an_active_member_raises_before_anything_moves():
    problem = task()
    U, V = members()
    opt = MemberLearningRates(
        make_optimizer("adam", [U, V], lr=1.0, member_dims=1), torch.tensor(LRS, dtype=F64)
    )
    step_all(opt, problem, U, V, 1)
    before = (U.detach().clone(), V.detach().clone())
    state = {k: v.clone() for k, v in opt.optimizer.state[U].items() if torch.is_tensor(v)}
    problem.loss(U @ V.mT).sum().backward()
    U.grad[2, 0, 0] = math.nan
    with pytest.raises(NonFiniteError):
        opt.step()
    assert torch.equal(U, before[0]) and torch.equal(V, before[1])
    for key, value in state.items():
        assert torch.equal(opt.optimizer.state[U][key], value)


def test_a_non_finite_gradient_of_a_frozen_member_is_ignored():
    problem = task()
    U, V = members()
    opt = MemberLearningRates(
        make_optimizer("shampoo", [U, V], lr=1.0, member_dims=1), torch.tensor(LRS, dtype=F64)
    )
    opt.deactivate(torch.tensor([True, False, False]))
    before = U[0].detach().clone()
    problem.loss(U @ V.mT).sum().backward()
    U.grad[0] = math.inf
    opt.step()
    assert torch.equal(U[0], before)
    assert bool(torch.isfinite(U).all())


def test_rollback_restores_the_last_parameters_and_zeroes_the_members_state():
    problem = task()
    U, V = members()
    opt = MemberLearningRates(
        make_optimizer("adam", [U, V], lr=1.0, member_dims=1), torch.tensor(LRS, dtype=F64)
    )
    step_all(opt, problem, U, V, 2)
    before_last = U.detach().clone()
    step_all(opt, problem, U, V, 1)
    opt.deactivate(torch.tensor([False, True, False]), rollback=True)
    assert torch.equal(U[1], before_last[1])  # rolled back one step
    assert not torch.equal(U[0], before_last[0])  # others keep their last step
    state = opt.optimizer.state[U]
    assert torch.equal(state["exp_avg_sq"][1], torch.zeros_like(state["exp_avg_sq"][1]))
    assert bool(state["exp_avg_sq"][0].abs().sum() > 0)


def test_bad_arguments_are_rejected_with_the_argument_named():
    U, V = members()
    with pytest.raises(ValueError, match=r"lr=0\.1"):
        MemberLearningRates(
            make_optimizer("gd", [U, V], lr=0.1, member_dims=1), torch.tensor(LRS, dtype=F64)
        )
    inner = make_optimizer("gd", [U, V], lr=1.0, member_dims=1)
    with pytest.raises(ValueError, match="leading member dims"):
        MemberLearningRates(inner, torch.ones(4, dtype=F64))
    with pytest.raises(ValueError, match="finite rates"):
        MemberLearningRates(inner, torch.tensor([1e-2, -1.0, 1e-2], dtype=F64))
    opt = MemberLearningRates(inner, torch.tensor(LRS, dtype=F64))
    with pytest.raises(ValueError, match="bool"):
        opt.deactivate(torch.tensor([1, 0, 0]))
    with pytest.raises(ValueError, match="scale"):
        opt.step(scale=-1.0)


def test_cosine_factor_is_the_torch_cosine_annealing_schedule():
    assert cosine_factor(0, 100) == 1.0  # the first update at the full rate
    assert cosine_factor(50, 100) == pytest.approx(0.5, abs=1e-15)  # ½(1 + cos(π/2))
    assert cosine_factor(100, 100) == pytest.approx(0.0, abs=1e-15)  # ½(1 + cos π)
    assert cosine_factor(99, 100) == pytest.approx(0.5 * (1 + math.cos(math.pi * 0.99)))
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=1.0)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10)
    for t in range(10):
        assert opt.param_groups[0]["lr"] == pytest.approx(cosine_factor(t, 10), abs=1e-12)
        opt.step()
        sched.step()
    with pytest.raises(ValueError, match="total"):
        cosine_factor(0, 0)
