"""gaugelab.tasks.sensing: the matrix-sensing instances."""

import pytest
import torch

from gaugelab.tasks import factor_init, make_sensing

F64 = torch.float64


def test_make_sensing_is_deterministic_given_the_seed():
    a = make_sensing(5, 2, 17, seed=42)
    b = make_sensing(5, 2, 17, seed=42)
    c = make_sensing(5, 2, 17, seed=43)
    assert torch.equal(a.A, b.A) and torch.equal(a.y, b.y) and torch.equal(a.target, b.target)
    assert not torch.equal(a.A, c.A)
    assert torch.equal(
        factor_init(5, 3, seed=1, scale=0.1)[0], factor_init(5, 3, seed=1, scale=0.1)[0]
    )


def test_measurements_are_a_times_row_major_vec_of_the_target():
    task = make_sensing(4, 2, 9, seed=0, n2=3, dtype=F64)
    assert task.A.shape == (9, 12) and task.y.shape == (9,) and task.target.shape == (4, 3)
    for i in range(9):
        inner = (task.A[i].reshape(4, 3) * task.target).sum()  # ⟨A_i, X*⟩, row-major reshape
        assert abs(float(inner - task.y[i])) < 1e-12


def test_draws_follow_the_reference_order():
    n, r, m, seed = 4, 2, 7, 5
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(n, r, generator=g).to(F64) / r**0.5
    v = torch.randn(n, r, generator=g).to(F64) / r**0.5
    A = torch.randn(m, n * n, generator=g).to(F64)
    task = make_sensing(n, r, m, seed=seed, dtype=F64)
    assert torch.equal(task.target, u @ v.T) and torch.equal(task.A, A)


@pytest.mark.parametrize("rank", [1, 2, 3])
def test_planted_matrix_has_the_requested_rank(rank):
    task = make_sensing(6, rank, 10, seed=1, n2=5, dtype=F64)
    assert int(torch.linalg.matrix_rank(task.target)) == rank


def test_float32_and_float64_instances_agree_to_float32_rounding():
    a = make_sensing(6, 2, 20, seed=3, dtype=torch.float32)
    b = make_sensing(6, 2, 20, seed=3, dtype=F64)
    assert a.A.dtype == torch.float32 and b.A.dtype == F64
    assert torch.equal(a.A.to(F64), b.A)  # draws are float32, then cast
    torch.testing.assert_close(a.target.to(F64), b.target, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(a.y.to(F64), b.y, rtol=1e-5, atol=1e-5)


def test_recovery_error_of_the_target_is_zero_and_loss_is_zero():
    task = make_sensing(6, 2, 20, seed=3, dtype=F64)
    assert float(task.recovery_error(task.target)) == 0.0
    assert float(task.loss(task.target)) < 1e-24
    assert abs(float(task.recovery_error(torch.zeros_like(task.target))) - 1.0) < 1e-15  # ‖X*‖/‖X*‖


def test_loss_and_recovery_error_are_per_ensemble_member():
    task = make_sensing(4, 1, 8, seed=0, dtype=F64)
    W = torch.stack([task.target, torch.zeros_like(task.target), 2 * task.target])  # [3, 4, 4]
    assert task.loss(W).shape == (3,)
    torch.testing.assert_close(task.recovery_error(W), torch.tensor([0.0, 1.0, 1.0], dtype=F64))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"n": 0, "rank": 1, "measurements": 5},
        {"n": 4, "rank": 0, "measurements": 5},
        {"n": 4, "rank": 5, "measurements": 5},
        {"n": 4, "rank": 2, "measurements": 0},
        {"n": 4, "rank": 2, "measurements": 5, "n2": 1},
        {"n": 4.0, "rank": 2, "measurements": 5},
    ],
    ids=["n", "rank-zero", "rank-too-big", "measurements", "rank-over-n2", "float-n"],
)
def test_make_sensing_rejects_bad_sizes(kwargs):
    with pytest.raises(ValueError, match="make_sensing"):
        make_sensing(**kwargs, seed=0)
