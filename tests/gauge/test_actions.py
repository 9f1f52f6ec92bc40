"""Tests for gaugelab.gauge.actions: the GL gauge action on factor pairs."""

import pytest
import torch

from gaugelab.gauge import GeneralLinear, Orthogonal, act, inverse_transpose, represented

pytestmark = pytest.mark.usefixtures("strict_dtypes")  # float64 identities: no silent promotion
EXACT = 1e-11
F64 = torch.float64


def factors(seed=0, d1=6, d2=5, k=3, batch=()):
    g = torch.Generator().manual_seed(seed)
    U = 0.3 * torch.randn(*batch, d1, k, generator=g, dtype=F64)
    V = 0.3 * torch.randn(*batch, d2, k, generator=g, dtype=F64)
    return U, V


def close(actual, expected, atol=EXACT):
    torch.testing.assert_close(actual, expected, rtol=0, atol=atol)


def sq_norm(U, V):
    return (U**2).sum() + (V**2).sum()


@pytest.mark.parametrize("group", [Orthogonal(3), GeneralLinear(3)], ids=repr)
def test_gauge_action_preserves_the_represented_matrix(group):
    U, V = factors(seed=1)
    A = group.sample(torch.Generator().manual_seed(2))
    close(represented(*act(U, V, A)), represented(U, V))


def test_batched_gl_action_preserves_the_represented_matrix():
    U, V = factors(seed=3, batch=(4,))
    A = GeneralLinear(3).sample(torch.Generator().manual_seed(4), batch=(4,))
    close(represented(*act(U, V, A)), represented(U, V))


def test_euclidean_norm_is_preserved_by_orthogonal_a_only():
    U, V = factors(seed=5)
    Q = Orthogonal(3).sample(torch.Generator().manual_seed(6))
    A = GeneralLinear(3).sample(torch.Generator().manual_seed(6))
    close(sq_norm(*act(U, V, Q)), sq_norm(U, V))
    assert abs(sq_norm(*act(U, V, A)) - sq_norm(U, V)) > 1e-3


def test_act_with_orthogonal_q_is_exactly_the_right_products():
    U, V = factors(seed=7)
    Q = Orthogonal(3).sample(torch.Generator().manual_seed(8))
    for flag in (None, True):
        U2, V2 = act(U, V, Q, orthogonal=flag)
        assert torch.equal(U2, U @ Q)
        assert torch.equal(V2, V @ Q)


def test_act_with_orthogonal_false_solves_and_agrees_to_round_off():
    U, V = factors(seed=9)
    Q = Orthogonal(3).sample(torch.Generator().manual_seed(10))
    U2, V2 = act(U, V, Q, orthogonal=False)
    assert torch.equal(U2, U @ Q)
    close(V2, V @ Q)


def test_act_with_gl_uses_the_inverse_transpose():
    U, V = factors(seed=11)
    A = GeneralLinear(3).sample(torch.Generator().manual_seed(12))
    U2, V2 = act(U, V, A)
    assert torch.equal(U2, U @ A)
    close(V2, V @ torch.linalg.inv(A).mT)
    close(inverse_transpose(A).mT @ A, torch.eye(3, dtype=F64))


@pytest.mark.parametrize(
    ("shapes", "match"),
    [
        (((6, 3), (5, 2), (3, 3)), r"act: U .* share k.*\(6, 3\).*\(5, 2\)"),
        (((6, 3), (5, 3), (2, 2)), r"act: A .*k=3.*\(2, 2\)"),
        (((6, 3), (5, 3), (3, 2)), r"act: A .*\(3, 2\)"),
        (((2, 6, 3), (3, 5, 3), (3, 3)), r"act: leading .*\(2, 6, 3\).*\(3, 5, 3\)"),
        (((3,), (5, 3), (3, 3)), r"act: U .*\(3,\)"),
    ],
)
def test_act_rejects_mismatched_shapes(shapes, match):
    U, V, A = (torch.zeros(s, dtype=F64) for s in shapes)
    with pytest.raises(ValueError, match=match):
        act(U, V, A)


def test_represented_rejects_mismatched_k():
    with pytest.raises(ValueError, match=r"represented: .*\(6, 3\).*\(5, 2\)"):
        represented(torch.zeros(6, 3, dtype=F64), torch.zeros(5, 2, dtype=F64))


def test_inverse_transpose_rejects_non_square():
    with pytest.raises(ValueError, match=r"inverse_transpose: A .*\(3, 2\)"):
        inverse_transpose(torch.zeros(3, 2, dtype=F64))


def test_act_rejects_mixed_dtypes():
    U, V = factors(seed=13)
    with pytest.raises(TypeError, match="float32"):
        act(U, V, torch.eye(3, dtype=torch.float32))
