"""gaugelab.gauge.state.transform_state: moving optimizer state along a gauge transformation."""

import copy

import pytest
import torch

from gaugelab.gauge import SignedPermutation, represented, transform_state
from gaugelab.linalg import haar_orthogonal
from gaugelab.optim import make_optimizer
from gaugelab.tasks import factor_init, make_sensing

F64 = torch.float64
N, K = 6, 3
TWIN_RULES = {
    "heavy-ball": {},
    "muon": {},
    "shampoo": {"update_every": 4},  # roots recomputed at steps 5 and 9: both paths are used
    "scalar-adam": {},
}


def problem():
    task = make_sensing(N, 2, 20, seed=0, dtype=F64)
    U0, V0 = factor_init(N, K, seed=7, scale=0.3, dtype=F64)
    return task, U0.requires_grad_(True), V0.requires_grad_(True)


def haar_q():
    return haar_orthogonal(K, generator=torch.Generator().manual_seed(11), dtype=F64)


def train(opt, U, V, task, steps):
    for _ in range(steps):
        opt.zero_grad()
        task.loss(represented(U, V)).backward()
        opt.step()


def twin_of(rule, base, U, V, M, **hyper):
    """A fresh optimizer on ``(U M, V M)`` loaded with ``base``'s state, moved by ``M``."""
    Ut = (U.detach() @ M).requires_grad_(True)
    Vt = (V.detach() @ M).requires_grad_(True)
    twin = make_optimizer(rule, [Ut, Vt], **hyper)
    # torch's load_state_dict shares (does not copy) same-dtype state tensors: copy them first
    twin.load_state_dict(copy.deepcopy(base.state_dict()))
    transform_state(twin, [Ut, Vt], M)
    return twin, Ut, Vt


def snapshot(opt):
    return {
        id(p): {k: v.clone() if torch.is_tensor(v) else v for k, v in s.items()}
        for p, s in opt.state.items()
    }


@pytest.mark.parametrize("rule", sorted(TWIN_RULES))
def test_moved_state_makes_the_twin_follow_the_rotated_base(rule):
    hyper = {"lr": 3e-2, **TWIN_RULES[rule]}
    task, U, V = problem()
    base = make_optimizer(rule, [U, V], **hyper)
    train(base, U, V, task, 5)
    Q = haar_q()
    twin, Ut, Vt = twin_of(rule, base, U, V, Q, **hyper)
    U5 = U.detach().clone()
    train(base, U, V, task, 5)
    train(twin, Ut, Vt, task, 5)
    assert (U.detach() - U5).abs().amax() > 1e-3  # the continuation genuinely moves
    torch.testing.assert_close(Ut.detach(), U.detach() @ Q, rtol=0, atol=1e-9)
    torch.testing.assert_close(Vt.detach(), V.detach() @ Q, rtol=0, atol=1e-9)


def test_without_moving_the_state_a_momentum_twin_drifts():
    task, U, V = problem()
    base = make_optimizer("heavy-ball", [U, V], lr=3e-2)
    train(base, U, V, task, 5)
    Q = haar_q()
    Ut = (U.detach() @ Q).requires_grad_(True)
    Vt = (V.detach() @ Q).requires_grad_(True)
    twin = make_optimizer("heavy-ball", [Ut, Vt], lr=3e-2)
    twin.load_state_dict(copy.deepcopy(base.state_dict()))  # buffers left in the old basis
    train(base, U, V, task, 1)
    train(twin, Ut, Vt, task, 1)
    assert (Ut.detach() - U.detach() @ Q).abs().amax() > 1e-3


def test_adam_state_refuses_a_generic_rotation_and_is_left_unchanged():
    task, U, V = problem()
    opt = make_optimizer("adam", [U, V], lr=3e-2)
    train(opt, U, V, task, 1)
    before = snapshot(opt)
    with pytest.raises(ValueError, match="per-coordinate statistic"):
        transform_state(opt, [U, V], haar_q())
    after = snapshot(opt)
    assert before.keys() == after.keys()
    for key, state in before.items():
        for name, value in state.items():
            assert torch.equal(after[key][name], value), name


def test_adam_zero_state_is_accepted_under_a_generic_rotation():
    _, U, V = problem()
    fresh = make_optimizer("adam", [U, V], lr=3e-2)
    transform_state(fresh, [U, V], haar_q())  # no state yet: nothing to move
    assert len(fresh.state) == 0
    U.grad, V.grad = torch.zeros_like(U), torch.zeros_like(V)
    fresh.step()  # state exists now, and is all zero
    transform_state(fresh, [U, V], haar_q())
    assert all(not bool(fresh.state[p]["exp_avg_sq"].any()) for p in (U, V))


def test_adam_state_moves_under_a_signed_permutation_and_the_twin_follows():
    task, U, V = problem()
    base = make_optimizer("adam", [U, V], lr=3e-2)
    train(base, U, V, task, 5)
    P = SignedPermutation(K).sample(torch.Generator().manual_seed(4), F64)
    assert not torch.equal(P.abs(), torch.eye(K, dtype=F64))  # a genuine permutation
    twin, Ut, Vt = twin_of("adam", base, U, V, P, lr=3e-2)
    moved = base.state[U]["exp_avg_sq"] @ P.abs()  # v ↦ v |P|
    assert torch.equal(twin.state[Ut]["exp_avg_sq"], moved)
    train(base, U, V, task, 5)
    train(twin, Ut, Vt, task, 5)
    torch.testing.assert_close(Ut.detach(), U.detach() @ P, rtol=0, atol=1e-12)
    torch.testing.assert_close(Vt.detach(), V.detach() @ P, rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    "rule", ["adafactor", "adam-p", "adamw", "lion", "rmsprop", "signum", "sign-sgd"]
)
def test_coordinatewise_state_moves_under_a_signed_permutation_and_the_twin_follows(rule):
    task, U, V = problem()
    base = make_optimizer(rule, [U, V], lr=3e-2)
    train(base, U, V, task, 5)
    P = SignedPermutation(K).sample(torch.Generator().manual_seed(4), F64)
    twin, Ut, Vt = twin_of(rule, base, U, V, P, lr=3e-2)
    train(base, U, V, task, 5)
    train(twin, Ut, Vt, task, 5)
    torch.testing.assert_close(Ut.detach(), U.detach() @ P, rtol=0, atol=1e-12)
    torch.testing.assert_close(Vt.detach(), V.detach() @ P, rtol=0, atol=1e-12)


def test_per_parameter_elements_move_each_state_by_its_own_element():
    task, U, V = problem()
    base = make_optimizer("heavy-ball", [U, V], lr=3e-2)
    train(base, U, V, task, 2)
    Q = haar_q()
    buffers = [base.state[p]["momentum_buffer"].clone() for p in (U, V)]
    transform_state(base, {U: Q})  # V not listed: keeps its state
    torch.testing.assert_close(base.state[U]["momentum_buffer"], buffers[0] @ Q)
    assert torch.equal(base.state[V]["momentum_buffer"], buffers[1])


def test_an_optimizer_without_state_geometry_is_rejected_with_type_error():
    _, U, V = problem()
    opt = torch.optim.SGD([U, V], lr=0.1, momentum=0.9)
    with pytest.raises(TypeError, match="state geometry"):
        transform_state(opt, [U, V], haar_q())
