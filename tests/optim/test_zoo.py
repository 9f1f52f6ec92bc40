"""The contract every rule of the zoo keeps (gaugelab.optim._zoo / _base): ensembles,
state_dict, dtypes, param groups, closures, zero and non-finite gradients, bad input."""

import copy

import pytest
import torch

from gaugelab import NonFiniteError
from gaugelab.optim import OPTIMIZERS, make_optimizer
from gaugelab.tasks import factor_init, make_sensing

F64 = torch.float64
RULES = sorted(OPTIMIZERS)
N1, N2, K = 5, 6, 4  # U [5, 4], V [6, 4]: matrices, so Muon and Shampoo take them too


def task(dtype=F64, seed=3):
    return make_sensing(N1, 2, 24, seed=seed, n2=N2, dtype=dtype)


def factors(seed, dtype=F64):
    U, V = factor_init(N1, K, seed=seed, scale=0.5, n2=N2, dtype=dtype)
    return U.requires_grad_(True), V.requires_grad_(True)


def loss_of(problem, U, V):
    """Sum over ensemble members of the sensing loss of ``U Vᵀ`` (``[..., 5, 6]``)."""
    return problem.loss(U @ V.mT).sum()


def train(opt, params, problem, steps):
    for _ in range(steps):
        opt.zero_grad()
        loss_of(problem, *params).backward()
        opt.step()


HYPER = {"lr": 1e-2}  # every rule's default hyperparameters except the learning rate


# --- ensembles ---------------------------------------------------------------------------


@pytest.mark.parametrize("rule", RULES)
def test_ensemble_members_stepped_together_equal_separate_runs(rule):
    problem = task()
    members = [factors(seed) for seed in (11, 12, 13)]
    U = torch.stack([u.detach() for u, _ in members]).requires_grad_(True)  # [3, 5, 4]
    V = torch.stack([v.detach() for _, v in members]).requires_grad_(True)  # [3, 6, 4]
    U_init = U.detach().clone()
    opt = make_optimizer(rule, [U, V], member_dims=1, **HYPER)
    train(opt, (U, V), problem, 5)
    assert (U.detach() - U_init).abs().amax() > 1e-3  # the ensemble genuinely trained
    for e, (u, v) in enumerate(members):
        single = make_optimizer(rule, [u, v], **HYPER)
        train(single, (u, v), problem, 5)
        torch.testing.assert_close(U[e], u, rtol=0, atol=1e-12)
        torch.testing.assert_close(V[e], v, rtol=0, atol=1e-12)


# --- state_dict ---------------------------------------------------------------------------


@pytest.mark.parametrize("rule", RULES)
def test_state_dict_round_trip_resumes_bit_identically(rule):
    problem = task()
    U, V = factors(21)
    opt = make_optimizer(rule, [U, V], **HYPER)
    train(opt, (U, V), problem, 3)
    saved_state = copy.deepcopy(opt.state_dict())
    saved_params = (copy.deepcopy(U.detach()), copy.deepcopy(V.detach()))
    train(opt, (U, V), problem, 4)

    U2 = saved_params[0].clone().requires_grad_(True)
    V2 = saved_params[1].clone().requires_grad_(True)
    resumed = make_optimizer(rule, [U2, V2], **HYPER)
    resumed.load_state_dict(saved_state)
    train(resumed, (U2, V2), problem, 4)
    assert torch.equal(U2, U) and torch.equal(V2, V)


# --- dtypes, groups, closures -------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, F64])
@pytest.mark.parametrize("rule", RULES)
def test_every_rule_runs_in_float32_and_float64_and_keeps_the_dtype(rule, dtype):
    problem = task(dtype)
    U, V = factors(31, dtype)
    U0 = U.detach().clone()
    opt = make_optimizer(rule, [U, V], **HYPER)
    train(opt, (U, V), problem, 3)
    assert U.dtype == dtype and V.dtype == dtype
    assert torch.isfinite(U).all() and torch.isfinite(V).all()
    assert not torch.equal(U.detach(), U0)
    for p in (U, V):
        for key, value in opt.state[p].items():
            if key != "step" and isinstance(value, torch.Tensor) and value.is_floating_point():
                assert value.dtype == dtype, key


# scaled-gd's groups hold factor pairs (U's step needs V): test_scaled_gd.py tests its groups
@pytest.mark.parametrize("rule", [r for r in RULES if r != "scaled-gd"])
def test_param_groups_with_different_lr_behave_like_separate_optimizers(rule):
    problem = task()
    U, V = factors(41)
    U2, V2 = (p.detach().clone().requires_grad_(True) for p in (U, V))
    grouped = make_optimizer(rule, [{"params": [U], "lr": 1e-2}, {"params": [V], "lr": 3e-2}])
    only_u = make_optimizer(rule, [U2], lr=1e-2)
    only_v = make_optimizer(rule, [V2], lr=3e-2)
    for _ in range(4):
        grouped.zero_grad()
        loss_of(problem, U, V).backward()
        grouped.step()
        only_u.zero_grad()
        only_v.zero_grad()
        loss_of(problem, U2, V2).backward()
        only_u.step()
        only_v.step()
    torch.testing.assert_close(U, U2, rtol=0, atol=1e-12)
    torch.testing.assert_close(V, V2, rtol=0, atol=1e-12)
    assert grouped.param_groups[0]["lr"] == 1e-2 and grouped.param_groups[1]["lr"] == 3e-2


@pytest.mark.parametrize("rule", RULES)
def test_step_with_closure_returns_its_loss_and_equals_backward_then_step(rule):
    problem = task()
    U, V = factors(51)
    U2, V2 = (p.detach().clone().requires_grad_(True) for p in (U, V))
    with_closure = make_optimizer(rule, [U, V], **HYPER)
    plain = make_optimizer(rule, [U2, V2], **HYPER)

    def closure():
        with_closure.zero_grad()
        loss = loss_of(problem, U, V)
        loss.backward()
        return loss

    for _ in range(3):
        expected = loss_of(problem, U, V).detach()
        returned = with_closure.step(closure)
        assert torch.equal(returned.detach(), expected)
        plain.zero_grad()
        loss_of(problem, U2, V2).backward()
        assert plain.step() is None
    assert torch.equal(U, U2) and torch.equal(V, V2)


# --- zero and non-finite gradients --------------------------------------------------------


@pytest.mark.parametrize("rule", RULES)
def test_all_zero_gradient_gives_all_zero_finite_update(rule):
    # AdamW's decoupled decay p(1 − ηλ) is not a gradient update; switch it off here (the decay
    # itself is checked in test_adam.py).
    extra = {"weight_decay": 0.0} if rule == "adamw" else {}
    U, V = factors(61)
    before = (U.detach().clone(), V.detach().clone())
    opt = make_optimizer(rule, [U, V], lr=1e-1, **extra)
    U.grad, V.grad = torch.zeros_like(U), torch.zeros_like(V)
    opt.step()
    for p, p0 in zip((U, V), before, strict=True):
        assert torch.isfinite(p).all()
        assert torch.equal(p.detach(), p0)


@pytest.mark.parametrize("rule", RULES)
def test_nan_gradient_raises_non_finite_error_and_leaves_parameters_unchanged(rule):
    problem = task()
    U, V = factors(71)
    opt = make_optimizer(rule, [U, V], **HYPER)
    train(opt, (U, V), problem, 1)
    before = (U.detach().clone(), V.detach().clone())
    opt.zero_grad()
    loss_of(problem, U, V).backward()
    V.grad[2, 1] = float("nan")
    with pytest.raises(NonFiniteError):
        opt.step()
    assert torch.equal(U.detach(), before[0]) and torch.equal(V.detach(), before[1])


@pytest.mark.parametrize("rule", RULES)
def test_closure_returning_nan_loss_raises_non_finite_error(rule):
    U, V = factors(81)
    before = U.detach().clone()
    opt = make_optimizer(rule, [U, V], **HYPER)

    def closure():
        opt.zero_grad()
        loss = (U * V[:N1]).sum() * float("nan")
        loss.backward()
        return loss

    with pytest.raises(NonFiniteError):
        opt.step(closure)
    assert torch.equal(U.detach(), before)


@pytest.mark.parametrize("rule", RULES)
def test_negative_lr_is_rejected_with_a_message_naming_lr(rule):
    U, V = factors(91)
    with pytest.raises(ValueError, match="lr"):
        make_optimizer(rule, [U, V], lr=-1e-3)
