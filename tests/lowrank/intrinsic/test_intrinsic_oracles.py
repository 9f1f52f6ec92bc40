"""The three exact oracles of seed 003 §0x02I, constructed here (the seed describes them without
printing values): (1) a D = 24, d = 3 orthonormal teaching matrix; (2) a six-block, width-four
Fastfood trace with rational (dyadic) diagonals; (3) a two-group SAID trace with its first- and
second-order directional coefficients. Every reference is computed with ``fractions.Fraction``;
the dyadic fixtures make float64 exact, so the library is compared with ``==``."""

from fractions import Fraction as Fr

import pytest
import scipy.linalg
import torch
from torch import nn

from gaugelab.lowrank.intrinsic.protocol import (
    DegenerateBudget,
    DIDReparameterization,
    FastfoodProjection,
    MatrixProjection,
    SAIDReparameterization,
    adjoint_defect,
    induced_metric,
    is_orthonormal,
    said_ledger,
)

pytestmark = pytest.mark.usefixtures("strict_dtypes")

F64 = torch.float64


def _t(rows):
    return torch.tensor([[float(x) for x in r] for r in rows], dtype=F64)


def _matmul(A, B):
    return [
        [sum(A[i][k] * B[k][j] for k in range(len(B))) for j in range(len(B[0]))]
        for i in range(len(A))
    ]


# --- (1) the D = 24, d = 3 orthonormal teaching matrix ---------------------------------------

# M = columns 1..3 of H_16 / 4 on the rows k + ⌊k/2⌋ (k < 16) of ℝ^24, zeros elsewhere:
# entries ±1/4, sixteen per column, pairwise orthogonal Hadamard columns, so MᵀM = I exactly.
TEACH_ROWS = [0, 1, 3, 4, 6, 7, 9, 10, 12, 13, 15, 16, 18, 19, 21, 22]
H16 = scipy.linalg.hadamard(16)
TEACH = [[Fr(0)] * 3 for _ in range(24)]
for _k, _r in enumerate(TEACH_ROWS):
    for _j in range(3):
        TEACH[_r][_j] = Fr(int(H16[_k][_j + 1]), 4)
G_PROBE = [Fr((3 * i) % 7 - 3) for i in range(24)]  # integer probe gradient, row-major W[4, 6]


class _Weight(nn.Module):
    """θ = W[4, 6] row-major; the linear probe loss L = ⟨G, W⟩."""

    def __init__(self):
        super().__init__()
        self.W = nn.Parameter(torch.zeros(4, 6, dtype=F64))

    def forward(self, G):
        return (self.W * G).sum()


def test_teaching_matrix_is_orthonormal_and_mmt_is_its_projector():
    M = _t(TEACH)
    assert torch.equal(M.T @ M, torch.eye(3, dtype=F64)) and is_orthonormal(M, tol=0.0)
    Pi = induced_metric(M)
    assert torch.equal(Pi @ Pi, Pi) and torch.equal(Pi, Pi.T)
    g = _t([G_PROBE])[0]
    assert torch.equal(M.T @ (g - Pi @ g), torch.zeros(3, dtype=F64))  # rejected ⟂ col(M)
    assert adjoint_defect(MatrixProjection(M)) < 1e-15
    v = torch.tensor([1.0, -2.0, 3.0], dtype=F64)
    assert float(g @ (M @ v)) == float((M.T @ g) @ v)  # exact on integers and quarters


def test_teaching_matrix_gradient_pullback_through_did():
    # ∇_u L = Mᵀ ∇_θ L = Mᵀ g; by Fractions:
    expected = [sum(TEACH[i][j] * G_PROBE[i] for i in range(24)) for j in range(3)]
    assert expected == [Fr(-3, 4), Fr(-9, 4), Fr(7, 4)]
    did = DIDReparameterization(_Weight(), MatrixProjection(_t(TEACH)))
    assert torch.equal(did.u.detach(), torch.zeros(3, dtype=F64))  # u = 0: θ = θ₀ at start
    did(_t([G_PROBE]).reshape(4, 6)).backward()
    assert did.u.grad.tolist() == [float(x) for x in expected]
    # one plain step: Δθ = −η M Mᵀ g
    with torch.no_grad():
        did.u -= 0.5 * did.u.grad
    step = _matmul(TEACH, [[-Fr(1, 2) * e] for e in expected])
    assert did.delta().tolist() == [float(r[0]) for r in step]


# --- (2) the six-block, width-four Fastfood trace ---------------------------------------------

SIGNS = [
    [1, -1, 1, 1],
    [-1, -1, 1, -1],
    [1, 1, -1, 1],
    [-1, 1, 1, 1],
    [1, -1, -1, -1],
    [1, 1, 1, -1],
]
PERMS = [[2, 0, 3, 1], [1, 3, 0, 2], [3, 2, 1, 0], [0, 2, 1, 3], [1, 0, 3, 2], [2, 3, 0, 1]]
DIAG = [
    [Fr(1, 2), Fr(-3, 4), Fr(5, 4), Fr(1)],
    [Fr(-1, 4), Fr(3, 2), Fr(1, 8), Fr(-2)],
    [Fr(7, 8), Fr(1, 2), Fr(-5, 8), Fr(3, 4)],
    [Fr(2), Fr(-1, 8), Fr(3, 8), Fr(1, 4)],
    [Fr(-3, 2), Fr(5, 8), Fr(1, 2), Fr(-7, 4)],
    [Fr(3, 4), Fr(-1, 2), Fr(9, 8), Fr(1, 8)],
]
H4 = [[Fr(int(x)) for x in row] for row in scipy.linalg.hadamard(4)]


def _fastfood_reference():
    """[24, 4] stacked (1/4) H G_b Π_b H B_b by Fractions; (Π x)_i = x[π_i], Π[i, π_i] = 1."""
    rows = []
    for b in range(6):
        B = [[Fr(SIGNS[b][i]) if i == j else Fr(0) for j in range(4)] for i in range(4)]
        Pi = [[Fr(1) if PERMS[b][i] == j else Fr(0) for j in range(4)] for i in range(4)]
        G = [[DIAG[b][i] if i == j else Fr(0) for j in range(4)] for i in range(4)]
        block = _matmul(H4, _matmul(G, _matmul(Pi, _matmul(H4, B))))
        rows += [[x / 4 for x in r] for r in block]
    return rows


def _fastfood(D, d):
    return FastfoodProjection.from_state(D, d, torch.tensor(SIGNS), _t(DIAG), torch.tensor(PERMS))


def test_fastfood_trace_equals_the_rational_block_product():
    P = _fastfood(24, 4)  # p = 4, n_b = 6, no padding, no trimming
    ref = _fastfood_reference()
    assert P.matrix().tolist() == [[float(x) for x in r] for r in ref]
    u = [Fr(1), Fr(2), Fr(-1), Fr(1, 2)]
    y = [sum(r[j] * u[j] for j in range(4)) for r in ref]
    assert y[:4] == [Fr(2), Fr(11, 16), Fr(-25, 16), Fr(-11, 8)]  # block 1 stated
    assert P.forward(torch.tensor([1.0, 2.0, -1.0, 0.5], dtype=F64)).tolist() == [
        float(x) for x in y
    ]
    # the adjoint is the exact transpose: every block's contribution summed
    eye = torch.eye(24, dtype=F64)
    assert P.adjoint(eye).tolist() == [[float(x) for x in r] for r in ref]  # row i: Pᵀ e_i
    assert adjoint_defect(P) < 1e-15


def test_fastfood_trace_pads_d_and_trims_d_exactly():
    ref = _fastfood_reference()
    padded = _fastfood(24, 3)  # d = 3 padded to p = 4: the fourth column is never read
    assert padded.matrix().tolist() == [[float(x) for x in r[:3]] for r in ref]
    trimmed = _fastfood(22, 4)  # 6 blocks of 4 = 24 rows, the last two trimmed
    assert trimmed.matrix().tolist() == [[float(x) for x in r] for r in ref[:22]]
    g = torch.arange(22, dtype=F64) - 7  # un-trim appends zeros: the last two rows never read
    expected = [sum(ref[i][j] * Fr(i - 7) for i in range(22)) for j in range(4)]
    assert trimmed.adjoint(g).tolist() == [float(x) for x in expected]
    with pytest.raises(ValueError, match="not a permutation"):
        FastfoodProjection.from_state(
            24, 4, torch.tensor(SIGNS), _t(DIAG), torch.tensor([[0, 0, 1, 2]] * 6)
        )


def test_fastfood_block_order_matters():
    swapped = FastfoodProjection.from_state(
        24, 4, torch.tensor(SIGNS[::-1]), _t(DIAG[::-1]), torch.tensor(PERMS[::-1])
    )
    M, S = _fastfood(24, 4).matrix(), swapped.matrix()
    assert torch.equal(S, torch.cat([M[20:24], M[16:20], M[12:16], M[8:12], M[4:8], M[0:4]]))
    assert not torch.equal(S, M)


# --- (3) the two-group SAID trace -------------------------------------------------------------


class _TwoGroups(nn.Module):
    """θ = [a (2×6, row-major) ; b (12)] ∈ ℝ^24; L = ⟨g, θ⟩ with g = G_PROBE."""

    def __init__(self):
        super().__init__()
        self.a = nn.Parameter(torch.zeros(2, 6, dtype=F64))
        self.b = nn.Parameter(torch.zeros(12, dtype=F64))

    def forward(self):
        g = _t([G_PROBE])[0]
        return (self.a.reshape(-1) * g[:12]).sum() + (self.b * g[12:]).sum()


def _said(z, lam):
    said = SAIDReparameterization(_TwoGroups(), _fastfood(24, 4), 6, groups=[["a"], ["b"]])
    with torch.no_grad():
        said.z.copy_(torch.tensor(z, dtype=F64))
        said.scales.copy_(torch.tensor(lam, dtype=F64))
    return said


def _said_loss_ref(z, lam):
    """L(z, λ) = Σ_i λ_i ⟨g_i, R_i P z⟩ by Fractions."""
    q = [sum(r[j] * z[j] for j in range(4)) for r in _fastfood_reference()]
    return sum((lam[0] if i < 12 else lam[1]) * G_PROBE[i] * q[i] for i in range(24))


def test_said_ledger_counts_the_scales_inside_d_and_d_equal_m_is_degenerate():
    assert said_ledger(6, 2) == {"d": 6, "shared": 4, "scales": 2}  # d = (d − m) + m
    assert _said([0] * 4, [1, 1]).ledger()["d"] == 6
    with pytest.raises(DegenerateBudget, match="no-update"):
        SAIDReparameterization(
            _TwoGroups(), lambda D, k: _fastfood(24, 4), 2, groups=[["a"], ["b"]]
        )
    with pytest.raises(ValueError, match="d >= m"):
        said_ledger(1, 2)


def test_said_gradients_and_the_bilinear_directional_polynomial():
    z, lam = [Fr(1, 2), Fr(-1), Fr(1, 4), Fr(2)], [Fr(3, 2), Fr(-1, 2)]
    zdot, lamdot = [Fr(1), Fr(1, 2), Fr(-1), Fr(0)], [Fr(-1), Fr(2)]
    said = _said(z, lam)
    loss = said()
    assert float(loss.detach()) == float(_said_loss_ref(z, lam))
    loss.backward()
    ref = _fastfood_reference()
    scaled = [(lam[0] if i < 12 else lam[1]) * G_PROBE[i] for i in range(24)]
    grad_z = [sum(ref[i][j] * scaled[i] for i in range(24)) for j in range(4)]  # Pᵀ Σ λ_i R_iᵀ g_i
    q = [sum(r[j] * z[j] for j in range(4)) for r in ref]
    grad_lam = [
        sum(G_PROBE[i] * q[i] for i in range(12)),
        sum(G_PROBE[i] * q[i] for i in range(12, 24)),
    ]  # ⟨g_i, R_i q⟩
    assert grad_z == [Fr(-89, 8), Fr(21, 32), Fr(-35, 16), Fr(1, 32)]  # stated
    assert grad_lam == [Fr(-149, 32), Fr(-9, 16)]  # stated
    assert said.z.grad.tolist() == [float(x) for x in grad_z]
    assert said.scales.grad.tolist() == [float(x) for x in grad_lam]
    # L(z + t ż, λ + t λ̇) = c0 + c1 t + c2 t², c2 = Σ_i λ̇_i ⟨g_i, R_i P ż⟩
    c0 = _said_loss_ref(z, lam)
    c1 = sum(a * b for a, b in zip(grad_z, zdot, strict=True)) + sum(
        a * b for a, b in zip(grad_lam, lamdot, strict=True)
    )
    pz = [sum(r[j] * zdot[j] for j in range(4)) for r in ref]
    c2 = lamdot[0] * sum(G_PROBE[i] * pz[i] for i in range(12)) + lamdot[1] * sum(
        G_PROBE[i] * pz[i] for i in range(12, 24)
    )
    assert (c0, c1, c2) == (Fr(-429, 64), Fr(-325, 64), Fr(151, 16))  # stated; c2 ≠ 0: bilinear
    for t in (Fr(-1), Fr(1), Fr(2), Fr(3, 2)):
        moved = _said(
            [a + t * b for a, b in zip(z, zdot, strict=True)],
            [a + t * b for a, b in zip(lam, lamdot, strict=True)],
        )
        assert float(moved().detach()) == float(c0 + c1 * t + c2 * t * t)


def test_said_initialization_blocking():
    said = _said([0] * 4, [1, 1])  # z = 0, λ ≠ 0: scale gradients zero, z gets one
    said().backward()
    assert torch.equal(said.scales.grad, torch.zeros(2, dtype=F64))
    assert said.z.grad.abs().sum() > 0
    blocked = _said([0] * 4, [0, 0])  # z = 0 and λ = 0: both paths blocked
    blocked().backward()
    assert torch.equal(blocked.z.grad, torch.zeros(4, dtype=F64))
    assert torch.equal(blocked.scales.grad, torch.zeros(2, dtype=F64))
