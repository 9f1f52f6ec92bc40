"""Compressed Deep LoRA initialization: the seed 003 §0x0AU pipeline on the seed's ledger and
compression fixtures, its identities, its errors, and a small matrix-sensing regression."""

from __future__ import annotations

import math
from fractions import Fraction as F

import pytest
import torch

from gaugelab.errors import NonFiniteError
from gaugelab.lowrank.expressivity import compression_error_bound, initialize_compressed_deep_lora

pytestmark = pytest.mark.usefixtures("strict_dtypes")  # float tests fail on silent promotion

EXACT, LOOSE = 1e-11, 1e-9
f64 = torch.float64


def _target(d_out: int, d_in: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(d_out, d_in, generator=g, dtype=f64)


def _recovery(Phi: torch.Tensor):
    """``½‖ΔW − Φ‖_F²``: §0x0AP's squared matrix-recovery loss; its gradient is ``ΔW − Φ``."""
    return lambda W: 0.5 * torch.sum((W - Phi) ** 2)


def _init(d_out=8, d_in=8, rank=2, depth=3, *, epsilon=1e-3, seed=0, loss=None, **kw):
    loss = _recovery(_target(d_out, d_in)) if loss is None else loss
    kw = {"lr": 1e-2, "outer_lr_scale": 0.1} | kw
    gen = torch.Generator().manual_seed(seed)
    return initialize_compressed_deep_lora(
        loss, d_out, d_in, rank, depth, epsilon=epsilon, generator=gen, **kw
    )


def _close(a: torch.Tensor, b: torch.Tensor, tol: float, scale: float = 1.0) -> None:
    torch.testing.assert_close(a, b, rtol=0, atol=tol * scale)


def _orthonormal(Q: torch.Tensor, tol: float = EXACT) -> None:
    _close(Q.T @ Q, torch.eye(Q.shape[1], dtype=Q.dtype), tol)


def test_seed_0x0AU_on_the_0x0AT_ledger_instance():
    # d_in = d_out = 8, r = 2, L = 3, the source's init scale ε = 10⁻³ (§0x0AV)
    c = _init(8, 8, 2, 3, epsilon=1e-3)
    p = c.parameters
    assert (p.vanilla, p.outer, p.inner, p.total) == (32, 32, 12, 44)  # 2(8)(2), 3(4), 32 + 12
    assert c.outer_left.shape == (8, 2) and c.outer_right.shape == (8, 2)
    assert [tuple(C.shape) for C in c.inner] == [(2, 2)] * 3
    assert sum(x.numel() for g in c.param_groups() for x in g["params"]) == 44
    # the transient wide state: L d² = 3·64 entries of factors, as many of gradients
    assert c.width == 8 and c.wide_parameters == 192 == p.dense_deep
    for C in c.inner:  # ε I_r exactly
        assert torch.equal(C.detach(), 1e-3 * torch.eye(2, dtype=f64))
    # dropped at initialization: m Π ε_ℓ² = (8 − 2)·10⁻¹⁸ (§0x0AR's bound, attained at t = 0)
    assert c.residual_bound == pytest.approx(6e-18, rel=EXACT)
    assert c.residual == pytest.approx(6e-18, rel=LOOSE)


def test_seed_0x0AU_dropped_complement_is_the_0x0AR_one_eighteenth():
    # d = 4, r = 1 (outer width 2r = 2), L = 2, ε₁ = 1/2, ε₂ = 1/3: m ε₁² ε₂² = 2 (1/6)² = 1/18
    c = _init(4, 4, 2, 2, epsilon=(0.5, 1 / 3))
    assert compression_error_bound(2, [F(1, 2), F(1, 3)]) == F(1, 18)
    assert c.residual_bound == pytest.approx(1 / 18, rel=EXACT)
    assert c.residual == pytest.approx(1 / 18, rel=LOOSE)
    assert c.parameters.inner == 8 and c.parameters.dense_deep == 32  # 4 L r² vs L d², r = 1
    assert [float(C.detach()[0, 0]) for C in c.inner] == [0.5, 1 / 3]


@pytest.mark.parametrize(("d_out", "d_in"), [(8, 8), (10, 6), (6, 10)])
def test_initial_product_is_the_wide_update_on_the_active_bases(d_out, d_in):
    c = _init(d_out, d_in, 4, 3, epsilon=0.3)
    L, R, scale = c.outer_left.detach(), c.outer_right.detach(), 0.3**3
    _orthonormal(R)
    _orthonormal(L)
    # L_out (ε³ I) R_inᵀ = ΔW_wide R_in R_inᵀ = L_out L_outᵀ ΔW_wide
    _close(c.update().detach(), scale * L @ R.T, EXACT, scale)
    _close(c.update().detach(), c.wide_update @ R @ R.T, EXACT, scale)
    _close(c.update().detach(), L @ L.T @ c.wide_update, EXACT, scale)
    # what is dropped has squared norm (min(d_out, d_in) − r) ε⁶, the §0x0AR bound
    dropped = float(torch.sum((c.wide_update - c.update().detach()) ** 2))
    assert dropped == pytest.approx(c.residual, rel=LOOSE)
    assert c.residual == pytest.approx((min(d_out, d_in) - 4) * scale**2, rel=LOOSE)


def test_wide_factors_are_scaled_orthogonal_and_the_gradient_is_the_recovery_residual():
    Phi = _target(8, 8)
    c = _init(8, 8, 4, 3, epsilon=0.5, loss=_recovery(Phi))
    P = c.wide_update / 0.5**3  # the normalized initial product is orthogonal (§0x0AP)
    _orthonormal(P)
    _close(c.gradient, c.wide_update - Phi, EXACT)  # ∇ ½‖ΔW − Φ‖² = ΔW − Φ
    assert c.loss == pytest.approx(0.5 * float(torch.sum((c.wide_update - Phi) ** 2)), rel=EXACT)


def test_active_bases_hold_the_gradient_directions_and_their_images():
    # §0x0AQ: the top r/2 singular directions of the first gradient and their images through
    # the initial product span the outer bases (the active block is 2r wide, not r)
    c = _init(9, 9, 4, 3, epsilon=0.2)
    L, R = c.outer_left.detach(), c.outer_right.detach()
    U, _, Vh = torch.linalg.svd(c.gradient)
    P = c.wide_update / 0.2**3
    eye = torch.eye(9, dtype=f64)
    for basis, vectors in ((R, Vh[:2].T), (R, P.T @ U[:, :2]), (L, U[:, :2]), (L, P @ Vh[:2].T)):
        _close((eye - basis @ basis.T) @ vectors, torch.zeros(9, 2, dtype=f64), LOOSE)


def test_the_two_groups_partition_the_parameters_at_their_learning_rates():
    c = _init(8, 8, 2, 3, lr=3e-3, outer_lr_scale=0.25)
    inner, outer = c.param_groups()
    assert (inner["name"], inner["lr"]) == ("inner", 3e-3)
    assert (outer["name"], outer["lr"]) == ("outer", 0.25 * 3e-3)
    ids = [id(x) for g in (inner, outer) for x in g["params"]]
    every = [c.outer_left, c.outer_right, *c.inner]
    assert len(ids) == len(set(ids)) == 5 and set(ids) == {id(x) for x in every}
    assert all(isinstance(x, torch.nn.Parameter) and x.requires_grad for x in every)
    opt = torch.optim.Adam(c.param_groups())
    assert [g["lr"] for g in opt.param_groups] == [3e-3, 0.75e-3]
    assert c.param_groups()[0] is not inner  # fresh dicts: an optimizer may edit its groups


def test_determinism_and_the_global_rng():
    state = torch.random.get_rng_state()
    a, b = _init(seed=3), _init(seed=3)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert torch.equal(a.outer_left, b.outer_left) and torch.equal(a.wide_update, b.wide_update)
    assert not torch.equal(a.wide_update, _init(seed=4).wide_update)


def test_first_batch_loss_is_called_once_in_the_requested_dtype():
    seen = []
    Phi = _target(6, 6).to(torch.float32)

    def loss(W):
        seen.append((tuple(W.shape), W.dtype, W.requires_grad))
        return 0.5 * torch.sum((W - Phi) ** 2)

    c = _init(6, 6, 2, 3, epsilon=0.5, loss=loss, dtype=torch.float32)
    assert seen == [((6, 6), torch.float32, True)]
    assert all(x.dtype == torch.float32 for x in (c.outer_left, c.outer_right, *c.inner))
    _orthonormal(c.outer_right.detach(), 1e-5)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"rank": 3}, "rank=3; allowed: an even integer 2 <= rank < min"),
        ({"rank": 0}, "rank=0"),
        ({"rank": 8}, "rank=8; .* = 8"),
        ({"rank": True}, "rank=True"),
        ({"depth": 1}, "depth=1; allowed: an integer >= 2"),
        ({"epsilon": 0.0}, "epsilon=0.0; allowed: a finite number > 0"),
        ({"epsilon": math.nan}, "epsilon=nan"),
        ({"epsilon": -1e-3}, "epsilon=-0.001"),
        ({"epsilon": (0.1, math.inf, 0.1)}, r"epsilon\[1\]=inf"),
        ({"epsilon": (0.1, 0.1)}, "sequence of depth=3"),
        ({"lr": math.nan}, "lr=nan"),
        ({"outer_lr_scale": 0}, "outer_lr_scale=0"),
        ({"d_out": 0}, "d_out=0; allowed: an integer >= 1"),
        ({"dtype": torch.int64}, "dtype=torch.int64"),
        ({"loss": 3.0}, "first_batch_loss=3.0; allowed: a callable"),
        ({"loss": lambda W: W.sum(0)}, "one-element tensor"),
        ({"loss": lambda W: torch.tensor(1.0, dtype=f64)}, "does not depend on its argument"),
        ({"loss": lambda W: 0 * W.sum()}, "numerical rank 0 .* rank/2 = 1"),
    ],
)
def test_bad_arguments_name_the_argument_and_what_is_allowed(kwargs, match):
    args = {"d_out": 8, "d_in": 8, "rank": 2, "depth": 3} | kwargs
    with pytest.raises(ValueError, match=f"initialize_compressed_deep_lora: .*{match}"):
        _init(**args)


def test_a_seed_is_not_a_generator():
    with pytest.raises(TypeError, match="initialize_compressed_deep_lora: generator must be"):
        initialize_compressed_deep_lora(
            _recovery(_target(8, 8)), 8, 8, 2, epsilon=0.1, lr=1.0, outer_lr_scale=1.0, generator=0
        )


def test_a_rank_one_gradient_cannot_fix_four_outer_directions():
    x, y = torch.ones(8, dtype=f64), torch.arange(8, dtype=f64)
    with pytest.raises(ValueError, match=r"numerical rank 1 .* rank/2 = 2"):
        _init(8, 8, 4, loss=lambda W: 0.5 * torch.sum((W @ x - y) ** 2))  # ∇ = (ΔW x − y) xᵀ


def test_a_non_finite_first_batch_loss_or_gradient_raises_non_finite_error():
    with pytest.raises(NonFiniteError, match="loss is nan"):
        _init(loss=lambda W: W.sum() * math.nan)
    with pytest.raises(NonFiniteError, match="gradient is not finite"):
        _init(loss=lambda W: torch.sqrt(W.sum() - W.sum()))  # d√u/du at u = 0 is infinite


# --- regression: a compressed deep start against a plain LoRA start --------------------------

D, R_STAR, N, RANK, DEPTH, STEPS = 12, 2, 96, 4, 3, 300


def _sensing(seed: int):
    """Rank-2 ``12 × 12`` target (singular values 1, 0.6), 96 Gaussian measurements: fewer than
    the 144 entries, more than the rank-2 manifold's 44 dimensions."""
    g = torch.Generator().manual_seed(1000 + seed)
    U = torch.linalg.qr(torch.randn(D, R_STAR, generator=g, dtype=f64))[0]
    V = torch.linalg.qr(torch.randn(D, R_STAR, generator=g, dtype=f64))[0]
    Phi = U @ torch.diag(torch.tensor([1.0, 0.6], dtype=f64)) @ V.T
    X = torch.randn(N, D, D, generator=g, dtype=f64)
    return Phi, X, torch.einsum("nij,ij->n", X, Phi)


def _mse(X, y):
    return lambda W: 0.5 * torch.mean((torch.einsum("nij,ij->n", X, W) - y) ** 2)


def _train(groups, update, loss, steps=STEPS):
    opt = torch.optim.Adam(groups)
    for _ in range(steps):
        opt.zero_grad()
        loss(update()).backward()
        opt.step()
    with torch.no_grad():
        return float(loss(update())), update()


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_compressed_deep_start_beats_a_plain_lora_start_at_equal_parameter_count(seed, margin):
    Phi, X, y = _sensing(seed)
    loss = _mse(X, y)
    # Deep LoRA, r = 4 = 2r*, L = 3: 4·24 + 3·16 = 144 parameters; first batch: half the data
    c = initialize_compressed_deep_lora(
        _mse(X[: N // 2], y[: N // 2]), D, D, RANK, DEPTH, epsilon=0.1, lr=1e-2,
        outer_lr_scale=1.0, generator=torch.Generator().manual_seed(seed),
    )  # fmt: skip
    assert c.parameters.total == 144
    deep, W_deep = _train(c.param_groups(), c.update, loss)
    # plain LoRA at rank 6: 6·24 = 144 parameters; PEFT's start (A uniform ±1/√d_in, B = 0, s = 1)
    g = torch.Generator().manual_seed(seed)
    A = ((2 * torch.rand(6, D, generator=g, dtype=f64) - 1) / math.sqrt(D)).requires_grad_()
    B = torch.zeros(D, 6, dtype=f64, requires_grad=True)
    assert A.numel() + B.numel() == 144
    plain, W_plain = _train([{"params": [A, B], "lr": 1e-2}], lambda: B @ A, loss)
    # Measured (Adam, lr 1e-2, 300 steps, seeds 0/1/2): training loss deep 9.4e-8 / 2.7e-8 /
    # 1.5e-6 vs plain 2.4e-5 / 3.1e-5 / 3.4e-5 (ratio ≤ 0.045, a 22× margin); relative recovery
    # error ‖ΔW − Φ‖/‖Φ‖ deep 5.8e-4 / 4.1e-4 / 2.5e-3 vs plain 0.11 / 0.11 / 0.11 (≥ 44×).
    # Plain LoRA at its best lr of {1e-3 … 1e-1} (3e-2) reaches 3.8e-6 / 4.5e-6 / 2.0e-6: seed
    # 2's margin shrinks to 1.3×. The ordering is a regime, not a law: with ε = 10⁻³ (the
    # source's scale) one seed in three sits on a plateau for 300 steps; at lr ≤ 3e-3, or with
    # the outer factors at a tenth of the rate (outer_lr_scale = 0.1), the deep start loses on
    # most or all seeds. Random orthonormal outer bases in place of the compressed ones reach
    # 7.3e-6 / 1.0e-6 / 1.3e-6, also below plain: depth does much of the work; the compressed
    # bases gain a further 40–80× on seeds 0 and 1, nothing on seed 2.
    margin.below(f"deep / plain training loss, seed {seed}", deep / plain, 1.0, log=True)
    rec = [float(torch.linalg.norm(W - Phi) / torch.linalg.norm(Phi)) for W in (W_deep, W_plain)]
    margin.below(f"deep / plain recovery error, seed {seed}", rec[0] / rec[1], 1.0, log=True)
