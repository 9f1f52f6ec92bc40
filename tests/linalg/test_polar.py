"""Tests for gaugelab.linalg.polar: msign by SVD and by Newton–Schulz."""

import numpy as np
import pytest
import scipy.linalg
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gaugelab.linalg import MUON_COEFFICIENTS, haar_orthogonal, msign

pytestmark = pytest.mark.usefixtures("strict_dtypes")  # float64 identities: no silent promotion
EXACT = 1e-11
F64 = torch.float64
SHAPES = [(8, 4), (5, 5), (3, 6)]


def randn(*shape, seed=0, dtype=F64):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def close(actual, expected, atol=EXACT):
    torch.testing.assert_close(actual, expected, rtol=0, atol=atol)


def scalar_polynomial(s, steps, coefficients=MUON_COEFFICIENTS):
    a, b, c = coefficients
    for _ in range(steps):
        s = a * s + b * s**3 + c * s**5
    return s


@pytest.mark.parametrize("shape", SHAPES)
def test_msign_svd_equals_scipy_polar_factor(shape):
    X = randn(*shape, seed=1)
    # scipy: X = u p with u the orthogonal polar factor (orthonormal columns or rows).
    u, _ = scipy.linalg.polar(X.numpy(), side="right")
    close(msign(X), torch.from_numpy(np.ascontiguousarray(u)))


@pytest.mark.parametrize("shape", SHAPES)
def test_msign_svd_is_orthogonal_on_full_rank(shape):
    Y = msign(randn(*shape, seed=2))
    m, n = shape
    gram = Y.mT @ Y if m >= n else Y @ Y.mT
    close(gram, torch.eye(min(m, n), dtype=F64))


def test_msign_svd_of_rank_one_is_the_partial_isometry():
    a, b = randn(6, 1, seed=3), randn(4, 1, seed=4)
    # X = a bᵀ has compact SVD (a/|a|) |a||b| (b/|b|)ᵀ, so msign(X) = â b̂ᵀ.
    expected = (a / a.norm()) @ (b / b.norm()).mT
    close(msign(a @ b.mT), expected)


@pytest.mark.parametrize("method", ["svd", "newton_schulz"])
def test_msign_batched_equals_per_matrix_loop(method):
    X = randn(2, 3, 5, 4, seed=5)
    batched = msign(X, method=method)
    looped = torch.stack(
        [torch.stack([msign(X[i, j], method=method) for j in range(3)]) for i in range(2)]
    )
    close(batched, looped)


@pytest.mark.parametrize("method", ["svd", "newton_schulz"])
def test_msign_keeps_float32_as_float32(method):
    X = randn(6, 4, seed=6, dtype=torch.float32)
    Y = msign(X, method=method)
    assert Y.dtype == torch.float32
    # float32 work, so only float32 accuracy: it agrees with the float64 result to ~1e-6.
    torch.testing.assert_close(Y.double(), msign(X.double(), method=method), rtol=0, atol=1e-5)


@pytest.mark.parametrize("method", ["svd", "newton_schulz"])
@pytest.mark.parametrize("shape", SHAPES)
def test_msign_of_zero_is_zero_without_nan(method, shape):
    X = torch.zeros(3, *shape, dtype=F64)
    X[1] = randn(*shape, seed=7)  # one nonzero member must not disturb the zero ones
    Y = msign(X, method=method)
    assert torch.isfinite(Y).all()
    assert torch.equal(Y[0], torch.zeros(shape, dtype=F64))
    assert torch.equal(Y[2], torch.zeros(shape, dtype=F64))


def test_newton_schulz_zero_input_with_zero_eps_is_zero():
    assert torch.equal(msign(torch.zeros(3, 2), method="newton_schulz", eps=0.0), torch.zeros(3, 2))


@pytest.mark.parametrize("steps", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("shape", SHAPES)
def test_newton_schulz_is_left_and_right_equivariant(steps, shape):
    m, n = shape
    gen = torch.Generator().manual_seed(10 * steps + m)
    X = torch.randn(m, n, generator=gen, dtype=F64)
    P = haar_orthogonal(m, generator=gen)
    Q = haar_orthogonal(n, generator=gen)
    ns = lambda Z: msign(Z, method="newton_schulz", steps=steps)  # noqa: E731
    close(ns(P @ X @ Q), P @ ns(X) @ Q)
    close(ns(X @ Q), ns(X) @ Q)  # right-equivariance alone: the orthogonal gauge
    close(ns(P @ X), P @ ns(X))  # left-equivariance alone


@pytest.mark.parametrize("shape", SHAPES)
def test_msign_svd_is_left_and_right_equivariant(shape):
    m, n = shape
    gen = torch.Generator().manual_seed(m * n)
    X = torch.randn(m, n, generator=gen, dtype=F64)
    P, Q = haar_orthogonal(m, generator=gen), haar_orthogonal(n, generator=gen)
    close(msign(P @ X @ Q), P @ msign(X) @ Q, atol=1e-9)


@settings(max_examples=40, deadline=None)
@given(
    m=st.integers(1, 9),
    n=st.integers(1, 9),
    steps=st.integers(1, 6),
    seed=st.integers(0, 2**31 - 1),
)
def test_newton_schulz_equivariance_holds_for_random_shapes(m, n, steps, seed):
    gen = torch.Generator().manual_seed(seed)
    X = torch.randn(2, m, n, generator=gen, dtype=F64)
    P = haar_orthogonal(m, generator=gen, batch=(2,))
    Q = haar_orthogonal(n, generator=gen, batch=(2,))
    ns = lambda Z: msign(Z, method="newton_schulz", steps=steps)  # noqa: E731
    close(ns(P @ X @ Q), P @ ns(X) @ Q)


@pytest.mark.parametrize("steps", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("shape", SHAPES)
def test_newton_schulz_equals_iterated_scalar_polynomial(steps, shape):
    X = randn(*shape, seed=20 + steps)
    eps = 1e-7
    U, S, Vh = torch.linalg.svd(X, full_matrices=False)
    s = S / (torch.linalg.matrix_norm(X) + eps)  # normalised singular values
    expected = U @ torch.diag(scalar_polynomial(s, steps)) @ Vh
    close(msign(X, method="newton_schulz", steps=steps, eps=eps), expected)


def test_five_step_newton_schulz_is_not_the_polar_factor():
    X = randn(40, 40, seed=1)
    sigma = torch.linalg.svdvals(X)
    # The measured band below needs every normalised singular value >= 2e-3 (true for seed 1;
    # a square Gaussian matrix can have a far smaller one, e.g. seed 0 gives NS5 value 0.057).
    assert (sigma / torch.linalg.matrix_norm(X)).min() >= 2e-3
    sv = torch.linalg.svdvals(msign(X, method="newton_schulz"))
    # measured for seed 1: min 0.6824, max 1.1537
    assert sv.min() >= 0.68
    assert sv.max() <= 1.21
    assert sv.max() - sv.min() > 0.4  # far from all ones
    assert torch.linalg.matrix_norm(msign(X, method="newton_schulz") - msign(X)) > 1.0


def test_quintic_maps_the_normalised_band_into_measured_range():
    s = torch.linspace(2e-3, 1.0, 200_001, dtype=F64)
    y = scalar_polynomial(s, 5)
    # measured: p∘5 maps [2e-3, 1] onto [0.68183, 1.20237], not onto {1}
    assert 0.6818 <= y.min() <= 0.6819
    assert 1.2023 <= y.max() <= 1.2024


@pytest.mark.parametrize("delta", [1e-1, 1e-3, 1e-6])
def test_msign_lipschitz_blowup_is_one_over_delta(delta):
    X = torch.diag(torch.tensor([1.0, delta], dtype=F64))
    Y = torch.diag(torch.tensor([1.0, -delta], dtype=F64))
    # msign(X) = I, msign(Y) = diag(1, -1): output difference 2, input difference 2δ.
    close(msign(X), torch.eye(2, dtype=F64))
    close(msign(Y), torch.diag(torch.tensor([1.0, -1.0], dtype=F64)))
    quotient = torch.linalg.matrix_norm(msign(X) - msign(Y)) / torch.linalg.matrix_norm(X - Y)
    assert quotient.item() == pytest.approx(1 / delta, rel=1e-12)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"X": torch.ones(3, dtype=F64)}, r"msign: X .*\(3,\)"),
        ({"X": torch.ones(2, 2, dtype=torch.int64)}, r"msign: X .*torch\.int64"),
        ({"X": torch.ones(2, 2, dtype=F64), "method": "qr"}, r"msign: .*'qr'.*newton_schulz"),
        (
            {"X": torch.ones(2, 2, dtype=F64), "method": "newton_schulz", "steps": 0},
            r"msign: steps .*0",
        ),
    ],
)
def test_msign_rejects_bad_arguments(kwargs, match):
    X = kwargs.pop("X")
    with pytest.raises(ValueError, match=match):
        msign(X, **kwargs)
