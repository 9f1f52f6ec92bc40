"""gaugelab.tasks.sensing: the matrix-sensing testbed of PROTOCOLS §3, its spectral-tail
variant, and the metrics (recovery error, effective rank, balancedness)."""

import pytest
import torch

from gaugelab.tasks import (
    MatrixSensing,
    SensingInstance,
    balancedness,
    effective_rank,
    factor_init,
    make_sensing,
)

F64 = torch.float64


@pytest.fixture(scope="module")
def reference():
    return MatrixSensing()  # n = 40, r = 3, seed 42, float32


@pytest.fixture(scope="module")
def reference64():
    return MatrixSensing(dtype=F64)


def test_defaults_are_the_zoo_setting(reference):
    # m = 2·r(2n − r) = 2·3·77 = 462
    assert (reference.n, reference.rank, reference.k, reference.m) == (40, 3, 40, 462)
    assert (reference.init_scale, reference.seed, reference.tail) == (1e-3, 42, 0.0)
    assert reference.dtype == torch.float32


def test_default_m_for_60_by_60_rank_5_is_1150():
    assert MatrixSensing(n=60, rank=5).m == 1150  # 2·5·(120 − 5)


def test_shapes_and_dtypes(reference):
    assert reference.A.shape == (462, 1600)
    assert reference.y.shape == (462,)
    assert reference.target.shape == reference.planted.shape == (40, 40)
    assert reference.u_star.shape == reference.v_star.shape == (40, 3)
    assert reference.residual is None
    U, V = reference.init_factors()
    assert U.shape == V.shape == (40, 40)
    for t in (reference.A, reference.y, reference.target, U, V):
        assert t.dtype == torch.float32
    assert reference.init_factors(F64)[0].dtype == F64


def test_draw_order_is_the_reference_protocol(reference):
    g = torch.Generator().manual_seed(42)
    u = torch.randn(40, 3, generator=g) / 3**0.5
    v = torch.randn(40, 3, generator=g) / 3**0.5
    A = torch.randn(462, 1600, generator=g)
    assert torch.equal(reference.target, u @ v.T)
    assert torch.equal(reference.A, A)
    g2 = torch.Generator().manual_seed(49)  # factors: seed + 7
    U, V = reference.init_factors()
    assert torch.equal(U, 1e-3 * torch.randn(40, 40, generator=g2))
    assert torch.equal(V, 1e-3 * torch.randn(40, 40, generator=g2))


def test_task_is_make_sensing_and_factor_init(reference):
    plain = make_sensing(40, 3, 462, seed=42)
    assert isinstance(plain, SensingInstance)
    assert torch.equal(plain.A, reference.A) and torch.equal(plain.y, reference.y)
    U, V = factor_init(40, 40, seed=49, scale=1e-3)
    assert torch.equal(U, reference.init_factors()[0])
    assert torch.equal(V, reference.init_factors()[1])


def test_planted_matrix_has_rank_3(reference64):
    sigma = torch.linalg.svdvals(reference64.target)
    assert int((sigma > 1e-10 * sigma[0]).sum()) == 3


def test_measurements_are_A_vec_target_row_major(reference64):
    X = reference64.target
    expected = torch.stack([(reference64.A[i].reshape(40, 40) * X).sum() for i in range(462)])
    torch.testing.assert_close(reference64.y, expected, rtol=1e-12, atol=1e-12)


def test_loss_and_recovery_error_vanish_at_the_target_in_float64(reference64):
    X = reference64.target
    assert float(reference64.loss(X)) < 1e-24 * float((reference64.y**2).mean())
    assert float(reference64.recovery_error(X)) == 0.0


def test_loss_and_metrics_are_batched_over_members(reference64):
    X = reference64.target
    W = torch.stack([X, 2 * X, torch.zeros_like(X)])  # [3, 40, 40]
    loss = reference64.loss(W)
    assert loss.shape == (3,)
    # W = 2X* → residual y, so the loss is mean(y²); W = 0 → residual −y, the same
    torch.testing.assert_close(loss[1:], (reference64.y**2).mean().expand(2), rtol=1e-12, atol=0)
    torch.testing.assert_close(reference64.recovery_error(W), torch.tensor([0.0, 1, 1], dtype=F64))
    erank = reference64.effective_rank(W.reshape(3, 1, 40, 40), convention="roy_vetterli")
    assert erank.shape == (3, 1)
    # the method passes its convention through to the function
    assert torch.equal(erank[:, 0], effective_rank(W, convention="roy_vetterli"))
    assert torch.equal(reference64.effective_rank(W), effective_rank(W, convention="energy"))
    U, V = reference64.init_factors()
    b = reference64.balancedness(torch.stack([U, V]), torch.stack([U, U]))
    assert float(b[0]) == 0.0  # member 0 is (U, U)
    assert float(b[1]) > 0


@pytest.mark.parametrize("convention", ["energy", "roy_vetterli"])
def test_effective_rank_of_singular_values_1_1_0_is_2_exactly(convention):
    # p = (½, ½, 0, …) in both conventions: H = log 2, exp H = 2
    W = torch.diag(torch.tensor([1.0, 1.0, 0.0, 0.0, 0.0], dtype=F64))
    assert float(effective_rank(W, convention=convention)) == 2.0


@pytest.mark.parametrize("convention", ["energy", "roy_vetterli"])
def test_effective_rank_of_identity_3_is_3(convention):
    got = float(effective_rank(torch.eye(3, dtype=F64), convention=convention))
    assert got == pytest.approx(3.0, abs=1e-14)


def test_roy_vetterli_effective_rank_uses_singular_values_not_their_squares():
    # σ = (2, 1): p = (2/3, 1/3); squared (the energy convention) gives p = (4/5, 1/5)
    W = torch.diag(torch.tensor([2.0, 1.0], dtype=F64))
    for convention, p in (("roy_vetterli", [2 / 3, 1 / 3]), ("energy", [4 / 5, 1 / 5])):
        p = torch.tensor(p, dtype=F64)
        expected = torch.exp(-(p * p.log()).sum())
        got = effective_rank(W, convention=convention)
        torch.testing.assert_close(got, expected, rtol=1e-14, atol=0)


def test_effective_rank_of_zero_matrix_is_zero():
    for convention in ("energy", "roy_vetterli"):
        assert float(effective_rank(torch.zeros(4, 4, dtype=F64), convention=convention)) == 0.0


def test_balancedness_is_frobenius_norm_of_gram_difference():
    U = torch.tensor([[1.0, 0.0], [0.0, 2.0]], dtype=F64)
    V = torch.eye(2, dtype=F64)
    assert float(balancedness(U, V)) == 3.0  # UᵀU − VᵀV = diag(0, 3)


@pytest.mark.parametrize("tail", [0.3, 0.7])
def test_tail_target_keeps_the_planted_norm(tail):
    task = MatrixSensing(n=12, rank=2, m=60, tail=tail, dtype=F64)
    X, E = task.planted, task.residual
    # ‖√(1−τ²)X* + τE‖² = (1−τ²)‖X*‖² + τ²‖E‖² = ‖X*‖², since ⟨X*, E⟩_F = 0 and ‖E‖ = ‖X*‖
    assert float((X * E).sum()) == pytest.approx(0.0, abs=1e-12)
    torch.testing.assert_close(torch.linalg.norm(E), torch.linalg.norm(X), rtol=1e-14, atol=0)
    torch.testing.assert_close(
        torch.linalg.norm(task.target), torch.linalg.norm(X), rtol=1e-14, atol=0
    )
    torch.testing.assert_close(
        task.target, (1 - tail**2) ** 0.5 * X + tail * E, rtol=1e-15, atol=1e-15
    )
    torch.testing.assert_close(task.y, task.A @ task.target.reshape(-1), rtol=0, atol=0)


def test_tail_residual_is_orthogonal_to_planted_column_spaces():
    task = MatrixSensing(n=12, rank=2, m=60, tail=0.5, dtype=F64)
    E = task.residual
    assert float(torch.linalg.norm(task.u_star.T @ E)) < 1e-9
    assert float(torch.linalg.norm(E @ task.v_star)) < 1e-9
    assert float(torch.linalg.norm(E)) > 1e-3  # not trivially zero


def test_tail_noise_is_drawn_after_A_from_the_same_generator():
    task = MatrixSensing(n=12, rank=2, m=60, tail=0.5, dtype=F64)
    g = torch.Generator().manual_seed(42)
    for shape in ((12, 2), (12, 2), (60, 144)):
        torch.randn(shape, generator=g)
    N = torch.randn(12, 12, generator=g).to(F64)
    Qu = torch.linalg.qr(task.u_star).Q
    Qv = torch.linalg.qr(task.v_star).Q
    eye = torch.eye(12, dtype=F64)
    E = (eye - Qu @ Qu.T) @ N @ (eye - Qv @ Qv.T)
    E = E * torch.linalg.norm(task.planted) / torch.linalg.norm(E)
    torch.testing.assert_close(task.residual, E, rtol=1e-12, atol=1e-12)
    assert torch.equal(task.A, MatrixSensing(n=12, rank=2, m=60, dtype=F64).A)


@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_tail_zero_is_bit_identical_to_the_plain_instance(dtype):
    plain = make_sensing(40, 3, 462, seed=42, dtype=dtype)
    task = MatrixSensing(tail=0.0, dtype=dtype)
    for a, b in ((plain.A, task.A), (plain.y, task.y), (plain.target, task.target)):
        assert torch.equal(a, b)
    assert torch.equal(make_sensing(40, 3, 462, seed=42, dtype=dtype, tail=0.0).y, plain.y)


def test_float32_draws_are_cast_for_float64():
    t32, t64 = MatrixSensing(n=10, rank=2, m=30), MatrixSensing(n=10, rank=2, m=30, dtype=F64)
    assert torch.equal(t32.A.to(F64), t64.A)  # A is drawn in float32 then cast


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n": 0}, "n=0.*>= 1"),
        ({"rank": 0}, "rank=0.*>= 1"),
        ({"n": 4, "rank": 5}, "rank=5.*rank <= n=4"),
        ({"k": 0}, "k=0.*>= 1"),
        ({"m": 0}, "m=0.*>= 1"),
        ({"m": 1.5}, "m=1.5"),
        ({"init_scale": 0.0}, "init_scale=0.0.*> 0"),
        ({"init_scale": float("nan")}, "init_scale=nan"),
        ({"tail": -0.1}, r"tail=-0.1.*\[0, 1\)"),
        ({"tail": 1.0}, r"tail=1.0.*\[0, 1\)"),
        ({"n": 3, "rank": 3, "tail": 0.5}, "tail=0.5 needs rank < n"),
        ({"dtype": torch.float16}, "dtype=torch.float16"),
        ({"seed": 1.5}, "seed=1.5"),
    ],
)
def test_bad_arguments_raise_value_error_naming_them(kwargs, match):
    with pytest.raises(ValueError, match=match):
        MatrixSensing(**kwargs)


def test_make_sensing_bad_arguments_raise():
    with pytest.raises(ValueError, match="measurements=0"):
        make_sensing(4, 2, 0, seed=0)
    with pytest.raises(ValueError, match="rank=5 exceeds"):
        make_sensing(4, 5, 10, seed=0)
    with pytest.raises(ValueError, match="tail=2"):
        make_sensing(4, 2, 10, seed=0, tail=2)
    with pytest.raises(ValueError, match="shape"):
        effective_rank(torch.ones(3))
    with pytest.raises(ValueError, match="same k"):
        balancedness(torch.ones(3, 2), torch.ones(3, 4))
