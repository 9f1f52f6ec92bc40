"""PROTOCOLS §2 identities on the small sensing problem: the gauge action, gradient covariance,
and which rules of the zoo commute with a latent rotation (float64)."""

import pytest
import torch

from gaugelab.gauge import GeneralLinear, SignedPermutation, act, represented
from gaugelab.linalg import haar_orthogonal
from gaugelab.optim import make_optimizer
from gaugelab.tasks import factor_init, make_sensing

pytestmark = pytest.mark.usefixtures("strict_dtypes")  # float64 identities: no silent promotion
F64 = torch.float64
N, K, RANK, M, SCALE = 6, 3, 2, 20, 0.3  # PROTOCOLS §2
LR = 3e-2
EXACT, LOOSE, BROKEN = 1e-11, 1e-9, 1e-3

EQUIVARIANT_RULES = {
    "gd": {},
    "heavy-ball": {"momentum": 0.9},
    "scalar-adam": {},
    "muon": {"msign": "newton_schulz", "ns_steps": 5},
    "shampoo": {"damping": 1.0},
}
COORDINATEWISE_RULES = ["adam", "rmsprop", "signum", "lion", "adafactor"]
SIGNED_PERMUTATION_RULES = [*COORDINATEWISE_RULES, "adamw", "sign-sgd", "adam-p"]


def problem(seed=0):
    task = make_sensing(N, RANK, M, seed=seed, dtype=F64)
    U0, V0 = factor_init(N, K, seed=seed + 7, scale=SCALE, dtype=F64)
    return task, U0, V0


def haar_q(seed=11):
    return haar_orthogonal(K, generator=torch.Generator().manual_seed(seed), dtype=F64)


def rel(a, b):
    return float(torch.linalg.norm(a - b) / torch.linalg.norm(b))


def gradients(task, U, V):
    U = U.clone().requires_grad_(True)
    V = V.clone().requires_grad_(True)
    task.loss(represented(U, V)).backward()
    return U.grad, V.grad


def trajectory(rule, task, U0, V0, steps, **hyper):
    U = U0.clone().requires_grad_(True)
    V = V0.clone().requires_grad_(True)
    opt = make_optimizer(rule, [U, V], lr=LR, **hyper)
    out = []
    for _ in range(steps):
        opt.zero_grad()
        task.loss(represented(U, V)).backward()
        opt.step()
        out.append((U.detach().clone(), V.detach().clone()))
    return out


def test_gl_action_preserves_the_represented_matrix():
    _, U, V = problem()
    A = GeneralLinear(K).sample(torch.Generator().manual_seed(1))
    UA, VA = act(U, V, A)
    assert rel(UA, U) > BROKEN  # the factors genuinely change
    torch.testing.assert_close(represented(UA, VA), represented(U, V), rtol=0, atol=EXACT)


def test_euclidean_norm_is_preserved_iff_the_element_is_orthogonal():
    _, U, V = problem()

    def sq_norm(U, V):
        return float(U.pow(2).sum() + V.pow(2).sum())

    Q = haar_q()
    A = GeneralLinear(K).sample(torch.Generator().manual_seed(1))
    assert abs(sq_norm(*act(U, V, Q)) - sq_norm(U, V)) < EXACT
    assert abs(sq_norm(*act(U, V, A)) - sq_norm(U, V)) / sq_norm(U, V) > BROKEN


def test_autograd_gradients_are_covariant_under_an_orthogonal_gauge():
    task, U, V = problem()
    Q = haar_q()
    gU, gV = gradients(task, U, V)
    gUq, gVq = gradients(task, U @ Q, V @ Q)
    torch.testing.assert_close(gUq, gU @ Q, rtol=0, atol=EXACT)
    torch.testing.assert_close(gVq, gV @ Q, rtol=0, atol=EXACT)


def test_a_non_orthogonal_gauge_sends_the_gradient_to_g_b_inverse_transpose_not_g_b():
    task, U, V = problem()
    B = GeneralLinear(K).sample(torch.Generator().manual_seed(2))
    gU, _ = gradients(task, U, V)
    gUb, _ = gradients(task, *act(U, V, B))
    assert rel(gUb, gU @ B) > BROKEN  # covariance breaks
    torch.testing.assert_close(gUb, gU @ torch.linalg.inv(B).mT, rtol=0, atol=1e-10)


@pytest.mark.parametrize("rule", sorted(EQUIVARIANT_RULES))
def test_equivariant_rule_keeps_the_rotated_run_equal_to_the_rotated_base(rule):
    task, U0, V0 = problem()
    Q = haar_q()
    hyper = EQUIVARIANT_RULES[rule]
    base = trajectory(rule, task, U0, V0, 6, **hyper)
    twin = trajectory(rule, task, U0 @ Q, V0 @ Q, 6, **hyper)
    for (U, V), (Ut, Vt) in zip(base, twin, strict=True):
        torch.testing.assert_close(Ut, U @ Q, rtol=0, atol=LOOSE)
        torch.testing.assert_close(Vt, V @ Q, rtol=0, atol=LOOSE)
    moved = rel(torch.cat(base[-1]), torch.cat([U0, V0]))
    assert moved > BROKEN


@pytest.mark.parametrize("rule", COORDINATEWISE_RULES)
def test_coordinatewise_rule_breaks_the_orthogonal_gauge_at_step_one(rule):
    task, U0, V0 = problem()
    Q = haar_q()
    ((U, V),) = trajectory(rule, task, U0, V0, 1)
    ((Ut, Vt),) = trajectory(rule, task, U0 @ Q, V0 @ Q, 1)
    aligned = torch.cat([Ut @ Q.mT, Vt @ Q.mT])  # the twin gauge-aligned back by Qᵀ
    assert rel(aligned, torch.cat([U, V])) > BROKEN
    assert rel(represented(Ut, Vt), represented(U, V)) > LOOSE


@pytest.mark.parametrize("rule", SIGNED_PERMUTATION_RULES)
def test_coordinatewise_rule_is_exactly_equivariant_under_signed_permutations(rule):
    task, U0, V0 = problem()
    P = SignedPermutation(K).sample(torch.Generator().manual_seed(4), F64)
    assert not torch.equal(P.abs(), torch.eye(K, dtype=F64))  # a genuine permutation
    base = trajectory(rule, task, U0, V0, 6)
    twin = trajectory(rule, task, U0 @ P, V0 @ P, 6)
    for (U, V), (Ut, Vt) in zip(base, twin, strict=True):
        torch.testing.assert_close(Ut, U @ P, rtol=0, atol=EXACT)
        torch.testing.assert_close(Vt, V @ P, rtol=0, atol=EXACT)
    Q = haar_q()
    ((Uq, _),) = trajectory(rule, task, U0 @ Q, V0 @ Q, 1)
    assert rel(Uq @ Q.mT, base[0][0]) > BROKEN  # …while a generic orthogonal Q breaks it
