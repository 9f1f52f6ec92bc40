"""Tests for the projections of gaugelab.lowrank.intrinsic.protocol (seed 003 §0x02A–D): the fast
Walsh–Hadamard transform, adjoint parity of every family, the mutations parity must catch,
the orthonormal projector checks, and M against M R."""

import math

import pytest
import scipy.linalg
import torch

from gaugelab.lowrank.intrinsic.protocol import (
    FAMILIES,
    DIDReparameterization,
    FastfoodProjection,
    MatrixProjection,
    adjoint_defect,
    fastfood_width,
    fwht,
    induced_metric,
    is_orthonormal,
    make_projection,
    orthogonal_projector,
    reference_fwht,
)

pytestmark = pytest.mark.usefixtures("strict_dtypes")

F64 = torch.float64
PARITY = 1e-12
CAUGHT = 1e-3  # a mutated adjoint's defect is order one; anything above this is caught


# --- the fast Walsh–Hadamard transform --------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 4, 8, 32, 64, 128, 2048])
def test_fwht_equals_scipy_hadamard_matrix(n):
    x = torch.randn(3, 2, n, generator=torch.Generator().manual_seed(n), dtype=F64)
    H = torch.tensor(scipy.linalg.hadamard(n), dtype=F64)
    assert torch.allclose(fwht(x), x @ H, rtol=0, atol=1e-12 * n)
    assert torch.allclose(reference_fwht(x), x @ H, rtol=0, atol=1e-12 * n)


def test_fwht_is_exact_on_integers_and_an_involution_up_to_n():
    x = torch.arange(-8.0, 8.0, dtype=F64).reshape(1, 16)
    H = torch.tensor(scipy.linalg.hadamard(16), dtype=F64)
    assert torch.equal(fwht(x), x @ H)  # integer arithmetic: exact
    assert torch.equal(fwht(fwht(x)), 16 * x)  # H H = n I
    assert torch.equal(fwht(fwht(x, normalized=True), normalized=True), x)  # 16^-1/2 exact


def test_fwht_backward_is_itself_with_the_scale_once():
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(5, 64, generator=gen, dtype=F64, requires_grad=True)
    c = torch.randn(5, 64, generator=gen, dtype=F64)
    for normalized, scale in ((False, 1.0), (True, 1 / 8)):
        (g,) = torch.autograd.grad((fwht(x, normalized=normalized) * c).sum(), x)
        assert torch.allclose(g, scale * reference_fwht(c), rtol=0, atol=1e-12)
    assert torch.autograd.gradcheck(lambda t: fwht(t, normalized=True), (x[:2, :16],))
    assert torch.autograd.gradgradcheck(lambda t: fwht(t), (x[:1, :8],))


def test_fwht_rejects_bad_input():
    with pytest.raises(ValueError, match="power of two"):
        fwht(torch.zeros(3, 12, dtype=F64))
    with pytest.raises(ValueError, match="floating-point"):
        fwht(torch.zeros(4, dtype=torch.int64))


# --- adjoint parity of every family ----------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("shape", [(24, 3), (1000, 17), (37, 37), (5, 1), (2000, 130)])
def test_adjoint_parity_of_every_family(family, shape):
    D, d = shape
    P = make_projection(family, D, d, seed=3, dtype=F64)
    assert adjoint_defect(P, probes=6) < PARITY
    u = torch.randn(4, d, generator=torch.Generator().manual_seed(0), dtype=F64)
    assert torch.allclose(P.forward(u), torch.stack([P.forward(r) for r in u]), atol=1e-13)


@pytest.mark.parametrize("family", FAMILIES)
def test_same_identity_same_map_and_apply_backward_is_the_adjoint(family):
    P, Q = (make_projection(family, 300, 20, seed=9, dtype=F64) for _ in range(2))
    assert P.identity == Q.identity
    assert torch.equal(P.matrix(), Q.matrix())
    R = make_projection(family, 300, 20, seed=10, dtype=F64)
    assert not torch.equal(P.matrix(), R.matrix())
    u = torch.randn(20, generator=torch.Generator().manual_seed(1), dtype=F64, requires_grad=True)
    g = torch.randn(300, generator=torch.Generator().manual_seed(2), dtype=F64)
    (P.apply(u) @ g).backward()
    assert torch.equal(u.grad, P.adjoint(g))


def test_dense_families_normalize_columns_and_only_qr_is_orthonormal():
    dense = make_projection("dense", 500, 40, seed=0, dtype=F64).matrix()
    qr = make_projection("orthonormal", 500, 40, seed=0, dtype=F64).matrix()
    sparse = make_projection("sparse", 500, 40, seed=0, dtype=F64).matrix()
    for M in (dense, qr, sparse):
        assert torch.allclose(M.norm(dim=0), torch.ones(40, dtype=F64), atol=1e-12)
    assert is_orthonormal(qr)
    assert not is_orthonormal(dense) and not is_orthonormal(sparse)
    # a Fastfood map is not an orthogonal projector merely because it is random (§0x02B)
    assert not is_orthonormal(make_projection("fastfood", 500, 40, seed=0, dtype=F64).matrix())


def test_fastfood_columns_and_state_are_as_recorded():
    P = FastfoodProjection(64 * 8, 50, seed=4, dtype=F64)  # p = 64, 8 blocks, no trimming
    assert P.width == fastfood_width(50) == 64 and P.blocks == 8
    # column j has norm² Σ_b ‖G_b‖²/p² · p = Σ_b ‖G_b‖²/p (×1/p² from the 1/p normalization)
    expected = math.sqrt(float((P.diagonal**2).sum()) / 64)
    assert torch.allclose(P.matrix().norm(dim=0), torch.full((50,), expected, dtype=F64))
    U = FastfoodProjection(64 * 8, 50, seed=4, dtype=F64, normalization="unit-columns")
    assert torch.allclose(U.matrix().norm(dim=0), torch.ones(50, dtype=F64), atol=1e-12)
    assert U.identity.normalization == "unit-columns" and P.identity.normalization == "1/p"
    # O(D) state: int8 signs, int32 permutations, float32 diagonal — 9 bytes per padded row
    big = FastfoodProjection(100_000, 1000, seed=0)
    assert big.state_bytes() == 9 * big.blocks * 1024 <= 9 * (100_000 + 1024)


# --- the mutations adjoint parity must catch (§0x02A, §0x02D) ---------------------------------


class _GatherAdjoint(FastfoodProjection):
    """Mutation: the forward permutation reused in the adjoint (shape-correct)."""

    def adjoint(self, g):
        p, nb = self.width, self.blocks
        x = torch.nn.functional.pad(g, (0, nb * p - self.ambient_dim)).reshape(nb, p)
        x = fwht(x * self.scale) * self.diagonal
        x = torch.take_along_dim(x, self.permutations.long(), dim=-1)  # Π, not Πᵀ
        x = fwht(x) * self.signs.to(g.dtype)
        return x.sum(0)[: self.subspace_dim]


class _FrontPadAdjoint(FastfoodProjection):
    """Mutation: the trimming undone at the wrong end (zeros in front)."""

    def adjoint(self, g):
        extra = self.blocks * self.width - self.ambient_dim
        shifted = torch.nn.functional.pad(g, (extra, 0))[: self.ambient_dim]
        return super().adjoint(shifted) if extra else super().adjoint(g.flip(-1))


class _FirstBlockAdjoint(FastfoodProjection):
    """Mutation: no transpose accumulation (only the first block's contribution)."""

    def adjoint(self, g):
        only = torch.zeros_like(g)
        only[: self.width] = g[: self.width]
        return super().adjoint(only)


def _mutant(cls, D, d, seed=5):
    P = FastfoodProjection(D, d, seed, dtype=F64)
    m = cls.__new__(cls)
    m.__dict__.update(P.__dict__)
    return P, m


@pytest.mark.parametrize("cls", [_GatherAdjoint, _FrontPadAdjoint, _FirstBlockAdjoint])
def test_adjoint_parity_catches_each_fastfood_mutation(cls):
    P, mutant = _mutant(cls, 1000, 50)  # p = 64, 16 blocks, 24 rows trimmed
    assert adjoint_defect(P) < PARITY
    assert adjoint_defect(mutant.forward, mutant.adjoint, shape=(1000, 50)) > CAUGHT


def test_adjoint_parity_catches_a_wrong_transpose():
    M = make_projection("dense", 120, 30, seed=1, dtype=F64).matrix()
    right = adjoint_defect(lambda v: M @ v, lambda g: M.T @ g, shape=(120, 30))
    wrong = adjoint_defect(lambda v: M @ v, lambda g: M.reshape(30, 120) @ g, shape=(120, 30))
    assert right < PARITY and wrong > CAUGHT


@pytest.mark.parametrize("family", FAMILIES)
def test_adjoint_parity_catches_an_adjoint_from_another_seed(family):
    P = make_projection(family, 500, 20, seed=1, dtype=F64)
    other = make_projection(family, 500, 20, seed=2, dtype=F64)
    assert adjoint_defect(P.forward, other.adjoint, shape=(500, 20)) > CAUGHT


def test_adjoint_parity_catches_a_changed_flattening_order():
    """The composite map u → Δθ (a [4, 6] weight and a [3] bias, row-major) against the pullback
    of gradients flattened column-major: the shapes agree, the adjoint does not."""
    module = torch.nn.Linear(6, 4, dtype=F64)
    did = DIDReparameterization(module, lambda D: make_projection("dense", D, 5, 0, dtype=F64))
    P = did.projection

    def forward(v):  # Δθ as the module's tensors, flattened row-major
        return did.layout.flatten(did.layout.unflatten(P.forward(v)))

    def pullback(g, column_major):
        parts = did.layout.unflatten(g)
        flat = [
            t.mT.reshape(-1) if column_major and t.dim() == 2 else t.reshape(-1)
            for t in parts.values()
        ]
        return P.adjoint(torch.cat(flat))

    assert adjoint_defect(forward, lambda g: pullback(g, False), shape=(28, 5)) < PARITY
    assert adjoint_defect(forward, lambda g: pullback(g, True), shape=(28, 5)) > CAUGHT


# --- §0x02B: the orthonormal case, and M against M R ------------------------------------------


def test_orthonormal_family_is_a_projector_with_orthogonal_rejection():
    M = make_projection("orthonormal", 200, 12, seed=7, dtype=F64).matrix()
    Pi = induced_metric(M)
    g = torch.randn(200, generator=torch.Generator().manual_seed(0), dtype=F64)
    assert torch.allclose(M.T @ M, torch.eye(12, dtype=F64), atol=1e-12)
    assert torch.allclose(Pi, Pi.T, atol=0) and torch.allclose(Pi @ Pi, Pi, atol=1e-12)
    assert (M.T @ (g - Pi @ g)).abs().max() < 1e-12
    assert torch.allclose(orthogonal_projector(M), Pi, atol=1e-12)


def test_m_and_m_r_give_the_same_points_but_different_sgd_and_adam_steps():
    M = make_projection("orthonormal", 24, 3, seed=0, dtype=F64).matrix()
    R = torch.tensor([[1.0, 1.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 2.0]], dtype=F64)
    R_inv = torch.tensor([[1.0, -1.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.5]], dtype=F64)
    MR = M @ R
    u = torch.tensor([3.0, -1.0, 2.0], dtype=F64)
    assert torch.allclose(M @ u, MR @ (R_inv @ u), atol=1e-14)  # same represented points
    assert torch.allclose(orthogonal_projector(MR), orthogonal_projector(M), atol=1e-12)
    assert not torch.allclose(induced_metric(MR), induced_metric(M), atol=1e-3)
    g = torch.arange(24, dtype=F64) - 11.5  # a linear loss L = ⟨g, θ⟩
    steps = {}
    for name, matrix in (("M", M), ("MR", MR)):
        for opt in ("sgd", "adam"):
            module = torch.nn.Linear(6, 4, bias=False, dtype=F64)
            did = DIDReparameterization(module, MatrixProjection(matrix))
            optimizer = (torch.optim.SGD if opt == "sgd" else torch.optim.Adam)(
                did.parameters(), lr=0.1
            )
            (did.layout.flatten(did.parameters_now()) @ g).backward()
            optimizer.step()
            steps[name, opt] = did.delta().detach()
    # one SGD step: Δθ = −η M Mᵀ g (for M R: −η M R Rᵀ Mᵀ g)
    assert torch.allclose(steps["M", "sgd"], -0.1 * M @ (M.T @ g), atol=1e-12)
    assert torch.allclose(steps["MR", "sgd"], -0.1 * MR @ (MR.T @ g), atol=1e-12)
    for opt in ("sgd", "adam"):
        assert (steps["M", opt] - steps["MR", opt]).norm() > 1e-2
