"""gaugelab.optim.scaled_gd: ScaledGD on factor pairs, its damping and its GL(k) equivariance."""

import pytest
import torch
from typer.testing import CliRunner

from gaugelab import NonFiniteError
from gaugelab.cli import app
from gaugelab.equivariance import BREAKS, EQUIVARIANT, check_equivariance
from gaugelab.gauge import GeneralLinear, Orthogonal
from gaugelab.optim import CLAIMS, ScaledGD, claim, make_optimizer
from gaugelab.optim.scaled_gd import gram_damping

F64 = torch.float64


def randn(*shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=F64)


def quadratic(U, V, target):
    """½‖U Vᵀ − X‖²_F (summed over leading member dims)."""
    return 0.5 * ((U @ V.mT - target) ** 2).sum()


def step_once(opt, params, loss_fn):
    opt.zero_grad()
    loss_fn(*params).backward()
    opt.step()


def reference_step(U, V, GU, GV, lr, lam_u, lam_v):
    """The rule written out with explicit inverses (float64)."""
    k = U.shape[-1]
    eye = torch.eye(k, dtype=F64)
    return (
        U - lr * GU @ torch.linalg.inv(V.mT @ V + lam_v * eye),
        V - lr * GV @ torch.linalg.inv(U.mT @ U + lam_u * eye),
    )


@pytest.mark.parametrize("damping", ["auto", 0.0, 0.3])
def test_one_step_equals_the_closed_form_with_the_partner_gram(damping):
    U0, V0, X = randn(5, 3, seed=1), randn(4, 3, seed=2), randn(5, 4, seed=3)
    U, V = U0.clone().requires_grad_(True), V0.clone().requires_grad_(True)
    opt = ScaledGD([U, V], lr=0.1, damping=damping)
    step_once(opt, (U, V), lambda u, v: quadratic(u, v, X))
    R = U0 @ V0.mT - X
    GU, GV = R @ V0, R.mT @ U0  # gradients of ½‖U Vᵀ − X‖²
    if damping == "auto":  # 1e-4 · mean(diag(Gram)) + 1e-12 = 1e-4 · ‖F‖²_F / k + 1e-12
        lam_v = 1e-4 * (V0**2).sum() / 3 + 1e-12
        lam_u = 1e-4 * (U0**2).sum() / 3 + 1e-12
    else:
        lam_u = lam_v = damping
    U1, V1 = reference_step(U0, V0, GU, GV, 0.1, lam_u, lam_v)
    torch.testing.assert_close(U.detach(), U1, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(V.detach(), V1, rtol=1e-12, atol=1e-12)


def test_auto_damping_is_1e_minus_4_mean_diagonal_plus_1e_minus_12_per_matrix():
    gram = torch.stack(
        [torch.diag(torch.tensor([1.0, 3.0], dtype=F64)), torch.zeros(2, 2, dtype=F64)]
    )
    lam = gram_damping(gram, "auto")
    assert lam.shape == (2, 1, 1)
    assert lam[0].item() == 1e-4 * 2.0 + 1e-12  # mean(diag) = (1 + 3)/2
    assert lam[1].item() == 1e-12  # the floor keeps a zero Gram invertible
    assert gram_damping(gram, 0.5).flatten().tolist() == [0.5, 0.5]


def test_lora_layout_is_the_riemannian_preconditioned_lora_step():
    # B ← B − η G_B (AAᵀ + λI)⁻¹, A ← A − η (BᵀB + λI)⁻¹ G_A (zhang2024riemannian)
    B0, A0, X = randn(6, 2, seed=4), randn(2, 5, seed=5), randn(6, 5, seed=6)
    B, A = B0.clone().requires_grad_(True), A0.clone().requires_grad_(True)
    opt = ScaledGD([B, A], lr=0.2, damping=0.01, factors="ba")
    step_once(opt, (B, A), lambda b, a: 0.5 * ((b @ a - X) ** 2).sum())
    R = B0 @ A0 - X
    GB, GA = R @ A0.mT, B0.mT @ R
    eye = torch.eye(2, dtype=F64)
    torch.testing.assert_close(
        B.detach(),
        B0 - 0.2 * GB @ torch.linalg.inv(A0 @ A0.mT + 0.01 * eye),
        rtol=1e-12,
        atol=1e-12,
    )
    torch.testing.assert_close(
        A.detach(),
        A0 - 0.2 * torch.linalg.inv(B0.mT @ B0 + 0.01 * eye) @ GA,
        rtol=1e-12,
        atol=1e-12,
    )
    # the same step as the "uv" layout on (B, Aᵀ)
    U, V = B0.clone().requires_grad_(True), A0.mT.clone().requires_grad_(True)
    uv = ScaledGD([U, V], lr=0.2, damping=0.01)
    step_once(uv, (U, V), lambda u, v: quadratic(u, v, X))
    torch.testing.assert_close(U.detach(), B.detach(), rtol=0, atol=1e-13)
    torch.testing.assert_close(V.detach().mT, A.detach(), rtol=0, atol=1e-13)


def trajectory(U0, V0, X, steps, **hyper):
    U, V = U0.clone().requires_grad_(True), V0.clone().requires_grad_(True)
    opt = ScaledGD([U, V], lr=0.05, **hyper)
    out = []
    for _ in range(steps):
        step_once(opt, (U, V), lambda u, v: quadratic(u, v, X))
        out.append((U.detach().clone(), V.detach().clone()))
    return out


def gl_twin(U0, V0, M):
    return U0 @ M, V0 @ torch.linalg.inv(M).mT


def test_undamped_scaled_gd_is_equivariant_under_general_linear_elements():
    U0, V0, X = randn(6, 3, seed=7), randn(5, 3, seed=8), randn(6, 5, seed=9)
    M = GeneralLinear(3).sample(torch.Generator().manual_seed(10), F64)
    assert not Orthogonal(3).contains(M)
    base = trajectory(U0, V0, X, 5, damping=0.0)
    twin = trajectory(*gl_twin(U0, V0, M), X, 5, damping=0.0)
    Minv = torch.linalg.inv(M)
    for (U, V), (Ut, Vt) in zip(base, twin, strict=True):
        torch.testing.assert_close(Ut @ Minv, U, rtol=0, atol=1e-11)  # factors follow the gauge
        torch.testing.assert_close(Vt @ M.mT, V, rtol=0, atol=1e-11)
    assert (base[-1][0] - U0).abs().amax() > 1e-2  # it moved


def test_damped_scaled_gd_follows_orthogonal_but_not_general_linear_elements():
    U0, V0, X = randn(6, 3, seed=11), randn(5, 3, seed=12), randn(6, 5, seed=13)
    gen = torch.Generator().manual_seed(14)
    Q, M = Orthogonal(3).sample(gen, F64), GeneralLinear(3).sample(gen, F64)
    base = trajectory(U0, V0, X, 3, damping=0.5)
    (U, _), *_ = base
    (Uq, _), *_ = trajectory(*gl_twin(U0, V0, Q), X, 3, damping=0.5)
    (Um, _), *_ = trajectory(*gl_twin(U0, V0, M), X, 3, damping=0.5)
    torch.testing.assert_close(Uq @ Q.mT, U, rtol=0, atol=1e-12)
    assert (Um @ torch.linalg.inv(M) - U).abs().amax() > 1e-4  # λI does not move with M


def test_check_certifies_undamped_and_refutes_damped_scaled_gd_under_general_linear():
    undamped = check_equivariance("scaled-gd", group="general-linear", damping=0, steps=4, draws=2)
    assert undamped.verdict == EQUIVARIANT and undamped.claimed == EQUIVARIANT
    damped = check_equivariance("scaled-gd", group="general-linear", steps=4, draws=2)
    assert damped.verdict == BREAKS and damped.claimed == BREAKS, damped.explanation
    assert min(row[0] for row in damped.distances["gauge"]) > 1e-5  # the 1e-4 damping's defect


def test_claims_damped_orthogonal_only_and_undamped_general_linear():
    assert CLAIMS["scaled-gd"]["orthogonal"].property == EQUIVARIANT
    assert CLAIMS["scaled-gd"]["general-linear"].property == BREAKS  # the default damping
    assert claim("scaled-gd", "general-linear", damping=0).property == EQUIVARIANT
    assert claim("scaled-gd", "general-linear", damping=1e-3).property == BREAKS
    assert "zhang2024riemannian" in CLAIMS["scaled-gd"]["orthogonal"].source


def test_cli_lists_scaled_gd_and_check_gives_both_verdicts():
    runner = CliRunner()
    listed = runner.invoke(app, ["optimizers"], env={"COLUMNS": "200"})
    assert listed.exit_code == 0 and "scaled-gd" in listed.output
    args = ["check", "scaled-gd", "--group", "general-linear", "--steps", "3", "--draws", "1"]
    certified = runner.invoke(app, [*args, "--opt", "damping=0"], env={"COLUMNS": "200"})
    refuted = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert certified.exit_code == 0 and "equivariant" in certified.output
    assert "breaks" not in certified.output
    assert refuted.exit_code == 0 and "breaks" in refuted.output


def test_members_are_preconditioned_separately_in_the_lora_layout():
    B0, A0, X = randn(3, 4, 2, seed=15), randn(3, 2, 5, seed=16), randn(4, 5, seed=17)
    B, A = B0.clone().requires_grad_(True), A0.clone().requires_grad_(True)
    opt = make_optimizer("scaled-gd", [B, A], lr=0.1, factors="ba", member_dims=1)
    for _ in range(3):
        step_once(opt, (B, A), lambda b, a: 0.5 * ((b @ a - X) ** 2).sum())
    for e in range(3):
        b, a = B0[e].clone().requires_grad_(True), A0[e].clone().requires_grad_(True)
        single = make_optimizer("scaled-gd", [b, a], lr=0.1, factors="ba")
        for _ in range(3):
            step_once(single, (b, a), lambda b, a: 0.5 * ((b @ a - X) ** 2).sum())
        torch.testing.assert_close(B[e], b, rtol=0, atol=1e-13)
        torch.testing.assert_close(A[e], a, rtol=0, atol=1e-13)


def test_param_groups_of_pairs_with_their_own_rates_behave_like_separate_optimizers():
    X = randn(5, 4, seed=18)
    pairs = [(randn(5, 2, seed=s), randn(4, 2, seed=s + 1)) for s in (19, 21)]
    live = [tuple(t.clone().requires_grad_(True) for t in p) for p in pairs]
    grouped = ScaledGD(
        [{"params": list(live[0]), "lr": 0.01}, {"params": list(live[1]), "lr": 0.05}]
    )
    alone = [tuple(t.clone().requires_grad_(True) for t in p) for p in pairs]
    separate = [ScaledGD(list(alone[0]), lr=0.01), ScaledGD(list(alone[1]), lr=0.05)]

    def loss(pair_list):
        return sum(quadratic(u, v, X) for u, v in pair_list)

    for _ in range(3):
        grouped.zero_grad()
        loss(live).backward()
        grouped.step()
        for opt in separate:
            opt.zero_grad()
        loss(alone).backward()
        for opt in separate:
            opt.step()
    for a, b in zip(live, alone, strict=True):
        for x, y in zip(a, b, strict=True):
            assert torch.equal(x, y)


def test_a_singular_undamped_gram_raises_before_any_parameter_moves():
    B = torch.zeros(4, 2, dtype=F64, requires_grad=True)  # LoRA's B = 0 start: BᵀB = 0
    A = randn(2, 3, seed=23).requires_grad_(True)
    opt = ScaledGD([B, A], lr=0.1, damping=0, factors="ba")
    B.grad, A.grad = randn(4, 2, seed=24), torch.zeros(2, 3, dtype=F64)
    before = (B.detach().clone(), A.detach().clone())
    with pytest.raises(NonFiniteError, match="singular"):
        opt.step()
    assert torch.equal(B.detach(), before[0]) and torch.equal(A.detach(), before[1])
    damped = ScaledGD([B, A], lr=0.1, factors="ba")  # the default damping keeps it finite
    damped.step()
    assert torch.isfinite(B).all() and torch.equal(A.detach(), before[1])


@pytest.mark.parametrize(
    ("params", "hyper", "match"),
    [
        ([torch.zeros(3, 2)], {}, "pairs"),
        ([torch.zeros(3, 2), torch.zeros(4, 3)], {}, "shapes"),
        ([torch.zeros(3, 2), torch.zeros(2, 4)], {}, "factors='uv'"),
        ([torch.zeros(3, 2), torch.zeros(4, 2)], {"factors": "ba"}, "factors='ba'"),
        ([torch.zeros(3, 2), torch.zeros(4, 2)], {"damping": -1.0}, "damping"),
        ([torch.zeros(3, 2), torch.zeros(4, 2)], {"damping": "big"}, "damping"),
        ([torch.zeros(3, 2), torch.zeros(4, 2)], {"factors": "ab"}, "factors"),
        ([torch.zeros(2, 3, 2), torch.zeros(3, 4, 2)], {"member_dims": 1}, "member"),
    ],
)
def test_bad_input_is_rejected_with_a_message_naming_it(params, hyper, match):
    with pytest.raises(ValueError, match=match):
        ScaledGD([p.requires_grad_(True) for p in params], **hyper)
