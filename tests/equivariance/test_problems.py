"""Tests for gaugelab.equivariance.problems and the attention problem of the check."""

import pytest
import torch

from gaugelab.equivariance import check_equivariance
from gaugelab.equivariance.distance import relative_distance
from gaugelab.equivariance.problems import AttentionProblem, FactorProblem, make_problem
from gaugelab.gauge import Orthogonal, represented

F64 = torch.float64


@pytest.mark.parametrize(
    ("rule", "verdict"),
    [("gd", "equivariant"), ("scalar-adam", "equivariant"), ("muon", "equivariant"),
     ("adam", "breaks"), ("sign-sgd", "breaks")],
)  # fmt: skip
def test_attention_problem_certifies_the_head_gauge(rule, verdict):
    report = check_equivariance(rule, problem="attention", steps=4, draws=2, lr=1e-2)
    assert report.verdict == verdict
    assert report.claimed == verdict
    assert all(d == 0.0 for row in report.distances["identity"] for d in row)


@pytest.mark.parametrize("problem", ["sensing", "attention"])
def test_transform_then_align_is_the_identity(problem):
    task = make_problem(problem, F64, seed=3)
    params = task.initial()
    A = task.sample(Orthogonal(task.k), torch.Generator().manual_seed(0))
    back = task.align(task.transform(params, A), A)
    for p, q in zip(back, params, strict=True):
        assert (p - q).abs().max() <= 1e-12
    assert task.distance(task.transform(params, A), params) <= 1e-12  # represented: invariant


def test_attention_distance_sees_qk_invariants_and_logits():
    task = AttentionProblem(F64, seed=0)
    params = task.initial()
    moved = [p.clone() for p in params]
    q_index = task.names.index("blocks.0.attn.q_proj.weight")
    moved[q_index] = moved[q_index] * 1.01  # scales every QK invariant by 1.01
    # QK alone: ‖0.01·X‖ / (½(1.01 + 1)‖X‖) = 0.01 / 1.005 (the symmetric relative distance)
    assert task.distance(moved, params) >= 0.01 / 1.005 - 1e-12


def test_factor_problem_quadratic_loss_is_zero_at_the_target():
    task = FactorProblem("quadratic", F64, seed=0)
    target = task._sensing.target
    U, S, Vh = torch.linalg.svd(target)
    factors = [U[:, :3] * S[:3], Vh[:3].T]
    assert float(task.loss(factors)) <= 1e-24


def test_unknown_problem_lists_the_allowed_ones():
    with pytest.raises(ValueError, match="sensing, quadratic, attention"):
        make_problem("bogus", F64, 0)


def test_factor_distance_is_the_symmetric_relative_distance_of_represented_matrices():
    task = FactorProblem("sensing", F64, seed=0)
    base = task.initial()
    moved = [p + 0.1 for p in base]
    expected = relative_distance(represented(*moved), represented(*base))
    assert task.distance(moved, base) == float(expected) == task.distance(base, moved)


def test_attention_qk_objects_are_the_models_qk_invariants():
    task = AttentionProblem(F64, seed=1)
    params = task.initial()
    model = task.model  # holds the initial parameters
    expected = torch.stack([model.qk_invariant(i) for i in range(task.config.n_layers)])
    assert torch.equal(task._qk(params), expected.detach())
